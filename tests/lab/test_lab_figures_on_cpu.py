"""Figures always, or one line saying why not; a ``--quick`` run is marked as a smoke run everywhere it
reports; a step without a value is a gap in a figure, never a 0."""

import json
import math
import os
import subprocess
import sys

import numpy as np
from support.paths import REPO_ROOT

from gtpo_verl.lab.report import _moving_mean

ROOT = str(REPO_ROOT)


def _quick(out, pythonpath_first=None):
    cmd = [sys.executable, "-m", "gtpo_verl.lab", "--quick", "--seeds", "1", "--steps", "2", "--eval-every", "1",
           "--methods", "DAPO,GRPO", "--workers", "1", "--out", str(out)]
    path = [p for p in (pythonpath_first, ROOT, os.environ.get("PYTHONPATH")) if p]
    proc = subprocess.run(cmd, cwd=ROOT, env={**os.environ, "PYTHONPATH": os.pathsep.join(path)}, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def test_quick_writes_its_figure_and_says_it_is_a_smoke_run(tmp_path):
    proc = _quick(tmp_path / "lab")
    assert (tmp_path / "lab" / "digit_chain.png").stat().st_size > 10_000
    assert "[smoke run (--quick): not a study]" in proc.stdout
    results = json.loads((tmp_path / "lab" / "results.json").read_text())
    assert results["quick"] is True and "not a study" in results["smoke_run"]
    assert (tmp_path / "lab" / "table.md").read_text().startswith("**Smoke run (`--quick`: 1 seeds × 2 steps)")


def test_without_matplotlib_one_line_says_the_figures_were_skipped_and_how_to_get_them(tmp_path):
    blocked = tmp_path / "blocked" / "matplotlib"
    blocked.mkdir(parents=True)
    (blocked / "__init__.py").write_text('raise ImportError("matplotlib hidden by the test")\n')
    proc = _quick(tmp_path / "lab", pythonpath_first=str(tmp_path / "blocked"))
    skipped = [line for line in proc.stderr.splitlines() if line.startswith("figures skipped")]
    assert len(skipped) == 1 and "pip install -c requirements/test.txt matplotlib" in skipped[0] and "--from-runs" in skipped[0]
    assert not (tmp_path / "lab" / "digit_chain.png").exists()


def test_a_step_without_a_value_stays_a_gap():
    smoothed = _moving_mean(np.array([np.nan, np.nan, np.nan, 1.0, 3.0]), 2)
    assert math.isnan(smoothed[0]) and math.isnan(smoothed[1])  # no finite value in the window: a gap, not 0
    assert smoothed[2:].tolist() == [1.0, 2.0]  # a window's mean over its finite values
