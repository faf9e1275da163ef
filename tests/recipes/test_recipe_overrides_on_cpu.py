"""What every training recipe launches is a valid trainer config on verl 0.9.1 (tests/support/recipes.py
runs them): each plain ``key=value`` names an existing key, each ``+key=value`` is one verl 0.9.1 reads
(ALLOWED_NEW_KEYS), and keys that compose but that 0.9.1 ignores (DEAD_KEYS) are refused. The composed
config goes through the checks ``python -m gtpo_verl.main`` runs before Ray starts (ours and verl's
``validate_config``).
"""

import warnings

import pytest

from support.launchers import HOME
from support.recipes import (
    ALLOWED_NEW_KEYS, CONTAINER_SCRIPTS, DATA_SCRIPTS, DEAD_KEYS, LIBRARIES, PREPARED, RECIPES_DIR, ROOT, SLURM,
    TRAINING_RECIPES, as_dict, compose_cfg, composed, has_key,
)

# verl warns that GRPO-style estimators run without a critic: expected for every recipe here
pytestmark = pytest.mark.filterwarnings("ignore:Disabled critic:UserWarning")


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
