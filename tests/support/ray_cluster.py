"""A real multi-node Ray cluster on this machine for tests: `ray start` processes, token auth on or
off, and per-node environments (a PYTHONPATH that shadows a package, emulated CUDA devices).

Every node binds 127.0.0.1; the Ray state lives in a private temp dir, and teardown stops exactly
the processes whose command lines name it (never `ray stop`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Optional

from gtpo_verl.ray_auth import write_token

PYTHON_BIN = str(Path(sys.executable).parent)

# Emulated CUDA for a GPU-less machine: torch.cuda.device_count() counts the entries of
# CUDA_VISIBLE_DEVICES that name one of the node's FAKE_CUDA_PHYSICAL_DEVICES devices, and all of
# them when the variable is unset — what the CUDA runtime does. Installed as a sitecustomize on the
# node's PYTHONPATH, it patches torch.cuda when (and only if) a process imports it.
FAKE_CUDA_SITECUSTOMIZE = '''
import importlib.abc, importlib.machinery, os, sys

class _PatchCuda(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != "torch.cuda":
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.machinery.PathFinder.find_spec(name, path)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None:
            return None
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            physical = int(os.environ["FAKE_CUDA_PHYSICAL_DEVICES"])

            def device_count():
                visible = os.environ.get("CUDA_VISIBLE_DEVICES")
                if visible is None:
                    return physical
                ids = [v.strip() for v in visible.split(",") if v.strip()]
                return sum(1 for v in ids if v.isdigit() and int(v) < physical)

            module.device_count = device_count

        spec.loader.exec_module = exec_module
        return spec

if os.environ.get("FAKE_CUDA_PHYSICAL_DEVICES"):
    sys.meta_path.insert(0, _PatchCuda())
'''


@dataclass
class NodeSpec:
    num_cpus: int = 1
    num_gpus: int = 0
    env: dict = field(default_factory=dict)  # extra environment of this node's `ray start`
    fake_cuda_devices: Optional[int] = None  # emulate this many physical CUDA devices on the node


@dataclass
class LocalCluster:
    address: str  # GCS address, for RAY_ADDRESS / ray.init
    client_env: dict  # the environment a client of this cluster needs (token included when on)
    token_path: Optional[str]
    session_root: str


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def base_env(auth: str, token_path: Optional[str] = None, **extra) -> dict:
    """This interpreter's environment with no RAY_* setting of the caller's, auth as asked."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env.update({"PATH": f"{PYTHON_BIN}:{os.environ['PATH']}", "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": auth})
    if token_path:
        env["RAY_AUTH_TOKEN_PATH"] = token_path
    env.update({k: str(v) for k, v in extra.items()})
    return env


def _kill_processes_of(session_root: str) -> None:
    import psutil

    mine = [p for p in psutil.process_iter(["cmdline"]) if session_root in " ".join(p.info["cmdline"] or [])]
    for p in mine:
        with contextlib.suppress(psutil.Error):
            p.send_signal(signal.SIGTERM)
    _, alive = psutil.wait_procs(mine, timeout=15)
    for p in alive:
        with contextlib.suppress(psutil.Error):
            p.kill()


@contextlib.contextmanager
def local_ray_cluster(head: NodeSpec, workers: list[NodeSpec] = (), auth: str = "token",
                      dashboard: bool = False) -> Iterator[LocalCluster]:
    """Start a head and ``workers`` with ``ray start`` (all on 127.0.0.1); stop them on exit."""
    session_root = tempfile.mkdtemp(prefix="gtpo_rc_", dir="/tmp")  # short: Ray's socket paths are length-limited
    token_path = write_token(session_root) if auth == "token" else None
    env = base_env(auth, token_path)
    port = free_port()
    start = [sys.executable, "-m", "ray.scripts.scripts", "start", "--disable-usage-stats", "--node-ip-address=127.0.0.1"]

    def node_env(spec: NodeSpec) -> dict:
        extra = dict(spec.env)
        if spec.fake_cuda_devices is not None:
            site = Path(session_root) / f"fake_cuda_{spec.fake_cuda_devices}"
            site.mkdir(exist_ok=True)
            (site / "sitecustomize.py").write_text(FAKE_CUDA_SITECUSTOMIZE)
            extra["PYTHONPATH"] = os.pathsep.join(p for p in (str(site), extra.get("PYTHONPATH", "")) if p)
            extra["FAKE_CUDA_PHYSICAL_DEVICES"] = spec.fake_cuda_devices
        return dict(env, **{k: str(v) for k, v in extra.items()})

    def resources(spec: NodeSpec) -> list[str]:
        return [f"--num-cpus={spec.num_cpus}", f"--num-gpus={spec.num_gpus}"]

    head_flags = [f"--port={port}", f"--temp-dir={session_root}"]
    if dashboard:
        head_flags += ["--include-dashboard=true", "--dashboard-host=127.0.0.1", f"--dashboard-port={free_port()}"]
    else:
        head_flags += ["--include-dashboard=false"]
    def ray_start(flags: list[str], spec: NodeSpec) -> None:
        proc = subprocess.run([*start, *flags, *resources(spec)], env=node_env(spec), capture_output=True, text=True,
                              timeout=240)
        if proc.returncode != 0:
            raise RuntimeError(f"`ray start {' '.join(flags)}` exited {proc.returncode}:\n{proc.stderr[-3000:]}")

    try:
        ray_start(["--head", *head_flags], head)
        for spec in workers:
            ray_start([f"--address=127.0.0.1:{port}"], spec)
        yield LocalCluster(address=f"127.0.0.1:{port}", client_env=env, token_path=token_path, session_root=session_root)
    finally:
        _kill_processes_of(session_root)
        shutil.rmtree(session_root, ignore_errors=True)
