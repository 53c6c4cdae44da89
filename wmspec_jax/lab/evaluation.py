"""Experiment summaries: Tables 1-2 (AATPS, PTT, LOGPPL) and Fig. 2 / Fig. 5 (detection).

Inputs are the per-text records of :mod:`wmspec_jax.lab.runs`; outputs are plain
JSON-able dicts (the experiments write them as summary JSON/CSV and plot
them). Confidence intervals: Student-t 95 % over texts (AATPS, LOGPPL) or
over batches (PTT: a batch is one timed call); percentile bootstrap for TPR
(:mod:`wmspec_jax.detect.metrics`).

Detection protocol (Sec. 5, App. E.1), per decoder:

* positives: Alg. 1 (``pseudorandom``) texts; the first ``num_train``
  indices (default: half) train (Ars-τ's τ, Ars-Prior's p, the soft
  detector, the Bayesian detectors; SynthID also holds out the last quarter
  of the training part for validation), the rest test
  (:func:`wmspec_jax.lab.detection_rows.split_train_test`);
* negatives, two sets, each split the same way and scored under the key of
  its own index (the positive run's key: any key is independent of them):
  *model* negatives — unwatermarked texts of the same target and prompts
  (``plain`` sampling from P; standard speculative sampling has the same
  law, Thm. 4.1, and costs more per token at a batch on a CPU) — and
  *human* negatives — the
  dataset's human answers / continuations of the same prompts, where it has
  them (the built-in ELI5 stand-in does; prompt + human text, at most
  ``max_new_tokens`` tokens). Human texts get random token sources
  (:func:`wmspec_jax.detect.pseudo_source`) for the Oracle detectors;
* one protocol for every decoder (:func:`evaluate`); what differs is the
  fit of its detectors (:class:`Family`: Ars-τ / Ars-Prior / soft for
  Gumbel-max, the Bayesian detectors for SynthID) and each detector's
  threshold rule (:func:`tpr_estimate`). Calibrated detectors (every
  Gumbel-max detector, SynthID's mean test) flag p ≤ 0.01: TPR and FPR
  come from their exact p-values, and the FPR is counted on every negative
  text (a p-value holds at any length). The others (SynthID's Bayes-* and
  Oracle) are thresholded at 1 % FPR on the *threshold negatives* of each
  length, as the paper (App. D): the human negatives when the family trains
  on them (SynthID) and the dataset has them, else the model negatives —
  at each length only negatives with at least that many tokens count.
  Where fewer than ``MIN_THRESHOLD_NEGATIVES`` (100 = 1/α) human texts are
  that long, the model negatives of that length are pooled with them (our
  choice, not the paper's, which has 1,000 human texts: the largest of
  n < 1/α scores flags ~1/(n + 1) of fresh negatives, e.g. a quarter with
  3). Under H0 a text's g-values are i.i.d. Bernoulli(½) whoever wrote it,
  so both sets share the null. Their FPR is counted on the negatives of
  each set that reach the ROC length. The ROC compares the watermarked
  test texts with the threshold negatives.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from typing import Any, Callable, Optional, Sequence

import jax
import numpy as np

from wmspec_jax import detect, text_record
from wmspec_jax.detect import metrics

ALPHA = 0.01
# The fewest negatives that can place a threshold at FPR ALPHA: with n < 1/ALPHA the threshold is the
# largest of n scores, which flags about 1/(n + 1) > ALPHA of fresh negatives.
MIN_THRESHOLD_NEGATIVES = int(round(1 / ALPHA))


# ---------------------------------------------------------------------------
# Tables 1-2
# ---------------------------------------------------------------------------


def speculative_row(name: str, records: Sequence[dict]) -> dict:
    """AATPS, PTT (ms per generated token) and LOGPPL of one run's text lines
    (:func:`wmspec_jax.text_record.generation_line` with the batch fields), with 95 % CIs."""
    if not records:
        raise ValueError(f"run {name!r} has no records")
    batches = {}
    for r in records:
        batches[r["batch"]] = 1000.0 * r["batch_seconds"] / max(r["batch_tokens"], 1)
    texts = [text_record.GeneratedText.from_record(r) for r in records]
    aatps, aatps_ci = metrics.mean_ci([t.aatps for t in texts])
    ptt, ptt_ci = metrics.mean_ci(list(batches.values()))
    ppl, ppl_ci = metrics.mean_ci([t.logppl for t in texts])
    return {"run": name, "texts": len(records), "batches": len(batches),
            "mean_new_tokens": float(np.mean([len(t.tokens) for t in texts])),
            "aatps": aatps, "aatps_ci": aatps_ci, "ptt_ms": ptt, "ptt_ms_ci": ptt_ci,
            "logppl": ppl, "logppl_ci": ppl_ci}


def _estimate(e) -> dict:
    return {"value": e.value, "lower": e.lower, "upper": e.upper}


def _roc(pos, neg) -> dict:
    fpr, tpr, _ = metrics.roc_curve(pos, neg)
    return {"fpr": fpr.tolist(), "tpr": tpr.tolist(), "auc": metrics.auc(pos, neg)}


def _lengths_available(texts, grid):
    shortest = int(np.min(texts.lengths - texts.starts))
    return [int(x) for x in grid if x <= shortest]


def _long_enough(texts, length: int) -> np.ndarray:
    """Rows with at least ``length`` generated (or human) tokens."""
    return np.flatnonzero(texts.lengths - texts.starts >= length)


def _fpr_estimate(flags) -> dict:
    flags = np.asarray(flags, bool)
    est = metrics.clopper_pearson(int(flags.sum()), int(flags.size)) if flags.size else None
    return {"flagged": int(flags.sum()), "negatives": int(flags.size),
            **(_estimate(est) if est else {"value": float("nan"), "lower": float("nan"), "upper": float("nan")})}


# ---------------------------------------------------------------------------
# The detector sets of the experiments (one registry: wmspec_jax.detect.registry)
# ---------------------------------------------------------------------------

SAVED = {
    "gumbel": {"Ars-tau": "gumbel-ars-tau", "Ars-Prior": "gumbel-ars-prior", "soft (ours)": "gumbel-soft"},
    "synthid": {"Bayes-Prior": "synthid-bayes-prior", "Bayes-MLP": "synthid-bayes-mlp", "Oracle": "synthid-oracle"},
}
"""Fitted detectors of each decoder: label -> file name under ``<output_dir>/detectors/``."""

KEY_ONLY = {
    "gumbel": {"Oracle": "oracle", "single (target stream)": "single"},
    "synthid": {"mean (both streams)": "synthid-mean"},
}
"""Detectors of each decoder built from the settings alone: label -> registry name."""

LABELS = {
    "gumbel": ("Ars-tau", "Ars-Prior", "Oracle", "single (target stream)", "soft (ours)"),
    "synthid": ("Bayes-Prior", "Bayes-MLP", "Oracle", "mean (both streams)"),
}
"""The order in which tables and figures list each decoder's detectors."""


def complete_set(decoder: str, fitted: dict, provenance, extra: Optional[dict] = None) -> dict:
    """label -> detector: the fitted ones plus the key-only ones of :data:`KEY_ONLY` (and ``extra``:
    label -> registry name), built for ``provenance`` (:func:`wmspec_jax.detect.make`)."""
    missing = set(SAVED[decoder]) - set(fitted)
    if missing:
        raise ValueError(f"fitted {decoder} detectors missing: {sorted(missing)}")
    built = {label: detect.make(name, provenance) for label, name in {**KEY_ONLY[decoder], **(extra or {})}.items()}
    merged = {**fitted, **built}
    order = list(LABELS[decoder]) + [k for k in merged if k not in LABELS[decoder]]
    return {label: merged[label] for label in order}


def load_set(decoder: str, directory: str, provenance, extra: Optional[dict] = None) -> dict:
    """The detector set of a decoder from the files a detection run saved (:data:`SAVED`) + the key-only ones."""
    fitted = {}
    for label, name in SAVED[decoder].items():
        path = os.path.join(directory, f"{name}.npz")
        if not os.path.exists(path):
            raise FileNotFoundError(f"{path}: run the detection experiment first (it saves the fitted detectors)")
        fitted[label] = detect.load_detector(path)
    return complete_set(decoder, fitted, provenance, extra)


def score_set(detectors: dict, stats, texts) -> dict:
    """label -> :class:`wmspec_jax.detect.Scores` of every detector of a set on one batch.

    The Oracles get the texts' sources. Every detector is deterministic (Ars-Prior's coins are keyed),
    so a text's score does not depend on its batch (nor on padding or truncation).
    """
    return {label: d.score(stats, source=texts.source) for label, d in detectors.items()}


def _save(save_dir, decoder: str, fitted: dict) -> None:
    if save_dir is not None:
        for label, d in fitted.items():
            detect.save_detector(os.path.join(save_dir, f"{SAVED[decoder][label]}.npz"), d)


# ---------------------------------------------------------------------------
# The threshold rule of a detector
# ---------------------------------------------------------------------------


def tpr_estimate(calibrated: bool, positives, negatives, rng, *, num_resamples: int):
    """TPR at FPR :data:`ALPHA` of one detector with its bootstrap CI, by the detector's threshold rule.

    Args:
      calibrated: the detector's p-values are exact or conservative
        (``Detector.calibrated``): flag iff p ≤ α, the negatives are not needed.
        Otherwise the threshold is the 1 - α quantile of the negatives' scores.
      positives, negatives: float[n] decision scores (:func:`wmspec_jax.detect.decision_scores`,
        −log p for calibrated detectors).

    Returns:
      :class:`wmspec_jax.detect.metrics.Estimate`, or None when the rule needs
      negatives and there are none.
    """
    if calibrated:
        return metrics.bootstrap_tpr_at_alpha(-np.asarray(positives), ALPHA, rng, num_resamples=num_resamples)
    if np.size(negatives) == 0:
        return None
    return metrics.bootstrap_tpr_at_fpr(positives, negatives, ALPHA, rng, num_resamples=num_resamples)


def flagged(calibrated: bool, scores, threshold_negatives) -> np.ndarray:
    """bool[n]: which texts a detector flags at FPR :data:`ALPHA` by its threshold rule (:func:`tpr_estimate`)."""
    scores = np.asarray(scores)
    if calibrated:
        return scores >= -np.log(ALPHA)
    return scores > metrics.tpr_at_fpr(scores, threshold_negatives, ALPHA)[1]


# ---------------------------------------------------------------------------
# How each decoder's detectors are fitted
# ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Family:
    """What the detection protocol (:func:`evaluate`) needs to know of one decoder's detectors.

    Attributes:
      decoder: ``"gumbel"`` or ``"synthid"``.
      statistics: ``(texts, options) -> statistics`` of a :class:`wmspec_jax.lab.detection_rows.TextRows`.
      fit: ``(sets, stats, options) -> (fitted, info)``: the fitted detectors
        (label -> detector, the labels of :data:`SAVED`) and what the result
        reports about the fit. ``sets`` holds the texts ``"trp"`` (watermarked
        training texts) and ``"trn"`` (negative training texts), ``stats(name)``
        their statistics.
      negatives_from_human: the human negatives train the detectors and set
        the thresholds when there are enough of them (the paper's App. D for
        SynthID); otherwise the model negatives do.

    Both families' key-only statistics of multi-draft texts search the sibling
    streams (``options["siblings"]``, the default weights of
    :func:`wmspec_jax.detect.streams.check_sibling_weights`);
    ``options["candidate"]`` (the records) gives each token's own stream,
    which the Oracles read.
    """

    decoder: str
    statistics: Callable[[Any, dict], Any]
    fit: Callable[[dict, Callable, dict], tuple]
    negatives_from_human: bool


def _gumbel_stats(texts, options):
    return detect.gumbel_statistics(texts, texts.keys, context_width=options["context_width"],
                                    vocab_size=options["vocab_size"], siblings=options.get("siblings", 1),
                                    candidate=options.get("candidate"))


def _fit_gumbel(sets, stats, options):
    """Ars-τ (τ at FPR α on the exact null), Ars-Prior (the training texts' draft fraction), soft."""
    train_pos, train_stats = sets["trp"], stats("trp")
    p_draft = detect.draft_fraction(train_pos.source, np.asarray(train_stats.mask))
    fitted = {"Ars-tau": detect.fit_ars_tau(train_stats, target_fpr=ALPHA),
              "Ars-Prior": detect.ars_prior_detector(p_draft, provenance=train_stats.provenance),
              "soft (ours)": detect.fit_soft(train_stats, train_pos.source)}
    return fitted, {"tau": fitted["Ars-tau"].tau, "draft_fraction": fitted["Ars-Prior"].draft_fraction}


def _synthid_stats(texts, options):
    return detect.synthid_statistics(texts, texts.keys, options["num_layers"], context_width=options["context_width"],
                                     vocab_size=options["vocab_size"], siblings=options.get("siblings", 1),
                                     candidate=options.get("candidate"))


def _fit_synthid(sets, stats, options):
    """Bayes-Prior, Bayes-MLP and the Bayesian Oracle (App. D): trained on the first 3/4 of the training
    split (positives and negatives), validated (early stopping, L2 choice) on the last 1/4."""
    train_pos, train_neg = sets["trp"], sets["trn"]
    p_draft = detect.draft_fraction(train_pos.source, np.asarray(stats("trp").mask))
    cut_p, cut_n = (3 * len(t) // 4 for t in (train_pos, train_neg))
    part = {"train": (slice(0, cut_p), slice(0, cut_n)), "val": (slice(cut_p, None), slice(cut_n, None))}
    n_fit = cut_p + cut_n
    tc = options["train_config"] or detect.TrainConfig(learning_rate=0.05, epochs=40, batch_size=min(64, n_fit),
                                                       patience=8, l2_grid=(0.0, 1e-2), seed=options["seed"])
    fitted = {}
    for label, mode in (("Bayes-Prior", "prior"), ("Bayes-MLP", "mlp"), ("Oracle", "oracle")):
        cfg = detect.BayesConfig(mode=mode, num_layers=options["num_layers"], draft_fraction=p_draft,
                                 context_width=options["context_width"], mixture=options["mixture"])
        splits = {}
        for name, (ip, ineg) in part.items():
            kw = {}
            if mode == "oracle":
                kw = dict(positives_source=train_pos.source[ip], negatives_source=train_neg.source[ineg])
            splits[name] = detect.make_dataset(detect.take(stats("trp"), ip), detect.take(stats("trn"), ineg), **kw)
        fitted[label], _ = detect.train_bayes(cfg, splits["train"], splits["val"], tc)
    return fitted, {"num_layers": options["num_layers"], "mixture": options["mixture"], "draft_fraction": p_draft,
                    "chosen_l2": {k: d.info.get("l2") for k, d in fitted.items()}}


FAMILIES = {
    "gumbel": Family("gumbel", _gumbel_stats, _fit_gumbel, negatives_from_human=False),
    "synthid": Family("synthid", _synthid_stats, _fit_synthid, negatives_from_human=True),
}
"""decoder -> :class:`Family` (Gumbel-max: Fig. 2 middle; SynthID: Fig. 2 right)."""


# ---------------------------------------------------------------------------
# The protocol (Fig. 2, Fig. 5)
# ---------------------------------------------------------------------------


def _count(texts) -> int:
    return 0 if texts is None else len(texts)


def _multi_draft(family: Family, options: dict, detectors: dict, calibrated: dict, texts,
                 model_negatives, threshold_negatives: Callable, lengths: Sequence[int], rng, *,
                 num_resamples: int) -> dict:
    """TPR at 1 % FPR vs length of multi-draft Alg. 1 texts under one chain's detectors (:func:`evaluate`).

    The Oracles read each token's own stream (the ``candidate`` record). The other detectors score
    the search over the ``siblings`` streams (default weights) with the one-chain fits (τ, p, the
    soft model, the Bayesian models): the calibrated p-values stay exact, as every searched
    statistic has one stream's null law, and the FPR on the model negatives scored the same way is
    reported (they also set the thresholds of the uncalibrated detectors).
    """
    siblings = int(texts.siblings)
    searched = siblings > 1
    opts = {**options, "siblings": siblings}
    stats = family.statistics(texts, opts)
    oracle_stats = family.statistics(texts, {**opts, "candidate": texts.candidate}) if searched else stats
    if searched:
        detectors = {k: dataclasses.replace(d, provenance=stats.provenance) for k, d in detectors.items()}

    def score(part, key_stats, source_stats) -> dict:
        return {k: np.asarray(detect.decision_scores(d.score(source_stats if d.needs_source else key_stats,
                                                             source=part.source)))
                for k, d in detectors.items()}

    if searched:
        neg_stats = family.statistics(model_negatives, opts)

        def negatives(length: int) -> dict:
            rows = _long_enough(model_negatives, length)
            part = model_negatives.take(rows)
            truncated = detect.truncate(detect.take(neg_stats, rows), length)
            return score(part, truncated, truncated) if rows.size else {}
    else:
        def negatives(length: int) -> dict:
            return threshold_negatives(length)[0]

    grid = _lengths_available(texts, lengths)
    curves = {}
    for i, length in enumerate(grid):
        pos = score(texts, detect.truncate(stats, length), detect.truncate(oracle_stats, length))
        neg = negatives(length)
        for k in pos:
            est = tpr_estimate(calibrated[k], pos[k], neg.get(k, np.zeros(0)), jax.random.fold_in(rng, i),
                               num_resamples=num_resamples)
            curves.setdefault(k, []).append(_estimate(est) if est is not None else
                                            {"value": float("nan"), "lower": float("nan"), "upper": float("nan")})
    fpr = None
    if searched and grid:
        neg = negatives(grid[-1])
        fpr = {k: _fpr_estimate(flagged(True, v, None)) for k, v in neg.items() if calibrated[k]}
    return {"siblings": siblings, "searched": searched,
            "sibling_weights": [round(w, 6) for w in detect.streams.resolved_sibling_weights(None, siblings)],
            "lengths": grid, "tpr": curves, "fpr_model": fpr,
            "fpr_length": grid[-1] if grid else None, "test_texts": _count(texts)}


class _SetScores:
    """The text sets of one evaluation and the fitted detectors' scores on them (:func:`evaluate`):
    statistics per set and the test negatives' scores per (set, length) are computed once (the curves,
    the ROC and the FPR ask for the same ones)."""

    def __init__(self, family, options: dict, sets: dict, primary: str):
        self.family, self.options, self.sets, self.primary = family, options, sets, primary
        self.detectors = None
        self.stats = functools.lru_cache(maxsize=None)(self._stats)
        self.negatives_at = functools.lru_cache(maxsize=None)(self._negatives_at)

    @property
    def calibrated(self) -> dict:
        return {k: bool(d.calibrated) for k, d in self.detectors.items()}

    def _stats(self, name: str):
        return self.family.statistics(self.sets[name], self.options)

    def score_all(self, part, part_stats) -> dict:
        out = score_set(self.detectors, part_stats, part)
        return {k: np.asarray(detect.decision_scores(v)) for k, v in out.items()}

    def _negatives_at(self, which: str, length: int, every: bool = False):
        """(scores per detector, count) of a set's test negatives truncated at ``length``: those with at
        least that many tokens, or ``every`` text."""
        if f"tn_{which}" not in self.sets:
            return {}, 0
        part = self.sets[f"tn_{which}"]
        rows = np.arange(_count(part)) if every else _long_enough(part, length)
        if rows.size == 0:
            return {}, 0
        truncated = detect.truncate(detect.take(self.stats(f"tn_{which}"), rows), length)
        return self.score_all(part.take(rows), truncated), rows.size

    def threshold_negatives(self, length: int):
        """(scores per detector, {set: count}) of the threshold negatives at ``length`` (:func:`evaluate`)."""
        neg, count = self.negatives_at(self.primary, length)
        used = {self.primary: count}
        if self.primary == "human" and count < MIN_THRESHOLD_NEGATIVES:
            extra, used["model"] = self.negatives_at("model", length)
            if count == 0:
                neg = extra
            elif used["model"]:
                neg = {k: np.concatenate([neg[k], extra[k]]) for k in neg}
        return neg, used


def _scores_of(neg: dict, name: str) -> np.ndarray:  # no negatives: an empty array
    return neg.get(name, np.zeros(0))


def _tpr_curves(sc: _SetScores, test_pos, lengths: Sequence[int], rng, num_resamples: int) -> tuple:
    """(lengths kept, TPR estimate per detector and length, threshold negatives used per length)."""
    calibrated = sc.calibrated
    grid = _lengths_available(test_pos, lengths)
    curves, counts = {}, []
    for i, length in enumerate(grid):
        pos = sc.score_all(test_pos, detect.truncate(sc.stats("tp"), length))
        neg, used = sc.threshold_negatives(length)
        counts.append(used)
        for name in pos:
            est = tpr_estimate(calibrated[name], pos[name], _scores_of(neg, name), jax.random.fold_in(rng, 100 + i),
                               num_resamples=num_resamples)
            curves.setdefault(name, []).append(_estimate(est) if est is not None else
                                               {"value": float("nan"), "lower": float("nan"), "upper": float("nan")})
    return grid, curves, counts


def _roc_and_fpr(sc: _SetScores, test_pos, roc_length: int) -> tuple:
    """(ROC length, ROC per detector, FPR per negative set and detector) at the ROC length (:func:`evaluate`)."""
    calibrated = sc.calibrated
    roc_len = min(roc_length, int(np.min(test_pos.lengths - test_pos.starts)))
    neg, used = sc.threshold_negatives(roc_len)
    while roc_len > 1 and sum(used.values()) == 0:
        roc_len -= 1  # human texts can be short: the ROC uses a length some negatives reach
        neg, used = sc.threshold_negatives(roc_len)
    pos = sc.score_all(test_pos, detect.truncate(sc.stats("tp"), roc_len))
    roc = {name: _roc(pos[name], _scores_of(neg, name)) for name in pos}
    fpr = {}
    for which in ("model", "human"):
        if f"tn_{which}" not in sc.sets:
            continue
        fpr[which] = {}
        for name in pos:
            other, count = sc.negatives_at(which, roc_len, every=calibrated[name])
            if count == 0:  # none of this set reaches the ROC length (the pooled negatives do)
                fpr[which][name] = _fpr_estimate(np.zeros(0, bool))
            else:
                fpr[which][name] = _fpr_estimate(flagged(calibrated[name], other[name], _scores_of(neg, name)))
    return roc_len, roc, fpr


def _threshold_rule(calibrated: dict, primary: str) -> str:
    """The threshold rule of the result, in words."""
    rule = "calibrated detectors: p <= 0.01 (exact null)"
    if not all(calibrated.values()):
        rule = (f"{', '.join(k for k, c in calibrated.items() if not c)}: 1% FPR on the {primary} test negatives "
                f"with at least that many tokens"
                + (f", pooled with the model negatives where fewer than {MIN_THRESHOLD_NEGATIVES} are"
                   if primary == "human" else "") + "; " + rule)
    return rule


def evaluate(decoder: str, texts: dict, *, lengths: Sequence[int], roc_length: int, vocab_size: int,
             context_width: int, num_layers: int = 4, seed: int = 0, num_resamples: int = 1000,
             train_config=None, mixture: str = "layer", save_dir: Optional[str] = None,
             multi_draft: Optional[dict] = None) -> dict:
    """TPR at 1 % FPR vs length, ROC and FPR of one decoder's detectors (Fig. 2, Fig. 5; module doc).

    Args:
      decoder: a key of :data:`FAMILIES`.
      texts: the sets' :class:`~wmspec_jax.lab.detection_rows.TextRows` by name —
        ``ptr``, ``pte`` (Alg. 1 texts, train / test), ``ntr``, ``nte``
        (the model's unwatermarked texts), ``htr``, ``hte`` (human texts or
        None) — as :func:`wmspec_jax.lab.detection_texts` returns them.
      lengths: token lengths of the TPR curve (kept where every watermarked
        test text is that long); ``roc_length``: length of the ROC curves
        (cut to the shortest watermarked test text, and shorter still until
        some threshold negatives reach it).
      num_layers, train_config, mixture: SynthID's m, the Bayesian detectors'
        training and ``BayesConfig.mixture`` (``"layer"``: the paper's Eq. (17)).
      save_dir: if given, the fitted detectors are saved there (key-free).
      multi_draft: draft shape -> test texts of multi-draft Alg. 1
        (:class:`~wmspec_jax.lab.detection_rows.TextRows` with ``siblings``, the most children
        of a node): their TPR curves under the same detectors
        (:func:`_multi_draft`), in the result's ``multi_draft``.

    Every detector follows its threshold rule (:func:`tpr_estimate`): calibrated
    ones flag p ≤ 0.01; the others are thresholded at 1 % FPR on the *threshold
    negatives* of each length — the test negatives of the primary set (human when
    the family trains on human text and there are at least 4 / 1 training / test
    human texts, else model) with at least that many tokens, pooled with the model
    negatives of that length where fewer than :data:`MIN_THRESHOLD_NEGATIVES`
    human texts are that long. The ROC compares the watermarked test texts with
    the threshold negatives. The FPR is reported on each set of negatives at the
    ROC length: a calibrated detector is scored on every text (truncated there:
    its p-values hold at any length), the others on the texts that long.
    """
    family = FAMILIES[decoder]
    options = dict(vocab_size=vocab_size, context_width=context_width, num_layers=num_layers, seed=seed,
                   train_config=train_config, mixture=mixture)
    use_human = family.negatives_from_human and _count(texts.get("htr")) >= 4 and _count(texts.get("hte")) >= 1
    primary = "human" if use_human else "model"
    sets = {"trp": texts["ptr"], "tp": texts["pte"], "trn": texts["htr"] if use_human else texts["ntr"],
            "tn_model": texts["nte"]}
    if _count(texts.get("hte")):
        sets["tn_human"] = texts["hte"]
    sc = _SetScores(family, options, sets, primary)
    fitted, info = family.fit(sets, sc.stats, options)
    _save(save_dir, decoder, fitted)
    sc.detectors = complete_set(decoder, fitted, sc.stats("trp").provenance)
    calibrated = sc.calibrated
    rng = jax.random.key(seed)
    test_pos = texts["pte"]
    grid, curves, counts = _tpr_curves(sc, test_pos, lengths, rng, num_resamples)
    roc_len, roc, fpr = _roc_and_fpr(sc, test_pos, roc_length)
    multi = {shape: _multi_draft(family, options, sc.detectors, calibrated, part, texts["nte"],
                                 sc.threshold_negatives, lengths, jax.random.fold_in(rng, 1000 + j),
                                 num_resamples=num_resamples)
             for j, (shape, part) in enumerate((multi_draft or {}).items())}
    return {"decoder": decoder, **info, "lengths": grid, "tpr": curves, "calibrated": calibrated,
            "negatives": primary, "negatives_per_length": [sum(c.values()) for c in counts],
            "threshold_negatives_per_length": counts, "roc_length": roc_len, "roc": roc, "fpr": fpr,
            "threshold": _threshold_rule(calibrated, primary), "train_texts": _count(texts["ptr"]),
            "test_texts": _count(test_pos), "test_negatives": _count(texts["nte"]),
            "test_human_negatives": _count(texts.get("hte")), **({"multi_draft": multi} if multi_draft else {})}


__all__ = ["ALPHA", "FAMILIES", "Family", "KEY_ONLY", "LABELS", "MIN_THRESHOLD_NEGATIVES", "SAVED", "complete_set",
           "evaluate", "flagged", "load_set", "score_set", "speculative_row", "tpr_estimate"]
