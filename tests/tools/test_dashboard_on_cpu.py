"""The dashboard as code: builds the wandb workspace offline (wandb-workspaces, no login) and
checks that every panel's metric is one a real CPU run logged.

The names come from tests/fixtures/cpu_run_metrics/*.jsonl, verl's file-logger output of
real CPU runs of ``python -m gtpo_verl.main --config-name gtpo_trainer_cpu`` (the CPU demo's tiny
Qwen2 on a largest-digit task, 16 validation samples a prompt: DAPO_SEQ and GTPO_TRAJ, seed 0,
2 steps at lr 1e-3; GTPO_TRAJ, seed 1, 20 steps of two mini-batches; DAPO_ENTROPY_ADV, seed 0,
4 steps; DAPO_HIGH_ENTROPY, seeds 0 and 1, 2 steps) and tests/fixtures/lm_run_metrics/*.jsonl (the real LM:
a DAPO_TOKEN run of the study, GTPO_TRAJ stopped by gtpo.health), not from a list written by hand. Metrics a CPU run cannot produce
(``dashboard.NOT_ON_CPU``: dynamic sampling, accelerator memory, the paper preset's gate) must
at least be string literals in verl's or gtpo_verl's source.
"""

import glob
import json
import os
import re

import pytest
from support.paths import FIXTURES

pytest.importorskip("wandb_workspaces", reason='the dashboard extra is not installed (pip install -e ".[dashboard]")')

from gtpo_verl.tools import dashboard  # noqa: E402

RUN_METRICS = str(FIXTURES / "cpu_run_metrics")
# the real LM (SmolLM2-135M, docs/real_lm.md) through the same pipeline: a DAPO_TOKEN run of the study and
# GTPO_TRAJ at δ = 0.7 stopped by gtpo.health, both logging every gtpo/health/* and entropy-watch metric
LM_RUN_METRICS = str(FIXTURES / "lm_run_metrics")
DATA_SOURCE, VAL_N = "gtpo_study/max_digit", 16  # the fixture runs' validation set


def logged_names() -> set[str]:
    names = set()
    for path in glob.glob(os.path.join(RUN_METRICS, "*.jsonl")) + glob.glob(os.path.join(LM_RUN_METRICS, "*.jsonl")):
        with open(path) as f:
            for line in f:
                names.update(json.loads(line)["data"])
    assert names, f"no metrics files in {RUN_METRICS}"
    return names


def workspace_metrics(workspace) -> set[str]:
    metrics = set()
    for section in workspace.sections:
        for panel in section.panels:
            assert panel.x == workspace.settings.x_axis == "Step"  # wandb's step = verl's global step
            metrics.update(panel.y)
    return metrics


def source_literals() -> str:
    import verl

    import gtpo_verl

    text = []
    for package in (verl, gtpo_verl):
        for path in glob.glob(os.path.join(os.path.dirname(package.__file__), "**", "*.py"), recursive=True):
            with open(path, encoding="utf-8") as f:
                text.append(f.read())
    return "\n".join(text)


def test_every_panel_metric_is_logged_by_a_real_cpu_run():
    workspace = dashboard.build_workspace("entity", "project", DATA_SOURCE, VAL_N, runs=["DAPO_SEQ_seed0"])
    metrics = workspace_metrics(workspace)
    logged = logged_names()
    missing = sorted(metrics - logged - set(dashboard.NOT_ON_CPU))
    assert not missing, f"panels plot metrics no CPU run logged: {missing}"
    # the unbiased pass@k and verl's bootstrap best@N are both on the dashboard, and both logged
    for name in ("val-gtpo/gtpo_study/max_digit/pass@1", "val-gtpo/gtpo_study/max_digit/pass@16",
                 "val-gtpo/gtpo_study/max_digit/maj@16", "val-core/gtpo_study/max_digit/acc/best@16/mean"):
        assert name in metrics and name in logged
    # the workspace serialises (what .save() sends) without a wandb login
    wire = workspace._to_model().model_dump_json()
    assert "val-gtpo/gtpo_study/max_digit/pass@16" in wire and "DAPO_SEQ_seed0" in wire


def test_metrics_a_cpu_run_cannot_log_are_real_names_in_the_source():
    literals = source_literals()
    for name, reason in dashboard.NOT_ON_CPU.items():
        assert reason
        suffix = name.split("/", 1)[1]
        assert re.search(r"[\"'](%s|%s)[\"']" % (re.escape(name), re.escape(suffix)), literals), name


def test_panels_follow_the_validation_grid():
    names = [m for _, _, metrics in dashboard.panel_metrics("math_dapo", 32) for m in metrics]
    assert "val-gtpo/math_dapo/pass@32" in names and "val-aux/math_dapo/reward/best@16/mean" in names
    assert [m for m in names if m.startswith("val-gtpo/math_dapo/pass@")] == [
        f"val-gtpo/math_dapo/pass@{k}" for k in (32, 1, 2, 4, 8, 16, 32)
    ]
    with pytest.raises(ValueError, match="--val-n"):
        dashboard.panel_metrics("math_dapo", 1)
