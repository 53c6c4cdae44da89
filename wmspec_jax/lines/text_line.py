"""What a text line says about how to score it: settings, keys and token ids, checked (Sec. 4.2).

A line is a JSON object — a generation record of ``wmspec-generate`` or of an
experiment (the text line of :mod:`wmspec_jax.text_record`; one of a newer
format than this package reads is an error naming the line), or any
``{"text": ...}`` — or a plain text (its record ``{}``). :func:`read_line` turns it into a :class:`TextLine`: the decoder
settings, the keys and the token ids the detectors score
(:func:`wmspec_jax.lines.scoring.score_lines`).

Where a value comes from: a value the user fixed for every text
(:class:`Overrides`, the tool's flags) must agree with the line's, else
:class:`LineError` naming the line — scoring anyway would answer for
another watermark — unless ``ignore_provenance`` (then the user's value
wins); without one, the line's value; without that, the defaults (a saved
detector's settings, else the tool's). Keys are never guessed: a generation
record without ``key_derivation`` is scored with the secret itself (the
deployment keys, ``wmspec-generate``'s default) and reported
(``assumed_direct``), per-text keys need the line's ``run`` and ``index``.
Imports nothing heavy (no JAX), so the tools' ``--help`` stays instant.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Optional, Sequence

import numpy as np

from wmspec_jax import keys, text_record
from wmspec_jax import prf_keys as prf
from wmspec_jax.textnorm import normalize_text

KEY_INDEX_LIMIT = 2 ** 64  # text indices stay below it: per-text keys hash the index as a uint64
KEY_CHOICES = ("recorded", "deployment", "per_text")
SETTINGS = ("decoder", "draft_decoder", "synthid_layers", "context_width", "siblings")
"""The settings :class:`Overrides` may fix and the defaults must give."""


class LineError(ValueError):
    """A line that cannot be scored as it stands (the message names the line and the field)."""


def multidraft_cap() -> int:
    """The most sibling streams a text can have: :data:`wmspec_jax.multidraft.MAX_PATHS`."""
    from wmspec_jax import multidraft

    return multidraft.MAX_PATHS


def max_key_length() -> int:
    """The longest key sequence: :data:`wmspec_jax.key_sequence.MAX_KEY_LENGTH`."""
    from wmspec_jax import key_sequence

    return key_sequence.MAX_KEY_LENGTH


@dataclasses.dataclass(frozen=True)
class Overrides:
    """What the user fixed for every text; None: not given (the line, then the defaults decide).

    ``keys``: which keys score a generation record — ``"recorded"`` (its
    ``key_derivation``), ``"deployment"`` (the secret itself) or
    ``"per_text"`` (its ``run`` and ``index``). ``run`` / ``index``: score
    every text with the per-text keys of ``run``, text k of the input with
    index ``index + k``.
    """

    decoder: Optional[str] = None
    draft_decoder: Optional[str] = None
    synthid_layers: Optional[int] = None
    context_width: Optional[int] = None
    siblings: Optional[int] = None
    draft_fraction: Optional[float] = None
    kgw_gamma: Optional[float] = None
    key_sequence: Optional[int] = None
    keys: str = "recorded"
    run: Optional[str] = None
    index: int = 0
    ignore_provenance: bool = False

    def __post_init__(self):
        from wmspec_jax import decoders

        for name in ("decoder", "draft_decoder"):
            value = getattr(self, name)
            if value is not None and value not in decoders.names():
                raise LineError(f"--{name}={value}: unknown decoder; known: {', '.join(decoders.names())}")
        if self.keys not in KEY_CHOICES:
            raise LineError(f"`keys`={self.keys}: one of {', '.join(KEY_CHOICES)}")
        if self.run is not None and not self.run:
            raise LineError("`run` must not be empty")
        if self.key_sequence is not None and not 0 <= self.key_sequence <= max_key_length():
            raise LineError(f"`key_sequence`={self.key_sequence}: 0 (streams keyed by context) or the generator's "
                            f"key length n in 1..{max_key_length()}")
        if self.siblings is not None and self.siblings > multidraft_cap():
            raise LineError(f"`siblings`={self.siblings} exceeds {multidraft_cap()}: a draft tree has at most "
                            f"{multidraft_cap()} paths, so no node has more children")

    def given(self, name: str) -> bool:
        return getattr(self, name) is not None


@dataclasses.dataclass
class TextLine:
    """One text with everything its score needs; ``result`` receives its result line."""

    number: int
    where: str
    record: dict
    ids: list
    offsets: Optional[list]
    decoder: str
    num_layers: int
    context_width: int
    run: Optional[str]
    index: Optional[int]
    draft_fraction: Optional[float] = None
    draft_decoder: Optional[str] = None
    kgw_gamma: Optional[float] = None
    siblings: int = 1
    candidate: Optional[list] = None
    sibling_weights: Optional[list] = None
    result: Optional[dict] = None
    prf_version: str = prf.PRF_VERSION
    key_sequence: int = 0
    method: Optional[str] = None

    @property
    def derivation(self) -> str:
        return keys.DIRECT if self.run is None else keys.KEY_DERIVATION

    @property
    def group(self) -> tuple:
        """Lines of one group are scored together (one statistics program, one set of detectors)."""
        return (self.decoder, self.num_layers, self.context_width, self.derivation, self.draft_fraction,
                self.draft_decoder, self.kgw_gamma, self.siblings, self.candidate is not None, self.prf_version,
                self.key_sequence, self.method if self.key_sequence else None)


def read_line(record: dict, where: str, number: int, ids: Sequence[int], *, secret, overrides: Overrides,
              defaults: dict, recorded_ids: Optional[list] = None, offsets: Optional[list] = None,
              assumed_direct: Optional[list] = None) -> TextLine:
    """The :class:`TextLine` of input text ``number`` (module doc for the order of authority).

    Args:
      record: the line's JSON object (``{}`` for plain text).
      where: how messages name the line (``"file.jsonl:3"``).
      ids: the token ids to score (the recorded ones, else the text's).
      secret: the :class:`wmspec_jax.keys.Secret` (its fingerprint is checked).
      defaults: a value for each of :data:`SETTINGS`.
      recorded_ids: the line's own ``tokens`` when ``ids`` are them (its
        ``candidate`` is only read then).
      assumed_direct: receives ``where`` when a generation record without a
        ``key_derivation`` is scored with the secret itself.
    Raises:
      LineError: a line of a newer text-record format, a field of the wrong
      type, or one that conflicts with the secret or an override.
    """
    try:
        text_record.check_format(record, where)
    except text_record.FormatError as e:
        raise LineError(str(e)) from None
    check_provenance(record, where, secret, overrides)
    decoder, m, h, draft = settings_of(record, where, overrides, defaults)
    run, index = key_of(record, where, number, overrides, assumed_direct)
    searched = overrides.given("siblings")  # a fixed sibling count searches the streams
    n = key_sequence_of(record, where, overrides)
    return TextLine(number, where, record, list(ids), offsets, decoder, m, h, run, index,
                    recorded_option(record, where, "draft_fraction", overrides, closed=True), draft,
                    recorded_option(record, where, "kgw_gamma", overrides, closed=False),
                    siblings_of(record, where, overrides, defaults["siblings"]),
                    None if searched else recorded_candidate(record, where, list(ids), recorded_ids),
                    prf_version=prf_version_of(record), key_sequence=n,
                    method=method_of(record, where) if n else None)


def key_sequence_of(record: dict, where: str, overrides: Overrides) -> int:
    """The key length n a line's streams were keyed by (0: by context): the line's ``key_sequence``, else
    ``overrides.key_sequence``, else 0; the two must agree."""
    recorded = record_int(record, "key_sequence", where, 0, max_key_length() + 1)
    if overrides.given("key_sequence"):
        if recorded is not None and recorded != overrides.key_sequence:
            conflict(overrides, where, f"key_sequence={recorded}", f"`key_sequence`={overrides.key_sequence} was given")
        return overrides.key_sequence
    return recorded or 0


def method_of(record: dict, where: str) -> Optional[str]:
    """The generation method a line names (None: not given); read for key-sequence lines, whose edit test
    reads the streams the method watermarks."""
    from wmspec_jax import methods

    method = record.get("method")
    if method is not None and method not in methods.METHODS:
        raise LineError(f"{where}: field 'method' must be one of {sorted(methods.METHODS)}, got {str(method)[:40]!r}")
    return method


def record_int(record: dict, name: str, where: str, low: int, high: int) -> Optional[int]:
    """The int field ``name`` of a line, in [low, high); None when absent."""
    if name not in record or record[name] is None:
        return None
    v = record[name]
    if isinstance(v, bool) or not isinstance(v, int) or not low <= v < high:
        raise LineError(f"{where}: field {name!r} must be an int in [{low}, {high}), got {str(v)[:40]}")
    return v


def conflict(overrides: Overrides, where: str, what: str, ours: str) -> None:
    """A line's ``what`` disagrees with ``ours``: an error unless ``ignore_provenance``."""
    if not overrides.ignore_provenance:
        raise LineError(f"{where}: the line was generated with {what}, but {ours}: scoring it anyway "
                        "would answer for another watermark (pass `ignore_provenance` to score it regardless)")


def _statistic(name: Optional[str]) -> Optional[str]:
    """What detection recomputes for a decoder name: synthid_limit scores as synthid, any α as dipmark."""
    from wmspec_jax import decoders

    return None if name is None else decoders.WatermarkDecoder.from_name(name).statistic


ENGINE_DECODERS = ("transformers-synthid", "transformers-kgw", "vllm-gumbel")
"""The ``decoder`` of a line generated with another engine's watermark (``wmspec-generate --scheme_config``):
:class:`wmspec_jax.interop.hf_synthid.HFSynthIDScheme`, :class:`wmspec_jax.interop.hf_kgw.HFKGWScheme`,
:class:`wmspec_jax.interop.engine_gumbel.VllmGumbelScheme`."""


def check_decoder_fields(record: dict, where: str) -> None:
    """A line's ``decoder`` / ``draft_decoder`` name a registered scheme; :class:`LineError` otherwise (a
    line of another engine's watermark is scored with its configuration, ``--scheme_config``)."""
    from wmspec_jax import decoders

    known = decoders.names()
    for field in ("decoder", "draft_decoder"):
        value = record.get(field)
        if value is not None and value in ENGINE_DECODERS:  # its key is in the engine's file, not the secret
            raise LineError(f"{where}: generated with another engine's watermark ({value}): score it with that "
                            "configuration, --scheme_config=FILE")
        if value is not None and value not in known:
            raise LineError(f"{where}: field {field!r} must be one of {known}, got {str(value)[:40]!r}")


def settings_of(record: dict, where: str, overrides: Overrides, defaults: dict) -> tuple:
    """(decoder, m, h, draft decoder or None) of a line, decoders named by their statistic
    (``WatermarkDecoder.statistic``)."""
    from wmspec_jax import decoders

    check_decoder_fields(record, where)
    recorded = {"decoder": _statistic(record.get("decoder")),
                "draft_decoder": _statistic(record.get("draft_decoder")),
                "synthid_layers": record_int(record, "synthid_layers", where, 1, decoders.MAX_SYNTHID_LAYERS + 1),
                "context_width": record_int(record, "context_width", where, 1, prf.MAX_CONTEXT_WIDTH + 1)}
    if recorded["decoder"] != "synthid":
        recorded["synthid_layers"] = None  # a Gumbel-max line has no m (null)
    named = ("decoder", "draft_decoder")
    chosen = {}
    for name, value in recorded.items():
        if overrides.given(name):
            given = getattr(overrides, name)
            given = _statistic(given) if name in named else given
            if value is not None and value != given:
                conflict(overrides, where, f"{name}={value}", f"--{name}={getattr(overrides, name)} was given")
            chosen[name] = given
        elif value is None:
            chosen[name] = _statistic(defaults[name]) if name in named else defaults[name]
        else:
            chosen[name] = value
    decoder, draft = chosen["decoder"], chosen["draft_decoder"]
    if draft == decoder:
        draft = None
    family = decoders.WatermarkDecoder.from_name
    if draft is not None and family(draft).family != family(decoder).family:
        raise LineError(f"{where}: a {draft} draft stream under a {decoder} target stream cannot be scored "
                        "together (both must be uniform-statistic decoders); pass `draft_decoder`="
                        f"{record.get('decoder') or decoder} `ignore_provenance` to score the target stream's "
                        "decoder on every token")
    return decoder, family(decoder, chosen["synthid_layers"]).num_layers, chosen["context_width"], draft


def siblings_of(record: dict, where: str, overrides: Overrides, default: int) -> int:
    """The sibling streams of a line's draft statistic: the most children of a node of its
    ``draft_tree`` > ``overrides.siblings`` > ``default``."""
    tree = record.get("draft_tree")
    recorded = None
    cap = multidraft_cap()
    if tree is not None:
        if not isinstance(tree, list) or not tree or not all(
                isinstance(b, int) and not isinstance(b, bool) and 1 <= b <= cap for b in tree) \
                or math.prod(tree) > cap:
            raise LineError(f"{where}: field 'draft_tree' must be a list of children per depth (ints >= 1, at most "
                            f"{cap} paths in all), got {str(tree)[:40]}")
        recorded = max(tree)
    if overrides.given("siblings"):
        if recorded is not None and recorded != overrides.siblings:
            conflict(overrides, where, f"draft_tree={tree} (siblings={recorded})",
                     f"`siblings`={overrides.siblings} was given")
        return overrides.siblings
    return default if recorded is None else recorded


def recorded_candidate(record: dict, where: str, ids: list, recorded_ids: Optional[list]) -> Optional[list]:
    """A multi-draft line's sibling of each token (``candidate``), when the line also records the token
    ids scored; None otherwise (the sibling streams are then searched)."""
    cand = record.get("candidate")
    if cand is None or recorded_ids is None:
        return None
    tree = record.get("draft_tree")
    high = max(tree) if isinstance(tree, list) and tree else multidraft_cap()
    if not isinstance(cand, list) or len(cand) != len(ids) or not all(
            isinstance(c, int) and not isinstance(c, bool) and 0 <= c < high for c in cand):
        raise LineError(f"{where}: field 'candidate' must list one sibling index in [0, {high}) per token of "
                        "'tokens'")
    return cand


def check_provenance(record: dict, where: str, secret, overrides: Overrides) -> None:
    """A line's key fingerprint and PRF version against the secret and this package."""
    fp = record.get("key_fingerprint")
    if fp is not None and not secret.matches_fingerprint(fp):
        conflict(overrides, where, f"key fingerprint {fp}", f"the given secret's is {secret.fingerprint}")
    version = record.get("prf_version")
    if version is not None and version not in prf.PRF_VERSIONS:
        conflict(overrides, where, f"PRF version {version}", f"this package implements {', '.join(prf.PRF_VERSIONS)}")


def prf_version_of(record: dict) -> str:
    """The PRF version a line names (texts of every version this package implements are scored with
    theirs), else the current one."""
    version = record.get("prf_version")
    return version if version in prf.PRF_VERSIONS else prf.PRF_VERSION


def key_of(record: dict, where: str, number: int, overrides: Overrides,
           assumed_direct: Optional[list] = None) -> tuple:
    """(run, index) of the text's per-text keys, or (None, None): the secret itself (module doc)."""
    if overrides.run is not None:
        index = overrides.index + number
        if index >= KEY_INDEX_LIMIT:
            raise LineError(f"`index`={overrides.index}: text indices must stay below 2^64")
        return overrides.run, index
    derivation = record.get("key_derivation")
    if derivation is not None and derivation not in (keys.DIRECT, keys.KEY_DERIVATION):
        raise LineError(f"{where}: unknown key_derivation {str(derivation)[:40]!r} (this package knows "
                        f"{keys.DIRECT!r} and {keys.KEY_DERIVATION!r})")
    wanted = {"deployment": keys.DIRECT, "per_text": keys.KEY_DERIVATION}.get(overrides.keys)
    if wanted is not None and derivation is not None and derivation != wanted:
        conflict(overrides, where, f"key_derivation {derivation}", f"`keys`={overrides.keys} was given")
    if wanted is None:
        wanted = derivation
    if wanted == keys.KEY_DERIVATION:
        run, index = record.get("run"), record_int(record, "index", where, 0, KEY_INDEX_LIMIT)
        if not isinstance(run, str) or index is None:
            raise LineError(f"{where}: per-text keys need both 'run' (a string) and 'index' (an int >= 0)")
        return run, index
    if wanted is None and assumed_direct is not None and any(f in record for f in text_record.GENERATION_MARKERS):
        assumed_direct.append(where)
    return None, None


def recorded_ids(record: dict, where: str, vocab: int, flag: str = "`tokenizer`") -> Optional[list]:
    """The line's generated token ids (``tokens``), checked against the vocabulary; None when it has none.
    ``flag``: the option that chose the tokenizer (named in the error)."""
    ids = record.get("tokens")
    if ids is None:
        return None
    if not isinstance(ids, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in ids):
        raise LineError(f"{where}: field 'tokens' must be a list of token ids (ints)")
    bad = [t for t in ids if not 0 <= t < vocab]
    if bad:
        raise LineError(f"{where}: token id {bad[0]} is outside the tokenizer's vocabulary [0, {vocab}): "
                        f"the line was generated with another tokenizer ({flag})")
    return ids


def recorded_option(record: dict, where: str, name: str, overrides: Overrides, closed: bool) -> Optional[float]:
    """A detector option of this text (``draft_fraction``: Ars-Prior's p; ``kgw_gamma``: KGW's γ): None
    when the override is given (one value for every text, through the detector options) or the line has
    no field ``name``; else the line's value, which must lie in [0, 1] (``closed``) or (0, 1)."""
    if overrides.given(name):
        return None
    value = record.get(name)
    if value is None:
        return None
    inside = (0.0 <= float(value) <= 1.0 if closed else 0.0 < float(value) < 1.0) \
        if isinstance(value, (int, float)) and not isinstance(value, bool) else False
    if not inside:
        interval = "[0, 1]" if closed else "(0, 1)"
        raise LineError(f"{where}: field {name!r} must be a number in {interval}, got {str(value)[:40]}")
    return float(value)


def stream_keys(secret: keys.Secret, lines: Sequence[TextLine]) -> keys.StreamKeys:
    """The stream keys of one group's lines: the secret's, or each line's per-text keys."""
    if lines[0].run is None:
        return secret.stream_keys()
    words = np.zeros((len(lines), prf.NUM_STREAMS, 2), np.uint32)
    by_run: dict = {}
    for row, line in enumerate(lines):
        by_run.setdefault(line.run, []).append(row)
    for run, rows in by_run.items():
        words[rows] = np.asarray(keys.text_keys(secret, [lines[r].index for r in rows], run=run))
    return keys.StreamKeys(words, secret.fingerprint, keys.KEY_DERIVATION)


def check_text_matches_tokens(tokenizer, wheres: Sequence[str], texts: Sequence[str],
                              recorded: Sequence[Optional[list]]) -> None:
    """A line that carries both ``text`` (normalised) and ``tokens`` must say the same thing twice: the
    tokens decode (special tokens dropped, :func:`wmspec_jax.textnorm.normalize_text`) to the text."""
    rows = [i for i, r in enumerate(recorded) if r is not None]
    if not rows:
        return
    decoded = [normalize_text(t) for t in
               tokenizer.batch_decode([recorded[i] for i in rows], skip_special_tokens=True)]
    for i, text in zip(rows, decoded):
        if text != texts[i]:
            raise LineError(
                f"{wheres[i]}: the line's text is not what its {len(recorded[i])} recorded token ids decode "
                f"to (after normalisation: {_first_difference(text, texts[i])}); the tokens would be scored "
                "for a text the line does not hold. Pass `score_text` to score the line's text (re-tokenised) "
                "instead of its tokens, or remove the 'tokens' field")


def _first_difference(decoded: str, text: str) -> str:
    at = next((i for i, (a, b) in enumerate(zip(decoded, text)) if a != b), min(len(decoded), len(text)))
    if not decoded:
        return "the tokens decode to nothing"
    return f"they differ from character {at} on; the tokens decode to {len(decoded)} characters, the text has {len(text)}"


__all__ = ["KEY_CHOICES", "LineError", "KEY_INDEX_LIMIT", "Overrides", "SETTINGS", "TextLine",
           "check_decoder_fields", "check_provenance", "check_text_matches_tokens", "conflict", "key_of",
           "multidraft_cap", "prf_version_of", "read_line", "record_int", "recorded_candidate", "recorded_ids",
           "recorded_option", "settings_of", "siblings_of", "stream_keys"]
