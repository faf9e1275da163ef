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

from gtpo_verl.algorithms.groups import group_sum, masked_copy, row_dot
from gtpo_verl.algorithms.normalization import ADV_NORM_MODES, zscore_by_class_

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


def _column_share_(
    values: torch.Tensor,
    mask: torch.Tensor,
    member_groups: torch.Tensor,
    num_groups: int,
) -> torch.Tensor:
    """Scale ``values`` in place to ``x_{i,t} / mean_{k in set_t} x_{k,t}`` (column share).

    ``member_groups`` maps rows of the set to their group and every other row to the dummy
    group K, whose share is 0. This is H_{i,t} / Σ_k H_{k,t} · d_t of Eq. (S18) and its inverse
    twin of Eq. (S26). Where a column sums to 0 (all entropies 0) the share is 1, the uniform
    limit that keeps Σ_i share = d_t (Remark 2.1 reading, ALGORITHMS.md §B.6).
    """
    col_sum = group_sum(values, member_groups, num_groups + 1)
    col_count = group_sum(mask, member_groups, num_groups + 1)
    positive = col_sum > 0
    scale = torch.where(positive, col_count / torch.where(positive, col_sum, torch.ones_like(col_sum)), 0.0)
    uniform = (~positive & (col_count > 0)).to(values.dtype)
    scale[num_groups] = 0.0
    uniform[num_groups] = 0.0
    gathered = torch.index_select(scale, 0, member_groups)
    values.mul_(gathered)
    if bool(uniform.any()):  # only columns whose entropies all vanish need the second table
        torch.index_select(uniform, 0, member_groups, out=gathered)
        values.addcmul_(gathered, mask)
    return values


def _row_geometric_mean(values: torch.Tensor, mask: torch.Tensor, counts: torch.Tensor, epsilon: float) -> torch.Tensor:
    """Return ``(B,)`` exp(mean_t log(x + ε)) over each row's valid tokens (1 for empty rows)."""
    logs = torch.add(values, epsilon).log_()
    return torch.exp(row_dot(logs, mask) / counts.clamp_min(1))


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
    """
    dtype = torch.promote_types(entropy.dtype, torch.float32)
    mask = response_mask.to(dtype)
    counts = mask.sum(-1)
    success = sequence_scores > success_threshold
    fail = ~success

    # α2 · share on success tokens, 0 elsewhere (shares are detached constants)
    shaped, entropy_sums = masked_copy(entropy.detach().to(dtype), mask, "entropy")
    mean_entropy = entropy_sums / counts.clamp_min(1)
    negative_branch = negative_shaping or variant == "unified_v6"
    inverse_entropy = None
    if negative_shaping:
        inverse_entropy = torch.add(shaped, epsilon).reciprocal_().mul_(mask)
    if entropy_share == "column":
        _column_share_(shaped, mask, torch.where(success, group_ids, num_groups), num_groups)
    else:
        # row geometric mean GM_i = (Π_t (H_{i,t} + ε))^{1/|o_i|}; also GM_i(1/H) = 1/GM_i
        geo = _row_geometric_mean(shaped, mask, counts, epsilon)
        shaped.mul_((success.to(dtype) / geo).unsqueeze(-1))
    share_stats = None
    if return_share_stats:  # three reductions, for diagnostics only
        share_stats = torch.stack([shaped.sum(), row_dot(shaped, shaped).sum(), shaped.max()]).to(torch.float64)
    shaped.mul_(alpha2)

    row_reward = torch.where(success, alpha1, 0.0).to(dtype)
    if variant == "unified_v6":
        row_reward = torch.where(success, alpha1, -alpha1).to(dtype)
    if variant == "clipped_len":
        shaped.addcmul_(mask, row_reward.unsqueeze(-1))
        shaped.clamp_(1.0, alpha1 * (1.0 + 1.0 / kappa)).mul_(mask).mul_(success.to(dtype).unsqueeze(-1))
        row_reward = overlong_length_penalty(
            counts,
            buffer_len=overlong_buffer_len,
            max_len=max_response_len,
            denominator=length_penalty_denominator,
        ).to(dtype)
    if inverse_entropy is not None:
        # failure shaping: −(inverse share), scaled by α2 in the v6 form (S26 / v6 Eq. 5)
        if entropy_share == "column":
            _column_share_(inverse_entropy, mask, torch.where(fail, group_ids, num_groups), num_groups)
        else:
            inverse_entropy.mul_((fail.to(dtype) * geo).unsqueeze(-1))  # (1/H) / GM(1/H), Eq. (S27)
        shaped.add_(inverse_entropy, alpha=-(alpha2 if variant == "unified_v6" else 1.0))
        del inverse_entropy
    shaped.addcmul_(mask, row_reward.unsqueeze(-1))

    keep_rows = None
    if uniform_outcome_groups == "zero_adv":
        member = counts > 0  # responses without tokens (V1 padding rows) are no group members
        successes = group_sum((success & member).to(torch.int64), group_ids, num_groups)
        sizes = group_sum(member.to(torch.int64), group_ids, num_groups)
        mixed = (successes > 0) & (successes < sizes)
        keep_rows = mixed[group_ids]
    zscore_by_class_(
        shaped,
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
    return TokenShaping(advantages=shaped, success=success, mean_entropy=mean_entropy, share_stats=share_stats)


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
