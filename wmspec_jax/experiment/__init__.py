"""The paper's LLM experiments and the robustness experiment as functions, one idea per module.

=============================  ==========================================================
module                         idea
=============================  ==========================================================
:mod:`.settings`               :class:`Settings` (validated when built), ``GENERATION_FIELDS``
:mod:`.session`                :func:`preflight`, :class:`Session` (lock, pair, prompts, records)
:mod:`.speed`                  Tables 1-2: :func:`run_speculative`
:mod:`.detection`              Figs. 2 and 5: :func:`run_detection` (saves the fitted detectors)
:mod:`.robustness`             edits 0-50 %: :func:`run_robustness`
:mod:`.tables`, :mod:`.plots`  CSV / markdown tables and figures
=============================  ==========================================================

The absl flags of the scripts are in :mod:`wmspec_jax.experiment.flags` (the
secret flags shared with ``wmspec-generate`` / ``wmspec-detect``);
``experiments/*.py`` are thin wrappers. :mod:`wmspec_jax.pipeline` re-exports the names it held before
this split.
"""

from wmspec_jax.experiment.detection import detection_runs, detection_texts, run_detection
from wmspec_jax.experiment.plots import plot_aatps, plot_detection
from wmspec_jax.experiment.session import Session, log, preflight, script_main
from wmspec_jax.experiment.settings import GENERATION_FIELDS, GUMBEL, PARTS, SYNTHID, Settings, prompts_needed
from wmspec_jax.experiment.speed import method_label, run_speculative, speculative_checks, speed_runs
from wmspec_jax.experiment.tables import detection_markdown, speculative_markdown, write_csv

__all__ = [
    "GENERATION_FIELDS", "GUMBEL", "PARTS", "SYNTHID", "Session", "Settings", "detection_markdown", "detection_runs",
    "detection_texts", "log", "method_label", "plot_aatps", "plot_detection", "preflight", "prompts_needed",
    "run_detection", "run_speculative", "script_main", "speculative_checks", "speculative_markdown", "speed_runs",
    "write_csv",
]
