"""The estimators run their CPU passes on one thread, capped for the calling thread only.

With a busy neighbour process every multi-threaded parallel region waits for a descheduled
thread; ``plugin.threads.one_cpu_thread`` caps the calling thread's OpenMP team inside a
``with`` block, and the plugin's verl adapters run every estimator in one. These tests check the
cap is real (torch sees one thread inside), scoped (restored after, also on error), thread-local
(another Python thread keeps its count), CPU-only, and applied by the plugin, not by the math.
"""

import sys
import threading

import pytest
import torch

from support.torch_threads import torch_threads

from gtpo_verl.plugin import threads as cpu_threads
from gtpo_verl.algorithms.kernels.gtpo_token import gtpo_token_advantage
from gtpo_verl.plugin.threads import one_cpu_thread
from gtpo_verl.algorithms.sequence_shaping import grpo_s_advantage
from gtpo_verl.algorithms.trajectory import gtpo_traj_advantage


@pytest.fixture
def two_threads():
    with torch_threads(2):
        yield


def _threads_inside(tensor, fail=False):
    with one_cpu_thread(tensor):
        count = torch.get_num_threads()
        if fail:
            raise RuntimeError("boom")
    return count


def test_torch_builds_ship_an_openmp_runtime_that_is_found():
    if not sys.platform.startswith("linux"):
        pytest.skip("the runtime is found through /proc/self/maps")
    assert cpu_threads.openmp_runtime() is not None


def test_cap_holds_inside_the_call_and_is_restored_after_also_on_error(two_threads):
    assert _threads_inside(torch.zeros(3)) == 1
    assert torch.get_num_threads() == 2
    with pytest.raises(RuntimeError, match="boom"):
        _threads_inside(torch.zeros(3), fail=True)
    assert torch.get_num_threads() == 2


def test_cap_applies_to_cpu_tensors_only(two_threads):
    assert _threads_inside(torch.zeros(3, device="meta")) == 2
    assert _threads_inside("not a tensor") == 2


def test_cap_is_local_to_the_calling_thread(two_threads):
    inside, seen = threading.Event(), threading.Event()
    other = {}

    def hold(tensor):
        with one_cpu_thread(tensor):
            inside.set()
            assert seen.wait(30)
            return torch.get_num_threads()

    def neighbour():
        assert inside.wait(30)
        other["count"] = torch.get_num_threads()  # a thread initialised from torch's setting: 2
        seen.set()

    thread = threading.Thread(target=neighbour)
    thread.start()
    assert hold(torch.zeros(1)) == 1
    thread.join()
    assert other["count"] == 2
    assert torch.get_num_threads() == 2


def _batch(rows=16, width=12, groups=4, seed=0):
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, width + 1, (rows,), generator=gen)
    mask = (torch.arange(width) < lengths.unsqueeze(1)).to(torch.int64)
    entropy = torch.rand(rows, width, generator=gen) * mask
    scores = (torch.rand(rows, generator=gen) < 0.5).float()
    group_ids = torch.arange(rows) % groups
    responses = torch.randint(1, 50, (rows, width), generator=gen) * mask
    return entropy, mask, scores, group_ids, groups, responses


def _spied_thread_counts(monkeypatch):
    seen = []
    real_where = torch.where

    def spy_where(*args, **kwargs):  # every estimator calls torch.where inside its passes
        seen.append(torch.get_num_threads())
        return real_where(*args, **kwargs)

    monkeypatch.setattr(torch, "where", spy_where)
    return seen


def test_every_registered_estimator_runs_on_one_thread_and_leaves_the_count_alone(two_threads, monkeypatch):
    """The cap is the plugin's (its verl adapters), called with keyword arguments as verl calls them."""
    import numpy as np
    from verl.trainer.ppo.core_algos import get_adv_estimator_fn

    from gtpo_verl.plugin.estimators import ESTIMATORS

    entropy, mask, scores, group_ids, k, responses = _batch()
    rewards = torch.zeros(mask.shape)
    rewards[:, 0] = scores
    uids = np.array([f"u{int(g)}" for g in group_ids], dtype=object)
    seen = _spied_thread_counts(monkeypatch)
    for name in ESTIMATORS:
        seen.clear()
        get_adv_estimator_fn(name)(token_level_rewards=rewards, response_mask=mask, index=uids, config=None,
                                   entropys=entropy, responses=responses)
        assert seen and set(seen) == {1}, name
        assert torch.get_num_threads() == 2, name


def test_every_registered_transform_runs_on_one_thread_and_leaves_the_count_alone(two_threads, monkeypatch):
    import dataclasses

    import gtpo_verl.plugin.registry  # noqa: F401  (registers the built-in transforms)
    from gtpo_verl.plugin import extensions

    entropy, mask, scores, group_ids, k, responses = _batch()
    advantages = torch.randn(mask.shape) * mask
    seen = []
    for name, transform in extensions.registered_transforms().items():

        def spy(*args, _real=transform.fn, **kwargs):
            seen.append(torch.get_num_threads())
            return _real(*args, **kwargs)

        monkeypatch.setitem(extensions._TRANSFORMS, name, dataclasses.replace(transform, fn=spy))
    names = sorted(extensions.registered_transforms())
    transforms = extensions.parse_adv_transforms([{"name": name} for name in names])
    extensions.apply_adv_transforms(transforms, advantages, mask, {"entropys": entropy})
    assert seen == [1] * len(names) and len(names) >= 2
    assert torch.get_num_threads() == 2


def test_the_pure_functions_leave_the_thread_policy_to_their_caller(two_threads, monkeypatch):
    """The math layer sets no thread count: called directly, the estimators run with the caller's."""
    entropy, mask, scores, group_ids, k, responses = _batch()
    seen = _spied_thread_counts(monkeypatch)
    calls = {
        "gtpo_token": lambda: gtpo_token_advantage(mask, scores, group_ids, k, entropy=entropy, alpha1=1.0, alpha2=0.1),
        "grpo_s": lambda: grpo_s_advantage(mask, scores, group_ids, k, entropy=entropy, beta1=1.0, beta2=0.1),
        "gtpo_traj": lambda: gtpo_traj_advantage(mask, scores, group_ids, k, responses=responses, entropy=entropy),
    }
    for name, call in calls.items():
        seen.clear()
        call()
        assert seen and set(seen) == {2}, name
