"""Suite-wide collection order, compiled programs freed after each test file, and the tools'
programs compiled at XLA's default optimisation.

``scripts/run_tests.sh`` runs two pytest-xdist workers with ``--dist loadfile``:
each file goes whole to one worker, handed out in collection order. With the
alphabetical order the longest files (subprocess experiments, notebooks, the
8-device runs) came last and one worker finished minutes after the other.
Handing the longest files out first (longest-processing-time-first) lets the
two workers end together. Within a file the order is unchanged, and the list
only orders: a file missing from it runs after these, as before.

pytest-xdist's file scheduler reorders the files by their number of tests (most
first) unless told not to (``--loadscope-reorder``, on by default), which put
the long files with few tests (the benchmarks, the notebooks, the experiment
scripts) last whatever this list said; :func:`pytest_configure` turns that off.
"""

from __future__ import annotations

import gc
import os
import sys

import pytest

# Longest first (seconds of each file on a 2-core x86 CPU, the mean of two runs of
# `bash scripts/run_tests.sh --durations=0` on 2026-12-07, both workers busy and another test run
# sharing the CPU, so about twice a quiet machine's figures; 3,550-3,640 s summed over all files).
LONGEST_FILES = (
    "test_cli_generate_adversarial.py",  # ~260 s: generation configurations of the built-in pair
    "test_benchmarks.py",     # ~260 s: the accelerator check and the pass profile, several processes
    "test_cli.py",            # ~240 s: wmspec-generate / wmspec-detect on the built-in pair
    "test_speculative.py",    # ~215 s
    "test_lab.py",            # ~195 s: the experiment scripts as subprocesses, SIGKILL and resume
    "test_cli_deployment.py",  # ~180 s: 400 human texts under every claim, two short generations
    "test_notebooks.py",      # ~160 s: five notebooks in kernels
    "test_cli_model_assisted.py",  # ~155 s: wmspec-generate / wmspec-detect --model on the built-in pair
    "test_multidraft.py",     # ~135 s: the multi-draft laws on the toy and generic pairs, tiny transformers
    "test_parity.py",         # ~115 s: parity with transformers
    "test_builtin.py",        # ~110 s
    "test_key_sequence.py",   # ~95 s: key-sequence laws, the edit test (fully optimised), the tools
    "test_robustness.py",     # ~85 s
    "test_executable_store.py",  # ~80 s
    "test_detect_gumbel.py",  # ~80 s
    "test_sharded_runs.py",   # ~70 s: 8 devices, two jax.distributed processes
    "test_sharding.py",       # ~65 s: 8 forced devices in a subprocess
    "test_detect_synthid.py",  # ~60 s each
    "test_detect_permutation.py",
    "test_decoder_plugin.py",  # ~55 s each: a registered scheme through the tools on the built-in pair
    "test_drafter_sensitivity.py",
    "test_tradeoff.py",       # ~45 s each
    "test_families.py",
    "test_text_folding.py",   # ~40 s each
    "test_windows.py",
    "test_race_tree.py",
    "test_builtin_drafts.py",
    "test_rows_matmul.py",    # ~35 s
)


def pytest_configure(config):
    # Without this, pytest-xdist hands files out by their number of tests, not in collection order.
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


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


# XLA's own defaults; scripts/run_tests.sh compiles the run at level 0 with the elemental emitters.
_TOOL_COMPILER_OPTIONS = {"xla_backend_optimization_level": 3, "xla_cpu_use_fusion_emitters": True}


@pytest.fixture(scope="module")
def tool_programs_at_default_optimisation():
    """The command-line tools run in-process compile the built-in pair's generation loop (through
    :mod:`wmspec_jax.executable_store`) at XLA's default optimisation, not at the run's lowest level.

    The run's flags suit the toy models' programs, which compile for seconds and then run for
    milliseconds. The built-in target's loop runs for tens of seconds, and the lowest level makes it
    about 1.4x slower: ``wmspec-generate`` of 24 answers of 64 tokens (tests/test_cli.py) took 46 s
    under the run's flags and 33 s with these options, the loop's compilation about 7 s either way
    (level 3 with the elemental emitters: 18 s), the tokens identical. The same programs, only the
    compiler's optimisation differs (as for the edit test in tests/test_key_sequence.py); the store's
    entries, keyed without these options, live in the run's own cache directory. Used by the files
    whose generations are long enough to gain (tests/test_cli.py: 70 s -> 57 s, one process alone;
    tests/test_cli_generate_adversarial.py: 64 s -> 57 s); a tiny model's loop compiles slower so
    (tests/test_executable_store.py: 20 s -> 35 s), and short generations gain nothing.
    """
    from wmspec_jax import executable_store

    with pytest.MonkeyPatch.context() as patch:
        for name, value in _TOOL_COMPILER_OPTIONS.items():
            patch.setitem(executable_store._COMPILER_OPTIONS, name, value)
        yield
