"""Hugging Face transformers' KGW watermark, bit for bit, without torch.

Reference: Kirchenbauer, Geiping, Wen, Katz, Miers, Goldstein (2023), "A Watermark for Large
Language Models" (ICML 2023), as implemented by transformers' ``WatermarkingConfig``,
``WatermarkLogitsProcessor`` and ``WatermarkDetector`` (``generation/configuration_utils.py``,
``generation/logits_process.py``, ``generation/watermarking.py``; read in transformers 5.x).

What transformers does (and what is reproduced here exactly):

* Green-list size ``k = int(vocab_size * greenlist_ratio)`` (float product, truncated: with
  V = 100 and γ = 0.29 it is 28). ``vocab_size`` is the MODEL config's (``get_text_config()``),
  not the tokenizer's.
* Seed. ``lefthash``: ``hashing_key * input_seq[-1]`` as a Python integer (only the LAST token;
  ``context_width`` > 1 changes which positions are scored, never the green list). ``selfhash``:
  a fixed table ``T = torch.randperm(1_000_003)`` drawn once from ``manual_seed(hashing_key)``; for
  the window ``w`` = the last ``context_width`` tokens INCLUDING the candidate token ``c = w[-1]``,
  ``seed = min_i(hashing_key * (T[w_i % 1_000_003] + 1) * (T[c % 1_000_003] + 1))`` in torch
  int64 arithmetic (products wrap modulo 2^64 and the minimum is taken as signed). Then
  ``manual_seed(seed % (2**64 - 1))``.
* ``torch.Generator().manual_seed(s)`` is an mt19937 initialised with ``init_genrand(s mod 2^32)``
  (negative seeds are taken modulo 2^64 first): two seeds equal modulo 2^32 give the same stream.
* ``torch.randperm(n, generator=g)`` on CPU (n < 2^32 / 20) is the forward Fisher-Yates shuffle
  ``r = arange(n); for i in range(n - 1): z = g.random() % (n - i); swap(r[i], r[i + z])`` with one
  32-bit mt19937 output per step. The green list is ``randperm(V)[:k]``.
* ``WatermarkLogitsProcessor.__call__``: lefthash adds ``bias`` to the k green logits of each row
  (rows whose input is shorter than ``context_width`` are left unchanged); selfhash takes the 40
  highest scores of the row, and adds ``bias`` to each candidate ``c`` that is green in the list
  seeded with ``c`` itself (the green set then depends on the candidate token).
* Order in ``generate``: the watermark processor runs AFTER every other logits processor and after
  the sampling warpers (temperature, top-k, top-p, min-p, typical, epsilon, eta; transformers
  PR #34630), only ``LogitNormalization`` follows. Tokens are drawn from
  ``softmax(warp(logits) + bias * green)``: the bias is not divided by the temperature, and a token
  removed by top-k / top-p stays at −inf.
* ``WatermarkDetector``: strips a leading BOS (all rows or none), scores n-grams of length
  ``context_width + 1`` (lefthash: prefix = the first ``context_width`` tokens, target = the last;
  T − context_width positions) or ``context_width`` (selfhash: the window is the prefix and its
  last token the target; T − context_width + 1 positions). ``ignore_repeated_ngrams=True`` counts
  each distinct n-gram once; the default counts every position. z = (g − γn) / sqrt(nγ(1 − γ))
  with γ = ``greenlist_ratio``; its p-value is the normal tail ``0.5 erfc(z / sqrt 2)``.

Departures from transformers (all in detection; generation-side functions are exact):

* p-values are the exact binomial tail P(Binomial(n, γ_eff) >= g) with γ_eff = k / V (the green
  list has exactly k of V tokens), not the normal approximation to the z-score. The z-score is
  still transformers' (with γ = ``greenlist_ratio``), for comparison.
* Repeated scores: by default each distinct 32-bit mt19937 seed is scored once (``dedup="seed"``),
  which makes the null exact (see :func:`score`); transformers' two rules are available
  (``"ngram"``, ``"none"``), as is ``"seed_token"``.
* Token ids must lie in [0, V) (transformers would silently treat others as red).
* selfhash in :func:`processor_call`: the 40 candidates come from a stable descending sort; torch's
  sort is not stable, so exact ties in the score at the 40th rank may pick other candidates.

Speed: no Python loop runs over tokens or the vocabulary. mt19937 is vectorised over seeds (its
623-step initialisation loops over the state words), the shuffle is never run step by step: a full
green list comes from pointer jumping over the swap targets (:func:`_fy_prefix_np`; in JAX the
green SET, :func:`_fy_green_set_jax`, without a sort), and the colour of one token from following
that token through the swaps (:func:`_track_green`). Only the first k steps of the shuffle matter
(positions below k are final after step k − 1), so a seed costs k draws, not V. Measured on a
shared 2-core x86 CPU at V = 32000, γ = 0.25: :func:`green_mask` 0.3-1.5 ms for one context,
3-5 ms for 8, 35-50 ms for 64 (after a 1.5-2 s compilation), against 60-70 ms and 0.9 s for 1 and
8 contexts with the k swaps as a ``lax.fori_loop``; :func:`is_green` on 40 × 200 tokens 0.7-1.2 s.

The JAX functions (:func:`green_mask`, :func:`biased_logits`) cover lefthash only: a selfhash
green mask over the whole vocabulary needs one seed (k draws) per candidate token, V·k draws per
row (2.6e8 at V = 32000); transformers itself only tests 40 candidates. selfhash is provided in
NumPy (:func:`greenlist`, :func:`is_green`, :func:`processor_call`, :func:`score`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import numbers
from typing import Any, Mapping, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from wmspec_jax.validation import concrete

TABLE_SIZE = 1_000_003          # WatermarkLogitsProcessor.table_size
SELFHASH_CANDIDATES = 40        # WatermarkLogitsProcessor._score_rejection_sampling
SCHEMES = ("lefthash", "selfhash")
DEDUP_RULES = ("seed", "seed_token", "ngram", "none")
DEFAULT_HASHING_KEY = 15485863  # transformers' default: public, so anyone can detect with it
_FIELDS = ("greenlist_ratio", "bias", "hashing_key", "seeding_scheme", "context_width")
_M64 = 2**64 - 1
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_CHUNK = 1 << 22                # elements per working array (draws, comparisons)


# ---------------------------------------------------------------------------
# Configuration
# ---------------------------------------------------------------------------


def _is_int(x) -> bool:
    return isinstance(x, numbers.Integral) and not isinstance(x, bool)


def _is_real(x) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, bool)


@dataclasses.dataclass(frozen=True, repr=False)
class HFKGWConfig:
    """transformers' ``WatermarkingConfig`` (KGW), validated; ``hashing_key`` is the secret.

    Attributes:
      greenlist_ratio: γ in (0, 1) exclusive (the processor's rule; ``WatermarkingConfig.validate``
        also lets 0 and 1 through, which the processor then rejects).
      bias: δ added to green logits (any finite float).
      hashing_key: int in [−2^63, 2^64 − 1] (what ``torch.Generator.manual_seed`` accepts);
        selfhash multiplies it into an int64 tensor, so there it must lie in [−2^63, 2^63 − 1].
      seeding_scheme: ``"lefthash"`` or ``"selfhash"``.
      context_width: int >= 1.

    ``repr``/``str``/:meth:`record` never show the key, only :attr:`fingerprint` (a SHA-256 prefix).
    A fingerprint identifies a key; it cannot protect a guessable one (a small integer, or
    transformers' public default 15485863, is found by trying keys).
    """

    greenlist_ratio: float = 0.25
    bias: float = 2.0
    hashing_key: int = DEFAULT_HASHING_KEY
    seeding_scheme: str = "lefthash"
    context_width: int = 1

    def __post_init__(self):
        r = self.greenlist_ratio
        if not _is_real(r) or not math.isfinite(float(r)) or not 0.0 < float(r) < 1.0:
            raise ValueError(f"greenlist_ratio must be a float in (0, 1) exclusive, got {r!r}")
        if not _is_real(self.bias) or not math.isfinite(float(self.bias)):
            raise ValueError(f"bias must be a finite float, got {self.bias!r}")
        if self.seeding_scheme not in SCHEMES:
            raise ValueError(f"seeding_scheme must be one of {SCHEMES}, got {self.seeding_scheme!r}")
        key = self.hashing_key
        if not _is_int(key):
            raise ValueError(f"hashing_key must be an int, got {type(key).__name__}")
        hi = _INT64_MAX if self.seeding_scheme == "selfhash" else _M64
        if not _INT64_MIN <= int(key) <= hi:
            raise ValueError(
                f"hashing_key must lie in [-2**63, {'2**63 - 1' if hi == _INT64_MAX else '2**64 - 1'}] "
                f"for {self.seeding_scheme} (torch's seed / int64 range)")
        cw = self.context_width
        if not _is_int(cw) or int(cw) < 1:
            raise ValueError(f"context_width must be a positive int, got {cw!r}")
        object.__setattr__(self, "greenlist_ratio", float(r))
        object.__setattr__(self, "bias", float(self.bias))
        object.__setattr__(self, "hashing_key", int(key))
        object.__setattr__(self, "context_width", int(cw))

    # -- display without the key --------------------------------------------------------------
    @property
    def fingerprint(self) -> str:
        """First 16 hex digits of SHA-256("hf_kgw:" + decimal key): identifies, never reveals."""
        return hashlib.sha256(f"hf_kgw:{self.hashing_key}".encode()).hexdigest()[:16]

    def __repr__(self) -> str:
        return (f"HFKGWConfig(greenlist_ratio={self.greenlist_ratio!r}, bias={self.bias!r}, "
                f"seeding_scheme={self.seeding_scheme!r}, context_width={self.context_width!r}, "
                f"hashing_key=<sha256:{self.fingerprint}>)")

    __str__ = __repr__

    def record(self) -> dict:
        """JSON-able description without the key (its fingerprint instead)."""
        return {"scheme": "hf_kgw", "greenlist_ratio": self.greenlist_ratio, "bias": self.bias,
                "seeding_scheme": self.seeding_scheme, "context_width": self.context_width,
                "hashing_key_fingerprint": self.fingerprint}

    def to_transformers_dict(self) -> dict:
        """``WatermarkingConfig(**d)`` arguments. CONTAINS THE SECRET KEY: do not log or store."""
        return {f: getattr(self, f) for f in _FIELDS}

    def greenlist_size(self, vocab_size: int) -> int:
        """k = int(vocab_size * greenlist_ratio), transformers' formula (float product, truncated)."""
        return int(_check_vocab(vocab_size) * self.greenlist_ratio)

    def gamma_eff(self, vocab_size: int) -> float:
        """k / V: the exact probability that a fixed token is green under H0."""
        return self.greenlist_size(vocab_size) / int(vocab_size)

    # -- construction ---------------------------------------------------------------------------
    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "HFKGWConfig":
        """From ``WatermarkingConfig(...).to_dict()`` or a user's JSON; missing fields get
        transformers' defaults (as ``WatermarkingConfig(**d)`` would), unknown ones are an error."""
        if not isinstance(d, Mapping):
            raise ValueError(f"expected a mapping of {_FIELDS}, got {type(d).__name__}")
        unknown = sorted(set(d) - set(_FIELDS))
        if unknown:
            raise ValueError(f"unknown KGW watermarking field(s) {unknown}; expected a subset of "
                             f"{list(_FIELDS)} (a SynthID config is not a KGW config)")
        return cls(**{k: d[k] for k in _FIELDS if k in d})

    @classmethod
    def from_transformers(cls, cfg) -> "HFKGWConfig":
        """From a transformers ``WatermarkingConfig`` (duck-typed: ``to_dict()``, a mapping, or the
        five attributes)."""
        if isinstance(cfg, HFKGWConfig):
            return cfg
        if isinstance(cfg, Mapping):
            return cls.from_dict(cfg)
        if hasattr(cfg, "to_dict"):
            return cls.from_dict(cfg.to_dict())
        missing = [f for f in _FIELDS if not hasattr(cfg, f)]
        if missing:
            raise ValueError(f"{type(cfg).__name__} is not a KGW watermarking config (lacks {missing})")
        return cls(**{f: getattr(cfg, f) for f in _FIELDS})


def _check_config(config) -> HFKGWConfig:
    if not isinstance(config, HFKGWConfig):
        raise ValueError(f"config must be an HFKGWConfig (see HFKGWConfig.from_transformers), "
                         f"got {type(config).__name__}")
    return config


def _check_vocab(vocab_size) -> int:
    if not _is_int(vocab_size) or int(vocab_size) < 2 or int(vocab_size) >= 2**31:
        raise ValueError(f"vocab_size must be an int in [2, 2**31), got {vocab_size!r}")
    return int(vocab_size)


def _k(config: HFKGWConfig, vocab_size: int) -> int:
    k = config.greenlist_size(vocab_size)
    if k < 1:
        raise ValueError(f"empty green list: int({vocab_size} * {config.greenlist_ratio}) = 0")
    return k


def _check_tokens(x, vocab_size: int, name: str, min_len: int = 1) -> np.ndarray:
    a = np.asarray(x)
    if a.ndim < 1 or a.shape[-1] < min_len:
        raise ValueError(f"{name} must have a last axis of length >= {min_len}, got shape {a.shape}")
    if a.size and not np.issubdtype(a.dtype, np.integer):
        raise ValueError(f"{name} must hold integer token ids, got dtype {a.dtype}")
    a = a.astype(np.int64)
    if a.size and (a.min() < 0 or a.max() >= vocab_size):
        raise ValueError(f"{name} holds token ids outside [0, {vocab_size}) "
                         f"(min {a.min()}, max {a.max()})")
    return a


# ---------------------------------------------------------------------------
# mt19937 (torch's CPU generator), vectorised over seeds; generic over numpy / jax.numpy
# ---------------------------------------------------------------------------

_MT_N = 624
_U = np.uint32


def _mt_twist(xp, mt):
    """One mt19937 state refresh along the last axis, uint32[..., 624] (the in-place loop in 4 blocks)."""

    def step(cur, nxt, far):
        y = (cur & _U(0x80000000)) | (nxt & _U(0x7FFFFFFF))
        return far ^ (y >> _U(1)) ^ ((y & _U(1)) * _U(0x9908B0DF))

    a = step(mt[..., 0:227], mt[..., 1:228], mt[..., 397:624])      # i in [0, 227): all inputs old
    b = step(mt[..., 227:454], mt[..., 228:455], a[..., 0:227])     # mt[i + 397 - 624] already new
    c = step(mt[..., 454:623], mt[..., 455:624], b[..., 0:169])
    d = step(mt[..., 623:624], a[..., 0:1], b[..., 169:170])        # i = 623 wraps to the new mt[0]
    return xp.concatenate([a, b, c, d], axis=-1)


def _mt_temper(y):
    y = y ^ (y >> _U(11))
    y = y ^ ((y << _U(7)) & _U(0x9D2C5680))
    y = y ^ ((y << _U(15)) & _U(0xEFC60000))
    return y ^ (y >> _U(18))


def _mt_init_np(seeds32: np.ndarray, few: int = 4) -> np.ndarray:
    """init_genrand for each seed: uint32[R] -> state uint32[R, 624].

    Up to ``few`` seeds: NumPy's legacy ``RandomState(seed)`` runs the same init_genrand in C
    (its ``get_state()`` key); more: the 623-step recurrence vectorised over the seeds.
    """
    seeds32 = seeds32.astype(np.uint32)
    if seeds32.shape[0] <= few:
        return np.stack([np.random.RandomState(int(s)).get_state()[1] for s in seeds32]
                        ).astype(np.uint32).reshape(-1, _MT_N)
    st = np.empty((_MT_N, seeds32.shape[0]), np.uint32)
    x = seeds32
    st[0] = x
    with np.errstate(over="ignore"):
        for i in range(1, _MT_N):   # over the 624 state words, vectorised over seeds
            x = _U(1812433253) * (x ^ (x >> _U(30))) + _U(i)
            st[i] = x
    return np.ascontiguousarray(st.T)


def mt19937(seeds, count: int) -> np.ndarray:
    """The first ``count`` 32-bit outputs of mt19937 per seed (``init_genrand(seed mod 2^32)``):
    ``uint32[R, count]`` for ``seeds`` int[R] (any ints; reduced modulo 2^32 as torch does).

    Equals ``torch.Generator().manual_seed(s)``'s ``random()`` stream and NumPy's legacy
    ``RandomState(s)`` raw stream for s < 2^32.
    """
    s = np.asarray(seeds)
    if s.ndim != 1:
        raise ValueError(f"seeds must be 1-D, got shape {s.shape}")
    if s.dtype == object:
        s = np.array([int(v) % 2**32 for v in s.tolist()], np.uint32)
    s = (s.astype(np.uint64) & np.uint64(0xFFFFFFFF)).astype(np.uint32) if s.size else s.astype(np.uint32)
    count = int(count)
    if count < 0:
        raise ValueError(f"count must be >= 0, got {count}")
    if count == 0 or s.size == 0:
        return np.zeros((s.size, count), np.uint32)
    mt = _mt_init_np(s)
    nblocks = -(-count // _MT_N)
    out = np.empty((s.size, nblocks * _MT_N), np.uint32)
    with np.errstate(over="ignore"):
        for b in range(nblocks):   # over 624-output blocks
            mt = _mt_twist(np, mt)
            out[:, b * _MT_N:(b + 1) * _MT_N] = _mt_temper(mt)
    return out[:, :count] if nblocks * _MT_N == count else np.ascontiguousarray(out[:, :count])


def _mt_draws_jax(seeds32, count: int):
    """uint32[B] -> uint32[B, count] (jit-able; lax.scan over the initialisation and the blocks)."""
    mul = jnp.uint32(1812433253)

    def init(x, i):
        x = mul * (x ^ (x >> jnp.uint32(30))) + i
        return x, x

    _, rest = lax.scan(init, seeds32, jnp.arange(1, _MT_N, dtype=jnp.uint32))
    mt = jnp.concatenate([seeds32[None], rest], axis=0).T          # [B, 624]
    nblocks = -(-count // _MT_N)

    def block(mt, _):
        mt = _mt_twist(jnp, mt)
        return mt, _mt_temper(mt)

    _, out = lax.scan(block, mt, None, length=nblocks)             # [nblocks, B, 624]
    return out.transpose(1, 0, 2).reshape(-1, nblocks * _MT_N)[:, :count]


def _swap_targets_np(seeds32: np.ndarray, n: int, steps: int) -> np.ndarray:
    """j[r, i] = i + random_i % (n - i): the Fisher-Yates swap partner of step i < steps. int32[R, steps]."""
    raw = mt19937(seeds32, steps)
    z = raw % np.arange(n, n - steps, -1, dtype=np.uint32)        # n < 2^32 / 20: uint32 exact
    return z.astype(np.int32) + np.arange(steps, dtype=np.int32)


# ---------------------------------------------------------------------------
# Fisher-Yates without the loop
# ---------------------------------------------------------------------------


def _fy_prefix_np(j: np.ndarray) -> np.ndarray:
    """Final ``r[:k]`` of the forward Fisher-Yates shuffle from its swap targets ``j`` int[R, k].

    Position i is final after step i and holds V(j_i, i), the value at j_i before step i. With
    P(q) = the last step s < q whose target is q, V(q, q) is the end of the chain q, P(q), P(P(q)),
    ... (no earlier step targeted it: it still holds its own index), and V(j_i, i) = V(s1, s1) for
    s1 = the last step before i with target j_i (j_i itself if none). Chains are followed by pointer
    doubling (log2 k gathers); the runs come from one stable sort of j. Returns int64[R, k].
    """
    j = np.asarray(j, np.int64)
    R, k = j.shape
    order = np.argsort(j, axis=1, kind="stable")
    js = np.take_along_axis(j, order, axis=1)
    s1_sorted = np.full((R, k), -1, np.int64)
    s1_sorted[:, 1:] = np.where(js[:, 1:] == js[:, :-1], order[:, :-1], -1)
    s1 = np.empty_like(s1_sorted)
    np.put_along_axis(s1, order, s1_sorted, axis=1)
    last = np.ones((R, k), bool)
    last[:, :-1] = js[:, :-1] != js[:, 1:]
    p_val = np.where(order == js, s1_sorted, order)   # a run's last step, unless it is q's own step
    tgt = np.where(last & (js < k), js, k)
    P = np.full((R, k + 1), -1, np.int64)
    np.put_along_axis(P, tgt, p_val, axis=1)
    ar = np.arange(k, dtype=np.int64)
    nxt = np.where(P[:, :k] >= 0, P[:, :k], ar)
    while True:
        jumped = np.take_along_axis(nxt, nxt, axis=1)
        if np.array_equal(jumped, nxt):
            break
        nxt = jumped
    return np.where(s1 >= 0, np.take_along_axis(nxt, np.maximum(s1, 0), axis=1), j)


def _fy_green_set_jax(j, n: int):
    """bool[B, n]: the SET of values in the first k positions after the shuffle, for swap targets
    ``j`` int32[B, k] (JAX, static shapes, no sort).

    Complement view: position p >= k ends with V(p, k) = W(L(p)) where L(p) = the last step
    targeting p (p itself if none) and W(q) = V(q, q) is followed through P(q) = the last step
    s < q targeting q by pointer doubling (a ``lax.while_loop`` until nothing moves: about
    log2 of the longest chain, at most ceil(log2 k) + 1 rounds). L and P come from one scatter-max
    of the step index s into slot j_s (self-swaps j_s = s excluded: they move nothing). The n − k
    red values are cleared from an all-True mask.
    """

    def one(jr):
        k = jr.shape[0]
        s = jnp.arange(k, dtype=jnp.int32)
        A = jnp.full((n + 1,), -1, jnp.int32).at[jnp.where(jr != s, jr, n)].max(s)
        nxt0 = jnp.where(A[:k] >= 0, A[:k], s)                       # P, fixed points where none

        def body(c):
            nxt, _ = c
            jumped = nxt[nxt]
            return jumped, jnp.any(jumped != nxt)

        nxt, _ = lax.while_loop(lambda c: c[1], body, (nxt0, jnp.array(True)))
        last = A[k:n]                                                # L(p) for p in [k, n)
        red = jnp.where(last >= 0, nxt[jnp.maximum(last, 0)], jnp.arange(k, n, dtype=jnp.int32))
        return jnp.ones((n,), bool).at[red].set(False)

    return jax.vmap(one)(j)


def randperm(n: int, seed: int) -> np.ndarray:
    """``torch.randperm(n, generator=torch.Generator().manual_seed(seed))`` on CPU: int64[n].

    ``seed`` is any int torch accepts, in [−2^63, 2^64 − 1] (only seed mod 2^32 matters).
    Valid for 1 <= n < 2^32 / 20 (torch switches algorithm above).
    """
    n = int(n)
    if not 1 <= n < (2**32 - 1) // 20:
        raise ValueError(f"n must lie in [1, {(2**32 - 1) // 20}), got {n}")
    if not _is_int(seed) or not _INT64_MIN <= int(seed) <= _M64:
        raise ValueError(f"seed must be an int in [-2**63, 2**64 - 1], got {seed!r}")
    if n == 1:
        return np.zeros(1, np.int64)
    j = _swap_targets_np(np.array([int(seed) % 2**32], np.uint64), n, n)
    return _fy_prefix_np(j)[0]


def _track_green(j: np.ndarray, rows: np.ndarray, tokens: np.ndarray, k: int) -> np.ndarray:
    """Whether each token ends in the first k positions of its row's shuffle: bool[Q].

    ``j`` int[S, k] swap targets of steps < k; query q follows token ``tokens[q]`` through row
    ``rows[q]``'s swaps. A token at position p before step t (t <= p) is caught at the first step
    i in [t, p) targeting p, finalised at i (< k: green); else at step p it moves to j_p (j_p == p:
    final at p, green if p < k). A token still at p >= k after step k - 1 is red. Each hop is one
    vectorised comparison against a row of j; a token moves forward at every hop, so few hops.
    """
    Q = rows.shape[0]
    green = np.zeros(Q, bool)
    if Q == 0:
        return green
    ar = np.arange(k, dtype=np.int64)
    chunk = max(1, _CHUNK // max(k, 1))
    for lo in range(0, Q, chunk):   # over memory-sized chunks of queries
        idx = np.arange(lo, min(Q, lo + chunk))
        p = tokens[idx].astype(np.int64)
        t = np.zeros(idx.size, np.int64)
        while idx.size:              # over hops
            jr = j[rows[idx]]
            lim = np.minimum(p, k)
            hit = ((jr == p[:, None]) & (ar >= t[:, None]) & (ar < lim[:, None])).any(axis=1)
            step = ~hit & (p < k)
            jp = jr[np.arange(idx.size), np.minimum(p, k - 1)].astype(np.int64)
            stay = step & (jp == p)
            green[idx[hit | stay]] = True
            go = step & ~stay
            idx, t, p = idx[go], p[go] + 1, jp[go]
    return green


# ---------------------------------------------------------------------------
# Seeds
# ---------------------------------------------------------------------------


def _mul32_wide(a, b):
    """uint32 a * b as (hi, lo) uint32 words, from 16-bit halves (numpy or jax arrays)."""
    m16 = _U(0xFFFF)
    a0, a1, b0, b1 = a & m16, a >> _U(16), b & m16, b >> _U(16)
    p00, p01, p10, p11 = a0 * b0, a0 * b1, a1 * b0, a1 * b1
    mid = (p00 >> _U(16)) + (p01 & m16) + (p10 & m16)
    lo = (p00 & m16) | (mid << _U(16))
    hi = p11 + (p01 >> _U(16)) + (p10 >> _U(16)) + (mid >> _U(16))
    return hi, lo


def _key_words(config: HFKGWConfig):
    """(K0, K1): the 32-bit words of hashing_key mod (2^64 − 1) (Python's floor modulo)."""
    K = config.hashing_key % _M64
    return K & 0xFFFFFFFF, K >> 32


def _lefthash_seed32(xp, k0, k1, t):
    """((K * t) mod (2^64 − 1)) mod 2^32 with uint32 words only (K = K1·2^32 + K0 < 2^64 − 1).

    K·t = b1·2^64 + (b0 + a1)·2^32 + a0 with (a1, a0) = K0·t and (b1, b0) = K1·t; as 2^64 ≡ 1
    (mod 2^64 − 1) the residue is lo + hi (lo = the low 64 bits, hi = b1 + carry < 2^32), folded.
    """
    ones = _U(0xFFFFFFFF)
    a1, a0 = _mul32_wide(k0, t)
    b1, b0 = _mul32_wide(k1, t)
    c = b0 + a1
    hi = b1 + xp.where(c < b0, _U(1), _U(0))
    s0 = a0 + hi
    carry0 = s0 < a0
    s1 = c + xp.where(carry0, _U(1), _U(0))
    wrapped = carry0 & (c == ones)           # lo + hi >= 2^64: add the 1 that 2^64 leaves
    s0 = s0 + xp.where(wrapped, _U(1), _U(0))
    return xp.where((s0 == ones) & (s1 == ones), _U(0), s0)


def _fixed_table_prefix(config: HFKGWConfig, length: int) -> np.ndarray:
    """``torch.randperm(1_000_003, generator=manual_seed(hashing_key))[:length]``: int64[length]."""
    length = int(min(max(length, 1), TABLE_SIZE))
    j = _swap_targets_np(np.array([config.hashing_key % 2**32], np.uint64), TABLE_SIZE, length)
    return _fy_prefix_np(j)[0]


def _selfhash_seed32(config: HFKGWConfig, windows: np.ndarray) -> np.ndarray:
    """Seeds of selfhash windows int64[..., L] (last entry = the scored / candidate token): uint32[...].

    seed = min_i(key * (T[w_i] + 1) * (T[w_-1] + 1)) in wrapping int64 (torch's), then Python's
    ``% (2**64 - 1)`` (a negative h becomes h + 2^64 − 1), then mt19937's mod 2^32.
    """
    idx = windows % TABLE_SIZE
    table = _fixed_table_prefix(config, int(idx.max(initial=0)) + 1)
    a = table[idx] + 1
    with np.errstate(over="ignore"):
        h = (np.int64(config.hashing_key) * a) * a[..., -1:]
    h = h.min(axis=-1)
    s = h.astype(np.uint64) - (h < 0).astype(np.uint64)
    return (s & np.uint64(0xFFFFFFFF)).astype(np.uint32)


def mt_seeds(config: HFKGWConfig, context_ids) -> np.ndarray:
    """The 32-bit mt19937 seeds transformers' ``set_seed`` derives: uint32[...] for int[..., L].

    ``context_ids`` is ``_get_greenlist_ids``' ``input_seq``: lefthash uses its last token;
    selfhash its last ``context_width`` tokens, the last one being the candidate / scored token.
    """
    config = _check_config(config)
    ids = np.asarray(context_ids)
    if ids.ndim < 1 or ids.shape[-1] < 1 or (ids.size and not np.issubdtype(ids.dtype, np.integer)):
        raise ValueError(f"context_ids must be int[..., L >= 1], got {ids.dtype} {ids.shape}")
    ids = ids.astype(np.int64)
    if ids.size and ids.min() < 0:
        raise ValueError("context_ids must be non-negative token ids")
    if config.seeding_scheme == "selfhash":
        return _selfhash_seed32(config, ids[..., -config.context_width:])
    k0, k1 = _key_words(config)
    with np.errstate(over="ignore"):
        return _lefthash_seed32(np, np.full(ids.shape[:-1], k0, np.uint32),
                                np.full(ids.shape[:-1], k1, np.uint32), ids[..., -1].astype(np.uint32))


# ---------------------------------------------------------------------------
# Green lists (NumPy)
# ---------------------------------------------------------------------------


def _green_rows(seeds32: np.ndarray, vocab_size: int, k: int) -> np.ndarray:
    """Green lists in transformers' order for each seed: int64[R, k] (chunked over seeds)."""
    out = np.empty((seeds32.shape[0], k), np.int64)
    chunk = max(1, _CHUNK // k)
    for lo in range(0, seeds32.shape[0], chunk):   # over memory-sized chunks of seeds
        out[lo:lo + chunk] = _fy_prefix_np(_swap_targets_np(seeds32[lo:lo + chunk], vocab_size, k))
    return out


def greenlist(config: HFKGWConfig, context_ids, vocab_size: int) -> np.ndarray:
    """``WatermarkLogitsProcessor._get_greenlist_ids(input_seq)``: int64[k] or int64[B, k].

    Args:
      config: the watermark.
      context_ids: int[L] or int[B, L], L >= 1 (``input_seq``; for selfhash its last token is the
        candidate whose own green list this is).
      vocab_size: V of the model config.
    Returns the ids ``randperm(V)[:k]`` in transformers' order, k = int(V * greenlist_ratio).
    """
    config = _check_config(config)
    V = _check_vocab(vocab_size)
    k = _k(config, V)
    ids = _check_tokens(context_ids, V, "context_ids")
    if ids.ndim > 2:
        raise ValueError(f"context_ids must be int[L] or int[B, L], got shape {ids.shape}")
    seeds = mt_seeds(config, ids.reshape(-1, ids.shape[-1]))
    rows = _green_rows(seeds, V, k)
    return rows[0] if ids.ndim == 1 else rows


def _green_of(seeds32: np.ndarray, tokens: np.ndarray, vocab_size: int, k: int) -> np.ndarray:
    """bool[Q]: tokens[q] in the green list of seeds32[q]; draws once per distinct seed."""
    uniq, inv = np.unique(seeds32, return_inverse=True)
    inv = inv.reshape(-1)
    green = np.zeros(tokens.shape[0], bool)
    chunk = max(1, _CHUNK // k)
    for lo in range(0, uniq.size, chunk):   # over memory-sized chunks of seeds
        j = _swap_targets_np(uniq[lo:lo + chunk], vocab_size, k)
        sel = np.nonzero((inv >= lo) & (inv < lo + chunk))[0]
        green[sel] = _track_green(j, inv[sel] - lo, tokens[sel], k)
    return green


def _positions(config: HFKGWConfig, ids: np.ndarray):
    """Scored positions as transformers' detector sees them, for ids int[B, T].

    Returns (seeds uint32[B, P], tokens int64[B, P], ngrams int64[B, P, n], first int) with
    P = T − context_width (+1 for selfhash), n = context_width + 1 (lefthash) or context_width
    (selfhash), and ``first`` the index in T of the first scored token.
    """
    cw = config.context_width
    self_ = config.seeding_scheme == "selfhash"
    n = cw + 1 - int(self_)
    B, T = ids.shape
    P = max(T - n + 1, 0)
    if P == 0:
        return (np.zeros((B, 0), np.uint32), np.zeros((B, 0), np.int64),
                np.zeros((B, 0, n), np.int64), n - 1)
    ngrams = np.lib.stride_tricks.sliding_window_view(ids, n, axis=1)   # [B, P, n]
    seeds = mt_seeds(config, ngrams if self_ else ngrams[..., :-1])
    return seeds, ngrams[..., -1], ngrams, n - 1


def is_green(config: HFKGWConfig, input_ids, vocab_size: int) -> np.ndarray:
    """Colour of every position transformers' detector scores: bool[B, P].

    Args:
      input_ids: int[B, T] (or int[T]) token ids in [0, V) (strip BOS / prompt beforehand).
    Returns P = T − context_width positions (tokens context_width .. T−1) for lefthash, and
    P = T − context_width + 1 (tokens context_width−1 .. T−1: the window includes the token) for
    selfhash; no repeated-n-gram rule applied (see :func:`score`).
    """
    config = _check_config(config)
    V = _check_vocab(vocab_size)
    k = _k(config, V)
    ids = _check_tokens(input_ids, V, "input_ids")
    squeeze = ids.ndim == 1
    ids = ids.reshape(1, -1) if squeeze else ids
    if ids.ndim != 2:
        raise ValueError(f"input_ids must be int[B, T], got shape {ids.shape}")
    seeds, tokens, _, _ = _positions(config, ids)
    out = _green_of(seeds.reshape(-1), tokens.reshape(-1), V, k).reshape(tokens.shape)
    return out[0] if squeeze else out


# ---------------------------------------------------------------------------
# The processor (NumPy twin of WatermarkLogitsProcessor.__call__)
# ---------------------------------------------------------------------------


def _add_bias(values, bias: float):
    """torch's ``x + bias`` for a float tensor: float32 arithmetic for float32 and the half types
    (torch's opmath), float64 for float64."""
    values = np.asarray(values)
    if values.dtype == np.float64:
        return values + np.float64(bias)
    return (values.astype(np.float32) + np.float32(bias)).astype(values.dtype)


def processor_call(config: HFKGWConfig, input_ids, scores, vocab_size: int | None = None) -> np.ndarray:
    """``WatermarkLogitsProcessor(vocab_size, ...)(input_ids, scores)`` in NumPy, both schemes.

    Args:
      input_ids: int[B, T] the sequences so far; scores: float[B, W] the (already warped) scores.
      vocab_size: the processor's V (the model config's); default W.
    Returns float[B, W]: ``scores`` unchanged when T < context_width; lefthash: + bias on the k
    green ids of each row; selfhash: + bias on those of the 40 top-scoring candidates that are green
    in their own list (stable descending sort: torch's unstable sort may differ on exact ties).
    """
    config = _check_config(config)
    s = np.asarray(scores)
    if s.ndim != 2 or not np.issubdtype(s.dtype, np.floating):
        raise ValueError(f"scores must be float[B, W], got {s.dtype} {s.shape}")
    V = _check_vocab(s.shape[1] if vocab_size is None else vocab_size)
    if V > s.shape[1]:
        raise ValueError(f"vocab_size {V} exceeds the scores' width {s.shape[1]}")
    k = _k(config, V)
    ids = _check_tokens(input_ids, V, "input_ids", min_len=0)
    if ids.ndim != 2 or ids.shape[0] != s.shape[0]:
        raise ValueError(f"input_ids must be int[B, T] with B = {s.shape[0]}, got shape {ids.shape}")
    out = s.copy()
    if ids.shape[1] < config.context_width:
        return out
    B = s.shape[0]
    rows = np.arange(B)[:, None]
    if config.seeding_scheme == "lefthash":
        gl = _green_rows(mt_seeds(config, ids[:, -1:]), V, k)
        out[rows, gl] = _add_bias(s[rows, gl], config.bias)
        return out
    if s.shape[1] < SELFHASH_CANDIDATES:
        raise ValueError(f"selfhash needs at least {SELFHASH_CANDIDATES} scores per row, got {s.shape[1]}")
    cand = np.argsort(-s, axis=1, kind="stable")[:, :SELFHASH_CANDIDATES]            # [B, 40]
    prev = np.broadcast_to(ids[:, ids.shape[1] - (config.context_width - 1):][:, None, :],
                           (B, SELFHASH_CANDIDATES, config.context_width - 1))
    windows = np.concatenate([prev, cand[..., None]], axis=-1)
    seeds = _selfhash_seed32(config, windows)
    green = _green_of(seeds.reshape(-1), cand.reshape(-1), V, k).reshape(cand.shape)
    sel_r, sel_c = np.broadcast_to(rows, cand.shape)[green], cand[green]
    out[sel_r, sel_c] = _add_bias(s[sel_r, sel_c], config.bias)
    return out


# ---------------------------------------------------------------------------
# JAX (lefthash): the whole-vocabulary green mask a generation loop needs
# ---------------------------------------------------------------------------


def _green_mask_impl(key_words, last_tokens, vocab_size: int, k: int):
    t = last_tokens.astype(jnp.uint32)
    seeds = _lefthash_seed32(jnp, key_words[0], key_words[1], t)
    raw = _mt_draws_jax(seeds, k)                                   # [B, k]
    i = jnp.arange(k, dtype=jnp.uint32)
    j = (i + raw % (jnp.uint32(vocab_size) - i)).astype(jnp.int32)
    return _fy_green_set_jax(j, vocab_size)


_green_mask_jit = jax.jit(_green_mask_impl, static_argnums=(2, 3))


def _key_array(config: HFKGWConfig):
    k0, k1 = _key_words(config)
    return jnp.asarray(np.array([k0, k1], np.uint32))   # traced: the key is not baked into the program


def _check_contexts(contexts, vocab_size: int):
    shape = np.shape(contexts)
    if len(shape) != 2 or shape[1] < 1:
        raise ValueError(f"contexts must be int[B, L >= 1], got shape {shape}")
    c = concrete(contexts)
    if c is not None and c.size:
        if not np.issubdtype(c.dtype, np.integer):
            raise ValueError(f"contexts must hold integer token ids, got dtype {c.dtype}")
        if c.min() < 0 or c.max() >= vocab_size:
            raise ValueError(f"contexts hold token ids outside [0, {vocab_size})")


def _require_lefthash(config: HFKGWConfig, what: str):
    if config.seeding_scheme != "lefthash":
        raise ValueError(f"{what} is JAX for lefthash only; for selfhash use the NumPy "
                         "greenlist / is_green / processor_call")


def green_mask(config: HFKGWConfig, contexts, vocab_size: int) -> jax.Array:
    """lefthash green mask over the vocabulary: bool[B, V] for contexts int[B, L] (L >= 1).

    Row b is ``isin(arange(V), _get_greenlist_ids(contexts[b]))``; only ``contexts[:, -1]`` matters
    (transformers' lefthash). jit-able (static V; the key travels as a traced uint32 pair);
    uint32 arithmetic only (no x64). mt19937 is a ``lax.scan``; the shuffle's green set comes from
    pointer jumping (one scatter-max, a few doubling gathers; :func:`_fy_green_set_jax`) instead of
    k sequential swaps.
    """
    config = _check_config(config)
    _require_lefthash(config, "green_mask")
    V = _check_vocab(vocab_size)
    k = _k(config, V)
    _check_contexts(contexts, V)
    return _green_mask_jit(_key_array(config), jnp.asarray(contexts)[:, -1], V, k)


def biased_logits(config: HFKGWConfig, contexts, logits, vocab_size: int | None = None) -> jax.Array:
    """The processor's output for lefthash: ``logits + bias`` on green ids. float[B, W].

    Args:
      contexts: int[B, L] the last L tokens of ``input_ids`` (L = context_width; when L is smaller
        than ``context_width`` the logits come back unchanged, as transformers skips seeding).
      logits: float[B, W] the scores the processor receives: in ``generate`` these are the
        logits AFTER temperature / top-k / top-p (the watermark processor runs last).
      vocab_size: the model config's V (default W); ids >= V are never green.
    Float32 and half types are added in float32 (torch's opmath), float64 in float64.
    """
    config = _check_config(config)
    _require_lefthash(config, "biased_logits")
    shape = np.shape(logits)
    if len(shape) != 2:
        raise ValueError(f"logits must be float[B, W], got shape {shape}")
    W = shape[1]
    V = _check_vocab(W if vocab_size is None else vocab_size)
    if V > W:
        raise ValueError(f"vocab_size {V} exceeds the logits' width {W}")
    if np.shape(contexts)[:1] != shape[:1]:
        raise ValueError(f"contexts {np.shape(contexts)} and logits {shape} differ in batch size")
    logits = jnp.asarray(logits)
    if np.shape(contexts)[1] < config.context_width:
        return logits
    mask = green_mask(config, contexts, V)
    if W > V:
        mask = jnp.pad(mask, ((0, 0), (0, W - V)))
    if logits.dtype == jnp.float64:
        return jnp.where(mask, logits + jnp.float64(config.bias), logits)
    up = logits.astype(jnp.float32) + jnp.float32(config.bias)
    return jnp.where(mask, up.astype(logits.dtype), logits)


# ---------------------------------------------------------------------------
# Detection
# ---------------------------------------------------------------------------


class KGWScore(NamedTuple):
    """Per-text detection result (all [B]).

    Attributes:
      z: float64 transformers' z-score (g − γn) / sqrt(nγ(1 − γ)), γ = greenlist_ratio; NaN at n = 0.
      n: int64 number of scored tokens.
      green: int64 number of green scored tokens g.
      p_value: float64 exact P(Binomial(n, γ_eff) >= g), γ_eff = k / V (1 at n = 0).
    """

    z: np.ndarray
    n: np.ndarray
    green: np.ndarray
    p_value: np.ndarray


def _first_occurrences(keys: np.ndarray) -> np.ndarray:
    """Indices of the first occurrence of each distinct row of keys int64[N, m]."""
    if keys.shape[0] == 0:
        return np.zeros(0, np.int64)
    _, first = np.unique(keys, axis=0, return_index=True)
    return np.sort(first)


def _checked_ids(config: HFKGWConfig, input_ids, V: int, bos_token_id, mask) -> tuple:
    """(int64[B, T] ids, bool[B, T] valid) as :func:`score` takes them: checked, the BOS column dropped
    where every row starts with it, masked positions set to 0."""
    raw = np.asarray(input_ids)
    if raw.ndim != 2:
        raise ValueError(f"input_ids must be int[B, T], got shape {raw.shape}")
    if raw.size and not np.issubdtype(raw.dtype, np.integer):
        raise ValueError(f"input_ids must hold integer token ids, got dtype {raw.dtype}")
    ids = raw.astype(np.int64)
    valid = np.ones(ids.shape, bool) if mask is None else np.asarray(mask)
    if valid.shape != ids.shape or valid.dtype != bool:
        raise ValueError(f"mask must be bool{list(ids.shape)}, got {valid.dtype} {valid.shape}")
    if bos_token_id is not None and ids.shape[1] > 0:
        has_bos = ids[:, 0] == int(bos_token_id)
        if has_bos.any() != has_bos.all():
            raise ValueError("some rows start with the BOS token and some do not "
                             "(transformers' detector rejects this too)")
        if has_bos.all():
            ids, valid = ids[:, 1:], valid[:, 1:]
    if ids.shape[1] - config.context_width < 1:
        raise ValueError(f"need at least one token after the first context_width="
                         f"{config.context_width} tokens, got T = {ids.shape[1]}")
    if (ids[valid] < 0).any() or (ids[valid] >= V).any():
        raise ValueError(f"input_ids hold token ids outside [0, {V}) at unmasked positions")
    return np.where(valid, ids, 0), valid


def _scored_positions(config: HFKGWConfig, ids, valid, dedup: str) -> tuple:
    """(seeds, tokens [B, P], flat indices of the scored positions, row [B, P]) under ``dedup``
    (:func:`score`): a position is scored when its whole n-gram is valid, once per dedup key."""
    B = ids.shape[0]
    seeds, tokens, ngrams, first = _positions(config, ids)
    P = tokens.shape[1]
    ok = np.lib.stride_tricks.sliding_window_view(valid, ngrams.shape[-1], axis=1).all(axis=-1)
    row = np.broadcast_to(np.arange(B)[:, None], (B, P))
    sel = np.nonzero(ok.reshape(-1))[0]
    r_sel = row.reshape(-1)[sel]
    if dedup == "seed":
        keys = np.stack([r_sel, seeds.reshape(-1)[sel].astype(np.int64)], axis=1)
    elif dedup == "seed_token":
        keys = np.stack([r_sel, seeds.reshape(-1)[sel].astype(np.int64), tokens.reshape(-1)[sel]], axis=1)
    elif dedup == "ngram":
        keys = np.concatenate([r_sel[:, None], ngrams.reshape(-1, ngrams.shape[-1])[sel]], axis=1)
    else:
        keys = None
    if keys is not None:
        sel = sel[_first_occurrences(keys)]
    return seeds, tokens, sel, row


def score(config: HFKGWConfig, input_ids, vocab_size: int, *, dedup: str = "seed",
          bos_token_id: int | None = None, mask=None) -> KGWScore:
    """Detect transformers' KGW watermark with exact p-values: :class:`KGWScore` of [B] arrays.

    Args:
      input_ids: int[B, T] token ids in [0, V) (the text, not the prompt, as transformers advises).
      vocab_size: the model config's V.
      dedup: which positions are scored (within each text):
        ``"seed"`` (default) — the first position of each distinct 32-bit mt19937 seed;
        ``"seed_token"`` — the first of each distinct (seed, token);
        ``"ngram"`` — the first of each distinct n-gram (``WatermarkDetector(ignore_repeated_ngrams=True)``);
        ``"none"`` — every position (the detector's default).
      bos_token_id: as the detector: when every row starts with it, that column is dropped; rows
        that disagree are an error. None: nothing is dropped.
      mask: optional bool[B, T], False on padding; a position is scored when all tokens of its
        n-gram are unmasked.

    Null. Under H0 the text is fixed independently of the key. Treating the key-derived seeds and
    mt19937 streams as ideal randomness (the assumption behind every KGW p-value), a seed's
    shuffle is a uniform permutation, so a fixed token is green with probability exactly k / V =
    γ_eff, and shuffles of different seeds are independent. With ``"seed"`` every scored position
    has its own seed, so g ~ Binomial(n, γ_eff) exactly. This holds for selfhash too: that the seed
    depends on the scored token itself does not matter, as the token is fixed before the key is
    drawn (with context_width = 1 the colour is a fixed function of the token, so repeats of a
    token are one draw, not many). Remaining inexactness: modulo bias of ``random() % (V − i)``
    (below V / 2^32 per step) and the PRF idealisation.
    ``"seed_token"`` also scores distinct tokens under a shared seed (lefthash: the same previous
    token followed by different tokens). They sit in one permutation, so their green count is
    hypergeometric, a Poisson-binomial law; g is then Poisson-binomial with mean nγ_eff and, by
    Hoeffding (1956), P(g >= c) <= P(Binomial(n, γ_eff) >= c) for c >= nγ_eff + 1: the p-value is
    valid (conservative) wherever it is below about 1/2, not exact.
    ``"ngram"`` is exact only when distinct n-grams have distinct seeds: lefthash with
    context_width > 1 seeds with the last context token alone, so n-grams differing only earlier
    repeat one coin and the binomial p-value is anti-conservative. ``"none"`` counts repeats of
    one coin (repeated phrases) many times and is not valid on repetitive text.

    Departure from transformers: its p-value is the normal tail of z; ours is the binomial tail.
    """
    from wmspec_jax.detect.kgw import binomial_log_sf

    config = _check_config(config)
    V = _check_vocab(vocab_size)
    k = _k(config, V)
    if dedup not in DEDUP_RULES:
        raise ValueError(f"dedup must be one of {DEDUP_RULES}, got {dedup!r}")
    ids, valid = _checked_ids(config, input_ids, V, bos_token_id, mask)
    B = ids.shape[0]
    seeds, tokens, sel, row = _scored_positions(config, ids, valid, dedup)
    green = _green_of(seeds.reshape(-1)[sel], tokens.reshape(-1)[sel], V, k)
    r = row.reshape(-1)[sel]
    n = np.bincount(r, minlength=B).astype(np.int64)
    g = np.bincount(r, weights=green, minlength=B).astype(np.int64)
    gamma = config.greenlist_ratio
    with np.errstate(divide="ignore", invalid="ignore"):
        z = (g - gamma * n) / np.sqrt(n * gamma * (1.0 - gamma))
    z = np.where(n > 0, z, np.nan)
    p = np.exp(binomial_log_sf(g, n, k / V)) if B else np.zeros(0)
    return KGWScore(z.astype(np.float64), n, g, np.where(n > 0, p, 1.0).astype(np.float64))


__all__ = [
    "DEDUP_RULES", "HFKGWConfig", "KGWScore", "SELFHASH_CANDIDATES", "TABLE_SIZE", "biased_logits",
    "green_mask", "greenlist", "is_green", "mt19937", "mt_seeds", "processor_call", "randperm",
    "score",
]
