"""torch's CPU generator (mt19937, vectorised over seeds; generic over numpy / jax.numpy) and its
``randperm`` (the forward Fisher-Yates shuffle) without the step-by-step loop, for the KGW green lists.
Public face: :mod:`wmspec_jax.interop.hf_kgw`."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from wmspec_jax.interop.hf_kgw._config import _CHUNK, _INT64_MIN, _M64, _is_int

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


__all__ = ["mt19937", "randperm"]
