"""vLLM's ``--watermark-config`` for ``gumbel`` and ``dual_key_gumbel`` (:class:`VllmGumbelConfig`,
:class:`VllmDualKeyGumbelConfig`) and its keys: the key check, ``derive_watermark_key`` and the key's
32-bit words. Public face: :mod:`wmspec_jax.interop.engine_gumbel`."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any, ClassVar, Mapping, Optional, Tuple, Union

import numpy as np

PRF_VERSION = "philox4x32-10-v1"
"""vLLM's ``PhiloxPRF.version``: the input mapping reproduced here."""

_MASK = 0xFFFFFFFF
_U = np.uint32

_SCOPES = ("none", "single_turn", "all")
_FINGERPRINT_DOMAIN = b"wmspec-interop/vllm-watermark-key/fingerprint"


def _config_mapping(data) -> Mapping[str, Any]:
    """vLLM's ``--watermark-config`` as a mapping (given as one, or as its JSON text)."""
    try:
        data = json.loads(data) if isinstance(data, (str, bytes)) else data
    except json.JSONDecodeError as err:
        raise ValueError(f"the watermark config is not valid JSON: {err}") from None
    if isinstance(data, Mapping):
        return data
    raise TypeError(f"the watermark config must be a mapping or JSON object, got {type(data).__name__}")


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


__all__ = ["EngineConfig", "PRF_VERSION", "VllmDualKeyGumbelConfig", "VllmGumbelConfig", "config_from_dict",
           "derive_watermark_key", "key_words"]
