"""gtpo_verl/cpu/launch.py (the CPU demos' and the real-LM study's launch) and the tiny model's warm start.

The launches are real: ``python -m gtpo_verl.main --config-name gtpo_trainer_cpu … gtpo.dry_run=true``
validates the config exactly as training would and starts nothing (no Ray), so a launch, its log,
its environment and its time limit are checked on the real entry point in seconds.
"""

import os
import sys

import pytest
from hydra import compose, initialize_config_dir

import gtpo_verl
from gtpo_verl.cpu.launch import TIMED_OUT, launch, run_sizes, sampled_validation, trainer_command
from support.demo_modules import demo_module
from support.paths import REPO_ROOT
from support.run_files import write_run_files

CONFIG_DIR = os.path.join(os.path.dirname(gtpo_verl.__file__), "config")


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    """A valid dry run's overrides: sized by run_sizes over a real parquet file and a model folder."""
    root = write_run_files(tmp_path_factory.mktemp("launch"), train_rows=8, val_rows=8)
    sizes = run_sizes(str(root), str(root / "model"), prompts=4, group=4, mini_batch=4, lr=1e-3, steps=2, seed=0,
                      micro_batch=16, log_prob_micro_batch=16)
    return root, sizes + ["algorithm.adv_estimator=grpo", f"trainer.default_local_dir={root / 'ckpt'}", "gtpo.dry_run=true"]


def test_a_launch_logs_its_command_and_gives_the_run_its_environment(dry_run, tmp_path):
    root, overrides = dry_run
    log, metrics = tmp_path / "train.log", tmp_path / "metrics.jsonl"
    seen, finished = {}, []

    def watch(proc):  # the run's own environment, read from /proc while it lives
        if "environ" not in seen:
            try:
                raw = open(f"/proc/{proc.pid}/environ").read()
            except OSError:
                return
            if raw:  # just after exec the kernel can show an empty environ; the next second's read sees it
                seen["environ"] = dict(kv.split("=", 1) for kv in raw.split("\0") if "=" in kv)

    rc, wall = launch(overrides, str(log), str(metrics), 300, cwd=str(tmp_path), env_extra={"GTPO_LAUNCH_TEST": "1"},
                      watch=watch, on_start=lambda proc: lambda: finished.append(proc.returncode))
    text = log.read_text()
    assert rc == 0, text[-3000:]
    assert text.splitlines()[0] == " ".join(trainer_command(overrides))
    assert trainer_command(overrides)[:5] == [sys.executable, "-m", "gtpo_verl.main", "--config-name", "gtpo_trainer_cpu"]
    assert "config valid for training" in text and wall > 0
    assert finished == [0]  # on_start's stop is called once the run has ended
    environ = seen["environ"]
    assert environ["VERL_FILE_LOGGER_PATH"] == str(metrics) and environ["GTPO_LAUNCH_TEST"] == "1"
    assert environ["PYTHONUNBUFFERED"] == "1"
    # a second launch appends to the same log (a relaunch after an interruption keeps the first attempt's output)
    launch(overrides, str(log), str(metrics), 300, cwd=str(tmp_path))
    assert log.read_text().count(" ".join(trainer_command(overrides))) == 2


def test_a_launch_past_its_limit_is_stopped_with_its_whole_group(dry_run, tmp_path):
    _, overrides = dry_run
    pids = []
    rc, wall = launch(overrides, str(tmp_path / "train.log"), str(tmp_path / "m.jsonl"), 1.0, cwd=str(tmp_path),
                      on_start=lambda proc: pids.append(proc.pid) or (lambda: None))
    assert rc == TIMED_OUT and wall < 60  # importing verl alone takes longer than one second
    with pytest.raises(ProcessLookupError):
        os.killpg(pids[0], 0)  # nothing of its session is left


def test_run_sizes_sets_micro_batches_only_when_given():
    sizes = run_sizes("/d", "/m", prompts=6, group=4, mini_batch=3, lr=1e-3, steps=8, seed=5)
    assert "data.train_batch_size=6" in sizes and "actor_rollout_ref.actor.ppo_mini_batch_size=3" in sizes
    assert {"data.seed=5", "actor_rollout_ref.actor.data_loader_seed=5", "actor_rollout_ref.rollout.seed=5"} <= set(sizes)
    assert not any("micro_batch" in o for o in sizes)  # dynamic batch sizes (the cluster demo) set none
    assert sampled_validation(16)[0] == "actor_rollout_ref.rollout.val_kwargs.n=16"


def test_every_demo_run_composes_with_the_real_config(tmp_path):
    """The single-node demo's runs (sizes, validation and knobs from the shared module) compose and pass our checks."""
    import argparse

    from gtpo_verl.trainer.validation import validate_gtpo_config

    run_demo = demo_module("run_demo")
    args = argparse.Namespace(prompts=8, group=4, lr=1e-3)
    for run in run_demo.RUNS:
        overrides = run_demo.common_overrides(args, str(tmp_path / "data"), str(tmp_path / "model"), 12) + run_demo.RUNS[run]
        with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
            config = compose("gtpo_trainer_cpu", overrides=overrides)
        validate_gtpo_config(config)
        actor = config.actor_rollout_ref.actor
        assert actor.ppo_mini_batch_size == 8 and actor.ppo_micro_batch_size_per_gpu == 32
        assert config.actor_rollout_ref.rollout.val_kwargs.n == 4 and config.trainer.resume_mode == "auto"
        assert config.algorithm.filter_groups.enable == (run != "GTPO_TRAJ")  # dynamic sampling on the DAPO runs
        assert not actor.use_kl_loss and not config.algorithm.use_kl_in_reward


def test_chat_prompt_ids_are_the_chat_templates_tokens(tmp_path):
    from gtpo_verl.cpu.tiny_model import build_byte_tokenizer, chat_prompt_ids

    tokenizer = build_byte_tokenizer(("<answer>",))
    text = "#7: give <answer> a digit"
    rendered = f"<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n"  # CHAT_TEMPLATE, written out
    assert chat_prompt_ids(tokenizer, text) == tokenizer.encode(rendered)


def test_warm_start_depends_on_its_arguments_only(tmp_path):
    """The same (seed, prompts, response) gives the same weights bit for bit; another seed other weights."""
    import random

    from safetensors.torch import load_file

    from gtpo_verl.cpu.tiny_model import build_tiny_qwen2, warm_start

    def response(rng: random.Random) -> str:
        return f"<answer>{rng.randint(0, 9)}</answer>"

    prompts = [f"#{i}: a digit?" for i in range(16)]
    weights = []
    for name, seed in (("a", 0), ("b", 0), ("c", 1)):
        build_tiny_qwen2(str(tmp_path / name), extra_tokens=("<answer>", "</answer>"))
        loss = warm_start(str(tmp_path / name), prompts, response, steps=2, lr=1e-3, batch=4, seed=seed, cosine=True)
        assert loss == loss and loss > 0
        weights.append(load_file(str(tmp_path / name / "model.safetensors")))
    assert all((weights[0][k] == weights[1][k]).all() for k in weights[0])
    assert any(not (weights[0][k] == weights[2][k]).all() for k in weights[0])
