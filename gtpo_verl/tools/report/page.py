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
import re
from importlib import resources
from typing import Optional

import numpy as np

import gtpo_verl
from gtpo_verl.tools.panels import SECTIONS, VALIDATION_SECTION, panel_metrics, training_panels
from gtpo_verl.tools.report import context
from gtpo_verl.tools.report.runs import Run
from gtpo_verl.tools.report.samples import PREFIX as SAMPLES_PREFIX

LOGGED_VALIDATION = re.compile(r"^val-(?:core|aux)/(?P<src>.+)/(?:acc|reward|score)/mean@(?P<n>\d+)$")
SAMPLE_METRIC = re.compile(r"^samples/(?P<src>.+)/(?P<stat>pass|maj)@(?P<k>\d+)$")
HEALTH_SECTION = "algorithm health"
MECHANISM_SECTION = "mechanism (audit dumps)"


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


def validation_grids(names: set[str]) -> list[tuple[str, int]]:
    """``(data source, n)`` of every validation set the runs logged (verl's ``mean@n`` names), n ≥ 2."""
    grids = {(m["src"], int(m["n"])) for m in map(LOGGED_VALIDATION.match, names) if m}
    return sorted(grid for grid in grids if grid[1] >= 2)


def sample_panels(names: set[str]) -> list[tuple[str, str, list[str]]]:
    """Panels of the pass@k / maj@n recomputed from the validation dumps, per data source."""
    by_source: dict[str, dict[str, list[int]]] = {}
    for match in filter(None, map(SAMPLE_METRIC.match, names)):
        by_source.setdefault(match["src"], {}).setdefault(match["stat"], []).append(int(match["k"]))
    panels = []
    for src, stats in sorted(by_source.items()):
        section = f"validation recomputed from the samples ({src})"
        ks = sorted(stats.get("pass", []))
        panels.append((section, "unbiased pass@k from the samples", [f"{SAMPLES_PREFIX}{src}/pass@{k}" for k in ks]))
        if ks:
            n = ks[-1]
            panels.append((section, f"pass@{n}: from the samples vs logged", [f"{SAMPLES_PREFIX}{src}/pass@{n}", f"val-gtpo/{src}/pass@{n}"]))
        for k in sorted(stats.get("maj", [])):
            panels.append((section, f"maj@{k}: from the samples vs logged", [f"{SAMPLES_PREFIX}{src}/maj@{k}", f"val-gtpo/{src}/maj@{k}"]))
    return panels


def namespace(metric: str) -> str:
    parts = metric.split("/")
    return "/".join(parts[:2]) if metric.startswith("val-") and len(parts) > 2 else parts[0]


def sections(runs: list[Run], other_metrics: bool = True) -> list[dict]:
    """The panels to draw, in the shared list's order (validation, then training), each with the
    metrics any run logged; panels no run logged are listed by title, not drawn."""
    names = set().union(*(run.values for run in runs))
    panels = []
    for src, n in validation_grids(names):
        panels += [p for p in panel_metrics(src, n) if p[0] == VALIDATION_SECTION.format(src=src, n=n)]
    panels += sample_panels(names)
    panels += training_panels()
    out: dict[str, dict] = {}
    drawn: set[str] = set()
    for section, title, metrics in panels:
        entry = out.setdefault(section, {"title": section, "panels": [], "missing": []})
        logged = [m for m in metrics if m in names]
        if logged:
            entry["panels"].append({"title": title, "metrics": logged})
            drawn.update(logged)
        else:
            entry["missing"].append(f"{title} ({', '.join(metrics)})")
    if HEALTH_SECTION in out:
        out[HEALTH_SECTION]["health"] = context.health_table()
    if other_metrics:
        rest: dict[str, list[str]] = {}
        for metric in sorted(names - drawn):
            rest.setdefault(namespace(metric), []).append(metric)
        for space, metrics in rest.items():
            out[f"other: {space}"] = {"title": f"every other metric: {space}/*", "other": True, "missing": [],
                                     "panels": [{"title": m, "metrics": [m]} for m in metrics]}
    return [entry for entry in out.values() if entry["panels"] or entry["missing"]]


def mechanism_section(mechanism: list[tuple[str, dict]]) -> dict:
    """The ``gtpo-mechanism`` table (``tools/mechanism.table_rows``) of every run with audit dumps: one
    column per run and dumped step."""
    from gtpo_verl.tools.mechanism import table_rows

    header, columns = ["quantity"], []
    for name, report in mechanism:
        header += [f"{name} · step {step['step']}" for step in report["steps"]]
        columns.append(table_rows(report["steps"]))
    rows = [[columns[0][i][0]] + [cell for table in columns for cell in table[i][1:]] for i in range(len(columns[0]))]
    dirs = "; ".join(f"{name}: {report['dir']}" for name, report in mechanism)
    return {"title": MECHANISM_SECTION, "panels": [], "missing": [],
            "table": {"header": header, "rows": rows, "note": f"gtpo-mechanism DIR on each run's dumps ({dirs}); docs/report.md"}}


def config_diff(configs: list[dict[str, str]]) -> dict:
    """Keys whose values differ between the runs that have a config (absent = ``—``)."""
    present = [c for c in configs if c]
    if len(present) < 2:
        return {"keys": [], "values": []}
    keys = sorted({k for c in present for k in c if len({c.get(k, "—") for c in present}) > 1})
    return {"keys": keys, "values": [[c.get(k, "—") if c else "" for c in configs] for k in keys]}


def run_payload(run: Run, config: dict[str, str], config_path: Optional[str], warnings: list[str],
                log_lines: list[str]) -> dict:
    return {
        "name": run.name,
        "group": run.group,
        "seed": run.seed,
        "steps": encode(run.steps.astype(np.float64)),
        "values": {metric: encode_column(values, ~np.isnan(values) | run.logged_null.get(metric, False))
                   for metric, values in run.values.items()},
        "files": [{"path": f.path, "rows": f.rows, "first": f.first_step, "last": f.last_step} for f in run.files],
        "rewritten": len(run.rewritten),
        "notes": run.notes,
        "warnings": warnings,
        "log_warnings": log_lines,
        "config_path": config_path,
        "key_settings": [[k, config[k]] for k in context.key_settings(config)],
        "config": sorted(config.items()),
    }


def build_html(runs: list[Run], configs: list[tuple[dict, Optional[str]]], warnings: list[list[str]],
               log_lines: list[list[str]], title: str, other_metrics: bool = True,
               mechanism: Optional[list[tuple[str, dict]]] = None) -> str:
    drawn = sections(runs, other_metrics)
    if mechanism:  # after the shared panel list, before "every other metric"
        at = next((i for i, entry in enumerate(drawn) if entry.get("other")), len(drawn))
        drawn.insert(at, mechanism_section(mechanism))
    payload = {
        "title": title,
        "generated": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "version": gtpo_verl.__version__,
        "sections": drawn,
        "runs": [run_payload(run, cfg, path, warn, logs)
                 for run, (cfg, path), warn, logs in zip(runs, configs, warnings, log_lines)],
        "config_diff": config_diff([cfg for cfg, _ in configs]),
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
