"""vLLM's Gumbel-max text watermarks ("gumbel", "dual_key_gumbel"), bit for bit, without torch.

What exists (public sources, 2026):

* **vLLM** (``vllm-project/vllm``) ships generation-time watermarking since v0.30.0:
  PR #54053 (Gumbel-max sampling + detector + Philox PRF, merged), PR #56122
  (``dual_key_gumbel`` and speculative decoding, merged); RFC #53916. Files:
  ``vllm/config/watermarking.py`` (``WatermarkConfig``, ``derive_watermark_key``),
  ``vllm/v1/watermarking/prfs/philox.py`` and ``prfs/base.py`` (the PRF,
  ``version = "philox4x32-10-v1"``), ``vllm/v1/watermarking/gumbel.py`` (samplers and
  detectors), ``vllm/v1/watermarking/detector.py`` (contexts, deduplication),
  ``vllm/v1/worker/gpu/sample/watermark.py`` (the Triton kernel, same PRF),
  ``vllm/v1/watermarking/gpu_sampler.py`` (contexts: output tokens only).
  Compatibility vectors: ``tests/watermarking/test_prf.py`` and
  ``tests/watermarking/watermarking_goldens.json``; ``tests/interop/test_engine_gumbel.py``
  reproduces both.
* **TensorRT-LLM** (``NVIDIA/TensorRT-LLM``): no watermark (Gumbel or other) was found in
  its code, documentation or tracker; nothing here claims to match it.

The PRF (``philox4x32-10-v1``), for a 64-bit key ``K = (k0, k1)`` (low, high 32-bit words),
a context ``c[0..C-1]`` (the ``C = context_width`` previous *output* tokens, oldest first,
``-1`` before the first output token, each taken mod 2**32) and a candidate token ``t``::

    P(counter4, key2) = Philox4x32-10 (Salmon et al. 2011; M0=0xD2511F53, M1=0xCD9E8D57,
                        W0=0x9E3779B9, W1=0xBB67AE85; the key is not bumped after round 10)
    s = (0x574D4358, C, 0, 0)                              # context domain, width
    for o in 0, 4, 8, ... < C:                             # 4-token blocks
        b = c[o:o+4], a short last block padded with 0xFFFFFFFF - j at its slot j
        s = P(s xor b, (k0 xor o, k1))
    w = P((t >> 2, s0, s1, s2), (k0 xor s3, k1 xor 0x574D544B))[t & 3]   # token domain
    u = float32(((w >> 8) + 1) / (2**24 + 1))              # float64 division; u in [5.96e-8, 1 - 2^-24]

Gumbel-max sampling (per token, after temperature / top-k / top-p): ``argmax(logits +
(-log(-log(u))))`` over the vocabulary, noise in float32 (first index on ties). A context
already seen earlier in the output (``deduplicate_contexts="single_turn"``, the default;
``"all"`` also searches the prompt and skips the first ``C`` tokens) is sampled *without*
the watermark, by the engine's ordinary random sampler. ``dual_key_gumbel`` derives
``key_a = SHA-256(b"key_a" || K as 8 bytes big-endian)[:8]`` and ``key_b`` likewise
(big-endian integers); each token is drawn with key A with probability ``1 - alpha`` and with
key B with probability ``alpha`` (default 0.1), the choice made by the engine's ordinary,
*unkeyed*, random sampler; under speculative decoding draft tokens use key A and the target's
recovery and bonus tokens key B.

Detection (vLLM's ``GumbelWatermarkDetector``): the contexts of the text's tokens (``-1``
padded at the start), each *context* scored once (its first occurrence), token score
``-log1p(-u)`` in float64, score = the sum, p-value = P(Gamma(n, 1) >= score). The dual-key
detector scores every token under both keys and sums ``(1 - alpha) s_A + alpha s_B``; its
p-value moment-matches a Gamma (shape ``n / v``, scale ``v``, ``v = (1 - alpha)^2 + alpha^2``),
exact only for alpha in {0, 1/2, 1}. Here :func:`score` gives the *exact* p-value of the same
statistic for every alpha (:func:`dual_key_log_sf`), and :func:`engine_p_value` vLLM's own.

Caveats: the PRF's words and uniforms are bit-exact on every device (vLLM's CPU, compiled and
Triton paths compute the same integers; the Triton float conversion equals the CPU one for all
2**24 mantissas). The float32 Gumbel noise uses each library's ``log`` (NumPy, torch's CPU
kernels, Triton's GPU ``log``), which differ in the last bits (NumPy vs torch CPU: noise equal
to ~1e-6, measured); a sampled token can then differ on a near-tie of the two best perturbed
logits (gap ~1e-6), detection never does (it reads ``u`` only). The Gamma null is exact for an
ideal PRF and continuous uniforms; ``u`` takes 2**24 values (per-token score at most 16.64,
null mean 1 - 5e-7), which makes the p-value very slightly conservative in the far tail.
Philox is not a cryptographic PRF.

Configuration: vLLM's ``--watermark-config`` JSON (``WatermarkConfig``), e.g.
``{"algorithm": "dual_key_gumbel", "key": 42, "alpha": 0.1, "context_width": 4,
"deduplicate_contexts": "single_turn", "deduplicate_contexts_max_history": 8192,
"prf": "philox", "allow_target_only_watermarking": false}``; read with :func:`config_from_dict`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from typing import Any, ClassVar, Mapping, NamedTuple, Optional, Tuple, Union

import numpy as np

__all__ = [
    "PRF_VERSION", "VllmGumbelConfig", "VllmDualKeyGumbelConfig", "config_from_dict",
    "derive_watermark_key", "key_words", "context_states", "philox_words", "to_uniform",
    "uniforms", "vocab_uniforms", "gumbel_noise", "gumbel_argmax", "sample_tokens",
    "vocab_uniforms_jax", "gumbel_argmax_jax", "contexts_of", "scored_positions",
    "token_scores", "ScoreResult", "BatchScores", "score", "score_batch", "log_p_value", "engine_p_value",
    "gamma_log_sf", "dual_key_log_sf",
]

PRF_VERSION = "philox4x32-10-v1"
"""vLLM's ``PhiloxPRF.version``: the input mapping reproduced here."""

_MASK = 0xFFFFFFFF
_M0 = 0xD2511F53
_M1 = 0xCD9E8D57
_W0 = 0x9E3779B9
_W1 = 0xBB67AE85
_CONTEXT_DOMAIN = 0x574D4358
_TOKEN_DOMAIN = 0x574D544B
_U = np.uint32
_U64 = np.uint64

_SCOPES = ("none", "single_turn", "all")
_DEDUP = ("context", "ngram", "none")
_FINGERPRINT_DOMAIN = b"wmspec-interop/vllm-watermark-key/fingerprint"


# ----------------------------------------------------------------------------------------------
# Configuration
# ----------------------------------------------------------------------------------------------

def _config_mapping(data) -> Mapping[str, Any]:
    """vLLM's ``--watermark-config`` as a mapping (given as one, or as its JSON text)."""
    if isinstance(data, (str, bytes)):
        try:
            data = json.loads(data)
        except json.JSONDecodeError as err:
            raise ValueError(f"the watermark config is not valid JSON: {err}") from None
    if not isinstance(data, Mapping):
        raise TypeError(f"the watermark config must be a mapping or JSON object, got {type(data).__name__}")
    return data


def _check_key(key) -> int:
    if isinstance(key, bool) or not isinstance(key, (int, np.integer)):
        raise TypeError(f"the watermark key must be an integer (vLLM's WatermarkConfig.key), got {type(key).__name__}")
    key = int(key)
    if not 0 <= key <= 2**64 - 1:
        raise ValueError("the watermark key must be in [0, 2**64 - 1] (vLLM: 'philox keys must fit in 64 bits')")
    return key


def _fingerprint(key: int) -> str:
    return hashlib.sha256(_FINGERPRINT_DOMAIN + key.to_bytes(8, "big")).hexdigest()[:16]


@dataclasses.dataclass(frozen=True)
class VllmGumbelConfig:
    """vLLM's ``WatermarkConfig`` with ``algorithm="gumbel"`` (single-key Gumbel-max).

    The key never appears in ``repr`` or :meth:`record`; :attr:`fingerprint` (16 hex digits of
    a domain-separated SHA-256) identifies it. A 64-bit key with little entropy (vLLM's
    examples use ``42``) can be recovered from its fingerprint by enumeration, as it can from
    watermarked text by detection itself.

    Fields mirror ``vllm/config/watermarking.py``: ``context_width`` (default 4; values above
    16 are allowed, vLLM warns), ``deduplicate_contexts`` (``"none" | "single_turn" | "all"``),
    ``deduplicate_contexts_max_history`` (int >= 1 or None), ``prf`` (``"philox"`` only),
    ``allow_target_only_watermarking``.
    """

    key: int = dataclasses.field(repr=False)
    context_width: int = 4
    deduplicate_contexts: str = "single_turn"
    deduplicate_contexts_max_history: Optional[int] = 8192
    prf: str = "philox"
    allow_target_only_watermarking: bool = False

    algorithm: ClassVar[str] = "gumbel"
    _FIELDS: ClassVar[Tuple[str, ...]] = ("key", "algorithm", "context_width", "deduplicate_contexts",
                                          "deduplicate_contexts_max_history", "prf",
                                          "allow_target_only_watermarking")

    def __post_init__(self):
        object.__setattr__(self, "key", _check_key(self.key))
        cw = self.context_width
        if isinstance(cw, bool) or not isinstance(cw, (int, np.integer)) or int(cw) < 1:
            raise ValueError(f"context_width must be an integer >= 1, got {cw!r}")
        object.__setattr__(self, "context_width", int(cw))
        if self.deduplicate_contexts not in _SCOPES:
            raise ValueError(f"deduplicate_contexts must be one of {_SCOPES}, got {self.deduplicate_contexts!r}")
        mh = self.deduplicate_contexts_max_history
        if mh is not None:
            if isinstance(mh, bool) or not isinstance(mh, (int, np.integer)) or int(mh) < 1:
                raise ValueError(f"deduplicate_contexts_max_history must be an integer >= 1 or None, got {mh!r}")
            object.__setattr__(self, "deduplicate_contexts_max_history", int(mh))
        if self.prf != "philox":
            raise ValueError(f"prf must be 'philox' (the only PRF vLLM ships, version {PRF_VERSION}), got {self.prf!r}")
        if not isinstance(self.allow_target_only_watermarking, (bool, np.bool_)):
            raise TypeError("allow_target_only_watermarking must be a bool")
        object.__setattr__(self, "allow_target_only_watermarking", bool(self.allow_target_only_watermarking))

    @property
    def fingerprint(self) -> str:
        """16 hex digits identifying the key (one-way; safe in records)."""
        return _fingerprint(self.key)

    def keys(self) -> Tuple[int, ...]:
        """The Philox keys used for sampling: ``(key,)``."""
        return (self.key,)

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self._FIELDS if name not in ("key", "algorithm"))
        return f"{type(self).__name__}(key_fingerprint={self.fingerprint!r}, {fields})"

    __str__ = __repr__

    def record(self) -> dict:
        """JSON-ready settings *without the key*: engine, algorithm, PRF version, fields, fingerprint."""
        out = {"engine": "vllm", "algorithm": self.algorithm, "prf_version": PRF_VERSION}
        for name in self._FIELDS:
            if name not in ("key", "algorithm"):
                out[name] = getattr(self, name)
        out["key_fingerprint"] = self.fingerprint
        return out

    @classmethod
    def from_dict(cls, data: Union[Mapping[str, Any], str]):
        """Read vLLM's ``--watermark-config`` (a mapping or its JSON text).

        ``key`` is required; unknown fields and another ``algorithm`` are errors. ``alpha`` is
        accepted for ``"gumbel"`` and ignored, as vLLM's ``WatermarkConfig`` carries it for every
        algorithm.
        """
        data = dict(_config_mapping(data))
        algorithm = data.pop("algorithm", "gumbel")
        if algorithm != cls.algorithm:
            raise ValueError(f"{cls.__name__} reads algorithm {cls.algorithm!r}, got {algorithm!r}")
        if "key" not in data:
            raise ValueError("the watermark config has no 'key'")
        if "alpha" not in cls._FIELDS:
            data.pop("alpha", None)
        known = set(cls._FIELDS) - {"algorithm"}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown field(s) for vLLM algorithm {algorithm!r}: {unknown} (known: {sorted(known)})")
        return cls(**data)


@dataclasses.dataclass(frozen=True, repr=False)
class VllmDualKeyGumbelConfig(VllmGumbelConfig):
    """vLLM's ``WatermarkConfig`` with ``algorithm="dual_key_gumbel"``.

    ``alpha`` (default 0.1) is the probability that a token is drawn with key B; keys A and B
    are :func:`derive_watermark_key` of the master key with domains ``b"key_a"``, ``b"key_b"``.
    """

    alpha: float = 0.1

    algorithm: ClassVar[str] = "dual_key_gumbel"
    _FIELDS: ClassVar[Tuple[str, ...]] = VllmGumbelConfig._FIELDS + ("alpha",)

    def __post_init__(self):
        super().__post_init__()
        a = self.alpha
        if isinstance(a, bool) or not isinstance(a, (int, float, np.floating, np.integer)) or not 0.0 <= float(a) <= 1.0:
            raise ValueError(f"alpha must be a number in [0, 1], got {a!r}")
        object.__setattr__(self, "alpha", float(a))

    @property
    def key_a(self) -> int:
        """Key A (draft role; drawn with probability 1 - alpha)."""
        return derive_watermark_key(self.key, b"key_a")

    @property
    def key_b(self) -> int:
        """Key B (target role; drawn with probability alpha)."""
        return derive_watermark_key(self.key, b"key_b")

    def keys(self) -> Tuple[int, ...]:
        """``(key_a, key_b)``."""
        return (self.key_a, self.key_b)


EngineConfig = Union[VllmGumbelConfig, VllmDualKeyGumbelConfig]


def config_from_dict(data: Union[Mapping[str, Any], str]) -> EngineConfig:
    """vLLM's ``--watermark-config`` (mapping or JSON) -> the config of its ``algorithm`` (default "gumbel")."""
    data = _config_mapping(data)
    algorithm = data.get("algorithm", "gumbel")
    classes = {"gumbel": VllmGumbelConfig, "dual_key_gumbel": VllmDualKeyGumbelConfig}
    if algorithm not in classes:
        raise ValueError(f"unsupported vLLM watermark algorithm {algorithm!r}; supported: {sorted(classes)} "
                         "(SBW, vLLM PR #56859, is not merged)")
    return classes[algorithm].from_dict(data)


def derive_watermark_key(key: int, domain: bytes) -> int:
    """vLLM's ``derive_watermark_key``: ``int.from_bytes(SHA-256(domain || key.to_bytes(8, "big"))[:8], "big")``."""
    key = _check_key(key)
    if not isinstance(domain, (bytes, bytearray)):
        raise TypeError("domain must be bytes")
    return int.from_bytes(hashlib.sha256(bytes(domain) + key.to_bytes(8, "big")).digest()[:8], "big")


def key_words(key: int) -> np.ndarray:
    """uint32[2] ``(key & 0xFFFFFFFF, key >> 32)``: the form the JAX functions take."""
    key = _check_key(key)
    return np.array([key & _MASK, key >> 32], dtype=_U)


# ----------------------------------------------------------------------------------------------
# PRF (NumPy)
# ----------------------------------------------------------------------------------------------

def _as_words(x, name: str) -> np.ndarray:
    x = np.asarray(x)
    if x.dtype.kind not in "iu":
        raise TypeError(f"{name} must be an integer array, got dtype {x.dtype}")
    return x.astype(np.int64).astype(_U64).astype(_U) if x.dtype != _U else x  # mod 2**32, -1 -> 0xFFFFFFFF


def _mulhilo(m: int, x: np.ndarray):
    p = x.astype(_U64) * _U64(m)
    return (p >> _U64(32)).astype(_U), (p & _U64(_MASK)).astype(_U)


def _philox(c0, c1, c2, c3, k0, k1):
    """Philox4x32-10 on uint32 arrays (broadcasting); returns the 4 output words."""
    with np.errstate(over="ignore"):
        k0 = np.asarray(k0, _U)
        k1 = np.asarray(k1, _U)
        for r in range(10):
            hi0, lo0 = _mulhilo(_M0, c0)
            hi1, lo1 = _mulhilo(_M1, c2)
            c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
            if r != 9:
                k0 = k0 + _U(_W0)
                k1 = k1 + _U(_W1)
    return c0, c1, c2, c3


def context_states(key: int, contexts) -> np.ndarray:
    """The Philox context state of each context.

    Args:
      key: 64-bit Philox key (for ``dual_key_gumbel``, key A or key B, not the master key).
      contexts: int[..., C], oldest token first; ``-1`` pads (taken mod 2**32 as vLLM does).

    Returns:
      uint32[..., 4].
    """
    key = _check_key(key)
    ctx = _as_words(contexts, "contexts")
    if ctx.ndim < 1 or ctx.shape[-1] < 1:
        raise ValueError(f"contexts must have shape [..., C] with C >= 1, got {ctx.shape}")
    width = ctx.shape[-1]
    prefix = ctx.shape[:-1]
    k0, k1 = _U(key & _MASK), _U(key >> 32)
    s = [np.full(prefix, _CONTEXT_DOMAIN, _U), np.full(prefix, width, _U), np.zeros(prefix, _U), np.zeros(prefix, _U)]
    for off in range(0, width, 4):
        block = [ctx[..., off + j] if off + j < width else np.full(prefix, _MASK - j, _U) for j in range(4)]
        s = list(_philox(*(s[j] ^ block[j] for j in range(4)), k0 ^ _U(off), k1))
    return np.stack(s, axis=-1)


def _candidate_words(key: int, states: np.ndarray, groups: np.ndarray):
    """The 4 words of token group ``groups`` (= token >> 2) under each context state (broadcast)."""
    k0, k1 = _U(key & _MASK), _U(key >> 32)
    s = [states[..., j] for j in range(4)]
    return _philox(groups, s[0], s[1], s[2], k0 ^ s[3], k1 ^ _U(_TOKEN_DOMAIN))


def philox_words(key: int, contexts, token_ids) -> np.ndarray:
    """vLLM's raw PRF words (``PhiloxPRF.uint32`` with stream 0).

    Args:
      key: 64-bit Philox key.
      contexts: int[..., C].
      token_ids: int array broadcastable with ``contexts.shape[:-1] + (1,)`` -- e.g. ``[V]``
        (every context against the same tokens) or ``[..., 1]`` (one token per context).

    Returns:
      uint32 of shape ``broadcast(contexts.shape[:-1] + (1,), token_ids.shape)``.
    """
    states = context_states(key, contexts)
    tok = _as_words(token_ids, "token_ids")
    shape = np.broadcast_shapes(states.shape[:-1] + (1,), tok.shape)
    tok = np.broadcast_to(tok, shape)
    states = np.broadcast_to(states[..., None, :], shape + (4,))
    words = np.stack(_candidate_words(key, states, tok >> _U(2)), axis=-1)
    return np.take_along_axis(words, (tok & _U(3)).astype(np.intp)[..., None], axis=-1)[..., 0]


def to_uniform(words) -> np.ndarray:
    """vLLM's ``uint32_to_uniform``: ``float32(((w >> 8) + 1) / (2**24 + 1))`` (float64 division)."""
    w = np.asarray(words)
    if w.dtype.kind not in "iu":
        raise TypeError(f"words must be an integer array, got dtype {w.dtype}")
    mant = (w.astype(np.int64) & _MASK) >> 8
    return ((mant.astype(np.float64) + 1.0) / (2**24 + 1)).astype(np.float32)


def uniforms(key: int, contexts, token_ids) -> np.ndarray:
    """vLLM's ``PhiloxPRF(key).uniform(contexts, token_ids)`` (float32, same shapes as :func:`philox_words`)."""
    return to_uniform(philox_words(key, contexts, token_ids))


def vocab_uniforms(key: int, contexts, vocab_size: int) -> np.ndarray:
    """The uniforms of the whole vocabulary, one Philox call per 4 tokens.

    Args:
      key: 64-bit Philox key.
      contexts: int[..., C].
      vocab_size: V >= 1.

    Returns:
      float32[..., V], equal to ``uniforms(key, contexts, np.arange(V))``.
    """
    vocab_size = _check_vocab(vocab_size)
    states = context_states(key, contexts)
    groups = np.arange((vocab_size + 3) // 4, dtype=_U)
    words = np.stack(_candidate_words(key, states[..., None, :], groups), axis=-1)  # [..., G, 4]
    words = words.reshape(words.shape[:-2] + (-1,))[..., :vocab_size]
    return to_uniform(words)


def _check_vocab(vocab_size) -> int:
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, (int, np.integer)) or int(vocab_size) < 1:
        raise ValueError(f"vocab_size must be an integer >= 1, got {vocab_size!r}")
    return int(vocab_size)


def gumbel_noise(u) -> np.ndarray:
    """``-log(-log(max(u, float32 tiny)))`` in float32, as vLLM's CPU sampler (``GumbelWatermarker``)."""
    u = np.maximum(np.asarray(u, np.float32), np.finfo(np.float32).tiny)
    return -np.log(-np.log(u))


def gumbel_argmax(key: int, logits, contexts) -> np.ndarray:
    """Gumbel-max sampling with one key: ``argmax(float32(logits) + noise)`` (first index on ties).

    Args:
      key: 64-bit Philox key.
      logits: float[B, V] (after temperature / top-k / top-p; ``-inf`` allowed).
      contexts: int[B, C].

    Returns:
      int64[B] token ids.
    """
    logits = np.asarray(logits)
    if logits.ndim != 2:
        raise ValueError(f"logits must be [B, V], got shape {logits.shape}")
    ctx = np.asarray(contexts)
    if ctx.ndim != 2 or ctx.shape[0] != logits.shape[0]:
        raise ValueError(f"contexts must be [B, C] with B = {logits.shape[0]}, got shape {ctx.shape}")
    noise = gumbel_noise(vocab_uniforms(key, ctx, logits.shape[1]))
    return np.argmax(logits.astype(np.float32) + noise, axis=-1).astype(np.int64)


def sample_tokens(config: EngineConfig, logits, contexts, use_key_b=None) -> np.ndarray:
    """Watermarked tokens as vLLM draws them (every row watermarked; no deduplication skips).

    Args:
      config: :class:`VllmGumbelConfig` or :class:`VllmDualKeyGumbelConfig`.
      logits: float[B, V]; contexts: int[B, C] with ``C = config.context_width``.
      use_key_b: for ``dual_key_gumbel`` with 0 < alpha < 1, bool[B]: which rows the engine's
        (unkeyed) router sent to key B -- draw it as ``rng.random(B) < alpha``. Must be None
        otherwise (alpha 0 or 1 fixes the key).

    Returns:
      int64[B].
    """
    ctx = np.asarray(contexts)
    if ctx.ndim != 2 or ctx.shape[1] != config.context_width:
        raise ValueError(f"contexts must be [B, {config.context_width}], got shape {ctx.shape}")
    if not isinstance(config, VllmDualKeyGumbelConfig):
        if use_key_b is not None:
            raise ValueError("use_key_b applies to dual_key_gumbel only")
        return gumbel_argmax(config.key, logits, ctx)
    if config.alpha in (0.0, 1.0):
        if use_key_b is not None:
            raise ValueError("alpha is 0 or 1: the key is fixed, use_key_b must be None")
        return gumbel_argmax(config.key_b if config.alpha == 1.0 else config.key_a, logits, ctx)
    if use_key_b is None:
        raise ValueError("dual_key_gumbel with 0 < alpha < 1 needs use_key_b (the engine's unkeyed routing draw)")
    use_b = np.asarray(use_key_b)
    if use_b.dtype != np.bool_ or use_b.shape != (ctx.shape[0],):
        raise ValueError(f"use_key_b must be bool[{ctx.shape[0]}], got {use_b.dtype}{list(use_b.shape)}")
    return np.where(use_b, gumbel_argmax(config.key_b, logits, ctx), gumbel_argmax(config.key_a, logits, ctx))


# ----------------------------------------------------------------------------------------------
# PRF (JAX, whole vocabulary, uint32 only)
# ----------------------------------------------------------------------------------------------

def _jax_philox(c0, c1, c2, c3, k0, k1):
    import jax
    import jax.numpy as jnp

    def mulhilo(m, x):  # 32x32 -> 64-bit product from 16-bit limbs (no uint64 under x64-off)
        m_lo, m_hi = jnp.uint32(m & 0xFFFF), jnp.uint32(m >> 16)
        x_lo, x_hi = x & jnp.uint32(0xFFFF), x >> jnp.uint32(16)
        ll, lh, hl, hh = x_lo * m_lo, x_lo * m_hi, x_hi * m_lo, x_hi * m_hi
        mid = (ll >> 16) + (lh & jnp.uint32(0xFFFF)) + (hl & jnp.uint32(0xFFFF))
        return hh + (lh >> 16) + (hl >> 16) + (mid >> 16), x * jnp.uint32(m)

    def round_(_, carry):
        c0, c1, c2, c3, k0, k1 = carry
        hi0, lo0 = mulhilo(_M0, c0)
        hi1, lo1 = mulhilo(_M1, c2)
        # the key bump after round 10 is never used, so every round may bump it
        return hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0, k0 + jnp.uint32(_W0), k1 + jnp.uint32(_W1)

    shape = jnp.broadcast_shapes(*(jnp.shape(x) for x in (c0, c1, c2, c3, k0, k1)))
    carry = tuple(jnp.broadcast_to(jnp.asarray(x, jnp.uint32), shape) for x in (c0, c1, c2, c3, k0, k1))
    return jax.lax.fori_loop(0, 10, round_, carry)[:4]


def _jax_to_uniform(words):
    # float32((m + 1) * 2^-24) is exact; the float32 just below it equals vLLM's
    # float32((m + 1) / (2^24 + 1)) for every m (the Triton kernel's conversion).
    import jax
    import jax.numpy as jnp

    scaled = ((words >> 8) + jnp.uint32(1)).astype(jnp.float32) * jnp.float32(2.0**-24)
    return jax.lax.bitcast_convert_type(jax.lax.bitcast_convert_type(scaled, jnp.uint32) - jnp.uint32(1), jnp.float32)


def _jax_vocab_uniforms(kw, contexts, vocab_size: int):
    import jax
    import jax.numpy as jnp

    kw = jnp.asarray(kw, jnp.uint32)
    ctx = jnp.asarray(contexts)
    ctx = jax.lax.bitcast_convert_type(ctx.astype(jnp.int32), jnp.uint32) if ctx.dtype != jnp.uint32 else ctx
    width = ctx.shape[-1]
    prefix = ctx.shape[:-1]
    k0, k1 = kw[0], kw[1]
    s = [jnp.full(prefix, _CONTEXT_DOMAIN, jnp.uint32), jnp.full(prefix, width, jnp.uint32),
         jnp.zeros(prefix, jnp.uint32), jnp.zeros(prefix, jnp.uint32)]
    for off in range(0, width, 4):
        block = [ctx[..., off + j] if off + j < width else jnp.full(prefix, _MASK - j, jnp.uint32) for j in range(4)]
        s = list(_jax_philox(*(s[j] ^ block[j] for j in range(4)), k0 ^ jnp.uint32(off), k1))
    groups = jnp.arange((vocab_size + 3) // 4, dtype=jnp.uint32)
    s = [x[..., None] for x in s]
    words = jnp.stack(_jax_philox(groups, s[0], s[1], s[2], k0 ^ s[3], k1 ^ jnp.uint32(_TOKEN_DOMAIN)), axis=-1)
    words = words.reshape(words.shape[:-2] + (-1,))[..., :vocab_size]
    return _jax_to_uniform(words)


_JITTED = {}


def _jitted(name, fn, static):
    if name not in _JITTED:
        import jax

        _JITTED[name] = jax.jit(fn, static_argnums=static)
    return _JITTED[name]


def vocab_uniforms_jax(kw, contexts, vocab_size: int):
    """JAX twin of :func:`vocab_uniforms` (jitted; uint32 arithmetic only, no x64).

    Args:
      kw: uint32[2] from :func:`key_words` (a 64-bit key as two words).
      contexts: int32/uint32[..., C] (``-1`` pads; token ids < 2**31 as int32).
      vocab_size: V (static).

    Returns:
      float32[..., V], bit-equal to :func:`vocab_uniforms`.
    """
    _check_jax_args(kw, contexts)
    return _jitted("vocab", _jax_vocab_uniforms, (2,))(kw, contexts, _check_vocab(vocab_size))


def _check_jax_args(kw, contexts) -> None:
    if tuple(np.shape(kw)) != (2,) or np.asarray(kw).dtype != np.uint32:
        raise ValueError("kw must be uint32[2] (use key_words(key))")
    dtype = getattr(contexts, "dtype", np.asarray(contexts).dtype)
    if np.dtype(dtype).kind not in "iu" or len(np.shape(contexts)) < 1 or np.shape(contexts)[-1] < 1:
        raise ValueError(f"contexts must be an integer array [..., C] with C >= 1, got {dtype}{list(np.shape(contexts))}")


def _jax_gumbel_argmax(kw, logits, contexts):
    import jax.numpy as jnp

    u = _jax_vocab_uniforms(kw, contexts, logits.shape[-1])
    u = jnp.maximum(u, jnp.finfo(jnp.float32).tiny)
    return jnp.argmax(logits.astype(jnp.float32) - jnp.log(-jnp.log(u)), axis=-1)


def gumbel_argmax_jax(kw, logits, contexts):
    """JAX twin of :func:`gumbel_argmax`: ``kw`` uint32[2], logits float[B, V], contexts int32[B, C] -> int32[B]."""
    _check_jax_args(kw, contexts)
    if len(np.shape(logits)) != 2 or np.shape(contexts)[:-1] != np.shape(logits)[:1]:
        raise ValueError(f"logits must be [B, V] and contexts [B, C], got {list(np.shape(logits))} and "
                         f"{list(np.shape(contexts))}")
    return _jitted("argmax", _jax_gumbel_argmax, ())(kw, logits, contexts)


# ----------------------------------------------------------------------------------------------
# Detection
# ----------------------------------------------------------------------------------------------

def _check_ids(ids, what: str) -> np.ndarray:
    ids = np.asarray(ids)
    if ids.size and ids.dtype.kind not in "iu":
        raise TypeError(f"{what} must be integers, got dtype {ids.dtype}")
    ids = ids.astype(np.int64)
    if ids.size and (ids.min() < 0 or ids.max() > _MASK):
        raise ValueError("token ids must be in [0, 2**32)")
    return ids


def _check_text(input_ids) -> np.ndarray:
    ids = np.asarray(input_ids)
    if ids.ndim != 1:
        raise ValueError(f"input_ids must be one text, int[T], got shape {ids.shape}")
    return _check_ids(ids, "input_ids")


def _check_width(context_width) -> int:
    if isinstance(context_width, bool) or not isinstance(context_width, (int, np.integer)) or context_width < 1:
        raise ValueError(f"context_width must be an integer >= 1, got {context_width!r}")
    return int(context_width)


def _batch_contexts(texts: np.ndarray, width: int) -> np.ndarray:
    padded = np.concatenate([np.full(texts.shape[:-1] + (width,), -1, np.int64), texts], axis=-1)
    return np.lib.stride_tricks.sliding_window_view(padded, width, axis=-1)[..., : texts.shape[-1], :]


def contexts_of(input_ids, context_width: int) -> np.ndarray:
    """The context of every token as vLLM's detector builds it: the previous ``context_width``
    tokens, ``-1`` before the first (int[T] -> int64[T, C])."""
    return _batch_contexts(_check_text(input_ids), _check_width(context_width)).copy()


def _check_dedup(dedup) -> str:
    if dedup not in _DEDUP:
        raise ValueError(f"dedup must be one of {_DEDUP}, got {dedup!r}")
    return dedup


def _scored_mask(texts: np.ndarray, ctx: np.ndarray, valid: np.ndarray, dedup: str) -> np.ndarray:
    """bool[B, T]: the tokens scored in each row (first occurrences within the row)."""
    if dedup == "none":
        return valid
    b, t = texts.shape
    rows = [np.broadcast_to(np.arange(b)[:, None, None], (b, t, 1)), ctx]
    if dedup == "ngram":
        rows.append(texts[..., None])
    rows = np.concatenate(rows, axis=-1)[valid]  # [N, 1 + C (+ 1)], row-major order kept
    flat = np.flatnonzero(valid.ravel())
    _, first = np.unique(rows, axis=0, return_index=True)  # stable: index of the first occurrence
    mask = np.zeros(b * t, bool)
    mask[flat[first]] = True
    return mask.reshape(b, t)


def scored_positions(input_ids, context_width: int, dedup: str = "context") -> np.ndarray:
    """Indices of the scored tokens (ascending).

    ``dedup``: ``"context"`` -- the first occurrence of each context (vLLM's detector default);
    ``"ngram"`` -- the first occurrence of each (context, token); ``"none"`` -- every token
    (vLLM's ``deduplicate_contexts=False``; the Gamma null is then not exact on texts that
    repeat an n-gram).
    """
    dedup = _check_dedup(dedup)
    ids = _check_text(input_ids)[None]
    ctx = _batch_contexts(ids, _check_width(context_width))
    return np.flatnonzero(_scored_mask(ids, ctx, np.ones(ids.shape, bool), dedup)[0])


def token_scores(key: int, contexts, tokens) -> np.ndarray:
    """Per-token Aaronson scores ``-log1p(-u)`` in float64 (int[N, C], int[N] -> float64[N])."""
    ctx = np.asarray(contexts)
    tok = np.asarray(tokens)
    if ctx.ndim != 2 or tok.shape != (ctx.shape[0],):
        raise ValueError(f"contexts must be [N, C] and tokens [N], got {ctx.shape} and {tok.shape}")
    u = uniforms(key, ctx, tok[:, None])[:, 0]
    return -np.log1p(-u.astype(np.float64))


class ScoreResult(NamedTuple):
    """``score`` (the sum), ``n`` (scored tokens), ``p_value`` (exact, P(null >= score))."""

    score: float
    n: int
    p_value: float


class BatchScores(NamedTuple):
    """Per text: ``score`` float64[B], ``n`` int64[B], ``p_value`` float64[B], ``log_p_value`` float64[B]."""

    score: np.ndarray
    n: np.ndarray
    p_value: np.ndarray
    log_p_value: np.ndarray


def _weights(config: EngineConfig, alpha) -> Tuple[float, float]:
    if not isinstance(config, VllmDualKeyGumbelConfig):
        if alpha is not None:
            raise ValueError("alpha applies to dual_key_gumbel only")
        return (1.0, 0.0)
    a = config.alpha if alpha is None else alpha
    if isinstance(a, bool) or not isinstance(a, (int, float, np.floating, np.integer)) or not 0.0 <= float(a) <= 1.0:
        raise ValueError(f"alpha must be a number in [0, 1], got {a!r}")
    return (1.0 - float(a), float(a))


def _check_config(config) -> None:
    if not isinstance(config, VllmGumbelConfig):
        raise TypeError(f"config must be a VllmGumbelConfig or VllmDualKeyGumbelConfig, got {type(config).__name__}")


def score_batch(config: EngineConfig, texts, lengths=None, *, dedup: str = "context",
                alpha: Optional[float] = None) -> BatchScores:
    """:func:`score` for many texts at once (vectorised over texts and tokens).

    Args:
      config, dedup, alpha: as :func:`score`.
      texts: int[B, T] generated tokens, one text per row.
      lengths: optional int[B], the length of each text (tokens beyond it are padding and
        ignored); default: every row is T tokens long.

    Returns:
      :class:`BatchScores`.
    """
    _check_config(config)
    w_a, w_b = _weights(config, alpha)
    dedup = _check_dedup(dedup)
    texts = np.asarray(texts)
    if texts.ndim != 2:
        raise ValueError(f"texts must be int[B, T], got shape {texts.shape}")
    b, t = texts.shape
    if lengths is None:
        valid = np.ones((b, t), bool)
    else:
        lengths = np.asarray(lengths)
        if lengths.shape != (b,) or lengths.dtype.kind not in "iu" or (lengths.size and (
                lengths.min() < 0 or lengths.max() > t)):
            raise ValueError(f"lengths must be int[{b}] in [0, {t}], got {lengths!r}")
        valid = np.arange(t)[None, :] < lengths[:, None]
    texts = np.where(valid, texts, 0) if texts.size else texts.astype(np.int64)
    texts = _check_ids(texts, "texts")
    ctx = _batch_contexts(texts, config.context_width)
    mask = _scored_mask(texts, ctx, valid, dedup)
    row = np.broadcast_to(np.arange(b)[:, None], (b, t))[mask]
    sel_ctx, sel_tok = ctx[mask], texts[mask]
    n = np.bincount(row, minlength=b).astype(np.int64)
    keys = config.keys()
    if len(keys) == 1:
        per_token = token_scores(keys[0], sel_ctx, sel_tok)
    else:
        per_token = np.stack([token_scores(k, sel_ctx, sel_tok) for k in keys], axis=-1) @ np.array([w_a, w_b])
    total = np.bincount(row, weights=per_token, minlength=b).astype(np.float64)
    if w_b == 0.0:
        log_p = _gamma_log_sf_many(n, total)
    else:
        log_p = np.array([dual_key_log_sf(int(k), float(x), w_b) for k, x in zip(n, total)], np.float64)
    return BatchScores(total, n, np.exp(log_p), log_p)


def score(config: EngineConfig, input_ids, *, dedup: str = "context", alpha: Optional[float] = None) -> ScoreResult:
    """Score one text for vLLM's Gumbel-max watermark, with an exact p-value.

    Args:
      config: :class:`VllmGumbelConfig` or :class:`VllmDualKeyGumbelConfig` (key and width as
        generated).
      input_ids: int[T], the *generated* tokens only (vLLM's contexts never include the prompt),
        in the generating model's tokenizer.
      dedup: see :func:`scored_positions`; the default, ``"context"``, is vLLM's detector, so
        ``score`` and ``n`` equal ``GumbelWatermarkDetector.detect`` /
        ``DualKeyGumbelWatermarkDetector.detect`` (up to float64 summation order).
      alpha: dual key only: the weight of key B in the score (default ``config.alpha``; vLLM's
        detector defaulted to 0.2 in v0.30.0 and 0.1 later).

    Returns:
      :class:`ScoreResult`. Single key: score = Σ −log(1 − u_t), p = P(Gamma(n, 1) >= score).
      Dual key: score = Σ (1 − alpha)(−log(1 − u^A_t)) + alpha(−log(1 − u^B_t)), p exact
      (:func:`dual_key_log_sf`). No scored token: (0.0, 0, 1.0). :func:`score_batch` also
      returns log p (finite where p underflows).

    Under H0 (text independent of the key) the scored PRF inputs are distinct, so their
    uniforms are i.i.d. U(0, 1) and the null is exact for every text (Aaronson 2022; Fernandez
    et al. 2023 for scoring repeated inputs once).
    """
    ids = _check_text(input_ids)
    out = score_batch(config, ids[None], dedup=dedup, alpha=alpha)
    return ScoreResult(float(out.score[0]), int(out.n[0]), float(out.p_value[0]))


def log_p_value(config: EngineConfig, score_value: float, n: int, *, alpha: Optional[float] = None) -> float:
    """Exact log p-value of a :func:`score` (float; finite far below float64's smallest p)."""
    _check_config(config)
    w_a, w_b = _weights(config, alpha)
    if w_b == 0.0:
        return gamma_log_sf(n, score_value)
    return dual_key_log_sf(n, score_value, w_b)


def engine_p_value(config: EngineConfig, score_value: float, n: int, *, alpha: Optional[float] = None) -> float:
    """vLLM's own p-value for the same score (for parity with its detector).

    Single key: ``_gamma_survival_integer_shape`` (exact, = exp of :func:`gamma_log_sf`).
    Dual key: moment-matched ``Gamma(n / v, scale v)``, ``v = (1 - alpha)^2 + alpha^2``; its
    integer-shape series for alpha in {0, 0.5, 1} (then exact), else ``gammaincc`` -- an
    approximation of the true null (:func:`dual_key_log_sf`).
    """
    from scipy.special import gammaincc

    _check_config(config)
    w_a, w_b = _weights(config, alpha)
    n = _check_n(n)
    if n == 0:
        return 1.0
    if not isinstance(config, VllmDualKeyGumbelConfig):
        return float(math.exp(gamma_log_sf(n, score_value)))
    a = w_b
    var = (1.0 - a) ** 2 + a**2
    if a in (0.0, 0.5, 1.0):
        return min(1.0, float(math.exp(min(0.0, gamma_log_sf(round(n / var), score_value / var)))))
    return float(gammaincc(n / var, score_value / var))


def _check_n(n) -> int:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
        raise ValueError(f"n must be an integer >= 0, got {n!r}")
    return int(n)


def _log_poisson_cdf_table(m_max: int, x: float) -> np.ndarray:
    """log P(Gamma(m, 1) >= x) = log P(Poisson(x) <= m - 1) for m = 1..m_max (float64[m_max])."""
    from scipy.special import gammaln

    j = np.arange(m_max, dtype=np.float64)
    log_terms = j * math.log(x) - x - gammaln(j + 1.0)
    return np.logaddexp.accumulate(log_terms)


def _gamma_log_sf_many(n: np.ndarray, s: np.ndarray) -> np.ndarray:
    """Vectorised :func:`gamma_log_sf`: int[B], float[B] -> float64[B]."""
    from scipy.special import gammaln, logsumexp

    n = np.asarray(n, np.int64)
    s = np.asarray(s, np.float64)
    out = np.zeros(n.shape, np.float64)
    live = (n > 0) & (s > 0)
    if live.any():
        nl, sl = n[live], s[live]
        j = np.arange(int(nl.max()), dtype=np.float64)
        terms = j[None, :] * np.log(sl)[:, None] - gammaln(j + 1.0)[None, :]
        terms = np.where(j[None, :] < nl[:, None], terms, -np.inf)
        out[live] = np.minimum(0.0, logsumexp(terms, axis=1) - sl)
    return out


def gamma_log_sf(n: int, s: float) -> float:
    """Exact ``log P(Gamma(n, 1) >= s)`` for integer n >= 0: ``-s + log Σ_{k<n} s^k / k!``.

    The same series as vLLM's ``_gamma_survival_integer_shape``, in log space (all terms
    positive, so no cancellation; finite for p far below 1e-308).
    """
    n = _check_n(n)
    s = float(s)
    if not math.isfinite(s):
        raise ValueError(f"score must be finite, got {s}")
    if n == 0 or s <= 0.0:
        return 0.0
    return min(0.0, float(_log_poisson_cdf_table(n, s)[-1]))


def dual_key_log_sf(n: int, s: float, alpha: float, *, rel_tol: float = 1e-15) -> float:
    """Exact ``log P((1 − α) X + α Y >= s)`` for independent X, Y ~ Gamma(n, 1).

    With ``lo = min(α, 1 − α)``, ``hi = max(...)`` and ``r = hi / lo``, ``r·Gamma(n, 1)`` is the
    negative-binomial mixture ``Σ_k NB(k; n, 1/r) Gamma(n + k, 1)`` (compare the moment
    generating functions), so ``S / lo`` is ``Σ_k NB(k; n, 1/r) Gamma(2n + k, 1)`` and

        p = Σ_k C(n + k − 1, k) r^−n (1 − 1/r)^k · P(Gamma(2n + k, 1) >= s / lo),

    a sum of positive terms evaluated in log space. It is truncated at k_max where the
    remaining negative-binomial mass (bounded by a geometric series: the pmf ratio
    (n + k)(1 − q)/(k + 1) decreases in k) is below ``rel_tol · p``, so the relative error is
    below rel_tol. α in {0, 1} reduces to :func:`gamma_log_sf` (s / max weight), α = 1/2 to
    Gamma(2n, 1/2).
    """
    from scipy.special import gammaln

    n = _check_n(n)
    s = float(s)
    alpha = float(alpha)
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")
    if not math.isfinite(s):
        raise ValueError(f"score must be finite, got {s}")
    if n == 0 or s <= 0.0:
        return 0.0
    lo, hi = sorted((alpha, 1.0 - alpha))
    if lo == 0.0:
        return gamma_log_sf(n, s / hi)
    x = s / lo
    q = lo / hi  # = 1 / r, in (0, 1]
    if q == 1.0:
        return gamma_log_sf(2 * n, x)
    log_q, log_1mq = math.log(q), math.log1p(-q)

    def log_nb(k):
        return gammaln(n + k) - gammaln(k + 1.0) - gammaln(n) + n * log_q + k * log_1mq

    mean = n * (1.0 - q) / q
    sd = math.sqrt(n * (1.0 - q)) / q
    k_max = int(mean + 12.0 * sd + 64)
    while True:
        k = np.arange(k_max + 1, dtype=np.float64)
        log_q_tab = _log_poisson_cdf_table(2 * n + k_max, x)[2 * n - 1:]  # m = 2n .. 2n + k_max
        terms = log_nb(k) + np.minimum(log_q_tab, 0.0)
        top = terms.max()
        log_p = float(top + math.log(np.exp(terms - top).sum()))
        ratio = (n + k_max + 1.0) * (1.0 - q) / (k_max + 2.0)  # pmf(j + 1) / pmf(j) <= ratio for j > k_max
        if ratio < 1.0:
            log_tail = float(log_nb(float(k_max + 1))) - math.log1p(-ratio)
            if log_tail <= log_p + math.log(rel_tol):
                return min(0.0, log_p)
        k_max *= 2
