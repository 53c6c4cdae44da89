"""transformers' KGW (lefthash) as a watermark decoder of the generation loop: its green lists (torch's
MT19937 ``randperm`` seeded by the hashing key times the last token) bias draft and target alike, so
basic sampling, Alg. 1 and the other speculative methods generate texts transformers' detector reads.
Public face: :mod:`wmspec_jax.interop.hf_kgw` (:class:`HFKGWScheme`)."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import jax.numpy as jnp

from wmspec_jax.decoders.base import KGW
from wmspec_jax.decoders.kernels import _float, inverse_cdf
from wmspec_jax.interop._engine_scheme import EngineScheme
from wmspec_jax.interop.hf_kgw._config import HFKGWConfig, _check_config, _k
from wmspec_jax.interop.hf_kgw._mt19937 import _fy_green_set_jax, _mt_draws_jax
from wmspec_jax.interop.hf_kgw._seeding import _key_words, _lefthash_seed32


@dataclasses.dataclass(frozen=True)
class HFKGWScheme(EngineScheme):
    """transformers' ``WatermarkLogitsProcessor`` (lefthash): ``bias`` added to the green tokens of the
    scores after the sampling warpers (temperature, top-k), at every position, then a draw with the
    engine's ordinary randomness. The loop follows that order and rule (:attr:`bias_stage`
    ``"processed"``, :attr:`bias_repeats`): the green list of a context is the target stream's for draft
    and target alike, so speculative sampling between the biased Q and P emits the biased P's law.

    Seeds (:meth:`context_seeds`, uint32[..., 2]): word 0 is the 32-bit MT19937 seed transformers
    draws the green list with, ``(hashing_key * last token) mod (2**64 - 1)`` folded to 32 bits, XOR
    the row's target key word 0. The tools pass zero words, so the green list is transformers' own;
    other words give an independent green list (the law tests draw one per row). The acceptance
    stream ζ^R keeps the loop's repeated-context rule.

    Attributes:
      config: transformers' settings (they hold the hashing key; the repr shows its fingerprint).
    """

    config: HFKGWConfig
    engine_title: ClassVar[str] = "transformers' KGW"
    kind: ClassVar[str] = "transformers-kgw"
    family: ClassVar[str] = KGW
    biased: ClassVar[bool] = True
    private_sampling: ClassVar[bool] = True
    target_stream_statistic: ClassVar[bool] = True
    bias_stage: ClassVar[str] = "processed"
    bias_repeats: ClassVar[bool] = True

    def __post_init__(self):
        _check_config(self.config)
        if self.config.seeding_scheme != "lefthash":
            raise ValueError(f"the generation loop reproduces transformers' KGW with seeding_scheme 'lefthash', got "
                             f"{self.config.seeding_scheme!r}")

    @property
    def own_context_width(self) -> int:
        return self.config.context_width

    label = property(lambda self: f"transformers KGW (γ={self.config.greenlist_ratio:g}, δ={self.config.bias:g}, "
                                  f"key {self.config.fingerprint})")

    def context_seeds(self, keys, contexts, stream):
        del stream  # one green list per context: the target stream's for draft and target
        k0, k1 = _key_words(self.config)
        last = jnp.asarray(contexts)[..., -1].astype(jnp.uint32)
        seed = _lefthash_seed32(jnp, jnp.uint32(k0), jnp.uint32(k1), last) ^ jnp.asarray(keys, jnp.uint32)[..., 0]
        return jnp.stack([seed, jnp.zeros_like(seed)], axis=-1)

    def green(self, seeds, vocab_size: int):
        """bool[..., V]: transformers' green list of each position (seeds uint32[..., 2])."""
        k = _k(self.config, vocab_size)
        flat = seeds[..., 0].reshape(-1)
        raw = _mt_draws_jax(flat, k)
        i = jnp.arange(k, dtype=jnp.uint32)
        j = (i + raw % (jnp.uint32(vocab_size) - i)).astype(jnp.int32)
        return _fy_green_set_jax(j, vocab_size).reshape(seeds.shape[:-1] + (vocab_size,))

    def bias(self, logits, seeds, active):
        """``logits + bias`` on the green tokens where ``active``: float32[..., V] (the loop adds it to the
        distribution after temperature and top-k, :attr:`bias_stage`)."""
        x = _float(logits)
        green = self.green(seeds, x.shape[-1])
        return jnp.where(green & active[..., None], x + jnp.float32(self.config.bias), x)

    def watermark_index(self, weights, ids, seeds, uniform=None):
        """The weights are already biased (:meth:`bias`): a private draw from them."""
        self.check_uniform(uniform)
        return inverse_cdf(weights, _float(uniform))


__all__ = ["HFKGWScheme"]
