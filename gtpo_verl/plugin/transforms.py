"""The built-in advantage transforms (``algorithm.adv_transforms``): two entropy-aware baselines.

- ``high_entropy_tokens`` (arXiv:2506.01939): advantages kept only on the batch's top-ρ
  entropy tokens; knobs ``rho``, ``normalize_over`` (docs/spec.md C.1).
- ``entropy_advantage`` (arXiv:2506.14758): A + min(α·H, |A|/κ); knobs ``alpha``, ``kappa``
  (docs/spec.md C.2).

Both read old-policy entropy (input ``entropys``) and run after any estimator, e.g.
``algorithm.adv_estimator=grpo algorithm.adv_transforms='[{name:entropy_advantage}]'``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from gtpo_verl.algorithms.choices import HIGH_ENTROPY_NORMALIZATIONS
from gtpo_verl.algorithms.entropy_baselines import (
    DEFAULT_ALPHA,
    DEFAULT_KAPPA,
    DEFAULT_RHO,
    entropy_advantage_bonus_and_stats,
    high_entropy_token_mask_and_threshold,
)
from gtpo_verl.plugin.config import WEIGHT_LIMIT, choice, number, weight
from gtpo_verl.plugin.extensions import TransformResult, register_adv_transform


@dataclass(frozen=True)
class HighEntropyTokensKnobs:
    """Knobs of ``high_entropy_tokens`` (docs/config.md)."""

    rho: float = number(DEFAULT_RHO, gt=0.0, le=1.0, fix="the paper keeps the top 20% (rho: 0.2).")
    """ρ ∈ (0, 1]: the share of the batch's valid tokens, by old-policy entropy, that keep their advantage."""
    normalize_over: str = choice("valid", HIGH_ENTROPY_NORMALIZATIONS)
    """Token-mean denominator: ``valid`` (the paper's 1/Σ|o_i|) or ``kept`` (the official code: kept tokens only)."""


@dataclass(frozen=True)
class EntropyAdvantageKnobs:
    """Knobs of ``entropy_advantage`` (docs/config.md)."""

    alpha: float = weight(DEFAULT_ALPHA, "the paper uses 0.4 (0 disables the bonus).")
    """α ≥ 0 of ψ(H) = min(α·H, |A|/κ) (paper: 0.4; 0 disables the bonus)."""
    kappa: float = number(DEFAULT_KAPPA, gt=1.0, le=WEIGHT_LIMIT, fix="the paper uses 2 (κ > 1: the term never flips a sign).")
    """κ > 1: ψ is at most |A|/κ, so it never flips the sign of a negative advantage (paper: 2)."""


def _valid_count(response_mask: torch.Tensor) -> float:
    return float(response_mask.bool().sum())


@register_adv_transform("high_entropy_tokens", inputs=("entropys",), knobs=HighEntropyTokensKnobs)
def high_entropy_tokens(advantages, response_mask, knobs: HighEntropyTokensKnobs, *, entropys) -> TransformResult:
    """Zero the advantage of every token below the batch's (1 − ρ) entropy quantile (docs/spec.md C.1)."""
    valid = _valid_count(response_mask)
    if valid == 0:  # nothing to select (a batch of padding rows only): advantages are already 0 there
        return TransformResult(advantages, metrics={"kept_fraction": 0.0, "kept_tokens": 0.0})
    kept, tau = high_entropy_token_mask_and_threshold(response_mask, entropy=entropys, rho=float(knobs.rho))
    new = advantages.masked_fill(kept.logical_not(), 0.0)
    kept_tokens = float(kept.sum())
    metrics = {"kept_fraction": kept_tokens / valid, "kept_tokens": kept_tokens, "entropy_threshold": tau}
    narrowed = kept.to(response_mask.dtype) if knobs.normalize_over == "kept" else None
    return TransformResult(new, response_mask=narrowed, metrics=metrics)


@register_adv_transform("entropy_advantage", inputs=("entropys",), knobs=EntropyAdvantageKnobs)
def entropy_advantage(advantages, response_mask, knobs: EntropyAdvantageKnobs, *, entropys) -> TransformResult:
    """A + min(α·H, |A|/κ) on valid tokens (docs/spec.md C.2)."""
    new, bonus_sum, clipped = entropy_advantage_bonus_and_stats(
        advantages, response_mask, entropy=entropys, alpha=float(knobs.alpha), kappa=float(knobs.kappa)
    )
    count = _valid_count(response_mask)
    metrics = {"bonus_mean": bonus_sum / count if count else 0.0, "clipped_fraction": clipped / count if count else 0.0}
    return TransformResult(new, metrics=metrics)


TRANSFORM_KNOBS = {"high_entropy_tokens": HighEntropyTokensKnobs, "entropy_advantage": EntropyAdvantageKnobs}
