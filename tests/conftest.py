"""Suite-wide collection order, and compiled programs freed after each test file.

``scripts/run_tests.sh`` runs two pytest-xdist workers with ``--dist loadfile``:
each file goes whole to one worker, handed out in collection order. With the
alphabetical order the longest files (subprocess experiments, notebooks, the
8-device runs) came last and one worker finished minutes after the other.
Handing the longest files out first (longest-processing-time-first) lets the
two workers end together. Within a file the order is unchanged, and the list
only orders: a file missing from it runs after these, as before.
"""

from __future__ import annotations

import gc
import os
import sys

import pytest

# Longest first (seconds of each file on a 2-core x86 CPU, summed from
# `bash scripts/run_tests.sh --durations=0`, 2026-11-28, before the elemental-emitter flag; the whole
# suite summed to ~3,680 s on a machine then ~1.5x slower per decode step than on 2026-11-26).
LONGEST_FILES = (
    "test_speculative.py",    # ~395 s
    "test_lab.py",            # ~280 s: the experiment scripts as subprocesses, SIGKILL and resume
    "test_multidraft.py",     # ~275 s: the multi-draft laws on the toy and generic pairs, tiny transformers
    "test_notebooks.py",      # ~235 s: five notebooks in kernels
    "test_cli.py",            # ~230 s: wmspec-generate / wmspec-detect on the built-in pair
    "test_cli_generate_adversarial.py",  # ~195 s: generation configurations of the built-in pair
    "test_cli_model_assisted.py",  # ~180 s: wmspec-generate / wmspec-detect --model on the built-in pair
    "test_benchmarks.py",     # ~155 s: the accelerator check at reduced shapes, several processes
    "test_detect_gumbel.py",  # ~120 s
    "test_builtin.py",        # ~105 s
    "test_parity.py",         # ~100 s: parity with transformers
    "test_sharded_runs.py",   # ~100 s: 8 devices, two jax.distributed processes
    "test_sharding.py",       # ~100 s: 8 forced devices in a subprocess
    "test_model_assisted.py",  # ~75 s
    "test_decoder_plugin.py",  # ~70 s: a registered scheme through the tools on the built-in pair
    "test_cli_deployment.py",  # ~100 s: 400 human texts under every claim, two short generations
    "test_key_sequence.py",   # ~80 s alone: key-sequence laws, the edit test (fully optimised), the tools
    "test_detect_permutation.py",  # ~70 s each
    "test_families.py",
    "test_detect_synthid.py",
    "test_windows.py",
    "test_tradeoff.py",       # ~60 s each
    "test_candidates.py",
    "test_tree_attention.py",
    "test_robustness.py",     # ~55 s each
    "test_detect_pvalues.py",
)


def pytest_collection_modifyitems(session, config, items):
    rank = {name: i for i, name in enumerate(LONGEST_FILES)}
    items.sort(key=lambda item: rank.get(os.path.basename(str(item.path)), len(rank)))


@pytest.fixture(autouse=True, scope="module")
def _free_compiled_programs():
    """Drops JAX's compiled programs when a test file ends.

    A worker runs dozens of files in one process, and every program XLA:CPU compiles stays loaded
    while its jit cache holds it, about six memory mappings each: kept for the worker's life they
    came near Linux's default limit of 65,530 (``vm.max_map_count``), past which LLVM cannot map
    new code and aborts the process (docs/measurements/2026-11-28-test-worker-memory-maps.md). A
    later file that needs a program again loads it from the run's persistent compilation cache.
    """
    yield
    jax = sys.modules.get("jax")
    if jax is not None:
        jax.clear_caches()
    store = sys.modules.get("wmspec_jax.executable_store")
    if store is not None:
        store.forget()
    gc.collect()


@pytest.fixture(autouse=True)
def _executable_store_off_after_each_test():
    """A tool run in-process turns the executable store on for the worker's life; library tests after
    it trace and compile through ``jax.jit`` as they would in a user's program."""
    yield
    store = sys.modules.get("wmspec_jax.executable_store")
    if store is not None and store.directory() is not None:
        store.enable(None)
