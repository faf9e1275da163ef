"""results.json, the markdown table and the figures (mean over seeds + one thin line per seed).

The figures are drawn by the package's figure writer (``gtpo_verl/tools/figures.py``) and need matplotlib
(a dependency of the lab: ``pip install -c requirements/test.txt matplotlib``); without it ``figures``
returns no file and the study prints one line saying so.
"""

from __future__ import annotations

import json
import os
import warnings
from typing import Any

import numpy as np

from gtpo_verl.lab.stats import mean_and_sample_std
from gtpo_verl.lab.verdicts import ENDPOINT_STEPS, PARTIAL_GAIN
from gtpo_verl.tools.figures import INSTALL, figure, pyplot

CURVE_FIGURES = ("reward", "entropy", "entropy_decision", "entropy_forced", "length", "kept_groups", "prompts_sampled", "clipfrac")
VALIDATION_FIGURES = ("pass@1", "pass@16")
MOVING_MEAN = 10
FIGURES_SKIPPED = ("figures skipped: matplotlib is not installed; install it (" + INSTALL + ") "
                   "and rebuild them with python -m gtpo_verl.lab --from-runs {results} --out {out}")
SMOKE_BANNER = ("**Smoke run (`--quick`: {seeds} seeds × {steps} steps): it checks that every method runs end to end; "
                "its numbers and verdicts are not a study.**")


def write_results(path: str, payload: dict[str, Any]) -> str:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(payload, f, separators=(",", ":"), allow_nan=True)
    os.replace(tmp, path)
    return path


def _fmt(x: float, digits: int = 3) -> str:
    return "nan" if x != x else f"{x:.{digits}f}"


def _fmt_power(value) -> str:
    return "–" if value is None else str(value)


def _calibration_lines(payload: dict[str, Any]) -> list[str]:
    lines = ["### The warm start's entropy profile (first training batch of each seed, `gtpo_verl/lab/entropy_profile.py`)", "",
             "| task | responses | token-mean H | median | p90 | share > 0.7 | top-20 % share | δ filters at 0.7 | "
             "decision tokens: share / mean H / entropy share | forced tokens: share / mean H / entropy share | off-grammar tokens |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for task, c in sorted(payload.get("calibration", {}).items()):
        p, d, roles = c["profile"], c["delta"], c.get("roles")

        def role(name):
            if not roles:
                return "–"
            r = roles[name]
            return f"{_fmt(r['token_share'])} / {_fmt(r['mean_entropy'], 2)} / {_fmt(r['entropy_share'])}"

        lines.append(f"| {task} | {p['responses']} | {_fmt(p['token_mean'], 2)} | {_fmt(p['median'], 2)} | {_fmt(p['p90'], 2)} | "
                     f"{_fmt(p['share_above_0.7'])} | {_fmt(p['top20_share'])} | {_fmt(d['filtered_at_0.7'])} | {role('decision')} | "
                     f"{role('forced')} | {_fmt(roles['off_grammar']['token_share']) if roles else '–'} |")
    return lines + [""]


def family_table(title: str, rows: list[dict], claim_column: bool, extra_columns: tuple = ()) -> list[str]:
    """One verdict family (``verdicts.score_claims`` / ``verdicts.verdicts`` rows) as a markdown table under ``title``.

    ``extra_columns``: ``(header, row → cell)`` pairs, drawn before the verdict.
    """
    head = "| claim | task | endpoint |" if claim_column else "| method | baseline | task | endpoint |"
    extra_head = "".join(f" {name} |" for name, _ in extra_columns)
    lines = [title, "", head + " seeds | test | mean diff [95 % CI] | p | p (Holm) | smallest p possible | seeds for 80 % power at α/m |"
             + extra_head + " verdict |",
             "|---" * (head.count("|") - 1) + "|---|---|---|---|---|---|---|" + "---|" * len(extra_columns) + "---|"]
    for row in rows:
        lo, hi = row["ci95"]
        first = (f"| {row['id']}: {row['claim']} | {row['task']} | {row['endpoint']} |" if claim_column
                 else f"| {row['method']} | {row['baseline']} | {row['task']} | {row['endpoint']} |")
        extra = "".join(f" {cell(row)} |" for _, cell in extra_columns)
        seeds = f"{row['seeds']}" + (f" ({row['excluded_pairs']} excluded)" if row.get("excluded_pairs") else "")
        lines.append(f"{first} {seeds} | {row['test']} | {_fmt(row['mean_difference'])} [{_fmt(lo)}, {_fmt(hi)}] | "
                     f"{_fmt(row['p'], 4)} | {_fmt(row['p_holm'], 4)} | {_fmt(row['smallest_p'], 4)} | "
                     f"{_fmt_power(row['seeds_needed_80pct_power'])} |{extra} **{row['verdict']}** |")
    return lines + [""]


OPPOSITE_COLUMNS = (("p opposite (Holm)", lambda row: "–" if row.get("p_holm_opposite") is None else _fmt(row["p_holm_opposite"], 4)),)
TWIN_COLUMNS = (("null twin", lambda row: row.get("twin") or "–"),
                ("twin's mean diff (seeds)", lambda row: "–" if row.get("twin_mean_difference") is None
                 else f"{_fmt(row['twin_mean_difference'])} ({row['twin_seeds']})"))


def _excluded_lines(verdicts: dict[str, Any]) -> list[str]:
    """Every primary pair left out of a claim's test, and why (never dropped in silence)."""
    lines = [f"- {row['id']} ({row['task']}): seed {e['seed']} excluded, {e['reason']}"
             for row in verdicts["primary"] for e in row.get("excluded", [])]
    lines += [f"- {row['id']} ({row['task']}): seed {e['seed']} left out of the twin's effect, {e['reason']}"
              for row in verdicts["primary"] for e in row.get("twin_excluded", [])]
    return (["Excluded pairs:", "", *lines, ""]) if lines else []


def markdown_table(payload: dict[str, Any]) -> str:
    """Per task and method: mean ± sample std over seeds of each endpoint, end-state counts, dynamic
    sampling and health; then every verdict family and the health replays."""
    verdicts = payload["verdicts"]
    lines = []
    if payload.get("quick"):
        lines += [SMOKE_BANNER.format(seeds=len(payload["seeds"]), steps=payload["sizes"]["steps"]), ""]
    by_key: dict[str, list[dict]] = {}
    for run in payload["runs"]:
        by_key.setdefault(f"{run['task']}/{run['method']}", []).append(run)
    for task in sorted({r["task"] for r in payload["runs"]}):
        lines += [f"### {task}", "",
                  "| method | seeds | pass@1 | pass@8 | pass@16 | entropy | H decision | H forced | length | peak H / H₀ | drawdown "
                  "| drawdown after learning (learned seeds) | kept groups / step "
                  "| prompts / step | stalled steps | clipfrac | δ filtered | GTPO bonus on decisions (their token share) | end states |",
                  "|---" * 19 + "|"]
        for method in payload["methods"]:
            key = f"{task}/{method}"
            ends = verdicts["endpoints"].get(key, {})
            if not ends:
                continue

            def stat(name, digits=3):
                spread = mean_and_sample_std([e.get(name) for e in ends.values()])
                if spread["mean"] is None:
                    return "–"
                sd = float("nan") if spread["std"] is None else spread["std"]
                return f"{_fmt(spread['mean'], digits)} ± {_fmt(sd, digits)}"

            def run_mean(name, digits=3):
                values = [np.nanmean(r["curves"][name]) for r in by_key[key] if np.isfinite(r["curves"].get(name, [np.nan])).any()]
                return _fmt(float(np.mean(values)), digits) if values else "–"

            bonus = run_mean("bonus_decision_share")
            bonus = bonus if bonus == "–" else f"{bonus} ({run_mean('decision_share_of_success_tokens')})"
            states = ", ".join(f"{k} {v}" for k, v in sorted(verdicts["end_states"][key].items()))
            stalled = int(sum(e["stalled_steps"] for e in ends.values()))
            learned = sum(e.get("drawdown_after_learning") is not None for e in ends.values())
            lines.append(f"| {method} | {len(ends)} | {stat('pass@1')} | {stat('pass@8')} | {stat('pass@16')} | {stat('entropy')} | "
                         f"{stat('entropy_decision')} | {stat('entropy_forced')} | {stat('length', 2)} | {stat('entropy_peak_ratio')} | "
                         f"{stat('drawdown')} | {stat('drawdown_after_learning')} ({learned}) | {run_mean('kept_groups', 2)} | "
                         f"{run_mean('prompts_sampled', 1)} | {stalled} | {run_mean('clipfrac', 4)} | {run_mean('delta_filtered_frac')} | "
                         f"{bonus} | {states} |")
        lines.append("")
    lines += [f"Mean ± sample std over seeds of each run's endpoint (entropy, H decision / forced and length: the last {ENDPOINT_STEPS} steps, on the "
              "responses to each step's first training batch, the same population for every method; drawdown after learning: over "
              f"the seeds that reached P₀ + {PARTIAL_GAIN}, their count in brackets). Kept groups, prompts per step, "
              "clipfrac, δ filtered and the GTPO bonus share are run means averaged over seeds; stalled steps are summed over seeds.", ""]
    lines += _calibration_lines(payload)
    lines += family_table("### Verdicts: the papers' claims (one-sided in the claimed direction, Holm within each paper; scored "
                          "only above the null twin's effect; the opposite direction's Holm p decides `contradicted`)",
                          verdicts["primary"], True, OPPOSITE_COLUMNS + TWIN_COLUMNS)
    lines += _excluded_lines(verdicts)
    for name, title in (("sensitivity", "Sensitivity: the knobs the papers leave open"), ("context", "Context: vs DAPO"),
                        ("null", "Null: GRPO and DAPO each against its twin on another sampler stream (identical methods)")):
        lines += family_table(f"### {title} (two-sided, Holm within this family)", verdicts.get(name, []), False)
    health = payload.get("health")
    if health:
        lines += ["### Health: silent terms (mean over seeds of the per-run mean; ≥ threshold = the term does little)", "",
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
                  "| direction | ratio | steps in a row | degrading runs | warned before | missed | median lead (steps) | false alarms / non-degrading runs |",
                  "|---|---|---|---|---|---|---|---|"]
        for row in health["entropy_watch"]:
            lead = "–" if row["median_lead_steps"] is None else f"{row['median_lead_steps']:.0f}"
            persist = row.get("persist_steps") or 1
            lines.append(f"| {row['direction']} | {row['ratio']} | {persist} | {row['degrading_runs']} | {row['detected_before']} | {row['missed']} | "
                         f"{lead} | {row['false_alarms']} / {row['non_degrading_runs']} |")
    return "\n".join(lines) + "\n"


def _moving_mean(series: np.ndarray, window: int) -> np.ndarray:
    """NaN-aware moving mean: a window with no finite value stays NaN (a gap in the plot, never 0)."""
    finite = np.isfinite(series)
    kernel = np.ones(window)
    sums = np.convolve(np.where(finite, series, 0.0), kernel, mode="valid")
    counts = np.convolve(finite.astype(np.float64), kernel, mode="valid")
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)


def figures(payload: dict[str, Any], folder: str) -> list[str]:
    """One PNG per task: a panel per metric, a colour per method, mean bold and each seed thin; [] without matplotlib."""
    plt = pyplot()
    if plt is None:
        return []
    os.makedirs(folder, exist_ok=True)
    written = []
    colours = {m: plt.cm.tab20(i % 20) for i, m in enumerate(payload["methods"])}
    smoke = " — SMOKE RUN (--quick), not a study" if payload.get("quick") else ""
    for task in sorted({r["task"] for r in payload["runs"]}):
        panels = [p for p in CURVE_FIGURES if any(np.isfinite(r["curves"].get(p, [np.nan])).any() for r in payload["runs"] if r["task"] == task)]
        panels += list(VALIDATION_FIGURES)
        path = os.path.join(folder, f"{task}.png")
        with figure(path, len(panels), columns=4, title=f"gtpo_verl lab: {task} (bold: mean over seeds; thin: one seed){smoke}",
                    shared_legend=True) as (_, axes):
            for ax, name in zip(axes, panels):
                for method in payload["methods"]:
                    runs = [r for r in payload["runs"] if r["task"] == task and r["method"] == method]
                    if not runs:
                        continue
                    if name in CURVE_FIGURES:
                        raw = np.array([r["curves"].get(name, []) for r in runs], dtype=np.float64)
                        if raw.size == 0 or not np.isfinite(raw).any():
                            continue
                        window = min(MOVING_MEAN, raw.shape[1])
                        series = np.array([_moving_mean(s, window) for s in raw])
                        x = np.arange(series.shape[1]) + window
                    else:
                        x = np.array([v["step"] for v in runs[0]["validation"]])
                        series = np.array([[v[name] for v in r["validation"]] for r in runs], dtype=np.float64)
                    for s in series:
                        ax.plot(x, s, color=colours[method], alpha=0.15, linewidth=0.6)
                    with np.errstate(invalid="ignore"), warnings.catch_warnings():
                        warnings.simplefilter("ignore", RuntimeWarning)  # a step no seed measured stays a gap
                        ax.plot(x, np.nanmean(series, 0), color=colours[method], linewidth=2.0, label=method)
                ax.set_title(name + (f" ({MOVING_MEAN}-step moving mean)" if name in CURVE_FIGURES else " (validation, fixed samples)"))
                ax.set_xlabel("step")
        written.append(path)
    return written
