"""``actor_rollout_ref.actor.policy_loss`` config with the ``grpo_s`` loss's own knob.

Hydra instantiates it in the driver (``validate_config``) and in the actor workers, which
imports this module there. Kept apart from ``config.py`` because it imports verl, and
``config.py`` is imported by the plugin while ``import verl`` is still running.
"""

from __future__ import annotations

from dataclasses import dataclass

from verl.workers.config import PolicyLossConfig

from gtpo_verl.algorithms.sequence_shaping import RATIO_MEANS
from gtpo_verl.plugin.config import check_choice


@dataclass
class GTPOPolicyLossConfig(PolicyLossConfig):
    """``actor_rollout_ref.actor.policy_loss`` with the ``grpo_s`` loss's own knob.

    Select with ``actor_rollout_ref.actor.policy_loss._target_=gtpo_verl.plugin.loss_config.GTPOPolicyLossConfig``
    (verl rejects unknown keys on its own ``PolicyLossConfig``).
    """

    sequence_ratio_mean: str = "arithmetic"
    """ŵ_i of the ``grpo_s`` loss: ``arithmetic`` mean of token ratios (Eq. S33) or ``geometric`` (GSPO)."""

    def __post_init__(self):
        parent_post_init = getattr(super(), "__post_init__", None)
        if parent_post_init is not None:
            parent_post_init()
        check_choice("actor_rollout_ref.actor.policy_loss.sequence_ratio_mean", self.sequence_ratio_mean, RATIO_MEANS)
