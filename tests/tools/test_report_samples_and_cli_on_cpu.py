"""gtpo-report's pass@k / maj@n recomputed from verl's validation dumps, held to brute-force
enumeration; the panels it shares with gtpo-dashboard; its command line (one line, exit 2 / 1)."""

import itertools
import json
import os
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import pytest
from support.paths import FIXTURES

from gtpo_verl.tools import dashboard, panels
from gtpo_verl.tools.report import load_runs, write_report
from gtpo_verl.tools.report.page import sections
from gtpo_verl.tools.report.samples import recompute

RUN_METRICS = FIXTURES / "cpu_run_metrics"


def brute_force_pass_at_k(outcomes, k):
    subsets = list(itertools.combinations(range(len(outcomes)), k))
    return Fraction(sum(any(outcomes[i] for i in s) for s in subsets), len(subsets))


def dump_rows(outcomes_per_problem, answers_per_problem, turns=1, step=10):
    """verl 0.9.1's V1 validation dump: one line per output, uid = {prompt uid}_{session}_{index};
    a multi-turn session writes one line per turn, every line carrying the session's final score."""
    rows = []
    for p, (outcomes, answers) in enumerate(zip(outcomes_per_problem, answers_per_problem)):
        for session, (ok, answer) in enumerate(zip(outcomes, answers)):
            for index in range(turns):
                final = index == turns - 1
                rows.append({"input": f"problem {p}", "output": f"turn {index}", "gts": "7", "score": float(ok),
                             "step": step, "reward": float(ok), "acc": bool(ok) if final else (not ok),
                             "pred": answer if final else "partial", "uid": f"uid-{p}_{session}_{index}"})
    return rows


@pytest.mark.parametrize("turns", [1, 3])
def test_pass_at_k_and_maj_from_the_samples_equal_enumeration(tmp_path, turns):
    outcomes = [[1, 0, 0, 0], [1, 1, 0, 1], [0, 0, 0, 0], [1, 1, 1, 1], [0, 1, 0, 0]]
    answers = [["7", "3", "3", "5"], ["7", "7", "2", "7"], ["1", "2", "1", "2"], ["7"] * 4, ["4", "7", "4", "9"]]
    folder = tmp_path / "validation"
    folder.mkdir()
    with open(folder / "10.jsonl", "w") as handle:
        for row in dump_rows(outcomes, answers, turns):
            handle.write(json.dumps(row) + "\n")
    per_step = recompute(str(folder), ["val-core/my_source/acc/mean@4"])
    got = per_step[10]
    for k in (1, 2, 4):
        expected = sum(brute_force_pass_at_k(o, k) for o in outcomes) / len(outcomes)
        assert got[f"samples/my_source/pass@{k}"] == pytest.approx(float(expected), abs=1e-12)
    # most frequent answer per problem, ties to the first seen: 3 (wrong), 7 (right), 1 (wrong), 7 (right), 4 (wrong)
    assert got["samples/my_source/maj@4"] == pytest.approx(2 / 5)
    assert set(got) == {"samples/my_source/pass@1", "samples/my_source/pass@2", "samples/my_source/pass@4",
                        "samples/my_source/maj@4"}


def test_a_dump_without_uids_groups_samples_by_prompt(tmp_path):
    folder = tmp_path / "validation"
    folder.mkdir()
    rows = [{"input": f"p{p}", "output": "x", "score": float(ok), "step": 5}
            for p, outcomes in enumerate([[1, 0], [0, 0], [1, 1]]) for ok in outcomes]
    (folder / "5.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    got = recompute(str(folder), [])[5]
    assert got == pytest.approx({"samples/all/pass@1": 0.5, "samples/all/pass@2": 2 / 3})


def test_the_samples_join_the_run_as_panels(tmp_path):
    run_dir = tmp_path / "GTPO_TRAJ"
    (run_dir / "validation").mkdir(parents=True)
    metrics = (RUN_METRICS / "GTPO_TRAJ_seed0.jsonl").read_text()
    (run_dir / "metrics.jsonl").write_text(metrics)
    outcomes = [[1, 0, 0, 1], [0, 0, 0, 0]]
    with open(run_dir / "validation" / "3.jsonl", "w") as handle:  # a step the metrics file does not have
        for row in dump_rows(outcomes, [["1"] * 4, ["2"] * 4], step=3):
            handle.write(json.dumps(row) + "\n")
    (record,) = load_runs({"GTPO_TRAJ": str(run_dir)})
    run = record.metrics
    assert run.steps.tolist() == [0, 1, 2, 3]
    steps, values = run.series("samples/gtpo_study/max_digit/pass@4")
    assert steps.tolist() == [3] and values.tolist() == [0.5]
    steps, values = run.series("critic/score/mean")  # the step axis grew; the logged values stayed put
    assert steps.tolist() == [1, 2]
    titles = [p["title"] for s in sections([record]) for p in s["panels"]]
    assert "unbiased pass@k from the samples" in titles and "pass@4: from the samples vs logged" in titles


def test_dashboard_and_report_draw_one_panel_list():
    assert dashboard.SECTIONS is panels.SECTIONS and dashboard.panel_metrics is panels.panel_metrics
    (record,) = load_runs([str(RUN_METRICS / "GTPO_TRAJ_two_minibatches_seed1.jsonl")])
    run = record.metrics
    report_sections = sections([record], other_metrics=False)
    shown = [(s["title"], p["title"]) for s in report_sections for p in s["panels"]]
    listed = [(s["title"], m) for s in report_sections for m in s["missing"]]
    for section, title, metrics in panels.panel_metrics("gtpo_study/max_digit", 16):
        drawn = (section, title) in shown
        missing = any(sec == section and text.startswith(title + " (") for sec, text in listed)
        assert drawn != missing, (section, title)  # each panel: drawn, or named as not logged
        if drawn:
            panel = next(p for s in report_sections if s["title"] == section for p in s["panels"] if p["title"] == title)
            assert panel["metrics"] == [m for m in metrics if m in run.values]


def _cli(*args, cwd="/"):
    return subprocess.run([sys.executable, "-m", "gtpo_verl.tools.report", *map(str, args)], capture_output=True,
                          text=True, timeout=120, cwd=cwd)


def test_cli_writes_the_page_and_says_where(tmp_path):
    out = tmp_path / "sub" / "report.html"
    proc = _cli(RUN_METRICS, "-o", out)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"wrote {out} (") and out.stat().st_size > 50_000
    assert not (tmp_path / "sub" / "report.html.partial").exists()
    installed = Path(sys.executable).parent / "gtpo-report"
    assert installed.exists(), f"{installed} is missing: reinstall the package (pip install -e .)"
    proc = subprocess.run([str(installed), "--help"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "NAME=PATH" in proc.stdout


@pytest.mark.parametrize("args,code,message", [
    ((), 2, "gtpo-report: the following arguments are required: RUN, -o/--out (see gtpo-report --help)"),
    (("x.jsonl",), 2, "gtpo-report: the following arguments are required: -o/--out (see gtpo-report --help)"),
    ((RUN_METRICS, "-o", "r.html", "--validation", "nodir"), 2,
     "gtpo-report: --validation 'nodir': expected NAME=DIR (see gtpo-report --help)"),
    (("/nonexistent/run.jsonl", "-o", "r.html"), 1, "gtpo-report: /nonexistent/run.jsonl: no such file or folder"),
    ((RUN_METRICS, "-o", "r.html", "--validation", "DAPO_SEQ_seed0=/nonexistent"), 1,
     "gtpo-report: /nonexistent: no such validation folder (trainer.validation_data_dir of run DAPO_SEQ_seed0)"),
])
def test_cli_bad_input_is_one_line_and_the_right_exit_status(tmp_path, args, code, message):
    proc = _cli(*args, cwd=tmp_path)
    assert proc.returncode == code
    assert proc.stderr.strip() == message and proc.stdout == ""


def test_cli_unreadable_input_and_unwritable_output_are_one_line(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text("garbage\n")
    proc = _cli(bad, "-o", tmp_path / "r.html")
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1 and "no metric rows in" in proc.stderr
    blocker = tmp_path / "file"
    blocker.write_text("")
    proc = _cli(RUN_METRICS, "-o", blocker / "r.html")
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("gtpo-report: ")


def test_write_report_is_callable_from_a_demo(tmp_path):
    out = write_report({"DAPO_SEQ": RUN_METRICS / "DAPO_SEQ_seed0.jsonl", "GTPO_TRAJ": [RUN_METRICS / "GTPO_TRAJ_seed0.jsonl"]},
                       tmp_path / "report.html", title="a demo")
    text = out.read_text()
    assert "<title>a demo</title>" in text and text.count('"name":"DAPO_SEQ"') == 1 and os.path.getsize(out) < 10e6
