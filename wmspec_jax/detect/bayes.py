"""SynthID's Bayesian detectors (Dathathri et al. 2024; App. D of the paper).

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

Parameters are pytrees of arrays: β, δ per stream, and the MLP's
``nnx.Param`` state as a pure dict (``nnx.split`` / ``nnx.merge`` rebuild
the module inside the jitted, vmapped training step), so the L2 grid is a
``vmap`` and saving is flat ``.npz`` arrays.

Training: :mod:`.bayes_training`.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import ClassVar, Mapping, Optional

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from wmspec_jax import prf
from wmspec_jax.detect.common import FittedDetector, Scores, check_unit, config_provenance, fitted_provenance
from wmspec_jax.detect.provenance import Provenance, check_compatible
from wmspec_jax.detect.streams_types import SynthIDStats, check_source
from wmspec_jax.detect.synthid import MIXTURES, MODES, _check_stats, _split_settings
from wmspec_jax.sources import SOURCE_DRAFT

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
class Bayes(FittedDetector):
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


__all__ = ["Bayes", "BayesConfig", "TauMLP", "bayes_detector", "bayes_token_llr", "config_of", "init_params",
           "posterior", "score_bayes"]
