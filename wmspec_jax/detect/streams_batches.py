"""Operations on batches of detection statistics: take rows, truncate texts, concatenate batches, count
scored positions, and the draft fraction / pseudo sources of the Oracle detectors. Public face:
:mod:`wmspec_jax.detect.streams`."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from wmspec_jax.detect.provenance import merge
from wmspec_jax.sources import SOURCE_DRAFT, SOURCE_NONE, SOURCE_TARGET


def take(stats, rows):
    """The statistics of texts ``rows`` (a slice, int array or list along B); keeps the provenance."""
    if isinstance(rows, slice):
        rows = np.arange(*rows.indices(np.shape(stats.mask)[0]))
    rows = np.asarray(rows)
    if rows.dtype == bool:
        rows = np.flatnonzero(rows)
    return _take(arrays_only(stats), rows.astype(np.int32))._replace(provenance=stats.provenance)


@jax.jit
def _take(stats, rows):  # one compiled gather per shape for every field
    return jax.tree_util.tree_map(lambda x: x[rows], stats)


def arrays_only(stats):
    """``stats`` without its provenance: what jitted code receives, so that
    statistics of different keys share one compiled function."""
    return stats._replace(provenance=None)


def truncate(stats, num_tokens: int):
    """The same statistics restricted to the first ``num_tokens`` positions of each text.

    Positions start + [0, num_tokens) stay scored (if they were); later ones
    are dropped. Used for "TPR as a function of token length": the
    repeated-context rule only looks backwards, so the truncated mask is
    exactly the mask of the truncated text.
    """
    num_tokens = int(num_tokens)
    if num_tokens < 1:
        raise ValueError(f"num_tokens must be >= 1, got {num_tokens}")
    cut = _truncate(arrays_only(stats), np.int32(min(num_tokens, np.iinfo(np.int32).max // 2)))
    return cut._replace(provenance=stats.provenance)


@jax.jit
def _truncate(stats, num_tokens):  # the length is an argument: one program for every length
    pos = jnp.arange(stats.mask.shape[1], dtype=jnp.int32)[None]
    keep = pos < (stats.starts[:, None] + num_tokens)
    return stats._replace(mask=stats.mask & keep, lengths=jnp.minimum(stats.lengths, stats.starts + num_tokens))


def num_scored(stats) -> jax.Array:
    """int32[B] number of scored positions per text."""
    return jnp.sum(stats.mask, axis=1, dtype=jnp.int32)


def draft_fraction(source, mask) -> float:
    """Fraction of scored tokens that are accepted drafts (source == 0).

    The empirical P(ζ_t = ζ^D) over a training split: the "acceptance rate"
    prior of Ars-Prior (Eq. 12) and Bayes-Prior (App. D).
    """
    src = np.asarray(source)
    m = np.asarray(mask, bool)
    if src.shape != m.shape:
        raise ValueError(f"length mismatch of records: source {src.shape} vs mask {m.shape}")
    total = int(m.sum())
    if total == 0:
        raise ValueError("no scored tokens to estimate the draft fraction from")
    return float(((src == SOURCE_DRAFT) & m).sum() / total)


def pseudo_source(mask, draft_fraction_: float, rng) -> jax.Array:
    """Random sources (draft w.p. ``draft_fraction_``, else target) for texts without records.

    Negatives such as human text have no generation records; a hard
    selection that is independent of the statistics gives the Oracle
    detector the same null as it has on generated text.

    Args:
      mask: bool[B, L].
      draft_fraction_: in [0, 1].
      rng: a ``jax.random`` key.

    Returns:
      int8[B, L] with SOURCE_DRAFT / SOURCE_TARGET inside the mask, SOURCE_NONE elsewhere.
    """
    if not 0.0 <= float(draft_fraction_) <= 1.0:
        raise ValueError(f"draft fraction must lie in [0, 1], got {draft_fraction_}")
    mask = jnp.asarray(mask, bool)
    coin = jax.random.bernoulli(rng, float(draft_fraction_), mask.shape)
    src = jnp.where(coin, SOURCE_DRAFT, SOURCE_TARGET).astype(jnp.int8)
    return jnp.where(mask, src, jnp.int8(SOURCE_NONE))


def concat(stats_list):
    """Concatenates statistics of several batches along B (padding L with unscored positions)."""
    if not stats_list:
        raise ValueError("nothing to concatenate")
    kind = type(stats_list[0])
    if any(type(s) is not kind for s in stats_list):
        raise TypeError("cannot mix Gumbel and SynthID statistics")
    length = max(s.mask.shape[1] for s in stats_list)

    def pad(x, fill):
        widths = [(0, 0), (0, length - x.shape[1])] + [(0, 0)] * (x.ndim - 2)
        return jnp.pad(x, widths, constant_values=fill)

    out = []
    for name in kind._fields:
        parts = [getattr(s, name) for s in stats_list]
        if name == "provenance":
            out.append(merge(parts))
        elif name in ("starts", "lengths"):
            out.append(jnp.concatenate(parts))
        else:
            fill = False if name == "mask" else (0 if parts[0].dtype == jnp.uint8 else 0.5)
            out.append(jnp.concatenate([pad(p, fill) for p in parts]))
    return kind(*out)


def concat_source(sources, length: int) -> np.ndarray:
    """Concatenates int8[B_i, L_i] source arrays along B, padding L with SOURCE_NONE."""
    return np.concatenate(
        [np.pad(np.asarray(s, np.int8), [(0, 0), (0, length - np.shape(s)[1])], constant_values=SOURCE_NONE)
         for s in sources]
    )


__all__ = ["arrays_only", "concat", "concat_source", "draft_fraction", "num_scored", "pseudo_source", "take",
           "truncate"]
