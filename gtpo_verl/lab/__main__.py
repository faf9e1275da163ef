"""``python -m gtpo_verl.lab``: train every method on every task over paired seeds; write results.json,
the table and the figures, with verdicts by the fixed rule of ``gtpo_verl/lab/verdicts.py`` (docs/lab.md).

    python -m gtpo_verl.lab --quick                      # 3 seeds × 20 steps: a smoke run
    python -m gtpo_verl.lab                              # the default study (every method on digit_chain, paired seeds, 400 steps)
    python -m gtpo_verl.lab --methods DAPO,my_estimator,grpo+entropy_advantage --seeds 5
    python -m gtpo_verl.lab --check-mechanism --tasks unary_chain   # a Paper B task's pre-registered check (exit 1: failed)
"""

from __future__ import annotations

import json
import math
import os
import sys
import time

from gtpo_verl.lab.methods import resolve_methods
from gtpo_verl.lab.study import _parser, run_study
from gtpo_verl.lab.tasks import TASKS


def main(argv=None) -> int:
    from gtpo_verl.tools.cli import fail

    parser = _parser()
    args = parser.parse_args(argv)
    if args.group < 2:
        fail(parser.prog, f"--group {args.group}: the methods compare the responses of one prompt; use at least 2")
    unknown = [t for t in (t.strip() for t in args.tasks.split(",")) if t and t not in TASKS]
    if unknown or not args.tasks.strip():
        fail(parser.prog, f"--tasks {args.tasks!r}: unknown task(s) {unknown}; the lab's tasks: {sorted(TASKS)}")
    if args.check_mechanism:
        return check_mechanism(parser, args)
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
