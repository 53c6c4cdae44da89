r"""Multi-draft Alg. 1 against one chain on an exact toy pair: tokens per step and detection power.

For each decoder (Gumbel-max; SynthID with ``--synthid_layers``) and draft shape (one chain, n
chains, a tree; siblings independent or distinct) it generates ``--num_texts`` texts with Alg. 1 on
the Markov toy pair (``wmspec_jax.toy``, V = ``--vocab_size``), each under its own key, and reports

* tokens per step (AATPS), and each sibling's share of the accepted draft tokens (from the records);
* TPR at 1 % FPR from exact p-values of one key-only detector (Gumbel-max: Ars-τ with τ = 1/2;
  SynthID: the mean g-value of both streams) on four statistics of the same texts: each token in the
  sibling stream its ``candidate`` record names (``records``); sibling 0's stream only
  (``sibling0``); the search over the sibling streams with the default weights w_c ∝ 4^-c
  (``searched``) and with equal weights (``searched_equal``);
* Gumbel-max's Oracle (records: source and candidate);
  with each statistic's median log10 p-value (the TPR saturates on long texts);
* the FPR of the default search on the same texts scored with other keys (the null).

``--pair=builtin`` runs the same on the built-in pair (SmolLM2-135M-Instruct and its draft) with
``--num_texts`` held-out built-in questions at ``--temperature``.

  python -m benchmarks.compare_multidraft --num_texts=1500 --max_new_tokens=4 --output=results/multidraft.json
  python -m benchmarks.compare_multidraft --pair=builtin --num_texts=64 --max_new_tokens=64 --lookahead=3 \
      --draft_trees=1,3,3d --synthid_layers=30 --output=results/multidraft_builtin.json

Writes ``--output`` (JSON) atomically and prints a table.
"""

import time

import jax
import numpy as np
from absl import app, flags

from wmspec_jax import decoders, multidraft, prf, sources, speculative, storage, toy
from wmspec_jax.detect import gumbel, streams, synthid

flags.DEFINE_enum("pair", "toy", ["toy", "builtin"], "model pair: the Markov toy pair or the built-in pair")
flags.DEFINE_integer("num_texts", 1500, "texts per draft shape", lower_bound=16)
flags.DEFINE_float("temperature", 1.0, "sampling temperature", lower_bound=0.0)
flags.DEFINE_integer("max_new_tokens", 4, "tokens per text (short: the TPRs then differ)", lower_bound=1)
flags.DEFINE_integer("vocab_size", 64, "toy vocabulary", lower_bound=4)
flags.DEFINE_float("tv", 0.3, "total variation between the toy draft and target")
flags.DEFINE_integer("lookahead", 2, "K", lower_bound=1)
flags.DEFINE_list("draft_trees", ["1", "2", "3", "3d", "3x2"], "draft shapes: n, n + 'd' (distinct), b1xb2...")
flags.DEFINE_list("decoders", ["gumbel", "synthid"], "watermark decoders")
flags.DEFINE_integer("synthid_layers", 8, "SynthID's m", lower_bound=1)
flags.DEFINE_string("output", "results/compare_multidraft.json", "JSON output")
FLAGS = flags.FLAGS

VARIANTS = ("records", "sibling0", "searched", "searched_equal")


def _statistics(decoder, toks, keys, siblings: int, variant: str, candidate, texts):
    kw = {"records": dict(siblings=siblings, candidate=candidate), "sibling0": {},
          "searched": dict(siblings=siblings),
          "searched_equal": dict(siblings=siblings, sibling_weights=[1.0] * siblings)}[variant]
    return streams.statistics(decoder, toks, keys, **texts, **kw)


def _scores(decoder, stats):
    """The key-only detector's scores (pvalue, and log_pvalue, which stays finite where p underflows)."""
    if decoder.family == decoders.SYNTHID:
        return synthid.mean_test(synthid.both_g(stats), stats.mask)
    return gumbel.score_ars_tau(stats, 0.5)


def _pair(n: int):
    """(target, target params, draft, draft params, vocabulary, prompts int[n, P], prompt lengths int[n])."""
    if FLAGS.pair == "builtin":
        from wmspec_jax import text_data as data
        from wmspec_jax.models import pairs

        pair = pairs.load_pair("builtin", "builtin")
        questions = data.load_prompt_set("builtin-eli5").take(n, seed=7).prompts
        prompts, lengths = pairs.encode_prompts(pair, questions, "question", 64)
        return pair.target, pair.target_params, pair.draft, pair.draft_params, pair.vocab_size, prompts, lengths
    v = FLAGS.vocab_size
    p_tab, q_tab = toy.markov_pair(v, FLAGS.tv, seed=5)
    model = toy.markov_model(v)
    prompts = np.random.default_rng(0).integers(0, v, size=(n, 6))
    return model, toy.log_table(p_tab), model, toy.log_table(q_tab), v, prompts, np.full(n, 6)


def main(argv):
    del argv
    n = FLAGS.num_texts
    target, tp, draft, dp, v, prompts, prompt_lengths = _pair(n)
    keys = prf.stream_keys([f"k{i}" for i in range(n)])
    other = prf.stream_keys([f"o{i}" for i in range(n)])
    rate = lambda p: float((np.asarray(p) < 0.01).mean())  # noqa: E731
    rows = []
    for name in FLAGS.decoders:
        decoder = decoders.WatermarkDecoder.from_name(name, FLAGS.synthid_layers)
        for text in FLAGS.draft_trees:
            kw = multidraft.parse_shape(text)
            siblings = max(kw.get("draft_tree") or (kw.get("num_drafts", 1),))
            t0 = time.perf_counter()
            cfg = speculative.SpeculativeConfig(method="pseudorandom", decoder=decoder, lookahead=FLAGS.lookahead,
                                                max_new_tokens=FLAGS.max_new_tokens, temperature=FLAGS.temperature,
                                                **kw)
            res = speculative.generate(target, tp, prompts, prompt_lengths, keys, jax.random.key(0), cfg,
                                       draft=draft, draft_params=dp)
            texts = dict(vocab_size=v, lengths=np.asarray(res.lengths), starts=np.asarray(prompt_lengths))
            toks, src, cand = np.asarray(res.tokens), np.asarray(res.source), np.asarray(res.candidate)
            drafts = cand[src == sources.SOURCE_DRAFT]
            row = {"decoder": decoder.label, "draft_shape": text,
                   "settings": {k: list(x) if isinstance(x, tuple) else x for k, x in kw.items()},
                   "siblings": siblings, "tokens_per_step": float(np.mean(res.tokens_per_step_mean())),
                   "sibling_shares": (np.bincount(drafts, minlength=siblings) / max(drafts.size, 1)).tolist(),
                   "tpr": {}, "median_log10_p": {}}
            for variant in VARIANTS:
                stats = _statistics(decoder, toks, keys, siblings, variant, cand, texts)
                scores = _scores(decoder, stats)
                row["tpr"][variant] = rate(scores.pvalue)
                row["median_log10_p"][variant] = float(np.median(np.asarray(scores.log_pvalue)) / np.log(10))
                if variant == "records" and decoder.family != decoders.SYNTHID:
                    row["tpr_oracle"] = rate(gumbel.score_oracle(stats, src).pvalue)
            row["fpr_searched"] = rate(_scores(decoder, _statistics(decoder, toks, other, siblings, "searched",
                                                                    cand, texts)).pvalue)
            row["seconds"] = time.perf_counter() - t0
            rows.append(row)
    pair = "built-in pair" if FLAGS.pair == "builtin" else f"toy pair V = {v}, TV = {FLAGS.tv}"
    print(f"Alg. 1, {pair}, K = {FLAGS.lookahead}, T = {FLAGS.temperature}, {n} texts of at most "
          f"{FLAGS.max_new_tokens} tokens; TPR / FPR at 1 % (binomial sd ~{np.sqrt(0.25 / n):.3f} at most); "
          "Gumbel-max: Ars-tau, SynthID: mean test; TPR (median log10 p)")
    print(f"{'decoder':16s} {'shape':6s} {'tok/step':>8s} {'Oracle':>7s} "
          + " ".join(f"{v_:>14s}" for v_ in VARIANTS) + f" {'FPR':>6s}  sibling shares of drafts")
    for r in rows:
        oracle = f"{r['tpr_oracle']:7.3f}" if "tpr_oracle" in r else f"{'-':>7s}"
        print(f"{r['decoder']:16s} {r['draft_shape']:6s} {r['tokens_per_step']:8.2f} {oracle} "
              + " ".join(f"{r['tpr'][v_]:6.3f} ({r['median_log10_p'][v_]:5.1f})" for v_ in VARIANTS)
              + f" {r['fpr_searched']:6.3f}  " + " / ".join(f"{x:.2f}" for x in r["sibling_shares"]))
    storage.atomic_write_json(FLAGS.output, {
        "pair": FLAGS.pair, "temperature": FLAGS.temperature, "vocab_size": v, "tv": FLAGS.tv, "lookahead": FLAGS.lookahead, "num_texts": n,
        "max_new_tokens": FLAGS.max_new_tokens, "synthid_layers": FLAGS.synthid_layers, "rows": rows})
    print(f"wrote {FLAGS.output}")


if __name__ == "__main__":
    app.run(main)
