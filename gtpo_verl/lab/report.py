"""results.json, the markdown table and the figures (mean over seeds + one thin line per seed)."""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np

CURVE_FIGURES = ("reward", "entropy", "length", "clipfrac")
VALIDATION_FIGURES = ("pass@1", "pass@16")


def write_results(path: str, payload: dict[str, Any]) -> str:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(payload, f, separators=(",", ":"), allow_nan=True)
    os.replace(tmp, path)
    return path


def _fmt(x: float, digits: int = 3) -> str:
    return "nan" if x != x else f"{x:.{digits}f}"


def markdown_table(payload: dict[str, Any]) -> str:
    """Per task and method: mean ± sample std over seeds of each endpoint, end-state counts, health."""
    verdicts = payload["verdicts"]
    lines = []
    by_key: dict[str, list[dict]] = {}
    for run in payload["runs"]:
        by_key.setdefault(f"{run['task']}/{run['method']}", []).append(run)
    for task in sorted({r["task"] for r in payload["runs"]}):
        lines += [f"### {task}", "",
                  "| method | seeds | pass@1 | pass@16 | entropy | length | drawdown | clipfrac | all-equal groups | δ filtered | bonus clipped | end states |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for method in payload["methods"]:
            key = f"{task}/{method}"
            ends = verdicts["endpoints"].get(key, {})
            if not ends:
                continue

            def stat(name):
                values = np.array([e[name] for e in ends.values()], dtype=np.float64)
                sd = values.std(ddof=1) if values.size > 1 else float("nan")
                return f"{_fmt(values.mean())} ± {_fmt(sd)}"

            def health(name, digits=3):
                values = [np.nanmean(r["curves"][name]) for r in by_key[key] if np.isfinite(r["curves"][name]).any()]
                return _fmt(float(np.mean(values)), digits) if values else "–"

            states = ", ".join(f"{k} {v}" for k, v in sorted(verdicts["end_states"][key].items()))
            lines.append(f"| {method} | {len(ends)} | {stat('pass@1')} | {stat('pass@16')} | {stat('entropy')} | {stat('length')} | "
                         f"{stat('drawdown')} | {health('clipfrac', 4)} | {health('all_equal_frac')} | {health('delta_filtered_frac')} | "
                         f"{health('bonus_clipped_frac')} | {states} |")
        lines.append("")
    lines += ["Mean ± sample std over seeds of each run's endpoint; clipfrac, all-equal groups, δ filtered and bonus clipped are",
              "run means averaged over seeds.", "",
              "### Verdicts (primary claims, Holm over all of them)", "",
              "| claim | task | endpoint | seeds | test | mean diff [95 % CI] | p | p (Holm) | verdict |", "|---|---|---|---|---|---|---|---|---|"]
    for row in verdicts["primary"]:
        lo, hi = row["ci95"]
        lines.append(f"| {row['id']}: {row['claim']} | {row['task']} | {row['endpoint']} | {row['seeds']} | {row['test']} | "
                     f"{_fmt(row['mean_difference'])} [{_fmt(lo)}, {_fmt(hi)}] | {_fmt(row['p'], 4)} | {_fmt(row['p_holm'], 4)} | **{row['verdict']}** |")
    lines += ["", "### Context (vs DAPO, two-sided, Holm within this family)", "",
              "| method | task | endpoint | mean diff [95 % CI] | p | p (Holm) | result |", "|---|---|---|---|---|---|---|"]
    for row in verdicts["context"]:
        lo, hi = row["ci95"]
        lines.append(f"| {row['method']} | {row['task']} | {row['endpoint']} | {_fmt(row['mean_difference'])} [{_fmt(lo)}, {_fmt(hi)}] | "
                     f"{_fmt(row['p'], 4)} | {_fmt(row['p_holm'], 4)} | {row['verdict']} |")
    health = payload.get("health")
    if health:
        lines += ["", "### Health: silent terms (mean over seeds of the per-run mean; ≥ threshold = the term does little)", "",
                  "| task/method | metric | mean | threshold | past threshold |", "|---|---|---|---|---|"]
        for key, metrics in sorted(health["silent_terms"].items()):
            for name, row in metrics.items():
                lines.append(f"| {key} | {name} | {_fmt(row['mean'])} | {row['threshold']} | {'yes' if row['past_threshold'] else 'no'} |")
        lines += ["", "### Health: the trainer's HealthMonitor replayed on every run (flag = running mean ≥ threshold)", "",
                  "| check | end state | runs | flagged at the end | ever flagged | median first flag step |", "|---|---|---|---|---|---|"]
        for name, states in sorted(health.get("monitor", {}).items()):
            for state, row in sorted(states.items()):
                first = "–" if row["median_first_flag_step"] is None else f"{row['median_first_flag_step']:.0f}"
                lines.append(f"| {name} | {state} | {row['runs']} | {row['flagged_at_end']} | {row['ever_flagged']} | {first} |")
        lines += ["", "### Health: the entropy watch replayed on every run (degrading = pass@16 below 0.8 × its best)", "",
                  "| direction | ratio | degrading runs | warned before | missed | median lead (steps) | false alarms / non-degrading runs |",
                  "|---|---|---|---|---|---|---|"]
        for row in health["entropy_watch"]:
            lead = "–" if row["median_lead_steps"] is None else f"{row['median_lead_steps']:.0f}"
            lines.append(f"| {row['direction']} | {row['ratio']} | {row['degrading_runs']} | {row['detected_before']} | {row['missed']} | "
                         f"{lead} | {row['false_alarms']} / {row['non_degrading_runs']} |")
    return "\n".join(lines) + "\n"


def figures(payload: dict[str, Any], folder: str) -> list[str]:
    """One PNG per task: a panel per metric, a colour per method, mean bold and each seed thin."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    os.makedirs(folder, exist_ok=True)
    written = []
    colours = {m: plt.cm.tab10(i % 10) for i, m in enumerate(payload["methods"])}
    for task in sorted({r["task"] for r in payload["runs"]}):
        panels = CURVE_FIGURES + VALIDATION_FIGURES
        fig, axes = plt.subplots(2, 3, figsize=(16, 8.5))
        for ax, name in zip(axes.flat, panels):
            for method in payload["methods"]:
                runs = [r for r in payload["runs"] if r["task"] == task and r["method"] == method]
                if not runs:
                    continue
                if name in CURVE_FIGURES:
                    series = np.array([r["curves"][name] for r in runs], dtype=np.float64)
                    window = 10
                    kernel = np.ones(window) / window
                    series = np.array([np.convolve(np.nan_to_num(s), kernel, mode="valid") for s in series])
                    x = np.arange(series.shape[1]) + window
                else:
                    x = np.array([v["step"] for v in runs[0]["validation"]])
                    series = np.array([[v[name] for v in r["validation"]] for r in runs], dtype=np.float64)
                for s in series:
                    ax.plot(x, s, color=colours[method], alpha=0.15, linewidth=0.6)
                ax.plot(x, series.mean(0), color=colours[method], linewidth=2.0, label=method)
            ax.set_title(name + (" (10-step moving mean)" if name in CURVE_FIGURES else " (validation)"))
            ax.set_xlabel("step")
        handles, labels = axes.flat[0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="lower center", ncol=5, fontsize=9)
        fig.suptitle(f"gtpo_verl lab: {task} (bold: mean over seeds; thin: one seed)")
        fig.tight_layout(rect=(0, 0.07, 1, 1))
        path = os.path.join(folder, f"{task}.png")
        fig.savefig(path, dpi=90)
        plt.close(fig)
        written.append(path)
    return written
