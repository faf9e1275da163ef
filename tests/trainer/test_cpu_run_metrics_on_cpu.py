"""Real CPU runs' metrics files (tests/fixtures/cpu_run_metrics/: the CPU demo's tiny Qwen2 on the
largest-digit task, 16 validation samples a prompt, through ``python -m gtpo_verl.main``): gtpo_verl's
validation metrics agree with verl's, and the per-step δ and clip metrics are what the runs logged."""

import os

import pytest
from support.paths import FIXTURES

from gtpo_verl.algorithms.pass_at_k import pass_ks
from gtpo_verl.trainer.metrics_file import read_metrics_file

RUN_METRICS = str(FIXTURES / "cpu_run_metrics")
DATA_SOURCE, VAL_N = "gtpo_study/max_digit", 16


def steps_of(name: str) -> dict[int, dict]:
    return read_metrics_file(os.path.join(RUN_METRICS, name)).steps


def test_validation_pass_at_k_agrees_with_verls_metrics_on_real_runs():
    names = sorted(p for p in os.listdir(RUN_METRICS) if p.endswith(".jsonl"))
    assert names
    mean, best = f"val-core/{DATA_SOURCE}/acc/mean@{VAL_N}", f"val-core/{DATA_SOURCE}/acc/best@{VAL_N}/mean"
    for name in names:
        rows = steps_of(name)
        validated = sorted(step for step, row in rows.items() if mean in row)
        assert validated[0] == 0 and len(validated) >= 2, name  # before training, then at the end
        for step in validated:
            row = rows[step]
            keys = [mean, best, *(f"val-gtpo/{DATA_SOURCE}/pass@{k}" for k in pass_ks(VAL_N)), f"val-gtpo/{DATA_SOURCE}/maj@{VAL_N}"]
            assert all(isinstance(row[k], float) and 0 <= row[k] <= 1 for k in keys), (name, step)
            # pass@1 is the mean success rate: the same number as verl's acc mean@16
            assert row[f"val-gtpo/{DATA_SOURCE}/pass@1"] == pytest.approx(row[mean])
            assert row[f"val-gtpo/{DATA_SOURCE}/pass@{VAL_N}"] >= row[best] - 1e-9  # unbiased ≥ verl's bootstrap
        trained = [row for row in rows.values() if "timing_s/step" in row]
        assert trained and all(isinstance(row["critic/score/mean"], float) and isinstance(row["actor/entropy"], float)
                               for row in trained)


def test_delta_filter_and_clip_fractions_of_one_optimiser_step_per_step():
    """One mini-batch per step: every update is made at the policy that sampled the batch, so the
    importance ratio is 1 and no clip acts; gtpo_traj logs δ's filtered share, grpo_s does not."""
    traj = [row for _, row in sorted(steps_of("GTPO_TRAJ_seed0.jsonl").items()) if "timing_s/step" in row]
    seq = [row for _, row in sorted(steps_of("DAPO_SEQ_seed0.jsonl").items()) if "timing_s/step" in row]
    assert [row["gtpo/delta/filtered_frac"] for row in traj] == pytest.approx([0.984375, 0.921875])
    assert not any("gtpo/delta/filtered_frac" in row for row in seq)
    for rows in (traj, seq):
        assert len(rows) == 2
        assert [row["actor/pg_clipfrac"] for row in rows] == [0.0, 0.0]
        assert [row["actor/pg_clipfrac_lower"] for row in rows] == [0.0, 0.0]
        assert all(isinstance(row["gtpo/entropy/batch_mean"], float) for row in rows)
