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
from wmspec_jax.interop.engine_gumbel._config import VllmGumbelConfig, key_words
from wmspec_jax.interop.engine_gumbel._jax import _jax_context_state, _jax_token_uniforms


@dataclasses.dataclass(frozen=True)
class VllmGumbelScheme(EngineScheme):
    """S(P, ζ) of vLLM's ``gumbel`` sampler: the token maximising log(u_w) / P_w (Eq. 2; vLLM writes the
    same argmax as logits − log(−log u)) with u_w vLLM's Philox uniforms, over the loop's processed
    distribution (temperature, top-k), as vLLM samples after its sampling parameters. Both forms pick the
    same token up to float rounding on near ties (``docs/interop.md``).

    Seeds (:meth:`context_seeds`, uint32[..., 4]): vLLM's Philox state of the ``context_width`` previous
    tokens (``-1`` before the generation's start: vLLM keys by output tokens only) under its key, XOR
    the row's key words of the stream (repeated over the four words). The tools pass zero target words
    (:meth:`wmspec_jax.interop.foreign.ForeignScheme.stream_keys`), so ζ^T is vLLM's own, and derived
    words for the draft stream, an independent stream of the same construction; other target words
    give an independent copy of ζ^T (the law tests draw one per row).

    The repeated-context rule is the loop's (a context seen earlier in the text is not watermarked),
    vLLM's ``single_turn`` deduplication; its ``all`` and ``none`` scopes and the dual-key algorithm
    are not reproduced in generation (refused).

    Attributes:
      config: vLLM's ``gumbel`` configuration (it holds the key; the repr shows its fingerprint).
    """

    config: VllmGumbelConfig
    engine_title: ClassVar[str] = "vLLM's gumbel"
    kind: ClassVar[str] = "vllm-gumbel"
    family: ClassVar[str] = GUMBEL
    context_fill: ClassVar[int] = -1

    def __post_init__(self):
        if type(self.config) is not VllmGumbelConfig:
            raise ValueError(f"the generation loop reproduces vLLM's single-key 'gumbel' algorithm, got "
                             f"{getattr(self.config, 'algorithm', type(self.config).__name__)!r}")
        if self.config.deduplicate_contexts != "single_turn":
            raise ValueError("the generation loop's repeated-context rule is vLLM's deduplicate_contexts="
                             f"'single_turn', got {self.config.deduplicate_contexts!r}")

    @property
    def own_context_width(self) -> int:
        return self.config.context_width

    label = property(lambda self: f"vLLM gumbel (key {self.config.fingerprint})")

    def _key(self):
        k0, k1 = key_words(self.config.key)
        return jnp.uint32(k0), jnp.uint32(k1)

    def context_seeds(self, keys, contexts, stream):
        del stream  # every stream is vLLM's construction; the row's words tell them apart
        keys = jnp.asarray(keys, jnp.uint32)
        return _jax_context_state(*self._key(), contexts) ^ jnp.concatenate([keys, keys], axis=-1)

    def sibling_seeds(self, seeds, candidate):
        return jnp.concatenate([prf.candidate_seeds(seeds[..., :2], candidate),
                                prf.candidate_seeds(seeds[..., 2:], candidate)], axis=-1)

    def uniforms(self, seeds, tokens):
        """vLLM's u of ``tokens`` (uint32, broadcast against ``seeds[..., 0]``) at seeds uint32[..., 4]: float32."""
        return _jax_token_uniforms(*self._key(), seeds, tokens)

    def watermark_index(self, weights, ids, seeds, uniform=None):
        return gumbel_max_index(weights, self.uniforms(seeds[:, None, :], candidate_tokens(weights, ids)))


__all__ = ["VllmGumbelScheme"]
