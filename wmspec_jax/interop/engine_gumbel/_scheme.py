"""vLLM's ``gumbel`` watermark as a watermark decoder of the generation loop: its Philox PRF keys the
target stream, so basic sampling, Alg. 1, the other speculative methods and draft trees generate texts
that vLLM's detector reads. Public face: :mod:`wmspec_jax.interop.engine_gumbel` (:class:`VllmGumbelScheme`)."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import jax.numpy as jnp

from wmspec_jax import prf
from wmspec_jax.decoders.base import GUMBEL
from wmspec_jax.decoders.gumbel_scheme import gumbel_max_index
from wmspec_jax.decoders.kernels import candidate_tokens
from wmspec_jax.interop._engine_scheme import EngineScheme
from wmspec_jax.interop.engine_gumbel._config import VllmDualKeyGumbelConfig, VllmGumbelConfig, key_words
from wmspec_jax.interop.engine_gumbel._jax import _jax_context_state, _jax_token_uniforms


@dataclasses.dataclass(frozen=True)
class VllmGumbelScheme(EngineScheme):
    """S(P, ζ) of vLLM's ``gumbel`` sampler: the token maximising log(u_w) / P_w (Eq. 2; vLLM writes the
    same argmax as logits − log(−log u)) with u_w vLLM's Philox uniforms, over the loop's processed
    distribution (temperature, top-k), as vLLM samples after its sampling parameters. Both forms pick the
    same token up to float rounding on near ties (``docs/interop.md``).

    Seeds (:meth:`context_seeds`, uint32[..., 6]): vLLM's Philox state of the ``context_width`` previous
    tokens (``-1`` before the generation's start: vLLM keys by output tokens only) under the stream's key,
    XOR the row's key words of the stream (repeated over the four words), then the stream's key as two
    words. The key is the configuration's for both streams under ``gumbel``; under ``dual_key_gumbel``
    the draft stream takes key A and the target stream key B, as vLLM's own speculative decoding draws
    draft tokens with key A and the target's recovery and bonus tokens with key B. The tools pass zero
    target words (:meth:`wmspec_jax.interop.foreign.ForeignScheme.stream_keys`), so ζ^T is vLLM's own;
    other target words give an independent copy of it (the law tests draw one per row).

    The repeated-context rule is the loop's (a context seen earlier in the text is not watermarked),
    vLLM's ``single_turn`` deduplication; its ``all`` and ``none`` scopes are not reproduced (refused).
    ``dual_key_gumbel`` without a draft (``basic``) draws every token with key B, where vLLM draws key B
    with probability α and key A otherwise; ``wmspec-generate`` refuses it.

    Attributes:
      config: vLLM's ``gumbel`` or ``dual_key_gumbel`` configuration (it holds the key; the repr shows its
        fingerprint).
    """

    config: VllmGumbelConfig
    engine_title: ClassVar[str] = "vLLM's watermark"
    kind: ClassVar[str] = "vllm-gumbel"
    family: ClassVar[str] = GUMBEL
    context_fill: ClassVar[int] = -1

    def __post_init__(self):
        if not isinstance(self.config, VllmGumbelConfig):
            raise TypeError(f"expected vLLM's watermark configuration, got {type(self.config).__name__}")
        if self.config.deduplicate_contexts != "single_turn":
            raise ValueError("the generation loop's repeated-context rule is vLLM's deduplicate_contexts="
                             f"'single_turn', got {self.config.deduplicate_contexts!r}")

    @property
    def own_context_width(self) -> int:
        return self.config.context_width

    @property
    def dual_key(self) -> bool:
        """Draft and target streams under vLLM's keys A and B (``dual_key_gumbel``)."""
        return isinstance(self.config, VllmDualKeyGumbelConfig)

    label = property(lambda self: f"vLLM {self.config.algorithm} (key {self.config.fingerprint})")

    def stream_key(self, stream: int) -> int:
        """The 64-bit Philox key of ``stream``: the configuration's, or under ``dual_key_gumbel`` key A for
        the draft stream and key B for the target stream."""
        if not self.dual_key:
            return self.config.key
        return self.config.key_a if stream == prf.Stream.DRAFT else self.config.key_b

    def context_seeds(self, keys, contexts, stream):
        k0, k1 = (jnp.uint32(w) for w in key_words(self.stream_key(stream)))
        keys = jnp.asarray(keys, jnp.uint32)
        state = _jax_context_state(k0, k1, contexts) ^ jnp.concatenate([keys, keys], axis=-1)
        key = jnp.broadcast_to(jnp.stack([k0, k1]), state.shape[:-1] + (2,))
        return jnp.concatenate([state, key], axis=-1)

    def sibling_seeds(self, seeds, candidate):
        return jnp.concatenate([prf.candidate_seeds(seeds[..., :2], candidate),
                                prf.candidate_seeds(seeds[..., 2:4], candidate), seeds[..., 4:]], axis=-1)

    def uniforms(self, seeds, tokens):
        """vLLM's u of ``tokens`` (uint32, broadcast against ``seeds[..., 0]``) at seeds uint32[..., 6]: float32."""
        return _jax_token_uniforms(seeds[..., 4], seeds[..., 5], seeds[..., :4], tokens)

    def watermark_index(self, weights, ids, seeds, uniform=None):
        return gumbel_max_index(weights, self.uniforms(seeds[:, None, :], candidate_tokens(weights, ids)))


__all__ = ["VllmGumbelScheme"]
