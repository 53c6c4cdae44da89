"""Suite-wide collection order.

``scripts/run_tests.sh`` runs two pytest-xdist workers with ``--dist loadfile``:
each file goes whole to one worker, handed out in collection order. With the
alphabetical order the longest files (subprocess experiments, notebooks, the
8-device runs) came last and one worker finished minutes after the other.
Handing the longest files out first (longest-processing-time-first) lets the
two workers end together. Within a file the order is unchanged, and the list
only orders: a file missing from it runs after these, as before.
"""

from __future__ import annotations

import os

# Longest first (seconds of each file on the 2-core CPU, summed from
# `bash scripts/run_tests.sh --durations=0`; the whole suite sums to ~1,300 s).
LONGEST_FILES = (
    "test_lab.py",            # ~205 s: the experiment scripts as subprocesses, SIGKILL and resume
    "test_notebooks.py",      # ~170 s: four notebooks in kernels
    "test_speculative.py",    # ~165 s
    "test_robustness.py",     # ~90 s
    "test_cli.py",            # ~85 s: wmspec-generate / wmspec-detect on the built-in pair
    "test_sharding.py",       # ~70 s: 8 forced devices in a subprocess
    "test_sharded_runs.py",   # ~65 s: 8 devices, two jax.distributed processes
    "test_benchmarks.py",     # ~45 s: the accelerator check at reduced shapes, six processes
    "test_cli_generate_adversarial.py",  # ~40 s: five generation configurations of the built-in pair
)


def pytest_collection_modifyitems(session, config, items):
    rank = {name: i for i, name in enumerate(LONGEST_FILES)}
    items.sort(key=lambda item: rank.get(os.path.basename(str(item.path)), len(rank)))
