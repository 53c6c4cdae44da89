"""Reading the command-line tools' inputs (text files, JSONL, stdin) and loading a tokenizer.

Every failure here is an :class:`InputError` with a message that names the
input: the tools print it and exit with status 2 (never a traceback, never
p = 1 for something that is not text).
"""

from __future__ import annotations

import io
import itertools
import json
import os
from typing import IO, Iterator, NamedTuple, Optional, Sequence

from wmspec_jax.textnorm import normalize_text, strip_bom

FORMATS = ("auto", "text", "jsonl")
JSONL_SUFFIXES = (".jsonl", ".ndjson")


class InputError(ValueError):
    """A bad input of a command-line tool (missing, binary, empty, malformed, bad tokenizer)."""


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
    except RecursionError:  # the parser recurses once per level: a line nested thousands deep
        raise InputError(f"{where}: nested too deeply to read (more levels of arrays or objects than any "
                         "record has)") from None
    if not isinstance(obj, dict):
        raise InputError(f"{where}: a JSON {type(obj).__name__}, not an object")
    if field not in obj:
        raise InputError(f"{where}: no {field!r} field (fields: {sorted(obj)[:10]})")
    if not isinstance(obj[field], str):
        raise InputError(f"{where}: the {field!r} field is a {type(obj[field]).__name__}, not a string")
    _check_unicode(obj[field], where)
    return InputText(normalize_text(obj[field]), where, obj)


def _check_unicode(text: str, where: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:  # JSON's "\ud800" escapes decode to lone surrogates
        raise InputError(f"{where}: the text is not valid Unicode (a lone surrogate at character {e.start})") \
            from None


def _jsonl_lines(lines, where: str, field: str, skipped: Optional[list]):
    """The texts of JSONL ``lines`` (an iterable of (line number, str, or the InputError of a line that
    could not be decoded))."""
    for number, line in lines:
        try:
            if isinstance(line, InputError):
                raise line
            if not line.strip():
                continue
            yield _jsonl_line(line, f"{where}:{number}", field)
        except InputError as e:
            if skipped is None:
                raise
            skipped.append((f"{where}:{number}", str(e).split(": ", 1)[-1]))


def _is_json_object(line: str) -> bool:
    line = line.strip()
    if not line.startswith("{"):
        return False
    try:
        return isinstance(json.loads(line), dict)
    except (json.JSONDecodeError, RecursionError):
        return False


def _is_jsonl(first: str, where: str, fmt: str) -> bool:
    """JSONL or plain text: forced by ``fmt``, else by content: the first non-empty line ``first``."""
    if fmt != "auto":
        return fmt == "jsonl"
    # a file named JSONL stays JSONL when its first line is damaged: that line is skipped and reported,
    # never a reason to read the records after it as one plain text
    return _is_json_object(first) or _jsonl_name(where)


def _jsonl_name(where: str) -> bool:
    return where.lower().endswith(JSONL_SUFFIXES)


def _decoded_lines(raw_lines, where: str, *, per_line: bool = False):
    """(line number, str) of (line number, bytes) pairs (``\n`` ends a line; a BOM opening the first
    dropped). A NUL or bad UTF-8 is binary input: an InputError, or with ``per_line`` (the lines of JSONL
    after its first record, each a record of its own) that error in the line's place."""
    for number, raw in raw_lines:
        try:
            text = _decode(raw, f"{where}:{number}" if number > 1 else where)
        except InputError as e:
            if not per_line:
                raise
            yield number, e
            continue
        yield number, text if number > 1 else strip_bom(text)


def _open_input(path: str, stdin: Optional[IO[bytes]]):
    """(binary stream, where, close it?) of one input."""
    import sys

    if path == "-":
        stream = stdin if stdin is not None else sys.stdin.buffer
        if stdin is None and sys.stdin.isatty():
            raise InputError("no input: give text files (or JSONL) as arguments / --input, or pipe text into stdin")
        return stream, "stdin", False
    if os.path.isdir(path):
        raise InputError(f"{path}: a directory, not a text file")
    try:
        return open(path, "rb"), path, True
    except OSError as e:
        raise InputError(f"{path}: cannot read ({e.strerror})") from None


def iter_inputs(paths: Sequence[str], *, fmt: str = "auto", field: str = "text", unit: str = "document",
                stdin: Optional[IO[bytes]] = None, skipped: Optional[list] = None) -> Iterator[InputText]:
    """The texts of the inputs, in order, read as they are needed (a JSONL file line by line, so a
    large file is never held in memory); the arguments as :func:`read_inputs`, which also checks that
    there was some text."""
    if fmt not in FORMATS:
        raise InputError(f"--input_format must be one of {FORMATS}, got {fmt!r}")
    for path in list(paths) or ["-"]:
        stream, where, close = _open_input(path, stdin)
        try:
            raw_lines = enumerate(stream, start=1)
            # JSONL by flag or by name: even its first line is a record of its own, skipped when undecodable
            named_jsonl = skipped is not None and (fmt == "jsonl" or (fmt == "auto" and _jsonl_name(where)))
            lines = _decoded_lines(raw_lines, where, per_line=named_jsonl)
            head = []  # the lines up to the first non-empty one decide the format
            try:
                for number, line in lines:
                    head.append((number, line))
                    if isinstance(line, InputError) or line.strip():
                        break
            except OSError as e:
                raise InputError(f"{where}: cannot read ({e.strerror})") from None
            first = head[-1][1] if head else ""
            if named_jsonl or _is_jsonl(first, where, fmt):
                # one undecodable record is skipped like any unreadable line, not the end of the input
                rest = _decoded_lines(raw_lines, where, per_line=skipped is not None)
                yield from _jsonl_lines(itertools.chain(head, rest), where, field, skipped)
            elif unit == "line":
                for number, line in itertools.chain(head, lines):
                    for piece in map(normalize_text, line.splitlines()):  # other Unicode line breaks too
                        if piece:
                            yield InputText(piece, f"{where}:{number}", {})
            else:
                text = "".join(line for _, line in itertools.chain(head, lines))
                yield InputText(normalize_text(text), where, {})
        finally:
            if close:
                stream.close()


def read_inputs(paths: Sequence[str], *, fmt: str = "auto", field: str = "text", unit: str = "document",
                stdin: Optional[IO[bytes]] = None, skipped: Optional[list] = None) -> list:
    """The texts of the inputs, in order, each normalised (:func:`wmspec_jax.textnorm.normalize_text`;
    a leading byte-order mark of a file or of standard input is dropped before anything else).

    Args:
      paths: files; ``"-"`` or none at all: standard input.
      fmt: ``"jsonl"`` (one JSON object per line, the text in ``field``),
        ``"text"``, or ``"auto"``: by content, whatever the name: JSONL when
        the first non-empty line is a JSON object, else plain text; a file
        named ``.jsonl`` / ``.ndjson`` is JSONL whatever its first line (a
        damaged line is skipped and reported, the records after it kept).
      field: the JSONL field holding the text.
      unit: a plain-text input is one text (``"document"``) or one text per
        non-empty line (``"line"``, the prompts of ``wmspec-generate``).
      stdin: a binary stream for ``"-"`` (default ``sys.stdin.buffer``).
      skipped: a list: a JSONL line that is not an object with a string
        ``field`` (or whose text is not valid Unicode, whose bytes are not
        UTF-8, or which is nested too deeply to parse) is skipped and
        ``(where, why)`` appended to it, instead of raising; the lines after
        it are read on.

    Raises:
      InputError: a missing or unreadable file, binary input, malformed
        JSONL (without ``skipped``), or no non-empty text at all ("empty input").
    """
    texts = list(iter_inputs(paths, fmt=fmt, field=field, unit=unit, stdin=stdin, skipped=skipped))
    check_not_empty(texts, paths, unit, skipped)
    return texts


def check_not_empty(texts: Sequence[InputText], paths: Sequence[str], unit: str = "document",
                    skipped: Optional[list] = None) -> None:
    """InputError "empty input" when no text of ``texts`` has a non-space character."""
    if not any(t.text.strip() for t in texts):
        what = "prompts" if unit == "line" else "texts"
        bad = f" ({len(skipped)} unreadable line(s) skipped)" if skipped else ""
        raise InputError(f"empty input: no {what} in {', '.join(list(paths) or ['stdin'])}{bad}")


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


__all__ = ["FORMATS", "InputError", "InputText", "check_not_empty", "is_terminal", "iter_inputs", "load_tokenizer",
           "read_inputs", "vocab_size", "write_lines"]


class ChunksFromFirstText:
    """Chunks of at most ``size`` texts of ``texts``, as ``(number of its first text, chunk)``, where
    nothing is yielded before a text with a non-space character is read: empty texts read before it
    are held and yielded with it, and input with none yields nothing (:attr:`any_text` stays False; a
    tool then reports empty input with no output written). ``report(where, why)`` is called for each
    line the reader skipped (``skipped``, filled by :func:`iter_inputs`) as soon as it is known."""

    def __init__(self, texts, size: int, skipped: list, report):
        self.texts, self.size, self.skipped, self.report = texts, size, skipped, report
        self.any_text = False

    def __iter__(self):
        reported, number, held = 0, 0, []
        while True:
            chunk = list(itertools.islice(self.texts, self.size))
            for where, why in self.skipped[reported:]:
                self.report(where, why)
            reported = len(self.skipped)
            if not chunk:
                return
            if not self.any_text:
                self.any_text = any(x.text.strip() for x in chunk)
                if not self.any_text:
                    held += chunk
                    continue
                chunk, held = held + chunk, []
            for start in range(0, len(chunk), self.size):
                yield number + start, chunk[start:start + self.size]
            number += len(chunk)
