"""Generation runs for the experiments: one spec, many prompts, resumable records.

A *run* is one generation setting (:class:`RunSpec`: method, decoder,
lookahead K, temperature) applied to a prompt list. :func:`generate_run`
generates it through :func:`wmspec_jax.batching.generate_in_batches` (the
loop ``wmspec-generate`` uses too) and appends one JSON record per text to a
:class:`~wmspec_jax.storage.JsonlStore`; an interrupted run resumes where it
stopped, and a text's tokens do not depend on which batch it landed in:

* each (run, text i) pair has its own watermark keys,
  :func:`wmspec_jax.keys.text_keys` ``(secret, [i], run=run.name)``: calibration
  holds over texts (``docs/detection.md``, "keyed per text"), and two runs of
  one prompt are independent draws (Alg. 1 is deterministic given key and
  context, so a shared key would make the K = 2, 3, 4 rows largely the same
  texts). Neither the secret nor the keys are stored;
* each text's true randomness is :func:`wmspec_jax.sampling.text_rngs`
  ``(seed, [i], run=run.name)``;
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

Records are the text lines of :mod:`wmspec_jax.text_record`
(:func:`~wmspec_jax.text_record.generation_line`: format version, ``id``, ``run``,
the text's generated ids, their sources, steps, AATPS, LOGPPL read off the
loop's own target forwards, watermarked tokens, why the text stopped) with the
batch's fields (its wall time, PTT, measured after compiling ahead of time).
:func:`log_perplexity` computes LOGPPL with a separate forward pass: the
reference the loop's value is tested against.
"""

from __future__ import annotations

import dataclasses
import functools
import glob
import os
import warnings
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np

from wmspec_jax import batching, decoders, keys, prf, sampling, sharding, storage
from wmspec_jax import setting as setting_lib
from wmspec_jax import text_record
from wmspec_jax.lm import LanguageModel
from wmspec_jax.storage import JsonlStore, Progress

DECODER_KINDS = decoders.DECODER_NAMES


@dataclasses.dataclass(frozen=True)
class RunSpec:
    """One generation setting of an experiment: a name and a :class:`wmspec_jax.setting.Setting`.

    Attributes (the experiments' spelling of the setting):
      method: a :data:`wmspec_jax.speculative.METHODS` name (``basic``,
        ``standard``, ``pseudorandom`` = Alg. 1, ...).
      decoder: a :data:`wmspec_jax.decoders.DECODER_NAMES` name (the paper's experiments use
        ``"gumbel"`` and ``"synthid"``; the others take their default settings).
      lookahead: K (0 for non-speculative methods).
      temperature: applied to P, and to Q unless ``draft_temperature`` is given.
      num_layers: SynthID's m (ignored for Gumbel-max).
      drafts: the draft shape (:func:`wmspec_jax.multidraft.parse_shape`): ``"1"`` one
        chain (the paper's), ``"n"`` n chains, ``"3x2x1"`` a static tree (its depth is
        K); a trailing ``"d"`` draws siblings without replacement.
      draft_temperature: Q's temperature when it differs from ``temperature`` (None: the same;
        :class:`~wmspec_jax.setting.Setting`); the name then ends in ``-Q<temperature>``.
      draft_label: names the draft when an experiment compares drafts of one target (the name, and so
        the texts' keys, then end in ``@<label>``); "" (default): the pair's one draft.
      setting: the :class:`~wmspec_jax.setting.Setting` these spell (built and checked once).
    """

    method: str
    decoder: str
    lookahead: int
    temperature: float
    num_layers: int = 30
    drafts: str = "1"
    draft_temperature: Optional[float] = None
    draft_label: str = ""
    setting: setting_lib.Setting = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self):
        if self.decoder not in DECODER_KINDS:
            raise ValueError(f"decoder must be one of {DECODER_KINDS}, got {self.decoder!r}")
        if not isinstance(self.draft_label, str) or not all(c.isalnum() or c in "._-" for c in self.draft_label):
            raise ValueError(f"draft_label must be letters, digits, '.', '_' or '-', got {self.draft_label!r}")
        if not isinstance(self.drafts, str):
            raise ValueError(f"drafts must be a draft shape like '1', '3' or '3x2x1d', got {self.drafts!r}")
        object.__setattr__(self, "setting", setting_lib.Setting.from_shape(  # validates method / K / temperature
            self.method, decoders.WatermarkDecoder.from_name(self.decoder, self.num_layers), self.lookahead,
            self.drafts, temperature=self.temperature, draft_temperature=self.draft_temperature))
        spec = self.setting.spec
        if self.temperature == 0 and (spec.watermark_target or spec.watermark_draft):
            warnings.warn(f"run {self.name}: at temperature 0 every distribution is one-hot, so no watermark is "
                          "embedded (greedy decoding); its texts are not detectable", stacklevel=2)

    @property
    def name(self) -> str:
        name = f"{self.method}-{self.watermark_decoder.run_tag}-K{self.lookahead}-T{self.temperature:g}"
        name = name if self.drafts == "1" else f"{name}-D{self.drafts}"
        q = self.setting.draft_temperature
        name = name if q is None else f"{name}-Q{q:g}"
        return f"{name}@{self.draft_label}" if self.draft_label else name

    @property
    def siblings(self) -> int:
        """The most children of a node of the draft tree (1 for one chain): the sibling streams detection
        searches."""
        return self.setting.siblings

    @property
    def watermark_decoder(self) -> decoders.WatermarkDecoder:
        return self.setting.decoder

    def config(self, max_new_tokens: int, eos_id: Optional[int] = None, pad_id: int = 0,
               top_k: Optional[int] = None, context_width: int = prf.DEFAULT_CONTEXT_WIDTH):
        """The loop's :class:`~wmspec_jax.speculative.SpeculativeConfig` of this run with the experiment's
        budget, stop id, top-k and h."""
        setting = dataclasses.replace(self.setting, top_k=top_k, context_width=context_width)
        return setting.config(max_new_tokens, eos_id, pad_id)


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
    return text_record.record_id(run.name, index)


def _is_complete(store: JsonlStore, run: RunSpec, index: int) -> bool:
    """A stored record of (run, index) with every field (an incomplete one is generated again)."""
    return text_record.is_complete(store.records.get(record_id(run, index)), run.name, index)


def pending_indices(store: JsonlStore, run: RunSpec, num_texts: int) -> list[int]:
    """The text indices of ``run`` this process generates: those of ``range(num_texts)`` without a
    complete record in ``store``.

    Every process of a multi-process run gets the same list (each knows all
    records, :func:`open_generations`), so all run the same batches; which
    rows of a batch a process writes is decided by where they live
    (:func:`generate_run`).
    """
    return [i for i in range(num_texts) if not _is_complete(store, run, i)]


COMPILE_LOG_SECONDS = 0.5
"""A program found compiled (this process's cache; the speed table generates its runs in turns) takes
milliseconds and is not logged."""


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
      pair: a :class:`wmspec_jax.models.pairs.ModelPair`.
      prompts: int32[N, P] packed prompts; ``prompt_lengths`` int32[N].
      store: the experiment's record store (shared by runs; ids are
        ``"{run.name}/{i}"``).
      secret, seed: watermark secret (:class:`wmspec_jax.keys.Secret` or a
        str) and true-randomness seed (module doc).
      max_new_tokens, batch_size, eos_id, top_k: generation settings.

    Each record: :func:`wmspec_jax.text_record.generation_line` (format
    version, ``id, run``, ``index, prompt_length, tokens, source, num_steps,
    aatps, logppl, watermarked_tokens, stopped``) with the batch's
    :data:`~wmspec_jax.text_record.BATCH_FIELDS`: ``batch_seconds``,
    ``batch_tokens`` (all rows, padding included: the work done), ``batch``
    (first index), ``batch_rows``.
    """
    prompts = np.asarray(prompts, np.int32)
    prompt_lengths = np.asarray(prompt_lengths, np.int32)
    n = prompts.shape[0]
    todo = pending_indices(store, run, n)
    if todo:
        config = run.config(max_new_tokens, eos_id=eos_id, pad_id=pair.pad_id, top_k=top_k)
        progress = Progress(len(todo), run.name)
        batches = batching.generate_in_batches(
            pair.target, pair.target_params, prompts[todo], prompt_lengths[todo], todo, config,
            stream_keys=lambda idx: keys.text_keys(secret, idx, run=run.name),
            rngs=lambda idx: sampling.text_rngs(seed, idx, run=run.name), batch_size=batch_size,
            draft=pair.draft, draft_params=pair.draft_params, mesh=getattr(pair, "mesh", None),
            on_compiled=lambda seconds: seconds < COMPILE_LOG_SECONDS or log(f"{run.name}: compiled in {seconds:.1f}s"))
        for batch in batches:
            records = [text_record.generation_line(
                text, run.name, batch_seconds=batch.seconds, batch_tokens=batch.new_tokens,
                batch=batch.texts[0].index, batch_rows=batch.rows) for text in batch.texts]
            store.add([r for r, mine in zip(records, batch.local) if mine])
            store.note([r for r, mine in zip(records, batch.local) if not mine])
            progress.update(len(records))
    return [store.records[record_id(run, i)] for i in range(n)]


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


__all__ = ["DECODER_KINDS", "GENERATIONS", "RunSpec", "generate_run", "log_perplexity", "merge_generations",
           "open_generations", "pending_indices", "record_id"]
