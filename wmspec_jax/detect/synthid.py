"""SynthID watermark detection: mean scores and the Bayesian detectors of App. D.

Per scored token t the detector has the g-values of the emitted token under
both streams, g^D_t, g^T_t ∈ {0, 1}^m, and the acceptance uniform u_t
(:mod:`.streams`). Under H0 every g-value is an independent Bernoulli(1/2).

Mean scores (calibrated, no training):

* :func:`mean_test` — mean g-value of any selection of layers/streams with
  its exact Binomial(n·m, 1/2) p-value; with ``weights`` the weighted mean
  of SynthID (layer weights decreasing from 10 to 1) with an exact p-value
  for short texts and a proven upper bound beyond (:mod:`.weighted`).

Bayesian detectors (Dathathri et al. 2024; App. D of the paper). For one
stream κ and layer l, the watermarked likelihood ratio of g^κ_l is

    A^κ_l = (g^κ_l − ½) · P(ψ^κ_l = 2 | g^κ_<l) + 1,
    P(ψ^κ_l = 2 | g_<l) = σ(β^κ_l + Σ_{j<l} δ^κ_{l,j} g_j),

(P(g_l | watermarked, κ) / P(g_l | H0); ψ is the number of distinct tokens
in the layer-l match). With two streams the token came from one of them
with probability π_t = P(ζ_t = ζ^D | u_t); the detectors differ in how that
mixture is written (``BayesConfig.mixture``):

* ``"layer"`` — **the paper's form** (App. D, Eq. (17)): the mixture is taken
  per (token, layer), P(g^D_l, g^T_l | H1, u_t) / P(· | H0) =
  π_t A^D_l + (1 − π_t) A^T_l, and multiplied over layers:
  log Λ_t = Σ_l log(π_t A^D_l + (1 − π_t) A^T_l). The presets use this form.
* ``"token"`` — *beyond the paper*: a token's source is one event, so its m
  layers share it: log Λ_t = log(π_t Π_l A^D_l + (1 − π_t) Π_l A^T_l), the
  exact likelihood ratio of the two-stream model. (The two agree when π_t ∈
  {0, 1}: Oracle, and Bayes-MLP at inference.)

The text's log-odds are logit P(H1) + Σ_t log Λ_t (the posterior of
Eq. (16), P(H1) = ½). Equation numbers count the paper's numbered
equations (its LaTeX source): (16) is the posterior, (17) the watermarked
likelihood. Modes:

* ``single``  — one stream (TARGET): the basic SynthID watermark.
* ``prior``   — **Bayes-Prior**: π_t = p, the training draft fraction.
* ``mlp``     — **Bayes-MLP**: τ_t = MLP([g^D_t, g^T_t]) (3 layers, a Flax
  NNX module, :class:`TauMLP`), π_t = σ(α(τ_t − u_t)) in training and
  1{u_t ≤ τ_t} at inference.
* ``oracle``  — **Oracle**: π_t = 1{token is an accepted draft} from the
  generation records.

Training (:func:`train_bayes`): Optax Adam on the mean binary cross-entropy
of the log-odds plus l2 · Σ δ², one ``jax.jit``-compiled epoch
(``lax.scan`` over shuffled minibatches) with the whole L2 grid trained
side by side under ``vmap``; after every epoch each grid member is scored
on the validation split (TPR at the target FPR, threshold from the
validation negatives), the best epoch's parameters are kept (ties: lower
validation loss) and a member stops after ``patience`` epochs without
improvement. The best member wins. Variable lengths are handled by the
scored-position masks throughout.

Parameters are pytrees of arrays: β, δ per stream, and the MLP's
``nnx.Param`` state as a pure dict (``nnx.split`` / ``nnx.merge`` rebuild
the module inside the jitted, vmapped training step), so the L2 grid is a
``vmap`` and saving is flat ``.npz`` arrays.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, ClassVar, Mapping, NamedTuple, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from wmspec_jax import prf, validation
from wmspec_jax.detect import pvalues, weighted
from wmspec_jax.detect.common import (Detector, Scores, TokenTerms, check_unit, config_provenance,
                                     fitted_provenance)
from wmspec_jax.detect.metrics import _tpr_at_fpr
from wmspec_jax.detect.provenance import Provenance, check_compatible, merge
from wmspec_jax.detect.streams import (SOURCE_DRAFT, SynthIDStats, check_source, check_statistics, concat,
                                       concat_source)

MODES = ("single", "prior", "mlp", "oracle")
MIXTURES = ("layer", "token")


def _check_stats(stats) -> SynthIDStats:
    return check_statistics(stats, SynthIDStats)


# ---------------------------------------------------------------------------
# Mean and weighted-mean scores
# ---------------------------------------------------------------------------


def synthid_weights(num_layers: int) -> np.ndarray:
    """SynthID's weighted-mean layer weights: linear from 10 (layer 1) to 1 (layer m),
    rescaled to mean 1 (earlier layers carry more signal)."""
    w = np.linspace(10.0, 1.0, int(num_layers))
    return (w / w.mean()).astype(np.float32)


def select_g(stats: SynthIDStats, choose_draft) -> jax.Array:
    """g-values of the selected stream per token: uint8[B, L, m]."""
    stats = _check_stats(stats)
    choose = jnp.asarray(choose_draft, bool)
    if choose.shape != stats.mask.shape:
        raise ValueError(f"selection has shape {choose.shape}, statistics {stats.mask.shape}")
    return jnp.where(choose[..., None], stats.g_draft, stats.g_target)


def both_g(stats: SynthIDStats) -> jax.Array:
    """g-values of both streams side by side (the "average both" score): uint8[B, L, 2m]."""
    stats = _check_stats(stats)
    return jnp.concatenate([stats.g_draft, stats.g_target], axis=-1)


@jax.jit
def _mean_test(g, mask):
    g = g.astype(jnp.float32)
    m = g.shape[-1]
    k = jnp.sum(jnp.where(mask[..., None], g, 0.0), axis=(1, 2))
    n = jnp.sum(mask, axis=1, dtype=jnp.int32)
    trials = (n * m).astype(jnp.float32)
    log_p = jnp.where(n > 0, pvalues.binomial_half_log_sf(k, trials), 0.0)
    return Scores(jnp.where(n > 0, k / jnp.maximum(trials, 1.0), jnp.nan), n, log_p, jnp.exp(log_p))


def _check_g(g, mask):
    g = jnp.asarray(g)
    mask = jnp.asarray(mask, bool)
    if g.ndim != 3 or g.shape[:2] != mask.shape:
        raise ValueError(f"g must be [B, L, m] matching mask [B, L], got {g.shape} and {mask.shape}")
    values = None if g.dtype == jnp.bool_ else validation.concrete(g)
    if values is not None:
        bad = (values != 0) & (values != 1)
        if bad.any():
            raise ValueError(f"g-values must be 0 or 1 (SynthID's g ~ Bernoulli(1/2)), got e.g. "
                             f"{np.unique(values[bad])[:5].tolist()}")
    return g, mask


def mean_test(g, mask, weights: Optional[Sequence[float]] = None) -> Scores:
    """(Weighted) mean g-value over scored tokens and layers with its null p-value.

    Args:
      g: {0,1}[B, L, m'] g-values (one stream, a selection, or both streams).
      mask: bool[B, L].
      weights: optional float[m'] positive layer weights (e.g.
        :func:`synthid_weights`); ``None`` for the plain mean.

    Returns:
      :class:`Scores`. The plain mean's p-value is exact (Binomial(n m', ½)).
      The weighted mean's is exact for n ≤ ``weighted.exact_max_tokens(m', Σa)``
      scored tokens (57 for SynthID's m' = 30 weights) and a proven upper bound beyond
      (:mod:`.weighted`: tilted Chernoff with a Berry–Esseen allowance), so
      it never overstates significance.

    Raises:
      ValueError: shapes disagree, a g-value is not 0/1, or bad weights.
    """
    g, mask = _check_g(g, mask)
    if weights is None:
        return _mean_test(g, mask)
    w = np.asarray(weights, np.float64)
    if w.shape != (g.shape[-1],) or (w <= 0).any() or not np.isfinite(w).all():
        raise ValueError(f"weights must be {g.shape[-1]} positive finite numbers, got shape {w.shape}")
    lat = weighted.lattice(w)
    gh = np.asarray(g, np.int64)
    mh = np.asarray(mask)
    n = mh.sum(axis=1)
    observed = np.einsum("blm,m->bl", gh, np.asarray(lat.lower, np.int64))
    k = np.where(mh, observed, 0).sum(axis=1)
    log_p = weighted.log_sf(k, n, lat)
    total = np.where(mh, np.einsum("blm,m->bl", gh.astype(np.float64), w), 0.0).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        score = np.where(n > 0, total / (n * w.sum()), np.nan)
    return Scores(jnp.asarray(score, jnp.float32), jnp.asarray(n, jnp.int32), jnp.asarray(log_p, jnp.float32),
                  jnp.asarray(np.exp(log_p), jnp.float32))


def score_mean_single(stats: SynthIDStats, weights=None) -> Scores:
    """Mean score of the basic (non-speculative) SynthID watermark: the TARGET stream."""
    stats = _check_stats(stats)
    return mean_test(stats.g_target, stats.mask, weights)


_BASE_KEYS = ("prf_version", "context_width", "decoder", "provenance")
STREAMS = ("both", "target", "draft")


def _split_settings(config: Mapping[str, Any], known: Sequence[str]) -> tuple:
    rest = {k: v for k, v in config.items() if k not in _BASE_KEYS}
    return {k: rest.pop(k) for k in known if k in rest}, rest


@dataclasses.dataclass(frozen=True, eq=False)
class MeanTest(Detector):
    """SynthID's mean g-value test as a detector (calibrated, no training).

    Attributes:
      provenance: the settings (decoder, m, h; key where known).
      streams: ``"both"`` (the g-values of both streams side by side — the
        key-only choice for Alg. 1 texts), ``"target"`` (the basic
        watermark) or ``"draft"``.
      weighted: SynthID's weighted mean (:func:`synthid_weights`); its
        p-value is exact for short texts and a proven bound beyond.
    """

    provenance: Provenance
    streams: str = "both"
    weighted: bool = False
    info: Mapping = dataclasses.field(default_factory=dict)
    kind: ClassVar[str] = "synthid_mean"
    decoder: ClassVar[str] = "synthid"

    def __post_init__(self):
        if self.streams not in STREAMS:
            raise ValueError(f"streams must be one of {STREAMS}, got {self.streams!r}")

    @property
    def label(self) -> str:
        return f"{'weighted mean' if self.weighted else 'mean'} ({self.streams} stream{'s' if self.streams == 'both' else ''})"

    def g(self, stats: SynthIDStats) -> jax.Array:
        """The tested g-values: uint8[B, L, m'] (m' = 2m for both streams)."""
        if self.streams == "both":
            return both_g(stats)
        return stats.g_target if self.streams == "target" else stats.g_draft

    def weights(self) -> Optional[np.ndarray]:
        if not self.weighted:
            return None
        w = synthid_weights(self.provenance.num_layers)
        return np.concatenate([w, w]) if self.streams == "both" else w

    def score(self, stats, *, source=None, rng=None) -> Scores:
        stats = _check_stats(stats)
        self.check(stats)
        return mean_test(self.g(stats), stats.mask, self.weights())

    def token_terms(self, stats, *, source=None, rng=None) -> TokenTerms:
        if self.weighted:
            return super().token_terms(stats)
        stats = _check_stats(stats)
        self.check(stats)
        g = self.g(stats)
        ones = jnp.sum(g.astype(jnp.float32), axis=-1)
        return TokenTerms(jnp.where(stats.mask, ones, 0.0), stats.mask, stats.starts, stats.lengths, "binomial",
                          int(g.shape[-1]))

    def settings(self) -> dict:
        return {"streams": self.streams, "weighted": self.weighted, **self.info}

    @classmethod
    def from_saved(cls, config, params) -> "MeanTest":
        known, rest = _split_settings(config, ("streams", "weighted"))
        return cls(config_provenance(config), info=rest, **known)


# ---------------------------------------------------------------------------
# Bayesian detector: configuration, parameters, likelihood
# ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class BayesConfig:
    """Static description of a Bayesian SynthID detector (key-free, JSON-able).

    Attributes:
      mode: one of :data:`MODES`.
      num_layers: m.
      draft_fraction: Bayes-Prior's constant P(ζ = ζ^D) (from
        :func:`.streams.draft_fraction` on the training records).
      mlp_hidden: hidden widths of Bayes-MLP's 3-layer perceptron.
      alpha: slope α of σ(α(τ − u)) in Bayes-MLP training.
      prior_watermarked: P(H1) in the posterior (0.5 as in the paper).
      context_width: h of the generator (recorded for reuse).
      mixture: ``"layer"`` — the paper's per-(token, layer) mixture (App. D,
        Eq. (17); the default and what the presets use) — or ``"token"`` —
        one source per token (beyond the paper); see the module doc.
    """

    mode: str
    num_layers: int
    draft_fraction: float = 0.5
    mlp_hidden: tuple = (64, 64)
    alpha: float = 20.0
    prior_watermarked: float = 0.5
    context_width: int = prf.DEFAULT_CONTEXT_WIDTH
    mixture: str = "layer"

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")
        if self.mixture not in MIXTURES:
            raise ValueError(f"mixture must be one of {MIXTURES} (per (token, layer) as in the paper, or per "
                             f"token), got {self.mixture!r}")
        if isinstance(self.num_layers, bool) or not isinstance(self.num_layers, int) or self.num_layers < 1:
            raise ValueError(f"num_layers must be a positive int, got {self.num_layers!r}")
        check_unit(self.draft_fraction, "draft_fraction")
        check_unit(self.prior_watermarked, "prior_watermarked", open_interval=True)
        object.__setattr__(self, "mlp_hidden", tuple(int(x) for x in self.mlp_hidden))
        if len(self.mlp_hidden) != 2 or min(self.mlp_hidden) < 1:
            raise ValueError(f"mlp_hidden must be two positive widths (3 layers), got {self.mlp_hidden}")
        if not self.alpha > 0:
            raise ValueError(f"alpha must be > 0, got {self.alpha}")
        prf.check_context_width(self.context_width)

    @property
    def streams(self) -> tuple:
        return ("target",) if self.mode == "single" else ("draft", "target")

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["mlp_hidden"] = list(self.mlp_hidden)
        return d

    @classmethod
    def from_dict(cls, d) -> "BayesConfig":
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: (tuple(v) if k == "mlp_hidden" else v) for k, v in d.items() if k in names})


class TauMLP(nnx.Module):
    """Bayes-MLP's selector τ_t = σ(MLP([2g^D_t − 1, 2g^T_t − 1])) ∈ (0, 1) (App. D).

    A three-layer perceptron 2m → h1 → h2 → 1 with ReLU, LeCun-normal
    kernels and zero biases (``nnx.Linear`` defaults).
    """

    def __init__(self, num_layers: int, hidden: tuple, *, rngs: nnx.Rngs):
        self.hidden1 = nnx.Linear(2 * num_layers, hidden[0], rngs=rngs)
        self.hidden2 = nnx.Linear(hidden[0], hidden[1], rngs=rngs)
        self.output = nnx.Linear(hidden[1], 1, rngs=rngs)

    def __call__(self, gd, gt):
        h = jnp.concatenate([2 * gd - 1, 2 * gt - 1], axis=-1)
        h = jax.nn.relu(self.hidden1(h))
        h = jax.nn.relu(self.hidden2(h))
        return jax.nn.sigmoid(self.output(h)[..., 0])


@functools.lru_cache(maxsize=None)
def _mlp_graph(num_layers: int, hidden: tuple):
    """(graphdef, abstract parameter state) of :class:`TauMLP`: static, shared by every call."""
    return nnx.split(nnx.eval_shape(lambda: TauMLP(num_layers, hidden, rngs=nnx.Rngs(0))))


def _mlp_tau(config: "BayesConfig", mlp_params, gd, gt):
    """τ_t from the MLP's pure-dict parameters (works under jit, vmap and grad)."""
    graphdef, abstract = _mlp_graph(config.num_layers, config.mlp_hidden)
    state = jax.tree_util.tree_map(lambda x: x, abstract)
    nnx.replace_by_pure_dict(state, mlp_params)
    return nnx.merge(graphdef, state)(gd, gt)


def init_params(config: BayesConfig, rng) -> dict:
    """Initial parameters: β = −2.5 + 0.001 ε, δ = 0.001 ε per stream (as SynthID-text),
    and (mode ``mlp``) the :class:`TauMLP` parameters as a pure dict."""
    m = config.num_layers
    keys = jax.random.split(rng, 3)
    params = {}
    for i, name in enumerate(config.streams):
        kb, kd = jax.random.split(jax.random.fold_in(keys[0], i))
        params[name] = {
            "beta": -2.5 + 1e-3 * jax.random.normal(kb, (m,), jnp.float32),
            "delta": 1e-3 * jax.random.normal(kd, (m, m), jnp.float32),
        }
    if config.mode == "mlp":
        module = TauMLP(m, config.mlp_hidden, rngs=nnx.Rngs(params=keys[1]))
        params["mlp"] = nnx.to_pure_dict(nnx.state(module, nnx.Param))
    return params


def _layer_log_lr(p, g):
    """log A_l = log[(g_l − ½) σ(β_l + Σ_{j<l} δ_{l,j} g_j) + 1]: float32[..., m] (g float[..., m])."""
    delta = jnp.tril(p["delta"], -1)  # autoregressive: layer l sees g_1..g_{l-1}
    logits = p["beta"] + jnp.einsum("...j,lj->...l", g, delta)
    return jnp.log1p((g - 0.5) * jax.nn.sigmoid(logits))


def _mix(log_pi, log_1m_pi, a_d, a_t, mixture: str):
    """Per-token log Λ_t of the two-stream mixture; a_d, a_t: per-layer log A [..., m] (module doc)."""
    if mixture == "layer":  # paper, Eq. (17): mix each (token, layer), then multiply over layers
        return jnp.sum(jnp.logaddexp(log_pi[..., None] + a_d, log_1m_pi[..., None] + a_t), axis=-1)
    return jnp.logaddexp(log_pi + jnp.sum(a_d, axis=-1), log_1m_pi + jnp.sum(a_t, axis=-1))


def _token_llr(params, config: BayesConfig, gd, gt, u, choose_draft, training: bool):
    """Per-token log Λ_t (see module doc): float32[B, L]."""
    gt = gt.astype(jnp.float32)
    a_t = _layer_log_lr(params["target"], gt)
    if config.mode == "single":
        return jnp.sum(a_t, axis=-1)
    gd = gd.astype(jnp.float32)
    a_d = _layer_log_lr(params["draft"], gd)
    if config.mode == "oracle":  # π ∈ {0, 1}: both mixtures pick one stream
        return jnp.where(choose_draft, jnp.sum(a_d, axis=-1), jnp.sum(a_t, axis=-1))
    if config.mode == "prior":
        p = jnp.clip(jnp.float32(config.draft_fraction), 1e-6, 1 - 1e-6)
        log_pi = jnp.broadcast_to(jnp.log(p), u.shape)
        return _mix(log_pi, jnp.broadcast_to(jnp.log1p(-p), u.shape), a_d, a_t, config.mixture)
    tau = _mlp_tau(config, params["mlp"], gd, gt)
    if training:  # smooth surrogate of the selection, so τ gets gradients
        z = config.alpha * (tau - u)
        return _mix(jax.nn.log_sigmoid(z), jax.nn.log_sigmoid(-z), a_d, a_t, config.mixture)
    return jnp.where(u <= tau, jnp.sum(a_d, axis=-1), jnp.sum(a_t, axis=-1))


def _log_odds(params, config, gd, gt, u, mask, choose_draft, training: bool):
    llr = _token_llr(params, config, gd, gt, u, choose_draft, training)
    prior = jnp.float32(config.prior_watermarked)
    return jnp.log(prior) - jnp.log1p(-prior) + jnp.sum(jnp.where(mask, llr, 0.0), axis=1)


@dataclasses.dataclass(frozen=True, eq=False)
class Bayes(Detector):
    """A Bayesian SynthID detector (App. D): its :class:`BayesConfig` and fitted arrays.

    Scores are log-odds (no calibrated null: p-values are NaN; threshold them
    on negatives). Built by :func:`train_bayes` or :func:`bayes_detector`.

    Attributes:
      provenance: of the training statistics.
      bayes_config: mode, m, mixture, ... (:class:`BayesConfig`).
      arrays: β, δ per stream and (mode ``mlp``) the MLP's parameters.
      info: training notes (chosen l2, best epoch, validation TPR, target FPR).
    """

    provenance: Provenance
    bayes_config: BayesConfig
    arrays: Mapping
    info: Mapping = dataclasses.field(default_factory=dict)
    kind: ClassVar[str] = "bayes"
    decoder: ClassVar[str] = "synthid"
    calibrated: ClassVar[bool] = False

    @property
    def label(self) -> str:
        return {"prior": "Bayes-Prior", "mlp": "Bayes-MLP", "oracle": "Oracle",
                "single": "Bayes (target stream)"}[self.bayes_config.mode]

    @property
    def needs_source(self) -> bool:
        return self.bayes_config.mode == "oracle"

    def score(self, stats, *, source=None, rng=None) -> Scores:
        self.check(_check_stats(stats))
        return score_bayes(self, stats, source if self.needs_source else None)

    def settings(self) -> dict:
        extra = self.bayes_config.to_dict()
        extra.pop("context_width")
        return {**extra, **self.info}

    @property
    def params(self) -> dict:
        return dict(self.arrays)

    @classmethod
    def from_saved(cls, config, params) -> "Bayes":
        names = [f.name for f in dataclasses.fields(BayesConfig)]
        known, rest = _split_settings(config, [n for n in names if n != "context_width"])
        cfg = BayesConfig.from_dict({**known, "context_width": config["context_width"]})
        return cls(config_provenance(config), cfg, dict(params), info=rest)


def bayes_detector(config: BayesConfig, params, provenance: Optional[Provenance] = None) -> Bayes:
    """Wraps a config and parameters as a saveable :class:`Bayes` detector.

    ``provenance``: of the training statistics (default: only m and h known).
    """
    prov = fitted_provenance(provenance, "synthid", config.context_width, config.num_layers)
    return Bayes(prov, config, jax.tree_util.tree_map(np.asarray, params))


def config_of(detector) -> BayesConfig:
    """The :class:`BayesConfig` of a fitted Bayesian detector."""
    if not isinstance(detector, Bayes):
        raise TypeError(f"expected a fitted 'bayes' detector, got {getattr(detector, 'kind', detector)!r}")
    return detector.bayes_config


def _choose_from(config: BayesConfig, source, shape):
    if config.mode != "oracle":
        return jnp.zeros(shape, bool)
    if source is None:
        raise ValueError("the Oracle detector needs the token sources (generation records, "
                         "or detect.pseudo_source for texts without records)")
    return jnp.asarray(check_source(source, shape)) == SOURCE_DRAFT


@functools.partial(jax.jit, static_argnames=("config",))
def _score_bayes(params, config, gd, gt, u, mask, choose):
    lo = _log_odds(params, config, gd, gt, u, mask, choose, training=False)
    n = jnp.sum(mask, axis=1, dtype=jnp.int32)
    nan = jnp.full(lo.shape, jnp.nan, jnp.float32)
    return Scores(jnp.where(n > 0, lo, jnp.nan), n, nan, nan)


def score_bayes(detector: Bayes, stats: SynthIDStats, source=None) -> Scores:
    """Bayesian log-odds log P(H1 | data) / P(H0 | data) (the posterior of Eq. (16)) per text.

    ``score`` is the log-odds (σ(score) is the posterior; the log-odds keep
    ranking where the posterior rounds to 1). There is no calibrated null:
    p-values are NaN; set thresholds on negatives (:func:`.metrics.tpr_at_fpr`).
    ``source`` (int8[B, L]) is required by the Oracle mode only.
    """
    config = config_of(detector)
    stats = _check_stats(stats)
    if stats.g_target.shape[-1] != config.num_layers:
        raise ValueError(f"statistics have m={stats.g_target.shape[-1]} layers, detector m={config.num_layers}")
    check_compatible(stats.provenance, detector.provenance)
    choose = _choose_from(config, source, stats.mask.shape)
    params = jax.tree_util.tree_map(jnp.asarray, detector.params)
    return _score_bayes(params, config, stats.g_draft, stats.g_target, stats.u, stats.mask, choose)


def bayes_token_llr(detector: Bayes, stats: SynthIDStats, source=None) -> jax.Array:
    """Per-token log Λ_t at inference (float32[B, L]; unscored positions 0)."""
    config = config_of(detector)
    stats = _check_stats(stats)
    check_compatible(stats.provenance, detector.provenance)
    choose = _choose_from(config, source, stats.mask.shape)
    params = jax.tree_util.tree_map(jnp.asarray, detector.params)
    llr = _token_llr(params, config, stats.g_draft, stats.g_target, stats.u, choose, training=False)
    return jnp.where(stats.mask, llr, 0.0)


def posterior(scores: Scores) -> jax.Array:
    """P(H1 | data) = σ(log-odds)."""
    return jax.nn.sigmoid(scores.score)


# ---------------------------------------------------------------------------
# Training
# ---------------------------------------------------------------------------


class Dataset(NamedTuple):
    """Labelled texts for training/validating a Bayesian detector.

    Attributes:
      g_draft, g_target: uint8[N, L, m].
      u: float32[N, L].
      mask: bool[N, L].
      choose_draft: bool[N, L] true source is the draft (Oracle only; False
        where unknown).
      labels: float32[N] 1 = watermarked, 0 = not.
      provenance: merged provenance of the statistics (static; None if unknown).
    """

    g_draft: jax.Array
    g_target: jax.Array
    u: jax.Array
    mask: jax.Array
    choose_draft: jax.Array
    labels: jax.Array
    provenance: Optional[Provenance] = None


def make_dataset(positives: SynthIDStats, negatives: SynthIDStats, *, positives_source=None,
                 negatives_source=None) -> Dataset:
    """Stacks watermarked (label 1) and unwatermarked (label 0) texts.

    Negatives should be real text — unwatermarked generations of the same
    models, human text — scored with the same key. Sources are needed for
    the Oracle mode only; give negatives without records a
    :func:`.streams.pseudo_source`.
    """
    positives, negatives = _check_stats(positives), _check_stats(negatives)
    if positives.g_target.shape[-1] != negatives.g_target.shape[-1]:
        raise ValueError("positives and negatives have different numbers of layers m")
    stats = concat([positives, negatives])
    length = stats.mask.shape[1]
    if (positives_source is None) != (negatives_source is None):
        raise ValueError("give token sources for both positives and negatives, or for neither")
    if positives_source is None:
        choose = jnp.zeros(stats.mask.shape, bool)
    else:
        src = concat_source([check_source(positives_source, positives.mask.shape),
                             check_source(negatives_source, negatives.mask.shape)], length)
        choose = jnp.asarray(src == SOURCE_DRAFT)
    labels = jnp.concatenate([jnp.ones(positives.mask.shape[0]), jnp.zeros(negatives.mask.shape[0])])
    return Dataset(stats.g_draft, stats.g_target, stats.u, stats.mask, choose, labels.astype(jnp.float32),
                   stats.provenance)


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Optimisation settings of :func:`train_bayes`.

    Attributes:
      learning_rate: Adam step size.
      epochs: maximum number of epochs.
      batch_size: minibatch size (the last partial batch of a shuffle is
        dropped so shapes stay static).
      patience: epochs without validation improvement before a grid
        member stops.
      l2_grid: L2 weights on δ trained side by side (vmap).
      target_fpr: FPR of the validation criterion "TPR at FPR".
      seed: seeds initialisation and shuffling (training is deterministic
        given it).
    """

    learning_rate: float = 1e-2
    epochs: int = 100
    batch_size: int = 64
    patience: int = 10
    l2_grid: tuple = (0.0, 1e-3, 1e-2, 1e-1)
    target_fpr: float = 0.01
    seed: int = 0

    def __post_init__(self):
        object.__setattr__(self, "l2_grid", tuple(float(x) for x in self.l2_grid))
        if not self.l2_grid or min(self.l2_grid) < 0:
            raise ValueError("l2_grid must be a non-empty tuple of weights >= 0")
        for name in ("epochs", "batch_size", "patience"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name} must be >= 1")
        check_unit(self.target_fpr, "target_fpr", open_interval=True)
        if not self.learning_rate > 0:
            raise ValueError("learning_rate must be > 0")


class TrainHistory(NamedTuple):
    """Per-epoch curves of every L2 grid member (host arrays).

    Attributes:
      train_loss, val_tpr, val_loss: float[E, G] (E = epochs run).
      best_epoch: int[G] epoch (0-based) whose parameters each member kept.
      best_val_tpr: float[G].
      selected: index of the chosen grid member.
    """

    train_loss: np.ndarray
    val_tpr: np.ndarray
    val_loss: np.ndarray
    best_epoch: np.ndarray
    best_val_tpr: np.ndarray
    selected: int


def _loss(params, config, batch: Dataset, l2):
    lo = _log_odds(params, config, batch.g_draft, batch.g_target, batch.u, batch.mask, batch.choose_draft,
                   training=True)
    bce = jnp.mean(optax.sigmoid_binary_cross_entropy(lo, batch.labels))
    reg = sum(jnp.sum(jnp.tril(params[s]["delta"], -1) ** 2) for s in config.streams)
    return bce + l2 * reg


@functools.lru_cache(maxsize=None)
def _trainer(config: BayesConfig, learning_rate: float, target_fpr: float):
    """Jitted epoch and validation functions for one static configuration."""
    opt = optax.adam(learning_rate)

    @jax.jit
    def epoch(params_g, opt_g, data: Dataset, batches, l2_g):
        def step(carry, idx):
            params_g, opt_g = carry
            batch = jax.tree_util.tree_map(lambda x: x[idx], data)

            def one(params, opt_state, l2):
                loss, grads = jax.value_and_grad(_loss)(params, config, batch, l2)
                updates, opt_state = opt.update(grads, opt_state, params)
                return optax.apply_updates(params, updates), opt_state, loss

            params_g, opt_g, loss_g = jax.vmap(one)(params_g, opt_g, l2_g)
            return (params_g, opt_g), loss_g

        (params_g, opt_g), losses = jax.lax.scan(step, (params_g, opt_g), batches)
        return params_g, opt_g, jnp.mean(losses, axis=0)

    @jax.jit
    def validate(params_g, data: Dataset, pos_idx, neg_idx):
        def one(params):
            lo = _log_odds(params, config, data.g_draft, data.g_target, data.u, data.mask, data.choose_draft,
                           training=False)
            loss = jnp.mean(optax.sigmoid_binary_cross_entropy(lo, data.labels))
            tpr, _ = _tpr_at_fpr(lo[pos_idx], lo[neg_idx], target_fpr)
            return tpr, loss

        return jax.vmap(one)(params_g)

    return opt, epoch, validate


def train_bayes(config: BayesConfig, train: Dataset, val: Dataset,
                train_config: TrainConfig = TrainConfig()) -> tuple:
    """Trains a Bayesian SynthID detector (see module doc for the procedure).

    Args:
      config: the detector (mode ``single``/``prior``/``mlp``/``oracle``).
      train, val: labelled :class:`Dataset` splits; each needs positives and
        negatives (validation TPR at FPR thresholds on its negatives).
      train_config: optimisation settings.

    Returns:
      (:class:`Bayes` with the selected member's best-epoch parameters,
      :class:`TrainHistory`). Its config records the chosen ``l2`` and
      ``best_epoch``.
    """
    for name, data in (("train", train), ("val", val)):
        if not isinstance(data, Dataset):
            raise TypeError(f"{name} must be a detect.synthid.Dataset (make_dataset)")
        if data.g_target.shape[-1] != config.num_layers:
            raise ValueError(f"{name} data has m={data.g_target.shape[-1]} layers, config m={config.num_layers}")
        labels = np.asarray(data.labels)
        if labels.min() == labels.max():
            raise ValueError(f"{name} split needs both watermarked and unwatermarked texts")
    if config.mode == "oracle" and not (np.asarray(train.choose_draft).any() and np.asarray(val.choose_draft).any()):
        raise ValueError("Oracle training needs token sources (make_dataset(..., positives_source=...))")
    provenance = fitted_provenance(merge([train.provenance, val.provenance]) if train.provenance and val.provenance
                                   else None, "synthid", config.context_width, config.num_layers)
    train, val = train._replace(provenance=None), val._replace(provenance=None)  # jitted code: arrays only
    tc = train_config
    opt, epoch_fn, validate_fn = _trainer(config, float(tc.learning_rate), float(tc.target_fpr))
    n_train = train.labels.shape[0]
    bs = min(int(tc.batch_size), n_train)
    num_batches = n_train // bs
    grid = jnp.asarray(tc.l2_grid, jnp.float32)
    num_grid = grid.shape[0]
    k_init, k_shuffle = jax.random.split(jax.random.key(tc.seed))
    params = init_params(config, k_init)
    # every grid member starts from the same point: only the L2 weight differs
    params_g = jax.tree_util.tree_map(lambda x: jnp.broadcast_to(x, (num_grid,) + x.shape), params)
    opt_g = jax.vmap(opt.init)(params_g)
    val_labels = np.asarray(val.labels)
    pos_idx = jnp.asarray(np.flatnonzero(val_labels == 1))
    neg_idx = jnp.asarray(np.flatnonzero(val_labels == 0))

    best_params = params_g
    best_tpr = np.full(num_grid, -1.0)
    best_loss = np.full(num_grid, np.inf)
    best_epoch = np.zeros(num_grid, np.int64)
    since_best = np.zeros(num_grid, np.int64)
    active = np.ones(num_grid, bool)
    history = {"train_loss": [], "val_tpr": [], "val_loss": []}
    for ep in range(int(tc.epochs)):
        perm = jax.random.permutation(jax.random.fold_in(k_shuffle, ep), n_train)
        batches = perm[: num_batches * bs].reshape(num_batches, bs)
        params_g, opt_g, train_loss = epoch_fn(params_g, opt_g, train, batches, grid)
        tpr, loss = (np.asarray(x, np.float64) for x in validate_fn(params_g, val, pos_idx, neg_idx))
        history["train_loss"].append(np.asarray(train_loss))
        history["val_tpr"].append(tpr)
        history["val_loss"].append(loss)
        improved = active & ((tpr > best_tpr) | ((tpr == best_tpr) & (loss < best_loss)))
        imp = jnp.asarray(improved)
        best_params = jax.tree_util.tree_map(
            lambda new, old: jnp.where(imp.reshape((-1,) + (1,) * (new.ndim - 1)), new, old), params_g, best_params)
        best_tpr = np.where(improved, tpr, best_tpr)
        best_loss = np.where(improved, loss, best_loss)
        best_epoch = np.where(improved, ep, best_epoch)
        since_best = np.where(improved, 0, since_best + 1)
        active &= since_best < tc.patience
        if not active.any():
            break
    # best TPR, then lower validation loss, then the smaller L2 weight
    selected = int(np.lexsort((np.asarray(tc.l2_grid), best_loss, -best_tpr))[0])
    chosen = jax.tree_util.tree_map(lambda x: np.asarray(x[selected]), best_params)
    det = dataclasses.replace(bayes_detector(config, chosen, provenance), info={
        "l2": float(tc.l2_grid[selected]), "best_epoch": int(best_epoch[selected]),
        "val_tpr": float(best_tpr[selected]), "target_fpr": float(tc.target_fpr)})
    hist = TrainHistory(
        train_loss=np.stack(history["train_loss"]),
        val_tpr=np.stack(history["val_tpr"]),
        val_loss=np.stack(history["val_loss"]),
        best_epoch=best_epoch,
        best_val_tpr=best_tpr,
        selected=selected,
    )
    return det, hist
