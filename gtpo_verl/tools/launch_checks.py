"""The preflight's checks for what would end a GPU run late, after the model is loaded: a wandb
logger that cannot start, CPU mode inherited by a GPU run, and the checkpoint folder, which the
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
