"""Storage: one atomic-write helper, locked output directories, resumable JSONL that never loses a
valid record. It imports nothing else of the package (the layer everything may write files through).

* :func:`atomic_write` is the package's single way to write a file: the
  bytes go to a temporary file in the same directory, are flushed to disk,
  and replace the target with ``os.replace``; on any error the temporary
  file is removed. A reader sees the old file or the new one, never half of
  one. :func:`atomic_write_text` / ``_json`` / ``_bytes``, :func:`atomic_savez`
  and :func:`atomic_savefig` are thin wrappers.
* :class:`DirectoryLock` — one writer per output directory: an exclusive
  ``fcntl.flock`` on the directory itself and on ``<dir>/.lock`` (released by
  the kernel when the process dies, so a killed run never leaves a stale
  lock). A second *process* is refused with :class:`OutputDirLocked`, also
  after someone deleted ``.lock`` (the directory's own lock stays); inside one
  process the lock is re-entrant (a session and its record store share it).
* :class:`JsonlStore` — append-only JSONL keyed by ``record["id"]``. Loading
  never deletes a valid record: an unreadable line (not JSON, not an object,
  no ``id``) anywhere in the file is skipped, left in place and reported
  (count and line numbers, :attr:`JsonlStore.bad_lines`); only a torn *last*
  line — a write interrupted by a kill, recognisable by its missing newline —
  is cut off. Each :meth:`JsonlStore.add` is one ``write`` + ``fsync``.
* Several processes of one run (``jax.distributed``): only process 0 writes
  files (:func:`is_output_writer`; the others' ``atomic_write`` returns
  without writing — they compute the same outputs); each process appends its
  own rows to its own JSONL (:func:`wmspec_jax.lab.runs.open_generations`).
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import secrets
import stat
import sys
import threading
import time
import warnings
from typing import IO, Any, Callable, Iterable, Iterator

import numpy as np

try:  # POSIX; elsewhere the directory lock degrades to a warning
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None

LOCK_NAME = ".lock"


# ---------------------------------------------------------------------------
# Atomic writes
# ---------------------------------------------------------------------------


def is_output_writer() -> bool:
    """False only in a multi-process JAX run on processes other than 0 (module doc).

    Never starts a JAX backend: a program that has not initialised
    ``jax.distributed`` is a single process.
    """
    jax = sys.modules.get("jax")
    if jax is None or not jax.distributed.is_initialized():
        return True
    return jax.process_index() == 0


def atomic_write(path, write: Callable[[IO[bytes]], None]) -> pathlib.Path:
    """Writes a file atomically: ``write(f)`` fills a temporary file that then replaces ``path``.

    On a process other than 0 of a multi-process run it writes nothing
    (:func:`is_output_writer`): one writer per output directory.

    Args:
      path: destination (parent directories are created).
      write: called with a binary file object opened in the destination's
        directory.

    Returns:
      the destination path. On any exception (in ``write`` or while
      replacing) the temporary file is deleted and the exception re-raised;
      an existing ``path`` is left untouched.
    """
    path = pathlib.Path(path)
    if not is_output_writer():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.{secrets.token_hex(4)}.tmp"
    # os.open applies the umask (mkstemp would create 0600 files)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    _fsync_directory(path.parent)
    return path


def _fsync_directory(directory: pathlib.Path) -> None:
    # makes the rename itself durable; not all platforms can open directories
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def atomic_write_bytes(path, data: bytes) -> pathlib.Path:
    return atomic_write(path, lambda f: f.write(data))


def atomic_write_text(path, text: str) -> pathlib.Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path, obj: Any, indent: int = 2) -> pathlib.Path:
    return atomic_write_text(path, json.dumps(obj, indent=indent, default=_json_default) + "\n")


def atomic_savez(path, **arrays) -> pathlib.Path:
    """``np.savez`` to ``path`` atomically (the name is kept as given)."""
    return atomic_write(path, lambda f: np.savez(f, **arrays))


def atomic_savefig(fig, path, **kwargs) -> pathlib.Path:
    """Saves a matplotlib figure atomically (format from the suffix, PNG by default)."""
    path = pathlib.Path(path)
    kwargs.setdefault("format", path.suffix.lstrip(".") or "png")
    return atomic_write(path, lambda f: fig.savefig(f, **kwargs))


def _json_default(x):
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, np.ndarray):
        return x.tolist()
    raise TypeError(f"not JSON serialisable: {type(x).__name__}")


# ---------------------------------------------------------------------------
# One writer per output directory
# ---------------------------------------------------------------------------


class OutputDirLocked(RuntimeError):
    """Another process is writing to the same output directory."""


_held_locks: dict = {}  # (realpath, name) -> [fd, count]
_held_dirs: dict = {}  # realpath -> [directory fd or None, count]
_held_guard = threading.Lock()


def _drop_hold(table: dict, key) -> bool:
    """One holder fewer of ``table[key]``; the last one unlocks and closes its descriptor. True when a
    descriptor was closed."""
    held = table.get(key)
    if held is None:
        return False
    held[1] -= 1
    if held[1]:
        return False
    del table[key]
    if held[0] is None:
        return False
    fcntl.flock(held[0], fcntl.LOCK_UN)
    os.close(held[0])
    return True


class DirectoryLock:
    """Exclusive lock of an output directory (module doc); use as a context manager or call :meth:`release`.

    Raises:
      OutputDirLocked: another process holds the directory.
    """

    def __init__(self, directory, name: str = LOCK_NAME):
        self.directory = os.path.realpath(os.fspath(directory))
        self.name = name
        os.makedirs(self.directory, exist_ok=True)
        self._released = False
        with _held_guard:
            held = _held_locks.get(self._key)
            if held is not None:  # re-entrant within this process
                held[1] += 1
                return
            _held_locks[self._key] = [self._acquire(), 1]

    @property
    def _key(self):
        return self.directory, self.name

    def _acquire(self):
        if fcntl is None:  # pragma: no cover
            warnings.warn(f"no fcntl on this platform: {self.directory} is not locked against a second writer")
            return None
        self._lock_directory()
        path = os.path.join(self.directory, self.name)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        except BaseException:
            self._unlock_directory()
            raise
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.pread(fd, 200, 0).decode("utf-8", "replace").strip() or "unknown"
            os.close(fd)
            self._unlock_directory()
            raise self._refusal(holder) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} since {time.strftime('%Y-%m-%d %H:%M:%S')}\n".encode(), 0)
        return fd

    def _refusal(self, holder: str) -> OutputDirLocked:
        return OutputDirLocked(
            f"{self.directory} is being written by another process ({holder}); two writers would "
            "interleave their records. Wait for it to finish, or use another --output_dir.")

    def _lock_directory(self) -> None:
        """The directory's own flock: exclusive for the one writer of a single-process run
        (``.lock``), shared for each process of a multi-process run (``.lock.<i>``, each of
        which also holds its own file). Deleting ``.lock`` does not release it."""
        held = _held_dirs.get(self.directory)
        if held is not None:
            held[1] += 1
            return
        fd = None
        try:
            fd = os.open(self.directory, os.O_RDONLY)
            mode = fcntl.LOCK_EX if self.name == LOCK_NAME else fcntl.LOCK_SH
            fcntl.flock(fd, mode | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            holder = "unknown"
            with contextlib.suppress(OSError):
                with open(os.path.join(self.directory, LOCK_NAME), "rb") as f:
                    holder = f.read(200).decode("utf-8", "replace").strip() or holder
            raise self._refusal(holder) from None
        except OSError:  # a filesystem without directory locks: the lock file alone guards
            if fd is not None:
                os.close(fd)
            fd = None
        _held_dirs[self.directory] = [fd, 1]

    def _unlock_directory(self) -> None:
        _drop_hold(_held_dirs, self.directory)

    def release(self) -> None:
        if self._released:
            return
        self._released = True
        with _held_guard:
            if _drop_hold(_held_locks, self._key):
                self._unlock_directory()

    def __enter__(self) -> "DirectoryLock":
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def __del__(self):
        try:  # at interpreter exit module globals may already be gone; the kernel releases the lock anyway
            self.release()
        except Exception:
            pass


class FileLock:
    """One writer of one output file chosen by the user (``wmspec-generate --output=PATH``).

    The approach of :class:`DirectoryLock` with the file in the directory's
    place: an exclusive ``fcntl.flock`` on a lock file beside the output,
    ``<dir>/.<name>.lock`` (created if missing and never deleted, so no two
    processes can ever hold different lock files of one output; it names the
    holder, pid and start time), and a second anchor that survives the
    deletion of the lock file: an exclusive flock on the output file itself.
    Deleting the output mid-run leaves the lock file locked; deleting the lock
    file leaves the output locked: either way a second process is refused
    with :class:`OutputDirLocked` naming the holder (only deleting both lets one
    in). The directory itself is not locked: an exclusive lock would refuse
    two writers of different files in one directory (the shards of one job),
    and a shared one does not stop a second writer of the same file. The
    kernel releases every lock when the process dies: a killed run leaves no
    stale lock. Neither file is opened through a symbolic link, and both must
    be regular files (nothing is ever written into a device or a FIFO). Not
    re-entrant: a second lock of the same file is refused inside one process
    too.
    """

    def __init__(self, path):
        self.path = os.fspath(path)
        directory, name = os.path.split(os.path.abspath(self.path))
        os.makedirs(directory, exist_ok=True)
        self.lock_path = os.path.join(directory, f".{name}.lock")
        self._fds: list = []
        try:
            self._lock_file(self.lock_path, lock_file=True)
            self._lock_file(self.path, lock_file=False)
            os.ftruncate(self._lock_fd, 0)
            os.pwrite(self._lock_fd, f"pid {os.getpid()} since {time.strftime('%Y-%m-%d %H:%M:%S')}\n".encode(), 0)
        except BaseException:
            self.release()
            raise

    @property
    def _lock_fd(self):
        return self._fds[0]

    def _lock_file(self, path: str, lock_file: bool) -> None:
        """Opens ``path`` (created if missing; never through a link, never blocking) and locks it; the
        lock file is reopened if it was deleted or replaced between the open and the lock."""
        flags = os.O_RDWR | os.O_CREAT | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0)
        for _ in range(10):
            try:
                fd = os.open(path, flags, 0o666)
            except OSError as e:
                if e.errno == getattr(os, "ELOOP", None) or os.path.islink(path):
                    raise OSError(e.errno, f"{path} is a symbolic link; refusing to write through it") from None
                raise
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                os.close(fd)
                raise OSError(f"{path} is not a regular file; refusing to write into it")
            if fcntl is None:  # pragma: no cover
                warnings.warn(f"no fcntl on this platform: {path} is not locked against a second writer")
                self._fds.append(fd)
                return
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                if lock_file:
                    holder = os.pread(fd, 200, 0).decode("utf-8", "replace").strip() or "unknown"
                else:  # the lock file was free, so what it says is a finished writer's
                    holder = f"holder unknown: its lock file {self.lock_path} was deleted while held"
                os.close(fd)
                raise OutputDirLocked(f"{self.path} is being written by another process ({holder}); two "
                                      "writers would interleave their records. Wait for it to finish, or "
                                      "write another file.") from None
            try:
                now = os.stat(path, follow_symlinks=False)
            except FileNotFoundError:
                now = None
            if now is not None and (now.st_dev, now.st_ino) == (st.st_dev, st.st_ino):
                self._fds.append(fd)
                return
            os.close(fd)  # deleted or replaced between the open and the lock: the path's file is the lock
        raise OutputDirLocked(f"{path} keeps being replaced by another process; not writing {self.path}")

    def release(self) -> None:
        while self._fds:
            fd = self._fds.pop()
            if fcntl is not None:
                with contextlib.suppress(OSError):
                    fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    def __enter__(self) -> "FileLock":
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def __del__(self):
        try:
            self.release()
        except Exception:
            pass


# ---------------------------------------------------------------------------
# Resumable JSONL records
# ---------------------------------------------------------------------------


class JsonlStore:
    """Append-only JSONL keyed by ``record["id"]``; reloads what exists (resume).

    Args:
      path: the ``.jsonl`` file (created with its directory if missing).
      lock: hold the :class:`DirectoryLock` of the file's directory while the
        store is open (default), so a second process cannot interleave
        appends.
      lock_name: the lock file's name (a multi-process run locks one per
        process: :func:`wmspec_jax.sharding.process_shard_name`).

    Attributes:
      records: id -> record (the last valid record of each id: a re-added
        id replaces the earlier record, on load as in memory).
      bad_lines: 1-based numbers of the lines skipped on load (kept in the file).
      torn_bytes: size of the torn last line cut off on load (0 if none).
      duplicates: number of valid lines whose id was already loaded.
      noted: ids known through :meth:`note` and not in this file.
    """

    def __init__(self, path, *, lock: bool = True, lock_name: str = LOCK_NAME):
        self.path = pathlib.Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = DirectoryLock(self.path.parent, lock_name) if lock else None
        self.records: dict[str, dict] = {}
        self.bad_lines: list[int] = []
        self.torn_bytes = 0
        self.duplicates = 0
        self.noted: set[str] = set()
        if self.path.exists():
            self._load()

    def _load(self) -> None:
        with open(self.path, "rb") as f:
            lines = f.read().splitlines(keepends=True)
        size = sum(len(line) for line in lines)
        for number, line in enumerate(lines, start=1):
            rec = _parse_record(line)
            if not line.endswith(b"\n") and number == len(lines):
                if rec is None:  # a write cut short by a kill: the only line ever removed
                    self.torn_bytes = len(line)
                    with open(self.path, "r+b") as f:
                        f.truncate(size - len(line))
                    continue
                with open(self.path, "ab") as f:  # complete record, only its newline was lost
                    f.write(b"\n")
            if rec is None:
                self.bad_lines.append(number)
            else:
                self.duplicates += str(rec["id"]) in self.records
                self.records[str(rec["id"])] = rec
        if self.bad_lines or self.torn_bytes:
            warnings.warn(self.load_report(), stacklevel=3)

    def load_report(self) -> str:
        """What loading skipped, in words ("" if nothing)."""
        parts = []
        if self.bad_lines:
            shown = ", ".join(map(str, self.bad_lines[:20])) + (", ..." if len(self.bad_lines) > 20 else "")
            parts.append(f"skipped {len(self.bad_lines)} unreadable line(s) (line {shown}); they stay in the "
                         "file and their texts will be generated again")
        if self.torn_bytes:
            parts.append(f"removed a torn last line ({self.torn_bytes} bytes, an interrupted write)")
        return f"{self.path}: " + "; ".join(parts) if parts else ""

    def __contains__(self, key) -> bool:
        return str(key) in self.records

    def __len__(self) -> int:
        return len(self.records)

    def add(self, records: Iterable[dict]) -> None:
        """Appends records (each a JSON-able dict with an ``id``) in one write."""
        records = list(records)
        lines = []
        for rec in records:
            if not isinstance(rec, dict) or "id" not in rec:
                raise ValueError(f"a record must be a dict with an 'id', got {str(rec)[:80]!r}")
            lines.append(json.dumps(rec, default=_json_default) + "\n")
        data = "".join(lines).encode("utf-8")
        with open(self.path, "ab") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        for rec in records:
            self.records[str(rec["id"])] = rec
            self.noted.discard(str(rec["id"]))

    def note(self, records: Iterable[dict]) -> None:
        """Knows records without writing them: another process's shard of a
        multi-process run (they are in its file). Resume decisions then agree
        across processes."""
        for rec in records:
            self.records[str(rec["id"])] = rec
            self.noted.add(str(rec["id"]))

    def values(self) -> list[dict]:
        return list(self.records.values())

    def close(self) -> None:
        """Releases the directory lock (records stay readable)."""
        if self._lock is not None:
            self._lock.release()

    def __enter__(self) -> "JsonlStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _parse_record(line: bytes):
    try:
        rec = json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):  # nested too deeply: unreadable too
        return None
    return rec if isinstance(rec, dict) and "id" in rec else None


# ---------------------------------------------------------------------------
# Progress
# ---------------------------------------------------------------------------


class Progress:
    """Minimal progress line on stderr: done/total, rate and ETA."""

    def __init__(self, total: int, what: str, stream=None):
        self.total, self.what, self.done, self.t0 = total, what, 0, time.time()
        self.stream = stream

    def update(self, n: int = 1) -> None:
        self.done += n
        elapsed = time.time() - self.t0
        rate = self.done / elapsed if elapsed > 0 else float("nan")
        eta = (self.total - self.done) / rate if rate > 0 else float("nan")
        print(f"[{self.what}] {self.done}/{self.total} ({rate:.2f}/s, eta {eta:.0f}s)",
              file=self.stream or sys.stderr, flush=True)


def batched(items: list, size: int) -> Iterator[list]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


__all__ = [
    "DirectoryLock", "FileLock", "JsonlStore", "is_output_writer", "OutputDirLocked", "Progress", "atomic_savefig", "atomic_savez", "atomic_write",
    "atomic_write_bytes", "atomic_write_json", "atomic_write_text", "batched",
]
