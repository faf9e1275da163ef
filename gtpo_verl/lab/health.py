"""Algorithm health, calibrated on lab runs.

- Silent terms: per method, the mean δ filtered fraction (``gtpo/delta/filtered_frac``), the
  entropy-advantage bonus's clipped fraction and the all-equal-group fraction, against the
  thresholds a warning would use (``SILENT_TERM_THRESHOLDS``).
- The entropy watch: the real trainer's ``EntropyWatch`` (``trainer/diagnostics.py``) replayed
  on every run's training entropy curve, in both directions (a falling entropy is watched as a
  rising 1/H). A run *degrades* at the first validation where pass@16 is below
  ``DEGRADE_FRACTION`` × its best earlier value; the lead time is that step minus the first
  warning's step. A warning in a run that never degrades is a false alarm.
"""

from __future__ import annotations

from typing import Any

import numpy as np

SILENT_TERM_THRESHOLDS = {"delta_filtered_frac": 0.9, "bonus_clipped_frac": 0.9, "all_equal_frac": 0.5}
DEGRADE_FRACTION = 0.8
WATCH_RATIOS = (1.1, 1.25, 1.5)


def _first_warning(entropy: list[float], ratio: float, invert: bool) -> int | None:
    from gtpo_verl.trainer.diagnostics import PREFIX, EntropyWatch

    watch = EntropyWatch(ratio=ratio)
    for step, value in enumerate(entropy, start=1):
        if not value == value or value <= 0:
            continue
        if watch.update(1.0 / value if invert else value)[PREFIX + "entropy/collapse_warning"]:
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
    for direction, invert in (("rising", False), ("falling", True)):
        for ratio in WATCH_RATIOS:
            leads, missed, false_alarms, quiet = [], 0, 0, 0
            for run in runs:
                warning = _first_warning(run["curves"]["entropy"], ratio, invert)
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
    return {key: {name: {"mean": float(np.mean(v)), "threshold": SILENT_TERM_THRESHOLDS[name],
                         "past_threshold": bool(np.mean(v) >= SILENT_TERM_THRESHOLDS[name])} for name, v in metrics.items()}
            for key, metrics in out.items()}
