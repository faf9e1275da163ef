"""``derive_config``: the one step that fills config values derived from other keys.

Start-up checks only read the config (``trainer/validation.py``); a value that follows from
others is set here, by name, before them: ``python -m gtpo_verl.main`` (and so
``gtpo.dry_run=true``) and ``gtpo-preflight`` call ``derive_config`` first, and every value it
sets is logged. What it derives:

- ``trainer.device``: verl's ``auto_set_device`` (the accelerator the platform has, e.g. ``npu``),
  except in the opt-in CPU mode (``trainer.device=cpu``, chosen, never detected);
- the configured estimator's own values (its row's ``derive``, ``plugin/estimators/<name>.py``):
  ``gtpo_traj`` with ``entropy_reg_mode=differentiable`` sets ``actor_rollout_ref.actor.entropy_coeff
  = −γ`` while it is 0 (docs/config.md);
- ``ray_kwargs.ray_init.runtime_env.env_vars``: a number or a boolean becomes its string (Ray takes
  strings only). Hydra reads ``env_vars.X=1`` as the integer 1, and the quotes of ``X='1'`` do not
  survive the shell that ``ray job submit`` runs the entrypoint in.
"""

from __future__ import annotations

import logging
from typing import Any

from gtpo_verl.plugin.config import select
from gtpo_verl.plugin.estimators import ESTIMATORS

logger = logging.getLogger(__name__)


def derived_values(config: Any) -> dict[str, Any]:
    """``{dotted key: value}`` the configured estimator (and ``gtpo.probe``) derives, without writing anything."""
    derived = {}
    if bool(select(config, "gtpo.probe", False)) and bool(select(config, "trainer.val_before_train", False)):
        derived["trainer.val_before_train"] = False  # the probe stops at step 1's advantages: no validation first
    derived.update(string_env_vars(config))
    row = ESTIMATORS.get(str(select(config, "algorithm.adv_estimator", "")))
    if row is not None:
        derived.update(row.derive(config, row.config.from_config(config)))
    return derived


ENV_VARS_KEY = "ray_kwargs.ray_init.runtime_env.env_vars"


def string_env_vars(config: Any) -> dict[str, str]:
    """``{dotted key: string}`` for each worker environment variable Hydra typed as a number or a boolean."""
    env_vars = select(config, ENV_VARS_KEY)
    if env_vars is None or not hasattr(env_vars, "items"):
        return {}
    derived = {}
    for name, value in env_vars.items():
        if isinstance(value, bool):
            derived[f"{ENV_VARS_KEY}.{name}"] = "true" if value else "false"  # as written on the command line
        elif isinstance(value, (int, float)):
            derived[f"{ENV_VARS_KEY}.{name}"] = str(value)
    return derived


def derive_config(config: Any) -> dict[str, Any]:
    """Set the derived values in ``config`` (a DictConfig) and log each; returns what was set."""
    from omegaconf import OmegaConf, open_dict

    derived = {}
    device = str(select(config, "trainer.device", "cuda"))
    if device != "cpu":
        from verl.utils.device import auto_set_device

        auto_set_device(config)
        if str(select(config, "trainer.device", "cuda")) != device:
            derived["trainer.device"] = str(config.trainer.device)
    derived.update(derived_values(config))
    for key, value in derived.items():
        with open_dict(config):
            OmegaConf.update(config, key, value, merge=False, force_add=True)
        logger.info("gtpo: derived %s=%s", key, value)
    return derived
