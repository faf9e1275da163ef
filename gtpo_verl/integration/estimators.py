"""verl adapters for the three advantage estimators, registered with the public decorator.

Each keeps verl's estimator signature (``token_level_rewards``, ``response_mask``, ``index``,
``config`` = the ``algorithm`` DictConfig) plus the inputs it declares to
``register_entropy_aware_estimator``: ``entropys`` (old-policy per-token entropy) and, for
``gtpo_traj``, ``responses`` (token ids), both ``(B, T)`` like ``response_mask``. The trainer
integration fetches the declared fields; callers may also pass them as keyword arguments.
Returns ``(advantages, returns)``, zeros outside the mask. Importing this module registers them.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np
import torch

from gtpo_verl.algorithms.groups import group_ids_from_uids
from gtpo_verl.algorithms.sequence_shaping import grpo_s_advantage
from gtpo_verl.algorithms.token_shaping import gtpo_token_advantage
from gtpo_verl.algorithms.trajectory import gtpo_traj_advantage
from gtpo_verl.integration.config import GRPOSConfig, GTPOTokenConfig, GTPOTrajConfig
from gtpo_verl.integration.context import bound_estimator_input, record_estimator_output
from gtpo_verl.integration.extensions import register_entropy_aware_estimator, resolve_input


def _groups(index: Any, estimator: str, batch: int) -> tuple[torch.Tensor, int]:
    if index is None:
        raise ValueError(f"advantage estimator {estimator!r} needs `index` (the uid of each response's prompt).")
    group_ids, num_groups = group_ids_from_uids(index)
    if group_ids.numel() != batch:
        raise ValueError(f"advantage estimator {estimator!r}: {group_ids.numel()} uids for {batch} responses.")
    record_estimator_output("groups", (group_ids, num_groups))  # reused by the diagnostics
    return group_ids, num_groups


def _finish(name: str, result: Any, token_level_rewards: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    record_estimator_output(name, result)
    advantages = result.advantages.to(token_level_rewards.dtype)
    return advantages, advantages


@register_entropy_aware_estimator("gtpo_token", inputs=("entropys",))
def compute_gtpo_token_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Optional[np.ndarray] = None,
    config: Any = None,
    entropys: Optional[torch.Tensor] = None,
    responses: Optional[torch.Tensor] = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GTPO (Paper B, token level), arXiv:2508.04349 Eq. (S18)-(S30); knobs in ``algorithm.gtpo_token``."""
    cfg = GTPOTokenConfig.from_algorithm_config(config)
    group_ids, num_groups = _groups(index, "gtpo_token", response_mask.shape[0])
    with torch.no_grad():
        result = gtpo_token_advantage(
            entropys,
            response_mask,
            token_level_rewards.sum(-1),
            group_ids,
            num_groups,
            return_share_stats=bool(bound_estimator_input("diagnostics")),
            **cfg.function_kwargs(),
        )
    return _finish("gtpo_token", result, token_level_rewards)


@register_entropy_aware_estimator("grpo_s", inputs=("entropys",))
def compute_grpo_s_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Optional[np.ndarray] = None,
    config: Any = None,
    entropys: Optional[torch.Tensor] = None,
    responses: Optional[torch.Tensor] = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GRPO-S (Paper B, sequence level), arXiv:2508.04349 Eq. (S31)-(S37); knobs in ``algorithm.grpo_s``.

    Pair with ``actor_rollout_ref.actor.policy_loss.loss_mode=grpo_s`` for the sequence ratio (S33-S34).
    """
    cfg = GRPOSConfig.from_algorithm_config(config)
    group_ids, num_groups = _groups(index, "grpo_s", response_mask.shape[0])
    with torch.no_grad():
        result = grpo_s_advantage(
            entropys, response_mask, token_level_rewards.sum(-1), group_ids, num_groups, **cfg.function_kwargs()
        )
    return _finish("grpo_s", result, token_level_rewards)


@register_entropy_aware_estimator("gtpo_traj", inputs=("responses",), optional=("entropys",))
def compute_gtpo_traj_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Optional[np.ndarray] = None,
    config: Any = None,
    entropys: Optional[torch.Tensor] = None,
    responses: Optional[torch.Tensor] = None,
    initial_entropy: Optional[float] = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GTPO (Paper A, trajectory), arXiv:2508.03772 Eq. (S12), (S16), (S17); knobs in ``algorithm.gtpo_traj``.

    ``initial_entropy`` (⟨H⟩_ini) is only read when the ⟨H⟩_ini gate is on; the trainer
    integration measures it on the first batch and keeps it in its checkpointed state.
    """
    cfg = GTPOTrajConfig.from_algorithm_config(config)
    entropys = resolve_input("entropys", entropys, "advantage estimator 'gtpo_traj'", response_mask) if cfg.needs_entropy else None
    group_ids, num_groups = _groups(index, "gtpo_traj", response_mask.shape[0])
    if initial_entropy is None:
        initial_entropy = bound_estimator_input("initial_entropy")
    kwargs_fn = cfg.function_kwargs(initial_entropy=initial_entropy)
    if cfg.resolved_choices()["ini_entropy_gate"] and kwargs_fn["initial_entropy"] is None:
        raise ValueError(
            "`algorithm.gtpo_traj.ini_entropy_gate` is on but ⟨H⟩_ini is unknown: run through "
            "`python -m gtpo_verl.main` (it measures ⟨H⟩_ini on the first batch and checkpoints it), "
            "or set `algorithm.gtpo_traj.initial_entropy`."
        )
    with torch.no_grad():
        result = gtpo_traj_advantage(
            responses, response_mask, token_level_rewards.sum(-1), group_ids, num_groups, entropys, **kwargs_fn
        )
    return _finish("gtpo_traj", result, token_level_rewards)


ESTIMATORS = {
    "gtpo_token": compute_gtpo_token_advantage,
    "grpo_s": compute_grpo_s_advantage,
    "gtpo_traj": compute_gtpo_traj_advantage,
}
