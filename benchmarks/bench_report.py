"""Time and size of ``gtpo-report`` on a synthetic run (verl's file-logger format).

    python -m benchmarks.bench_report [--steps 2000 --metrics 300 --runs 1 --repeats 3 --browser]

Writes the run(s) under ``--out`` (default outputs/bench_report/), times the whole command
``gtpo-report RUN... -o report.html`` in a fresh interpreter (start-up and imports included;
median of ``--repeats``; also its CPU seconds, user + system, which a shared machine's load does
not inflate), and prints the file's size. With ``--browser`` it also loads the page
from disk in headless Chromium (/usr/bin/chromium) and reports the time until every panel is
drawn, then until every other metric's chart is drawn too, and whether any console error or
network request happened. The floors it is held to (docs/report.md): ≤ 5 s and ≤ 10 MB for one
run of 2,000 steps × 300 metrics.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.report_runs import write_run

ROOT = Path(__file__).resolve().parents[1]


def browser_timing(page: Path) -> dict:
    sys.path.insert(0, str(ROOT / "tests"))
    from support.browser import Browser, chromium_path

    if chromium_path() is None:
        return {"browser": "chromium not installed"}
    with Browser() as browser:
        start = time.perf_counter()
        browser.open(page.as_uri())
        browser.wait_until("window.gtpoReport && gtpoReport.done", timeout=120)
        panels_s = time.perf_counter() - start
        drawn = browser.evaluate("gtpoReport.drawn")
        opened = time.perf_counter()
        browser.evaluate("document.querySelectorAll('details').forEach(d => { if (d.querySelector('.grid')) d.open = true; })")
        browser.wait_until("gtpoReport.done && gtpoReport.pending === 0 && document.querySelectorAll('.card').length === "
                           "document.querySelectorAll('.card[data-drawn]').length", timeout=300)
        return {
            "panels_drawn": drawn,
            "panels_s": round(panels_s, 2),
            "page_script_ms": round(browser.evaluate("gtpoReport.drawMs")),
            "all_charts": browser.evaluate("gtpoReport.drawn"),
            "other_metrics_s": round(time.perf_counter() - opened, 2),
            "problems": browser.problems(),
            "requests": [u for u in browser.requests() if u != page.as_uri()],
        }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--metrics", type=int, default=300)
    parser.add_argument("--runs", type=int, default=1, help="runs (seeds of one method: <name>_seed<k>)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--browser", action="store_true")
    parser.add_argument("--out", default=str(ROOT / "outputs" / "bench_report"))
    args = parser.parse_args()
    out = Path(args.out).resolve()
    paths = []
    for seed in range(args.runs):
        path = out / f"synthetic_seed{seed}.jsonl"
        write_run(str(path), args.steps, args.metrics, seed=seed)
        paths.append(str(path))
    page = out / "report.html"
    times, cpu = [], []
    for _ in range(args.repeats):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "gtpo_verl.tools.report", *paths, "-o", str(page)], check=True,
                       stdout=subprocess.DEVNULL)
        times.append(time.perf_counter() - start)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    result = {
        "steps": args.steps, "metrics": args.metrics, "runs": args.runs,
        "report_s_median": round(statistics.median(times), 2), "report_s": [round(t, 2) for t in times],
        # CPU seconds of the command (user + system): its time on a core of its own, whatever the load
        "report_cpu_s_median": round(statistics.median(cpu), 2),
        "html_mb": round(page.stat().st_size / 1e6, 2),
        "input_mb": round(sum(os.path.getsize(p) for p in paths) / 1e6, 2),
        "cpu": platform.processor() or platform.machine(), "load": os.getloadavg(),
    }
    if args.browser:
        result.update(browser_timing(page))
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
