"""A user's mistake at a command line is one line and a non-zero exit, never a traceback.

Real subprocesses: ``python -m gtpo_verl.main`` (a bad key → exit 2; ``gtpo.dry_run=true`` validates
exactly as training would and starts nothing), ``gtpo-preflight`` (a bad config, a corrupt parquet
file, a zero batch size → ``[FAIL]`` lines, and the other checks still run), ``python -m
gtpo_verl.lab`` and ``gtpo-dashboard`` (bad flags and files → exit 2). ``gtpo-audit``'s inputs are
tests/tools/test_audit_input_on_cpu.py.
"""

import json
import os
import subprocess
import sys

import pytest

from support.bad_inputs import BASE
from support.run_files import write_run_files

CPU = ("--config-name", "gtpo_trainer_cpu", *BASE)


def _run(*argv, env=None, timeout=300):
    full_env = {**os.environ, "RAY_ADDRESS": "", **(env or {})}
    full_env.pop("RAY_ADDRESS")
    return subprocess.run([sys.executable, *argv], capture_output=True, text=True, timeout=timeout, env=full_env,
                          stdin=subprocess.DEVNULL)


def _error_lines(proc):
    """stderr lines that are not logging or warnings (verl and Ray log there too)."""
    return [line for line in proc.stderr.splitlines()
            if line.strip() and not any(tag in line for tag in ("WARNING", "Warning", "warn(", "INFO", "[validate_config]"))]


@pytest.fixture(scope="module")
def run_files(tmp_path_factory):
    root = write_run_files(tmp_path_factory.mktemp("cli_files"), train_rows=8)
    (root / "corrupt.parquet").write_bytes(b"PAR1 this is not a parquet file")
    return root


def _files(root, train="train.parquet"):
    return (f"actor_rollout_ref.model.path={root / 'model'}", f"data.train_files={root / train}",
            f"data.val_files={root / 'train.parquet'}", f"trainer.default_local_dir={root / 'ckpt'}")


@pytest.mark.parametrize("override,key", [  # every other key: tests/trainer/test_bad_configs_on_cpu.py, in-process
    ("algorithm.gtpo_token.alpha2=abc", "algorithm.gtpo_token.alpha2"),
    ("algorithm.adv_estimator=gtpo_tokn", "algorithm.adv_estimator"),
])
def test_main_reports_a_bad_key_in_one_line(run_files, override, key):
    proc = _run("-m", "gtpo_verl.main", *CPU, *_files(run_files), "gtpo.dry_run=true", override)
    assert proc.returncode == 2, proc.stderr[-3000:]
    lines = _error_lines(proc)
    assert len(lines) == 1 and lines[0].startswith("gtpo_verl: config error: ") and key in lines[0], proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr and "config valid" not in proc.stdout


def test_dry_run_validates_and_starts_nothing(run_files):
    proc = _run("-m", "gtpo_verl.main", *CPU, *_files(run_files), "algorithm.adv_estimator=gtpo_token", "gtpo.dry_run=true")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "config valid for training (algorithm.adv_estimator=gtpo_token" in proc.stdout
    assert "Started a local Ray instance" not in proc.stderr and "preflight:" not in proc.stdout


def test_preflight_reports_config_data_and_batch_problems_and_goes_on(run_files):
    proc = _run("-m", "gtpo_verl.tools.preflight", *CPU, *_files(run_files, train="corrupt.parquet"),
                "data.train_batch_size=0", "algorithm.adv_estimator=gtpo_token")
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stdout.splitlines() if line.startswith(("[PASS]", "[FAIL]"))]
    config, data = lines[0], next(line for line in lines if line.startswith("[FAIL] data files"))
    assert config.startswith("[FAIL] config: `data.train_batch_size=0`"), lines
    assert "corrupt.parquet cannot be read as a dataset (ArrowInvalid" in data
    assert any(line.startswith("[PASS] model path") for line in lines)  # the node checks still ran
    assert any(line.startswith("[PASS] total_training_steps") for line in lines)


def test_preflight_passes_a_valid_config(run_files):
    proc = _run("-m", "gtpo_verl.tools.preflight", *CPU, *_files(run_files), "algorithm.adv_estimator=gtpo_token")
    assert "[PASS] config: valid for training" in proc.stdout, proc.stdout + proc.stderr[-2000:]


def _in_process(main, argv, capsys):
    """``main(argv)``'s exit status and stderr lines (the console script's code, in this process)."""
    with pytest.raises(SystemExit) as exited:
        main(list(argv))
    return exited.value.code, [line for line in capsys.readouterr().err.splitlines() if line.strip()]


@pytest.mark.parametrize("argv,words", [
    (("--seeds", "0"), "--seeds"), (("--steps", "0"), "--steps"), (("--workers", "0"), "--workers"),
    (("--seeds", "abc"), "--seeds"), (("--methods", "NOPE"), "NOPE"), (("--methods", "DAPO,grpo+nope"), "nope"),
    (("--tasks", "nope"), "nope"), (("--group", "1"), "--group"), (("--bogus",), "--bogus"),
    (("--warm-start-steps", "0"), "--warm-start-steps"),
    (("--from-runs", "/nonexistent/runs.jsonl"), "cannot be read"),
])
def test_lab_flags(argv, words, capsys):
    from gtpo_verl.lab.__main__ import main

    status, lines = _in_process(main, (*argv, "--out", "/tmp/never-written"), capsys)
    assert status == 2 and len(lines) == 1, lines
    assert lines[0].startswith("python -m gtpo_verl.lab: ") and words in lines[0], lines


def test_lab_runs_files_that_cannot_be_used(tmp_path, capsys):
    from gtpo_verl.lab.__main__ import main

    corrupt = tmp_path / "corrupt.jsonl"
    corrupt.write_text('{"task": "max_digit", "method"\n')
    foreign = tmp_path / "foreign.jsonl"
    foreign.write_text(json.dumps({"hello": 1}) + "\n")
    partial = tmp_path / "partial.jsonl"  # one run: no seed has every method on every task
    partial.write_text(json.dumps({"task": "max_digit", "method": "DAPO", "seed": 0, "curves": {"reward": [0.0]},
                                   "wall_s": 1.0}) + "\n")
    for path, words in ((corrupt, "not a lab runs file"), (foreign, "every run needs"), (partial, "no seed has every method")):
        status, lines = _in_process(main, ("--from-runs", str(path), "--out", str(tmp_path / "out")), capsys)
        assert status == 2 and len(lines) == 1 and words in lines[0], lines


def test_dashboard_flags(capsys):
    from gtpo_verl.tools.dashboard import main

    for argv, words in ((("--project", "p"), "--entity"), (("--entity", "e", "--project", "p", "--val-n", "0"), "--val-n")):
        status, lines = _in_process(main, argv, capsys)
        assert status == 2 and len(lines) == 1 and words in lines[0], lines
