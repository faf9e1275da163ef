# shellcheck shell=bash disable=SC2154,SC2034  # reads what the sourcing common.sh set; sets what it uses
# The end of every cluster recipe's command: logging, cluster size, evaluation and checkpoint
# frequencies, run length, resume, the generation watchdog. Sourced by recipes/dapo/common.sh and
# recipes/gtpo_traj/common.sh once their own settings are set; not meant to run alone.
#
# Reads (the recipe family's values): EXP_NAME, PROJECT_NAME, RAY_DATA_HOME, NNODES, TEST_FREQ,
# SAVE_FREQ, TOTAL_EPOCHS, TOTAL_TRAINING_STEPS, WATCHDOG_TIMEOUT_S.
# Sets TRAINER_TAIL, the overrides the family's launch_main call ends with (before the algorithm
# block and the caller's own overrides), and the defaults shared by every recipe:
N_GPUS_PER_NODE=${N_GPUS_PER_NODE:-8}
# TransferQueue storage units: verl asks for at least 2 per node (its default, 8, is 4 nodes' worth)
tq_storage_units=${TQ_STORAGE_UNITS:-$((2 * NNODES > 8 ? 2 * NNODES : 8))}
CKPTS_DIR=${CKPTS_DIR:-"${RAY_DATA_HOME}/ckpts/${PROJECT_NAME}/${EXP_NAME}"}
LOGGER=${LOGGER:-'["console","wandb","file"]'} # file: verl's JSONL metrics for gtpo-report (docs/reproduce.md)
MAX_ACTOR_CKPT_TO_KEEP=${MAX_ACTOR_CKPT_TO_KEEP:-2}

TRAINER_TAIL=(
    trainer.logger="${LOGGER}"
    trainer.project_name="${PROJECT_NAME}"
    trainer.experiment_name="${EXP_NAME}"
    trainer.n_gpus_per_node="${N_GPUS_PER_NODE}"
    trainer.nnodes="${NNODES}"
    transfer_queue.backend.SimpleStorage.num_data_storage_units="${tq_storage_units}"
    trainer.val_before_train=True
    trainer.test_freq="${TEST_FREQ}"
    trainer.save_freq="${SAVE_FREQ}"
    trainer.max_actor_ckpt_to_keep="${MAX_ACTOR_CKPT_TO_KEEP}"
    trainer.total_epochs="${TOTAL_EPOCHS}"
    trainer.total_training_steps="${TOTAL_TRAINING_STEPS}"
    trainer.default_local_dir="${CKPTS_DIR}"
    trainer.resume_mode=auto # a requeued job continues from its last checkpoint
    gtpo.watchdog.generation_timeout_s="${WATCHDOG_TIMEOUT_S}"
)
# PROBE=1: step 1 of this recipe up to its advantages, no update; the mechanism report in ${CKPTS_DIR}/probe, exit 0
[[ "${PROBE:-0}" == 0 ]] || TRAINER_TAIL+=(gtpo.probe=true)
