#!/usr/bin/env bash
# One accelerator check: the speed table at the paper's shapes, the transformers
# baseline, the decode step against its references, the 7B memory per device,
# batch invariance, multi-draft speed, and the tests behind the claims, run on the default JAX
# device; one JSON (plus each part's log) in OUT_DIR.
#
#   bash benchmarks/accelerator_check.sh [OUT_DIR]      # default results/accelerator_check
#
# On a GPU / TPU everything runs at full size, most of the time being
# compilation. On a CPU the shapes are reduced (CHECK_REDUCE, default 16) so the
# same script runs anywhere; the suite runs it that way. The parts run in order
# of importance (the headline rows of the speed table and the baseline first,
# the rest of the table last) and the JSON is rewritten after each part, so a
# short lease that ends the script early still leaves the parts it finished.
# Settings (environment):
#   CHECK_PYTHON      interpreter (default: ./.venv/bin/python if present, else python3)
#   CHECK_REDUCE      divide the paper shapes' width, depth and vocabulary (default 1; CPU 16)
#   CHECK_REPEATS     interleaved timing rounds (default 3)
#   CHECK_NEW_TOKENS  generated tokens per row (default 64)
#   CHECK_LAYERS      decode-step benchmark: layers of the 7B-shaped model (default all 32; CPU 4)
#   CHECK_TESTS       pytest -k expression of the tests to run ("none": skip them)
#   CHECK_TEST_WORKERS pytest-xdist workers for the tests (default 4 on an accelerator, 0 on a CPU)
#   CHECK_TIMEOUT     seconds allowed to each part (default 600)
#   CHECK_DEADLINE    seconds for the whole script: a part gets at most what is left, and parts
#                     that would start with under 20 s left are recorded as skipped (default: none)
#   CHECK_PAPER_RUNS  which runs bench_paper_scale times first (default --preset=table_head: the
#                     table's Llama-2-7B rows at batch 1 with Gumbel-max, and the baseline)
#   CHECK_PAPER_MORE_RUNS  which runs it times last (default --preset=table_rest: the rest of the
#                     table of docs/performance.md; "none": skip)
#   CHECK_MULTIDRAFT_RUNS  which multi-draft runs bench_paper_scale times (default: the Llama-2-7B
#                     pair at K = 3, standard and Alg. 1, one chain against 3 chains, 4 distinct
#                     chains and the distinct (3, 2, 1) tree; docs/multidraft.md; "none": skip)
#   CHECK_DECODE_FLAGS, CHECK_INVARIANCE_FLAGS
#                     extra flags for bench_decode_step, batch_invariance (appended: they
#                     override the script's own)
# A part that fails or times out is recorded as such; the others still run.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT_DIR="$(mkdir -p "${1:-$ROOT/results/accelerator_check}" && cd "${1:-$ROOT/results/accelerator_check}" && pwd)"
cd "$ROOT"
if [ -n "${CHECK_PYTHON:-}" ]; then PY="$CHECK_PYTHON"
elif [ -x "$ROOT/.venv/bin/python" ]; then PY="$ROOT/.venv/bin/python"
else PY=python3; fi
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
# JAX and torch share the device in the baseline: no preallocation of most of its memory.
export XLA_PYTHON_CLIENT_PREALLOCATE=false
BACKEND="$("$PY" -c 'import jax; print(jax.default_backend())' 2>/dev/null)" || BACKEND=unknown
if [ "$BACKEND" = cpu ]; then
  REDUCE="${CHECK_REDUCE:-16}"; LAYERS="${CHECK_LAYERS:-4}"; DECODE_MODEL=deep; WORKERS="${CHECK_TEST_WORKERS:-0}"
else
  REDUCE="${CHECK_REDUCE:-1}"; LAYERS="${CHECK_LAYERS:-32}"; DECODE_MODEL=llama2-7b; WORKERS="${CHECK_TEST_WORKERS:-4}"
fi
REPEATS="${CHECK_REPEATS:-3}"
NEW_TOKENS="${CHECK_NEW_TOKENS:-64}"
TIMEOUT="${CHECK_TIMEOUT:-600}"
DEADLINE="${CHECK_DEADLINE:-0}"
TESTS="${CHECK_TESTS:-thm41a_output_distribution or thm41b or function_of_key_and_prompt or row_of_a_batch or transformers or bit_identical or float64_reference}"
echo "accelerator check: backend $BACKEND, shapes / $REDUCE, $REPEATS rounds, $NEW_TOKENS new tokens -> $OUT_DIR"
STATUS_FILE="$OUT_DIR/parts.tsv"
: > "$STATUS_FILE"

report() {  # report [final]: (re)writes accelerator_check.json from the parts finished so far
  "$PY" - "$OUT_DIR" "$@" <<'PY'
import json, os, sys, xml.etree.ElementTree as ET
out_dir = sys.argv[1]
report = {"parts": {}}
with open(os.path.join(out_dir, "parts.tsv")) as f:
    for line in f:
        name, rc, seconds = line.rstrip("\n").split("\t")
        if rc == "skipped":  # CHECK_DEADLINE reached before the part started
            report["parts"][name] = {"exit_status": None, "seconds": 0, "timed_out": False, "skipped": True}
        else:
            report["parts"][name] = {"exit_status": int(rc), "seconds": int(seconds),
                                     "timed_out": int(rc) in (124, 137)}
device_log = os.path.join(out_dir, "device.log")
if os.path.exists(device_log):
    lines = [l for l in open(device_log) if l.startswith("{")]
    report["device"] = json.loads(lines[-1]) if lines else None
for name in ("paper_scale", "paper_scale_more", "decode_step", "memory_7b", "batch_invariance", "multidraft"):
    path = os.path.join(out_dir, name + ".json")
    report[name] = json.load(open(path)) if os.path.exists(path) else None
xml_path = os.path.join(out_dir, "tests.xml")
if os.path.exists(xml_path):
    cases = []
    for case in ET.parse(xml_path).getroot().iter("testcase"):
        outcome = "passed"
        for tag in ("failure", "error", "skipped"):
            if case.find(tag) is not None:
                outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[tag]
        cases.append({"test": f"{case.get('classname')}::{case.get('name')}", "outcome": outcome})
    report["tests"] = cases
tmp = os.path.join(out_dir, ".accelerator_check.json.tmp")
with open(tmp, "w") as f:
    json.dump(report, f, indent=1)
os.replace(tmp, os.path.join(out_dir, "accelerator_check.json"))
if len(sys.argv) > 2:
    failed = [n for n, p in report["parts"].items() if p["exit_status"] != 0]
    print(f"wrote {os.path.join(out_dir, 'accelerator_check.json')}; parts failed or skipped: {failed or 'none'}")
PY
}

part() {  # part NAME COMMAND...: runs one part under the timeout, logs it, records its exit status and seconds
  local name="$1"; shift
  local t0=$SECONDS limit="$TIMEOUT"
  if [ "$DEADLINE" -gt 0 ]; then
    local left=$((DEADLINE - SECONDS))
    if [ "$left" -lt 20 ]; then
      echo "== $name: skipped ($left s left of CHECK_DEADLINE=$DEADLINE)"
      printf '%s\t%s\t%s\n' "$name" skipped 0 >> "$STATUS_FILE"; report; return
    fi
    if [ "$left" -lt "$limit" ]; then limit=$left; fi
  fi
  echo "== $name"
  timeout "$limit" "$@" > "$OUT_DIR/$name.log" 2>&1
  local rc=$?
  tail -n 25 "$OUT_DIR/$name.log"
  printf '%s\t%s\t%s\n' "$name" "$rc" "$((SECONDS - t0))" >> "$STATUS_FILE"
  report
}

part device "$PY" -c 'import jax, json; d = jax.devices()[0]; print(json.dumps({"backend": jax.default_backend(), "device_kind": d.device_kind, "devices": len(jax.devices()), "jax": jax.__version__}))'
if command -v nvidia-smi > /dev/null; then nvidia-smi > "$OUT_DIR/nvidia-smi.log" 2>&1; fi
part paper_scale "$PY" -m benchmarks.bench_paper_scale ${CHECK_PAPER_RUNS:---preset=table_head} --reduce="$REDUCE" \
  --repeats="$REPEATS" --max_new_tokens="$NEW_TOKENS" --output="$OUT_DIR/paper_scale.json"
part decode_step "$PY" -m benchmarks.bench_decode_step --model="$DECODE_MODEL" --layers="$LAYERS" \
  --dtype=bfloat16 --capacities=256,4096 --repeats="$REPEATS" --output="$OUT_DIR/decode_step.json" \
  ${CHECK_DECODE_FLAGS:-}
if [ "${CHECK_TESTS:-}" != none ]; then
  XDIST=(); if [ "$WORKERS" -gt 0 ]; then XDIST=(-n "$WORKERS"); fi
  part tests "$PY" -m pytest -q -p no:cacheprovider -o addopts="" "${XDIST[@]}" tests/test_speculative.py \
    tests/models/test_parity.py tests/models/test_attention.py -k "$TESTS" --junitxml="$OUT_DIR/tests.xml"
fi
part batch_invariance "$PY" -m benchmarks.batch_invariance --max_new_tokens="$((NEW_TOKENS < 32 ? NEW_TOKENS : 32))" \
  --reduce="$REDUCE" --output="$OUT_DIR/batch_invariance.json" ${CHECK_INVARIANCE_FLAGS:-}
part memory_7b "$PY" -m benchmarks.bench_sharding --parts=memory,gpu --json="$OUT_DIR/memory_7b.json"
if [ "${CHECK_MULTIDRAFT_RUNS:-}" != none ]; then
  part multidraft "$PY" -m benchmarks.bench_paper_scale \
    ${CHECK_MULTIDRAFT_RUNS:---pairs=llama2 --methods=standard,pseudorandom --lookaheads=3 --draft_trees=1,3,4d,3x2x1d --hf_baseline=off} \
    --reduce="$REDUCE" --repeats="$REPEATS" --max_new_tokens="$NEW_TOKENS" --output="$OUT_DIR/multidraft.json"
fi
if [ "${CHECK_PAPER_MORE_RUNS:-}" != none ]; then
  part paper_scale_more "$PY" -m benchmarks.bench_paper_scale ${CHECK_PAPER_MORE_RUNS:---preset=table_rest} \
    --reduce="$REDUCE" --repeats="$REPEATS" --max_new_tokens="$NEW_TOKENS" --output="$OUT_DIR/paper_scale_more.json"
fi
report final
