"""The endpoints that cannot reward not learning, the reporting of excluded pairs and the null-twin rule, on
hand-made runs whose expected values are worked out by hand in the comments (not by the code under test)."""

import dataclasses
import math

import pytest

from gtpo_verl.lab.methods import METHODS
from gtpo_verl.lab.verdicts import PRIMARY_CLAIMS, Claim, endpoints, score_claims, verdicts


def _run(method, seed, pass1, entropy, task="t", extra=None):
    """A run with validations every 25 steps (pass@1 as given; pass@4/8/16 from ``extra`` or fixed) and per-step entropy."""
    validation = []
    for i, p in enumerate(pass1):
        v = {"step": 25 * i, "pass@1": p, "pass@4": 0.5, "pass@8": 0.6, "pass@16": 0.9}
        v.update((extra or {}).get(i, {}))
        validation.append(v)
    return {"method": method, "task": task, "seed": seed, "validation": validation,
            "curves": {"entropy": list(entropy), "length": [6.0] * len(entropy)}}


def test_drawdown_after_learning_counts_only_from_the_first_learned_validation():
    # P0 = 0.2, so learned means pass@1 >= 0.3. Before learning pass@1 falls 0.2 -> 0.12 (0.08), which the
    # whole-run drawdown counts; from the first learned validation (0.35, step 75) the largest fall is 0.35 -> 0.34
    e = endpoints(_run("M", 0, [0.2, 0.15, 0.12, 0.35, 0.34], [1.0] * 10))
    assert e["drawdown"] == pytest.approx(0.08) and e["drawdown_after_learning"] == pytest.approx(0.01)
    assert e["learned_at_step"] == 75
    # after learning: running max 0.5 at step 50, lowest later value 0.3 -> 0.2
    e = endpoints(_run("M", 0, [0.2, 0.35, 0.5, 0.4, 0.45, 0.3, 0.32], [1.0] * 10))
    assert e["drawdown_after_learning"] == pytest.approx(0.2) and e["learned_at_step"] == 25
    # exactly P0 + 0.1 counts as learned (0.2 + 0.1 is 0.30000000000000004 in floating point): fall 0.3 -> 0.1
    e = endpoints(_run("M", 0, [0.2, 0.3, 0.1], [1.0] * 10))
    assert e["drawdown_after_learning"] == pytest.approx(0.2) and e["learned_at_step"] == 25


def test_a_run_that_never_learns_has_no_steadiness_value():
    # the best pass@1 is 0.29 < 0.3: never learned; its whole-run drawdown (0.29 -> 0.1 = 0.19) is still reported
    e = endpoints(_run("M", 0, [0.2, 0.29, 0.1], [1.0] * 10))
    assert e["drawdown_after_learning"] is None and e["learned_at_step"] is None
    assert e["drawdown"] == pytest.approx(0.19)
    # a frozen policy (the same pass@1 at every validation) has drawdown 0 but no steadiness value
    e = endpoints(_run("M", 0, [0.1] * 17, [1.4] * 400))
    assert e["drawdown"] == 0.0 and e["drawdown_after_learning"] is None


def test_entropy_peak_ratio_is_the_largest_moving_mean_over_the_first():
    from gtpo_verl.lab.verdicts import entropy_peak_ratio

    # window 2 over 1.0, 1.2, (NaN skipped) 1.5, 0.8: means 1.1, 1.35, 1.15 -> 1.35 / 1.1
    assert entropy_peak_ratio([1.0, 1.2, float("nan"), 1.5, 0.8], window=2) == pytest.approx(1.35 / 1.1)
    # window 1 is the single-step maximum over the first finite step (a leading NaN skipped): 1.2 / 0.8
    assert entropy_peak_ratio([float("nan"), 0.8, 1.2], window=1) == pytest.approx(1.5)
    # entropy that only falls: the first window is the peak, 1
    assert entropy_peak_ratio([2.0, 1.0, 0.5], window=2) == pytest.approx(1.0)
    # one noisy batch at 2.0 in a flat run at 1.0 moves the windowed peak by a tenth, not to 2.0
    assert entropy_peak_ratio([1.0] * 15 + [2.0] + [1.0] * 4, window=10) == pytest.approx(1.1)
    # a sustained rise: the last 10 of 20 steps at 1.5 -> 1.5
    assert entropy_peak_ratio([1.0] * 10 + [1.5] * 10, window=10) == pytest.approx(1.5)
    # the run's endpoint uses PEAK_WINDOW (10), capped by the steps there are: 5 steps are one window -> 1
    assert endpoints(_run("M", 0, [0.2], [1.0, 1.2, float("nan"), 1.5, 0.8]))["entropy_peak_ratio"] == pytest.approx(1.0)


def test_pass_at_4_and_8_are_the_mean_of_the_last_four_validations_where_recorded():
    # six validations; the last four have pass@8 0.6, 0.7, 0.8, 0.9 -> 0.75, and pass@4 0.5 everywhere
    extra = {2: {"pass@8": 0.6}, 3: {"pass@8": 0.7}, 4: {"pass@8": 0.8}, 5: {"pass@8": 0.9}, 0: {"pass@8": 0.1}, 1: {"pass@8": 0.1}}
    e = endpoints(_run("M", 0, [0.2] * 6, [1.0] * 10, extra=extra))
    assert e["pass@8"] == pytest.approx(0.75) and e["pass@4"] == pytest.approx(0.5)
    run = _run("M", 0, [0.2] * 6, [1.0] * 10)
    del run["validation"][-1]["pass@8"]  # a study that did not record it at its last validation
    assert "pass@8" not in endpoints(run)


def _steady_study(never_learns=(), baseline_never_learns=()):
    """GTPO_TRAJ_PAPER, GRPO and GRPO_TWIN on seeds 0-9; P0 = 0.2 for every run.

    GRPO and its twin learn (0.2 -> 0.4) and fall to 0.3: drawdown after learning 0.1. GTPO_TRAJ_PAPER learns
    (0.2 -> 0.4) and falls to 0.38: 0.02, so its effect is 0.02 - 0.1 = -0.08 on every seed and the twin's 0.
    A seed in ``never_learns`` has GTPO_TRAJ_PAPER flat at 0.2 (no value); in ``baseline_never_learns`` GRPO flat.
    """
    runs = []
    for seed in range(10):
        runs.append(_run("GTPO_TRAJ_PAPER", seed, [0.2] * 4 if seed in never_learns else [0.2, 0.4, 0.38, 0.38], [1.0] * 10))
        runs.append(_run("GRPO", seed, [0.2] * 4 if seed in baseline_never_learns else [0.2, 0.4, 0.3, 0.3], [1.0] * 10))
        runs.append(_run("GRPO_TWIN", seed, [0.2, 0.4, 0.3, 0.3], [1.0] * 10))
    return runs


def test_excluded_pairs_are_reported_with_their_reason_never_dropped():
    result = verdicts(_steady_study(never_learns=(0, 1), baseline_never_learns=(2,)))
    row = next(r for r in result["primary"] if r["id"] == "lab-A-steady-once-learned")
    assert row["seeds"] == 7 and row["paired_seeds"] == [3, 4, 5, 6, 7, 8, 9] and row["excluded_pairs"] == 3
    assert [e["seed"] for e in row["excluded"]] == [0, 1, 2]
    assert all("GTPO_TRAJ_PAPER: never reached" in e["reason"] for e in row["excluded"][:2])
    assert row["excluded"][2]["reason"].startswith("GRPO: never reached")
    # the continuous collapse endpoint has a value on every seed: nothing excluded there
    collapse = next(r for r in result["primary"] if r["id"] == "lab-A-entropy-peak")
    assert collapse["seeds"] == 10 and collapse["excluded_pairs"] == 0
    # every pair excluded (a method that never learns): the row stays, with no pairs and no verdict
    row = next(r for r in verdicts(_steady_study(never_learns=range(10)))["primary"] if r["id"] == "lab-A-steady-once-learned")
    assert row["seeds"] == 0 and row["excluded_pairs"] == 10 and row["verdict"] == "no pairs"


def test_the_twin_rule_on_runs():
    # effect -0.08 on all 10 seeds, twin 0: exact one-sided Wilcoxon p = 1/2^10, Holm over Paper A's two rows
    # (lab-A-entropy-peak, lab-A-steady-once-learned; lab-A-entropy-peak's p is 1 with every peak ratio 1) gives 2/1024 < 0.05: supported
    row = next(r for r in verdicts(_steady_study())["primary"] if r["id"] == "lab-A-steady-once-learned")
    assert row["mean_difference"] == pytest.approx(-0.08) and row["twin"] == "GRPO_TWIN"
    assert row["twin_mean_difference"] == pytest.approx(0.0) and row["twin_seeds"] == 10
    assert row["p"] == pytest.approx(1 / 1024) and row["p_holm"] == pytest.approx(2 / 1024) and row["verdict"] == "supported"
    assert row["p_holm_opposite"] == pytest.approx(1.0)  # 10 of 10 seeds lower: the opposite tail is certain
    # the twin moved exactly as far as the method (both fall to 0.38): the same effect is not scored, however small its p
    runs = [dict(r, validation=[dict(v, **{"pass@1": p}) for v, p in zip(r["validation"], [0.2, 0.4, 0.38, 0.38])])
            if r["method"] == "GRPO_TWIN" else r for r in _steady_study()]
    row = next(r for r in verdicts(runs)["primary"] if r["id"] == "lab-A-steady-once-learned")
    assert row["twin_mean_difference"] == pytest.approx(row["mean_difference"]) == pytest.approx(-0.08)
    assert row["p_holm"] < 0.05 and row["verdict"] == "not above the null twin"
    # no twin run: not scored either
    row = next(r for r in verdicts([r for r in _steady_study() if r["method"] != "GRPO_TWIN"])["primary"] if r["id"] == "lab-A-steady-once-learned")
    assert row["twin_mean_difference"] is None and row["verdict"] == "no null twin"


def _table(method_values, baseline_values, twin_values):
    return {("t", "M"): {s: {"x": v} for s, v in enumerate(method_values)},
            ("t", "DAPO"): {s: {"x": v} for s, v in enumerate(baseline_values)},
            ("t", "DAPO_TWIN"): {s: {"x": v} for s, v in enumerate(twin_values)}}


@pytest.mark.parametrize("twin_values, verdict, twin_effect", [
    # effect +1.0 on every seed (one-sided p = 1/1024 < 0.05, one claim); the twin's effect is worked out per case
    ([1.0] * 10, "not above the null twin", 1.0),       # equal to the method's: not scored
    ([-1.0] * 10, "not above the null twin", -1.0),     # equal in size, opposite sign: not scored
    ([0.5] * 5 + [-0.5] * 5, "supported", 0.0),         # twin mean 0: clearly above
    ([0.9] * 10, "supported", 0.9),                     # 1.0 > 0.9: above
])
def test_the_twin_rule_compares_sizes_of_the_mean_effects(twin_values, verdict, twin_effect):
    claim = Claim("c", "B", "x rises", "M", "DAPO", "x", +1)
    row = score_claims(_table([1.0] * 10, [0.0] * 10, twin_values), ["t"], [claim])[0]
    assert row["mean_difference"] == 1.0 and row["p_holm"] == pytest.approx(1 / 1024)
    assert row["twin"] == "DAPO_TWIN" and row["twin_mean_difference"] == pytest.approx(twin_effect)
    assert row["verdict"] == verdict


def test_a_claim_against_the_data_is_contradicted_by_the_opposite_tail():
    # the claim says "rises"; every seed falls by 1 (twin 0): claimed tail p = 1, opposite tail 1/1024 < 0.05
    claim = Claim("c", "B", "x rises", "M", "DAPO", "x", +1)
    row = score_claims(_table([-1.0] * 10, [0.0] * 10, [0.0] * 10), ["t"], [claim])[0]
    assert row["p"] == pytest.approx(1.0) and row["p_holm_opposite"] == pytest.approx(1 / 1024)
    assert row["test"] == "exact one-sided Wilcoxon signed-rank" and row["verdict"] == "contradicted"


def test_above_the_twin_but_not_significant_stays_inconclusive():
    # effects +1, -1 alternating plus one +2: mean 0.2 on 10 seeds... Wilcoxon p far above 0.05; twin effect 0
    claim = Claim("c", "B", "x rises", "M", "DAPO", "x", +1)
    method = [1.0, -1.0] * 4 + [2.0, 0.0]
    row = score_claims(_table(method, [0.0] * 10, [0.0] * 10), ["t"], [claim])[0]
    assert row["mean_difference"] == pytest.approx(0.2) and row["p_holm"] > 0.05 and row["verdict"] == "inconclusive"


def test_holm_runs_within_each_papers_family():
    # three claims on the same all-positive table (exact one-sided Wilcoxon p = 1/1024 each): two of Paper B, one of
    # Paper A. Holm within each paper: B's two rows get 2·p, A's single row keeps p (pooled over three rows: 3·p)
    table = {("t", "M"): {s: {"x": 1.0} for s in range(10)}, ("t", "GRPO"): {s: {"x": 0.0} for s in range(10)},
             ("t", "DAPO"): {s: {"x": 0.0} for s in range(10)},
             ("t", "DAPO_TWIN"): {s: {"x": 0.0} for s in range(10)}, ("t", "GRPO_TWIN"): {s: {"x": 0.0} for s in range(10)}}
    claims = [Claim("b1", "B", "x rises", "M", "DAPO", "x", +1), Claim("b2", "B", "x rises", "M", "DAPO", "x", +1),
              Claim("a1", "A", "x rises", "M", "GRPO", "x", +1)]
    rows = {r["id"]: r for r in score_claims(table, ["t"], claims)}
    assert rows["b1"]["p_holm"] == rows["b2"]["p_holm"] == pytest.approx(2 / 1024)
    assert rows["a1"]["p_holm"] == pytest.approx(1 / 1024)


def test_the_row_share_arm_is_dapo_token_with_s20():
    row = METHODS["DAPO_TOKEN_ROW"]
    assert row.algorithm == {"gtpo_token": {"entropy_share": "geometric"}}
    assert dataclasses.replace(row, name="DAPO_TOKEN", algorithm={}) == METHODS["DAPO_TOKEN"]


def test_every_primary_claim_has_a_twin_and_paper_a_uses_the_new_endpoints():
    from gtpo_verl.lab.verdicts import TWINS

    assert {c.baseline for c in PRIMARY_CLAIMS} <= set(TWINS)
    assert {c.endpoint for c in PRIMARY_CLAIMS if c.paper == "A"} == {"entropy_peak_ratio", "drawdown_after_learning"}
    assert {c.method for c in PRIMARY_CLAIMS if c.paper == "A"} == {"GTPO_TRAJ_PAPER"}  # the paper preset is the primary arm


def test_the_twins_and_the_paper_preset_arm():
    # a twin is its baseline on the seed's second sampler stream, nothing else
    for base, twin in (("DAPO", "DAPO_TWIN"), ("GRPO", "GRPO_TWIN")):
        assert dataclasses.replace(METHODS[twin], name=base, sampler_stream=0) == METHODS[base] and METHODS[twin].sampler_stream == 1
    paper = METHODS["GTPO_TRAJ_PAPER"]
    assert paper.algorithm == {"gtpo_traj": {"preset": "paper"}}
    assert dataclasses.replace(paper, name="GTPO_TRAJ", algorithm={"gtpo_traj": {"preset": "official"}}) == METHODS["GTPO_TRAJ"]


def test_the_paper_preset_arm_trains_in_the_lab():
    from gtpo_verl.lab.tasks import TASKS
    from gtpo_verl.lab.train import LabSize, train_run, warm_start

    size = LabSize(steps=2, prompts=2, group=4, eval_every=2, eval_prompts=4, eval_samples=4, warm_start_steps=3, warm_start_batch=8)
    task = TASKS["max_digit"]
    run = train_run(METHODS["GTPO_TRAJ_PAPER"], task, 0, size, warm_start(task, 0, size))
    assert len(run["curves"]["entropy"]) == 2 and [v["step"] for v in run["validation"]] == [0, 2]
    # after 3 warm-start steps ⟨H⟩_ini is far above ln 2: the paper's gate sets δ ≡ 1, nothing is filtered
    assert run["initial_entropy"] > math.log(2)
    assert all(f == 0.0 for f in run["curves"]["delta_filtered_frac"] if f == f)
