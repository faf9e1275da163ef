# shellcheck shell=bash source-path=SCRIPTDIR
# DAPO settings shared by every DAPO run (Paper B's three, docs/reproduce.md; the two entropy baselines,
# docs/algorithms.md); sourced by run_dapo_*.sh after they set their algorithm block (EXP_NAME,
# ALGORITHM_ARGS, LOSS_AGG_MODE). Not meant to run alone.
#
# Port of verl-recipe dapo/run_dapo_qwen2.5_32b.sh (the DAPO 32B script, AIME24 52% on verl 4f80e465)
# to verl 0.9.1 and `python3 -m gtpo_verl.main`. Changes, none of which alters the algorithm:
#   - overlong buffer: `reward_model.overlong_buffer.*` no longer exists; 0.9.1's DAPO reward manager
#     reads `reward.reward_kwargs.overlong_buffer_cfg.*` and `reward.reward_kwargs.max_resp_len`
#     (verl/experimental/reward_loop/reward_manager/dapo.py), and `reward.reward_manager.name=dapo`
#     (the legacy `reward_model.reward_manager` is not read by the V1 trainer);
#   - validation: AIME-2024 as its 30 unique problems sampled 32 times (`val_kwargs.n=32`) instead of
#     the 960-row file sampled once, so verl logs best@32 / maj@32 / mean@32 per problem;
#   - dynamic sampling is verl 0.9.1's V1 ReplayBuffer: it fetches prompts one at a time
#     (`data.gen_batch_size` is forced to 1) and ignores `max_num_gen_batches`; the upstream
#     generation batch of 3 × 512 prompts becomes `max_inflight_gen_batches=3` (prompts in flight,
#     in train-batch units);
#   - gradient clipping is `actor.optim.clip_grad` (0.9.1's engine ignores `actor.grad_clip`),
#     sequence parallelism `actor.fsdp_config.ulysses_sequence_parallel_size` (the actor-level key is
#     deprecated); no reference-model keys: without KL no reference model is built;
#   - the actor runs FSDP2 (`actor.strategy=fsdp2`) instead of verl's default FSDP1: the strategy every
#     CPU test and demo of this project runs (FSDP1 cannot start without a GPU), so the CPU path
#     exercises what the recipes run; verl marks FSDP2 as its next default.

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../launch.sh
source "${HERE}/../launch.sh"

# ---- DAPO (identical in every run; every value can be overridden from the environment) ----
clip_ratio_low=${CLIP_RATIO_LOW:-0.2}              # ε_low
clip_ratio_high=${CLIP_RATIO_HIGH:-0.28}           # ε_high (clip-higher)
clip_ratio_c=${CLIP_RATIO_C:-10.0}                 # dual-clip c (the grpo_s loss has no dual clip)
loss_agg_mode=${LOSS_AGG_MODE:-token-mean}         # token-level loss; DAPO_SEQ's algorithm block sets its own
kl_coef=${KL_COEF:-0.0}                            # no KL in reward ...
kl_loss_coef=${KL_LOSS_COEF:-0.0}                  # ... nor in the loss
enable_filter_groups=${ENABLE_FILTER_GROUPS:-True} # dynamic sampling: drop groups whose `acc` is all 0 or all 1
filter_groups_metric=${FILTER_GROUPS_METRIC:-acc}
max_inflight_gen_batches=${MAX_INFLIGHT_GEN_BATCHES:-3}
max_prompt_length=${MAX_PROMPT_LENGTH:-$((1024 * 2))}
max_response_length=${MAX_RESPONSE_LENGTH:-$((1024 * 20))}
enable_overlong_buffer=${ENABLE_OVERLONG_BUFFER:-True}
overlong_buffer_len=${OVERLONG_BUFFER_LEN:-$((1024 * 4))}
overlong_penalty_factor=${OVERLONG_PENALTY_FACTOR:-1.0}
train_prompt_bsz=${TRAIN_PROMPT_BSZ:-512}
n_resp_per_prompt=${N_RESP_PER_PROMPT:-16}
train_prompt_mini_bsz=${TRAIN_PROMPT_MINI_BSZ:-32} # 512 / 32 = 16 updates per rollout step
lr=${LR:-1e-6}
lr_warmup_steps=${LR_WARMUP_STEPS:-10}
weight_decay=${WEIGHT_DECAY:-0.1}
clip_grad=${CLIP_GRAD:-1.0}
entropy_coeff=${ENTROPY_COEFF:-0}
temperature=${TEMPERATURE:-1.0}
top_p=${TOP_P:-1.0}
top_k=${TOP_K:--1}                                 # -1 for vLLM
val_temperature=${VAL_TEMPERATURE:-1.0}
val_top_p=${VAL_TOP_P:-0.7}
val_n=${VAL_N:-32}                                 # AIME-2024: 30 problems × 32 samples → best@32, maj@32, mean@32

# ---- cluster, paths, logging (the shared rest: ../common/trainer_tail.sh) ----
NNODES=${NNODES:-16}
PROJECT_NAME=${PROJECT_NAME:-DAPO}
RAY_DATA_HOME=${RAY_DATA_HOME:-"${HOME}/verl"}
MODEL_PATH=${MODEL_PATH:-"${RAY_DATA_HOME}/models/Qwen2.5-32B"}
TRAIN_FILE=${TRAIN_FILE:-"${RAY_DATA_HOME}/data/dapo-math-17k.parquet"}   # recipes/data/prepare_dapo_math.py
TEST_FILE=${TEST_FILE:-"${RAY_DATA_HOME}/data/aime-2024-dedup.parquet"}  # recipes/data/prepare_aime2024.py
TEST_FREQ=${TEST_FREQ:-5}
# A requeue repeats the steps since the last save: at most SAVE_FREQ steps. Not measured on GPUs by us; estimated
# ~20 min a step (≥ 8,192 responses of ~5k tokens at ~100k generated tokens/s over 32 TP-4 vLLM replicas, plus
# ~6·32e9·41e6 FLOPs of update at 40 % MFU on 128 GPUs), so 3 steps ≈ 1 hour; each save writes ~0.4 TB
# (32B in fp32 + Adam moments), of which MAX_ACTOR_CKPT_TO_KEEP (2) are kept.
SAVE_FREQ=${SAVE_FREQ:-3}
TOTAL_EPOCHS=${TOTAL_EPOCHS:-1}
# Run length of the upstream DAPO 32B run: its V0 trainer counted steps as batches of its dataloader,
# which fetched gen_batch_size = 1536 prompts: 1,791,700 rows // 1536 = 1166 steps in one epoch (fewer
# when dynamic sampling used more than one generation batch per step). verl 0.9.1's V1 trainer counts
# rows // train_batch_size = 3499 instead, so the length is set explicitly (Paper B does not publish its own).
TOTAL_TRAINING_STEPS=${TOTAL_TRAINING_STEPS:-1166}

# ---- performance (no effect on the algorithm) ----
sp_size=${SP_SIZE:-8}                              # Ulysses sequence parallel
gen_tp=${GEN_TP:-4}                                # vLLM tensor parallel
offload=${OFFLOAD:-True}                           # FSDP parameter + optimizer offload
use_dynamic_bsz=${USE_DYNAMIC_BSZ:-True}
max_token_len=${MAX_TOKEN_LEN:-$((max_prompt_length + max_response_length))}
gpu_memory_utilization=${GPU_MEMORY_UTILIZATION:-0.80}
# exit (status 3, for a requeue) when generation makes no progress for this long; above the time one
# 20k-token response can legitimately take after all others are done
WATCHDOG_TIMEOUT_S=${WATCHDOG_TIMEOUT_S:-3600}

# shellcheck source=../common/trainer_tail.sh
source "${HERE}/../common/trainer_tail.sh"

dapo_main() {
    launch_main \
        data.train_files="${TRAIN_FILE}" \
        data.val_files="${TEST_FILE}" \
        data.prompt_key=prompt \
        data.truncation=left \
        data.max_prompt_length="${max_prompt_length}" \
        data.max_response_length="${max_response_length}" \
        data.train_batch_size="${train_prompt_bsz}" \
        actor_rollout_ref.rollout.n="${n_resp_per_prompt}" \
        algorithm.use_kl_in_reward=False \
        algorithm.kl_ctrl.kl_coef="${kl_coef}" \
        actor_rollout_ref.actor.use_kl_loss=False \
        actor_rollout_ref.actor.kl_loss_coef="${kl_loss_coef}" \
        actor_rollout_ref.actor.clip_ratio_low="${clip_ratio_low}" \
        actor_rollout_ref.actor.clip_ratio_high="${clip_ratio_high}" \
        actor_rollout_ref.actor.clip_ratio_c="${clip_ratio_c}" \
        actor_rollout_ref.actor.loss_agg_mode="${loss_agg_mode}" \
        algorithm.filter_groups.enable="${enable_filter_groups}" \
        algorithm.filter_groups.metric="${filter_groups_metric}" \
        algorithm.filter_groups.max_inflight_gen_batches="${max_inflight_gen_batches}" \
        actor_rollout_ref.model.path="${MODEL_PATH}" \
        actor_rollout_ref.model.use_remove_padding=True \
        actor_rollout_ref.model.enable_gradient_checkpointing=True \
        actor_rollout_ref.model.external_lib=gtpo_verl.plugin.registry \
        actor_rollout_ref.actor.use_dynamic_bsz="${use_dynamic_bsz}" \
        actor_rollout_ref.rollout.log_prob_use_dynamic_bsz="${use_dynamic_bsz}" \
        actor_rollout_ref.actor.ppo_max_token_len_per_gpu="${max_token_len}" \
        actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu="${max_token_len}" \
        actor_rollout_ref.actor.optim.lr="${lr}" \
        actor_rollout_ref.actor.optim.lr_warmup_steps="${lr_warmup_steps}" \
        actor_rollout_ref.actor.optim.weight_decay="${weight_decay}" \
        actor_rollout_ref.actor.optim.clip_grad="${clip_grad}" \
        actor_rollout_ref.actor.ppo_mini_batch_size="${train_prompt_mini_bsz}" \
        actor_rollout_ref.actor.ppo_epochs=1 \
        actor_rollout_ref.actor.entropy_coeff="${entropy_coeff}" \
        actor_rollout_ref.actor.strategy=fsdp2 \
        actor_rollout_ref.actor.fsdp_config.param_offload="${offload}" \
        actor_rollout_ref.actor.fsdp_config.optimizer_offload="${offload}" \
        actor_rollout_ref.actor.fsdp_config.fsdp_size=-1 \
        actor_rollout_ref.actor.fsdp_config.ulysses_sequence_parallel_size="${sp_size}" \
        actor_rollout_ref.rollout.name=vllm \
        actor_rollout_ref.rollout.gpu_memory_utilization="${gpu_memory_utilization}" \
        actor_rollout_ref.rollout.tensor_model_parallel_size="${gen_tp}" \
        actor_rollout_ref.rollout.enable_chunked_prefill=True \
        actor_rollout_ref.rollout.max_num_batched_tokens="${max_token_len}" \
        actor_rollout_ref.rollout.temperature="${temperature}" \
        actor_rollout_ref.rollout.top_p="${top_p}" \
        actor_rollout_ref.rollout.top_k="${top_k}" \
        actor_rollout_ref.rollout.val_kwargs.temperature="${val_temperature}" \
        actor_rollout_ref.rollout.val_kwargs.top_p="${val_top_p}" \
        actor_rollout_ref.rollout.val_kwargs.top_k="${top_k}" \
        actor_rollout_ref.rollout.val_kwargs.do_sample=True \
        actor_rollout_ref.rollout.val_kwargs.n="${val_n}" \
        reward.reward_manager.name=dapo \
        +reward.reward_kwargs.overlong_buffer_cfg.enable="${enable_overlong_buffer}" \
        +reward.reward_kwargs.overlong_buffer_cfg.len="${overlong_buffer_len}" \
        +reward.reward_kwargs.overlong_buffer_cfg.penalty_factor="${overlong_penalty_factor}" \
        +reward.reward_kwargs.overlong_buffer_cfg.log=False \
        +reward.reward_kwargs.max_resp_len="${max_response_length}" \
        "${TRAINER_TAIL[@]}" \
        "${ALGORITHM_ARGS[@]}" \
        "$@"
}
