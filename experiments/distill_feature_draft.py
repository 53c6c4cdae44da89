r"""Distils a feature-conditioned draft (:mod:`wmspec_jax.models.feature_draft`) for SmolLM2.

Uses the sample chunks of ``experiments/distill_draft.py --mode=sample`` (the
target's continuations of the train prompts, or of chat questions it wrote
itself, with its top-64 next-token log-probabilities) in the same
``--workdir``, and shares that script's flags (``--workdir --steps --batch
--lr --save_every --seed --temperatures --prompt_len --eval_prompts
--timing_batches --eval_json``). Stages (``--stage``), each resumable and
writing atomically:

* ``features``: the target's final hidden states at every position of every
  train chunk that has none yet (``<workdir>/feat/*.npy``, float16; the
  draft's inputs).
* ``train``: fits the draft's ``fc``, layer and final norm so that its
  next-token distribution matches the teacher's top-k (forward KL + TV at
  T = 1 and 0.7, :func:`distill_draft.teacher_loss`), in two passes per
  batch: with the target's features (the first draft of a step) and with the
  draft's own features of the previous position from the first pass (later
  drafts, which run before the target has seen the drafted tokens; weight
  ``--second_pass``), plus a small regression of the draft's hidden state
  onto the target's (``--feature_loss``). It trains on every chunk that has
  features when it starts. The draft starts from the target's last layer, or
  from ``--feature_init``'s weights with a fresh optimiser; its reduced head
  is that of ``--head_ids_from``. Optional regularisers: ``--weight_decay``
  (AdamW, matrices only) and ``--feature_noise`` (uniform noise on the
  target's features, as EAGLE trains); optional ``--third_pass``: a third
  pass on the own features of the second, as the third draft of a step reads
  them (EAGLE-3's training-time test, one step deeper). Warm-up then cosine
  decay from ``--lr`` over ``--steps``; checkpoints every ``--save_every``
  steps and resumes from the last one (a run resumed with a larger
  ``--steps`` rebuilds the schedule for its own ``--steps``: a warm
  restart); writes ``--feature_out``.
* ``eval``: held-out acceptance alpha = E[1 − TV(Q_T, P_T)] on the eval
  prompts (the same target samples as ``distill_draft --mode=eval``), for the
  first draft of a step (target features), the second (own features) and the
  third (own features of own features), a K = 3 tokens-per-step estimate
  from them (:func:`tokens_per_step_k3`), split by prompt kind, and the
  draft/target decode-time ratio; with ``--chunk_globs`` also alpha on
  sample chunks of the workdir (trained-on against unseen rounds: the
  generalisation gap). ``--feature_draft`` picks the file (default
  ``--feature_out``).

Run from the repository root, after ``distill_draft --mode=sample`` has
written chunks to ``$W`` (any work folder), e.g.::

  python -m experiments.distill_feature_draft --stage=features --workdir=$W
  python -m experiments.distill_feature_draft --stage=train --workdir=$W --steps=3000 \
      --lr=1.5e-3 --save_every=50 --weight_decay=0.05 --feature_noise=0.2 \
      --feature_out=$W/feature_draft.npz
  python -m experiments.distill_feature_draft --stage=eval --workdir=$W \
      --feature_draft=$W/feature_draft.npz --timing_batches=1 --eval_json=$W/eval.json

Load the result with ``--draft=builtin:PATH`` in the tools. The commands,
data and CPU time that made the feature drafts f1-f3 (f3 is the default
built-in draft) are in ``docs/measurements/2026-11-27-draft-distillation-recipes.md``.
"""

from __future__ import annotations

import glob
import json
import os
import time

from absl import app, flags


from experiments import distill_draft as dd  # its flags are shared
import jax
import jax.numpy as jnp
import numpy as np
import optax

from wmspec_jax import storage
from wmspec_jax.models import builtin, draft, feature_draft, transformer
from wmspec_jax.models.cache import init_cache

FLAGS = flags.FLAGS
flags.DEFINE_enum("stage", "eval", ["features", "train", "eval"], "stage to run")
flags.DEFINE_string("feature_out", os.path.join("results", "draft", "feature_draft.npz"),
                    "train: the feature draft file written at the end (load it with --draft=builtin:PATH)")
flags.DEFINE_string("feature_draft", "", "eval: feature draft file ('' = --feature_out)")
flags.DEFINE_string("head_ids_from", "f3", "train: reduced head = the head ids of this draft: a shipped "
                    "draft's name or a draft file of either kind (f3 carries v3's ids; '' = full head)")
flags.DEFINE_float("feature_loss", 0.1, "train: weight of the hidden-state regression")
flags.DEFINE_float("second_pass", 0.5, "train: weight of the own-feature pass")
flags.DEFINE_float("third_pass", 0.0, "train: weight of a third pass, on the own features of the "
                   "second (the third draft of a step: EAGLE-3's training-time test, one step deeper; "
                   "off for f1-f3)")
flags.DEFINE_list("chunk_globs", [], "eval: also measure alpha (teacher-forced, each chunk at its own "
                  "temperature) on these sample chunks of --workdir, e.g. a trained-on round against an "
                  "unseen one (the generalisation gap)")
flags.DEFINE_string("feature_init", "", "train: start from this feature draft file's weights (e.g. the "
                    "f3 asset, whose training state is not shipped) with a fresh optimiser, instead of "
                    "the target's last layer; its head ids must equal --head_ids_from's")
flags.DEFINE_float("weight_decay", 0.0, "train: AdamW decay of fc and the layer's matrices (not norms)")
flags.DEFINE_float("feature_noise", 0.0, "train: half-width of uniform noise added to the target's "
                   "features in the first pass (EAGLE's augmentation; the features' RMS is ~2)")

log = dd.log


def target_hidden(cfg, params, seq):
    """dtype[N, S, D] target final hidden states of full sequences int32[N, S]."""
    n, s = seq.shape
    cache = init_cache(cfg, n, s, dtype=params["embed"].dtype)
    positions = jnp.broadcast_to(jnp.arange(s, dtype=jnp.int32), (n, s))
    # One attention block over the whole sequence: no data-dependent loop, so it differentiates.
    h, _ = transformer.hidden_states(cfg, params, seq, positions, cache, jnp.full((n,), s, jnp.int32),
                                     attention_block=s)
    return h


def previous(features):
    """features shifted one position right (position 0 reads zeros): the draft's input."""
    return jnp.pad(features[:, :-1], ((0, 0), (1, 0), (0, 0)))


def draft_hidden(cfg, params, seq, prev_features):
    n, s = seq.shape
    cache = init_cache(cfg, n, s, dtype=params["embed"].dtype)
    positions = jnp.broadcast_to(jnp.arange(s, dtype=jnp.int32), (n, s))
    h, _ = feature_draft.hidden_states(cfg, params, seq, prev_features, positions, cache,
                                       jnp.full((n,), s, jnp.int32), attention_block=s)
    return h


def reduced_logits(params, h):
    if "head_rows" in params:
        return jnp.einsum("btd,kd->btk", h, params["head_rows"], preferred_element_type=jnp.float32)
    return jnp.einsum("btd,vd->btv", h, params["embed"], preferred_element_type=jnp.float32)


def draft_passes(cfg, params, seq, features, in_continuation, passes=2):
    """Draft hidden states [h1, ..., h_passes]: h1 with the target's features, and each later
    h_j with the draft's own h_{j-1} of the previous position inside the continuation (the
    j-th draft of a step, which runs before the target has seen the drafted tokens)."""
    hs = [draft_hidden(cfg, params, seq, previous(features))]
    for _ in range(passes - 1):
        own = jnp.where(in_continuation[..., None], previous(jax.lax.stop_gradient(hs[-1])),
                        previous(features))
        hs.append(draft_hidden(cfg, params, seq, own))
    return hs


def feature_loss(trainable, target_params, cfg, head_ids, batch, noise_key):
    seq, feats, pred_pos, vals, idx, valid, lens = batch
    params = feature_draft.runtime_params(target_params, trainable, head_ids)
    feats = feats.astype(jnp.float32)
    pos = jnp.arange(seq.shape[1])[None]
    in_cont = pos >= lens[:, None]
    noisy = feats
    if FLAGS.feature_noise:
        noisy = feats + FLAGS.feature_noise * jax.random.uniform(noise_key, feats.shape, minval=-1.0, maxval=1.0)
    hs = draft_passes(cfg, params, seq, noisy, in_cont, 3 if FLAGS.third_pass else 2)
    take = lambda h: jnp.take_along_axis(h, pred_pos[..., None], axis=1)  # noqa: E731
    terms = [dd.teacher_loss(reduced_logits(params, take(h)), vals, idx, valid, cfg.vocab_size, head_ids)
             for h in hs]
    mask = (pos < (lens[:, None] + pred_pos.shape[1])).astype(jnp.float32)
    reg = (optax.huber_loss(hs[0], feats).mean(-1) * mask).sum() / mask.sum()
    weights = (1.0, FLAGS.second_pass, FLAGS.third_pass)
    loss = sum(w * t[0] for w, t in zip(weights, terms)) + FLAGS.feature_loss * reg
    return loss, {"alpha07": terms[0][1]["alpha07"], "alpha07_own": terms[1][1]["alpha07"], "reg": reg}


def feature_path(chunk_path):
    return os.path.join(FLAGS.workdir, "feat", os.path.basename(chunk_path).replace(".npz", ".npy"))


def stage_features():
    target = builtin.load_target()
    fn = jax.jit(lambda p, s: target_hidden(target.config, p, s).astype(jnp.float16))
    paths = sorted(glob.glob(os.path.join(FLAGS.workdir, dd.TRAIN_GLOB)))
    if not paths:
        raise SystemExit(f"no samples in {FLAGS.workdir}: run distill_draft.py --mode=sample first")
    os.makedirs(os.path.join(FLAGS.workdir, "feat"), exist_ok=True)
    for i, path in enumerate(paths):
        out = feature_path(path)
        if os.path.exists(out):
            continue
        t0 = time.time()
        seq, _ = dd.full_sequences(dd.load_chunks([path]))
        f = np.concatenate([np.asarray(fn(target.params, jnp.asarray(seq[r:r + 16])))
                            for r in range(0, len(seq), 16)])
        storage.atomic_write(out, lambda fh: np.save(fh, f))
        log(f"features {i + 1}/{len(paths)}: {os.path.basename(out)} ({time.time() - t0:.1f}s)")


def head_ids():
    """The reduced head's ids: those of the draft --head_ids_from, a shipped draft's name or a draft file
    of either kind (None: the full head)."""
    if not FLAGS.head_ids_from:
        return None
    path = FLAGS.head_ids_from
    if path in builtin.DRAFTS:
        path = builtin.draft_asset_path(path)
    if feature_draft.is_feature_draft_file(path):
        return np.asarray(feature_draft.load(path)[1], np.int32)
    _, adapters, _ = draft.load_adapters(path)
    return np.asarray(adapters["head_ids"], np.int32)


def stage_train():
    target = builtin.load_target()
    cfg = feature_draft.feature_config(target.config)
    paths = [p for p in sorted(glob.glob(os.path.join(FLAGS.workdir, dd.TRAIN_GLOB)))
             if os.path.exists(feature_path(p))]
    if not paths:
        raise SystemExit("no chunk has features yet: run --stage=features first")
    data, keep = dd.load_train_chunks(paths)
    feats = np.concatenate([np.load(feature_path(p)) for p in paths])[keep]
    seq, pred_pos = dd.full_sequences(data)
    n = len(seq)
    log(f"{n} sequences with features from {len(paths)} chunks")
    ids = head_ids()
    ids_j = None if ids is None else jnp.asarray(ids)

    warmup = min(30, FLAGS.steps // 10)
    sched = optax.warmup_cosine_decay_schedule(0.0, FLAGS.lr, warmup, FLAGS.steps, FLAGS.lr * 0.05)
    trainable = feature_draft.init_trainable(target.params, target.config, jax.random.PRNGKey(FLAGS.seed))
    if FLAGS.feature_init:
        trainable, init_ids, _ = feature_draft.load(FLAGS.feature_init)
        if (init_ids is None) != (ids is None) or (ids is not None and not np.array_equal(init_ids, ids)):
            raise SystemExit(f"--feature_init={FLAGS.feature_init} has other head ids than "
                             f"--head_ids_from={FLAGS.head_ids_from!r}")
        log(f"weights from {FLAGS.feature_init}")
    decay_mask = {"fc": True, "final_norm": False,
                  "layers": {k: "norm" not in k for k in trainable["layers"]}}
    opt = optax.chain(optax.clip_by_global_norm(1.0),
                      optax.adamw(sched, weight_decay=FLAGS.weight_decay, mask=decay_mask))
    opt_state = opt.init(trainable)
    ckpt_path = os.path.join(FLAGS.workdir, "feature_train_state.npz")
    start = 0
    if os.path.exists(ckpt_path):
        with np.load(ckpt_path) as z:
            leaves, treedef = jax.tree_util.tree_flatten((trainable, opt_state))
            trainable, opt_state = jax.tree_util.tree_unflatten(
                treedef, [jnp.asarray(z[f"l{i}"], l.dtype) for i, l in enumerate(leaves)])
            start = int(z["step"])
        log(f"resumed from step {start}")

    @jax.jit
    def train_step(trainable, opt_state, batch, noise_key):
        (loss, aux), grads = jax.value_and_grad(feature_loss, has_aux=True)(
            trainable, target.params, cfg, ids_j, batch, noise_key)
        updates, opt_state = opt.update(grads, opt_state, trainable)
        return optax.apply_updates(trainable, updates), opt_state, loss, aux

    rng = np.random.default_rng(FLAGS.seed + start)
    t0, hist = time.time(), []
    for step in range(start, FLAGS.steps):
        rows = np.sort(rng.choice(n, FLAGS.batch, replace=False))
        batch = tuple(map(jnp.asarray, (seq[rows], feats[rows], pred_pos[rows], data["vals"][rows],
                                        data["idx"][rows], data["valid"][rows], data["lens"][rows])))
        noise_key = jax.random.fold_in(jax.random.PRNGKey(FLAGS.seed), step)
        trainable, opt_state, loss, aux = train_step(trainable, opt_state, batch, noise_key)
        hist.append([float(loss), float(aux["alpha07"]), float(aux["alpha07_own"]), float(aux["reg"])])
        if (step + 1) % 10 == 0:
            h = np.mean(hist[-10:], axis=0)
            log(f"step {step + 1}/{FLAGS.steps} loss {h[0]:.4f} train-alpha T=0.7 {h[1]:.3f} "
                f"(own features {h[2]:.3f}) reg {h[3]:.4f} ({(time.time() - t0) / len(hist):.2f}s/step)")
        if (step + 1) % FLAGS.save_every == 0 or step + 1 == FLAGS.steps:
            leaves = jax.tree_util.tree_leaves((trainable, opt_state))
            storage.atomic_savez(ckpt_path, step=np.int64(step + 1),
                                 **{f"l{i}": np.asarray(l) for i, l in enumerate(leaves)})
    feature_draft.save(FLAGS.feature_out, trainable, ids,
                       meta={"target": builtin.TARGET_NAME, "steps": int(FLAGS.steps),
                             "gguf": builtin.GGUF_FILE, "head_from": FLAGS.head_ids_from or None})
    log(f"wrote {FLAGS.feature_out} ({os.path.getsize(FLAGS.feature_out) / 1e6:.2f} MB)")


def feature_acceptance(target, fdraft, data, temperature, batch=16):
    """Per valid position: [alpha of the first, second and third draft of a step (target features,
    own features, own features of own features), target mass on the draft's support,
    :func:`tokens_per_step_k3`] at temperature T, teacher-forced on target samples."""
    seq, pred_pos = dd.full_sequences(data)

    @jax.jit
    def rows(tp, dp, seq, pred_pos, lens):
        h = target_hidden(target.config, tp, seq)
        take = lambda x: jnp.take_along_axis(x, pred_pos[..., None], axis=1)  # noqa: E731
        p = jax.nn.softmax(transformer.lm_logits(target.config, tp, take(h)) / temperature)
        in_cont = jnp.arange(seq.shape[1])[None] >= lens[:, None]
        out = []
        for hd in draft_passes(fdraft.config, dp, seq, h.astype(jnp.float32), in_cont, passes=3):
            lq = feature_draft.head_logits(fdraft.config, dp, take(hd)) / temperature
            out.append(jnp.minimum(p, jax.nn.softmax(lq)).sum(-1))
        # the target's mass on the tokens the draft can propose (the same support in every pass)
        out.append(jnp.where(jnp.isfinite(lq), p, 0.0).sum(-1))
        return jnp.stack(out, -1)

    out = []
    for i in range(0, len(seq), batch):
        s, pp, ln = seq[i:i + batch], pred_pos[i:i + batch], data["lens"][i:i + batch]
        pad = batch - len(s)
        if pad:
            s, pp, ln = (np.concatenate([x, np.repeat(x[-1:], pad, 0)]) for x in (s, pp, ln))
        out.append(np.asarray(rows(target.params, fdraft.params, s, pp, ln))[:batch - pad])
    out = np.concatenate(out)
    return np.concatenate([out, tokens_per_step_k3(out, data["valid"])[..., None]], -1)[data["valid"]]


def tokens_per_step_k3(alphas, valid):
    """float[N, new]: 1 + a1(t) + a1(t) a2(t+1) + a1(t) a2(t+1) a3(t+2) for a step whose first draft
    stands at t, with a_j(s) the j-th draft's alpha at position s (0 past the text's end).

    A model of the loop's tokens per step at K = 3 that treats the drafts' acceptances as
    independent given the (teacher-forced) text; an estimate, not the loop's AATPS."""
    a = np.where(valid[..., None], alphas[..., :3], 0.0)
    nxt = lambda x: np.pad(x[:, 1:], ((0, 0), (0, 1)))  # noqa: E731
    c2 = a[..., 0] * nxt(a[..., 1])
    c3 = a[..., 0] * nxt(a[..., 1] * nxt(a[..., 2]))
    return 1.0 + a[..., 0] + c2 + c3


def chunk_temperature(path) -> float:
    with np.load(path) as z:
        return float(z["temperature"])


def stage_eval():
    target = builtin.load_target()
    path = FLAGS.feature_draft or FLAGS.feature_out
    trainable, ids, _ = feature_draft.load(path)
    fdraft = feature_draft.make_feature_draft(target, trainable, ids)
    prompts = dd.prompt_ids("eval", FLAGS.prompt_len)
    rng = np.random.default_rng(FLAGS.seed)
    prompts = [prompts[i] for i in rng.permutation(len(prompts))[:FLAGS.eval_prompts]]
    lm = target.language_model()
    report = {"draft": os.path.basename(path), "eval_prompts": len(prompts), "temperatures": {}}
    for t in map(float, FLAGS.temperatures):
        chunk = dd.load_chunks(dd.sample_chunks(lm, target.params, prompts, t, 12345, "eval",
                                                os.path.join(FLAGS.workdir, "eval")))
        scores = feature_acceptance(target, fdraft, chunk, t)
        is_chat = np.broadcast_to((chunk["prompts"][:, 0] == target.config.bos_token_id)[:, None],
                                  chunk["valid"].shape)[chunk["valid"]]
        entry = {"positions": int(len(scores)), "target_mass_on_draft_support": float(scores[:, 3].mean())}
        for j, key in zip((0, 1, 2, 4), ("alpha", "alpha_own_features", "alpha_third_draft",
                                         "tokens_per_step_k3_estimate")):
            a = scores[:, j]
            entry[key] = float(a.mean())
            entry[key + "_se"] = float(a.std() / np.sqrt(len(a)))
            entry[key + "_by_prompt_kind"] = {kind: float(a[m].mean()) for kind, m in
                                             (("chat", is_chat), ("text", ~is_chat)) if m.any()}
        report["temperatures"][str(t)] = entry
        log(f"T={t}: {json.dumps(entry)}")
    for pattern in FLAGS.chunk_globs:
        paths = sorted(glob.glob(os.path.join(FLAGS.workdir, pattern)))
        if not paths:
            raise SystemExit(f"--chunk_globs: nothing matches {pattern!r} in {FLAGS.workdir}")
        scores = np.concatenate([feature_acceptance(target, fdraft, dd.load_chunks([p]), chunk_temperature(p))
                                 for p in paths])
        entry = {"chunks": len(paths), "positions": int(len(scores)),
                 "alpha": float(scores[:, 0].mean()), "alpha_se": float(scores[:, 0].std() / np.sqrt(len(scores))),
                 "alpha_own_features": float(scores[:, 1].mean()),
                 "alpha_third_draft": float(scores[:, 2].mean()), "tokens_per_step_k3_estimate": float(scores[:, 4].mean())}
        report.setdefault("chunks", {})[pattern] = entry
        log(f"{pattern}: {json.dumps(entry)}")
    for b in map(int, FLAGS.timing_batches):
        tt = dd.decode_time(lm, target.params, b)
        features = jnp.zeros((b, 1, target.config.hidden_size), fdraft.dtype)
        td = dd.decode_time(fdraft.language_model(), fdraft.params, b, extra=(features,))
        report.setdefault("decode_time", {})[f"batch{b}"] = {"target_ms": tt * 1e3, "draft_ms": td * 1e3,
                                                             "ratio": td / tt}
        log(f"decode batch {b}: target {tt * 1e3:.2f} ms, draft {td * 1e3:.2f} ms, ratio {td / tt:.3f}")
    dd.write_report(report)


def main(argv):
    del argv
    os.makedirs(os.path.join(FLAGS.workdir, "eval"), exist_ok=True)
    {"features": stage_features, "train": stage_train, "eval": stage_eval}[FLAGS.stage]()


if __name__ == "__main__":
    app.run(main)
