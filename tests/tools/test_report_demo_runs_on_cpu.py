"""gtpo-report on two real CPU-demo run folders (tests/fixtures/cpu_demo_runs/, copied from
``make demo``: DAPO_TOKEN, and GTPO_TRAJ relaunched from its step-10 checkpoint), each with its
metrics files, Hydra's saved config, verl's validation samples and the driver's Hydra log.

The pass@k recomputed from the samples equals the pass@k the trainer logged at the same
validation: two independent paths through the same definition, on real dumps."""

import json
import math

import pytest
from support.paths import FIXTURES

from gtpo_verl.tools.report import load_runs
from gtpo_verl.tools.report.context import key_settings
from gtpo_verl.tools.report.page import config_diff

DEMO_RUNS = FIXTURES / "cpu_demo_runs"
SOURCE = "gtpo_cpu_demo/even_digit"  # the demo task's data_source; validation n = 4


@pytest.fixture(scope="module")
def runs():
    return {record.name: record for record in load_runs([str(DEMO_RUNS)])}


def test_the_relaunched_run_is_one_run_of_two_files(runs):
    assert sorted(runs) == ["DAPO_TOKEN", "GTPO_TRAJ"]
    run = runs["GTPO_TRAJ"].metrics
    assert [(f.path.rsplit("/", 1)[1], f.first_step, f.last_step) for f in run.files] == [
        ("metrics_train.jsonl", 1, 10), ("metrics_resume.jsonl", 11, 12)]
    assert run.rewritten == {} and run.notes == []
    merged = {}
    for name in ("metrics_train.jsonl", "metrics_resume.jsonl"):
        for line in open(DEMO_RUNS / "GTPO_TRAJ" / name):
            row = json.loads(line)
            merged.setdefault(row["step"], {}).update(row["data"])
    for metric in ("critic/score/mean", "gtpo/entropy/initial", f"val-gtpo/{SOURCE}/pass@2"):
        steps, values = run.series(metric)
        assert dict(zip(steps.tolist(), values.tolist())) == {s: d[metric] for s, d in merged.items() if metric in d}


@pytest.mark.parametrize("name,steps", [("DAPO_TOKEN", [12]), ("GTPO_TRAJ", [10, 12])])
def test_pass_at_k_from_the_samples_equals_the_logged(runs, name, steps):
    run = runs[name].metrics
    for k in (1, 2, 4):
        got_steps, got = run.series(f"samples/{SOURCE}/pass@{k}")
        logged_steps, logged = run.series(f"val-gtpo/{SOURCE}/pass@{k}")
        assert got_steps.tolist() == logged_steps.tolist() == steps
        assert all(math.isclose(a, b, rel_tol=0, abs_tol=1e-12) for a, b in zip(got, logged)), (k, got, logged)
    assert f"samples/{SOURCE}/maj@4" not in run.values  # the demo's reward returns no `pred`


def test_config_and_start_up_warnings_come_from_the_run_folder(runs):
    token, traj = runs["DAPO_TOKEN"], runs["GTPO_TRAJ"]
    assert token.config["algorithm.adv_estimator"] == "gtpo_token"
    assert traj.config["algorithm.adv_estimator"] == "gtpo_traj"
    assert traj.config_path.endswith("GTPO_TRAJ/.hydra/config.yaml")
    settings = key_settings(traj.config)
    assert settings[0] == "algorithm.adv_estimator" and "algorithm.gtpo_traj.preset" in settings
    diff = config_diff([token.config, traj.config])
    row = diff["values"][diff["keys"].index("algorithm.adv_estimator")]
    assert row == ["gtpo_token", "gtpo_traj"]
    # the paper preset's start-up warning, logged twice (both launches), shown once; verl's platform lines not at all
    assert len(traj.log_warnings) == 1 and traj.log_warnings[0].startswith(
        "main.log: `algorithm.gtpo_traj.ini_entropy_gate` is on")
    assert token.log_warnings == () and token.warnings == () and traj.warnings == ()
