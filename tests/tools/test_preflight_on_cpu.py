"""``python -m gtpo_verl.tools.preflight``: run as a real subprocess on real Hydra configs.

- The DAPO_TOKEN recipe through ``DRY_RUN=preflight`` (recipes/launch.sh) on this GPU-less machine
  without flash-attn must fail and name both the GPU shortfall and flash-attn.
- The CPU preset with readable files must pass, and print the run length verl will use.
- On a real two-node local Ray cluster (two ``ray start`` processes), with token auth on and off,
  where one node cannot import gtpo_verl (a package on that node's PYTHONPATH shadows it, as a node
  without the install would), exactly that node is named; a client without the token, or with
  another, gets one clear line; a node that rejects the token is named.
- On a fake-GPU cluster (CUDA emulated from CUDA_VISIBLE_DEVICES) a node that registers 2 GPUs and
  exposes 2 passes, one that exposes 1 fails with its name.
- ``python -m gtpo_verl.main`` runs it before verl starts Ray or any worker.
"""

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.ray_cluster import NodeSpec, local_ray_cluster

from gtpo_verl.tools import preflight
from gtpo_verl.tools.cluster_probe import Node
from support.paths import REPO_ROOT
from support.run_files import write_run_files

ROOT = REPO_ROOT
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
    return write_run_files(tmp_path_factory.mktemp("preflight_files"), train_rows=40, val_rows=2)


def cpu_overrides(root, *extra):
    return [
        "--config-name", "gtpo_trainer_cpu",
        f"actor_rollout_ref.model.path={root}/model",
        f"data.train_files={root}/train.parquet",
        f"data.val_files={root}/val.parquet",
        "data.train_batch_size=4",
        "algorithm.adv_estimator=gtpo_token",  # the package default, named as the recipes name theirs
        "actor_rollout_ref.rollout.n=2",
        # batch sizes verl's validate_config accepts: the preflight's first check is the config
        "actor_rollout_ref.actor.ppo_mini_batch_size=4",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4",
        f"trainer.default_local_dir={root}/checkpoints",
        *extra,
    ]


def test_dapo_recipe_fails_naming_the_gpus_and_wandb(tmp_path):
    env = {k: v for k, v in _env(DRY_RUN="preflight", HOME=tmp_path).items() if not k.startswith("WANDB_")}
    proc = subprocess.run(
        ["bash", "recipes/dapo/run_dapo_token_qwen2.5_32b.sh"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = {line.split(":")[0]: line for line in _lines(proc.stdout)}
    gpus, wandb = lines["[FAIL] GPUs"], lines["[FAIL] wandb"]
    assert "16 × 8 = 128" in gpus and "0 GPUs registered" in gpus and "fix:" in gpus
    assert "no API key" in wandb and "WANDB_MODE=offline" in wandb.split("-> fix:")[1]  # the recipes log to wandb
    assert not [name for name in lines if "flash-attn" in name]  # no GPU here: nothing runs the actor
    assert lines["[PASS] CPU mode"] and lines["[PASS] checkpoint folder"]
    assert lines["[PASS] gtpo_verl"]
    assert "1166 (trainer.total_training_steps)" in lines["[PASS] total_training_steps"]  # the recipe's run length
    assert "[FAIL] model path" in lines and "[FAIL] data files" in lines  # nothing downloaded under this HOME
    assert "checks failed" in proc.stdout.splitlines()[-1]
    assert not (tmp_path / "verl").exists()  # the writability probe leaves nothing behind


def test_cpu_preset_passes_and_prints_the_run_length(cpu_run_files):
    proc = subprocess.run(
        [sys.executable, "-m", "gtpo_verl.tools.preflight", *cpu_overrides(cpu_run_files)],
        cwd=cpu_run_files, env=_env(), capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = _lines(proc.stdout)
    assert lines and all(line.startswith("[PASS]") for line in lines), lines
    names = [line.split(":")[0].removeprefix("[PASS] ") for line in lines]
    assert names == ["config", "gtpo_verl", "versions", "GPUs", "model path", "data files", "checkpoint folder", "total_training_steps"]
    # no trainer.total_training_steps: verl 0.9.1 counts rows // train_batch_size × total_epochs (30 in the preset)
    assert lines[-1].startswith(f"[PASS] total_training_steps: {40 // 4 * 30} (not set: verl counts 40 rows")
    assert not (cpu_run_files / "checkpoints").exists()


def _shadow_package(tmp_path):
    """A PYTHONPATH entry whose gtpo_verl fails to import, as on a node without the install."""
    shadow = tmp_path / "shadow" / "gtpo_verl"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text(
        'raise ModuleNotFoundError("No module named \'gtpo_verl\' (not installed on this node)", name="gtpo_verl")\n'
    )
    return str(shadow.parent)


def _preflight(cluster, root, *extra, env=None, timeout=300):
    return subprocess.run(
        [sys.executable, "-m", "gtpo_verl.tools.preflight", *cpu_overrides(root, *extra)],
        cwd=root, env=env or dict(cluster.client_env, RAY_ADDRESS=cluster.address), capture_output=True, text=True,
        timeout=timeout,
    )


def _preflight_on_all_nodes(cluster, root, count, *extra, env=None):
    deadline = time.time() + 120
    while True:  # a worker's raylet registers shortly after `ray start` returns
        proc = _preflight(cluster, root, *extra, env=env)
        if f"preflight: {count} nodes" in proc.stdout or time.time() > deadline:
            return proc


def _node_names(out, count):
    listing = next(line for line in out.splitlines() if line.startswith(f"preflight: {count} nodes: "))
    names = listing.removeprefix(f"preflight: {count} nodes: ").split("; ")
    return [n for n in names if n.endswith(", head)")], [n for n in names if not n.endswith(", head)")]


@pytest.mark.parametrize("auth", ["token", "disabled"])
def test_two_node_cluster_names_the_node_without_the_package(auth, tmp_path, cpu_run_files):
    head_spec = NodeSpec(num_gpus=1)
    worker_spec = NodeSpec(env={"PYTHONPATH": _shadow_package(tmp_path)})
    with local_ray_cluster(head_spec, [worker_spec], auth=auth) as cluster:
        proc = _preflight_on_all_nodes(cluster, cpu_run_files, 2)
        if auth == "token":  # the same cluster refuses a client without its token, in one clear line
            no_token = {k: v for k, v in cluster.client_env.items() if k != "RAY_AUTH_TOKEN_PATH"}
            refused = _preflight(cluster, cpu_run_files, env=dict(no_token, RAY_ADDRESS=cluster.address, HOME=str(tmp_path)))
            wrong = tmp_path / "wrong_token"
            wrong.write_text("0" * 64)
            rejected = _preflight(cluster, cpu_run_files, env=dict(cluster.client_env, RAY_ADDRESS=cluster.address,
                                                                   RAY_AUTH_TOKEN_PATH=str(wrong)))
            unauthenticated = _preflight(cluster, cpu_run_files, env=dict(no_token, RAY_ADDRESS=cluster.address,
                                                                          RAY_AUTH_MODE="disabled", HOME=str(tmp_path)))
    out = proc.stdout
    assert proc.returncode == 1, out + proc.stderr
    head, worker = _node_names(out, 2)
    assert len(head) == 1 and len(worker) == 1, (head, worker)
    failed = [line for line in _lines(out) if line.startswith("[FAIL]")]
    assert len(failed) == 1 and failed[0].startswith("[FAIL] gtpo_verl: "), failed
    assert worker[0] in failed[0] and head[0] not in failed[0]  # the broken node, and only it, is named
    assert "No module named 'gtpo_verl'" in failed[0] and "fix:" in failed[0]
    assert "[PASS] versions: verl 0.9.1" in out and "on 2 nodes" in out  # the probe itself ran on both nodes
    assert "[PASS] GPUs: 1 registered, 1 needed" in out
    if auth == "token":
        why = {"no token": "RAY_AUTH_MODE=token, but this process has no token",
               "wrong token": "AuthenticationError: RPC error: InvalidAuthToken",
               "auth off": "RAY_AUTH_MODE=disabled"}
        for case, proc in zip(why, (refused, rejected, unauthenticated)):
            assert proc.returncode == 1, (case, proc.stdout + proc.stderr)
            lines = _lines(proc.stdout)
            assert len(lines) == 1 and lines[0].startswith(f"[FAIL] Ray cluster: the cluster at {cluster.address} refused"), (
                case, proc.stdout[-3000:] + proc.stderr[-3000:])
            assert why[case] in lines[0] and "RAY_AUTH_TOKEN_PATH" in lines[0].split("-> fix:")[1], (case, lines[0])
            assert "Traceback" not in proc.stdout + proc.stderr


def test_a_node_that_rejects_the_token_is_named(tmp_path, cpu_run_files):
    """A node whose Ray runs with token auth joins a head that runs without, then refuses its requests."""
    token = tmp_path / "node_token"
    token.write_text("1" * 64)
    strict = NodeSpec(env={"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token)})
    with local_ray_cluster(NodeSpec(num_gpus=1), [strict], auth="disabled") as cluster:
        env = dict(cluster.client_env, RAY_ADDRESS=cluster.address, GTPO_PREFLIGHT_TIMEOUT_S="75")
        proc = _preflight_on_all_nodes(cluster, cpu_run_files, 2, env=env)
    out = proc.stdout
    assert proc.returncode == 1, out + proc.stderr
    head, worker = _node_names(out, 2)
    nodes = next(line for line in _lines(out) if line.startswith("[FAIL] nodes:"))
    assert "no answer within 75 s from " + worker[0] in nodes and head[0] not in nodes
    assert "rejects the cluster's token" in nodes and "RAY_AUTH_MODE=token" in nodes.split("-> fix:")[1]


GPU_RUN = [  # a GPU run's shape on two nodes of two GPUs; sdpa so flash-attn is not needed here
    "trainer.device=cuda", "trainer.nnodes=2", "trainer.n_gpus_per_node=2",
    "actor_rollout_ref.model.override_config.attn_implementation=sdpa",
]


@pytest.mark.parametrize("worker_devices", [2, 1])
def test_gpus_are_counted_as_a_gpu_holding_worker_sees_them(worker_devices, cpu_run_files):
    """Ray blanks CUDA_VISIBLE_DEVICES in a task that holds no GPU: a probe that holds none sees 0 devices
    on every node. Each node registers 2 GPUs; the worker really has ``worker_devices`` of them."""
    head_spec = NodeSpec(num_gpus=2, fake_cuda_devices=2)
    worker_spec = NodeSpec(num_gpus=2, fake_cuda_devices=worker_devices)
    with local_ray_cluster(head_spec, [worker_spec], auth="token") as cluster:
        proc = _preflight_on_all_nodes(cluster, cpu_run_files, 2, *GPU_RUN)
    out = proc.stdout
    head, worker = _node_names(out, 2)
    gpus = next((line for line in _lines(out) if line.split(":")[0].endswith(" GPUs")), None)
    assert gpus is not None, out + proc.stderr
    if worker_devices == 2:
        assert gpus == "[PASS] GPUs: 4 registered, 4 needed", gpus
    else:
        assert gpus.startswith("[FAIL] GPUs: ") and worker[0] in gpus and head[0] not in gpus, gpus
        assert "registers 2 GPUs with Ray but a task holding them sees 1 CUDA device (CUDA_VISIBLE_DEVICES='0,1')" in gpus


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
        "hostname": name,
        "versions": {"verl": "0.9.1", "torch": "2.11.0+cu130", "vllm": "0.24.0", "transformers": "5.9.0", "TransferQueue": "0.1.11"},
        "gtpo_verl": None, "flash_attn": None, "cuda_devices": 8, "model": None, "data": {}, "checkpoint": None,
    }
    base.update(report)
    return Node(name=name, ray_gpus=gpus, report=base)


def test_versions_must_agree_across_nodes_and_match_the_pins(cpu_run_files):
    from hydra import compose, initialize_config_dir

    data = [f"data.train_files={cpu_run_files}/train.parquet", f"data.val_files={cpu_run_files}/val.parquet"]
    with initialize_config_dir(config_dir=str(ROOT / "gtpo_verl" / "config"), version_base=None):
        cfg = compose(config_name="gtpo_trainer", overrides=[
            "trainer.nnodes=2", "trainer.total_training_steps=5", *data,
            # a config the start-up check accepts, so only the node checks below can fail
            "algorithm.adv_estimator=gtpo_token", "actor_rollout_ref.rollout.n=8",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
            "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4"])
    ok = preflight.evaluate(cfg, [_node("a"), _node("b")], [])
    assert all(c.ok for c in ok), [c.line() for c in ok if not c.ok]
    odd = _node("b", versions={"verl": "0.9.1", "torch": "2.10.0", "vllm": "0.24.0", "transformers": "5.3.0",
                               "TransferQueue": "0.1.8"}, cuda_devices=4, cuda_visible_devices="0,1,2,3,4,5,6,7")
    checks = {c.name: c for c in preflight.evaluate(cfg, [_node("a"), odd], ["c"])}
    versions = checks["versions"].detail
    assert not checks["versions"].ok and "torch differs across nodes: a=2.11.0+cu130, b=2.10.0" in versions
    assert "torch is not 2.11.0" in versions and "on b=2.10.0" in versions
    # the image's own transformers / TransferQueue, below what verl 0.9.1 needs
    assert "transformers is not 5.9.0 (verl 0.9.1's [vllm] pin) on b=5.3.0" in versions
    assert "b has TransferQueue 0.1.8 (verl 0.9.1 needs >= 0.1.10" in versions and "a has TransferQueue" not in versions
    assert not checks["GPUs"].ok and (
        "b registers 8 GPUs with Ray but a task holding them sees 4 CUDA devices (CUDA_VISIBLE_DEVICES='0,1,2,3,4,5,6,7')"
        in checks["GPUs"].detail)
    assert not checks["nodes"].ok and "from c" in checks["nodes"].detail and "rejects the cluster's token" in checks["nodes"].fix
    assert not checks["nodes"].ok and "from c" in checks["nodes"].detail


def test_pins_are_verls_and_documented():
    pins = preflight.gpu_stack_pins()  # read from verl 0.9.1's own metadata ([vllm] extra)
    assert pins == {"torch": "2.11.0", "vllm": "0.24.0", "transformers": "5.9.0"} == preflight.GPU_STACK_FALLBACK
    text = (ROOT / "gtpo_verl" / "config" / "REQUIRED_VERL.txt").read_text()
    assert re.search(rf"^TAG=v{re.escape(preflight.VERL_VERSION)}$", text, re.M)
    for name, version in pins.items():
        assert re.search(rf"^GPU_{name.upper()}={re.escape(version)}$", text, re.M), name


def test_token_file_and_source(tmp_path, monkeypatch):
    from gtpo_verl.ray_auth import token_source, write_token

    path = write_token(str(tmp_path))
    assert (Path(path).stat().st_mode & 0o777) == 0o600
    assert re.fullmatch(r"[0-9a-f]{64}", Path(path).read_text())  # 256 bits, as Ray generates them
    with pytest.raises(FileExistsError):  # never overwrites a cluster's token
        write_token(str(tmp_path))
    for key in ("RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert token_source() is None
    (tmp_path / "home" / ".ray").mkdir(parents=True)
    (tmp_path / "home" / ".ray" / "auth_token").write_text("x")
    assert token_source() == str(tmp_path / "home" / ".ray" / "auth_token")
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", path)
    assert token_source() == f"RAY_AUTH_TOKEN_PATH={path}"  # Ray's order: the variable, then the file, then ~/.ray
    monkeypatch.setenv("RAY_AUTH_TOKEN", "abc")
    assert token_source() == "RAY_AUTH_TOKEN"
