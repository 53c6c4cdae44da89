"""Ctrl-C ends a tool with one line and exit status 130, never a traceback.

Python turns SIGINT into :class:`KeyboardInterrupt` wherever the main thread happens to be; unwinding
runs every ``finally`` on the way out, which is what leaves the state clean:

* ``wmspec-detect --output`` fills a temporary file that :func:`wmspec_jax.storage.atomic_write` deletes
  on any exception: the output keeps its old content (or stays absent);
* ``wmspec-generate --output`` appends each batch's lines in one write (a regular file takes a write
  whole, so an interrupt lands between batches, never inside a line) and releases its
  :class:`wmspec_jax.storage.FileLock` in a ``finally``; the kernel drops the locks with the process
  in any case. A rerun with the same ``--run`` resumes after the last whole batch.

So all that is left to do at the top is to say so in one line and exit with 128 + SIGINT, the status a
shell reports for a command ended by Ctrl-C. A second Ctrl-C while the first unwinds is the same
interrupt: it is caught by the same handler, and after it SIGINT is ignored while the interpreter exits.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Callable, Sequence

EXIT_INTERRUPTED = 128 + signal.SIGINT
"""The exit status of a tool ended by Ctrl-C (130)."""


def run_interruptible(run: Callable[[Sequence[str]], int], argv: Sequence[str], prog: str, stderr=None) -> int:
    """``run(argv)``'s exit status, or :data:`EXIT_INTERRUPTED` after one line on ``stderr`` (default
    ``sys.stderr``) when it is interrupted by Ctrl-C."""
    try:
        return run(argv)
    except KeyboardInterrupt:
        _ignore_further_interrupts()
        stream = stderr or sys.stderr
        try:
            print(f"{prog}: interrupted (Ctrl-C): outputs hold whole lines only, no lock is kept", file=stream,
                  flush=True)
        except (OSError, ValueError):  # stderr closed as well: the status alone tells
            pass
        return EXIT_INTERRUPTED


def _ignore_further_interrupts() -> None:
    """Ignores SIGINT from now on, so that a repeated Ctrl-C during the interpreter's exit prints nothing
    (only the main thread may set a handler)."""
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    except ValueError:
        pass


def program_name(run: Callable) -> str:
    """The name a tool's messages start with: its module's ``PROG``, else the command's own name."""
    module = sys.modules.get(getattr(run, "__module__", ""), None)
    return getattr(module, "PROG", None) or os.path.basename(sys.argv[0] if sys.argv else "wmspec")


__all__ = ["EXIT_INTERRUPTED", "program_name", "run_interruptible"]
