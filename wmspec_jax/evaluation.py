"""Experiment summaries: Tables 1-2 (AATPS, PTT, LOGPPL) and Fig. 2 / Fig. 5 (detection).

Inputs are the per-text records of :mod:`wmspec_jax.runs`; outputs are plain
JSON-able dicts (the experiments write them as summary JSON/CSV and plot
them). Confidence intervals: Student-t 95 % over texts (AATPS, LOGPPL) or
over batches (PTT: a batch is one timed call); percentile bootstrap for TPR
(:mod:`wmspec_jax.detect.metrics`).

Detection protocol (Sec. 5, App. E.1), per decoder:

* positives: Alg. 1 (``pseudorandom``) texts; the first half of the
  indices trains (Ars-τ's τ, Ars-Prior's p, the soft detector, the Bayesian
  detectors; SynthID also holds out the last quarter of the training half
  for validation), the second half tests;
* negatives: unwatermarked texts of the same pair and prompts (``standard``
  speculative sampling), split the same way, each scored under the key of
  its own index (any key is independent of them);
* Gumbel-max: TPR at 1 % FPR from the exact p-values (p ≤ 0.01; the
  negatives check the FPR); SynthID Bayes-*: threshold from the test
  negatives (no closed-form null), as in the paper.
"""

from __future__ import annotations

from typing import Sequence

import jax
import numpy as np

from wmspec_jax import detect, results
from wmspec_jax.detect import metrics
from wmspec_jax.runs import text_keys

ALPHA = 0.01


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
    aatps, aatps_ci = results.mean_ci([r["aatps"] for r in records])
    ptt, ptt_ci = results.mean_ci(list(batches.values()))
    ppl, ppl_ci = results.mean_ci([r["logppl"] for r in records])
    return {"run": name, "texts": len(records), "batches": len(batches),
            "mean_new_tokens": float(np.mean([len(r["tokens"]) for r in records])),
            "aatps": aatps, "aatps_ci": aatps_ci, "ptt_ms": ptt, "ptt_ms_ci": ptt_ci,
            "logppl": ppl, "logppl_ci": ppl_ci}


# ---------------------------------------------------------------------------
# Texts for detection
# ---------------------------------------------------------------------------


def texts_from_records(records: Sequence[dict], prompts: np.ndarray, secret: str):
    """Rebuilds prompt + generated rows for detection.

    Returns:
      dict with ``tokens`` int32[N, L], ``lengths``, ``starts`` int32[N]
      (generation starts: the repeated-context rule of generation),
      ``source`` int8[N, L] (−1 outside generated tokens), ``keys``
      uint32[N, 3, 2] (per-text keys), ``indices`` int[N].
    """
    n = len(records)
    width = max(r["prompt_length"] + len(r["tokens"]) for r in records)
    tokens = np.zeros((n, width), np.int32)
    source = np.full((n, width), -1, np.int8)
    lengths, starts = np.zeros(n, np.int32), np.zeros(n, np.int32)
    for row, r in enumerate(records):
        p, gen = r["prompt_length"], r["tokens"]
        tokens[row, :p] = prompts[r["index"], :p]
        tokens[row, p : p + len(gen)] = gen
        source[row, p : p + len(gen)] = r["source"]
        lengths[row], starts[row] = p + len(gen), p
    indices = np.array([r["index"] for r in records])
    return {"tokens": tokens, "lengths": lengths, "starts": starts, "source": source,
            "keys": text_keys(secret, indices), "indices": indices}


def split_half(records: Sequence[dict]) -> tuple[list, list]:
    """(train, test): the first half of the indices trains."""
    records = sorted(records, key=lambda r: r["index"])
    half = len(records) // 2
    if half < 2:
        raise ValueError(f"need at least 4 texts to split into train/test, got {len(records)}")
    return list(records[:half]), list(records[half:])


def _estimate(e) -> dict:
    return {"value": e.value, "lower": e.lower, "upper": e.upper}


def _roc(pos, neg) -> dict:
    fpr, tpr, _ = metrics.roc_curve(pos, neg)
    return {"fpr": fpr.tolist(), "tpr": tpr.tolist(), "auc": metrics.auc(pos, neg)}


def _lengths_available(texts, grid):
    shortest = int(np.min(texts["lengths"] - texts["starts"]))
    return [int(x) for x in grid if x <= shortest]


# ---------------------------------------------------------------------------
# Gumbel-max (Ars-τ / Ars-Prior / Oracle; single-stream and soft for reference)
# ---------------------------------------------------------------------------


def _gumbel_stats(texts, vocab_size, context_width):
    return detect.gumbel_statistics(texts["tokens"], texts["keys"], lengths=texts["lengths"],
                                    starts=texts["starts"], context_width=context_width,
                                    vocab_size=vocab_size)


def evaluate_gumbel(train_pos, test_pos, test_neg, *, lengths: Sequence[int], roc_length: int, vocab_size: int,
                    context_width: int, seed: int = 0, num_resamples: int = 1000) -> dict:
    """TPR at 1 % FPR vs length and ROC for the Gumbel-max detectors (Fig. 2 middle, Fig. 5).

    Args:
      train_pos, test_pos, test_neg: :func:`texts_from_records` dicts.
      lengths: token lengths of the TPR curve (kept where every text is
        that long); ``roc_length``: length of the ROC curves (cut to the
        shortest text if longer).
    """
    tr, tp, tn = (_gumbel_stats(t, vocab_size, context_width) for t in (train_pos, test_pos, test_neg))
    tau = detect.fit_ars_tau(tr, target_fpr=ALPHA, context_width=context_width)
    p_draft = detect.draft_fraction(train_pos["source"], np.asarray(tr.mask))
    soft = detect.fit_soft(tr, train_pos["source"], context_width=context_width)
    rng = jax.random.key(seed)

    def score_all(stats, source):
        return {
            "Ars-tau": detect.score_ars_tau(stats, tau.config["tau"]),
            "Ars-Prior": detect.score_ars_prior(stats, p_draft, jax.random.fold_in(rng, 1)),
            "Oracle": detect.score_oracle(stats, source),
            "single (target stream)": detect.score_single(stats),
            "soft (ours)": detect.score_soft(soft, stats),
        }

    grid = _lengths_available(test_pos, lengths)
    curves = {}
    for i, length in enumerate(grid):
        for name, s in score_all(detect.truncate(tp, length), test_pos["source"]).items():
            est = metrics.bootstrap_tpr_at_alpha(np.asarray(s.log_pvalue), ALPHA, jax.random.fold_in(rng, 100 + i),
                                                 num_resamples=num_resamples)
            curves.setdefault(name, []).append(_estimate(est))
    roc_len = min(roc_length, int(np.min(test_pos["lengths"] - test_pos["starts"])),
                  int(np.min(test_neg["lengths"] - test_neg["starts"])))
    pos_s = score_all(detect.truncate(tp, roc_len), test_pos["source"])
    neg_s = score_all(detect.truncate(tn, roc_len), test_neg["source"])
    roc, fpr_check = {}, {}
    for name in pos_s:
        roc[name] = _roc(np.asarray(detect.decision_scores(pos_s[name])),
                         np.asarray(detect.decision_scores(neg_s[name])))
        flagged = int(np.sum(np.asarray(neg_s[name].log_pvalue) <= np.log(ALPHA)))
        cp = metrics.clopper_pearson(flagged, len(test_neg["indices"]))
        fpr_check[name] = {"flagged": flagged, "negatives": len(test_neg["indices"]), **_estimate(cp)}
    return {"decoder": "gumbel", "lengths": grid, "tpr": curves, "roc_length": roc_len, "roc": roc,
            "fpr_at_alpha_on_negatives": fpr_check, "tau": tau.config["tau"], "draft_fraction": p_draft,
            "train_texts": len(train_pos["indices"]), "test_texts": len(test_pos["indices"]),
            "test_negatives": len(test_neg["indices"])}


# ---------------------------------------------------------------------------
# SynthID (Bayes-Prior / Bayes-MLP / Oracle; mean score for reference)
# ---------------------------------------------------------------------------


def _synthid_stats(texts, num_layers, vocab_size, context_width):
    return detect.synthid_statistics(texts["tokens"], texts["keys"], num_layers, lengths=texts["lengths"],
                                     starts=texts["starts"], context_width=context_width, vocab_size=vocab_size)


def _take(stats, idx):
    return type(stats)(*[x[idx] for x in stats])


def evaluate_synthid(train_pos, train_neg, test_pos, test_neg, *, num_layers: int, lengths: Sequence[int],
                     roc_length: int, vocab_size: int, context_width: int, seed: int = 0,
                     num_resamples: int = 1000, train_config=None) -> dict:
    """TPR at 1 % FPR vs length and ROC for the SynthID detectors (Fig. 2 right, Fig. 5).

    The Bayesian detectors train on the first 3/4 of the training split and
    validate (early stopping, L2 choice) on the last 1/4; thresholds come
    from the test negatives.
    """
    st = {k: _synthid_stats(t, num_layers, vocab_size, context_width)
          for k, t in (("trp", train_pos), ("trn", train_neg), ("tp", test_pos), ("tn", test_neg))}
    p_draft = detect.draft_fraction(train_pos["source"], np.asarray(st["trp"].mask))
    cut_p, cut_n = (3 * len(t["indices"]) // 4 for t in (train_pos, train_neg))
    part = {
        "train": (slice(0, cut_p), slice(0, cut_n)),
        "val": (slice(cut_p, None), slice(cut_n, None)),
    }
    n_fit = cut_p + cut_n
    tc = train_config or detect.TrainConfig(learning_rate=0.05, epochs=40, batch_size=min(64, n_fit),
                                            patience=8, l2_grid=(0.0, 1e-2), seed=seed)
    detectors = {}
    for label, mode in (("Bayes-Prior", "prior"), ("Bayes-MLP", "mlp"), ("Oracle", "oracle")):
        cfg = detect.BayesConfig(mode=mode, num_layers=num_layers, draft_fraction=p_draft,
                                 context_width=context_width)
        sets = {}
        for name, (ip, ineg) in part.items():
            kw = {}
            if mode == "oracle":
                kw = dict(positives_source=train_pos["source"][ip], negatives_source=train_neg["source"][ineg])
            sets[name] = detect.make_dataset(_take(st["trp"], ip), _take(st["trn"], ineg), **kw)
        detectors[label], _ = detect.train_bayes(cfg, sets["train"], sets["val"], tc)

    def score_all(pos_or_neg, stats):
        texts = test_pos if pos_or_neg == "pos" else test_neg
        out = {name: detect.score_bayes(d, stats, texts["source"] if name == "Oracle" else None)
               for name, d in detectors.items()}
        out["mean (both streams)"] = detect.mean_test(detect.synthid.both_g(stats), stats.mask)
        return {k: np.asarray(detect.decision_scores(v)) for k, v in out.items()}

    rng = jax.random.key(seed)
    shortest = min(int(np.min(t["lengths"] - t["starts"])) for t in (test_pos, test_neg))
    grid = [x for x in lengths if x <= shortest]
    curves = {}
    for i, length in enumerate(grid):
        pos = score_all("pos", detect.truncate(st["tp"], length))
        neg = score_all("neg", detect.truncate(st["tn"], length))
        for name in pos:
            est = metrics.bootstrap_tpr_at_fpr(pos[name], neg[name], ALPHA, jax.random.fold_in(rng, 100 + i),
                                               num_resamples=num_resamples)
            curves.setdefault(name, []).append(_estimate(est))
    roc_len = min(roc_length, shortest)
    pos = score_all("pos", detect.truncate(st["tp"], roc_len))
    neg = score_all("neg", detect.truncate(st["tn"], roc_len))
    roc = {name: _roc(pos[name], neg[name]) for name in pos}
    return {"decoder": "synthid", "num_layers": num_layers, "lengths": grid, "tpr": curves, "roc_length": roc_len,
            "roc": roc, "draft_fraction": p_draft,
            "chosen_l2": {k: d.config.get("l2") for k, d in detectors.items()},
            "train_texts": len(train_pos["indices"]), "test_texts": len(test_pos["indices"]),
            "test_negatives": len(test_neg["indices"])}
