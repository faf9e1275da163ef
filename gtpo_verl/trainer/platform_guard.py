"""CPU mode never reaches a GPU run: the variables that switch verl and gtpo_verl to the CPU platform,
refused unless ``trainer.device=cpu``.

``GTPO_VERL_CPU=1`` makes the plugin activate the CPU platform on ``import verl`` in every process, and
``VERL_PLATFORM=cpu`` selects it in verl; both travel from a submitting shell to every node (sbatch's
``--export=ALL``, ``ray start``'s environment), while ``python -m gtpo_verl.main`` otherwise looks
only at ``trainer.device``. The preflight checks the same on every node (``tools/node_probe.py``).
"""

from __future__ import annotations

import os
from typing import Mapping, Optional

# variable → the value that selects the CPU platform (gtpo_verl/cpu/platform.py sets both)
CPU_MODE_VARIABLES = {"GTPO_VERL_CPU": "1", "VERL_PLATFORM": "cpu"}


def cpu_mode_variables(environ: Optional[Mapping[str, str]] = None) -> list[str]:
    """``NAME=value`` of each CPU-mode variable set in ``environ`` (default: this process's). With
    GTPO_VERL_CPU=1 the plugin has already set VERL_PLATFORM=cpu itself on ``import verl``: only the
    former is named then."""
    environ = os.environ if environ is None else environ
    found = [f"{name}={environ[name]}" for name, value in CPU_MODE_VARIABLES.items()
             if (environ.get(name) or "").strip().lower() == value]
    return found[:1] if len(found) == 2 else found


def refuse_cpu_mode_on_gpu(config, environ: Optional[Mapping[str, str]] = None) -> None:
    """Raise a ``ConfigError`` when a CPU-mode variable is set but ``trainer.device`` is not ``cpu``."""
    from gtpo_verl.plugin.config import ConfigError

    device = str(config.trainer.get("device", "cuda"))
    found = cpu_mode_variables(environ)
    if device != "cpu" and found:
        name = found[0].split("=")[0]
        raise ConfigError(
            "trainer.device",
            f"{found[0]} in this environment selects the CPU platform, but trainer.device={device}: unset {name} "
            "in the shell that starts the run (sbatch and `ray start` pass it to every node), or set "
            "trainer.device=cpu for a CPU run."
        )
