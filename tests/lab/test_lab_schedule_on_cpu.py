"""The lab's dynamic sampling is verl 0.9.1's: verl's own sync ``ReplayBuffer.sample`` and the lab's
``fill_training_batch``, fed the same stream of groups, dispatch the same prompts per poll and train on
a full batch of kept groups.

verl's buffer reads and clears a real local TransferQueue (SimpleStorage on a local Ray cluster), whose
prompt tags and trajectory fields are written as verl's trainer and ``AgentLoopWorkerTQ`` write them.
What stands in for what cannot run here: generation. verl's 2 s poll sleep is replaced by one that
completes every prompt in flight (the lab's timing: each dispatched group finishes before the next poll).
"""

import itertools

import numpy as np
import pytest
from support.hydra import compose_gtpo
from support.transfer_queue import TQ_OVERRIDES, local_transfer_queue

from gtpo_verl.lab.schedule import fill_training_batch

GROUP = 4


@pytest.fixture(scope="module")
def transfer_queue():
    yield from local_transfer_queue(compose_gtpo(*TQ_OVERRIDES).transfer_queue)


def _stream(seed: int, keep_rate: float):
    """Per prompt: its group's acc (all-equal with probability 1 − keep_rate)."""
    rng = np.random.default_rng(seed)
    while True:
        if rng.random() < keep_rate:
            acc = np.zeros(GROUP)
            acc[rng.integers(0, GROUP)] = 1.0  # a mixed group
        else:
            acc = np.full(GROUP, float(rng.random() < 0.5))
        yield acc


def _verl_step(tq, stream, batch: int, max_inflight: int, step: int):
    """One step of verl's sync ReplayBuffer on the real TransferQueue: its dispatches per poll and the groups it returns."""
    from verl.trainer.ppo.v1 import replay_buffer
    from verl.utils.tensordict_utils import list_of_dict_to_tensordict

    waves, running, accs = [], [], {}

    def refill(count):  # the trainer's _add_prompts_to_generate: prompt tags, then dispatch
        waves.append(count)
        uids = [f"s{step}p{len(accs) + i}" for i in range(count)]
        for uid in uids:
            accs[uid] = next(stream)
        tq.kv_batch_put(keys=uids, partition_id="train",
                        tags=[{"is_prompt": True, "status": "running", "global_steps": step} for _ in uids])
        running.extend(uids)
        return count

    def poll(partition_id, last_debug_time):  # every prompt in flight finishes before the next poll
        if running:
            keys = [f"{uid}_{session}_0" for uid in running for session in range(GROUP)]
            fields = [{"extra_fields": {"reward_extra_info": {"acc": float(accs[uid][session])}}}
                      for uid in running for session in range(GROUP)]  # what AgentLoopWorkerTQ writes
            tq.kv_batch_put(keys=keys, partition_id="train", fields=list_of_dict_to_tensordict(fields),
                            tags=[{"status": "success", "global_steps": step} for _ in keys])
            tq.kv_batch_put(keys=list(running), partition_id="train",
                            tags=[{"is_prompt": True, "status": "finished", "global_steps": step} for _ in running])
        running.clear()
        return last_debug_time

    buffer = replay_buffer.ReplayBuffer(
        trainer_mode="sync", trainer_config={}, max_off_policy_threshold=None, max_off_policy_strategy="drop",
        sampler_kwargs={}, refill_fn=refill, filter_groups_metric="acc", train_batch_size=batch, gen_batch_size=1,
        max_inflight_gen_batches=max_inflight,
    )
    buffer._wait_for_next_poll = poll
    refill(batch)  # PPOTrainer.prepare_step: one training batch
    meta, metrics = buffer.sample(global_steps=step, partition_id="train", batch_size=batch)
    trained = {key.split("_")[0] for key in meta.keys}
    left = list((tq.kv_list() or {}).get("train", {}))
    if left:  # the trained batch (and nothing else verl kept) is the step's to consume
        tq.kv_clear(partition_id="train", keys=left)
    return waves, trained, accs, metrics


def _lab_step(stream, batch: int, max_inflight: int, stall_prompts: int = 10_000):
    accs = []

    def dispatch(count):
        new = [next(stream) for _ in range(count)]
        accs.extend(new)
        return [bool(a.std() > 0) for a in new]

    return fill_training_batch(batch, dispatch, max_inflight, stall_prompts), accs


@pytest.mark.parametrize("keep_rate", [0.9, 0.5, 0.2, 0.06])
@pytest.mark.parametrize("max_inflight", [1, 3])
def test_the_lab_dispatches_what_verls_buffer_dispatches(transfer_queue, keep_rate, max_inflight):
    batch = 8
    for seed in range(6):
        step = 1 + seed
        waves, trained, accs, metrics = _verl_step(transfer_queue, _stream(seed, keep_rate), batch, max_inflight, step)
        filled, lab_accs = _lab_step(_stream(seed, keep_rate), batch, max_inflight)
        assert filled.waves == waves, (seed, keep_rate)  # the same refill per poll, so the same prompts consumed
        assert not filled.stalled and len(filled.kept) == batch == len(trained)
        assert all(accs[uid].std() > 0 for uid in trained)  # verl trains on kept groups only ...
        assert all(lab_accs[i].std() > 0 for i in filled.kept)  # ... and so does the lab, a full batch of them
        evicted = sum(float(a.std() == 0) for a in accs.values())
        assert metrics.get("training/filter_groups/evicted_samples", 0) == evicted == filled.dispatched - filled.informative
        assert max(waves[1:], default=0) <= max_inflight * batch  # the only bound verl applies: prompts in flight


def test_a_step_with_no_informative_group_stops_at_the_labs_bound_and_says_so():
    always_equal = itertools.repeat(np.ones(GROUP))
    filled, _ = _lab_step(always_equal, 8, 3, stall_prompts=64)
    assert filled.stalled and filled.kept == [] and filled.dispatched == 64
    assert filled.waves == [8, 16, 24, 16]  # 2 credits per eviction, at most 3 batches in flight, cut at 64


def test_surplus_groups_are_discarded_and_the_first_kept_are_trained():
    flags = iter([[True] * 5 + [False] * 3, [True] * 6])
    filled = fill_training_batch(8, lambda n: next(flags)[:n], 3, 1000)
    assert filled.waves == [8, 6] and filled.informative == 11 and filled.kept == [0, 1, 2, 3, 4, 8, 9, 10]
