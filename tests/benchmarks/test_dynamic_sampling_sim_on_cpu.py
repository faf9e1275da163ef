"""benchmarks/dynamic_sampling_sim.py, the DAPO dynamic-sampling throughput model: its decode model
against closed forms, and verl's own sync ReplayBuffer, driven by it, returning a full batch of kept
groups in each schedule."""

import importlib.util
import sys

import numpy as np
import pytest
from support.paths import REPO_ROOT

SPEC = importlib.util.spec_from_file_location("dynamic_sampling_sim", REPO_ROOT / "benchmarks" / "dynamic_sampling_sim.py")
sim = importlib.util.module_from_spec(SPEC)
sys.modules[SPEC.name] = sim  # its dataclasses look their module up there
SPEC.loader.exec_module(sim)


def _prompt(uid, lengths):
    lengths = np.array(lengths)
    return sim.Prompt(uid=uid, order=0, accuracy=0.5, lengths=lengths, acc=np.zeros(len(lengths)))


def test_decode_model_matches_closed_forms(monkeypatch):
    monkeypatch.setattr(sim, "GROUP", 2)
    done = []
    cluster = sim.Cluster(lambda prompt, session: done.append((session, cluster.time)))
    monkeypatch.setattr(sim, "REPLICAS", 1)
    cluster.replicas = cluster.replicas[:1]
    cluster.submit(_prompt("a", [100, 300]))  # two sequences share one replica
    cluster.advance_to(float("inf"))
    base, per = sim.STEP_BASE_S, sim.STEP_PER_SEQ_S
    first = 100 * (base + 2 * per)  # both decode: 100 engine steps with 2 running
    second = first + 200 * (base + per)  # then the longer one alone
    assert done == [(0, pytest.approx(first)), (1, pytest.approx(second))]
    assert cluster.tokens == pytest.approx(400)


@pytest.mark.parametrize("schedule", ["current", "abort"])
def test_verls_buffer_returns_a_full_batch_of_kept_groups(schedule, monkeypatch):
    trained = {}
    real_run_step = sim.run_step

    from verl.trainer.ppo.v1 import replay_buffer

    sample = replay_buffer.ReplayBuffer.sample

    def recording_sample(self, global_steps, partition_id, batch_size):
        batch, metrics = sample(self, global_steps=global_steps, partition_id=partition_id, batch_size=batch_size)
        trained["uids"] = {key.split("_")[0] for key in batch.keys}
        trained["keys"] = len(batch.keys)
        return batch, metrics

    monkeypatch.setattr(replay_buffer.ReplayBuffer, "sample", recording_sample)
    result = real_run_step(schedule, np.random.default_rng([7, 0]), keep_rate=0.8)
    assert len(trained["uids"]) == sim.BATCH and trained["keys"] == sim.BATCH * sim.GROUP
    assert 0.7 < result["keep"] < 0.95 and result["dispatched"] >= sim.BATCH
    assert 0 <= result["idle"] < 1 and 0 < result["waste"] < 1
    assert abs(result["bias"]) < 0.1  # both are fair samples of the kept groups
    import transfer_queue

    assert replay_buffer.tq is transfer_queue  # verl's TransferQueue client is restored afterwards
