"""Another engine's watermark configuration as one object the tools score texts with.

``wmspec-detect --scheme_config=FILE`` reads the configuration an engine generated with — the file
holds that engine's key, so it is as secret as a ``--secret_file`` — and scores each text's token ids
with that engine's own pseudorandom function and an exact p-value:

* vLLM's ``--watermark-config`` JSON (``{"algorithm": "gumbel" | "dual_key_gumbel", "key": ...}``):
  :mod:`.engine_gumbel`, Aaronson's score with its Gamma(n, 1) tail (the dual-key mixture's exact tail);
* transformers' ``WatermarkingConfig(...).to_dict()`` (``greenlist_ratio``, ``hashing_key``,
  ``seeding_scheme``, ...): :mod:`.hf_kgw`, the green count with its exact binomial tail;
* transformers' ``SynthIDTextWatermarkingConfig(...).to_dict()`` (``ngram_len``, ``keys``, ...):
  :mod:`.hf_synthid`, the mean g-value with its exact null over the keys.

A file may also name its engine: ``{"engine": "vllm" | "transformers-kgw" | "transformers-synthid",
"config": {...}}``. Token ids must be the generated tokens (no prompt) in the generating model's
tokenizer, as the engines' own detectors take them.

``wmspec-generate --scheme_config=FILE`` generates with the engine's watermark through the generation
loop (every method, draft trees): :meth:`ForeignScheme.decoder` is the scheme whose pseudorandom function
keys the target stream, :meth:`ForeignScheme.stream_keys` the key words of the streams
(``docs/interop.md``).
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Mapping, NamedTuple, Sequence

import numpy as np

ENGINES = ("vllm", "transformers-kgw", "transformers-synthid")
"""The configurations :func:`load` reads."""


class ForeignScores(NamedTuple):
    """Per text (all [B]): ``score`` float64 (the engine's statistic), ``num_scored`` int64,
    ``log_pvalue`` float64 (exact; −inf where the p-value underflows float64)."""

    score: np.ndarray
    num_scored: np.ndarray
    log_pvalue: np.ndarray


@dataclasses.dataclass(frozen=True)
class ForeignScheme:
    """One engine's watermark configuration (:func:`load`); its repr shows the key's fingerprint only.

    Attributes:
      engine: one of :data:`ENGINES`.
      config: the engine module's configuration object (it holds the key).
    """

    engine: str
    config: Any

    @property
    def name(self) -> str:
        """What generated the texts, e.g. ``"vllm/gumbel"`` or ``"transformers/kgw-lefthash"``."""
        if self.engine == "vllm":
            return f"vllm/{self.config.algorithm}"
        if self.engine == "transformers-kgw":
            return f"transformers/kgw-{self.config.seeding_scheme}"
        return "transformers/synthid"

    @property
    def statistic(self) -> str:
        return {"vllm": "sum of -log(1 - u) over scored tokens", "transformers-kgw": "z-score of the green count",
                "transformers-synthid": "mean g-value"}[self.engine]

    @property
    def fingerprint(self) -> str:
        config = self.config
        return getattr(config, "fingerprint", None) or getattr(config, "keys_fingerprint")

    def record(self) -> dict:
        """The configuration without its key (JSON-able): what a results line names."""
        return {"engine": self.engine, "name": self.name, **self.config.record()}

    def __repr__(self) -> str:
        return f"ForeignScheme({self.name}, key {self.fingerprint})"

    def decoder(self):
        """The watermark decoder that generates with this engine's PRF through the generation loop
        (:class:`~wmspec_jax.interop.hf_synthid.HFSynthIDScheme`,
        :class:`~wmspec_jax.interop.engine_gumbel.VllmGumbelScheme`,
        :class:`~wmspec_jax.interop.hf_kgw.HFKGWScheme`); ValueError for a configuration the loop does not
        reproduce (KGW's selfhash, SynthID's ``skip_first_ngram_calls``, vLLM's deduplication scopes other
        than ``single_turn``)."""
        if self.engine == "transformers-synthid":
            from wmspec_jax.interop.hf_synthid._scheme import HFSynthIDScheme

            return HFSynthIDScheme(self.config)
        if self.engine == "vllm":
            from wmspec_jax.interop.engine_gumbel._scheme import VllmGumbelScheme

            return VllmGumbelScheme(self.config)
        from wmspec_jax.interop.hf_kgw._scheme import HFKGWScheme

        return HFKGWScheme(self.config)

    def stream_keys(self) -> np.ndarray:
        """uint32[NUM_STREAMS, 2] the key words of a generation's streams under this configuration: zero
        words for the target stream ζ^T (the engine's own PRF: :meth:`decoder`'s ``context_seeds``), and
        for the draft stream ζ^D and the acceptance stream ζ^R words derived from the engine's key by
        SHA-256 with the stream's name, so the configuration alone keys every stream. Under vLLM's
        ``dual_key_gumbel`` the draft stream's words are zero too: it is vLLM's key-A stream."""
        import hashlib

        from wmspec_jax import prf_keys

        secret = json.dumps(self.config.to_dict() if hasattr(self.config, "to_dict") else
                            dataclasses.asdict(self.config), sort_keys=True, default=str).encode()
        words = np.zeros((prf_keys.NUM_STREAMS, 2), np.uint32)
        dual = getattr(self.config, "algorithm", None) == "dual_key_gumbel"  # the draft stream is vLLM's key A
        for stream in (prf_keys.Stream.ACCEPT,) if dual else (prf_keys.Stream.DRAFT, prf_keys.Stream.ACCEPT):
            digest = hashlib.sha256(b"wmspec-foreign-stream:" + stream.name.encode() + b":" + secret).digest()
            words[stream] = np.frombuffer(digest[:8], "<u4")
        return words

    def score(self, texts: Sequence[Sequence[int]], vocab_size: int, eos_token_id=None) -> ForeignScores:
        """Scores each text's token ids (a list of int lists, any lengths) with the engine's statistic."""
        lengths = np.array([len(t) for t in texts], np.int64)
        ids = np.zeros((len(texts), max(int(lengths.max(initial=0)), 1)), np.int64)
        for row, t in enumerate(texts):
            ids[row, : len(t)] = t
        if self.engine == "vllm":
            from wmspec_jax.interop.engine_gumbel._detect import score_batch

            out = score_batch(self.config, ids, lengths)
            return ForeignScores(out.score, out.n, out.log_p_value)
        valid = np.arange(ids.shape[1])[None, :] < lengths[:, None]
        if self.engine == "transformers-kgw":
            from wmspec_jax.detect.kgw import binomial_log_sf
            from wmspec_jax.interop.hf_kgw._detect import score as kgw_score

            scores = np.full(len(texts), np.nan)
            n = np.zeros(len(texts), np.int64)
            log_p = np.zeros(len(texts))
            ok = lengths > self.config.context_width  # a text needs a token after its first context
            if ok.any():
                out = kgw_score(self.config, ids[ok], vocab_size, mask=valid[ok])
                k = self.config.greenlist_size(vocab_size)
                scores[ok], n[ok] = out.z, out.n
                log_p[ok] = binomial_log_sf(out.green, out.n, k / vocab_size)
            return ForeignScores(scores, n, log_p)
        from wmspec_jax.interop.hf_synthid._detect import score as synthid_score

        scores = np.full(len(texts), np.nan)
        n = np.zeros(len(texts), np.int64)
        log_p = np.zeros(len(texts))
        for length in np.unique(lengths):  # equal lengths together: the detector takes unpadded rows
            rows = np.flatnonzero(lengths == length)
            if length < self.config.ngram_len:
                continue
            out = synthid_score(self.config, ids[rows, :length], eos_token_id)
            scores[rows], n[rows] = out.mean_score, out.num_scored
            with np.errstate(divide="ignore"):
                log_p[rows] = np.log(out.p_value)
        return ForeignScores(scores, n, log_p)


def _engine_of(data: Mapping[str, Any]) -> str:
    if "engine" in data:
        return data["engine"]
    if "algorithm" in data:
        return "vllm"
    if "greenlist_ratio" in data or "seeding_scheme" in data or "hashing_key" in data:
        return "transformers-kgw"
    if "ngram_len" in data or "keys" in data:
        return "transformers-synthid"
    raise ValueError("the scheme configuration names no engine: expected vLLM's --watermark-config "
                     "(with 'algorithm'), transformers' WatermarkingConfig ('greenlist_ratio', 'hashing_key', ...) "
                     "or SynthIDTextWatermarkingConfig ('ngram_len', 'keys', ...), or {'engine': ..., 'config': ...}")


def from_dict(data: Mapping[str, Any]) -> ForeignScheme:
    """The :class:`ForeignScheme` of an engine's configuration mapping (module doc)."""
    if not isinstance(data, Mapping):
        raise ValueError(f"the scheme configuration must be a JSON object, got {type(data).__name__}")
    engine = _engine_of(data)
    if engine not in ENGINES:
        raise ValueError(f"unknown engine {engine!r}; known: {', '.join(ENGINES)}")
    config = data.get("config", data) if "engine" in data else data
    if not isinstance(config, Mapping):
        raise ValueError("'config' must be a JSON object")
    if engine == "vllm":
        from wmspec_jax.interop.engine_gumbel._config import config_from_dict

        return ForeignScheme(engine, config_from_dict(dict(config)))
    if engine == "transformers-kgw":
        from wmspec_jax.interop.hf_kgw._config import HFKGWConfig

        return ForeignScheme(engine, HFKGWConfig.from_dict(dict(config)))
    from wmspec_jax.interop.hf_synthid._config import HFSynthIDConfig

    return ForeignScheme(engine, HFSynthIDConfig.from_dict(dict(config)))


def load(path: str) -> ForeignScheme:
    """The :class:`ForeignScheme` of a JSON file (module doc). Errors name the file, never its contents."""
    if not os.path.isfile(path):
        raise ValueError(f"{path}: no such file")
    try:
        with open(path, encoding="utf-8-sig") as f:
            data = json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"{path}: not a readable JSON file ({type(err).__name__})") from None
    try:
        return from_dict(data)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{path}: {err}") from None


__all__ = ["ENGINES", "ForeignScheme", "ForeignScores", "from_dict", "load"]
