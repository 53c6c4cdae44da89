"""What an output may be, beyond its kind: never a file the run reads, never a file the tool did not write.

:mod:`wmspec_jax.cli.outputs` checks what kind of thing an output path is and that it is not one of the
texts read. Two more ways to lose data remain, and this module closes both before any work:

* **An output that is a file the run reads** through any other flag: the secret file (a results file
  written over the key makes every later run use another key), a saved detector, a calibration file,
  another engine's scheme configuration, a file inside a tokenizer or checkpoint directory. Each is
  compared with the output by resolved path and by device and inode (``os.stat``: a hard link, a
  symbolic link and ``./x`` against ``x`` are the same file); the refusal names both flags.
  ``wmspec-generate`` also writes the lock file beside its output, so that path is checked too.
* **An existing output that is not the tool's own JSONL** (notes, a key, a prompt list): appending to
  it or replacing it would destroy it, so it is refused. A file is the tool's own when every non-empty
  line starts with ``{`` and the first complete JSON object is of the kind the tool writes
  (:data:`KINDS`). Only a genuine torn last line of such a file (no final newline, not a JSON
  object: a write cut short by a kill) is removed before appending, and the message says which line
  and how many bytes were dropped.
"""

from __future__ import annotations

import json
import os
import stat
from typing import Callable, Iterable, NamedTuple, Optional, Sequence

from wmspec_jax.cli.texts import InputError

KINDS: dict = {
    "wmspec-generate": (lambda rec: "id" in rec and ("run" in rec or "format_version" in rec),
                        "text lines of wmspec-generate (JSON objects with an id and a run)"),
    "wmspec-detect": (lambda rec: "input" in rec and "verdict" in rec,
                      "result lines of wmspec-detect (JSON objects with an input and a verdict)"),
    "human texts": (lambda rec: "text" in rec and "source" in rec,
                    "built-in human texts of wmspec-detect --write_human_texts (JSON objects with a text and a "
                    "source)"),
}
"""What each tool's own lines look like: (test of the first line's object, description for messages)."""

SHOWN_BYTES = 60
"""How much of a removed torn line a message quotes."""


class ReadPath(NamedTuple):
    """A path the run reads, and the flag that names it (``""`` for a positional argument; words such as
    ``"the deployment record beside an input"`` for a file no flag names)."""

    flag: str
    path: str


class TornLine(NamedTuple):
    """A torn last line of the tool's own JSONL: its 1-based number, where it starts, its bytes."""

    number: int
    offset: int
    data: bytes

    def describe(self) -> str:
        """The line in words: number, size and how it starts."""
        head = self.data[:SHOWN_BYTES].decode("utf-8", "replace")
        more = "..." if len(self.data) > SHOWN_BYTES else ""
        return f"line {self.number} ({len(self.data)} bytes, no final newline, starting {head!r}{more})"


def read_paths(pairs: Iterable[tuple]) -> list:
    """The :class:`ReadPath` of ``(flag, value)`` pairs: each value that names something on disk (a
    file or a directory; ``-`` and registry names such as ``builtin`` that are not paths are left out).
    A value may be a list (a comma-separated flag): each item counts."""
    out = []
    for flag, value in pairs:
        for item in (value if isinstance(value, (list, tuple)) else [value]):
            item = item.strip() if isinstance(item, str) else item
            if item and item != "-" and os.path.exists(item):
                out.append(ReadPath(flag, item))
    return out


READ_FLAGS = ("input", "secret_file", "detector", "calibrate", "scheme_config", "deployment", "tokenizer", "model",
              "model_draft", "target", "draft")
"""The flags of the tools that name a file or a directory the run reads (those a tool defines)."""


def tool_reads(fv, paths: Sequence[str] = (), *, written: Sequence[str] = ()) -> list:
    """What a tool run on parsed flags ``fv`` reads (:data:`READ_FLAGS`, less the flags in ``written``,
    which this tool writes), with its positional ``paths``."""
    pairs = [("", list(paths))]
    pairs += [(f"--{name}", fv[name].value) for name in READ_FLAGS
              if name not in written and name in fv and fv[name].value is not None]
    return read_paths(pairs)


def _stat(path: str):
    try:
        return os.stat(path)
    except OSError:
        return None


def _inside(path: str, directory: str) -> bool:
    directory = os.path.realpath(directory)
    return os.path.commonpath([os.path.realpath(path), directory]) == directory


def refuse_read_paths(flag: str, path: Optional[str], reads: Sequence[ReadPath], *, what: str = "") -> None:
    """Refuses an output path that is a file the run reads (module doc).

    Args:
      flag: the output's flag (``"--output"``).
      path: the output path (None or ``-``: nothing to check).
      reads: what the run reads (:func:`read_paths`).
      what: names the output in the message when it is not ``flag``'s own path (the lock file).

    Raises:
      InputError: naming ``flag``, the output, the reading flag and its path.
    """
    if path is None or path == "-":
        return
    named = f"{what} {path} of {flag}" if what else f"{flag}={path}"
    out_stat = _stat(path)
    for read in reads:
        read_stat = _stat(read.path)
        if read_stat is None:
            continue
        source = (f"{read.flag}={read.path}" if read.flag.startswith("--") else
                  f"{read.flag or 'the input'} {read.path}")
        if stat.S_ISDIR(read_stat.st_mode):
            if out_stat is not None and _inside(path, read.path):
                raise InputError(f"{named} is a file inside the directory of {source}, which the run reads: "
                                 f"writing it could destroy what the run loads; choose another {flag}")
            continue
        same_path = os.path.realpath(path) == os.path.realpath(read.path)
        same_file = out_stat is not None and (out_stat.st_dev, out_stat.st_ino) == (read_stat.st_dev, read_stat.st_ino)
        if same_path or same_file:
            how = "" if os.path.abspath(path) == os.path.abspath(read.path) else \
                " (the same file under another name: a link or another spelling of the path)"
            raise InputError(f"{named} is the file of {source}, which the run reads{how}: writing it would "
                             f"destroy it; choose another {flag}")


def _lines(path: str):
    """(1-based number, start offset, bytes) of every line of a file, the newline kept."""
    offset = 0
    with open(path, "rb") as f:
        for number, line in enumerate(f, start=1):
            yield number, offset, line
            offset += len(line)


def _json_object(data: bytes) -> Optional[dict]:
    try:
        obj = json.loads(data)
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        return None
    return obj if isinstance(obj, dict) else None


def check_own_jsonl(flag: str, path: Optional[str], kind: str, *, torn_allowed: bool = False) -> Optional[TornLine]:
    """Checks that an existing output holds only ``kind``'s own JSONL (module doc); a missing or empty
    file passes.

    Args:
      flag: the output's flag, for messages.
      path: the output (None or ``-``: nothing to check).
      kind: a key of :data:`KINDS`.
      torn_allowed: whether a torn last line may be returned for repair (an appended output); a
        replaced output is rewritten whole, so its torn line is simply not looked at.

    Returns:
      the torn last line (``torn_allowed`` only), else None.

    Raises:
      InputError: the file is not the tool's own JSONL, or cannot be read.
    """
    if path is None or path == "-":
        return None
    st = _stat(path)
    if st is None or not stat.S_ISREG(st.st_mode) or st.st_size == 0:
        return None
    accepts, description = KINDS[kind]

    def refusal(why: str) -> InputError:
        return InputError(f"{flag}={path} already exists and is not {description}: {why}; it is left as it "
                          f"is (nothing is appended to it or written over it); choose another {flag}")

    first, last, content = None, None, False  # the first line that is a JSON object decides; damaged ones
    # (a cut line kept from an earlier run) may precede it
    try:
        for number, offset, line in _lines(path):
            last = (number, offset, line)
            body = line.strip()
            if not body:
                continue
            content = True
            if not body.startswith(b"{"):
                raise refusal(f"line {number} is not a JSON object")
            if first is None:
                rec = _json_object(body)
                if rec is not None:
                    if not accepts(rec):
                        raise refusal(f"line {number} is not one of them")
                    first = number
    except OSError as e:
        raise InputError(f"{flag}={path} cannot be read ({e.strerror})") from None
    if content and first is None:
        raise refusal("no line of it is a complete JSON object")
    if not torn_allowed or last is None:
        return None
    number, offset, line = last
    if line.endswith(b"\n") or not line.strip() or _json_object(line) is not None:
        return None
    return TornLine(number, offset, line)


def repair_torn_line(flag: str, path: str, kind: str, report: Callable[[str], None]) -> None:
    """Removes the torn last line of an appended output (:func:`check_own_jsonl`), saying exactly what was
    dropped through ``report``; the caller holds the output's lock. A file that is not the tool's own
    JSONL raises InputError and is left untouched."""
    torn = check_own_jsonl(flag, path, kind, torn_allowed=True)
    if torn is None:
        _end_with_newline(path)
        return
    with open(path, "r+b") as f:
        f.truncate(torn.offset)
        f.flush()
        os.fsync(f.fileno())
    report(f"{flag}={path}: removed its last {torn.describe()}: an interrupted write, not a complete line; "
           f"the {torn.number - 1} line(s) before it are kept")


def lock_path(path: str) -> str:
    """The lock file :class:`wmspec_jax.storage.FileLock` writes beside an appended output."""
    directory, name = os.path.split(os.path.abspath(path))
    return os.path.join(directory, f".{name}.lock")


def check_output(fv, flag: str, path: Optional[str], paths: Sequence[str], kind: str, *,
                 locked: bool = False, written: Sequence[str] = (), also_reads: Sequence[tuple] = ()) -> None:
    """Both checks of this module for one output of a tool run on parsed flags ``fv`` with positional
    ``paths``: not a file the run reads (nor, with ``locked``, is its lock file), and not an existing file
    of anything but ``kind``'s own JSONL. ``written``: flags of :data:`READ_FLAGS` this tool writes
    instead; ``also_reads``: ``(what, path)`` of files the run reads that no flag names (a file found
    beside an input). Raises InputError naming the flags."""
    if path is None or path == "-":
        return
    reads = tool_reads(fv, paths, written=written) + read_paths(also_reads)
    refuse_read_paths(flag, path, reads)
    if locked:
        refuse_read_paths(flag, lock_path(path), reads, what="the lock file")
    check_own_jsonl(flag, path, kind, torn_allowed=locked)


def _end_with_newline(path: str) -> None:
    """A last line that is complete but lost its newline gets it back, so the next append starts a line of
    its own (and no reader takes that line for a torn one)."""
    st = _stat(path)
    if st is None or not stat.S_ISREG(st.st_mode) or st.st_size == 0:
        return
    with open(path, "rb") as f:
        f.seek(-1, os.SEEK_END)
        if f.read(1) == b"\n":
            return
    with open(path, "ab") as f:
        f.write(b"\n")
        f.flush()
        os.fsync(f.fileno())


__all__ = ["KINDS", "READ_FLAGS", "ReadPath", "SHOWN_BYTES", "TornLine", "check_output", "check_own_jsonl", "lock_path",
           "read_paths", "refuse_read_paths", "repair_torn_line", "tool_reads"]
