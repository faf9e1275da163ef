#!/usr/bin/env bash
# Single-GPU check of gtpo_verl's estimators (optional; nothing depends on it).
#
#   bash benchmarks/gpu_check.sh [OUT_DIR]
#
# 1. runs python -m benchmarks.bench_estimators on CUDA tensors at the default sizes (64x16x1024 and
#    128x16x4096; 5 round-robin repeats, synchronised timings, peak memory from
#    torch.cuda.max_memory_allocated);
# 2. checks that every estimator's CUDA output equals its CPU output (torch.allclose,
#    rtol 1e-4, atol 1e-5) on one 64x16x1024 batch, and that no input was modified;
# 3. prints a short table; the full JSON + Markdown report lands in OUT_DIR
#    (default: $OUT if set, else benchmarks/results/gpu).
# Exit status: 0 all equal, 1 a mismatch or an error on CUDA, 2 no usable GPU / Python.
# Runs in well under 5 minutes on one GPU (hard limit: 290 s).
#
# Needs a Python with CUDA torch, verl 0.9.1 and this package installed (pip install -e .);
# set PYTHON=/path/to/python to choose it. Dry run of the same script path on CPU (no GPU):
#   BENCH_DEVICE=cpu BENCH_SIZES=small bash benchmarks/gpu_check.sh /tmp/gpu_check_dry
#
# Bare mode (BENCH_MODE=bare): for a CUDA machine with only torch and numpy (no verl, Ray or
# vLLM, nothing installable). Runs benchmarks/check_device.py with this repository on
# PYTHONPATH: CUDA-vs-CPU equality of every estimator and the grpo_s loss, and each
# estimator's time as a ratio to the memory floor measured in the same run, at
# BENCH_FLOOR_SIZES (default 128x16x4096,512x16x20480). CPU dry run in a venv without verl:
#   BENCH_MODE=bare BENCH_DEVICE=cpu BENCH_FLOOR_SIZES=16x16x1024 PYTHON=/tmp/noverl/bin/python \
#     bash benchmarks/gpu_check.sh /tmp/gpu_check_bare
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
OUT_DIR="${1:-${OUT:-benchmarks/results/gpu}}"
DEVICE="${BENCH_DEVICE:-cuda}"
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

if [ "${BENCH_MODE:-full}" = bare ]; then
  echo "== gpu_check (bare): device=$DEVICE floor sizes=${BENCH_FLOOR_SIZES:-128x16x4096,512x16x20480} repeats=$REPEATS python=$PY out=$OUT_DIR"
else
  echo "== gpu_check: device=$DEVICE sizes=$SIZES repeats=$REPEATS python=$PY out=$OUT_DIR"
fi
if [ "$DEVICE" != cpu ]; then
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  if ! "$PY" -c "import torch,sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
    echo "gpu_check: torch.cuda.is_available() is False for $PY (CPU-only torch?)" >&2
    exit 2
  fi
fi

mkdir -p "$OUT_DIR"
start=$(date +%s)
if [ "${BENCH_MODE:-full}" = bare ]; then
  PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" timeout 290 "$PY" -m benchmarks.check_device \
    --device "$DEVICE" --sizes "${BENCH_FLOOR_SIZES:-128x16x4096,512x16x20480}" --repeats "$REPEATS" --out "$OUT_DIR"
  rc=$?
  echo "== gpu_check (bare): finished in $(( $(date +%s) - start )) s with status $rc (report: $OUT_DIR/check_device.md)"
  exit "$rc"
fi
timeout 290 "$PY" -m benchmarks.bench_estimators \
  --device "$DEVICE" --sizes "$SIZES" --repeats "$REPEATS" --check --short --out "$OUT_DIR"
rc=$?
echo "== gpu_check: finished in $(( $(date +%s) - start )) s with status $rc (report: $OUT_DIR/bench_${DEVICE%%:*}_${SIZES}.md)"
if [ "$rc" -eq 124 ]; then
  echo "gpu_check: timed out after 290 s" >&2
fi
exit "$rc"
