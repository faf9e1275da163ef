"""The one figure writer (gtpo_verl/tools/figures.py): the lab's, the CPU demo's and the real-LM study's
figures are drawn through it (their size is its panel grid at its resolution), no other module imports
matplotlib, and without matplotlib it says how to install it."""

import os
import re
import struct
import subprocess
import sys

import numpy as np
import pytest
from support.paths import REPO_ROOT

from gtpo_verl.tools.figures import DPI, PANEL_SIZE, figure, pyplot

from support.demo_modules import demo_module


def png_size(path) -> tuple[int, int]:
    """(width, height) in pixels from the PNG's IHDR chunk."""
    with open(path, "rb") as handle:
        header = handle.read(24)
    assert header[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", header[16:24])


def grid(columns: int, rows: int) -> tuple[int, int]:
    return round(PANEL_SIZE[0] * columns * DPI), round(PANEL_SIZE[1] * rows * DPI)


def test_the_labs_figure_is_a_grid_of_four_columns(tmp_path):
    from gtpo_verl.lab.report import figures

    runs = [{"task": "t", "method": m, "seed": s, "curves": {"reward": [0.1 * s, 0.2, 0.3], "entropy": [1.0, np.nan, 0.8]},
             "validation": [{"step": 0, "pass@1": 0.1, "pass@16": 0.5}, {"step": 3, "pass@1": 0.2 + s / 10, "pass@16": 0.6}]}
            for m in ("DAPO", "GRPO") for s in (0, 1)]
    written = figures({"methods": ["DAPO", "GRPO"], "runs": runs}, str(tmp_path))
    # panels: reward and entropy (the curves with a finite value), pass@1 and pass@16: one row of 4
    assert written == [str(tmp_path / "t.png")] and png_size(written[0]) == grid(4, 1)


def test_the_demos_curves_and_the_studys_differences(tmp_path):
    run_demo, lm_study = demo_module("run_demo"), demo_module("lm_study")
    history = {"DAPO": [{"step": s, "critic/score/mean": 0.1 * s, "actor/entropy": 1.0, "response_length/mean": 9.0}
                        for s in (1, 2)]}
    run_demo.draw({}, history, str(tmp_path / "curves.png"))
    assert png_size(tmp_path / "curves.png") == grid(len(run_demo.CURVES), 1)
    row = {"method": "DAPO_TOKEN", "baseline": "DAPO", "endpoint": "val_acc", "seeds": 3, "per_seed_difference": [0.1, -0.2, 0.3]}
    result = {"families": {name: [row] for name in lm_study.FAMILIES}}
    assert lm_study.figure(result, str(tmp_path / "differences.png")) == str(tmp_path / "differences.png")
    assert png_size(tmp_path / "differences.png") == grid(len(lm_study.FAMILIES), 1)


def test_a_figure_is_closed_even_when_drawing_fails(tmp_path):
    plt = pyplot()
    before = len(plt.get_fignums())
    with pytest.raises(ZeroDivisionError):
        with figure(str(tmp_path / "x.png"), 2):
            1 / 0
    assert len(plt.get_fignums()) == before and not (tmp_path / "x.png").exists()


def test_no_other_module_imports_matplotlib():
    pattern = re.compile(r"^\s*(import matplotlib|from matplotlib)", re.MULTILINE)
    found = []
    for top in ("gtpo_verl", "examples", "benchmarks", "recipes"):
        for folder, _, files in os.walk(REPO_ROOT / top):
            found += [os.path.relpath(os.path.join(folder, f), REPO_ROOT) for f in files
                      if f.endswith(".py") and pattern.search(open(os.path.join(folder, f), encoding="utf-8").read())]
    assert found == [os.path.join("gtpo_verl", "tools", "figures.py")]


def test_without_matplotlib_pyplot_is_none_and_a_figure_says_how_to_install_it(tmp_path):
    blocked = tmp_path / "blocked" / "matplotlib"
    blocked.mkdir(parents=True)
    (blocked / "__init__.py").write_text('raise ImportError("matplotlib hidden by the test")\n')
    code = ("from gtpo_verl.tools.figures import figure, pyplot\nassert pyplot() is None\n"
            "try:\n    figure('x.png', 1).__enter__()\nexcept ImportError as e:\n    print(e)\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "blocked"), str(REPO_ROOT)])}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "figures need matplotlib: pip install -c requirements/test.txt matplotlib"
