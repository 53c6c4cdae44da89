"""``wmspec-detect``'s flags of how texts are scored and judged: the detectors, their options, the verdict,
corpus dedup, windows and the edit test of key-sequence texts (:class:`wmspec_jax.lines.scoring.ScoringOptions`)."""

from __future__ import annotations

from absl import flags

from wmspec_jax import scheme_defaults
from wmspec_jax.lines import scoring


def define_flags(fv: flags.FlagValues) -> None:
    """The scoring flags on ``fv``."""
    flags.DEFINE_integer("key_sequence", 0, "texts generated under a key sequence of this length n (a line's "
                         "key_sequence gives it): scored by the edit test", lower_bound=0, flag_values=fv)
    flags.DEFINE_float("edit_gamma", 0.0, "the edit test's cost γ of an inserted or deleted token", lower_bound=0.0,
                       flag_values=fv)
    flags.DEFINE_integer("null_keys", 99, "the edit test's null keys T (smallest p-value 1/(T+1))", lower_bound=1,
                         upper_bound=9999, flag_values=fv)
    flags.DEFINE_list("detector", ["auto"], "comma-separated registry names (see --help) or saved detector files "
                      "(.npz); 'auto': the decoder's default", flag_values=fv)
    flags.DEFINE_float("tau", None, "τ of --detector=ars-tau (default 0.5; a saved Ars-τ has its fitted τ)",
                       flag_values=fv)
    flags.DEFINE_float("kgw_gamma", None, "KGW's green fraction (default: the line's kgw_gamma, else "
                       f"{scheme_defaults.KGW_GAMMA})",
                       flag_values=fv)
    flags.DEFINE_float("draft_fraction", None, "p of Ars-Prior (default 0.5; the share of accepted drafts of the "
                       "generator, if known)", flag_values=fv)
    flags.DEFINE_float("alpha", 0.01, "verdict 'watermarked' iff p <= alpha", lower_bound=0.0, upper_bound=1.0,
                       flag_values=fv)
    flags.DEFINE_integer("min_tokens", 8, "texts with fewer scored tokens get the verdict 'not enough tokens'",
                         lower_bound=1, flag_values=fv)
    flags.DEFINE_enum("dedup", "none", list(scoring.DEDUP_CHOICES), "corpus: score each (context, token) window "
                      "at most once over all the texts scored with the secret itself (first occurrence in input "
                      "order), so the key's false positives over templated or repeated text are binomial",
                      flag_values=fv)
    flags.DEFINE_bool("windowed", False, "also report the best window (a watermarked span) with its corrected "
                      "p-value", flag_values=fv)
    flags.DEFINE_integer("min_window", 16, "shortest window of --windowed (tokens)", lower_bound=2, flag_values=fv)


def scoring_options(fv: flags.FlagValues) -> scoring.ScoringOptions:
    """The :class:`~wmspec_jax.lines.scoring.ScoringOptions` the flags give."""
    return scoring.ScoringOptions(alpha=fv.alpha, min_tokens=fv.min_tokens, windowed=fv.windowed,
                                  min_window=fv.min_window, batch_size=fv.batch_size, tau=fv.tau,
                                  draft_fraction=fv.draft_fraction, kgw_gamma=fv.kgw_gamma,
                                  sibling_weights=None if fv.sibling_weights is None else tuple(fv.sibling_weights),
                                  dedup=fv.dedup, edit_gamma=fv.edit_gamma, null_keys=fv.null_keys)


__all__ = ["define_flags", "scoring_options"]
