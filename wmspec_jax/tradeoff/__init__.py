"""Trade-off curves between watermark strength and sampling efficiency (Sec. 3.2, Fig. 1).

Sub-modules (one idea each):
  zeta        decoders (Gumbel-max, SynthID m, SynthID m=∞ per App. C.1) and their ζ
  montecarlo  chunked, device-sharded Monte Carlo means / counts with standard errors
  coupling    the joint law of (draft token, target token) under shared ζ; exact for Gumbel-max
  optimize    batched zoom-grid minimisation (convex) and root bracketing (monotone)
  linear      the linear classes' frontier (Eq. 9-10)
  kernels     Hu's and Google's classes (App. C.2), incl. the as-published Hu variant
  reference   reference points (SpecSampl, strength maintained, optimum / Alg. 1) and closed forms
  results     Curve / Point containers and their JSON form

Typical use (degenerate decoders):

    from wmspec_jax import tradeoff as to
    dec = to.gumbel()
    pi = to.estimate_coupling(q, p, dec, key=0, num_samples=10**7)
    front = to.linear_frontier(q, p, pi, decoder_label=dec.label)
    hu = to.kernel_curve_from_coupling(q, p, pi, "hu", gammas, decoder=dec)

and :func:`linear_frontier_mc` / :func:`kernel_curve_mc` for any decoder.
"""

from wmspec_jax.tradeoff import coupling, kernels, linear, montecarlo, optimize, reference, results, zeta
from wmspec_jax.tradeoff.coupling import (
    Coupling,
    estimate_coupling,
    expectation,
    gumbel_agreement_exact,
    gumbel_coupling_exact,
)
from wmspec_jax.tradeoff.kernels import (
    GOOGLE,
    HU,
    PUBLISHED_LABEL,
    google_pair_values,
    hu_pair_values,
    kernel_curve_from_coupling,
    kernel_curve_mc,
)
from wmspec_jax.tradeoff.linear import linear_frontier, linear_frontier_mc, linear_pair_values
from wmspec_jax.tradeoff.montecarlo import Moments, counts, moments
from wmspec_jax.tradeoff.reference import (
    alg1_point_mc,
    google_ws_at_zero,
    hu_ws_at_zero,
    kernel_se_degenerate,
    maintained_point_from_coupling,
    maintained_point_mc,
    one_minus_tv,
    optimum_point,
    speculative_sampling_point,
)
from wmspec_jax.tradeoff.results import Curve, Point
from wmspec_jax.tradeoff.zeta import WatermarkDecoder, gumbel, synthid, synthid_limit


__all__ = ["Coupling", "Curve", "GOOGLE", "HU", "Moments", "PUBLISHED_LABEL", "Point", "WatermarkDecoder",
           "alg1_point_mc", "counts", "estimate_coupling", "expectation", "google_pair_values", "google_ws_at_zero",
           "gumbel", "gumbel_agreement_exact", "gumbel_coupling_exact", "hu_pair_values", "hu_ws_at_zero",
           "kernel_curve_from_coupling", "kernel_curve_mc", "kernel_se_degenerate", "linear_frontier",
           "linear_frontier_mc", "linear_pair_values", "maintained_point_from_coupling", "maintained_point_mc",
           "moments", "one_minus_tv", "optimum_point", "speculative_sampling_point", "synthid", "synthid_limit"]
