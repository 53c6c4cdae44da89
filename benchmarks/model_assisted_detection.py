r"""Model-assisted vs key-only Gumbel-max detection of Alg. 1 texts of the built-in pair.

Generates answers of the built-in pair (SmolLM2-135M-Instruct and its draft, ``--target`` /
``--draft``) with pseudorandom acceptance (Alg. 1), the Gumbel-max decoder, K = ``--lookahead``,
temperature ``--temperature``, ``--max_new_tokens`` new tokens, each text under its own key
(:func:`wmspec_jax.keys.text_keys`), for two prompt sets:

* ``low_entropy``: code and list requests (:data:`CODE_PROMPTS`, :data:`LIST_PROMPTS`), whose
  answers the model is sure of token after token;
* ``prose``: the built-in ELI5-style questions (``builtin-eli5``, split ``eval``).

Every answer is scored alone, with its prompt (``starts`` = prompt length), by

* the key-only detectors: the target stream alone, Ars-τ at every τ of ``TAU_GRID`` (the best τ
  is chosen on the scored texts themselves: an optimistic figure for key-only detection), Ars-Prior
  with p = the records' share of accepted drafts, and the Oracle (the records' sources);
* the model-assisted detector (:mod:`wmspec_jax.detect.model_assisted`), its token probabilities
  computed once per text (:func:`wmspec_jax.detect.model_replay.token_probs`: one forward pass per model):
  with the step posterior (K given), token by token, the target stream alone, and with the records'
  sources.

TPR at 1 % FPR is the share of p-values ≤ 0.01 (all these nulls are exact), with Clopper–Pearson
95 % intervals and an exact McNemar test of model-assisted vs the best key-only detector. The FPR is
measured on the same texts under ``--wrong_keys`` other keys each (the same token probabilities: they
do not depend on the key).

  python -m benchmarks.model_assisted_detection --output=results/model_assisted.json

Writes ``--output`` (JSON) atomically and prints a summary.
"""

import os
import time

import jax
import numpy as np
from absl import app, flags
from scipy import stats as sps

from wmspec_jax import batching, decoders, detect, keys, sampling, speculative, storage
from wmspec_jax.detect import draft_routes, metrics, model_assisted
from wmspec_jax import text_data as data
from wmspec_jax.detect import model_replay as model_scores
from wmspec_jax.models import pairs

CODE_PROMPTS = (
    "Write a Python function that returns the factorial of n.",
    "Write a Python function that checks whether a number is prime.",
    "Write a Python function that reverses a string.",
    "Write a Python function that returns the n-th Fibonacci number.",
    "Write a Python function that sums a list of numbers.",
    "Write a Python function that finds the largest element of a list.",
    "Write a Python function that counts the vowels in a string.",
    "Write a Python function that sorts a list with bubble sort.",
    "Write a Python function that checks whether a string is a palindrome.",
    "Write a Python function that returns the greatest common divisor of two numbers.",
    "Write a Python function that converts Celsius to Fahrenheit.",
    "Write a Python function that removes duplicates from a list.",
    "Write a Python function that merges two sorted lists.",
    "Write a Python function that performs binary search on a sorted list.",
    "Write a Python function that returns the average of a list of numbers.",
    "Write a Python function that counts the words in a sentence.",
    "Write a Python class for a stack with push and pop methods.",
    "Write a Python class for a queue with enqueue and dequeue methods.",
    "Write a Python function that reads a text file and returns its lines.",
    "Write a Python function that flattens a nested list.",
    "Write a JavaScript function that adds two numbers.",
    "Write a JavaScript function that reverses an array.",
    "Write a C function that swaps two integers.",
    "Write a C program that prints Hello, World!",
    "Write a Java method that returns the maximum of two integers.",
    "Write a SQL query that selects all rows from a table called users.",
    "Write a SQL query that counts the orders of each customer.",
    "Write a Python function that computes the square of every number in a list.",
    "Write a Python function that returns the even numbers of a list.",
    "Write a Python function that capitalizes every word in a string.",
    "Write a Python for loop that prints the numbers from 1 to 10.",
    "Write a Python function that checks whether a year is a leap year.",
    "Write a Python function that returns the length of a linked list.",
    "Write a Python function that converts a list of strings to integers.",
    "Write a bash script that prints the files in the current directory.",
    "Write a Python dictionary that maps the numbers one to five to their English names.",
)
LIST_PROMPTS = (
    "List the days of the week.",
    "List the months of the year.",
    "List the planets of the solar system in order from the Sun.",
    "List the numbers from 1 to 30, separated by commas.",
    "List the first 20 even numbers.",
    "List the letters of the English alphabet.",
    "List the first 15 prime numbers.",
    "List the colors of the rainbow.",
    "List the continents of the world.",
    "List the seven wonders of the ancient world.",
    "List the first ten square numbers.",
    "List the numbers from 100 down to 80.",
    "List the US states that begin with the letter M.",
    "List the Python keywords you know.",
    "List the first ten multiples of 7.",
    "List the oceans of the world.",
    "List the primary colors and the secondary colors.",
    "List the signs of the zodiac in order.",
    "List the noble gases.",
    "List the first ten elements of the periodic table.",
    "List the notes of the C major scale.",
    "List the Roman numerals from 1 to 20.",
    "List the books of the Harry Potter series in order.",
    "List ten common fruits.",
    "List ten common vegetables.",
    "List the countries of Scandinavia.",
    "List the powers of two up to 1024.",
    "List the vowels of the English alphabet.",
    "List the first ten Fibonacci numbers.",
    "List the HTTP methods.",
    "List the ingredients of a basic pancake recipe.",
    "List the chess pieces.",
    "List the weekdays in French.",
    "List the numbers from one to twenty in words.",
    "List the seasons of the year.",
    "List the members of the Beatles.",
)

flags.DEFINE_string("target", pairs.BUILTIN, "target model (pairs.load_pair)")
flags.DEFINE_string("draft", pairs.BUILTIN, "draft model (pairs.load_pair)")
flags.DEFINE_integer("num_low_entropy", len(CODE_PROMPTS) + len(LIST_PROMPTS), "code and list prompts used",
                     lower_bound=1, upper_bound=len(CODE_PROMPTS) + len(LIST_PROMPTS))
flags.DEFINE_integer("num_prose", 64, "ELI5-style questions used", lower_bound=0)
flags.DEFINE_integer("max_new_tokens", 128, "new tokens per answer", lower_bound=8)
flags.DEFINE_float("temperature", 0.7, "temperature of P and Q")
flags.DEFINE_integer("lookahead", 3, "K", lower_bound=1)
flags.DEFINE_integer("batch_size", 8, "answers per generation call", lower_bound=1)
flags.DEFINE_integer("wrong_keys", 32, "other keys each text is scored under (the FPR)", lower_bound=1)
flags.DEFINE_integer("max_prompt_length", 96, "prompt tokens at most")
flags.DEFINE_string("secret", "model-assisted-detection", "the watermark secret (a public one: a benchmark)")
flags.DEFINE_integer("seed", 0, "true randomness")
flags.DEFINE_string("output", None, "JSON file for the results")
flags.DEFINE_string("texts", None, "an .npz file of the generated texts: read when it exists (the generation "
                    "is skipped), else written after generating")
FLAGS = flags.FLAGS

ALPHA = 0.01
RUN = "model-assisted-alg1"
TEXT_FIELDS = ("tokens", "lengths", "starts", "source", "indices")


def _low_entropy_prompts() -> list:
    mixed = [p for pair in zip(CODE_PROMPTS, LIST_PROMPTS) for p in pair]
    return mixed[: FLAGS.num_low_entropy]


def _generate(pair, prompts: list, offset: int):
    """(tokens int32[B, L] prompt + answer, lengths, starts, sources, indices, seconds) of the answers."""
    ids, plen = pairs.encode_prompts(pair, prompts, "question", FLAGS.max_prompt_length)
    indices = list(range(offset, offset + len(prompts)))
    config = speculative.SpeculativeConfig(
        method="pseudorandom", decoder=decoders.WatermarkDecoder("gumbel"), lookahead=FLAGS.lookahead,
        max_new_tokens=FLAGS.max_new_tokens, temperature=FLAGS.temperature, eos_id=pair.eos_id, pad_id=pair.pad_id)
    t0 = time.perf_counter()
    texts = []
    for batch in batching.generate_in_batches(
            pair.target, pair.target_params, ids, plen, indices, config,
            stream_keys=lambda idx: keys.text_keys(FLAGS.secret, idx, run=RUN),
            rngs=lambda idx: sampling.text_rngs(FLAGS.seed, idx, RUN), batch_size=FLAGS.batch_size,
            draft=pair.draft, draft_params=pair.draft_params):
        texts.extend(batch.texts)
    seconds = time.perf_counter() - t0
    width = max(int(plen[j]) + len(t.tokens) for j, t in enumerate(texts))
    tokens = np.full((len(texts), width), pair.pad_id, np.int32)
    source = np.full((len(texts), width), -1, np.int8)
    lengths = np.zeros(len(texts), np.int32)
    for j, t in enumerate(texts):
        p = int(plen[j])
        tokens[j, :p] = ids[j, :p]
        tokens[j, p:p + len(t.tokens)] = t.tokens
        source[j, p:p + len(t.tokens)] = t.source
        lengths[j] = p + len(t.tokens)
    return tokens, lengths, np.asarray(plen, np.int32), source, indices, seconds


def _rate(flags_) -> dict:
    e = metrics.clopper_pearson(int(np.sum(flags_)), int(np.size(flags_)))
    return {"rate": e.value, "low": e.lower, "high": e.upper, "count": int(np.sum(flags_)), "n": int(np.size(flags_))}


def _law_fit(stats, probs, source, mask, starts, lengths) -> dict:
    """Per route of the records: KS p-value of y^(1/law) (uniform when the law is the one the token was drawn
    from) and, for residual tokens, the share with P(w) <= Q(w) (impossible for a residual)."""
    position = np.arange(mask.shape[1])[None]
    valid = (position >= starts[:, None]) & (position < lengths[:, None])
    variant = np.minimum(draft_routes.steps_from_records(source, valid), probs.draft_variants - 1)[..., None]
    pick = lambda x: np.take_along_axis(np.asarray(x, np.float64), variant, axis=-1)[..., 0]  # noqa: E731
    p, q, r = np.asarray(probs.target, np.float64), pick(probs.draft), pick(probs.residual)
    out = {}
    for code, name, y, law in ((0, "draft", stats.y_draft, q), (1, "residual", stats.y_target, r),
                               (2, "bonus", stats.y_target, p)):
        sel = mask & (source == code)
        z = np.asarray(y, np.float64)[sel] ** (1.0 / np.clip(law[sel], 1e-3, 1.0))
        out[name] = {"tokens": int(sel.sum()), "ks_pvalue": float(sps.kstest(z, "uniform").pvalue)}
    sel = mask & (source == 1)
    out["residual"]["share_with_p_at_most_q"] = float(np.mean(p[sel] <= q[sel]))
    return out


def _evaluate(name: str, pair, tokens, lengths, starts, source, indices) -> dict:
    vocab = pair.vocab_size
    text_keys = keys.text_keys(FLAGS.secret, indices, run=RUN)
    stats = detect.gumbel_statistics(tokens, text_keys, vocab_size=vocab, lengths=lengths, starts=starts)
    t0 = time.perf_counter()
    probs = model_scores.token_probs(pair, tokens, lengths=lengths, starts=starts, temperature=FLAGS.temperature,
                                     lookahead=FLAGS.lookahead, batch_size=2)
    probs_seconds = time.perf_counter() - t0
    # the draft's first-draft distribution alone (what a draft that reads the target's features samples
    # the first draft of a step from), for comparison
    first_only = model_scores.token_probs(pair, tokens, lengths=lengths, starts=starts,
                                          temperature=FLAGS.temperature, batch_size=2)
    mask = np.asarray(stats.mask)
    flagged = {}
    flagged["key-only: target stream"] = np.asarray(detect.score_single(stats).pvalue) <= ALPHA
    taus = detect.TAU_GRID
    tau_flags = [np.asarray(detect.score_ars_tau(stats, float(t)).pvalue) <= ALPHA for t in taus]
    best = int(np.argmax([f.sum() for f in tau_flags]))
    flagged[f"key-only: Ars-tau, best tau = {taus[best]:.2f} (chosen on these texts)"] = tau_flags[best]
    prior = detect.draft_fraction(source, mask)
    flagged[f"key-only: Ars-Prior (p = {prior:.2f})"] = np.asarray(detect.score_ars_prior(stats, prior).pvalue) <= ALPHA
    flagged["key-only: Oracle (records)"] = np.asarray(detect.score_oracle(stats, source).pvalue) <= ALPHA
    settings = {
        "model-assisted: step posterior (K given)": (probs, dict(lookahead=FLAGS.lookahead)),
        "model-assisted: token by token": (probs, {}),
        "model-assisted: target stream alone": (probs, dict(method="basic")),
        "model-assisted: records' sources": (probs, dict(source=source)),
        "model-assisted: step posterior, first-draft Q only": (first_only, dict(lookahead=FLAGS.lookahead)),
        "model-assisted: records' sources, first-draft Q only": (first_only, dict(source=source)),
    }
    t0 = time.perf_counter()
    for label, (p, kw) in settings.items():
        kw = {"method": "pseudorandom", **kw}
        flagged[label] = np.asarray(model_assisted.score_gumbel_model_assisted(stats, p, **kw).pvalue) <= ALPHA
    score_seconds = (time.perf_counter() - t0) / len(settings)
    law_fit = {name: _law_fit(stats, p, source, mask, starts, lengths) for name, p in
               (("in-step variants", probs), ("first-draft Q only", first_only))}
    key_only = [k for k in flagged if k.startswith("key-only") and "Oracle" not in k]
    best_key_only = max(key_only, key=lambda k: flagged[k].sum())
    main = "model-assisted: step posterior (K given)"
    cmp = metrics.paired_comparison(flagged[main], flagged[best_key_only])
    # the null: every text under other keys, with the same token probabilities
    wrong = []
    for j in range(FLAGS.wrong_keys):
        other = keys.text_keys(FLAGS.secret + f"/wrong-{j}", indices, run=RUN)
        s0 = detect.gumbel_statistics(tokens, other, vocab_size=vocab, lengths=lengths, starts=starts)
        wrong.append(np.asarray(model_assisted.score_gumbel_model_assisted(
            s0, probs, method="pseudorandom", lookahead=FLAGS.lookahead).pvalue, np.float64))
    wrong = np.concatenate(wrong)
    position = np.arange(tokens.shape[1])[None]
    valid = (position >= starts[:, None]) & (position < lengths[:, None])
    target = np.asarray(probs.target, np.float64)
    return {
        "set": name, "texts": int(tokens.shape[0]),
        "scored_tokens_mean": float(mask.sum(1).mean()),
        "nats_per_token": float(np.mean(-np.log(np.clip(target[mask], 1e-30, 1.0)))),
        "share_of_tokens_with_p_above_0.9": float(np.mean(target[mask] > 0.9)),
        "draft_fraction": prior,
        "tpr_at_1pct": {k: _rate(v) for k, v in flagged.items()},
        "best_key_only": best_key_only,
        "mcnemar_model_assisted_vs_best_key_only": {"only_model_assisted": cmp.only_a, "only_key_only": cmp.only_b,
                                                     "p_model_assisted_better": cmp.p_a_better},
        "wrong_key_fpr_at_1pct": _rate(wrong <= ALPHA),
        "wrong_key_fpr_at_0.1pct": _rate(wrong <= 0.001),
        "wrong_key_ks_pvalue": float(sps.kstest(wrong, "uniform").pvalue),
        "wrong_key_scores": int(wrong.size),
        "law_fit": law_fit,
        "valid_positions": int(valid.sum()),
        "token_probs_seconds": probs_seconds, "score_seconds_per_detector": score_seconds,
    }


def main(argv):
    del argv
    pair = pairs.load_pair(FLAGS.target, FLAGS.draft)
    sets = [("low_entropy", _low_entropy_prompts(), 0)]
    if FLAGS.num_prose:
        prose = data.load_prompt_set("builtin-eli5").prompts[: FLAGS.num_prose]
        sets.append(("prose", prose, 10_000))
    rows = []
    saved = dict(np.load(FLAGS.texts)) if FLAGS.texts and os.path.exists(FLAGS.texts) else {}
    for name, prompts, offset in sets:
        if f"{name}/tokens" in saved:
            tokens, lengths, starts, source, indices = (saved[f"{name}/{k}"] for k in TEXT_FIELDS)
            indices, seconds = [int(i) for i in indices], float(saved[f"{name}/seconds"])
        else:
            tokens, lengths, starts, source, indices, seconds = _generate(pair, prompts, offset)
            saved.update({f"{name}/{k}": np.asarray(v) for k, v in zip(TEXT_FIELDS, (tokens, lengths, starts, source,
                                                                                       indices))})
            saved[f"{name}/seconds"] = np.float64(seconds)
            if FLAGS.texts:
                np.savez(FLAGS.texts, **saved)
        row = _evaluate(name, pair, tokens, lengths, starts, source, indices)
        row["generation_seconds"] = seconds
        row["new_tokens_mean"] = float(np.mean(lengths - starts))
        rows.append(row)
        print(f"== {name}: {row['texts']} texts, {row['scored_tokens_mean']:.1f} scored tokens, "
              f"{row['nats_per_token']:.3f} nats/token (-log P_T(w)), {row['share_of_tokens_with_p_above_0.9']:.2f} of "
              f"tokens with P > 0.9, generation {seconds:.0f} s", flush=True)
        for label, r in row["tpr_at_1pct"].items():
            print(f"   {label:62s} TPR {r['rate']:.3f} [{r['low']:.3f}, {r['high']:.3f}]")
        c = row["mcnemar_model_assisted_vs_best_key_only"]
        print(f"   McNemar vs {row['best_key_only']}: {c['only_model_assisted']} vs {c['only_key_only']} "
              f"discordant, p = {c['p_model_assisted_better']:.2g}")
        f1 = row["wrong_key_fpr_at_1pct"]
        print(f"   wrong keys: {row['wrong_key_scores']} scores, FPR@1% {f1['rate']:.4f} [{f1['low']:.4f}, "
              f"{f1['high']:.4f}], KS p {row['wrong_key_ks_pvalue']:.3g}", flush=True)
    if FLAGS.output:
        settings = {f: FLAGS[f].value for f in ("target", "draft", "num_low_entropy", "num_prose", "max_new_tokens",
                                                "temperature", "lookahead", "wrong_keys", "seed")}
        storage.atomic_write_json(FLAGS.output, {"settings": settings, "jax": jax.__version__, "rows": rows})


if __name__ == "__main__":
    app.run(main)
