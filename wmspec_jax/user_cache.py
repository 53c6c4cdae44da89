"""Where the package keeps what it can rebuild but should not rebuild on every run, and whom it trusts there.

One directory, ``$WMSPEC_CACHE_DIR`` or ``~/.cache/wmspec_jax``: ``xla/`` (the
command-line tools' persistent compilation cache), ``executables/`` (their
generation loops, loaded without tracing: :mod:`wmspec_jax.executable_store`), ``tokenizers/`` (the
built-in tokenizer, which takes seconds to rebuild from the GGUF file's
metadata and a tenth of a second to load) and ``weights/`` (the built-in
target's dequantised float32 weights, ~0.5 GB, which take seconds to convert
and are mapped without a copy: :func:`wmspec_jax.models.gguf_loader.load_gguf_model`).
Everything in it is derived from files the package reads and keyed by their
identity and the library versions, so deleting it is always safe. ``WMSPEC_CACHE_DIR=""`` turns it off.

What is read from it runs as the user: weights decide the tokens, the
tokenizer decides the ids and so the p-values, and ``xla/`` / ``executables/``
hold native programs. So one rule holds for the whole cache (:func:`trusted`):
the root, every directory and file read under it belong to the current user,
are not writable by group or others, and are not symbolic links; the root's
parents are not writable by others unless sticky (a shared temporary directory) and belong to the
user or root. A root that breaks the rule (a ``WMSPEC_CACHE_DIR`` shared with
another user, a group-writable directory, a link) is not used at all: the
cache is off for the process, with one warning saying why. An entry that
breaks it is never read: it is rebuilt (and replaced where the directory
allows). Entries also say what they were made from (the built-in weights and
tokenizer carry the package GGUF file's SHA-256 and are refused for another).
"""

from __future__ import annotations

import contextlib
import os
import stat
import warnings
from typing import Optional

ENV_VAR = "WMSPEC_CACHE_DIR"

_POSIX = hasattr(os, "getuid")  # elsewhere mode bits do not describe who may write
_warned: set = set()


def owned_by_user(st: os.stat_result) -> bool:
    """Whether ``st`` (an ``os.stat`` result) belongs to the current user (always, where there are no uids)."""
    return not hasattr(os, "getuid") or st.st_uid == os.getuid()


def private(path: str) -> bool:
    """Whether ``path`` itself (not followed if a link) is a file or directory of the current user that
    group and others cannot write: the rule of everything read from the cache."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    if not (stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode)):
        return False  # a symbolic link, a FIFO, a device: never an entry
    return owned_by_user(st) and not (_POSIX and st.st_mode & 0o022)


def _safe_parent(path: str) -> bool:
    # a parent others can write (and that is not sticky) lets them rename the cache away and put theirs
    try:
        st = os.stat(path)
    except OSError:
        return False
    if not _POSIX:
        return True
    if st.st_uid not in (0, os.getuid()):
        return False
    return not st.st_mode & 0o022 or bool(st.st_mode & stat.S_ISVTX)


def _root_problem(root: str) -> Optional[str]:
    """Why ``root`` may not hold the cache, or None."""
    parent = os.path.dirname(os.path.abspath(root))
    while True:
        if os.path.exists(parent) and not _safe_parent(parent):
            return f"its parent {parent} is writable by other users or belongs to another user"
        up = os.path.dirname(parent)
        if up == parent:
            break
        parent = up
    if not os.path.lexists(root):
        return None
    if os.path.islink(root):
        return "it is a symbolic link"
    st = os.lstat(root)
    if not stat.S_ISDIR(st.st_mode):
        return "it is not a directory"
    if not owned_by_user(st):
        return f"it belongs to another user (uid {st.st_uid})"
    if _POSIX and st.st_mode & 0o022:
        return f"group or others can write it (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def root() -> Optional[str]:
    """The cache root when it may be used (module doc: the rule), created with mode 0700; None when the
    cache is off, cannot be created, or breaks the rule (then with one warning per root and process)."""
    path = os.environ.get(ENV_VAR)
    if path is None:
        path = os.path.join(os.path.expanduser("~"), ".cache", "wmspec_jax")
    if not path:
        return None
    path = os.path.abspath(path)
    problem = _root_problem(path)
    if problem is None and not os.path.lexists(path):
        try:
            os.makedirs(path, mode=0o700, exist_ok=True)
        except OSError:
            return None
        problem = _root_problem(path)
    if problem is not None:
        if path not in _warned:
            _warned.add(path)
            warnings.warn(f"the wmspec_jax cache {path} is not used: {problem}. Whoever can write it could "
                          "change the weights, the tokenizer or the compiled programs this user runs; the "
                          f"cache is off for this process (set {ENV_VAR} to a directory of your own, mode 700, "
                          f"or {ENV_VAR}= to silence this)", RuntimeWarning, stacklevel=3)
        return None
    return path


def directory(part: str) -> Optional[str]:
    """``<cache root>/<part>``, created with mode 0700; None when the cache is off, cannot be created, or
    the root or the directory breaks the rule (module doc)."""
    base = root()
    if base is None:
        return None
    path = os.path.join(base, part)
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        st = os.lstat(path)
        if _POSIX and stat.S_ISDIR(st.st_mode) and owned_by_user(st) and st.st_mode & 0o077:
            os.chmod(path, 0o700)  # made under a loose umask; what is inside is judged entry by entry
    except OSError:
        return None
    if not trusted(path):
        return None
    return path if os.access(path, os.W_OK) else None


def trusted(path: str) -> bool:
    """Whether ``path`` and every directory between it and the cache root keep the rule (module doc).

    A path outside the cache root is judged alone."""
    path = os.path.abspath(path)
    base = os.environ.get(ENV_VAR)
    if base is None:
        base = os.path.join(os.path.expanduser("~"), ".cache", "wmspec_jax")
    base = os.path.abspath(base) if base else None
    current = path
    while True:
        if not private(current):
            return False
        if base is None or current == base or os.path.dirname(current) == current:
            return True
        if not current.startswith(base + os.sep):
            return True
        current = os.path.dirname(current)


def trusted_tree(path: str) -> bool:
    """:func:`trusted` for ``path`` and everything under it (an entry that is a directory)."""
    if not trusted(path):
        return False
    for folder, dirs, files in os.walk(path, followlinks=False):
        for name in dirs + files:
            if not private(os.path.join(folder, name)):
                return False
    return True


def remove_foreign(path: str) -> int:
    """Deletes the entries directly in directory ``path`` that break the rule (another user's files,
    group-writable ones, links); returns how many. For directories whose reader checks nothing itself
    (XLA's compilation cache)."""
    removed = 0
    try:
        names = os.listdir(path)
    except OSError:
        return 0
    for name in names:
        entry = os.path.join(path, name)
        if private(entry) and (not os.path.isdir(entry) or trusted_tree(entry)):
            continue
        with contextlib.suppress(OSError):
            if os.path.isdir(entry) and not os.path.islink(entry):
                import shutil

                shutil.rmtree(entry)
            else:
                os.unlink(entry)
            removed += 1
    return removed


__all__ = ["ENV_VAR", "directory", "owned_by_user", "private", "remove_foreign", "root", "trusted",
           "trusted_tree"]
