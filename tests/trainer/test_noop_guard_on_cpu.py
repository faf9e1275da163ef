"""A run whose method trains nothing stops (``gtpo.health``), and ``gtpo/health/*`` says every step how much
the entropy moves the method's advantage.

- The health metrics of the three table estimators against the independent float64 references
  (tests/support/references.py), counted by hand where they are counts.
- ``NoopGuard`` through verl's real V1 trainer on a real local TransferQueue: δ filtering every response
  for ``window`` steps raises ``MethodSwitchedOffError`` with one message naming the key, the measured
  entropy and a δ (and ratio) that keeps 80 % of the responses (its numbers recomputed here); ``warn``
  logs it once and trains on; δ scaled to the model (``entropy_threshold_ratio``) trains on.
- The zero-advantage signal on a hand-made call; steps without any signal neither count nor break.
- The SLURM launcher does not requeue the no-op status; bad ``gtpo.health`` values are one clear error.
"""

import logging
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from gtpo_verl.algorithms.groups import group_ids_from_uids
from gtpo_verl.plugin.estimators import ESTIMATORS, EstimatorBatch, EstimatorCall
from gtpo_verl.plugin.estimators.grpo_s import GRPOSConfig
from gtpo_verl.plugin.estimators.gtpo_token import GTPOTokenConfig
from gtpo_verl.plugin.estimators.gtpo_traj import GTPOTrajConfig
from gtpo_verl.trainer.health import NOOP_EXIT_STATUS, MethodSwitchedOffError, NoopGuard, method_health
from support.hydra import compose_gtpo
from support.references import ref_gtpo_token, ref_gtpo_traj, ref_grpo_s
from support.transfer_queue import TQ_OVERRIDES, local_transfer_queue
from support.v1_batch import make_v1_trainer, put_v1_batch


def _batch(seed=3, groups=3, group=4, width=7, vocab=3):
    g = torch.Generator().manual_seed(seed)
    rows = groups * group
    lengths = torch.randint(1, width + 1, (rows,), generator=g)
    mask = (torch.arange(width)[None, :] < lengths[:, None]).to(torch.float32)
    entropy = torch.rand(rows, width, generator=g, dtype=torch.float64).to(torch.float32) * 2 + 0.05
    scores = torch.tensor([1.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0])[:rows]
    responses = torch.randint(0, vocab, (rows, width), generator=g)
    uids = np.array([f"u{i // group}" for i in range(rows)], dtype=object)
    return mask, entropy, scores, responses, uids


def _call(name, block, mask, entropy, scores, responses, uids, initial_entropy=None):
    batch = EstimatorBatch.build(name, scores, mask, uids, initial_entropy, entropys=entropy, responses=responses)
    return EstimatorCall(name, block, batch, ESTIMATORS[name].run(block, batch))


def _moved(shaped, free, mask):
    valid = np.asarray(mask) > 0
    shaped, free = np.asarray(shaped, np.float64), np.asarray(free, np.float64)
    scale = max(np.abs(shaped[valid]).sum(), np.abs(free[valid]).sum())
    return np.abs(shaped - free)[valid].sum() / scale


def test_gtpo_token_health_against_the_reference():
    mask, entropy, scores, responses, uids = _batch()
    real = torch.ones(len(uids), dtype=torch.bool)
    call = _call("gtpo_token", GTPOTokenConfig(), mask, entropy, scores, responses, uids)
    health = method_health(call, mask, real)
    group_ids, groups = group_ids_from_uids(uids)
    kw = dict(alpha1=0.9, alpha2=0.1)
    shaped = ref_gtpo_token(entropy.numpy(), mask.numpy(), scores.numpy(), group_ids.numpy(), groups, **kw)["advantages"]
    flat = ref_gtpo_token(np.ones_like(entropy.numpy()), mask.numpy(), scores.numpy(), group_ids.numpy(), groups, **kw)
    assert health["gtpo/health/entropy_moved_frac"] == pytest.approx(_moved(shaped, flat["advantages"], mask), rel=1e-5)
    assert 0 < health["gtpo/health/entropy_moved_frac"] < 1
    # alone in the column: success tokens at (group, t) with no other success token there, counted by hand
    lengths = mask.sum(-1).int().tolist()
    success = [s > 0 for s in scores.tolist()]
    alone = total = 0
    for i in range(len(uids)):
        if not success[i]:
            continue
        for t in range(lengths[i]):
            total += 1
            alone += sum(success[k] and uids[k] == uids[i] and lengths[k] > t for k in range(len(uids))) == 1
    assert health["gtpo/health/alone_in_column_frac"] == pytest.approx(alone / total)
    # no mixed group without a zero advantage: GTPO gives every token of a mixed group a non-zero advantage here
    assert health["gtpo/health/zero_advantage_frac"] == 0.0
    row_share = _call("gtpo_token", GTPOTokenConfig(entropy_share="geometric"), mask, entropy, scores, responses, uids)
    assert "gtpo/health/alone_in_column_frac" not in method_health(row_share, mask, real)  # a column statistic only


def test_grpo_s_health_against_the_reference():
    mask, entropy, scores, responses, uids = _batch(seed=5)
    call = _call("grpo_s", GRPOSConfig(), mask, entropy, scores, responses, uids)
    health = method_health(call, mask, torch.ones(len(uids), dtype=torch.bool))
    group_ids, groups = group_ids_from_uids(uids)
    kw = dict(beta1=0.9, beta2=0.1)
    shaped = ref_grpo_s(entropy.numpy(), mask.numpy(), scores.numpy(), group_ids.numpy(), groups, **kw)["advantages"]
    flat = ref_grpo_s(np.ones_like(entropy.numpy()), mask.numpy(), scores.numpy(), group_ids.numpy(), groups, **kw)
    assert health["gtpo/health/entropy_moved_frac"] == pytest.approx(_moved(shaped, flat["advantages"], mask), rel=1e-5)


@pytest.mark.parametrize("threshold", [0.9, 1e-3])
def test_gtpo_traj_health_against_the_reference(threshold):
    mask, entropy, scores, responses, uids = _batch(seed=9)
    real = torch.ones(len(uids), dtype=torch.bool)
    real[-1] = False  # a padding row counts nowhere
    block = GTPOTrajConfig(entropy_threshold=threshold)
    health = method_health(_call("gtpo_traj", block, mask, entropy, scores, responses, uids), mask, real)
    group_ids, groups = group_ids_from_uids(uids)
    args = (responses.numpy(), mask.numpy(), scores.numpy(), group_ids.numpy(), groups)
    ref = ref_gtpo_traj(*args, entropy.numpy(), entropy_threshold=threshold)
    free = ref_gtpo_traj(*args, entropy.numpy(), entropy_threshold=None, gamma=0.0)  # no δ, no regulariser
    keep = real.numpy()
    lengths = mask.sum(-1).numpy()
    assert health["gtpo/health/delta_kept_frac"] == pytest.approx(ref["keep"][keep].mean())
    runs = np.minimum(lengths, ref["forward_run"] + ref["backward_run"])
    assert health["gtpo/health/conflict_token_frac"] == pytest.approx(runs[keep].sum() / lengths[keep].sum())
    real_mask = mask.numpy() * keep[:, None]
    assert health["gtpo/health/entropy_moved_frac"] == pytest.approx(_moved(ref["advantages"], free["advantages"], real_mask),
                                                                     rel=1e-5)
    if threshold < 0.01:  # δ filters every response: every advantage 0, the entropy terms moved all of it
        assert health["gtpo/health/delta_kept_frac"] == 0.0 and health["gtpo/health/entropy_moved_frac"] == 1.0
        assert health["gtpo/health/zero_advantage_frac"] == 1.0


# ------------------------------------------------------------------------------ the guard in the trainer
def compose_config(*overrides):
    return compose_gtpo("actor_rollout_ref.rollout.n=4", *TQ_OVERRIDES, "algorithm.adv_estimator=gtpo_traj",
                        "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean", *overrides)


@pytest.fixture(scope="module")
def transfer_queue():
    yield from local_transfer_queue(compose_config().transfer_queue)


def _steps(transfer_queue, trainer, seeds, prefix, entropies=None):
    """Advantage steps of the real trainer on the batches of ``seeds``; each step's metrics. ``entropies``
    collects every real response's ⟨H⟩_i, computed here in float64 from the batch as written."""
    metrics = []
    for seed in seeds:
        meta, direct = put_v1_batch(transfer_queue, seed=seed, prefix=prefix)
        lengths = direct["response_mask"].sum(-1)
        if entropies is not None:
            entropies.append([float(direct["entropys"][i, : int(n)].double().mean()) for i, n in enumerate(lengths)
                              if not direct["index"][i].startswith("pad") and n > 0])
        step_metrics: dict = {}
        trainer._compute_advantage(meta, step_metrics)
        metrics.append(step_metrics)
    return metrics


def test_delta_filtering_every_response_stops_the_run_with_one_line(transfer_queue):
    trainer = make_v1_trainer(compose_config("algorithm.gtpo_traj.entropy_threshold=0.001"))
    entropies: list = []
    metrics = _steps(transfer_queue, trainer, (40, 41), "stop", entropies)  # the window is 3: two steps train on
    assert [m["gtpo/health/noop_steps"] for m in metrics] == [1.0, 2.0]
    assert metrics[-1]["gtpo/delta/filtered_frac"] == 1.0
    with pytest.raises(MethodSwitchedOffError) as stopped:
        _steps(transfer_queue, trainer, (42,), "stop", entropies)
    message = stopped.value.args[0]
    assert "\n" not in message and f"Exit status {NOOP_EXIT_STATUS} (not requeued)" in message
    assert "δ = 0.001 nats filtered 100%-100% of the responses at each of the last 3 steps" in message
    # the δ that keeps 80 % of the window's responses, and its ratio to the first step's mean, recomputed here
    window = np.concatenate(entropies)
    first, keep_at = np.mean(entropies[0]), np.quantile(window, 0.8)
    assert f"algorithm.gtpo_traj.entropy_threshold={keep_at:.3g}" in message
    assert f"entropy_threshold_ratio={keep_at / first:.3g} (the first step's mean {first:.3g} nats)" in message
    assert f"median {np.median(window):.3g} nats" in message and "gtpo.health.on_noop=warn" in message


def test_warn_logs_once_and_trains_on(transfer_queue, caplog):
    trainer = make_v1_trainer(compose_config("algorithm.gtpo_traj.entropy_threshold=0.001", "gtpo.health.on_noop=warn"))
    with caplog.at_level(logging.WARNING, logger="gtpo_verl.trainer.health"):
        metrics = _steps(transfer_queue, trainer, (50, 51, 52, 53), "warn")
    assert [m["gtpo/health/noop_steps"] for m in metrics] == [1.0, 2.0, 3.0, 4.0]
    assert sum("the method trains nothing" in r.getMessage() for r in caplog.records) == 1


def test_delta_scaled_to_the_model_trains_on(transfer_queue):
    trainer = make_v1_trainer(compose_config("algorithm.gtpo_traj.entropy_threshold_ratio=1.5"))
    metrics = _steps(transfer_queue, trainer, (60, 61, 62, 63), "ratio")
    assert all(m["gtpo/health/noop_steps"] == 0.0 for m in metrics)
    assert all(m["gtpo/health/delta_kept_frac"] > 0.5 for m in metrics)
    assert metrics[0]["gtpo/delta/threshold"] == pytest.approx(1.5 * trainer.gtpo_state.initial_entropy)


# ------------------------------------------------------------------------------ the guard by hand
def _hand_call(advantages, scores, uids):
    rows, width = advantages.shape
    mask = torch.ones(rows, width)
    group_ids, groups = group_ids_from_uids(np.array(uids, dtype=object))
    batch = SimpleNamespace(sequence_scores=torch.tensor(scores), group_ids=group_ids, num_groups=groups)
    result = SimpleNamespace(advantages=advantages, mean_entropy=torch.full((rows,), 1.2))  # no δ: no ``keep``
    return SimpleNamespace(name="gtpo_token", block=None, batch=batch, result=result), mask


def test_zero_advantages_on_mixed_groups_count_and_uniform_steps_do_not():
    guard = NoopGuard(on_noop="stop", window=2, share=0.99)
    real = torch.ones(4, dtype=torch.bool)
    zero_mixed, mask = _hand_call(torch.zeros(4, 3), [1.0, 0.0, 1.0, 1.0], ["a", "a", "b", "b"])
    uniform, _ = _hand_call(torch.zeros(4, 3), [1.0, 1.0, 0.0, 0.0], ["a", "a", "b", "b"])  # no mixed group
    trained, _ = _hand_call(torch.tensor([[1.0, 1, 1], [-1, -1, -1], [0, 0, 0], [0, 0, 0]]), [1.0, 0.0, 1.0, 1.0],
                            ["a", "a", "b", "b"])
    assert guard.update(zero_mixed, mask, real)["gtpo/health/noop_steps"] == 1.0
    assert guard.update(uniform, mask, real)["gtpo/health/noop_steps"] == 1.0  # no signal: neither counts nor breaks
    assert guard.update(trained, mask, real)["gtpo/health/noop_steps"] == 0.0  # group a trained: the run of steps ends
    guard.update(zero_mixed, mask, real)
    with pytest.raises(MethodSwitchedOffError, match=r"gave a zero advantage to 100%-100% of the tokens of groups with "
                                                     r"mixed rewards at each of the last 2 steps"):
        guard.update(zero_mixed, mask, real)


# ------------------------------------------------------------------------------ launcher and config
def test_the_slurm_launcher_does_not_requeue_a_method_that_trains_nothing(tmp_path):
    from support.launchers import make_stub_bin, run_script, slurm_env

    (tmp_path / "stub_bin").mkdir()
    stubs = make_stub_bin(tmp_path / "stub_bin")
    proc, calls = run_script(stubs, tmp_path, "recipes/slurm/ray_on_slurm.sbatch",
                             RECIPE="recipes/dapo/run_dapo_token_qwen2.5_32b.sh",
                             **slurm_env(tmp_path, STUB_PYTHON_EXIT=NOOP_EXIT_STATUS))
    assert proc.returncode == NOOP_EXIT_STATUS
    assert not [argv for tool, _, _, argv in calls if tool == "scontrol" and argv[:1] == ["requeue"]]


@pytest.mark.parametrize("override,key", [
    ("gtpo.health.on_noop=ignore", "gtpo.health.on_noop"),
    ("gtpo.health.window=0", "gtpo.health.window"),
    ("gtpo.health.noop_share=0", "gtpo.health.noop_share"),
    ("gtpo.health.noop_share=1.5", "gtpo.health.noop_share"),
])
def test_bad_health_settings_are_one_clear_error(override, key):
    from gtpo_verl.plugin.config import ConfigError
    from gtpo_verl.trainer.settings import GTPOSettings

    with pytest.raises(ConfigError) as error:
        GTPOSettings.from_config(compose_config(override))
    assert key in str(error.value) and "\n" not in str(error.value).strip()
