"""One training run of the real trainer on CPU, as the CPU demos and the study launch it.

``python -m gtpo_verl.main --config-name gtpo_trainer_cpu OVERRIDES`` in its own session, with its
output in a log file, verl's ``FileLogger`` pointed at a metric file (read it with
``gtpo_verl.trainer.metrics_file.read_metrics_file``) and a wall-clock limit; on the limit, or
when the run ends, the whole process group goes (the driver and the local Ray cluster it started,
never other Ray clusters on the machine). Several runs in a row may instead join one
``SharedRayCluster``, so that each pays verl's start-up but not Ray's. Beside it, the overrides
every such run shares: the reward function, the sizes of a tiny run and sampled validation (a
method's own overrides are ``gtpo_verl.methods.pipeline_overrides``).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import Callable, Optional

CPU_CONFIG = "gtpo_trainer_cpu"
TIMED_OUT = 124  # the exit status of a launch stopped at its wall-clock limit (as timeout(1) reports it)


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


class SharedRayCluster:
    """One Ray head on this machine that several launches join in turn (``with SharedRayCluster() as cluster``).

    Each launch still builds verl's workers (the FSDP actor, the vLLM engine, the agent loops) but
    not Ray itself. The head runs ``ray start --head`` in its own session with token authentication
    (a fresh token, readable by its owner only, in a private temp folder), the CPU platform's
    environment, and the logical CPUs and the one fake GPU the CPU preset gives a local cluster. A
    run's workers inherit the head's environment, not its driver's, so ``launch(..., cluster=)``
    hands the run's own variables (its metric file, the offline flags) to the job's runtime env and
    drops ``ray_init``'s sizes (Ray refuses them when joining). The whole session goes on exit.
    """

    READY = "Ray runtime started"

    def __init__(self, env_extra: Optional[dict] = None, num_cpus: int = 32, num_gpus: int = 1,
                 start_timeout: float = 180.0):
        self.env_extra, self.start_timeout = env_extra or {}, start_timeout
        self.num_cpus, self.num_gpus = num_cpus, num_gpus
        self.head: Optional[subprocess.Popen] = None
        self.folder = self.address = self.token_path = None

    def __enter__(self) -> "SharedRayCluster":
        import socket

        from gtpo_verl.cpu.platform import ENV_FLAG
        from gtpo_verl.ray_auth import write_token

        self.folder = tempfile.mkdtemp(prefix="gtpo_ray_")  # short: Ray's socket paths must fit 107 bytes
        self.token_path = write_token(self.folder)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.address = f"127.0.0.1:{port}"
        env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_AUTH_TOKEN")}
        env.update(self.env_extra, **self.auth_env(), **{ENV_FLAG: "1"}, VERL_PLATFORM="cpu", VERL_ENGINE_DEVICE="cuda",
                   VLLM_TARGET_DEVICE="cpu", PYTHONUNBUFFERED="1", TOKENIZERS_PARALLELISM="false")
        env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", "")])  # workers run this Python
        log_path = os.path.join(self.folder, "head.log")
        with open(log_path, "w") as log:
            self.head = subprocess.Popen(
                [sys.executable, "-m", "ray.scripts.scripts", "start", "--head", f"--port={port}",
                 f"--num-cpus={self.num_cpus}", f"--num-gpus={self.num_gpus}", "--include-dashboard=false",
                 f"--temp-dir={self.folder}", "--disable-usage-stats", "--block"],
                stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        deadline = time.time() + self.start_timeout
        while time.time() < deadline:
            with open(log_path, errors="replace") as f:
                if self.READY in f.read():
                    return self
            if self.head.poll() is not None:
                break
            time.sleep(0.5)
        with open(log_path, errors="replace") as f:
            tail = f.read()[-2000:]
        self.__exit__(None, None, None)
        raise RuntimeError(f"the shared Ray head did not start within {self.start_timeout:.0f} s:\n{tail}")

    def __exit__(self, *exc) -> None:
        if self.head is not None:
            kill_group(self.head.pid)
            self.head.wait()
            self.head = None
        if self.folder:
            shutil.rmtree(self.folder, ignore_errors=True)

    def auth_env(self) -> dict:
        return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": self.token_path}

    def join(self, overrides: list[str], job_env: dict) -> tuple[list[str], dict]:
        """A launch's overrides and driver environment to join this cluster with ``job_env`` in its workers."""
        quoted = [f"+ray_kwargs.ray_init.runtime_env.env_vars.{key}='{value}'" for key, value in job_env.items()]
        return ([*overrides, "ray_kwargs.ray_init.num_cpus=null", "ray_kwargs.ray_init.num_gpus=null", *quoted],
                {"RAY_ADDRESS": self.address, **self.auth_env()})


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
    cluster: Optional[SharedRayCluster] = None,
) -> tuple[int, float]:
    """Run one ``trainer_command(overrides)``; returns its exit status (``TIMED_OUT`` at the limit) and wall seconds.

    The command line and the run's output are appended to ``log_path``; verl's file logger writes
    ``metrics_path`` (``VERL_FILE_LOGGER_PATH``); ``env_extra`` adds to the run's environment.
    ``watch(proc)`` is called every second while the run lives (a drill may interrupt it);
    ``on_start(proc)`` once it has started, returning what to call when it has ended (e.g. to stop
    a memory sampler). With ``cluster`` the run joins that ``SharedRayCluster`` instead of starting
    its own.
    """
    run_env = dict(VERL_FILE_LOGGER_PATH=metrics_path, PYTHONUNBUFFERED="1", TOKENIZERS_PARALLELISM="false",
                   **(env_extra or {}))
    env = dict(os.environ, **run_env)
    if cluster is not None:
        overrides, driver_env = cluster.join(overrides, run_env)
        env.update(driver_env)
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
