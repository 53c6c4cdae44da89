"""Paraphrasers and what a rewrite keeps of a watermarked text (the robustness experiment's ``--paraphrase``).

A *paraphraser* is any function ``texts -> texts`` (a list of strings in, one rewrite per string out),
so a caller can plug in anything that rewrites text: a model of their own, a service, a rule. The
default, :func:`model_paraphraser`, asks a language model of a :class:`wmspec_jax.models.pairs.ModelPair`
to rewrite each text: the text inside :data:`PROMPT`, through the pair's chat template, answered by
plain sampling from its target (no watermark, no draft) at a stated temperature (0: greedy), up to an
end-of-turn token or ``max_new_tokens``. Its randomness is keyed by the text itself (a CRC-32 of its
UTF-8 bytes), so the same text gets the same rewrite on a rerun. :func:`load_paraphraser_pair` loads a
local Hugging Face checkpoint as such a model.

:func:`rewrite_texts` puts the rewrites, tokenised with the detector's tokenizer, in place of the
generated tokens of detection rows (prompt kept: the paraphrase is scored as an answer to the original
prompt), and :func:`rewrite_measures` says what the rewrite kept of each original answer: the
token-level Levenshtein distance, normalised by the longer of the two, and the share of the rewrite's
tokens whose keyed context (the token and its h predecessors) occurs in the original answer — the
tokens whose watermark statistic is the original's and so still carries evidence.
"""

from __future__ import annotations

import dataclasses
import os
import zlib
from typing import Callable, Optional, Sequence

import numpy as np

from wmspec_jax import batching, keys, prf, sampling, speculative
from wmspec_jax.lab import edits
from wmspec_jax.lab.detection_rows import TextRows
from wmspec_jax.models import pairs

Paraphraser = Callable[[Sequence[str]], list]

PROMPT = ("Paraphrase the following text. Keep its meaning but use your own words. Reply with the paraphrase "
          "only.\n\n{text}")
# plain sampling reads no key; the loop's signature still takes one per row
_UNUSED_KEY = "paraphrase-without-watermark"


@dataclasses.dataclass(frozen=True)
class ParaphraseSettings:
    """How the model paraphraser rewrites (validated when built).

    Attributes:
      temperature: sampling temperature of the rewrite (0: greedy).
      max_new_tokens: longest rewrite in tokens.
      max_prompt_tokens: longest paraphrase prompt (a longer text loses its start, the template kept).
      batch_size: rewrites per generation call.
      template: the request; ``{text}`` marks where the text goes.
      min_window: the shortest window of the windowed score.
    """

    temperature: float = 0.7
    max_new_tokens: int = 128
    max_prompt_tokens: int = 384
    batch_size: int = 16
    template: str = PROMPT
    min_window: int = 16

    def __post_init__(self):
        t = self.temperature
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not (np.isfinite(t) and t >= 0):
            raise ValueError(f"--paraphrase_temperature must be a finite number >= 0, got {t!r}")
        for name in ("max_new_tokens", "max_prompt_tokens", "batch_size", "min_window"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < (2 if name == "min_window" else 1):
                raise ValueError(f"--paraphrase_{name} must be an int >= 1 (min_window >= 2), got {v!r}")
        if "{text}" not in self.template:
            raise ValueError("the paraphrase template must contain '{text}'")


def model_paraphraser(pair: pairs.ModelPair, ps: ParaphraseSettings = ParaphraseSettings()) -> Paraphraser:
    """texts -> rewrites by ``pair``'s target, asked through its chat template (module doc)."""
    config = speculative.SpeculativeConfig(method="plain", lookahead=0, max_new_tokens=ps.max_new_tokens,
                                           temperature=float(ps.temperature), eos_id=pair.eos_id,
                                           pad_id=pair.pad_id)

    def paraphrase(texts: Sequence[str]) -> list:
        texts = [str(t) for t in texts]
        if not texts:
            return []
        requests = [ps.template.format(text=t.strip()) for t in texts]
        ids, lengths = pairs.encode_prompts(pair, requests, "question", ps.max_prompt_tokens, too_long="truncate")
        text_ids = [zlib.crc32(t.encode("utf-8")) for t in texts]
        out = [""] * len(texts)
        for batch in batching.generate_in_batches(
                pair.target, pair.target_params, ids, lengths, list(range(len(texts))), config,
                stream_keys=lambda rows: keys.text_keys(_UNUSED_KEY, rows, run="paraphrase"),
                rngs=lambda rows: sampling.text_rngs(0, [text_ids[r] for r in rows], run="paraphrase"),
                batch_size=ps.batch_size, mesh=pair.mesh):
            for text in batch.texts:
                out[text.index] = pair.decode(text.tokens)
        return out

    paraphrase.description = (f"{pair.name}, plain sampling at T = {ps.temperature:g} "
                               f"(max {ps.max_new_tokens} new tokens)"
                               + ("" if ps.template == PROMPT else f", prompt {zlib.crc32(ps.template.encode()):08x}"))
    return paraphrase


def identity_paraphraser(texts: Sequence[str]) -> list:
    """Every text unchanged: the control that measures the decode → re-encode round trip alone."""
    return [str(t) for t in texts]


identity_paraphraser.description = "identity (decode and re-encode only)"


def load_paraphraser_pair(path: str, dtype: str = "float32") -> pairs.ModelPair:
    """A local Hugging Face checkpoint as a one-model pair (its draft is itself) for :func:`model_paraphraser`."""
    from wmspec_jax.models import hf

    if not os.path.isdir(path):
        raise FileNotFoundError(f"--paraphraser={path}: checkpoint directory not found")
    import jax.numpy as jnp

    ckpt = hf.load_checkpoint(path, jnp.dtype(dtype))
    return pairs.single_model_pair(ckpt, name=ckpt.name)


def rewrite_texts(texts: TextRows, rewrites: Sequence[Sequence[int]]) -> TextRows:
    """:class:`~wmspec_jax.lab.detection_rows.TextRows` with each row's generated
    tokens replaced by ``rewrites[row]`` (token ids); the prompt stays, sources become −1 (unknown)."""
    n = len(texts)
    if len(rewrites) != n:
        raise ValueError(f"{len(rewrites)} rewrites for {n} texts")
    starts = np.asarray(texts.starts)
    width = int(max(int(starts[r]) + max(len(rewrites[r]), 1) for r in range(n)))
    tokens = np.zeros((n, width), np.int32)
    source = np.full((n, width), -1, np.int8)
    lengths = np.zeros(n, np.int32)
    for row in range(n):
        start = int(starts[row])
        new = np.asarray(rewrites[row], np.int32)
        tokens[row, :start] = texts.tokens[row, :start]
        tokens[row, start:start + new.size] = new
        lengths[row] = max(start + new.size, 1)
    return texts.replace(tokens=tokens, source=source, lengths=lengths, candidate=np.zeros((n, width), np.int8))


def generated(texts: TextRows, row: int) -> np.ndarray:
    """The generated token ids of one detection row."""
    return np.asarray(texts.tokens[row, int(texts.starts[row]):int(texts.lengths[row])])


def context_kept(original: TextRows, rewritten: TextRows, row: int, context_width: int = prf.DEFAULT_CONTEXT_WIDTH) -> float:
    """Share of the rewrite's generated tokens whose (h predecessors, token) also occurs at a generated
    position of the original: their watermark statistic is the original token's."""
    def grams(texts):
        start, end = int(texts.starts[row]), int(texts.lengths[row])
        toks = texts.tokens[row]
        return [tuple(int(x) for x in toks[max(t - context_width, 0):t + 1]) for t in range(start, end)]

    have = set(grams(original))
    mine = grams(rewritten)
    return float(np.mean([g in have for g in mine])) if mine else 0.0


def rewrite_measures(original: TextRows, rewritten: TextRows) -> dict:
    """Per text, what the rewrite kept (module doc): lists ``distance`` (Levenshtein), ``normalised``
    (÷ the longer length), ``context_kept``, ``length_ratio`` (rewrite ÷ original) and ``identical``."""
    out = {"distance": [], "normalised": [], "context_kept": [], "length_ratio": [], "identical": []}
    for row in range(len(original)):
        a, b = generated(original, row), generated(rewritten, row)
        d = edits.levenshtein(a, b)
        out["distance"].append(d)
        out["normalised"].append(d / max(a.size, b.size, 1))
        out["context_kept"].append(context_kept(original, rewritten, row))
        out["length_ratio"].append(b.size / max(a.size, 1))
        out["identical"].append(bool(a.size == b.size and np.array_equal(a, b)))
    return out


def substitute_matched(original: TextRows, normalised: Sequence[float], *, seed: Sequence[int], vocab_size: int) -> TextRows:
    """Each original answer with round(d · n) of its n generated tokens substituted (distinct positions,
    other tokens), d its rewrite's normalised distance: token edits at the paraphrase's edit distance."""
    rewrites = []
    for row in range(len(original)):
        a = generated(original, row)
        count = min(int(round(float(normalised[row]) * a.size)), a.size)
        rng = np.random.default_rng(list(seed) + [int(original.indices[row])])
        rewrites.append(edits.substitute_exactly(a, count, rng, vocab_size).tokens)
    return rewrite_texts(original, rewrites)


def describe(paraphraser: Paraphraser, default: Optional[str] = None) -> str:
    """A paraphraser's one-line description (its ``description`` attribute, else its name)."""
    return getattr(paraphraser, "description", None) or default or getattr(paraphraser, "__name__", "paraphraser")


__all__ = ["PROMPT", "ParaphraseSettings", "Paraphraser", "context_kept", "describe", "generated",
           "identity_paraphraser", "load_paraphraser_pair", "model_paraphraser", "rewrite_measures", "rewrite_texts",
           "substitute_matched"]
