"""Paper B, token level: GTPO entropy-shaped token rewards and advantages.

"GTPO and GRPO-S: Token and Sequence-Level Reward Shaping with Policy Entropy",
arXiv:2508.04349. Equation labels (S18)-(S30) and the v6 forms are those of docs/spec.md
(sections B.2-B.6). Every entropy term is a detached constant (Remark 2.5).

Notation: B responses, T response length, K prompt groups, G responses per group.
O+ = successful responses, O− = failed ones; O+_t = successes still generating at t,
d_t = |O+_t|, h_t = |O−_t| (a token "exists" at t where ``response_mask`` is 1).

The module has two layers:

- the **equation layer**: one small pure function per formula (column share, geometric
  share, inverse entropy, clipped bonus, length penalty, v6 outcome reward);
- ``gtpo_token_advantage_reference``: the readable twin, the equations applied to whole
  ``(B, T)`` tensors one after the other (as verl's ``compute_grpo_outcome_advantage`` is to
  its vectorised form).

The estimator runs the fused form of the same equations, ``kernels/gtpo_token.py``
(``gtpo_token_advantage``); tests hold it to the twin.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import torch

from gtpo_verl.algorithms.choices import (  # noqa: F401  (the vocabularies, re-exported)
    ENTROPY_SHARES,
    LENGTH_DENOMINATORS,
    TOKEN_VARIANTS,
    UNIFORM_GROUP_MODES,
)
from gtpo_verl.algorithms.groups import group_sum
from gtpo_verl.algorithms.normalization import ADV_NORM_MODES, zscore_by_class_


class TokenShaping(NamedTuple):
    """Advantages ``(B, T)`` plus per-row facts the diagnostics reuse."""

    advantages: torch.Tensor
    success: torch.Tensor  # (B,) bool, O+ membership
    mean_entropy: torch.Tensor  # (B,) masked mean old-policy entropy
    shares: object | None = None  # the fused call's share tables (not a tensor): ``kernels.gtpo_token.success_share_rows``


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


def inverse_entropy(*, entropy: torch.Tensor, epsilon: float) -> torch.Tensor:
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
    gives 1 per member). The fused form uses it to get the set sums of the shaped rewards from
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
            "kernels/gtpo_token.py rely on it; update the fused form with the share formula."
        )


# ----------------------------------------------------------------------------- readable twin


def gtpo_token_advantage_reference(
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
) -> torch.Tensor:
    """The readable twin of the fused ``gtpo_token_advantage``: same arguments, same advantages ``(B, T)``.

    Whole-tensor steps in the paper's order (several ``(B, T)`` temporaries; for tests and
    reading, not for training). ``empty`` allocates the returned tensor, as in the fused form.
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

    success_coef, failure_coef = bonus_coefficients(alpha2=alpha2, negative_shaping=negative_shaping, variant=variant)
    if entropy_share == "column":
        share_success = column_share(entropy, on_success, group_ids, num_groups)  # (S18)
    else:
        share_success = geometric_share(entropy, log_entropy, on_success)  # (S20)
    bonus = success_coef * share_success
    if negative_shaping:
        inverse = inverse_entropy(entropy=entropy, epsilon=epsilon) * mask
        if entropy_share == "column":
            share_failure = column_share(inverse, on_failure, group_ids, num_groups)  # (S26)
        else:
            share_failure = geometric_share(inverse, -log_entropy, on_failure)  # (S27)
        bonus = bonus + failure_coef * share_failure

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
        empty(rewards.shape, dtype=dtype, device=device).copy_(rewards),  # z-scored in place: the returned tensor
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
    "gtpo_token_advantage_reference",
    "inverse_entropy",
    "outcome_reward",
    "overlong_length_penalty",
    "share_conservation_totals",
]
