r"""Multi-draft Alg. 1 against one chain on an exact toy pair: tokens per step and detection power.

For each draft shape (one chain, n chains, a tree; siblings independent or distinct) it generates
``--num_texts`` texts with Alg. 1 (Gumbel-max) on the Markov toy pair (``wmspec_jax.toy``, V =
``--vocab_size``), each under its own key, and reports

* tokens per step (AATPS);
* TPR at 1 % FPR from exact Gamma p-values of: the Oracle reading the records (source, and the
  ``candidate`` record naming each draft token's sibling stream); the Oracle with sibling 0's
  stream only (what a detector without the candidate record sees); Ars-τ (τ = 1/2, key only), whose
  draft statistic for a multi-draft text is (max over the sibling streams)^siblings;
* Ars-τ's FPR on the same texts scored with other keys (the null).

  python -m benchmarks.compare_multidraft --num_texts=1500 --max_new_tokens=4 --output=/tmp/multidraft.json

Writes ``--output`` (JSON) atomically and prints a table.
"""

import time

import jax
import numpy as np
from absl import app, flags

from wmspec_jax import multidraft, prf, speculative, storage, toy
from wmspec_jax.detect import gumbel, streams

flags.DEFINE_integer("num_texts", 1500, "texts per draft shape", lower_bound=100)
flags.DEFINE_integer("max_new_tokens", 4, "tokens per text (short: the TPRs then differ)", lower_bound=1)
flags.DEFINE_integer("vocab_size", 64, "toy vocabulary", lower_bound=4)
flags.DEFINE_float("tv", 0.3, "total variation between the toy draft and target")
flags.DEFINE_integer("lookahead", 2, "K", lower_bound=1)
flags.DEFINE_list("draft_trees", ["1", "2", "3", "3d", "3x2"], "draft shapes: n, n + 'd' (distinct), b1xb2...")
flags.DEFINE_string("output", "results/compare_multidraft.json", "JSON output")
FLAGS = flags.FLAGS


def main(argv):
    del argv
    v, n = FLAGS.vocab_size, FLAGS.num_texts
    p_tab, q_tab = toy.markov_pair(v, FLAGS.tv, seed=5)
    model, tp, dp = toy.markov_model(v), toy.log_table(p_tab), toy.log_table(q_tab)
    prompts = np.random.default_rng(0).integers(0, v, size=(n, 6))
    keys = prf.stream_keys([f"k{i}" for i in range(n)])
    other = prf.stream_keys([f"o{i}" for i in range(n)])
    tpr = lambda scores: float((np.asarray(scores.pvalue) < 0.01).mean())  # noqa: E731
    rows = []
    for text in FLAGS.draft_trees:
        kw = multidraft.parse_shape(text)
        siblings = max(kw.get("draft_tree") or (kw.get("num_drafts", 1),))
        t0 = time.perf_counter()
        cfg = speculative.SpeculativeConfig(method="pseudorandom", lookahead=FLAGS.lookahead,
                                            max_new_tokens=FLAGS.max_new_tokens, **kw)
        res = speculative.generate(model, tp, prompts, np.full(n, 6), keys, jax.random.key(0), cfg, draft=model,
                                   draft_params=dp)
        texts = dict(vocab_size=v, lengths=np.asarray(res.lengths), starts=np.full(n, 6))
        toks, src = np.asarray(res.tokens), np.asarray(res.source)
        oracle = streams.gumbel_statistics(toks, keys, siblings=siblings, candidate=np.asarray(res.candidate), **texts)
        key_only = streams.gumbel_statistics(toks, keys, siblings=siblings, **texts)
        null = streams.gumbel_statistics(toks, other, siblings=siblings, **texts)
        rows.append({
            "draft_shape": text, "settings": {k: list(x) if isinstance(x, tuple) else x for k, x in kw.items()},
            "siblings": siblings, "tokens_per_step": float(np.mean(res.tokens_per_step_mean())),
            "tpr_oracle": tpr(gumbel.score_oracle(oracle, src)),
            "tpr_oracle_sibling0": tpr(gumbel.score_oracle(streams.gumbel_statistics(toks, keys, **texts), src)),
            "tpr_ars_tau": tpr(gumbel.score_ars_tau(key_only, 0.5)),
            "fpr_ars_tau": tpr(gumbel.score_ars_tau(null, 0.5)), "seconds": time.perf_counter() - t0})
    print(f"Alg. 1, Gumbel-max, toy pair V = {v}, TV = {FLAGS.tv}, K = {FLAGS.lookahead}, {n} texts of "
          f"{FLAGS.max_new_tokens} tokens; TPR / FPR at 1 % (binomial sd ~{np.sqrt(0.25 / n):.3f} at most)")
    print(f"{'shape':8s} {'tok/step':>8s} {'Oracle':>7s} {'sib-0':>7s} {'Ars-tau':>8s} {'FPR':>6s}")
    for r in rows:
        print(f"{r['draft_shape']:8s} {r['tokens_per_step']:8.2f} {r['tpr_oracle']:7.3f} {r['tpr_oracle_sibling0']:7.3f} "
              f"{r['tpr_ars_tau']:8.3f} {r['fpr_ars_tau']:6.3f}")
    storage.atomic_write_json(FLAGS.output, {
        "vocab_size": v, "tv": FLAGS.tv, "lookahead": FLAGS.lookahead, "num_texts": n,
        "max_new_tokens": FLAGS.max_new_tokens, "rows": rows})
    print(f"wrote {FLAGS.output}")


if __name__ == "__main__":
    app.run(main)
