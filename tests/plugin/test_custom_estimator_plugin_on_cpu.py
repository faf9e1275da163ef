"""A user's own package (examples/custom_estimator/) registers an entropy-aware estimator through its
own ``verl.plugins`` entry point, with no change to gtpo_verl: installed into a temporary folder and
run in a fresh interpreter through the mixin's real ``_compute_advantage`` against a real local
TransferQueue (tests/plugin/custom_estimator_script.py)."""

import os
import shutil
import subprocess
import sys
from pathlib import Path
from support.paths import REPO_ROOT

ROOT = REPO_ROOT
EXAMPLE = ROOT / "examples" / "custom_estimator"
SCRIPT = Path(__file__).with_name("custom_estimator_script.py")


def _install(tmp_path):
    source = tmp_path / "src"
    shutil.copytree(EXAMPLE, source)  # build artefacts stay out of the repository
    target = tmp_path / "site"
    out = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index", "--quiet",
         "--target", str(target), str(source)],
        capture_output=True, text=True, timeout=600,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    entry_points = list(target.glob("my_entropy_estimator-*.dist-info/entry_points.txt"))
    assert entry_points and "verl.plugins" in entry_points[0].read_text()
    return target


def _fresh(code_or_script, target, *args):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(target), str(ROOT / "tests")]))}
    command = [sys.executable, *([code_or_script] if str(code_or_script).endswith(".py") else ["-c", code_or_script]), *args]
    return subprocess.run(command, capture_output=True, text=True, env=env, cwd=str(target.parent), timeout=1200)


def test_user_package_receives_entropy_and_token_ids_in_the_v1_advantage_step(tmp_path):
    target = _install(tmp_path)
    out = _fresh(str(SCRIPT), target, str(ROOT / "gtpo_verl"))
    assert out.returncode == 0 and "CUSTOM ESTIMATOR OK" in out.stdout, out.stdout[-3000:] + out.stderr[-5000:]


def test_without_the_package_on_the_path_nothing_is_registered(tmp_path):
    probe = "import verl; from verl.trainer.ppo import core_algos as c; print('entropy_scaled_grpo' in c.ADV_ESTIMATOR_REGISTRY)"
    out = _fresh(probe, tmp_path / "empty")
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "False"
