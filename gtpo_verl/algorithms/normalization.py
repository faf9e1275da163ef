"""Group-relative z-scores of per-token or per-sequence rewards (GRPO's normalisation).

Paper B normalises shaped rewards "as in GRPO", over sets that its text leaves open; the
readings are in docs/spec.md B.6. The three modes below are the `adv_norm` switch:

- ``single_combined``: one z-score over every valid token of the group (Eq. S21; v6 App. B Eq. 46).
- ``two_zero_filled``: successes and failures each get a z-score computed over *all* tokens
  of the group, the other class's tokens counted as 0 (Eq. S28-S29: R⁻ runs over 1 ≤ k ≤ G).
- ``per_class``: each class is z-scored over its own tokens only (third-party reading of
  v6 Eq. 6; cancels α1, α2 and the outcome sign; kept for comparison, not recommended).

``zscore_by_class_`` does the whole z-score on a ``(B, T)`` tensor. Its three steps are also
public (``class_sets``, ``set_means``, ``set_row_scale``) so that ``gtpo_token_advantage`` can
take the set sums from its column tables and fuse the centring into its own pass.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from gtpo_verl.algorithms.choices import ADV_NORM_MODES  # noqa: F401  (re-exported)
from gtpo_verl.algorithms.groups import group_sum, inverse_spread, row_dot, sample_variance


class ClassSets(NamedTuple):
    """The (group, class) sets of one z-score. Counts are float64."""

    set_ids: torch.Tensor  # (B,) int64, group * num_classes + class
    num_sets: int
    two_classes: bool
    zero_filled: bool
    set_tokens: torch.Tensor  # (S,) valid tokens of the set's own rows
    denominators: torch.Tensor  # (S,) tokens the set's mean and std run over


def class_sets(
    row_counts: torch.Tensor, row_class: torch.Tensor, group_ids: torch.Tensor, num_groups: int, *, mode: str
) -> ClassSets:
    """Return the sets of ``mode`` (see the module docstring) and their token counts."""
    if mode not in ADV_NORM_MODES:
        raise ValueError(f"adv_norm={mode!r} is not one of {ADV_NORM_MODES}")
    two_classes = mode != "single_combined"
    zero_filled = mode != "per_class"
    cls = row_class.to(torch.int64) if two_classes else torch.zeros_like(group_ids)
    num_cls = 2 if two_classes else 1
    set_ids = group_ids * num_cls + cls
    num_sets = num_groups * num_cls

    counts = row_counts.to(torch.float64)
    set_tokens = group_sum(counts, set_ids, num_sets)
    if zero_filled:
        # every set spans all tokens of its group; the other class contributes zeros
        denominators = group_sum(counts, group_ids, num_groups).repeat_interleave(num_cls)
    else:
        denominators = set_tokens
    return ClassSets(set_ids, num_sets, two_classes, zero_filled, set_tokens, denominators)


def set_means(set_sums: torch.Tensor, sets: ClassSets) -> torch.Tensor:
    """Return ``(S,)`` float64 set means from the sets' value sums (0 for sets without tokens)."""
    denominators = sets.denominators
    return torch.where(denominators > 0, set_sums / denominators.clamp_min(1), torch.zeros_like(set_sums))


def set_row_scale(
    row_sq_dev: torch.Tensor,
    set_mean: torch.Tensor,
    sets: ClassSets,
    *,
    unbiased: bool,
    epsilon: float,
    keep_rows: torch.Tensor | None = None,
) -> torch.Tensor:
    """Return ``(B,)`` float64 ``1 / (std + ε)`` of each row's set (0 for no spread or dropped rows).

    ``row_sq_dev``: ``(B,)`` sum over the row's valid tokens of (value − set mean)².
    """
    sq_dev = group_sum(row_sq_dev.to(torch.float64), sets.set_ids, sets.num_sets)
    if sets.zero_filled and sets.two_classes:
        outside_tokens = sets.denominators - sets.set_tokens  # tokens of the other class, counted as 0
        sq_dev = sq_dev + outside_tokens * set_mean.square()
    var = sample_variance(sq_dev, sets.denominators, unbiased)
    row_scale = inverse_spread(set_mean, var, epsilon)[sets.set_ids]
    if keep_rows is not None:
        row_scale = row_scale * keep_rows.to(torch.float64)
    return row_scale


def zscore_by_class_(
    values: torch.Tensor,
    mask: torch.Tensor,
    row_counts: torch.Tensor,
    row_class: torch.Tensor,
    group_ids: torch.Tensor,
    num_groups: int,
    *,
    mode: str,
    unbiased: bool,
    epsilon: float,
    keep_rows: torch.Tensor | None = None,
) -> torch.Tensor:
    """Return ``values`` z-scored in place within each (group, class) set.

    Args:
        values: ``(B, T)`` float rewards, 0 outside ``mask``; overwritten with the z-scores.
            Sequence-level callers pass ``(B, 1)``.
        mask: ``(B, T)`` float 0/1 validity, same dtype as ``values``.
        row_counts: ``(B,)`` valid tokens per row (``mask.sum(-1)``).
        row_class: ``(B,)`` bool, True for the success class O+, False for O−.
        group_ids: ``(B,)`` int64 group of each row; ``num_groups`` = K.
        mode: one of ``ADV_NORM_MODES``.
        unbiased: sample (n−1) std as verl's GRPO, else population std.
        keep_rows: optional ``(B,)`` bool; rows where it is False get 0.

    Two passes keep float32 exact enough: the group means come from row sums, then the
    squared deviations are summed after centring (no E[x²] − mean² cancellation).
    """
    sets = class_sets(row_counts, row_class, group_ids, num_groups, mode=mode)
    row_sums = values.sum(-1).to(torch.float64)
    if not torch.isfinite(row_sums).all():
        raise ValueError("non-finite value at a valid response position (NaN/Inf entropy or reward?)")
    set_mean = set_means(group_sum(row_sums, sets.set_ids, sets.num_sets), sets)

    row_mean = set_mean[sets.set_ids].to(values.dtype)
    values.addcmul_(mask, row_mean.unsqueeze(-1), value=-1.0)

    row_scale = set_row_scale(
        row_dot(values, values), set_mean, sets, unbiased=unbiased, epsilon=epsilon, keep_rows=keep_rows
    )
    return values.mul_(row_scale.to(values.dtype).unsqueeze(-1))
