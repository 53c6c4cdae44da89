"""Fig. 1 (Sec. 3.2, App. C): the trade-off curves between watermark strength and sampling efficiency.

What ``python -m experiments.tradeoff_curves`` computes and writes, for one draft / target pair
(Q, P) given as float32[V] distributions (App. C.1's 10-token pair by default):

* left panel: the linear classes (Eq. 9-10) for Gumbel-max and SynthID (m = ∞, App. C.1), the
  standard SpecSampl cross (1 − TV, 0), the strength-maintained points (both models watermarked with
  one ζ) and the optimum star (1 − TV, Ent(P)) that Alg. 1 reaches (Thm. 4.1);
* right panel: Hu's and Google's classes (App. C.2) for both decoders, Google's class with finite-m
  SynthID, the optimum star; decoders beyond the paper add their Google's class and Alg. 1's point.

Degenerate decoders (Gumbel-max, SynthID m = ∞) need one Monte Carlo pass each, their coupling of
(draft token, target token); every curve of theirs is then evaluated exactly from it. Finite-m SynthID
and the decoders beyond the paper are Monte Carlo per curve. Each Monte Carlo result is cached as one
JSON file keyed by its inputs (:class:`Cache`), so an interrupted run resumes where it left off.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import logging
import pathlib
import time
from typing import Callable, Sequence

import jax
import numpy as np

from wmspec_jax import prf, storage
from wmspec_jax import tradeoff as to
from wmspec_jax.tradeoff import kernels

CODE_VERSION = "tradeoff-curves-v1"  # bump when a cached quantity's definition changes
EXTRA_DECODERS = ("inverse_transform", "dipmark", "gamma_reweight")
"""Unbiased decoders beyond the paper that ``extra_decoders`` may name."""
ORANGE, BLUE, GRAY = "tab:orange", "tab:blue", "0.45"
EXTRA_COLORS = ("tab:purple", "tab:green", "tab:brown", "tab:pink")  # decoders beyond the paper
_LOG = logging.getLogger(__name__)
_SAY = functools.partial(print, flush=True)  # progress lines show as they happen, also through a pipe


@dataclasses.dataclass(frozen=True)
class TradeoffSettings:
    """The settings of one Fig. 1 run (the script's flags of the same names).

    Attributes:
      num_samples: Monte Carlo samples of ζ per estimate (App. C.1: 1e7).
      seed: seed of the Monte Carlo ζ (PRF stream keys).
      synthid_layers: m of the finite-m SynthID curve; ``synthid_limit_layers``: layers applied
        before the one-hot of SynthID m = ∞ (App. C.1: 30).
      num_gammas: γ values on [0, 1] of Hu's and Google's classes; ``num_levels``: strength levels on
        [0, Ent(P)] of the linear classes.
      block_size, blocks_per_chunk: samples per on-device reduction block, blocks per jitted chunk.
      linear_finite_synthid: also the linear class of finite-m SynthID (Monte Carlo, slow).
      extra_decoders: names of :data:`EXTRA_DECODERS` to add.
      published_hu: the figure draws Hu's class as published (unnormalised residual).
    """

    num_samples: int
    seed: int
    synthid_layers: int
    synthid_limit_layers: int
    num_gammas: int
    num_levels: int
    block_size: int
    blocks_per_chunk: int
    linear_finite_synthid: bool
    extra_decoders: tuple
    published_hu: bool


# ---------------------------------------------------------------------------
# Inputs, files and the resumable cache
# ---------------------------------------------------------------------------


def parse_dist(values: Sequence[str], name: str) -> np.ndarray:
    """float32[V] distribution of the ``--name`` comma list, normalised; ValueError naming the flag."""
    try:
        x = np.array([float(v) for v in values], np.float64)
    except ValueError as e:
        raise ValueError(f"--{name} must be a comma list of numbers: {e}") from None
    if x.ndim != 1 or x.size < 2 or (x < 0).any() or abs(x.sum() - 1.0) > 1e-3:
        raise ValueError(f"--{name} must be >= 2 non-negative numbers summing to 1, got {values}")
    return (x / x.sum()).astype(np.float32)


def check_inputs(q: np.ndarray, p: np.ndarray, s: TradeoffSettings) -> None:
    """ValueError naming the flag when Q and P (float32[V]) or the settings cannot make a figure."""
    if q.size != p.size:
        raise ValueError(f"--q has {q.size} entries but --p has {p.size}")
    if s.num_samples < 2:
        raise ValueError("--num_samples must be >= 2")
    for name in s.extra_decoders:
        if name not in EXTRA_DECODERS:
            raise ValueError(f"--extra_decoders takes {', '.join(EXTRA_DECODERS)} (unbiased decoders beyond the "
                             f"paper), got {name!r}")


def inputs_record(q: np.ndarray, p: np.ndarray, s: TradeoffSettings) -> dict:
    """The ``inputs`` of ``tradeoff.json``: Q, P, the settings, where ζ comes from, JAX and devices."""
    return {
        "q": q.tolist(), "p": p.tolist(), "num_samples": s.num_samples, "seed": s.seed,
        "synthid_layers": s.synthid_layers, "synthid_limit_layers": s.synthid_limit_layers,
        "num_gammas": s.num_gammas, "num_levels": s.num_levels, "block_size": s.block_size,
        "published_hu_plotted": s.published_hu, "extra_decoders": list(s.extra_decoders),
        "zeta_source": f"wmspec_jax.prf counter-based hash ({prf.PRF_VERSION}), context = sample index, "
                       "stream keys from the seed (zeta.run_keys)",
        "jax_version": jax.__version__, "devices": [str(d) for d in jax.devices()],
        "code_version": CODE_VERSION,
    }


def write_json(path: pathlib.Path, obj) -> None:
    storage.atomic_write_json(path, obj, indent=1)


class Cache:
    """One JSON file per Monte Carlo result, valid only for identical inputs (``base`` and the
    result's own ``extra``); ``force`` recomputes everything. ``hits`` lists the names it served."""

    def __init__(self, directory: pathlib.Path, base: dict, force: bool):
        self.dir = directory
        self.base = base
        self.force = force
        self.hits: list[str] = []

    def _signature(self, name: str, extra: dict) -> str:
        blob = json.dumps({"name": name, **self.base, **extra}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()

    def get_or_compute(self, name: str, extra: dict, compute, encode, decode):
        path = self.dir / f"{name}.json"
        sig = self._signature(name, extra)
        if not self.force and path.exists():
            try:
                stored = json.loads(path.read_text())
                if stored.get("signature") == sig:
                    _LOG.info("cache hit: %s", name)
                    self.hits.append(name)
                    return decode(stored["data"])
            except (json.JSONDecodeError, KeyError) as e:  # a torn or foreign file: recompute
                _LOG.warning("ignoring unreadable cache file %s (%s)", path, e)
        t0 = time.perf_counter()
        value = compute()
        write_json(path, {"signature": sig, "seconds": time.perf_counter() - t0, "data": encode(value)})
        return value


def open_cache(output_dir: pathlib.Path, inputs: dict, force: bool) -> Cache:
    """The cache under ``<output_dir>/cache``, keyed by the inputs every Monte Carlo result depends on."""
    base = {k: inputs[k] for k in ("q", "p", "num_samples", "seed", "block_size", "code_version")}
    base["prf_version"] = prf.PRF_VERSION
    return Cache(output_dir / "cache", base, force)


def progress_printer(what: str, log: Callable = _SAY):
    """A Monte Carlo ``progress(done, total, seconds)`` callback that logs at most every 5 s and at the end."""
    state = {"last": 0.0}

    def progress(done, total, seconds):
        if done < total and seconds - state["last"] < 5.0:
            return
        state["last"] = seconds
        rate = done / max(seconds, 1e-9)
        log(f"  [{what}] {done:>11,d}/{total:,d} samples  {seconds:7.1f}s  {rate:,.0f} samples/s")

    return progress


# ---------------------------------------------------------------------------
# The computation
# ---------------------------------------------------------------------------


@dataclasses.dataclass
class _Run:
    """What the steps of :func:`compute_all` share: the pair, the settings, the cache and the results so far."""

    q: np.ndarray
    p: np.ndarray
    s: TradeoffSettings
    cache: Cache
    log: Callable
    gammas: np.ndarray
    curves: dict = dataclasses.field(default_factory=dict)
    points: dict = dataclasses.field(default_factory=dict)
    timing: dict = dataclasses.field(default_factory=dict)

    @property
    def mc(self) -> dict:
        return dict(block_size=self.s.block_size, blocks_per_chunk=self.s.blocks_per_chunk)

    def timed(self, name: str, fn):
        t0 = time.perf_counter()
        out = fn()
        self.timing[name] = time.perf_counter() - t0
        return out

    def cached(self, name: str, extra: dict, compute, encode, decode):
        """``compute()``'s value from the cache or computed now, its time in ``timing[name]``."""
        return self.timed(name, lambda: self.cache.get_or_compute(name, extra, compute, encode, decode))

    def progress(self, what: str):
        return progress_printer(what, self.log)


_CURVE_CODEC = (lambda c: c.to_json(), to.Curve.from_json)
_POINT_CODEC = (lambda pt: pt.to_json(), to.Point.from_json)


def _couplings(run: _Run, decoders: Sequence) -> dict:
    """decoder name -> :class:`wmspec_jax.tradeoff.Coupling` float64[V, V] of (draft, target) tokens
    under one ζ: the only Monte Carlo the degenerate decoders need."""
    q, p, n = run.q, run.p, run.s.num_samples
    couplings = {}
    for dec in decoders:
        run.log(f"coupling of (draft, target) tokens, {dec.label}: {n:,d} samples")
        couplings[dec.name] = run.cached(
            f"coupling_{dec.name}", {"decoder": dec.name},
            lambda dec=dec: to.estimate_coupling(q, p, dec, run.s.seed, n, progress=run.progress(dec.name), **run.mc),
            lambda c: {"joint": c.joint.tolist(), "num_samples": c.num_samples},
            lambda d: to.Coupling(np.asarray(d["joint"], np.float64), int(d["num_samples"])))
    return couplings


def _coupling_curves(run: _Run, decoders: Sequence, couplings: dict) -> None:
    """The linear class (Eq. 9-10), Hu's and Google's classes (App. C.2; Hu's as published too) and the
    strength-maintained point of each degenerate decoder, evaluated exactly on its coupling."""
    q, p, gammas = run.q, run.p, run.gammas
    for dec in decoders:
        pi = couplings[dec.name]
        run.curves[f"linear_{dec.name}"] = run.timed(f"linear_{dec.name}", lambda: to.linear_frontier(
            q, p, pi, num_levels=run.s.num_levels, name=f"linear_{dec.name}",
            label=f"linear class, {dec.label}", decoder_label=dec.label))
        for cls in (kernels.HU, kernels.GOOGLE):
            c = to.kernel_curve_from_coupling(q, p, pi, cls, gammas, decoder=dec)
            run.curves[c.name] = c
        c = to.kernel_curve_from_coupling(q, p, pi, kernels.HU, gammas, published=True, decoder=dec)
        run.curves[c.name] = c
        run.points[f"maintained_{dec.name}"] = to.maintained_point_from_coupling(q, p, pi, dec)


def _google_mc(run: _Run, dec) -> to.Curve:
    """Google's class (App. C.2) of a non-degenerate decoder by Monte Carlo over per-sample distributions."""
    q, p, gammas, s = run.q, run.p, run.gammas, run.s
    return run.cached(
        f"google_{dec.name}", {"decoder": dec.name, "gammas": gammas.tolist()},
        lambda: to.kernel_curve_mc(q, p, dec, kernels.GOOGLE, gammas, s.seed, s.num_samples,
                                   block_size=s.block_size, progress=run.progress(f"google {dec.name}")),
        *_CURVE_CODEC)


def _alg1_mc(run: _Run, dec, what: str) -> to.Point:
    """Alg. 1's (SE, WS) point with ``dec`` (pseudorandom acceptance, Thm. 4.1) by Monte Carlo."""
    return run.cached(
        f"alg1_{dec.name}", {"decoder": dec.name},
        lambda: to.alg1_point_mc(run.q, run.p, dec, run.s.seed, run.s.num_samples,
                                 progress=run.progress(what), **run.mc),
        *_POINT_CODEC)


def _monte_carlo_curves(run: _Run, syn_m) -> None:
    """Finite-m SynthID (not degenerate: Google's class, optionally the linear class) and the decoders
    beyond the paper (Google's class and Alg. 1's point), each by Monte Carlo."""
    q, p, s, n, gammas = run.q, run.p, run.s, run.s.num_samples, run.gammas
    run.log(f"Google's class, {syn_m.label}: {n:,d} samples x {gammas.size} gammas")
    c = _google_mc(run, syn_m)
    run.curves[c.name] = c
    if s.linear_finite_synthid:
        run.log(f"linear class, {syn_m.label}: {n:,d} samples, several passes")
        c = run.cached(
            f"linear_{syn_m.name}", {"decoder": syn_m.name, "levels": 21},
            lambda: to.linear_frontier_mc(q, p, syn_m, s.seed, n, num_levels=21, block_size=s.block_size,
                                          name=f"linear_{syn_m.name}", label=f"linear class, {syn_m.label}",
                                          progress=run.progress(f"linear {syn_m.name}")),
            *_CURVE_CODEC)
        run.curves[c.name] = c
    for name in s.extra_decoders:
        dec = to.WatermarkDecoder.from_name(name)
        run.log(f"Google's class and Alg. 1, {dec.label}: {n:,d} samples x {gammas.size} gammas")
        c = _google_mc(run, dec)
        run.curves[c.name] = c
        run.points[f"alg1_{dec.name}"] = _alg1_mc(run, dec, f"alg1 {dec.name}")


def _reference_points(run: _Run, gum, syn_m) -> None:
    """Standard SpecSampl (1 − TV, 0; Lemma 3.4), the optimum (1 − TV, Ent(P)), finite-m SynthID's
    strength-maintained point (γ = 1 end of its Google's class) and Alg. 1 with Gumbel-max."""
    q, p, n = run.q, run.p, run.s.num_samples
    run.points["speculative_sampling"] = to.speculative_sampling_point(q, p)
    run.points["optimum"] = to.optimum_point(q, p)
    google = run.curves[f"google_{syn_m.name}"]
    run.points[f"maintained_{syn_m.name}"] = to.Point(
        f"maintained_{syn_m.name}", f"{syn_m.label}, strength maintained",
        float(google.se[-1]), float(google.se_stderr[-1]), float(google.ws[-1]), float(google.ws_stderr[-1]), n,
        {"method": "gamma = 1 end of Google's class (both models watermarked with one zeta)"})
    run.log(f"Alg. 1 (pseudorandom acceptance), {gum.label}: {n:,d} samples")
    run.points["alg1_gumbel"] = _alg1_mc(run, gum, "alg1")


def _max_abs_z(a, b, stderr) -> float:
    return float(np.max(np.abs(a - b) / np.where(stderr > 0, stderr, np.inf)))


def exact_gumbel(q: np.ndarray, p: np.ndarray, curves: dict, gammas: np.ndarray, num_levels: int, gum) -> dict:
    """Gumbel-max's curves from its closed-form coupling (Q, P float32[V], both > 0), each with the
    largest |z| of the Monte Carlo curve of the same name against it (``max_abs_z_se``, ``max_abs_z_ws``)."""
    exact = to.gumbel_coupling_exact(q, p)
    out = {}
    ex_lin = to.linear_frontier(q, p, exact, num_levels=num_levels)
    out["linear_gumbel"] = {"se": ex_lin.se, "ws": ex_lin.ws, "theta": ex_lin.params["theta"],
                            "gamma": ex_lin.params["gamma"]}
    for cls, pub in ((kernels.HU, False), (kernels.GOOGLE, False), (kernels.HU, True)):
        ce = to.kernel_curve_from_coupling(q, p, exact, cls, gammas, published=pub, decoder=gum)
        out[ce.name] = {"se": ce.se, "ws": ce.ws}
    out["agreement_gumbel"] = to.gumbel_agreement_exact(q, p)
    for name, ex in out.items():
        if name in curves:
            c = curves[name]
            ex["max_abs_z_se"] = _max_abs_z(c.se, np.asarray(ex["se"]), c.se_stderr)
            if c.cls != "linear":  # linear: WS is compared through the (exact) requirement, see docs
                ex["max_abs_z_ws"] = _max_abs_z(c.ws, np.asarray(ex["ws"]), c.ws_stderr)
    return out


def closed_forms(q: np.ndarray, p: np.ndarray) -> dict:
    """1 − TV(Q, P), Ent(P) and Hu's / Google's WS at γ = 0 with a degenerate draft (App. C.2)."""
    return {
        "one_minus_tv": to.one_minus_tv(q, p),
        "entropy_p": float(-np.sum(np.where(p > 0, p * np.log(np.where(p > 0, p.astype(np.float64), 1.0)), 0.0))),
        "google_ws_at_gamma0_degenerate_draft": to.google_ws_at_zero(q, p),
        "hu_ws_at_gamma0_degenerate_draft": to.hu_ws_at_zero(q, p),
    }


def marginal_diagnostics(q: np.ndarray, p: np.ndarray, coupling, name: str, num_samples: int) -> dict:
    """How far the token marginals of a coupling (float64[V, V]) lie from (Q, P): SynthID m = ∞ is
    approximated by m layers + one-hot (App. C.1), so its marginals carry that approximation error."""
    px, py = to.coupling.marginals(coupling)

    def z(est, true):
        return float(np.max(np.abs(est - true) / np.sqrt(np.maximum(true * (1 - true), 1e-300) / num_samples)))

    return {
        f"{name}_max_abs_marginal_bias_q": float(np.max(np.abs(px - q))),
        f"{name}_max_abs_marginal_bias_p": float(np.max(np.abs(py - p))),
        f"{name}_max_marginal_z_q": z(px, q),
        f"{name}_max_marginal_z_p": z(py, p),
        "note": "SynthID m=inf is approximated by m layers + one-hot (App. C.1); its token marginals deviate "
                "from (Q, P) by the approximation error listed here (MC noise ~ sqrt(P(1-P)/n)).",
    }


def compute_all(q: np.ndarray, p: np.ndarray, cache: Cache, s: TradeoffSettings, log: Callable = _SAY) -> dict:
    """Every curve and point of Fig. 1 (Sec. 3.2, App. C) for Q, P float32[V].

    Returns:
      dict with ``curves`` (name -> :class:`wmspec_jax.tradeoff.Curve`), ``points`` (name ->
      :class:`wmspec_jax.tradeoff.Point`), ``exact_gumbel`` (:func:`exact_gumbel`; empty unless Q and
      P are positive everywhere), ``closed_forms``, ``diagnostics`` and ``timing_seconds``.
    """
    run = _Run(q, p, s, cache, log, np.linspace(0.0, 1.0, s.num_gammas))
    gum, syn_inf, syn_m = to.gumbel(), to.synthid_limit(s.synthid_limit_layers), to.synthid(s.synthid_layers)
    couplings = _couplings(run, (gum, syn_inf))
    positive = bool((q > 0).all() and (p > 0).all())
    _coupling_curves(run, (gum, syn_inf), couplings)
    _monte_carlo_curves(run, syn_m)
    _reference_points(run, gum, syn_m)
    exact = exact_gumbel(q, p, run.curves, run.gammas, s.num_levels, gum) if positive else {}
    diagnostics = marginal_diagnostics(q, p, couplings[syn_inf.name], syn_inf.name, s.num_samples)
    return {"curves": run.curves, "points": run.points, "exact_gumbel": exact, "closed_forms": closed_forms(q, p),
            "diagnostics": diagnostics, "timing_seconds": run.timing}


def document(result: dict, inputs: dict, cache_hits: list, total_seconds: float) -> dict:
    """``tradeoff.json``: the inputs, closed forms, reference points, curves (arrays of SE and WS with
    standard errors), the exact Gumbel-max curves, diagnostics, timing and the cache hits."""
    return {
        "inputs": inputs,
        "closed_forms": result["closed_forms"],
        "reference_points": {k: v.to_json() for k, v in result["points"].items()},
        "curves": {k: v.to_json() for k, v in result["curves"].items()},
        "exact_gumbel": to.results.jsonable(result["exact_gumbel"]),
        "diagnostics": result["diagnostics"],
        "timing_seconds": result["timing_seconds"],
        "total_seconds": total_seconds,
        "cache_hits": cache_hits,
        "labels": {"hu_published": kernels.PUBLISHED_LABEL},
    }


def run_tradeoff(q: np.ndarray, p: np.ndarray, s: TradeoffSettings, output_dir, force: bool = False,
                 log: Callable = _SAY) -> dict:
    """Computes Fig. 1 for Q, P float32[V] and writes ``tradeoff.json``, ``tradeoff.png`` and ``cache/``
    under ``output_dir`` (atomically); returns :func:`compute_all`'s result with ``inputs``,
    ``cache_hits`` and ``total_seconds``. ``force``: recompute, ignoring the cache."""
    check_inputs(q, p, s)
    out = pathlib.Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    inputs = inputs_record(q, p, s)
    cache = open_cache(out, inputs, force)
    t0 = time.perf_counter()
    result = compute_all(q, p, cache, s, log)
    result["inputs"] = inputs
    result["cache_hits"] = cache.hits
    result["total_seconds"] = time.perf_counter() - t0
    write_json(out / "tradeoff.json", document(result, inputs, cache.hits, result["total_seconds"]))
    plot(result, s.published_hu, out / "tradeoff.png")
    return result


# ---------------------------------------------------------------------------
# The figure and the summary
# ---------------------------------------------------------------------------


def _star_and_cross(ax, points: dict) -> None:
    opt, ss = points["optimum"], points["speculative_sampling"]
    ax.plot(opt.se, opt.ws, "*", color="red", ms=16, zorder=5, label="optimum (Alg. 1, Thm 4.1)")
    ax.plot(ss.se, ss.ws, "x", color="green", ms=11, mew=2.5, zorder=5, label="standard SpecSampl")


def _plot_linear(ax, curves: dict, points: dict, color: Callable) -> None:
    """Fig. 1 left: the linear classes (Eq. 9-10), the strength-maintained points, star and cross."""
    for c in curves.values():
        if c.cls != "linear":
            continue
        ax.plot(c.se, c.params["ws_required"], "-", color=color(c), lw=2, label=c.label)
        ax.plot(c.se[[0, -1]], c.params["ws_required"][[0, -1]], "o", color=color(c), ms=4)
    # The paper marks both strength-maintained points in blue; the marker shape tells them apart.
    synthid_inf = next(k for k in points if k.startswith("maintained_synthid_inf"))
    for name, marker in (("maintained_gumbel", "o"), (synthid_inf, "s")):
        pt = points[name]
        ax.plot(pt.se, pt.ws, marker, color=BLUE, mec="k", ms=9, zorder=6, label=pt.label)
    _star_and_cross(ax, points)
    ax.set_title("Linear classes (Eq. 9–10)")


def _plot_kernels(ax, curves: dict, points: dict, color: Callable, extra: dict, published_hu: bool) -> None:
    """Fig. 1 right: Hu's and Google's classes (App. C.2), Alg. 1 with decoders beyond the paper, star and cross."""
    for c in curves.values():
        if c.cls == "linear":
            continue
        published = c.notes.get("published_variant", False)
        if c.cls == "hu" and published != published_hu:
            continue
        ax.plot(c.se, c.ws, "--" if c.cls == "hu" else ":", color=color(c), lw=2, label=c.label)
        ax.plot(c.se[[0, -1]], c.ws[[0, -1]], "o", color=color(c), ms=4)
    for label, col in extra.items():  # Alg. 1 with a decoder beyond the paper
        pt = next(pt for name, pt in points.items() if name.startswith("alg1_") and pt.label.endswith(label))
        ax.plot(pt.se, pt.ws, "D", color=col, mec="k", ms=7, zorder=6, label=pt.label)
    _star_and_cross(ax, points)
    ax.set_title("Hu's and Google's classes (App. C.2)"
                 + ("\nHu's class AS PUBLISHED (unnormalised residual)" if published_hu else ""))


def plot(result: dict, published_hu: bool, path: pathlib.Path) -> None:
    """Fig. 1's two panels (:func:`_plot_linear`, :func:`_plot_kernels`) of a :func:`run_tradeoff` result
    to ``path`` (atomically); ``published_hu`` draws Hu's class as published."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curves, points = result["curves"], result["points"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5.2), constrained_layout=True)
    extra_colors = iter(EXTRA_COLORS)
    extra = {c.decoder: next(extra_colors) for c in curves.values() if not c.decoder.startswith(("Gumbel", "SynthID"))}

    def color(c):
        if c.decoder in extra:
            return extra[c.decoder]
        return ORANGE if c.decoder == "Gumbel-max" else (BLUE if "∞" in c.decoder else GRAY)

    _plot_linear(left, curves, points, color)
    _plot_kernels(right, curves, points, color, extra, published_hu)
    n = result["inputs"]["num_samples"]
    for ax in (left, right):
        ax.set_xlabel("sampling efficiency SE")
        ax.set_ylabel("watermark strength WS (nats)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7.5, loc="lower left")
    fig.suptitle(f"Watermark strength vs speculative sampling efficiency — {n:,d} Monte Carlo samples per curve "
                 f"(standard errors in tradeoff.json)", fontsize=10)
    try:
        storage.atomic_savefig(fig, path, dpi=130)
    finally:
        plt.close(fig)


def summary_lines(result: dict) -> list[str]:
    """The reference points (SE, WS with standard errors) and each curve's end points, one line each."""
    pts, cv = result["points"], result["curves"]
    lines = ["reference points (SE, WS):"]
    for pt in pts.values():
        lines.append(f"  {pt.label:55s} SE={pt.se:.5f}±{pt.se_stderr:.5f}  WS={pt.ws:.5f}±{pt.ws_stderr:.5f}")
    lines.append("curve endpoints (first, last):")
    for c in cv.values():
        ws = c.params.get("ws_required", c.ws) if c.cls == "linear" else c.ws
        lines.append(f"  {c.label:72s} ({c.se[0]:.4f}, {ws[0]:.4f}) -> ({c.se[-1]:.4f}, {ws[-1]:.4f})")
    return lines


__all__ = ["CODE_VERSION", "Cache", "EXTRA_COLORS", "EXTRA_DECODERS", "TradeoffSettings", "check_inputs",
           "closed_forms", "compute_all", "document", "exact_gumbel", "inputs_record", "marginal_diagnostics",
           "open_cache", "parse_dist", "plot", "progress_printer", "run_tradeoff", "summary_lines", "write_json"]
