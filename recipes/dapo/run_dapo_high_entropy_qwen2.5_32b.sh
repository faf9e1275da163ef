#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR disable=SC2034  # SETTING, EXP_NAME, ALGORITHM_ARGS are read by common.sh
# The "80/20" baseline (Wang et al., arXiv:2506.01939), run `Qwen2.5-32B-DAPO_HIGH_ENTROPY`: the DAPO recipe
# (verl's GRPO estimator) with the policy gradient kept only on the batch's top-20% entropy tokens
# (`algorithm.adv_transforms=[{name:high_entropy_tokens}]`, docs/spec.md C.1); everything else is the DAPO
# baseline's. Qwen2.5-32B, DAPO-Math-17k, AIME-2024 (30 × 32). docs/algorithms.md.
#
# verl==0.9.1 (REQUIRED: the V1 trainer's dynamic sampling and reward keys), gtpo_verl installed on every node.
# GPUs: 16 nodes × 8 (80 GB class, H800/H100/A100); the upstream DAPO script ran on 16×8 H800/H20.
# Time: not measured by us; 1,166 steps (the upstream run length, TOTAL_TRAINING_STEPS), each sampling
# ≥ 512 × 16 responses of up to 20k tokens: budget days.
#
# Launch (submit to a running Ray cluster; follow with `ray job logs -f <id>`):
#   RAY_ADDRESS=http://<head>:8265 MODEL_PATH=/models/Qwen2.5-32B bash recipes/dapo/run_dapo_high_entropy_qwen2.5_32b.sh
# Print the resolved command, launch nothing:      DRY_RUN=1 bash recipes/dapo/run_dapo_high_entropy_qwen2.5_32b.sh
# The official code's loss denominator (kept tokens only) instead of the paper's objective (all tokens):
#                                                  HIGH_ENTROPY_NORMALIZE_OVER=kept bash recipes/dapo/run_dapo_high_entropy_qwen2.5_32b.sh
#
# The DAPO scripts differ only in their algorithm block; all else is recipes/dapo/common.sh.
set -euo pipefail
[[ "${DRY_RUN:-0}" != 0 ]] || set -x

# ---- algorithm block: DAPO + Â ← 𝕀[H ≥ τ^B_ρ]·Â, τ the batch's (1 − ρ) entropy quantile, token-mean ----
EXP_NAME=${EXP_NAME:-Qwen2.5-32B-DAPO_HIGH_ENTROPY}
LOSS_AGG_MODE=${LOSS_AGG_MODE:-token-mean}
ALGORITHM_ARGS=(
    algorithm.adv_estimator=grpo
    "algorithm.adv_transforms=[{name:high_entropy_tokens,rho:${HIGH_ENTROPY_RHO:-0.2},normalize_over:${HIGH_ENTROPY_NORMALIZE_OVER:-valid}}]"
)

# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
dapo_main "$@"
