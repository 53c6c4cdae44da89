"""Reading the command-line tools' inputs (text files, JSONL, stdin) and loading a tokenizer.

Every failure here is an :class:`InputError` with a message that names the
input: the tools print it and exit with status 2 (never a traceback, never
p = 1 for something that is not text).
"""

from __future__ import annotations

import io
import json
import os
from typing import IO, NamedTuple, Optional, Sequence

FORMATS = ("auto", "text", "jsonl")
JSONL_SUFFIXES = (".jsonl", ".ndjson")


class InputError(ValueError):
    """A bad input of a command-line tool (missing, binary, empty, malformed, bad tokenizer)."""


def refuse_output_among_inputs(output, inputs, consequence: str) -> None:
    """Raises InputError when ``output`` is one of ``inputs`` (by path or by file identity): writing it
    would ``consequence``."""
    if output is None:
        return
    for path in inputs:
        if path != "-" and os.path.exists(path) and (
                os.path.realpath(path) == os.path.realpath(output)
                or (os.path.exists(output) and os.path.samefile(path, output))):
            raise InputError(f"--output={output} is also an input: {consequence}; choose another --output")


class InputText(NamedTuple):
    """One text of the input.

    Attributes:
      text: the text.
      where: where it came from, for messages and the output
        (``"notes.txt"``, ``"stdin"``, ``"out.jsonl:12"``).
      record: the JSONL object it came from (``{}`` for plain text): its
        ``id``, ``run``, ``index`` and generation settings are used when present.
    """

    text: str
    where: str
    record: dict


def _decode(raw: bytes, where: str) -> str:
    if b"\x00" in raw:
        raise InputError(f"{where}: binary input (NUL bytes); give UTF-8 text, or JSONL with a text field")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError(f"{where}: binary input (not UTF-8 text: byte {e.start} is {raw[e.start:e.start + 1]!r})") \
            from None


def _jsonl_line(line: str, where: str, field: str) -> InputText:
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as e:
        raise InputError(f"{where}: not a JSON object ({e.msg}); JSONL needs one object per line") from None
    if not isinstance(obj, dict):
        raise InputError(f"{where}: a JSON {type(obj).__name__}, not an object")
    if field not in obj:
        raise InputError(f"{where}: no {field!r} field (fields: {sorted(obj)[:10]})")
    if not isinstance(obj[field], str):
        raise InputError(f"{where}: the {field!r} field is a {type(obj[field]).__name__}, not a string")
    _check_unicode(obj[field], where)
    return InputText(obj[field], where, obj)


def _check_unicode(text: str, where: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:  # JSON's "\ud800" escapes decode to lone surrogates
        raise InputError(f"{where}: the text is not valid Unicode (a lone surrogate at character {e.start})") \
            from None


def _jsonl(text: str, where: str, field: str, skipped: Optional[list]) -> list:
    out = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            out.append(_jsonl_line(line, f"{where}:{number}", field))
        except InputError as e:
            if skipped is None:
                raise
            skipped.append((f"{where}:{number}", str(e).split(": ", 1)[-1]))
    return out


def _looks_like_jsonl(text: str) -> bool:
    first = next((line for line in text.splitlines() if line.strip()), "")
    return first.lstrip().startswith("{")


def read_inputs(paths: Sequence[str], *, fmt: str = "auto", field: str = "text", unit: str = "document",
                stdin: Optional[IO[bytes]] = None, skipped: Optional[list] = None) -> list:
    """The texts of the inputs, in order.

    Args:
      paths: files; ``"-"`` or none at all: standard input.
      fmt: ``"jsonl"`` (one JSON object per line, the text in ``field``),
        ``"text"``, or ``"auto"``: JSONL for ``.jsonl`` / ``.ndjson`` files
        and for standard input whose first line starts with ``{``.
      field: the JSONL field holding the text.
      unit: a plain-text input is one text (``"document"``) or one text per
        non-empty line (``"line"``, the prompts of ``wmspec-generate``).
      stdin: a binary stream for ``"-"`` (default ``sys.stdin.buffer``).
      skipped: a list: a JSONL line that is not an object with a string
        ``field`` (or whose text is not valid Unicode) is skipped and
        ``(where, why)`` appended to it, instead of raising.

    Raises:
      InputError: a missing or unreadable file, binary input, malformed
        JSONL (without ``skipped``), or no non-empty text at all ("empty input").
    """
    import sys

    if fmt not in FORMATS:
        raise InputError(f"--input_format must be one of {FORMATS}, got {fmt!r}")
    texts: list = []
    for path in list(paths) or ["-"]:
        if path == "-":
            where = "stdin"
            stream = stdin if stdin is not None else sys.stdin.buffer
            if stdin is None and sys.stdin.isatty():
                raise InputError("no input: give text files (or JSONL) as arguments / --input, or pipe text into stdin")
            raw = stream.read()
        else:
            where = path
            if os.path.isdir(path):
                raise InputError(f"{path}: a directory, not a text file")
            try:
                with open(path, "rb") as f:
                    raw = f.read()
            except OSError as e:
                raise InputError(f"{path}: cannot read ({e.strerror})") from None
        text = _decode(raw, where)
        jsonl = fmt == "jsonl" or (fmt == "auto" and (where.lower().endswith(JSONL_SUFFIXES)
                                                     or (where == "stdin" and _looks_like_jsonl(text))))
        if jsonl:
            texts += _jsonl(text, where, field, skipped)
        elif unit == "line":
            texts += [InputText(line.strip(), f"{where}:{n}", {}) for n, line in enumerate(text.splitlines(), 1)
                      if line.strip()]
        else:
            texts.append(InputText(text, where, {}))
    if not any(t.text.strip() for t in texts):
        what = "prompts" if unit == "line" else "texts"
        bad = f" ({len(skipped)} unreadable line(s) skipped)" if skipped else ""
        raise InputError(f"empty input: no {what} in {', '.join(list(paths) or ['stdin'])}{bad}")
    return texts


def load_tokenizer(spec: str):
    """``"builtin"`` (the built-in pair's SmolLM2 tokenizer) or a local Hugging Face directory."""
    from wmspec_jax.models import hf

    if spec == "builtin":
        from wmspec_jax.models import builtin

        try:
            return builtin.builtin_tokenizer()
        except hf.CheckpointError as e:
            raise InputError(f"--tokenizer=builtin: {e}") from None
    if spec == "toy":
        raise InputError("--tokenizer=toy: the toy pair has no text tokenizer (use builtin or a local directory)")
    if not os.path.isdir(spec):
        raise InputError(f"--tokenizer={spec}: tokenizer directory not found (give 'builtin' or a local Hugging "
                         "Face checkpoint / tokenizer directory)")
    try:
        return hf.load_tokenizer(spec)
    except hf.CheckpointError as e:
        raise InputError(f"--tokenizer={spec}: {e}") from None


def vocab_size(tokenizer) -> int:
    """The number of token ids the tokenizer can produce (every id it emits is below it)."""
    return int(len(tokenizer))


def write_lines(stream: IO[str], lines: Sequence[str]) -> None:
    stream.write("".join(line + "\n" for line in lines))
    stream.flush()


def is_terminal(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, io.UnsupportedOperation):
        return False


__all__ = ["FORMATS", "InputError", "InputText", "is_terminal", "load_tokenizer", "read_inputs", "vocab_size",
           "write_lines"]
