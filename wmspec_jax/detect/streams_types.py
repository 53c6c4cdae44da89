"""The types of per-token detection statistics (:class:`GumbelStats`, :class:`SynthIDStats`) and of
generation records (:class:`GenerationRecords`), with the checks of texts, keys, sources and statistics.
Public face: :mod:`wmspec_jax.detect.streams`."""

from __future__ import annotations

from typing import Any, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from wmspec_jax import context, keys as keys_lib, prf, validation
from wmspec_jax.detect.provenance import Provenance


class GumbelStats(NamedTuple):
    """Gumbel-max per-token statistics of a batch of texts.

    Attributes:
      y_draft: float32[B, L] y^D_t = U^D_{w_t} of the DRAFT stream.
      y_target: float32[B, L] y^T_t = U^T_{w_t} of the TARGET stream.
      u: float32[B, L] acceptance uniform u_t of the ACCEPT stream.
      mask: bool[B, L] scored positions (repeated-context rule).
      starts: int32[B] first position of the watermarked text.
      lengths: int32[B] valid length of each row.
      provenance: :class:`.provenance.Provenance` of the call that computed
        them (None when built by hand: unknown, not checked).
    """

    y_draft: jax.Array
    y_target: jax.Array
    u: jax.Array
    mask: jax.Array
    starts: jax.Array
    lengths: jax.Array
    provenance: Optional[Provenance] = None

    def excess(self) -> tuple:
        """(draft, target) float64[B, L]: each stream's per-token evidence over its null mean,
        −log(1 − y) − 1 (Exp(1) under the null)."""
        return tuple(-np.log1p(-np.asarray(y, np.float64)) - 1.0 for y in (self.y_draft, self.y_target))


class SynthIDStats(NamedTuple):
    """SynthID per-token statistics of a batch of texts.

    Attributes:
      g_draft: uint8[B, L, m] g-values of the emitted token, DRAFT stream.
      g_target: uint8[B, L, m] g-values of the emitted token, TARGET stream.
      u: float32[B, L] acceptance uniform u_t.
      mask, starts, lengths, provenance: as in :class:`GumbelStats`.
    """

    g_draft: jax.Array
    g_target: jax.Array
    u: jax.Array
    mask: jax.Array
    starts: jax.Array
    lengths: jax.Array
    provenance: Optional[Provenance] = None

    def excess(self) -> tuple:
        """(draft, target) float64[B, L]: each stream's mean g-value over its null mean 1/2."""
        return tuple(np.asarray(g, np.float64).mean(-1) - 0.5 for g in (self.g_draft, self.g_target))


class GenerationRecords(NamedTuple):
    """A generation's texts with their per-position records, as host arrays: what detection uses from a
    ``speculative.GenerationResult`` (:func:`records_from_generation`).

    Attributes:
      tokens: int32[B, L] prompt + generated tokens, right-padded.
      lengths: int32[B].
      starts: int32[B] the prompt lengths.
      source: int8[B, L] SOURCE_* per position (−1 prompt/padding).
      watermarked: bool[B, L].
      accept_u: float32[B, L] (NaN where no acceptance test ran).
      candidate: int8[B, L] sibling index of each accepted draft token under multi-draft sampling
        (``docs/multidraft.md``; pass it to :func:`gumbel_statistics` for the Oracle), or None when
        the generation had none.
    """

    tokens: np.ndarray
    lengths: np.ndarray
    starts: np.ndarray
    source: np.ndarray
    watermarked: np.ndarray
    accept_u: np.ndarray
    candidate: Optional[np.ndarray] = None


# ---------------------------------------------------------------------------
# Input validation (host side, once, before entering jitted code)
# ---------------------------------------------------------------------------


def _per_row_ints(values, bsz: int, default: int, name: str, expected: str) -> np.ndarray:
    """int[bsz] from None (``default`` in every row), a scalar or an int[bsz] array (``name``'s check)."""
    if values is None:
        return np.full((bsz,), default, np.int64)
    arr = np.asarray(values)
    if arr.ndim == 0:
        arr = np.full((bsz,), int(arr))
    if arr.shape != (bsz,) or not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"{name} must be {expected}, got {arr.dtype}{list(arr.shape)}")
    return arr


def check_texts(tokens, lengths=None, starts=None, *, vocab_size: int,
                context_width: int = prf.DEFAULT_CONTEXT_WIDTH):
    """Validates a batch of texts; returns host arrays (tokens, lengths, starts).

    Args:
      tokens: int[B, L] (or int[L] for one text) token ids.
      lengths: int[B] valid lengths (default: L for every row).
      starts: int or int[B] first watermarked position (default
        ``context.detection_start(h)`` = h: text without its prompt).
      vocab_size: V of the generator's tokenizer (required): every valid
        token must lie in [0, V). (The hash accepts any id, so an id from
        another vocabulary would be scored silently.)
      context_width: h.

    Raises:
      TypeError: non-integer token ids or vocabulary size.
      ValueError: empty batch or text, lengths/starts out of range, tokens
        outside the vocabulary (with the offending rows).
    """
    h = prf.check_context_width(context_width)
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, (int, np.integer)) or vocab_size < 1:
        raise TypeError(f"vocab_size must be the tokenizer's vocabulary size (an int >= 1), got {vocab_size!r}")
    tok = validation.concrete(tokens)
    if tok is None:
        raise TypeError("detection inputs must be concrete arrays (validate before jax.jit)")
    if tok.ndim == 1:
        tok = tok[None]
    if tok.ndim != 2:
        raise ValueError(f"tokens must be [B, L] (or [L] for one text), got shape {tok.shape}")
    if tok.shape[0] == 0 or tok.shape[1] == 0:
        raise ValueError(f"empty batch of texts: tokens has shape {tok.shape}")
    if not np.issubdtype(tok.dtype, np.integer):
        raise TypeError(f"tokens must hold integer token ids, got dtype {tok.dtype}")
    bsz, length = tok.shape
    lens = _per_row_ints(lengths, bsz, length, "lengths", f"int[{bsz}]")
    bad = np.flatnonzero((lens < 1) | (lens > length))
    if bad.size:
        raise ValueError(
            f"text lengths must lie in [1, {length}] (an empty text cannot be scored); "
            f"rows {bad[:10].tolist()} have lengths {lens[bad[:10]].tolist()}"
        )
    st = _per_row_ints(starts, bsz, context.detection_start(h), "starts", f"an int or int[{bsz}]")
    if starts is not None:
        bad = np.flatnonzero((st < 0) | (st > lens))
        if bad.size:
            raise ValueError(
                f"starts (prompt lengths) must lie in [0, length]; rows {bad[:10].tolist()} have "
                f"starts {st[bad[:10]].tolist()} and lengths {lens[bad[:10]].tolist()}"
            )
    valid = np.arange(length)[None] < lens[:, None]
    outside = ((tok < 0) | (tok >= int(vocab_size))) & valid
    if outside.any():
        rows = np.flatnonzero(outside.any(axis=1))
        raise ValueError(f"token ids outside the vocabulary [0, {vocab_size}) in rows {rows[:10].tolist()} "
                         f"(e.g. {tok[outside][:5].tolist()})")
    return tok.astype(np.int32), lens.astype(np.int32), st.astype(np.int32)


def _check_keys(key, bsz: int) -> jax.Array:
    if isinstance(key, keys_lib.Secret):
        key = key.stream_keys()
    keys = prf.check_stream_keys(key)
    if keys.ndim == 2:
        keys = jnp.broadcast_to(keys, (bsz,) + keys.shape)
    if keys.ndim != 3 or keys.shape[0] != bsz:
        raise ValueError(f"per-text stream keys must be uint32[{bsz}, 3, 2], got shape {keys.shape}")
    return keys


def check_source(source, shape) -> np.ndarray:
    """Validates a record array of token sources (int8[B, L], values −1..2)."""
    src = np.asarray(source)
    if src.shape != tuple(shape):
        raise ValueError(f"length mismatch of records: source has shape {src.shape}, texts have {tuple(shape)}")
    if not np.issubdtype(src.dtype, np.integer) or ((src < -1) | (src > 2)).any():
        raise ValueError("source must hold integers in {-1, 0, 1, 2} (none / draft / residual / target)")
    return src.astype(np.int8)


def check_statistics(stats, kind) -> Any:
    """Type and shape check of statistics given to a detector (they may be built by hand).

    Gumbel: y^D, y^T, u, mask all [B, L]. SynthID: g^D, g^T [B, L, m] — the
    layer axis last (a transposed [B, m, L] array is refused, also when m = L
    would make the shapes agree, by its recorded m) — u and mask [B, L].
    """
    if not isinstance(stats, kind):
        maker = "gumbel_statistics" if kind is GumbelStats else "synthid_statistics"
        raise TypeError(f"expected {kind.__name__} (from detect.{maker}), got {type(stats).__name__}")
    shape = tuple(np.shape(stats.mask))
    if len(shape) != 2:
        raise ValueError(f"statistics mask must be [B, L], got shape {shape}")
    for name in ("starts", "lengths"):
        if tuple(np.shape(getattr(stats, name))) != shape[:1]:
            raise ValueError(f"statistics {name} must be [{shape[0]}], got shape {np.shape(getattr(stats, name))}")
    per_token = ("y_draft", "y_target", "u") if kind is GumbelStats else ("u",)
    for name in per_token:
        if tuple(np.shape(getattr(stats, name))) != shape:
            raise ValueError(f"statistics {name} has shape {np.shape(getattr(stats, name))}, mask {shape}")
    if kind is SynthIDStats:
        gd, gt = np.shape(stats.g_draft), np.shape(stats.g_target)
        m = stats.provenance.num_layers if stats.provenance is not None else gt[-1] if gt else None
        if gd != gt or len(gt) != 3 or tuple(gt[:2]) != shape or gt[2] != m:
            raise ValueError(f"g-values must be [B, L, m] = {shape + (m,)} for both streams (layers last), "
                             f"got {gd} and {gt}")
    if stats.provenance is not None and not isinstance(stats.provenance, Provenance):
        raise TypeError(f"statistics provenance must be a Provenance, got {type(stats.provenance).__name__}")
    return stats


def records_from_generation(result: Any) -> GenerationRecords:
    """Host copies of the fields of a ``speculative.GenerationResult`` detection uses.

    Checks that every record array matches ``tokens`` in shape (a length
    mismatch of records is an error, not a silent broadcast).
    """
    tokens = np.asarray(result.tokens)
    if tokens.ndim != 2:
        raise ValueError(f"generation tokens must be [B, L], got shape {tokens.shape}")
    fields = {}
    for name in ("source", "watermarked", "accept_u"):
        arr = np.asarray(getattr(result, name))
        if arr.shape != tokens.shape:
            raise ValueError(f"length mismatch of records: {name} has shape {arr.shape}, tokens {tokens.shape}")
        fields[name] = arr
    candidate = getattr(result, "candidate", None)
    if candidate is not None:
        candidate = np.asarray(candidate).astype(np.int8)
        if candidate.shape != tokens.shape:
            raise ValueError(f"length mismatch of records: candidate has shape {candidate.shape}, tokens {tokens.shape}")
    lengths = np.asarray(result.lengths).astype(np.int32)
    starts = np.asarray(result.prompt_lengths).astype(np.int32)
    for name, arr in (("lengths", lengths), ("prompt_lengths", starts)):
        if arr.shape != tokens.shape[:1]:
            raise ValueError(f"length mismatch of records: {name} has shape {arr.shape}, expected ({tokens.shape[0]},)")
    return GenerationRecords(
        tokens=tokens.astype(np.int32),
        lengths=lengths,
        starts=starts,
        source=check_source(fields["source"], tokens.shape),
        watermarked=fields["watermarked"].astype(bool),
        accept_u=fields["accept_u"].astype(np.float32),
        candidate=candidate,
    )


__all__ = ["GenerationRecords", "GumbelStats", "SynthIDStats", "check_source", "check_statistics", "check_texts",
           "records_from_generation"]
