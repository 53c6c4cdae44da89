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
  (:func:`split_train_test`);
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
* Gumbel-max: TPR at 1 % FPR from the exact p-values (p ≤ 0.01); the FPR at
  p ≤ 0.01 is reported on both negative sets;
* SynthID Bayes-* and Oracle: as the paper (App. D), human negatives train
  the detectors and set the 1 % threshold when the dataset has them (else the
  model negatives do); at each length only negatives with at least that
  many tokens count. Where fewer than ``MIN_THRESHOLD_NEGATIVES`` (100 =
  1/α) human texts are that long, the model negatives of that length are
  pooled with them (our choice, not the paper's, which has 1,000 human
  texts: the largest of n < 1/α scores flags ~1/(n + 1) of fresh negatives,
  e.g. a quarter with 3). Under H0 a text's g-values are i.i.d.
  Bernoulli(½) whoever wrote it, so both sets share the null. The FPR at
  that threshold is reported on both sets. SynthID's mean test has exact
  p-values: its TPR and FPR are at p ≤ 0.01, as the Gumbel-max detectors'.
"""

from __future__ import annotations

import functools
import os
from typing import Optional, Sequence

import jax
import numpy as np

from wmspec_jax import batching, detect
from wmspec_jax.detect import metrics

ALPHA = 0.01
# The fewest negatives that can place a threshold at FPR ALPHA: with n < 1/ALPHA the threshold is the
# largest of n scores, which flags about 1/(n + 1) > ALPHA of fresh negatives.
MIN_THRESHOLD_NEGATIVES = int(round(1 / ALPHA))


# ---------------------------------------------------------------------------
# Tables 1-2
# ---------------------------------------------------------------------------


def speculative_row(name: str, records: Sequence[dict]) -> dict:
    """AATPS, PTT (ms per generated token) and LOGPPL of one run, with 95 % CIs."""
    if not records:
        raise ValueError(f"run {name!r} has no records")
    batches = {}
    for r in records:
        batches[r["batch"]] = 1000.0 * r["batch_seconds"] / max(r["batch_tokens"], 1)
    aatps, aatps_ci = metrics.mean_ci([r["aatps"] for r in records])
    ptt, ptt_ci = metrics.mean_ci(list(batches.values()))
    ppl, ppl_ci = metrics.mean_ci([r["logppl"] for r in records])
    return {"run": name, "texts": len(records), "batches": len(batches),
            "mean_new_tokens": float(np.mean([len(r["tokens"]) for r in records])),
            "aatps": aatps, "aatps_ci": aatps_ci, "ptt_ms": ptt, "ptt_ms_ci": ptt_ci,
            "logppl": ppl, "logppl_ci": ppl_ci}


# ---------------------------------------------------------------------------
# Texts for detection
# ---------------------------------------------------------------------------


def texts_from_records(records: Sequence, prompts: np.ndarray, keys):
    """Rebuilds prompt + generated rows for detection.

    Args:
      records: the texts (:class:`wmspec_jax.batching.GeneratedText`) or their
        saved records (:func:`wmspec_jax.lab.runs.generate_run`).
      prompts: int32[N, P] the experiment's packed prompts.
      keys: :class:`wmspec_jax.keys.StreamKeys` of the records' texts, in
        the records' order (the keys detection scores them with).

    Returns:
      dict with ``tokens`` int32[N, L], ``lengths``, ``starts`` int32[N]
      (generation starts: the repeated-context rule of generation),
      ``source`` int8[N, L] (−1 outside generated tokens), ``keys``,
      ``indices`` int[N].
    """
    texts = [r if isinstance(r, batching.GeneratedText) else batching.GeneratedText.from_record(r) for r in records]
    return _detection_rows([(t.index, t.prompt_length, t.tokens, t.source) for t in texts], prompts, keys)


def _detection_rows(rows: Sequence[tuple], prompts: np.ndarray, keys) -> dict:
    """The :func:`texts_from_records` dict of (index, prompt length, tokens, source) rows."""
    n = len(rows)
    if len(keys) != n:
        raise ValueError(f"{len(keys)} keys for {n} records")
    width = max(p + len(gen) for _, p, gen, _ in rows)
    tokens = np.zeros((n, width), np.int32)
    source = np.full((n, width), -1, np.int8)
    lengths, starts = np.zeros(n, np.int32), np.zeros(n, np.int32)
    for row, (index, p, gen, src) in enumerate(rows):
        tokens[row, :p] = prompts[index, :p]
        tokens[row, p : p + len(gen)] = gen
        source[row, p : p + len(gen)] = src
        lengths[row], starts[row] = p + len(gen), p
    indices = np.array([index for index, _, _, _ in rows])
    return {"tokens": tokens, "lengths": lengths, "starts": starts, "source": source, "keys": keys,
            "indices": indices}


def texts_from_human(prompts: np.ndarray, prompt_lengths: np.ndarray, human_ids: Sequence[Sequence[int]],
                     indices: Sequence[int], keys, draft_fraction: float, rng):
    """Prompt + human-text rows (the human negatives), in the layout of :func:`texts_from_records`.

    Args:
      prompts, prompt_lengths: the experiment's packed prompts.
      human_ids: token ids of the human text of each prompt (all prompts).
      indices: the prompts to use (each must have a non-empty human text).
      keys: their StreamKeys; ``draft_fraction``, ``rng``: the random
        sources given to the Oracle detectors (no records exist).
    """
    rows = [(int(i), int(prompt_lengths[int(i)]), list(human_ids[int(i)]), [0] * len(human_ids[int(i)]))
            for i in indices]
    texts = _detection_rows(rows, prompts, keys)
    generated = texts["source"] >= 0
    texts["source"] = np.asarray(detect.pseudo_source(generated, draft_fraction, rng))
    return texts


def with_human(human_ids: Sequence[Sequence[int]], indices: Sequence[int]) -> list:
    """The indices whose human text is non-empty."""
    return [int(i) for i in indices if len(human_ids[int(i)]) > 0]


def split_train_test(records: Sequence[dict], num_train: Optional[int] = None) -> tuple[list, list]:
    """(train, test): the ``num_train`` lowest indices train (default: half), the rest test.

    Both parts must hold at least 2 texts (SynthID's detectors hold out a
    quarter of the training part for validation).
    """
    records = sorted(records, key=lambda r: r["index"])
    n_train = len(records) // 2 if num_train is None else int(num_train)
    if n_train < 2 or len(records) - n_train < 2:
        raise ValueError(f"need at least 2 training and 2 test texts, got {len(records)} texts with "
                         f"{n_train} for training")
    return list(records[:n_train]), list(records[n_train:])


def _estimate(e) -> dict:
    return {"value": e.value, "lower": e.lower, "upper": e.upper}


def _roc(pos, neg) -> dict:
    fpr, tpr, _ = metrics.roc_curve(pos, neg)
    return {"fpr": fpr.tolist(), "tpr": tpr.tolist(), "auc": metrics.auc(pos, neg)}


def _lengths_available(texts, grid):
    shortest = int(np.min(texts["lengths"] - texts["starts"]))
    return [int(x) for x in grid if x <= shortest]


def _long_enough(texts, length: int) -> np.ndarray:
    """Rows with at least ``length`` generated (or human) tokens."""
    return np.flatnonzero(texts["lengths"] - texts["starts"] >= length)


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


def score_set(detectors: dict, stats, texts: dict, seed: int) -> dict:
    """label -> :class:`wmspec_jax.detect.Scores` of every detector of a set on one batch.

    The Oracles get the texts' sources; Ars-Prior one ``jax.random`` key per
    text index (:func:`wmspec_jax.detect.text_rngs`), so a text's score does
    not depend on its batch (nor on padding or truncation).
    """
    rngs = detect.text_rngs(seed, texts["indices"])
    return {label: d.score(stats, source=texts["source"], rng=rngs) for label, d in detectors.items()}


def _save(save_dir, decoder: str, fitted: dict) -> None:
    if save_dir is not None:
        for label, d in fitted.items():
            detect.save_detector(os.path.join(save_dir, f"{SAVED[decoder][label]}.npz"), d)


# ---------------------------------------------------------------------------
# Gumbel-max (Ars-τ / Ars-Prior / Oracle; single-stream and soft for reference)
# ---------------------------------------------------------------------------


def _gumbel_stats(texts, vocab_size, context_width):
    return detect.gumbel_statistics(texts["tokens"], texts["keys"], lengths=texts["lengths"],
                                    starts=texts["starts"], context_width=context_width,
                                    vocab_size=vocab_size)


def fit_gumbel(train_pos: dict, train_stats) -> dict:
    """The fitted Gumbel detectors (label -> detector) on the watermarked training texts."""
    p_draft = detect.draft_fraction(train_pos["source"], np.asarray(train_stats.mask))
    return {"Ars-tau": detect.fit_ars_tau(train_stats, target_fpr=ALPHA),
            "Ars-Prior": detect.ars_prior_detector(p_draft, provenance=train_stats.provenance),
            "soft (ours)": detect.fit_soft(train_stats, train_pos["source"])}


def evaluate_gumbel(train_pos, test_pos, test_neg, *, lengths: Sequence[int], roc_length: int, vocab_size: int,
                    context_width: int, seed: int = 0, num_resamples: int = 1000, test_human=None,
                    save_dir: Optional[str] = None) -> dict:
    """TPR at 1 % FPR vs length and ROC for the Gumbel-max detectors (Fig. 2 middle, Fig. 5).

    Args:
      train_pos, test_pos, test_neg: :func:`texts_from_records` dicts
        (test_neg: model negatives).
      lengths: token lengths of the TPR curve (kept where every text is
        that long); ``roc_length``: length of the ROC curves (cut to the
        shortest text if longer).
      test_human: optional human negatives (:func:`texts_from_human`); their
        FPR at p ≤ 0.01 is reported.
      save_dir: if given, the fitted detectors are saved there (key-free).
    """
    tr, tp, tn = (_gumbel_stats(t, vocab_size, context_width) for t in (train_pos, test_pos, test_neg))
    fitted = fit_gumbel(train_pos, tr)
    _save(save_dir, "gumbel", fitted)
    detectors = complete_set("gumbel", fitted, tr.provenance)
    rng = jax.random.key(seed)

    def score_all(stats, texts):
        return score_set(detectors, stats, texts, seed + 1)

    grid = _lengths_available(test_pos, lengths)
    curves = {}
    for i, length in enumerate(grid):
        for name, sc in score_all(detect.truncate(tp, length), test_pos).items():
            est = metrics.bootstrap_tpr_at_alpha(np.asarray(sc.log_pvalue), ALPHA, jax.random.fold_in(rng, 100 + i),
                                                 num_resamples=num_resamples)
            curves.setdefault(name, []).append(_estimate(est))
    roc_len = min(roc_length, int(np.min(test_pos["lengths"] - test_pos["starts"])),
                  int(np.min(test_neg["lengths"] - test_neg["starts"])))
    pos_s = score_all(detect.truncate(tp, roc_len), test_pos)
    neg_s = score_all(detect.truncate(tn, roc_len), test_neg)
    fpr = {"model": {name: _fpr_estimate(np.asarray(v.log_pvalue) <= np.log(ALPHA)) for name, v in neg_s.items()}}
    if test_human is not None and len(test_human["indices"]):
        # p-values are calibrated at any length: each human text is scored on up to roc_len tokens
        hs = _gumbel_stats(test_human, vocab_size, context_width)
        hum_s = score_all(detect.truncate(hs, roc_len), test_human)
        fpr["human"] = {name: _fpr_estimate(np.asarray(v.log_pvalue) <= np.log(ALPHA)) for name, v in hum_s.items()}
    roc = {name: _roc(np.asarray(detect.decision_scores(pos_s[name])), np.asarray(detect.decision_scores(neg_s[name])))
           for name in pos_s}
    return {"decoder": "gumbel", "lengths": grid, "tpr": curves, "roc_length": roc_len, "roc": roc,
            "fpr_at_alpha": fpr, "tau": fitted["Ars-tau"].tau, "draft_fraction": fitted["Ars-Prior"].draft_fraction,
            "threshold": "p <= 0.01 (exact Gamma null)", "train_texts": len(train_pos["indices"]),
            "test_texts": len(test_pos["indices"]), "test_negatives": len(test_neg["indices"]),
            "test_human_negatives": 0 if test_human is None else len(test_human["indices"])}


# ---------------------------------------------------------------------------
# SynthID (Bayes-Prior / Bayes-MLP / Oracle; mean score for reference)
# ---------------------------------------------------------------------------


def _synthid_stats(texts, num_layers, vocab_size, context_width):
    return detect.synthid_statistics(texts["tokens"], texts["keys"], num_layers, lengths=texts["lengths"],
                                     starts=texts["starts"], context_width=context_width, vocab_size=vocab_size)


def evaluate_synthid(train_pos, train_neg, test_pos, test_neg, *, num_layers: int, lengths: Sequence[int],
                     roc_length: int, vocab_size: int, context_width: int, seed: int = 0,
                     num_resamples: int = 1000, train_config=None, train_human=None, test_human=None,
                     mixture: str = "layer", save_dir: Optional[str] = None) -> dict:
    """TPR at 1 % FPR vs length and ROC for the SynthID detectors (Fig. 2 right, Fig. 5).

    Args:
      train_pos, train_neg, test_pos, test_neg: :func:`texts_from_records`
        dicts (negatives: the model's unwatermarked texts).
      train_human, test_human: human negatives (:func:`texts_from_human`);
        when both hold at least 4 / 1 texts they train the detectors and set
        the thresholds, as in the paper; otherwise the model negatives do.
      mixture: ``BayesConfig.mixture`` (``"layer"``: the paper's Eq. (17)).
      save_dir: if given, the trained detectors are saved there.

    The Bayesian detectors train on the first 3/4 of the training split and
    validate (early stopping, L2 choice) on the last 1/4. At each length the
    threshold comes from the test negatives of the primary set that have at
    least that many tokens.
    """
    use_human = (train_human is not None and test_human is not None and len(train_human["indices"]) >= 4
                 and len(test_human["indices"]) >= 1)
    primary = "human" if use_human else "model"
    sets = {"trp": train_pos, "tp": test_pos, "trn": train_human if use_human else train_neg,
            "tn_model": test_neg}
    if test_human is not None and len(test_human["indices"]):
        sets["tn_human"] = test_human
    st = {k: _synthid_stats(t, num_layers, vocab_size, context_width) for k, t in sets.items()}
    texts_neg = {"model": test_neg, "human": sets.get("tn_human")}
    p_draft = detect.draft_fraction(train_pos["source"], np.asarray(st["trp"].mask))
    cut_p, cut_n = (3 * len(t["indices"]) // 4 for t in (train_pos, sets["trn"]))
    part = {"train": (slice(0, cut_p), slice(0, cut_n)), "val": (slice(cut_p, None), slice(cut_n, None))}
    n_fit = cut_p + cut_n
    tc = train_config or detect.TrainConfig(learning_rate=0.05, epochs=40, batch_size=min(64, n_fit),
                                            patience=8, l2_grid=(0.0, 1e-2), seed=seed)
    fitted = {}
    for label, mode in (("Bayes-Prior", "prior"), ("Bayes-MLP", "mlp"), ("Oracle", "oracle")):
        cfg = detect.BayesConfig(mode=mode, num_layers=num_layers, draft_fraction=p_draft,
                                 context_width=context_width, mixture=mixture)
        splits = {}
        for name, (ip, ineg) in part.items():
            kw = {}
            if mode == "oracle":
                kw = dict(positives_source=train_pos["source"][ip], negatives_source=sets["trn"]["source"][ineg])
            splits[name] = detect.make_dataset(detect.take(st["trp"], ip), detect.take(st["trn"], ineg), **kw)
        fitted[label], _ = detect.train_bayes(cfg, splits["train"], splits["val"], tc)
    _save(save_dir, "synthid", fitted)
    detectors = complete_set("synthid", fitted, st["trp"].provenance)

    def score_all(texts, stats):
        out = score_set(detectors, stats, texts, seed + 1)
        return {k: np.asarray(detect.decision_scores(v)) for k, v in out.items()}

    @functools.lru_cache(maxsize=None)  # the curves, the ROC and the FPR ask for the same (set, length)
    def negatives_at(which: str, length: int):
        """(scores per detector, count) of the negatives of a set with >= length tokens, truncated there."""
        texts, stats = texts_neg[which], st[f"tn_{which}"]
        rows = _long_enough(texts, length)
        if rows.size == 0:
            return {}, 0
        return (score_all({"source": texts["source"][rows], "indices": texts["indices"][rows]},
                          detect.truncate(detect.take(stats, rows), length)), rows.size)

    def threshold_negatives(length: int):
        """(scores per detector, {set: count}) of the negatives that set the threshold at ``length``:
        the primary set's; human ones pooled with the model ones where fewer than
        MIN_THRESHOLD_NEGATIVES human texts are that long (module doc)."""
        neg, count = negatives_at(primary, length)
        used = {primary: count}
        if primary == "human" and count < MIN_THRESHOLD_NEGATIVES:
            extra, used["model"] = negatives_at("model", length)
            if count == 0:
                neg = extra
            elif used["model"]:
                neg = {k: np.concatenate([neg[k], extra[k]]) for k in neg}
        return neg, used

    rng = jax.random.key(seed)
    shortest = int(np.min(test_pos["lengths"] - test_pos["starts"]))
    grid = [x for x in lengths if x <= shortest]
    curves, counts = {}, []
    for i, length in enumerate(grid):
        pos = score_all(test_pos, detect.truncate(st["tp"], length))
        neg, used = threshold_negatives(length)
        counts.append(used)
        for name in pos:
            rng_i = jax.random.fold_in(rng, 100 + i)
            if detectors[name].calibrated:  # the mean test: p <= 0.01, as its FPR below and the Gumbel-max detectors
                est = metrics.bootstrap_tpr_at_alpha(-pos[name], ALPHA, rng_i, num_resamples=num_resamples)
            elif sum(used.values()) == 0:
                est = None
            else:
                est = metrics.bootstrap_tpr_at_fpr(pos[name], neg[name], ALPHA, rng_i, num_resamples=num_resamples)
            curves.setdefault(name, []).append(_estimate(est) if est is not None else
                                               {"value": float("nan"), "lower": float("nan"), "upper": float("nan")})
    roc_len = min(roc_length, shortest)
    neg, used = threshold_negatives(roc_len)
    while roc_len > 1 and sum(used.values()) == 0:
        roc_len -= 1  # human texts can be short: the ROC uses a length some negatives reach
        neg, used = threshold_negatives(roc_len)
    pos = score_all(test_pos, detect.truncate(st["tp"], roc_len))
    roc = {name: _roc(pos[name], neg[name]) for name in pos}
    fpr = {}
    for which in ("model", "human"):
        if texts_neg[which] is None:
            continue
        other, count = negatives_at(which, roc_len)
        fpr[which] = {}
        for name in pos:
            if count == 0:  # none of this set reaches the ROC length (the pooled negatives do)
                flags = np.zeros(0, bool)
            elif detectors[name].calibrated:  # p <= 0.01
                flags = other[name] >= -np.log(ALPHA)
            else:
                _, threshold = metrics.tpr_at_fpr(pos[name], neg[name], ALPHA)
                flags = other[name] > threshold
            fpr[which][name] = _fpr_estimate(flags)
    return {"decoder": "synthid", "num_layers": num_layers, "mixture": mixture, "lengths": grid, "tpr": curves,
            "negatives": primary, "negatives_per_length": [sum(c.values()) for c in counts],
            "threshold_negatives_per_length": counts, "roc_length": roc_len, "roc": roc,
            "fpr_at_threshold": fpr, "draft_fraction": p_draft,
            "threshold": (f"Bayes-* and Oracle: 1% FPR on the {primary} test negatives with at least that many tokens"
                          + (f", pooled with the model negatives where fewer than {MIN_THRESHOLD_NEGATIVES} are"
                             if primary == "human" else "") + "; mean: p <= 0.01 (exact null)"),
            "chosen_l2": {k: d.info.get("l2") for k, d in fitted.items()},
            "train_texts": len(train_pos["indices"]), "test_texts": len(test_pos["indices"]),
            "test_negatives": len(test_neg["indices"]),
            "test_human_negatives": 0 if test_human is None else len(test_human["indices"])}
