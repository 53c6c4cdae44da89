"""The public face, watched: the names each package of ``wmspec_jax`` offers (its ``__all__``) are
recorded in ``tests/public_face.txt``, so adding, renaming or dropping one is a deliberate change that
shows in that file's diff, never a side effect of moving code.

After a deliberate change: ``python -m tests.test_public_face --write`` rewrites the record."""

import importlib
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RECORD = os.path.join(ROOT, "tests", "public_face.txt")


def packages() -> list:
    """Every package of wmspec_jax (a folder with ``__init__.py``), by dotted name."""
    out = []
    for directory, _, files in os.walk(os.path.join(ROOT, "wmspec_jax")):
        if "__init__.py" in files and "__pycache__" not in directory:
            out.append(os.path.relpath(directory, ROOT).replace(os.sep, "."))
    return sorted(out)


def face() -> list:
    """``package: name`` for every name of every package's ``__all__``, sorted."""
    lines = []
    for package in packages():
        for name in importlib.import_module(package).__all__:
            lines.append(f"{package}: {name}")
    return sorted(lines)


def test_the_public_face_is_the_recorded_one():
    recorded = open(RECORD, encoding="utf-8").read().splitlines()
    now = face()
    added, dropped = sorted(set(now) - set(recorded)), sorted(set(recorded) - set(now))
    assert not added and not dropped, (
        f"the public face changed: added {added}, dropped {dropped}; if deliberate, "
        "`python -m tests.test_public_face --write` records it")


def test_every_name_of_the_face_resolves():
    # a lazy name pointing at a moved or renamed definition fails here, not in a user's import
    missing = []
    for line in face():
        package, name = line.split(": ")
        try:
            getattr(importlib.import_module(package), name)
        except AttributeError:
            missing.append(line)
    assert not missing, f"names in __all__ that do not resolve: {missing}"


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python -m tests.test_public_face --write")
    with open(RECORD, "w", encoding="utf-8") as f:
        f.write("\n".join(face()) + "\n")
    print(f"wrote {RECORD} ({len(face())} names)")
