"""Generation runs for the experiments: one spec, many prompts, resumable records.

A *run* is one generation setting (:class:`RunSpec`: method, decoder,
lookahead K, temperature) applied to a prompt list. :func:`generate_run`
generates it batch by batch and appends one JSON record per text to a
:class:`~wmspec_jax.storage.JsonlStore`; an interrupted run resumes where it
stopped, and a text's tokens do not depend on which batch it landed in:

* each (run, text i) pair has its own watermark keys,
  :func:`wmspec_jax.keys.text_keys` ``(secret, [i], run=run.name)``: calibration
  holds over texts (``docs/detection.md``, "keyed per text"), and two runs of
  one prompt are independent draws (Alg. 1 is deterministic given key and
  context, so a shared key would make the K = 2, 3, 4 rows largely the same
  texts). Neither the secret nor the keys are stored;
* each text's true randomness is ``fold_in(fold_in(key(seed), run), i)``;
* the last partial batch is padded to the batch size (static shapes: no
  recompilation) and the padding rows are dropped.

Under a mesh (``pair.mesh``, the experiments' ``--mesh``) each batch is split
over its ``data`` axis (:func:`wmspec_jax.sharding.shard_batch`); the tokens
do not change (``tests/test_sharding.py``). When several processes run one
experiment (multi-host, :func:`wmspec_jax.sharding.maybe_initialize_distributed`)
every process knows every record, so all of them take the same resume
decisions, but each writes only the rows its devices hold, to its own file
``generations.<process_index>.jsonl`` (:func:`open_generations`);
:func:`merge_generations` appends them to ``generations.jsonl`` at the end.

Records hold what Tables 1-2 and Fig. 2 need: the generated ids, their
sources (draft / residual / target), steps, tokens per step (AATPS), the
log-perplexity of the text under the target at temperature 1 (LOGPPL, read
off the generation loop's own target forwards:
:meth:`wmspec_jax.speculative.GenerationResult.log_perplexity`; before issue
15 a second full forward per batch computed it, :func:`log_perplexity`, which
stays as the reference), and the wall time of the batch (PTT), measured after
compiling ahead of time (:func:`wmspec_jax.speculative.precompile`).
"""

from __future__ import annotations

import dataclasses
import functools
import glob
import os
import time
import warnings
from typing import Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from wmspec_jax import decoders, keys, prf, sampling, sharding, speculative, storage
from wmspec_jax.lm import LanguageModel
from wmspec_jax.storage import JsonlStore, Progress

DECODER_KINDS = (decoders.GUMBEL, decoders.SYNTHID)


@dataclasses.dataclass(frozen=True)
class RunSpec:
    """One generation setting.

    Attributes:
      method: a :data:`wmspec_jax.speculative.METHODS` name (``basic``,
        ``standard``, ``pseudorandom`` = Alg. 1, ...).
      decoder: ``"gumbel"`` or ``"synthid"``.
      lookahead: K (0 for non-speculative methods).
      temperature: applied to P and Q alike.
      num_layers: SynthID's m (ignored for Gumbel-max).
    """

    method: str
    decoder: str
    lookahead: int
    temperature: float
    num_layers: int = 30

    def __post_init__(self):
        if self.decoder not in DECODER_KINDS:
            raise ValueError(f"decoder must be one of {DECODER_KINDS}, got {self.decoder!r}")
        self.config(1)  # validates method / K / temperature
        spec = speculative.METHODS[self.method]
        if self.temperature == 0 and (spec.watermark_target or spec.watermark_draft):
            warnings.warn(f"run {self.name}: at temperature 0 every distribution is one-hot, so no watermark is "
                          "embedded (greedy decoding); its texts are not detectable", stacklevel=2)

    @property
    def name(self) -> str:
        return f"{self.method}-{self.watermark_decoder.run_tag}-K{self.lookahead}-T{self.temperature:g}"

    @property
    def watermark_decoder(self) -> decoders.WatermarkDecoder:
        return decoders.WatermarkDecoder(self.decoder, self.num_layers)

    def config(self, max_new_tokens: int, eos_id: Optional[int] = None, pad_id: int = 0,
               top_k: Optional[int] = None, context_width: int = prf.DEFAULT_CONTEXT_WIDTH):
        return speculative.SpeculativeConfig(
            method=self.method, decoder=self.watermark_decoder, lookahead=self.lookahead,
            max_new_tokens=max_new_tokens, temperature=self.temperature, top_k=top_k,
            context_width=context_width, eos_id=eos_id, pad_id=pad_id)


def text_keys(secret, indices: Sequence[int], run: str = "") -> keys.StreamKeys:
    """Per-text stream keys of texts ``indices`` of run ``run``: :func:`wmspec_jax.keys.text_keys`."""
    return keys.text_keys(secret, indices, run=run)


@functools.partial(jax.jit, static_argnames=("target",))
def _log_perplexity(target: LanguageModel, params, tokens, prompt_lengths, lengths):
    cache = target.init_cache(tokens.shape[0], tokens.shape[1])
    logits, _ = target.step(params, cache, tokens, jnp.full((tokens.shape[0],), tokens.shape[1], jnp.int32))
    logp = jax.nn.log_softmax(logits[:, :-1].astype(jnp.float32), axis=-1)
    nll = -jnp.take_along_axis(logp, tokens[:, 1:, None], axis=-1)[..., 0]  # predicts token t+1
    pos = jnp.arange(1, tokens.shape[1])[None]
    scored = (pos >= prompt_lengths[:, None]) & (pos < lengths[:, None])
    return jnp.sum(jnp.where(scored, nll, 0.0), 1) / jnp.maximum(jnp.sum(scored, 1), 1)


def log_perplexity(target: LanguageModel, params, tokens, prompt_lengths, lengths) -> np.ndarray:
    """Mean −log P(w_t | w_<t) over each row's generated tokens (LOGPPL, Tables 1-2).

    Args:
      tokens: int32[B, L] prompt + generated ids; ``prompt_lengths``,
        ``lengths``: int32[B] (generated = ``[prompt_length, length)``).

    Returns:
      float64[B], natural log, the target at temperature 1 (no top-k).
    """
    tokens = jnp.asarray(tokens, jnp.int32)
    out = _log_perplexity(target, params, tokens, jnp.asarray(prompt_lengths, jnp.int32),
                          jnp.asarray(lengths, jnp.int32))
    return np.asarray(out, np.float64)


def record_id(run: RunSpec, index: int) -> str:
    return f"{run.name}/{index}"


RECORD_FIELDS = ("id", "run", "index", "prompt_length", "tokens", "source", "num_steps", "aatps", "logppl",
                 "batch_seconds", "batch_tokens", "batch", "batch_rows")


def _is_complete(store: JsonlStore, run: RunSpec, index: int) -> bool:
    """A stored record of (run, index) with every field (an incomplete one is generated again)."""
    rec = store.records.get(record_id(run, index))
    return (rec is not None and all(k in rec for k in RECORD_FIELDS) and rec["run"] == run.name
            and rec["index"] == index and len(rec["tokens"]) == len(rec["source"]))


def pending_indices(store: JsonlStore, run: RunSpec, num_texts: int) -> list[int]:
    """The text indices of ``run`` this process generates: those of ``range(num_texts)`` without a
    complete record in ``store``.

    Every process of a multi-process run gets the same list (each knows all
    records, :func:`open_generations`), so all run the same batches; which
    rows of a batch a process writes is decided by where they live
    (:func:`generate_run`).
    """
    return [i for i in range(num_texts) if not _is_complete(store, run, i)]


def generate_run(
    run: RunSpec,
    pair,
    prompts: np.ndarray,
    prompt_lengths: np.ndarray,
    store: JsonlStore,
    *,
    secret,
    seed: int,
    max_new_tokens: int,
    batch_size: int,
    eos_id: Optional[int] = None,
    top_k: Optional[int] = None,
    log=print,
) -> list[dict]:
    """Generates ``run`` for every prompt not yet in ``store``; returns all its records.

    Args:
      run: the setting.
      pair: a :class:`wmspec_jax.lab.pairs.ModelPair`.
      prompts: int32[N, P] packed prompts; ``prompt_lengths`` int32[N].
      store: the experiment's record store (shared by runs; ids are
        ``"{run.name}/{i}"``).
      secret, seed: watermark secret (:class:`wmspec_jax.keys.Secret` or a
        str) and true-randomness seed (module doc).
      max_new_tokens, batch_size, eos_id, top_k: generation settings.

    Each record: ``id, run, index, prompt_length, tokens`` (generated ids),
    ``source`` (int per token), ``num_steps, aatps, logppl``,
    ``watermarked_tokens`` (how many tokens carry a watermark: 0 for the
    unwatermarked methods and at temperature 0), and the batch's ``batch``
    (first index), ``batch_seconds``, ``batch_tokens`` (all rows, padding
    included: the work done), ``batch_rows``.
    """
    prompts = np.asarray(prompts, np.int32)
    prompt_lengths = np.asarray(prompt_lengths, np.int32)
    n = prompts.shape[0]
    mesh = getattr(pair, "mesh", None)
    if mesh is not None and batch_size % mesh.shape[sharding.DATA]:
        raise ValueError(f"batch_size={batch_size} must be a multiple of the mesh's data axis "
                         f"({mesh.shape[sharding.DATA]}): each device holds the same number of rows")
    todo = pending_indices(store, run, n)
    if todo:
        config = run.config(max_new_tokens, eos_id=eos_id, pad_id=pair.pad_id, top_k=top_k)
        draft = (pair.draft, pair.draft_params) if config.spec.speculative else (None, None)
        progress = Progress(len(todo), run.name)
        compiled = False
        for start in range(0, len(todo), batch_size):
            idx = todo[start : start + batch_size]
            padded = idx + [idx[-1]] * (batch_size - len(idx))
            batch = (prompts[padded], prompt_lengths[padded], keys.text_keys(secret, padded, run=run.name),
                     sampling.text_rngs(seed, padded, run=run.name))
            if mesh is not None:
                batch = sharding.shard_batch(batch, mesh)
            args = (pair.target, pair.target_params, *batch, config)
            if not compiled:
                t0 = time.perf_counter()
                speculative.precompile(*args, draft=draft[0], draft_params=draft[1])
                log(f"{run.name}: compiled in {time.perf_counter() - t0:.1f}s")
                compiled = True
            t0 = time.perf_counter()
            res = speculative.generate(*args, draft=draft[0], draft_params=draft[1])
            jax.block_until_ready(res.tokens)
            seconds = time.perf_counter() - t0
            tokens, source, plen, length, steps, logprob, marked = (_host(x) for x in (
                res.tokens, res.source, res.prompt_lengths, res.lengths, res.num_steps, res.target_logprob,
                res.watermarked))
            ppl = res._replace(target_logprob=logprob, prompt_lengths=plen, lengths=length).log_perplexity()
            new_tokens = int(np.sum(length - plen))
            own_rows = set(sharding.local_rows(res.lengths)[0].tolist())
            records, own = [], []
            for row, i in enumerate(idx):
                p, e = int(plen[row]), int(length[row])
                records.append({
                    "id": record_id(run, i), "run": run.name, "index": int(i), "prompt_length": p,
                    "tokens": tokens[row, p:e].tolist(), "source": source[row, p:e].tolist(),
                    "num_steps": int(steps[row]), "aatps": (e - p) / max(int(steps[row]), 1),
                    "logppl": float(ppl[row]), "batch_seconds": seconds, "batch_tokens": new_tokens,
                    "batch": int(idx[0]), "batch_rows": len(padded),
                    # tokens drawn from a watermark stream from a distribution that was not one-hot
                    # (0 for unwatermarked methods and at temperature 0)
                    "watermarked_tokens": int(np.sum(marked[row, p:e])),
                })
                own.append(row in own_rows)
            store.add([r for r, mine in zip(records, own) if mine])
            store.note([r for r, mine in zip(records, own) if not mine])
            progress.update(len(idx))
    return [store.records[record_id(run, i)] for i in range(n)]


def _host(x: jax.Array) -> np.ndarray:
    """The whole of a (possibly multi-process) array on this host."""
    if getattr(x, "is_fully_addressable", True):
        return np.asarray(x)
    from jax.experimental import multihost_utils

    return np.asarray(multihost_utils.process_allgather(x, tiled=True))


GENERATIONS = "generations.jsonl"


def open_generations(output_dir: str, process_index: Optional[int] = None,
                     process_count: Optional[int] = None) -> JsonlStore:
    """The record store this process writes in ``output_dir`` (module doc).

    One process: ``generations.jsonl`` under the directory lock. Several:
    ``generations.<process_index>.jsonl`` under that process's own lock file.
    Either way the store also knows (:meth:`JsonlStore.note`) the records of
    every other ``generations*.jsonl`` in the directory, so a resumed run,
    single- or multi-process, regenerates nothing that any process wrote.
    """
    name = sharding.process_shard_name(GENERATIONS, process_index, process_count)
    lock = sharding.process_shard_name(storage.LOCK_NAME, process_index, process_count)
    store = JsonlStore(os.path.join(output_dir, name), lock_name=lock)
    for path in sorted(glob.glob(os.path.join(glob.escape(output_dir), "generations*.jsonl"))):
        if os.path.basename(path) != name:
            other = JsonlStore(path, lock=False)
            store.note(rec for key, rec in other.records.items() if key not in store.records)
    return store


def merge_generations(store: JsonlStore, output_dir: str) -> int:
    """Appends to ``output_dir/generations.jsonl`` every record ``store`` knows that the file lacks
    (the other processes' shards, or an earlier multi-process run's); returns how many.

    Call it from one process (index 0) after all have finished. Appending
    (never rewriting) keeps whatever the file holds, including lines it
    could not read; the shard files stay as they are.
    """
    path = os.path.join(output_dir, GENERATIONS)
    if os.path.realpath(path) == os.path.realpath(store.path):
        missing = [store.records[key] for key in sorted(store.noted)]
        target = store
    else:
        target = JsonlStore(path, lock=False)
        missing = [rec for key, rec in sorted(store.records.items()) if key not in target.records]
    if missing:
        target.add(missing)
    return len(missing)

