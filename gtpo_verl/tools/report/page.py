"""The report as one HTML file: the runs' data as JSON, uPlot and the page's script inlined.

The page needs no network: everything it draws is in the file, and its Content-Security-Policy
(``default-src 'none'``, scripts allowed only by their sha256) refuses any request a browser
might be asked to make. Every value reaches the DOM as text (``textContent``), never as markup.
Metric values travel as base64 float64 (little-endian; NaN where a metric was not logged at a
run's step; sparse metrics as their logged indices and values), which keeps a 2,000-step ×
300-metric run near 5 MB and every number exact.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import html
import json
from dataclasses import replace
from importlib import resources
from typing import Sequence

import numpy as np

import gtpo_verl
from gtpo_verl.tools.panels import SECTIONS
from gtpo_verl.tools.report import context
from gtpo_verl.tools.report.kinds import Panel, ordered_kinds
from gtpo_verl.tools.report.record import RunRecord

# a line panel whose series are this short and include a single point is drawn as bars of every point
FEW_POINTS = 3


def asset(name: str) -> str:
    return resources.files("gtpo_verl.tools.report").joinpath("assets", name).read_text(encoding="utf-8")


def encode(values: np.ndarray) -> str:
    return base64.b64encode(np.ascontiguousarray(values, dtype="<f8").tobytes()).decode("ascii")


def encode_column(values: np.ndarray, logged: np.ndarray):
    """Dense base64 float64, or ``[indices (int32), values]`` when under half the steps are logged
    (validation metrics: one step in ``test_freq``)."""
    if logged.sum() * 2 >= len(values):
        return encode(values)
    where = np.flatnonzero(logged)
    return [base64.b64encode(where.astype("<i4").tobytes()).decode("ascii"), encode(values[where])]


def bars_of(records: Sequence[RunRecord], pairs: list[tuple[str, str]]) -> tuple[dict, ...]:
    """A bar per finite value of each ``(run, metric)``, metric by metric."""
    by_name = {record.name: record for record in records}
    bars = []
    for metric in dict.fromkeys(metric for _, metric in pairs):
        for name in (name for name, m in pairs if m == metric):
            steps, values = by_name[name].metrics.series(metric)
            finite = np.isfinite(values)
            bars += [{"run": name, "metric": metric, "step": int(step), "value": float(value)}
                     for step, value in zip(steps[finite].tolist(), values[finite].tolist())]
    return tuple(bars)


def drawable(panel: Panel, records: Sequence[RunRecord]) -> list[Panel]:
    """A line panel as the page draws it: nothing when no run logged its metrics; bars when its series hold
    single points (a lone dot on a line chart reads as nothing), all of them when every series is that short;
    otherwise the line chart, with its single-point series as bars beside it."""
    shown = [record for record in records if panel.runs is None or record.name in panel.runs]
    points = {(record.name, metric): record.points(metric) for metric in panel.metrics for record in shown}
    points = {pair: n for pair, n in points.items() if n}
    if not points:
        return []
    logged = tuple(m for m in panel.metrics if any(metric == m for _, metric in points))
    single = [pair for pair, n in points.items() if n == 1]
    if not single:
        return [replace(panel, metrics=logged)]
    if max(points.values()) <= FEW_POINTS:
        return [Panel(panel.section, panel.title, "bars", logged, bars=bars_of(records, list(points)), note=panel.note)]
    return [replace(panel, metrics=logged, skip=tuple(single)),
            Panel(panel.section, f"{panel.title}: series with one value", "bars",
                  tuple(dict.fromkeys(m for _, m in single)), bars=bars_of(records, single))]


def sections(records: Sequence[RunRecord], other_metrics: bool = True) -> list[dict]:
    """The page's sections, in the order of ``kinds.PANEL_KINDS``: each with the panels its kinds made and
    drew something for; a line panel no run logged is listed by title, not drawn."""
    out: dict[str, dict] = {}
    for kind in ordered_kinds():
        if kind.folded and not other_metrics:
            continue
        for panel in kind.panels(records):
            entry = out.setdefault(panel.section, {"title": panel.section, "other": kind.folded, "panels": [], "missing": []})
            shown = drawable(panel, records) if panel.draw == "line" else [panel]
            if not shown:
                entry["missing"].append(f"{panel.title} ({', '.join(panel.metrics)})")
            entry["panels"] += [p.page_form() for p in shown]
    return [entry for entry in out.values() if entry["panels"] or entry["missing"]]


def config_diff(configs: list[dict[str, str]]) -> dict:
    """Keys whose values differ between the runs that have a config (absent = ``—``)."""
    present = [c for c in configs if c]
    if len(present) < 2:
        return {"keys": [], "values": []}
    keys = sorted({k for c in present for k in c if len({c.get(k, "—") for c in present}) > 1})
    return {"keys": keys, "values": [[c.get(k, "—") if c else "" for c in configs] for k in keys]}


def run_payload(record: RunRecord) -> dict:
    run = record.metrics
    return {
        "name": record.name,
        "group": record.group,
        "seed": record.seed,
        "steps": encode(run.steps.astype(np.float64)),
        "values": {metric: encode_column(values, ~np.isnan(values) | run.logged_null.get(metric, False))
                   for metric, values in run.values.items()},
        "files": [{"path": f.path, "rows": f.rows, "first": f.first_step, "last": f.last_step} for f in run.files],
        "rewritten": len(run.rewritten),
        "notes": run.notes,
        "warnings": list(record.warnings),
        "log_warnings": list(record.log_warnings),
        "config_path": record.config_path,
        "key_settings": [[k, record.config[k]] for k in context.key_settings(record.config)],
        "config": sorted(record.config.items()),
    }


def build_html(records: Sequence[RunRecord], title: str, other_metrics: bool = True) -> str:
    payload = {
        "title": title,
        "generated": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "version": gtpo_verl.__version__,
        "sections": sections(records, other_metrics),
        "runs": [run_payload(record) for record in records],
        "config_diff": config_diff([record.config for record in records]),
        "panel_list_sections": [section for section, _ in SECTIONS],
    }
    data = json.dumps(payload, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    data = data.replace("<", "\\u003c")  # no "</script>" or "<!--" can end the data block early
    scripts = [asset("uPlot.iife.min.js"), asset("report.js")]
    hashes = " ".join(f"'sha256-{base64.b64encode(hashlib.sha256(s.encode()).digest()).decode()}'" for s in scripts)
    csp = f"default-src 'none'; script-src {hashes}; style-src 'unsafe-inline'; img-src data:"
    return "".join([
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">",
        f"<meta http-equiv=\"Content-Security-Policy\" content=\"{csp}\">",
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">",
        f"<title>{html.escape(title)}</title>",
        f"<style>{asset('uPlot.min.css')}\n{asset('report.css')}</style></head>\n<body>",
        f"<noscript>This report draws its charts with JavaScript; enable it for this file.</noscript>",
        f"<script type=\"application/json\" id=\"report-data\">{data}</script>\n",
        *(f"<script>{s}</script>\n" for s in scripts),
        "</body></html>\n",
    ])
