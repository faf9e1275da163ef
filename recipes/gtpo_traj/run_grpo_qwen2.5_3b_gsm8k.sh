#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR disable=SC2034  # SETTING, EXP_NAME, ALGORITHM_ARGS are read by common.sh
# Paper A's GRPO baseline, run `GRPO_QWEN3B_GSM8K`: Qwen2.5-3B-Instruct on GSM8K with the
# <reasoning>/<answer> format + correctness reward and Paper A's settings (recipes/gtpo_traj/common.sh,
# the official code's settings); compare with run_gtpo_traj_qwen2.5_3b_gsm8k.sh. docs/reproduce.md.
#
# verl==0.9.1, gtpo_verl installed. GPUs: 1 node × 8. Time: not measured by us (7,473 steps).
#
# Launch:  MODEL_PATH=/models/Qwen2.5-3B-Instruct bash recipes/gtpo_traj/run_grpo_qwen2.5_3b_gsm8k.sh
# Print the resolved command, launch nothing:  DRY_RUN=1 bash recipes/gtpo_traj/run_grpo_qwen2.5_3b_gsm8k.sh
#
# GTPO and its GRPO baseline differ only in their algorithm block.
set -euo pipefail
[[ "${DRY_RUN:-0}" != 0 ]] || set -x

SETTING=qwen2.5_3b_gsm8k

# ---- algorithm block: GRPO, Â_i = (r_i − mean)/(std + ε); the paper's GRPO baseline with β = 0 (no KL) ----
EXP_NAME=${EXP_NAME:-GRPO_QWEN3B_GSM8K}
ALGORITHM_ARGS=(
    algorithm.adv_estimator=grpo
    algorithm.norm_adv_by_std_in_grpo=True
)

# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
paper_a_main "$@"
