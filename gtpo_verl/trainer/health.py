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
                logger.warning("gtpo health: %s (%s running mean %.3f, threshold %.2f)", check.message.format(value=mean),
                               check.metric, mean, check.threshold)
            (self.active.add if flag else self.active.discard)(check.name)
        return out
