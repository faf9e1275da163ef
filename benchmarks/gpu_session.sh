#!/usr/bin/env bash
# The whole single-GPU check in one command, highest value first, at most SESSION_LIMIT_S (540 s):
#
#   bash benchmarks/gpu_session.sh [OUT_DIR]         (OUT_DIR default: $OUT if set, else benchmarks/results/gpu_session)
#
# 0. set-up (90 s at most): installs the wheels benchmarks/gpu_prepare.sh put in .whl into /tmp/site (the
#    machine has no network), and records the GPU, the driver and the versions the checks run with;
# 1. verl's FSDP2 actor on the GPU (330 s at most, 120 s a setting): python -m benchmarks.check_actor_device,
#    bf16 with and without offload, the compiled and the chunked entropy against a Hugging Face float32
#    recomputation, one DAPO_TOKEN and one DAPO_SEQ update, peak memory and seconds per call;
# 2. the estimators and the grpo_s loss on the GPU against the CPU and verl's grpo (what time is left,
#    at most 200 s): bash benchmarks/gpu_check.sh.
#
# Each stage runs under its own `timeout`; a stage that fails or times out does not stop the next. OUT_DIR
# gets eight files (few, so that all of them come back from a remote machine): session.md (stages, status, seconds, versions),
# session.log (everything printed), check_actor_device.{json,md}, check_device.{json,md},
# bench_estimators.{json,md}. Exit status: 0 every stage passed, 1 a stage failed, 2 no usable GPU.
#
# Dry run of the same path on the CPU (the repository's venv, no wheels installed, tiny sizes):
#   BENCH_DEVICE=cpu bash benchmarks/gpu_session.sh /tmp/gpu_session_dry
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2
OUT_DIR="${1:-${OUT:-benchmarks/results/gpu_session}}"
DEVICE="${BENCH_DEVICE:-cuda}"
SESSION_LIMIT_S="${SESSION_LIMIT_S:-540}"
SITE="${GPU_SITE:-/tmp/site}"
mkdir -p "$OUT_DIR"
exec > >(tee "$OUT_DIR/session.log") 2>&1
start=$(date +%s)
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1

if [ -n "${PYTHON:-}" ]; then
  PY="$PYTHON"
elif [ "$DEVICE" = cpu ] && [ -x .venv/bin/python ]; then
  PY=.venv/bin/python
else
  PY="$(command -v python3 || command -v python || true)"
fi
if [ -z "$PY" ]; then
  echo "gpu_session: no python found; set PYTHON=/path/to/python"
  exit 2
fi

left() {  # seconds a stage may take: its own limit, or what the session has left if that is less
  local remaining=$((SESSION_LIMIT_S - ($(date +%s) - start)))
  echo $((remaining < $1 ? remaining : $1))
}
STAGES=()
stage() {  # NAME LIMIT_S COMMAND...: run it under timeout, note its status and seconds
  local name=$1 limit rc began
  limit=$(left "$2")
  shift 2
  if [ "$limit" -le 10 ]; then
    STAGES+=("| $name | skipped: the session's $SESSION_LIMIT_S s are spent | 0 |")
    return
  fi
  echo "== gpu_session: $name (at most $limit s)"
  began=$(date +%s)
  timeout "$limit" "$@"
  rc=$?
  local status="passed"
  if [ "$rc" -eq 124 ]; then
    status="**timed out** after $limit s"
  elif [ "$rc" -ne 0 ]; then
    status="**failed** (exit $rc)"
  fi
  STAGES+=("| $name | $status | $(( $(date +%s) - began )) |")
  FAILED=$(( ${FAILED:-0} + (rc != 0) ))
}

# shellcheck disable=SC2329  # invoked as `timeout 90 bash -c setup` (a function cannot be timed out in place)
setup() {
  if [ "$DEVICE" != cpu ] && compgen -G ".whl/*.whl" >/dev/null; then
    # the machine has no network: the wheels travel in .whl beside the repository and go to a folder first on the path
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" .whl/*.whl || return 1
  elif [ "$DEVICE" != cpu ]; then
    echo "gpu_session: no wheels in .whl (run bash benchmarks/gpu_prepare.sh on a machine with the network)"
  fi
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  "$PY" - <<'EOF'
import importlib.metadata as md
import sys

import torch

names = ["torch", "triton", "transformers", "tokenizers", "peft", "verl", "ray", "tensordict", "numpy", "gtpo_verl"]
versions = []
for name in names:
    try:
        versions.append(f"{name} {md.version(name)}")
    except md.PackageNotFoundError:
        versions.append(f"{name} absent")
print("python " + sys.version.split()[0] + "; " + ", ".join(versions))
print(f"cuda available: {torch.cuda.is_available()}" + (f" ({torch.cuda.get_device_name(0)})" if torch.cuda.is_available() else ""))
EOF
}

finish() {  # STATUS: write session.md and leave with STATUS
  {
    echo "# GPU session"
    echo
    echo "device $DEVICE, python $PY, $(date -u +%Y-%m-%dT%H:%MZ), $(( $(date +%s) - start )) s of the $SESSION_LIMIT_S s limit"
    echo
    echo "| stage | status | seconds |"
    echo "|---|---|---:|"
    printf '%s\n' "${STAGES[@]}"
    echo
    echo "Versions, set-up output and every stage's log: session.log; the stages' reports beside it."
  } > "$OUT_DIR/session.md"
  cat "$OUT_DIR/session.md"
  exit "$1"
}

# the repository's code first (gtpo_verl, benchmarks), then on the GPU machine the carried wheels
if [ "$DEVICE" != cpu ]; then
  export PYTHONPATH="$PWD:$SITE${PYTHONPATH:+:$PYTHONPATH}"
else
  export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
fi
export -f setup
export DEVICE PY SITE
stage "0 set-up" 90 bash -c setup
if [ "$DEVICE" != cpu ] && ! "$PY" -c "import torch,sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
  echo "gpu_session: torch.cuda.is_available() is False for $PY"
  finish 2
fi
if [ "$DEVICE" = cpu ]; then  # tiny sizes: the same code, quickly
  ACTOR_ARGS=(--device cpu --repeats 2)
  export BENCH_DEVICE=cpu BENCH_FLOOR_SIZES="${BENCH_FLOOR_SIZES:-16x16x1024}" BENCH_SIZES="${BENCH_SIZES:-small}"
else
  ACTOR_ARGS=(--device "$DEVICE")
fi
stage "1 verl's FSDP2 actor (check_actor_device)" 330 \
  "$PY" -m benchmarks.check_actor_device "${ACTOR_ARGS[@]}" --setting-timeout 120 --out "$OUT_DIR"
export PYTHON="$PY" BENCH_REPEATS="${BENCH_REPEATS:-3}"
stage "2 estimators and grpo_s loss (gpu_check.sh)" 200 bash benchmarks/gpu_check.sh "$OUT_DIR"
finish $(( ${FAILED:-0} > 0 ))
