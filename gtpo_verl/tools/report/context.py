"""What the report shows beside the curves: each run's config and the warnings it raised.

- Config: the composed trainer config Hydra saved for the run, ``<run folder>/.hydra/config.yaml``
  (``hydra.run.dir=<run folder>``) or ``<run folder>/config.yaml``, read with ``yaml.safe_load``.
- Warnings: those gtpo_verl's trainer raises are recovered from the metrics themselves (the
  entropy watch's ``gtpo/entropy/{collapse,fall}_warning``, each ``gtpo/health/<check>`` flag
  turning on, with the check's message and the key that fixes it), and from the run's
  ``*.log`` files when the folder holds them (start-up warnings and everything else gtpo_verl
  logged at WARNING).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Optional

import numpy as np

from gtpo_verl.tools.report.runs import Run
from gtpo_verl.trainer.health_checks import HEALTH_CHECKS

CONFIG_FILES = (".hydra/config.yaml", "config.yaml")
# gtpo_verl's warning lines: its loggers' messages (health, entropy watch, watchdog, resume state)
# and the start-up GTPOConfigWarning, whatever prefix Ray or Hydra put before them
LOG_WARNING = re.compile(r"GTPOConfigWarning|gtpo (?:health|watchdog):|gtpo: |\[gtpo_verl[.\w]*\]\[WARNING\]")
MAX_LOG_WARNINGS = 50
ANSI = re.compile(r"\x1b\[[0-9;]*m")  # the colours Ray puts around a worker's prefix
# shown first in each run's config: what tells two runs apart
KEY_SETTINGS = (
    "algorithm.adv_estimator",
    "algorithm.adv_transforms",
    "actor_rollout_ref.actor.policy_loss.loss_mode",
    "actor_rollout_ref.actor.loss_agg_mode",
    "actor_rollout_ref.actor.optim.lr",
    "actor_rollout_ref.actor.clip_ratio_low",
    "actor_rollout_ref.actor.clip_ratio_high",
    "algorithm.filter_groups.enable",
    "data.train_batch_size",
    "actor_rollout_ref.rollout.n",
    "actor_rollout_ref.rollout.val_kwargs.n",
    "data.max_response_length",
    "trainer.total_training_steps",
    "actor_rollout_ref.model.path",
    "data.seed",
)


def find_config(folder: Optional[str]) -> Optional[Path]:
    if not folder:
        return None
    for name in CONFIG_FILES:
        path = Path(folder) / name
        if path.is_file():
            return path
    return None


def flatten(tree: Any, prefix: str = "") -> dict[str, str]:
    """``{"a.b.c": "value"}``; lists and scalars as their JSON text."""
    if isinstance(tree, dict):
        flat: dict[str, str] = {}
        for key, value in tree.items():
            flat.update(flatten(value, f"{prefix}{key}."))
        return flat
    return {prefix[:-1]: tree if isinstance(tree, str) else json.dumps(tree, default=str)}


def read_config(path: Path, notes: list[str]) -> dict[str, str]:
    import yaml  # PyYAML comes with verl (omegaconf)

    try:
        tree = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as error:
        notes.append(f"{path}: not readable as YAML ({type(error).__name__}); config not shown")
        return {}
    if not isinstance(tree, dict):
        notes.append(f"{path}: not a mapping; config not shown")
        return {}
    return flatten(tree)


def key_settings(config: dict[str, str]) -> list[str]:
    """``KEY_SETTINGS`` the config has, then its estimator's own block (``algorithm.<estimator>.*``)."""
    estimator = config.get("algorithm.adv_estimator", "")
    block = f"algorithm.{estimator}."
    return [k for k in KEY_SETTINGS if k in config] + sorted(k for k in config if estimator and k.startswith(block))


def success_threshold(config: dict[str, str]) -> float:
    try:
        return float(config.get("gtpo.validation_metrics.success_threshold", 0.0))
    except ValueError:
        return 0.0


def _turned_on(run: Run, metric: str) -> list[int]:
    """Indices into ``run.steps`` where the 0/1 flag ``metric`` is 1 and was not 1 at its previous logged step."""
    values = run.values.get(metric)
    if values is None:
        return []
    logged = np.flatnonzero(~np.isnan(values))
    on = values[logged] >= 0.5
    starts = on & ~np.concatenate(([False], on[:-1]))
    return logged[starts].tolist()


def metric_warnings(run: Run) -> list[str]:
    """The warnings the trainer logged, recovered from the run's own flags (one per step a flag turned on)."""
    found = []
    missing = np.full(len(run.steps), np.nan)
    entropy, floor = run.values.get("gtpo/entropy/batch_mean", missing), run.values.get("gtpo/entropy/floor", missing)
    ratio, streak = run.values.get("gtpo/entropy/rise_ratio", missing), run.values.get("gtpo/entropy/rise_steps", missing)
    for index in np.flatnonzero(run.values.get("gtpo/entropy/collapse_warning", missing) >= 0.5).tolist():
        head = f"step {run.steps[index]}: entropy watch (gtpo/entropy/collapse_warning): mean old-policy entropy "
        if np.isfinite(floor[index]) and np.isfinite(entropy[index]) and floor[index] > 0:
            found.append(f"{head}{entropy[index]:.3g}, {entropy[index] / floor[index]:.3g}× its lowest baseline, above "
                         f"gtpo.entropy_warning.ratio for {streak[index]:.0f} steps in a row "
                         f"(gtpo.entropy_warning.persist_steps)")
        else:  # a run logged before the watch kept its floor: the ratio it logged, to its running baseline
            found.append(f"{head}rose to {ratio[index]:.3g}× its running baseline (threshold: gtpo.entropy_warning.ratio)")
    for index in np.flatnonzero(run.values.get("gtpo/entropy/fall_warning", missing) >= 0.5).tolist():
        found.append(f"step {run.steps[index]}: entropy watch (gtpo/entropy/fall_warning): mean old-policy entropy fell "
                     f"to {ratio[index]:.3g}× its running baseline (threshold: gtpo.entropy_warning.fall_ratio)")
    for check in HEALTH_CHECKS:
        flag = f"gtpo/health/{check.name}"
        watched = run.values.get(check.metric, np.full(len(run.steps), np.nan))
        for index in _turned_on(run, flag):
            value = watched[index]
            text = check.describe(f"{value:.0%}" if value == value else "most")
            found.append(f"step {run.steps[index]}: {flag} on ({check.metric} = {value:.3g} at this step, running "
                         f"mean ≥ {check.threshold:g}): {text}")
    return found


def warning_message(line: str) -> str:
    """The message of a warning line, without what Ray, Hydra or ``warnings`` put before it."""
    line = ANSI.sub("", line).strip()
    line = re.sub(r"^\(.*?\)\s*", "", line)  # Ray's "(TaskRunner pid=…)" prefix
    for marker in ("[WARNING] - ", "GTPOConfigWarning: "):  # Hydra's log format; warnings.warn's "file:line: Category: "
        if marker in line:
            line = line.split(marker, 1)[1]
    return line.strip()


def log_warnings(folder: Optional[str], notes: list[str]) -> list[str]:
    """gtpo_verl's warning lines in the folder's ``*.log`` files: each distinct message once, with the log it came from."""
    if not folder:
        return []
    found: dict[str, str] = {}
    for path in sorted(Path(folder).glob("*.log")):
        try:
            with open(path, encoding="utf-8", errors="replace") as handle:
                for line in handle:
                    if LOG_WARNING.search(line):
                        message = warning_message(line)
                        found.setdefault(message, f"{path.name}: {message}")
        except OSError as error:
            notes.append(f"{path}: not readable ({error.strerror})")
    lines = list(found.values())
    if len(lines) > MAX_LOG_WARNINGS:
        notes.append(f"{len(lines) - MAX_LOG_WARNINGS} more gtpo_verl warning line(s) in the logs not shown")
    return lines[:MAX_LOG_WARNINGS]


def health_table() -> list[dict]:
    """The checks behind ``gtpo/health/*``: flag, watched metric, threshold, and the fix."""
    return [{"flag": f"gtpo/health/{c.name}", "metric": c.metric, "threshold": c.threshold,
             "message": c.describe(f"≥ {c.threshold:.0%}")} for c in HEALTH_CHECKS]
