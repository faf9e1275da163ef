#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR disable=SC2034  # SETTING, EXP_NAME, ALGORITHM_ARGS are read by common.sh
# Paper B's GTPO (token-level entropy shaping, arXiv:2508.04349), run `Qwen2.5-32B-DAPO_TOKEN`: the DAPO
# recipe with `algorithm.adv_estimator=gtpo_token`; Qwen2.5-32B, DAPO-Math-17k, AIME-2024 (30 × 32). docs/reproduce.md.
#
# verl==0.9.1 (REQUIRED: the V1 trainer's dynamic sampling and reward keys), gtpo_verl installed on every node.
# GPUs: 16 nodes × 8 (80 GB class, H800/H100/A100); the upstream DAPO script ran on 16×8 H800/H20.
# Time: not measured by us; 1,166 steps (the upstream run length, TOTAL_TRAINING_STEPS), each sampling
# ≥ 512 × 16 responses of up to 20k tokens: budget days.
#
# Launch (submit to a running Ray cluster; follow with `ray job logs -f <id>`):
#   RAY_ADDRESS=http://<head>:8265 MODEL_PATH=/models/Qwen2.5-32B bash recipes/dapo/run_dapo_token_qwen2.5_32b.sh
# On SLURM (starts Ray head + workers, then this driver):
#   RECIPE=recipes/dapo/run_dapo_token_qwen2.5_32b.sh sbatch --nodes=16 recipes/slurm/ray_on_slurm.sbatch
# Print the resolved command, launch nothing:      DRY_RUN=1 bash recipes/dapo/run_dapo_token_qwen2.5_32b.sh
# GTPO₂ (negative shaping) instead:                GTPO_NEGATIVE_SHAPING=true bash recipes/dapo/run_dapo_token_qwen2.5_32b.sh
#
# The DAPO scripts differ only in their algorithm block; all else is recipes/dapo/common.sh.
set -euo pipefail
[[ "${DRY_RUN:-0}" != 0 ]] || set -x

# ---- algorithm block: GTPO, r̃_{i,t} = α1·r_i + α2·H_{i,t}/Σ_{k∈O+_t} H_{k,t}·d_t (S18), vanilla loss, token-mean (S22) ----
# NOTE: α1, α2 of the v1-v4 runs are not published; 0.9/0.1 (α1 + α2 = 1, which `base` does not need; `clipped_len` requires it).
EXP_NAME=${EXP_NAME:-Qwen2.5-32B-DAPO_TOKEN}
LOSS_AGG_MODE=${LOSS_AGG_MODE:-token-mean}
ALGORITHM_ARGS=(
    algorithm.adv_estimator=gtpo_token
    algorithm.gtpo_token.alpha1="${GTPO_ALPHA1:-0.9}"
    algorithm.gtpo_token.alpha2="${GTPO_ALPHA2:-0.1}"
    algorithm.gtpo_token.variant="${GTPO_VARIANT:-base}"
    algorithm.gtpo_token.negative_shaping="${GTPO_NEGATIVE_SHAPING:-false}"
)

# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
dapo_main "$@"
