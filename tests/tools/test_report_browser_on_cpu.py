"""gtpo-report pages in a real browser: Debian's headless Chromium loads each page from disk
(file://) and ``support.report_page`` holds it to the metric files: no console error, no request
but the page's own file, every chart drawn, every number shown equal to the files' (seed means and
bands to numpy's).

Without /usr/bin/chromium these tests skip, saying why, unless GTPO_REQUIRE_BROWSER=1: CI
(.ci/run) installs Chromium and sets it, so there they fail instead of skipping.
"""

import importlib.util
import json
import os
from contextlib import contextmanager

import pytest
from support.browser import Browser, chromium_path
from support.paths import FIXTURES, REPO_ROOT
from support.report_page import check_page

from gtpo_verl.tools.report import write_report

if chromium_path() is None:
    if os.environ.get("GTPO_REQUIRE_BROWSER") == "1":
        raise RuntimeError("GTPO_REQUIRE_BROWSER=1 but /usr/bin/chromium is missing: apt-get install -y chromium")
    pytest.skip("no Chromium (apt-get install -y chromium; CI installs it and sets GTPO_REQUIRE_BROWSER=1)",
                allow_module_level=True)

RUN_METRICS = FIXTURES / "cpu_run_metrics"
POINTS = 40  # legend reads per line (evenly spread, last point included); every point's value is compared too


@contextmanager
def drawn(page):
    """The report ``page`` open in Chromium once its script has drawn every chart."""
    with Browser() as browser:
        browser.open(page.as_uri())
        browser.wait_until("window.gtpoReport && gtpoReport.done")
        yield browser


def load_report_runs():
    spec = importlib.util.spec_from_file_location("report_runs", REPO_ROOT / "benchmarks" / "report_runs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_real_cpu_runs_and_two_seeds_of_one_method(tmp_path):
    # six real CPU runs, two of them seeds 0 and 1 of DAPO_HIGH_ENTROPY: drawn as their mean, a min–max band
    # and thin seed lines, the others overlaid
    page = write_report([str(RUN_METRICS)], tmp_path / "report.html")
    result = check_page(page, tmp_path / "report.png", points_per_series=POINTS)
    assert result["failures"] == []
    assert result["panels"] >= 30 and result["charts"] > result["panels"] and result["points_checked"] > 1000
    assert (tmp_path / "report.png").stat().st_size > 100_000
    # the seed statistics were among the numbers checked
    with drawn(page) as browser:
        kinds = browser.evaluate("[...new Set(gtpoReport.charts.flatMap(c => c.series.map(s => s.kind)))]")
        groups = browser.evaluate("gtpoReport.groups.map(g => [g.name, g.runs])")
    assert set(kinds) == {"run", "seed", "mean", "min", "max"}
    assert ["DAPO_HIGH_ENTROPY", ["DAPO_HIGH_ENTROPY_seed0", "DAPO_HIGH_ENTROPY_seed1"]] in groups
    assert len(groups) == 5


def test_the_cpu_demos_runs_with_their_validation_samples(tmp_path):
    page = write_report([str(FIXTURES / "cpu_demo_runs")], tmp_path / "report.html")
    result = check_page(page, tmp_path / "report.png", points_per_series=POINTS)
    # also: each pass@k recomputed from the samples equals the logged one at its step
    assert result["failures"] == []
    with drawn(page) as browser:
        sections = browser.evaluate("[...document.querySelectorAll('main section.panels h2')].map(h => h.textContent)")
    assert "validation recomputed from the samples (gtpo_cpu_demo/even_digit)" in sections


def test_a_requeued_run_is_drawn_from_its_last_writes_and_the_page_says_so(tmp_path):
    rows = [json.loads(line) for line in open(RUN_METRICS / "GTPO_TRAJ_two_minibatches_seed1.jsonl")]
    run_dir = tmp_path / "GTPO_TRAJ"
    run_dir.mkdir()
    with open(run_dir / "attempt1.jsonl", "w") as first, open(run_dir / "attempt2.jsonl", "w") as second:
        for row in rows:
            if row["step"] <= 12:
                first.write(json.dumps(row) + "\n")
            if row["step"] >= 9:  # resumed from the step-8 checkpoint: 9..12 logged again, with other values
                row["data"] = {k: v * 0.5 if isinstance(v, float) else v for k, v in row["data"].items()}
                second.write(json.dumps(row) + "\n")
    page = write_report({"GTPO_TRAJ": str(run_dir)}, tmp_path / "report.html")
    result = check_page(page, points_per_series=POINTS)  # the numbers: the files merged, later writes winning
    assert result["failures"] == []
    with drawn(page) as browser:
        notice = browser.evaluate("document.querySelector('.notice').textContent")
        notes = browser.evaluate("[...document.querySelectorAll('.warnings li')].map(li => li.textContent)")
    assert "GTPO_TRAJ logged some steps more than once" in notice and "last value written" in notice
    assert any("written more than once" in n and "step 9, 10, 11, 12" in n for n in notes)


def test_markup_in_names_and_configs_stays_text(tmp_path):
    hostile = '</script><script>document.title="owned"</script><img src="http://example.invalid/x.png">'
    run_dir = tmp_path / "run"
    (run_dir / ".hydra").mkdir(parents=True)
    (run_dir / ".hydra" / "config.yaml").write_text(f"algorithm:\n  adv_estimator: '{hostile}'\n")
    with open(run_dir / "metrics.jsonl", "w") as handle:
        for step in (1, 2, 3):
            handle.write(json.dumps({"step": step, "data": {f"x/{hostile}": step * 0.5, "critic/score/mean": 0.1}}) + "\n")
    page = write_report({hostile: str(run_dir)}, tmp_path / "report.html", title=hostile)
    result = check_page(page, points_per_series=POINTS)  # no request (the <img> never loads), no error
    assert result["failures"] == []
    with drawn(page) as browser:
        assert browser.evaluate("document.title") == hostile  # the title element's text, not a script's doing
        assert browser.evaluate("document.querySelectorAll('img').length") == 0
        assert browser.evaluate("document.querySelectorAll('script').length") == 3  # data, uPlot, the page's own
        assert hostile in browser.evaluate("document.querySelector('section.runs').textContent")
        assert hostile in browser.evaluate("document.querySelector('section.config').textContent")


def test_a_synthetic_2000_step_run_of_300_metrics(tmp_path):
    report_runs = load_report_runs()
    path = tmp_path / "synthetic.jsonl"
    report_runs.write_run(str(path), steps=2000, metrics=300, seed=3)
    page = write_report([str(path)], tmp_path / "report.html")
    assert page.stat().st_size <= 10e6
    result = check_page(page, tmp_path / "report.png", points_per_series=10)
    assert result["failures"] == []
    assert result["charts"] >= 250  # the shared panels and every other metric


def test_the_first_screen_shows_reward_entropy_and_health_and_no_lone_dots(tmp_path):
    page = write_report([str(FIXTURES / "cpu_demo_runs")], tmp_path / "report.html")
    with drawn(page) as browser:  # 1400 × 900
        first = browser.evaluate("[...document.querySelectorAll('main section.panels')[0].querySelectorAll('.card')]"
                                 ".map(c => [c.querySelector('h3').textContent, c.dataset.draw, c.getBoundingClientRect().top])")
        fold = browser.evaluate("window.innerHeight")
        # every line chart's every series holds two points or more; the demos' single validations are bars
        points = browser.evaluate("gtpoReport.charts.flatMap(c => c.u.data.slice(1).map(ys => ys.filter(y => y !== null).length))")
        bars = browser.evaluate("gtpoReport.bars.map(b => [b.section, b.title, b.bars.length])")
    assert [(title, draw) for title, draw, _ in first] == [
        ("training reward: runs scored within ±1", "line"), ("training reward: runs scored within ±20", "line"),
        ("policy entropy", "line"), ("health at a glance", "table")]
    assert all(top < fold for _, _, top in first)
    assert min(points) >= 2
    assert ["validation (gtpo_cpu_demo/even_digit, n = 4)", "mean@4 (avg@4)", 3] in bars


def test_twelve_runs_keep_one_page_legend_and_compact_chart_legends(tmp_path):
    # twelve methods: each of the six real CPU runs under two names
    runs = {f"{path.stem.replace('_seed', '_run')}_{copy}": str(path)
            for copy in ("a", "b") for path in sorted(RUN_METRICS.glob("*.jsonl"))}
    page = write_report(runs, tmp_path / "report.html", other_metrics=False)
    result = check_page(page, points_per_series=10)
    assert result["failures"] == []
    with drawn(page) as browser:
        legend = browser.evaluate("document.querySelectorAll('nav .page-legend .legend-item').length")
        heights = browser.evaluate("[...document.querySelectorAll('.card.long-legend .u-legend')].map(l => l.clientHeight)")
        lines = browser.evaluate("Math.max(...gtpoReport.charts.map(c => c.series.length))")
        nav = browser.evaluate("document.querySelector('nav').getBoundingClientRect().height")
    assert legend == 12 and lines >= 12
    assert heights and max(heights) <= 110  # 8em of 11px text (88 px): a few rows, the rest scrolls
    assert nav <= 100
