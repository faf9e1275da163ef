"""Paper B, token level: GTPO entropy-shaped token rewards and advantages.

"GTPO and GRPO-S: Token and Sequence-Level Reward Shaping with Policy Entropy",
arXiv:2508.04349. Equation numbers (S18)-(S30) are those of the v1-v4 text as quoted in
ALGORITHMS.md Part B (the Yam write-up's numbering); v5/v6 numbers are given where the
later text is the source. Every entropy term is a detached constant (Remark 2.5).

Notation: B responses, T response length, K prompt groups, G responses per group.
O+ = successful responses, O− = failed ones; O+_t = successes still generating at t,
d_t = |O+_t|, h_t = |O−_t| (a token "exists" at t where ``response_mask`` is 1).
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from gtpo_verl.algorithms.groups import RowBlocks, group_sum, masked_product_, row_dot, row_sum_squares
from gtpo_verl.algorithms.normalization import ADV_NORM_MODES, class_sets, set_means, set_row_scale

TOKEN_VARIANTS = ("base", "clipped_len", "unified_v6")
ENTROPY_SHARES = ("column", "geometric")
UNIFORM_GROUP_MODES = ("keep", "zero_adv")
LENGTH_DENOMINATORS = ("l1", "l2")


class TokenShaping(NamedTuple):
    """Advantages ``(B, T)`` plus per-row facts the diagnostics reuse."""

    advantages: torch.Tensor
    success: torch.Tensor  # (B,) bool, O+ membership
    mean_entropy: torch.Tensor  # (B,) masked mean old-policy entropy
    share_stats: torch.Tensor | None = None  # (sum, sum of squares, max) of the success tokens' shares


def overlong_length_penalty(
    lengths: torch.Tensor, *, buffer_len: int, max_len: int, denominator: str = "l1"
) -> torch.Tensor:
    """Return R(i) ``(B,)``, the soft overlong punishment of Eq. (S23).

    R = 0 for |o| ≤ L, (L − |o|)/L1 for L < |o| ≤ L2, −1 for |o| > L2, with L1 = ``buffer_len``,
    L2 = ``max_len`` and L = L2 − L1.

    NOTE: the text prints ``/L2``; ``denominator="l1"`` (default) is DAPO's continuous
    punishment (0 at L, −1 at L2). ``"l2"`` is the literal print.
    """
    l1, l2 = float(buffer_len), float(max_len)
    expected = l2 - l1
    scale = l1 if denominator == "l1" else l2
    lengths = lengths.to(torch.float64)
    soft = (expected - lengths) / scale
    penalty = torch.where(lengths <= expected, torch.zeros_like(soft), soft)
    return torch.where(lengths > l2, torch.full_like(soft, -1.0), penalty)


def gtpo_token_advantage(
    entropy: torch.Tensor,
    response_mask: torch.Tensor,
    sequence_scores: torch.Tensor,
    group_ids: torch.Tensor,
    num_groups: int,
    *,
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
    return_share_stats: bool = False,
) -> TokenShaping:
    """Return GTPO token advantages: entropy-shaped token rewards, z-scored per group.

    Implements Eq. (S18) + (S21) (base), (S20) (``entropy_share="geometric"``), (S23)-(S25)
    (``variant="clipped_len"``), (S26)-(S29) (``negative_shaping``) and v6 Eq. 3/5/6
    (``variant="unified_v6"``), arXiv:2508.04349.

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
        entropy: ``(B, T)`` old-policy per-token entropy H_{i,t} (detached; float).
        response_mask: ``(B, T)`` 1 on response tokens (any dtype).
        sequence_scores: ``(B,)`` outcome score; O+ = ``score > success_threshold``, which
            reads verl's 0/1 and DAPO's ±1 scores alike.
        group_ids: ``(B,)`` int64 in [0, K); ``num_groups`` = K.
        return_share_stats: also return (Σ, Σ², max) of the success tokens' entropy shares.
        uniform_outcome_groups: ``keep`` applies the formulas to all-success / all-failure
            groups too (zero-mean entropy redistribution); ``zero_adv`` gives them 0, as
            verl's GRPO does. DAPO's dynamic sampling removes such groups beforehand.

    Returns:
        ``TokenShaping`` with ``advantages`` ``(B, T)`` in ``promote(entropy, float32)``,
        exactly 0 outside ``response_mask``.

    NOTE: H = 0 is handled as in Remark 2.1: 1/(H + ε) in the inverse share, and a column
    whose entropies all vanish gives each active success a share of 1.

    Cost (docs/performance.md): two passes over the batch and one final scaling. The first
    writes H (1/(H + ε) on failure rows) into the output and sums the columns of every
    (group, class) segment; the second multiplies by the (segment, t) table of coefficient ·
    share scales and adds reward − set mean, whose set sums need no pass because each
    segment's shares sum to its token count. On the CPU both run in row blocks
    (``RowBlocks``), so the output is the only ``(B, T)`` allocation.
    """
    dtype = torch.promote_types(entropy.dtype, torch.float32)
    device = entropy.device
    group_ids = group_ids.to(device)
    success = (sequence_scores > success_threshold).to(device)
    negative_branch = negative_shaping or variant == "unified_v6"
    column = entropy_share == "column"
    blocks = RowBlocks(response_mask, dtype)

    # Segments of the column shares: success rows of group g → g; with negative shaping the
    # failure rows of g → K + g (the two sets are disjoint, so one table serves Eq. S18 and
    # S26); every other row → a last, empty segment whose coefficient is 0.
    num_segments = num_groups * (2 if negative_shaping else 1) + 1
    dummy = num_segments - 1
    seg = torch.where(success, group_ids, group_ids + num_groups if negative_shaping else dummy)
    # coefficient of each segment's share in the reward: +α2 (S18), −1 (S26) or −α2 (v6 Eq. 5)
    fail_coef = -(alpha2 if variant == "unified_v6" else 1.0)
    coef = torch.zeros(num_segments, dtype=torch.float64, device=device)
    coef[:num_groups] = alpha2
    if negative_shaping:
        coef[num_groups:dummy] = fail_coef
    row_coef = coef[seg]

    out, counts, entropy_sums, shaped_sums, log_sums, col_sum, col_count = _entropy_pass(
        entropy.detach(), blocks, success, seg, num_segments, dtype=dtype, epsilon=epsilon,
        inverse=negative_shaping, column=column, geometric=not column,
    )
    mean_entropy = entropy_sums / counts.clamp_min(1)

    # per-token share = shaped · table[seg] (+ mask · uniform[seg]) for column shares, or
    # shaped · row factor for geometric ones
    share_table = uniform_table = share_row = None
    if column:
        # x_{i,t} / mean_{k in set_t} x_{k,t} = x_{i,t} · count_t / Σ_k x_{k,t} (S18: H / ΣH · d_t);
        # a column whose values all vanish gives each active member a share of 1 (Remark 2.1)
        # In place on the (segments, T) tables (fresh tables cost page faults): count / sum is
        # the share scale where sum > 0; ±inf where count > 0 but sum = 0 (uniform columns,
        # marked −1); NaN where the column is empty (→ 0). Sums < 0 are clamped to 0 first, so
        # every sum ≤ 0 is treated alike, as before.
        share_table = col_count.div_(col_sum.clamp_min_(0.0)).nan_to_num_(nan=0.0, posinf=-1.0, neginf=-1.0)
        members = share_table[:dummy]  # the last (dummy) segment has coefficient 0
        if members.numel() and bool(members.amin() < 0):  # only all-zero-entropy columns need it
            uniform_table = (share_table < 0).to(dtype)
            uniform_table[dummy] = 0.0
        share_table.clamp_min_(0.0)
    else:
        # row geometric mean GM_i = (Π_t (H_{i,t} + ε))^{1/|o_i|} (S20); GM_i(1/H) = 1/GM_i (S27)
        geo = torch.exp(log_sums / counts.clamp_min(1))
        share_row = torch.where(success, 1.0 / geo, geo)

    share_stats = None
    if return_share_stats:  # three reductions, for diagnostics only
        share_stats = _success_share_stats(out, blocks, success, seg, share_table, uniform_table, share_row)

    # fold the segment coefficients into the small tables (or the row factors)
    if column:
        coef_column = coef.to(dtype).unsqueeze(-1)
        share_table.mul_(coef_column)
        if uniform_table is not None:
            uniform_table.mul_(coef_column)
    else:
        share_row = (share_row * row_coef).to(dtype)

    success64 = success.to(torch.float64)
    row_reward = success64 * alpha1  # r̃ = α1 + ... on O+ (S18), 0 on O−
    if variant == "unified_v6":
        row_reward = (2.0 * success64 - 1.0) * alpha1  # ±α1 (v6 Eq. 3, 5)
    if variant == "clipped_len":
        row_reward = overlong_length_penalty(
            counts,
            buffer_len=overlong_buffer_len,
            max_len=max_response_len,
            denominator=length_penalty_denominator,
        ).to(torch.float64)

    keep_rows = None
    if uniform_outcome_groups == "zero_adv":
        member = counts > 0  # responses without tokens (V1 padding rows) are no group members
        successes = group_sum((success & member).to(torch.int64), group_ids, num_groups)
        sizes = group_sum(member.to(torch.int64), group_ids, num_groups)
        mixed = (successes > 0) & (successes < sizes)
        keep_rows = mixed[group_ids]
    sets = class_sets(counts, success, group_ids, num_groups, mode=adv_norm if negative_branch else "single_combined")

    if variant != "clipped_len":
        # The set sums of the shaped rewards need no (B, T) pass. Column shares sum to the
        # column's member count (Σ_i H_{i,t}/Σ_k H_{k,t} · d_t = d_t; a uniform column gives 1
        # per member), so a segment's shares sum to its token count; row factors sum to
        # factor · Σ_t x_{i,t}.
        row_totals = row_reward * counts.to(torch.float64)
        if column:
            row_totals = row_totals + row_coef * counts.to(torch.float64)
        else:
            row_totals = row_totals + share_row.to(torch.float64) * shaped_sums.to(torch.float64)
        set_sums = group_sum(row_totals, sets.set_ids, sets.num_sets)
        set_mean = set_means(set_sums, sets)
        # reward minus set mean on every valid token, added in the same pass as the shares
        row_shift = (row_reward - set_mean[sets.set_ids]).to(dtype)
        row_sq_dev = _reward_pass_(
            out, blocks, seg, share_table, uniform_table, share_row, row_shift, centred=True
        )
    else:
        # (S24) needs the rewards before their mean: one pass for them, one for the centring
        row_totals = _reward_pass_(
            out, blocks, seg, share_table, uniform_table, share_row, row_reward.to(dtype), centred=False,
            clip=(alpha1, 1.0, alpha1 * (1.0 + 1.0 / kappa)), success=success,
        )
        set_mean = set_means(group_sum(row_totals.to(torch.float64), sets.set_ids, sets.num_sets), sets)
        row_sq_dev = _centre_pass_(out, blocks, (-set_mean[sets.set_ids]).to(dtype))

    if not bool(torch.isfinite(row_sq_dev).all()):
        raise ValueError("non-finite value at a valid response position (NaN/Inf entropy or reward?)")
    row_scale = set_row_scale(
        row_sq_dev, set_mean, sets, unbiased=std_unbiased, epsilon=epsilon, keep_rows=keep_rows
    )
    out.mul_(row_scale.to(dtype).unsqueeze(-1))
    return TokenShaping(advantages=out, success=success, mean_entropy=mean_entropy, share_stats=share_stats)


def _entropy_pass(
    entropy: torch.Tensor,
    blocks: RowBlocks,
    success: torch.Tensor,
    seg: torch.Tensor,
    num_segments: int,
    *,
    dtype: torch.dtype,
    epsilon: float,
    inverse: bool,
    column: bool,
    geometric: bool,
):
    """First pass: the masked entropies (inverted on failure rows) and their sums and columns.

    Returns ``(shaped, counts, entropy_sums, shaped_sums, log_sums, col_sum, col_count)``:
    ``shaped`` ``(B, T)`` is H·mask on success rows and, with ``inverse``, mask/(H·mask + ε)
    on failure rows (the 1/(H + ε) of Eq. S26); ``entropy_sums`` the row sums of H·mask
    (garbage outside the mask ignored, non-finite values inside it a ``ValueError``);
    ``shaped_sums`` the row sums of ``shaped``; ``log_sums`` Σ_t log(H + ε) (geometric);
    ``col_sum``/``col_count`` ``(num_segments, T)`` the per-segment column sums of ``shaped``
    and of the mask (column shares).
    """
    batch, width = entropy.shape
    device = entropy.device
    out = torch.empty(batch, width, dtype=dtype, device=device)
    counts = torch.empty(batch, dtype=dtype, device=device)
    entropy_sums = torch.empty(batch, dtype=dtype, device=device)
    shaped_sums = torch.empty(batch, dtype=dtype, device=device) if inverse and geometric else entropy_sums
    log_sums = torch.empty(batch, dtype=dtype, device=device) if geometric else None
    col_sum = col_count = None
    if column:
        col_sum = torch.zeros(num_segments, width, dtype=dtype, device=device)
        col_count = torch.zeros(num_segments, width, dtype=dtype, device=device)
    if inverse:
        # ε on failure rows; +inf on success rows, where mask / inf adds exactly 0
        inverse_offset = torch.where(
            success.unsqueeze(-1),
            torch.tensor(float("inf"), dtype=dtype, device=device),
            torch.tensor(epsilon, dtype=dtype, device=device),
        )
        keep_success = success.to(dtype).unsqueeze(-1)
    for block in blocks:
        mask = blocks.mask(block)
        shaped = out[block]
        sums = masked_product_(entropy[block], mask, shaped, "entropy", first_row=block.start)
        entropy_sums[block] = sums
        torch.sum(mask, -1, out=counts[block])
        if geometric:
            logs = torch.add(shaped, epsilon, out=blocks.scratch(block)).log_()
            log_sums[block] = row_dot(logs, mask)
        if inverse:
            offset = torch.add(shaped, inverse_offset[block], out=blocks.scratch(block))
            shaped.mul_(keep_success[block]).addcdiv_(mask, offset)
            if geometric:
                shaped_sums[block] = shaped.sum(-1)
        if column:
            col_sum.index_add_(0, seg[block], shaped)
            col_count.index_add_(0, seg[block], mask)
    return out, counts, entropy_sums, shaped_sums, log_sums, col_sum, col_count


def _apply_shares_(
    shaped: torch.Tensor,
    mask: torch.Tensor,
    block: slice,
    blocks: RowBlocks,
    seg: torch.Tensor,
    table: torch.Tensor | None,
    uniform: torch.Tensor | None,
    row_factor: torch.Tensor | None,
) -> torch.Tensor:
    """``shaped[block] ← shaped · table[seg] + mask · uniform[seg]`` (column) or ``· row_factor``."""
    if table is None:
        return shaped.mul_(row_factor[block].unsqueeze(-1))
    gathered = torch.index_select(table, 0, seg[block], out=blocks.scratch(block, 1))
    shaped.mul_(gathered)
    if uniform is not None:
        shaped.addcmul_(torch.index_select(uniform, 0, seg[block], out=gathered), mask)
    return shaped


def _reward_pass_(
    out: torch.Tensor,
    blocks: RowBlocks,
    seg: torch.Tensor,
    table: torch.Tensor | None,
    uniform: torch.Tensor | None,
    row_factor: torch.Tensor | None,
    row_shift: torch.Tensor,
    *,
    centred: bool,
    clip: tuple[float, float, float] | None = None,
    success: torch.Tensor | None = None,
) -> torch.Tensor:
    """Second pass: ``out`` ← coefficient · share + mask · ``row_shift`` on every valid token.

    ``centred``: ``row_shift`` is reward − set mean; returns the rows' Σ (value)² for the std.
    Otherwise (``clip = (α1, low, high)``, Eq. S24) success rows get clip(α1 + α2·share, low,
    high) first, and the return value is the rows' sums (for the set means).
    """
    totals = torch.empty(out.shape[0], dtype=out.dtype, device=out.device)
    if clip is not None:
        is_success = success.to(out.dtype).unsqueeze(-1)
        not_success = (~success).to(out.dtype).unsqueeze(-1)
    for block in blocks:
        mask = blocks.mask(block)
        shaped = _apply_shares_(out[block], mask, block, blocks, seg, table, uniform, row_factor)
        if clip is not None:
            alpha1, low, high = clip
            clipped = torch.add(shaped, alpha1, out=blocks.scratch(block)).clamp_(low, high)
            clipped.mul_(mask).mul_(is_success[block])
            shaped.mul_(not_success[block]).add_(clipped)
        shaped.addcmul_(mask, row_shift[block].unsqueeze(-1))
        totals[block] = row_sum_squares(shaped) if centred else shaped.sum(-1)
    return totals


def _centre_pass_(out: torch.Tensor, blocks: RowBlocks, row_shift: torch.Tensor) -> torch.Tensor:
    """``out += mask · row_shift`` (minus the set mean); returns the rows' Σ (value)²."""
    sq = torch.empty(out.shape[0], dtype=out.dtype, device=out.device)
    for block in blocks:
        values = out[block].addcmul_(blocks.mask(block), row_shift[block].unsqueeze(-1))
        sq[block] = row_sum_squares(values)
    return sq


def _success_share_stats(
    shaped: torch.Tensor,
    blocks: RowBlocks,
    success: torch.Tensor,
    seg: torch.Tensor,
    table: torch.Tensor | None,
    uniform: torch.Tensor | None,
    row_factor: torch.Tensor | None,
) -> torch.Tensor:
    """Return float64 (Σ, Σ², max) of the success tokens' shares (0 elsewhere), for diagnostics."""
    batch = shaped.shape[0]
    row_sum = torch.zeros(batch, dtype=torch.float64, device=shaped.device)
    row_sq, row_max = row_sum.clone(), row_sum.clone()
    for block in blocks:
        share = blocks.scratch(block, 2).copy_(shaped[block])
        share = _apply_shares_(share, blocks.mask(block), block, blocks, seg, table, uniform, row_factor)
        row_sum[block] = share.sum(-1).to(torch.float64)
        row_sq[block] = row_sum_squares(share).to(torch.float64)
        if share.shape[1]:
            row_max[block] = share.amax(-1).to(torch.float64)
    keep = success.to(torch.float64)
    largest = (row_max * keep).amax() if batch else row_max.new_zeros(())
    return torch.stack([(row_sum * keep).sum(), (row_sq * keep).sum(), largest.clamp_min(0.0)])


__all__ = [
    "ADV_NORM_MODES",
    "ENTROPY_SHARES",
    "LENGTH_DENOMINATORS",
    "TOKEN_VARIANTS",
    "UNIFORM_GROUP_MODES",
    "TokenShaping",
    "gtpo_token_advantage",
    "overlong_length_penalty",
]
