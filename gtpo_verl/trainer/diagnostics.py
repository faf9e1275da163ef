"""``gtpo/*`` metrics from what the estimators already computed (no extra model pass).

Every metric is documented in docs/metrics.md. Inputs are the estimator's detailed result
(``TokenShaping`` / ``SequenceShaping`` / ``TrajectoryShaping``), the padded response mask
and which rows are real (V1 padding rows are excluded); what differs between estimators is
their table row's diagnostics hook. All values are Python floats.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import torch

from gtpo_verl.algorithms.groups import row_dot
from gtpo_verl.plugin.estimators import ESTIMATORS, EstimatorCall

PREFIX = "gtpo/"


def _row_token_stats(values: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Per-row (Σ v, Σ v², min v, max v) over valid tokens ``(B,)`` float64: masked reductions, no copies.

    One (B, T) scratch buffer serves the three masked views in turn (a fresh (B, T) tensor costs
    page faults on the CPU).
    """
    values = values.to(mask.dtype)
    row_sum = row_dot(values, mask).to(torch.float64)
    scratch = torch.mul(values, mask)
    row_sq = row_dot(scratch, values).to(torch.float64)
    if values.shape[-1]:
        valid = mask > 0
        inf = torch.tensor(float("inf"), dtype=values.dtype, device=values.device)
        row_min = torch.where(valid, values, inf, out=scratch).amin(-1).to(torch.float64)
        row_max = torch.where(valid, values, -inf, out=scratch).amax(-1).to(torch.float64)
    else:
        row_min = torch.full_like(row_sum, float("inf"))
        row_max = torch.full_like(row_sum, float("-inf"))
    return row_sum, row_sq, row_min, row_max


def _token_stats(row_stats: tuple[torch.Tensor, ...], counts: torch.Tensor, rows: torch.Tensor, name: str) -> dict[str, float]:
    """mean/std/min/max over valid tokens of ``rows`` from per-row stats; NaN-free (0 for an empty set)."""
    row_sum, row_sq, row_min, row_max = row_stats
    keep = rows & (counts > 0)
    tokens = float(counts[keep].sum()) if bool(keep.any()) else 0.0
    if not tokens:
        return {f"{name}/mean": 0.0, f"{name}/std": 0.0, f"{name}/min": 0.0, f"{name}/max": 0.0, f"{name}/tokens": 0.0}
    weight = keep.to(torch.float64)
    mean = float((row_sum * weight).sum()) / tokens
    second = float((row_sq * weight).sum()) / tokens
    return {
        f"{name}/mean": mean,
        f"{name}/std": math.sqrt(max(0.0, second - mean * mean)),
        f"{name}/min": float(row_min[keep].min()),
        f"{name}/max": float(row_max[keep].max()),
        f"{name}/tokens": tokens,
    }


def _mean(values: torch.Tensor, rows: torch.Tensor) -> float:
    return float(values[rows].to(torch.float64).mean()) if bool(rows.any()) else 0.0


def estimator_metrics(call: EstimatorCall, response_mask: torch.Tensor, real_rows: torch.Tensor) -> dict[str, float]:
    """Return the per-step ``gtpo/*`` metrics of one estimator call (a row of the estimator table, ``plugin/estimators/``).

    Every estimator gets advantage and entropy statistics by outcome class (the row's ``outcome``);
    then the row's own ``metrics`` hook adds what is specific to it (from the call's block, batch and result).
    """
    row = ESTIMATORS[call.name]
    result = call.result
    mask = response_mask.to(torch.float32)
    counts = mask.sum(-1).to(torch.float64)
    real = real_rows.to(mask.device) & (counts > 0)
    success, failure = row.outcome(result)
    success, failure = success & real, failure & real
    metrics = {}
    row_stats = _row_token_stats(result.advantages, mask)  # one set of masked reductions for both classes
    metrics.update(_token_stats(row_stats, counts, success, "adv/success"))
    metrics.update(_token_stats(row_stats, counts, failure, "adv/failure"))
    metrics["entropy/success_mean"] = _mean(result.mean_entropy, success)
    metrics["entropy/failure_mean"] = _mean(result.mean_entropy, failure)
    metrics["success_frac"] = float(success.sum()) / max(1, int(real.sum()))
    metrics.update(row.metrics(call, counts, success, failure, real))
    return {PREFIX + key: value for key, value in metrics.items()}


@dataclass
class EntropyWatch:
    """Early warning for an entropy move, in both directions.

    Rising: Paper A's collapse is a flattening distribution whose entropy rises before the reward
    falls. Falling: entropy collapse onto one answer (a deterministic rule, pass@k → pass@1).
    Tracks an EMA ``baseline`` of the batch mean old-policy entropy and its ``floor``, the lowest
    baseline since ``warmup_steps``. The rising flag is raised once ``persist_steps`` batches in a
    row are above ``ratio`` × floor; the falling flag by one batch below baseline / ``fall_ratio``
    (``fall_ratio`` None: off). Persisted with checkpoints.

    NOTE: the rise is measured against the floor, not the baseline: an EMA baseline follows a
    steady rise (it lags a ramp of s nats/step by s·momentum/(1 − momentum)), so a ratio to it
    flags spikes and misses ramps; the persistence filters the batch's noise (docs/lab.md).
    """

    ratio: float = 1.25
    fall_ratio: float | None = None
    momentum: float = 0.9
    warmup_steps: int = 3
    persist_steps: int = 10
    baseline: float | None = None
    floor: float | None = None
    steps: int = 0
    streak: int = 0
    warnings: int = 0

    def update(self, batch_mean_entropy: float) -> dict[str, float]:
        value = float(batch_mean_entropy)
        rise = value / self.baseline if self.baseline else 1.0
        armed = self.steps >= self.warmup_steps and self.baseline is not None
        above_floor = armed and self.floor is not None and value > self.ratio * self.floor
        self.streak = self.streak + 1 if above_floor else 0
        rising = self.streak >= self.persist_steps
        falling = armed and self.fall_ratio is not None and rise * self.fall_ratio < 1.0
        self.warnings += int(rising) + int(falling)
        self.baseline = value if self.baseline is None else self.momentum * self.baseline + (1 - self.momentum) * value
        self.steps += 1
        if self.steps >= self.warmup_steps:
            self.floor = self.baseline if self.floor is None else min(self.floor, self.baseline)
        return {
            PREFIX + "entropy/batch_mean": value,
            PREFIX + "entropy/baseline": float(self.baseline),
            PREFIX + "entropy/floor": float(self.baseline if self.floor is None else self.floor),
            PREFIX + "entropy/rise_ratio": float(rise),
            PREFIX + "entropy/rise_steps": float(self.streak),
            PREFIX + "entropy/collapse_warning": float(rising),
            PREFIX + "entropy/fall_warning": float(falling),
            PREFIX + "entropy/warnings_total": float(self.warnings),
        }

    def state_dict(self) -> dict[str, Any]:
        return asdict(self)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for key in ("baseline", "steps", "warnings"):
            setattr(self, key, state[key])
        # a state saved without floor/streak: the floor starts at the saved baseline once warm
        warm = self.baseline is not None and self.steps >= self.warmup_steps
        self.floor = state.get("floor", self.baseline if warm else None)
        self.streak = state.get("streak", 0)


def masked_token_mean(values: torch.Tensor, mask: torch.Tensor, rows: torch.Tensor) -> float:
    """Token mean of ``values`` ``(B, T)`` over valid tokens (``mask`` > 0) of ``rows`` ``(B,)``; 0 if none."""
    mask = mask.to(torch.float32)
    weight = rows.to(torch.float64)
    tokens = float((mask.sum(-1).to(torch.float64) * weight).sum())
    if not tokens:
        return 0.0
    return float((row_dot(values.to(mask.dtype), mask).to(torch.float64) * weight).sum()) / tokens

