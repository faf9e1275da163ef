"""The lab's dynamic sampling is verl 0.9.1's: verl's own sync ``ReplayBuffer.sample`` and the lab's
``fill_training_batch``, fed the same stream of groups, dispatch the same prompts per poll and train on
a full batch of kept groups.

What stands in for what cannot run here: TransferQueue's four calls go to the in-memory store of
``research/dynamic_sampling_sim.py`` (same keys and tags), and the 2 s poll sleep completes every
prompt in flight (the lab's timing: each dispatched group finishes before the next poll).
"""

import importlib.util
import itertools
import sys

import numpy as np
import pytest
from support.paths import REPO_ROOT

from gtpo_verl.lab.schedule import fill_training_batch

SPEC = importlib.util.spec_from_file_location("dynamic_sampling_sim", REPO_ROOT / "research" / "dynamic_sampling_sim.py")
sim = importlib.util.module_from_spec(SPEC)
sys.modules[SPEC.name] = sim
SPEC.loader.exec_module(sim)

GROUP = 4


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


def _verl_step(stream, batch: int, max_inflight: int):
    """One step of verl's sync ReplayBuffer: its dispatches per poll and the groups it returns."""
    from verl.trainer.ppo.v1 import replay_buffer

    tq = sim.MemoryTQ()
    waves, running, accs = [], [], {}

    def refill(count):  # the trainer's _add_prompts_to_generate
        waves.append(count)
        for _ in range(count):
            uid = f"p{len(accs)}"
            accs[uid] = next(stream)
            tq.tags["train"][uid] = {"is_prompt": True, "status": "running", "global_steps": 1}
            running.append(uid)
        return count

    def poll(partition_id, last_debug_time):  # every prompt in flight finishes before the next poll
        for uid in running:
            for session, acc in enumerate(accs[uid]):
                key = f"{uid}_{session}_0"
                tq.tags["train"][key] = {"status": "success", "global_steps": 1}
                tq.values[key] = {"reward_extra_info": {"acc": float(acc)}}
            tq.tags["train"][uid]["status"] = "finished"
        running.clear()
        return last_debug_time

    real_tq, replay_buffer.tq = replay_buffer.tq, tq
    try:
        buffer = replay_buffer.ReplayBuffer(
            trainer_mode="sync", trainer_config={}, max_off_policy_threshold=None, max_off_policy_strategy="drop",
            sampler_kwargs={}, refill_fn=refill, filter_groups_metric="acc", train_batch_size=batch, gen_batch_size=1,
            max_inflight_gen_batches=max_inflight,
        )
        buffer._wait_for_next_poll = poll
        refill(batch)  # PPOTrainer.prepare_step: one training batch
        meta, metrics = buffer.sample(global_steps=1, partition_id="train", batch_size=batch)
    finally:
        replay_buffer.tq = real_tq
    trained = {key.split("_")[0] for key in meta.keys}
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
def test_the_lab_dispatches_what_verls_buffer_dispatches(keep_rate, max_inflight, monkeypatch):
    monkeypatch.setenv("PYTHONHASHSEED", "0")
    batch = 8
    for seed in range(6):
        waves, trained, accs, metrics = _verl_step(_stream(seed, keep_rate), batch, max_inflight)
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
