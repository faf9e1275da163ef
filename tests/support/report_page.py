"""Reads a gtpo-report page back in headless Chromium and holds it to the metric files it was made from.

    cd tests && python -m support.report_page PAGE.html [PAGE.html ...] [--screenshots DIR]

For each page: no console error or warning, no uncaught exception, no request but the page's own
file; every chart drawn (its canvas holds pixels of its lines' colours), also those of every
other metric once their sections are opened; a full-page screenshot of the panels; and the
numbers: every point of every run's line equals the metric files' value (the files the page
lists, read here with plain ``json``, later writes replacing earlier), and the legend shows it to
its stated precision (integers exactly, else 6 significant digits); a method's mean, min and max
over seeds equal numpy's over those files at the steps every seed logged (the seeds the chart draws);
every bar's value equals the files' value and the text beside it shows it to the same precision.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Optional

import numpy as np

from support.browser import Browser

# every chart: per series, every logged point, and what the legend shows at `limit` of them (evenly spread, the last included)
READ_POINTS = """
((limit) => gtpoReport.charts.map((chart, c) => {
  const u = chart.u, out = [];
  chart.series.forEach((s, k) => {
    const ys = u.data[k + 1], idx = [];
    ys.forEach((y, i) => { if (y !== null) idx.push(i); });
    const step = Math.max(1, Math.ceil(idx.length / limit));
    idx.forEach((i, j) => {
      let text = null;
      if (j % step === 0 || j === idx.length - 1) {
        u.setLegend({ idx: i });
        text = u.root.querySelectorAll('.u-legend .u-series')[k + 1].querySelector('.u-value').textContent;
      }
      out.push([k, i, u.data[0][i], ys[i], text]);
    });
  });
  return { chart: c, section: chart.section, title: chart.title, series: chart.series, points: out };
}))(LIMIT)
"""
# per chart: how many canvas pixels match one of its lines' (opaque) colours
DRAWN_PIXELS = """
gtpoReport.charts.map((chart) => {
  const groups = new Map(gtpoReport.groups.map((g) => [g.name, g.color]));
  const colors = [...new Set(chart.series.filter((s) => s.kind !== 'seed').map((s) => groups.get(s.group)))]
    .map((hex) => [1, 3, 5].map((i) => parseInt(hex.slice(i, i + 2), 16)));
  const canvas = chart.u.ctx.canvas, data = chart.u.ctx.getImageData(0, 0, canvas.width, canvas.height).data;
  let hits = 0;
  for (let p = 0; p < data.length; p += 4)
    if (colors.some(([r, g, b]) => Math.abs(data[p] - r) < 24 && Math.abs(data[p + 1] - g) < 24 && Math.abs(data[p + 2] - b) < 24)) hits++;
  return [chart.title, hits];
})
"""


def metric_files_reference(files: list[str]) -> dict[int, dict]:
    merged: dict[int, dict] = {}
    for path in files:
        with open(path) as handle:
            for line in handle:
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a cut-off line: the page skips it too (and says so)
                merged.setdefault(row["step"], {}).update(row["data"])
    return merged


def shown_matches(text: str, value: float) -> bool:
    """The legend's text for ``value``: integers exactly, else rounded to 6 significant digits."""
    if float(value).is_integer() and abs(value) < 1e15:
        return text == str(int(value))
    return abs(float(text) - value) <= 5e-6 * abs(value)


def check_bars(page_runs: list[dict], bars: list[dict]) -> tuple[int, list[str]]:
    """``(bars checked, mismatches)``: each bar's value against its run's metric files (a value recomputed from the
    samples against the logged ``val-gtpo`` one, where logged), and the text beside it to its stated precision."""
    reference = {run["name"]: metric_files_reference([f["path"] for f in run["files"]]) for run in page_runs}
    checked, bad = 0, []
    for panel in bars:
        for bar in panel["bars"]:
            metric, step, value = bar["metric"], int(bar["step"]), bar["value"]
            logged = reference[bar["run"]].get(step, {})
            if metric.startswith("samples/"):
                expected = logged.get("val-gtpo/" + metric[len("samples/"):], value)
                same = math.isclose(value, expected, rel_tol=1e-12, abs_tol=1e-12)
            else:
                expected = logged.get(metric)
                same = expected is not None and float(expected) == value
            if not same:
                bad.append(f"{panel['title']}: bar {bar['run']} · {metric} at step {step}: page {value}, file {expected}")
            if not shown_matches(bar["text"], value):
                bad.append(f"{panel['title']}: bar {bar['run']} · {metric} at step {step}: shows {bar['text']!r} for {value!r}")
            checked += 1
    return checked, bad


def check_numbers(page_runs: list[dict], charts: list[dict]) -> tuple[int, list[str]]:
    """``(points checked, mismatches)``: each run's points against its metric files, seed statistics against numpy."""
    reference = {run["name"]: metric_files_reference([f["path"] for f in run["files"]]) for run in page_runs}
    seeds_of = {}
    for run in page_runs:
        seeds_of.setdefault(run["group"], []).append(run["name"])
    checked, bad = 0, []
    for chart in charts:
        for k, i, step, value, text in chart["points"]:
            series = chart["series"][k]
            metric, step = series["metric"], int(step)
            if series["run"] is not None:
                expected = reference[series["run"]].get(step, {}).get(metric)
                if expected is None and metric.startswith("samples/"):
                    continue  # recomputed from the validation samples: checked against the logged val-gtpo below
                if expected is None or float(expected) != value:
                    bad.append(f"{chart['title']}: {series['label']} at step {step}: page {value}, file {expected}")
            else:  # mean / min / max over the method's seeds at a step every seed logged
                members = series.get("members") or seeds_of[series["group"]]  # the seeds this chart draws
                logged = [reference[name].get(step, {}).get(metric) for name in members]
                if any(v is None for v in logged):
                    bad.append(f"{chart['title']}: {series['label']} at step {step}: not every seed logged it")
                    continue
                logged = np.asarray(logged, dtype=np.float64)
                expected = {"mean": logged.mean(), "min": logged.min(), "max": logged.max()}[series["kind"]]
                if not math.isclose(value, expected, rel_tol=1e-12, abs_tol=1e-15):
                    bad.append(f"{chart['title']}: {series['label']} at step {step}: page {value}, numpy {expected}")
            if text is not None and not shown_matches(text, value):
                bad.append(f"{chart['title']}: {series['label']} at step {step}: legend shows {text!r} for {value!r}")
            checked += 1
    return checked, bad


def samples_agree_with_logged(page_runs: list[dict], charts: list[dict]) -> list[str]:
    """Where a run logged ``val-gtpo/<src>/pass@k`` and the page recomputed ``samples/<src>/pass@k`` at one step: equal."""
    reference = {run["name"]: metric_files_reference([f["path"] for f in run["files"]]) for run in page_runs}
    bad = []
    for chart in charts:
        for k, i, step, value, _ in chart["points"]:
            series = chart["series"][k]
            if series["run"] is None or not series["metric"].startswith("samples/"):
                continue
            logged = reference[series["run"]].get(int(step), {}).get("val-gtpo/" + series["metric"][len("samples/"):])
            if logged is not None and not math.isclose(value, logged, rel_tol=1e-12, abs_tol=1e-12):
                bad.append(f"{series['label']} at step {step}: {value} from the samples, {logged} logged")
    return bad


def check_page(page: Path, screenshot: Optional[Path] = None, points_per_series: int = 10_000) -> dict:
    """Everything the module docstring lists, for one page; returns what it found (``failures`` empty when fine)."""
    page = Path(page).resolve()
    failures: list[str] = []
    with Browser() as browser:
        browser.open(page.as_uri())
        browser.wait_until("window.gtpoReport && gtpoReport.done", timeout=180)
        panels = browser.evaluate("gtpoReport.drawn")
        draw_ms = browser.evaluate("gtpoReport.drawMs")
        if screenshot is not None:
            browser.screenshot(str(screenshot))
        browser.evaluate("document.querySelectorAll('details').forEach(d => { if (d.querySelector('.grid')) d.open = true; })")
        browser.wait_until("gtpoReport.done && document.querySelectorAll('.card:not([data-drawn])').length === 0", timeout=300)
        cards = browser.evaluate("document.querySelectorAll('.card[data-draw=\"line\"]').length")
        bar_cards = browser.evaluate("document.querySelectorAll('.card[data-draw=\"bars\"]').length")
        bar_rows = browser.evaluate("document.querySelectorAll('.card[data-draw=\"bars\"] .bar-row').length")
        bars = browser.evaluate("gtpoReport.bars")
        blank = [title for title, hits in browser.evaluate(DRAWN_PIXELS) if hits < 3]
        page_runs = browser.evaluate("JSON.parse(document.getElementById('report-data').textContent).runs"
                                     ".map(r => ({name: r.name, group: r.group, files: r.files}))")
        charts = browser.evaluate(READ_POINTS.replace("LIMIT", str(points_per_series)))
        problems = browser.problems()
        requests = [url for url in browser.requests() if url != page.as_uri()]
    checked, mismatches = check_numbers(page_runs, charts)
    disagreements = samples_agree_with_logged(page_runs, charts)
    bars_checked, bar_mismatches = check_bars(page_runs, bars)
    failures += [f"browser: {p}" for p in problems] + [f"request: {u}" for u in requests]
    failures += [f"chart not drawn: {t}" for t in blank] + mismatches[:20] + disagreements[:20]
    failures += bar_mismatches[:20]
    if cards != len(charts):
        failures.append(f"{cards} chart cards but {len(charts)} charts drawn")
    if bar_cards != len(bars) or bar_rows != sum(len(panel["bars"]) for panel in bars):
        failures.append(f"{bar_cards} bar cards of {bar_rows} bars, but {len(bars)} bar panels drawn")
    return {"page": str(page), "panels": panels, "charts": len(charts), "points_checked": checked, "bars_checked": bars_checked,
            "legend_values_read": sum(p[4] is not None for c in charts for p in c["points"]),
            "page_draw_ms": round(draw_ms), "screenshot": str(screenshot) if screenshot else None,
            "failures": failures}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="check gtpo-report pages in headless Chromium")
    parser.add_argument("pages", nargs="+", type=Path)
    parser.add_argument("--screenshots", type=Path, help="write <page>.png here")
    args = parser.parse_args(argv)
    failed = False
    for page in args.pages:
        shot = args.screenshots / (page.parent.name + "_" + page.stem + ".png") if args.screenshots else None
        if shot:
            shot.parent.mkdir(parents=True, exist_ok=True)
        result = check_page(page, shot)
        print(json.dumps(result, indent=1))
        failed = failed or bool(result["failures"])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
