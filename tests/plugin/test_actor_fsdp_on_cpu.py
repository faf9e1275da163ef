"""verl's real actor update on CPU: TrainingWorker → FSDP2 engine (gloo) → verl's ppo_loss →
our `grpo_s` loss, and Paper A's differentiable entropy regulariser through verl's own
entropy term. The scenario runs in a fresh process (tests/plugin/actor_update_script.py), because
it selects verl's CPU platform and a torch.distributed group for the whole process."""

import json
import math
import os
import subprocess
import sys

import pytest
from support.paths import REPO_ROOT

SCRIPT = os.path.join(os.path.dirname(__file__), "actor_update_script.py")


@pytest.fixture(scope="module")
def report():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT / "tests"), os.environ.get("PYTHONPATH")]))}
    out = subprocess.run([sys.executable, SCRIPT], capture_output=True, text=True, timeout=900, env=env)
    lines = [line for line in out.stdout.splitlines() if line.startswith("REPORT ")]
    assert out.returncode == 0 and lines, out.stdout[-3000:] + out.stderr[-3000:]
    return json.loads(lines[-1][len("REPORT ") :])


def test_real_fsdp2_engine_runs_our_loss_config(report):
    assert report["engine"] == "FSDPEngineWithLMHead"
    assert report["policy_loss_config"] == "GTPOPolicyLossConfig"
    assert report["grpo_s_warnings"] == [] and report["traj_warnings"] == []


def test_grpo_s_loss_drives_the_update(report):
    metrics = report["grpo_s_metrics"]
    assert "actor/seq_ratio_mean" in metrics  # emitted only by our grpo_s loss
    assert all(math.isfinite(v) for values in metrics.values() for v in values)
    assert metrics["grad_norm"][0] > 0
    assert report["grpo_s_surrogate_gain"] > 0  # one step raised (1/G) Σ Â_i ŵ_i


def test_differentiable_entropy_regulariser_uses_current_entropy_with_global_normalisation(report):
    assert report["traj_entropy_coeff"] == pytest.approx(-0.5)  # −γ, set by derive_config
    # verl summed the two micro-batches' agg_loss parts into the mini-batch's seq-mean-token-mean
    assert report["traj_metrics"]["actor/entropy_loss"][0] == pytest.approx(report["entropy_seq_mean_before"], rel=1e-4)
    assert report["entropy_after"] < report["entropy_before"]  # zero advantages: only the penalty acts
