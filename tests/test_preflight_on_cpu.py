"""``python -m gtpo_verl.preflight``: run as a real subprocess on real Hydra configs.

- The DAPO_TOKEN recipe through ``DRY_RUN=preflight`` (recipes/launch.sh) on this GPU-less machine
  without flash-attn must fail and name both the GPU shortfall and flash-attn.
- The CPU preset with readable files must pass, and print the run length verl will use.
- On a real two-node local Ray cluster (two ``ray start`` processes) where one node cannot import
  gtpo_verl (a package on that node's PYTHONPATH shadows it, as a node without the install would),
  exactly that node is named.
- ``python -m gtpo_verl.main`` runs it before verl starts Ray or any worker.
"""

import importlib.util
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from gtpo_verl import preflight

ROOT = Path(__file__).resolve().parents[1]
PYTHON_BIN = str(Path(sys.executable).parent)


def _env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env.update({"PATH": f"{PYTHON_BIN}:{os.environ['PATH']}", "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"})
    env.update({k: str(v) for k, v in extra.items()})
    return env


def _lines(text):
    return [line for line in text.splitlines() if line.startswith(("[PASS]", "[FAIL]"))]


@pytest.fixture(scope="module")
def cpu_run_files(tmp_path_factory):
    """A model folder and parquet files the CPU preset can point at (contents are not read)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    root = tmp_path_factory.mktemp("preflight_files")
    (root / "model").mkdir()
    (root / "model" / "config.json").write_text("{}")
    pq.write_table(pa.table({"prompt": [f"p{i}" for i in range(40)]}), root / "train.parquet")
    pq.write_table(pa.table({"prompt": ["v0", "v1"]}), root / "val.parquet")
    return root


def cpu_overrides(root, *extra):
    return [
        "--config-name", "gtpo_trainer_cpu",
        f"actor_rollout_ref.model.path={root}/model",
        f"data.train_files={root}/train.parquet",
        f"data.val_files={root}/val.parquet",
        "data.train_batch_size=4",
        f"trainer.default_local_dir={root}/checkpoints",
        *extra,
    ]


@pytest.mark.skipif(importlib.util.find_spec("flash_attn") is not None, reason="flash-attn is installed here")
def test_dapo_recipe_fails_naming_gpus_and_flash_attn(tmp_path):
    proc = subprocess.run(
        ["bash", "recipes/dapo/run_dapo_token_qwen2.5_32b.sh"],
        cwd=ROOT, env=_env(DRY_RUN="preflight", HOME=tmp_path), capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = {line.split(":")[0]: line for line in _lines(proc.stdout)}
    gpus, flash = lines["[FAIL] GPUs"], lines["[FAIL] flash-attn"]
    assert "16 × 8 = 128" in gpus and "0 GPUs registered" in gpus and "fix:" in gpus
    assert "flash_attention_2" in flash and "No module named 'flash_attn'" in flash and "fix:" in flash
    assert lines["[PASS] gtpo_verl"]
    assert "1166 (trainer.total_training_steps)" in lines["[PASS] total_training_steps"]  # the recipe's run length
    assert "[FAIL] model path" in lines and "[FAIL] data files" in lines  # nothing downloaded under this HOME
    assert "checks failed" in proc.stdout.splitlines()[-1]
    assert not (tmp_path / "verl").exists()  # the writability probe leaves nothing behind


def test_cpu_preset_passes_and_prints_the_run_length(cpu_run_files):
    proc = subprocess.run(
        [sys.executable, "-m", "gtpo_verl.preflight", *cpu_overrides(cpu_run_files)],
        cwd=cpu_run_files, env=_env(), capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = _lines(proc.stdout)
    assert lines and all(line.startswith("[PASS]") for line in lines), lines
    names = [line.split(":")[0].removeprefix("[PASS] ") for line in lines]
    assert names == ["gtpo_verl", "versions", "GPUs", "model path", "data files", "checkpoint folder", "total_training_steps"]
    # no trainer.total_training_steps: verl 0.9.1 counts rows // train_batch_size × total_epochs (30 in the preset)
    assert lines[-1].startswith(f"[PASS] total_training_steps: {40 // 4 * 30} (not set: verl counts 40 rows")
    assert not (cpu_run_files / "checkpoints").exists()


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _kill_processes_of(session_root: str):
    """Stop the Ray processes started by this test (their command lines name its temp folder)."""
    import psutil

    mine = [p for p in psutil.process_iter(["cmdline"]) if session_root in " ".join(p.info["cmdline"] or [])]
    for p in mine:
        try:
            p.send_signal(signal.SIGTERM)
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(mine, timeout=15)
    for p in alive:
        try:
            p.kill()
        except psutil.Error:
            pass


@pytest.fixture
def two_node_cluster(tmp_path):
    """A head (1 CPU, 1 GPU slot) and a worker node whose PYTHONPATH hides gtpo_verl."""
    session_root = tempfile.mkdtemp(prefix="gtpo_pf_", dir="/tmp")  # short: Ray's socket paths are length-limited
    shadow = tmp_path / "shadow" / "gtpo_verl"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text(
        'raise ModuleNotFoundError("No module named \'gtpo_verl\' (not installed on this node)", name="gtpo_verl")\n'
    )
    port = _free_port()
    start = [sys.executable, "-m", "ray.scripts.scripts", "start", "--num-cpus=1", "--disable-usage-stats"]
    try:
        subprocess.run(
            [*start, "--head", f"--port={port}", "--num-gpus=1", "--include-dashboard=false", f"--temp-dir={session_root}"],
            env=_env(), check=True, capture_output=True, timeout=240,
        )
        subprocess.run(
            [*start, f"--address=127.0.0.1:{port}", "--num-gpus=0"],
            env=_env(PYTHONPATH=shadow.parent), check=True, capture_output=True, timeout=240,
        )
        yield f"127.0.0.1:{port}"
    finally:
        _kill_processes_of(session_root)
        shutil.rmtree(session_root, ignore_errors=True)


def test_two_node_cluster_names_the_node_without_the_package(two_node_cluster, cpu_run_files):
    deadline = time.time() + 60
    while True:  # the worker's raylet registers shortly after `ray start` returns
        proc = subprocess.run(
            [sys.executable, "-m", "gtpo_verl.preflight", *cpu_overrides(cpu_run_files)],
            cwd=cpu_run_files, env=_env(RAY_ADDRESS=two_node_cluster), capture_output=True, text=True, timeout=300,
        )
        if "preflight: 2 nodes" in proc.stdout or time.time() > deadline:
            break
    out = proc.stdout
    assert proc.returncode == 1, out + proc.stderr
    listing = next(line for line in out.splitlines() if line.startswith("preflight: 2 nodes: "))
    names = listing.removeprefix("preflight: 2 nodes: ").split("; ")
    head = [n for n in names if n.endswith(", head)")]
    worker = [n for n in names if not n.endswith(", head)")]
    assert len(head) == 1 and len(worker) == 1, names
    failed = [line for line in _lines(out) if line.startswith("[FAIL]")]
    assert len(failed) == 1 and failed[0].startswith("[FAIL] gtpo_verl: "), failed
    assert worker[0] in failed[0] and head[0] not in failed[0]  # the broken node, and only it, is named
    assert "No module named 'gtpo_verl'" in failed[0] and "fix:" in failed[0]
    assert "[PASS] versions: verl 0.9.1" in out and "on 2 nodes" in out  # the probe itself ran on both nodes
    assert "[PASS] GPUs: 1 registered, 1 needed" in out


def test_main_runs_the_preflight_before_ray_starts(cpu_run_files, tmp_path):
    runnable = [  # what verl's validate_config (run by main before the preflight) needs on CPU
        "algorithm.adv_estimator=grpo",
        "actor_rollout_ref.rollout.n=2",
        "actor_rollout_ref.actor.ppo_mini_batch_size=4",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8",
        f"data.val_files={tmp_path}/absent.parquet",
    ]
    proc = subprocess.run(
        [sys.executable, "-m", "gtpo_verl.main", *cpu_overrides(cpu_run_files, *runnable)],
        cwd=cpu_run_files, env=_env(), capture_output=True, text=True, timeout=300,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert "[FAIL] data files: this machine" in out and f"{tmp_path}/absent.parquet does not exist" in out
    assert "ray init kwargs" not in out  # verl's run_ppo prints this just before ray.init: never reached


def _node(name, gpus=8.0, **report):
    base = {
        "hostname": name, "versions": {"verl": "0.9.1", "torch": "2.11.0+cu130", "vllm": "0.24.0"},
        "gtpo_verl": None, "flash_attn": None, "cuda_devices": 8, "model": None, "data": {}, "checkpoint": None,
    }
    base.update(report)
    return preflight.Node(name=name, ray_gpus=gpus, report=base)


def test_versions_must_agree_across_nodes_and_match_the_pins():
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(ROOT / "gtpo_verl" / "config"), version_base=None):
        cfg = compose(config_name="gtpo_trainer", overrides=["trainer.nnodes=2", "trainer.total_training_steps=5"])
    ok = preflight.evaluate(cfg, [_node("a"), _node("b")], [])
    assert all(c.ok for c in ok), [c.line() for c in ok if not c.ok]
    odd = _node("b", versions={"verl": "0.9.1", "torch": "2.10.0", "vllm": "0.24.0"}, cuda_devices=4)
    checks = {c.name: c for c in preflight.evaluate(cfg, [_node("a"), odd], ["c"])}
    assert not checks["versions"].ok and "torch differs across nodes: a=2.11.0+cu130, b=2.10.0" in checks["versions"].detail
    assert "torch is not 2.11.0" in checks["versions"].detail and "on b=2.10.0" in checks["versions"].detail
    assert not checks["GPUs"].ok and "b registers 8 GPUs with Ray but torch sees 4" in checks["GPUs"].detail
    assert not checks["nodes"].ok and "no answer from c" in checks["nodes"].detail


def test_pins_are_verls_and_documented():
    pins = preflight.gpu_stack_pins()  # read from verl 0.9.1's own metadata ([vllm] extra)
    assert pins == {"torch": "2.11.0", "vllm": "0.24.0"} == preflight.GPU_STACK_FALLBACK
    text = (ROOT / "recipes" / "REQUIRED_VERL.txt").read_text()
    assert text.splitlines()[0] == f"verl=={preflight.REQUIRED_VERL}"
    for name, version in pins.items():
        assert re.search(rf"^\s+{name}=={re.escape(version)}$", text, re.M), name
