"""verl adapter for the ``grpo_s`` policy loss (Paper B, Eq. S33-S34 / S38).

verl's ``ppo_loss`` calls a registered loss per micro-batch in the actor worker with
``old_log_prob``, ``log_prob``, ``advantages``, ``response_mask``, ``loss_agg_mode``,
``config`` (the actor config) and ``rollout_is_weights``. The per-sequence loss is
aggregated with verl's ``agg_loss`` and the global batch info (as a ``(B, 1)`` loss with the
row token counts as mask, equivalent to broadcasting it to the sequence's tokens), so the
value and gradient are those of the whole mini-batch under any micro-batching or data
parallelism. With ``seq-mean-token-mean`` (recommended) this is
exactly (1/G) Σ_i L_i.
"""

from __future__ import annotations

from typing import Any, Optional

import torch

from gtpo_verl.algorithms.sequence_shaping import grpo_s_sequence_loss
from gtpo_verl.plugin.config import select
from gtpo_verl.plugin.estimators.grpo_s import GRPO_S

LOSS_NAME = GRPO_S.policy_loss  # actor_rollout_ref.actor.policy_loss.loss_mode=grpo_s: the estimator's name
LOSS_AGG_MODE = GRPO_S.loss_agg_mode  # Eq. (S34): (1/G) Σ_i L_i, what the loss is written for


def _masked_mean(values: torch.Tensor, mask: torch.Tensor) -> float:
    total = mask.sum()
    return float((values * mask).sum() / total) if total > 0 else 0.0


def compute_policy_loss_grpo_s(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "seq-mean-token-mean",
    config: Optional[Any] = None,
    rollout_is_weights: Optional[torch.Tensor] = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, dict[str, Any]]:
    """GRPO-S clipped surrogate on the sequence ratio ŵ_i, arXiv:2508.04349 Eq. (S33)-(S34).

    The per-sequence terms come from ``grpo_s_sequence_loss`` (torch only); this adapter reads
    the actor config and aggregates them with verl's ``agg_loss``.

    Args:
        old_log_prob, log_prob, advantages, response_mask: ``(B, T)``; ``advantages`` holds
            Â_i on every token of response i (as the ``grpo_s`` estimator writes it).
        config: verl ``ActorConfig``; reads ``clip_ratio_low/high`` (falling back to
            ``clip_ratio``) and ``policy_loss.sequence_ratio_mean``.

    NOTE: the clip is on ŵ_i, not per token; ``clip_ratio_c`` (dual clip) does not apply.
    """
    from verl.trainer.ppo.core_algos import agg_loss

    from gtpo_verl.plugin.loss_config import GTPOPolicyLossConfig  # imports verl: at call time only

    if config is None:
        raise ValueError(f"the {LOSS_NAME} policy loss needs the actor config (clip_ratio_low/high).")
    clip_low = config.clip_ratio_low if config.clip_ratio_low is not None else config.clip_ratio
    clip_high = config.clip_ratio_high if config.clip_ratio_high is not None else config.clip_ratio
    # the knob's one default is GTPOPolicyLossConfig's; a stock PolicyLossConfig has no such field
    ratio_mean = select(config, "policy_loss.sequence_ratio_mean", GTPOPolicyLossConfig.sequence_ratio_mean)

    terms = grpo_s_sequence_loss(
        old_log_prob,
        log_prob,
        advantages,
        response_mask,
        clip_low=clip_low,
        clip_high=clip_high,
        ratio_mean=ratio_mean,
        rollout_is_weights=rollout_is_weights,
    )
    counts, seq_ratio, seq_adv, seq_clipped = terms.counts, terms.sequence_ratio, terms.sequence_advantage, terms.clipped
    # verl's agg_loss sees loss_mat only through Σ_t loss_mat·mask per row, and the mask only
    # through its row counts (and its width, the default horizon of seq-mean-token-sum-norm).
    # L_i is constant along its row, so the (B, 1) pair (L_i · Σ_t w·mask / n_i, n_i) gives the
    # same value and gradient in every loss_agg_mode without broadcasting L_i to (B, T).
    row_loss = terms.row_loss
    global_batch_info = dict(getattr(config, "global_batch_info", None) or {})
    if loss_agg_mode == "seq-mean-token-sum-norm" and global_batch_info.get("loss_scale_factor") is None:
        global_batch_info["loss_scale_factor"] = response_mask.shape[-1]
    pg_loss = agg_loss(
        loss_mat=row_loss.unsqueeze(-1),
        loss_mask=counts.unsqueeze(-1),
        loss_agg_mode=loss_agg_mode,
        **global_batch_info,
    )

    has_tokens = (counts > 0).to(log_prob.dtype)
    with torch.no_grad():
        metrics = {
            "actor/pg_clipfrac": _masked_mean(seq_clipped.to(log_prob.dtype), has_tokens),
            "actor/ppo_kl": float(terms.ppo_kl) if bool(counts.sum() > 0) else 0.0,
            "actor/pg_clipfrac_lower": _masked_mean((seq_clipped & (seq_adv < 0)).to(log_prob.dtype), has_tokens),
            "actor/seq_ratio_mean": _masked_mean(seq_ratio.detach(), has_tokens),
        }
    return pg_loss, metrics


def register_losses() -> None:
    """Add the ``grpo_s`` loss to verl's ``POLICY_LOSS_REGISTRY`` (refuses to overwrite another; imports verl)."""
    from verl.trainer.ppo.core_algos import POLICY_LOSS_REGISTRY, register_policy_loss

    existing = POLICY_LOSS_REGISTRY.get(LOSS_NAME)
    if existing is not None and existing is not compute_policy_loss_grpo_s:
        raise ValueError(
            f"policy loss {LOSS_NAME!r} is already registered by {existing.__module__}.{existing.__qualname__}; "
            "verl would silently overwrite it. Remove the other registration."
        )
    register_policy_loss(LOSS_NAME)(compute_policy_loss_grpo_s)
