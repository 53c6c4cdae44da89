r"""Every decoder under every watermarking method on the exact toy pair: speed and detection side by side.

For each decoder (Gumbel-max, SynthID, inverse transform, DiPmark, γ-reweight, KGW) and method (``basic``,
``dathathri`` — the dual-key speculative watermark inference engines deploy: draft stream ζ^D as one
key, residual and bonus stream ζ^T as the other, true-random acceptance — and Alg. 1, ``pseudorandom``),
it generates ``--num_texts`` texts of the exact Markov toy pair (``wmspec_jax.toy``: P and Q known, V =
``--vocab_size``), each under its own key, and reports

* tokens per step (AATPS; the basic watermark makes one token per step) and LOGPPL, the mean −log P of
  the generated tokens under the toy target at T = 1 (the unbiased decoders match unwatermarked
  sampling's; a biased one pays here);
* TPR at 1 % FPR from exact p-values: for the uniform-statistic decoders Ars-τ (τ = 1/2, Eq. 11: it
  reads Alg. 1's acceptance u), Ars-Prior (p = 1/2, Eq. 12), the target stream alone, and the Oracle
  (the records' true sources: an upper bound no text-only detector reaches); for SynthID the mean test;
  for KGW (γ = 0.25, δ = 2) the green count;
* the same detectors' FPR on ``--num_texts`` standard-method (unwatermarked) texts of the same models.

``--draft_target`` adds rows where the draft stream has its own decoder
(``SpeculativeConfig.draft_decoder``), each stream scored with its decoder's statistic.

  python -m benchmarks.compare_decoders --num_texts=2000 --max_new_tokens=32 --output=results/decoders.json

The toy pair has far less entropy per token than a language model, so the absolute TPRs are low; the
comparison between decoders and methods is the point. Writes ``--output`` (JSON) atomically.
"""

import time

import jax
import numpy as np
from absl import app, flags

from wmspec_jax import decoders, detect, prf, speculative, storage, toy

flags.DEFINE_integer("num_texts", 2000, "texts per (decoder, method)", lower_bound=100)
flags.DEFINE_integer("max_new_tokens", 32, "tokens per text", lower_bound=8)
flags.DEFINE_integer("vocab_size", 16, "toy vocabulary", lower_bound=4)
flags.DEFINE_float("tv", 0.3, "total variation between the toy draft and target")
flags.DEFINE_float("temperature", 0.7, "temperature of P and Q")
flags.DEFINE_integer("lookahead", 3, "K of the speculative methods", lower_bound=1)
flags.DEFINE_integer("synthid_layers", 30, "SynthID's m", lower_bound=1)
flags.DEFINE_list("decoders", ["gumbel", "synthid", "inverse_transform", "dipmark", "gamma_reweight", "kgw"],
                  "decoder names")
flags.DEFINE_list("methods", ["basic", "dathathri", "pseudorandom"], "watermarking methods")
flags.DEFINE_list("draft_target", ["gumbel:inverse_transform", "gumbel:dipmark"],
                  "DRAFT:TARGET decoder pairs run with a draft decoder of their own (the methods that watermark "
                  "the draft)")
flags.DEFINE_string("output", None, "JSON file for the results")
FLAGS = flags.FLAGS

ALPHA = 0.01
PROMPT_LENGTH = 4


def _generate(method, decoder, tag, seed, p_tab, q_tab, draft_decoder=None):
    n, v = FLAGS.num_texts, FLAGS.vocab_size
    k = 0 if method in ("basic", "plain") else FLAGS.lookahead
    cfg = speculative.SpeculativeConfig(method=method, decoder=decoder, lookahead=k, draft_decoder=draft_decoder,
                                        max_new_tokens=FLAGS.max_new_tokens, temperature=FLAGS.temperature)
    prompts = np.random.default_rng(seed).integers(0, v, size=(n, PROMPT_LENGTH))
    keys = prf.stream_keys([f"{tag}-{i}" for i in range(n)])
    model = toy.markov_model(v)
    res = speculative.generate(model, toy.log_table(p_tab), prompts, np.full(n, PROMPT_LENGTH), keys,
                               jax.random.key(seed), cfg, draft=model, draft_params=toy.log_table(q_tab))
    return res, keys


def _pvalues(decoder, res, keys, draft_decoder=None):
    rec = detect.records_from_generation(res)
    st = detect.statistics(decoder, rec.tokens, keys, lengths=rec.lengths, starts=rec.starts,
                           vocab_size=FLAGS.vocab_size, draft_decoder=draft_decoder)
    if decoder.family == decoders.SYNTHID:
        return {"synthid-mean": np.asarray(detect.make("synthid-mean", st.provenance).score(st).pvalue)}
    if decoder.family == decoders.KGW:
        return {"kgw-green": np.asarray(detect.make("kgw-green", st.provenance, gamma=decoder.gamma,
                                                             vocab_size=FLAGS.vocab_size).score(st).pvalue)}
    return {"ars-tau": np.asarray(detect.score_ars_tau(st, 0.5).pvalue),
            "ars-prior": np.asarray(detect.score_ars_prior(st, 0.5).pvalue),
            "single": np.asarray(detect.score_single(st).pvalue),
            "oracle": np.asarray(detect.score_oracle(st, rec.source).pvalue)}


def main(argv):
    del argv
    p_tab, q_tab = toy.markov_pair(FLAGS.vocab_size, FLAGS.tv, concentration=1.0, seed=0)
    rows = []
    plans = [(None, name, FLAGS.methods) for name in FLAGS.decoders]
    for pair in FLAGS.draft_target:
        draft_name, _, target_name = pair.partition(":")
        plans.append((draft_name, target_name, [m for m in FLAGS.methods if speculative.METHODS[m].watermark_draft]))
    for draft_name, name, methods in plans:
        decoder = decoders.WatermarkDecoder.from_name(name, FLAGS.synthid_layers)
        draft = None if draft_name is None else decoders.WatermarkDecoder.from_name(draft_name, FLAGS.synthid_layers)
        neg, neg_keys = _generate("standard", decoder, f"neg-{name}", 100, p_tab, q_tab)
        fpr = {d: float(np.mean(p <= ALPHA)) for d, p in _pvalues(decoder, neg, neg_keys, draft).items()}
        for i, method in enumerate(methods):
            t0 = time.perf_counter()
            tag = f"{method}-{name}" + ("" if draft is None else f"-draft-{draft.name}")
            res, keys = _generate(method, decoder, tag, i, p_tab, q_tab, draft)
            tpr = {d: float(np.mean(p <= ALPHA)) for d, p in _pvalues(decoder, res, keys, draft).items()}
            steps = np.asarray(res.num_steps, np.float64)
            new = np.asarray(res.lengths - res.prompt_lengths, np.float64)
            label = decoder.label if draft is None else f"{draft.label} draft, {decoder.label} target"
            logppl = float(np.mean(res.log_perplexity()))
            rows.append({"decoder": decoder.name, "logppl": logppl, "draft_decoder": None if draft is None else draft.name,
                         "label": label, "method": method,
                         "tokens_per_step": float(new.sum() / steps.sum()), "tpr_at_1pct": tpr,
                         "fpr_at_1pct_standard": fpr, "seconds": time.perf_counter() - t0})
            r = rows[-1]
            print(f"{r['label']:18s} {method:13s} AATPS {r['tokens_per_step']:.2f}  LOGPPL {r['logppl']:.3f}  TPR@1% "
                  + "  ".join(f"{d} {v:.3f}" for d, v in tpr.items()) + "  FPR(standard) "
                  + "  ".join(f"{d} {v:.3f}" for d, v in fpr.items()), flush=True)
    if FLAGS.output:
        settings = {f: FLAGS[f].value for f in ("num_texts", "max_new_tokens", "vocab_size", "tv", "temperature",
                                                "lookahead", "synthid_layers")}
        storage.atomic_write_json(FLAGS.output, {"settings": settings, "rows": rows})


if __name__ == "__main__":
    app.run(main)
