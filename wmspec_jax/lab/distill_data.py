"""The target's samples the built-in drafts are distilled on (``experiments/distill_draft.py --mode=sample``).

Both distillation recipes (:mod:`wmspec_jax.lab.distill`: LoRA adapters on kept target layers;
:mod:`wmspec_jax.lab.distill_features`: a head on the target's features) match the draft's next-token
distribution to the target's on the target's own continuations. A *chunk* is one ``.npz`` file of
``sample_batch`` rows under the work folder:

* ``prompts`` int32[N, prompt_len] left-aligned prompts, ``lens`` int32[N] their lengths;
* ``cont`` int32[N, new_tokens] the target's continuation at ``temperature``;
* ``vals`` float16[N, new_tokens, top_k], ``idx`` int32[N, new_tokens, top_k]: the target's top-k
  next-token log-probabilities (T = 1) and their ids at every generated position;
* ``valid`` bool[N, new_tokens]: positions up to and including the first EOS.

The train and eval prompts are a hash split of :mod:`wmspec_jax.text_data`'s built-in prompts, so an
evaluation never scores a prompt the draft was trained on. ``self_chat`` prompts continue chat
questions the target writes itself (more chat data than the train split holds).
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from typing import Callable, Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from wmspec_jax import storage
from wmspec_jax import text_data as data
from wmspec_jax.lab.harness import log as _log
from wmspec_jax.models import builtin

TRAIN_GLOB = "train*_T*.npz"  # train-prompt and self-chat sample chunks
EVAL_SEED = 12345  # the eval samples' seed: every evaluation scores the same target texts


class RecipeError(ValueError):
    """A setting or a missing input of a distillation recipe that the user fixes (the scripts print it
    and exit)."""


@dataclasses.dataclass(frozen=True)
class DistillSettings:
    """Every setting of the adapter recipe (the flags of ``experiments/distill_draft.py``, which the
    feature recipe shares); see the script's flags for each one's meaning."""

    workdir: str
    out: str
    head_size: int
    head_from: str
    head_rank: str
    keep_init_head: bool
    init: str
    adapters: str
    layers: tuple
    rank: int
    prompt_len: int
    new_tokens: int
    sample_batch: int
    top_k: int
    temperatures: tuple
    repeats: int
    prompt_source: str
    self_chat_tries: int
    question_tokens: int
    self_chat_examples: int
    steps: int
    batch: int
    lr: float
    save_every: int
    eval_prompts: int
    eval_json: str
    eval_head_sizes: tuple
    timing_batches: tuple
    seed: int

    @classmethod
    def from_flags(cls, values: Mapping) -> "DistillSettings":
        """The settings of a script's flag values by name (list flags as their strings)."""
        ints = lambda xs: tuple(int(x) for x in xs)  # noqa: E731
        return from_flag_values(cls, values, layers=ints, temperatures=lambda xs: tuple(float(x) for x in xs),
                                eval_head_sizes=ints, timing_batches=ints)


def from_flag_values(cls, values: Mapping, **convert):
    """The settings dataclass ``cls`` of flag values named as its fields; ``convert``: field -> a function
    of the flag's value (e.g. a list flag's strings to numbers)."""
    fields = {f.name: values[f.name] for f in dataclasses.fields(cls)}
    return cls(**{k: convert[k](v) if k in convert else v for k, v in fields.items()})


# ----------------------------------------------------------------------------- prompts

def prompt_ids(split: str, max_len: int) -> list[np.ndarray]:
    """Chat-formatted questions and plain documentation prefixes of one split, each int32[<= max_len]."""
    tok = builtin.builtin_tokenizer()
    out = [np.asarray(builtin.encode_chat(q)) for q in data.builtin_questions(split).prompts]
    out += [np.asarray(tok.encode(p, add_special_tokens=False))
            for p in data.builtin_openings(chars=240, split=split, fortunes_dir="").prompts]
    return [p for p in out if 0 < len(p) <= max_len]


def eval_prompts(s: DistillSettings) -> list[np.ndarray]:
    """The ``eval_prompts`` held-out prompts every evaluation scores (a seeded draw of the eval split)."""
    prompts = prompt_ids("eval", s.prompt_len)
    rng = np.random.default_rng(s.seed)
    return [prompts[i] for i in rng.permutation(len(prompts))[:s.eval_prompts]]


def pad_prompts(prompts: Sequence[np.ndarray], width: int) -> tuple[np.ndarray, np.ndarray]:
    """(int32[B, width] left-aligned prompts, int32[B] lengths): one width, so the sampler compiles once."""
    from wmspec_jax.models.pairs import pack_prompts

    tokens, lengths = pack_prompts(prompts, width)
    return np.pad(tokens, ((0, 0), (0, width - tokens.shape[1]))), lengths


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


def _write_questions(target, lm, s: DistillSettings, path: str, log: Callable) -> None:
    """Samples ``self_chat_tries`` user turns (rounded up to ``sample_batch``) at T = 1 and writes those
    that end within ``question_tokens`` with at least 3 words to ``path``."""
    eos = target.config.eos_token_id
    b = s.sample_batch
    tries = -(-s.self_chat_tries // b) * b
    headers = self_chat_headers(target.tokenizer, s.self_chat_examples, tries, s.seed)
    width = max(len(h) for h in headers)
    sampler = make_sampler(lm, s.question_tokens, 1, eos)
    questions = []
    for c in range(tries // b):
        toks, lens = pad_prompts(headers[c * b:(c + 1) * b], width)
        cont, _, _, valid = map(np.asarray, sampler(
            target.params, jnp.asarray(toks), jnp.asarray(lens),
            jax.random.PRNGKey(s.seed * 7919 + c), jnp.float32(1.0)))
        for row, ok in zip(cont, valid):
            ends = np.flatnonzero((row == eos) & ok)
            if ends.size:
                q = target.tokenizer.decode(row[:ends[0]], skip_special_tokens=True).strip()
                if len(q.split()) >= 3:
                    questions.append(q)
        log(f"self-chat questions: {len(questions)} after {(c + 1) * b} tries")
    storage.atomic_write_json(path, questions)


def self_chat_prompts(target, lm, s: DistillSettings, log: Callable = _log) -> list[np.ndarray]:
    """Chat prompts whose user turn the target wrote itself (:func:`_write_questions`); the questions
    are saved to (and, on a re-run, read back from) ``<workdir>/self_chat_questions_s<seed>[_x<N>].json``.

    With ``self_chat_examples=N`` each turn follows N question/answer pairs of the built-in *train*
    split as earlier turns of the same conversation (a new random draw per row): the eval split's
    questions are never shown, but the target's questions then look like the corpus's (short trivia and
    chit-chat) rather than what it writes unprompted."""
    n_examples = s.self_chat_examples
    suffix = f"_x{n_examples}" if n_examples else ""
    path = os.path.join(s.workdir, f"self_chat_questions_s{s.seed}{suffix}.json")
    if not os.path.exists(path):
        _write_questions(target, lm, s, path, log)
    with open(path) as f:
        questions = json.load(f)
    held_out = {question_key(q) for q in data.builtin_questions("eval").prompts}
    leaked = [q for q in questions if question_key(q) in held_out]
    if leaked:  # the target can write an eval question verbatim ("What is pi?"): never train on it
        log(f"dropped {len(leaked)} self-written questions equal to eval-split ones: {leaked[:5]}")
    out = [np.asarray(builtin.encode_chat(q)) for q in questions if question_key(q) not in held_out]
    return [p for p in out if len(p) <= s.prompt_len]


# ----------------------------------------------------------------------------- sampling

def make_sampler(lm, new_tokens: int, top_k: int, eos: int):
    """jit(params, prompts int32[B, P], lens int32[B], key, temperature) -> (continuation int32[B, new],
    teacher top-k log-probs float32[B, new, k], their ids int32[B, new, k], valid bool[B, new])."""

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


def sample_chunks(lm, params, prompts, temperature: float, seed: int, tag: str, workdir: str, s: DistillSettings,
                  log: Callable = _log) -> list[str]:
    """Samples continuations chunk by chunk (the module doc's layout) to
    ``<workdir>/<tag>_T<temperature>_s<seed>_<chunk>.npz``; skips chunks already on disk. Returns the paths."""
    sampler = make_sampler(lm, s.new_tokens, s.top_k, builtin.load_target().config.eos_token_id)
    b = s.sample_batch
    paths = []
    n_chunks = (len(prompts) + b - 1) // b
    for c in range(n_chunks):
        path = os.path.join(workdir, f"{tag}_T{temperature}_s{seed}_{c:04d}.npz")
        paths.append(path)
        if os.path.exists(path):
            continue
        chunk = prompts[c * b:(c + 1) * b]
        chunk = chunk + [chunk[-1]] * (b - len(chunk))  # static batch: pad by repetition
        toks, lens = pad_prompts(chunk, s.prompt_len)
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


def sample(s: DistillSettings, log: Callable = _log) -> None:
    """``--mode=sample``: ``repeats`` passes (seeds ``seed``, ``seed + 1``, ...) at every temperature over
    the train prompts, or over self-written chat questions (``prompt_source="self_chat"``)."""
    target = builtin.load_target()
    lm = target.language_model()
    if s.prompt_source == "self_chat":
        prompts = self_chat_prompts(target, lm, s, log)
        tag = "train-fewshot" if s.self_chat_examples else "train-selfchat"
    else:
        prompts, tag = prompt_ids("train", s.prompt_len), "train"
    log(f"{len(prompts)} {s.prompt_source} prompts")
    for rep in range(s.repeats):
        for t in s.temperatures:
            sample_chunks(lm, target.params, prompts, t, s.seed + rep, tag, s.workdir, s, log)
    log("sampling done")


def eval_samples(target, prompts: Sequence[np.ndarray], temperature: float, s: DistillSettings,
                 log: Callable = _log) -> dict:
    """The target's samples of the eval prompts at ``temperature`` (seed :data:`EVAL_SEED`, under
    ``<workdir>/eval``, drawn once and read back): :func:`load_chunks`' dict."""
    return load_chunks(sample_chunks(target.language_model(), target.params, prompts, temperature, EVAL_SEED, "eval",
                                     os.path.join(s.workdir, "eval"), s, log))


# ----------------------------------------------------------------------------- reading samples

def load_chunks(paths: Sequence[str]) -> dict:
    """The chunks' arrays (the module doc's layout) concatenated over rows."""
    parts = [dict(np.load(p)) for p in paths]
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0] if k != "temperature"}


def chunk_temperature(path: str) -> float:
    with np.load(path) as z:
        return float(z["temperature"])


def load_train_chunks(paths: Sequence[str], prompt_len: int, log: Callable = _log) -> tuple[dict, np.ndarray]:
    """(chunks without the rows whose prompt is an eval-split prompt, bool[N] rows kept): what
    both trainers train on. A self-written question can equal an eval question, and chunks
    written before :func:`self_chat_prompts` dropped such questions hold them."""
    chunks = load_chunks(paths)
    held_out = {tuple(p.tolist()) for p in prompt_ids("eval", prompt_len)}
    keep = np.asarray([tuple(row[:n].tolist()) not in held_out
                       for row, n in zip(chunks["prompts"], chunks["lens"])], bool)
    if not keep.all():
        log(f"dropped {int((~keep).sum())} sequences whose prompt is an eval-split prompt")
        chunks = {k: v[keep] for k, v in chunks.items()}
    return chunks, keep


def full_sequences(chunks: dict) -> tuple[np.ndarray, np.ndarray]:
    """(int32[N, P + new] prompt + continuation in one row, int32[N, new] the positions predicting each
    continuation token)."""
    n, p = chunks["prompts"].shape
    new = chunks["cont"].shape[1]
    seq = np.zeros((n, p + new), np.int32)
    for i in range(n):
        ln = chunks["lens"][i]
        seq[i, :ln] = chunks["prompts"][i, :ln]
        seq[i, ln:ln + new] = chunks["cont"][i]
    pred_pos = chunks["lens"][:, None] - 1 + np.arange(new)[None, :]
    return seq, pred_pos.astype(np.int32)


def chat_positions(chunks: dict, bos_id: int) -> np.ndarray:
    """bool[valid positions]: the position continues a chat question (the template opens with BOS),
    not a plain-text opening."""
    return np.broadcast_to((chunks["prompts"][:, 0] == bos_id)[:, None], chunks["valid"].shape)[chunks["valid"]]


def in_batches(fn: Callable, arrays: Sequence[np.ndarray], batch: int) -> np.ndarray:
    """``fn(*rows)`` over the rows of ``arrays`` in batches of ``batch`` rows, concatenated. The last batch
    is padded by repeating its last row (one shape: one compilation) and its padding dropped."""
    out = []
    for i in range(0, len(arrays[0]), batch):
        part = [x[i:i + batch] for x in arrays]
        pad = batch - len(part[0])
        if pad:
            part = [np.concatenate([x, np.repeat(x[-1:], pad, 0)]) for x in part]
        out.append(np.asarray(fn(*part))[:batch - pad])
    return np.concatenate(out)


__all__ = ["DistillSettings", "EVAL_SEED", "RecipeError", "TRAIN_GLOB", "chat_positions", "chunk_temperature",
           "eval_prompts", "eval_samples", "from_flag_values", "full_sequences", "in_batches", "load_chunks",
           "load_train_chunks", "make_sampler", "pad_prompts", "prompt_ids", "question_key", "sample",
           "sample_chunks", "self_chat_headers", "self_chat_prompts"]
