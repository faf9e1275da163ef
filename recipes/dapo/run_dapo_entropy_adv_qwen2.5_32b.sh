#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR disable=SC2034  # SETTING, EXP_NAME, ALGORITHM_ARGS are read by common.sh
# The entropy-advantage baseline (Cheng et al., arXiv:2506.14758), run `Qwen2.5-32B-DAPO_ENTROPY_ADV`: the DAPO
# recipe (verl's GRPO estimator) with Â + min(α·H, |Â|/κ) on every token (α = 0.4, κ = 2;
# `algorithm.adv_transforms=[{name:entropy_advantage}]`, docs/spec.md C.2); everything else is the DAPO
# baseline's. Qwen2.5-32B, DAPO-Math-17k, AIME-2024 (30 × 32). docs/algorithms.md.
#
# verl==0.9.1 (REQUIRED: the V1 trainer's dynamic sampling and reward keys), gtpo_verl installed on every node.
# GPUs: 16 nodes × 8 (80 GB class, H800/H100/A100); the upstream DAPO script ran on 16×8 H800/H20.
# Time: not measured by us; 1,166 steps (the upstream run length, TOTAL_TRAINING_STEPS), each sampling
# ≥ 512 × 16 responses of up to 20k tokens: budget days.
#
# Launch (submit to a running Ray cluster; follow with `ray job logs -f <id>`):
#   RAY_ADDRESS=http://<head>:8265 MODEL_PATH=/models/Qwen2.5-32B bash recipes/dapo/run_dapo_entropy_adv_qwen2.5_32b.sh
# Print the resolved command, launch nothing:      DRY_RUN=1 bash recipes/dapo/run_dapo_entropy_adv_qwen2.5_32b.sh
# Another α:                                       ENTROPY_ADV_ALPHA=0.1 bash recipes/dapo/run_dapo_entropy_adv_qwen2.5_32b.sh
#
# The DAPO scripts differ only in their algorithm block; all else is recipes/dapo/common.sh.
set -euo pipefail
[[ "${DRY_RUN:-0}" != 0 ]] || set -x

# ---- algorithm block: DAPO + Â ← Â + min(α·H, |Â|/κ) (H detached, old policy), vanilla loss, token-mean ----
EXP_NAME=${EXP_NAME:-Qwen2.5-32B-DAPO_ENTROPY_ADV}
LOSS_AGG_MODE=${LOSS_AGG_MODE:-token-mean}
ALGORITHM_ARGS=(
    algorithm.adv_estimator=grpo
    "algorithm.adv_transforms=[{name:entropy_advantage,alpha:${ENTROPY_ADV_ALPHA:-0.4},kappa:${ENTROPY_ADV_KAPPA:-2.0}}]"
)

# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
dapo_main "$@"
