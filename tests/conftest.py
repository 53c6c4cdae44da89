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

# Longest first (seconds of each file on a 2-core x86 CPU, summed from
# `bash scripts/run_tests.sh --durations=0`, 2026-11-26; the whole suite sums to ~1,630 s).
LONGEST_FILES = (
    "test_speculative.py",    # ~230 s
    "test_lab.py",            # ~175 s: the experiment scripts as subprocesses, SIGKILL and resume
    "test_notebooks.py",      # ~100 s: four notebooks in kernels
    "test_multidraft.py",     # ~100 s: the multi-draft laws on the toy pair, tiny transformers
    "test_cli_generate_adversarial.py",  # ~90 s: eight generation configurations of the built-in pair
    "test_cli.py",            # ~80 s: wmspec-generate / wmspec-detect on the built-in pair
    "test_parity.py",         # ~80 s: parity with transformers
    "test_sharding.py",       # ~70 s: 8 forced devices in a subprocess
    "test_sharded_runs.py",   # ~55 s: 8 devices, two jax.distributed processes
    "test_benchmarks.py",     # ~55 s: the accelerator check at reduced shapes, six processes
    "test_builtin.py",        # ~50 s
    "test_feature_draft.py",  # ~50 s
    "test_draft_sharding.py",  # ~50 s
    "test_families.py",       # ~40 s
    "test_decoder_plugin.py",  # ~65 s: a registered scheme through the tools on the built-in pair
    "test_hf_synthid.py",     # ~35 s each: transformers' and vLLM's code against the reimplementations
    "test_hf_kgw.py",
    "test_engine_gumbel.py",
)


def pytest_collection_modifyitems(session, config, items):
    rank = {name: i for i, name in enumerate(LONGEST_FILES)}
    items.sort(key=lambda item: rank.get(os.path.basename(str(item.path)), len(rank)))
