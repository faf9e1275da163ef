#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR disable=SC2034  # SETTING, EXP_NAME, ALGORITHM_ARGS are read by common.sh
# Paper B's DAPO baseline, run `Qwen2.5-32B-DAPO_step1`: DAPO (verl's GRPO estimator) on Qwen2.5-32B,
# DAPO-Math-17k train, AIME-2024 validation (30 problems × 32 samples). docs/reproduce.md.
#
# verl==0.9.1 (REQUIRED: the V1 trainer's dynamic sampling and reward keys), gtpo_verl installed on every node.
# GPUs: 16 nodes × 8 (80 GB class, H800/H100/A100); the upstream DAPO script ran on 16×8 H800/H20.
# Time: not measured by us; 1,166 steps (the upstream run length, TOTAL_TRAINING_STEPS), each sampling
# ≥ 512 × 16 responses of up to 20k tokens: budget days.
#
# Launch (submit to a running Ray cluster; follow with `ray job logs -f <id>`):
#   RAY_ADDRESS=http://<head>:8265 MODEL_PATH=/models/Qwen2.5-32B bash recipes/dapo/run_dapo_qwen2.5_32b.sh
# On SLURM (starts Ray head + workers, then this driver):
#   RECIPE=recipes/dapo/run_dapo_qwen2.5_32b.sh sbatch --nodes=16 recipes/slurm/ray_on_slurm.sbatch
# Print the resolved command, launch nothing:      DRY_RUN=1 bash recipes/dapo/run_dapo_qwen2.5_32b.sh
# Extra Hydra overrides go last:                   bash recipes/dapo/run_dapo_qwen2.5_32b.sh trainer.log_val_generations=10
#
# The DAPO scripts differ only in their algorithm block; all else is recipes/dapo/common.sh.
set -euo pipefail
[[ "${DRY_RUN:-0}" != 0 ]] || set -x

# ---- algorithm block: DAPO (GRPO advantages, vanilla clipped loss, token-mean) ----
EXP_NAME=${EXP_NAME:-Qwen2.5-32B-DAPO_step1}
LOSS_AGG_MODE=${LOSS_AGG_MODE:-token-mean}
ALGORITHM_ARGS=(
    algorithm.adv_estimator=grpo
)

# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
dapo_main "$@"
