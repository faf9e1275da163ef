#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR disable=SC2034  # SETTING, EXP_NAME, ALGORITHM_ARGS are read by common.sh
# Paper A's GTPO (trajectory, arXiv:2508.03772), run `GTPO_QWEN3B_GSM8K`: Qwen2.5-3B-Instruct on GSM8K with
# the <reasoning>/<answer> format + correctness reward and Paper A's settings (recipes/gtpo_traj/common.sh,
# the official code's settings). docs/reproduce.md.
#
# verl==0.9.1, gtpo_verl installed. GPUs: 1 node × 8 (the paper trained on one GPU, with LoRA).
# Time: not measured by us; one epoch is 7,473 steps of 1 prompt × 8 responses (≤ 1500 tokens each).
#
# Data:    bash recipes/data/prepare_all.sh   (or python3 recipes/data/prepare_gsm8k.py --output-dir …)
# Launch:  MODEL_PATH=/models/Qwen2.5-3B-Instruct bash recipes/gtpo_traj/run_gtpo_traj_qwen2.5_3b_gsm8k.sh
# Print the resolved command, launch nothing:  DRY_RUN=1 bash recipes/gtpo_traj/run_gtpo_traj_qwen2.5_3b_gsm8k.sh
# The paper's text instead of the released code: GTPO_TRAJ_PRESET=paper bash recipes/gtpo_traj/run_gtpo_traj_qwen2.5_3b_gsm8k.sh
#
# GTPO and its GRPO baseline (run_grpo_qwen2.5_3b_gsm8k.sh) differ only in their algorithm block.
set -euo pipefail
[[ "${DRY_RUN:-0}" != 0 ]] || set -x

SETTING=qwen2.5_3b_gsm8k

# ---- algorithm block: GTPO-trajectory (λ on conflict tokens, δ entropy filter, −γ⟨H⟩; KL-free) ----
EXP_NAME=${EXP_NAME:-GTPO_QWEN3B_GSM8K}
ALGORITHM_ARGS=(
    algorithm.adv_estimator=gtpo_traj
    algorithm.gtpo_traj.preset="${GTPO_TRAJ_PRESET:-official}"
    algorithm.gtpo_traj.gamma="${GTPO_TRAJ_GAMMA:-0.1}"
    algorithm.gtpo_traj.conflict_weight="${GTPO_TRAJ_CONFLICT_WEIGHT:-2.0}"
)

# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
paper_a_main "$@"
