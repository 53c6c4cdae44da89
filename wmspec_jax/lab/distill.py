"""Distils the adapter draft (kept target layers + LoRA, :mod:`wmspec_jax.models.draft`) from the
built-in target, SmolLM2-135M-Instruct: what ``experiments/distill_draft.py`` runs.

The draft keeps a subset of the target's layers and adds rank-r LoRA and norm adapters, with an optional
reduced output head; :func:`train` fits those adapters so that the draft's next-token distribution
matches the target's on the target's own samples (:mod:`wmspec_jax.lab.distill_data`): forward KL +
total variation at T = 1 and T = 0.7 (:func:`teacher_loss`). The acceptance rate of speculative
sampling is 1 − TV(Q, P) per position (Sec. 2, Def. 2.1; Thm. 4.1(b) for Alg. 1), so :func:`evaluate`
reports alpha = E[1 − TV(Q_T, P_T)] on held-out prompts and the implied tokens per step
(1 − alpha^(K+1)) / (1 − alpha) (AATPS, Tables 1-2).

The KL term is the forward KL of the teacher's top-k tokens plus the lumped remainder, not of the full
49152-token distributions (which would mean storing or recomputing the target's logits at every
training step: ~100x the data, or the target's forward pass in every step).

The training pieces the feature recipe (:mod:`wmspec_jax.lab.distill_features`) shares live here too:
:func:`teacher_loss`, :func:`optimizer`, the checkpoints, :func:`run_steps`, :func:`decode_time`.
"""

from __future__ import annotations

import glob
import os
import time
from typing import Callable, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax

from wmspec_jax import storage
from wmspec_jax.lab.distill_data import (DistillSettings, RecipeError, TRAIN_GLOB, chat_positions, eval_prompts,
                                         eval_samples, full_sequences, in_batches, load_train_chunks)
from wmspec_jax.lab.harness import log as _log
from wmspec_jax.models import builtin, draft, transformer
from wmspec_jax.models.cache import init_cache

CHECKPOINT = "train_state.npz"


# ----------------------------------------------------------------------------- losses

def sequence_hidden(cfg, params, seq, *inputs, hidden_states=transformer.hidden_states):
    """Final hidden states dtype[N, S, D] of whole sequences int32[N, S] (teacher forcing):
    ``hidden_states(cfg, params, seq, *inputs, positions, cache, lengths)`` from an empty cache."""
    n, s = seq.shape
    cache = init_cache(cfg, n, s, dtype=params["embed"].dtype)
    positions = jnp.broadcast_to(jnp.arange(s, dtype=jnp.int32), (n, s))
    # One attention block over the whole sequence: no data-dependent loop, so it differentiates.
    h, _ = hidden_states(cfg, params, seq, *inputs, positions, cache, jnp.full((n,), s, jnp.int32),
                         attention_block=s)
    return h


def draft_logits(cfg, params, seq, pred_pos, reduced: bool = False):
    """Teacher-forced logits float32[N, new, V] of sequences int32[N, S] at the positions int32[N, new].

    A draft with a reduced head (``params["head_ids"]``) gives its full-width logits (−inf off the
    kept ids), or with ``reduced`` only the kept ones float32[N, new, K].
    """
    h = jnp.take_along_axis(sequence_hidden(cfg, params, seq), pred_pos[..., None], axis=1)
    if "head_ids" in params:
        if reduced:
            return jnp.einsum("btd,kd->btk", h, params["head_rows"],
                              preferred_element_type=jnp.float32)
        return draft.reduced_head(cfg, params, h)
    return transformer.lm_logits(cfg, params, h)


def teacher_loss(z, vals, idx, valid, vocab_size: int, head_ids=None):
    """Forward KL + TV(T=1) + TV(T=0.7) of draft logits against the teacher's top-k.

    ``z`` float32[N, T, K]: the draft's logits over its head (``head_ids``
    int32[K], or the full vocabulary when None); ``vals`` / ``idx`` [N, T, k]:
    the teacher's top-k log-probabilities and ids; ``valid`` bool[N, T].
    With a reduced head the draft's distribution lives on the kept ids: teacher
    entries outside them join the lumped remainder (so the losses stay finite
    and measure what the draft can match). Returns (loss, {fkl, alpha1, alpha07}).
    """
    if head_ids is not None:
        slot = jnp.full((vocab_size,), -1, jnp.int32).at[head_ids].set(
            jnp.arange(head_ids.shape[0], dtype=jnp.int32))[idx]
        kept = slot >= 0
        slot = jnp.maximum(slot, 0)
    else:
        kept, slot = jnp.ones(idx.shape, bool), idx
    lq = jax.nn.log_softmax(z)
    lq_k = jnp.where(kept, jnp.take_along_axis(lq, slot, axis=-1), 0.0)
    lp_k = vals.astype(jnp.float32)
    p_k = jnp.where(kept, jnp.exp(lp_k), 0.0)
    q_k = jnp.where(kept, jnp.exp(lq_k), 0.0)
    lp_k = jnp.where(kept, lp_k, 0.0)
    rest_p = jnp.clip(1 - p_k.sum(-1), 1e-6, 1.0)
    rest_q = jnp.clip(1 - q_k.sum(-1), 1e-6, 1.0)
    # Forward KL on the teacher's top-k plus the lumped remainder.
    fkl = (p_k * (lp_k - lq_k)).sum(-1) + rest_p * (jnp.log(rest_p) - jnp.log(rest_q))
    tv1 = 0.5 * (jnp.abs(p_k - q_k).sum(-1) + jnp.abs(rest_p - rest_q))
    # TV at T = 0.7 over the teacher's top-k (the remainder is negligible there).
    t = 0.7
    p07 = jax.nn.softmax(vals.astype(jnp.float32) / t, axis=-1)
    p07 = jnp.where(kept, p07, 0.0)
    lq07 = jax.nn.log_softmax(z / t)
    q07 = jnp.where(kept, jnp.exp(jnp.take_along_axis(lq07, slot, axis=-1)), 0.0)
    tv07 = 0.5 * (jnp.abs(p07 - q07).sum(-1) + jnp.abs(1 - p07.sum(-1) - (1 - q07.sum(-1))))
    w = valid.astype(jnp.float32)
    denom = jnp.maximum(w.sum(), 1.0)
    loss = ((fkl + tv1 + tv07) * w).sum() / denom
    return loss, {"fkl": (fkl * w).sum() / denom, "alpha1": 1 - (tv1 * w).sum() / denom,
                  "alpha07": 1 - (tv07 * w).sum() / denom}


def distill_loss(adapters, target_params, layers, cfg, batch, head_ids=None):
    """:func:`teacher_loss` of the LoRA draft on ``batch`` = (seq, pred_pos, vals, idx, valid)."""
    seq, pred_pos, vals, idx, valid = batch
    if head_ids is not None:
        adapters = {**adapters, "head_ids": head_ids}
    params = draft.draft_params(target_params, layers, adapters)
    z = draft_logits(cfg, params, seq, pred_pos, reduced=True)
    return teacher_loss(z, vals, idx, valid, cfg.vocab_size, head_ids)


# ----------------------------------------------------------------------------- training, shared

def optimizer(lr: float, steps: int, weight_decay: float = 0.0, mask=None):
    """Clipped AdamW (global norm 1) with a warm-up to ``lr`` then cosine decay to 5 % over ``steps``. A
    run resumed with more ``steps`` rebuilds the schedule for its own ``steps``: a warm restart."""
    warmup = min(30, steps // 10)
    sched = optax.warmup_cosine_decay_schedule(0.0, lr, warmup, steps, lr * 0.05)
    return optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(sched, weight_decay=weight_decay, mask=mask))


def save_checkpoint(path: str, state, step: int) -> None:
    """Writes a training state (any pytree of arrays) and its step, atomically."""
    leaves = jax.tree_util.tree_leaves(state)
    storage.atomic_savez(path, step=np.int64(step), **{f"l{i}": np.asarray(l) for i, l in enumerate(leaves)})


def restore_checkpoint(path: str, state) -> tuple:
    """(state read from ``path`` in the structure and dtypes of ``state``, its step); (state, 0) without one."""
    if not os.path.exists(path):
        return state, 0
    with np.load(path, allow_pickle=False) as z:
        leaves, treedef = jax.tree_util.tree_flatten(state)
        leaves = [jnp.asarray(z[f"l{i}"], l.dtype) for i, l in enumerate(leaves)]
        return jax.tree_util.tree_unflatten(treedef, leaves), int(z["step"])


def run_steps(train_step: Callable, state, batches: Callable, *, start: int, steps: int, save_every: int,
              save: Callable, describe: Callable, log: Callable = _log):
    """Steps ``start`` .. ``steps - 1`` of ``state, metrics = train_step(state, batches(step))``; logs
    ``describe(mean of the last 10 metrics)`` every 10 steps and calls ``save(state, step)`` every
    ``save_every`` steps and at the end. Returns the final state."""
    t0, hist = time.time(), []
    for step in range(start, steps):
        state, metrics = train_step(state, batches(step))
        hist.append([float(m) for m in metrics])
        if (step + 1) % 10 == 0:
            h = np.mean(hist[-10:], axis=0)
            log(f"step {step + 1}/{steps} {describe(h)} ({(time.time() - t0) / len(hist):.2f}s/step)")
        if (step + 1) % save_every == 0 or step + 1 == steps:
            save(state, step + 1)
    return state


# ----------------------------------------------------------------------------- the adapter draft

def frequency_head_ids(paths: Sequence[str], size: int, vocab_size: int, always=(), rank: str = "mass"
                       ) -> np.ndarray:
    """The ``size`` most frequent tokens of the target's samples, plus ``always``;
    sorted int32[size].

    ``rank="count"``: occurrences among the sampled tokens; ``"mass"``: the
    expected count, i.e. the target's T = 1 probability summed over the sampled
    positions (its stored top-k): a far less noisy estimate of the same
    frequency, which sees ~64 tokens per position instead of 1 (held-out target
    mass inside a 16384-token head: 0.972 vs 0.961 from counts, docs/models.md).
    Ties go to the lower id (earlier BPE merge).
    """
    counts = np.zeros(vocab_size, np.float64)
    for path in paths:
        with np.load(path) as z:
            valid = z["valid"]
            if rank == "count":
                np.add.at(counts, z["cont"][valid], 1.0)
            elif rank == "mass":
                np.add.at(counts, z["idx"][valid].ravel(),
                          np.exp(z["vals"][valid].astype(np.float64)).ravel())
            else:
                raise ValueError(f"rank must be 'count' or 'mass', got {rank!r}")
    counts[list(always)] = counts.max() + 1
    order = np.lexsort((np.arange(vocab_size), -counts))  # by count desc, then id asc
    return np.sort(order[:size]).astype(np.int32)


def special_ids(target) -> list[int]:
    """Ids the reduced head always keeps: EOS and the tokenizer's special tokens."""
    ids = {int(target.config.eos_token_id), *map(int, target.stop_token_ids)}
    ids |= set(map(int, target.tokenizer.all_special_ids))
    return sorted(i for i in ids if 0 <= i < target.config.vocab_size)


def ranked_head_ids(target, s: DistillSettings, size: int, paths: Sequence[str]) -> np.ndarray:
    """int32[size] head ids ranked by ``head_rank`` on the sample files ``paths`` (:func:`head_sources`)."""
    return frequency_head_ids(paths, size, target.config.vocab_size, always=special_ids(target), rank=s.head_rank)


def head_sources(s: DistillSettings) -> list[str]:
    """The sample files ``head_from`` (a glob under the work folder) that rank a reduced head's ids."""
    return sorted(glob.glob(os.path.join(s.workdir, s.head_from)))


def head_ids_for_training(target, s: DistillSettings, log: Callable = _log) -> Optional[np.ndarray]:
    """The reduced head's ids (None: full head), fixed at the first training run
    (saved in the workdir, so a resumed run keeps them whatever was sampled since)."""
    if not s.head_size:
        return None
    # the file name says where the ids came from, so a run with other head flags never reuses them
    source = "init" if s.keep_init_head else s.head_rank
    path = os.path.join(s.workdir, f"head_ids_{source}_{s.head_size}.npy")
    if not os.path.exists(path):
        if s.keep_init_head:
            if not s.init:
                raise RecipeError("--keep_init_head needs --init (the adapters whose head to keep)")
            _, init, _ = draft.load_adapters(s.init)
            if "head_ids" not in init or init["head_ids"].shape[0] != s.head_size:
                raise RecipeError(f"--keep_init_head: --init={s.init} has no reduced head of "
                                  f"--head_size={s.head_size} ids")
            ids = np.asarray(init["head_ids"], np.int32)
            log(f"head ids of {s.init}")
        else:
            paths = head_sources(s)
            ids = ranked_head_ids(target, s, s.head_size, paths)
            log(f"head ids ranked on {len(paths)} sample files")
        storage.atomic_write(path, lambda f: np.save(f, ids))
    return np.load(path)


def restore_state(target, s: DistillSettings):
    """(adapters, optimiser, optimiser state, step) from the last checkpoint, or fresh: zero LoRA or
    the ``init`` adapters (same layers and rank)."""
    opt = optimizer(s.lr, s.steps)
    adapters = draft.init_adapters(target.params, list(s.layers), s.rank, jax.random.PRNGKey(s.seed))
    if s.init:
        init_layers, init, _ = draft.load_adapters(s.init)
        init.pop("head_ids", None)
        if init_layers != list(s.layers) or jax.tree_util.tree_structure(init) != \
                jax.tree_util.tree_structure(adapters) or any(
                    a.shape != b.shape for a, b in zip(jax.tree_util.tree_leaves(init),
                                                       jax.tree_util.tree_leaves(adapters))):
            raise RecipeError(f"--init={s.init} has other layers or rank than --layers/--rank")
        adapters = init
    (adapters, opt_state), step = restore_checkpoint(os.path.join(s.workdir, CHECKPOINT),
                                                     (adapters, opt.init(adapters)))
    return adapters, opt, opt_state, step


def write_asset(s: DistillSettings, adapters, step: int, head_ids=None, log: Callable = _log) -> None:
    """Writes the adapters (with the reduced head's ids) to ``out``: ``--draft=builtin:PATH`` loads them."""
    if head_ids is not None:
        adapters = {**adapters, "head_ids": head_ids}
    draft.save_adapters(s.out, list(s.layers), adapters,
                        meta={"target": builtin.TARGET_NAME, "rank": s.rank,
                              "steps": int(step), "gguf": builtin.GGUF_FILE,
                              "head_size": int(s.head_size or 0),
                              "init": os.path.basename(s.init) if s.init else None})
    log(f"wrote {s.out} ({os.path.getsize(s.out) / 1e6:.2f} MB)")


def export(s: DistillSettings, log: Callable = _log) -> None:
    """``--mode=export``: the adapters of the last training checkpoint to ``out`` (with a reduced head of
    ``head_size`` ids ranked on ``head_from``, which may differ from the head size it was trained with)."""
    target = builtin.load_target()
    adapters, _, _, step = restore_state(target, s)
    if not step:
        raise RecipeError(f"no training checkpoint in {s.workdir}")
    write_asset(s, adapters, step, head_ids_for_training(target, s, log), log)


class _Samples:
    """The training rows (:func:`full_sequences` of the train chunks), reloaded when more chunks appear."""

    def __init__(self, s: DistillSettings, log: Callable):
        self.s, self.log, self.paths = s, log, []
        if not self.reload():
            raise RecipeError(f"no samples in {s.workdir}: run --mode=sample first")

    def reload(self) -> bool:
        """Reads the chunks again if there are more than last time; whether it did."""
        paths = sorted(glob.glob(os.path.join(self.s.workdir, TRAIN_GLOB)))
        if len(paths) <= len(self.paths):
            return False
        self.paths = paths
        self.chunks, _ = load_train_chunks(paths, self.s.prompt_len, self.log)
        self.seq, self.pred_pos = full_sequences(self.chunks)
        return True

    def batch(self, rows) -> tuple:
        c = self.chunks
        return (jnp.asarray(self.seq[rows]), jnp.asarray(self.pred_pos[rows]), jnp.asarray(c["vals"][rows]),
                jnp.asarray(c["idx"][rows]), jnp.asarray(c["valid"][rows]))


def train(s: DistillSettings, log: Callable = _log) -> None:
    """``--mode=train``: ``steps`` optimiser steps of ``batch`` sequences (:func:`distill_loss`), resumable
    from the checkpoint every ``save_every`` steps, picking up sample chunks written since it started;
    writes the adapters to ``out``."""
    target = builtin.load_target()
    layers = list(s.layers)
    cfg = draft.draft_config(target.config, layers)
    samples = _Samples(s, log)
    log(f"{len(samples.seq)} sequences, {int(samples.chunks['valid'].sum())} target tokens from "
        f"{len(samples.paths)} chunks")
    head_ids = head_ids_for_training(target, s, log)
    if head_ids is not None:
        log(f"reduced head: {len(head_ids)} ids")
    head_ids_j = None if head_ids is None else jnp.asarray(head_ids)
    adapters, opt, opt_state, start = restore_state(target, s)
    if start:
        log(f"resumed from step {start}")

    @jax.jit
    def train_step(state, batch):
        adapters, opt_state = state
        (loss, aux), grads = jax.value_and_grad(distill_loss, has_aux=True)(
            adapters, target.params, layers, cfg, batch, head_ids_j)
        updates, opt_state = opt.update(grads, opt_state, adapters)
        return (optax.apply_updates(adapters, updates), opt_state), (loss, aux["alpha1"], aux["alpha07"])

    rng = np.random.default_rng(s.seed + start)

    def batches(step):
        # chunks that a concurrent --mode=sample has written since
        if step % s.save_every == 0 and step > start and samples.reload():
            log(f"now {len(samples.seq)} sequences from {len(samples.paths)} chunks")
        return samples.batch(rng.choice(len(samples.seq), s.batch, replace=False))

    adapters, _ = run_steps(
        train_step, (adapters, opt_state), batches, start=start, steps=s.steps, save_every=s.save_every,
        save=lambda state, step: save_checkpoint(os.path.join(s.workdir, CHECKPOINT), state, step),
        describe=lambda h: f"loss {h[0]:.4f} train-alpha T=1 {h[1]:.3f} T=0.7 {h[2]:.3f}", log=log)
    write_asset(s, adapters, s.steps, head_ids, log)


# ----------------------------------------------------------------------------- evaluation

def decode_time(lm, params, batch: int, context: int = 128, repeats: int = 30, extra=()) -> float:
    """Median seconds of one jitted T=1 decode step at the given context length
    (``extra``: more arguments of ``lm.step``, e.g. a feature draft's features)."""
    step = jax.jit(lm.step)
    cache = lm.init_cache(batch, context + 8)
    cache = lm.rewind(cache, jnp.full((batch,), context, jnp.int32))
    args = (params, cache, jnp.ones((batch, 1), jnp.int32), jnp.ones((batch,), jnp.int32), *extra)
    jax.block_until_ready(step(*args))
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(step(*args))
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def timing_entry(target_seconds: float, draft_seconds: float) -> tuple[dict, str]:
    """(the report's decode-time entry, its log text) of one batch size."""
    return ({"target_ms": target_seconds * 1e3, "draft_ms": draft_seconds * 1e3,
             "ratio": draft_seconds / target_seconds},
            f"target {target_seconds * 1e3:.2f} ms, draft {draft_seconds * 1e3:.2f} ms, "
            f"ratio {draft_seconds / target_seconds:.3f}")


def write_report(report: dict, path: str) -> None:
    """Writes an eval report to ``path`` as JSON (nothing when it is empty)."""
    if path:
        storage.atomic_write_json(path, report)


def acceptance(target, drafts, chunks: dict, temperature: float, batch: int = 16) -> np.ndarray:
    """Per valid position and draft: sum_v min(P_T, Q_T) and the target's mass on the
    draft's support, P/Q teacher-forced on target samples: float32[positions, drafts, 2]."""
    seq, pred_pos = full_sequences(chunks)
    config = drafts[0].config

    @jax.jit
    def alpha_rows(tp, dps, seq, pred_pos):
        p = jax.nn.softmax(draft_logits(target.config, tp, seq, pred_pos) / temperature)
        out = []
        for dp in dps:
            lq = draft_logits(config, dp, seq, pred_pos) / temperature
            # target mass on the tokens the draft can propose (1 for a full head)
            mass = jnp.where(jnp.isfinite(lq), p, 0.0).sum(-1)
            out.append(jnp.stack([jnp.minimum(p, jax.nn.softmax(lq)).sum(-1), mass], -1))
        return jnp.stack(out, -2)

    params = tuple(d.params for d in drafts)
    return in_batches(lambda s, pp: alpha_rows(target.params, params, s, pp), (seq, pred_pos), batch)[chunks["valid"]]


def eval_drafts(target, s: DistillSettings) -> tuple[str, list, dict]:
    """(name, layers, name -> draft) of ``adapters`` (default ``out``; ``none``: the plain truncation),
    and of the same adapters with each head of ``eval_head_sizes`` (0: the full head)."""
    if s.adapters == "none":
        layers, adapters = list(s.layers), None
        name = f"truncated{layers}"
    else:
        path = s.adapters or s.out
        if path in builtin.DRAFTS:
            path = builtin.draft_asset_path(path)
        layers, adapters, _ = draft.load_adapters(path)
        name = os.path.basename(path)
    variants = {name: adapters}
    for size in s.eval_head_sizes:
        other = {k: v for k, v in (adapters or {}).items() if k != "head_ids"}
        if size:
            other["head_ids"] = jnp.asarray(ranked_head_ids(target, s, size, head_sources(s)))
        variants[f"{name}+head{size or 'full'}"] = other
    return name, layers, {k: draft.make_draft(target, layers, a) for k, a in variants.items()}


def alpha_entry(a: np.ndarray, mass: np.ndarray, is_chat: np.ndarray) -> dict:
    """A temperature's report of one draft from float[positions] alpha and target mass on its support:
    mean alpha and its standard error, implied AATPS for K = 1..4, alpha by prompt kind."""
    alpha = float(a.mean())
    implied = {f"K={k}": (1 - alpha ** (k + 1)) / (1 - alpha) for k in (1, 2, 3, 4)}
    by_kind = {kind: {"alpha": float(a[m].mean()), "alpha_se": float(a[m].std() / np.sqrt(m.sum())),
                      "positions": int(m.sum())}
               for kind, m in (("chat", is_chat), ("text", ~is_chat)) if m.any()}
    return {"alpha": alpha, "alpha_se": float(a.std() / np.sqrt(len(a))), "positions": int(a.size),
            "implied_aatps": implied, "target_mass_on_draft_support": float(mass.mean()), "by_prompt_kind": by_kind}


def evaluate(s: DistillSettings, log: Callable = _log) -> dict:
    """``--mode=eval``: alpha, target mass on the draft's support, implied AATPS and alpha by prompt kind
    at each temperature on ``eval_prompts`` held-out prompts, and the draft / target decode-time ratio at
    each of ``timing_batches``. Returns the report (one draft's, or ``{"drafts": [...]}``)."""
    target = builtin.load_target()
    name, layers, drafts = eval_drafts(target, s)
    prompts = eval_prompts(s)
    reports = {k: {"draft": k, "layers": layers, "eval_prompts": len(prompts),
                   "new_tokens": s.new_tokens, "temperatures": {}} for k in drafts}
    for t in s.temperatures:
        chunk = eval_samples(target, prompts, t, s, log)
        scores = acceptance(target, list(drafts.values()), chunk, t)
        is_chat = chat_positions(chunk, target.config.bos_token_id)
        for (k, report), (a, mass) in zip(reports.items(), scores.transpose(1, 2, 0)):
            e = report["temperatures"][str(t)] = alpha_entry(a, mass, is_chat)
            log(f"{k} T={t}: alpha={e['alpha']:.4f} ± {e['alpha_se']:.4f} over {a.size} positions "
                f"(target mass on the draft's support {mass.mean():.4f}); implied AATPS "
                + ", ".join(f"{k}: {v:.3f}" for k, v in e["implied_aatps"].items()) + "; by prompt kind "
                + ", ".join(f"{kind} {v['alpha']:.4f} ± {v['alpha_se']:.4f} ({v['positions']})"
                            for kind, v in e["by_prompt_kind"].items()))
    lm = target.language_model()
    for b in s.timing_batches:
        tt = decode_time(lm, target.params, b)
        for k, d in drafts.items():
            entry, text = timing_entry(tt, decode_time(d.language_model(), d.params, b))
            reports[k].setdefault("decode_time", {})[f"batch{b}"] = entry
            log(f"{k} decode batch {b}: {text}")
    report = reports[name] if len(reports) == 1 else {"drafts": list(reports.values())}
    write_report(report, s.eval_json)
    return report


__all__ = ["CHECKPOINT", "acceptance", "alpha_entry", "decode_time", "distill_loss", "draft_logits", "eval_drafts",
           "evaluate", "export", "frequency_head_ids", "head_ids_for_training", "head_sources", "optimizer",
           "ranked_head_ids", "restore_checkpoint", "restore_state", "run_steps", "save_checkpoint",
           "sequence_hidden", "special_ids", "teacher_loss", "timing_entry", "train", "write_asset", "write_report"]
