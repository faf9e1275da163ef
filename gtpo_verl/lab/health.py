"""Algorithm health: the trainer's checks replayed on lab runs whose outcomes are known.

- Silent terms: per method, the mean δ filtered fraction (``gtpo/delta/filtered_frac``), the
  entropy-advantage bonus's clipped fraction and the all-equal-group fraction, against the
  thresholds a warning would use (``SILENT_TERM_THRESHOLDS``).
- The entropy watch: the real trainer's ``EntropyWatch`` (``trainer/diagnostics.py``) replayed
  on every run's training entropy curve, in each direction (its rising and its falling flag). A run *degrades* at the first validation where pass@16 is below
  ``DEGRADE_FRACTION`` × its best earlier value; the lead time is that step minus the first
  warning's step. A warning in a run that never degrades is a false alarm. The rising flag is
  replayed at each ``persist_steps`` too; at other batch sizes (``prompt_noise_replay``: the
  run's own batch-to-batch noise scaled by 1/sqrt(prompts)); and on synthetic collapses
  (``ramp_delays``: each quiet run's curve plus a steady rise from a known step).

    python -m gtpo_verl.lab.health docs/lab/results.json    # the entropy watch's replay tables
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
WATCH_PERSIST_STEPS = (1, 3, 5, 10)
LAB_PROMPTS = 8  # the default study's prompts a step (results.json["sizes"]["prompts"])
REPLAY_PROMPTS = (1, 2, 4, 8, 16, 32, 64)
NOISE_HALF_WINDOW = 5  # the trend under a run's batch noise: a centred mean of 11 steps (log entropy)
RAMP_START = 200  # the synthetic collapse starts after this step...
RAMP_SLOPES = (0.005, 0.01, 0.02)  # ...rising by this many nats a step


def _first_warning(entropy: list[float], ratio: float, falling: bool, persist_steps: int = 1,
                   after: int = 0) -> int | None:
    """The first step after ``after`` the trainer's entropy watch flags, watching one direction at ``ratio``."""
    from gtpo_verl.trainer.diagnostics import PREFIX, EntropyWatch

    if falling:
        watch = EntropyWatch(ratio=math.inf, fall_ratio=ratio)
    else:
        watch = EntropyWatch(ratio=ratio, fall_ratio=None, persist_steps=persist_steps)
    flag = PREFIX + ("entropy/fall_warning" if falling else "entropy/collapse_warning")
    for step, value in enumerate(entropy, start=1):
        if not value == value or value <= 0:
            continue
        if watch.update(value)[flag] and step > after:
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
    settings = [("rising", False, ratio, persist) for ratio in WATCH_RATIOS for persist in WATCH_PERSIST_STEPS]
    settings += [("falling", True, ratio, None) for ratio in WATCH_RATIOS]
    for direction, falling, ratio, persist in settings:
        leads, missed, false_alarms, quiet = [], 0, 0, 0
        for run in runs:
            warning = _first_warning(run["curves"]["entropy"], ratio, falling, persist or 1)
            event = degraded[id(run)]
            if event is None:
                false_alarms += warning is not None
                quiet += warning is None
            elif warning is not None and warning <= event:
                leads.append(event - warning)
            else:
                missed += 1
        rows.append({"direction": direction, "ratio": ratio, "persist_steps": persist, "degrading_runs": len(leads) + missed,
                     "detected_before": len(leads), "missed": missed,
                     "median_lead_steps": float(np.median(leads)) if leads else None,
                     "false_alarms": false_alarms, "non_degrading_runs": false_alarms + quiet})
    return rows


def batch_noise_at(entropy: list[float], prompts: int, lab_prompts: int = LAB_PROMPTS) -> list[float]:
    """A run's entropy curve as if each batch held ``prompts`` prompts: its log's deviation from a
    centred moving mean (the batch noise) scaled by sqrt(lab_prompts / prompts), the trend kept.

    NOTE: assumes the batch noise is independent across prompts; missing steps stay missing.
    """
    logs = np.array([math.log(v) if v == v and v > 0 else np.nan for v in entropy], dtype=np.float64)
    if prompts == lab_prompts:
        return [float(v) for v in np.exp(logs)]
    finite = np.isfinite(logs)
    window = np.ones(2 * NOISE_HALF_WINDOW + 1)  # centred, cut at the ends; the mean of the finite values in it
    total = np.convolve(np.where(finite, logs, 0.0), window, mode="same")
    count = np.convolve(finite.astype(np.float64), window, mode="same")
    with np.errstate(invalid="ignore", divide="ignore"):
        trend = total / count
    return [float(v) for v in np.exp(trend + (logs - trend) * math.sqrt(lab_prompts / prompts))]


def prompt_noise_replay(runs: list[dict], ratio: float, persist_steps: int,
                        prompts: tuple[int, ...] = REPLAY_PROMPTS) -> dict[int, int]:
    """False alarms of the rising flag on the runs that never degrade, per prompts a step (``batch_noise_at``)."""
    quiet = [run["curves"]["entropy"] for run in runs if degradation_step(run) is None]
    return {p: sum(_first_warning(batch_noise_at(curve, p), ratio, False, persist_steps) is not None for curve in quiet)
            for p in prompts}


def quiet_min_prompts(false_alarms: dict[int, int]) -> int | None:
    """The fewest prompts a step from which every larger replayed batch had no false alarm (None: none quiet)."""
    needed = None
    for p in sorted(false_alarms, reverse=True):
        if false_alarms[p]:
            break
        needed = p
    return needed


def ramp_delays(runs: list[dict], ratio: float, persist_steps: int, slope: float, start: int = RAMP_START) -> list[float]:
    """Steps from ``start`` to the rising flag on each never-degrading run's curve plus ``slope`` nats a step
    after ``start`` (a synthetic collapse under the lab's own noise); inf where it never flags."""
    delays = []
    for run in runs:
        if degradation_step(run) is not None:
            continue
        curve = [v + slope * (step - start) if step > start and v == v else v
                 for step, v in enumerate(run["curves"]["entropy"], start=1)]
        warning = _first_warning(curve, ratio, False, persist_steps, after=start)
        delays.append(math.inf if warning is None else float(warning - start))
    return delays


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


def _steps(value: float) -> str:
    return f"{value:.0f}" if math.isfinite(value) else "never"


def _watch_tables(runs: list[dict]) -> list[str]:
    """The rising flag's replay: false alarms by prompts a step and delays on the synthetic collapses."""
    lines = ["| ratio | steps in a row | " + " | ".join(f"{p} prompts" for p in REPLAY_PROMPTS) + " | "
             + " | ".join(f"delay at {s} nats/step (median / max / never)" for s in RAMP_SLOPES) + " |",
             "|---|---|" + "---|" * (len(REPLAY_PROMPTS) + len(RAMP_SLOPES))]
    for ratio in WATCH_RATIOS:
        for persist in WATCH_PERSIST_STEPS:
            alarms = prompt_noise_replay(runs, ratio, persist)
            cells = [str(alarms[p]) for p in REPLAY_PROMPTS]
            for slope in RAMP_SLOPES:
                delays = np.asarray(ramp_delays(runs, ratio, persist, slope))
                never = int((~np.isfinite(delays)).sum())
                median = np.median(delays)
                worst = delays[np.isfinite(delays)].max() if never < delays.size else math.inf
                cells.append(f"{_steps(median)} / {_steps(worst)} / {never}")
            lines.append(f"| {ratio} | {persist} | " + " | ".join(cells) + " |")
    return lines


if __name__ == "__main__":
    import json
    import sys

    with open(sys.argv[1] if len(sys.argv) > 1 else "docs/lab/results.json") as handle:
        print("\n".join(_watch_tables(json.load(handle)["runs"])))
