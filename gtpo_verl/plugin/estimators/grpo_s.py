"""``grpo_s``: GRPO-S, Paper B's sequence-level shaping (arXiv:2508.04349 Eq. (S31)-(S38)).

Everything the package knows of this estimator: its name (which its policy loss shares,
``plugin/losses.py``), its ``algorithm.grpo_s`` block, how it runs on a batch and its diagnostics.
The equations are ``algorithms/sequence_shaping.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from gtpo_verl.algorithms.choices import NEGATIVE_SHARES, SEQUENCE_ENTROPY_MEANS, SEQUENCE_VARIANTS, SUCCESS_SHARES
from gtpo_verl.algorithms.sequence_shaping import grpo_s_advantage
from gtpo_verl.plugin.config import ConfigError, choice, weight
from gtpo_verl.plugin.estimators.paper_b import PaperBBlock
from gtpo_verl.plugin.estimators.row import (
    Estimator,
    EstimatorBatch,
    EstimatorCall,
    entropy_moved_frac,
    flat_entropy,
    success_failure,
)
from gtpo_verl.plugin.memory import huge_page_empty

NAME = "grpo_s"  # algorithm.adv_estimator=grpo_s, and actor_rollout_ref.actor.policy_loss.loss_mode=grpo_s


@dataclass(frozen=True)
class GRPOSConfig(PaperBBlock):
    """``algorithm.grpo_s``: Paper B sequence-level shaping (GRPO-S), arXiv:2508.04349 Eq. (S31)-(S38).

    The keyword arguments of ``grpo_s_advantage`` (the fields Paper B's blocks share come from
    ``PaperBBlock``); formulas in docs/spec.md B.7.
    """

    path: ClassVar[str] = f"algorithm.{NAME}"

    beta1: float = weight(0.9, "set a non-negative outcome weight, e.g. 0.9.")
    """β1, weight of the outcome reward r_i (S31)."""
    beta2: float = weight(0.1, "set 0 to disable entropy shaping.")
    """β2, weight of the mean-entropy bonus Ĥ_i/ΣĤ·n (S31)."""
    variant: str = choice("base", SEQUENCE_VARIANTS)
    """``base`` (v1: failures get 0) or ``unified_v6`` (failures get −β1 − β2·share, App. C)."""
    negative_shaping: bool = False
    """GRPO-S₂: failures get −(1/Ĥ_j)/Σ(1/Ĥ)·m (S36-S38); ``unified_v6`` requires it (its −β2·share term)."""
    negative_share: str = choice("arithmetic", NEGATIVE_SHARES)
    """Failure share: 1/Ĥ_j over the ``arithmetic`` (S36) or ``geometric`` mean of 1/Ĥ over O− (App. C)."""
    success_share: str = choice("arithmetic", SUCCESS_SHARES)
    """Success share: Ĥ_i over the ``arithmetic`` (S31) or ``geometric`` mean of Ĥ over O+."""
    sequence_entropy: str = choice("arithmetic", SEQUENCE_ENTROPY_MEANS)
    """Ĥ_i as the ``arithmetic`` (S32) or ``geometric`` mean of the response's token entropies."""

    def check(self):
        if self.beta1 + self.beta2 <= 0.0:
            raise ConfigError(
                self.key("beta1"),
                f"`{self.key('beta1')}` and `{self.key('beta2')}` are both 0: every sequence reward would be 0. "
                "Use e.g. beta1=0.9 beta2=0.1.",
            )
        self.check_v6_failure_shaping("β")


def _run(block: GRPOSConfig, batch: EstimatorBatch):
    return grpo_s_advantage(
        batch.response_mask, batch.sequence_scores, batch.group_ids, batch.num_groups,
        entropy=batch.require("entropys"), **block.function_kwargs(), empty=huge_page_empty,
    )


def _metrics(call: EstimatorCall, counts, success, failure, real) -> dict[str, float]:
    """Each success's share Ĥ_i / mean_{k∈O+} Ĥ_k of the bonus (S31), exactly as the estimator computed it."""
    result = call.result
    picked = result.success_share[success].to(torch.float64)
    if not picked.numel():
        return {}
    return {"bonus_share/mean": float(picked.mean()), "bonus_share/std": float(picked.std(unbiased=False)),
            "bonus_share/max": float(picked.max())}


def _health(call: EstimatorCall, mask: torch.Tensor, real: torch.Tensor) -> dict[str, float]:
    """How much the entropy moves GRPO-S's advantage against every entropy equal (each sequence weight 1);
    the spread of the weights themselves is ``gtpo/bonus_share/std``."""
    return {"health/entropy_moved_frac": entropy_moved_frac(call, mask, real, flat_entropy(call))}


GRPO_S = Estimator(
    name=NAME,
    summary=f"GRPO-S (Paper B, sequence level), arXiv:2508.04349 Eq. (S31)-(S37); knobs in "
    f"``algorithm.{NAME}``. Pair with ``actor_rollout_ref.actor.policy_loss.loss_mode={NAME}`` for the "
    "sequence ratio (S33-S34).",
    config=GRPOSConfig,
    function=grpo_s_advantage,
    inputs=("entropys",),
    optional=(),
    run=_run,
    outcome=success_failure,
    metrics=_metrics,
    health=_health,
    loss_agg_mode="seq-mean-token-mean",  # Eq. (S34): (1/G) Σ_i over sequences
    policy_loss=NAME,  # the loss registers under the estimator's name (plugin/losses.py)
)
