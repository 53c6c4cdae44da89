"""Figure 1: trade-off curves between watermark strength and sampling efficiency.

    python -m experiments.tradeoff_curves --output_dir=results/tradeoff
    python -m experiments.tradeoff_curves --q=0.5,0.3,0.2 --p=0.2,0.3,0.5 --num_samples=1000000

Writes ``tradeoff.json`` (every curve as arrays of SE and WS with standard
errors, the inputs, sample counts, seed and provenance) and ``tradeoff.png``
(the two panels of Fig. 1) to ``--output_dir``:

* left — linear classes (Eq. 9-10) for Gumbel-max and SynthID (m = ∞), the
  standard SpecSampl cross (1 − TV, 0), the two decoders' strength-maintained
  points (both models watermarked with one ζ), the optimum star (1 − TV, Ent(P));
* right — Hu's and Google's classes (App. C.2) for both decoders, Google's
  class with finite-m SynthID (the lower gray curve), the optimum star.

``--extra_decoders=dipmark,gamma_reweight,inverse_transform`` (beyond the
paper) adds, per decoder, Google's class by Monte Carlo (right panel), its
strength-maintained end and Alg. 1's point (for a non-degenerate decoder SE
stays 1 − TV and WS falls below Ent(P)).

``--published_hu`` draws Hu's class as the paper's released simulation
computed it (unnormalised residual), clearly labelled; the JSON always holds
both the correct and the as-published Hu curves.

Every Monte Carlo result is cached under ``<output_dir>/cache`` keyed by its
inputs, so an interrupted run resumes where it stopped (``--force`` ignores
the cache). All files are written atomically (``wmspec_jax.storage.atomic_write``).
"""

from __future__ import annotations

import hashlib
import json
import pathlib
import time

import numpy as np
from absl import app, flags, logging

import jax

from wmspec_jax import prf, storage
from wmspec_jax import tradeoff as to
from wmspec_jax.lab.harness import script_main
from wmspec_jax.tradeoff import kernels

FLAGS = flags.FLAGS
PAPER_Q = "0.4,0.10,0.12,0.11,0.08,0.06,0.05,0.035,0.025,0.02"
PAPER_P = "0.1,0.13,0.155,0.115,0.235,0.065,0.055,0.05,0.06,0.035"
EXTRA_DECODERS = ("inverse_transform", "dipmark", "gamma_reweight")
flags.DEFINE_list("q", PAPER_Q.split(","), "Draft distribution Q (comma list). Default: App. C.1.")
flags.DEFINE_list("p", PAPER_P.split(","), "Target distribution P (comma list). Default: App. C.1.")
flags.DEFINE_integer("num_samples", 10_000_000, "Monte Carlo samples of ζ per estimate (App. C.1 uses 1e7).")
flags.DEFINE_integer("synthid_layers", 30, "Tournament layers m of the finite-m SynthID curve (gray).")
flags.DEFINE_integer("synthid_limit_layers", 30, "Layers applied before the one-hot in SynthID m=∞ (App. C.1: 30).")
flags.DEFINE_integer("seed", 0, "Seed of the Monte Carlo ζ (PRF stream keys).")
flags.DEFINE_string("output_dir", "results/tradeoff", "Where tradeoff.json, tradeoff.png and cache/ go.")
flags.DEFINE_bool("published_hu", False, "Plot Hu's class as published (unnormalised residual), labelled as such.")
flags.DEFINE_integer("num_gammas", 51, "γ values on [0, 1] for Hu's and Google's classes.")
flags.DEFINE_integer("num_levels", 101, "Strength levels on [0, Ent(P)] for the linear classes.")
flags.DEFINE_integer("block_size", to.montecarlo.DEFAULT_BLOCK_SIZE, "Samples per on-device reduction block.")
flags.DEFINE_integer("blocks_per_chunk", to.montecarlo.DEFAULT_BLOCKS_PER_CHUNK, "Blocks per jitted chunk (memory knob).")
flags.DEFINE_bool("linear_finite_synthid", False,
                  "Also compute the linear class for finite-m SynthID (slow: one MC pass per zoom round).")
flags.DEFINE_bool("force", False, "Recompute everything, ignoring the cache.")
flags.DEFINE_list("extra_decoders", [], "Unbiased decoders beyond the paper to add (inverse_transform, dipmark, "
                  "gamma_reweight): Google's class, strength-maintained and Alg. 1 points, by Monte Carlo.")

CODE_VERSION = "tradeoff-curves-v1"  # bump when a cached quantity's definition changes
ORANGE, BLUE, GRAY = "tab:orange", "tab:blue", "0.45"
EXTRA_COLORS = ("tab:purple", "tab:green", "tab:brown", "tab:pink")  # decoders beyond the paper


# ---------------------------------------------------------------------------
# Files: atomic writes and the resumable cache
# ---------------------------------------------------------------------------


def write_json(path: pathlib.Path, obj) -> None:
    storage.atomic_write_json(path, obj, indent=1)


class Cache:
    """One JSON file per Monte Carlo result, valid only for identical inputs."""

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
                    logging.info("cache hit: %s", name)
                    self.hits.append(name)
                    return decode(stored["data"])
            except (json.JSONDecodeError, KeyError) as e:  # a torn or foreign file: recompute
                logging.warning("ignoring unreadable cache file %s (%s)", path, e)
        t0 = time.perf_counter()
        value = compute()
        write_json(path, {"signature": sig, "seconds": time.perf_counter() - t0, "data": encode(value)})
        return value


def progress_printer(what: str):
    state = {"last": 0.0}

    def progress(done, total, seconds):
        if done < total and seconds - state["last"] < 5.0:
            return
        state["last"] = seconds
        rate = done / max(seconds, 1e-9)
        print(f"  [{what}] {done:>11,d}/{total:,d} samples  {seconds:7.1f}s  {rate:,.0f} samples/s", flush=True)

    return progress


# ---------------------------------------------------------------------------
# The computation
# ---------------------------------------------------------------------------


def parse_dist(values, name: str) -> np.ndarray:
    try:
        x = np.array([float(v) for v in values], np.float64)
    except ValueError as e:
        raise app.UsageError(f"--{name} must be a comma list of numbers: {e}")
    if x.ndim != 1 or x.size < 2 or (x < 0).any() or abs(x.sum() - 1.0) > 1e-3:
        raise app.UsageError(f"--{name} must be >= 2 non-negative numbers summing to 1, got {values}")
    return (x / x.sum()).astype(np.float32)


def compute_all(q, p, cache: Cache, flags_) -> dict:
    n = flags_.num_samples
    mc = dict(block_size=flags_.block_size, blocks_per_chunk=flags_.blocks_per_chunk)
    gammas = np.linspace(0.0, 1.0, flags_.num_gammas)
    gum = to.gumbel()
    syn_inf = to.synthid_limit(flags_.synthid_limit_layers)
    syn_m = to.synthid(flags_.synthid_layers)
    curves: dict[str, to.Curve] = {}
    points: dict[str, to.Point] = {}
    timing: dict[str, float] = {}
    couplings = {}

    def timed(name, fn):
        t0 = time.perf_counter()
        out = fn()
        timing[name] = time.perf_counter() - t0
        return out

    # 1. Couplings of (X, Y) for the degenerate decoders: the only Monte Carlo they need.
    for dec in (gum, syn_inf):
        print(f"coupling of (draft, target) tokens, {dec.label}: {n:,d} samples", flush=True)
        couplings[dec.name] = timed(f"coupling_{dec.name}", lambda dec=dec: cache.get_or_compute(
            f"coupling_{dec.name}", {"decoder": dec.name},
            lambda: to.estimate_coupling(q, p, dec, flags_.seed, n, progress=progress_printer(dec.name), **mc),
            lambda c: {"joint": c.joint.tolist(), "num_samples": c.num_samples},
            lambda d: to.Coupling(np.asarray(d["joint"], np.float64), int(d["num_samples"]))))
    exact = to.gumbel_coupling_exact(q, p) if (q > 0).all() and (p > 0).all() else None

    # 2. Curves from the couplings (exact evaluation: no further sampling).
    for dec in (gum, syn_inf):
        pi = couplings[dec.name]
        curves[f"linear_{dec.name}"] = timed(f"linear_{dec.name}", lambda: to.linear_frontier(
            q, p, pi, num_levels=flags_.num_levels, name=f"linear_{dec.name}",
            label=f"linear class, {dec.label}", decoder_label=dec.label))
        for cls in (kernels.HU, kernels.GOOGLE):
            c = to.kernel_curve_from_coupling(q, p, pi, cls, gammas, decoder=dec)
            curves[c.name] = c
        c = to.kernel_curve_from_coupling(q, p, pi, kernels.HU, gammas, published=True, decoder=dec)
        curves[c.name] = c
        points[f"maintained_{dec.name}"] = to.maintained_point_from_coupling(q, p, pi, dec)

    # 3. Finite-m SynthID: not degenerate, so Monte Carlo over per-sample distributions.
    curve_codec = (lambda c: c.to_json(), to.Curve.from_json)

    def google_mc(dec):
        return timed(f"google_{dec.name}", lambda: cache.get_or_compute(
            f"google_{dec.name}", {"decoder": dec.name, "gammas": gammas.tolist()},
            lambda: to.kernel_curve_mc(q, p, dec, kernels.GOOGLE, gammas, flags_.seed, n,
                                       block_size=flags_.block_size, progress=progress_printer(f"google {dec.name}")),
            *curve_codec))

    print(f"Google's class, {syn_m.label}: {n:,d} samples x {gammas.size} gammas", flush=True)
    c = google_mc(syn_m)
    curves[c.name] = c
    if flags_.linear_finite_synthid:
        print(f"linear class, {syn_m.label}: {n:,d} samples, several passes", flush=True)
        c = timed(f"linear_{syn_m.name}", lambda: cache.get_or_compute(
            f"linear_{syn_m.name}", {"decoder": syn_m.name, "levels": 21},
            lambda: to.linear_frontier_mc(q, p, syn_m, flags_.seed, n, num_levels=21, block_size=flags_.block_size,
                                          name=f"linear_{syn_m.name}", label=f"linear class, {syn_m.label}",
                                          progress=progress_printer(f"linear {syn_m.name}")),
            *curve_codec))
        curves[c.name] = c

    # 3b. Decoders beyond the paper: Google's class and Alg. 1's point by Monte Carlo, as for finite m.
    for name in getattr(flags_, "extra_decoders", ()) or ():
        dec = to.WatermarkDecoder.from_name(name)
        print(f"Google's class and Alg. 1, {dec.label}: {n:,d} samples x {gammas.size} gammas", flush=True)
        c = google_mc(dec)
        curves[c.name] = c
        points[f"alg1_{dec.name}"] = timed(f"alg1_{dec.name}", lambda: cache.get_or_compute(
            f"alg1_{dec.name}", {"decoder": dec.name},
            lambda: to.alg1_point_mc(q, p, dec, flags_.seed, n, progress=progress_printer(f"alg1 {dec.name}"), **mc),
            lambda pt: pt.to_json(), to.Point.from_json))

    # 4. Reference points.
    points["speculative_sampling"] = to.speculative_sampling_point(q, p)
    points["optimum"] = to.optimum_point(q, p)
    points[f"maintained_{syn_m.name}"] = to.Point(
        f"maintained_{syn_m.name}", f"{syn_m.label}, strength maintained",
        float(curves[f"google_{syn_m.name}"].se[-1]), float(curves[f"google_{syn_m.name}"].se_stderr[-1]),
        float(curves[f"google_{syn_m.name}"].ws[-1]), float(curves[f"google_{syn_m.name}"].ws_stderr[-1]), n,
        {"method": "gamma = 1 end of Google's class (both models watermarked with one zeta)"})
    print(f"Alg. 1 (pseudorandom acceptance), {gum.label}: {n:,d} samples", flush=True)
    points["alg1_gumbel"] = timed("alg1_gumbel", lambda: cache.get_or_compute(
        "alg1_gumbel", {"decoder": gum.name},
        lambda: to.alg1_point_mc(q, p, gum, flags_.seed, n, progress=progress_printer("alg1"), **mc),
        lambda pt: pt.to_json(), to.Point.from_json))

    # 5. Exact Gumbel-max curves (closed-form coupling) next to the Monte Carlo ones.
    exact_json = {}
    if exact is not None:
        ex_lin = to.linear_frontier(q, p, exact, num_levels=flags_.num_levels)
        exact_json["linear_gumbel"] = {"se": ex_lin.se, "ws": ex_lin.ws, "theta": ex_lin.params["theta"],
                                       "gamma": ex_lin.params["gamma"]}
        for cls, pub in ((kernels.HU, False), (kernels.GOOGLE, False), (kernels.HU, True)):
            ce = to.kernel_curve_from_coupling(q, p, exact, cls, gammas, published=pub, decoder=gum)
            exact_json[ce.name] = {"se": ce.se, "ws": ce.ws}
        exact_json["agreement_gumbel"] = to.gumbel_agreement_exact(q, p)
        z = lambda a, b, s: float(np.max(np.abs(a - b) / np.where(s > 0, s, np.inf)))
        for name, ex in exact_json.items():
            if name in curves:
                c = curves[name]
                ex["max_abs_z_se"] = z(c.se, np.asarray(ex["se"]), c.se_stderr)
                if c.cls != "linear":  # linear: WS is compared through the (exact) requirement, see docs
                    ex["max_abs_z_ws"] = z(c.ws, np.asarray(ex["ws"]), c.ws_stderr)
    closed = {
        "one_minus_tv": to.one_minus_tv(q, p),
        "entropy_p": float(-np.sum(np.where(p > 0, p * np.log(np.where(p > 0, p.astype(np.float64), 1.0)), 0.0))),
        "google_ws_at_gamma0_degenerate_draft": to.google_ws_at_zero(q, p),
        "hu_ws_at_gamma0_degenerate_draft": to.hu_ws_at_zero(q, p),
    }
    px, py = to.coupling.marginals(couplings[syn_inf.name])
    z_marg = lambda est, true: float(np.max(np.abs(est - true) / np.sqrt(np.maximum(true * (1 - true), 1e-300) / n)))
    diagnostics = {
        f"{syn_inf.name}_max_abs_marginal_bias_q": float(np.max(np.abs(px - q))),
        f"{syn_inf.name}_max_abs_marginal_bias_p": float(np.max(np.abs(py - p))),
        f"{syn_inf.name}_max_marginal_z_q": z_marg(px, q),
        f"{syn_inf.name}_max_marginal_z_p": z_marg(py, p),
        "note": "SynthID m=inf is approximated by m layers + one-hot (App. C.1); its token marginals deviate "
                "from (Q, P) by the approximation error listed here (MC noise ~ sqrt(P(1-P)/n)).",
    }
    return {"curves": curves, "points": points, "exact_gumbel": exact_json, "closed_forms": closed,
            "diagnostics": diagnostics, "timing_seconds": timing}


# ---------------------------------------------------------------------------
# The figure
# ---------------------------------------------------------------------------


def plot(result: dict, published_hu: bool, path: pathlib.Path) -> None:
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


    def star_and_cross(ax):
        opt, ss = points["optimum"], points["speculative_sampling"]
        ax.plot(opt.se, opt.ws, "*", color="red", ms=16, zorder=5, label="optimum (Alg. 1, Thm 4.1)")
        ax.plot(ss.se, ss.ws, "x", color="green", ms=11, mew=2.5, zorder=5, label="standard SpecSampl")

    for c in curves.values():
        if c.cls != "linear":
            continue
        left.plot(c.se, c.params["ws_required"], "-", color=color(c), lw=2, label=c.label)
        left.plot(c.se[[0, -1]], c.params["ws_required"][[0, -1]], "o", color=color(c), ms=4)
    # The paper marks both strength-maintained points in blue; the marker shape tells them apart.
    for name, marker in (("maintained_gumbel", "o"), (next(k for k in points if k.startswith("maintained_synthid_inf")), "s")):
        pt = points[name]
        left.plot(pt.se, pt.ws, marker, color=BLUE, mec="k", ms=9, zorder=6, label=pt.label)
    star_and_cross(left)
    left.set_title("Linear classes (Eq. 9–10)")

    for c in curves.values():
        if c.cls == "linear":
            continue
        published = c.notes.get("published_variant", False)
        if c.cls == "hu" and published != published_hu:
            continue
        right.plot(c.se, c.ws, "--" if c.cls == "hu" else ":", color=color(c), lw=2, label=c.label)
        right.plot(c.se[[0, -1]], c.ws[[0, -1]], "o", color=color(c), ms=4)
    for label, col in extra.items():  # Alg. 1 with a decoder beyond the paper
        pt = next(pt for name, pt in points.items() if name.startswith("alg1_") and pt.label.endswith(label))
        right.plot(pt.se, pt.ws, "D", color=col, mec="k", ms=7, zorder=6, label=pt.label)
    star_and_cross(right)
    right.set_title("Hu's and Google's classes (App. C.2)" + ("\nHu's class AS PUBLISHED (unnormalised residual)" if published_hu else ""))
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


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    q, p = parse_dist(FLAGS.q, "q"), parse_dist(FLAGS.p, "p")
    if q.size != p.size:
        raise app.UsageError(f"--q has {q.size} entries but --p has {p.size}")
    if FLAGS.num_samples < 2:
        raise app.UsageError("--num_samples must be >= 2")
    for name in FLAGS.extra_decoders:
        if name not in EXTRA_DECODERS:
            raise app.UsageError(f"--extra_decoders takes {', '.join(EXTRA_DECODERS)} (unbiased decoders beyond the "
                                 f"paper), got {name!r}")
    out = pathlib.Path(FLAGS.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    inputs = {
        "q": q.tolist(), "p": p.tolist(), "num_samples": FLAGS.num_samples, "seed": FLAGS.seed,
        "synthid_layers": FLAGS.synthid_layers, "synthid_limit_layers": FLAGS.synthid_limit_layers,
        "num_gammas": FLAGS.num_gammas, "num_levels": FLAGS.num_levels, "block_size": FLAGS.block_size,
        "published_hu_plotted": FLAGS.published_hu, "extra_decoders": list(FLAGS.extra_decoders),
        "zeta_source": f"wmspec_jax.prf counter-based hash ({prf.PRF_VERSION}), context = sample index, "
                       "stream keys from the seed (zeta.run_keys)",
        "jax_version": jax.__version__, "devices": [str(d) for d in jax.devices()],
        "code_version": CODE_VERSION,
    }
    base = {k: inputs[k] for k in ("q", "p", "num_samples", "seed", "block_size", "code_version")}
    base["prf_version"] = prf.PRF_VERSION
    cache = Cache(out / "cache", base, FLAGS.force)
    t0 = time.perf_counter()
    result = compute_all(q, p, cache, FLAGS)
    result["inputs"] = inputs
    result["cache_hits"] = cache.hits
    result["total_seconds"] = time.perf_counter() - t0
    doc = {
        "inputs": inputs,
        "closed_forms": result["closed_forms"],
        "reference_points": {k: v.to_json() for k, v in result["points"].items()},
        "curves": {k: v.to_json() for k, v in result["curves"].items()},
        "exact_gumbel": to.results.jsonable(result["exact_gumbel"]),
        "diagnostics": result["diagnostics"],
        "timing_seconds": result["timing_seconds"],
        "total_seconds": result["total_seconds"],
        "cache_hits": cache.hits,
        "labels": {"hu_published": kernels.PUBLISHED_LABEL},
    }
    write_json(out / "tradeoff.json", doc)
    plot(result, FLAGS.published_hu, out / "tradeoff.png")
    summarise(result)
    print(f"wrote {out / 'tradeoff.json'} and {out / 'tradeoff.png'} in {result['total_seconds']:.1f}s"
          + (f" (cache hits: {', '.join(cache.hits)})" if cache.hits else ""))


def summarise(result: dict) -> None:
    pts, cv = result["points"], result["curves"]
    print("reference points (SE, WS):")
    for pt in pts.values():
        print(f"  {pt.label:55s} SE={pt.se:.5f}±{pt.se_stderr:.5f}  WS={pt.ws:.5f}±{pt.ws_stderr:.5f}")
    print("curve endpoints (first, last):")
    for c in cv.values():
        ws = c.params.get("ws_required", c.ws) if c.cls == "linear" else c.ws
        print(f"  {c.label:72s} ({c.se[0]:.4f}, {ws[0]:.4f}) -> ({c.se[-1]:.4f}, {ws[-1]:.4f})")


if __name__ == "__main__":
    app.run(script_main(main))
