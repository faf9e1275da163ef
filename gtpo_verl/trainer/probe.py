"""``gtpo.probe=true``: one step of the user's own recipe, up to its advantages, then a report and exit 0.

The first step runs as in training (rollout, reward, old-log-prob pass, the estimator through verl's
registry); then, before any update or checkpoint, the trainer dumps the step as the entropy audit does
(``<trainer.default_local_dir>/probe/step_<k>.{json,safetensors}``), writes the mechanism report
beside it (``mechanism.json``: what the method does to this model's advantages, from the dump) and
raises ``ProbeFinished``; ``python -m gtpo_verl.main`` prints its line and exits 0. On a cluster this
costs one step's rollout and one forward pass instead of a run that finds out later.
"""

from __future__ import annotations

import json
import os

import torch

from gtpo_verl.trainer.audit_dump import dump_audit_step
from gtpo_verl.trainer.health import method_health
from gtpo_verl.trainer.settings import AuditConfig

PROBE_SUBDIR = "probe"
REPORT_FILE = "mechanism.json"


class ProbeFinished(Exception):
    """The probe wrote its report; ``args[0]`` is the line to print. Not an error: the run exits 0."""


def probe_folder(config) -> str:
    return os.path.join(os.path.abspath(str(config.trainer.default_local_dir)), PROBE_SUBDIR)


def run_probe(trainer, batch, call, mask: torch.Tensor, real: torch.Tensor, entropy) -> None:
    """Dump the step, write its mechanism report, raise ``ProbeFinished`` (never returns)."""
    from gtpo_verl.tools.mechanism import analyse_dir

    folder = probe_folder(trainer.config)
    step = int(getattr(trainer, "global_steps", 0))
    dump = dump_audit_step(trainer, batch, AuditConfig(steps=(step,), dir=folder), call, entropy)
    report = {"step": step, "estimator": call.name, "dump": dump,
              "health": method_health(call, mask, real), "mechanism": analyse_dir(folder)}
    path = os.path.join(folder, REPORT_FILE)
    with open(path + ".part", "w") as f:
        json.dump(report, f, indent=1, ensure_ascii=False)
    os.replace(path + ".part", path)
    health = ", ".join(f"{key.rsplit('/', 1)[1]} {value:.3g}" for key, value in sorted(report["health"].items()))
    raise ProbeFinished(f"gtpo.probe: step {step} of algorithm.adv_estimator={call.name} probed, nothing trained; "
                        f"{health}; report: {path} (gtpo-mechanism {folder} prints it as a table)")
