"""Paper B, sequence level: GRPO-S rewards, advantages and the sequence-ratio surrogate.

"GTPO and GRPO-S: Token and Sequence-Level Reward Shaping with Policy Entropy",
arXiv:2508.04349, Eq. (S31)-(S38), v6 App. B Eq. 40/46 and App. C for the later forms
(labels and readings: docs/spec.md B.7). Entropy terms are detached constants.

Notation: B responses, T response length, K groups; n = |O+|, m = |O−| in a group.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import torch

from gtpo_verl.algorithms.choices import (  # noqa: F401  (the vocabularies, re-exported)
    NEGATIVE_SHARES,
    RATIO_MEANS,
    SEQUENCE_ENTROPY_MEANS,
    SEQUENCE_VARIANTS,
    SUCCESS_SHARES,
)
from gtpo_verl.algorithms.groups import group_sum, row_dot
from gtpo_verl.algorithms.blocks import masked_rows
from gtpo_verl.algorithms.normalization import zscore_by_class_

# Same stabiliser as verl's vanilla loss: |log π_θ − log π_old| is clamped before exp.
LOG_RATIO_CLAMP = 20.0


class SequenceShaping(NamedTuple):
    """Token advantages ``(B, T)`` (Â_i broadcast), the ``(B,)`` Â_i, and per-row facts."""

    advantages: torch.Tensor
    sequence_advantages: torch.Tensor
    success: torch.Tensor
    mean_entropy: torch.Tensor  # Ĥ_i
    success_share: torch.Tensor  # Ĥ_i / mean_{k∈O+} Ĥ_k of the bonus (S31) on O+, 0 elsewhere


def share_of_set(
    values: torch.Tensor,
    members: torch.Tensor,
    group_ids: torch.Tensor,
    num_groups: int,
    *,
    mean: str = "arithmetic",
    epsilon: float = 1e-6,
) -> torch.Tensor:
    """Return ``x_i / mean_{k in set(i)} x_k`` for members, 0 for the rest. Shape ``(B,)``.

    ``arithmetic``: x_i / Σ_k x_k · |set| (Eq. S31, S36). ``geometric``: x_i / (Π_k x_k)^{1/|set|}
    (App. C), computed in log space on x + ε. A set whose values sum to 0 gives shares of 1.
    """
    dtype = values.dtype
    member_f = members.to(dtype)
    sizes = group_sum(member_f, group_ids, num_groups)
    if mean == "arithmetic":
        totals = group_sum(values * member_f, group_ids, num_groups)
        set_mean = totals / sizes.clamp_min(1)
        safe = set_mean > 0
        share = torch.where(safe[group_ids], values / torch.where(safe, set_mean, 1.0)[group_ids], 1.0)
    else:
        log_totals = group_sum(torch.log(values + epsilon) * member_f, group_ids, num_groups)
        geo = torch.exp(log_totals / sizes.clamp_min(1))
        share = values / geo[group_ids]
    return share * member_f


def grpo_s_advantage(
    response_mask: torch.Tensor,
    sequence_scores: torch.Tensor,
    group_ids: torch.Tensor,
    num_groups: int,
    *,
    entropy: torch.Tensor,
    beta1: float,
    beta2: float,
    success_threshold: float = 0.0,
    negative_shaping: bool = False,
    variant: str = "base",
    negative_share: str = "arithmetic",
    success_share: str = "arithmetic",
    sequence_entropy: str = "arithmetic",
    adv_norm: str = "two_zero_filled",
    uniform_outcome_groups: str = "keep",
    std_unbiased: bool = True,
    epsilon: float = 1e-6,
    empty: Callable[..., torch.Tensor] = torch.empty,
) -> SequenceShaping:
    """Return GRPO-S advantages: mean-entropy-shaped sequence rewards, z-scored per group.

    Implements Eq. (S31)-(S32), (S35) and, with ``negative_shaping``, (S36)-(S37),
    arXiv:2508.04349; ``variant="unified_v6"`` is App. B Eq. 40 with the App. C failure form::

        Ĥ_i  = (1/|o_i|) Σ_t H_{i,t}                                        (S32)
        r̂_i  = β1 + β2 · Ĥ_i / Σ_{k∈O+} Ĥ_k · n          i ∈ O+            (S31)
        r̂_j  = 0 (base) | −β1 (unified_v6)               j ∈ O−
        r⁻_j = −(1/Ĥ_j) / Σ_{k∈O−}(1/Ĥ_k) · m            (S36; v6: −β1 − β2·share)
        Â_i  = (r̂_i − mean{r̂_k}_{k≤G}) / std{r̂_k}_{k≤G}                    (S35, S37)

    ``negative_share="geometric"`` divides the failures' inverse entropies by their geometric
    mean instead, (1/Ĥ_j) / (Π_{k∈O−} 1/Ĥ_k)^{1/m} (App. C; no m factor);
    ``success_share="geometric"`` is the success twin, Ĥ_i / (Π_{k∈O+} (Ĥ_k + ε))^{1/n}.
    ``sequence_entropy="geometric"`` takes Ĥ_i = exp((1/|o_i|) Σ_t log(H_{i,t} + ε)) instead
    of the arithmetic mean (S32). Entropies below 0 (rounding) are taken as 0. With a
    shaped failure reward, ``adv_norm`` picks the normalisation sets (``normalization.py``):
    ``two_zero_filled`` gives O+ the Â of (S35) and O− the A⁻ of (S37), as (S38) uses them;
    ``single_combined`` is App. B Eq. 46.

    Args:
        response_mask: ``(B, T)``; sequence_scores: ``(B,)``, O+ = ``score > success_threshold``;
        group_ids: ``(B,)`` int64 in [0, K). Responses without valid tokens (V1 padding
        rows) are no group members and get 0.
        entropy: ``(B, T)`` old-policy token entropy.
        empty: allocates the ``(B, T)`` output, with ``torch.empty``'s signature (the plugin
            passes its huge-page allocator, ``plugin/memory.py``); a call option, not config.

    Returns:
        ``SequenceShaping``; ``advantages`` is Â_i on every valid token of response i.
    """
    dtype = torch.promote_types(entropy.dtype, torch.float32)
    device = response_mask.device
    group_ids = group_ids.to(device)
    geometric_entropy = sequence_entropy == "geometric"
    # one blocked pass: the float mask goes straight into the output (scaled by Â_i at the end)
    rows = masked_rows(response_mask, dtype, entropy=entropy, log_epsilon=epsilon if geometric_entropy else None,
                       empty=empty)
    out, counts, entropy_sums = rows.out, rows.counts, rows.entropy_sums
    member = counts > 0
    success = (sequence_scores.to(device) > success_threshold) & member
    fail = ~success & member

    mean_entropy = entropy_sums / counts.clamp_min(1)  # Ĥ_i, Eq. (S32) (or its log for the geometric mean)
    if geometric_entropy:
        mean_entropy = torch.where(member, torch.exp(mean_entropy), 0.0)

    share = share_of_set(mean_entropy, success, group_ids, num_groups, mean=success_share, epsilon=epsilon)
    reward = beta1 + beta2 * share
    reward = torch.where(success, reward, 0.0)
    negative_branch = negative_shaping or variant == "unified_v6"
    if variant == "unified_v6":
        reward = torch.where(fail, -beta1, reward)
    if negative_shaping:
        inverse_share = share_of_set(
            1.0 / (mean_entropy + epsilon), fail, group_ids, num_groups, mean=negative_share, epsilon=0.0
        )
        reward = reward - (beta2 if variant == "unified_v6" else 1.0) * inverse_share

    keep_rows = None
    if uniform_outcome_groups == "zero_adv":
        successes = group_sum(success.to(torch.int64), group_ids, num_groups)
        members = group_sum(member.to(torch.int64), group_ids, num_groups)
        keep_rows = ((successes > 0) & (successes < members))[group_ids]
    seq_adv = reward.unsqueeze(-1).clone()
    zscore_by_class_(
        seq_adv,
        member.to(dtype).unsqueeze(-1),
        member.to(dtype),
        success,
        group_ids,
        num_groups,
        mode=adv_norm if negative_branch else "single_combined",
        unbiased=std_unbiased,
        epsilon=epsilon,
        keep_rows=keep_rows,
    )
    seq_adv = seq_adv.squeeze(-1)
    return SequenceShaping(
        advantages=out.mul_(seq_adv.unsqueeze(-1)),  # mask · Â_i
        sequence_advantages=seq_adv,
        success=success,
        mean_entropy=mean_entropy,
        success_share=share,
    )


def sequence_importance_ratio(
    log_prob: torch.Tensor, old_log_prob: torch.Tensor, response_mask: torch.Tensor, *, mean: str = "arithmetic"
) -> torch.Tensor:
    """Return ŵ_i ``(B,)``, the sequence importance ratio of Eq. (S33).

    ``arithmetic`` (paper): ŵ_i = (1/|o_i|) Σ_t π_θ/π_old, whose gradient is
    (1/|o_i|) Σ_t w_{i,t} ∇log π_θ. ``geometric``: GSPO's exp((1/|o_i|) Σ_t log(π_θ/π_old)).
    Rows without valid tokens get ŵ = 1.
    """
    mask = response_mask.to(log_prob.dtype)
    return sequence_ratio_from_log_ratio_(log_prob - old_log_prob, mask, mask.sum(-1), mean=mean)


def sequence_ratio_from_log_ratio_(
    log_ratio: torch.Tensor, mask: torch.Tensor, counts: torch.Tensor, *, mean: str = "arithmetic"
) -> torch.Tensor:
    """``sequence_importance_ratio`` from log π_θ − log π_old ``(B, T)``, which it overwrites.

    The clamp and exp run in place on ``log_ratio`` (autograd allows it: exp's backward needs
    only its result), and the masked row sums are ``bmm`` row dots: no ``(B, T)`` temporary.
    ``mask`` is float in ``log_ratio``'s dtype; ``counts`` its row sums.
    """
    log_ratio = log_ratio.clamp_(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    if mean == "arithmetic":
        total = row_dot(log_ratio.exp_(), mask)
        return torch.where(counts > 0, total / counts.clamp_min(1), torch.ones_like(total))
    return torch.exp(row_dot(log_ratio, mask) / counts.clamp_min(1))


def clipped_sequence_surrogate(
    sequence_ratio: torch.Tensor, sequence_advantage: torch.Tensor, *, clip_low: float, clip_high: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return the per-sequence loss ``−min(ŵÂ, clip(ŵ, 1−ε_low, 1+ε_high)Â)`` and a clipped flag.

    Eq. (S34)/(S38): the clip acts on the whole sequence; a sequence clipped on its active side
    gets no gradient. NOTE: no dual clip (the paper has none; verl's ``clip_ratio_c`` is unused).
    """
    unclipped = -sequence_advantage * sequence_ratio
    clipped = -sequence_advantage * torch.clamp(sequence_ratio, 1.0 - clip_low, 1.0 + clip_high)
    return torch.maximum(unclipped, clipped), clipped > unclipped


class SequenceLoss(NamedTuple):
    """Per-sequence GRPO-S loss terms ``(B,)`` and the detached statistics the metrics report."""

    row_loss: torch.Tensor  # L_i · (mean rollout IS weight of row i, if given)
    counts: torch.Tensor  # |o_i|, valid tokens per row (the loss mask of the (B, 1) aggregation)
    sequence_ratio: torch.Tensor  # ŵ_i
    sequence_advantage: torch.Tensor  # Â_i
    clipped: torch.Tensor  # bool, the clip is active
    ppo_kl: torch.Tensor  # scalar, token mean of log π_old − log π_θ over valid tokens


def grpo_s_sequence_loss(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    clip_low: float,
    clip_high: float,
    ratio_mean: str = "arithmetic",
    rollout_is_weights: torch.Tensor | None = None,
) -> SequenceLoss:
    """The GRPO-S surrogate per sequence, Eq. (S33)-(S34) / (S38), before aggregation over the batch.

    ``old_log_prob``, ``log_prob``, ``advantages`` (Â_i on each token of response i),
    ``response_mask``: ``(B, T)``. L_i = −min(ŵ_i Â_i, clip(ŵ_i, 1 − ε_low, 1 + ε_high) Â_i).
    The ``grpo_s`` policy loss aggregates ``row_loss`` with verl's ``agg_loss`` as a
    ``(B, 1)`` loss with ``counts`` as mask; this function needs torch only.
    """
    mask = response_mask.to(log_prob.dtype)
    counts = mask.sum(-1)
    # log π_θ − log π_old once: its masked mean (unclamped, detached) is the ppo_kl metric,
    # then the same buffer is clamped and exponentiated in place for ŵ_i
    log_ratio = log_prob - old_log_prob
    with torch.no_grad():
        total_tokens = counts.sum()
        ppo_kl = -torch.dot(log_ratio.detach().reshape(-1), mask.reshape(-1)) / total_tokens.clamp_min(1)
    seq_ratio = sequence_ratio_from_log_ratio_(log_ratio, mask, counts, mean=ratio_mean)
    seq_adv = row_dot(advantages.detach().to(mask.dtype), mask) / counts.clamp_min(1)
    seq_loss, seq_clipped = clipped_sequence_surrogate(seq_ratio, seq_adv, clip_low=clip_low, clip_high=clip_high)
    if rollout_is_weights is None:
        row_loss = seq_loss
    else:
        weight = row_dot(rollout_is_weights.to(mask.dtype), mask)
        row_loss = seq_loss * torch.where(counts > 0, weight / counts.clamp_min(1), torch.zeros_like(weight))
    return SequenceLoss(row_loss, counts, seq_ratio, seq_adv, seq_clipped, ppo_kl)

