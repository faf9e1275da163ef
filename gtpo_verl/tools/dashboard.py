"""The wandb dashboard of docs/metrics.md as code (a saved wandb workspace).

    pip install -e ".[dashboard]"     # wandb-workspaces
    gtpo-dashboard --entity E --project DAPO \\
        --runs Qwen2.5-32B-DAPO_step1,Qwen2.5-32B-DAPO_TOKEN,Qwen2.5-32B-DAPO_SEQ
    gtpo-dashboard --entity E --project gtpo_study --data-source gtpo_study/max_digit --val-n 16
    gtpo-dashboard ... --dry-run                   # print the panels, save nothing (or python -m gtpo_verl.tools.dashboard)

The panels are data (``gtpo_verl/tools/panels.py``, which ``gtpo-report`` draws too): one line
plot per panel, the selected runs overlaid, x-axis the training step.
"""

from __future__ import annotations

import sys
from typing import Optional

from gtpo_verl.tools.cli import ArgumentParser, fail, positive_int

# the panel list is shared with gtpo-report; its names stay importable from here
from gtpo_verl.tools.panels import NOT_ON_CPU, SECTIONS, X_AXIS, largest_power_of_two_below, panel_metrics  # noqa: F401


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
