r"""Distils the adapter draft (kept target layers + LoRA) from SmolLM2-135M-Instruct.

The draft of :mod:`wmspec_jax.models.draft` keeps a subset of the target's
layers (``--layers``) and adds rank-``--rank`` LoRA and norm adapters, with an
optional reduced output head (``--head_size``); this script trains those
adapters by self-distillation from the target. Stages (``--mode``), each
resumable and writing atomically under ``--workdir``:

* ``sample``: target continuations (``--new_tokens`` each, at every
  ``--temperatures``) of the built-in *train* prompts, with the target's
  top-k (``--top_k``) next-token log-probabilities at every generated
  position, saved per chunk of ``--sample_batch`` rows; ``--repeats`` passes
  with new seeds. ``--prompt_source=self_chat`` continues chat questions the
  target writes itself instead (``--self_chat_tries``, ``--question_tokens``,
  ``--self_chat_examples``; chunks named ``train-selfchat_*``).
* ``train``: fits the adapters so that the draft's next-token distribution
  matches the target's on those contexts (forward KL + total variation at
  T = 1 and T = 0.7); ``--steps`` steps of ``--batch`` sequences, cosine
  schedule peaking at ``--lr``; starts from ``--init`` adapters or zero LoRA;
  a reduced head keeps the ``--head_size`` tokens ranked by ``--head_rank`` on
  the chunks ``--head_from`` (or the head of ``--init`` with
  ``--keep_init_head``). Checkpoints every ``--save_every`` steps and resumes
  from the last one, picking up the sample chunks written since it started
  (a run resumed with a larger ``--steps`` rebuilds the schedule for its own
  ``--steps``: a warm restart); finally writes the adapters to ``--out``.
* ``export``: writes the adapters of the last training checkpoint to ``--out``.
* ``eval``: on held-out *eval* prompts (``--eval_prompts`` per temperature),
  samples target continuations and reports the mean per-position acceptance
  alpha = E[1 - TV(Q_T, P_T)], the target's mass on the draft's support (< 1
  for a reduced head), the implied AATPS (1 - alpha^(K+1)) / (1 - alpha) for
  K = 1..4, alpha split by prompt kind (chat questions / plain-text
  openings), and the draft/target per-token decode-time ratio measured in the
  same run (``--timing_batches``; empty: no timing). ``--adapters`` picks the
  file (default ``--out``; ``none``: the plain truncation, no adapters);
  ``--eval_head_sizes`` scores the same adapters with other heads in the same
  pass. Writes ``--eval_json``.

The KL term is the forward KL of the teacher's top-k tokens plus the lumped
remainder, not of the full 49152-token distributions (which would mean storing
or recomputing the target's logits at every training step: ~100x the data, or
the target's forward pass in every step).

The train and eval prompts are a hash split of :mod:`wmspec_jax.lab.data`'s
prompts, so ``eval`` never scores a prompt the draft was trained on.

Run from the repository root, e.g. (``W`` is any work folder; give it room for
the sample chunks and checkpoints)::

  W=results/draft/work
  python -m experiments.distill_draft --mode=sample --workdir=$W --repeats=1 \
      --temperatures=0.7,1.0
  python -m experiments.distill_draft --mode=train --workdir=$W --head_size=16384 \
      --head_rank=count --steps=700 --lr=1e-3 --save_every=25 --out=$W/draft.npz
  python -m experiments.distill_draft --mode=eval --workdir=$W --adapters=$W/draft.npz \
      --timing_batches=1,8 --eval_json=$W/eval.json

Load the result with ``--draft=builtin:PATH`` in the tools. The commands,
data and CPU time that made the drafts v1-v3 in ``drafts/`` are in
``docs/measurements/2026-11-27-draft-distillation-recipes.md``.
"""

from __future__ import annotations

import glob
import json
import os
import time

from absl import app, flags


import jax
import jax.numpy as jnp
import numpy as np
import optax

from wmspec_jax import storage
from wmspec_jax.lab import data
from wmspec_jax.models import builtin, draft, transformer
from wmspec_jax.models.cache import init_cache

FLAGS = flags.FLAGS
TRAIN_GLOB = "train*_T*.npz"  # train-prompt and self-chat sample chunks
flags.DEFINE_enum("mode", "eval", ["sample", "train", "export", "eval"], "stage to run")
flags.DEFINE_string("workdir", "results/draft", "samples, checkpoints and logs")
flags.DEFINE_string("out", os.path.join("results", "draft", "adapters.npz"),
                    "where train writes the final adapters (load them with --draft=builtin:PATH)")
flags.DEFINE_integer("head_size", 0, "train: keep this many output tokens in the draft's head, "
                     "the most frequent in the target's train samples (0: the full vocabulary)")
flags.DEFINE_string("head_from", "train_T*.npz", "train: sample files (glob under --workdir) "
                    "whose token counts rank the reduced head's ids")
flags.DEFINE_enum("head_rank", "mass", ["mass", "count"], "how --head_from ranks the tokens "
                  "(frequency_head_ids)")
flags.DEFINE_bool("keep_init_head", False, "train: keep the reduced head of the --init adapters (their "
                  "head_ids; --head_size must equal its size) instead of ranking new ids on --head_from")
flags.DEFINE_string("init", "", "train: start from these adapters (same layers and rank) instead "
                    "of zero LoRA (e.g. the v1 asset)")
flags.DEFINE_string("adapters", "", "eval: adapter file ('' = --out, 'none' = plain truncation)")
flags.DEFINE_list("layers", ["0", "1", "2", "3", "4", "5"], "target layers kept by the draft")
flags.DEFINE_integer("rank", 16, "LoRA rank")
flags.DEFINE_integer("prompt_len", 96, "prompts are left-aligned in this many slots")
flags.DEFINE_integer("new_tokens", 96, "continuation length sampled from the target")
flags.DEFINE_integer("sample_batch", 32, "rows per sampling chunk")
flags.DEFINE_integer("top_k", 64, "teacher log-probs kept per position")
flags.DEFINE_list("temperatures", ["0.7", "1.0"], "sampling / evaluation temperatures")
flags.DEFINE_integer("repeats", 2, "sample: passes over the train prompts (new seeds)")
flags.DEFINE_enum("prompt_source", "train", ["train", "self_chat"], "sample: continue the built-in "
                  "train prompts, or chat questions the target writes itself (more chat data than "
                  "the train split holds; chunks named train-selfchat_*)")
flags.DEFINE_integer("self_chat_tries", 1024, "sample --prompt_source=self_chat: user turns the target "
                     "writes (rounded up to --sample_batch); those ending within --question_tokens with "
                     ">= 3 words are kept")
flags.DEFINE_integer("question_tokens", 48, "sample --prompt_source=self_chat: longest question")
flags.DEFINE_integer("self_chat_examples", 0, "sample --prompt_source=self_chat: the target writes each "
                     "user turn after a conversation of this many train-split question/answer pairs "
                     "(drawn afresh per row), so its questions take the corpus's style; 0 (f1-f3's data): "
                     "after the bare user header")
flags.DEFINE_integer("steps", 300, "train: optimiser steps")
flags.DEFINE_integer("batch", 8, "train: sequences per step")
flags.DEFINE_float("lr", 2e-3, "train: peak learning rate")
flags.DEFINE_integer("save_every", 50, "train: checkpoint period (steps)")
flags.DEFINE_integer("eval_prompts", 64, "eval: held-out prompts per temperature")
flags.DEFINE_string("eval_json", "", "eval: write the report here as JSON")
flags.DEFINE_list("eval_head_sizes", [], "eval: also score the adapters with reduced heads of "
                  "these sizes (0: the full head), ids ranked by --head_rank on --head_from")
flags.DEFINE_list("timing_batches", ["1", "32"], "eval: batch sizes of the decode-time ratio")
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
        storage.atomic_savez(path, prompts=toks[:n_real], lens=lens[:n_real], cont=cont[:n_real],
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
    if FLAGS.prompt_source == "self_chat":
        prompts = self_chat_prompts(target, lm)
        tag = "train-fewshot" if FLAGS.self_chat_examples else "train-selfchat"
    else:
        prompts, tag = prompt_ids("train", FLAGS.prompt_len), "train"
    log(f"{len(prompts)} {FLAGS.prompt_source} prompts")
    for rep in range(FLAGS.repeats):
        for t in FLAGS.temperatures:
            sample_chunks(lm, target.params, prompts, float(t), FLAGS.seed + rep, tag, FLAGS.workdir)
    log("sampling done")


def self_chat_prompts(target, lm) -> list[np.ndarray]:
    """Chat prompts whose user turn the target wrote itself (T = 1 after the template's
    "user" header; --self_chat_tries turns, kept when one ends within --question_tokens and
    has at least 3 words); the questions are saved
    to (and, on a re-run, read back from) ``<workdir>/self_chat_questions_s<seed>[_x<N>].json``.

    With ``--self_chat_examples=N`` each turn follows N question/answer pairs of the
    built-in *train* split as earlier turns of the same conversation (a new random draw
    per row): the eval split's questions are never shown, but the target's questions
    then look like the corpus's (short trivia and chit-chat) rather than what it writes
    unprompted."""
    n_examples = FLAGS.self_chat_examples
    suffix = f"_x{n_examples}" if n_examples else ""
    path = os.path.join(FLAGS.workdir, f"self_chat_questions_s{FLAGS.seed}{suffix}.json")
    if not os.path.exists(path):
        eos = target.config.eos_token_id
        b = FLAGS.sample_batch
        tries = -(-FLAGS.self_chat_tries // b) * b
        headers = self_chat_headers(target.tokenizer, n_examples, tries, FLAGS.seed)
        width = max(len(h) for h in headers)
        sampler = make_sampler(lm, FLAGS.question_tokens, 1, eos)
        questions = []
        for c in range(tries // b):
            toks, lens = pad_prompts(headers[c * b:(c + 1) * b], width)
            cont, _, _, valid = map(np.asarray, sampler(
                target.params, jnp.asarray(toks), jnp.asarray(lens),
                jax.random.PRNGKey(FLAGS.seed * 7919 + c), jnp.float32(1.0)))
            for row, ok in zip(cont, valid):
                ends = np.flatnonzero((row == eos) & ok)
                if ends.size:
                    q = target.tokenizer.decode(row[:ends[0]], skip_special_tokens=True).strip()
                    if len(q.split()) >= 3:
                        questions.append(q)
            log(f"self-chat questions: {len(questions)} after {(c + 1) * b} tries")
        storage.atomic_write_json(path, questions)
    with open(path) as f:
        questions = json.load(f)
    held_out = {question_key(q) for q in data.builtin_questions("eval").prompts}
    leaked = [q for q in questions if question_key(q) in held_out]
    if leaked:  # the target can write an eval question verbatim ("What is pi?"): never train on it
        log(f"dropped {len(leaked)} self-written questions equal to eval-split ones: {leaked[:5]}")
    out = [np.asarray(builtin.encode_chat(q)) for q in questions if question_key(q) not in held_out]
    return [p for p in out if len(p) <= FLAGS.prompt_len]


def load_train_chunks(paths) -> tuple[dict, np.ndarray]:
    """(chunks without the rows whose prompt is an eval-split prompt, bool[N] rows kept): what
    both trainers train on. A self-written question can equal an eval question, and chunks
    written before :func:`self_chat_prompts` dropped such questions hold them."""
    chunks = load_chunks(paths)
    held_out = {tuple(p.tolist()) for p in prompt_ids("eval", FLAGS.prompt_len)}
    keep = np.asarray([tuple(row[:n].tolist()) not in held_out
                       for row, n in zip(chunks["prompts"], chunks["lens"])], bool)
    if not keep.all():
        log(f"dropped {int((~keep).sum())} sequences whose prompt is an eval-split prompt")
        chunks = {k: v[keep] for k, v in chunks.items()}
    return chunks, keep


def question_key(question: str) -> str:
    """A question up to case, spacing and end punctuation."""
    return " ".join(question.lower().split()).rstrip("?.! ")


def self_chat_headers(tokenizer, n_examples: int, tries: int, seed: int) -> list[np.ndarray]:
    """Token ids ending in the chat template's user header, one per try: the bare header,
    or a conversation of ``n_examples`` short train-split question/answer turns before it."""
    marker = "@@QUESTION@@"
    if n_examples == 0:
        text = builtin.chat_prompt(marker)
        return [np.asarray(tokenizer.encode(text[:text.index(marker)], add_special_tokens=False))] * tries
    # Pairs of at most 48 tokens (~90 % of them; the longest answers run to 280): the
    # prefill then costs what the conversation holds, not the longest pair's width.
    pairs = [(e.prompt, e.human) for e in data.builtin_questions("train").examples
             if e.human and len(tokenizer.encode(e.prompt + " " + e.human, add_special_tokens=False)) <= 48]
    rng = np.random.default_rng(seed)
    headers = []
    for _ in range(tries):
        messages = []
        for i in rng.choice(len(pairs), n_examples, replace=False):
            messages += [{"role": "user", "content": pairs[i][0]},
                         {"role": "assistant", "content": pairs[i][1]}]
        messages.append({"role": "user", "content": marker})
        text = tokenizer.apply_chat_template(messages, tokenize=False)
        headers.append(np.asarray(tokenizer.encode(text[:text.index(marker)], add_special_tokens=False)))
    return headers


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


def draft_logits(cfg, params, seq, pred_pos, reduced: bool = False):
    """Teacher-forced logits float32[N, new, V] at the positions in pred_pos.

    A draft with a reduced head (``params["head_ids"]``) gives its full-width
    logits (−inf off the kept ids), or with ``reduced`` only the kept ones
    float32[N, new, K].
    """
    n, s = seq.shape
    cache = init_cache(cfg, n, s, dtype=params["embed"].dtype)
    positions = jnp.broadcast_to(jnp.arange(s, dtype=jnp.int32), (n, s))
    # One attention block over the whole sequence: no data-dependent loop, so it differentiates.
    h, _ = transformer.hidden_states(cfg, params, seq, positions, cache,
                                     jnp.full((n,), s, jnp.int32), attention_block=s)
    h = jnp.take_along_axis(h, pred_pos[..., None], axis=1)
    if "head_ids" in params:
        if reduced:
            return jnp.einsum("btd,kd->btk", h, params["head_rows"],
                              preferred_element_type=jnp.float32)
        return draft.reduced_head(cfg, params, h)
    return transformer.lm_logits(cfg, params, h)


def frequency_head_ids(paths, size: int, vocab_size: int, always=(), rank: str = "mass"
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


def distill_loss(adapters, target_params, layers, cfg, batch, head_ids=None):
    """Forward KL + TV(T=1) + TV(T=0.7) of the LoRA draft against the teacher's top-k
    (:func:`teacher_loss`)."""
    seq, pred_pos, vals, idx, valid = batch
    if head_ids is not None:
        adapters = {**adapters, "head_ids": head_ids}
    params = draft.draft_params(target_params, layers, adapters)
    z = draft_logits(cfg, params, seq, pred_pos, reduced=True)
    return teacher_loss(z, vals, idx, valid, cfg.vocab_size, head_ids)


def teacher_loss(z, vals, idx, valid, vocab_size: int, head_ids=None):
    """Forward KL + TV(T=1) + TV(T=0.7) of draft logits against the teacher's top-k.

    ``z`` float32[N, T, K]: the draft's logits over its head (``head_ids``
    int32[K], or the full vocabulary when None); ``vals`` / ``idx`` [N, T, k]:
    the teacher's top-k log-probabilities and ids; ``valid`` bool[N, T].
    With a reduced head the draft's distribution lives on the kept ids: teacher
    entries outside them join the lumped remainder (so the losses stay finite
    and measure what the draft can match).
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


def restore_state(target, layers):
    """(adapters, optimiser, optimiser state, step) from the last checkpoint, or fresh."""
    warmup = min(30, FLAGS.steps // 10)
    sched = optax.warmup_cosine_decay_schedule(0.0, FLAGS.lr, warmup, FLAGS.steps, FLAGS.lr * 0.05)
    opt = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(sched, weight_decay=0.0))
    adapters = draft.init_adapters(target.params, layers, FLAGS.rank, jax.random.PRNGKey(FLAGS.seed))
    if FLAGS.init:
        init_layers, init, _ = draft.load_adapters(FLAGS.init)
        init.pop("head_ids", None)
        if init_layers != list(layers) or jax.tree_util.tree_structure(init) != \
                jax.tree_util.tree_structure(adapters) or any(
                    a.shape != b.shape for a, b in zip(jax.tree_util.tree_leaves(init),
                                                       jax.tree_util.tree_leaves(adapters))):
            raise SystemExit(f"--init={FLAGS.init} has other layers or rank than --layers/--rank")
        adapters = init
    opt_state = opt.init(adapters)
    ckpt_path = os.path.join(FLAGS.workdir, "train_state.npz")
    if not os.path.exists(ckpt_path):
        return adapters, opt, opt_state, 0
    with np.load(ckpt_path, allow_pickle=False) as z:
        leaves, treedef = jax.tree_util.tree_flatten((adapters, opt_state))
        leaves = [jnp.asarray(z[f"l{i}"], l.dtype) for i, l in enumerate(leaves)]
        adapters, opt_state = jax.tree_util.tree_unflatten(treedef, leaves)
        return adapters, opt, opt_state, int(z["step"])


def head_ids_for_training(target):
    """The reduced head's ids (None: full head), fixed at the first training run
    (saved in the workdir, so a resumed run keeps them whatever was sampled since)."""
    if not FLAGS.head_size:
        return None
    # the file name says where the ids came from, so a run with other head flags never reuses them
    source = "init" if FLAGS.keep_init_head else FLAGS.head_rank
    path = os.path.join(FLAGS.workdir, f"head_ids_{source}_{FLAGS.head_size}.npy")
    if not os.path.exists(path):
        if FLAGS.keep_init_head:
            if not FLAGS.init:
                raise SystemExit("--keep_init_head needs --init (the adapters whose head to keep)")
            _, init, _ = draft.load_adapters(FLAGS.init)
            if "head_ids" not in init or init["head_ids"].shape[0] != FLAGS.head_size:
                raise SystemExit(f"--keep_init_head: --init={FLAGS.init} has no reduced head of "
                                 f"--head_size={FLAGS.head_size} ids")
            ids = np.asarray(init["head_ids"], np.int32)
            log(f"head ids of {FLAGS.init}")
        else:
            paths = sorted(glob.glob(os.path.join(FLAGS.workdir, FLAGS.head_from)))
            ids = frequency_head_ids(paths, FLAGS.head_size, target.config.vocab_size,
                                     always=special_ids(target), rank=FLAGS.head_rank)
            log(f"head ids ranked on {len(paths)} sample files")
        storage.atomic_write(path, lambda f: np.save(f, ids))
    return np.load(path)


def special_ids(target) -> list[int]:
    """Ids the reduced head always keeps: EOS and the tokenizer's special tokens."""
    ids = {int(target.config.eos_token_id), *map(int, target.stop_token_ids)}
    ids |= set(map(int, target.tokenizer.all_special_ids))
    return sorted(i for i in ids if 0 <= i < target.config.vocab_size)


def write_asset(layers, adapters, step, head_ids=None):
    if head_ids is not None:
        adapters = {**adapters, "head_ids": head_ids}
    draft.save_adapters(FLAGS.out, layers, adapters,
                        meta={"target": builtin.TARGET_NAME, "rank": FLAGS.rank,
                              "steps": int(step), "gguf": builtin.GGUF_FILE,
                              "head_size": int(FLAGS.head_size or 0),
                              "init": os.path.basename(FLAGS.init) if FLAGS.init else None})
    log(f"wrote {FLAGS.out} ({os.path.getsize(FLAGS.out) / 1e6:.2f} MB)")


def mode_export():
    """Writes the adapters of the last training checkpoint to --out (with a
    reduced head of --head_size ids ranked on --head_from, which may differ from
    the head size it was trained with)."""
    target = builtin.load_target()
    layers = [int(i) for i in FLAGS.layers]
    adapters, _, _, step = restore_state(target, layers)
    if not step:
        raise SystemExit(f"no training checkpoint in {FLAGS.workdir}")
    write_asset(layers, adapters, step, head_ids_for_training(target))


def mode_train():
    target = builtin.load_target()
    layers = [int(i) for i in FLAGS.layers]
    cfg = draft.draft_config(target.config, layers)
    paths = sorted(glob.glob(os.path.join(FLAGS.workdir, TRAIN_GLOB)))
    if not paths:
        raise SystemExit(f"no samples in {FLAGS.workdir}: run --mode=sample first")
    data, _ = load_train_chunks(paths)
    seq, pred_pos = full_sequences(data)
    n = len(seq)
    log(f"{n} sequences, {int(data['valid'].sum())} target tokens from {len(paths)} chunks")

    head_ids = head_ids_for_training(target)
    if head_ids is not None:
        log(f"reduced head: {len(head_ids)} ids")
        head_ids_j = jnp.asarray(head_ids)
    else:
        head_ids_j = None
    adapters, opt, opt_state, start = restore_state(target, layers)
    ckpt_path = os.path.join(FLAGS.workdir, "train_state.npz")
    if start:
        log(f"resumed from step {start}")

    @jax.jit
    def train_step(adapters, opt_state, batch):
        (loss, aux), grads = jax.value_and_grad(distill_loss, has_aux=True)(
            adapters, target.params, layers, cfg, batch, head_ids_j)
        updates, opt_state = opt.update(grads, opt_state, adapters)
        return optax.apply_updates(adapters, updates), opt_state, loss, aux

    def save(step):
        leaves = jax.tree_util.tree_leaves((adapters, opt_state))
        storage.atomic_savez(ckpt_path, step=np.int64(step),
                     **{f"l{i}": np.asarray(l) for i, l in enumerate(leaves)})

    rng = np.random.default_rng(FLAGS.seed + start)
    t0, hist = time.time(), []
    for step in range(start, FLAGS.steps):
        if step % FLAGS.save_every == 0 and step > start:
            # Pick up chunks that a concurrent --mode=sample has written since.
            new_paths = sorted(glob.glob(os.path.join(FLAGS.workdir, TRAIN_GLOB)))
            if len(new_paths) > len(paths):
                paths = new_paths
                data, _ = load_train_chunks(paths)
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
    write_asset(layers, adapters, FLAGS.steps, head_ids)


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


def acceptance(target, drafts, data, temperature, batch=16):
    """Per valid position and draft: sum_v min(P_T, Q_T) and the target's mass on the
    draft's support, P/Q teacher-forced on target samples: float32[positions, drafts, 2]."""
    seq, pred_pos = full_sequences(data)
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

    out = []
    for i in range(0, len(seq), batch):
        s, pp = seq[i:i + batch], pred_pos[i:i + batch]
        pad = batch - len(s)
        if pad:
            s = np.concatenate([s, np.repeat(s[-1:], pad, 0)])
            pp = np.concatenate([pp, np.repeat(pp[-1:], pad, 0)])
        out.append(np.asarray(alpha_rows(target.params, tuple(d.params for d in drafts),
                                         s, pp))[:batch - pad])
    return np.concatenate(out)[data["valid"]]


def mode_eval():
    target = builtin.load_target()
    if FLAGS.adapters == "none":
        layers, adapters = [int(i) for i in FLAGS.layers], None
        name = f"truncated{layers}"
    else:
        path = FLAGS.adapters or FLAGS.out
        if path in builtin.DRAFTS:
            path = builtin.draft_asset_path(path)
        layers, adapters, _ = draft.load_adapters(path)
        name = os.path.basename(path)
    variants = {name: adapters}
    for size in map(int, FLAGS.eval_head_sizes):
        # the same adapters with another head (full: 0), ranked by --head_rank on --head_from
        other = {k: v for k, v in (adapters or {}).items() if k != "head_ids"}
        if size:
            paths = sorted(glob.glob(os.path.join(FLAGS.workdir, FLAGS.head_from)))
            other["head_ids"] = jnp.asarray(frequency_head_ids(
                paths, size, target.config.vocab_size, always=special_ids(target),
                rank=FLAGS.head_rank))
        variants[f"{name}+head{size or 'full'}"] = other
    drafts = {k: draft.make_draft(target, layers, a) for k, a in variants.items()}
    lm = target.language_model()
    prompts = prompt_ids("eval", FLAGS.prompt_len)
    rng = np.random.default_rng(FLAGS.seed)
    prompts = [prompts[i] for i in rng.permutation(len(prompts))[:FLAGS.eval_prompts]]
    reports = {k: {"draft": k, "layers": layers, "eval_prompts": len(prompts),
                   "new_tokens": FLAGS.new_tokens, "temperatures": {}} for k in drafts}
    for t in FLAGS.temperatures:
        t = float(t)
        paths = sample_chunks(lm, target.params, prompts, t, 12345, "eval",
                              os.path.join(FLAGS.workdir, "eval"))
        chunk = load_chunks(paths)
        scores = acceptance(target, list(drafts.values()), chunk, t)
        # chat questions (the template opens with <|im_start|> = BOS) vs plain-text openings
        is_chat = np.broadcast_to((chunk["prompts"][:, 0] == target.config.bos_token_id)[:, None],
                                  chunk["valid"].shape)[chunk["valid"]]
        for (k, report), (a, mass) in zip(reports.items(), scores.transpose(1, 2, 0)):
            alpha = float(a.mean())
            se = float(a.std() / np.sqrt(len(a)))
            implied = {f"K={k}": (1 - alpha ** (k + 1)) / (1 - alpha) for k in (1, 2, 3, 4)}
            by_kind = {kind: {"alpha": float(a[m].mean()), "alpha_se": float(a[m].std() / np.sqrt(m.sum())),
                              "positions": int(m.sum())}
                       for kind, m in (("chat", is_chat), ("text", ~is_chat)) if m.any()}
            report["temperatures"][str(t)] = {
                "alpha": alpha, "alpha_se": se, "positions": int(a.size), "implied_aatps": implied,
                "target_mass_on_draft_support": float(mass.mean()), "by_prompt_kind": by_kind}
            log(f"{k} T={t}: alpha={alpha:.4f} ± {se:.4f} over {a.size} positions "
                f"(target mass on the draft's support {mass.mean():.4f}); implied AATPS "
                + ", ".join(f"{k}: {v:.3f}" for k, v in implied.items()) + "; by prompt kind "
                + ", ".join(f"{kind} {v['alpha']:.4f} ± {v['alpha_se']:.4f} ({v['positions']})"
                            for kind, v in by_kind.items()))
    for b in map(int, FLAGS.timing_batches):
        tt = decode_time(lm, target.params, b)
        for k, d in drafts.items():
            td = decode_time(d.language_model(), d.params, b)
            reports[k].setdefault("decode_time", {})[f"batch{b}"] = {
                "target_ms": tt * 1e3, "draft_ms": td * 1e3, "ratio": td / tt}
            log(f"{k} decode batch {b}: target {tt * 1e3:.2f} ms, draft {td * 1e3:.2f} ms, "
                f"ratio {td / tt:.3f}")
    write_report(reports[name] if len(reports) == 1 else {"drafts": list(reports.values())})


def write_report(report: dict) -> None:
    """Writes an eval report to --eval_json (when given) and prints it."""
    if FLAGS.eval_json:
        storage.atomic_write_json(FLAGS.eval_json, report)
    print(json.dumps(report, indent=2))


def main(argv):
    del argv
    os.makedirs(os.path.join(FLAGS.workdir, "eval"), exist_ok=True)
    {"sample": mode_sample, "train": mode_train, "export": mode_export,
     "eval": mode_eval}[FLAGS.mode]()


if __name__ == "__main__":
    app.run(main)
