"""gtpo-report's page as data: one record per run, panel kinds added by one registration, the first screen
(reward by scale, entropy, health), series of single points as bars, the last validation of each run.
Expected values are written by hand (from the metric files written here, or read off the fixtures)."""

import dataclasses
import json
import re

import pytest
from support.paths import FIXTURES

from gtpo_verl.tools.report import RunRecord, load_runs, write_report
from gtpo_verl.tools.report import kinds
from gtpo_verl.tools.report.kinds import FIRST_SCREEN, PANEL_KINDS, Panel, PanelKind, panel_kind, scale_ceiling
from gtpo_verl.tools.report.page import drawable, sections
from gtpo_verl.trainer.health_checks import HEALTH_CHECKS

DEMO_RUNS = FIXTURES / "cpu_demo_runs"
SOURCE = "gtpo_cpu_demo/even_digit"


def write_run(folder, rows):
    folder.mkdir(parents=True)
    with open(folder / "metrics.jsonl", "w") as handle:
        for step, data in rows:
            handle.write(json.dumps({"step": step, "data": data}) + "\n")
    return str(folder)


def page_data(path) -> dict:
    block = re.search(r'<script type="application/json" id="report-data">(.*?)</script>', path.read_text(), re.S).group(1)
    return json.loads(block)


@pytest.fixture(scope="module")
def demo():
    return load_runs([str(DEMO_RUNS)])


def test_each_run_is_one_frozen_record_from_loading_to_the_page(demo, tmp_path):
    assert [type(r) for r in demo] == [RunRecord, RunRecord]
    token, traj = demo
    assert (token.name, token.group, token.seed) == ("DAPO_TOKEN", "DAPO_TOKEN", None)
    assert token.folder == str(DEMO_RUNS / "DAPO_TOKEN") and token.config_path.endswith("DAPO_TOKEN/.hydra/config.yaml")
    assert isinstance(traj.warnings, tuple) and isinstance(traj.log_warnings, tuple) and traj.mechanism is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        token.config_path = None
    runs = page_data(write_report([str(DEMO_RUNS)], tmp_path / "r.html"))["runs"]
    assert [(r["name"], r["config_path"], r["log_warnings"]) for r in runs] == [
        ("DAPO_TOKEN", token.config_path, []), ("GTPO_TRAJ", traj.config_path, list(traj.log_warnings))]


def test_a_registered_kind_appears_on_the_page(tmp_path, monkeypatch):
    monkeypatch.setattr(kinds, "PANEL_KINDS", dict(PANEL_KINDS))  # registrations made here end with the test
    run = write_run(tmp_path / "A", [(1, {"critic/score/mean": 0.25}), (2, {"critic/score/mean": 0.75})])

    @panel_kind("final score", place=1)
    def final_score(records):
        yield Panel("final score", "last training score", "bars", ("critic/score/mean",),
                    bars=tuple({"run": r.name, "metric": "critic/score/mean", "step": 2, "value": 0.75} for r in records))

    with pytest.raises(ValueError, match="registered already"):
        kinds.register(PanelKind("final score", 1, final_score))
    data = page_data(write_report({"A": run}, tmp_path / "r.html"))
    titles = [s["title"] for s in data["sections"]]
    assert titles.index("final score") == 1  # place 1: after the first screen (place 0), before the rest
    (panel,) = data["sections"][1]["panels"]
    assert panel == {"draw": "bars", "title": "last training score", "metrics": ["critic/score/mean"],
                     "bars": [{"run": "A", "metric": "critic/score/mean", "step": 2, "value": 0.75}]}
    with pytest.raises(ValueError, match="draw must be one of"):
        Panel("s", "t", "pie")


def test_reward_scales_round_up_to_one_two_five():
    assert [scale_ceiling(x) for x in (0.0, 0.71875, 1.0, 1.01, 5.0, 18.125, 20.5, 999.0)] == [
        1.0, 1.0, 1.0, 2.0, 5.0, 20.0, 50.0, 1000.0]


def test_the_first_screen_is_reward_by_scale_entropy_and_health(demo):
    first = sections(demo)[0]
    assert first["title"] == FIRST_SCREEN
    assert [(p["draw"], p["title"], p.get("runs")) for p in first["panels"]] == [
        ("line", "training reward: runs scored within ±1", ["DAPO_TOKEN"]),   # its scores: 0.40625 … 0.71875
        ("line", "training reward: runs scored within ±20", ["GTPO_TRAJ"]),   # Paper A's reward, about 14 to 19.4 on its 0–20 scale
        ("line", "policy entropy", None),
        ("table", "health at a glance", None)]
    assert "one chart per reward scale" in first["panels"][0]["note"]
    health = first["panels"][3]
    assert health["header"] == ["run", "gtpo/health/delta_filtered", "gtpo/health/bonus_clipped",
                                "gtpo/health/all_equal_groups", "entropy watch warned",
                                "warnings (flags and logs, listed below)"]
    # DAPO_TOKEN has no δ filter and no entropy-advantage transform; GTPO_TRAJ's one warning is its start-up line
    assert health["rows"] == [["DAPO_TOKEN", "not logged", "not logged", "off", "off", 0],
                              ["GTPO_TRAJ", "off", "not logged", "off", "off", 1]]
    # the shared list's training score is split the same way; one scale keeps the dashboard's title
    signal = next(s for s in sections(demo) if s["title"] == "training signal")
    assert [p["title"] for p in signal["panels"][:2]] == ["training score: runs scored within ±1",
                                                          "training score: runs scored within ±20"]
    assert [p["title"] for p in sections(demo[:1])[0]["panels"][:1]] == ["training reward"]


def test_health_at_a_glance_counts_the_steps_a_flag_was_on(tmp_path):
    rows = [(1, {"gtpo/health/delta_filtered": 0, "gtpo/entropy/collapse_warning": 0}),
            (2, {"gtpo/health/delta_filtered": 1, "gtpo/entropy/collapse_warning": 0}),
            (3, {"gtpo/health/delta_filtered": 1, "gtpo/entropy/fall_warning": 1}),
            (4, {"gtpo/health/delta_filtered": 0, "gtpo/entropy/collapse_warning": 1})]
    (record,) = load_runs({"R": write_run(tmp_path / "R", rows)})
    (table,) = [p for p in kinds.health_at_a_glance([record])]
    assert table.rows == (("R", "on at 2 step(s), from step 2", "not logged", "not logged",
                           "on at 2 step(s), from step 3", len(record.warnings)),)
    assert len(record.warnings) == 3  # the δ flag turning on at 2, the fall warning at 3, the collapse warning at 4


def test_health_messages_fill_their_share_by_name():
    check = {c.name: c for c in HEALTH_CHECKS}["delta_filtered"]
    assert check.describe("93%").startswith("the δ entropy filter drops 93% of responses (")
    assert "{" not in check.describe("most")


def test_a_series_of_single_points_is_drawn_as_bars_never_a_lone_dot(tmp_path):
    long = [(s, {"x/y": s / 10}) for s in range(1, 9)]
    records = load_runs({"LONG": write_run(tmp_path / "LONG", long),
                         "ONCE": write_run(tmp_path / "ONCE", [(8, {"x/y": 0.5, "x/z": 2.0})]),
                         "TWICE": write_run(tmp_path / "TWICE", [(4, {"x/z": 1.0}), (8, {"x/z": 3.0})])})
    # every series one point: bars of each value
    (bars,) = drawable(Panel("s", "once", "line", ("x/y",)), records[1:2])
    assert (bars.draw, bars.bars) == ("bars", ({"run": "ONCE", "metric": "x/y", "step": 8, "value": 0.5},))
    # a few points with a single one among them: bars of every point, metric by metric
    (bars,) = drawable(Panel("s", "few", "line", ("x/z",)), records)
    assert bars.draw == "bars" and bars.bars == (
        {"run": "ONCE", "metric": "x/z", "step": 8, "value": 2.0},
        {"run": "TWICE", "metric": "x/z", "step": 4, "value": 1.0},
        {"run": "TWICE", "metric": "x/z", "step": 8, "value": 3.0})
    # a long series beside a single point: the line without it, the single point as bars beside
    line, beside = drawable(Panel("s", "mixed", "line", ("x/y",)), records)
    assert (line.draw, line.metrics, line.skip) == ("line", ("x/y",), (("ONCE", "x/y"),))
    assert (beside.draw, beside.title) == ("bars", "mixed: series with one value")
    assert beside.bars == ({"run": "ONCE", "metric": "x/y", "step": 8, "value": 0.5},)
    # two points each: a line
    (line,) = drawable(Panel("s", "two", "line", ("x/z",)), records[2:])
    assert line.draw == "line" and line.skip == ()
    assert drawable(Panel("s", "none", "line", ("x/missing",)), records) == []


def test_the_demos_validate_once_so_their_validation_is_bars(demo):
    drawn = sections(demo)
    validation = next(s for s in drawn if s["title"] == f"validation ({SOURCE}, n = 4)")
    assert {p["draw"] for p in validation["panels"]} == {"bars"}
    mean = next(p for p in validation["panels"] if p["title"] == "mean@4 (avg@4)")
    # DAPO_TOKEN validated at step 12, GTPO_TRAJ at 10 (before its relaunch) and 12; values from the metric files
    assert [(b["run"], b["step"]) for b in mean["bars"]] == [("DAPO_TOKEN", 12), ("GTPO_TRAJ", 10), ("GTPO_TRAJ", 12)]
    assert [b["value"] for b in mean["bars"] if b["step"] == 12] == [0.84375, 0.859375]


def test_the_last_validation_of_each_run_is_a_table(demo):
    (table,) = kinds.validation_at_end(demo)
    assert table.draw == "table" and table.header == ("run", "validation set", "step", "mean@n", "unbiased pass@n")
    assert table.rows == (("DAPO_TOKEN", f"{SOURCE} (n = 4)", 12, 0.84375, 1.0),
                          ("GTPO_TRAJ", f"{SOURCE} (n = 4)", 12, 0.859375, 1.0))
