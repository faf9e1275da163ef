"""``derive_config``: the one step that fills config values derived from other keys.

Start-up checks only read the config (``trainer/validation.py``); a value that follows from
others is set here, by name, before them: ``python -m gtpo_verl.main`` (and so
``gtpo.dry_run=true``) and ``gtpo-preflight`` call ``derive_config`` first, and every value it
sets is logged. What it derives:

- ``trainer.device``: verl's ``auto_set_device`` (the accelerator the platform has, e.g. ``npu``),
  except in the opt-in CPU mode (``trainer.device=cpu``, chosen, never detected);
- the configured estimator's own values (its row's ``derive``, ``plugin/estimators/<name>.py``):
  ``gtpo_traj`` with ``entropy_reg_mode=differentiable`` sets ``actor_rollout_ref.actor.entropy_coeff
  = −γ`` while it is 0 (docs/config.md).
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
    row = ESTIMATORS.get(str(select(config, "algorithm.adv_estimator", "")))
    if row is not None:
        derived.update(row.derive(config, row.config.from_config(config)))
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
