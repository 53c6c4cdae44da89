"""The detection experiment's model-assisted row: the generator's models weigh each token.

Beside the key-only detectors of :func:`wmspec_jax.lab.evaluation.evaluate`, :func:`model_assisted_row`
scores the same test texts with :func:`wmspec_jax.detect.score_model_assisted`: the pair's
probabilities of every text (:func:`wmspec_jax.detect.model_replay.token_probs`, one batched forward
pass per model and chunk, temperature and top-k as generation applied them, the draft's K in-step
variants for Alg. 1) weigh each token's keyed statistic, so a token the model was sure of carries
no weight (``docs/detection.md``, "Model-assisted detection"). Its p-values are exact given the
models' probabilities (the keyed values are independent of them under H0), so it is a calibrated
detector: it flags p ≤ 0.01 with no fitted threshold, and its FPR is reported on every model and
human negative truncated at the ROC length, as for the other calibrated detectors.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from wmspec_jax import detect, methods
from wmspec_jax.decoders import WatermarkDecoder
from wmspec_jax.detect import metrics
from wmspec_jax.detect import model_replay as model_scores
from wmspec_jax.lab.detection_rows import TextRows

LABEL = "model-assisted"
ALPHA = 0.01


def pvalues_by_length(pair, decoder: str, rows: TextRows, run, lengths: Sequence[int], *, num_layers: int,
                      top_k=None, batch_size: int = 4) -> dict:
    """{n: float64[N] each row's model-assisted p-value on its first n generated tokens} for texts scored as
    ``run`` (a :class:`wmspec_jax.lab.runs.RunSpec`: its method, K and temperature) generated them."""
    speculative = methods.METHODS[methods.detected_as(run.method)].speculative and run.lookahead > 0
    lookahead = run.lookahead if speculative else None
    stats = detect.statistics(WatermarkDecoder.from_name(decoder, num_layers), rows, rows.keys,
                              vocab_size=pair.vocab_size)
    probs = model_scores.token_probs(pair, rows.tokens, lengths=rows.lengths, starts=rows.starts,
                                     temperature=run.temperature, draft_temperature=run.setting.draft_temperature,
                                     top_k=top_k, lookahead=lookahead,
                                     with_draft=speculative, batch_size=batch_size)
    return {int(n): np.asarray(detect.score_model_assisted(detect.truncate(stats, n), probs, method=run.method,
                                                           lookahead=lookahead).pvalue, np.float64)
            for n in lengths}


def _estimate(flags) -> dict:
    flags = np.asarray(flags, bool)
    if flags.size == 0:
        return {"flagged": 0, "negatives": 0, "value": float("nan"), "lower": float("nan"), "upper": float("nan")}
    e = metrics.clopper_pearson(int(flags.sum()), int(flags.size))
    return {"flagged": int(flags.sum()), "negatives": int(flags.size), "value": e.value, "lower": e.lower,
            "upper": e.upper}


def model_assisted_row(pair, decoder: str, texts: dict, run, res: dict, *, num_layers: int, top_k=None) -> dict:
    """The model-assisted row of one decoder's detection result ``res`` (:func:`~wmspec_jax.lab.evaluation.evaluate`
    on ``texts``, :func:`wmspec_jax.lab.detection_texts`): TPR at p ≤ 0.01 with its Clopper–Pearson interval
    at each of ``res["lengths"]`` on the watermarked test texts, and the FPR on the model and human test
    negatives at ``res["roc_length"]`` (every text, truncated there)."""
    lengths = list(res["lengths"])
    pos = pvalues_by_length(pair, decoder, texts["pte"], run, lengths, num_layers=num_layers, top_k=top_k)
    tpr = [{k: v for k, v in _estimate(pos[n] <= ALPHA).items() if k in ("value", "lower", "upper")}
           for n in lengths]
    fpr = {}
    for which, name in (("model", "nte"), ("human", "hte")):
        if texts.get(name) is not None and which in res["fpr"]:
            neg = pvalues_by_length(pair, decoder, texts[name], run, [res["roc_length"]], num_layers=num_layers,
                                    top_k=top_k)[int(res["roc_length"])]
            fpr[which] = _estimate(neg <= ALPHA)
    return {"label": LABEL, "method": run.method, "lookahead": run.lookahead, "lengths": lengths, "tpr": tpr,
            "fpr": fpr, "fpr_length": int(res["roc_length"])}


__all__ = ["ALPHA", "LABEL", "model_assisted_row", "pvalues_by_length"]
