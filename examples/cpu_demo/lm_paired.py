"""Paired seeds on the real LM: DAPO vs DAPO_TOKEN (and GTPO_TRAJ, δ at 0.7 vs scaled), scored with the lab's statistics.

    .venv-demo/bin/python examples/cpu_demo/lm_paired.py --seeds 1,2 [--methods DAPO,DAPO_TOKEN] [--steps 6]
    .venv-demo/bin/python examples/cpu_demo/lm_paired.py --score outputs/demo_lm outputs/demo_lm_paired/seed1 … --out paired.json

Training: for each seed, ``run_lm_demo.py --seed S --runs METHODS`` into OUT/seed<S>/ (the same
task, model, sizes and lr as ``make demo-lm``; the seed sets verl's data order and vLLM's sampler).
Scoring reads every ``summary.json`` given (``make demo-lm``'s own is seed 0) and pairs runs of one
seed. Endpoints per run, fixed before reading the numbers:

- ``reward_change``: mean training reward (``critic/score/mean``) over the second half of the steps
  minus the first half — does reward rise at all;
- ``val_mean@4``: validation accuracy at the last step (32 held-out prompts × 4 samples);
- ``entropy``: token-mean old-policy entropy (``gtpo/entropy/batch_mean``) over the second half;
- ``length``: mean response length over the second half.

Per comparison and endpoint: the lab's paired row (``gtpo_verl.lab.verdicts.paired_row``: the
exact Wilcoxon signed-rank and sign tests, a seeded bootstrap 95 % interval of the mean difference,
the smallest p the seeds allow), Holm over every row of the run with the seeds 80 % power would
need at α / m, and the lab's two-sided verdict. With n seeds no two-sided exact test can go below
2/2ⁿ, which is stated with the results.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

COMPARISONS = (("DAPO_TOKEN", "DAPO"), ("GTPO_TRAJ_SCALED", "GTPO_TRAJ"))
ENDPOINTS = ("reward_change", "val_mean@4", "entropy", "length")
VAL_KEY = "val-core/openai/gsm8k/acc/mean@4"
TASK = "arithmetic"  # run_lm_demo's one task (the seeded arithmetic task)


def endpoints(record: dict) -> dict[str, float]:
    curves = record.get("curves", {})
    reward = [v for v in curves.get("critic/score/mean", []) if v is not None]
    half = len(reward) // 2
    out = {}
    if half:
        out["reward_change"] = float(np.mean(reward[half:]) - np.mean(reward[:half]))
    if VAL_KEY in record.get("validation", {}):
        out["val_mean@4"] = float(record["validation"][VAL_KEY])
    for name, key in (("entropy", "gtpo/entropy/batch_mean"), ("length", "response_length/mean")):
        series = [v for v in curves.get(key, []) if v is not None]
        if series:
            out[name] = float(np.mean(series[len(series) // 2:]))
    return out


def collect(summaries: list[str]) -> dict:
    """``{method: {seed: endpoints}}`` from run_lm_demo summaries (the seed read from each run's overrides)."""
    table: dict = {}
    for path in summaries:
        with open(os.path.join(path, "summary.json")) as f:
            summary = json.load(f)
        settings = summary.get("_settings", {})
        seed = int(settings.get("seed", 0))
        for method, record in summary.items():
            if method.startswith("_") or record.get("steps_completed", 0) < int(settings.get("steps", 1)):
                continue  # a run that did not finish its steps has no endpoint
            table.setdefault(method, {})[seed] = dict(endpoints(record), steps=record["steps_completed"])
    return table


def score(table: dict) -> dict:
    """Every comparison × endpoint as the lab's paired row (``gtpo_verl.lab.verdicts``), Holm over all of them."""
    from gtpo_verl.lab.stats import wilcoxon_signed_rank
    from gtpo_verl.lab.verdicts import difference_verdict, holm_family, paired_row

    by_key = {(TASK, method): seeds for method, seeds in table.items()}
    rows = [row for method, baseline in COMPARISONS for endpoint in ENDPOINTS
            if (row := paired_row(by_key, TASK, method, baseline, endpoint)) is not None]
    holm_family(rows)
    for row in rows:
        row["verdict"] = difference_verdict(row["p_holm"], row["mean_difference"])
    changes = [e["reward_change"] for m in table.values() for e in m.values() if "reward_change" in e]
    rise = {"runs": len(changes), "rose": int(sum(c > 0 for c in changes)), "mean_change": float(np.mean(changes)) if changes else None,
            "p_wilcoxon_vs_0": wilcoxon_signed_rank(changes) if changes else None}
    return {"endpoints": table, "comparisons": rows, "reward_rise_all_runs": rise}


def render(result: dict) -> str:
    """Markdown: per run its endpoints, then the paired rows as the lab's family table."""
    from gtpo_verl.lab.report import family_table

    lines = ["| method | seed | steps | reward change | validation mean@4 | token-mean H (2nd half) | length (2nd half) |",
             "|---" * 7 + "|"]
    fmt = lambda v, d=3: "–" if v is None else f"{v:.{d}f}"  # noqa: E731
    for method, seeds in sorted(result["endpoints"].items()):
        for seed, e in sorted(seeds.items(), key=lambda kv: int(kv[0])):
            lines.append(f"| {method} | {seed} | {e['steps']} | {fmt(e.get('reward_change'))} | {fmt(e.get('val_mean@4'))} "
                         f"| {fmt(e.get('entropy'), 2)} | {fmt(e.get('length'), 1)} |")
    differences = ("per-seed differences", lambda row: ", ".join(f"{d:+.3f}" for d in row["per_seed_difference"]))
    lines += [""] + family_table("", result["comparisons"], claim_column=False, extra_columns=(differences,))[2:]
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", default="1")
    parser.add_argument("--methods", default="DAPO,DAPO_TOKEN")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--out", default=os.path.join(ROOT, "outputs", "demo_lm_paired"))
    parser.add_argument("--score", nargs="+", metavar="RUN_DIR", help="score these run_lm_demo outputs instead of training")
    args = parser.parse_args(argv)
    if args.score:
        result = score(collect(args.score))
        if args.out.endswith(".json"):
            with open(args.out, "w") as f:
                f.write(json.dumps(result, indent=1) + "\n")
        print(render(result), end="")
        return 0
    import run_lm_demo

    rc = 0
    for seed in (int(s) for s in args.seeds.split(",")):
        rc |= run_lm_demo.main(["--runs", args.methods, "--seed", str(seed), "--steps", str(args.steps),
                                "--out", os.path.join(args.out, f"seed{seed}")])
    return rc


if __name__ == "__main__":
    sys.exit(main())
