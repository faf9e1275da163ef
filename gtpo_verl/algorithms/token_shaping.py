"""Paper B, token level: GTPO entropy-shaped token rewards and advantages.

"GTPO and GRPO-S: Token and Sequence-Level Reward Shaping with Policy Entropy",
arXiv:2508.04349. Equation labels (S18)-(S30) and the v6 forms are those of docs/spec.md
(sections B.2-B.6). Every entropy term is a detached constant (Remark 2.5).

Notation: B responses, T response length, K prompt groups, G responses per group.
O+ = successful responses, O− = failed ones; O+_t = successes still generating at t,
d_t = |O+_t|, h_t = |O−_t| (a token "exists" at t where ``response_mask`` is 1).

The module has three layers:

- the **equation layer**: one small pure function per formula (column share, geometric
  share, inverse entropy, clipped bonus, length penalty, v6 outcome reward);
- ``gtpo_token_advantage_reference``: the readable twin, the equations applied to whole
  ``(B, T)`` tensors one after the other (as verl's ``compute_grpo_outcome_advantage`` is to
  its vectorised form); tests hold the fused function to it;
- the **pass layer**: ``gtpo_token_advantage``, the same equations fused into one pass over
  blocks of whole groups (see its docstring), which is what the estimator runs.
"""

from __future__ import annotations

import os
from typing import NamedTuple

import torch

from gtpo_verl.algorithms.choices import (  # noqa: F401  (the vocabularies, re-exported)
    ENTROPY_SHARES,
    LENGTH_DENOMINATORS,
    TOKEN_VARIANTS,
    UNIFORM_GROUP_MODES,
)
from gtpo_verl.algorithms.cpu_threads import one_cpu_thread
from gtpo_verl.algorithms.groups import (
    RowBlocks,
    block_elements,
    group_sum,
    masked_product_,
    members_matrix,
    row_dot,
    row_sum_squares,
)
from gtpo_verl.algorithms.normalization import ADV_NORM_MODES, class_sets, set_means, set_row_scale, zscore_by_class_

# Debug mode (env GTPO_VERL_DEBUG=1): assert the share conservation the fused pass relies on.
DEBUG_CHECKS = os.environ.get("GTPO_VERL_DEBUG", "") not in ("", "0")
SUCCESS, FAILURE = 0, 1  # class index of a row inside its group's two segments


class TokenShaping(NamedTuple):
    """Advantages ``(B, T)`` plus per-row facts the diagnostics reuse."""

    advantages: torch.Tensor
    success: torch.Tensor  # (B,) bool, O+ membership
    mean_entropy: torch.Tensor  # (B,) masked mean old-policy entropy
    share_stats: torch.Tensor | None = None  # (sum, sum of squares, max) of the success tokens' shares


# ----------------------------------------------------------------------------- equation layer


def column_share_scale(column_sum: torch.Tensor, column_count: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Column share factors of (S18)/(S26), docs/spec.md B.2 and B.5. Shapes ``(S, T)`` → ``(S, T)``.

    share_{i,t} = x_{i,t} / mean_{k∈set_t} x_{k,t} = x_{i,t} · scale_t + uniform_t, with
    scale_t = d_t / Σ_{k∈set_t} x_{k,t}, where the set is O+_t (x = H) or O−_t (x = 1/(H + ε)).
    A column whose members all have x = 0 gives each member a share of 1 (Remark 2.1): there
    scale = 0 and ``uniform`` = 1. Returns ``(scale, uniform)``, both 0 on empty columns.
    """
    positive = column_sum > 0
    scale = torch.where(positive, column_count / torch.where(positive, column_sum, 1.0), 0.0)  # d_t / Σ x
    uniform = ((column_count > 0) & ~positive).to(column_sum.dtype)  # all-zero column: share 1
    return scale, uniform


def column_share(
    values: torch.Tensor, members: torch.Tensor, group_ids: torch.Tensor, num_groups: int
) -> torch.Tensor:
    """share_{i,t} = x_{i,t} · d_t / Σ_{k∈set_t} x_{k,t} ``(B, T)`` over the rows ``members`` marks. (S18), (S26).

    ``values`` ``(B, T)`` x ≥ 0; ``members`` ``(B, T)`` float 0/1 (set membership × response
    mask). Readable form: one ``(K, T)`` table per call; 0 outside ``members``.
    """
    column_sum = group_sum(values * members, group_ids, num_groups)  # (K, T) Σ_{k∈set_t} x_{k,t}
    column_count = group_sum(members, group_ids, num_groups)  # (K, T) d_t (or h_t)
    scale, uniform = column_share_scale(column_sum, column_count)
    return (values * scale[group_ids] + uniform[group_ids]) * members  # (B, T)


def geometric_share(values: torch.Tensor, log_values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """share_{i,t} = x_{i,t} / exp(mean_t log x_{i,t}) ``(B, T)``, the row geometric share of (S20)/(S27).

    ``log_values`` ``(B, T)`` is log x as the paper's ε convention gives it: log(H + ε) for
    x = H (S20), −log(H + ε) for x = 1/(H + ε) (S27). 0 outside ``mask``.
    """
    count = mask.sum(-1).clamp_min(1)  # (B,) |o_i|
    geometric_mean = torch.exp((log_values * mask).sum(-1) / count)  # (B,) (Π_t x_{i,t})^{1/|o_i|}
    return values * mask / geometric_mean.unsqueeze(-1)


def inverse_entropy(entropy: torch.Tensor, epsilon: float) -> torch.Tensor:
    """1 / (H + ε), the failure weight of (S26)/(S27) (H = 0 handled as Remark 2.1). Any shape."""
    return 1.0 / (entropy + epsilon)


def clipped_bonus(
    bonus: torch.Tensor, *, alpha1: float, kappa: float, out: torch.Tensor | None = None
) -> torch.Tensor:
    """R̃ = clip(α1 + α2·share, 1, α1(1 + 1/κ)) of (S24), from ``bonus`` = α2·share. Any shape."""
    return torch.add(bonus, alpha1, out=out).clamp_(1.0, alpha1 * (1.0 + 1.0 / kappa))


def overlong_length_penalty(
    lengths: torch.Tensor, *, buffer_len: int, max_len: int, denominator: str = "l1"
) -> torch.Tensor:
    """Return R(i) ``(B,)``, the soft overlong punishment of Eq. (S23), docs/spec.md B.4.

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


def outcome_reward(success: torch.Tensor, *, alpha1: float, variant: str) -> torch.Tensor:
    """The per-row reward before the entropy bonus ``(B,)`` float64.

    base: α1 on O+, 0 on O− (S18); unified_v6: +α1 on O+, −α1 on O− (v6 Eq. 3, 5).
    (clipped_len's α1 sits inside the clip of (S24); its row reward is R(i).)
    """
    success64 = success.to(torch.float64)
    if variant == "unified_v6":
        return (2.0 * success64 - 1.0) * alpha1
    return success64 * alpha1


def bonus_coefficients(*, alpha2: float, negative_shaping: bool, variant: str) -> tuple[float, float]:
    """(coefficient of share⁺, coefficient of share⁻): +α2 (S18); −1 (S26) or −α2 (v6 Eq. 5); 0 if unshaped."""
    failure = (-(alpha2 if variant == "unified_v6" else 1.0)) if negative_shaping else 0.0
    return alpha2, failure


def share_conservation_totals(
    scale: torch.Tensor, uniform: torch.Tensor, column_sum: torch.Tensor, column_count: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The conservation shortcut: Σ_{i∈set_t} share_{i,t} = d_t, so a segment's shares sum to its tokens.

    Σ_i share_{i,t} = Σ_i x_{i,t} · scale_t + d_t · uniform_t = column_sum · scale + count · uniform,
    which ``column_share_scale`` makes equal to count (d_t / Σx · Σx = d_t; an all-zero column
    gives 1 per member). The fused pass uses it to get the set sums of the shaped rewards from
    token counts, without a pass over the batch. Returns ``(share totals, token counts)`` per
    segment ``(S,)`` float64, equal while the shortcut holds.
    """
    totals = (column_sum.to(torch.float64) * scale + column_count.to(torch.float64) * uniform).sum(-1)
    return totals, column_count.to(torch.float64).sum(-1)


def check_share_conservation(
    scale: torch.Tensor, uniform: torch.Tensor, column_sum: torch.Tensor, column_count: torch.Tensor
) -> None:
    """Raise ``AssertionError`` if the shares of some segment do not sum to its token count."""
    totals, counts = share_conservation_totals(scale, uniform, column_sum, column_count)
    bad = (totals - counts).abs() > 1e-4 * counts.clamp_min(1.0)
    if bool(bad.any()):
        first = torch.nonzero(bad).flatten()[:3].tolist()
        raise AssertionError(
            f"column shares no longer sum to the token count in segments {first} (totals "
            f"{totals[first].tolist()} vs counts {counts[first].tolist()}): the fused set means of "
            "gtpo_token_advantage rely on it; update the pass layer with the share formula."
        )


# ----------------------------------------------------------------------------- readable twin


def gtpo_token_advantage_reference(
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
) -> torch.Tensor:
    """The readable twin of ``gtpo_token_advantage``: same arguments, same advantages ``(B, T)``.

    Whole-tensor steps in the paper's order (several ``(B, T)`` temporaries; for tests and
    reading, not for training).
    """
    dtype = torch.promote_types(entropy.dtype, torch.float32)
    device = entropy.device
    group_ids = group_ids.to(device)
    mask = response_mask.to(dtype)
    zero = torch.zeros((), dtype=dtype, device=device)
    entropy = torch.where(mask > 0, entropy.detach().to(dtype), zero).clamp_min(0.0)  # H ≥ 0 on valid tokens
    counts = mask.sum(-1)
    success = (sequence_scores > success_threshold).to(device)
    on_success = mask * success.to(dtype).unsqueeze(-1)  # (B, T) tokens of O+
    on_failure = mask - on_success  # (B, T) tokens of O−
    log_entropy = torch.log(entropy + epsilon)

    coef_success, coef_failure = bonus_coefficients(alpha2=alpha2, negative_shaping=negative_shaping, variant=variant)
    if entropy_share == "column":
        share_success = column_share(entropy, on_success, group_ids, num_groups)  # (S18)
    else:
        share_success = geometric_share(entropy, log_entropy, on_success)  # (S20)
    bonus = coef_success * share_success
    if negative_shaping:
        inverse = inverse_entropy(entropy, epsilon) * mask
        if entropy_share == "column":
            share_failure = column_share(inverse, on_failure, group_ids, num_groups)  # (S26)
        else:
            share_failure = geometric_share(inverse, -log_entropy, on_failure)  # (S27)
        bonus = bonus + coef_failure * share_failure

    if variant == "clipped_len":
        penalty = overlong_length_penalty(
            counts, buffer_len=overlong_buffer_len, max_len=max_response_len, denominator=length_penalty_denominator
        ).to(dtype)
        clipped = clipped_bonus(bonus, alpha1=alpha1, kappa=kappa) * on_success  # (S24)
        rewards = clipped + bonus * on_failure + penalty.unsqueeze(-1) * mask  # (S25)
    else:
        rewards = bonus + outcome_reward(success, alpha1=alpha1, variant=variant).to(dtype).unsqueeze(-1) * mask

    keep_rows = None
    if uniform_outcome_groups == "zero_adv":
        member = counts > 0
        successes = group_sum((success & member).to(torch.int64), group_ids, num_groups)
        sizes = group_sum(member.to(torch.int64), group_ids, num_groups)
        keep_rows = ((successes > 0) & (successes < sizes))[group_ids]
    negative_branch = negative_shaping or variant == "unified_v6"
    return zscore_by_class_(
        rewards,
        mask,
        counts,
        success,
        group_ids,
        num_groups,
        mode=adv_norm if negative_branch else "single_combined",
        unbiased=std_unbiased,
        epsilon=epsilon,
        keep_rows=keep_rows,
    )


# ----------------------------------------------------------------------------- pass layer


@one_cpu_thread
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
        entropy: ``(B, T)`` old-policy per-token entropy H_{i,t} (detached; float). Values
            below 0 (floating-point rounding) are taken as 0.
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

    How the equations are fused (same result as ``gtpo_token_advantage_reference``): every
    formula of a response needs only its own group's rows (column sums run over a group's
    segment, the z-score sets are subsets of a group). So one pass goes over blocks of whole
    groups (``_group_pass``): each block is gathered once, into block-sized scratch, where
    x = H (1/(H + ε) on failure rows), the segment column sums (a masked sum over each
    group's slots), the shares, the rewards, the set means (from the conservation shortcut
    ``share_conservation_totals``, checked when ``DEBUG_CHECKS``), the centring, the set std
    and the scaling are computed; then the block is written once to its rows of the output.
    The output is the only ``(B, T)`` allocation; on an accelerator the whole batch is one
    block, on the CPU ``groups.block_elements`` sizes the blocks from the thread count.
    With one CPU thread (no parallel regions to wait for) ``_row_passes`` does the same in
    cache-sized row blocks: two passes (column sums by ``index_add_``, then the rewards),
    which costs less than the gathers there.
    """
    dtype = torch.promote_types(entropy.dtype, torch.float32)
    device = entropy.device
    group_ids = group_ids.to(device)
    success = (sequence_scores > success_threshold).to(device)
    negative_branch = negative_shaping or variant == "unified_v6"
    coef_success, coef_failure = bonus_coefficients(alpha2=alpha2, negative_shaping=negative_shaping, variant=variant)
    norm_mode = adv_norm if negative_branch else "single_combined"
    keep_group = None
    if uniform_outcome_groups == "zero_adv":
        member = (response_mask != 0).any(-1).to(device)  # responses without tokens are no group members
        successes = group_sum((success & member).to(torch.int64), group_ids, num_groups)
        sizes = group_sum(member.to(torch.int64), group_ids, num_groups)
        keep_group = (successes > 0) & (successes < sizes)  # mixed groups
    clip = (alpha1, kappa) if variant == "clipped_len" else None
    penalty = None
    if variant == "clipped_len":
        penalty = dict(buffer_len=overlong_buffer_len, max_len=max_response_len, denominator=length_penalty_denominator)

    fused = _row_passes if _single_threaded_cpu(entropy.device) else _group_pass
    out, counts, entropy_sums, share_stats = fused(
        entropy.detach(), response_mask, success, group_ids, num_groups, dtype=dtype, epsilon=epsilon,
        column=entropy_share == "column", inverse=negative_shaping, coefficients=(coef_success, coef_failure),
        alpha1=alpha1, variant=variant, clip=clip, penalty=penalty, norm_mode=norm_mode, unbiased=std_unbiased,
        keep_group=keep_group, share_stats=return_share_stats,
    )
    mean_entropy = entropy_sums / counts.clamp_min(1)
    return TokenShaping(advantages=out, success=success, mean_entropy=mean_entropy, share_stats=share_stats)


def _group_blocks(members: torch.Tensor, width: int, device: torch.device) -> list[slice]:
    """Slices of whole groups holding about ``block_elements`` elements (at least one group)."""
    num_groups, slots = members.shape
    per_group = max(1, slots * max(1, width))
    total = max(1, num_groups * slots * width)
    step = max(1, block_elements(total, device) // per_group)
    return [slice(start, min(num_groups, start + step)) for start in range(0, num_groups, step)]


def _group_pass(
    entropy: torch.Tensor,
    response_mask: torch.Tensor,
    success: torch.Tensor,
    group_ids: torch.Tensor,
    num_groups: int,
    *,
    dtype: torch.dtype,
    epsilon: float,
    column: bool,
    inverse: bool,
    coefficients: tuple[float, float],
    alpha1: float,
    variant: str,
    clip: tuple[float, float] | None,
    penalty: dict | None,
    norm_mode: str,
    unbiased: bool,
    keep_group: torch.Tensor | None,
    share_stats: bool,
):
    """The fused pass: every equation of a group needs only that group's rows, so each block of
    whole groups is gathered once (``members_matrix`` order, padded slots masked out), computed
    in block-sized scratch, and written once to its rows of the output.

    Per block: x = max(H, 0)·mask (mask/(x + ε) on failure rows with ``inverse``); the column
    sums of each (group, class) segment as a masked sum over the group's slots; the shares
    (``column_share_scale`` or the row geometric means) times their coefficients; the rewards
    (``outcome_reward``, or ``clipped_bonus`` + R(i)); the set means from the conservation
    shortcut (``share_conservation_totals``; checked when ``DEBUG_CHECKS``; ``clipped_len``
    sums its rewards instead); centring, the set std and the scaling. Returns
    ``(advantages, counts, entropy sums, share stats or None)``.
    """
    batch, width = response_mask.shape
    device = response_mask.device
    coef_success, coef_failure = coefficients
    out_rows = torch.empty(batch + 1, width, dtype=dtype, device=device)  # row B takes the padded slots
    counts = torch.zeros(batch + 1, dtype=dtype, device=device)
    entropy_sums = torch.zeros(batch + 1, dtype=dtype, device=device)
    stats = torch.zeros(3, dtype=torch.float64, device=device) if share_stats else None
    members = members_matrix(group_ids, num_groups)  # (K, S) rows, -1 pads
    slots = members.shape[1]
    slot_rows = members.clamp_min(0)
    slot_success = torch.where(members >= 0, success[slot_rows], True).reshape(-1)  # pads: success, no tokens
    slot_failure = (~slot_success).to(torch.int64)
    real_slot = (members >= 0).reshape(-1)
    slot_class_weight = [  # (K·S, 1) 0/1 weight of each slot in its group's success / failure segment
        (real_slot & slot_success).to(dtype).unsqueeze(-1),
        (real_slot & ~slot_success).to(dtype).unsqueeze(-1),
    ]
    coef64 = torch.tensor([coef_success, coef_failure], dtype=torch.float64, device=device)
    slot_coef = coef64[(~slot_success).to(torch.int64)]
    slot_reward = outcome_reward(slot_success, alpha1=alpha1, variant=variant)
    if inverse:
        inf = torch.tensor(float("inf"), dtype=dtype, device=device)
        slot_offset = torch.where(slot_success, inf, torch.tensor(epsilon, dtype=dtype, device=device)).unsqueeze(-1)
        slot_keep = slot_success.to(dtype).unsqueeze(-1)

    group_blocks = _group_blocks(members, width, device)
    rows_cap = max(b.stop - b.start for b in group_blocks) * slots if group_blocks else 0
    x_buffer, mask_buffer, aux_buffer = (torch.empty(rows_cap, width, dtype=dtype, device=device) for _ in range(3))
    entropy_buffer = torch.empty(rows_cap, width, dtype=entropy.dtype, device=device) if entropy.dtype != dtype else None
    gather_buffer = (
        torch.empty(rows_cap, width, dtype=response_mask.dtype, device=device) if response_mask.dtype != dtype else None
    )
    for groups in group_blocks:
        nb = groups.stop - groups.start
        block_members = members[groups].reshape(-1)  # (n,) batch rows of the block's slots
        n = block_members.numel()
        slot = slice(groups.start * slots, groups.start * slots + n)
        padded = block_members < 0
        gather_rows = block_members.clamp_min(0)
        write_rows = torch.where(padded, batch, block_members)
        mask = mask_buffer[:n]
        if gather_buffer is None:
            torch.index_select(response_mask, 0, gather_rows, out=mask)
        else:
            mask.copy_(torch.index_select(response_mask, 0, gather_rows, out=gather_buffer[:n]))
        if bool(padded.any()):
            mask[padded] = 0.0
        x = x_buffer[:n]
        if entropy_buffer is None:
            torch.index_select(entropy, 0, gather_rows, out=x)
        else:
            x.copy_(torch.index_select(entropy, 0, gather_rows, out=entropy_buffer[:n]))
        # x = max(H, 0)·mask; NaN/Inf garbage outside the mask ignored, inside it a ValueError
        row_entropy = masked_product_(x, mask, x, "entropy", clamp_min=0.0, source=(entropy, gather_rows))
        row_count = mask.sum(-1)
        entropy_sums[write_rows] = row_entropy
        counts[write_rows] = row_count
        if not column:
            log_mean = row_dot(torch.add(x, epsilon, out=aux_buffer[:n]).log_(), mask) / row_count.clamp_min(1)
        if inverse:  # 1/(H + ε) on failure rows (inverse_entropy, Eq. S26); + mask/inf = 0 on success rows
            offset = torch.add(x, slot_offset[slot], out=aux_buffer[:n])
            x.mul_(slot_keep[slot]).addcdiv_(mask, offset)

        # shares (before their coefficients): x · d_t/Σx (+ uniform) or x / GM
        if column:
            # Σ over each group's slots of x (and of the mask), per class: a reduction over the slot
            # dim, in slot order whatever the block size (no index_add_, no BLAS call per group)
            col_sum = torch.empty(2, nb, width, dtype=dtype, device=device)
            col_count = torch.empty(2, nb, width, dtype=dtype, device=device)
            for cls in (SUCCESS, FAILURE):
                weight = slot_class_weight[cls][slot]
                torch.sum(torch.mul(x, weight, out=aux_buffer[:n]).view(nb, slots, width), 1, out=col_sum[cls])
                torch.sum(torch.mul(mask, weight, out=aux_buffer[:n]).view(nb, slots, width), 1, out=col_count[cls])
            col_sum, col_count = col_sum.view(2 * nb, width), col_count.view(2 * nb, width)
            scale, uniform = _share_tables_(col_sum, col_count)
            local_seg = slot_failure[slot] * nb + torch.arange(n, device=device) // slots
            x.mul_(torch.index_select(scale, 0, local_seg, out=aux_buffer[:n]))
            if uniform is not None:  # only all-zero-entropy columns
                x.addcmul_(torch.index_select(uniform, 0, local_seg, out=aux_buffer[:n]), mask)
        else:  # share = x / exp(mean_t log x): 1/GM(H + ε) on O+ (S20), GM(H + ε) for 1/(H + ε) on O− (S27)
            x.mul_(torch.exp(torch.where(slot_success[slot], -log_mean, log_mean)).unsqueeze(-1))
        if stats is not None:
            on_success = slot_success[slot].to(torch.float64)
            stats[0] += (x.sum(-1).to(torch.float64) * on_success).sum()
            stats[1] += (row_sum_squares(x).to(torch.float64) * on_success).sum()
            if width and bool(slot_success[slot].any()):
                stats[2] = torch.maximum(stats[2], x[slot_success[slot]].amax().to(torch.float64))

        # rewards: coefficient · share + outcome reward (or the clipped bonus + R(i))
        x.mul_(slot_coef[slot].to(dtype).unsqueeze(-1))
        row_reward = slot_reward[slot]
        if clip is not None:
            row_reward = overlong_length_penalty(row_count, **penalty).to(torch.float64)
            clipped = clipped_bonus(x, alpha1=clip[0], kappa=clip[1], out=aux_buffer[:n])
            is_success = slot_success[slot].to(dtype).unsqueeze(-1)
            x.mul_(1.0 - is_success).addcmul_(clipped.mul_(mask), is_success)
            x.addcmul_(mask, row_reward.to(dtype).unsqueeze(-1))
            row_totals = x.sum(-1).to(torch.float64)
        else:
            # conservation: a segment's shares sum to its tokens (geometric: factor · Σ_t x, taken
            # from the row sums of the shares already in x)
            share_totals = row_count.to(torch.float64) if column else x.sum(-1).to(torch.float64) / torch.where(
                slot_coef[slot] != 0, slot_coef[slot], 1.0)
            row_totals = row_reward * row_count.to(torch.float64) + slot_coef[slot] * share_totals

        # z-score within the block's (group, class) sets
        local_group = torch.arange(n, device=device) // slots
        sets = class_sets(row_count, slot_success[slot], local_group, nb, mode=norm_mode)
        set_mean = set_means(group_sum(row_totals, sets.set_ids, sets.num_sets), sets)
        # reward − set mean in one step (the clipped rewards already hold their reward)
        shift = -set_mean[sets.set_ids] if clip is not None else row_reward - set_mean[sets.set_ids]
        x.addcmul_(mask, shift.to(dtype).unsqueeze(-1))
        row_sq_dev = row_sum_squares(x)
        if not bool(torch.isfinite(row_sq_dev).all()):
            raise ValueError("non-finite value at a valid response position (NaN/Inf entropy or reward?)")
        keep_rows = None if keep_group is None else keep_group[groups].repeat_interleave(slots)
        row_scale = set_row_scale(row_sq_dev, set_mean, sets, unbiased=unbiased, epsilon=epsilon, keep_rows=keep_rows)
        x.mul_(row_scale.to(dtype).unsqueeze(-1))
        out_rows.index_copy_(0, write_rows, x)
    if stats is not None:
        stats[2].clamp_min_(0.0)
    return out_rows[:batch], counts[:batch], entropy_sums[:batch], stats



def _column_share_scale_(column_sum: torch.Tensor, column_count: torch.Tensor):
    """``column_share_scale`` in place (fresh (S, T) tables cost page faults on the CPU).

    Overwrites ``column_count`` with scale = d_t / Σx (Σx ≥ 0: entropies are clamped at 0), 0
    where a column is empty or all zero; returns ``(scale, uniform)``, ``uniform`` None unless
    some column with members sums to 0.
    """
    all_zero = (column_count > 0) & (column_sum <= 0)
    uniform = all_zero.to(column_sum.dtype) if bool(all_zero.any()) else None
    scale = column_count.div_(column_sum).nan_to_num_(nan=0.0, posinf=0.0, neginf=0.0)  # 0/0, d/0 → 0
    return scale, uniform


def _share_tables_(column_sum: torch.Tensor, column_count: torch.Tensor):
    """``_column_share_scale_``, and with ``DEBUG_CHECKS`` the conservation the set means rely on."""
    counts = column_count.clone() if DEBUG_CHECKS else None
    scale, uniform = _column_share_scale_(column_sum, column_count)
    if DEBUG_CHECKS:
        check_share_conservation(scale, torch.zeros_like(scale) if uniform is None else uniform, column_sum, counts)
    return scale, uniform


def _single_threaded_cpu(device: torch.device) -> bool:
    """True on a CPU with one torch thread: the row-blocked passes are faster there."""
    return device.type == "cpu" and torch.get_num_threads() <= 1


def _row_passes(
    entropy: torch.Tensor,
    response_mask: torch.Tensor,
    success: torch.Tensor,
    group_ids: torch.Tensor,
    num_groups: int,
    *,
    dtype: torch.dtype,
    epsilon: float,
    column: bool,
    inverse: bool,
    coefficients: tuple[float, float],
    alpha1: float,
    variant: str,
    clip: tuple[float, float] | None,
    penalty: dict | None,
    norm_mode: str,
    unbiased: bool,
    keep_group: torch.Tensor | None,
    share_stats: bool,
):
    """The fused equations in cache-sized row blocks (one CPU thread), same result as ``_group_pass``.

    Pass 1 writes x = max(H, 0)·mask (mask/(x + ε) on failure rows) into the output and sums
    the columns of every (group, class) segment with ``index_add_``; pass 2 multiplies by the
    (segment, t) table of coefficient · share scale and adds reward − set mean (set means from
    the conservation shortcut), returning the rows' squared deviations; a final scaling by
    1/(std + ε). ``clipped_len`` centres in a third pass.
    """
    device = response_mask.device
    coef_success, coef_failure = coefficients
    blocks = RowBlocks(response_mask, dtype)
    seg = group_ids * 2 + (~success).to(torch.int64)  # 2g for O+, 2g + 1 for O−
    coef = torch.tensor([coef_success, coef_failure], dtype=torch.float64, device=device).repeat(num_groups)
    row_coef = coef[seg]
    out, counts, entropy_sums, shaped_sums, log_sums, col_sum, col_count = _row_entropy_pass(
        entropy, blocks, success, seg, 2 * num_groups, dtype=dtype, epsilon=epsilon, inverse=inverse, column=column
    )
    table = uniform = row_factor = None
    if column:
        table, uniform = _share_tables_(col_sum, col_count)
    else:
        log_mean = log_sums / counts.clamp_min(1)
        row_factor = torch.exp(torch.where(success, -log_mean, log_mean))
    stats = _row_share_stats(out, blocks, success, seg, table, uniform, row_factor) if share_stats else None
    if column:
        table.mul_(coef.to(dtype).unsqueeze(-1))
        if uniform is not None:
            uniform.mul_(coef.to(dtype).unsqueeze(-1))
    else:
        row_factor = (row_factor * row_coef).to(dtype)

    row_reward = outcome_reward(success, alpha1=alpha1, variant=variant)
    if clip is not None:
        row_reward = overlong_length_penalty(counts, **penalty).to(torch.float64)
    sets = class_sets(counts, success, group_ids, num_groups, mode=norm_mode)
    if clip is None:
        # conservation: a segment's shares sum to its tokens; row geometric factors sum to factor · Σ_t x
        shares = counts.to(torch.float64) if column else row_factor.to(torch.float64) / torch.where(
            row_coef != 0, row_coef, 1.0) * shaped_sums.to(torch.float64)
        row_totals = row_reward * counts.to(torch.float64) + row_coef * shares
        set_mean = set_means(group_sum(row_totals, sets.set_ids, sets.num_sets), sets)
        row_shift = (row_reward - set_mean[sets.set_ids]).to(dtype)
        row_sq_dev = _row_reward_pass_(out, blocks, seg, table, uniform, row_factor, row_shift, centred=True)
    else:
        row_totals = _row_reward_pass_(
            out, blocks, seg, table, uniform, row_factor, row_reward.to(dtype), centred=False, clip=clip,
            success=success,
        )
        set_mean = set_means(group_sum(row_totals.to(torch.float64), sets.set_ids, sets.num_sets), sets)
        row_sq_dev = _row_centre_pass_(out, blocks, (-set_mean[sets.set_ids]).to(dtype))
    if not bool(torch.isfinite(row_sq_dev).all()):
        raise ValueError("non-finite value at a valid response position (NaN/Inf entropy or reward?)")
    keep_rows = None if keep_group is None else keep_group[group_ids]
    row_scale = set_row_scale(row_sq_dev, set_mean, sets, unbiased=unbiased, epsilon=epsilon, keep_rows=keep_rows)
    out.mul_(row_scale.to(dtype).unsqueeze(-1))
    return out, counts, entropy_sums, stats


def _row_entropy_pass(entropy, blocks, success, seg, num_segments, *, dtype, epsilon, inverse, column):
    """Pass 1 of ``_row_passes``: x into the output, row sums, (segment, T) column sums and counts."""
    batch, width = entropy.shape
    device = entropy.device
    out = torch.empty(batch, width, dtype=dtype, device=device)
    counts = torch.empty(batch, dtype=dtype, device=device)
    entropy_sums = torch.empty(batch, dtype=dtype, device=device)
    shaped_sums = torch.empty(batch, dtype=dtype, device=device) if inverse and not column else entropy_sums
    log_sums = None if column else torch.empty(batch, dtype=dtype, device=device)
    col_sum = col_count = None
    if column:
        col_sum = torch.zeros(num_segments, width, dtype=dtype, device=device)
        col_count = torch.zeros(num_segments, width, dtype=dtype, device=device)
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
        if inverse:
            inverse_denominator = torch.add(x, offset[block], out=blocks.scratch(block))  # before x changes
            x.mul_(keep[block]).addcdiv_(mask, inverse_denominator)
            if not column:
                shaped_sums[block] = x.sum(-1)
        if column:
            col_sum.index_add_(0, seg[block], x)
            col_count.index_add_(0, seg[block], mask)
    return out, counts, entropy_sums, shaped_sums, log_sums, col_sum, col_count


def _row_apply_shares_(x, mask, block, blocks, seg, table, uniform, row_factor):
    """``x ← x · table[seg] + mask · uniform[seg]`` (column) or ``x · row_factor`` (geometric), in place."""
    if table is None:
        return x.mul_(row_factor[block].unsqueeze(-1))
    gathered = torch.index_select(table, 0, seg[block], out=blocks.scratch(block, 1))
    x.mul_(gathered)
    if uniform is not None:
        x.addcmul_(torch.index_select(uniform, 0, seg[block], out=gathered), mask)
    return x


def _row_reward_pass_(out, blocks, seg, table, uniform, row_factor, row_shift, *, centred, clip=None, success=None):
    """Pass 2: ``out`` ← coefficient · share (+ ``clipped_bonus``) + mask · ``row_shift``.

    Returns the rows' Σ (value)² when ``centred`` (``row_shift`` = reward − set mean), else the
    rows' sums (for the set means of ``clipped_len``).
    """
    totals = torch.empty(out.shape[0], dtype=out.dtype, device=out.device)
    if clip is not None:
        is_success = success.to(out.dtype).unsqueeze(-1)
    for block in blocks:
        mask = blocks.mask(block)
        x = _row_apply_shares_(out[block], mask, block, blocks, seg, table, uniform, row_factor)
        if clip is not None:
            clipped = clipped_bonus(x, alpha1=clip[0], kappa=clip[1], out=blocks.scratch(block)).mul_(mask)
            x.mul_(1.0 - is_success[block]).addcmul_(clipped, is_success[block])
        x.addcmul_(mask, row_shift[block].unsqueeze(-1))
        totals[block] = row_sum_squares(x) if centred else x.sum(-1)
    return totals


def _row_centre_pass_(out, blocks, row_shift):
    """``out += mask · row_shift`` (minus the set mean); returns the rows' Σ (value)²."""
    sq = torch.empty(out.shape[0], dtype=out.dtype, device=out.device)
    for block in blocks:
        sq[block] = row_sum_squares(out[block].addcmul_(blocks.mask(block), row_shift[block].unsqueeze(-1)))
    return sq


def _row_share_stats(shaped, blocks, success, seg, table, uniform, row_factor):
    """Float64 (Σ, Σ², max) of the success tokens' shares, for diagnostics."""
    batch = shaped.shape[0]
    row_sum = torch.zeros(batch, dtype=torch.float64, device=shaped.device)
    row_sq, row_max = row_sum.clone(), row_sum.clone()
    for block in blocks:
        share = blocks.scratch(block, 2).copy_(shaped[block])
        share = _row_apply_shares_(share, blocks.mask(block), block, blocks, seg, table, uniform, row_factor)
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
    "bonus_coefficients",
    "check_share_conservation",
    "clipped_bonus",
    "column_share",
    "column_share_scale",
    "geometric_share",
    "gtpo_token_advantage",
    "gtpo_token_advantage_reference",
    "inverse_entropy",
    "outcome_reward",
    "overlong_length_penalty",
    "share_conservation_totals",
]
