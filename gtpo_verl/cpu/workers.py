"""Fit verl's processes to the CPU cores found (CPU mode only).

verl's defaults (8 agent-loop workers, 8 reward-loop workers, 8 DataLoader workers) are sized
for GPU nodes with dozens of cores. On a small CPU machine those processes poll and compete
with the vLLM engine and the FSDP actor for the same cores, and a step can crawl for minutes
(docs/cpu_demo.md). In CPU mode each count is lowered to what the cores allow; a lowered value
is logged, a smaller one is kept.

The other way round for the FSDP ranks: Ray starts every actor with ``OMP_NUM_THREADS=1`` (its
default for an actor that asks for no CPUs), so the actor's forward and backward ran on one core
of two. A worker-group rank (the process verl starts with ``RANK`` and ``RAY_LOCAL_WORLD_SIZE`` in
its environment) takes its share of the node's cores instead: the phases of a colocated step
run one after another, so while the actor computes the rollout engine waits.
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


ACTOR_THREADS_ENV = "GTPO_VERL_CPU_ACTOR_THREADS"  # a fixed count for each FSDP rank (e.g. 1 when nodes share cores)


def actor_threads(local_world_size: int, cores: int | None = None) -> int:
    """Torch threads for one FSDP rank of ``local_world_size`` on this node: the cores shared
    evenly, or ``GTPO_VERL_CPU_ACTOR_THREADS`` when set."""
    fixed = os.environ.get(ACTOR_THREADS_ENV, "").strip()
    if fixed:
        if not fixed.isdigit() or int(fixed) < 1:
            raise ValueError(f"{ACTOR_THREADS_ENV}={fixed!r}: set a whole number of threads >= 1, or unset it")
        return int(fixed)
    cores = available_cores() if cores is None else cores
    return max(1, cores // max(1, local_world_size))


def set_rank_threads() -> int | None:
    """In a verl worker-group rank, set torch's threads to ``actor_threads``; elsewhere do nothing.
    Returns the count set, or None."""
    local_world_size = os.environ.get("RAY_LOCAL_WORLD_SIZE")
    if os.environ.get("WG_BACKEND") != "ray" or "RANK" not in os.environ or not local_world_size:
        return None
    import torch

    threads = actor_threads(int(local_world_size))
    torch.set_num_threads(threads)
    return threads


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
