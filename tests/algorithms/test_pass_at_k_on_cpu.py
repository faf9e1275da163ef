"""Unbiased pass@k / maj@n (gtpo_verl.algorithms.pass_at_k) against brute-force enumeration, and the
trainer mixin's validation hook through verl 0.9.1's real ``_val_metrics_update``."""

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest

from gtpo_verl.algorithms.pass_at_k import majority_success, pass_at_k, pass_at_k_per_problem, pass_ks
from gtpo_verl.trainer.validation_metrics import validation_metrics


def brute_force_pass_at_k(outcomes: list[int], k: int) -> Fraction:
    """Exact fraction of the k-subsets (without replacement) that contain a success."""
    subsets = list(itertools.combinations(range(len(outcomes)), k))
    hits = sum(any(outcomes[i] for i in subset) for subset in subsets)
    return Fraction(hits, len(subsets))


@pytest.mark.parametrize("n", range(1, 9))
def test_pass_at_k_equals_enumeration_of_all_subsets(n):
    for c in range(n + 1):
        outcomes = [1] * c + [0] * (n - c)
        for k in range(1, n + 1):
            expected = brute_force_pass_at_k(outcomes, k)
            assert pass_at_k(n, c, k) == pytest.approx(float(expected), abs=1e-12), (n, c, k)


def test_pass_at_k_averages_problems_and_matches_closed_form_at_large_n():
    rng = np.random.default_rng(0)
    n = rng.integers(16, 200, size=50)
    c = rng.integers(0, n + 1)
    for k in (1, 2, 4, 16):
        exact = [1 - math.comb(int(a - b), k) / math.comb(int(a), k) for a, b in zip(n, c)]
        assert pass_at_k_per_problem(n, c, k) == pytest.approx(exact, abs=1e-12)
        assert pass_at_k(n, c, k) == pytest.approx(np.mean(exact), abs=1e-12)
    # pass@1 is the plain success rate; huge n stays finite (no C(n, k) overflow)
    assert pass_at_k(n, c, 1) == pytest.approx(np.mean(c / n), abs=1e-12)
    assert np.isfinite(pass_at_k([100_000], [3], 50_000))


def test_pass_at_k_rejects_bad_counts():
    with pytest.raises(ValueError, match="k <= num_samples"):
        pass_at_k([4, 2], [1, 1], 3)
    with pytest.raises(ValueError, match="num_correct <= num_samples"):
        pass_at_k([4], [5], 1)
    with pytest.raises(ValueError, match="equal-length"):
        pass_at_k([4, 4], [1], 1)
    with pytest.raises(ValueError, match="empty"):
        pass_at_k([], [], 1)


def test_pass_ks_is_powers_of_two_then_n():
    assert pass_ks(16) == [1, 2, 4, 8, 16]
    assert pass_ks(12) == [1, 2, 4, 8, 12]
    assert pass_ks(2) == [1, 2]


def test_majority_vote_ties_go_to_the_first_answer_like_verl():
    from verl.trainer.ppo.metric_utils import calc_maj_val

    rng = np.random.default_rng(1)
    problem = np.repeat(np.arange(40), 6)
    answers = [str(a) for a in rng.integers(0, 3, size=problem.size)]
    values = rng.integers(0, 2, size=problem.size).astype(float)
    ours = majority_success(problem, answers, values, 40)
    for p in range(40):
        rows = np.flatnonzero(problem == p)
        reference = calc_maj_val([{"pred": answers[i], "val": values[i]} for i in rows], "pred", "val")
        assert ours[p] == reference


def _validation_inputs(correct_per_problem, n, source="toy"):
    uids, sources, acc, preds = [], [], [], []
    for p, c in enumerate(correct_per_problem):
        for i in range(n):
            uids.append(f"u{p}")
            sources.append(source)
            acc.append(float(i < c))
            preds.append("right" if i < c else f"wrong{i % 3}")
    return sources, uids, {"reward": [2 * a - 1 for a in acc], "acc": acc, "pred": preds}


def test_validation_metrics_unbiased_where_verls_bootstrap_is_biased_low():
    """n = 32 with 1, 2, 4 correct: pass@32 = 1; verl's best@32 ≈ 1 - (1 - c/32)^32 (issue example)."""
    from verl.trainer.ppo.metric_utils import process_validation_metrics

    sources, uids, infos = _validation_inputs([1, 2, 4], 32)
    ours = validation_metrics(sources, uids, infos)
    assert sorted(ours) == sorted(
        [f"val-gtpo/toy/pass@{k}" for k in (1, 2, 4, 8, 16, 32)] + ["val-gtpo/toy/maj@32"]
    )
    assert ours["val-gtpo/toy/pass@32"] == 1.0
    assert ours["val-gtpo/toy/pass@1"] == pytest.approx((1 + 2 + 4) / 96)
    assert ours["val-gtpo/toy/maj@32"] == 0.0  # each of the 3 wrong answers is given ≥ 9 times
    verl = process_validation_metrics(sources, uids, infos)["toy"]["acc"]["best@32/mean"]
    biased = np.mean([1 - (1 - c / 32) ** 32 for c in (1, 2, 4)])
    assert verl == pytest.approx(biased, abs=0.03)  # bootstrap of 1000 draws
    assert verl < 0.85


def test_validation_metrics_counts_missing_sessions_as_failures_and_uses_reward_without_acc():
    sources, uids, infos = _validation_inputs([2, 3], 4)
    # a session that never reached the reward: verl pads acc with 0 up to the expected count
    expected = {("toy", "u0"): 5, ("toy", "u1"): 5}
    ours = validation_metrics(sources, uids, infos, expected_counts=expected)
    assert ours["val-gtpo/toy/pass@1"] == pytest.approx((2 / 5 + 3 / 5) / 2)
    assert ours["val-gtpo/toy/pass@4"] == pytest.approx(pass_at_k([5, 5], [2, 3], 4))
    no_acc = {"reward": infos["reward"]}
    reward_only = validation_metrics(sources, uids, no_acc)
    assert reward_only["val-gtpo/toy/pass@1"] == pytest.approx((2 / 4 + 3 / 4) / 2)
    assert "val-gtpo/toy/maj@4" not in reward_only  # no pred, no vote
    assert validation_metrics(["toy"], ["u0"], {"reward": [1.0]}) == {}  # n = 1: nothing to add


def test_mixin_adds_pass_at_k_next_to_verls_real_validation_metrics():
    """The hook runs verl's own ``_val_metrics_update`` (PPOTrainerSync) and adds ours; disable works."""
    from omegaconf import OmegaConf
    from verl.trainer.ppo.v1 import PPOTrainerSync

    from gtpo_verl.trainer.mixin import gtpo_trainer_class

    sources, uids, infos = _validation_inputs([0, 1, 3, 4], 4, source="gtpo_cpu_demo/even_digit")
    expected = {("gtpo_cpu_demo/even_digit", f"u{p}"): 4 for p in range(4)}
    trainer = object.__new__(gtpo_trainer_class(PPOTrainerSync))
    trainer.config = OmegaConf.create({"gtpo": {"validation_metrics": {"enable": True, "success_threshold": 0.0}}})
    metrics = trainer._val_metrics_update(sources, uids, infos, [1] * len(uids), expected_acc_counts=expected)
    verl_only = object.__new__(PPOTrainerSync)._val_metrics_update(
        sources, uids, infos, [1] * len(uids), expected_acc_counts=expected
    )
    assert {k: v for k, v in metrics.items() if not k.startswith("val-gtpo/")} == verl_only
    assert "val-core/gtpo_cpu_demo/even_digit/acc/best@4/mean" in metrics
    src = "val-gtpo/gtpo_cpu_demo/even_digit/"
    assert metrics[src + "pass@1"] == pytest.approx(8 / 16)
    assert metrics[src + "pass@2"] == pytest.approx(np.mean([0, 1 - 3 / 6, 1, 1]))
    assert metrics[src + "pass@4"] == pytest.approx(0.75)
    assert metrics[src + "maj@4"] == pytest.approx(0.75)  # c = 1: a 4-way tie goes to the first answer, right
    trainer.config = OmegaConf.create({"gtpo": {"validation_metrics": {"enable": False}}})
    assert trainer._val_metrics_update(sources, uids, infos, [1] * len(uids), expected_acc_counts=expected) == verl_only
