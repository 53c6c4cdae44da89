"""Token-level edits of generated text, for the robustness experiment (``experiments/robustness.py``).

Each edit takes the generated token ids of one text, a rate in [0, 1] and a
NumPy generator, and returns the edited ids with, per token, its *origin*:
its position in the unedited text, or −1 for a token that is not the
generator's (a substitute, an insertion, human text). Origins let the
experiment carry the generation records (which stream produced a token)
through the edit and tell which tokens still sit in their original context.

* ``substitute`` — each token is replaced with probability r by a token drawn
  uniformly from the vocabulary (as Kuditipudi et al. 2023 and Piet et al.
  2023 attack token watermarks).
* ``insert`` — after each token, with probability r, a uniformly random token
  is inserted (expected length (1 + r) n).
* ``delete`` — each token is deleted with probability r.
* ``reorder`` — the text is cut into spans of ``span`` tokens and
  k = round(r · #spans) of them (at least 2 when r > 0 and there are 2
  spans) trade places in a random cyclic shift, so each of the k moves.
* ``mix`` — the watermarked text pasted into human text: the document keeps
  n tokens, of which round(r n) are human (a contiguous stretch of a human
  token pool) and the rest are the first n − round(r n) generated tokens,
  pasted at a uniformly random offset inside the human stretch.

A token's watermark evidence survives only where it and its h predecessors
are untouched generated tokens in their original order (the keyed context):
:func:`intact`.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import numpy as np

EDITS = ("substitute", "insert", "delete", "reorder", "mix")
DEFAULT_SPAN = 4


class Edited(NamedTuple):
    """An edited text.

    Attributes:
      tokens: int32[n'] the edited token ids.
      origin: int32[n'] each token's position in the unedited text, −1 for a
        token that is not the generator's.
    """

    tokens: np.ndarray
    origin: np.ndarray


def _check(tokens, rate) -> tuple:
    tokens = np.asarray(tokens)
    if tokens.ndim != 1 or not np.issubdtype(tokens.dtype, np.integer):
        raise ValueError(f"tokens must be a 1-D integer array, got {tokens.dtype}{list(tokens.shape)}")
    rate = float(rate)
    if not 0.0 <= rate <= 1.0:
        raise ValueError(f"edit rate must lie in [0, 1], got {rate}")
    return tokens.astype(np.int32), rate


def _random_tokens(rng, n: int, vocab_size: int) -> np.ndarray:
    if vocab_size is None or int(vocab_size) < 1:
        raise ValueError(f"vocab_size must be an int >= 1, got {vocab_size!r}")
    return rng.integers(0, int(vocab_size), size=n).astype(np.int32)


def substitute(tokens, rate: float, rng: np.random.Generator, vocab_size: int) -> Edited:
    """Each token replaced with probability ``rate`` by a uniformly random token."""
    tokens, rate = _check(tokens, rate)
    hit = rng.random(tokens.size) < rate
    out = tokens.copy()
    out[hit] = _random_tokens(rng, int(hit.sum()), vocab_size)
    return Edited(out, np.where(hit, -1, np.arange(tokens.size)).astype(np.int32))


def insert(tokens, rate: float, rng: np.random.Generator, vocab_size: int) -> Edited:
    """After each token, with probability ``rate``, a uniformly random token."""
    tokens, rate = _check(tokens, rate)
    hit = rng.random(tokens.size) < rate
    new = _random_tokens(rng, int(hit.sum()), vocab_size)
    out_tokens, out_origin, j = [], [], 0
    for i, t in enumerate(tokens):
        out_tokens.append(t)
        out_origin.append(i)
        if hit[i]:
            out_tokens.append(new[j])
            out_origin.append(-1)
            j += 1
    return Edited(np.asarray(out_tokens, np.int32), np.asarray(out_origin, np.int32))


def delete(tokens, rate: float, rng: np.random.Generator) -> Edited:
    """Each token deleted with probability ``rate``."""
    tokens, rate = _check(tokens, rate)
    keep = rng.random(tokens.size) >= rate
    return Edited(tokens[keep], np.flatnonzero(keep).astype(np.int32))


def reorder(tokens, rate: float, rng: np.random.Generator, span: int = DEFAULT_SPAN) -> Edited:
    """Spans of ``span`` tokens trade places (module doc)."""
    tokens, rate = _check(tokens, rate)
    if int(span) < 1:
        raise ValueError(f"span must be >= 1, got {span}")
    bounds = list(range(0, tokens.size, int(span))) + [tokens.size]
    spans = [np.arange(a, b) for a, b in zip(bounds[:-1], bounds[1:])]
    k = int(round(rate * len(spans)))
    if rate > 0 and len(spans) >= 2:
        k = max(k, 2)
    k = min(k, len(spans))
    order = list(range(len(spans)))
    if k >= 2:
        chosen = np.sort(rng.choice(len(spans), size=k, replace=False))
        shift = rng.integers(1, k)  # a cyclic shift by 1..k-1 moves every chosen span
        for a, b in zip(chosen, np.roll(chosen, shift)):
            order[a] = int(b)
    origin = np.concatenate([spans[i] for i in order]).astype(np.int32) if spans else np.zeros(0, np.int32)
    return Edited(tokens[origin], origin)


def mix(tokens, rate: float, rng: np.random.Generator, human: np.ndarray) -> Edited:
    """The first n − round(r n) tokens pasted into round(r n) human tokens (module doc).

    ``human``: a pool of human token ids (at least round(r n) of them).
    """
    tokens, rate = _check(tokens, rate)
    n = tokens.size
    num_human = int(round(rate * n))
    if num_human == 0:
        return Edited(tokens.copy(), np.arange(n, dtype=np.int32))
    pool = np.asarray(human, np.int32)
    if pool.ndim != 1 or pool.size < num_human:
        raise ValueError(f"the human token pool has {pool.size} tokens; mixing needs {num_human}")
    start = int(rng.integers(0, pool.size - num_human + 1))
    stretch = pool[start:start + num_human]
    at = int(rng.integers(0, num_human + 1))
    kept = tokens[: n - num_human]
    out = np.concatenate([stretch[:at], kept, stretch[at:]]).astype(np.int32)
    origin = np.concatenate([np.full(at, -1), np.arange(kept.size), np.full(num_human - at, -1)]).astype(np.int32)
    return Edited(out, origin)


def apply(kind: str, tokens, rate: float, rng: np.random.Generator, *, vocab_size: Optional[int] = None,
          human: Optional[np.ndarray] = None, span: int = DEFAULT_SPAN) -> Edited:
    """The edit ``kind`` (one of :data:`EDITS`) at ``rate``; rate 0 returns the text unchanged."""
    if kind not in EDITS:
        raise ValueError(f"unknown edit {kind!r}; expected one of {EDITS}")
    if float(rate) == 0.0:
        tokens, _ = _check(tokens, rate)
        return Edited(tokens.copy(), np.arange(tokens.size, dtype=np.int32))
    if kind == "substitute":
        return substitute(tokens, rate, rng, vocab_size)
    if kind == "insert":
        return insert(tokens, rate, rng, vocab_size)
    if kind == "delete":
        return delete(tokens, rate, rng)
    if kind == "reorder":
        return reorder(tokens, rate, rng, span)
    if human is None:
        raise ValueError("mixing into human text needs a human token pool")
    return mix(tokens, rate, rng, human)


def intact(origin, width: int, prefix: int = 0) -> np.ndarray:
    """bool[n']: the token and its ``width`` predecessors are generated tokens in their original order.

    Args:
      origin: int[n'] :attr:`Edited.origin`.
      width: the watermark's context width h.
      prefix: the number of tokens before the text that never change (the
        prompt); the first tokens' contexts reach into it.

    A token of origin o ≥ 0 at position t is intact iff for j = 1..h the
    token at t − j has origin o − j (positions of the prompt count as origins
    −prefix..−1; before the buffer both must be before it).
    """
    origin = np.asarray(origin, np.int64)
    prefix = int(prefix)
    new = -(1 << 40)  # never equal to an expected origin
    full = np.concatenate([np.arange(-prefix, 0), np.where(origin >= 0, origin, new)])
    pos = np.arange(full.size)
    ok = full >= 0
    for j in range(1, int(width) + 1):
        before = pos - j < 0
        prev = full[np.maximum(pos - j, 0)]
        ok &= np.where(before, full - j < -prefix, prev == full - j)
    return ok[prefix:]


def levenshtein(a, b) -> int:
    """Token-level Levenshtein distance: the fewest insertions, deletions and substitutions turning ``a``
    into ``b`` (1-D integer sequences). One numpy pass per row of the dynamic programme: the row's
    insertion chain is a running minimum of ``t[k] - k`` plus ``j``."""
    a = np.asarray(a, np.int64).ravel()
    b = np.asarray(b, np.int64).ravel()
    if a.size == 0 or b.size == 0:
        return int(max(a.size, b.size))
    cols = np.arange(b.size + 1, dtype=np.int64)
    row = cols.copy()
    for i in range(1, a.size + 1):
        t = np.empty_like(row)
        t[0] = i
        t[1:] = np.minimum(row[1:] + 1, row[:-1] + (b != a[i - 1]))
        row = cols + np.minimum.accumulate(t - cols)
    return int(row[-1])


def normalised_distance(a, b) -> float:
    """:func:`levenshtein` / max(len(a), len(b)) in [0, 1] (0 for two empty sequences)."""
    longest = max(np.size(a), np.size(b))
    return levenshtein(a, b) / longest if longest else 0.0


def substitute_exactly(tokens, count: int, rng: np.random.Generator, vocab_size: int) -> Edited:
    """``count`` distinct positions (uniformly chosen) replaced by tokens other than the one there: the edited
    text differs from the original in exactly ``count`` places (``count`` ≤ its length), so its Levenshtein
    distance is at most ``count`` — equal unless shifting part of the text aligns it better, which a large
    vocabulary makes rare."""
    tokens, _ = _check(tokens, 0.0)
    count = int(count)
    if not 0 <= count <= tokens.size:
        raise ValueError(f"count must lie in [0, {tokens.size}], got {count}")
    if vocab_size is None or int(vocab_size) < 2:
        raise ValueError(f"vocab_size must be an int >= 2, got {vocab_size!r}")
    hit = np.zeros(tokens.size, bool)
    hit[rng.choice(tokens.size, size=count, replace=False)] = True
    out = tokens.copy()
    shift = rng.integers(1, int(vocab_size), size=count)  # never 0: another token
    out[hit] = ((tokens[hit].astype(np.int64) + shift) % int(vocab_size)).astype(np.int32)
    return Edited(out, np.where(hit, -1, np.arange(tokens.size)).astype(np.int32))


__all__ = ["DEFAULT_SPAN", "EDITS", "Edited", "apply", "delete", "insert", "intact", "levenshtein", "mix",
           "normalised_distance", "reorder", "substitute", "substitute_exactly"]
