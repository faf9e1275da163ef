"""The verdict rules on synthetic runs: a trap is never Paper A's collapse, two identical methods come out
"no difference detected" at no more than the family-wise rate α, and seeds-for-power by hand."""

import math

import numpy as np
import pytest

from gtpo_verl.lab.stats import seeds_for_power, smallest_exact_p
from gtpo_verl.lab.verdicts import ALPHA, NULL_COMPARISONS, verdicts


def _run(method, seed, entropy, pass1_series, pass16):
    steps = 100
    validation = [{"step": 0, "pass@1": 0.2, "pass@16": 0.8}]
    validation += [{"step": 25 * (i + 1), "pass@1": p, "pass@16": max(p, pass16)} for i, p in enumerate(pass1_series)]
    return {"method": method, "task": "t", "seed": seed, "curves": {"entropy": [1.0] + [entropy] * (steps - 1), "length": [6.0] * steps},
            "validation": validation}


def test_a_trap_is_its_own_outcome_never_paper_as_collapse():
    runs = [_run("GRPO", s, 0.1, [0.5] * 4, 0.52) for s in range(10)]  # entropy fell onto a partial rule: trap
    runs += [_run("GTPO_TRAJ", s, 1.0, [0.2] * 4, 0.8) for s in range(10)]  # frozen: flat
    result = verdicts(runs)
    assert result["end_states"] == {"t/GRPO": {"trap": 10}, "t/GTPO_TRAJ": {"flat": 10}}
    assert all(e["trap"] == 1.0 and e["collapse"] == 0.0 for e in result["endpoints"]["t/GRPO"].values())
    # Paper A's collapse (rising entropy, falling reward) is what the indicator counts
    runs[:10] = [_run("GRPO", s, 1.5, [0.1] * 4, 0.6) for s in range(10)]
    result = verdicts(runs)
    assert result["end_states"]["t/GRPO"] == {"collapsed-flat": 10}
    assert all(e["collapse"] == 1.0 and e["trap"] == 0.0 for e in result["endpoints"]["t/GRPO"].values())


def test_identical_methods_come_out_no_difference_at_the_family_wise_rate():
    rng = np.random.default_rng(0)
    studies, flagged = 200, 0
    for _ in range(studies):
        runs = []
        for method in ("GRPO", "GRPO_TWIN"):  # every endpoint drawn from one distribution for both methods
            for seed in range(10):
                series = np.clip(rng.normal(0.4, 0.1, 4), 0, 1).tolist()
                runs.append(_run(method, seed, float(rng.choice([0.9, 1.3])) * rng.uniform(0.9, 1.1), series, 0.9))
        rows = verdicts(runs)["null"]  # GRPO's twin rows (DAPO and its twin did not run)
        assert len(rows) == sum(twin == "GRPO_TWIN" for twin, _, _ in NULL_COMPARISONS)
        # pass@8 is not recorded by these runs: its row has no pairs (every seed excluded, "not recorded")
        assert all(r["verdict"] == "no pairs" and r["excluded_pairs"] == 10 for r in rows if r["endpoint"] == "pass@8")
        flagged += any(r["verdict"] in ("higher", "lower") for r in rows)
    # Holm holds the family-wise error at α; three binomial standard deviations of slack for 200 studies
    assert flagged / studies <= ALPHA + 3 * math.sqrt(ALPHA * (1 - ALPHA) / studies)


def test_seeds_for_power_accounts_for_holm_and_the_exact_tests_floor():
    assert smallest_exact_p(10) == pytest.approx(2 / 1024) and smallest_exact_p(0) == 1.0
    # α/m = 0.05/10: the exact test needs 2/2ⁿ ≤ 0.005, n = 9, even for a constant difference
    assert seeds_for_power([0.1] * 10, family_size=10) == 9
    # one claim: ((1.959964 + 0.841621) · √2 / 1)² = 15.7 → 16 (above the exact floor of 6)
    assert seeds_for_power([0.0, 2.0], family_size=1) == 16
    # ten claims: z_{1−0.0025} = 2.807034 → ((2.807034 + 0.841621) · √2)² = 26.6 → 27
    assert seeds_for_power([0.0, 2.0], family_size=10) == 27
    assert seeds_for_power([0.5, -0.5], family_size=10) is None  # no observed effect to power for
