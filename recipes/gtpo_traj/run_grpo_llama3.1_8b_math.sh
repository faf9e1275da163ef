#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR disable=SC2034  # SETTING, EXP_NAME, ALGORITHM_ARGS are read by common.sh
# Paper A's GRPO baseline, run `GRPO_LLAMA8B_MATH`: Meta-Llama-3.1-8B-Instruct on MATH with the
# <reasoning>/<answer> format + correctness reward and Paper A's settings (recipes/gtpo_traj/common.sh,
# the official code's settings); compare with run_gtpo_traj_llama3.1_8b_math.sh. docs/reproduce.md.
#
# verl==0.9.1, gtpo_verl installed. GPUs: 1 node × 8. Time: not measured by us (7,500 steps).
#
# Launch:  MODEL_PATH=/models/Meta-Llama-3.1-8B-Instruct bash recipes/gtpo_traj/run_grpo_llama3.1_8b_math.sh
# Print the resolved command, launch nothing:  DRY_RUN=1 bash recipes/gtpo_traj/run_grpo_llama3.1_8b_math.sh
#
# GTPO and its GRPO baseline differ only in their algorithm block.
set -euo pipefail
[[ "${DRY_RUN:-0}" != 0 ]] || set -x

SETTING=llama3.1_8b_math

# ---- algorithm block: GRPO, Â_i = (r_i − mean)/(std + ε); the paper's GRPO baseline with β = 0 (no KL) ----
EXP_NAME=${EXP_NAME:-GRPO_LLAMA8B_MATH}
ALGORITHM_ARGS=(
    algorithm.adv_estimator=grpo
    algorithm.norm_adv_by_std_in_grpo=True
)

# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
paper_a_main "$@"
