"""absl flags of the experiment scripts (``python -m experiments.<script>``): one flag per field of
:class:`wmspec_jax.lab.settings.Settings`, plus the secret flags
(:func:`wmspec_jax.cli.flags.define_secret_flags`) and the robustness
experiment's own.

* :func:`define_flags` / :func:`settings_from_flags`: to add a flag to every
  experiment script, add a field to ``Settings`` and its help line to
  :data:`FLAG_HELP`.
"""

from __future__ import annotations

import dataclasses

from absl import flags

from wmspec_jax.cli.flags import PAIR_FLAG_HELP, SECRET_FLAGS, define_secret_flags, secret_from_flags
from wmspec_jax.lab.harness import log
from wmspec_jax.lab.settings import Settings

FLAG_HELP = {
    **PAIR_FLAG_HELP,
    "dataset": "builtin-eli5[:split], builtin-c4[:split], eli5:PATH or c4:PATH (wmspec_jax.text_data)",
    "num_prompts": "texts per run of the speed table (Tables 1-2)",
    "num_detection_texts": "texts per detection run (train + test; >= 4)",
    "num_detection_train": "of each detection run's texts, how many (the lowest indices) train the detectors; "
                           "the rest test (0: half)",
    "max_new_tokens": "generated tokens per text",
    "max_prompt_tokens": "longest prompt in tokens (a longer prompt is an error, never cut silently)",
    "batch_size": "rows per jitted generation call (the speed table's PTT is per token at this batch)",
    "detection_batch_size": "rows per generation call of the detection runs (0: --batch_size); the texts do "
                            "not depend on it",
    "lookaheads": "K values of the speed table",
    "detect_lookahead": "K of the detection runs",
    "draft_trees": "multi-draft shapes beyond the paper, each run next to one chain in the speed table (at every "
                   "K for n chains, at its depth for a tree) and detected at --detect_lookahead: n (n chains), "
                   "b1xb2x... (a static tree), a trailing d draws siblings without replacement; e.g. 3,3x2x1d",
    "gumbel_temperature": "temperature of the Gumbel-max runs (paper: 0.5)",
    "synthid_temperature": "temperature of the SynthID runs (paper: 0.7)",
    "synthid_layers": "SynthID tournament layers m (paper: 30)",
    "synthid_mixture": "Bayesian SynthID detectors: 'layer' (the paper's per-(token, layer) mixture, App. D "
                       "Eq. 17) or 'token' (one source per token)",
    "top_k": "top-k for P and Q (0: none)",
    "stop_at_eos": "stop a text at the EOS token (default: fixed-length texts)",
    "tpr_lengths": "token lengths of the TPR curves",
    "roc_length_gumbel": "tokens of the Gumbel ROC curves (paper: 200)",
    "roc_length_synthid": "tokens of the SynthID ROC curves (paper: 100)",
    "num_resamples": "bootstrap resamples of the TPR intervals",
    "seed": "seed of prompt choice and true randomness",
    "mesh": "devices as 'data=D,model=M': the batch split over data, the models tensor-parallel over model "
            "(docs/sharding.md); '' = one device. Tokens do not depend on it",
}
def define_flags(defaults: Settings = Settings(), *, required_defaults: bool = True,
                 fv: flags.FlagValues = flags.FLAGS) -> None:
    """Defines one absl flag per :class:`Settings` field, plus ``--secret_env`` / ``--secret_file``.

    There is no flag for the secret itself: argv is visible to every user of
    the machine (``ps``) and lands in shell histories.
    With ``required_defaults=False`` every flag defaults to ``None`` (the
    caller fills unset ones from a preset, see ``experiments/reproduce.py``).
    """
    for field in dataclasses.fields(Settings):
        if field.name == "secret":
            continue
        value = getattr(defaults, field.name) if required_defaults else None
        help_ = FLAG_HELP[field.name]
        kw = dict(flag_values=fv)
        if field.name in ("lookaheads", "tpr_lengths", "draft_trees"):
            flags.DEFINE_list(field.name, None if value is None else [str(v) for v in value], help_, **kw)
        elif field.type in ("int", "Optional[int]"):
            flags.DEFINE_integer(field.name, None if value is None else (value or 0), help_, **kw)
        elif field.type == "float":
            flags.DEFINE_float(field.name, value, help_, **kw)
        elif field.type == "bool":
            flags.DEFINE_bool(field.name, value, help_, **kw)
        else:
            flags.DEFINE_string(field.name, value, help_, **kw)
    define_secret_flags(fv)


def settings_from_flags(base: Settings = Settings(), *, allow_demo_secret: bool = True,
                        fv: flags.FlagValues = flags.FLAGS) -> Settings:
    """:class:`Settings` from the parsed flags; unset (None) flags keep ``base``.

    The secret comes from ``--secret_file``, else the environment variable
    (``--secret_env``, default ``$WMSPEC_SECRET``), else the public demo
    secret with a warning — refused when ``allow_demo_secret=False`` (the
    paper preset). Invalid values raise ``absl.app.UsageError`` naming the flag.
    """
    from absl import app

    values = {}
    for field in dataclasses.fields(Settings):
        if field.name == "secret":
            continue
        v = fv[field.name].value
        if v is None:
            continue
        if field.name == "draft_trees":
            v = tuple(x for x in v if x)
        elif field.name in ("lookaheads", "tpr_lengths"):
            try:
                v = tuple(int(x) for x in v)
            except ValueError:
                raise app.UsageError(f"--{field.name} must be a comma-separated list of ints, got {v}") from None
        if field.type == "Optional[int]":  # 0 means "none" / "the default" (top_k, detection_*)
            v = v or None
        values[field.name] = v
    try:
        secret, source = secret_from_flags(fv, allow_demo=allow_demo_secret)
        settings = dataclasses.replace(base, secret=secret, **values)
    except ValueError as e:
        raise app.UsageError(str(e)) from None
    log(f"watermark secret from {source} (fingerprint {secret.fingerprint})")
    return settings


def define_robustness_flags(fv: flags.FlagValues = flags.FLAGS) -> None:
    """``--edits``, ``--edit_rates``, ``--reorder_span``, ``--num_auc_resamples`` of ``experiments/robustness.py``."""
    from wmspec_jax.lab.robustness import RobustnessSettings

    d = RobustnessSettings()
    flags.DEFINE_list("edits", list(d.edits), "edits to apply: substitute, insert, delete, reorder, mix",
                      flag_values=fv)
    flags.DEFINE_list("edit_rates", [f"{r:g}" for r in d.rates], "edit rates in [0, 1] (mix: share of human "
                      "tokens); 0 reproduces the detection experiment", flag_values=fv)
    flags.DEFINE_integer("reorder_span", d.span, "tokens per span of the reorder edit", flag_values=fv)
    flags.DEFINE_integer("num_auc_resamples", d.num_auc_resamples, "bootstrap resamples of the AUC intervals",
                         flag_values=fv)


def robustness_settings_from_flags(fv: flags.FlagValues = flags.FLAGS):
    """:class:`wmspec_jax.lab.robustness.RobustnessSettings` from the parsed flags (UsageError if invalid)."""
    from absl import app

    from wmspec_jax.lab.robustness import RobustnessSettings

    try:
        rates = tuple(float(x) for x in fv.edit_rates)
        return RobustnessSettings(edits=tuple(fv.edits), rates=rates, span=fv.reorder_span,
                                  num_auc_resamples=fv.num_auc_resamples)
    except ValueError as e:
        raise app.UsageError(str(e)) from None


__all__ = ["FLAG_HELP", "SECRET_FLAGS", "define_flags", "define_robustness_flags", "robustness_settings_from_flags",
           "settings_from_flags"]
