"""Unbiased watermark decoders S(P, ζ) as pure, jit/vmap-able functions.

Each decoder maps a next-token distribution ``probs[..., V]`` and pseudorandom
numbers ζ to a modified distribution P_ζ with E_ζ[P_ζ] = P (Sec. 2):

* :func:`gumbel_max` — Eq. (2), ζ = (U_w) i.i.d. uniforms; a point mass.
* :func:`synthid` — Eq. (3)-(4), the two-candidate tournament with m layers
  of Bernoulli(1/2) g-values.
* :func:`synthid_limit` — the m = ∞ limit as App. C.1 approximates it: m
  layers, then the one-hot of the most likely token.
* :func:`inverse_transform` — beyond the paper: inverse-transform sampling
  (Kuditipudi et al. 2023), ζ = (π, u) a keyed permutation and a keyed
  uniform; the token whose interval of the π-ordered CDF holds u. Unbiased and
  degenerate (the same law over ζ as Hu et al.'s δ-reweight).
* :func:`dipmark` — beyond the paper: DiPmark (Wu et al. 2024), ζ = π; the
  π-ordered CDF F reweighted to max(F − α, 0) + max(F − (1 − α), 0).
  Unbiased, not degenerate; α = 1/2 is Hu et al. (2024)'s γ-reweight
  (``"gamma_reweight"``). As Wu et al. publish it, the token is then drawn
  from the reweighted distribution with private (true) randomness: the
  generation loop passes the draw's true-random uniform
  (:meth:`WatermarkDecoder.watermark_index`), so two runs with one secret and
  different true-randomness keys give different texts.
* :func:`kgw` — beyond the paper, the field's most common scheme and the
  biased reference: Kirchenbauer et al. (2023), a keyed green list of exactly
  ⌊γV⌋ tokens (as their code, transformers' ``WatermarkLogitsProcessor`` and
  MarkLLM make it) whose logits get + δ before temperature and top-k (as
  transformers applies its logits processor before the warpers: at
  temperature T the effective bias is δ / T), the token then drawn with
  private randomness. Biased (E_ζ[S(P, ζ)] ≠ P): the generation loop applies
  it to the target's and the draft's logits alike, so that speculative
  sampling reproduces KGW's own law (``docs/decoders.md``). The list is the
  first ⌊γV⌋ values of a keyed permutation of the vocabulary
  (:func:`wmspec_jax.prf.keyed_permutation`: the vocabulary sorted by keyed
  hashes) seeded by the h previous tokens
  of the target stream; transformers seeds torch's generator from the last
  token (``lefthash``) or the token itself (``selfhash``):
  :mod:`wmspec_jax.interop.hf_kgw` reproduces that.
* :func:`identity` and :func:`linear_mixture` ((1 − θ) Id + θ S, Eq. 9).

The keyed permutation π orders tokens by their 32-bit hash in a lane of the
scheme's own (PRF v2; v1 used Gumbel-max's token lane, so one secret gave the
schemes correlated streams), ties broken by candidate position; u is the
stream's per-position uniform. Both decoders' published
versions draw π from a key per position the same way (a permutation of the
vocabulary seeded by the context); the hash order is our construction of it,
and a tie (two tokens with the same 32-bit hash, probability ~V²/2³³ per
position) makes π not exactly uniform, a bias of that order in DiPmark's law
(none in inverse transform's, which is unbiased for any order).

Each scheme is a module of this package (:mod:`.gumbel_scheme`, :mod:`.synthid_scheme`,
:mod:`.permutation_schemes`, :mod:`.kgw_scheme`) holding its kernels and its
:class:`~wmspec_jax.decoders.base.WatermarkDecoder` subclass, which says what generation
(:mod:`wmspec_jax.speculative`), detection, the trade-off curves (:mod:`wmspec_jax.tradeoff`), the
records and the tools need of it (:mod:`.base`); :data:`SCHEMES` registers them. A new scheme is one
module and one :func:`register` call (a user's own module, or one line of :data:`SCHEMES`).
``WatermarkDecoder(kind, ...)`` builds any registered scheme by name. Nothing outside a scheme's
module compares scheme kinds.

:func:`sample_token` turns any decoder output plus one uniform of the same
stream into a token (inverse CDF), so that a watermarked token is a
deterministic function of ζ. :func:`process_logits` applies temperature and
top-k identically for every model before any decoder.

The public functions check their inputs when the values are concrete; the
generation loop and the Monte Carlo code call the unchecked kernels
(:func:`gumbel_max_token`, :func:`tournament_packed`, :func:`inverse_cdf`).
"""


from __future__ import annotations

from wmspec_jax.decoders import base
from wmspec_jax.decoders.base import (  # noqa: F401  (the package's public names)
    DEFAULT_DIPMARK_ALPHA,
    DEFAULT_KGW_DELTA,
    DEFAULT_KGW_GAMMA,
    FAMILIES,
    GUMBEL,
    KGW,
    SETTINGS_FIELDS,
    SYNTHID,
    WatermarkDecoder,
    from_settings,
    kinds,
    make,
    names,
    register,
    scheme_class,
    statistics,
    unregister,
)
from wmspec_jax.decoders.gumbel_scheme import GumbelMax, gumbel, gumbel_max, gumbel_max_index, gumbel_max_token  # noqa: F401
from wmspec_jax.decoders.kernels import (  # noqa: F401
    _float,
    _one_hot_like,
    check_temperature,
    check_top_k,
    first_argmax,
    identity,
    inverse_cdf,
    linear_mixture,
    process_logits,
    sample_token,
    top_k_mask,
)
from wmspec_jax.decoders.kgw_scheme import KGWDecoder, green_list_size, kgw, kgw_decoder, kgw_green  # noqa: F401
from wmspec_jax.decoders.permutation_schemes import (  # noqa: F401
    DIPMARK,
    GAMMA_REWEIGHT,
    INVERSE_TRANSFORM,
    DiPmark,
    InverseTransform,
    alignment_value,
    dipmark,
    dipmark_decoder,
    dipmark_sorted,
    inverse_transform,
    inverse_transform_decoder,
    inverse_transform_index,
    permutation,
)
from wmspec_jax.decoders.synthid_scheme import (  # noqa: F401
    MAX_SYNTHID_LAYERS,
    SYNTHID_LIMIT,
    SynthID,
    SynthIDLimit,
    synthid,
    synthid_decoder,
    synthid_limit,
    synthid_limit_decoder,
    tournament,
    tournament_layer,
    tournament_packed,
)

SCHEMES = (GumbelMax, SynthID, SynthIDLimit, InverseTransform, DiPmark, KGWDecoder)
"""The built-in schemes, registered in this order (:func:`register`)."""
for _scheme in SCHEMES:
    register(_scheme)

DECODER_KINDS = (GUMBEL, SYNTHID, SYNTHID_LIMIT, INVERSE_TRANSFORM, DIPMARK, KGW)
DECODER_NAMES = DECODER_KINDS + (GAMMA_REWEIGHT,)
"""The built-in names :meth:`WatermarkDecoder.from_name` accepts (``"gamma_reweight"`` is DiPmark with
α = 1/2); :func:`names` adds the schemes registered since."""
STATISTICS = (GUMBEL, SYNTHID, INVERSE_TRANSFORM, DIPMARK, KGW)
"""The built-in schemes' per-token statistics (:attr:`WatermarkDecoder.statistic`); :func:`statistics`
adds the schemes registered since."""


def _from_name(name: str, num_layers: int = 30, alpha: float = DEFAULT_DIPMARK_ALPHA,
               gamma: float = DEFAULT_KGW_GAMMA, delta: float = DEFAULT_KGW_DELTA, options=None) -> WatermarkDecoder:
    """The scheme a settings or command-line name gives (:func:`names`), with the settings it has; ValueError
    for an unknown name."""
    if name not in names():
        raise ValueError(f"unknown decoder {name!r}; known: {', '.join(names())}")
    return make(name, num_layers, alpha, gamma, delta, options)


WatermarkDecoder.from_name = staticmethod(_from_name)


__all__ = ["DECODER_KINDS", "DECODER_NAMES", "DEFAULT_DIPMARK_ALPHA", "DEFAULT_KGW_DELTA", "DEFAULT_KGW_GAMMA",
           "DIPMARK", "DiPmark", "FAMILIES", "GAMMA_REWEIGHT", "GUMBEL", "GumbelMax", "INVERSE_TRANSFORM",
           "InverseTransform", "KGW", "KGWDecoder", "MAX_SYNTHID_LAYERS", "SCHEMES", "SETTINGS_FIELDS", "STATISTICS",
           "SYNTHID", "SYNTHID_LIMIT", "SynthID", "SynthIDLimit", "WatermarkDecoder", "alignment_value",
           "check_temperature", "check_top_k", "dipmark", "dipmark_decoder", "dipmark_sorted", "first_argmax",
           "from_settings", "green_list_size", "gumbel", "gumbel_max", "gumbel_max_index", "gumbel_max_token",
           "identity", "inverse_cdf", "inverse_transform", "inverse_transform_decoder", "inverse_transform_index",
           "kgw", "kgw_decoder", "kgw_green", "kinds", "linear_mixture", "make", "names", "permutation",
           "process_logits", "register", "sample_token", "scheme_class", "statistics", "synthid", "synthid_decoder",
           "synthid_limit", "synthid_limit_decoder", "top_k_mask", "tournament", "tournament_layer",
           "tournament_packed", "unregister"]
