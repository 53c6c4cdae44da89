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


# Exported functions no test names, each with the test that runs it through the function built on it.
REACHED_THROUGH = {
    "wmspec_jax.lab: method_label": "tests/test_lab.py",  # the speed table's rows (experiments.reproduce)
    "wmspec_jax.lab: plot_aatps": "tests/test_lab.py",  # the speed part's figure
    "wmspec_jax.lab: plot_detection": "tests/test_lab.py",  # the detection part's figures
    "wmspec_jax.lab: prompts_needed": "tests/test_lab.py",  # the harness's prompt count
    "wmspec_jax.lab: script_main": "tests/test_lab.py",  # every experiment script's main
    "wmspec_jax.lab: speculative_markdown": "tests/test_lab.py",  # the speed part's table
    "wmspec_jax.lab: write_csv": "tests/test_lab.py",  # the speed part's CSV
    "wmspec_jax.lines: read_line": "tests/test_cli.py",  # wmspec-detect reads every line with it
    "wmspec_jax.lines: score_lines": "tests/test_cli.py",  # wmspec-detect scores every group with it
}


def test_every_exported_function_is_called_by_a_test():
    """A function of the face is named by a test file, or listed in REACHED_THROUGH with the test file that
    runs it through the function built on it (the list is kept short: a new function gets a test)."""
    import inspect
    import re
    import types

    tests = []
    for directory, _, files in os.walk(os.path.join(ROOT, "tests")):
        tests += [open(os.path.join(directory, f), encoding="utf-8").read() for f in files if f.endswith(".py")]
    text = "\n".join(t for t in tests if "REACHED_THROUGH = {" not in t)
    unnamed = []
    for line in face():
        package, name = line.split(": ")
        obj = getattr(importlib.import_module(package), name)
        if inspect.isclass(obj) or isinstance(obj, types.ModuleType) or not callable(obj):
            continue
        if not re.search(rf"\b{re.escape(name)}\b", text) and line not in REACHED_THROUGH:
            unnamed.append(line)
    assert not unnamed, f"exported functions no test calls: {unnamed}"
    for line, test_file in REACHED_THROUGH.items():
        assert os.path.isfile(os.path.join(ROOT, test_file)) and line in face(), (line, test_file)


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python -m tests.test_public_face --write")
    with open(RECORD, "w", encoding="utf-8") as f:
        f.write("\n".join(face()) + "\n")
    print(f"wrote {RECORD} ({len(face())} names)")
