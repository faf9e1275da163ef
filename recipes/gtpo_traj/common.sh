# shellcheck shell=bash source-path=SCRIPTDIR
# Paper A's training setup (GTPO-trajectory, arXiv:2508.03772; official code and README), shared by
# the GTPO and GRPO-baseline recipes of recipes/gtpo_traj/; sourced after they set SETTING, EXP_NAME
# and ALGORITHM_ARGS. Not meant to run alone. docs/reproduce.md.
#
# From the paper / official config.yaml: G = 8 responses per prompt, 1 prompt per optimizer step,
# every rollout used for exactly one update (ppo_epochs=1, mini-batch = batch), temperature 0.9,
# prompts ≤ 4000 tokens and completions ≤ 1500, AdamW with weight decay 0.1, gradient-norm clip 0.1,
# cosine schedule with warm-up, no KL and no reference model, (1/G) Σ_i (1/|o_i|) Σ_t aggregation,
# the <reasoning>/<answer> format + correctness reward (gtpo_verl/rewards/format_math.py).
# NOTE (departures): full fine-tuning in bf16 with torch AdamW (β = 0.9, 0.999) instead of LoRA
# r = 128 on a 4-bit base with paged 8-bit AdamW (β1 = β2 = 0.999999 as written); LORA_RANK=128
# LORA_ALPHA=128 selects verl's LoRA. Entropies use the sampling temperature (0.9), the official
# code used T = 1 logits.

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
LAUNCHER=${LAUNCHER:-direct} # one node: the driver starts its own Ray
# shellcheck source=../launch.sh
source "${HERE}/../launch.sh"

RAY_DATA_HOME=${RAY_DATA_HOME:-"${HOME}/verl"}

# ---- model and data (per SETTING) ----
case "${SETTING}" in
qwen2.5_3b_gsm8k) # Qwen GSM8K colab: lr 2e-6, warm-up ratio 0.01
    MODEL_PATH=${MODEL_PATH:-"${RAY_DATA_HOME}/models/Qwen2.5-3B-Instruct"}
    DATA_DIR=${DATA_DIR:-"${RAY_DATA_HOME}/data/gsm8k_reasoning"} # recipes/data/prepare_gsm8k.py
    lr=${LR:-2e-6}
    lr_warmup_ratio=${LR_WARMUP_RATIO:-0.01}
    TOTAL_TRAINING_STEPS=${TOTAL_TRAINING_STEPS:-7473} # one epoch of GSM8K train at 1 prompt per step (official code)
    ;;
llama3.1_8b_math) # official config.yaml (LLaMA, MATH): lr 1e-6, warm-up ratio 0.005
    MODEL_PATH=${MODEL_PATH:-"${RAY_DATA_HOME}/models/Meta-Llama-3.1-8B-Instruct"}
    DATA_DIR=${DATA_DIR:-"${RAY_DATA_HOME}/data/math_reasoning"} # recipes/data/prepare_math.py
    lr=${LR:-1e-6}
    lr_warmup_ratio=${LR_WARMUP_RATIO:-0.005}
    TOTAL_TRAINING_STEPS=${TOTAL_TRAINING_STEPS:-7500} # one epoch of MATH train (7 subsets) at 1 prompt per step
    ;;
*)
    echo "SETTING=${SETTING:-} is not a Paper A setting: qwen2.5_3b_gsm8k or llama3.1_8b_math" >&2
    exit 2
    ;;
esac
TRAIN_FILE=${TRAIN_FILE:-"${DATA_DIR}/train.parquet"}
TEST_FILE=${TEST_FILE:-"${DATA_DIR}/test.parquet"}

# ---- training (identical for GTPO and its GRPO baseline) ----
n_resp_per_prompt=${N_RESP_PER_PROMPT:-8}        # G (the paper also reports G = 12)
train_prompt_bsz=${TRAIN_PROMPT_BSZ:-1}          # prompts per optimizer step (official: 1; raise for throughput)
max_prompt_length=${MAX_PROMPT_LENGTH:-4000}
max_response_length=${MAX_RESPONSE_LENGTH:-1500} # max_seq_length 5500 − max_prompt_length 4000
temperature=${TEMPERATURE:-0.9}
weight_decay=${WEIGHT_DECAY:-0.1}
clip_grad=${CLIP_GRAD:-0.1}                      # max_grad_norm
lora_rank=${LORA_RANK:-0}                        # 0: full fine-tuning
lora_alpha=${LORA_ALPHA:-128}
TOTAL_EPOCHS=${TOTAL_EPOCHS:-1}
seed=${SEED:-3407}
val_n=${VAL_N:-8}                                # pass@k / maj@k up to k = VAL_N (the paper: 32)

# ---- cluster, logging, performance (the shared rest: ../common/trainer_tail.sh) ----
# The actor runs FSDP2 (actor.strategy=fsdp2), the strategy the CPU tests and demos run (docs/reproduce.md).
NNODES=${NNODES:-1}
PROJECT_NAME=${PROJECT_NAME:-GTPO-trajectory}
TEST_FREQ=${TEST_FREQ:-500}
# A requeue repeats at most SAVE_FREQ steps. Not measured on GPUs by us; estimated ≤ 30 s a step (8 responses of
# ≤ 1,500 tokens decoded at ≥ 50 tokens/s each, one small update), so 100 steps ≤ ~50 min (3B) to ~1 h (8B).
SAVE_FREQ=${SAVE_FREQ:-100}
gen_tp=${GEN_TP:-1}
gpu_memory_utilization=${GPU_MEMORY_UTILIZATION:-0.6}
WATCHDOG_TIMEOUT_S=${WATCHDOG_TIMEOUT_S:-1800} # no generation progress this long → exit 3 (1500-token responses)
max_token_len=${MAX_TOKEN_LEN:-$((max_prompt_length + max_response_length))}

# shellcheck source=../common/trainer_tail.sh
source "${HERE}/../common/trainer_tail.sh"

paper_a_main() {
    launch_main \
        data.train_files="${TRAIN_FILE}" \
        data.val_files="${TEST_FILE}" \
        data.prompt_key=prompt \
        data.max_prompt_length="${max_prompt_length}" \
        data.max_response_length="${max_response_length}" \
        data.filter_overlong_prompts=True \
        data.train_batch_size="${train_prompt_bsz}" \
        data.seed="${seed}" \
        actor_rollout_ref.rollout.n="${n_resp_per_prompt}" \
        algorithm.use_kl_in_reward=False \
        actor_rollout_ref.actor.use_kl_loss=False \
        actor_rollout_ref.actor.entropy_coeff=0 \
        actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean \
        actor_rollout_ref.actor.ppo_epochs=1 \
        actor_rollout_ref.actor.ppo_mini_batch_size="${train_prompt_bsz}" \
        actor_rollout_ref.actor.optim.lr="${lr}" \
        actor_rollout_ref.actor.optim.lr_scheduler_type=cosine \
        actor_rollout_ref.actor.optim.lr_warmup_steps_ratio="${lr_warmup_ratio}" \
        actor_rollout_ref.actor.optim.weight_decay="${weight_decay}" \
        actor_rollout_ref.actor.optim.clip_grad="${clip_grad}" \
        actor_rollout_ref.model.path="${MODEL_PATH}" \
        actor_rollout_ref.model.lora_rank="${lora_rank}" \
        actor_rollout_ref.model.lora_alpha="${lora_alpha}" \
        actor_rollout_ref.model.use_remove_padding=True \
        actor_rollout_ref.model.enable_gradient_checkpointing=True \
        actor_rollout_ref.model.external_lib=gtpo_verl.plugin.registry \
        actor_rollout_ref.actor.use_dynamic_bsz=True \
        actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=True \
        actor_rollout_ref.actor.ppo_max_token_len_per_gpu="${max_token_len}" \
        actor_rollout_ref.actor.strategy=fsdp2 \
        actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu="${max_token_len}" \
        actor_rollout_ref.rollout.name=vllm \
        actor_rollout_ref.rollout.tensor_model_parallel_size="${gen_tp}" \
        actor_rollout_ref.rollout.gpu_memory_utilization="${gpu_memory_utilization}" \
        actor_rollout_ref.rollout.temperature="${temperature}" \
        actor_rollout_ref.rollout.top_p=1.0 \
        actor_rollout_ref.rollout.top_k=-1 \
        actor_rollout_ref.rollout.val_kwargs.temperature="${temperature}" \
        actor_rollout_ref.rollout.val_kwargs.top_p=1.0 \
        actor_rollout_ref.rollout.val_kwargs.do_sample=True \
        actor_rollout_ref.rollout.val_kwargs.n="${val_n}" \
        reward.reward_manager.name=naive \
        reward.custom_reward_function.path=pkg://gtpo_verl.rewards.format_math \
        reward.custom_reward_function.name=compute_score \
        "${TRAINER_TAIL[@]}" \
        "${ALGORITHM_ARGS[@]}" \
        "$@"
}
