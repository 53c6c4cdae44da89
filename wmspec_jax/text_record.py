"""The one JSONL line of a generated text: its fields, its format version, its writer and its reader.

Every generated text that leaves the loop — an experiment's ``generations.jsonl``
(:func:`wmspec_jax.lab.runs.generate_run`) and ``wmspec-generate``'s output — is one line built by
:func:`generation_line`, and every reader of such a line goes through :func:`check_format` (the
experiments' resume, ``wmspec-generate``'s resume, ``wmspec-detect``'s line reader) and
:meth:`GeneratedText.from_record` (the typed text). A line is

* ``format_version`` (:data:`FORMAT_VERSION`): lines without it were written before the field existed
  and have format 1 — the same fields, still read; a line of a newer format than this package reads is
  refused with a message naming the line, never half-read;
* ``id`` (``"{run}/{index}"``) and ``run``;
* the text's own fields (:data:`TEXT_FIELDS`, and ``candidate`` under multi-draft sampling);
* the writer's: the experiments add the batch's timing (:data:`BATCH_FIELDS`), ``wmspec-generate`` the
  prompt, the decoded text and the settings of the run (:data:`TOOL_FIELDS`, and the settings,
  ``docs/tools.md``).

:data:`GENERATION_MARKERS` are the fields that make a line a generation record (whose keys and settings
matter to detection) rather than just a ``{"text": ...}``.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import numpy as np

from wmspec_jax import sources

FORMAT_FIELD = "format_version"
FORMAT_VERSION = 3
"""3: a line may carry ``key_sequence`` (streams keyed by a key sequence, :mod:`wmspec_jax.key_sequence`,
which a reader of format 2 would score as keyed by context); 2: lines carry ``format_version``; 1: the
lines written before (no such field; otherwise the same)."""

TEXT_FIELDS = ("index", "prompt_length", "tokens", "source", "num_steps", "aatps", "logppl", "watermarked_tokens",
               "stopped")
"""The fields :meth:`GeneratedText.record` writes, in order (``candidate`` follows under multi-draft sampling)."""

BATCH_FIELDS = ("batch_seconds", "batch_tokens", "batch", "batch_rows")
"""The experiments' per-line batch fields: the batch's wall time, its tokens (padding rows included: the
work done), its first index and its rows."""

TOOL_FIELDS = ("input", "prompt", "text", "num_tokens", "draft_fraction")
"""``wmspec-generate``'s per-line fields beside the settings of its run."""

GENERATION_MARKERS = (FORMAT_FIELD, "run", "index", "tokens", "key_fingerprint", "decoder", "prf_version", "method")
"""Fields that mark a line as a generation record (whose keys matter), not just a text."""

STOPPED = ("eos", "length")


class FormatError(ValueError):
    """A line of a text-record format this package does not read."""


def record_id(run: str, index: int) -> str:
    """The ``id`` of text ``index`` of run ``run``."""
    return f"{run}/{index}"


def check_format(rec: dict, where: Optional[str] = None) -> int:
    """The format version of a line (1 for a line without one). Raises :class:`FormatError` naming the line
    (``where``, else its id) for a version that is not an int or is newer than :data:`FORMAT_VERSION`."""
    version = rec.get(FORMAT_FIELD, 1)
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise FormatError(f"{where or rec.get('id')!s}: field {FORMAT_FIELD!r} must be an int >= 1, "
                          f"got {str(version)[:40]!r}")
    if version > FORMAT_VERSION:
        raise FormatError(f"{where or rec.get('id')!s}: the line has {FORMAT_FIELD} {version}, written by a newer "
                          f"wmspec_jax; this one reads versions 1 to {FORMAT_VERSION} (upgrade the package)")
    return version


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
        """The text's own fields of its line (:data:`TEXT_FIELDS`; ``candidate`` too for a multi-draft text)."""
        rec = {"index": self.index, "prompt_length": self.prompt_length, "tokens": list(self.tokens),
               "source": list(self.source), "num_steps": self.num_steps, "aatps": self.aatps,
               "logppl": self.logppl, "watermarked_tokens": self.watermarked_tokens, "stopped": self.stopped}
        if self.candidate:
            rec["candidate"] = list(self.candidate)
        return rec

    @classmethod
    def from_record(cls, rec: dict) -> "GeneratedText":
        """The text of a saved line (other fields ignored). Raises :class:`FormatError` for a newer format
        and ``ValueError`` naming a field that is missing or of the wrong type."""
        check_format(rec)
        name_of = rec.get("id", rec.get("index"))

        def need(name, kind):
            value = rec.get(name)
            if not isinstance(value, kind) or isinstance(value, bool):
                raise ValueError(f"record {name_of!r}: field {name!r} missing or not "
                                 f"{'a list' if kind is list else 'a number'}")
            return value

        tokens, source = need("tokens", list), need("source", list)
        if len(tokens) != len(source):
            raise ValueError(f"record {name_of!r}: {len(tokens)} tokens but {len(source)} sources")
        stopped = rec.get("stopped", "length")
        if stopped not in STOPPED:
            raise ValueError(f"record {name_of!r}: stopped must be one of {STOPPED}")
        candidate = rec.get("candidate") or []
        if not isinstance(candidate, list) or (candidate and len(candidate) != len(tokens)) or not all(
                isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in candidate):
            raise ValueError(f"record {name_of!r}: candidate must be a list of one sibling index >= 0 per token")
        return cls(index=need("index", int), prompt_length=need("prompt_length", int),
                   tokens=tuple(int(t) for t in tokens), source=tuple(int(s) for s in source),
                   num_steps=need("num_steps", int), logppl=float(need("logppl", (int, float))),
                   watermarked_tokens=int(rec.get("watermarked_tokens", 0)), stopped=stopped,
                   candidate=tuple(candidate))


def generation_line(generated: GeneratedText, run: str, /, **fields) -> dict:
    """The JSONL line of ``generated`` in run ``run``: format version, id, run, the text's fields, then the
    writer's ``fields`` (:data:`BATCH_FIELDS`, or :data:`TOOL_FIELDS` — ``text`` among them — and the run's
    settings), which may not replace any of the former."""
    line = {FORMAT_FIELD: FORMAT_VERSION, "id": record_id(run, generated.index), "run": run, **generated.record()}
    clash = sorted(set(fields) & set(line))
    if clash:
        raise ValueError(f"a writer's fields may not replace the text record's own: {clash}")
    line.update(fields)
    return line


def is_complete(rec: Optional[dict], run: str, index: int, fields=BATCH_FIELDS) -> bool:
    """Whether ``rec`` is a readable line of text ``index`` of ``run`` with its text fields and ``fields``
    (a line missing any is generated again; one of a newer format raises :class:`FormatError`)."""
    if rec is None:
        return False
    check_format(rec)
    # the first seven text fields are in every line ever written; watermarked_tokens and stopped came later
    # and read with defaults (GeneratedText.from_record), so a line without them is complete
    return (all(k in rec for k in ("id", "run") + TEXT_FIELDS[:7] + tuple(fields)) and rec["run"] == run
            and rec["index"] == index and isinstance(rec["tokens"], list) and isinstance(rec["source"], list)
            and len(rec["tokens"]) == len(rec["source"]))


__all__ = ["BATCH_FIELDS", "FORMAT_FIELD", "FORMAT_VERSION", "FormatError", "GENERATION_MARKERS", "GeneratedText",
           "STOPPED", "TEXT_FIELDS", "TOOL_FIELDS", "check_format", "generation_line", "is_complete", "record_id"]
