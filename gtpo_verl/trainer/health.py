"""Algorithm health: ``gtpo/health/*`` and one warning when a term of the method silently does nothing.

Each check reads one per-step metric the diagnostics already computed and compares it with a
threshold; the lab replays each check on runs whose outcome is known (docs/lab.md, "Algorithm
health"), to see whether the flag separates runs where the term acts from runs where it does not.
A check's flag is ``gtpo/health/<name>`` (1 while the metric's running mean is at or past the
threshold); the warning is logged when the flag turns on, with the key that fixes it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import torch

from gtpo_verl.algorithms.groups import group_ids_from_uids
from gtpo_verl.trainer.diagnostics import PREFIX
# the checks themselves live in a torch-free module (gtpo-report reads them); re-exported here
from gtpo_verl.trainer.health_checks import ALL_EQUAL_GROUPS_FRAC, HEALTH_CHECKS, HealthCheck  # noqa: F401

logger = logging.getLogger(__name__)


def all_equal_groups_frac(scores: torch.Tensor, groups: np.ndarray | torch.Tensor) -> float:
    """Fraction of groups whose sequence scores ``(B,)`` are all equal; ``groups`` ``(B,)`` is each row's
    prompt uid or its integer group id (only the groups present count)."""
    if not len(groups):
        return 0.0
    if not isinstance(groups, torch.Tensor):
        groups, _ = group_ids_from_uids(groups)
    _, group = torch.unique(groups.cpu(), return_inverse=True)  # the groups present, numbered densely
    count = int(group.max()) + 1
    scores = scores.to("cpu", torch.float64)
    low = torch.full((count,), float("inf"), dtype=torch.float64).scatter_reduce(0, group, scores, "amin")
    high = torch.full((count,), float("-inf"), dtype=torch.float64).scatter_reduce(0, group, scores, "amax")
    return float((low == high).to(torch.float64).mean())


@dataclass
class HealthMonitor:
    """Flags a check while its metric's running mean is at or past the threshold; warns when a flag turns on.

    The running mean (EMA, ``momentum``) keeps one noisy batch from flagging, and one good batch
    from clearing, a term that is persistently silent.
    """

    checks: tuple[HealthCheck, ...] = HEALTH_CHECKS
    momentum: float = 0.9
    means: dict = field(default_factory=dict)
    active: set = field(default_factory=set)

    def update(self, metrics: dict) -> dict[str, float]:
        out = {}
        for check in self.checks:
            if check.metric not in metrics:
                continue
            value = float(metrics[check.metric])
            previous = self.means.get(check.name)
            mean = value if previous is None else self.momentum * previous + (1 - self.momentum) * value
            self.means[check.name] = mean
            flag = mean >= check.threshold
            out[PREFIX + "health/" + check.name] = float(flag)
            if flag and check.name not in self.active:
                logger.warning("gtpo health: %s (%s running mean %.3f, threshold %.2f)", check.describe(f"{mean:.0%}"),
                               check.metric, mean, check.threshold)
            (self.active.add if flag else self.active.discard)(check.name)
        return out


# ------------------------------------------------------------------------- the method's own health
NOOP_EXIT_STATUS = 4  # python -m gtpo_verl.main exits with this when the method trained nothing (never requeued)
KEEP_SHARE = 0.8  # the share of responses the δ suggested in the stop message keeps


class MethodSwitchedOffError(RuntimeError):
    """The estimator's advantages were (nearly) all zero for ``gtpo.health.window`` steps (``gtpo.health.on_noop=stop``)."""


def mixed_rows(scores: torch.Tensor, group_ids: torch.Tensor, num_groups: int, rows: torch.Tensor) -> torch.Tensor:
    """``(B,)`` bool: ``rows`` whose group (among ``rows``) holds at least two different scores."""
    scores = scores.to(torch.float64)
    groups = group_ids[rows]
    low = torch.full((num_groups,), float("inf"), dtype=torch.float64).scatter_reduce(0, groups, scores[rows], "amin")
    high = torch.full((num_groups,), float("-inf"), dtype=torch.float64).scatter_reduce(0, groups, scores[rows], "amax")
    return rows & (low < high)[group_ids]


def zero_advantage_frac(call, mask: torch.Tensor, real: torch.Tensor) -> Optional[float]:
    """Share of the valid tokens of the mixed groups' real rows whose advantage is exactly 0; None without a
    mixed group (there a zero advantage is what every group-relative method gives)."""
    batch = call.batch
    rows = mixed_rows(batch.sequence_scores.cpu(), batch.group_ids.cpu(), batch.num_groups, real.cpu())
    valid = (mask.cpu() > 0) & rows[:, None]
    tokens = int(valid.sum())
    if not tokens:
        return None
    advantages = call.result.advantages.cpu()[:, : valid.shape[1]]
    return float(((advantages == 0) & valid).sum()) / tokens


def method_health(call, mask: torch.Tensor, real: torch.Tensor) -> dict[str, float]:
    """``gtpo/health/*`` of one table-estimator call: the zero-advantage share, then the row's own ``health``
    hook (how much the entropy changes the advantage against the method's entropy-free form)."""
    from gtpo_verl.plugin.estimators import ESTIMATORS

    out = {}
    zero = zero_advantage_frac(call, mask, real)
    if zero is not None:
        out["health/zero_advantage_frac"] = zero
    out.update(ESTIMATORS[call.name].health(call, mask.to(torch.float32), real.to(mask.device)))
    return {PREFIX + key: value for key, value in out.items()}


@dataclass
class NoopGuard:
    """Ends a run whose method trains nothing: ``gtpo.health.on_noop`` (stop | warn) after ``window`` steps in a row
    where δ filtered at least ``share`` of the responses or at least ``share`` of the mixed groups' tokens got a
    zero advantage. A step with neither signal (no δ, no mixed group) neither counts nor breaks the run of steps.

    The stop message names the key, the responses' measured entropy and a δ that keeps ``KEEP_SHARE`` of them.
    Not persisted: a resumed run counts its window afresh.
    """

    on_noop: str = "stop"
    window: int = 3
    share: float = 0.99
    streak: int = 0
    first_mean_entropy: Optional[float] = None  # ⟨H⟩ over the responses of the first step seen
    recent: list = field(default_factory=list)  # (δ-filtered share, zero-advantage share, ⟨H⟩_i of real rows) per step

    def update(self, call, mask: torch.Tensor, real: torch.Tensor, initial_entropy: Optional[float] = None,
               health: Optional[dict] = None) -> dict[str, float]:
        """One step; ``health`` is the step's ``method_health`` when the diagnostics computed it (not computed twice)."""
        result, real = call.result, real.cpu()
        nonempty = real & (mask.cpu().sum(-1) > 0)
        entropies = result.mean_entropy.cpu().to(torch.float64)[nonempty]
        if self.first_mean_entropy is None and entropies.numel():
            self.first_mean_entropy = float(entropies.mean())
        filtered = None
        if hasattr(result, "keep") and call.block.threshold(call.batch.initial_entropy) is not None:
            filtered = float((~result.keep.cpu() & nonempty).sum()) / max(1, int(nonempty.sum()))
        zero = (zero_advantage_frac(call, mask, real) if health is None
                else health.get(PREFIX + "health/zero_advantage_frac"))  # absent there: no mixed group
        if filtered is None and zero is None:
            return {PREFIX + "health/noop_steps": float(self.streak)}
        noop = (filtered is not None and filtered >= self.share) or (zero is not None and zero >= self.share)
        self.streak = self.streak + 1 if noop else 0
        self.recent = (self.recent + [(filtered, zero, entropies)])[-self.window:]
        if self.streak >= self.window:
            message = self.message(call, initial_entropy)
            if self.on_noop == "stop":
                raise MethodSwitchedOffError(message)
            if self.streak == self.window:
                logger.warning("gtpo health: %s", message)
        return {PREFIX + "health/noop_steps": float(self.streak)}

    def message(self, call, initial_entropy: Optional[float]) -> str:
        estimator, steps = call.name, len(self.recent)
        entropies = torch.cat([e for _, _, e in self.recent])
        filtered = [f for f, _, _ in self.recent if f is not None]
        if filtered and min(filtered) >= self.share:
            block = call.block
            threshold = block.threshold(call.batch.initial_entropy)
            keep_at = float(torch.quantile(entropies, KEEP_SHARE)) if entropies.numel() else float("nan")
            reference = initial_entropy if initial_entropy is not None else self.first_mean_entropy
            basis = "⟨H⟩_ini" if initial_entropy is not None else "the first step's mean"
            ratio = f"entropy_threshold_ratio={keep_at / reference:.3g} ({basis} {reference:.3g} nats)" if reference else ""
            return (
                f"the method trains nothing: algorithm.{estimator}'s δ = {threshold:.3g} nats filtered "
                f"{min(filtered):.0%}-{max(filtered):.0%} of the responses at each of the last {steps} steps, so every "
                f"advantage was 0. The responses' mean entropy ⟨H⟩_i: median {float(torch.quantile(entropies, 0.5)):.3g} nats "
                f"(range {float(entropies.min()):.3g}-{float(entropies.max()):.3g}). To keep {KEEP_SHARE:.0%} of them set "
                f"algorithm.{estimator}.entropy_threshold={keep_at:.3g}" + (f" or {ratio}" if ratio else "")
                + f"; gtpo.health.on_noop=warn trains on regardless. Exit status {NOOP_EXIT_STATUS} (not requeued)."
            )
        zeros = [z for _, z, _ in self.recent if z is not None]
        return (
            f"the method trains nothing: algorithm.adv_estimator={estimator} gave a zero advantage to "
            f"{min(zeros):.0%}-{max(zeros):.0%} of the tokens of groups with mixed rewards at each of the last "
            f"{steps} steps. Check algorithm.{estimator}'s settings against docs/config.md; "
            f"gtpo.health.on_noop=warn trains on regardless. Exit status {NOOP_EXIT_STATUS} (not requeued)."
        )
