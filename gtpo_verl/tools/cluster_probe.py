"""Where the preflight's per-node probe runs: one Ray task pinned to every alive node of a cluster,
after asking the head whether it accepts this process's token.

The probe itself (``node_probe.probe_node``) is shipped to the nodes by value, so it also runs,
and reports, on a node where gtpo_verl is missing.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from typing import Optional

from omegaconf import OmegaConf

from gtpo_verl.tools import node_probe
from gtpo_verl.ray_auth import token_source

PROBE_TIMEOUT_S = 180


@dataclass
class Node:
    name: str  # "ip (hostname, node 1a2b3c4d, head)": unique even for two nodes on one machine
    ray_gpus: Optional[float]
    report: dict


class ClusterRefused(Exception):
    """The Ray cluster could not be joined: refused this process's token, or did not answer."""

    def __init__(self, address: str, reason: str):
        self.address = address
        self.reason = reason
        super().__init__(f"{address}: {reason}")

    @classmethod
    def from_exception(cls, address: str, exc: BaseException) -> "ClusterRefused":
        text = (str(exc).strip().splitlines() or [""])[0][:300]
        return cls(address, f"{type(exc).__name__}: {text}" if text else type(exc).__name__)


GCS_CHECK = """
import sys, ray
try:
    ray._raylet.GcsClient(address=sys.argv[1]).internal_kv_get(b"gtpo_preflight", namespace=None, timeout=30)
except Exception as exc:
    print("REFUSED " + type(exc).__name__ + ": " + (str(exc).strip().splitlines() or [""])[0][:300])
else:
    print("ACCEPTED")
"""


def check_token_accepted(address: str) -> None:
    """Ask the head's GCS one question before joining, in a child process: a wrong token then fails in
    seconds with Ray's own reason (``ray.init`` retries for a minute and reports a ConnectionError),
    and a missing one cannot abort this process (Ray's client exits from C++ when it finds none)."""
    if (os.environ.get("RAY_AUTH_MODE") or "").lower() == "token" and token_source() is None:
        raise ClusterRefused(address, "RAY_AUTH_MODE=token, but this process has no token (no RAY_AUTH_TOKEN, "
                                      "RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token)")
    if not re.fullmatch(r"[\w.\-]+:\d+", address):
        return  # "auto" or ray://: ray.init resolves it
    try:
        proc = subprocess.run([sys.executable, "-c", GCS_CHECK, address], capture_output=True, text=True, timeout=90)
    except subprocess.TimeoutExpired:
        raise ClusterRefused(address, "TimeoutError: the head's GCS did not answer within 90 s") from None
    answer = next((line for line in proc.stdout.splitlines() if line.startswith(("ACCEPTED", "REFUSED"))), None)
    if answer == "ACCEPTED":
        return
    if answer is None:  # the client died: Ray's own last words say why
        words = [line for line in proc.stderr.splitlines() if "Authentication" in line or "Check failed" in line]
        answer = "REFUSED " + (words[-1].strip()[:300] if words else f"Ray's client exited with status {proc.returncode}")
    raise ClusterRefused(address, answer.removeprefix("REFUSED "))


def probe_timeout_s() -> float:
    return float(os.environ.get("GTPO_PREFLIGHT_TIMEOUT_S", PROBE_TIMEOUT_S))


def cluster_address(config) -> Optional[str]:
    ray_init = config.get("ray_kwargs", {}).get("ray_init", {}) or {}
    address = ray_init.get("address", None) or os.environ.get("RAY_ADDRESS") or None
    if address and address.startswith(("http://", "https://")):
        return "auto"  # a dashboard (job submission) address: join the cluster this machine belongs to
    return address


def ray_runtime_env(config) -> dict:
    """The runtime env verl's ``run_ppo`` passes to ``ray.init`` (so nodes are probed as the run sees them)."""
    from verl.trainer.constants_ppo import get_ppo_ray_runtime_env

    runtime_env = OmegaConf.merge(
        get_ppo_ray_runtime_env(config), config.get("ray_kwargs", {}).get("ray_init", {}).get("runtime_env", {}) or {}
    )
    return OmegaConf.to_container(runtime_env, resolve=True)


def probe_cluster(config, address: str, request: dict) -> tuple[list[Node], list[str]]:
    """Probe every alive node of the cluster at ``address``: (nodes, names of nodes that did not answer)."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    started = not ray.is_initialized()
    if started:
        check_token_accepted(address)
        try:
            ray.init(address=address, runtime_env=ray_runtime_env(config), log_to_driver=False, logging_level="ERROR")
        except Exception as exc:  # refused (token) or unreachable: one clear line, not a traceback
            raise ClusterRefused.from_exception(address, exc) from None
    try:
        ray.cloudpickle.register_pickle_by_value(node_probe)  # runs where gtpo_verl is missing
        remote_probe = ray.remote(num_cpus=0, max_retries=0)(node_probe.probe_node)
        nodes, refs = [], []
        for info in sorted((n for n in ray.nodes() if n.get("Alive")), key=lambda n: n["NodeManagerAddress"]):
            is_head = info.get("Resources", {}).get("node:__internal_head__", 0) > 0
            name = f"{info['NodeManagerAddress']} ({info.get('NodeManagerHostname', '?')}, node {info['NodeID'][:8]}{', head' if is_head else ''})"
            strategy = NodeAffinitySchedulingStrategy(node_id=info["NodeID"], soft=False)
            gpus = float(info.get("Resources", {}).get("GPU", 0))
            # Hold the node's GPUs, as verl's workers will: Ray sets CUDA_VISIBLE_DEVICES to the GPUs a
            # task holds and blanks it in a task that holds none (so a GPU-less probe sees 0 devices).
            held = gpus if request["count_cuda"] else 0
            # flash-attn only where the actor can run: a node that registers GPUs
            node_request = dict(request, need_flash_attn=request["need_flash_attn"] and gpus > 0)
            refs.append(remote_probe.options(num_gpus=held, scheduling_strategy=strategy).remote(node_request))
            nodes.append(Node(name=name, ray_gpus=gpus, report={}))
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=probe_timeout_s())
        silent = []
        for node, ref in zip(nodes, refs):
            if ref not in ready:
                silent.append(node.name)
                continue
            try:
                node.report = ray.get(ref)
            except Exception as exc:  # the probe could not even start there (e.g. a broken runtime env)
                node.report = {"task_error": f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1][:300]}"}
        return nodes, silent
    finally:
        try:
            ray.cloudpickle.unregister_pickle_by_value(node_probe)
        except Exception:
            pass
        if started:
            ray.shutdown()
