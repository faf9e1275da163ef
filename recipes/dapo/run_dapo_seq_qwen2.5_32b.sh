#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR disable=SC2034  # SETTING, EXP_NAME, ALGORITHM_ARGS are read by common.sh
# Paper B's GRPO-S (sequence-level entropy shaping, arXiv:2508.04349), run `Qwen2.5-32B-DAPO_SEQ`: the DAPO
# recipe with `algorithm.adv_estimator=grpo_s` and the `grpo_s` sequence-ratio loss; Qwen2.5-32B,
# DAPO-Math-17k, AIME-2024 (30 × 32). docs/reproduce.md.
#
# verl==0.9.1 (REQUIRED: the V1 trainer's dynamic sampling and reward keys), gtpo_verl installed on every node.
# GPUs: 16 nodes × 8 (80 GB class, H800/H100/A100); the upstream DAPO script ran on 16×8 H800/H20.
# Time: not measured by us; 1,166 steps (the upstream run length, TOTAL_TRAINING_STEPS), each sampling
# ≥ 512 × 16 responses of up to 20k tokens: budget days.
#
# Launch (submit to a running Ray cluster; follow with `ray job logs -f <id>`):
#   RAY_ADDRESS=http://<head>:8265 MODEL_PATH=/models/Qwen2.5-32B bash recipes/dapo/run_dapo_seq_qwen2.5_32b.sh
# On SLURM (starts Ray head + workers, then this driver):
#   RECIPE=recipes/dapo/run_dapo_seq_qwen2.5_32b.sh sbatch --nodes=16 recipes/slurm/ray_on_slurm.sbatch
# Print the resolved command, launch nothing:      DRY_RUN=1 bash recipes/dapo/run_dapo_seq_qwen2.5_32b.sh
#
# The DAPO scripts differ only in their algorithm block; all else is recipes/dapo/common.sh.
set -euo pipefail
[[ "${DRY_RUN:-0}" != 0 ]] || set -x

# ---- algorithm block: GRPO-S, r̂_i = β1·r_i + β2·Ĥ_i/Σ_{k∈O+} Ĥ_k·n (S31), sequence ratio ŵ_i (S33), clipped (S34) ----
# The loss aggregation belongs to this block: (S34) averages over the G sequences, i.e.
# seq-mean-token-mean (the two other runs keep DAPO's token-mean). NOTE: β1, β2 of the v1-v4 runs
# are not published; 0.9/0.1. The grpo_s loss clips the sequence ratio with ε_low/ε_high and has no dual clip (c).
EXP_NAME=${EXP_NAME:-Qwen2.5-32B-DAPO_SEQ}
LOSS_AGG_MODE=${LOSS_AGG_MODE:-seq-mean-token-mean}
ALGORITHM_ARGS=(
    algorithm.adv_estimator=grpo_s
    algorithm.grpo_s.beta1="${GRPO_S_BETA1:-0.9}"
    algorithm.grpo_s.beta2="${GRPO_S_BETA2:-0.1}"
    algorithm.grpo_s.variant="${GRPO_S_VARIANT:-base}"
    algorithm.grpo_s.negative_shaping="${GRPO_S_NEGATIVE_SHAPING:-false}"
    actor_rollout_ref.actor.policy_loss.loss_mode=grpo_s
    actor_rollout_ref.actor.policy_loss.sequence_ratio_mean="${SEQUENCE_RATIO_MEAN:-arithmetic}"
)

# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
dapo_main "$@"
