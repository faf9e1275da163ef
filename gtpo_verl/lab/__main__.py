"""``python -m gtpo_verl.lab``: train every method on every task over paired seeds; write results.json,
the table and the figures, with verdicts by the fixed rule of ``gtpo_verl/lab/verdicts.py`` (docs/lab.md).

    python -m gtpo_verl.lab --quick                      # 3 seeds × 20 steps: a smoke run
    python -m gtpo_verl.lab                              # the default study (every method on digit_chain, paired seeds, 400 steps)
    python -m gtpo_verl.lab --methods DAPO,my_estimator,grpo+entropy_advantage --seeds 5
    python -m gtpo_verl.lab --check-mechanism --tasks unary_chain   # a Paper B task's pre-registered check (exit 1: failed)
    python -m gtpo_verl.lab --measure-warm-start --setting carry_trap --seeds 5   # a collapse setting's warm start alone (seconds)
    python -m gtpo_verl.lab --pilot-collapse --setting carry_trap    # its pre-registered GRPO pilot (exit 1: not kept)
"""

from __future__ import annotations

import json
import math
import os
import sys
import time

from gtpo_verl.lab.methods import resolve_methods
from gtpo_verl.lab.study import _parser, run_study, study_setting, study_tasks
from gtpo_verl.lab.tasks import TASKS


def main(argv=None) -> int:
    from gtpo_verl.tools.cli import fail

    parser = _parser()
    args = parser.parse_args(argv)
    if args.group < 2:
        fail(parser.prog, f"--group {args.group}: the methods compare the responses of one prompt; use at least 2")
    tasks = study_tasks(args)
    unknown = [t for t in tasks if t not in TASKS]
    if unknown or not tasks:
        fail(parser.prog, f"--tasks {args.tasks!r}: unknown task(s) {unknown}; the lab's tasks: {sorted(TASKS)}")
    setting = study_setting(args)
    if setting is not None and tasks != [setting.task]:
        fail(parser.prog, f"--tasks {args.tasks!r} with --setting {setting.name}: the setting trains on its own task "
                          f"{setting.task!r}; drop --tasks")
    if args.pilot_collapse and setting is None:
        fail(parser.prog, "--pilot-collapse needs --setting (gtpo_verl/lab/collapse.py SETTINGS), e.g. --setting carry_trap")
    args.tasks = ",".join(tasks)
    if args.check_mechanism:
        return check_mechanism(parser, args)
    if args.measure_warm_start:
        return measure_warm_start(args, tasks)
    if args.pilot_collapse:
        return pilot_collapse(args, setting)
    try:
        resolve_methods(args.methods)
    except ValueError as err:  # an unknown method or transform
        fail(parser.prog, str(err))
    if args.from_runs:
        try:
            payload = run_study(args)
        except ValueError as err:  # a runs file that is missing, corrupt or has no complete seed
            fail(parser.prog, str(err))
    else:
        payload = run_study(args)
    smoke = " [smoke run (--quick): not a study]" if payload.get("quick") else ""
    print(f"{payload['steps_total']} steps in {payload['wall_s']} s ({payload['steps_per_s']} steps/s, {args.workers} workers) "
          f"→ {os.path.join(args.out, 'results.json')}{smoke}")
    for row in payload["verdicts"]["primary"]:
        print(f"  {row['task']:10s} {row['id']:32s} {row['verdict']:13s} diff {row['mean_difference']:+.3f} "
              f"[{row['ci95'][0]:+.3f}, {row['ci95'][1]:+.3f}]  p_holm {row['p_holm']:.3g}")
    return 0


def check_mechanism(parser, args) -> int:
    """``--check-mechanism``: each task's check on seed ``--first-seed``, printed and written to ``--out``; 1 if any fails."""
    from gtpo_verl.lab.calibration import MECHANISM_GROUP, mechanism_check
    from gtpo_verl.lab.train import LabSize
    from gtpo_verl.tools.cli import fail

    os.makedirs(args.out, exist_ok=True)
    passed = True
    for task in [t.strip() for t in args.tasks.split(",") if t.strip()]:
        start = time.time()
        try:
            result = mechanism_check(task, args.first_seed, LabSize(prompts=args.prompts, group=MECHANISM_GROUP,
                                                                     warm_start_steps=args.warm_start_steps))
        except ValueError as err:  # a task without grammar roles
            fail(parser.prog, str(err))
        result["wall_s"] = round(time.time() - start, 1)
        profile, targets = result["profile"], result["targets"]
        print(f"{task} seed {result['seed']}, {result['prompts']} prompts × {result['group']}: Eq. S18's bonus on decisions "
              f"{result['bonus_on_decisions']:.3f} against their token share {result['decision_token_share']:.3f}: "
              f"{result['ratio']:.2f}× (pre-registered ≥ {result['min_ratio']}×) → {'PASS' if result['passed'] else 'FAIL'} "
              f"({result['mixed_groups']}/{result['groups']} groups mixed, {result['wall_s']} s)")
        print(f"  warm start ({result['warm_start_steps']} steps): share > 0.7 nats {profile['share_above_0.7']:.3f} "
              f"(target about {targets['share_above_0.7']}), "
              f"median {profile['median']:.3f} (target well below {targets['median_below']}), pass rate {result['pass_rate']:.3f} "
              f"(target {targets['pass_rate'][0]}–{targets['pass_rate'][1]}), mean length {profile['mean_length']:.1f} "
              f"(target {targets['length'][0]}–{targets['length'][1]})")
        path = os.path.join(args.out, f"mechanism_check_{task}_seed{result['seed']}.json")
        with open(path, "w") as handle:  # strict JSON: a role absent from the batch has no mean (null), not NaN
            json.dump(_nan_to_null(result), handle, indent=1, allow_nan=False)
        print(f"  → {path}")
        passed = passed and result["passed"]
    return 0 if passed else 1


def measure_warm_start(args, tasks: list[str]) -> int:
    """``--measure-warm-start``: each seed's warm start alone (``collapse.warm_start_confidence``), printed and written to
    ``--out`` as ``warm_start_<task>.json``."""
    import torch

    from gtpo_verl.lab.collapse import warm_start_confidence
    from gtpo_verl.lab.train import LabSize

    torch.set_num_threads(1)  # one thread, as each study worker (``study._init_worker``): faster at this size
    os.makedirs(args.out, exist_ok=True)
    size = LabSize(prompts=args.prompts, group=args.group, warm_start_steps=args.warm_start_steps)
    seeds = list(range(args.first_seed, args.first_seed + (args.seeds or 1)))
    for task in tasks:
        start = time.time()
        rows = []
        for seed in seeds:
            row = warm_start_confidence(task, seed, size)
            rows.append(row)
            print(f"{task} seed {seed} ({row['warm_start_steps']} warm-start steps): ⟨H⟩_ini {row['initial_entropy']:.3f} "
                  f"(ln 2 = {row['ln2']:.3f}: δ gate {'on' if row['delta_gate_on'] else 'off'}), token mean {row['token_entropy']:.3f}, "
                  f"P₀ {row['P0']:.3f}, confidently wrong on {row['confidently_wrong_share']:.3f} of {row['eval_prompts']} prompts")
        path = os.path.join(args.out, f"warm_start_{task}.json")
        with open(path, "w") as handle:
            json.dump({"task": task, "seeds": rows, "wall_s": round(time.time() - start, 1)}, handle, indent=1)
        print(f"  → {path} ({time.time() - start:.1f} s)")
    return 0


def pilot_collapse(args, setting) -> int:
    """``--pilot-collapse``: the setting's pre-registered GRPO pilot (``collapse`` module docstring): a study of one
    method, then ``pilot.json`` and ``pilot.md`` in ``--out``; 0 if the setting is kept, 1 if not."""
    from gtpo_verl.lab.collapse import PILOT_METHOD, PILOT_SEEDS, pilot_markdown, pilot_summary

    args.methods = PILOT_METHOD
    args.seeds = args.seeds or PILOT_SEEDS
    payload = run_study(args)
    summary = pilot_summary(payload["runs"], setting)
    summary.update(seeds=payload["seeds"], sizes=payload["sizes"], wall_s=payload["wall_s"])
    with open(os.path.join(args.out, "pilot.json"), "w") as handle:
        json.dump(_nan_to_null(summary), handle, indent=1, allow_nan=False)
    report = pilot_markdown(summary)
    with open(os.path.join(args.out, "pilot.md"), "w") as handle:
        handle.write(report)
    print(report, end="")
    print(f"→ {os.path.join(args.out, 'pilot.json')}, pilot.md ({payload['wall_s']} s)")
    return 0 if summary["keep_rule"]["kept"] else 1


def _nan_to_null(value):
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {key: _nan_to_null(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_nan_to_null(item) for item in value]
    return value


if __name__ == "__main__":
    sys.exit(main())
