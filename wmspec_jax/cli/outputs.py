"""Where the command-line tools may write: the one check of every output path they take.

``wmspec-detect`` writes its results atomically (a temporary file, then a
rename over the path), so whatever the path names is replaced: a device node
or a link to standard output would become a regular file. ``wmspec-generate``
appends to and resumes its ``--output``, so it reads the path first: a FIFO
or ``/dev/stdout`` would block it forever. Both would destroy an input given
again as the output, under another name (a hard link) or as standard input.
So before any work (before a model loads, before any scoring) an output path
must be:

* a regular file, or a path that does not exist yet in an existing,
  writable directory, or ``-`` (standard output) where the tool takes it;
* never a symbolic link (not even one to a regular file: the write would
  replace the link, or land in a file the command line does not name), a
  device, a FIFO, a socket or a directory;
* never the same file as an input: by path, by device and inode (a hard
  link or another spelling), and standard input included when the tool
  reads it (the stream's own ``fstat``).

A refusal is an :class:`wmspec_jax.cli.texts.InputError` naming the flag and
the path (the tools exit with status 2). Only the parent directory is
resolved; the checks look at the last component itself (``lstat``). The
lock of an output being appended to is :class:`wmspec_jax.storage.FileLock`.
"""

from __future__ import annotations

import contextlib
import io
import os
import stat
import sys
import tempfile
from typing import NamedTuple, Optional, Sequence

from wmspec_jax.cli.texts import InputError

STDOUT = "-"

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"))


class OutputPath(NamedTuple):
    """An output path that passed :func:`check_output_path`.

    Attributes:
      flag: the flag that named it (``"--output"``).
      path: the path as given (``"-"``: standard output).
      stdout: it is standard output.
      exists: it is an existing regular file (appended to or replaced).
    """

    flag: str
    path: str
    stdout: bool
    exists: bool


def reads_stdin(inputs: Optional[Sequence[str]]) -> bool:
    """Whether a tool given these input paths reads standard input (``-``, or no path at all); ``None``:
    the tool reads no input."""
    return inputs is not None and (not inputs or STDOUT in inputs)


def check_output_path(flag: str, path: Optional[str], inputs: Optional[Sequence[str]] = (), *, stdin=None,
                      allow_stdout: bool = True, consequence: str = "it would be overwritten") \
        -> Optional[OutputPath]:
    """Checks one output path of a tool (module doc); returns what it is, or None for no path.

    Args:
      flag: the flag naming the path, for messages (``"--output"``).
      path: the path given, or None (the flag not given).
      inputs: the input paths the tool reads (``"-"`` or none at all:
        standard input); None: the tool reads no input.
      stdin: the stream the tool reads as standard input (default
        ``sys.stdin``); compared by device and inode when the tool reads it.
        A stream without a file descriptor (in memory) is no file.
      allow_stdout: whether ``"-"`` means standard output here (else it is
        refused, never taken for a file named ``-``).
      consequence: what writing an input would do, for the message.

    Raises:
      InputError: the path is refused (the message names ``flag`` and the path).
    """
    if path is None:
        return None
    if path == STDOUT:
        if allow_stdout:
            return OutputPath(flag, path, True, False)
        hint = "; leave --output out to write to standard output" if flag == "--output" else ""
        raise InputError(f"{flag}=- is not a file: {flag} takes a file path here{hint}")
    if not path:
        raise InputError(f"{flag} is empty: give a file path")
    if path.endswith(os.sep) or (os.altsep and path.endswith(os.altsep)):
        raise InputError(f"{flag}={path} names a directory (it ends in {path[-1]}); give a file path")
    st = _lstat(flag, path)
    if st is None:
        directory = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(directory):
            raise InputError(f"{flag}={path}: the directory {directory} does not exist")
    elif stat.S_ISLNK(st.st_mode):
        raise InputError(f"{flag}={path} is a symbolic link (to {_link_target(path)}): an output must be a "
                         "regular file or a new path, and a link is refused even when it points to a regular "
                         "file (writing would replace the link or go where the command line does not say); give "
                         "the file's own path")
    elif not stat.S_ISREG(st.st_mode):
        kind = next((name for test, name in _KINDS if test(st.st_mode)), "not a regular file")
        new = ", or - for standard output" if allow_stdout else ""
        raise InputError(f"{flag}={path} is {kind}: an output must be a regular file or a path that does not "
                         f"exist yet{new}")
    _refuse_inputs(flag, path, st, inputs, stdin, consequence)
    _probe_directory(flag, path)
    return OutputPath(flag, path, False, st is not None)


def _lstat(flag: str, path: str):
    """The path's own ``lstat`` (a link is not followed), None if it does not exist."""
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as e:  # a file where a directory should be, no permission, a name too long
        raise InputError(f"{flag}={path} cannot be written ({e.strerror})") from None


def _link_target(path: str) -> str:
    try:
        return os.readlink(path)
    except OSError:
        return "?"


def _refuse_inputs(flag: str, path: str, st, inputs: Optional[Sequence[str]], stdin, consequence: str) -> None:
    """Refuses an output that is one of the inputs, by path or by (device, inode), standard input included."""
    def refusal(how: str = "") -> InputError:
        return InputError(f"{flag}={path} is also an input{how}: {consequence}; choose another {flag}")

    for name in inputs or ():
        if name == STDOUT:
            continue
        if os.path.realpath(name) == os.path.realpath(path):
            raise refusal()
        if st is not None:
            with contextlib.suppress(OSError):
                other = os.stat(name)
                if (other.st_dev, other.st_ino) == (st.st_dev, st.st_ino):
                    raise refusal(f" (the same file as {name}: a hard link or another name)")
    if st is not None and reads_stdin(inputs):
        fd_stat = _stream_stat(stdin if stdin is not None else sys.stdin)
        if fd_stat is not None and (fd_stat.st_dev, fd_stat.st_ino) == (st.st_dev, st.st_ino):
            raise refusal(" (it is the file on standard input)")


def _stream_stat(stream):
    """``fstat`` of a stream's file descriptor; None for a stream without one (in memory, closed, none)."""
    if stream is None:
        return None
    try:
        return os.fstat(stream.fileno())
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        return None


def _probe_directory(flag: str, path: str) -> None:
    """Creates and removes a temporary file beside the path: the atomic write (a temporary file, then a
    rename) and the lock file beside an appended output both need exactly that."""
    directory = os.path.dirname(os.path.abspath(path))
    try:
        fd, probe = tempfile.mkstemp(dir=directory, prefix=".wmspec-", suffix=".probe")
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise InputError(f"{flag}={path} cannot be written ({e.strerror})") from None


__all__ = ["OutputPath", "STDOUT", "check_output_path", "reads_stdin"]
