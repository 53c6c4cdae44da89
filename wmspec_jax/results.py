"""Result files for long runs: atomic writes, resumable JSONL, confidence intervals.

Experiments write per-text records to JSONL (one line per finished text,
flushed as it completes, so an interrupted run loses nothing finished and a
re-run skips what is there), and summaries / figures atomically (write to a
temporary file in the same directory, then ``os.replace``).
"""

from __future__ import annotations

import json
import math
import os
import pathlib
import sys
import tempfile
import time
from typing import Any, Iterable, Iterator

import numpy as np
from scipy import stats


def atomic_write_text(path, text: str) -> None:
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, suffix=".tmp", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(f.name, path)


def atomic_write_json(path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, default=_json_default) + "\n")


def atomic_savefig(fig, path, **kwargs) -> None:
    """Save a matplotlib figure atomically (PNG unless the suffix says otherwise)."""
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=path.parent, delete=False, suffix=path.suffix) as f:
        fig.savefig(f.name, **kwargs)
    os.replace(f.name, path)


def _json_default(x):
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, np.ndarray):
        return x.tolist()
    raise TypeError(f"not JSON serialisable: {type(x).__name__}")


class JsonlStore:
    """Append-only JSONL keyed by ``record["id"]``; reloads what exists (resume).

    A torn last line (the process was killed mid-write) is ignored on load
    and overwritten by the next append.
    """

    def __init__(self, path):
        self.path = pathlib.Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.records: dict[str, dict] = {}
        good_bytes = 0
        if self.path.exists():
            with open(self.path, "rb") as f:
                for line in f:
                    try:
                        rec = json.loads(line)
                    except json.JSONDecodeError:
                        break
                    if not line.endswith(b"\n"):
                        break
                    self.records[str(rec["id"])] = rec
                    good_bytes += len(line)
            with open(self.path, "r+b") as f:
                f.truncate(good_bytes)

    def __contains__(self, key) -> bool:
        return str(key) in self.records

    def __len__(self) -> int:
        return len(self.records)

    def add(self, records: Iterable[dict]) -> None:
        with open(self.path, "a", encoding="utf-8") as f:
            for rec in records:
                f.write(json.dumps(rec, default=_json_default) + "\n")
                self.records[str(rec["id"])] = rec
            f.flush()
            os.fsync(f.fileno())

    def values(self) -> list[dict]:
        return list(self.records.values())


def mean_ci(values, level: float = 0.95) -> tuple[float, float]:
    """Mean and half-width of its Student-t confidence interval."""
    x = np.asarray(values, np.float64)
    x = x[np.isfinite(x)]
    if x.size == 0:
        return float("nan"), float("nan")
    if x.size == 1:
        return float(x[0]), float("nan")
    half = stats.t.ppf(0.5 + level / 2, x.size - 1) * x.std(ddof=1) / math.sqrt(x.size)
    return float(x.mean()), float(half)


class Progress:
    """Minimal progress line on stderr: done/total, rate and ETA."""

    def __init__(self, total: int, what: str):
        self.total, self.what, self.done, self.t0 = total, what, 0, time.time()

    def update(self, n: int = 1) -> None:
        self.done += n
        elapsed = time.time() - self.t0
        rate = self.done / elapsed if elapsed > 0 else float("nan")
        eta = (self.total - self.done) / rate if rate > 0 else float("nan")
        print(f"[{self.what}] {self.done}/{self.total} ({rate:.2f}/s, eta {eta:.0f}s)", file=sys.stderr, flush=True)


def batched(items: list, size: int) -> Iterator[list]:
    for i in range(0, len(items), size):
        yield items[i : i + size]
