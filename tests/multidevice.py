"""Runs a script on N forced CPU devices and returns the JSON it prints last.

XLA reads ``--xla_force_host_platform_device_count`` only when jax starts, and
the test process has started it already with one device, so multi-device
checks run their script in a fresh interpreter. The script prints one JSON
object as its last line of stdout; this returns it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def xla_flags_with_devices(num_devices: int | None) -> str:
    """The caller's XLA_FLAGS with the forced CPU device count set to ``num_devices`` (none: removed).

    Keeps the test runner's other flags (scripts/run_tests.sh sets the backend optimisation level)."""
    kept = [f for f in os.environ.get("XLA_FLAGS", "").split() if not f.startswith("--xla_force_host_platform_device_count")]
    if num_devices is not None:
        kept.append(f"--xla_force_host_platform_device_count={int(num_devices)}")
    return " ".join(kept)


def run_on_devices(script: str, num_devices: int, *args: str, timeout: float = 600) -> dict:
    """Runs ``python -c script *args`` on ``num_devices`` CPU devices from the repo root.

    Fails the test (with the end of stderr) if the script exits non-zero.
    """
    env = dict(os.environ, XLA_FLAGS=xla_flags_with_devices(num_devices), JAX_PLATFORMS="cpu")
    env["PYTHONPATH"] = REPO_ROOT + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run([sys.executable, "-c", script, *map(str, args)], env=env, capture_output=True,
                          text=True, timeout=timeout, cwd=REPO_ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])
