#!/usr/bin/env bash
# Sets up ./.venv and runs the main job (the README's first command).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/setup_env.sh"
cd "$ROOT"
exec "$ROOT/.venv/bin/python" experiments/quickstart.py "$@"
