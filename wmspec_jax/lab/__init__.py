"""The lab: the paper's experiments, the robustness experiment and what they stand on. Nothing in the
algorithm (the package's other modules but ``cli``) imports it.

==================================  =====================================================================
module                              idea
==================================  =====================================================================
:mod:`.runs`                        one generation setting over many prompts: resumable JSONL records
:mod:`.evaluation`                  Tables 1-2 rows; the detection protocol of Figs. 2 / 5
:mod:`.edits`                       token edits of the robustness experiment
:mod:`.settings`                    :class:`Settings` (validated when built), ``GENERATION_FIELDS``
:mod:`.harness`                     :func:`preflight`, :class:`Session` (lock, pair, prompts, records)
:mod:`.speed`                       Tables 1-2: :func:`run_speculative`
:mod:`.detection_experiment`        Figs. 2 and 5: :func:`run_detection` (saves the fitted detectors)
:mod:`.detection_rows`              the protocol's inputs: prompt + text rows, the train / test split
:mod:`.robustness`                  edits 0-50 %: :func:`run_robustness` and its figures
:mod:`.paraphrase`                  paraphrasers (texts -> texts; the pair's target by default) and what a rewrite kept
:mod:`.paraphrase_robustness`       rewrites by a language model scored key-only, windowed and model-assisted
:mod:`.field_metrics`               the figures other benchmarks report: tokens to detect, low-FPR TPR, quality
:mod:`.tradeoff_experiment`         Fig. 1: :func:`~.tradeoff_experiment.run_tradeoff` (curves, points, cache, figure)
:mod:`.decoder_comparison`          every decoder under every method: :func:`~.decoder_comparison.run_comparison`
:mod:`.distill_data`                the built-in drafts' training samples (the target's continuations)
:mod:`.distill`                     the adapter draft's recipe (LoRA on kept target layers)
:mod:`.distill_features`            the feature draft's recipe (a head on the target's features)
:mod:`.corpora`                     human corpora that repeat themselves (form letters, code, tables, ...)
:mod:`.key_sweep`                   a corpus scored under many keys at the cost of its distinct windows
:mod:`.model_assisted_rows`         the detection experiment's model-assisted row (calibrated, exact p-values)
:mod:`.tables`, :mod:`.plots`       CSV / markdown tables and figures
==================================  =====================================================================

``experiments/*.py`` are thin absl scripts over these functions (``python -m experiments.reproduce``);
their flags, one per setting, are ``experiments/flags.py``. Modules and names are imported on first
use (:mod:`wmspec_jax._lazy`): a tool that needs only :mod:`.data` does not import the experiments (and
SciPy).
"""

from wmspec_jax._lazy import attach

SUBMODULES = (
    "corpora", "data", "decoder_comparison", "detection_experiment", "detection_rows", "distill", "distill_data", "distill_features", "edits",
    "evaluation", "field_metrics", "harness", "key_sweep", "model_assisted_rows", "model_scores", "paraphrase", "paraphrase_robustness", "plots", "robustness", "runs", "settings", "speed", "tables",
    "tradeoff_experiment",
)
_NAMES = {
    "detection_runs": "detection_experiment", "detection_texts": "detection_experiment",
    "run_detection": "detection_experiment",
    "plot_aatps": "plots", "plot_detection": "plots",
    "Session": "harness", "log": "harness", "preflight": "harness", "script_main": "harness",
    "GENERATION_FIELDS": "settings", "GUMBEL": "settings", "PARTS": "settings", "SYNTHID": "settings",
    "Settings": "settings", "prompts_needed": "settings",
    "generate_in_turns": "speed", "method_label": "speed", "run_speculative": "speed", "speculative_checks": "speed", "speed_runs": "speed",
    "detection_markdown": "tables", "speculative_markdown": "tables", "write_csv": "tables",
}
__getattr__, __dir__, _everything = attach(__name__, SUBMODULES, _NAMES)
__all__ = sorted(_NAMES)
