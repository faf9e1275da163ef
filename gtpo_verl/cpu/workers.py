"""Cap verl's helper-process counts by the CPU cores found (CPU mode only).

verl's defaults (8 agent-loop workers, 8 reward-loop workers, 8 DataLoader workers) are sized
for GPU nodes with dozens of cores. On a small CPU machine those processes poll and compete
with the vLLM engine and the FSDP actor for the same cores, and a step can crawl for minutes
(docs/cpu_demo.md). In CPU mode each count is lowered to what the cores allow; a lowered value
is logged, a smaller one is kept.
"""

from __future__ import annotations

import logging
import os
from typing import Any

logger = logging.getLogger(__name__)

# (config path, limit as a function of the cores)
WORKER_LIMITS = (
    ("actor_rollout_ref.rollout.agent.num_workers", lambda cores: max(1, cores // 2)),
    ("reward.num_workers", lambda cores: max(1, cores // 2)),
    ("data.dataloader_num_workers", lambda cores: max(0, cores // 2 - 1)),
)


def available_cores() -> int:
    """Cores this process may run on (affinity and cgroup-restricted sets included)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def cap_worker_counts(config: Any, cores: int | None = None) -> dict[str, tuple[int, int]]:
    """Lower the worker counts of ``config`` (an OmegaConf DictConfig) in place; returns the changes."""
    from omegaconf import OmegaConf, open_dict

    cores = available_cores() if cores is None else cores
    changes: dict[str, tuple[int, int]] = {}
    for path, limit in WORKER_LIMITS:
        value = OmegaConf.select(config, path)
        if value is None:
            continue
        allowed = limit(cores)
        if int(value) > allowed:
            with open_dict(config):
                OmegaConf.update(config, path, allowed, merge=False)
            changes[path] = (int(value), allowed)
            logger.warning("CPU mode: %s=%d lowered to %d for %d cores", path, int(value), allowed, cores)
    return changes
