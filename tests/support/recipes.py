"""The training recipes under recipes/ as the recipe tests run them: which scripts there are, what
each one launches, and its composed trainer config.

For each training recipe: ``ray`` / ``python3`` / ``srun`` … are stub executables first on PATH that
record their argv (support.launchers), so every ``${VAR:-default}`` and ``$((…))`` expands exactly as
on a cluster. The Hydra overrides after ``-m gtpo_verl.main`` are then composed once against the real
trainer config (``gtpo_verl/config/gtpo_trainer.yaml`` on verl 0.9.1's).
"""

from functools import lru_cache

from omegaconf import DictConfig

from support.hydra import compose_gtpo
from support.launchers import run_script
from support.paths import REPO_ROOT

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
SLURM = "recipes/slurm/ray_on_slurm.sbatch"  # runs a training recipe: tests/recipes/test_slurm_launch_on_cpu.py
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


def launch_every_recipe(stubs, tmp):
    """script → (its launcher calls, its overrides), each training recipe run once."""
    out = {}
    for script in TRAINING_RECIPES:
        proc, calls = run_script(stubs, tmp, script)
        assert proc.returncode == 0, f"{script}: {proc.stderr[-3000:]}"
        out[script] = (calls, launched_overrides(calls))
    return out


def composed(launched, script):
    """The trainer config ``script`` launches (one joint composition per script, cached)."""
    return compose_cfg(tuple(launched[script][1]))

def launched_overrides_of(stubs, tmp_path, script):
    proc, calls = run_script(stubs, tmp_path, script, LAUNCHER="direct")
    assert proc.returncode == 0, proc.stderr
    return launched_overrides(calls)
