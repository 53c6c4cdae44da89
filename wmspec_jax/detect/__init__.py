"""Watermark detection (Sec. 4.2, App. D-E): everything from token ids and the key.

Pipeline (see ``docs/detection.md``):

1. statistics — :func:`gumbel_statistics` / :func:`synthid_statistics`
   rebuild, per position, the emitted token's draft- and target-stream
   values and the acceptance uniform u_t, plus the repeated-context mask
   (identical to generation). No model, no logits. Pass the keys generation
   used (:func:`wmspec_jax.keys.text_keys`); the statistics carry their
   :class:`Provenance` (settings + key fingerprint), detectors check it.
   Multi-draft texts: ``siblings=n`` scores each token in its recorded
   sibling stream (``candidate=``) or searches the n streams with exact
   nulls (:func:`.streams.check_sibling_weights`, :mod:`.synthid_search`).
2. detectors — small typed objects with one ``score(stats)`` method, made
   by name from :mod:`.registry` (the registry the CLI, the experiments
   and the notebooks share: :func:`make`) or fitted. Gumbel-max:
   :class:`SingleStream`, :class:`ArsTau` (Eq. 11, τ from
   :func:`fit_ars_tau`), :class:`ArsPrior` (Eq. 12, keyed coins), :class:`Oracle`,
   :class:`Soft` (beyond the paper, :func:`fit_soft`); all with calibrated
   p-values. SynthID: :class:`MeanTest` (plain / weighted mean, exact null),
   :class:`Bayes` (App. D) trained by :func:`train_bayes` in modes single /
   prior (Bayes-Prior) / mlp (Bayes-MLP) / oracle. KGW (beyond the paper):
   :class:`GreenCount` (exact binomial p-value). The functions
   :func:`score_ars_tau`, :func:`score_oracle`, ... are the same tests as
   plain functions.
3. windows — :mod:`.windows`: the best window of a partly watermarked text
   and its p-value corrected for the windows tried.
4. metrics — :mod:`.metrics`: ROC, AUC, TPR at FPR (threshold from
   negatives or from p-values) with bootstrap CIs, TPR vs length.
5. :func:`save_detector` / :func:`load_detector` — key-free archives.
6. :mod:`.corpus` — one key over many texts: :func:`dedup_corpus` (each
   (context, token) window scored once per corpus, so a key's false
   positives over templated text are binomial), the shared-context
   warning, :func:`calibrate` (a key's false-positive rate on the user's
   human texts, exact interval).
7. :mod:`.model_assisted` — when the user holds the generator's models:
   per-token weights from their probabilities (:class:`TokenProbs`,
   :func:`token_probs_from_distributions`), the route of each token
   through Alg. 1 (:func:`draft_posterior`), exact p-values
   (:func:`score_model_assisted`; tails in :mod:`.exact_tails`).
8. :mod:`.edit_alignment` — texts generated under a key sequence
   (``SpeculativeConfig.key_sequence``; Kuditipudi et al.): :func:`edit_test`, the
   Levenshtein alignment with the key over all offsets and its permutation
   p-value, robust to inserted and deleted tokens.

From JSON lines to result lines (what ``wmspec-detect`` runs: each line's
settings and keys read and checked, texts grouped by settings, scored by
the requested detectors): :mod:`wmspec_jax.lines` (:func:`~wmspec_jax.lines.score_texts`).
"""

from wmspec_jax._lazy import attach

SUBMODULES = (
    "bayes", "bayes_training", "common", "corpus", "draft_routes", "edit_alignment", "exact_tails", "gumbel", "io", "kgw", "metrics",
    "model_assisted", "model_replay", "provenance", "pvalues", "registry", "soft", "streams", "streams_batches",
    "streams_compute", "streams_types", "synthid", "synthid_search", "token_probs", "weighted", "windows",
)
_NAMES = {
    "ArsPrior": "gumbel",
    "ArsTau": "gumbel",
    "Bayes": "bayes",
    "BayesConfig": "bayes",
    "Calibration": "corpus",
    "CorpusWindows": "corpus",
    "SHARED_CONTEXT_THRESHOLD": "corpus",
    "DEFAULTS": "registry",
    "Detector": "common",
    "GreenCount": "kgw",
    "GumbelStats": "streams_types",
    "MeanTest": "synthid",
    "Oracle": "gumbel",
    "Provenance": "provenance",
    "ProvenanceMismatch": "provenance",
    "GenerationRecords": "streams_types",
    "Scores": "common",
    "SingleStream": "gumbel",
    "Soft": "soft",
    "SynthIDStats": "streams_types",
    "TAU_GRID": "gumbel",
    "TokenTerms": "common",
    "TokenProbs": "token_probs",
    "StreamPosterior": "draft_routes",
    "draft_posterior": "draft_routes",
    "score_model_assisted": "model_assisted",
    "score_gumbel_model_assisted": "model_assisted",
    "score_synthid_model_assisted": "model_assisted",
    "score_kgw_model_assisted": "model_assisted",
    "spike_modulus": "model_assisted",
    "token_probs_from_distributions": "token_probs",
    "TrainConfig": "bayes_training",
    "ars_prior_detector": "gumbel",
    "binomial_half_log_sf": "pvalues",
    "calibrate": "corpus",
    "check_compatible": "provenance",
    "count_windows": "corpus",
    "decision_scores": "common",
    "dedup_corpus": "corpus",
    "edit_test": "edit_alignment",
    "EditTestResult": "edit_alignment",
    "draft_fraction": "streams_batches",
    "empty_windows": "corpus",
    "fit_ars_tau": "gumbel",
    "fit_soft": "soft",
    "from_saved": "registry",
    "gamma_log_sf": "pvalues",
    "gamma_test": "gumbel",
    "gumbel_statistics": "streams_compute",
    "load_detector": "io",
    "make": "registry",
    "make_dataset": "bayes_training",
    "mean_test": "synthid",
    "pseudo_source": "streams_batches",
    "records_from_generation": "streams_types",
    "save_detector": "io",
    "score_ars_prior": "gumbel",
    "score_ars_tau": "gumbel",
    "score_bayes": "bayes",
    "score_oracle": "gumbel",
    "score_single": "gumbel",
    "score_soft": "soft",
    "shared_context_fraction": "corpus",
    "shared_context_warning": "corpus",
    "min_calibration_texts": "corpus",
    "statistics": "streams_compute",
    "synthid_statistics": "streams_compute",
    "synthid_weights": "synthid",
    "take": "streams_batches",
    "train_bayes": "bayes_training",
    "truncate": "streams_batches",
    "score": "common",
}
__getattr__, __dir__, __all__ = attach(__name__, SUBMODULES, _NAMES)
