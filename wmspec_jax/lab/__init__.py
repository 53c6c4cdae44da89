"""The lab: the paper's experiments, the robustness experiment and what they stand on. Nothing in the
algorithm (the package's other modules but ``cli``) imports it.

==================================  =====================================================================
module                              idea
==================================  =====================================================================
:mod:`.data`                        prompts and human texts (ELI5 / C4 from local files, built-in stand-ins)
:mod:`.pairs`                       ``--target`` / ``--draft``: the built-in pair, the toy pair, checkpoints
:mod:`.runs`                        one generation setting over many prompts: resumable JSONL records
:mod:`.evaluation`                  Tables 1-2 rows; the detection protocol of Figs. 2 / 5
:mod:`.edits`                       token edits of the robustness experiment
:mod:`.settings`                    :class:`Settings` (validated when built), ``GENERATION_FIELDS``
:mod:`.harness`                     :func:`preflight`, :class:`Session` (lock, pair, prompts, records)
:mod:`.speed`                       Tables 1-2: :func:`run_speculative`
:mod:`.detection_experiment`        Figs. 2 and 5: :func:`run_detection` (saves the fitted detectors)
:mod:`.robustness`                  edits 0-50 %: :func:`run_robustness` and its figures
:mod:`.tables`, :mod:`.plots`       CSV / markdown tables and figures
==================================  =====================================================================

``experiments/*.py`` are thin absl scripts over these functions (``python -m experiments.reproduce``);
their flags, one per setting, are ``experiments/flags.py``.
"""

from wmspec_jax.lab.detection_experiment import detection_runs, detection_texts, run_detection
from wmspec_jax.lab.plots import plot_aatps, plot_detection
from wmspec_jax.lab.harness import Session, log, preflight, script_main
from wmspec_jax.lab.settings import GENERATION_FIELDS, GUMBEL, PARTS, SYNTHID, Settings, prompts_needed
from wmspec_jax.lab.speed import method_label, run_speculative, speculative_checks, speed_runs
from wmspec_jax.lab.tables import detection_markdown, speculative_markdown, write_csv

__all__ = [
    "GENERATION_FIELDS", "GUMBEL", "PARTS", "SYNTHID", "Session", "Settings", "detection_markdown", "detection_runs",
    "detection_texts", "log", "method_label", "plot_aatps", "plot_detection", "preflight", "prompts_needed",
    "run_detection", "run_speculative", "script_main", "speculative_checks", "speculative_markdown", "speed_runs",
    "write_csv",
]
