"""The experiments' functions under their former names (kept for notebooks and user code).

``pipeline.py`` used to hold settings, session, tables, plots, flags and
markdown in one module; they now live one idea per module in
:mod:`wmspec_jax.experiment` (settings, session, speed, detection,
robustness, tables, plots, and :mod:`wmspec_jax.experiment.flags`, the absl
flags of the experiment scripts). Every name below is the same object as there.
"""

from wmspec_jax import detect  # noqa: F401  (``pipeline.detect`` was importable)
from wmspec_jax.experiment.flags import FLAG_HELP, SECRET_FLAGS, define_flags, settings_from_flags
from wmspec_jax.experiment.detection import detection_runs, detection_texts, run_detection
from wmspec_jax.experiment.plots import plot_aatps, plot_detection
from wmspec_jax.experiment.session import Session, log, preflight
from wmspec_jax.experiment.settings import GENERATION_FIELDS, GUMBEL, PARTS, SYNTHID, Settings, prompts_needed
from wmspec_jax.experiment.speed import speculative_checks, speed_runs, run_speculative
from wmspec_jax.experiment.tables import detection_markdown, speculative_markdown

__all__ = [
    "FLAG_HELP", "GENERATION_FIELDS", "GUMBEL", "PARTS", "SECRET_FLAGS", "SYNTHID", "Session", "Settings",
    "define_flags", "detection_markdown", "detection_runs", "detection_texts", "log", "plot_aatps",
    "plot_detection", "preflight", "prompts_needed", "run_detection", "run_speculative", "settings_from_flags",
    "speculative_checks", "speculative_markdown", "speed_runs",
]
