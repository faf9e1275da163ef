"""``python -m gtpo_verl.lab``: train every method on every task over paired seeds; write results.json,
the table and the figures, with verdicts by the fixed rule of ``gtpo_verl/lab/verdicts.py`` (docs/lab.md).

    python -m gtpo_verl.lab --quick                      # 3 seeds × 20 steps: a smoke run
    python -m gtpo_verl.lab                              # the default study (every method on digit_chain, paired seeds, 400 steps)
    python -m gtpo_verl.lab --methods DAPO,my_estimator,grpo+entropy_advantage --seeds 5
"""

from __future__ import annotations

import os
import sys

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
        print(f"  {row['task']:10s} {row['id']:22s} {row['verdict']:13s} diff {row['mean_difference']:+.3f} "
              f"[{row['ci95'][0]:+.3f}, {row['ci95'][1]:+.3f}]  p_holm {row['p_holm']:.3g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
