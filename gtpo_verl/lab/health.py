"""Algorithm health: the trainer's checks replayed on lab runs whose outcomes are known.

- Silent terms: per method, the mean δ filtered fraction (``gtpo/delta/filtered_frac``), the
  entropy-advantage bonus's clipped fraction and the all-equal-group fraction, against the
  thresholds a warning would use (``SILENT_TERM_THRESHOLDS``).
- The entropy watch: the real trainer's ``EntropyWatch`` (``trainer/diagnostics.py``) replayed
  on every run's training entropy curve, in each direction (its rising and its falling flag). A run *degrades* at the first validation where pass@16 is below
  ``DEGRADE_FRACTION`` × its best earlier value; the lead time is that step minus the first
  warning's step. A warning in a run that never degrades is a false alarm.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from gtpo_verl.trainer.health import HEALTH_CHECKS

# the lab's curve of each of the trainer's health checks (gtpo_verl/trainer/health.py)
CURVE_OF_CHECK = {"delta_filtered": "delta_filtered_frac", "bonus_clipped": "bonus_clipped_frac",
                  "all_equal_groups": "all_equal_frac"}
SILENT_TERM_THRESHOLDS = {CURVE_OF_CHECK[check.name]: check.threshold for check in HEALTH_CHECKS}
DEGRADE_FRACTION = 0.8
WATCH_RATIOS = (1.1, 1.25, 1.5, 2.0)


def _first_warning(entropy: list[float], ratio: float, falling: bool) -> int | None:
    """The first step the trainer's entropy watch flags, watching one direction at ``ratio``."""
    from gtpo_verl.trainer.diagnostics import PREFIX, EntropyWatch

    watch = EntropyWatch(ratio=math.inf, fall_ratio=ratio) if falling else EntropyWatch(ratio=ratio, fall_ratio=None)
    flag = PREFIX + ("entropy/fall_warning" if falling else "entropy/collapse_warning")
    for step, value in enumerate(entropy, start=1):
        if not value == value or value <= 0:
            continue
        if watch.update(value)[flag]:
            return step
    return None


def degradation_step(run: dict) -> int | None:
    """The first validation step where pass@16 < DEGRADE_FRACTION × its best earlier value, or None."""
    best = -1.0
    for v in run["validation"]:
        if best > 0 and v["pass@16"] < DEGRADE_FRACTION * best:
            return int(v["step"])
        best = max(best, v["pass@16"])
    return None


def entropy_watch_calibration(runs: list[dict]) -> list[dict[str, Any]]:
    """Per watch ratio and direction: detections, lead times and false alarms over all runs."""
    rows = []
    degraded = {id(r): degradation_step(r) for r in runs}
    for direction, falling in (("rising", False), ("falling", True)):
        for ratio in WATCH_RATIOS:
            leads, missed, false_alarms, quiet = [], 0, 0, 0
            for run in runs:
                warning = _first_warning(run["curves"]["entropy"], ratio, falling)
                event = degraded[id(run)]
                if event is None:
                    false_alarms += warning is not None
                    quiet += warning is None
                elif warning is not None and warning <= event:
                    leads.append(event - warning)
                else:
                    missed += 1
            rows.append({"direction": direction, "ratio": ratio, "degrading_runs": len(leads) + missed, "detected_before": len(leads),
                         "missed": missed, "median_lead_steps": float(np.median(leads)) if leads else None,
                         "false_alarms": false_alarms, "non_degrading_runs": false_alarms + quiet})
    return rows


def silent_terms(runs: list[dict]) -> dict[str, dict[str, Any]]:
    """Per task/method: the mean of each silent-term metric and whether it is past its threshold."""
    out: dict[str, dict[str, Any]] = {}
    for run in runs:
        key = f"{run['task']}/{run['method']}"
        for name in SILENT_TERM_THRESHOLDS:
            values = np.asarray(run["curves"][name], dtype=np.float64)
            if np.isfinite(values).any():
                out.setdefault(key, {}).setdefault(name, []).append(float(np.nanmean(values)))
    return {key: {name: {"mean": float(np.mean(v)), "min": float(np.min(v)), "max": float(np.max(v)),
                         "threshold": SILENT_TERM_THRESHOLDS[name],
                         "past_threshold": bool(np.mean(v) >= SILENT_TERM_THRESHOLDS[name]),
                         "runs_past_threshold": int(np.sum(np.asarray(v) >= SILENT_TERM_THRESHOLDS[name])), "runs": len(v)}
                  for name, v in metrics.items()}
            for key, metrics in out.items()}


def by_end_state(runs: list[dict], last: int = 100) -> dict[str, dict[str, Any]]:
    """Per end state: each silent-term metric's mean over a run's last ``last`` steps, and how many
    runs are at or past the threshold (the calibration: where a flag separates runs that still
    learn from runs whose term or signal is gone)."""
    values: dict[str, dict[str, list[float]]] = {}
    for run in runs:
        for name in SILENT_TERM_THRESHOLDS:
            tail = np.asarray(run["curves"][name][-last:], dtype=np.float64)
            if np.isfinite(tail).any():
                values.setdefault(run["end_state"], {}).setdefault(name, []).append(float(np.nanmean(tail)))
    return {state: {name: {"runs": len(v), "mean": float(np.mean(v)), "min": float(np.min(v)), "max": float(np.max(v)),
                           "runs_past_threshold": int(np.sum(np.asarray(v) >= SILENT_TERM_THRESHOLDS[name]))}
                    for name, v in metrics.items()}
            for state, metrics in sorted(values.items())}


def monitor_replay(runs: list[dict]) -> dict[str, dict[str, Any]]:
    """The trainer's ``HealthMonitor`` replayed on every run's curves: per check and end state, the
    runs flagged at their last step, and the median step the flag first turned on."""
    import logging

    from gtpo_verl.trainer.diagnostics import PREFIX
    from gtpo_verl.trainer.health import HealthMonitor

    logging.getLogger("gtpo_verl.trainer.health").setLevel(logging.ERROR)  # the replay's warnings are the data
    out: dict[str, dict[str, Any]] = {}
    for run in runs:
        monitor = HealthMonitor()
        first: dict[str, int] = {}
        last: dict[str, float] = {}
        curves = {check: run["curves"][CURVE_OF_CHECK[check.name]] for check in HEALTH_CHECKS}
        for step in range(len(run["curves"]["reward"])):
            values = {check.metric: curves[check][step] for check in HEALTH_CHECKS if curves[check][step] == curves[check][step]}
            for key, flag in monitor.update(values).items():
                name = key[len(PREFIX + "health/"):]
                last[name] = flag
                if flag and name not in first:
                    first[name] = step + 1
        for name, flag in last.items():
            row = out.setdefault(name, {}).setdefault(run["end_state"], {"runs": 0, "flagged_at_end": 0, "first_flag_steps": []})
            row["runs"] += 1
            row["flagged_at_end"] += int(flag)
            if name in first:
                row["first_flag_steps"].append(first[name])
    for states in out.values():
        for row in states.values():
            steps = row.pop("first_flag_steps")
            row["ever_flagged"] = len(steps)
            row["median_first_flag_step"] = float(np.median(steps)) if steps else None
    return out
