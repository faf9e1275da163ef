"""``gtpo-report``: one self-contained, offline HTML page from verl's own metric files.

    gtpo-report RUN [RUN ...] -o report.html           # or python -m gtpo_verl.tools.report

From code (every demo calls it)::

    from gtpo_verl.tools.report import write_report
    write_report({"DAPO": "outputs/demo/DAPO", "DAPO_TOKEN": "outputs/demo/DAPO_TOKEN"}, "outputs/demo/report.html")

A RUN is verl's file-logger JSONL (``trainer.logger=[...,file]``), a run folder (its ``*.jsonl``
are the run's attempts; ``.hydra/config.yaml``, ``validation/`` and ``*.log`` beside them are
read too), or a folder of run folders. A run folder with audit dumps (its ``audit/`` or its
``gtpo.audit.dir``) adds the ``gtpo-mechanism`` table of them. Each run is one ``RunRecord`` (``record.py``) from loading to the
page; the page's panels come from the kinds registered in ``kinds.py``: a first screen (reward,
entropy, health), the panels of ``gtpo_verl/tools/panels.py`` (the ones ``gtpo-dashboard`` saves to
wandb) and every other logged metric, runs overlaid and seeds of one method (``<method>_seed<k>``)
as their mean with a min–max band and thin per-seed lines; docs/report.md describes the page.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional, Union

from gtpo_verl.tools.report.record import RunRecord
from gtpo_verl.tools.report.runs import ReportInputError, Run, add_series, expand_inputs, read_run

__all__ = ["write_report", "load_runs", "Run", "RunRecord", "ReportInputError"]

RunsArg = Union[dict, list, tuple]


def load_runs(runs: RunsArg, validation: Optional[dict] = None) -> list[RunRecord]:
    """Each run read, merged and recorded with its config, warnings and audit report.

    ``validation`` maps a run name to its ``trainer.validation_data_dir``; a run folder's own
    ``validation/`` is found without it.
    """
    from gtpo_verl.tools.report import context, samples

    records = []
    for name, paths, folder in expand_inputs(runs):
        run = read_run(paths, name=name, folder=folder)
        config_path = context.find_config(folder)
        config = context.read_config(config_path, run.notes) if config_path else {}
        dump_dir = (validation or {}).get(run.name) or (os.path.join(folder, "validation") if folder else None)
        if dump_dir and os.path.isdir(dump_dir):
            per_step = samples.recompute(dump_dir, run.values.keys(), context.success_threshold(config), run.notes)
            add_series(run, samples.as_series(per_step))
        elif (validation or {}).get(run.name):
            raise ReportInputError(f"{dump_dir}: no such validation folder (trainer.validation_data_dir of run {run.name})")
        warnings = context.metric_warnings(run)
        mechanism = mechanism_of(folder, config, warnings)
        records.append(RunRecord(metrics=run, config=config, config_path=str(config_path) if config_path else None,
                                 warnings=tuple(warnings), log_warnings=tuple(context.log_warnings(folder, run.notes)),
                                 mechanism=mechanism))
    names = [record.name for record in records]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ReportInputError(f"two runs are named {duplicates[0]!r}: name them apart with NAME=PATH")
    return records


def mechanism_of(folder: Optional[str], config: dict, warnings: list[str]) -> Optional[dict]:
    """``gtpo-mechanism``'s report of the run folder's audit dumps (``tools/mechanism.py``), or None without
    dumps; a dump it cannot read becomes one of the run's warnings."""
    from gtpo_verl.tools import mechanism

    audit_dir = mechanism.find_audit_dir(folder, config)
    if audit_dir is None:
        return None
    try:
        return mechanism.analyse_dir(audit_dir)
    except (ValueError, OSError) as error:  # an AuditDumpError is a ValueError
        warnings.append(f"the mechanism report of {audit_dir} is left out: {' '.join(str(error).split())}")
        return None


def write_report(runs: RunsArg, out_path: Union[str, os.PathLike], *, title: str = "gtpo_verl run report",
                 validation: Optional[dict] = None, other_metrics: bool = True) -> Path:
    """Write the HTML report of ``runs`` to ``out_path`` and return its path.

    ``runs``: paths (metrics files, run folders, folders of run folders, ``"NAME=PATH"``) or a
    mapping ``{name: path or [metrics files]}``. ``validation``: ``{run name: dump folder}``.
    ``other_metrics=False`` leaves out the charts of every other metric. Raises ``ReportInputError`` (one
    line naming the input) on input it cannot use.
    """
    from gtpo_verl.tools.report.page import build_html

    text = build_html(load_runs(runs, validation), title, other_metrics)
    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.name + ".partial")
    partial.write_text(text, encoding="utf-8")
    partial.replace(out)  # a reader never sees half a page
    return out
