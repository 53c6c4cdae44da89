#!/usr/bin/env bash
# Sets up ./.venv and runs the main job (the README's first command): the
# quick preset of experiments/reproduce.py, outputs in results/quick/.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/setup_env.sh"
cd "$ROOT"
exec "$ROOT/.venv/bin/python" -m experiments.reproduce --preset=quick --output_dir=results/quick "$@"
