"""The lab study runner: a process pool over (task, seed) jobs, progress, results.json, table, figures."""

from __future__ import annotations

import argparse
import dataclasses
import json
import multiprocessing as mp
import os
import platform
import sys
import time
from typing import Any

QUICK = dict(seeds=3, steps=20, eval_every=10)
DEFAULT = dict(seeds=10, steps=400, eval_every=25)
DEFAULT_TASKS = "digit_chain"


def _parser() -> argparse.ArgumentParser:
    from gtpo_verl.lab.collapse import PILOT_SEEDS, SETTINGS
    from gtpo_verl.lab.methods import METHODS
    from gtpo_verl.lab.tasks import TASKS

    from gtpo_verl.tools.cli import ArgumentParser, non_negative_int, positive_int

    p = ArgumentParser(prog="python -m gtpo_verl.lab", description="Train the lab methods on the lab tasks over paired seeds; results.json, table, figures, verdicts (docs/lab.md).")
    p.add_argument("--quick", action="store_true", help=f"small run: {QUICK}")
    p.add_argument("--seeds", type=positive_int, help=f"paired seeds 0..N-1 (default {DEFAULT['seeds']})")
    p.add_argument("--first-seed", type=non_negative_int, default=0)
    p.add_argument("--steps", type=positive_int, help=f"RL steps per run (default {DEFAULT['steps']})")
    p.add_argument("--eval-every", type=positive_int, help="validation spacing in steps (default 25)")
    p.add_argument("--methods", default=",".join(METHODS), help="lab methods, registered estimators, or estimator+transform")
    p.add_argument("--tasks", help=f"comma-separated, from {sorted(TASKS)} (default {DEFAULT_TASKS}; with --setting, its task)")
    p.add_argument("--setting", choices=sorted(SETTINGS),
                   help="a collapse setting (gtpo_verl/lab/collapse.py): its task, steps, learning rate and update schedule "
                        "(mini-batches × epochs, for every method); --steps and --eval-every still override")
    p.add_argument("--prompts", type=positive_int, default=8, help="prompts per training batch")
    p.add_argument("--group", type=positive_int, default=8, help="responses per prompt (at least 2: the methods compare a group)")
    p.add_argument("--warm-start-steps", type=positive_int,
                   help="every task's warm-start length (default: each task's own, unary_chain 600; else 150)")
    p.add_argument("--workers", type=positive_int, default=min(2, os.cpu_count() or 1), help="processes (one torch thread each)")
    p.add_argument("--out", default="outputs/lab")
    p.add_argument("--no-figures", action="store_true")
    p.add_argument("--wall-s", type=float, help="with --from-runs: the study's measured wall time in seconds")
    p.add_argument("--label", default="", help="a description stored in results.json (e.g. what an interrupted study covers)")
    p.add_argument("--check-mechanism", action="store_true",
                   help="instead of a study: the pre-registered mechanism check of each --tasks task on seed --first-seed "
                        "(its warm start, --warm-start-steps or the task's own; one batch of --prompts prompts × 16 responses; "
                        "--group is not read) (docs/lab.md)")
    p.add_argument("--measure-warm-start", action="store_true",
                   help="instead of a study: each --seeds seed's warm start alone on --setting's task (or --tasks): ⟨H⟩_ini, "
                        "P₀ and the share of prompts it is confidently wrong on; seconds (docs/lab.md)")
    p.add_argument("--pilot-collapse", action="store_true",
                   help=f"instead of a study: the pre-registered GRPO pilot of --setting on --seeds seeds (default {PILOT_SEEDS}); "
                        "kept if at least half end collapsed-flat (exit 1: not kept); pilot.json and pilot.md in --out")
    p.add_argument("--from-runs", metavar="JSONL", help="rebuild results.json, table and figures from a runs file (e.g. an interrupted study's runs.partial.jsonl)")
    return p


def study_setting(args: argparse.Namespace):
    """The ``--setting`` (``collapse.SETTINGS``), or None."""
    from gtpo_verl.lab.collapse import SETTINGS

    return SETTINGS[args.setting] if getattr(args, "setting", None) else None


def study_tasks(args: argparse.Namespace) -> list[str]:
    """``--tasks`` as a list; without it, ``--setting``'s task, else ``DEFAULT_TASKS``."""
    setting = study_setting(args)
    spec = args.tasks if args.tasks is not None else (setting.task if setting is not None else DEFAULT_TASKS)
    return [t.strip() for t in spec.split(",") if t.strip()]


def study_size(args: argparse.Namespace):
    """The run sizes: ``--quick`` or the default study's steps and spacing, or ``--setting``'s (with its learning rate);
    ``--steps`` and ``--eval-every`` override either."""
    from gtpo_verl.lab.train import LabSize

    setting = study_setting(args)
    if args.quick:
        preset = QUICK
    elif setting is not None:
        preset = {"steps": setting.steps, "eval_every": setting.eval_every}
    else:
        preset = DEFAULT
    return LabSize(steps=args.steps or preset["steps"], eval_every=args.eval_every or preset["eval_every"], prompts=args.prompts,
                   group=args.group, warm_start_steps=args.warm_start_steps, **({"lr": setting.lr} if setting is not None else {}))


_QUEUE = None


def _init_worker(queue) -> None:
    global _QUEUE
    import torch

    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    import verl  # noqa: F401  (loads the plugin in the worker)

    _QUEUE = queue


def _size(size_kwargs: dict):
    from gtpo_verl.lab.policy import PolicySize
    from gtpo_verl.lab.train import LabSize

    return LabSize(**{**size_kwargs, "policy": PolicySize(**size_kwargs["policy"])})


def _warm_start_job(args: tuple) -> tuple[str, int, dict]:
    """The warm start of one (task, seed), shared by every method of that seed."""
    task_name, seed, size_kwargs = args
    from gtpo_verl.lab.tasks import TASKS
    from gtpo_verl.lab.train import warm_start

    return task_name, seed, warm_start(TASKS[task_name], seed, _size(size_kwargs))


def _run_job(args: tuple) -> dict:
    """One (task, seed, method) from its seed's warm start: one run per job keeps both workers busy to the end."""
    task_name, seed, method_name, size_kwargs, weights, schedule = args
    from gtpo_verl.lab.methods import resolve_methods
    from gtpo_verl.lab.tasks import TASKS
    from gtpo_verl.lab.train import train_run

    method = dataclasses.replace(resolve_methods(method_name)[0], **schedule)  # a setting's update schedule, if any
    start = time.time()
    run = train_run(method, TASKS[task_name], seed, _size(size_kwargs), weights, on_step=lambda: _QUEUE.put(1))
    run["wall_s"] = round(time.time() - start, 2)
    return run


def _progress(done: int, total: int, start: float) -> None:
    elapsed = time.time() - start
    rate = done / elapsed if elapsed > 0 else 0.0
    eta = (total - done) / rate if rate > 0 else float("inf")
    width = 30
    filled = int(width * done / max(total, 1))
    sys.stderr.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total} steps  {rate:.1f} steps/s  "
                     f"elapsed {elapsed / 60:.1f} min  eta {eta / 60:.1f} min ")
    sys.stderr.flush()


def _write_outputs(args: argparse.Namespace, payload: dict[str, Any]) -> None:
    """results.json, table.md and (unless --no-figures) the figures, or one line saying why there are none."""
    from gtpo_verl.lab.report import FIGURES_SKIPPED, figures, markdown_table, write_results

    results = os.path.join(args.out, "results.json")
    write_results(results, payload)
    with open(os.path.join(args.out, "table.md"), "w") as f:
        f.write(markdown_table(payload))
    if not args.no_figures:
        payload["figures"] = figures(payload, args.out)
        if not payload["figures"]:
            sys.stderr.write(FIGURES_SKIPPED.format(results=results, out=args.out) + "\n")


def rebuild(args: argparse.Namespace) -> dict[str, Any]:
    """results.json, table and figures from finished runs only (seeds with every method on every task)."""
    from gtpo_verl.lab.methods import resolve_methods
    from gtpo_verl.lab.policy import PolicySize
    from gtpo_verl.lab.train import LabSize

    original, runs = read_runs(args.from_runs)
    setting = study_setting(args)
    methods = [setting.method(m) if setting is not None else m for m in resolve_methods(args.methods)]
    tasks = study_tasks(args)
    complete = sorted(s for s in {r["seed"] for r in runs}
                      if sum(r["seed"] == s for r in runs) == len(methods) * len(tasks))
    if not complete:
        raise ValueError(
            f"--from-runs {args.from_runs}: no seed has every method ({len(methods)}) on every task ({len(tasks)}) "
            f"among its {len(runs)} runs: pass the --methods and --tasks of the study that wrote it"
        )
    runs = [r for r in runs if r["seed"] in complete]
    order = {m.name: i for i, m in enumerate(methods)}
    runs.sort(key=lambda r: (r["task"], order[r["method"]], r["seed"]))
    steps = len(runs[0]["curves"]["reward"])
    if original is not None and "sizes" in original:  # the study's own sizes
        sizes = {k: v for k, v in original["sizes"].items() if k in LabSize.__dataclass_fields__}
        size = LabSize(**{**sizes, "policy": PolicySize(**sizes["policy"])})
    else:
        size = LabSize(steps=steps, eval_every=args.eval_every or DEFAULT["eval_every"], prompts=args.prompts, group=args.group)
    wall = max(sum(r["wall_s"] for r in runs) / max(args.workers, 1), 1e-9)
    payload = build_payload(runs, methods, tasks, complete, size, wall, args.workers)
    if original is not None:
        payload.update({k: original[k] for k in ("wall_s", "steps_per_s", "machine", "quick", "calibration", "setting") if k in original})
    elif args.wall_s:
        payload["wall_s"] = round(args.wall_s, 1)
        payload["steps_per_s"] = round(payload["steps_total"] / args.wall_s, 2)
    else:
        payload["wall_s_note"] = "rebuilt from a runs file: wall_s is the sum of per-run wall times divided by the workers"
    payload["label"] = args.label
    _write_outputs(args, payload)
    return payload


def read_runs(path: str) -> tuple[Any, list[dict]]:
    """``(results.json payload or None, runs)`` from a results.json or a runs JSONL file; one clear error otherwise."""
    try:
        with open(path) as f:
            if path.endswith(".json"):  # a finished study's results.json: keep its timing
                original = json.load(f)
                runs = original["runs"] if isinstance(original, dict) else None
            else:
                original, runs = None, [json.loads(line) for line in f if line.strip()]
    except (OSError, UnicodeDecodeError) as err:
        raise ValueError(f"--from-runs {path}: cannot be read ({err.strerror or err})") from None
    except (json.JSONDecodeError, KeyError) as err:
        raise ValueError(f"--from-runs {path}: not a lab runs file or results.json ({type(err).__name__}: {err})") from None
    keys = ("task", "method", "seed", "curves", "wall_s")
    if not isinstance(runs, list) or not all(isinstance(r, dict) and all(k in r for k in keys) for r in runs):
        raise ValueError(f"--from-runs {path}: every run needs {list(keys)}: not a lab runs file or results.json")
    return original, runs


def run_study(args: argparse.Namespace) -> dict[str, Any]:
    if args.from_runs:
        return rebuild(args)
    from gtpo_verl.lab.calibration import warm_start_profile
    from gtpo_verl.lab.methods import resolve_methods
    from gtpo_verl.lab.tasks import TASKS
    from gtpo_verl.lab.train import size_dict

    preset = QUICK if args.quick else DEFAULT
    seeds = list(range(args.first_seed, args.first_seed + (args.seeds or preset["seeds"])))
    size = study_size(args)
    setting = study_setting(args)
    schedule = setting.schedule() if setting is not None else {}
    methods = [setting.method(m) if setting is not None else m for m in resolve_methods(args.methods)]
    tasks = study_tasks(args)
    unknown = [t for t in tasks if t not in TASKS]
    if unknown:
        raise SystemExit(f"--tasks: unknown {unknown}; choose from {sorted(TASKS)}")
    size_kwargs = size_dict(size)
    total = len(seeds) * len(tasks) * len(methods) * size.steps
    os.makedirs(args.out, exist_ok=True)
    partial_path = os.path.join(args.out, "runs.partial.jsonl")
    start = time.time()
    runs: list[dict] = []
    ctx = mp.get_context("spawn")
    queue = ctx.Manager().Queue()
    with ctx.Pool(args.workers, initializer=_init_worker, initargs=(queue,)) as pool, open(partial_path, "w") as partial:
        weights = {(t, s): w for t, s, w in pool.imap_unordered(_warm_start_job, [(t, s, size_kwargs) for s in seeds for t in tasks])}
        # seed-major, so an interrupted study holds whole seeds; within a seed the dynamic-sampling
        # methods (the slow ones) first, so the last jobs to finish are short
        by_cost = sorted(methods, key=lambda m: not m.dynamic_sampling)
        jobs = [(t, s, m.name, size_kwargs, weights[t, s], schedule) for s in seeds for m in by_cost for t in tasks]
        pending = pool.imap_unordered(_run_job, jobs)
        done = 0
        finished = 0
        while finished < len(jobs):
            try:
                run = pending.next(timeout=0.5)
                runs.append(run)
                finished += 1
                partial.write(json.dumps(run) + "\n")  # on disk at once: an interrupted study keeps it
                partial.flush()
            except mp.TimeoutError:
                pass
            before = done
            while not queue.empty():
                done += queue.get()
            if done != before or finished == len(jobs):
                _progress(done, total, start)
    sys.stderr.write("\n")
    wall = time.time() - start
    order = {m.name: i for i, m in enumerate(methods)}
    runs.sort(key=lambda r: (r["task"], order[r["method"]], r["seed"]))
    payload = build_payload(runs, [m for m in methods], tasks, seeds, size, wall, args.workers, quick=args.quick)
    payload["calibration"] = {t: warm_start_profile(t, seeds, size, weights={s: weights[t, s] for s in seeds}) for t in tasks}
    if setting is not None:
        payload["setting"] = dataclasses.asdict(setting)
    _write_outputs(args, payload)
    os.remove(partial_path)
    return payload


def build_payload(runs, methods, tasks, seeds, size, wall_s, workers, quick=False) -> dict[str, Any]:
    """results.json's content: sizes, methods, every run (curves, validations, end state), verdicts."""
    from gtpo_verl.lab.policy import TinyCausalLM, parameter_count
    from gtpo_verl.lab.tasks import TASKS, VOCAB
    from gtpo_verl.lab.train import policy_size, size_dict, warm_start_steps
    from gtpo_verl.lab.health import by_end_state, entropy_watch_calibration, monitor_replay, silent_terms
    from gtpo_verl.lab.verdicts import endpoints, verdicts

    for run in runs:
        run["endpoints"] = endpoints(run)
        run["end_state"] = run["endpoints"]["end_state"]
    steps_total = sum(len(r["curves"]["reward"]) for r in runs)
    return {
        "schema": "gtpo_verl.lab/2",
        "quick": bool(quick),
        **({"smoke_run": "--quick: checks that every method runs end to end; not a study"} if quick else {}),
        "sizes": {**size_dict(size), "vocab": len(VOCAB), "parameters": parameter_count(TinyCausalLM(len(VOCAB), size.policy)),
                  # a task whose prompt and response outgrow size.policy's context gets a wider position table
                  "parameters_by_task": {t: parameter_count(TinyCausalLM(TASKS[t].vocab_size, policy_size(TASKS[t], size))) for t in tasks},
                  # warm_start_steps above is None unless set for every task: each task's own length (Task.warm_start_steps)
                  "warm_start_steps_by_task": {t: warm_start_steps(TASKS[t], size) for t in tasks}},
        "seeds": list(seeds),
        "tasks": list(tasks),
        "methods": [m.name for m in methods],
        "method_table": {m.name: dataclasses.asdict(m) for m in methods},
        "machine": {"cpus": os.cpu_count(), "workers": workers, "platform": platform.platform(),
                    "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None},
        "wall_s": round(wall_s, 1),
        "steps_total": steps_total,
        "steps_per_s": round(steps_total / wall_s, 2) if wall_s > 0 else None,
        "runs": runs,
        "verdicts": verdicts(runs),
        "health": {"silent_terms": silent_terms(runs), "by_end_state": by_end_state(runs), "monitor": monitor_replay(runs),
                   "entropy_watch": entropy_watch_calibration(runs)},
    }


