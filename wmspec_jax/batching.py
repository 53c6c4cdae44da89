"""Many prompts through the loop in fixed-size batches: the one path from prompts to generated texts.

:func:`generate_in_batches` is what the experiments' runs
(:func:`wmspec_jax.lab.runs.generate_run`) and ``wmspec-generate`` call; it
yields one :class:`Batch` of :class:`GeneratedText` per call of
:func:`wmspec_jax.speculative.generate`:

* the last partial batch is padded with copies of its last prompt to the
  batch size (static shapes: one compilation) and the copies are dropped;
* each text's watermark keys and true randomness come from its *index*
  (callables ``stream_keys(indices)`` and ``rngs(indices)``), never from its
  batch, so a text's tokens do not depend on which batch it landed in nor on
  the batch size (``docs/performance.md``, "Rows and batches", says where
  that holds bit for bit);
* the loop is compiled ahead of the first batch
  (:func:`wmspec_jax.speculative.precompile`), so :attr:`Batch.seconds` is
  the generation alone (PTT, Tables 1-2);
* under a mesh each batch is split over its ``data`` axis
  (:func:`wmspec_jax.sharding.shard_batch`) and :attr:`Batch.local` says
  which texts this process's devices hold (the ones it writes).

:class:`GeneratedText` is the one typed record of a generated text: the
experiments' ``generations.jsonl`` lines and ``wmspec-generate``'s output
lines are its fields (:meth:`GeneratedText.record`) plus the writer's own
(run, batch timing; prompt, text, settings), and detection and the
robustness experiment read it back with :meth:`GeneratedText.from_record`.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Callable, Iterator, Optional, Sequence

import jax
import numpy as np

from wmspec_jax import sharding, sources, speculative

FIELDS = ("index", "prompt_length", "tokens", "source", "num_steps", "aatps", "logppl", "watermarked_tokens",
          "stopped")
"""The fields :meth:`GeneratedText.record` writes, in order."""

STOPPED = ("eos", "length")


@dataclasses.dataclass(frozen=True)
class GeneratedText:
    """One generated text.

    Attributes:
      index: the text's index (its keys and randomness derive from it).
      prompt_length: tokens of the (packed) prompt before the generated ones.
      tokens: the generated ids, a stop token included.
      source: per generated token, its ``wmspec_jax.sources.SOURCE_*`` code
        (accepted draft, residual, target / bonus).
      num_steps: loop steps that produced the text (AATPS = tokens / steps).
      logppl: mean −log P(w_t | w_<t) of the generated tokens under the target
        at temperature 1 (LOGPPL, Tables 1-2), read off the loop's own target
        forwards; 0 for an empty text.
      watermarked_tokens: tokens drawn from a watermark stream from a
        distribution that was not one-hot (0 for unwatermarked methods and at
        temperature 0).
      stopped: ``"eos"`` (the last token is a stop id) or ``"length"``.
      candidate: per generated token, the sibling it was drawn from under
        multi-draft sampling (``GenerationResult.candidate``; what the Oracle
        detectors need); empty for one chain.
    """

    index: int
    prompt_length: int
    tokens: tuple
    source: tuple
    num_steps: int
    logppl: float
    watermarked_tokens: int
    stopped: str
    candidate: tuple = ()

    @property
    def aatps(self) -> float:
        """Accepted tokens per step (AATPS, Tables 1-2)."""
        return len(self.tokens) / max(self.num_steps, 1)

    @property
    def draft_fraction(self) -> float:
        """Share of the tokens that are accepted drafts (0 for an empty text)."""
        if not self.tokens:
            return 0.0
        return float(np.mean(np.asarray(self.source) == sources.SOURCE_DRAFT))

    def record(self) -> dict:
        """The JSON fields of the text (:data:`FIELDS`; ``candidate`` too for a multi-draft text)."""
        rec = {"index": self.index, "prompt_length": self.prompt_length, "tokens": list(self.tokens),
               "source": list(self.source), "num_steps": self.num_steps, "aatps": self.aatps,
               "logppl": self.logppl, "watermarked_tokens": self.watermarked_tokens, "stopped": self.stopped}
        if self.candidate:
            rec["candidate"] = list(self.candidate)
        return rec

    @classmethod
    def from_record(cls, rec: dict) -> "GeneratedText":
        """The text of a saved record (extra fields ignored). Raises ``ValueError`` naming a field
        that is missing or of the wrong type."""
        def need(name, kind):
            value = rec.get(name)
            if not isinstance(value, kind) or isinstance(value, bool):
                raise ValueError(f"record {rec.get('id', rec.get('index'))!r}: field {name!r} missing or not "
                                 f"{'a list' if kind is list else 'a number'}")
            return value

        tokens, source = need("tokens", list), need("source", list)
        if len(tokens) != len(source):
            raise ValueError(f"record {rec.get('id', rec.get('index'))!r}: {len(tokens)} tokens but "
                             f"{len(source)} sources")
        stopped = rec.get("stopped", "length")
        if stopped not in STOPPED:
            raise ValueError(f"record {rec.get('id', rec.get('index'))!r}: stopped must be one of {STOPPED}")
        candidate = rec.get("candidate") or []
        if not isinstance(candidate, list) or (candidate and len(candidate) != len(tokens)) or not all(
                isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in candidate):
            raise ValueError(f"record {rec.get('id', rec.get('index'))!r}: candidate must be a list of one "
                             "sibling index >= 0 per token")
        return cls(index=need("index", int), prompt_length=need("prompt_length", int),
                   tokens=tuple(int(t) for t in tokens), source=tuple(int(s) for s in source),
                   num_steps=need("num_steps", int), logppl=float(need("logppl", (int, float))),
                   watermarked_tokens=int(rec.get("watermarked_tokens", 0)), stopped=stopped,
                   candidate=tuple(candidate))


@dataclasses.dataclass(frozen=True)
class Batch:
    """One call of the loop.

    Attributes:
      texts: the batch's texts, padding dropped, in the order of their indices.
      local: per text, whether this process's devices hold its row (all true
        without a multi-process mesh).
      seconds: wall time of the compiled generation call.
      new_tokens: tokens generated by all rows, padding included (the work done).
      rows: the batch size, padding included.
    """

    texts: tuple
    local: tuple
    seconds: float
    new_tokens: int
    rows: int


def host_array(x) -> np.ndarray:
    """The whole of a (possibly multi-process) array on this host."""
    if getattr(x, "is_fully_addressable", True):
        return np.asarray(x)
    from jax.experimental import multihost_utils

    return np.asarray(multihost_utils.process_allgather(x, tiled=True))


def _texts(res, indices: Sequence[int], stop_ids, multi_draft: bool = False) -> list:
    tokens, source, plen, length, steps, logprob, marked = (host_array(x) for x in (
        res.tokens, res.source, res.prompt_lengths, res.lengths, res.num_steps, res.target_logprob, res.watermarked))
    ppl = res._replace(target_logprob=logprob, prompt_lengths=plen, lengths=length).log_perplexity()
    candidate = host_array(res.candidate) if multi_draft else None
    stops = set(int(s) for s in stop_ids)
    texts = []
    for row, i in enumerate(indices):
        p, e = int(plen[row]), int(length[row])
        gen = tuple(int(t) for t in tokens[row, p:e])
        texts.append(GeneratedText(
            index=int(i), prompt_length=p, tokens=gen, source=tuple(int(s) for s in source[row, p:e]),
            num_steps=int(steps[row]), logppl=float(ppl[row]), watermarked_tokens=int(np.sum(marked[row, p:e])),
            stopped="eos" if gen and gen[-1] in stops else "length",
            candidate=() if candidate is None else tuple(int(c) for c in candidate[row, p:e])))
    return texts


def generate_in_batches(
    target,
    target_params,
    prompts: np.ndarray,
    prompt_lengths: np.ndarray,
    indices: Sequence[int],
    config: speculative.SpeculativeConfig,
    *,
    stream_keys: Callable[[list], object],
    rngs: Callable[[list], jax.Array],
    batch_size: int,
    draft=None,
    draft_params=None,
    mesh=None,
    on_compiled: Optional[Callable[[float], None]] = None,
) -> Iterator[Batch]:
    """Generates text ``indices[j]`` from prompt row ``j``, ``batch_size`` rows per call (module doc).

    Args:
      target, target_params, draft, draft_params, config: as
        :func:`wmspec_jax.speculative.generate` (the draft is passed only to
        speculative methods).
      prompts: int32[N, P] packed prompts; ``prompt_lengths``: int32[N];
        ``indices``: N text indices (distinct).
      stream_keys: indices -> :class:`wmspec_jax.keys.StreamKeys` ``[B]`` (or
        anything ``generate`` accepts as keys for B rows).
      rngs: indices -> ``B`` ``jax.random`` keys (e.g.
        :func:`wmspec_jax.sampling.text_rngs`).
      mesh: optional (``data``, ``model``) mesh; ``batch_size`` must be a
        multiple of its ``data`` axis.
      on_compiled: called with the compilation's seconds before the first batch.

    Yields:
      one :class:`Batch` per call, in the order of ``indices``.
    """
    prompts = np.asarray(prompts, np.int32)
    prompt_lengths = np.asarray(prompt_lengths, np.int32)
    indices = [int(i) for i in indices]
    if prompts.shape[0] != len(indices) or prompt_lengths.shape != (len(indices),):
        raise ValueError(f"{len(indices)} indices for prompts {prompts.shape} and lengths {prompt_lengths.shape}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if mesh is not None and batch_size % mesh.shape[sharding.DATA]:
        raise ValueError(f"batch_size={batch_size} must be a multiple of the mesh's data axis "
                         f"({mesh.shape[sharding.DATA]}): each device holds the same number of rows")
    if not indices:
        return
    if not config.spec.speculative:
        draft, draft_params = None, None
    compiled = False
    for start in range(0, len(indices), batch_size):
        idx = indices[start:start + batch_size]
        pad = batch_size - len(idx)
        rows = list(range(start, start + len(idx))) + [start + len(idx) - 1] * pad
        padded = idx + [idx[-1]] * pad  # static shapes: one compilation
        batch = (prompts[rows], prompt_lengths[rows], stream_keys(padded), rngs(padded))
        if mesh is not None:
            batch = sharding.shard_batch(batch, mesh)
        args = (target, target_params, *batch, config)
        if not compiled:
            t0 = time.perf_counter()
            speculative.precompile(*args, draft=draft, draft_params=draft_params)
            if on_compiled is not None:
                on_compiled(time.perf_counter() - t0)
            compiled = True
        t0 = time.perf_counter()
        res = speculative.generate(*args, draft=draft, draft_params=draft_params)
        jax.block_until_ready(res.tokens)
        seconds = time.perf_counter() - t0
        local_rows = set(sharding.local_rows(res.lengths)[0].tolist())
        new_tokens = int(np.sum(host_array(res.lengths) - host_array(res.prompt_lengths)))
        yield Batch(texts=tuple(_texts(res, idx, config.stop_ids, config.draft_tree is not None)),
                    local=tuple(row in local_rows for row in range(len(idx))),
                    seconds=seconds, new_tokens=new_tokens, rows=batch_size)
