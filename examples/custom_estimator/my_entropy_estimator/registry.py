"""Target of this package's ``verl.plugins`` entry point: ``import verl`` loads it in every process.

``entropy_scaled_grpo``: verl's GRPO advantage scaled per token by (1 + s·H_t), s =
``algorithm.entropy_scale`` (default 0.5), with H_t the old-policy entropy. It also reads
the response token ids to show a second declared input: tokens equal to
``algorithm.ignore_token_id`` (default: none) get zero advantage.
"""

from __future__ import annotations

import torch
from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage

import gtpo_verl

# What the last call received, for this package's test (a real package would not keep it).
LAST_INPUTS: dict = {}


@gtpo_verl.register_entropy_aware_estimator("entropy_scaled_grpo", inputs=("entropys", "responses"))
def entropy_scaled_grpo(token_level_rewards, response_mask, index=None, config=None, *, entropys, responses, **kwargs):
    """``(advantages, returns)`` ``(B, T)``: GRPO × (1 + s·H), zero on ignored token ids and outside the mask."""
    scale = float(config.get("entropy_scale", 0.5)) if config is not None else 0.5
    ignore = config.get("ignore_token_id", None) if config is not None else None
    LAST_INPUTS.update(entropys=entropys.clone(), responses=responses.clone())
    grpo, _ = compute_grpo_outcome_advantage(token_level_rewards, response_mask, index)
    advantages = grpo * (1.0 + scale * entropys)
    if ignore is not None:
        advantages = torch.where(responses == int(ignore), torch.zeros_like(advantages), advantages)
    advantages = advantages * response_mask
    return advantages, advantages
