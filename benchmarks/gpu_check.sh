#!/usr/bin/env bash
# Single-GPU check of gtpo_verl's estimators (optional; nothing depends on it).
#
#   bash benchmarks/gpu_check.sh [OUT_DIR]
#
# 1. benchmarks/check_device.py: every estimator of the table and the grpo_s loss on CUDA against
#    the same code on CPU (torch.allclose, rtol 1e-4, atol 1e-5, inputs left unchanged), and each
#    estimator's time as a ratio to the memory floor measured in the same run, at BENCH_FLOOR_SIZES
#    (default 128x16x4096,512x16x20480). Needs only torch, numpy and this repository.
# 2. with verl importable (BENCH_MODE=full, the default when it is): python -m benchmarks.bench_estimators
#    on CUDA tensors at BENCH_SIZES (default: 64x16x1024 and 128x16x4096) against verl's own estimators,
#    CUDA peak memory included. BENCH_MODE=bare skips it.
# Reports land in OUT_DIR (default: $OUT if set, else benchmarks/results/gpu).
# Exit status: 0 all equal, 1 a mismatch or an error, 2 no usable GPU / Python. Hard limit 290 s.
#
# PYTHON=/path/to/python chooses the interpreter. Dry run of the same path on the CPU:
#   BENCH_DEVICE=cpu BENCH_FLOOR_SIZES=16x16x1024 BENCH_SIZES=small bash benchmarks/gpu_check.sh /tmp/gpu_check_dry
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2
OUT_DIR="${1:-${OUT:-benchmarks/results/gpu}}"
DEVICE="${BENCH_DEVICE:-cuda}"
FLOOR_SIZES="${BENCH_FLOOR_SIZES:-128x16x4096,512x16x20480}"
SIZES="${BENCH_SIZES:-default}"
REPEATS="${BENCH_REPEATS:-5}"

if [ -n "${PYTHON:-}" ]; then
  PY="$PYTHON"
elif [ -x .venv/bin/python ] && { [ "$DEVICE" = cpu ] || .venv/bin/python -c "import torch,sys; sys.exit(not torch.cuda.is_available())" 2>/dev/null; }; then
  PY=.venv/bin/python
else
  PY="$(command -v python3 || command -v python || true)"
fi
if [ -z "$PY" ]; then
  echo "gpu_check: no python found; set PYTHON=/path/to/python" >&2
  exit 2
fi
MODE="${BENCH_MODE:-$("$PY" -c "import verl" 2>/dev/null && echo full || echo bare)}"

echo "== gpu_check ($MODE): device=$DEVICE floor sizes=$FLOOR_SIZES sizes=$SIZES repeats=$REPEATS python=$PY out=$OUT_DIR"
if [ "$DEVICE" != cpu ]; then
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  if ! "$PY" -c "import torch,sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
    echo "gpu_check: torch.cuda.is_available() is False for $PY (CPU-only torch?)" >&2
    exit 2
  fi
fi

mkdir -p "$OUT_DIR"
start=$(date +%s)
PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" timeout 290 "$PY" -m benchmarks.check_device \
  --device "$DEVICE" --sizes "$FLOOR_SIZES" --repeats "$REPEATS" --out "$OUT_DIR"
rc=$?
if [ "$rc" -eq 0 ] && [ "$MODE" = full ]; then
  left=$((290 - ($(date +%s) - start)))
  timeout "$left" "$PY" -m benchmarks.bench_estimators --device "$DEVICE" --sizes "$SIZES" --repeats "$REPEATS" \
    --out "$OUT_DIR" | tee "$OUT_DIR/bench_estimators.md"
  rc=${PIPESTATUS[0]}
fi
echo "== gpu_check: finished in $(( $(date +%s) - start )) s with status $rc (reports: $OUT_DIR)"
if [ "$rc" -eq 124 ]; then
  echo "gpu_check: timed out after 290 s" >&2
fi
exit "$rc"
