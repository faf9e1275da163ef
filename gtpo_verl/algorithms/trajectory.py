"""Paper A: GTPO (trajectory) conflict-aware token weights, entropy filter and shaping.

"GTPO: Trajectory-Based Policy Optimization in Large Language Models", arXiv:2508.03772
(v5: "GTPO: Stabilizing Group Relative Policy Optimization via Gradient and Entropy
Control"). Equation labels (S11)-(S17) and the official code (github.com/winstonsmith1897/GTPO,
gtpo/gtpo_training.py, at the commit docs/spec.md pins) are those of docs/spec.md, Paper A;
"code L…" cites a line of that file.

Notation: B responses, T response length, K groups, G responses per group. Token ids
``responses[i, t]``; position t is valid where ``response_mask`` is 1. A_i is the raw group
advantage; P = {A > 0}, N = {A < 0}; Opp(i) is the other sign's set. Responses with A = 0
take no part in conflicts.
"""

from __future__ import annotations

import math
from typing import Callable, NamedTuple

import torch

from gtpo_verl.algorithms.choices import (  # noqa: F401  (the vocabularies, re-exported)
    DIVISOR_MODES,
    ENTROPY_FILTER_SCOPES,
    ENTROPY_REG_MODES,
    OVERLAP_MODES,
)
from gtpo_verl.algorithms.groups import group_sum, members_matrix, sample_variance
from gtpo_verl.algorithms.blocks import masked_rows

LN2 = math.log(2.0)
# A response is tied with its group mean (inactive, A = 0, as in an all-equal group) when
# |r_i − mean| ≤ ADVANTAGE_TIE_TOLERANCE·(1 + mean|r|): absolute for rewards of order 1 or
# below, relative for large ones (docs/spec.md A.1); it absorbs float rounding of exact ties.
ADVANTAGE_TIE_TOLERANCE = 1e-6
# Positions compared in the first pass of the conflict-run search; doubles while runs continue.
# Small, because a pass costs little and most shared prefixes/suffixes are short.
_FIRST_WINDOW = 8
# Upper bound on pairs·W booleans materialised by one pass of the run search.
_MAX_COMPARISONS = 1 << 24


class TrajectoryShaping(NamedTuple):
    """Token advantages ``(B, T)`` and the per-response quantities behind them (all ``(B,)``)."""

    advantages: torch.Tensor
    raw_advantage: torch.Tensor  # A_i (before entropy shaping)
    shaped_advantage: torch.Tensor  # Ã_i = δ_i (A_i − γ⟨H⟩_i)
    mean_entropy: torch.Tensor  # ⟨H⟩_i
    keep: torch.Tensor  # δ_i, bool
    forward_run: torch.Tensor  # k_f(i)
    backward_run: torch.Tensor  # k_b(i)
    conflict_divisor: torch.Tensor  # n_conf(i) ≥ 1


def response_mean_entropy(response_mask: torch.Tensor, *, entropy: torch.Tensor) -> torch.Tensor:
    """⟨H⟩_i ``(B,)``, the mean old-policy entropy of each response's valid tokens (S16); 0 for an empty row.
    Positions off the mask are never read (whatever verl left there)."""
    valid = response_mask > 0
    return torch.where(valid, entropy, 0.0).sum(-1) / valid.sum(-1).clamp_min(1).to(entropy.dtype)


def initial_entropy(response_mask: torch.Tensor, *, entropy: torch.Tensor, rows: torch.Tensor | None = None) -> float:
    """⟨H⟩_ini: the mean of ⟨H⟩_i over the non-empty responses of the first batch (``rows`` selects the
    real ones), the quantity Paper A's gate (S16) and a δ scaled to the model compare with; 0 with none."""
    nonempty = response_mask.sum(-1) > 0
    keep = nonempty if rows is None else nonempty & rows.to(torch.bool)
    per_response = response_mean_entropy(response_mask, entropy=entropy)[keep]
    return float(per_response.mean()) if per_response.numel() else 0.0


def group_relative_advantage(
    scores: torch.Tensor,
    group_ids: torch.Tensor,
    num_groups: int,
    *,
    norm_by_std: bool = False,
    epsilon: float = 1e-6,
    members: torch.Tensor | None = None,
) -> torch.Tensor:
    """Return A_i = r_i − mean_group(r) ``(B,)`` (÷ (std + ε) if ``norm_by_std``), float64.

    Official code: no std division (code L1321 has it commented out); the paper text uses GRPO's
    Â_i. Exact ties with the group mean (within ``ADVANTAGE_TIE_TOLERANCE``) are set to 0,
    so an all-equal group is inactive whatever the float rounding. Rows outside ``members``
    (responses without valid tokens) are ignored and get 0.
    """
    scores = scores.to(torch.float64)
    member = torch.ones_like(scores, dtype=torch.bool) if members is None else members
    member_f = member.to(torch.float64)
    sizes = group_sum(member_f, group_ids, num_groups)
    mean = group_sum(scores * member_f, group_ids, num_groups) / sizes.clamp_min(1)
    centred = (scores - mean[group_ids]) * member_f
    scale = group_sum(scores.abs() * member_f, group_ids, num_groups) / sizes.clamp_min(1)
    tie = centred.abs() <= ADVANTAGE_TIE_TOLERANCE * (1.0 + scale[group_ids])
    centred = torch.where(tie, torch.zeros_like(centred), centred)
    if norm_by_std:
        var = sample_variance(group_sum(centred.square(), group_ids, num_groups), sizes, unbiased=True)
        centred = centred / (var.sqrt() + epsilon)[group_ids]
    return centred


def opposite_sign_pairs(
    sign: torch.Tensor, group_ids: torch.Tensor, num_groups: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return ``(pos_rows, neg_rows)``: every pair of rows of one group with A > 0 and A < 0.

    Only such pairs can make a conflict, so the run search compares these Σ_g |P_g|·|N_g|
    ≤ K·G²/4 pairs instead of all K·G² ordered pairs. Built from ``members_matrix``.
    """
    members = members_matrix(group_ids, num_groups)  # (K, G_max), -1 pads
    slot_sign = torch.where(members >= 0, sign[members.clamp_min(0)], torch.zeros_like(sign[:1]))
    pair = (slot_sign.unsqueeze(2) > 0) & (slot_sign.unsqueeze(1) < 0)  # (K, G_i, G_j)
    group, i, j = torch.nonzero(pair, as_tuple=True)
    return members[group, i], members[group, j]


def _runs_in_window(
    ids: torch.Tensor, valid: torch.Tensor, pos_rows: torch.Tensor, neg_rows: torch.Tensor
) -> torch.Tensor:
    """Return ``(B,)`` length of the leading run of conflicts inside one window of positions.

    ``ids``/``valid`` (bool) are ``(B, W)`` (already aligned: forward or right-aligned positions).
    Position w of row i conflicts iff some j of the same group with sign(A_j) = −sign(A_i) ≠ 0
    is valid at w with the same token (C^f / C^b, docs/spec.md A.3). The partner may differ
    from position to position. Cost: one comparison of W tokens per opposite-sign pair.
    """
    batch, window = ids.shape
    # token ids equal and both valid; invalid positions get distinct sentinels (−1 vs −2)
    ids = torch.where(valid, ids, -1)
    same = torch.index_select(ids, 0, pos_rows) == torch.where(valid, ids, -2).index_select(0, neg_rows)
    same = same.to(torch.float32)  # (pairs, W)
    # a position conflicts if any of the row's pairs matches there: count matches per row
    hits = torch.zeros(batch, window, dtype=torch.float32, device=ids.device)
    hits.index_add_(0, pos_rows, same).index_add_(0, neg_rows, same)
    return (hits > 0).to(torch.int32).cumprod(dim=-1).sum(dim=-1).to(torch.int64)


def leading_conflict_runs(
    valid: torch.Tensor,  # (B, T) response mask, any dtype (> 0 is valid)
    lengths: torch.Tensor,
    sign: torch.Tensor,
    group_ids: torch.Tensor,
    num_groups: int,
    *,
    responses: torch.Tensor,
    from_end: bool,
    first_window: int = _FIRST_WINDOW,
) -> torch.Tensor:
    """Return k_f(i) (``from_end=False``) or k_b(i) (``from_end=True``), ``(B,)`` int64.

    k_f = the largest k with C^f_{i,0..k−1} all 1; k_b the same on positions counted back
    from each response's own last valid token (right alignment, code L165, L196 cumprod).

    Runs are searched window by window (the first ``first_window`` positions, then doubling)
    and only while some run is still unbroken, comparing only opposite-sign pairs with an
    unbroken member: a shared prefix/suffix of length L costs about 2L token comparisons per
    pair; near-duplicate groups cost more but never more than ``_MAX_COMPARISONS`` booleans
    at once (not the official V·T bincount).
    """
    batch, width = responses.shape
    device = responses.device
    group_ids = group_ids.to(device)
    runs = torch.zeros(batch, dtype=torch.int64, device=device)
    active = (sign != 0) & (lengths > 0)
    if not bool(active.any()):
        return runs
    all_pos, all_neg = opposite_sign_pairs(sign, group_ids, num_groups)
    last = lengths - 1
    start, window = 0, first_window
    # rows whose run is unbroken so far; their pairs are compared in the next window
    open_rows = active
    while start < width and bool(open_rows.any()):
        searched = open_rows[all_pos] | open_rows[all_neg]
        pos_rows, neg_rows = all_pos[searched], all_neg[searched]
        window = max(1, min(window, width - start, _MAX_COMPARISONS // max(1, pos_rows.numel())))
        offsets = torch.arange(start, start + window, device=device)
        if from_end:
            cols = last.unsqueeze(1) - offsets.unsqueeze(0)  # (B, W), may be < 0
            in_range = cols >= 0
            cols = cols.clamp_min(0)
            win_ids = torch.gather(responses, 1, cols)
            win_valid = (torch.gather(valid, 1, cols) > 0) & in_range
        else:
            win_ids = responses[:, start : start + window]
            win_valid = (valid[:, start : start + window] > 0) & (offsets.unsqueeze(0) < lengths.unsqueeze(1))
        found = _runs_in_window(win_ids, win_valid, pos_rows, neg_rows)
        runs = torch.where(open_rows, runs + found, runs)
        open_rows = open_rows & (found == window)
        start += window
        window *= 2
    return runs


def conflict_divisor(
    forward_run: torch.Tensor, backward_run: torch.Tensor, lengths: torch.Tensor, *, mode: str
) -> torch.Tensor:
    """Return n_conf(i) ≥ 1 ``(B,)``, the per-response loss divisor of the official code.

    ``code``: max(1, max(k_f, k_b)), what code L227 computes (it ORs a forward-indexed
    mask with a reverse-indexed one; almost certainly a bug, kept for fidelity).
    ``union``: max(1, |F ∪ B|) = max(1, min(|o|, k_f + k_b)), the presumable intent.
    ``none``: 1, the paper text (no divisor). Inactive responses have runs 0, hence 1.
    """
    if mode == "code":
        n = torch.maximum(forward_run, backward_run)
    elif mode == "union":
        n = torch.minimum(lengths, forward_run + backward_run)
    else:
        n = torch.zeros_like(forward_run)
    return n.clamp_min(1)


def _scale_spans_(values: torch.Tensor, starts: torch.Tensor, spans: torch.Tensor, factors: torch.Tensor) -> None:
    """Multiply ``values[i, starts[i] : starts[i] + spans[i]]`` by ``factors[i]`` in place.

    Runs are short in practice, so only their positions are touched; if they cover a large
    part of the batch (collapsed, near-identical groups) one dense pass is cheaper.
    """
    total = int(spans.sum())
    if total == 0:
        return
    batch, width = values.shape
    if total * 8 < batch * width:
        rows = torch.repeat_interleave(torch.arange(batch, device=values.device), spans)
        first = torch.cumsum(spans, 0) - spans
        cols = torch.arange(total, device=values.device) - torch.repeat_interleave(first - starts, spans)
        values[rows, cols] *= factors[rows]
    else:
        positions = torch.arange(width, device=values.device).unsqueeze(0)
        inside = (positions >= starts.unsqueeze(1)) & (positions < (starts + spans).unsqueeze(1))
        values.mul_(torch.where(inside, factors.unsqueeze(1), torch.ones((), dtype=values.dtype, device=values.device)))


def conflict_token_weights(
    forward_run: torch.Tensor,
    backward_run: torch.Tensor,
    lengths: torch.Tensor,
    raw_advantage: torch.Tensor,
    width: int,
    *,
    conflict_weight: float = 2.0,
    overlap: str = "product",
) -> torch.Tensor:
    """Return λ_{i,t} ``(B, T)`` (1 outside the runs; not yet masked). Eq. (S12).

    On F_i = {0..k_f−1} and B_i = {|o_i|−k_b..|o_i|−1}: W (= 2) for A_i > 0, 0 for A_i < 0.
    ``product`` (code L166-215): λ = λ^f·λ^b, so the overlap of both runs of a positive
    response gets W² = 4. ``union`` (paper S12): λ ∈ {0, 1, W}.
    """
    weights = torch.ones(raw_advantage.shape[0], width, dtype=torch.float32, device=raw_advantage.device)
    apply_run_weights_(weights, forward_run, backward_run, lengths, raw_advantage, conflict_weight, overlap)
    return weights


def apply_run_weights_(
    values: torch.Tensor,
    forward_run: torch.Tensor,
    backward_run: torch.Tensor,
    lengths: torch.Tensor,
    raw_advantage: torch.Tensor,
    conflict_weight: float,
    overlap: str,
) -> torch.Tensor:
    """Multiply ``values`` ``(B, T)`` in place by λ of ``conflict_token_weights``."""
    factor = torch.where(raw_advantage > 0, conflict_weight, 0.0).to(values.dtype)
    zeros = torch.zeros_like(forward_run)
    _scale_spans_(values, zeros, forward_run, factor)
    if overlap == "product":
        _scale_spans_(values, lengths - backward_run, backward_run, factor)
    else:  # union: the backward run minus what the forward run already covered
        backward_only = torch.minimum(backward_run, (lengths - forward_run).clamp_min(0))
        _scale_spans_(values, lengths - backward_only, backward_only, factor)
    return values


def entropy_filter(
    mean_entropy: torch.Tensor,
    raw_advantage: torch.Tensor,
    *,
    threshold: float | None,
    scope: str = "all",
    initial_entropy: float | None = None,
) -> torch.Tensor:
    """Return δ_i ``(B,)`` bool, Eq. (S16).

    δ_i = 1[⟨H⟩_i ≤ threshold] (code L334, threshold 0.7; paper ln 2). ``scope="neg_only"``
    filters only responses with A_i < 0 (the "OnlyNeg" ablation). ``initial_entropy`` is
    ⟨H⟩_ini for the paper's gate: if ⟨H⟩_ini > threshold, δ ≡ 1. ``scope="none"`` or
    ``threshold=None``: no filter.
    """
    keep = torch.ones_like(mean_entropy, dtype=torch.bool)
    if scope == "none" or threshold is None or (initial_entropy is not None and initial_entropy > threshold):
        return keep
    keep = mean_entropy <= threshold
    if scope == "neg_only":
        keep = keep | (raw_advantage >= 0)
    return keep


def gtpo_traj_advantage(
    response_mask: torch.Tensor,
    sequence_scores: torch.Tensor,
    group_ids: torch.Tensor,
    num_groups: int,
    *,
    responses: torch.Tensor,
    entropy: torch.Tensor | None = None,
    gamma: float = 0.1,
    entropy_threshold: float | None = 0.7,
    conflict_weight: float = 2.0,
    overlap: str = "product",
    divisor: str = "code",
    norm_adv_by_std: bool = False,
    entropy_filter_scope: str = "all",
    initial_entropy: float | None = None,
    entropy_reg_mode: str = "advantage_offset",
    epsilon: float = 1e-6,
    empty: Callable[..., torch.Tensor] = torch.empty,
) -> TrajectoryShaping:
    """Return GTPO-trajectory token advantages Ã_i · λ_{i,t} / n_conf(i) on valid tokens.

    Implements the official objective (README), Eq. (S12), (S16), (S17), arXiv:2508.03772::

        J = (1/G) Σ_i δ_i (A_i − γ⟨H⟩_i) / |o_i| · Σ_t r_{i,t} λ_{i,t}   [/ n_conf(i), code]

    Baking λ ≥ 0 and 1/n_conf into the advantage is exact for a clipped (or ratio ≡ 1)
    surrogate; verl's ``seq-mean-token-mean`` then supplies (1/G) Σ_i 1/|o_i| Σ_t.

    Args:
        response_mask: ``(B, T)``; sequence_scores: ``(B,)`` r_i; group_ids ``(B,)`` in [0, K).
        responses: ``(B, T)`` int token ids.
        entropy: ``(B, T)`` old-policy entropy H_{i,t}; may be None only when ``gamma == 0``
            (or ``entropy_reg_mode="differentiable"``) and ``entropy_threshold is None``.
        entropy_reg_mode: ``advantage_offset`` (official: Ã = δ(A − γ⟨H⟩), a detached
            REINFORCE-style penalty) or ``differentiable`` (Ã = δA here; the actor adds the
            analytic −γ ∇H term, S17 read as a loss term).
        empty: allocates the ``(B, T)`` output, with ``torch.empty``'s signature (the plugin
            passes its huge-page allocator, ``plugin/memory.py``); a call option, not config.

    NOTE: λ signs come from the raw A_i, even where Ã_i flips sign (0 < A_i < γ⟨H⟩_i), as in
    the official code. All-equal groups are not skipped: λ ≡ 1, Ã = −δγ⟨H⟩ (golden A4).
    """
    dtype = torch.float32 if entropy is None else torch.promote_types(entropy.dtype, torch.float32)
    device = response_mask.device
    group_ids = group_ids.to(device)
    sequence_scores = sequence_scores.to(device)
    batch, width = response_mask.shape
    # one blocked pass: the float mask goes straight into the output (scaled by the per-response
    # coefficient at the end); the backward run is anchored at each row's last valid token
    rows = masked_rows(response_mask, dtype, entropy=entropy, last_position=True, empty=empty)
    advantages, counts, entropy_sums, last_position = rows.out, rows.counts, rows.entropy_sums, rows.last_position
    lengths = last_position.to(torch.int64) if width else counts.long()
    member = counts > 0

    raw = group_relative_advantage(
        sequence_scores, group_ids, num_groups, norm_by_std=norm_adv_by_std, epsilon=epsilon, members=member
    )
    if entropy is None:
        mean_entropy = torch.zeros_like(raw)
    else:
        mean_entropy = (entropy_sums / counts.clamp_min(1)).to(torch.float64)
    keep = entropy_filter(
        mean_entropy, raw, threshold=entropy_threshold, scope=entropy_filter_scope, initial_entropy=initial_entropy
    )
    offset = gamma * mean_entropy if entropy_reg_mode == "advantage_offset" else torch.zeros_like(raw)
    shaped = torch.where(keep & member, raw - offset, torch.zeros_like(raw))

    sign = torch.sign(raw).to(torch.int8)
    ids = responses.to(device)
    k_f = leading_conflict_runs(response_mask, lengths, sign, group_ids, num_groups, responses=ids, from_end=False)
    k_b = leading_conflict_runs(response_mask, lengths, sign, group_ids, num_groups, responses=ids, from_end=True)
    n_conf = conflict_divisor(k_f, k_b, lengths, mode=divisor)

    advantages.mul_((shaped / n_conf).to(dtype).unsqueeze(-1))  # mask · Ã_i / n_conf(i)
    apply_run_weights_(advantages, k_f, k_b, lengths, raw, conflict_weight, overlap)
    return TrajectoryShaping(
        advantages=advantages,
        raw_advantage=raw,
        shaped_advantage=shaped,
        mean_entropy=mean_entropy,
        keep=keep,
        forward_run=k_f,
        backward_run=k_b,
        conflict_divisor=n_conf,
    )
