"""gtpo-report's reading of verl's file-logger JSONL, held to an independent plain-``json`` reading:
real CPU runs (tests/fixtures/cpu_run_metrics/), requeued attempts (last write wins, and said),
cut-off lines, nulls and non-numbers, how inputs become runs, and the warnings recovered from a
run's flags and logs. Metric files written here are built from a real run's lines or by hand."""

import glob
import json
import math
import os

import numpy as np
import pytest
from support import resumed_metrics as hand
from support.paths import FIXTURES

from gtpo_verl.tools.report import load_runs
from gtpo_verl.tools.report.context import log_warnings, metric_warnings
from gtpo_verl.tools.report.runs import ReportInputError, expand_inputs, read_run, split_seed
from gtpo_verl.trainer.health_checks import HEALTH_CHECKS

RUN_METRICS = FIXTURES / "cpu_run_metrics"
LONG_RUN = RUN_METRICS / "GTPO_TRAJ_two_minibatches_seed1.jsonl"


def reference(paths):
    """{step: {metric: value}} by plain json, files in the order given, later writes replacing earlier."""
    merged = {}
    for path in paths:
        with open(path) as handle:
            for line in handle:
                row = json.loads(line)
                merged.setdefault(row["step"], {}).update(row["data"])
    return merged


def assert_run_equals(run, expected):
    assert run.steps.tolist() == sorted(expected)
    names = {m for data in expected.values() for m in data}
    assert set(run.values) == names
    for index, step in enumerate(run.steps.tolist()):
        for metric in names:
            value = run.values[metric][index]
            if metric in expected[step]:
                assert value == float(expected[step][metric]), (step, metric)  # exact, not approximate
            else:
                assert math.isnan(value), (step, metric)


@pytest.mark.parametrize("path", sorted(glob.glob(str(RUN_METRICS / "*.jsonl"))), ids=os.path.basename)
def test_every_value_of_a_real_cpu_run_is_read_exactly(path):
    run = read_run([path])
    assert_run_equals(run, reference([path]))
    assert run.rewritten == {} and run.notes == []
    assert run.name == os.path.basename(path)[: -len(".jsonl")]


def write_lines(path, rows):
    with open(path, "w") as handle:
        for step, data in rows:
            handle.write(json.dumps({"step": step, "data": data}) + "\n")


def real_rows(path=LONG_RUN):
    with open(path) as handle:
        return [(row["step"], row["data"]) for row in map(json.loads, handle)]


def test_a_requeued_run_keeps_the_last_write_of_each_metric_and_says_which_steps(tmp_path):
    rows = real_rows()  # steps 0..20, validation at 0, 10, 20
    first = [(s, d) for s, d in rows if s <= 12]  # the first attempt ran to step 12, its last checkpoint was 8
    second = [(s, {k: v + 1000.0 if isinstance(v, float) else v for k, v in d.items()}) for s, d in rows if s >= 9]
    second.insert(0, (8, {k: v + 2000.0 for k, v in rows[0][1].items()}))  # val_before_train at the resume step
    # names that sort the other way round: the order comes from the steps, not the names
    write_lines(tmp_path / "b_attempt1.jsonl", first)
    write_lines(tmp_path / "a_attempt2.jsonl", second)
    run = load_runs({"GTPO_TRAJ_requeued": str(tmp_path)})[0].metrics
    assert [os.path.basename(f.path) for f in run.files] == ["b_attempt1.jsonl", "a_attempt2.jsonl"]
    assert_run_equals(run, reference([tmp_path / "b_attempt1.jsonl", tmp_path / "a_attempt2.jsonl"]))
    score = run.values["critic/score/mean"]
    by_step = dict(rows)
    assert score[run.steps.tolist().index(12)] == by_step[12]["critic/score/mean"] + 1000.0  # rewritten: attempt 2
    assert score[run.steps.tolist().index(8)] == by_step[8]["critic/score/mean"]  # step 8's training: attempt 1 only
    validation = "val-core/gtpo_study/max_digit/acc/mean@16"
    assert run.values[validation][run.steps.tolist().index(8)] == rows[0][1][validation] + 2000.0
    # every value written twice is counted at its step (10 with its validation); step 8's validation
    # was new (attempt 1 validated at 0 and 10 only), so step 8 is not a rewrite
    assert run.rewritten == {s: len(by_step[s]) for s in (9, 10, 11, 12)}
    assert run.values[validation][run.steps.tolist().index(10)] == by_step[10][validation] + 1000.0
    note = next(n for n in run.notes if "written more than once" in n)
    assert "the last write is shown" in note and "step 9, 10, 11, 12" in note


def test_the_report_reads_through_the_one_reader_and_its_resume_rule(tmp_path):
    """The hand-written resumed file (tests/support/resumed_metrics.py): the report's values are the one
    reader's, by its rule: a metric only the superseded attempt logged at a retrained step is gone."""
    path = hand.write_resumed_metrics(tmp_path / "metrics.jsonl")
    run = read_run([str(path)])
    assert run.steps.tolist() == [1, 2, 3, 4] and "gtpo/health/x" not in run.values
    assert_run_equals(run, hand.EXPECTED_STEPS)
    assert run.values["critic/score/mean"].tolist() == [0.10, 0.25, 0.35, 0.40]
    assert run.rewritten == hand.REWRITTEN
    assert any(f"line {hand.MARKER_LINE}: the run resumed from its checkpoint of step {hand.RESUMED_FROM_STEP}" in n
               for n in run.notes)
    assert any("6 value(s) at 2 step(s) were written more than once" in n and "step 2, 3" in n for n in run.notes)


def test_attempts_that_start_at_the_same_step_are_ordered_by_modification_time(tmp_path):
    rows = real_rows()[:4]
    write_lines(tmp_path / "z_old.jsonl", rows)
    write_lines(tmp_path / "a_new.jsonl", [(s, {k: 7.0 for k in d}) for s, d in rows])
    os.utime(tmp_path / "z_old.jsonl", (1_000_000, 1_000_000))
    run = read_run([str(tmp_path / "a_new.jsonl"), str(tmp_path / "z_old.jsonl")])
    assert [os.path.basename(f.path) for f in run.files] == ["z_old.jsonl", "a_new.jsonl"]
    assert set(np.unique(run.values["critic/score/mean"][~np.isnan(run.values["critic/score/mean"])])) == {7.0}


def test_a_line_cut_off_by_a_killed_job_is_skipped_and_named(tmp_path):
    rows = real_rows()[:6]
    path = tmp_path / "cut.jsonl"
    write_lines(path, rows)
    with open(path, "a") as handle:
        handle.write('{"step": 6, "data": {"critic/score/mean": 0.12')  # no newline, no closing braces
    run = read_run([str(path)])
    assert_run_equals(run, dict(rows))
    assert any("1 line(s) skipped" in n and "line 7" in n for n in run.notes)


def test_nulls_are_gaps_and_non_numbers_are_not_drawn_and_both_are_noted(tmp_path):
    path = tmp_path / "odd.jsonl"
    write_lines(path, [
        (1, {"a": 1.5, "b": None, "c": "0.25", "d": True}),
        (2, {"a": None, "b": 2.0, "c": 0.5, "d": False}),
        (3, {"a": 3, "b": [1, 2], "e": {"x": 1}}),
    ])
    run = read_run([str(path)])
    assert run.values["a"][0] == 1.5 and math.isnan(run.values["a"][1]) and run.values["a"][2] == 3.0
    assert run.values["d"][:2].tolist() == [1.0, 0.0] and math.isnan(run.values["d"][2])  # booleans as 0 / 1
    assert math.isnan(run.values["c"][0]) and run.values["c"][1] == 0.5  # "0.25" is a string, not a number
    assert "e" not in run.values  # never a number
    assert run.logged_null["a"].tolist() == [False, True, False] and run.logged_null["b"].tolist() == [True, False, False]
    steps, values = run.series("a")
    assert steps.tolist() == [1, 2, 3] and math.isnan(values[1])
    notes = "\n".join(run.notes)
    for expected in ("a: null (NaN or ±inf at training time) at step 2", "b: null (NaN or ±inf at training time) at step 1",
                     "b: not a number at step 3", "c: not a number at step 1", "e: not a number at step 3"):
        assert expected in notes


def test_a_file_without_metric_rows_is_an_error_naming_it(tmp_path):
    path = tmp_path / "empty.jsonl"
    path.write_text("not json\n")
    with pytest.raises(ReportInputError, match="no metric rows in .*empty.jsonl"):
        read_run([str(path)])


def test_inputs_become_runs_by_the_documented_rules(tmp_path):
    project = tmp_path / "DAPO"  # verl's $VERL_FILE_LOGGER_ROOT/<project>/<experiment>.jsonl, plus a run folder
    project.mkdir()
    for name in ("A_seed0", "A_seed1", "B"):
        write_lines(project / f"{name}.jsonl", real_rows()[:3])
    (project / "C").mkdir()
    write_lines(project / "C" / "metrics_train.jsonl", real_rows()[:3])
    write_lines(project / "C" / "metrics_resume.jsonl", real_rows()[3:5])
    runs = expand_inputs([str(project)])
    assert [(n, [os.path.basename(p) for p in ps]) for n, ps, _ in runs] == [
        (None, ["A_seed0.jsonl"]), (None, ["A_seed1.jsonl"]), (None, ["B.jsonl"]),
        (None, ["metrics_resume.jsonl", "metrics_train.jsonl"])]
    names = [record.name for record in load_runs([str(project)])]
    assert names == ["A_seed0", "A_seed1", "B", "C"]
    # NAME=FOLDER and a Hydra run folder are one run, their files its attempts
    (record,) = load_runs([f"mine={project / 'C'}"])
    run = record.metrics
    assert run.name == "mine" and len(run.files) == 2 and run.steps.tolist() == [0, 1, 2, 3, 4]
    (project / "C" / ".hydra").mkdir()
    (project / "C" / ".hydra" / "config.yaml").write_text("algorithm:\n  adv_estimator: gtpo_traj\n")
    (record,) = load_runs([str(project / "C")])
    assert record.name == "C" and len(record.metrics.files) == 2 and record.config["algorithm.adv_estimator"] == "gtpo_traj"
    with pytest.raises(ReportInputError, match="no such file or folder"):
        expand_inputs([str(tmp_path / "missing")])
    (tmp_path / "empty").mkdir()
    with pytest.raises(ReportInputError, match="no metrics files"):
        expand_inputs([str(tmp_path / "empty")])
    with pytest.raises(ReportInputError, match="two runs are named 'B'"):
        load_runs([str(project / "B.jsonl"), f"B={project / 'A_seed0.jsonl'}"])


def test_seeds_are_read_from_run_names():
    assert split_seed("DAPO_SEQ_seed0") == ("DAPO_SEQ", 0)
    assert split_seed("GTPO_TRAJ_two_minibatches_seed1") == ("GTPO_TRAJ_two_minibatches", 1)
    assert split_seed("Qwen2.5-32B-DAPO_TOKEN-seed12") == ("Qwen2.5-32B-DAPO_TOKEN", 12)
    assert split_seed("DAPO_TOKEN") == ("DAPO_TOKEN", None)
    assert split_seed("seedless") == ("seedless", None)


def test_the_trainers_warnings_come_back_from_its_flags(tmp_path):
    check = {c.name: c for c in HEALTH_CHECKS}["delta_filtered"]
    rows = [(1, {"gtpo/entropy/collapse_warning": 0, "gtpo/entropy/rise_ratio": 1.1}),
            (2, {"gtpo/entropy/collapse_warning": 1, "gtpo/entropy/rise_ratio": 1.8, check.metric: 0.95,
                 "gtpo/health/delta_filtered": 1}),
            (3, {"gtpo/entropy/collapse_warning": 0, "gtpo/entropy/rise_ratio": 1.0, check.metric: 0.97,
                 "gtpo/health/delta_filtered": 1}),  # still on: not a second warning
            (4, {check.metric: 0.2, "gtpo/health/delta_filtered": 0}),
            (5, {check.metric: 0.93, "gtpo/health/delta_filtered": 1})]  # on again: warned again
    write_lines(tmp_path / "run.jsonl", rows)
    warnings = metric_warnings(read_run([str(tmp_path / "run.jsonl")]))
    assert len(warnings) == 3
    assert warnings[0].startswith("step 2: entropy watch (gtpo/entropy/collapse_warning)") and "1.8×" in warnings[0]
    assert warnings[1].startswith("step 2: gtpo/health/delta_filtered on (gtpo/delta/filtered_frac = 0.95")
    assert warnings[2].startswith("step 5: gtpo/health/delta_filtered on")
    # the check's own message, with the key that fixes it
    assert "algorithm.gtpo_traj.ini_entropy_gate=true" in warnings[1] and "drops 95% of responses" in warnings[1]
    # a run whose watch kept its floor: the rise against the floor and the steps in a row
    write_lines(tmp_path / "floor.jsonl", [(12, {"gtpo/entropy/collapse_warning": 1, "gtpo/entropy/batch_mean": 1.5,
                                                 "gtpo/entropy/floor": 1.0, "gtpo/entropy/rise_steps": 10})])
    (warning,) = metric_warnings(read_run([str(tmp_path / "floor.jsonl")]))
    assert "entropy 1.5, 1.5× its lowest baseline, above gtpo.entropy_warning.ratio for 10 steps in a row" in warning


def test_gtpo_warning_lines_are_found_in_the_run_logs(tmp_path):
    (tmp_path / "train.log").write_text("\n".join([
        "\x1b[36m(TaskRunner pid=41)\x1b[0m gtpo health: the δ entropy filter drops 93% of responses ... (running mean 0.930, threshold 0.90)",
        "(TaskRunner pid=41) gtpo health: the δ entropy filter drops 93% of responses ... (running mean 0.930, threshold 0.90)",
        "[2026-01-01 00:00:00,000][gtpo_verl.trainer.validation][WARNING] - grpo_s without its loss departs from Paper B",
        "/x/validation.py:27: GTPOConfigWarning: grpo_s without its loss departs from Paper B",
        "(WorkerDict pid=7) INFO vllm: nothing to see",
        "(TaskRunner pid=41) gtpo: mean old-policy entropy 1.2000 is 1.80x its running baseline (threshold 1.50x)",
    ]) + "\n")
    (tmp_path / "main.log").write_text(
        "[2026-01-01 00:05:00,000][gtpo_verl.trainer.validation][WARNING] - grpo_s without its loss departs from Paper B\n")
    found = log_warnings(str(tmp_path), [])
    # each message once, whatever Ray, Hydra or `warnings` put before it; the vLLM line not at all
    assert found == [
        "main.log: grpo_s without its loss departs from Paper B",
        "train.log: gtpo health: the δ entropy filter drops 93% of responses ... (running mean 0.930, threshold 0.90)",
        "train.log: gtpo: mean old-policy entropy 1.2000 is 1.80x its running baseline (threshold 1.50x)",
    ]


def test_nan_and_infinity_spelled_out_are_nulls_too(tmp_path):
    path = tmp_path / "spelled.jsonl"
    path.write_text('{"step": 1, "data": {"a": NaN, "b": 1.0}}\n{"step": 2, "data": {"a": Infinity, "b": -Infinity}}\n'
                    '{"step": 3, "data": {"a": 2.0, "b": [1, 2]}}\n{"step": 4, "data": {"a": [3, 4], "b": [5, 6]}}\n')
    run = read_run([str(path)])
    assert run.logged_null["a"].tolist() == [True, True, False, False]
    assert run.logged_null["b"].tolist() == [False, True, False, False]  # a list is a non-number, not a null
    assert np.isnan(run.values["a"][[0, 1, 3]]).all() and run.values["a"][2] == 2.0
    assert "b: not a number at step 3, 4" in "\n".join(run.notes) and "a: not a number at step 4" in "\n".join(run.notes)


def test_the_studys_method_seed_folders_are_named_as_seeds(tmp_path):
    for seed in (0, 1):  # one folder per seed: <out>/<method>/seed<k>/metrics.jsonl
        (tmp_path / "DAPO_TOKEN" / f"seed{seed}").mkdir(parents=True)
        write_lines(tmp_path / "DAPO_TOKEN" / f"seed{seed}" / "metrics.jsonl", real_rows()[:3])
    runs = load_runs([str(tmp_path / "DAPO_TOKEN")])
    assert [(r.name, r.group, r.seed) for r in runs] == [("DAPO_TOKEN_seed0", "DAPO_TOKEN", 0), ("DAPO_TOKEN_seed1", "DAPO_TOKEN", 1)]
    (run,) = load_runs([str(tmp_path / "DAPO_TOKEN" / "seed1" / "metrics.jsonl")])
    assert run.name == "DAPO_TOKEN_seed1"
