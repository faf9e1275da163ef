"""CPU mode caps verl's helper-process counts by the cores found (on the composed CPU preset)."""

import os

from hydra import compose, initialize_config_dir

import gtpo_verl
from gtpo_verl.cpu.workers import cap_worker_counts

CONFIG_DIR = os.path.join(os.path.dirname(gtpo_verl.__file__), "config")
KEYS = ("actor_rollout_ref.rollout.agent.num_workers", "reward.num_workers", "data.dataloader_num_workers")


def cpu_config(*overrides):
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        return compose(config_name="gtpo_trainer_cpu", overrides=list(overrides))


def values(config):
    from omegaconf import OmegaConf

    return tuple(OmegaConf.select(config, k) for k in KEYS)


def test_verl_defaults_are_capped_on_two_cores():
    config = cpu_config(*(f"{k}=8" for k in KEYS))  # verl's own defaults
    changes = cap_worker_counts(config, cores=2)
    assert values(config) == (1, 1, 0)
    assert changes == {KEYS[0]: (8, 1), KEYS[1]: (8, 1), KEYS[2]: (8, 0)}


def test_the_preset_is_within_the_cap_and_large_machines_keep_more():
    preset = cpu_config()
    assert cap_worker_counts(preset, cores=2) == {}  # the preset already fits two cores
    assert values(preset) == (1, 1, 0)
    config = cpu_config(*(f"{k}=8" for k in KEYS))
    cap_worker_counts(config, cores=16)
    assert values(config) == (8, 8, 7)
    small = cpu_config(f"{KEYS[0]}=2", f"{KEYS[1]}=3", f"{KEYS[2]}=1")
    assert cap_worker_counts(small, cores=16) == {} and values(small) == (2, 3, 1)
