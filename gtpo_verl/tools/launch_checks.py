"""The preflight's checks for what would end a GPU run late, after the model is loaded: a wandb
logger that cannot start, CPU mode inherited by a GPU run, unwritable cache folders, collectives
between nodes that would fall back to TCP or bind loopback, and the checkpoint folder, which the
driver creates once before the nodes are probed (and removes again if it made it).

Each check returns ``(name, ok, detail, fix)`` for ``preflight.Check``; ``None`` where it does not
apply to the config.
"""

from __future__ import annotations

import contextlib
import os
from typing import Iterator, Optional

from gtpo_verl.trainer.platform_guard import cpu_mode_variables
from gtpo_verl.tools.node_probe import WANDB_QUIET_MODES

CheckTuple = tuple[str, bool, str, str]


def uses_wandb(config) -> bool:
    """``trainer.logger`` starts wandb (``wandb``, or verl's deprecated alias ``tracking``)."""
    loggers = config.trainer.get("logger", None) or []
    loggers = [loggers] if isinstance(loggers, str) else [str(name) for name in loggers]
    return bool({"wandb", "tracking"} & set(loggers))


def checkpoint_path(config) -> str:
    """``trainer.default_local_dir`` as the driver resolves it (remote URLs as they are)."""
    path = str(config.trainer.default_local_dir)
    return path if "://" in path else os.path.abspath(os.path.expanduser(path))


@contextlib.contextmanager
def checkpoint_folder_for_probes(path: str) -> Iterator[Optional[str]]:
    """Create ``path`` here (the driver) for the duration, yielding why not if it cannot be; on exit
    remove the folders this created, deepest first. The nodes' probes only write a file into it."""
    if "://" in path:
        yield None
        return
    created, probe = [], path
    while not os.path.exists(probe):
        created.append(probe)
        probe = os.path.dirname(probe)
    try:
        os.makedirs(path, exist_ok=True)
        error = None
    except OSError as exc:
        error = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
    try:
        yield error
    finally:
        for folder in created:
            with contextlib.suppress(OSError):
                os.rmdir(folder)


def cpu_mode_check(config, nodes) -> Optional[CheckTuple]:
    """GTPO_VERL_CPU=1 / VERL_PLATFORM=cpu on the driver or a node of a GPU run (trainer.device != cpu)."""
    device = str(config.trainer.get("device", "cuda"))
    if device == "cpu":
        return None
    found = [f"this machine (the driver): {', '.join(cpu_mode_variables())}"] if cpu_mode_variables() else []
    found += [f"{n.name}: {', '.join(n.report['cpu_mode'])}" for n in nodes if n.report.get("cpu_mode")]
    return (
        "CPU mode", not found,
        (f"trainer.device={device}, but the CPU platform is selected on " + "; ".join(found)) if found
        else f"no CPU-mode variable on the driver or {len(nodes)} node{'s' * (len(nodes) != 1)}",
        "unset GTPO_VERL_CPU and VERL_PLATFORM in the shell that submits the job and starts Ray (sbatch and "
        "`ray start` pass it on to every node), or set trainer.device=cpu for a CPU run",
    )


def wandb_check(config, nodes) -> Optional[CheckTuple]:
    """wandb in trainer.logger: on every node (the trainer may run on any) wandb must be offline or
    disabled, or have an API key and reach its server; verl starts wandb only after the model is loaded."""
    if not uses_wandb(config):
        return None
    problems = []
    for node in nodes:
        access = node.report.get("wandb")
        if not access or access["mode"] in WANDB_QUIET_MODES:
            continue
        if not access["key"]:
            problems.append(f"{node.name}: no API key (no WANDB_API_KEY, no ~/.netrc entry for {access['server'].split(':')[0]})")
        elif access.get("key_problem"):  # wandb.init refuses it before asking the server
            problems.append(f"{node.name}: the key from {access['key']} is malformed: {access['key_problem']}")
        elif access["unreachable"]:
            problems.append(f"{node.name}: {access['server']} unreachable ({access['unreachable']})")
    quiet = sorted({n.report["wandb"]["mode"] for n in nodes if n.report.get("wandb")} & set(WANDB_QUIET_MODES))
    return (
        "wandb", not problems,
        ("trainer.logger has wandb, which verl starts only after the model is loaded: " + "; ".join(problems)) if problems
        else f"ready on {len(nodes)} node{'s' * (len(nodes) != 1)}" + (f" (WANDB_MODE={', '.join(quiet)})" if quiet else ""),
        "give every node WANDB_API_KEY in the environment Ray starts from (sbatch passes the submitting shell's; "
        "or `wandb login` with a shared HOME), or WANDB_MODE=offline there (then `wandb sync` the run folder), "
        "or drop wandb: LOGGER='[\"console\"]' (trainer.logger)",
    )


def cache_check(config, nodes) -> Optional[CheckTuple]:
    """A GPU run: every cache folder (HF datasets, Triton, vLLM, torch.compile, XDG) writable on every
    node; a container's HOME and root filesystem may be read-only, and the run would die minutes in."""
    if str(config.trainer.get("device", "cuda")) == "cpu":
        return None
    probed = [n for n in nodes if "caches" in n.report]
    if not probed:
        return None
    bad = [f"{n.name}: {why}" for n in probed for why in n.report["caches"].values() if why]
    return (
        "caches", not bad,
        "; ".join(bad) if bad else f"{len(probed[0].report['caches'])} cache folder"
        f"{'s' * (len(probed[0].report['caches']) != 1)} writable on {len(probed)} node{'s' * (len(probed) != 1)}",
        "export XDG_CACHE_HOME, HF_HOME, TRITON_CACHE_DIR, VLLM_CACHE_ROOT and TORCHINDUCTOR_CACHE_DIR to a "
        "node-local folder mounted into the container before `ray start` (recipes/slurm/ray_on_slurm.sbatch does: "
        "CACHE_DIR under NODE_LOCAL_DIR)",
    )


def _loopback(address: Optional[str]) -> bool:
    return address is None or address.startswith("127.") or address == "::1"


def interconnect_check(config, nodes) -> Optional[CheckTuple]:
    """A multi-node GPU run: on every GPU node an InfiniBand device for NCCL, unless TCP is chosen
    explicitly (NCCL_IB_DISABLE=1 or NCCL_NET=Socket; NCCL otherwise falls back to TCP sockets without
    an error), and a hostname that does not resolve to loopback first, unless GLOO_SOCKET_IFNAME is set
    (verl's cpu:gloo group would bind 127.x and hang at worker init)."""
    nnodes = config.trainer.get("nnodes")
    if str(config.trainer.get("device", "cuda")) == "cpu" or not isinstance(nnodes, int) or nnodes < 2:
        return None
    gpu_nodes = [n for n in nodes if (n.ray_gpus or 0) > 0 and "interconnect" in n.report]
    if not gpu_nodes:
        return None
    problems, transports = [], set()
    for node in gpu_nodes:
        seen = node.report["interconnect"]
        if seen["nccl_tcp"]:
            transports.add("TCP (" + ", ".join(seen["nccl_tcp"]) + ")")
        elif not seen["infiniband"]:
            problems.append(f"{node.name}: no InfiniBand device (/dev/infiniband/uverbs*): NCCL would fall back to "
                            "TCP sockets without an error")
        else:
            transports.add("InfiniBand")
        if _loopback(seen["hostname_address"]) and not seen["gloo_socket_ifname"]:
            problems.append(f"{node.name}: its hostname resolves to {seen['hostname_address'] or 'nothing'} first, "
                            "where gloo binds (GLOO_SOCKET_IFNAME unset)")
    return (
        "interconnect", not problems,
        "; ".join(problems) if problems else
        f"{' and '.join(sorted(transports))} for NCCL, gloo on a routable address, on {len(gpu_nodes)} GPU nodes",
        "pass the HCAs into the container (MELLANOX_VISIBLE_DEVICES=all for enroot/pyxis, which "
        "recipes/slurm/ray_on_slurm.sbatch exports; --device=/dev/infiniband with Docker; --bind /dev/infiniband "
        "with Apptainer), or choose TCP explicitly with NCCL_IB_DISABLE=1 where there is no InfiniBand; set "
        "GLOO_SOCKET_IFNAME to the interface the nodes reach each other through (the sbatch derives it)",
    )
