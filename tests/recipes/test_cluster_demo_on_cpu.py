"""The cluster demo's job, without starting Ray: its overrides compose against the real config,
and recipes/launch.sh turns them into a waiting `ray job submit` of `python3 -m gtpo_verl.main`."""

import os
import subprocess

from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

import gtpo_verl
from gtpo_verl.trainer.audit_dump import validate_audit_config
from support.demo_modules import demo_module
from support.paths import REPO_ROOT

ROOT = str(REPO_ROOT)
DEMO = os.path.join(ROOT, "examples", "cpu_demo")
CONFIG_DIR = os.path.join(os.path.dirname(gtpo_verl.__file__), "config")


def cluster_module():
    return demo_module("run_cluster")


def overrides(tmp_path):
    run_cluster = cluster_module()
    args = run_cluster.parse_args(["--out", str(tmp_path)])
    return run_cluster.job_overrides(args, str(tmp_path), str(tmp_path / "data"), str(tmp_path / "model"), str(tmp_path / "audit"))


def test_cluster_job_composes_with_the_shape_the_demo_claims(tmp_path):
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        config = compose(config_name="gtpo_trainer_cpu", overrides=overrides(tmp_path))
    assert (config.trainer.nnodes, config.trainer.n_gpus_per_node) == (2, 1)
    assert config.trainer.balance_batch and config.actor_rollout_ref.actor.use_dynamic_bsz
    assert config.algorithm.filter_groups.enable and config.algorithm.filter_groups.metric == "acc"
    assert config.algorithm.adv_estimator == "gtpo_token"
    assert config.ray_kwargs.ray_init.num_cpus is None and config.ray_kwargs.ray_init.num_gpus is None
    # verl pads to a multiple of lcm(dp, mini-batch rows): the batch must not already be one
    rows = config.data.train_batch_size * config.actor_rollout_ref.rollout.n
    mini_rows = config.actor_rollout_ref.actor.ppo_mini_batch_size * config.actor_rollout_ref.rollout.n
    import math

    assert rows % math.lcm(2, mini_rows) != 0
    assert validate_audit_config(config).steps == (2, 8)  # the audited steps' weights are saved
    assert "hf_model" in OmegaConf.to_container(config.actor_rollout_ref.actor.checkpoint.save_contents)


def test_cluster_job_goes_through_the_recipe_launcher(tmp_path):
    env = dict(os.environ, DRY_RUN="1", RAY_ADDRESS="http://127.0.0.1:8265", RUNTIME_ENV_JSON='{"env_vars": {"A": "1"}}')
    out = subprocess.run(
        ["bash", os.path.join(DEMO, "cluster_job.sh"), *overrides(tmp_path)], env=env, capture_output=True, text=True, check=True
    ).stdout
    first = out.splitlines()[1]
    assert first.startswith("ray job submit --address=http://127.0.0.1:8265 ")
    assert "--no-wait" not in first and first.endswith("-- python3 -m gtpo_verl.main \\")
    assert "    --config-name \\" in out and "    gtpo_trainer_cpu \\" in out
    assert "    trainer.nnodes=2 \\" in out
