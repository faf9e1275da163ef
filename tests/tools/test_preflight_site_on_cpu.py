"""The preflight's checks for a container site's defaults (gtpo_verl/tools/launch_checks.py,
node_probe.py), on per-node reports and on this machine's probe:

- interconnect: a multi-node GPU run fails on a GPU node without an InfiniBand device (NCCL would
  fall back to TCP sockets without an error) unless TCP is chosen there (NCCL_IB_DISABLE=1,
  NCCL_NET=Socket), and on one whose hostname resolves to loopback first unless GLOO_SOCKET_IFNAME
  is set; a single-node or CPU run is not checked.
- caches: every cache folder the run's libraries write (HF datasets, Triton, vLLM, torch.compile,
  XDG) must be writable, or creatable, on every node of a GPU run; the probe creates nothing.
- wandb: a key that wandb.init refuses for its format (before asking the server) is named.
"""

import os

import pytest
from omegaconf import OmegaConf

from gtpo_verl.tools import launch_checks, node_probe, preflight
from gtpo_verl.tools.cluster_probe import Node

IB = {"infiniband": ["uverbs0", "uverbs1"], "nccl_tcp": [], "hostname_address": "10.0.0.7", "gloo_socket_ifname": None}


def _config(nnodes=2, device="cuda"):
    return OmegaConf.create({"trainer": {"device": device, "nnodes": nnodes, "logger": ["console", "wandb"]}})


def _node(name, gpus=8.0, **report):
    return Node(name=name, ray_gpus=gpus, report=report)


# ---------------------------------------------------------------- interconnect
def test_a_multi_node_gpu_run_needs_infiniband_on_every_gpu_node_unless_tcp_is_chosen():
    head = _node("head", 0.0, interconnect=dict(IB, infiniband=[]))  # GPU-less: runs no collective
    ok = launch_checks.interconnect_check(_config(), [head, _node("a", interconnect=IB), _node("b", interconnect=IB)])
    assert ok[:2] == ("interconnect", True) and "InfiniBand" in ok[2] and "2 GPU nodes" in ok[2]

    bare = _node("b", interconnect=dict(IB, infiniband=[]))  # ENROOT_RESTRICT_DEV=y without MELLANOX_VISIBLE_DEVICES
    name, passed, detail, fix = launch_checks.interconnect_check(_config(), [head, _node("a", interconnect=IB), bare])
    assert not passed and detail.startswith("b: no InfiniBand device") and "without an error" in detail
    assert "head" not in detail and "MELLANOX_VISIBLE_DEVICES=all" in fix and "NCCL_IB_DISABLE=1" in fix

    tcp = _node("b", interconnect=dict(IB, infiniband=[], nccl_tcp=["NCCL_IB_DISABLE=1"]))  # chosen: passes, said
    name, passed, detail, _ = launch_checks.interconnect_check(_config(), [_node("a", interconnect=IB), tcp])
    assert passed and "TCP (NCCL_IB_DISABLE=1)" in detail

    assert launch_checks.interconnect_check(_config(nnodes=1), [bare]) is None  # one node: NCCL stays inside it
    assert launch_checks.interconnect_check(_config(device="cpu"), [bare]) is None


def test_a_hostname_resolving_to_loopback_fails_unless_gloo_has_an_interface():
    loop = _node("w2", interconnect=dict(IB, hostname_address="127.0.1.1"))  # Debian's /etc/hosts line
    name, passed, detail, fix = launch_checks.interconnect_check(_config(), [_node("w1", interconnect=IB), loop])
    assert not passed and detail == "w2: its hostname resolves to 127.0.1.1 first, where gloo binds (GLOO_SOCKET_IFNAME unset)"
    assert "GLOO_SOCKET_IFNAME" in fix
    loop.report["interconnect"]["gloo_socket_ifname"] = "eth0"
    assert launch_checks.interconnect_check(_config(), [_node("w1", interconnect=IB), loop])[1]


def test_the_probe_reports_devices_tcp_choices_and_the_hostname_address(tmp_path, monkeypatch):
    (tmp_path / "uverbs1").write_text("")
    (tmp_path / "uverbs0").write_text("")
    (tmp_path / "rdma_cm").write_text("")
    assert node_probe._infiniband(str(tmp_path)) == ["uverbs0", "uverbs1"]
    assert node_probe._infiniband(str(tmp_path / "absent")) == []
    monkeypatch.setenv("NCCL_IB_DISABLE", "1")
    monkeypatch.setenv("NCCL_NET", "Socket")
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "ib0")
    seen = node_probe._interconnect()
    assert seen["nccl_tcp"] == ["NCCL_IB_DISABLE=1", "NCCL_NET=Socket"] and seen["gloo_socket_ifname"] == "ib0"
    monkeypatch.setenv("NCCL_IB_DISABLE", "0")
    monkeypatch.delenv("NCCL_NET")
    assert node_probe._interconnect()["nccl_tcp"] == []
    # a GPU request carries it (and the caches); a CPU one neither
    report = node_probe.probe_node({"count_cuda": True})
    assert set(report["interconnect"]) == set(IB) and set(report["caches"]) and report["hostname"]
    assert not {"interconnect", "caches"} & set(node_probe.probe_node({"count_cuda": False}))


# ---------------------------------------------------------------- caches
def test_cache_folders_follow_the_environment_and_are_probed_without_creating_them(tmp_path, monkeypatch):
    for name in ("XDG_CACHE_HOME", "HF_HOME", "HF_DATASETS_CACHE", "TRITON_CACHE_DIR", "TRITON_HOME",
                 "VLLM_CACHE_ROOT", "TORCHINDUCTOR_CACHE_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    folders = node_probe.cache_folders()  # the libraries' defaults under HOME
    home = tmp_path / "home"
    assert folders["XDG_CACHE_HOME"] == f"{home}/.cache" and folders["HF_DATASETS_CACHE"] == f"{home}/.cache/huggingface/datasets"
    assert folders["TRITON_CACHE_DIR"] == f"{home}/.triton/cache" and folders["VLLM_CACHE_ROOT"] == f"{home}/.cache/vllm"
    # what recipes/slurm/ray_on_slurm.sbatch exports: one node-local folder
    cache = tmp_path / "local" / "cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    monkeypatch.setenv("HF_HOME", str(cache / "huggingface"))
    monkeypatch.setenv("TRITON_CACHE_DIR", str(cache / "triton"))
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(cache / "torchinductor"))
    folders = node_probe.cache_folders()
    assert all(path.startswith(str(cache)) for path in folders.values()), folders
    assert folders["VLLM_CACHE_ROOT"] == f"{cache}/vllm" and folders["HF_DATASETS_CACHE"] == f"{cache}/huggingface/datasets"

    assert node_probe._writable_folder(str(cache / "triton")) is None  # creatable below a writable folder
    assert not (tmp_path / "local").exists()  # nothing created
    (tmp_path / "local").mkdir()
    assert node_probe._writable_folder(str(tmp_path / "local")) is None and os.listdir(tmp_path / "local") == []
    blocked = tmp_path / "file"  # a file where a folder must be (access() cannot refuse root, a file can)
    blocked.write_text("")
    assert node_probe._writable_folder(str(blocked / "triton")) == f"{blocked}/triton cannot be created: {blocked} is not a folder"


def test_an_unwritable_cache_folder_fails_a_gpu_run_naming_node_and_variable():
    caches = {"TRITON_CACHE_DIR=/local/triton": None, "HF_DATASETS_CACHE=/home/u/.cache/huggingface/datasets": None}
    good = _node("a", caches=dict(caches))
    bad = _node("b", caches=dict(caches, **{
        "HF_DATASETS_CACHE=/home/u/.cache/huggingface/datasets":
            "/home/u/.cache/huggingface/datasets cannot be created: / is read-only or not writable by uid 1000"}))
    assert launch_checks.cache_check(_config(), [good, good])[:3] == ("caches", True, "2 cache folders writable on 2 nodes")
    name, passed, detail, fix = launch_checks.cache_check(_config(), [good, bad])
    assert not passed and detail.startswith("b: /home/u/.cache/huggingface/datasets cannot be created") and "a:" not in detail
    assert "HF_HOME" in fix and "CACHE_DIR" in fix
    assert launch_checks.cache_check(_config(device="cpu"), [bad]) is None


def test_evaluate_runs_both_checks_on_a_two_node_gpu_run():
    from hydra import compose, initialize_config_dir
    from support.paths import REPO_ROOT

    with initialize_config_dir(config_dir=str(REPO_ROOT / "gtpo_verl" / "config"), version_base=None):
        cfg = compose(config_name="gtpo_trainer", overrides=["trainer.nnodes=2", "trainer.n_gpus_per_node=8",
                                                             "trainer.total_training_steps=5"])
    base = {"hostname": "n", "versions": {}, "gtpo_verl": None, "cuda_devices": 8, "data": {}, "cpu_mode": [],
            "caches": {"TRITON_CACHE_DIR=/x": None}}
    nodes = [Node(name=f"n{i}", ray_gpus=8.0, report=dict(base, interconnect=dict(IB, infiniband=[])))
             for i in (1, 2)]
    checks = {c.name: c for c in preflight.evaluate(cfg, nodes, [])}
    assert not checks["interconnect"].ok and checks["interconnect"].line().startswith("[FAIL] interconnect: n1: no InfiniBand")
    assert checks["caches"].ok


# ---------------------------------------------------------------- wandb key format
@pytest.mark.parametrize("key, problem", [
    ("x" * 40, None), ("local-" + "a" * 40, None), ("hdr.payload.sig", None),
    ("abc123", "the API key must have 40+ characters, has 6"),
    ("a" * 39 + "!", "the API key may only contain the letters A-Z, digits and underscores"),
    ("  ", "the API key is empty"),
])
def test_wandb_key_format_as_wandb_checks_it(key, problem):
    assert node_probe.wandb_key_problem(key) == problem


def test_a_malformed_wandb_key_is_named_without_the_key(tmp_path, monkeypatch):
    for key in [k for k in os.environ if k.startswith("WANDB_") or k in ("NETRC", "HTTPS_PROXY", "https_proxy")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("WANDB_MODE", "offline")  # no connection attempted; the key is still read
    monkeypatch.setenv("WANDB_API_KEY", "s3cr3t")
    access = node_probe._wandb_access(None)
    assert access["key_problem"] == "the API key must have 40+ characters, has 6" and "s3cr3t" not in repr(access)
    monkeypatch.delenv("WANDB_API_KEY")
    (tmp_path / ".netrc").write_text("machine api.wandb.ai login user password tooshort\n")
    (tmp_path / ".netrc").chmod(0o600)
    access = node_probe._wandb_access(None)
    assert access["key"] == "~/.netrc" and access["key_problem"].endswith("has 8") and "tooshort" not in repr(access)

    online = {"mode": "online", "key": "WANDB_API_KEY", "key_problem": "the API key must have 40+ characters, has 6",
              "server": "api.wandb.ai:443", "proxy": False, "unreachable": None}
    name, passed, detail, _ = launch_checks.wandb_check(_config(), [_node("n1", wandb=online)])
    assert not passed and detail.endswith("n1: the key from WANDB_API_KEY is malformed: the API key must have 40+ characters, has 6")
