"""``gtpo_token``: GTPO, Paper B's token-level shaping (arXiv:2508.04349 Eq. (S18)-(S30)).

Everything the package knows of this estimator: its name, its ``algorithm.gtpo_token`` block (the
single source of every default), how it runs on a batch, its diagnostics and its start-up check.
The equations are ``algorithms/token_shaping.py``; the fused form the estimator runs is
``algorithms/kernels/gtpo_token.py``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, Optional

import torch

from gtpo_verl.algorithms.choices import ENTROPY_SHARES, LENGTH_DENOMINATORS, TOKEN_VARIANTS
from gtpo_verl.algorithms.kernels.gtpo_token import gtpo_token_advantage, success_share_rows
from gtpo_verl.plugin.config import ConfigError, choice, number, select, weight
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
from gtpo_verl.plugin.threads import one_cpu_thread

NAME = "gtpo_token"  # algorithm.adv_estimator=gtpo_token

# α1 + α2 = 1 is checked to this tolerance (clipped_len's lower clip bound 1 assumes it).
_SUM_TOLERANCE = 1e-6


@dataclass(frozen=True)
class GTPOTokenConfig(PaperBBlock):
    """``algorithm.gtpo_token``: Paper B token-level shaping (GTPO), arXiv:2508.04349 Eq. (S18)-(S30).

    The keyword arguments of ``gtpo_token_advantage`` (the fields Paper B's blocks share come from
    ``PaperBBlock``); formulas in docs/spec.md B.2-B.6.
    """

    path: ClassVar[str] = f"algorithm.{NAME}"

    alpha1: float = weight(0.9, "set a non-negative outcome weight, e.g. 0.9.")
    """α1, weight of the outcome reward r_i (S18)."""
    alpha2: float = weight(0.1, "set 0 to disable entropy shaping.")
    """α2, weight of the entropy bonus H_{i,t}/ΣH·d_t (S18)."""
    variant: str = choice("base", TOKEN_VARIANTS)
    """``base`` (S18), ``clipped_len`` (S23-S25: clipped bonus + length penalty, α1+α2=1), ``unified_v6`` (v6 Eq. 3/5)."""
    negative_shaping: bool = False
    """GTPO₂: failed tokens get −(1/H)/Σ(1/H)·h_t (S26-S30); ``unified_v6`` requires it (its −α2·share term)."""
    entropy_share: str = choice("column", ENTROPY_SHARES)
    """``column``: share across the group at step t (S18, S26); ``geometric``: within the row (S20, S27)."""
    kappa: Optional[float] = number(None, gt=1.0, fix="κ > 1 (Eq. S24), e.g. 3.")
    """κ > 1 of ``clipped_len``: the bonus is clipped to [1, α1(1+1/κ)] (S24); needs κ ≤ α1/α2."""
    overlong_buffer_len: Optional[int] = number(None, ge=1, fix="e.g. DAPO's 4096.")
    """L1 of the length penalty R(i) (S23), e.g. DAPO's overlong buffer 4096."""
    max_response_len: Optional[int] = number(None, ge=1, fix="e.g. the max response length 20480.")
    """L2 of the length penalty R(i) (S23), e.g. the max response length 20480."""
    length_penalty_denominator: str = choice("l1", LENGTH_DENOMINATORS)
    """``l1``: (L − |o|)/L1, continuous (DAPO); ``l2``: the text's literal /L2."""

    def check(self):
        if self.alpha1 + self.alpha2 <= 0.0:
            raise ConfigError(
                self.key("alpha1"),
                f"`{self.key('alpha1')}` and `{self.key('alpha2')}` are both 0: every token reward would be 0. "
                "Use e.g. alpha1=0.9 alpha2=0.1.",
            )
        self.check_v6_failure_shaping("α")
        if self.variant == "clipped_len":
            if abs(self.alpha1 + self.alpha2 - 1.0) > _SUM_TOLERANCE:
                raise ConfigError(
                    self.key("alpha1"),
                    f"`{self.key('alpha1')}` + `{self.key('alpha2')}` = {self.alpha1 + self.alpha2:g} must be 1 for "
                    "variant='clipped_len': its lower clip bound 1 is the mean success reward only when α1+α2 = 1 "
                    "(Eq. S24, docs/spec.md B.4). Use e.g. alpha1=0.9 alpha2=0.1.",
                )
            if self.kappa is None:
                raise ConfigError(self.key("kappa"), f"`{self.key('kappa')}=None` must be > 1 for variant=clipped_len (Eq. S24), e.g. 3.")
            if self.alpha1 * (1.0 + 1.0 / self.kappa) < 1.0 - _SUM_TOLERANCE:
                raise ConfigError(
                    self.key("kappa"),
                    f"`{self.key('kappa')}={self.kappa}` makes the clip range [1, α1(1+1/κ)] = "
                    f"[1, {self.alpha1 * (1 + 1 / self.kappa):g}] empty; need κ ≤ α1/α2 = "
                    f"{self.alpha1 / max(self.alpha2, 1e-12):g}.",
                )
            l1, l2 = self.overlong_buffer_len, self.max_response_len
            if l1 is None or l2 is None or not l1 < l2:
                raise ConfigError(
                    self.key("overlong_buffer_len"),
                    f"variant=clipped_len needs 0 < `{self.key('overlong_buffer_len')}` (L1={l1}) < "
                    f"`{self.key('max_response_len')}` (L2={l2}), e.g. 4096 and 20480 as in DAPO.",
                )


def _run(block: GTPOTokenConfig, batch: EstimatorBatch):
    return gtpo_token_advantage(
        batch.response_mask, batch.sequence_scores, batch.group_ids, batch.num_groups,
        entropy=batch.require("entropys"), **block.function_kwargs(), empty=huge_page_empty,
    )


def _metrics(call: EstimatorCall, counts, success, failure, real) -> dict[str, float]:
    """The success tokens' entropy shares (S18): their mean is 1 by conservation; std and max show concentration.

    From the fused call's own share tables (``success_share_rows``: one blocked pass on one CPU thread, as
    the estimator ran), over ``success``, the real O+ rows.
    """
    with torch.no_grad(), one_cpu_thread(call.batch.response_mask):
        rows = success_share_rows(call.result, call.batch.response_mask, entropy=call.batch.entropys)
    keep = success.to(torch.float64)
    tokens = float((counts * keep).sum())
    if not tokens:
        return {"bonus_share/mean": 0.0, "bonus_share/std": 0.0, "bonus_share/max": 0.0}
    mean = float((rows[:, 0] * keep).sum()) / tokens
    second = float((rows[:, 1] * keep).sum()) / tokens
    largest = float((rows[:, 2] * keep).max())
    return {"bonus_share/mean": mean, "bonus_share/std": math.sqrt(max(0.0, second - mean * mean)),
            "bonus_share/max": largest}


def alone_in_column_frac(call: EstimatorCall, mask: torch.Tensor, real: torch.Tensor) -> Optional[float]:
    """Share of the real successes' valid tokens that are the only success token of their group at their
    position t: there S18's column share is 1 whatever the entropy. None without a success token."""
    rows = call.result.success.to(mask.device) & real
    success_mask = mask * rows[:, None].to(mask.dtype)
    group_ids = call.batch.group_ids.to(mask.device)
    column_count = torch.zeros(call.batch.num_groups, mask.shape[-1], dtype=mask.dtype, device=mask.device)
    column_count.index_add_(0, group_ids, success_mask)
    tokens = float(success_mask.sum())
    if not tokens:
        return None
    return float((column_count == 1).sum()) / tokens  # a column counting 1 holds exactly one success token


def _health(call: EstimatorCall, mask: torch.Tensor, real: torch.Tensor) -> dict[str, float]:
    """How much the entropy moves GTPO's advantage (against every entropy equal, where each share is 1) and,
    with the column share, how many success tokens stand alone in their column."""
    out = {"health/entropy_moved_frac": entropy_moved_frac(call, mask, real, flat_entropy(call))}
    if call.block.entropy_share == "column" and (alone := alone_in_column_frac(call, mask, real)) is not None:
        out["health/alone_in_column_frac"] = alone
    return out


def _check(config, block: GTPOTokenConfig, warn) -> None:
    if block.variant == "clipped_len" and bool(select(config, "reward.reward_kwargs.overlong_buffer_cfg.enable", False)):
        raise ConfigError(
            block.key("variant"),
            f"`{block.key('variant')}=clipped_len` computes the length penalty R(i) itself (Eq. S23) and "
            "`reward.reward_kwargs.overlong_buffer_cfg.enable=true` adds DAPO's overlong penalty too: it would be "
            "applied twice. Set reward.reward_kwargs.overlong_buffer_cfg.enable=false (or use variant=base)."
        )


GTPO_TOKEN = Estimator(
    name=NAME,
    summary=f"GTPO (Paper B, token level), arXiv:2508.04349 Eq. (S18)-(S30); knobs in ``algorithm.{NAME}``.",
    config=GTPOTokenConfig,
    function=gtpo_token_advantage,
    inputs=("entropys",),
    optional=(),
    run=_run,
    outcome=success_failure,
    metrics=_metrics,
    health=_health,
    loss_agg_mode="token-mean",  # Eq. (S22): DAPO's token-level surrogate
    check=_check,
)
