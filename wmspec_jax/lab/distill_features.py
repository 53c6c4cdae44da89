"""Distils a feature-conditioned draft (:mod:`wmspec_jax.models.feature_draft`) for the built-in target:
what ``experiments/distill_feature_draft.py`` runs.

It trains on the adapter recipe's sample chunks (:mod:`wmspec_jax.lab.distill_data`) in the same work
folder, with the same settings (:class:`~wmspec_jax.lab.distill_data.DistillSettings`) plus its own
(:class:`FeatureSettings`). Stages:

* :func:`compute_features`: the target's final hidden states at every position of every train chunk
  that has none yet (``<workdir>/feat/*.npy``, float16; the draft's inputs);
* :func:`train`: fits the draft's ``fc``, layer and final norm so that its next-token distribution
  matches the teacher's top-k (:func:`wmspec_jax.lab.distill.teacher_loss`), in two passes per batch:
  with the target's features (the first draft of a step) and with the draft's own features of the
  previous position from the first pass (later drafts, which run before the target has seen the
  drafted tokens), plus a small regression of the draft's hidden state onto the target's; optionally a
  third pass on the own features of the second (EAGLE-3's training-time test, one step deeper) and
  uniform noise on the target's features (as EAGLE trains);
* :func:`evaluate`: held-out acceptance alpha = E[1 − TV(Q_T, P_T)] (the per-position acceptance rate
  of speculative sampling, Sec. 2) for the first, second and third draft of a step, a K = 3
  tokens-per-step estimate (:func:`tokens_per_step_k3`), by prompt kind, and the decode-time ratio.
"""

from __future__ import annotations

import dataclasses
import glob
import json
import os
import time
from typing import Callable, Mapping, Optional

import jax
import jax.numpy as jnp
import numpy as np
import optax

from wmspec_jax import storage
from wmspec_jax.lab import distill
from wmspec_jax.lab.distill_data import (DistillSettings, RecipeError, TRAIN_GLOB, chat_positions,
                                         chunk_temperature, eval_prompts, eval_samples, from_flag_values,
                                         full_sequences, in_batches, load_chunks, load_train_chunks)
from wmspec_jax.lab.harness import log as _log
from wmspec_jax.models import builtin, draft, feature_draft, transformer

CHECKPOINT = "feature_train_state.npz"


@dataclasses.dataclass(frozen=True)
class FeatureSettings:
    """The feature recipe's own settings (the flags of ``experiments/distill_feature_draft.py``).

    Attributes:
      feature_out: the draft file :func:`train` writes; ``feature_draft``: the file :func:`evaluate`
        scores ('' = ``feature_out``).
      head_ids_from: the reduced head is this draft's (a shipped draft's name or a file; '' = full head).
      feature_loss, second_pass, third_pass: weights of the hidden-state regression, the own-feature
        pass and the third pass (0: none).
      chunk_globs: sample chunks of the work folder :func:`evaluate` also scores.
      feature_init: start from this feature draft's weights with a fresh optimiser.
      weight_decay: AdamW decay of fc and the layer's matrices; ``feature_noise``: half-width of the
        uniform noise on the target's features in the first pass.
    """

    feature_out: str
    feature_draft: str
    head_ids_from: str
    feature_loss: float
    second_pass: float
    third_pass: float
    chunk_globs: tuple
    feature_init: str
    weight_decay: float
    feature_noise: float

    @classmethod
    def from_flags(cls, values: Mapping) -> "FeatureSettings":
        """The settings of a script's flag values by name."""
        return from_flag_values(cls, values, chunk_globs=tuple)


# ----------------------------------------------------------------------------- the draft's passes

def previous(features):
    """features shifted one position right (position 0 reads zeros): the draft's input."""
    return jnp.pad(features[:, :-1], ((0, 0), (1, 0), (0, 0)))


def draft_hidden(cfg, params, seq, prev_features):
    """The draft's hidden states dtype[N, S, D] of sequences int32[N, S] given each position's input
    features float32[N, S, D]."""
    return distill.sequence_hidden(cfg, params, seq, prev_features, hidden_states=feature_draft.hidden_states)


def reduced_logits(params, h):
    """Logits float32[N, T, K] over the draft's head (K = V for a full head) of hidden states [N, T, D]."""
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


def feature_loss(trainable, target_params, cfg, head_ids, batch, noise_key, fs: FeatureSettings):
    """The weighted :func:`wmspec_jax.lab.distill.teacher_loss` of each pass plus ``fs.feature_loss`` x the
    Huber regression of the first pass's hidden states onto the target's features. ``batch`` = (seq,
    features, pred_pos, vals, idx, valid, lens) of :func:`train`. Returns (loss, metrics)."""
    seq, feats, pred_pos, vals, idx, valid, lens = batch
    params = feature_draft.runtime_params(target_params, trainable, head_ids)
    feats = feats.astype(jnp.float32)
    pos = jnp.arange(seq.shape[1])[None]
    in_cont = pos >= lens[:, None]
    noisy = feats
    if fs.feature_noise:
        noisy = feats + fs.feature_noise * jax.random.uniform(noise_key, feats.shape, minval=-1.0, maxval=1.0)
    hs = draft_passes(cfg, params, seq, noisy, in_cont, 3 if fs.third_pass else 2)
    take = lambda h: jnp.take_along_axis(h, pred_pos[..., None], axis=1)  # noqa: E731
    terms = [distill.teacher_loss(reduced_logits(params, take(h)), vals, idx, valid, cfg.vocab_size, head_ids)
             for h in hs]
    mask = (pos < (lens[:, None] + pred_pos.shape[1])).astype(jnp.float32)
    reg = (optax.huber_loss(hs[0], feats).mean(-1) * mask).sum() / mask.sum()
    weights = (1.0, fs.second_pass, fs.third_pass)
    loss = sum(w * t[0] for w, t in zip(weights, terms)) + fs.feature_loss * reg
    return loss, {"alpha07": terms[0][1]["alpha07"], "alpha07_own": terms[1][1]["alpha07"], "reg": reg}


# ----------------------------------------------------------------------------- features and training

def feature_path(workdir: str, chunk_path: str) -> str:
    return os.path.join(workdir, "feat", os.path.basename(chunk_path).replace(".npz", ".npy"))


def compute_features(s: DistillSettings, log: Callable = _log) -> None:
    """``--stage=features``: the target's final hidden states (float16[N, S, D]) of every train chunk
    without them, to ``<workdir>/feat/<chunk>.npy``."""
    target = builtin.load_target()
    fn = jax.jit(lambda p, q: distill.sequence_hidden(target.config, p, q).astype(jnp.float16))
    paths = sorted(glob.glob(os.path.join(s.workdir, TRAIN_GLOB)))
    if not paths:
        raise RecipeError(f"no samples in {s.workdir}: run distill_draft.py --mode=sample first")
    os.makedirs(os.path.join(s.workdir, "feat"), exist_ok=True)
    for i, path in enumerate(paths):
        out = feature_path(s.workdir, path)
        if os.path.exists(out):
            continue
        t0 = time.time()
        seq, _ = full_sequences(load_chunks([path]))
        f = np.concatenate([np.asarray(fn(target.params, jnp.asarray(seq[r:r + 16])))
                            for r in range(0, len(seq), 16)])
        storage.atomic_write(out, lambda fh: np.save(fh, f))
        log(f"features {i + 1}/{len(paths)}: {os.path.basename(out)} ({time.time() - t0:.1f}s)")


def head_ids(head_ids_from: str) -> Optional[np.ndarray]:
    """The reduced head's ids int32[K]: those of the draft ``head_ids_from``, a shipped draft's name or a
    draft file of either kind (None: the full head)."""
    if not head_ids_from:
        return None
    path = head_ids_from
    if path in builtin.DRAFTS:
        path = builtin.draft_asset_path(path)
    if feature_draft.is_feature_draft_file(path):
        return np.asarray(feature_draft.load(path)[1], np.int32)
    _, adapters, _ = draft.load_adapters(path)
    return np.asarray(adapters["head_ids"], np.int32)


def initial_state(target, s: DistillSettings, fs: FeatureSettings, ids, log: Callable = _log):
    """(trainable, optimiser, optimiser state, step): the last checkpoint, else the target's last layer
    or ``fs.feature_init``'s weights (its head ids must be ``ids``) with a fresh optimiser."""
    trainable = feature_draft.init_trainable(target.params, target.config, jax.random.PRNGKey(s.seed))
    if fs.feature_init:
        trainable, init_ids, _ = feature_draft.load(fs.feature_init)
        if (init_ids is None) != (ids is None) or (ids is not None and not np.array_equal(init_ids, ids)):
            raise RecipeError(f"--feature_init={fs.feature_init} has other head ids than "
                              f"--head_ids_from={fs.head_ids_from!r}")
        log(f"weights from {fs.feature_init}")
    decay_mask = {"fc": True, "final_norm": False,
                  "layers": {k: "norm" not in k for k in trainable["layers"]}}
    opt = distill.optimizer(s.lr, s.steps, fs.weight_decay, decay_mask)
    (trainable, opt_state), start = distill.restore_checkpoint(os.path.join(s.workdir, CHECKPOINT),
                                                               (trainable, opt.init(trainable)))
    if start:
        log(f"resumed from step {start}")
    return trainable, opt, opt_state, start


def train(s: DistillSettings, fs: FeatureSettings, log: Callable = _log) -> None:
    """``--stage=train``: ``s.steps`` steps of ``s.batch`` sequences (:func:`feature_loss`) on every chunk
    that has features when it starts, resumable from the checkpoint every ``s.save_every`` steps;
    writes ``fs.feature_out``."""
    target = builtin.load_target()
    cfg = feature_draft.feature_config(target.config)
    paths = [p for p in sorted(glob.glob(os.path.join(s.workdir, TRAIN_GLOB)))
             if os.path.exists(feature_path(s.workdir, p))]
    if not paths:
        raise RecipeError("no chunk has features yet: run --stage=features first")
    chunks, keep = load_train_chunks(paths, s.prompt_len, log)
    feats = np.concatenate([np.load(feature_path(s.workdir, p)) for p in paths])[keep]
    seq, pred_pos = full_sequences(chunks)
    log(f"{len(seq)} sequences with features from {len(paths)} chunks")
    ids = head_ids(fs.head_ids_from)
    ids_j = None if ids is None else jnp.asarray(ids)
    trainable, opt, opt_state, start = initial_state(target, s, fs, ids, log)

    @jax.jit
    def train_step(state, batch_and_key):
        trainable, opt_state = state
        (loss, aux), grads = jax.value_and_grad(feature_loss, has_aux=True)(
            trainable, target.params, cfg, ids_j, *batch_and_key, fs)
        updates, opt_state = opt.update(grads, opt_state, trainable)
        return (optax.apply_updates(trainable, updates), opt_state), (loss, aux["alpha07"], aux["alpha07_own"],
                                                                      aux["reg"])

    rng = np.random.default_rng(s.seed + start)

    def batches(step):
        rows = np.sort(rng.choice(len(seq), s.batch, replace=False))
        arrays = (seq[rows], feats[rows], pred_pos[rows], chunks["vals"][rows], chunks["idx"][rows],
                  chunks["valid"][rows], chunks["lens"][rows])
        return tuple(map(jnp.asarray, arrays)), jax.random.fold_in(jax.random.PRNGKey(s.seed), step)

    trainable, _ = distill.run_steps(
        train_step, (trainable, opt_state), batches, start=start, steps=s.steps, save_every=s.save_every,
        save=lambda state, step: distill.save_checkpoint(os.path.join(s.workdir, CHECKPOINT), state, step),
        describe=lambda h: f"loss {h[0]:.4f} train-alpha T=0.7 {h[1]:.3f} (own features {h[2]:.3f}) reg {h[3]:.4f}",
        log=log)
    feature_draft.save(fs.feature_out, trainable, ids,
                       meta={"target": builtin.TARGET_NAME, "steps": int(s.steps),
                             "gguf": builtin.GGUF_FILE, "head_from": fs.head_ids_from or None})
    log(f"wrote {fs.feature_out} ({os.path.getsize(fs.feature_out) / 1e6:.2f} MB)")


# ----------------------------------------------------------------------------- evaluation

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


def feature_acceptance(target, fdraft, chunks: dict, temperature: float, batch: int = 16) -> np.ndarray:
    """Per valid position: [alpha of the first, second and third draft of a step (target features,
    own features, own features of own features), target mass on the draft's support,
    :func:`tokens_per_step_k3`] at temperature T, teacher-forced on target samples: float[positions, 5]."""
    seq, pred_pos = full_sequences(chunks)

    @jax.jit
    def rows(tp, dp, seq, pred_pos, lens):
        h = distill.sequence_hidden(target.config, tp, seq)
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

    out = in_batches(lambda s, pp, ln: rows(target.params, fdraft.params, s, pp, ln),
                     (seq, pred_pos, chunks["lens"]), batch)
    return np.concatenate([out, tokens_per_step_k3(out, chunks["valid"])[..., None]], -1)[chunks["valid"]]


def temperature_entry(scores: np.ndarray, is_chat: np.ndarray) -> dict:
    """A temperature's report of :func:`feature_acceptance` scores: each alpha and the K = 3 estimate
    with its standard error and its means by prompt kind, and the target mass on the draft's support."""
    entry = {"positions": int(len(scores)), "target_mass_on_draft_support": float(scores[:, 3].mean())}
    for j, key in zip((0, 1, 2, 4), ("alpha", "alpha_own_features", "alpha_third_draft",
                                     "tokens_per_step_k3_estimate")):
        a = scores[:, j]
        entry[key] = float(a.mean())
        entry[key + "_se"] = float(a.std() / np.sqrt(len(a)))
        entry[key + "_by_prompt_kind"] = {kind: float(a[m].mean()) for kind, m in
                                         (("chat", is_chat), ("text", ~is_chat)) if m.any()}
    return entry


def chunks_entry(target, fdraft, s: DistillSettings, pattern: str) -> dict:
    """Alpha on the sample chunks ``pattern`` of the work folder, each at its own temperature (a
    trained-on round against an unseen one: the generalisation gap)."""
    paths = sorted(glob.glob(os.path.join(s.workdir, pattern)))
    if not paths:
        raise RecipeError(f"--chunk_globs: nothing matches {pattern!r} in {s.workdir}")
    scores = np.concatenate([feature_acceptance(target, fdraft, load_chunks([p]), chunk_temperature(p))
                             for p in paths])
    return {"chunks": len(paths), "positions": int(len(scores)),
            "alpha": float(scores[:, 0].mean()), "alpha_se": float(scores[:, 0].std() / np.sqrt(len(scores))),
            "alpha_own_features": float(scores[:, 1].mean()),
            "alpha_third_draft": float(scores[:, 2].mean()), "tokens_per_step_k3_estimate": float(scores[:, 4].mean())}


def evaluate(s: DistillSettings, fs: FeatureSettings, log: Callable = _log) -> dict:
    """``--stage=eval``: :func:`temperature_entry` at each temperature on the held-out eval prompts (the
    adapter recipe's eval samples), :func:`chunks_entry` of each ``fs.chunk_globs`` and the draft /
    target decode-time ratio at each of ``s.timing_batches``. Writes and returns the report."""
    target = builtin.load_target()
    path = fs.feature_draft or fs.feature_out
    trainable, ids, _ = feature_draft.load(path)
    fdraft = feature_draft.make_feature_draft(target, trainable, ids)
    prompts = eval_prompts(s)
    report = {"draft": os.path.basename(path), "eval_prompts": len(prompts), "temperatures": {}}
    for t in s.temperatures:
        chunk = eval_samples(target, prompts, t, s, log)
        entry = temperature_entry(feature_acceptance(target, fdraft, chunk, t),
                                  chat_positions(chunk, target.config.bos_token_id))
        report["temperatures"][str(t)] = entry
        log(f"T={t}: {json.dumps(entry)}")
    for pattern in fs.chunk_globs:
        entry = report.setdefault("chunks", {})[pattern] = chunks_entry(target, fdraft, s, pattern)
        log(f"{pattern}: {json.dumps(entry)}")
    lm = target.language_model()
    for b in s.timing_batches:
        tt = distill.decode_time(lm, target.params, b)
        features = jnp.zeros((b, 1, target.config.hidden_size), fdraft.dtype)
        td = distill.decode_time(fdraft.language_model(), fdraft.params, b, extra=(features,))
        entry, text = distill.timing_entry(tt, td)
        report.setdefault("decode_time", {})[f"batch{b}"] = entry
        log(f"decode batch {b}: {text}")
    distill.write_report(report, s.eval_json)
    return report


__all__ = ["CHECKPOINT", "FeatureSettings", "chunks_entry", "compute_features", "draft_hidden", "draft_passes",
           "evaluate", "feature_acceptance", "feature_loss", "feature_path", "head_ids", "initial_state", "previous",
           "reduced_logits", "temperature_entry", "tokens_per_step_k3", "train"]
