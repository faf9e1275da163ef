"""The study scores its claims with the lab's statistics and verdict rule (gtpo_verl/lab/), one zero rule
for both, and research/ defines no statistic of its own."""

import ast
import re

import pytest

from support.paths import REPO_ROOT


def _run(entropy: float, length: float, pass16: float) -> dict:
    """One study record (research.study.run_record's form): 10 steps, validations at steps 0 and 10."""
    steps = list(range(1, 11))
    return {
        "train": {"step": steps, "reward": [0.2] * 10, "actor_entropy": [entropy] * 10,
                  "token_mean_entropy": [entropy] * 10, "response_length": [length] * 10},
        "validation": {"step": [0, 10], "pass@1": [0.2, 0.2], "pass@16": [0.9, pass16], "maj@16": [0.2, 0.2]},
    }


def _rows(runs: dict) -> dict:
    from research import study

    return {row["id"]: row for row in study.scored_claims(runs, 16)["claims"]}


def test_eight_seeds_one_way_settle_a_claim_by_the_labs_rule():
    """8 seeds all one way: exact Wilcoxon p = 2/2⁸; Holm over the 3 DAPO_TOKEN-vs-DAPO claims scored ×3 → 0.0234 < 0.05."""
    seeds = range(8)
    runs = {
        "DAPO": {str(s): _run(0.9, 8.0, 0.8) for s in seeds},
        # entropy higher in every seed (as claimed), length lower in every seed (against), pass@16 equal
        "DAPO_TOKEN": {str(s): _run(0.9 + 0.01 * (s + 1), 8.0 - 0.1 * (s + 1), 0.8) for s in seeds},
    }
    rows = _rows(runs)
    assert set(rows) == {"B-entropy-token", "B-length-token", "B-passk-token"}  # no DAPO_SEQ / GRPO runs: skipped
    entropy, length, passk = rows["B-entropy-token"], rows["B-length-token"], rows["B-passk-token"]
    assert entropy["p"] == pytest.approx(2 / 256) and entropy["sign_test_p"] == pytest.approx(2 / 256)
    assert entropy["p_holm"] == pytest.approx(3 * 2 / 256)
    assert entropy["verdict"] == "supported" and entropy["seeds_as_claimed"] == 8
    assert length["verdict"] == "contradicted" and length["seeds_against"] == 8
    # every difference zero: nothing to test, p = 1, and no exact test could reach below 1
    assert passk["p"] == 1.0 and passk["smallest_p"] == 1.0 and passk["verdict"] == "inconclusive"
    assert passk["seeds_as_claimed"] == passk["seeds_against"] == 0


def test_study_rows_equal_the_labs_scoring_of_the_same_endpoints():
    """The study's rows are the lab's score_claims on the study's per-seed endpoints, verdicts by claim_verdict."""
    from gtpo_verl.lab.verdicts import claim_verdict, score_claims
    from research import study

    runs = {
        "DAPO": {str(s): _run(0.9 + 0.03 * (s % 3), 8.0 + 0.2 * s, 0.8) for s in range(7)},
        "DAPO_TOKEN": {str(s): _run(1.0 - 0.02 * s, 8.5 - 0.1 * s, 0.8 + 0.01 * (s % 2)) for s in range(7)},
    }
    table = {(study.TASK, m): {s: study.run_endpoints(r, 16) for s, r in seeds.items()} for m, seeds in runs.items()}
    lab_rows = score_claims(table, [study.TASK], study.study_claims(16))
    rows = study.scored_claims(runs, 16)["claims"]
    assert [r["id"] for r in rows] == [r["id"] for r in lab_rows]
    for row, lab in zip(rows, lab_rows):
        assert {k: row[k] for k in lab} == lab
        assert row["verdict"] == claim_verdict(row["p_holm"], row["mean_difference"], row["direction"])
        assert [v["difference"] for v in row["per_seed"].values()] == pytest.approx(row["per_seed_difference"], abs=1e-6)


def test_one_zero_rule_float_noise_is_a_tie():
    """A difference of 1e-15 (identical runs up to float noise) is dropped as the lab drops it: Wilcoxon on the
    two real differences (p = 2/4 = 0.5), not on three with the noise ranked smallest (p = 2/8 = 0.25)."""
    runs = {
        "DAPO": {str(s): _run(0.9, 8.0, 0.8) for s in range(3)},
        "DAPO_TOKEN": {"0": _run(0.9 + 1e-15, 8.0, 0.8), "1": _run(1.0, 8.0, 0.8), "2": _run(1.1, 8.0, 0.8)},
    }
    entropy = _rows(runs)["B-entropy-token"]
    assert entropy["seeds"] == 3 and entropy["seeds_as_claimed"] == 2 and entropy["seeds_against"] == 0
    assert entropy["p"] == pytest.approx(0.5) and entropy["smallest_p"] == pytest.approx(0.5)


def test_a_seed_without_the_endpoint_is_not_paired():
    runs = {
        "DAPO": {str(s): _run(0.9, 8.0, 0.8) for s in range(3)},
        "DAPO_TOKEN": {str(s): _run(1.0 + 0.1 * s, 8.0, 0.8) for s in range(3)},
    }
    runs["DAPO_TOKEN"]["1"]["validation"] = {"step": []}  # seed 1 never validated: no pass@16 endpoint
    rows = _rows(runs)
    assert rows["B-passk-token"]["seeds"] == 2 and rows["B-passk-token"]["paired_seeds"] == ["0", "2"]
    assert rows["B-entropy-token"]["seeds"] == 3


STATISTIC_NAMES = re.compile(r"sign_?test|wilcoxon|bootstrap|holm|verdict|p_?value|(^|_)p$|effect|mde|power|null_rate|std_gap|old_rule")


def test_research_defines_no_statistic():
    """Every test, interval, effect size and verdict rule the study uses is the lab's: none is defined in research/."""
    defined = []
    for path in sorted((REPO_ROOT / "research").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and STATISTIC_NAMES.search(node.name.lower()):
                defined.append(f"{path.name}:{node.lineno} {node.name}")
    assert defined == []
