#!/usr/bin/env bash
# Prepare every data set the recipes read, as verl parquet under ${RAY_DATA_HOME}/data (docs/reproduce.md).
#
#   bash recipes/data/prepare_all.sh                      # downloads from the HF hub (needs `datasets` + network)
#   DAPO_INPUT=/mnt/dapo-math-17k.parquet AIME_INPUT=/mnt/aime-2024.parquet \
#   GSM8K_INPUT=/mnt/gsm8k_main MATH_INPUT=/mnt/hendrycks_math bash recipes/data/prepare_all.sh   # offline copies
#
# Run it where the files must live (a shared filesystem every node sees). Outputs, matching the
# recipes' defaults:
#   data/dapo-math-17k.parquet          DAPO-Math-17k, all 1,791,700 rows as upstream (DAPO runs: train)
#   data/aime-2024-dedup.parquet        AIME 2024, 30 unique problems, DAPO prompt (DAPO runs: val, n=32)
#   data/aime-2024-reasoning.parquet    the same 30 problems with Paper A's prompt (optional OOD eval)
#   data/gsm8k_reasoning/{train,test}.parquet, data/math_reasoning/{train,test}.parquet   (Paper A)
set -xeuo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PYTHON=${PYTHON:-python3}
RAY_DATA_HOME=${RAY_DATA_HOME:-"${HOME}/verl"}
OUT=${OUT:-"${RAY_DATA_HOME}/data"}
DAPO_INPUT=${DAPO_INPUT:-}
AIME_INPUT=${AIME_INPUT:-}
GSM8K_INPUT=${GSM8K_INPUT:-}
MATH_INPUT=${MATH_INPUT:-}

# "--input PATH" when a local copy is given, nothing (download) otherwise
input_args() { if [[ -n "$1" ]]; then printf -- '--input\n%s\n' "$1"; fi; }

mapfile -t dapo_in < <(input_args "${DAPO_INPUT}")
mapfile -t aime_in < <(input_args "${AIME_INPUT}")
mapfile -t gsm8k_in < <(input_args "${GSM8K_INPUT}")
mapfile -t math_in < <(input_args "${MATH_INPUT}")
# empty without a local copy: bash < 4.4 calls an empty array unbound under `set -u`, hence ${a[@]+"${a[@]}"}

"${PYTHON}" "${HERE}/prepare_dapo_math.py" ${dapo_in[@]+"${dapo_in[@]}"} --output "${OUT}/dapo-math-17k.parquet"
"${PYTHON}" "${HERE}/prepare_aime2024.py" ${aime_in[@]+"${aime_in[@]}"} --output "${OUT}/aime-2024-dedup.parquet"
"${PYTHON}" "${HERE}/prepare_aime2024.py" ${aime_in[@]+"${aime_in[@]}"} --template reasoning --output "${OUT}/aime-2024-reasoning.parquet"
"${PYTHON}" "${HERE}/prepare_gsm8k.py" ${gsm8k_in[@]+"${gsm8k_in[@]}"} --output-dir "${OUT}/gsm8k_reasoning"
"${PYTHON}" "${HERE}/prepare_math.py" ${math_in[@]+"${math_in[@]}"} --output-dir "${OUT}/math_reasoning"
