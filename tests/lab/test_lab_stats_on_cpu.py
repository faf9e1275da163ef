"""The lab's statistics against values computed by hand, and the verdict rule on synthetic runs."""

import math

import numpy as np
import pytest

from gtpo_verl.lab.stats import (
    bootstrap_mean_ci,
    holm,
    mean_and_sample_std,
    min_detectable_effect,
    seeds_for_power,
    sign_test,
    sign_test_one_sided,
    smallest_exact_p,
    std_gap_flags,
    std_gap_null_rate,
    wilcoxon_signed_rank,
    wilcoxon_signed_rank_one_sided,
)
from gtpo_verl.lab.verdicts import end_state, verdicts


def test_sign_test_by_hand():
    # 8 positive, 1 negative, 1 tie (dropped): n = 9, k = 1 → 2·(C(9,0) + C(9,1)) / 2^9 = 20/512
    assert sign_test([1, 2, 3, 4, 5, 6, 7, 8, -1, 0]) == pytest.approx(20 / 512)
    assert sign_test([1.0] * 10) == pytest.approx(2 / 1024)
    assert sign_test([0, 0]) == 1.0
    assert sign_test([1, -1]) == 1.0  # 2·P(Bin(2, ½) ≤ 1) = 1.5, capped


def test_wilcoxon_exact_by_hand():
    # all five positive: W+ = 15 is the largest of 32 sign patterns → two-sided 2/32
    assert wilcoxon_signed_rank([1, 2, 3, 4, 5]) == pytest.approx(2 / 32)
    # [1, -2, 3, 4, 5]: W− = 2; patterns with W− ≤ 2 are {}, {1}, {2} → 3/32, two-sided 6/32
    assert wilcoxon_signed_rank([1, -2, 3, 4, 5]) == pytest.approx(6 / 32)
    assert wilcoxon_signed_rank([0.0, 0.0]) == 1.0


def test_one_sided_tests_by_hand():
    # all five positive: W+ = 15, the largest of 32 sign patterns: 1/32 upward, 32/32 downward
    assert wilcoxon_signed_rank_one_sided([1, 2, 3, 4, 5], +1) == pytest.approx(1 / 32)
    assert wilcoxon_signed_rank_one_sided([1, 2, 3, 4, 5], -1) == pytest.approx(1.0)
    # [1, -2, 3, 4, 5]: W+ = 13; patterns with W+ ≥ 13 are those with W− ≤ 2: {}, {1}, {2} → 3/32
    assert wilcoxon_signed_rank_one_sided([1, -2, 3, 4, 5], +1) == pytest.approx(3 / 32)
    assert wilcoxon_signed_rank_one_sided([-1, -2, -3], -1) == pytest.approx(1 / 8)
    # sign test: 8 positive, 1 negative, 1 tie: P(Bin(9, ½) ≥ 8) = (9 + 1) / 512; the other way P(≥ 1) = 511/512
    assert sign_test_one_sided([1, 2, 3, 4, 5, 6, 7, 8, -1, 0], +1) == pytest.approx(10 / 512)
    assert sign_test_one_sided([1, 2, 3, 4, 5, 6, 7, 8, -1, 0], -1) == pytest.approx(511 / 512)
    assert wilcoxon_signed_rank_one_sided([0.0], +1) == sign_test_one_sided([], -1) == 1.0
    assert smallest_exact_p(10, sides=1) == pytest.approx(1 / 1024)
    with pytest.raises(ValueError, match="direction"):
        wilcoxon_signed_rank_one_sided([1.0], 0)


def _enumerated_w_plus_tail(d, direction):
    """P(W+ ≥ w) (direction +1) or P(W+ ≤ w) by listing all 2ⁿ sign patterns of the average ranks (independent of
    the dynamic programme under test)."""
    import itertools

    d = [x for x in d if abs(x) > 1e-12]
    mags = sorted(abs(x) for x in d)
    rank = {m: (2 * mags.index(m) + mags.count(m) + 1) / 2 for m in mags}
    ranks = [rank[abs(x)] for x in d]
    w = sum(r for r, x in zip(ranks, d) if x > 0)
    hits = sum(1 for signs in itertools.product((0, 1), repeat=len(d))
               if (lambda s: s >= w - 1e-9 if direction > 0 else s <= w + 1e-9)(sum(r for r, b in zip(ranks, signs) if b)))
    return hits / 2 ** len(d)


@pytest.mark.parametrize("seed", range(6))
def test_one_sided_wilcoxon_equals_enumeration_with_ties(seed):
    rng = np.random.default_rng(seed)
    d = rng.integers(-4, 6, size=12).astype(float)  # integer values: tied magnitudes and zeros on purpose
    for direction in (+1, -1):
        assert wilcoxon_signed_rank_one_sided(d, direction) == pytest.approx(_enumerated_w_plus_tail(d, direction), abs=1e-12)


def test_the_exact_tests_stay_exact_at_thirty_pairs():
    # 30 positive differences: one-sided 1/2³⁰, two-sided 2/2³⁰ (a normal approximation would give about 1e-6)
    assert wilcoxon_signed_rank_one_sided(np.arange(1.0, 31.0), +1) == pytest.approx(2.0**-30, rel=1e-9)
    assert wilcoxon_signed_rank(np.arange(1.0, 31.0)) == pytest.approx(2.0**-29, rel=1e-9)


@pytest.mark.parametrize(
    "diffs, sign_p, wilcoxon_p",
    [
        ([0.1, 0.2, 0.3], 0.25, 0.25),  # 3 seeds all one way: the smallest p attainable
        ([0.1, -0.2, 0.3], 1.0, 0.75),  # W+ = 4 of 6: |W − 3| ≥ 1 in 6 of 8 sign patterns
        ([1.0, 2.0, 3.0, 4.0, 5.0, 6.0], 2 / 64, 2 / 64),  # 6 seeds: the first n below 0.05
        ([0.0, 0.1, 0.2], 0.5, 0.5),  # zeros dropped
        ([0.0, 0.0], 1.0, 1.0),
    ],
)
def test_exact_paired_tests_at_few_seeds(diffs, sign_p, wilcoxon_p):
    assert sign_test(diffs) == pytest.approx(sign_p)
    assert wilcoxon_signed_rank(diffs) == pytest.approx(wilcoxon_p)
    assert smallest_exact_p(3) == 0.25 and smallest_exact_p(6) < 0.05


def test_mean_and_sample_std():
    assert mean_and_sample_std([1.0, 2.0, 3.0]) == {"mean": 2.0, "std": 1.0, "seeds": 3}  # ddof = 1
    assert mean_and_sample_std([0.5, None, float("nan")]) == {"mean": 0.5, "std": None, "seeds": 1}


def test_std_gap_rule_flags_noise():
    """The "difference > sum of the two stds" rule (``std_gap_flags``, no verdict uses it) flags identical methods often with 3 seeds."""
    assert 0.10 < std_gap_null_rate(3, draws=50_000, ddof=0) < 0.16
    assert std_gap_flags([0.0, 0.1, 0.2], [0.5, 0.6, 0.7]) and not std_gap_flags([0.0, 0.2], [0.1, 0.3])
    assert min_detectable_effect(1.0, 3) == pytest.approx(2.8016 * (2 / 3) ** 0.5, rel=1e-3)


def test_holm_on_a_known_set():
    # sorted: 0.005·4 = 0.02, 0.01·3 = 0.03, 0.03·2 = 0.06, 0.04·1 = 0.04 → monotone 0.06
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])  # 0.5·2 = 1.0; 0.9·1 = 0.9 raised to the running max 1.0


def test_bootstrap_interval():
    assert bootstrap_mean_ci([0.2] * 10) == pytest.approx((0.2, 0.2))
    d = np.random.default_rng(0).normal(0.1, 0.05, 10)
    lo, hi = bootstrap_mean_ci(d, seed=3)
    assert lo < d.mean() < hi and (lo, hi) == bootstrap_mean_ci(d, seed=3)


def test_seeds_for_power():
    # sd 1, effect 1: ((1.959964 + 0.841621) · 1 / 1)² = 7.85 → 8
    assert seeds_for_power([0.0, 2.0], effect=1.0) == math.ceil((1.959964 + 0.841621) ** 2 * 2.0)  # sample sd of [0, 2] is √2


def _run(method, seed, entropy, pass1, pass16, task="t"):
    steps = 100
    return {"method": method, "task": task, "seed": seed,
            "curves": {"entropy": [1.0] + [entropy] * (steps - 1), "length": [8.0] * steps},
            "validation": [{"step": 0, "pass@1": 0.2, "pass@16": 0.8}] + [{"step": s, "pass@1": pass1, "pass@16": pass16} for s in (25, 50, 75, 100)]}


def test_end_state_rule():
    assert end_state(_run("m", 0, 1.5, 0.1, 0.6)) == "collapsed-flat"  # entropy ×1.5, pass@1 below its start
    assert end_state(_run("m", 0, 0.2, 0.95, 0.97)) == "solved"
    assert end_state(_run("m", 0, 0.2, 0.5, 0.52)) == "trap"
    assert end_state(_run("m", 0, 0.8, 0.4, 0.9)) == "partial"
    assert end_state(_run("m", 0, 1.0, 0.2, 0.8)) == "flat"


def test_verdicts_follow_the_rule():
    runs = [_run("DAPO", s, 0.8, 0.4, 0.9) for s in range(10)]
    runs += [_run("DAPO_TWIN", s, 0.8, 0.4, 0.9) for s in range(10)]  # DAPO's null twin, identical here: effect 0
    runs += [_run("DAPO_TOKEN", s, 0.9 + 0.01 * s, 0.4, 0.9) for s in range(10)]  # entropy higher on every seed
    result = verdicts(runs)
    rows = {r["id"]: r for r in result["primary"]}
    assert set(rows) == {"lab-B-entropy-token", "lab-B-length-token", "lab-B-pass8-token", "lab-B-pass1-token"}
    # exact one-sided Wilcoxon, 10 of 10 positive: 1/1024 (two-sided 2/1024); Holm over Paper B's four claims: ×4
    assert rows["lab-B-entropy-token"]["p"] == pytest.approx(1 / 1024)
    assert rows["lab-B-entropy-token"]["p_two_sided"] == pytest.approx(2 / 1024)
    assert rows["lab-B-entropy-token"]["p_holm"] == pytest.approx(4 / 1024)
    assert rows["lab-B-pass1-token"]["verdict"] == "not above the null twin"  # the same pass@1 everywhere: effect 0
    assert rows["lab-B-entropy-token"]["verdict"] == "supported"  # and above the twin's effect, 0
    assert rows["lab-B-length-token"]["verdict"] == "not above the null twin"  # identical lengths: effect 0, the twin's 0
    assert rows["lab-B-pass8-token"]["verdict"] == "no pairs"  # these runs record no pass@8: every seed excluded, reported
    assert rows["lab-B-pass8-token"]["excluded_pairs"] == 10
    assert result["end_states"]["t/DAPO"] == {"partial": 10}
