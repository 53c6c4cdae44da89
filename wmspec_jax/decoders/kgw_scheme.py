"""KGW (Kirchenbauer et al. 2023), beyond the paper: the field's most common scheme and the biased reference.

A keyed green list of exactly ⌊γV⌋ tokens (as their code, transformers' ``WatermarkLogitsProcessor`` and
MarkLLM make it) whose raw logits get + δ before temperature and top-k, as Kirchenbauer et al.'s reference
code does by handing its processor to ``generate``, which applied logits processors before the
temperature and top-k warpers (at temperature T the effective bias is δ / T); the token is then drawn with
private randomness. transformers' own ``watermarking_config`` (5.x) appends the processor after the
warpers instead (δ at every temperature, top-k's dropped tokens stay out):
:mod:`wmspec_jax.interop.hf_kgw` reproduces that order. Biased (E_ζ[S(P, ζ)] ≠ P): the generation loop applies it to the target's and
the draft's logits alike (:attr:`~wmspec_jax.decoders.base.WatermarkDecoder.target_stream_statistic`:
one green list, the target stream's, for both), so that speculative sampling reproduces KGW's own law
(``docs/decoders.md``). The list is the first ⌊γV⌋ places of a keyed permutation of the vocabulary
(:func:`wmspec_jax.prf.keyed_permutation`: the vocabulary sorted by keyed hashes) seeded by the h
previous tokens of the target stream; transformers seeds torch's generator from the last token
(``lefthash``) or the token itself (``selfhash``): :mod:`wmspec_jax.interop.hf_kgw` reproduces that.
PRF v1 texts had a random-size list (each token green with probability γ, from Gumbel-max's uniform).
Texts are scored by the green count (:mod:`wmspec_jax.detect.kgw`).
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from wmspec_jax import prf, validation
from wmspec_jax.decoders.base import DEFAULT_KGW_DELTA, DEFAULT_KGW_GAMMA, KGW, WatermarkDecoder, check_real
from wmspec_jax.decoders.kernels import _float, inverse_cdf


@dataclasses.dataclass(frozen=True)
class KGWDecoder(WatermarkDecoder):
    """KGW with green fraction ``gamma`` = γ in (0, 1) and logit bias ``delta`` = δ in [0, 64]."""

    gamma: float = DEFAULT_KGW_GAMMA
    delta: float = DEFAULT_KGW_DELTA
    kind: ClassVar[str] = KGW
    record_fields: ClassVar[tuple] = ("kgw_gamma", "kgw_delta")
    family: ClassVar[str] = KGW
    biased: ClassVar[bool] = True
    private_sampling: ClassVar[bool] = True
    target_stream_statistic: ClassVar[bool] = True
    statistic_needs_vocab: ClassVar[bool] = True

    def __post_init__(self):
        object.__setattr__(self, "gamma", check_real("gamma", self.gamma, 0.0, 1.0, "KGW", (False, False)))
        object.__setattr__(self, "delta", check_real("delta", self.delta, 0.0, 64.0, "KGW"))

    @classmethod
    def build(cls, num_layers=None, alpha=None, gamma=DEFAULT_KGW_GAMMA, delta=DEFAULT_KGW_DELTA, options=None):
        return cls(gamma, delta)

    name = property(lambda self: f"kgw_g{self.gamma:g}_d{self.delta:g}")
    label = property(lambda self: f"KGW(γ={self.gamma:g}, δ={self.delta:g})")

    def settings(self) -> dict:
        return {"kgw_gamma": self.gamma, "kgw_delta": self.delta}

    @classmethod
    def from_settings(cls, record) -> "KGWDecoder":
        g, d = record.get("kgw_gamma"), record.get("kgw_delta")
        return cls(DEFAULT_KGW_GAMMA if g is None else g, DEFAULT_KGW_DELTA if d is None else d)

    def bias(self, logits, seeds, active):
        """KGW's logits before temperature and top-k: logits + δ on the ⌊γV⌋ green tokens where ``active``.

        Args:
          logits: float[..., V] a model's raw logits.
          seeds: uint32[..., 2] the TARGET stream's seeds of the position (the green list is the target
            stream's for draft and target alike).
          active: bool[...] distributions whose context is new (the repeated-context rule).

        Returns:
          float32[..., V].
        """
        x = _float(logits)
        size = x.shape[-1]
        green = prf.first_in_permutation(seeds, size, green_list_size(self.gamma, size))
        return jnp.where(green & active[..., None], x + jnp.float32(self.delta), x)

    def watermark_index(self, weights, ids, seeds, uniform=None):
        """The weights are already biased (:meth:`bias`): a private draw from them."""
        self.check_uniform(uniform)
        return inverse_cdf(weights, _float(uniform))

    def vocab_zeta(self, seeds, vocab_size: int):
        raise ValueError("KGW is biased: the trade-off curves (Sec. 3) are defined for unbiased decoders")

    def token_statistic(self, seeds, tokens, *, version: str, vocab_size: int):
        """π(w_t), the token's place in the keyed permutation (green when < ⌊γV⌋); v1: its uniform."""
        if version == prf.PRF_V1:
            return prf.token_uniforms(seeds, tokens)
        return prf.keyed_permutation(seeds, tokens, vocab_size).astype(jnp.float32)


def kgw_decoder(gamma: float = DEFAULT_KGW_GAMMA, delta: float = DEFAULT_KGW_DELTA) -> KGWDecoder:
    return KGWDecoder(gamma, delta)


def green_list_size(gamma: float, vocab_size: int) -> int:
    """k = ⌊γV⌋, the size of KGW's green list (``int(vocab_size * greenlist_ratio)`` in transformers);
    ValueError unless 1 <= k < V."""
    k = int(int(vocab_size) * float(gamma))
    if not 1 <= k < int(vocab_size):
        raise ValueError(f"KGW's green list ⌊γV⌋ = {k} must hold between 1 and V − 1 tokens (γ={gamma}, V={vocab_size})")
    return k


def kgw_green(ranks: jax.Array, gamma, vocab_size: int) -> jax.Array:
    """KGW's green list from the tokens' places π(w) in the keyed permutation: bool[...], green when
    π(w) < ⌊γV⌋ — exactly ⌊γV⌋ green tokens per position."""
    return jnp.asarray(ranks).astype(jnp.int32) < green_list_size(gamma, vocab_size)


def kgw(probs: jax.Array, ranks: jax.Array, gamma, delta) -> jax.Array:
    """KGW decoder (Kirchenbauer et al. 2023): P_ζ ∝ P · exp(δ · green), green = :func:`kgw_green`
    (at temperature 1; the loop adds δ to the logits before temperature, :meth:`WatermarkDecoder.bias`).

    Biased: E_ζ[P_ζ] ≠ P unless δ = 0. Over green lists uniform among the ⌊γV⌋-subsets of the
    vocabulary, E[P_ζ(w)] has no closed form in general; tests enumerate small vocabularies.

    Args:
      probs: float[..., V] P; ranks: int[..., V] a permutation of [0, V) (π(w) per token);
      gamma in (0, 1) with 1 <= ⌊γV⌋ < V; delta >= 0.

    Returns:
      float32[..., V] P_ζ.
    """
    validation.check_probs(probs)
    if jnp.shape(ranks) != jnp.shape(probs):
        raise ValueError(f"ranks shape {jnp.shape(ranks)} != probs shape {jnp.shape(probs)}")
    r = validation.concrete(ranks)
    if r is not None and not np.array_equal(np.sort(np.asarray(r), axis=-1),
                                            np.broadcast_to(np.arange(np.shape(r)[-1]), np.shape(r))):
        raise ValueError("ranks must be a permutation of 0..V-1 along the last axis")
    p = _float(probs)
    w = p * jnp.where(kgw_green(ranks, gamma, p.shape[-1]), jnp.exp(_float(delta)), 1.0)
    return w / jnp.sum(w, axis=-1, keepdims=True)


__all__ = ["KGWDecoder", "green_list_size", "kgw", "kgw_decoder", "kgw_green"]
