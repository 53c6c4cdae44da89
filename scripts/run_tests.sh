#!/usr/bin/env bash
# Sets up ./.venv and runs the test suite (the README's test command).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/setup_env.sh"
cd "$ROOT"
# One XLA compilation cache for this run, shared by both workers and by the
# experiment, CLI and notebook processes the tests start: they compile many of
# the same programs. Fresh for every run and removed at exit, so a run never
# reuses another run's executables.
# The tools' own cache (the built-in tokenizer) likewise: fresh, never the user's ~/.cache.
CREATED=()
if [ -z "${JAX_COMPILATION_CACHE_DIR:-}" ]; then
  JAX_COMPILATION_CACHE_DIR="$(mktemp -d -t wmspec-xla-cache.XXXXXX)"
  CREATED+=("$JAX_COMPILATION_CACHE_DIR")
  export JAX_COMPILATION_CACHE_DIR
fi
if [ -z "${WMSPEC_CACHE_DIR:-}" ]; then
  WMSPEC_CACHE_DIR="$(mktemp -d -t wmspec-cache.XXXXXX)"
  CREATED+=("$WMSPEC_CACHE_DIR")
  export WMSPEC_CACHE_DIR
fi
trap 'rm -rf "${CREATED[@]}"' EXIT
export JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="${JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS:-0}"
# The suite's time is mostly XLA compiling small models' programs that then run
# for milliseconds; LLVM's lowest optimisation level compiles them about a fifth
# faster. The arithmetic is IEEE either way (no fast-math), but multiply-adds
# are fused differently, so floats may differ from the default level's in the
# last bits; the tests compare floats within one run or with tolerances.
# Benchmark figures are never measured through this script. A compute-bound
# loop runs much slower at this level (the edit test's DP: 15x), so its test file
# compiles that one program at the default level (tests/test_key_sequence.py).
case " ${XLA_FLAGS:-} " in
  *xla_backend_optimization_level*) ;;
  *) export XLA_FLAGS="${XLA_FLAGS:+$XLA_FLAGS }--xla_backend_optimization_level=0" ;;
esac
# XLA:CPU's fusion emitters (its default code generator for fused loops) compile
# these programs about 30 % slower than its elemental emitters; the arithmetic
# is the same IEEE operations. A jaxlib that does not know the flag would
# abort on it, so it is tried first.
case " ${XLA_FLAGS:-} " in
  *xla_cpu_use_fusion_emitters*) ;;
  *) if XLA_FLAGS="$XLA_FLAGS --xla_cpu_use_fusion_emitters=false" "$ROOT/.venv/bin/python" -c \
         "import jax.numpy as jnp; jnp.ones(3).sum().block_until_ready()" >/dev/null 2>&1; then
       export XLA_FLAGS="$XLA_FLAGS --xla_cpu_use_fusion_emitters=false"
     fi ;;
esac
set +e
# Two workers (the CI machine has 2 cores); each test file stays on one worker
# so its module-scoped fixtures are built once. A worker that dies (a crash, or
# a hung test ended by pytest.ini's timeout) fails its test and is replaced,
# at most twice, so that a file that kills every worker ends the run.
"$ROOT/.venv/bin/python" -m pytest -q -n "${PYTEST_WORKERS:-2}" --dist loadfile --max-worker-restart=2 "$@"
status=$?
set -e
if [ "$status" -eq 5 ]; then
  # pytest's "no tests collected": a suite that runs nothing must not pass.
  echo "run_tests.sh: pytest collected no tests; failing on purpose" >&2
  exit 1
fi
exit "$status"
