"""One Ray head that several CPU launches join (gtpo_verl.cpu.launch.SharedRayCluster): its overrides
against the real CPU preset, and a real head: a job joins it with the token, its workers see the
job's own environment and the CPU platform's, a client without the token is refused, and nothing of
the head is left after it."""

import json
import os
import subprocess
import sys

import psutil
from hydra import compose, initialize_config_dir

import gtpo_verl
from gtpo_verl.cpu.launch import SharedRayCluster

CONFIG_DIR = os.path.join(os.path.dirname(gtpo_verl.__file__), "config")

CLIENT = """
import json, os, ray
ray.init(address=os.environ["RAY_ADDRESS"], runtime_env={"env_vars": {"GTPO_JOB_ONLY": "job value"}},
         log_to_driver=False)

@ray.remote(num_cpus=0)
def worker_env():
    return {k: os.environ.get(k) for k in ("GTPO_JOB_ONLY", "GTPO_VERL_CPU", "VERL_PLATFORM", "GTPO_HEAD_EXTRA")}

print("ENV " + json.dumps(ray.get(worker_env.remote(), timeout=240)))
"""


def test_a_joining_launch_drops_the_sizes_and_hands_its_environment_to_the_job():
    cluster = SharedRayCluster()
    cluster.address, cluster.token_path = "127.0.0.1:6399", "/tmp/token"
    overrides, driver_env = cluster.join(["trainer.total_training_steps=2"],
                                         {"VERL_FILE_LOGGER_PATH": "/runs/a b/metrics.jsonl", "PYTHONUNBUFFERED": "1"})
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        config = compose(config_name="gtpo_trainer_cpu", overrides=overrides)
    ray_init = config.ray_kwargs.ray_init
    assert ray_init.num_cpus is None and ray_init.num_gpus is None  # Ray refuses sizes when joining
    env_vars = ray_init.runtime_env.env_vars
    assert env_vars.VERL_FILE_LOGGER_PATH == "/runs/a b/metrics.jsonl" and env_vars.PYTHONUNBUFFERED == "1"
    assert all(isinstance(v, str) for v in env_vars.values())  # Ray takes only strings
    assert env_vars.VLLM_CPU_NUM_OF_RESERVED_CPU == "0"  # the preset's own variables stay
    assert driver_env == {"RAY_ADDRESS": "127.0.0.1:6399", "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": "/tmp/token"}


def run_client(env):
    return subprocess.run([sys.executable, "-c", CLIENT], env=env, capture_output=True, text=True, timeout=300)


def test_a_job_joins_the_shared_head_with_its_token_and_the_head_leaves_nothing():
    base = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    with SharedRayCluster(env_extra={"GTPO_HEAD_EXTRA": "from the head"}) as cluster:
        head_pid, folder = cluster.head.pid, cluster.folder
        assert oct(os.stat(cluster.token_path).st_mode & 0o777) == "0o600"
        _, driver_env = cluster.join([], {})
        joined = run_client(dict(base, **driver_env))
        assert joined.returncode == 0, joined.stderr[-3000:]
        seen = json.loads(next(line for line in joined.stdout.splitlines() if line.startswith("ENV "))[4:])
        assert seen == {"GTPO_JOB_ONLY": "job value", "GTPO_VERL_CPU": "1", "VERL_PLATFORM": "cpu",
                        "GTPO_HEAD_EXTRA": "from the head"}
        refused = run_client(dict(base, RAY_ADDRESS=cluster.address, RAY_AUTH_MODE="token"))  # no token
        assert refused.returncode != 0
        members = [p for p in psutil.process_iter(["pid"]) if _in_session(p, head_pid)]
        assert members  # the head, its GCS and raylet run in the head's own session
    assert not [p for p in psutil.process_iter(["pid"]) if _in_session(p, head_pid)]
    assert not os.path.exists(folder)


def _in_session(proc, sid):
    """A live process (a killed one awaiting its reaper holds nothing) of the session ``sid``."""
    try:
        return os.getsid(proc.pid) == sid and proc.status() != psutil.STATUS_ZOMBIE
    except (ProcessLookupError, PermissionError, psutil.Error):
        return False
