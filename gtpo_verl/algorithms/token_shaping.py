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
- the **pass layer**: ``gtpo_token_advantage``, the same equations fused into two passes over
  the batch (see its docstring), which is what the estimator runs.
"""

from __future__ import annotations

import os
from typing import NamedTuple

import torch

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

TOKEN_VARIANTS = ("base", "clipped_len", "unified_v6")
ENTROPY_SHARES = ("column", "geometric")
UNIFORM_GROUP_MODES = ("keep", "zero_adv")
LENGTH_DENOMINATORS = ("l1", "l2")
# Debug mode (env GTPO_VERL_DEBUG=1): assert the share conservation the fused pass relies on.
DEBUG_CHECKS = os.environ.get("GTPO_VERL_DEBUG", "") not in ("", "0")
# Elements per column-sum ``bmm`` (whole groups, at least one): the calls always cover the same
# aligned chunks of groups, fixed by the batch's shape, so the sums do not depend on how the
# batch is split into blocks or on the thread count (bitwise).
CHUNK_ELEMENTS = 1 << 19
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

    How the equations are fused (same result as ``gtpo_token_advantage_reference``):

    1. entropy pass, over blocks of whole groups: x = H (1/(H + ε) on failure rows with
       negative shaping), its row sums, and the column sums Σx and counts d_t of each
       (group, class) segment as one ``bmm`` per chunk of groups;
    2. ``column_share_scale`` on those ``(2K, T)`` tables (or ``geometric_share``'s row means);
    3. set means from the conservation shortcut (``share_conservation_totals``; checked when
       ``DEBUG_CHECKS``), so no pass is needed for them;
    4. reward pass, over row blocks: x again, then out ← coefficient · share + reward − set
       mean, and the rows' squared deviations; a final scaling by 1/(std + ε).
    ``clipped_len`` needs the rewards before their mean, so it centres in a third pass.
    On the CPU the blocks keep every temporary block-sized (``RowBlocks``); the output is the
    only ``(B, T)`` allocation.
    """
    dtype = torch.promote_types(entropy.dtype, torch.float32)
    device = entropy.device
    group_ids = group_ids.to(device)
    success = (sequence_scores > success_threshold).to(device)
    negative_branch = negative_shaping or variant == "unified_v6"
    column = entropy_share == "column"

    # segment of a row = (group, class): 2g for O+, 2g + 1 for O−
    seg = group_ids * 2 + (~success).to(torch.int64)
    coef_success, coef_failure = bonus_coefficients(alpha2=alpha2, negative_shaping=negative_shaping, variant=variant)
    coef = torch.tensor([coef_success, coef_failure], dtype=torch.float64, device=device).repeat(num_groups)
    row_coef = coef[seg]

    entropy = entropy.detach()
    passes = _entropy_pass(
        entropy, response_mask, success, group_ids, num_groups, dtype=dtype, epsilon=epsilon,
        inverse=negative_shaping, column=column,
    )
    counts = passes.counts
    # pass 2 recomputes x = max(H, 0)·mask (1/(H + ε) on failure rows) block by block into the output
    shaped = _Shaped(entropy, success, dtype=dtype, epsilon=epsilon, inverse=negative_shaping)
    out = torch.empty(response_mask.shape, dtype=dtype, device=device)
    mean_entropy = passes.entropy_sums / counts.clamp_min(1)

    share_table = uniform_table = share_row = None
    if column:
        col_sum, col_count = passes.col_sum.view(2 * num_groups, -1), passes.col_count.view(2 * num_groups, -1)
        share_table, uniform_table = column_share_scale(col_sum, col_count)
        if DEBUG_CHECKS:
            check_share_conservation(share_table, uniform_table, col_sum, col_count)
        if not bool(uniform_table.any()):  # only all-zero-entropy columns need it
            uniform_table = None
    else:
        # share = x / exp(mean_t log x): 1/GM(H + ε) for O+ (S20), GM(H + ε) for x = 1/(H + ε) on O− (S27)
        log_mean = passes.log_sums / counts.clamp_min(1)
        share_row = torch.exp(torch.where(success, -log_mean, log_mean))

    blocks = RowBlocks(response_mask, dtype)
    share_stats = None
    if return_share_stats:  # three reductions, for diagnostics only
        share_stats = _success_share_stats(shaped, blocks, success, seg, share_table, uniform_table, share_row)

    # fold the segment coefficients into the small tables (or the row factors)
    if column:
        share_table = share_table * coef.to(dtype).unsqueeze(-1)
        if uniform_table is not None:
            uniform_table = uniform_table * coef.to(dtype).unsqueeze(-1)
    else:
        share_row = (share_row * row_coef).to(dtype)

    row_reward = outcome_reward(success, alpha1=alpha1, variant=variant)
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
        # set sums without a pass: a segment's column shares sum to its token count
        # (share_conservation_totals); row geometric factors sum to factor · Σ_t x_{i,t}
        row_totals = row_reward * counts.to(torch.float64)
        if column:
            row_totals = row_totals + row_coef * counts.to(torch.float64)
        else:
            row_totals = row_totals + share_row.to(torch.float64) * passes.shaped_sums.to(torch.float64)
        set_mean = set_means(group_sum(row_totals, sets.set_ids, sets.num_sets), sets)
        # reward minus set mean on every valid token, added in the same pass as the shares
        row_shift = (row_reward - set_mean[sets.set_ids]).to(dtype)
        row_sq_dev = _reward_pass_(
            out, shaped, blocks, seg, share_table, uniform_table, share_row, row_shift, centred=True
        )
    else:
        # (S24) needs the rewards before their mean: one pass for them, one for the centring
        row_totals = _reward_pass_(
            out, shaped, blocks, seg, share_table, uniform_table, share_row, row_reward.to(dtype), centred=False,
            clip=(alpha1, kappa), success=success,
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


class _EntropyPass(NamedTuple):
    counts: torch.Tensor  # (B,) valid tokens
    entropy_sums: torch.Tensor  # (B,) Σ_t max(H, 0)·mask
    shaped_sums: torch.Tensor | None  # (B,) Σ_t x (geometric shares)
    log_sums: torch.Tensor | None  # (B,) Σ_t log(H + ε) (geometric shares)
    col_sum: torch.Tensor | None  # (K, 2, T) Σ_{k∈segment} x_{k,t} (column shares)
    col_count: torch.Tensor | None  # (K, 2, T) valid members of the segment at t


class _Shaped:
    """x of a row block: max(H, 0)·mask, and mask / (that + ε) on failure rows with ``inverse``.

    The clamp makes a rounding-negative entropy 0; 1/(H + ε) is ``inverse_entropy`` (Eq. S26),
    fused here as mask / (H·mask + offset) with offset ε on failure rows and +inf on success
    rows (where it adds exactly 0). Garbage outside the mask is ignored; NaN/Inf inside it
    raises a ``ValueError``.
    """

    def __init__(self, entropy: torch.Tensor, success: torch.Tensor, *, dtype, epsilon: float, inverse: bool):
        self.entropy, self.inverse = entropy, inverse
        if inverse:
            device = entropy.device
            inf = torch.tensor(float("inf"), dtype=dtype, device=device)
            self.offset = torch.where(success, inf, torch.tensor(epsilon, dtype=dtype, device=device)).unsqueeze(-1)
            self.keep = success.to(dtype).unsqueeze(-1)

    def rows_(self, out: torch.Tensor, mask: torch.Tensor, rows, scratch: torch.Tensor, values=None):
        """Write x of ``rows`` (a slice, or an index tensor with ``values`` = entropy[rows]) into ``out``.

        Returns the row sums of max(H, 0)·mask (before the inversion).
        """
        if values is None:
            sums = masked_product_(self.entropy[rows], mask, out, "entropy", first_row=rows.start, clamp_min=0.0)
        else:
            sums = masked_product_(values, mask, out, "entropy", clamp_min=0.0, source=(self.entropy, rows))
        if self.inverse:
            offset = torch.add(out, self.offset[rows], out=scratch)
            out.mul_(self.keep[rows]).addcdiv_(mask, offset)
        return sums


def _chunk_groups(slots: int, width: int) -> int:
    """Groups per column-sum ``bmm``: about ``CHUNK_ELEMENTS`` gathered elements, at least one group."""
    return max(1, CHUNK_ELEMENTS // max(1, slots * width))


def _group_blocks(members: torch.Tensor, width: int, device: torch.device) -> list[slice]:
    """Slices of groups, whole bmm chunks each, holding about ``block_elements`` elements."""
    num_groups, slots = members.shape
    chunk = _chunk_groups(slots, width)
    per_chunk = max(1, chunk * slots * max(1, width))
    total = max(1, num_groups * slots * width)
    step = max(1, block_elements(total, device) // per_chunk) * chunk
    return [slice(start, min(num_groups, start + step)) for start in range(0, num_groups, step)]


def _entropy_pass(
    entropy: torch.Tensor,
    response_mask: torch.Tensor,
    success: torch.Tensor,
    group_ids: torch.Tensor,
    num_groups: int,
    *,
    dtype: torch.dtype,
    epsilon: float,
    inverse: bool,
    column: bool,
) -> _EntropyPass:
    """Pass 1: row sums of x, and (column shares) the column sums of every (group, class) segment.

    Column shares: over blocks of whole groups, gathered in ``members_matrix`` order (padded
    slots masked out), x is computed in a scratch buffer and each segment's columns are summed
    with a ``bmm`` against 0/1 class weights, one per chunk of groups (``CHUNK_ELEMENTS``). Geometric shares:
    plain row blocks, and the rows' Σ log(H + ε).
    """
    batch, width = response_mask.shape
    device = response_mask.device
    # one spare entry at index B collects the padded slots' writes
    counts = torch.zeros(batch + 1, dtype=dtype, device=device)
    entropy_sums = torch.zeros(batch + 1, dtype=dtype, device=device)
    if not column:
        return _geometric_row_pass(entropy, response_mask, success, counts, entropy_sums, dtype=dtype,
                                   epsilon=epsilon, inverse=inverse)
    members = members_matrix(group_ids, num_groups)  # (K, S) rows, -1 pads
    slots = members.shape[1]
    col_sum = torch.zeros(num_groups, 2, width, dtype=dtype, device=device)
    col_count = torch.zeros(num_groups, 2, width, dtype=dtype, device=device)
    slot_rows = members.clamp_min(0)
    slot_class = torch.where(members >= 0, (~success).to(torch.int64)[slot_rows], -1)
    class_weights = torch.stack([slot_class == SUCCESS, slot_class == FAILURE], 1).to(dtype)  # (K, 2, S)
    # padded slots gather row 0 and are masked out; as success slots they take no inversion
    shaped = _Shaped(entropy, torch.where(members >= 0, success[slot_rows], True).reshape(-1),
                     dtype=dtype, epsilon=epsilon, inverse=inverse)

    group_blocks = _group_blocks(members, width, device)
    chunk = _chunk_groups(slots, width)
    rows_cap = max(b.stop - b.start for b in group_blocks) * slots if group_blocks else 0
    x_buffer, mask_buffer, offset_buffer = (torch.empty(rows_cap, width, dtype=dtype, device=device) for _ in range(3))
    entropy_buffer = torch.empty(rows_cap, width, dtype=entropy.dtype, device=device) if entropy.dtype != dtype else None
    gather_buffer = (
        torch.empty(rows_cap, width, dtype=response_mask.dtype, device=device) if response_mask.dtype != dtype else None
    )
    for groups in group_blocks:
        block_members = members[groups].reshape(-1)  # (n,) batch rows of the block's slots
        n = block_members.numel()
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
        slot_index = torch.arange(groups.start * slots, groups.start * slots + n, device=device)
        sums = _gathered_rows_(shaped, x, mask, gather_rows, slot_index, offset_buffer[:n])
        entropy_sums[write_rows] = sums
        counts[write_rows] = mask.sum(-1)
        for start in range(groups.start, groups.stop, chunk):
            stop = min(groups.stop, start + chunk)
            lo, hi = (start - groups.start) * slots, (stop - groups.start) * slots
            weights = class_weights[start:stop]
            torch.bmm(weights, x[lo:hi].view(stop - start, slots, width), out=col_sum[start:stop])
            torch.bmm(weights, mask[lo:hi].view(stop - start, slots, width), out=col_count[start:stop])
    return _EntropyPass(counts[:batch], entropy_sums[:batch], None, None, col_sum, col_count)


def _gathered_rows_(shaped: _Shaped, x, mask, gather_rows, slot_index, scratch) -> torch.Tensor:
    """x of gathered rows, in place in ``x`` (which holds entropy[gather_rows]); returns the row sums."""
    sums = masked_product_(x, mask, x, "entropy", clamp_min=0.0, source=(shaped.entropy, gather_rows))
    if shaped.inverse:
        offset = torch.add(x, shaped.offset[slot_index], out=scratch)
        x.mul_(shaped.keep[slot_index]).addcdiv_(mask, offset)
    return sums


def _geometric_row_pass(entropy, response_mask, success, counts, entropy_sums, *, dtype, epsilon, inverse):
    """Pass 1 for geometric shares, over row blocks: counts, Σ x, Σ_t log(H + ε)."""
    batch = response_mask.shape[0]
    blocks = RowBlocks(response_mask, dtype)
    shaped = _Shaped(entropy, success, dtype=dtype, epsilon=epsilon, inverse=inverse)
    log_sums = torch.empty(batch, dtype=dtype, device=entropy.device)
    shaped_sums = torch.empty(batch, dtype=dtype, device=entropy.device) if inverse else None
    for block in blocks:
        mask = blocks.mask(block)
        x = blocks.scratch(block, 0)
        entropy_sums[block] = masked_product_(entropy[block], mask, x, "entropy", first_row=block.start,
                                              clamp_min=0.0)
        torch.sum(mask, -1, out=counts[block])
        logs = torch.add(x, epsilon, out=blocks.scratch(block, 1)).log_()
        log_sums[block] = row_dot(logs, mask)
        if inverse:
            offset = torch.add(x, shaped.offset[block], out=blocks.scratch(block, 1))
            x.mul_(shaped.keep[block]).addcdiv_(mask, offset)
            shaped_sums[block] = x.sum(-1)
    entropy_sums = entropy_sums[:batch]
    return _EntropyPass(counts[:batch], entropy_sums, entropy_sums if shaped_sums is None else shaped_sums,
                        log_sums, None, None)


def _apply_shares_(
    x: torch.Tensor,
    mask: torch.Tensor,
    block: slice,
    blocks: RowBlocks,
    seg: torch.Tensor,
    table: torch.Tensor | None,
    uniform: torch.Tensor | None,
    row_factor: torch.Tensor | None,
) -> torch.Tensor:
    """``x ← x · table[seg] + mask · uniform[seg]`` (column) or ``x · row_factor`` (geometric), in place."""
    if table is None:
        return x.mul_(row_factor[block].unsqueeze(-1))
    gathered = torch.index_select(table, 0, seg[block], out=blocks.scratch(block, 1))
    x.mul_(gathered)
    if uniform is not None:
        x.addcmul_(torch.index_select(uniform, 0, seg[block], out=gathered), mask)
    return x


def _reward_pass_(
    out: torch.Tensor,
    shaped: _Shaped,
    blocks: RowBlocks,
    seg: torch.Tensor,
    table: torch.Tensor | None,
    uniform: torch.Tensor | None,
    row_factor: torch.Tensor | None,
    row_shift: torch.Tensor,
    *,
    centred: bool,
    clip: tuple[float, float] | None = None,
    success: torch.Tensor | None = None,
) -> torch.Tensor:
    """Pass 2: ``out`` ← coefficient · share + mask · ``row_shift`` on every valid token.

    ``centred``: ``row_shift`` is reward − set mean; returns the rows' Σ (value)² for the std.
    Otherwise (``clip = (α1, κ)``, Eq. S24) success rows get ``clipped_bonus`` first, and the
    return value is the rows' sums (for the set means).
    """
    totals = torch.empty(out.shape[0], dtype=out.dtype, device=out.device)
    if clip is not None:
        is_success = success.to(out.dtype).unsqueeze(-1)
        not_success = (~success).to(out.dtype).unsqueeze(-1)
    for block in blocks:
        mask = blocks.mask(block)
        x = out[block]
        shaped.rows_(x, mask, block, blocks.scratch(block, 0))
        x = _apply_shares_(x, mask, block, blocks, seg, table, uniform, row_factor)
        if clip is not None:
            alpha1, kappa = clip
            clipped = clipped_bonus(x, alpha1=alpha1, kappa=kappa, out=blocks.scratch(block))
            clipped.mul_(mask).mul_(is_success[block])
            x.mul_(not_success[block]).add_(clipped)
        x.addcmul_(mask, row_shift[block].unsqueeze(-1))
        totals[block] = row_sum_squares(x) if centred else x.sum(-1)
    return totals


def _centre_pass_(out: torch.Tensor, blocks: RowBlocks, row_shift: torch.Tensor) -> torch.Tensor:
    """``out += mask · row_shift`` (minus the set mean); returns the rows' Σ (value)²."""
    sq = torch.empty(out.shape[0], dtype=out.dtype, device=out.device)
    for block in blocks:
        values = out[block].addcmul_(blocks.mask(block), row_shift[block].unsqueeze(-1))
        sq[block] = row_sum_squares(values)
    return sq


def _success_share_stats(
    shaped: _Shaped,
    blocks: RowBlocks,
    success: torch.Tensor,
    seg: torch.Tensor,
    table: torch.Tensor | None,
    uniform: torch.Tensor | None,
    row_factor: torch.Tensor | None,
) -> torch.Tensor:
    """Return float64 (Σ, Σ², max) of the success tokens' shares (0 elsewhere), for diagnostics."""
    batch = success.shape[0]
    row_sum = torch.zeros(batch, dtype=torch.float64, device=success.device)
    row_sq, row_max = row_sum.clone(), row_sum.clone()
    for block in blocks:
        mask = blocks.mask(block)
        share = blocks.scratch(block, 2)
        shaped.rows_(share, mask, block, blocks.scratch(block, 0))
        share = _apply_shares_(share, mask, block, blocks, seg, table, uniform, row_factor)
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
