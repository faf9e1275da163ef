"""The fused form of GTPO (Paper B, token level): ``gtpo_token_advantage``, what the estimator runs.

The equations and the readable twin ``gtpo_token_advantage_reference`` are in
``algorithms/token_shaping.py``; the tests hold this function to the twin for every switch. This
module only schedules those equations over the batch, in cache-sized row blocks
(``blocks.RowBlocks``), so that the output is the only ``(B, T)`` allocation (through the caller's
``empty``: huge pages on the plugin's CPU path, ``plugin/memory.py``). With x = H on O+ and x = 1/(H + ε) on O− (``negative_shaping``),
and α = α2 on O+, −1 or −α2 on O−:

1. x·mask into the output, the rows' sums, and the column sums Σ_{k∈set_t} x_{k,t} and d_t of
   every (group, class) segment by ``index_add_`` (or the rows' geometric means); then NaN
   (0/0) off the mask, so that the next pass needs no mask;
2. out ← α · share_{i,t} + (r_i − set mean), with share = x · d_t / Σx from the segment's
   column table, and 0 where pass 1 left NaN. The set means come from token counts through
   the conservation shortcut (a segment's shares sum to its token count:
   ``share_conservation_totals``, checked when ``DEBUG_CHECKS``); pass 2 returns the rows'
   squared deviations (``clipped_len`` centres in a third pass, since its clip breaks the
   shortcut);
3. out ← out / (std + ε) of each row's set.
"""

from __future__ import annotations

import os
from typing import Callable

import torch

from gtpo_verl.algorithms.groups import group_sum, row_dot, row_sum_squares
from gtpo_verl.algorithms.blocks import RowBlocks, masked_product_
from gtpo_verl.algorithms.normalization import class_sets, set_means, set_row_scale
from gtpo_verl.algorithms.token_shaping import (
    TokenShaping,
    bonus_coefficients,
    check_share_conservation,
    clipped_bonus,
    outcome_reward,
    overlong_length_penalty,
)

# Debug mode (env GTPO_VERL_DEBUG=1): assert the share conservation the set means rely on.
DEBUG_CHECKS = os.environ.get("GTPO_VERL_DEBUG", "") not in ("", "0")


def gtpo_token_advantage(
    response_mask: torch.Tensor,
    sequence_scores: torch.Tensor,
    group_ids: torch.Tensor,
    num_groups: int,
    *,
    entropy: torch.Tensor,
    alpha1: float,
    alpha2: float,
    success_threshold: float = 0.0,
    negative_shaping: bool = False,
    variant: str = "base",
    entropy_share: str = "column",
    adv_norm: str = "two_zero_filled",
    kappa: float | None = None,
    overlong_buffer_len: int | None = None,
    max_response_len: int | None = None,
    length_penalty_denominator: str = "l1",
    uniform_outcome_groups: str = "keep",
    std_unbiased: bool = True,
    epsilon: float = 1e-6,
    empty: Callable[..., torch.Tensor] = torch.empty,
) -> TokenShaping:
    """Return GTPO token advantages: entropy-shaped token rewards, z-scored per group.

    Implements Eq. (S18) + (S21) (base), (S20) (``entropy_share="geometric"``), (S23)-(S25)
    (``variant="clipped_len"``), (S26)-(S29) (``negative_shaping``) and v6 Eq. 3/5/6
    (``variant="unified_v6"``), arXiv:2508.04349; docs/spec.md B.2-B.6.

    Rewards, for i ∈ O+ (r_i = 1) and j ∈ O−::

        base        r̃_{i,t} = α1 + α2 · H_{i,t} / Σ_{k∈O+_t} H_{k,t} · d_t           (S18)
                    r̃_{j,t} = 0
        geometric   the share is H_{i,t} / (Π_k H_{i,k})^{1/|o_i|} (row, no d_t)       (S20)
        clipped_len r̃_{i,t} = clip(α1 + α2·share, 1, α1(1 + 1/κ)) + R(i);  r̃_{j,t} = R(i)  (S23-S25)
        negative    r⁻_{j,t} = −(1/H_{j,t}) / Σ_{k∈O−_t}(1/H_{k,t}) · h_t            (S26)
        unified_v6  r̃⁺ = α1 + α2·share⁺;  r̃⁻ = −α1 − α2·share⁻  (v6 Eq. 3, 5)

    Advantages: without a shaped failure reward, one z-score over all G sequences' tokens
    with failures at 0 (S21). With one (``negative_shaping`` or ``unified_v6``), ``adv_norm``
    picks the sets (see ``normalization.py``); the default ``two_zero_filled`` is (S28)-(S30).

    Args:
        response_mask: ``(B, T)`` 1 on response tokens (any dtype).
        sequence_scores: ``(B,)`` outcome score; O+ = ``score > success_threshold``, which
            reads verl's 0/1 and DAPO's ±1 scores alike.
        group_ids: ``(B,)`` int64 in [0, K); ``num_groups`` = K.
        entropy: ``(B, T)`` old-policy per-token entropy H_{i,t} (detached; float). Values
            below 0 (floating-point rounding) are taken as 0.
        uniform_outcome_groups: ``keep`` applies the formulas to all-success / all-failure
            groups too (zero-mean entropy redistribution); ``zero_adv`` gives them 0, as
            verl's GRPO does. DAPO's dynamic sampling removes such groups beforehand.
        empty: allocates the ``(B, T)`` output and the ``(2K, T)`` column tables, with
            ``torch.empty``'s signature (the plugin passes its huge-page allocator,
            ``plugin/memory.py``); a call option, not config.

    Returns:
        ``TokenShaping`` with ``advantages`` ``(B, T)`` in ``promote(entropy, float32)``,
        exactly 0 outside ``response_mask``; same values as ``gtpo_token_advantage_reference``.
    """
    dtype = torch.promote_types(entropy.dtype, torch.float32)
    device = response_mask.device
    group_ids = group_ids.to(device)
    success = (sequence_scores > success_threshold).to(device)
    column = entropy_share == "column"
    blocks = RowBlocks(response_mask, dtype)
    segment = group_ids * 2 + (~success).to(torch.int64)  # 2g for O+, 2g + 1 for O−

    # pass 1: x = H (O+) or 1/(H + ε) (O−, negative_shaping) into the output, NaN off the mask
    out, counts, entropy_sums, shaped_sums, log_sums, column_sum, column_count = _entropy_pass(
        entropy.detach(), blocks, success, segment, 2 * num_groups, dtype=dtype, epsilon=epsilon,
        inverse=negative_shaping, column=column, empty=empty,
    )
    shares = _Shares(segment, dtype, empty)
    if column:  # share_{i,t} = x_{i,t} · d_t / Σ_{k∈set_t} x_{k,t}  (S18, S26)
        shares.table, shares.uniform = _share_tables_(column_sum, column_count)
    else:  # share_{i,t} = x_{i,t} / GM_t(x_i): 1/GM(H + ε) on O+ (S20), GM(H + ε) for 1/(H + ε) on O− (S27)
        log_mean = log_sums / counts.clamp_min(1)
        shares.row_factor = torch.exp(torch.where(success, -log_mean, log_mean))
    # conservation: a segment's column shares sum to its tokens; a row's geometric shares to factor · Σ_t x
    share_totals = counts.to(torch.float64) if column else shares.row_factor.to(torch.float64) * shaped_sums.to(torch.float64)

    # the bonus coefficients: +α2 on share⁺ (S18); −1 (S26) or −α2 (v6 Eq. 5) on share⁻; 0 if unshaped
    _, failure_alpha = bonus_coefficients(alpha2=alpha2, negative_shaping=negative_shaping, variant=variant)
    class_alpha = torch.tensor([alpha2, failure_alpha], dtype=torch.float64, device=device)  # O+, O−
    alpha = class_alpha[segment % 2]  # (B,) each row's α
    shares.times_alpha(class_alpha)

    if variant == "clipped_len":
        row_reward = overlong_length_penalty(
            counts, buffer_len=overlong_buffer_len, max_len=max_response_len, denominator=length_penalty_denominator
        )
    else:
        row_reward = outcome_reward(success, alpha1=alpha1, variant=variant)
    sets = class_sets(
        counts, success, group_ids, num_groups,
        mode=adv_norm if negative_shaping or variant == "unified_v6" else "single_combined",
    )
    if not bool(torch.isfinite(row_reward).all()):
        raise ValueError("non-finite sequence score or reward (NaN/Inf reward?)")
    # pass 2: r̃_{i,t} − mean = α·share_{i,t} + (r_i − mean of the row's set), 0 off the mask  (S18, S21)
    if variant == "clipped_len":
        row_totals = _reward_pass_(out, blocks, shares, row_reward.to(dtype), centred=False, clip=(alpha1, kappa), success=success)
        set_mean = set_means(group_sum(row_totals.to(torch.float64), sets.set_ids, sets.num_sets), sets)
        row_sq_dev = _centre_pass_(out, blocks, (-set_mean[sets.set_ids]).to(dtype))
    else:  # set sums from token counts: Σ_t r̃_{i,t} = r_i·|o_i| + α·Σ_t share_{i,t}
        row_totals = row_reward * counts.to(torch.float64) + alpha * share_totals
        set_mean = set_means(group_sum(row_totals, sets.set_ids, sets.num_sets), sets)
        row_sq_dev = _reward_pass_(out, blocks, shares, (row_reward - set_mean[sets.set_ids]).to(dtype), centred=True)
    if not bool(torch.isfinite(row_sq_dev).all()):
        raise ValueError("non-finite value at a valid response position (NaN/Inf entropy or reward?)")

    keep_rows = None
    if uniform_outcome_groups == "zero_adv":
        member = counts > 0  # responses without tokens are no group members
        successes = group_sum((success & member).to(torch.int64), group_ids, num_groups)
        sizes = group_sum(member.to(torch.int64), group_ids, num_groups)
        keep_rows = ((successes > 0) & (successes < sizes))[group_ids]  # mixed groups
    # pass 3: ÷ (std + ε) of the row's set  (S21, S28-S30)
    row_scale = set_row_scale(row_sq_dev, set_mean, sets, unbiased=std_unbiased, epsilon=epsilon, keep_rows=keep_rows)
    out.mul_(row_scale.to(dtype).unsqueeze(-1))
    return TokenShaping(advantages=out, success=success, mean_entropy=entropy_sums / counts.clamp_min(1), shares=shares)


def success_share_rows(result: TokenShaping, response_mask: torch.Tensor, *, entropy: torch.Tensor) -> torch.Tensor:
    """Per row ``(B, 3)`` float64: Σ_t, Σ_t (·)² and max_t of the entropy shares of an O+ row (S18, S20), 0 on O−.

    The shares the bonus α2 · share multiplies, from the tables of the call that produced ``result``
    (with the same ``entropy`` and ``response_mask``): one blocked pass, for the diagnostics.
    """
    shares = result.shares
    blocks = RowBlocks(response_mask, shares.dtype)
    stats = torch.zeros(response_mask.shape[0], 3, dtype=torch.float64, device=response_mask.device)
    for block in blocks:
        mask = blocks.mask(block)
        x = torch.mul(entropy[block].detach(), mask, out=blocks.scratch(block, 2)).clamp_min_(0.0)
        share = shares.apply_(x, block, blocks, scaled=False).mul_(mask).nan_to_num_(nan=0.0)
        stats[block, 0] = share.sum(-1).to(torch.float64)
        stats[block, 1] = row_sum_squares(share).to(torch.float64)
        if share.shape[1]:
            stats[block, 2] = share.amax(-1).to(torch.float64)
    return stats * result.success.to(torch.float64).unsqueeze(-1)


class _Shares:
    """The shares x → share of pass 2: a (segment, T) column table (+ uniform), or a per-row factor.

    The tables hold d_t / Σx (the share per unit of x); ``times_alpha`` adds α-scaled copies for
    pass 2 and keeps these for the diagnostics (``success_share_rows``).
    """

    def __init__(self, segment: torch.Tensor, dtype: torch.dtype, empty: Callable[..., torch.Tensor] = torch.empty):
        self.segment, self.dtype, self.empty = segment, dtype, empty
        self.table: torch.Tensor | None = None  # (2K, T) d_t / Σx per segment (column shares)
        self.uniform: torch.Tensor | None = None  # (2K, T) 1 on all-zero columns with members, else None
        self.row_factor: torch.Tensor | None = None  # (B,) 1/GM per row (geometric shares)
        self.alpha_table = self.alpha_uniform = self.alpha_row_factor = None  # the same times α

    def times_alpha(self, class_alpha: torch.Tensor) -> None:
        """α · share, α = ``class_alpha[0]`` (α2) on O+ and ``class_alpha[1]`` on O−: table rows 2g and 2g + 1, or each row."""
        if self.table is None:
            self.alpha_row_factor = (self.row_factor * class_alpha[self.segment % 2]).to(self.dtype)
            return
        segment_alpha = class_alpha.to(self.dtype).repeat(self.table.shape[0] // 2).unsqueeze(-1)
        alpha_table = self.empty(self.table.shape, dtype=self.dtype, device=self.table.device)
        self.alpha_table = torch.mul(self.table, segment_alpha, out=alpha_table)
        self.alpha_uniform = None if self.uniform is None else self.uniform * segment_alpha

    def apply_(self, x: torch.Tensor, block: slice, blocks: RowBlocks, *, scaled: bool = True) -> torch.Tensor:
        """``x ← x · table[segment] + uniform[segment]`` or ``x · row_factor`` (times α if ``scaled``), in
        place; NaN stays NaN."""
        table, uniform, row_factor = (
            (self.alpha_table, self.alpha_uniform, self.alpha_row_factor) if scaled
            else (self.table, self.uniform, self.row_factor)
        )
        if table is None:
            return x.mul_(row_factor[block].to(x.dtype).unsqueeze(-1))
        gathered = torch.index_select(table, 0, self.segment[block], out=blocks.scratch(block, 1))
        x.mul_(gathered)
        if uniform is not None:
            x.add_(torch.index_select(uniform, 0, self.segment[block], out=gathered))
        return x


def _column_share_scale_(column_sum: torch.Tensor, column_count: torch.Tensor):
    """``token_shaping.column_share_scale`` in place (fresh (S, T) tables cost page faults on the CPU).

    Overwrites ``column_count`` with scale = d_t / Σx (Σx ≥ 0: entropies are clamped at 0), 0
    where a column is empty or all zero; returns ``(scale, uniform)``, ``uniform`` None unless
    some column with members sums to 0.
    """
    scale = column_count.div_(column_sum)  # d/0 = inf on a column with members and Σx = 0, 0/0 = NaN on an empty one
    uniform = None
    infinite = torch.isinf(scale)
    if bool(infinite.any()):  # rare: all-zero columns with members (or d/Σx overflowing, which is no all-zero column)
        all_zero = infinite & (column_sum <= 0)
        uniform = all_zero.to(column_sum.dtype) if bool(all_zero.any()) else None
    return scale.nan_to_num_(nan=0.0, posinf=0.0, neginf=0.0), uniform


def _share_tables_(column_sum: torch.Tensor, column_count: torch.Tensor):
    """``_column_share_scale_``, and with ``DEBUG_CHECKS`` the conservation the set means rely on."""
    counts = column_count.clone() if DEBUG_CHECKS else None
    scale, uniform = _column_share_scale_(column_sum, column_count)
    if DEBUG_CHECKS:
        check_share_conservation(scale, torch.zeros_like(scale) if uniform is None else uniform, column_sum, counts)
    return scale, uniform


def _entropy_pass(entropy, blocks, success, segment, num_segments, *, dtype, epsilon, inverse, column, empty):
    """Pass 1: x into the output, row sums, (segment, T) column sums and counts (or the rows' Σ log)."""
    batch, width = entropy.shape
    device = entropy.device
    out = empty((batch, width), dtype=dtype, device=device)
    counts = torch.empty(batch, dtype=dtype, device=device)
    entropy_sums = torch.empty(batch, dtype=dtype, device=device)
    shaped_sums = torch.empty(batch, dtype=dtype, device=device) if inverse and not column else entropy_sums
    log_sums = None if column else torch.empty(batch, dtype=dtype, device=device)
    column_sum = column_count = None
    if column:
        column_sum = empty((num_segments, width), dtype=dtype, device=device).zero_()
        column_count = empty((num_segments, width), dtype=dtype, device=device).zero_()
    if inverse:  # ε on failure rows; +inf on success rows, where mask / inf adds exactly 0
        inf = torch.tensor(float("inf"), dtype=dtype, device=device)
        offset = torch.where(success, inf, torch.tensor(epsilon, dtype=dtype, device=device)).unsqueeze(-1)
        keep = success.to(dtype).unsqueeze(-1)
    for block in blocks:
        mask = blocks.mask(block)
        x = out[block]
        entropy_sums[block] = masked_product_(entropy[block], mask, x, "entropy", first_row=block.start, clamp_min=0.0)
        torch.sum(mask, -1, out=counts[block])
        if not column:
            log_sums[block] = row_dot(torch.add(x, epsilon, out=blocks.scratch(block)).log_(), mask)
        if inverse:  # 1/(H + ε) on failure rows (inverse_entropy, Eq. S26)
            inverse_denominator = torch.add(x, offset[block], out=blocks.scratch(block))  # before x changes
            x.mul_(keep[block]).addcdiv_(mask, inverse_denominator)
            if not column:
                shaped_sums[block] = x.sum(-1)
        if column:
            column_sum.index_add_(0, segment[block], x)
            column_count.index_add_(0, segment[block], mask)
        x.div_(mask)  # 0/0 = NaN marks the positions off the mask: pass 2 needs no mask
    return out, counts, entropy_sums, shaped_sums, log_sums, column_sum, column_count


def _reward_pass_(out, blocks, shares, row_shift, *, centred, clip=None, success=None):
    """Pass 2: ``out`` ← α · share (+ ``clipped_bonus``) + ``row_shift``, then 0 where pass 1 left NaN.

    Returns the rows' Σ (value)² when ``centred`` (``row_shift`` = reward − set mean), else the
    rows' sums (for the set means of ``clipped_len``).
    """
    totals = torch.empty(out.shape[0], dtype=out.dtype, device=out.device)
    if clip is not None:
        is_success = success.to(out.dtype).unsqueeze(-1)
    for block in blocks:
        x = shares.apply_(out[block], block, blocks)
        if clip is not None:
            clipped = clipped_bonus(x, alpha1=clip[0], kappa=clip[1], out=blocks.scratch(block))
            x.mul_(1.0 - is_success[block]).addcmul_(clipped, is_success[block])
        x.add_(row_shift[block].unsqueeze(-1)).nan_to_num_(nan=0.0, posinf=float("inf"), neginf=float("-inf"))
        totals[block] = row_sum_squares(x) if centred else x.sum(-1)
    return totals


def _centre_pass_(out, blocks, row_shift):
    """``out += mask · row_shift`` (minus the set mean); returns the rows' Σ (value)²."""
    sq = torch.empty(out.shape[0], dtype=out.dtype, device=out.device)
    for block in blocks:
        sq[block] = row_sum_squares(out[block].addcmul_(blocks.mask(block), row_shift[block].unsqueeze(-1)))
    return sq
