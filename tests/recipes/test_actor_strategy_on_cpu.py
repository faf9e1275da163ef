"""One actor strategy: every GPU recipe and the CPU preset run verl's FSDP2 engine.

FSDP1 cannot start without a GPU (its sync_module_states needs CUDA parameters), so the CPU
tests and demos can only prove FSDP2 (tests/plugin/test_actor_fsdp_on_cpu.py runs verl's real
FSDP2 engine); the recipes select it too, rather than verl 0.9.1's default FSDP1. Checked on the
composed configs and on the dataclass verl's engine workers build from them.
"""

import pytest
from support.hydra import compose_gtpo
from support.launchers import make_stub_bin, run_script
from support.paths import REPO_ROOT

RECIPES = sorted(str(p.relative_to(REPO_ROOT)) for p in (REPO_ROOT / "recipes").glob("*/run_*.sh"))


@pytest.fixture(scope="module")
def stubs(tmp_path_factory):
    return make_stub_bin(tmp_path_factory.mktemp("stub_bin"))


def engine_strategy(actor_cfg):
    """The strategy verl's engine workers run (``ActorConfig.__post_init__`` hands it to the engine config)."""
    from verl.utils.config import omega_conf_to_dataclass

    return omega_conf_to_dataclass(actor_cfg).engine.strategy


@pytest.mark.parametrize("script", RECIPES)
def test_every_recipe_runs_fsdp2(script, stubs, tmp_path):
    proc, calls = run_script(stubs, tmp_path, script, LAUNCHER="direct")
    assert proc.returncode == 0, proc.stderr
    ((_, _, _, argv),) = calls
    overrides = argv[argv.index("gtpo_verl.main") + 1:]
    assert "actor_rollout_ref.actor.strategy=fsdp2" in overrides
    cfg = compose_gtpo(*overrides)
    actor = cfg.actor_rollout_ref.actor
    assert actor.strategy == cfg.actor_rollout_ref.ref.strategy == "fsdp2"  # the reference model follows the actor
    assert engine_strategy(actor) == "fsdp2"


def test_the_cpu_preset_runs_the_same_strategy():
    cfg = compose_gtpo(config_name="gtpo_trainer_cpu")
    assert cfg.actor_rollout_ref.actor.strategy == cfg.actor_rollout_ref.ref.strategy == "fsdp2"
    default = compose_gtpo()  # verl 0.9.1's own default, which the recipes leave
    assert default.actor_rollout_ref.actor.strategy == "fsdp"
