"""Do two output directories of the main job hold the same results, timings aside?

    python -m benchmarks.compare_outputs results/a results/b

Compares ``generations.jsonl`` record by record, every ``*.json`` of the
directory and of ``tradeoff/`` field by field, the CSV / markdown tables and
the saved detectors byte for byte, and reports each difference. Fields that
are wall times or cache use (``*seconds*``, ``*time*``, PTT, ``cache_hits``)
are skipped: they differ from run to run. Record fields present in one directory only are listed
separately (``--ignore_added=stopped,...`` accepts named ones). The speed
tables (``speculative.csv``, ``summary.md``) hold PTT, so they are compared
through ``speculative.json`` and ``summary.json``. Exit status 0 when
nothing else differs.
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
import sys


def _is_run_detail(key: str) -> bool:
    """Wall times and cache use: they differ from run to run, the results do not."""
    key = key.lower()
    return any(word in key for word in ("second", "time", "ptt", "cache"))


def _diff(x, y, path: str, out: list) -> None:
    if isinstance(x, dict) and isinstance(y, dict):
        for k in sorted(set(x) | set(y)):
            if _is_run_detail(k):
                continue
            if k not in x or k not in y:
                out.append((f"{path}/{k}", "only in " + ("the second" if k not in x else "the first")))
            else:
                _diff(x[k], y[k], f"{path}/{k}", out)
    elif isinstance(x, list) and isinstance(y, list):
        if len(x) != len(y):
            out.append((path, f"{len(x)} vs {len(y)} items"))
            return
        for i, (u, v) in enumerate(zip(x, y)):
            _diff(u, v, f"{path}[{i}]", out)
    elif x != y and not (isinstance(x, float) and isinstance(y, float) and math.isnan(x) and math.isnan(y)):
        out.append((path, f"{x!r} vs {y!r}"))


def _records(path: str) -> dict:
    with open(path, encoding="utf-8") as f:
        return {rec["id"]: rec for rec in map(json.loads, filter(str.strip, f))}


def compare(first: str, second: str, ignore_added=()) -> list:
    """[(where, what)] of every difference between the two directories (module doc)."""
    out = []
    a, b = _records(os.path.join(first, "generations.jsonl")), _records(os.path.join(second, "generations.jsonl"))
    if set(a) != set(b):
        out.append(("generations.jsonl", f"{len(set(a) ^ set(b))} ids in one directory only"))
    for key in sorted(set(a) & set(b)):
        x = {k: v for k, v in a[key].items() if k not in ignore_added}
        y = {k: v for k, v in b[key].items() if k not in ignore_added}
        _diff(x, y, f"generations.jsonl/{key}", out)
    for sub in ("", "tradeoff"):
        for path in sorted(glob.glob(os.path.join(glob.escape(first), sub, "*.json"))):
            other = os.path.join(second, sub, os.path.basename(path))
            if not os.path.exists(other):
                out.append((other, "missing"))
                continue
            with open(path, encoding="utf-8") as f, open(other, encoding="utf-8") as g:
                _diff(json.load(f), json.load(g), os.path.join(sub, os.path.basename(path)), out)
    for pattern in ("*.csv", "*.md", os.path.join("detectors", "*.npz")):
        for path in sorted(glob.glob(os.path.join(glob.escape(first), pattern))):
            rel = os.path.relpath(path, first)
            other = os.path.join(second, rel)
            with open(path, "rb") as f:
                same = os.path.exists(other) and f.read() == open(other, "rb").read()
            if not same and not rel.startswith(("speculative.", "summary.md")):  # their PTT columns are timings
                out.append((rel, "differs"))
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("first")
    parser.add_argument("second")
    parser.add_argument("--ignore_added", default="", help="record fields to ignore (comma-separated)")
    args = parser.parse_args(argv)
    diffs = compare(args.first, args.second, tuple(filter(None, args.ignore_added.split(","))))
    for where, what in diffs[:50]:
        print(f"{where}: {what}")
    print(f"{len(diffs)} difference(s)")
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
