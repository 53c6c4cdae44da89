r"""Distils the built-in draft (target layer subset + LoRA) from SmolLM2-135M-Instruct.

Stages (``--mode``), each resumable and writing atomically under ``--workdir``:

* ``sample``: target continuations (T = 0.7 and 1.0) of the built-in *train*
  prompts, with the target's top-k next-token log-probabilities at every
  generated position (self-distillation data; saved per chunk).
* ``train``: fits the adapters of :mod:`wmspec_jax.models.draft` so that the
  draft's next-token distribution matches the target's on those contexts
  (forward KL + total variation at T = 1 and T = 0.7); checkpoints every
  ``--save_every`` steps and resumes from the last one; finally writes the
  adapters to ``--out`` (the shipped asset).
* ``export``: writes the adapters of the last training checkpoint to ``--out``.
* ``eval``: on held-out *eval* prompts, samples target continuations at each
  temperature and reports the mean per-position acceptance
  alpha = E[1 - TV(Q_T, P_T)], the implied AATPS (1 - alpha^(K+1)) / (1 - alpha)
  for K = 2, 3, 4, and the draft/target per-token decode-time ratio measured
  in the same run. Writes ``--eval_json``.

Commands used for the shipped asset (2-core CPU, run from the repository root)::

  mkdir -p /tmp/wmspec_draft
  nohup /work/venv/bin/python experiments/distill_draft.py --mode=sample --repeats=1 \
      > /tmp/wmspec_draft/sample.log 2>&1 &
  # (stopped by hand after 17 of the 26 T=0.7 chunks, 544 sequences / 41k target
  #  tokens, to fit the time budget; left alone it also samples the T=1.0 chunks)
  nohup /work/venv/bin/python experiments/distill_draft.py --mode=train --steps=300 \
      > /tmp/wmspec_draft/train.log 2>&1 &
  nohup /work/venv/bin/python experiments/distill_draft.py --mode=train --steps=450 \
      > /tmp/wmspec_draft/train2.log 2>&1 &      # resumes at step 300, writes --out
  /work/venv/bin/python experiments/distill_draft.py --mode=eval \
      --eval_json=/tmp/wmspec_draft/eval.json

``--mode=eval --adapters=none`` evaluates the plain truncation (no adapters).

The shipped asset was distilled with a since-merged ``models/corpus.py`` whose
prompt lists differed slightly from today's :mod:`wmspec_jax.data` (a few
more pydoc paragraphs, 240-character cuts without the word-boundary guard);
the train/eval hash split is the same one, so :mod:`wmspec_jax.data`'s
``eval`` split holds no prompt the shipped draft was trained on.
"""

from __future__ import annotations

import glob
import json
import os
import sys
import time

from absl import app, flags

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402

from wmspec_jax import data, results  # noqa: E402
from wmspec_jax.models import builtin, draft, transformer  # noqa: E402
from wmspec_jax.models.cache import init_cache  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_enum("mode", "eval", ["sample", "train", "export", "eval"], "stage to run")
flags.DEFINE_string("workdir", "/tmp/wmspec_draft", "samples, checkpoints and logs")
flags.DEFINE_string("out", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                        "wmspec_jax", "assets", draft.DEFAULT_ASSET),
                    "where train writes the final adapters")
flags.DEFINE_string("adapters", "", "eval: adapter file ('' = --out, 'none' = plain truncation)")
flags.DEFINE_list("layers", ["0", "1", "2", "3", "4", "5"], "target layers kept by the draft")
flags.DEFINE_integer("rank", 16, "LoRA rank")
flags.DEFINE_integer("prompt_len", 96, "prompts are left-aligned in this many slots")
flags.DEFINE_integer("new_tokens", 96, "continuation length sampled from the target")
flags.DEFINE_integer("sample_batch", 32, "rows per sampling chunk")
flags.DEFINE_integer("top_k", 64, "teacher log-probs kept per position")
flags.DEFINE_list("temperatures", ["0.7", "1.0"], "sampling / evaluation temperatures")
flags.DEFINE_integer("repeats", 2, "sample: passes over the train prompts (new seeds)")
flags.DEFINE_integer("steps", 300, "train: optimiser steps")
flags.DEFINE_integer("batch", 8, "train: sequences per step")
flags.DEFINE_float("lr", 2e-3, "train: peak learning rate")
flags.DEFINE_integer("save_every", 50, "train: checkpoint period (steps)")
flags.DEFINE_integer("eval_prompts", 64, "eval: held-out prompts per temperature")
flags.DEFINE_string("eval_json", "", "eval: write the report here as JSON")
flags.DEFINE_integer("seed", 0, "random seed")


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ----------------------------------------------------------------------------- prompts

def prompt_ids(split: str, max_len: int) -> list[np.ndarray]:
    """Chat-formatted questions and plain documentation prefixes of one split."""
    tok = builtin.builtin_tokenizer()
    out = [np.asarray(builtin.encode_chat(q)) for q in data.builtin_questions(split).prompts]
    out += [np.asarray(tok.encode(p, add_special_tokens=False))
            for p in data.builtin_openings(chars=240, split=split, fortunes_dir="").prompts]
    return [p for p in out if 0 < len(p) <= max_len]


def pad_prompts(prompts: list[np.ndarray], width: int) -> tuple[np.ndarray, np.ndarray]:
    tokens = np.zeros((len(prompts), width), np.int32)
    for i, p in enumerate(prompts):
        tokens[i, :len(p)] = p
    return tokens, np.asarray([len(p) for p in prompts], np.int32)


# ----------------------------------------------------------------------------- sampling

def make_sampler(lm, new_tokens: int, top_k: int, eos: int):
    """jit(params, prompts[B, P], lens[B], key, temperature) -> continuation + teacher stats."""

    def run(params, prompts, lens, key, temperature):
        b, p = prompts.shape
        cache = lm.init_cache(b, p + new_tokens)
        logits, cache = lm.step(params, cache, prompts, lens)
        last = jnp.take_along_axis(logits, (lens - 1)[:, None, None], axis=1)[:, 0]

        def body(carry, key):
            cache, last, alive = carry
            lp = jax.nn.log_softmax(last)
            tok = jax.random.categorical(key, lp / temperature).astype(jnp.int32)
            vals, idx = jax.lax.top_k(lp, top_k)
            logits, cache = lm.step(params, cache, tok[:, None], jnp.ones((b,), jnp.int32))
            return (cache, logits[:, 0], alive & (tok != eos)), (tok, vals, idx, alive)

        keys = jax.random.split(key, new_tokens)
        _, (tok, vals, idx, valid) = jax.lax.scan(body, (cache, last, jnp.ones((b,), bool)), keys)
        return (tok.T, vals.transpose(1, 0, 2), idx.transpose(1, 0, 2), valid.T)

    return jax.jit(run)


def sample_chunks(lm, params, prompts, temperature, seed, tag, workdir):
    """Samples continuations chunk by chunk; skips chunks already on disk."""
    sampler = make_sampler(lm, FLAGS.new_tokens, FLAGS.top_k, builtin.load_target().config.eos_token_id)
    b = FLAGS.sample_batch
    paths = []
    n_chunks = (len(prompts) + b - 1) // b
    for c in range(n_chunks):
        path = os.path.join(workdir, f"{tag}_T{temperature}_s{seed}_{c:04d}.npz")
        paths.append(path)
        if os.path.exists(path):
            continue
        chunk = prompts[c * b:(c + 1) * b]
        chunk = chunk + [chunk[-1]] * (b - len(chunk))  # static batch: pad by repetition
        toks, lens = pad_prompts(chunk, FLAGS.prompt_len)
        t0 = time.time()
        out = sampler(params, jnp.asarray(toks), jnp.asarray(lens),
                      jax.random.PRNGKey(seed * 100003 + c), jnp.float32(temperature))
        cont, vals, idx, valid = map(np.asarray, out)
        n_real = min(b, len(prompts) - c * b)
        results.atomic_savez(path, prompts=toks[:n_real], lens=lens[:n_real], cont=cont[:n_real],
                     vals=vals[:n_real].astype(np.float16), idx=idx[:n_real],
                     valid=valid[:n_real], temperature=np.float32(temperature))
        log(f"{tag} T={temperature} seed={seed}: chunk {c + 1}/{n_chunks} "
            f"({valid[:n_real].sum()} tokens, {time.time() - t0:.1f}s)")
    return paths


def load_chunks(paths):
    parts = [dict(np.load(p)) for p in paths]
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0] if k != "temperature"}


def mode_sample():
    target = builtin.load_target()
    lm = target.language_model()
    prompts = prompt_ids("train", FLAGS.prompt_len)
    log(f"{len(prompts)} train prompts")
    for rep in range(FLAGS.repeats):
        for t in FLAGS.temperatures:
            sample_chunks(lm, target.params, prompts, float(t), FLAGS.seed + rep, "train",
                          FLAGS.workdir)
    log("sampling done")


# ----------------------------------------------------------------------------- training

def full_sequences(data):
    """Prompt + continuation in one row, and the positions predicting each continuation token."""
    n, p = data["prompts"].shape
    new = data["cont"].shape[1]
    seq = np.zeros((n, p + new), np.int32)
    for i in range(n):
        ln = data["lens"][i]
        seq[i, :ln] = data["prompts"][i, :ln]
        seq[i, ln:ln + new] = data["cont"][i]
    pred_pos = data["lens"][:, None] - 1 + np.arange(new)[None, :]
    return seq, pred_pos.astype(np.int32)


def draft_logits(cfg, params, seq, pred_pos):
    """Teacher-forced logits float32[N, new, V] at the positions in pred_pos."""
    n, s = seq.shape
    cache = init_cache(cfg, n, s, dtype=params["embed"].dtype)
    positions = jnp.broadcast_to(jnp.arange(s, dtype=jnp.int32), (n, s))
    h, _ = transformer.hidden_states(cfg, params, seq, positions, cache,
                                     jnp.full((n,), s, jnp.int32))
    h = jnp.take_along_axis(h, pred_pos[..., None], axis=1)
    return transformer.lm_logits(cfg, params, h)


def distill_loss(adapters, target_params, layers, cfg, batch):
    seq, pred_pos, vals, idx, valid = batch
    params = draft.draft_params(target_params, layers, adapters)
    lq = jax.nn.log_softmax(draft_logits(cfg, params, seq, pred_pos))
    lq_k = jnp.take_along_axis(lq, idx, axis=-1)
    lp_k = vals.astype(jnp.float32)
    p_k, q_k = jnp.exp(lp_k), jnp.exp(lq_k)
    rest_p = jnp.clip(1 - p_k.sum(-1), 1e-6, 1.0)
    rest_q = jnp.clip(1 - q_k.sum(-1), 1e-6, 1.0)
    # Forward KL on the teacher's top-k plus the lumped remainder.
    fkl = (p_k * (lp_k - lq_k)).sum(-1) + rest_p * (jnp.log(rest_p) - jnp.log(rest_q))
    tv1 = 0.5 * (jnp.abs(p_k - q_k).sum(-1) + jnp.abs(rest_p - rest_q))
    # TV at T = 0.7 over the teacher's top-k (the remainder is negligible there).
    t = 0.7
    p07 = jax.nn.softmax(lp_k / t, axis=-1)
    lq07 = jax.nn.log_softmax(lq / t)
    q07 = jnp.exp(jnp.take_along_axis(lq07, idx, axis=-1))
    tv07 = 0.5 * (jnp.abs(p07 - q07).sum(-1) + (1 - q07.sum(-1)))
    w = valid.astype(jnp.float32)
    denom = jnp.maximum(w.sum(), 1.0)
    loss = ((fkl + tv1 + tv07) * w).sum() / denom
    return loss, {"fkl": (fkl * w).sum() / denom, "alpha1": 1 - (tv1 * w).sum() / denom,
                  "alpha07": 1 - (tv07 * w).sum() / denom}


def restore_state(target, layers):
    """(adapters, optimiser, optimiser state, step) from the last checkpoint, or fresh."""
    warmup = min(30, FLAGS.steps // 10)
    sched = optax.warmup_cosine_decay_schedule(0.0, FLAGS.lr, warmup, FLAGS.steps, FLAGS.lr * 0.05)
    opt = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(sched, weight_decay=0.0))
    adapters = draft.init_adapters(target.params, layers, FLAGS.rank, jax.random.PRNGKey(FLAGS.seed))
    opt_state = opt.init(adapters)
    ckpt_path = os.path.join(FLAGS.workdir, "train_state.npz")
    if not os.path.exists(ckpt_path):
        return adapters, opt, opt_state, 0
    with np.load(ckpt_path, allow_pickle=False) as z:
        leaves, treedef = jax.tree_util.tree_flatten((adapters, opt_state))
        leaves = [jnp.asarray(z[f"l{i}"], l.dtype) for i, l in enumerate(leaves)]
        adapters, opt_state = jax.tree_util.tree_unflatten(treedef, leaves)
        return adapters, opt, opt_state, int(z["step"])


def write_asset(layers, adapters, step):
    draft.save_adapters(FLAGS.out, layers, adapters,
                        meta={"target": builtin.TARGET_NAME, "rank": FLAGS.rank,
                              "steps": int(step), "gguf": builtin.GGUF_FILE})
    log(f"wrote {FLAGS.out} ({os.path.getsize(FLAGS.out) / 1e6:.2f} MB)")


def mode_export():
    """Writes the adapters of the last training checkpoint to --out."""
    target = builtin.load_target()
    layers = [int(i) for i in FLAGS.layers]
    adapters, _, _, step = restore_state(target, layers)
    if not step:
        raise SystemExit(f"no training checkpoint in {FLAGS.workdir}")
    write_asset(layers, adapters, step)


def mode_train():
    target = builtin.load_target()
    layers = [int(i) for i in FLAGS.layers]
    cfg = draft.draft_config(target.config, layers)
    paths = sorted(glob.glob(os.path.join(FLAGS.workdir, "train_T*.npz")))
    if not paths:
        raise SystemExit(f"no samples in {FLAGS.workdir}: run --mode=sample first")
    data = load_chunks(paths)
    seq, pred_pos = full_sequences(data)
    n = len(seq)
    log(f"{n} sequences, {int(data['valid'].sum())} target tokens from {len(paths)} chunks")

    adapters, opt, opt_state, start = restore_state(target, layers)
    ckpt_path = os.path.join(FLAGS.workdir, "train_state.npz")
    if start:
        log(f"resumed from step {start}")

    @jax.jit
    def train_step(adapters, opt_state, batch):
        (loss, aux), grads = jax.value_and_grad(distill_loss, has_aux=True)(
            adapters, target.params, layers, cfg, batch)
        updates, opt_state = opt.update(grads, opt_state, adapters)
        return optax.apply_updates(adapters, updates), opt_state, loss, aux

    def save(step):
        leaves = jax.tree_util.tree_leaves((adapters, opt_state))
        results.atomic_savez(ckpt_path, step=np.int64(step),
                     **{f"l{i}": np.asarray(l) for i, l in enumerate(leaves)})

    rng = np.random.default_rng(FLAGS.seed + start)
    t0, hist = time.time(), []
    for step in range(start, FLAGS.steps):
        if step % FLAGS.save_every == 0 and step > start:
            # Pick up chunks that a concurrent --mode=sample has written since.
            new_paths = sorted(glob.glob(os.path.join(FLAGS.workdir, "train_T*.npz")))
            if len(new_paths) > len(paths):
                paths = new_paths
                data = load_chunks(paths)
                seq, pred_pos = full_sequences(data)
                n = len(seq)
                log(f"now {n} sequences from {len(paths)} chunks")
        rows = rng.choice(n, FLAGS.batch, replace=False)
        batch = (jnp.asarray(seq[rows]), jnp.asarray(pred_pos[rows]),
                 jnp.asarray(data["vals"][rows]), jnp.asarray(data["idx"][rows]),
                 jnp.asarray(data["valid"][rows]))
        adapters, opt_state, loss, aux = train_step(adapters, opt_state, batch)
        hist.append([float(loss), float(aux["alpha1"]), float(aux["alpha07"])])
        if (step + 1) % 10 == 0:
            h = np.mean(hist[-10:], axis=0)
            log(f"step {step + 1}/{FLAGS.steps} loss {h[0]:.4f} train-alpha T=1 {h[1]:.3f} "
                f"T=0.7 {h[2]:.3f} ({(time.time() - t0) / len(hist):.2f}s/step)")
        if (step + 1) % FLAGS.save_every == 0 or step + 1 == FLAGS.steps:
            save(step + 1)
    write_asset(layers, adapters, FLAGS.steps)


# ----------------------------------------------------------------------------- evaluation

def decode_time(lm, params, batch: int, context: int = 128, repeats: int = 30) -> float:
    """Median seconds of one jitted T=1 decode step at the given context length."""
    step = jax.jit(lm.step)
    cache = lm.init_cache(batch, context + 8)
    cache = lm.rewind(cache, jnp.full((batch,), context, jnp.int32))
    tok = jnp.ones((batch, 1), jnp.int32)
    one = jnp.ones((batch,), jnp.int32)
    jax.block_until_ready(step(params, cache, tok, one))
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(step(params, cache, tok, one))
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def acceptance(target, drafted, data, temperature, batch=16):
    """Mean over valid positions of sum_v min(P_T, Q_T), P/Q teacher-forced on target samples."""
    seq, pred_pos = full_sequences(data)

    @jax.jit
    def alpha_rows(tp, dp, seq, pred_pos):
        lp = draft_logits(target.config, tp, seq, pred_pos) / temperature
        lq = draft_logits(drafted.config, dp, seq, pred_pos) / temperature
        return jnp.minimum(jax.nn.softmax(lp), jax.nn.softmax(lq)).sum(-1)

    out = []
    for i in range(0, len(seq), batch):
        s, pp = seq[i:i + batch], pred_pos[i:i + batch]
        pad = batch - len(s)
        if pad:
            s = np.concatenate([s, np.repeat(s[-1:], pad, 0)])
            pp = np.concatenate([pp, np.repeat(pp[-1:], pad, 0)])
        out.append(np.asarray(alpha_rows(target.params, drafted.params, s, pp))[:batch - pad])
    a = np.concatenate(out)
    return a[data["valid"]]


def mode_eval():
    target = builtin.load_target()
    if FLAGS.adapters == "none":
        layers, adapters = [int(i) for i in FLAGS.layers], None
        name = f"truncated{layers}"
    else:
        path = FLAGS.adapters or FLAGS.out
        layers, adapters, _ = draft.load_adapters(path)
        name = os.path.basename(path)
    drafted = draft.make_draft(target, layers, adapters)
    lm = target.language_model()
    prompts = prompt_ids("eval", FLAGS.prompt_len)
    rng = np.random.default_rng(FLAGS.seed)
    prompts = [prompts[i] for i in rng.permutation(len(prompts))[:FLAGS.eval_prompts]]
    report = {"draft": name, "layers": layers, "eval_prompts": len(prompts),
              "new_tokens": FLAGS.new_tokens, "temperatures": {}}
    for t in FLAGS.temperatures:
        t = float(t)
        paths = sample_chunks(lm, target.params, prompts, t, 12345, "eval",
                              os.path.join(FLAGS.workdir, "eval"))
        a = acceptance(target, drafted, load_chunks(paths), t)
        alpha = float(a.mean())
        se = float(a.std() / np.sqrt(len(a)))
        implied = {f"K={k}": (1 - alpha ** (k + 1)) / (1 - alpha) for k in (2, 3, 4)}
        report["temperatures"][str(t)] = {"alpha": alpha, "alpha_se": se, "positions": int(a.size),
                                          "implied_aatps": implied}
        log(f"T={t}: alpha={alpha:.4f} ± {se:.4f} over {a.size} positions; implied AATPS "
            + ", ".join(f"{k}: {v:.3f}" for k, v in implied.items()))
    timing = {}
    for b in (1, 32):
        tt = decode_time(lm, target.params, b)
        td = decode_time(drafted.language_model(), drafted.params, b)
        timing[f"batch{b}"] = {"target_ms": tt * 1e3, "draft_ms": td * 1e3, "ratio": td / tt}
        log(f"decode batch {b}: target {tt * 1e3:.2f} ms, draft {td * 1e3:.2f} ms, "
            f"ratio {td / tt:.3f}")
    report["decode_time"] = timing
    if FLAGS.eval_json:
        with open(FLAGS.eval_json, "w") as f:
            json.dump(report, f, indent=2)
    print(json.dumps(report, indent=2))


def main(argv):
    del argv
    os.makedirs(os.path.join(FLAGS.workdir, "eval"), exist_ok=True)
    {"sample": mode_sample, "train": mode_train, "export": mode_export,
     "eval": mode_eval}[FLAGS.mode]()


if __name__ == "__main__":
    app.run(main)
