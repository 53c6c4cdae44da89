r"""Key sequences vs context keys under token edits: detection of Alg. 1 answers of the built-in pair.

Generates ``--num_prompts`` answers to the built-in ELI5-style questions (``builtin-eli5``, split
``eval``) with Alg. 1 (pseudorandom acceptance), the Gumbel-max decoder, K = ``--lookahead``,
temperature ``--temperature`` and ``--max_new_tokens`` new tokens, each under its own key
(:func:`wmspec_jax.keys.text_keys`), twice: with streams keyed by the h = 4 previous tokens (the
default) and by a key sequence of length ``--key_length`` (:mod:`wmspec_jax.key_sequence`, Kuditipudi
et al.'s EXP). Each answer alone (no prompt) is then edited (:mod:`wmspec_jax.lab.edits`: random
deletions, insertions and substitutions at each rate of ``--rates``, one generator per condition) and
scored:

* context keys: the tools' default detector (Ars-Prior, p = 1/2), exact Gamma p-values;
* key sequence: the edit test (:func:`wmspec_jax.detect.edit_test`, γ = ``--gamma``, T = ``--null_keys``),
  exact permutation p-values.

TPR is the share of p-values <= ``--alpha`` with Clopper-Pearson 95 % intervals; the FPR row scores the
unedited answers under another secret. Also reports the edit test's time per text.

  python -m benchmarks.key_sequence_robustness --output=results/key_sequence_robustness.json
  python -m benchmarks.key_sequence_robustness --num_prompts=8 --max_new_tokens=32 --rates=0,0.2  # quick

Writes ``--output`` (JSON) atomically and prints a table.
"""

import time

import numpy as np
from absl import app, flags

from wmspec_jax import batching, decoders, detect, keys, sampling, speculative, storage
from wmspec_jax.detect import metrics
from wmspec_jax import text_data as data
from wmspec_jax.lab import edits
from wmspec_jax.models import pairs

flags.DEFINE_string("target", pairs.BUILTIN, "target model (pairs.load_pair)")
flags.DEFINE_string("draft", pairs.BUILTIN, "draft model (pairs.load_pair)")
flags.DEFINE_integer("num_prompts", 64, "questions answered", lower_bound=1)
flags.DEFINE_integer("max_new_tokens", 128, "new tokens per answer", lower_bound=8)
flags.DEFINE_float("temperature", 1.0, "temperature of P and Q (Kuditipudi et al. sample at 1)")
flags.DEFINE_integer("lookahead", 3, "K", lower_bound=1)
flags.DEFINE_integer("key_length", 256, "n of the key sequence (Kuditipudi et al.'s 256)", lower_bound=1)
flags.DEFINE_integer("null_keys", 99, "T of the edit test", lower_bound=1)
flags.DEFINE_float("gamma", 0.0, "γ of the edit test", lower_bound=0.0)
flags.DEFINE_float("alpha", 0.01, "verdict threshold on p", lower_bound=0.0, upper_bound=1.0)
flags.DEFINE_list("rates", ["0", "0.1", "0.2", "0.3"], "edit rates")
flags.DEFINE_list("edits", ["delete", "insert", "substitute"], "edit kinds (lab.edits)")
flags.DEFINE_integer("batch_size", 8, "answers per generation call", lower_bound=1)
flags.DEFINE_integer("seed", 0, "true randomness and the edits")
flags.DEFINE_string("output", None, "JSON file for the results")
FLAGS = flags.FLAGS

KEYINGS = ("context", "key_sequence")
SECRET = "key-sequence-robustness"
"""The benchmark's watermark secret: a public one (never a real key on a command line)."""


def _answers(pair, prompts, keying: str) -> list:
    """The generated token ids of each answer (int32 arrays)."""
    ids, plen = pairs.encode_prompts(pair, prompts, "question", 96)
    run = f"key-sequence-robustness-{keying}"
    config = speculative.SpeculativeConfig(
        method="pseudorandom", decoder=decoders.gumbel(), lookahead=FLAGS.lookahead,
        max_new_tokens=FLAGS.max_new_tokens, temperature=FLAGS.temperature, eos_id=pair.eos_id,
        pad_id=pair.pad_id, key_sequence=FLAGS.key_length if keying == "key_sequence" else 0)
    out = []
    for batch in batching.generate_in_batches(
            pair.target, pair.target_params, ids, plen, list(range(len(prompts))), config,
            stream_keys=lambda idx: keys.text_keys(SECRET, idx, run=run),
            rngs=lambda idx: sampling.text_rngs(FLAGS.seed, idx, run), batch_size=FLAGS.batch_size,
            draft=pair.draft, draft_params=pair.draft_params):
        out.extend(np.asarray(t.tokens, np.int32) for t in batch.texts)
    return out


def _pvalues(keying: str, texts: list, secret: str, vocab: int) -> np.ndarray:
    width = max(len(t) for t in texts)
    tokens = np.zeros((len(texts), width), np.int32)
    for row, t in enumerate(texts):
        tokens[row, :len(t)] = t
    lengths = np.array([len(t) for t in texts], np.int32)
    text_keys = keys.text_keys(secret, range(len(texts)), run=f"key-sequence-robustness-{keying}")
    if keying == "key_sequence":
        return detect.edit_test(tokens, text_keys, key_length=FLAGS.key_length, vocab_size=vocab, lengths=lengths,
                                gamma=FLAGS.gamma, null_keys=FLAGS.null_keys).pvalue
    stats = detect.gumbel_statistics(tokens, text_keys, vocab_size=vocab, lengths=lengths)
    return np.asarray(detect.score_ars_prior(stats, 0.5).pvalue)


def _rate(flagged) -> dict:
    e = metrics.clopper_pearson(int(np.sum(flagged)), int(np.size(flagged)))
    return {"rate": e.value, "low": e.lower, "high": e.upper, "count": int(np.sum(flagged)), "n": int(np.size(flagged))}


def main(_):
    pair = pairs.load_pair(FLAGS.target, FLAGS.draft)
    prompts = data.load_prompt_set("builtin-eli5").prompts[: FLAGS.num_prompts]
    results = {"settings": {k: FLAGS[k].value for k in ("num_prompts", "max_new_tokens", "temperature", "lookahead",
                                                        "key_length", "null_keys", "gamma", "alpha", "seed")},
               "rows": []}
    for keying in KEYINGS:
        t0 = time.perf_counter()
        answers = _answers(pair, prompts, keying)
        print(f"{keying}: {len(answers)} answers in {time.perf_counter() - t0:.0f} s", flush=True)
        null = _pvalues(keying, answers, SECRET + "-wrong", pair.vocab_size) <= FLAGS.alpha
        results["rows"].append({"keying": keying, "edit": "none (wrong secret)", "edit_rate": 0.0, **_rate(null)})
        for kind in FLAGS.edits:
            for rate in (float(r) for r in FLAGS.rates):
                if rate == 0.0 and kind != FLAGS.edits[0]:
                    continue
                rng = np.random.default_rng([FLAGS.seed, KEYINGS.index(keying), FLAGS.edits.index(kind),
                                             int(rate * 1000)])
                edited = [edits.apply(kind, a, rate, rng, vocab_size=pair.vocab_size).tokens for a in answers]
                t0 = time.perf_counter()
                flagged = _pvalues(keying, edited, SECRET, pair.vocab_size) <= FLAGS.alpha
                seconds = time.perf_counter() - t0
                row = {"keying": keying, "edit": kind if rate else "none", "edit_rate": rate, **_rate(flagged),
                       "seconds_per_text": seconds / len(edited)}
                results["rows"].append(row)
                print(f"{keying:>13} {row['edit']:>11} {rate:4.2f}: TPR {row['rate']:.3f} "
                      f"[{row['low']:.3f}, {row['high']:.3f}]  ({seconds / len(edited):.3f} s/text)", flush=True)
    if FLAGS.output:
        storage.atomic_write_json(FLAGS.output, results)
    for row in results["rows"]:  # the docs' table
        print(f"| {row['keying']} | {row['edit']} | {row.get('edit_rate', 0.0):.2f} | {row['count']}/{row['n']} = "
              f"{row['rate']:.3f} [{row['low']:.3f}, {row['high']:.3f}] |")


if __name__ == "__main__":
    app.run(main)
