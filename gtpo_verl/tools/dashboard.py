"""The wandb dashboard of docs/metrics.md as code (a saved wandb workspace).

    pip install -e ".[dashboard]"     # wandb-workspaces
    gtpo-dashboard --entity E --project DAPO \\
        --runs Qwen2.5-32B-DAPO_step1,Qwen2.5-32B-DAPO_TOKEN,Qwen2.5-32B-DAPO_SEQ
    gtpo-dashboard --entity E --project gtpo_study --data-source gtpo_study/max_digit --val-n 16
    gtpo-dashboard ... --dry-run                   # print the panels, save nothing (or python -m gtpo_verl.tools.dashboard)

The panels are data (``SECTIONS``): one line plot per panel, the selected runs overlaid, x-axis
the training step. ``{src}`` is the validation data source, ``{n}`` the validation samples per
problem (``actor_rollout_ref.rollout.val_kwargs.n``), ``{half}`` the largest power of two
below it (verl's best@N grid). Validation shows verl's bootstrap ``best@N`` (what the papers
plotted) next to the unbiased ``val-gtpo/.../pass@k`` the trainer mixin adds.
"""

from __future__ import annotations

import sys
from typing import Optional

from gtpo_verl.algorithms.pass_at_k import pass_ks
from gtpo_verl.tools.cli import ArgumentParser, fail, positive_int

# (section, [(panel title, [metric templates])]); docs/metrics.md explains each panel
SECTIONS: list[tuple[str, list[tuple[str, list[str]]]]] = [
    ("validation ({src}, n = {n})", [
        ("mean@{n} (avg@{n})", ["val-core/{src}/acc/mean@{n}"]),
        ("pass@{n}: unbiased vs verl's bootstrap best@{n}", ["val-gtpo/{src}/pass@{n}", "val-core/{src}/acc/best@{n}/mean"]),
        ("unbiased pass@k", ["val-gtpo/{src}/pass@{k}"]),
        ("maj@{n}: full vote vs verl's bootstrap", ["val-gtpo/{src}/maj@{n}", "val-core/{src}/acc/maj@{n}/mean"]),
        ("reward best@{n} (Paper B's panel)", ["val-aux/{src}/reward/best@{n}/mean"]),
        ("reward best@{half}", ["val-aux/{src}/reward/best@{half}/mean"]),
    ]),
    ("training signal", [
        ("training score", ["critic/score/mean"]),
        ("groups filtered (dynamic sampling)", ["training/filter_groups/evicted_samples"]),
        ("response length", ["response_length/mean"]),
        ("responses cut at max length", ["response_length/clip_ratio"]),
    ]),
    ("entropy", [
        ("policy entropy (each run's loss_agg_mode)", ["actor/entropy"]),
        ("token-mean old-policy entropy", ["gtpo/entropy/batch_mean"]),
        ("entropy watch: rise ratio", ["gtpo/entropy/rise_ratio"]),
        ("entropy watch: warnings", ["gtpo/entropy/warnings_total"]),
    ]),
    ("algorithm health", [
        ("a term does nothing (1 = past its threshold)", ["gtpo/health/delta_filtered", "gtpo/health/bonus_clipped",
                                                          "gtpo/health/all_equal_groups"]),
        ("groups with one reward for all responses", ["gtpo/health/all_equal_groups_frac"]),
    ]),
    ("shaping", [
        ("advantage by outcome", ["gtpo/adv/success/mean", "gtpo/adv/failure/mean"]),
        ("bonus concentration (GTPO, GRPO-S)", ["gtpo/bonus_share/std", "gtpo/bonus_share/max"]),
        ("entropy by outcome", ["gtpo/entropy/success_mean", "gtpo/entropy/failure_mean"]),
        ("success fraction", ["gtpo/success_frac"]),
    ]),
    ("GTPO-trajectory (Paper A)", [
        ("conflict token fraction", ["gtpo/conflict/pos_token_frac", "gtpo/conflict/neg_token_frac"]),
        ("conflict tokens boosted / zeroed", ["gtpo/conflict/boosted_tokens", "gtpo/conflict/zeroed_tokens"]),
        ("entropy filter: responses dropped", ["gtpo/delta/filtered_frac"]),
        ("initial entropy ⟨H⟩_ini (paper preset)", ["gtpo/entropy/initial"]),
    ]),
    ("optimisation", [
        ("clipping", ["actor/pg_clipfrac", "actor/pg_clipfrac_lower"]),
        ("sequence ratio (GRPO-S)", ["actor/seq_ratio_mean"]),
        ("KL to the rollout policy", ["actor/ppo_kl"]),
        ("gradient norm", ["actor/grad_norm"]),
        ("learning rate", ["actor/lr"]),
    ]),
    ("system", [
        ("step time", ["timing_s/step", "timing_s/gen", "timing_s/old_log_prob", "timing_s/update_actor"]),
        ("peak memory (GPU)", ["perf/max_memory_allocated_gb"]),
        ("throughput", ["perf/throughput"]),
    ]),
]
# wandb's own step, which verl sets to the global step on every log call (``training/global_step``
# is missing from the validation before training, so step-0 pass@k would not be drawn)
X_AXIS = "Step"
# Metrics a CPU run cannot log, with the reason (the dashboard test checks every other metric
# against a real CPU run's metrics file)
NOT_ON_CPU = {
    "training/filter_groups/evicted_samples": "DAPO dynamic sampling (algorithm.filter_groups), off on CPU",
    "perf/max_memory_allocated_gb": "accelerator memory",
    "gtpo/entropy/initial": "gtpo_traj with the paper preset's ⟨H⟩_ini gate",
}


def largest_power_of_two_below(n: int) -> int:
    half = 1
    while half * 2 < n:
        half *= 2
    return half


def panel_metrics(data_source: str, val_n: int) -> list[tuple[str, str, list[str]]]:
    """``(section, title, metrics)`` for every panel, templates filled in."""
    if val_n < 2:
        raise ValueError(f"--val-n must be >= 2 (validation samples per problem), got {val_n}")
    fill = {"src": data_source, "n": val_n, "half": largest_power_of_two_below(val_n)}
    panels = []
    for section, entries in SECTIONS:
        for title, templates in entries:
            metrics = []
            for template in templates:
                ks = pass_ks(val_n) if "{k}" in template else [None]
                metrics += [template.format(k=k, **fill) for k in ks]
            panels.append((section.format(**fill), title.format(**fill), metrics))
    return panels


def build_workspace(
    entity: str,
    project: str,
    data_source: str = "math_dapo",
    val_n: int = 32,
    runs: Optional[list[str]] = None,
    name: str = "gtpo_verl",
):
    """The ``wandb_workspaces.workspaces.Workspace`` (not saved; ``.save()`` needs a wandb login)."""
    try:
        import wandb_workspaces.reports.v2 as wr
        import wandb_workspaces.workspaces as ws
        from wandb_workspaces import expr
    except ImportError as error:
        raise ImportError('the dashboard needs wandb-workspaces: pip install -e ".[dashboard]"') from error

    sections: dict[str, list] = {}
    for section, title, metrics in panel_metrics(data_source, val_n):
        sections.setdefault(section, []).append(wr.LinePlot(title=title, x=X_AXIS, y=metrics))
    runset = ws.RunsetSettings(filters=[expr.Metric("Name").isin(list(runs))] if runs else [])
    return ws.Workspace(
        entity=entity,
        project=project,
        name=name,
        sections=[ws.Section(name=section, panels=panels, is_open=True) for section, panels in sections.items()],
        settings=ws.WorkspaceSettings(x_axis=X_AXIS),
        runset_settings=runset,
    )


def main(argv=None) -> int:
    parser = ArgumentParser(prog="gtpo-dashboard", description="Save the gtpo_verl wandb workspace (docs/metrics.md panels).")
    parser.add_argument("--entity", required=True)
    parser.add_argument("--project", required=True)
    parser.add_argument("--runs", default="", help="comma-separated run names to show (default: all runs)")
    parser.add_argument("--data-source", default="math_dapo", help="validation data_source (AIME: math_dapo)")
    parser.add_argument("--val-n", type=positive_int, default=32, help="validation samples per problem")
    parser.add_argument("--name", default="gtpo_verl", help="workspace name")
    parser.add_argument("--dry-run", action="store_true", help="print the panels; save nothing")
    args = parser.parse_args(argv)
    runs = [r for r in args.runs.split(",") if r]
    if args.dry_run:
        for section, title, metrics in panel_metrics(args.data_source, args.val_n):
            print(f"{section} | {title}: {', '.join(metrics)}")
        return 0
    try:
        workspace = build_workspace(args.entity, args.project, args.data_source, args.val_n, runs, args.name)
        workspace.save()
    except ImportError as err:
        fail(parser.prog, str(err))
    except Exception as err:  # wandb: no login, no network, no such entity or project
        fail(parser.prog, f"saving the workspace to wandb failed ({type(err).__name__}: {err}); "
             "log in (`wandb login`, or WANDB_API_KEY) on a machine that reaches the wandb server, "
             "or print the panels with --dry-run", status=1)
    print(f"saved workspace {args.name!r}: {workspace.url}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
