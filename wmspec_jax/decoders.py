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
  (``"gamma_reweight"``).
* :func:`kgw` — beyond the paper, the field's most common scheme and the
  biased reference: Kirchenbauer et al. (2023), a keyed green list (a γ
  fraction of the vocabulary) whose logits get + δ. Biased (E_ζ[S(P, ζ)] ≠
  P): the generation loop applies it to the target's and the draft's
  distributions alike, so that speculative sampling reproduces KGW's own law
  (``docs/decoders.md``).
* :func:`identity` and :func:`linear_mixture` ((1 − θ) Id + θ S, Eq. 9).

The keyed permutation π orders tokens by their 32-bit hash in the stream's
token lane (the value Gumbel-max turns into U_w), ties broken by candidate
position; u is the stream's per-position uniform. Both decoders' published
versions draw π from a key per position the same way (a permutation of the
vocabulary seeded by the context); the hash order is our construction of it,
and a tie (two tokens with the same 32-bit hash, probability ~V²/2³³ per
position) makes π not exactly uniform, a bias of that order in DiPmark's law
(none in inverse transform's, which is unbiased for any order).

:class:`WatermarkDecoder` is the one static description of a decoder, used by
generation (:mod:`wmspec_jax.speculative`), detection and the trade-off
curves (:mod:`wmspec_jax.tradeoff`), and it carries what differs between
decoders: how a watermarked token is drawn from the keyed stream
(:meth:`~WatermarkDecoder.watermark_index`), the ζ of the trade-off Monte
Carlo and S(P, ζ) on it (:meth:`~WatermarkDecoder.vocab_zeta`,
:meth:`~WatermarkDecoder.apply`, :meth:`~WatermarkDecoder.point`), which
statistic family detection recomputes (:attr:`~WatermarkDecoder.family`;
:func:`wmspec_jax.detect.statistics`) and its names. Nothing outside this
module compares decoder kinds.

:func:`sample_token` turns any decoder output plus one uniform of the same
stream into a token (inverse CDF), so that a watermarked token is a
deterministic function of ζ. :func:`process_logits` applies temperature and
top-k identically for every model before any decoder.

The public functions check their inputs when the values are concrete; the
generation loop and the Monte Carlo code call the unchecked kernels
(:func:`gumbel_max_token`, :func:`tournament_packed`, :func:`inverse_cdf`).
"""

from __future__ import annotations

import dataclasses
import math
import numbers

import jax
import jax.numpy as jnp
import numpy as np

from wmspec_jax import prf, validation

GUMBEL = "gumbel"
SYNTHID = "synthid"
SYNTHID_LIMIT = "synthid_limit"
INVERSE_TRANSFORM = "inverse_transform"
DIPMARK = "dipmark"
GAMMA_REWEIGHT = "gamma_reweight"
KGW = "kgw"
DECODER_KINDS = (GUMBEL, SYNTHID, SYNTHID_LIMIT, INVERSE_TRANSFORM, DIPMARK, KGW)
DECODER_NAMES = DECODER_KINDS + (GAMMA_REWEIGHT,)
"""Names :meth:`WatermarkDecoder.from_name` accepts (``"gamma_reweight"`` is DiPmark with α = 1/2)."""
FAMILIES = (GUMBEL, SYNTHID, KGW)
"""Which detectors score a text of each kind: those on one uniform per token and stream (Gumbel-max's
U_w, and the other uniform-valued statistics: :data:`STATISTICS`), those on SynthID's g-values
(both SynthID kinds: the m = ∞ approximation draws from the same g-values), or KGW's green count."""
STATISTICS = (GUMBEL, SYNTHID, INVERSE_TRANSFORM, DIPMARK, KGW)
"""The per-token statistic detection recomputes (:attr:`WatermarkDecoder.statistic`): Gumbel-max's U_w,
SynthID's g-values, inverse transform's alignment value, DiPmark's permutation position, KGW's
target-stream key of the token (green when >= 1 − γ) (module :mod:`wmspec_jax.detect.streams`)."""
DEFAULT_DIPMARK_ALPHA = 0.45
"""DiPmark's α when none is given (the value Wu et al. 2024 recommend)."""
DEFAULT_KGW_GAMMA = 0.25
DEFAULT_KGW_DELTA = 2.0
"""KGW's green fraction γ and bias δ when none are given (Kirchenbauer et al. 2023's γ = 0.25, δ = 2)."""


MAX_SYNTHID_LAYERS = 256
"""Most SynthID tournament layers m: a token costs m g-values to generate and to score (the paper uses 30);
the bound keeps a malformed setting from asking for unbounded work."""


@dataclasses.dataclass(frozen=True)
class WatermarkDecoder:
    """Static description of an unbiased decoder S(P, ζ) (hashable).

    Attributes:
      kind: ``"gumbel"`` (Gumbel-max, Eq. 2), ``"synthid"`` (tournament with
        m layers, Eq. 3-4) or ``"synthid_limit"`` (m = ∞ as App. C.1
        approximates it: m layers, then the most likely token).
        ``"inverse_transform"`` or ``"dipmark"`` (``"gamma_reweight"`` is
        stored as DiPmark with α = 1/2).
      num_layers: tournament layers m (SynthID kinds; 0 for the others, so
        equal decoders compare and hash equal).
      alpha: DiPmark's α in [0, 1/2] (0.0 for the other kinds).
      gamma, delta: KGW's green fraction γ in (0, 1) and logit bias δ >= 0 (0.0 for the other kinds).
    """

    kind: str = GUMBEL
    num_layers: int = 30
    alpha: float = DEFAULT_DIPMARK_ALPHA
    gamma: float = DEFAULT_KGW_GAMMA
    delta: float = DEFAULT_KGW_DELTA

    def __post_init__(self):
        if self.kind == GAMMA_REWEIGHT:
            object.__setattr__(self, "kind", DIPMARK)
            object.__setattr__(self, "alpha", 0.5)
        if self.kind not in DECODER_KINDS:
            raise ValueError(f"decoder kind must be one of {DECODER_NAMES}, got {self.kind!r}")
        if self.kind == DIPMARK:
            a = self.alpha
            if isinstance(a, bool) or not isinstance(a, numbers.Real) or not 0.0 <= float(a) <= 0.5:
                raise ValueError(f"DiPmark needs alpha in [0, 1/2], got {a!r}")
            object.__setattr__(self, "alpha", float(a))
        else:
            object.__setattr__(self, "alpha", 0.0)
        if self.kind == KGW:
            g, d = self.gamma, self.delta
            for name, v, ok in (("gamma", g, lambda x: 0.0 < x < 1.0), ("delta", d, lambda x: 0.0 <= x <= 64.0)):
                if isinstance(v, bool) or not isinstance(v, numbers.Real) or not ok(float(v)):
                    raise ValueError(f"KGW needs gamma in (0, 1) and delta in [0, 64], got {name}={v!r}")
            object.__setattr__(self, "gamma", float(g))
            object.__setattr__(self, "delta", float(d))
        else:
            object.__setattr__(self, "gamma", 0.0)
            object.__setattr__(self, "delta", 0.0)
        if self.kind not in (SYNTHID, SYNTHID_LIMIT):
            object.__setattr__(self, "num_layers", 0)
            return
        m = self.num_layers
        if isinstance(m, bool) or not isinstance(m, numbers.Integral) or not 1 <= m <= MAX_SYNTHID_LAYERS:
            raise ValueError(f"SynthID needs an integer num_layers in [1, {MAX_SYNTHID_LAYERS}], got {m!r}")
        object.__setattr__(self, "num_layers", int(m))

    @property
    def degenerate(self) -> bool:
        """True when S(P, ζ) is a point mass for every ζ (Thm 3.2's equality case)."""
        return self.kind in (GUMBEL, SYNTHID_LIMIT, INVERSE_TRANSFORM)

    @property
    def biased(self) -> bool:
        """True when E_ζ[S(P, ζ)] ≠ P (KGW): the loop then applies :meth:`bias` to every distribution of a
        watermarking method, draft and target alike, and its tokens are drawn from the biased ones."""
        return self.kind == KGW

    def bias(self, z: jax.Array, ids, seeds: jax.Array, active: jax.Array) -> jax.Array:
        """KGW's logits: z + δ on the green candidates where ``active``: float32[B, C].

        Args:
          z: float32[..., C] processed logits of the candidates (−inf: excluded).
          ids: int32[..., C] candidate ids, or None for the whole vocabulary.
          seeds: uint32[..., 2] the TARGET stream's seeds of the position (the green list is the target
            stream's for draft and target alike).
          active: bool[...] distributions whose context is new (the repeated-context rule).
        """
        tokens = jnp.arange(z.shape[-1], dtype=jnp.uint32) if ids is None else ids.astype(jnp.uint32)
        green = kgw_green(prf.token_uniforms(seeds[..., None, :], tokens), self.gamma)
        return jnp.where(green & active[..., None], z + jnp.float32(self.delta), z)

    @property
    def _synthid(self) -> bool:
        return self.kind in (SYNTHID, SYNTHID_LIMIT)

    @property
    def name(self) -> str:
        """Short identifier for file names and JSON keys."""
        if self.kind == SYNTHID:
            return f"synthid_m{self.num_layers}"
        if self.kind == SYNTHID_LIMIT:
            return f"synthid_inf_m{self.num_layers}"
        if self.kind == DIPMARK:
            return GAMMA_REWEIGHT if self.alpha == 0.5 else f"dipmark_a{self.alpha:g}"
        if self.kind == KGW:
            return f"kgw_g{self.gamma:g}_d{self.delta:g}"
        return self.kind

    @property
    def label(self) -> str:
        """Human-readable label for tables and plots."""
        if self.kind == SYNTHID:
            return f"SynthID(m={self.num_layers})"
        if self.kind == SYNTHID_LIMIT:
            return "SynthID(m=∞)"
        if self.kind == DIPMARK:
            return "γ-reweight" if self.alpha == 0.5 else f"DiPmark(α={self.alpha:g})"
        if self.kind == KGW:
            return f"KGW(γ={self.gamma:g}, δ={self.delta:g})"
        return {GUMBEL: "Gumbel-max", INVERSE_TRANSFORM: "Inverse transform"}[self.kind]

    @classmethod
    def from_name(cls, name: str, num_layers: int = 30, alpha: float = DEFAULT_DIPMARK_ALPHA,
                  gamma: float = DEFAULT_KGW_GAMMA, delta: float = DEFAULT_KGW_DELTA) -> "WatermarkDecoder":
        """The decoder a settings or command-line name gives (:data:`DECODER_NAMES`): ``"synthid"``
        and ``"synthid_limit"`` with m = ``num_layers``, ``"dipmark"`` with ``alpha``,
        ``"gamma_reweight"`` (DiPmark, α = 1/2), ``"kgw"`` with ``gamma`` and ``delta``; ValueError
        otherwise."""
        if name not in DECODER_NAMES:
            raise ValueError(f"unknown decoder {name!r}; known: {', '.join(DECODER_NAMES)}")
        return cls(name, num_layers, alpha, gamma, delta)

    @property
    def statistic(self) -> str:
        """The per-token statistic detection recomputes for its texts (:data:`STATISTICS`): the kind,
        with both SynthID kinds on ``"synthid"`` (the same g-values) and every α on ``"dipmark"``."""
        return SYNTHID if self._synthid else self.kind

    @property
    def family(self) -> str:
        """The detectors of its texts (:data:`FAMILIES`): ``"synthid"`` (g-values) or ``"gumbel"``
        (one uniform per token and stream)."""
        return SYNTHID if self._synthid else KGW if self.kind == KGW else GUMBEL

    @property
    def family_label(self) -> str:
        """The decoder's name in tables, without settings: ``"SynthID"`` for both SynthID kinds, else
        :attr:`label`."""
        return "SynthID" if self._synthid else self.label

    @property
    def run_tag(self) -> str:
        """The decoder's part of an experiment run's name: ``"synthid<m>"`` or :attr:`name`."""
        return f"synthid{self.num_layers}" if self._synthid else self.name

    # -- generation -----------------------------------------------------------------------------

    def watermark_index(self, weights: jax.Array, ids, seeds: jax.Array) -> jax.Array:
        """A candidate drawn from S(P, ζ) as a deterministic function of ζ: int32[B].

        Gumbel-max (Eq. 2) is a point mass; SynthID (Eq. 3-4) is sampled by
        inverse CDF with the stream's per-position uniform (independent of its
        g-values), so the token is a function of the key and the context alone.
        Only the candidates' ζ values are hashed (one hash per candidate for
        Gumbel-max and per 32 layers for SynthID).

        Args:
          weights: float32[B, C] the (processed) distribution on its candidates.
          ids: int32[B, C] candidate token ids, or None for the whole vocabulary.
          seeds: uint32[B, 2] the stream's seeds of the position
            (:func:`wmspec_jax.sampling.position_seeds`).
        """
        tokens = (jnp.arange(weights.shape[-1], dtype=jnp.uint32) if ids is None else ids.astype(jnp.uint32))
        seeds = seeds[:, None, :]
        if self.kind == GUMBEL:
            return gumbel_max_index(weights, prf.token_uniforms(seeds, tokens))
        if self.kind in (INVERSE_TRANSFORM, DIPMARK):
            order = jnp.broadcast_to(prf.hash_values(seeds, tokens, prf.Lane.TOKEN_UNIFORM), weights.shape)
            return self._permuted_index(weights, order, prf.position_uniforms(seeds[:, 0]))
        if self.kind == KGW:  # the weights are already biased (:meth:`bias`): a keyed draw from them
            return inverse_cdf(weights, prf.position_uniforms(seeds[:, 0]))
        words = jnp.stack([prf.hash_values(seeds, tokens, prf.Lane.GBITS + b)
                           for b in range(-(-self.num_layers // prf.NUM_GBITS_PER_HASH))], axis=-1)
        decoded = tournament_packed(weights, words, self.num_layers)
        if self.kind == SYNTHID_LIMIT:
            return first_argmax(decoded)
        return inverse_cdf(decoded, prf.position_uniforms(seeds[:, 0]))

    # -- the trade-off Monte Carlo ---------------------------------------------------------------

    def vocab_zeta(self, seeds: jax.Array, vocab_size: int) -> jax.Array:
        """ζ over the whole vocabulary for n samples' seeds uint32[n, 2]: Gumbel-max float32[n, V]
        uniforms; SynthID uint32[n, V, W] packed g-values (bit l mod 32 of word l // 32 is g_l);
        inverse transform and DiPmark uint32[n, V + 1]: the V token hashes that order π, then the
        hash of the position uniform u. (KGW is biased: the trade-off curves are about unbiased
        decoders; ValueError.)"""
        if self.kind == KGW:
            raise ValueError("KGW is biased: the trade-off curves (Sec. 3) are defined for unbiased decoders")
        if self.kind == GUMBEL:
            return prf.vocab_uniforms(seeds, vocab_size)
        tokens = jnp.arange(vocab_size, dtype=jnp.uint32)
        if self.kind in (INVERSE_TRANSFORM, DIPMARK):
            order = prf.hash_values(seeds[:, None, :], tokens, prf.Lane.TOKEN_UNIFORM)
            position = prf.hash_values(seeds, jnp.uint32(0), prf.Lane.POSITION_UNIFORM)
            return jnp.concatenate([order, position[:, None]], axis=-1)
        words = [prf.hash_values(seeds[:, None, :], tokens, int(prf.Lane.GBITS) + b)
                 for b in range(-(-self.num_layers // prf.NUM_GBITS_PER_HASH))]
        return jnp.stack(words, axis=-1)

    def apply(self, probs: jax.Array, zeta: jax.Array) -> jax.Array:
        """S(P, ζ) for a batch of :meth:`vocab_zeta`: float32[n, V] (probs float[V] or [n, V])."""
        p = jnp.asarray(probs, jnp.float32)
        if self.kind == SYNTHID:
            return tournament_packed(jnp.broadcast_to(p, zeta.shape[:-1]), zeta, self.num_layers)
        if self.kind == DIPMARK:
            order = zeta[..., :-1]
            return dipmark(jnp.broadcast_to(p, order.shape), order, self.alpha)
        return jax.nn.one_hot(self.point(p, zeta), p.shape[-1], dtype=jnp.float32)

    def point(self, probs: jax.Array, zeta: jax.Array) -> jax.Array:
        """The token of a degenerate decoder, S(P, ζ) = δ_token: int32[n]; ValueError for finite-m
        SynthID, which has no single output token."""
        p = jnp.asarray(probs, jnp.float32)
        if self.kind == GUMBEL:
            return gumbel_max_token(jnp.log(p), zeta)
        if self.kind == SYNTHID_LIMIT:
            return first_argmax(tournament_packed(jnp.broadcast_to(p, zeta.shape[:-1]), zeta, self.num_layers))
        if self.kind == INVERSE_TRANSFORM:
            order = zeta[..., :-1]
            return inverse_transform_index(jnp.broadcast_to(p, order.shape), order, prf.to_uniform(zeta[..., -1]))
        raise ValueError(f"{self.label} is not degenerate; it has no single output token")

    def _permuted_index(self, weights: jax.Array, order: jax.Array, uniform: jax.Array) -> jax.Array:
        """Inverse transform's token, or a draw from DiPmark's reweighting by inverse CDF along π."""
        if self.kind == INVERSE_TRANSFORM:
            return inverse_transform_index(weights, order, uniform)
        perm = permutation(order)
        reweighted = dipmark_sorted(jnp.take_along_axis(_float(weights), perm, axis=-1), self.alpha)
        return jnp.take_along_axis(perm, inverse_cdf(reweighted, uniform)[..., None], axis=-1)[..., 0]


def gumbel() -> WatermarkDecoder:
    return WatermarkDecoder(GUMBEL)


def inverse_transform_decoder() -> WatermarkDecoder:
    return WatermarkDecoder(INVERSE_TRANSFORM)


def dipmark_decoder(alpha: float = DEFAULT_DIPMARK_ALPHA) -> WatermarkDecoder:
    return WatermarkDecoder(DIPMARK, alpha=alpha)


def kgw_decoder(gamma: float = DEFAULT_KGW_GAMMA, delta: float = DEFAULT_KGW_DELTA) -> WatermarkDecoder:
    return WatermarkDecoder(KGW, gamma=gamma, delta=delta)


def synthid_decoder(num_layers: int = 30) -> WatermarkDecoder:
    return WatermarkDecoder(SYNTHID, num_layers)


def synthid_limit_decoder(num_layers: int = 30) -> WatermarkDecoder:
    return WatermarkDecoder(SYNTHID_LIMIT, num_layers)


def _float(x) -> jax.Array:
    return jnp.asarray(x, jnp.float32)


def _one_hot_like(index: jax.Array, probs: jax.Array) -> jax.Array:
    return jax.nn.one_hot(index, probs.shape[-1], dtype=jnp.float32)


def first_argmax(x: jax.Array) -> jax.Array:
    """Index of the first maximum along the last axis: int32[...].

    Same result as ``jnp.argmax`` (NaN-free input), computed as a max and a
    min over indices, which XLA:CPU runs ~5x faster than its argmax reduction.
    """
    top = jnp.max(x, axis=-1, keepdims=True)
    size = x.shape[-1]
    idx = jnp.arange(size, dtype=jnp.int32)
    return jnp.min(jnp.where(x == top, idx, size), axis=-1).astype(jnp.int32)


# ---------------------------------------------------------------------------
# Gumbel-max (Eq. 2)
# ---------------------------------------------------------------------------


def gumbel_max_index(probs: jax.Array, uniforms: jax.Array) -> jax.Array:
    """argmax_w log(U_w) / P_w (Eq. 2) on probabilities, unchecked kernel.

    Args:
      probs: float[..., C] P (0 for excluded tokens, which never win:
        log(U_w) / 0 = −inf).
      uniforms: float[..., C] in (0, 1).

    Returns:
      int32[...] the first maximiser.
    """
    return first_argmax(jnp.log(_float(uniforms)) / _float(probs))


def gumbel_max_token(log_probs: jax.Array, uniforms: jax.Array) -> jax.Array:
    """argmax_w log(U_w) / P_w (Eq. 2) from log-probabilities, unchecked kernel.

    Args:
      log_probs: float[..., V] log P (−inf for excluded tokens).
      uniforms: float[..., V] in (0, 1).

    Returns:
      int32[...] the selected token (never one with P_w = 0).
    """
    return gumbel_max_index(jnp.exp(_float(log_probs)), uniforms)


def gumbel_max(probs: jax.Array, uniforms: jax.Array) -> jax.Array:
    """Gumbel-max decoder, Eq. (2): the point mass at argmax_w log(U_w) / P_w.

    Args:
      probs: float[..., V] next-token distribution P.
      uniforms: float[..., V] ζ = (U_w), i.i.d. U(0, 1).

    Returns:
      float32[..., V] one-hot P_ζ.
    """
    validation.check_probs(probs)
    if jnp.shape(uniforms) != jnp.shape(probs):
        raise ValueError(f"uniforms shape {jnp.shape(uniforms)} != probs shape {jnp.shape(probs)}")
    validation.check_unit_interval(uniforms, "uniforms", open_interval=True)
    p = _float(probs)
    return _one_hot_like(gumbel_max_token(jnp.log(p), uniforms), p)


# ---------------------------------------------------------------------------
# SynthID tournament (Eq. 3-4)
# ---------------------------------------------------------------------------


def tournament_layer(probs: jax.Array, g: jax.Array) -> jax.Array:
    """One tournament operator T_g, Eq. (4): P_w (1 + g_w − Σ_{w': g_w'=1} P_w').

    Args:
      probs: float32[..., V]; g: [..., V] in {0, 1} (bool or numeric).
    """
    won = jnp.asarray(g).astype(bool)
    mass_one = jnp.sum(jnp.where(won, probs, 0.0), axis=-1, keepdims=True)
    # written with `where` (1 + g − M is 2 − M or 1 − M exactly): ~6x faster
    # on XLA:CPU than the float multiply form and bit-identical to it
    return jnp.where(won, probs * (2.0 - mass_one), probs * (1.0 - mass_one))


def tournament(probs: jax.Array, g_values: jax.Array) -> jax.Array:
    """The m tournament layers of Eq. (3) without input checks (for jitted code).

    Args:
      probs: float[..., V]; g_values: {0,1}[..., m, V], layer 0 applied first.
    """
    g_layers = jnp.moveaxis(jnp.asarray(g_values), -2, 0)  # [m, ..., V]

    def body(p, g):
        return tournament_layer(p, g), None

    out, _ = jax.lax.scan(body, _float(probs), g_layers)
    return out


def tournament_packed(probs: jax.Array, words: jax.Array, num_layers: int) -> jax.Array:
    """Eq. (3) on packed g-values: bit (l mod 32) of ``words[..., l // 32]`` is g_l.

    The layout :func:`wmspec_jax.prf.hash_values` produces in lane
    ``GBITS + l // 32``; unpacking one layer per step keeps the memory at
    O(V) per distribution instead of O(m V).

    Args:
      probs: float[..., C] (candidate tokens, or the whole vocabulary).
      words: uint32[..., C, W], W = ceil(m / 32).
      num_layers: m (static).

    Returns:
      float32[..., C], the same values as :func:`tournament` on the unpacked bits.
    """

    def body(layer, p):
        word = jax.lax.dynamic_index_in_dim(words, layer // 32, axis=-1, keepdims=False)
        g = ((word >> (layer % 32).astype(jnp.uint32)) & jnp.uint32(1)) == 1
        return tournament_layer(p, g)

    return jax.lax.fori_loop(0, num_layers, body, _float(probs))


def synthid(probs: jax.Array, g_values: jax.Array, layers_axis: int | None = None) -> jax.Array:
    """SynthID decoder, Eq. (3): T_{g_m} ∘ ... ∘ T_{g_1}(P).

    Args:
      probs: float[..., V].
      g_values: {0,1}[..., m, V] (layer 0 applied first), or [..., V, m] with
        ``layers_axis=-1``. When m = V the two layouts have the same shape:
        then ``layers_axis`` (-2 or -1) must be given.
      layers_axis: where the layers are, -2 (default when unambiguous) or -1.

    Returns:
      float32[..., V] P_ζ (a distribution; unbiased over g ~ Bernoulli(1/2)).
    """
    validation.check_probs(probs)
    g = _g_layers_first(probs, g_values, layers_axis)
    return tournament(probs, g)


def synthid_limit(probs: jax.Array, g_values: jax.Array, layers_axis: int | None = None) -> jax.Array:
    """m = ∞ SynthID as approximated in App. C.1: apply the m given layers, then
    put all mass on the most likely token (the almost-sure limit is a point mass,
    Thm 3.3). Arguments as :func:`synthid`."""
    validation.check_probs(probs)
    p = tournament(probs, _g_layers_first(probs, g_values, layers_axis))
    return _one_hot_like(first_argmax(p), p)


def _g_layers_first(probs, g_values, layers_axis):
    gs, ps = jnp.shape(g_values), jnp.shape(probs)
    if len(gs) < 2:
        raise ValueError(f"g_values must be [..., m, V] with V={ps[-1]}, got shape {gs}")
    if layers_axis is None:
        if gs[-1] == gs[-2]:
            raise ValueError(
                f"g_values of shape {gs} are ambiguous (m = V = {gs[-1]}): pass layers_axis=-2 for "
                "[..., m, V] or layers_axis=-1 for [..., V, m]")
        layers_axis = -2
    if layers_axis not in (-2, -1):
        raise ValueError(f"layers_axis must be -2 or -1, got {layers_axis!r}")
    if layers_axis == -1:
        g_values = jnp.swapaxes(jnp.asarray(g_values), -1, -2)
        gs = jnp.shape(g_values)
    if gs[-1] != ps[-1]:
        raise ValueError(f"g_values must be [..., m, V] with V={ps[-1]}, got shape {gs}")
    g = validation.concrete(g_values)
    if g is not None and not np.all((g == 0) | (g == 1)):
        raise ValueError("g_values must be 0 or 1")
    return g_values


# ---------------------------------------------------------------------------
# Keyed permutations: inverse transform and DiPmark / γ-reweight
# ---------------------------------------------------------------------------


def permutation(order: jax.Array) -> jax.Array:
    """π as indices: the candidates sorted by their key ``order`` (ties by position): int32[..., C]."""
    return jnp.argsort(order, axis=-1, stable=True).astype(jnp.int32)


def inverse_transform_index(weights: jax.Array, order: jax.Array, uniform: jax.Array) -> jax.Array:
    """Inverse-transform sampling along π, unchecked kernel: the candidate whose interval of the
    π-ordered CDF holds u (Kuditipudi et al. 2023). Over u ~ U(0, 1) independent of π its law is P
    for every π, so the decoder is unbiased; given (π, u) it is a point mass.

    Args:
      weights: float[..., C] non-negative, not all zero.
      order: [..., C] the keys that order π (uint32 hashes or floats).
      uniform: float[...] u in [0, 1).

    Returns:
      int32[...] a candidate index (never one of zero weight).
    """
    perm = permutation(order)
    k = inverse_cdf(jnp.take_along_axis(_float(weights), perm, axis=-1), uniform)
    return jnp.take_along_axis(perm, k[..., None], axis=-1)[..., 0]


def dipmark_sorted(sorted_probs: jax.Array, alpha) -> jax.Array:
    """DiPmark's reweighting of a distribution already in π order: float32[..., C].

    With F_i the normalised π-ordered CDF (F_0 = 0), the new mass of the i-th token is
    g(F_i) − g(F_{i−1}) for g(x) = max(x − α, 0) + max(x − (1 − α), 0) (Wu et al. 2024, Eq. 3):
    the first α of the mass is removed and the last α doubled; averaged over a uniform π the
    result is P again.
    """
    p = _float(sorted_probs)
    cdf = jnp.cumsum(p, axis=-1)
    cdf = cdf / cdf[..., -1:]
    prev = jnp.concatenate([jnp.zeros_like(cdf[..., :1]), cdf[..., :-1]], axis=-1)
    a = _float(alpha)

    def g(x):
        return jnp.maximum(x - a, 0.0) + jnp.maximum(x - (1.0 - a), 0.0)

    return jnp.maximum(g(cdf) - g(prev), 0.0)


def inverse_transform(probs: jax.Array, order: jax.Array, uniform: jax.Array) -> jax.Array:
    """Inverse-transform decoder (Kuditipudi et al. 2023): the point mass at the token whose
    interval of the π-ordered CDF holds u.

    Args:
      probs: float[..., V] next-token distribution P.
      order: [..., V] keys whose ascending order is π (e.g. uniforms or uint32 hashes).
      uniform: float[...] u in [0, 1).

    Returns:
      float32[..., V] one-hot P_ζ.
    """
    validation.check_probs(probs)
    if jnp.shape(order) != jnp.shape(probs):
        raise ValueError(f"order shape {jnp.shape(order)} != probs shape {jnp.shape(probs)}")
    u = validation.concrete(uniform)
    if u is not None and (np.isnan(u).any() or (np.asarray(u) < 0).any() or (np.asarray(u) >= 1).any()):
        raise ValueError("inverse_transform: uniform must lie in [0, 1)")
    p = _float(probs)
    return _one_hot_like(inverse_transform_index(p, order, uniform), p)


def dipmark(probs: jax.Array, order: jax.Array, alpha) -> jax.Array:
    """DiPmark decoder (Wu et al. 2024); α = 1/2 is Hu et al. (2024)'s γ-reweight.

    Args:
      probs: float[..., V] next-token distribution P.
      order: [..., V] keys whose ascending order is π.
      alpha: in [0, 1/2].

    Returns:
      float32[..., V] P_π (a distribution in the original token order; unbiased over a uniform π).
    """
    validation.check_probs(probs)
    if jnp.shape(order) != jnp.shape(probs):
        raise ValueError(f"order shape {jnp.shape(order)} != probs shape {jnp.shape(probs)}")
    a = validation.concrete(alpha)
    if a is not None and not 0.0 <= float(a) <= 0.5:
        raise ValueError(f"DiPmark needs alpha in [0, 1/2], got {float(a)}")
    perm = permutation(order)
    reweighted = dipmark_sorted(jnp.take_along_axis(_float(probs), perm, axis=-1), alpha)
    inverse = jnp.argsort(perm, axis=-1)
    return jnp.take_along_axis(reweighted, inverse, axis=-1)


# ---------------------------------------------------------------------------
# KGW (Kirchenbauer et al. 2023): a biased green-list decoder
# ---------------------------------------------------------------------------


def kgw_green(uniforms: jax.Array, gamma) -> jax.Array:
    """The green list from the tokens' uniforms U_w: bool[...], green when U_w >= 1 − γ (a γ fraction of
    the vocabulary in expectation, independently per token: Bernoulli(γ) under any key)."""
    return jnp.asarray(uniforms) >= 1.0 - jnp.float32(gamma)


def kgw(probs: jax.Array, uniforms: jax.Array, gamma, delta) -> jax.Array:
    """KGW decoder (Kirchenbauer et al. 2023): P_ζ ∝ P · exp(δ · green), green = :func:`kgw_green`.

    Biased: E_ζ[P_ζ] ≠ P unless δ = 0. Over green lists drawn independently per token with probability
    γ, E[P_ζ(w)] = γ E[e^δ P_w / Z | w green] + (1 − γ) E[P_w / Z | w red] (no closed form in general;
    tests enumerate small vocabularies).

    Args:
      probs: float[..., V] P; uniforms: float[..., V] the tokens' U_w; gamma in (0, 1); delta >= 0.

    Returns:
      float32[..., V] P_ζ.
    """
    validation.check_probs(probs)
    if jnp.shape(uniforms) != jnp.shape(probs):
        raise ValueError(f"uniforms shape {jnp.shape(uniforms)} != probs shape {jnp.shape(probs)}")
    p = _float(probs)
    w = p * jnp.where(kgw_green(uniforms, gamma), jnp.exp(_float(delta)), 1.0)
    return w / jnp.sum(w, axis=-1, keepdims=True)


# ---------------------------------------------------------------------------
# Identity, mixtures
# ---------------------------------------------------------------------------


def identity(probs: jax.Array, zeta=None) -> jax.Array:
    """The identity decoder Id(P, ζ) = P (no watermark)."""
    del zeta
    return _float(probs)


def linear_mixture(probs: jax.Array, decoded: jax.Array, theta) -> jax.Array:
    """Linear class of Eq. (9): ((1 − θ) Id + θ S)(P, ζ) = (1 − θ) P + θ S(P, ζ).

    Args:
      probs: float[..., V] P.
      decoded: float[..., V] S(P, ζ) from any unbiased decoder.
      theta: scalar or float[...] in [0, 1].
    """
    validation.check_unit_interval(theta, "theta")
    theta = _float(theta)[..., None] if jnp.ndim(theta) else _float(theta)
    return (1.0 - theta) * _float(probs) + theta * _float(decoded)


# ---------------------------------------------------------------------------
# Inverse-CDF sampling
# ---------------------------------------------------------------------------

_CDF_BLOCK = 256  # two-level inverse CDF above this many tokens


def inverse_cdf(weights: jax.Array, uniform: jax.Array) -> jax.Array:
    """Unchecked inverse-CDF sampler: the token whose CDF interval holds u.

    Returns the first w with Σ_{w' <= w} p_w' > u · Σ p (never a zero-weight
    token). Over more than 256 tokens the prefix sums are taken in two levels
    (block sums, then one block), which costs one pass over the weights
    instead of a full-length cumulative sum (~5x faster on XLA:CPU); the
    partition of [0, 1) it induces differs from a flat cumulative sum only by
    float rounding.

    Args:
      weights: float32[..., C] non-negative, not all zero.
      uniform: float32[...] in [0, 1).

    Returns:
      int32[...].
    """
    p = _float(weights)
    size = p.shape[-1]
    u = _float(uniform)
    if size <= _CDF_BLOCK:
        return _inverse_cdf_flat(p, u)
    batch = p.shape[:-1]
    blocks = -(-size // _CDF_BLOCK)
    padded = jnp.pad(p, [(0, 0)] * len(batch) + [(0, blocks * _CDF_BLOCK - size)])
    padded = padded.reshape(batch + (blocks, _CDF_BLOCK))
    block_cdf = jnp.cumsum(jnp.sum(padded, axis=-1), axis=-1)  # [..., blocks]
    threshold = u * block_cdf[..., -1]
    block = jnp.sum(block_cdf <= threshold[..., None], axis=-1)
    # rounding can push u·Σp past the last block: fall back to the last block with mass
    last_block = _last_positive(jnp.diff(block_cdf, axis=-1, prepend=0.0) > 0)
    block = jnp.minimum(block, last_block)
    inside = jnp.take_along_axis(padded, block[..., None, None], axis=-2)[..., 0, :]
    before = jnp.where(
        block > 0, jnp.take_along_axis(block_cdf, jnp.maximum(block - 1, 0)[..., None], axis=-1)[..., 0], 0.0)
    cdf = before[..., None] + jnp.cumsum(inside, axis=-1)
    offset = jnp.minimum(jnp.sum(cdf <= threshold[..., None], axis=-1), _last_positive(inside > 0))
    return (block * _CDF_BLOCK + offset).astype(jnp.int32)


def _inverse_cdf_flat(p, u):
    cdf = jnp.cumsum(p, axis=-1)
    idx = jnp.sum(cdf <= u[..., None] * cdf[..., -1:], axis=-1)
    return jnp.minimum(idx, _last_positive(p > 0)).astype(jnp.int32)


def _last_positive(positive: jax.Array) -> jax.Array:
    """Index of the last True along the last axis (0 if none): int32[...]."""
    size = positive.shape[-1]
    return jnp.max(jnp.where(positive, jnp.arange(size, dtype=jnp.int32), 0), axis=-1)


def sample_token(probs: jax.Array, uniform: jax.Array) -> jax.Array:
    """Deterministic inverse-CDF sampler: the token whose CDF interval holds u.

    Args:
      probs: float[..., V] non-negative weights (unnormalised is fine), not all zero.
      uniform: float[...] in [0, 1), one per distribution.

    Returns:
      int32[...]: the first w with cumsum(P)_w > u · ΣP; never a zero-weight
      token, even when float rounding pushes u · ΣP past the last cumsum.

    Raises:
      ValueError: (concrete inputs) NaN, infinite, negative or all-zero
        weights, or u outside [0, 1).
    """
    p = validation.concrete(probs)
    if p is not None:
        p = np.asarray(p, np.float64)
        if p.ndim < 1 or p.shape[-1] < 1:
            raise ValueError(f"probs must have a vocabulary axis, got shape {p.shape}")
        if not np.isfinite(p).all():
            raise ValueError("sample_token: weights contain NaN or inf")
        if (p < 0).any():
            raise ValueError(f"sample_token: negative weights (min {p.min():.3g})")
        if (p.sum(axis=-1) <= 0).any():
            raise ValueError("sample_token: a row of weights sums to zero")
    u = validation.concrete(uniform)
    if u is not None:
        u = np.asarray(u, np.float64)
        if np.isnan(u).any() or (u < 0).any() or (u >= 1).any():
            raise ValueError("sample_token: uniform must lie in [0, 1)")
    return inverse_cdf(probs, uniform)


# ---------------------------------------------------------------------------
# Temperature and top-k
# ---------------------------------------------------------------------------


def check_temperature(temperature) -> float | None:
    """The temperature as a float (None if traced); raises unless it is >= 0."""
    if isinstance(temperature, bool):
        raise TypeError("temperature must be a number, got a bool")
    value = validation.concrete(temperature)
    if value is None:
        return None
    value = np.asarray(value)
    if value.ndim != 0 or not np.issubdtype(value.dtype, np.number):
        raise TypeError(f"temperature must be a scalar number, got {temperature!r}")
    t = float(value)
    if not t >= 0 or math.isinf(t):
        raise ValueError(f"temperature must be a finite number >= 0, got {t}")
    if 0 < t < float(np.finfo(np.float32).tiny):
        raise ValueError(f"temperature {t} is below float32's smallest normal number, where the division "
                         "is not exact: use 0 for greedy decoding")
    return t


def check_top_k(top_k, vocab_size: int) -> int | None:
    """``top_k`` as an int in [1, V], or None for "keep all" (None or 0)."""
    if top_k is None:
        return None
    if isinstance(top_k, bool) or not isinstance(top_k, numbers.Integral):
        raise TypeError(f"top_k must be an int or None, got {top_k!r}")
    if int(top_k) == 0:
        return None
    if not 1 <= int(top_k) <= vocab_size:
        raise ValueError(f"top_k must be in [1, {vocab_size}] (or None/0 for all), got {top_k}")
    return int(top_k)


def top_k_mask(logits: jax.Array, k: int) -> jax.Array:
    """bool[..., V]: the k largest logits; ties at the k-th value go to the lower token ids.

    Exactly k tokens, so the support has a static size (the generation loop
    gathers exactly these k candidates).
    """
    _, idx = jax.lax.top_k(logits, k)
    flat = idx.reshape(-1, k)
    rows = jnp.arange(flat.shape[0])[:, None]
    mask = jnp.zeros((flat.shape[0], logits.shape[-1]), bool).at[rows, flat].set(True)
    return mask.reshape(logits.shape)


def process_logits(logits: jax.Array, temperature, top_k: int | None = None) -> jax.Array:
    """Temperature and top-k, applied identically to draft and target logits.

    Args:
      logits: float[..., V].
      temperature: > 0, or 0 for greedy (all mass on the first argmax).
      top_k: keep exactly the k largest logits (ties at the k-th value are
        broken towards lower token ids, as ``jax.lax.top_k`` does; Hugging
        Face's ``TopKLogitsWarper`` keeps every tie instead); ``None`` or 0
        keeps all.

    Returns:
      float32[..., V] normalised log-probabilities (−inf outside the support).
    """
    x = _float(logits)
    k = check_top_k(top_k, x.shape[-1])
    t = check_temperature(temperature)
    if k is not None:
        x = jnp.where(top_k_mask(x, k), x, -jnp.inf)
    if t == 0:
        return jnp.where(_one_hot_like(first_argmax(x), x) > 0, 0.0, -jnp.inf)
    # Shift before dividing (candidates._tempered says why).
    top = jnp.max(x, axis=-1, keepdims=True)
    return jax.nn.log_softmax((x - jnp.where(jnp.isfinite(top), top, 0.0)) / _float(temperature), axis=-1)
