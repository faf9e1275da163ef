"""The preflight's checks for what would end a GPU run late (gtpo_verl/tools/launch_checks.py,
node_probe.py) and the entry point's CPU-mode guard (gtpo_verl/trainer/platform_guard.py).

- Checkpoint folder: created once by the driver before any probe; probes only write their own
  file, so many probes of one new path at once never fail (16 threads here; two real nodes below),
  and a node that does not see the driver's folder is named.
- flash-attn: checked only on nodes that register GPUs (a GPU-less head without it passes).
- wandb in ``trainer.logger``: a node without a key (WANDB_API_KEY, ~/.netrc) is refused unless
  WANDB_MODE is offline/disabled there, as is one whose wandb server does not answer.
- GTPO_VERL_CPU=1 / VERL_PLATFORM=cpu with trainer.device != cpu: refused on the driver (before
  verl starts) and on the node that has it.
- All of it on a real two-node local Ray cluster (tests/support/ray_cluster.py) with per-node
  environments.
"""

import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from support.paths import REPO_ROOT
from support.run_files import write_run_files
from support.ray_cluster import NodeSpec, local_ray_cluster

from gtpo_verl.tools import launch_checks, node_probe, preflight
from gtpo_verl.tools.cluster_probe import Node
from gtpo_verl.trainer import platform_guard

PYTHON_BIN = str(Path(sys.executable).parent)


def _config(**trainer):
    return OmegaConf.create({"trainer": {"device": "cuda", "logger": ["console", "wandb"], **trainer}})


# ---------------------------------------------------------------- checkpoint folder
def test_concurrent_probes_of_one_new_checkpoint_path_never_fail(tmp_path):
    for round_ in range(10):
        path = tmp_path / f"run{round_}" / "ckpts" / "DAPO" / "exp"  # three levels missing
        results, start = [], threading.Barrier(16)

        def probe():
            start.wait()
            results.append(node_probe.probe_node({"checkpoint_dir": str(path)})["checkpoint"])

        with launch_checks.checkpoint_folder_for_probes(str(path)) as error:
            assert error is None and path.is_dir()
            threads = [threading.Thread(target=probe) for _ in range(16)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            assert os.listdir(path) == []  # each probe removed its own file, and only that
        assert results == [None] * 16
        assert not (tmp_path / f"run{round_}").exists()  # the driver removed what it created, deepest first


def test_checkpoint_folder_the_driver_cannot_make_or_a_node_cannot_see(tmp_path):
    blocked = tmp_path / "file"
    blocked.write_text("")
    with launch_checks.checkpoint_folder_for_probes(str(blocked / "ckpts")) as error:
        assert error.startswith(("NotADirectoryError", "FileExistsError"))
    elsewhere = node_probe.probe_node({"checkpoint_dir": str(tmp_path / "absent")})["checkpoint"]
    assert "does not exist here (the driver created it): not on a filesystem every node shares" in elsewhere
    keep = tmp_path / "existing"
    keep.mkdir()
    with launch_checks.checkpoint_folder_for_probes(str(keep / "new")):
        pass
    assert keep.is_dir() and not (keep / "new").exists()  # what was there stays


# ---------------------------------------------------------------- per-node evaluation
def _node(name, gpus, **report):
    base = {"hostname": name, "versions": {"verl": "0.9.1", "torch": "2.11.0", "vllm": "0.24.0", "transformers": "5.9.0"},
            "gtpo_verl": None, "flash_attn": None, "cuda_devices": int(gpus), "model": None, "data": {},
            "checkpoint": None, "cpu_mode": [], "wandb": {"mode": "offline", "key": None, "server": "api.wandb.ai:443",
                                                          "proxy": False, "unreachable": None}}
    return Node(name=name, ray_gpus=gpus, report={**base, **report})


def _cfg(*overrides):
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(REPO_ROOT / "gtpo_verl" / "config"), version_base=None):
        return compose(config_name="gtpo_trainer", overrides=["trainer.nnodes=2", "trainer.total_training_steps=5", *overrides])


def test_flash_attn_is_checked_only_where_gpus_are_registered():
    cfg = _cfg("trainer.n_gpus_per_node=4")
    missing = "ModuleNotFoundError: No module named 'flash_attn'"
    head, workers = _node("head", 0.0, flash_attn=missing), [_node("w1", 4.0), _node("w2", 4.0)]
    checks = {c.name: c for c in preflight.evaluate(cfg, [head, *workers], [])}
    assert checks["flash-attn"].ok and checks["flash-attn"].detail.startswith("importable on 2 GPU nodes")
    workers[1].report["flash_attn"] = missing
    line = {c.name: c for c in preflight.evaluate(cfg, [head, *workers], [])}["flash-attn"].line()
    assert line.startswith("[FAIL] flash-attn: ") and "w2: " + missing in line and "head" not in line


def test_wandb_needs_a_key_and_its_server_or_offline_on_every_node():
    online = {"mode": "online", "key": None, "server": "api.wandb.ai:443", "proxy": False, "unreachable": None}
    nodes = [_node("node-a", 8.0, wandb=dict(online)), _node("node-b", 8.0, wandb=dict(online, key="WANDB_API_KEY")),
             _node("node-c", 8.0, wandb=dict(online, key="~/.netrc", unreachable="TimeoutError: timed out")),
             _node("node-d", 8.0)]  # offline
    name, ok, detail, fix = launch_checks.wandb_check(_config(), nodes)
    assert (name, ok) == ("wandb", False)
    assert "node-a: no API key (no WANDB_API_KEY, no ~/.netrc entry for api.wandb.ai)" in detail
    assert "node-c: api.wandb.ai:443 unreachable (TimeoutError: timed out)" in detail
    assert "node-b" not in detail and "node-d" not in detail and "WANDB_API_KEY" in fix and "WANDB_MODE=offline" in fix
    assert launch_checks.wandb_check(_config(), [nodes[1], nodes[3]])[1]
    assert launch_checks.wandb_check(_config(logger=["console"]), nodes) is None  # not logged to: no check
    assert launch_checks.uses_wandb(_config(logger="wandb")) and launch_checks.uses_wandb(_config(logger=["tracking"]))


def test_wandb_access_on_a_node(tmp_path, monkeypatch):
    for key in [k for k in os.environ if k.startswith("WANDB_") or k in ("NETRC", "HTTPS_PROXY", "https_proxy")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("HOME", str(tmp_path))
    with socket.socket() as server:  # a local stand-in for the wandb server
        server.bind(("127.0.0.1", 0))
        server.listen()
        url = f"http://127.0.0.1:{server.getsockname()[1]}"
        monkeypatch.setenv("WANDB_BASE_URL", url)
        assert node_probe._wandb_access(None)["key"] is None  # no key anywhere
        (tmp_path / ".netrc").write_text("machine 127.0.0.1 login user password secret\n")
        (tmp_path / ".netrc").chmod(0o600)
        access = node_probe._wandb_access(None)
        assert access["key"] == "~/.netrc" and access["unreachable"] is None and "secret" not in repr(access)
    monkeypatch.setenv("WANDB_API_KEY", "k" * 40)
    access = node_probe._wandb_access(None)  # the server is gone now
    assert access["key"] == "WANDB_API_KEY" and access["unreachable"] and "k" * 40 not in repr(access)
    assert node_probe._wandb_access("http://proxy:3128")["unreachable"] is None  # through a proxy: not probed
    monkeypatch.setenv("WANDB_MODE", "offline")
    assert node_probe._wandb_access(None)["unreachable"] is None


# ---------------------------------------------------------------- CPU mode on a GPU run
def test_cpu_mode_variables_are_refused_unless_the_device_is_cpu():
    assert node_probe.CPU_MODE_VARIABLES == platform_guard.CPU_MODE_VARIABLES  # one list, in two places
    for environ in ({"GTPO_VERL_CPU": "1"}, {"GTPO_VERL_CPU": "1", "VERL_PLATFORM": "cpu"}):  # the plugin sets the latter
        with pytest.raises(ValueError, match=r"^GTPO_VERL_CPU=1 in this environment selects the CPU platform, but "
                                             r"trainer.device=cuda: unset GTPO_VERL_CPU in the shell"):
            platform_guard.refuse_cpu_mode_on_gpu(_config(), environ)
    with pytest.raises(ValueError, match="^VERL_PLATFORM=CPU in this environment selects"):
        platform_guard.refuse_cpu_mode_on_gpu(_config(), {"VERL_PLATFORM": "CPU"})
    platform_guard.refuse_cpu_mode_on_gpu(_config(device="cpu"), {"GTPO_VERL_CPU": "1", "VERL_PLATFORM": "cpu"})
    platform_guard.refuse_cpu_mode_on_gpu(_config(), {"GTPO_VERL_CPU": "0", "VERL_PLATFORM": "nvidia"})
    nodes = [_node("node-a", 8.0), _node("node-b", 8.0, cpu_mode=["GTPO_VERL_CPU=1"])]
    name, ok, detail, _ = launch_checks.cpu_mode_check(_config(), nodes)
    assert not ok and "node-b: GTPO_VERL_CPU=1" in detail and "node-a" not in detail


def test_main_refuses_cpu_mode_on_a_gpu_run_before_verl_starts(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "WANDB_"))}
    env.update(PATH=f"{PYTHON_BIN}:{os.environ['PATH']}", GTPO_VERL_CPU="1", RAY_USAGE_STATS_ENABLED="0")
    proc = subprocess.run([sys.executable, "-m", "gtpo_verl.main", "trainer.device=cuda", "gtpo.preflight=false"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "GTPO_VERL_CPU=1 in this environment selects the CPU platform" in out, out[-3000:]
    assert "ray init kwargs" not in out  # verl's run_ppo prints this before ray.init: never reached


# ---------------------------------------------------------------- on a real two-node cluster
@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = write_run_files(tmp_path_factory.mktemp("launch_files"), train_rows=4)
    (root / "home").mkdir()  # no ~/.netrc on any node
    return root


def _lines(text):
    return {line.split(":")[0]: line for line in text.splitlines() if line.startswith(("[PASS]", "[FAIL]"))}


def test_two_node_cluster_names_cpu_mode_wandb_and_flash_attn_where_they_fail(files, tmp_path):
    """A GPU-less head whose wandb is offline, and a GPU worker with no wandb key and GTPO_VERL_CPU=1."""
    home = {"HOME": str(files / "home"), "WANDB_API_KEY": ""}  # no key, no ~/.netrc
    head = NodeSpec(env=dict(home, WANDB_MODE="offline"))
    worker = NodeSpec(num_gpus=2, fake_cuda_devices=2, env=dict(home, WANDB_MODE="", GTPO_VERL_CPU="1"))
    overrides = [
        "--config-name", "gtpo_trainer_cpu", "trainer.device=cuda", "trainer.nnodes=1", "trainer.n_gpus_per_node=2",
        "trainer.logger=[console,wandb]", f"actor_rollout_ref.model.path={files}/model",
        f"data.train_files={files}/train.parquet", f"data.val_files={files}/train.parquet", "data.train_batch_size=2",
        "actor_rollout_ref.model.override_config.attn_implementation=flash_attention_2",
    ]
    with local_ray_cluster(head, [worker], auth="token") as cluster:
        env = dict(cluster.client_env, RAY_ADDRESS=cluster.address, HOME=str(files / "home"))
        env = {k: v for k, v in env.items() if not k.startswith(("WANDB_", "GTPO_VERL_CPU", "VERL_PLATFORM"))}

        def run(*extra, checkpoints):
            for _ in range(12):  # a worker registers shortly after `ray start` returns
                proc = subprocess.run([sys.executable, "-m", "gtpo_verl.tools.preflight", *overrides,
                                       f"trainer.default_local_dir={checkpoints}", *extra],
                                      cwd=files, env=env, capture_output=True, text=True, timeout=600)
                if "preflight: 2 nodes" in proc.stdout:
                    return proc
            raise AssertionError(proc.stdout[-3000:] + proc.stderr[-3000:])

        first = run(checkpoints=tmp_path / "a" / "ckpts" / "run")
        offline_everywhere = run("+ray_kwargs.ray_init.runtime_env.env_vars.WANDB_MODE=offline",
                                 checkpoints=tmp_path / "b" / "ckpts" / "run")
    listing = next(line for line in first.stdout.splitlines() if line.startswith("preflight: 2 nodes: "))
    (head_name,), (worker_name,) = ([n for n in listing.removeprefix("preflight: 2 nodes: ").split("; ") if n.endswith(", head)") == is_head]
                                    for is_head in (True, False))
    lines = _lines(first.stdout)
    assert first.returncode == 1, first.stdout[-3000:]
    # both probes wrote into one new folder at once: neither failed, and nothing is left behind
    assert lines["[PASS] checkpoint folder"].endswith("writable on 2 nodes")
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
    for check, why in (("CPU mode", "GTPO_VERL_CPU=1"), ("wandb", "no API key"), ("flash-attn", "flash_attn")):
        line = lines[f"[FAIL] {check}"]  # the worker only: the head has no GPU, its wandb is offline, no CPU mode
        assert f"{worker_name}: " in line and why in line and head_name not in line, line
    # WANDB_MODE=offline in the run's runtime env reaches the trainer on every node: wandb passes
    second = _lines(offline_everywhere.stdout)
    assert second["[PASS] wandb"].startswith("[PASS] wandb: ready on 2 nodes (WANDB_MODE=offline)")
    assert "[FAIL] CPU mode" in second and second["[PASS] checkpoint folder"]
