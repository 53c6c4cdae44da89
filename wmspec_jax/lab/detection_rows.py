"""The detection protocol's inputs: prompt + text rows of generated and human texts, split train / test.

:func:`texts_from_records` and :func:`texts_from_human` build the dicts :func:`wmspec_jax.lab.evaluation.evaluate`
scores (token rows with their generation starts, sources and sibling candidates, keys, indices);
:func:`split_train_test` gives the lowest indices to training (the protocol in
:mod:`wmspec_jax.lab.evaluation`).
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Sequence

import numpy as np

from wmspec_jax import detect, text_record


@dataclasses.dataclass(frozen=True)
class TextRows:
    """Prompt + text rows of one set of texts for detection: the lab's one typed batch.

    The statistics take it in place of token ids + lengths + starts
    (``detect.gumbel_statistics(rows, rows.keys, vocab_size=V)``), as they take a generation's
    :class:`wmspec_jax.detect.GenerationRecords`.

    Attributes:
      tokens: int32[N, L] prompt + text, right-padded.
      lengths, starts: int32[N] each row's end and generation start (the repeated-context rule of
        generation).
      source: int8[N, L] each generated token's ``SOURCE_*`` (−1 outside generated tokens).
      candidate: int8[N, L] each token's sibling under multi-draft sampling, else 0.
      keys: :class:`wmspec_jax.keys.StreamKeys` of the rows (the keys detection scores them with).
      indices: int[N] the texts' indices.
      siblings: the most children a node of the generation's draft tree had (1: one chain).
      run: the generating run's name where a set holds one run's texts (multi-draft parts), else None.
      intact: bool[N, L] after edits, the generated tokens still in their original context; None unedited.
    """

    tokens: np.ndarray
    lengths: np.ndarray
    starts: np.ndarray
    source: np.ndarray
    candidate: np.ndarray
    keys: object
    indices: np.ndarray
    siblings: int = 1
    run: Optional[str] = None
    intact: Optional[np.ndarray] = None

    def __len__(self) -> int:
        return len(self.indices)

    def take(self, rows) -> "TextRows":
        """The rows ``rows`` (indices or a boolean mask), keys included."""
        rows = np.asarray(rows)
        if rows.dtype == bool:
            rows = np.flatnonzero(rows)
        arrays = {f: getattr(self, f)[rows] for f in ("tokens", "lengths", "starts", "source", "candidate", "indices")}
        intact = None if self.intact is None else self.intact[rows]
        return dataclasses.replace(self, **arrays, keys=self.keys[rows], intact=intact)

    def replace(self, **changes) -> "TextRows":
        return dataclasses.replace(self, **changes)



def texts_from_records(records: Sequence, prompts: np.ndarray, keys):
    """Rebuilds prompt + generated rows for detection.

    Args:
      records: the texts (:class:`wmspec_jax.text_record.GeneratedText`) or their
        saved records (:func:`wmspec_jax.lab.runs.generate_run`).
      prompts: int32[N, P] the experiment's packed prompts.
      keys: :class:`wmspec_jax.keys.StreamKeys` of the records' texts, in
        the records' order (the keys detection scores them with).

    Returns:
      :class:`TextRows`.
    """
    read = text_record.GeneratedText.from_record
    texts = [r if isinstance(r, text_record.GeneratedText) else read(r) for r in records]
    return _detection_rows([(t.index, t.prompt_length, t.tokens, t.source, t.candidate) for t in texts], prompts,
                           keys)


def _detection_rows(rows: Sequence[tuple], prompts: np.ndarray, keys) -> TextRows:
    """The :class:`TextRows` of (index, prompt length, tokens, source, candidate) rows."""
    n = len(rows)
    if len(keys) != n:
        raise ValueError(f"{len(keys)} keys for {n} records")
    width = max(p + len(gen) for _, p, gen, _, _ in rows)
    tokens = np.zeros((n, width), np.int32)
    source = np.full((n, width), -1, np.int8)
    candidate = np.zeros((n, width), np.int8)
    lengths, starts = np.zeros(n, np.int32), np.zeros(n, np.int32)
    for row, (index, p, gen, src, cand) in enumerate(rows):
        tokens[row, :p] = prompts[index, :p]
        tokens[row, p : p + len(gen)] = gen
        source[row, p : p + len(gen)] = src
        if len(cand):
            candidate[row, p : p + len(gen)] = cand
        lengths[row], starts[row] = p + len(gen), p
    indices = np.array([row[0] for row in rows])
    return TextRows(tokens, lengths, starts, source, candidate, keys, indices)


def texts_from_human(prompts: np.ndarray, prompt_lengths: np.ndarray, human_ids: Sequence[Sequence[int]],
                     indices: Sequence[int], keys, draft_fraction: float, rng):
    """Prompt + human-text rows (the human negatives) as :class:`TextRows`.

    Args:
      prompts, prompt_lengths: the experiment's packed prompts.
      human_ids: token ids of the human text of each prompt (all prompts).
      indices: the prompts to use (each must have a non-empty human text).
      keys: their StreamKeys; ``draft_fraction``, ``rng``: the random
        sources given to the Oracle detectors (no records exist).
    """
    rows = [(int(i), int(prompt_lengths[int(i)]), list(human_ids[int(i)]), [0] * len(human_ids[int(i)]), ())
            for i in indices]
    texts = _detection_rows(rows, prompts, keys)
    return texts.replace(source=np.asarray(detect.pseudo_source(texts.source >= 0, draft_fraction, rng)))


def with_human(human_ids: Sequence[Sequence[int]], indices: Sequence[int]) -> list:
    """The indices whose human text is non-empty."""
    return [int(i) for i in indices if len(human_ids[int(i)]) > 0]


def split_train_test(records: Sequence[dict], num_train: Optional[int] = None) -> tuple[list, list]:
    """(train, test): the ``num_train`` lowest indices train (default: half), the rest test.

    Both parts must hold at least 2 texts (SynthID's detectors hold out a
    quarter of the training part for validation).
    """
    records = sorted(records, key=lambda r: r["index"])
    n_train = len(records) // 2 if num_train is None else int(num_train)
    if n_train < 2 or len(records) - n_train < 2:
        raise ValueError(f"need at least 2 training and 2 test texts, got {len(records)} texts with "
                         f"{n_train} for training")
    return list(records[:n_train]), list(records[n_train:])


__all__ = ["TextRows", "split_train_test", "texts_from_human", "texts_from_records", "with_human"]
