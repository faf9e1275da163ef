"""Registers the estimators and the policy loss in verl's registries.

This module is the target of the ``verl.plugins`` entry point, so ``import verl`` loads it
in every process (driver, TaskRunner, workers). It stays light: verl's ``core_algos`` and
our pure algorithms only. verl swallows plugin import errors at DEBUG level, so a failure
here is logged as an error before it propagates, and ``check_registered`` lets start-up
code fail loudly with the fix.

Registered names (short, and distinct for the two papers called "GTPO"):
- estimators ``gtpo_token`` (Paper B, token), ``grpo_s`` (Paper B, sequence), ``gtpo_traj`` (Paper A);
- policy loss ``grpo_s`` (Paper B, sequence-ratio surrogate);
- advantage transforms ``high_entropy_tokens`` (arXiv:2506.01939) and ``entropy_advantage``
  (arXiv:2506.14758), for ``algorithm.adv_transforms``.

The estimators register from their table (``plugin/estimators/``) through
``gtpo_verl.register_entropy_aware_estimator``, the public decorator a user's own package uses
from its own ``verl.plugins`` entry point.
"""

from __future__ import annotations

import logging
import os

logger = logging.getLogger(__name__)

try:
    from gtpo_verl.plugin.estimators import ESTIMATORS, register_estimators
    from gtpo_verl.plugin.losses import LOSS_NAME, register_losses
    from gtpo_verl.plugin.transforms import TRANSFORM_KNOBS  # importing it registers the transforms
    from gtpo_verl.plugin.vllm_auth import close_vllm_http_api

    register_estimators()
    register_losses()
except Exception:  # verl would hide this at DEBUG level
    logger.error("gtpo_verl: registering estimators/losses with verl failed", exc_info=True)
    raise


close_vllm_http_api()  # verl's vLLM servers: their OpenAI routes need a key no one holds (plugin/vllm_auth.py)

if os.environ.get("GTPO_VERL_CPU") == "1":  # opt-in CPU mode, inherited by every Ray worker
    from gtpo_verl.cpu import activate

    activate()


def check_registered() -> None:
    """Raise a clear error unless every gtpo_verl name is in verl's registries.

    Call it where the names are used (the TaskRunner for estimators, the actor workers for
    losses): verl only imports plugins silently, so a missing install shows up here.
    """
    from verl.trainer.ppo import core_algos

    from gtpo_verl.plugin.extensions import registered_transforms

    missing = [f"estimator {n!r}" for n in ESTIMATORS if n not in core_algos.ADV_ESTIMATOR_REGISTRY]
    missing += [f"policy loss {LOSS_NAME!r}"] if LOSS_NAME not in core_algos.POLICY_LOSS_REGISTRY else []
    missing += [f"advantage transform {n!r}" for n in TRANSFORM_KNOBS if n not in registered_transforms()]
    if missing:
        raise RuntimeError(
            f"gtpo_verl is not registered with verl in this process (missing {', '.join(missing)}). "
            "Install the package on every node (`pip install -e .`), and do not set "
            "VERL_USE_EXTERNAL_PLUGINS=none; or add `actor_rollout_ref.model.external_lib=gtpo_verl.plugin.registry`."
        )
