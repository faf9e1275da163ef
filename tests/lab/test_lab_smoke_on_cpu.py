"""``python -m gtpo_verl.lab`` end to end with very few steps: results.json has the documented schema."""

import json
import math
import os
import subprocess
import sys
from support.paths import REPO_ROOT

ROOT = str(REPO_ROOT)


def test_tiny_lab_run_writes_the_results_schema(tmp_path):
    out = tmp_path / "lab"
    cmd = [sys.executable, "-m", "gtpo_verl.lab", "--seeds", "2", "--steps", "4", "--eval-every", "2", "--methods", "DAPO,DAPO_TOKEN,GTPO_TRAJ",
           "--tasks", "max_digit", "--workers", "1", "--no-figures", "--out", str(out)]
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads((out / "results.json").read_text())
    assert results["schema"] == "gtpo_verl.lab/2"
    assert results["methods"] == ["DAPO", "DAPO_TOKEN", "GTPO_TRAJ"] and results["seeds"] == [0, 1] and results["tasks"] == ["max_digit"]
    assert {"steps", "prompts", "group", "policy", "parameters"} <= set(results["sizes"])
    # no --warm-start-steps: each task's own length, max_digit's the shared 150
    assert results["sizes"]["warm_start_steps"] is None and results["sizes"]["warm_start_steps_by_task"] == {"max_digit": 150}
    assert len(results["runs"]) == 6
    for run in results["runs"]:
        for key in ("reward", "entropy", "length", "clipfrac", "all_equal_frac", "delta_filtered_frac", "bonus_clipped_frac"):
            assert len(run["curves"][key]) == 4
        assert [v["step"] for v in run["validation"]] == [0, 2, 4]
        for v in run["validation"]:
            assert {"pass@1", "pass@2", "pass@4", "pass@8", "pass@16", "maj@16", "distinct_answers"} <= set(v)
            assert 0.0 <= v["pass@1"] <= v["pass@16"] <= 1.0
        assert run["end_state"] in ("collapsed-flat", "solved", "trap", "partial", "flat")
        assert not math.isnan(run["endpoints"]["pass@16"])
    traj = [r for r in results["runs"] if r["method"] == "GTPO_TRAJ"]
    assert all(not math.isnan(x) for r in traj for x in r["curves"]["delta_filtered_frac"])  # δ's health metric is logged
    primary = results["verdicts"]["primary"]
    assert {row["id"] for row in primary} == {"lab-B-entropy-token", "lab-B-length-token", "lab-B-pass8-token",
                                              "lab-B-pass1-token"}  # DAPO_TOKEN vs DAPO
    assert all({"test", "p", "p_holm", "ci95", "verdict", "seeds"} <= set(row) for row in primary)
    assert {"silent_terms", "entropy_watch"} <= set(results["health"])
    assert (out / "table.md").read_text().startswith("### max_digit")
