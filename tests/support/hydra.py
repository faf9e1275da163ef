"""Hydra composition of the real configs: the package's ``gtpo_trainer`` and verl's ``ppo_trainer``."""

from __future__ import annotations

import copy
import os

from hydra import compose, initialize_config_dir

import gtpo_verl

GTPO_CONFIG_DIR = os.path.join(os.path.dirname(gtpo_verl.__file__), "config")


def compose_gtpo(*overrides: str, config_name: str = "gtpo_trainer"):
    """The package's primary config (``gtpo_trainer`` or ``gtpo_trainer_cpu``) with ``overrides``."""
    with initialize_config_dir(config_dir=GTPO_CONFIG_DIR, version_base=None):
        return compose(config_name=config_name, overrides=list(overrides))


def compose_verl(*overrides: str):
    """verl's own ``ppo_trainer`` config (our blocks then need Hydra's ``+``)."""
    import verl.trainer.config as verl_config

    with initialize_config_dir(config_dir=os.path.dirname(verl_config.__file__), version_base=None):
        return compose(config_name="ppo_trainer", overrides=list(overrides))


def with_overrides(base, *overrides: str):
    """A copy of the composed ``base`` with Hydra command-line ``overrides`` applied as Hydra applies them.

    Hydra's own override parser types each value (``'0.9'`` a string, ``nan`` a float, ``[2]`` a
    list); ``+key=value`` adds a key. Much faster than a fresh composition per override.
    """
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf import OmegaConf, open_dict

    config = copy.deepcopy(base)
    for override in OverridesParser.create().parse_overrides(list(overrides)):
        with open_dict(config):
            OmegaConf.update(config, override.key_or_group, override.value(), merge=False, force_add=override.is_add())
    return config
