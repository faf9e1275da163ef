"""DAPO's dynamic sampling as verl 0.9.1's V1 trainer schedules it (sync mode), for the lab.

verl's ``ReplayBuffer.sample`` (``trainer/ppo/v1/replay_buffer.py``) with ``algorithm.filter_groups``
on: the step starts with one training batch of B prompts in flight (``PPOTrainer.prepare_step``);
each finished group whose ``acc`` is all-equal is evicted and earns 2 refill credits; credits are
spent on fresh prompts while fewer than ``max_inflight_gen_batches`` × B prompts are in flight;
once B groups are kept nothing more is dispatched, what is in flight is drained, B groups are
trained on and the surplus is discarded. Nothing bounds how many prompts a step may use:
``algorithm.filter_groups.max_num_gen_batches`` is ignored by the V1 trainer (it logs a warning),
so a step whose policy answers every prompt all-right or all-wrong never ends.

``fill_training_batch`` runs that loop with every dispatched group finishing before the next poll
(one wave per poll), the timing under which the lab generates: its dispatch counts are then verl's
exactly (``tests/lab/test_lab_schedule_on_cpu.py`` drives verl's own buffer on the same reward
stream). Two choices are the lab's own and say so in the result: of the kept groups the step
trains on the first B in dispatch order (verl takes B of equal age in set order), and a step stops
at ``stall_prompts`` prompts (verl would wait for ever) and trains on what it kept, flagged
``stalled``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

REFILL_CREDIT_PER_EVICTION = 2  # verl: refill_credit += 2 * dapo_count (sync mode)


@dataclass(frozen=True)
class FilledBatch:
    """What one step's dynamic sampling produced."""

    kept: list[int]
    """Indices (in dispatch order) of the groups the step trains on."""
    waves: list[int]
    """Prompts dispatched per poll: the first is the training batch, the rest are refills."""
    informative: int
    """Groups whose ``acc`` was not all-equal, surplus included."""
    stalled: bool
    """The lab's bound ``stall_prompts`` was reached before B groups were kept (verl would still be waiting)."""

    @property
    def dispatched(self) -> int:
        return sum(self.waves)


def fill_training_batch(
    train_batch: int,
    dispatch: Callable[[int], Sequence[bool]],
    max_inflight_gen_batches: int,
    stall_prompts: int,
) -> FilledBatch:
    """Dispatch prompts as verl's sync ``ReplayBuffer.sample`` does until ``train_batch`` groups are kept.

    ``dispatch(n)`` generates n fresh prompts' groups and returns, per group in dispatch order,
    whether it is kept (its ``acc`` is not all-equal).
    """
    informative: list[bool] = list(dispatch(train_batch))  # prepare_step: one training batch
    waves = [train_batch]
    credit = 0
    evicted_at_last_poll = informative.count(False)
    while informative.count(True) < train_batch:
        credit += REFILL_CREDIT_PER_EVICTION * evicted_at_last_poll
        # nothing is in flight between polls, so every slot of the in-flight cap is free
        count = min(credit, max_inflight_gen_batches * train_batch, stall_prompts - len(informative))
        if count <= 0:
            break
        new = list(dispatch(count))
        credit -= count
        evicted_at_last_poll = new.count(False)
        informative += new
        waves.append(count)
    kept_indices = [i for i, ok in enumerate(informative) if ok]
    return FilledBatch(kept=kept_indices[:train_batch], waves=waves, informative=len(kept_indices),
                       stalled=len(kept_indices) < train_batch)


__all__ = ["FilledBatch", "fill_training_batch", "REFILL_CREDIT_PER_EVICTION"]
