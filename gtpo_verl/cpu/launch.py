"""One training run of the real trainer on CPU, as the CPU demos and the study launch it.

``python -m gtpo_verl.main --config-name gtpo_trainer_cpu OVERRIDES`` in its own session, with its
output in a log file, verl's ``FileLogger`` pointed at a metric file (read it with
``gtpo_verl.trainer.metrics_file.read_metrics_file``) and a wall-clock limit; on the limit, or
when the run ends, the whole process group goes (the driver and the local Ray cluster it started,
never other Ray clusters on the machine). Beside it, the overrides every such run shares: the
papers' knobs for the DAPO-family methods and the sizes of a tiny run.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import Callable, Optional

CPU_CONFIG = "gtpo_trainer_cpu"
TIMED_OUT = 124  # the exit status of a launch stopped at its wall-clock limit (as timeout(1) reports it)

NO_KL = ["algorithm.use_kl_in_reward=false", "actor_rollout_ref.actor.use_kl_loss=false"]
# DAPO's clips (verl-recipe dapo/run_dapo_qwen2.5_32b.sh): clip-higher 0.2/0.28, dual clip c = 10
DAPO_CLIPS = [
    "actor_rollout_ref.actor.clip_ratio_low=0.2",
    "actor_rollout_ref.actor.clip_ratio_high=0.28",
    "actor_rollout_ref.actor.clip_ratio_c=10.0",
]
# DAPO's dynamic sampling as the recipes set it: evict groups whose `acc` is all-equal, refill
DYNAMIC_SAMPLING = ["algorithm.filter_groups.enable=true", "algorithm.filter_groups.metric=acc"]
# each DAPO-family method's own estimator, loss and aggregation (Paper B, arXiv:2508.04349)
ESTIMATOR_KNOBS = {
    "DAPO": ["algorithm.adv_estimator=grpo", "actor_rollout_ref.actor.loss_agg_mode=token-mean"],
    "DAPO_TOKEN": ["algorithm.adv_estimator=gtpo_token", "actor_rollout_ref.actor.loss_agg_mode=token-mean"],
    "DAPO_SEQ": [
        "algorithm.adv_estimator=grpo_s",
        "actor_rollout_ref.actor.policy_loss.loss_mode=grpo_s",
        "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean",
    ],
}


def reward_function(path: str, name: str) -> list[str]:
    """verl's custom-reward overrides: the function ``name`` in the file ``path``."""
    return [f"reward.custom_reward_function.path={path}", f"reward.custom_reward_function.name={name}"]


def run_sizes(
    data_dir: str,
    model_dir: str,
    *,
    prompts: int,
    group: int,
    mini_batch: int,
    lr: float,
    steps: int,
    seed: int,
    micro_batch: Optional[int] = None,
    log_prob_micro_batch: Optional[int] = None,
    max_prompt_length: int = 128,
    max_response_length: int = 16,
) -> list[str]:
    """The overrides that size one run: ``data_dir``'s train/val parquet files, ``prompts`` × ``group``
    responses per step at temperature 1, ``mini_batch`` prompts per optimiser step, ``steps`` steps of
    ``lr``, the model in ``model_dir``, and ``seed`` for the data order, the data loader and the sampler.
    The micro-batches (rows per forward pass) are set only when given (dynamic batch sizes set none)."""
    overrides = [
        f"data.train_files={data_dir}/train.parquet",
        f"data.val_files={data_dir}/val.parquet",
        f"data.train_batch_size={prompts}",
        f"data.max_prompt_length={max_prompt_length}",
        f"data.max_response_length={max_response_length}",
        f"data.seed={seed}",
        f"actor_rollout_ref.model.path={model_dir}",
        f"actor_rollout_ref.rollout.n={group}",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={mini_batch}",
        f"actor_rollout_ref.actor.optim.lr={lr}",
        "actor_rollout_ref.rollout.temperature=1.0",
        f"trainer.total_training_steps={steps}",
        f"actor_rollout_ref.actor.data_loader_seed={seed}",
        f"actor_rollout_ref.rollout.seed={seed}",
    ]
    if micro_batch is not None:
        overrides.append(f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={micro_batch}")
    if log_prob_micro_batch is not None:
        overrides.append(f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={log_prob_micro_batch}")
    return overrides


def sampled_validation(samples: int) -> list[str]:
    """Validation by ``samples`` samples per problem at temperature 1 (what pass@k needs)."""
    return [
        f"actor_rollout_ref.rollout.val_kwargs.n={samples}",
        "actor_rollout_ref.rollout.val_kwargs.do_sample=true",
        "actor_rollout_ref.rollout.val_kwargs.temperature=1.0",
    ]


def trainer_command(overrides: list[str], config_name: str = CPU_CONFIG) -> list[str]:
    """``python -m gtpo_verl.main --config-name CONFIG OVERRIDES`` with this interpreter."""
    return [sys.executable, "-m", "gtpo_verl.main", "--config-name", config_name, *overrides]


def kill_group(pgid: int) -> None:
    """SIGKILL the process group ``pgid`` (a launch's session), if anything of it is left."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def launch(
    overrides: list[str],
    log_path: str,
    metrics_path: str,
    timeout: float,
    *,
    cwd: Optional[str] = None,
    env_extra: Optional[dict] = None,
    watch: Optional[Callable[[subprocess.Popen], None]] = None,
    on_start: Optional[Callable[[subprocess.Popen], Callable[[], None]]] = None,
) -> tuple[int, float]:
    """Run one ``trainer_command(overrides)``; returns its exit status (``TIMED_OUT`` at the limit) and wall seconds.

    The command line and the run's output are appended to ``log_path``; verl's file logger writes
    ``metrics_path`` (``VERL_FILE_LOGGER_PATH``); ``env_extra`` adds to this process's environment.
    ``watch(proc)`` is called every second while the run lives (a drill may interrupt it);
    ``on_start(proc)`` once it has started, returning what to call when it has ended (e.g. to stop
    a memory sampler).
    """
    env = dict(os.environ, VERL_FILE_LOGGER_PATH=metrics_path, PYTHONUNBUFFERED="1", TOKENIZERS_PARALLELISM="false",
               **(env_extra or {}))
    cmd = trainer_command(overrides)
    start = time.time()
    with open(log_path, "a") as log:
        log.write(" ".join(cmd) + "\n")
        log.flush()
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=cwd, start_new_session=True)
        finish = on_start(proc) if on_start is not None else None
        while proc.poll() is None and time.time() - start < timeout:
            if watch is not None:
                watch(proc)
            time.sleep(1.0)
        timed_out = proc.poll() is None
        if timed_out:
            kill_group(proc.pid)
            proc.wait()
        rc = TIMED_OUT if timed_out else proc.returncode
        if finish is not None:
            finish()
    kill_group(proc.pid)  # whatever the driver left of its local Ray cluster (a vLLM engine can outlive it)
    return rc, time.time() - start
