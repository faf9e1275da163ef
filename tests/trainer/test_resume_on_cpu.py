"""Resumes lose nothing: verl's metric file is appended to (with a marker) instead of truncated, the one
reader keeps the last write of a step logged more than once, and a checkpoint without gtpo_state.json is
refused before Ray starts.

The kill-and-resume and watchdog-and-resume drills on the real pipeline are in examples/cpu_demo/run_demo.py
(``make demo``, run by CI): a SIGKILL after a checkpoint and a watchdog exit 3, each relaunched.
"""

import json
import os

import pytest

from gtpo_verl.trainer.metrics_file import RESUMED_FROM, file_logger_path, read_metrics_file, resumed_file_logger
from support import resumed_metrics as hand
from support.bad_inputs import BASE
from support.hydra import compose_gtpo, with_overrides


def _line(step, **data):
    return json.dumps({"step": step, "data": data}) + "\n"


def test_reader_keeps_the_last_attempt_of_each_step(tmp_path):
    path = tmp_path / "run.jsonl"
    first = [_line(0, **{"val-core/acc": 0.1})] + [_line(s, **{"timing_s/step": 1.0, "critic/score/mean": s / 10,
                                                              "only_first": 1.0}) for s in range(1, 7)]
    first.insert(5, _line(4, **{"val-core/acc": 0.4}))  # verl logs validation as its own line of the same step
    second = [_line(4, **{RESUMED_FROM: 4}), _line(4, **{"val-core/acc": 0.44})] + [
        _line(s, **{"timing_s/step": 2.0, "critic/score/mean": s / 100}) for s in range(5, 9)]
    path.write_text("".join(first + second))
    log = read_metrics_file(str(path))
    assert sorted(log.steps) == list(range(0, 9)) and log.repeated_steps == [5, 6] and log.attempts == 2
    assert log.steps[4] == {"timing_s/step": 1.0, "critic/score/mean": 0.4, "only_first": 1.0, "val-core/acc": 0.44}
    assert log.steps[5] == {"timing_s/step": 2.0, "critic/score/mean": 0.05}  # the retrained step replaces the first
    assert log.steps[3]["critic/score/mean"] == 0.3 and [r["step"] for r in log.rows()] == list(range(9))


def test_a_step_logged_more_than_once_keeps_its_last_write(tmp_path):
    """The resume rule on a file written by hand (tests/support/resumed_metrics.py: the expected values by hand)."""
    path = hand.write_resumed_metrics(tmp_path / "metrics.jsonl")
    log = read_metrics_file(str(path))
    assert log.steps == hand.EXPECTED_STEPS
    assert log.repeated_steps == hand.REPEATED_STEPS and log.rewritten == hand.REWRITTEN and log.attempts == 2
    assert log.resumed_from == [(str(path), hand.MARKER_LINE, hand.RESUMED_FROM_STEP)] and log.skipped_lines == {}
    assert sorted(log.by_attempt[0]) == [1, 2, 3] and sorted(log.by_attempt[1]) == [2, 3, 4]


def test_reader_finds_a_restart_without_a_marker_and_names_a_bad_line(tmp_path):
    path = tmp_path / "run.jsonl"
    path.write_text("".join([_line(s, **{"timing_s/step": 1.0, "x": s}) for s in (1, 2, 3)]
                            + [_line(s, **{"timing_s/step": 1.0, "x": 10 * s}) for s in (3, 4)]))
    log = read_metrics_file(str(path))
    assert log.repeated_steps == [3] and log.steps[3]["x"] == 30 and log.steps[4]["x"] == 40
    path.write_text(_line(1, x=1) + "{not json\n" + _line(2, x=2) + '{"step": true, "data": {}}\n')
    log = read_metrics_file(str(path))  # a write cut off when a job was killed: skipped, its line named
    assert log.steps == {1: {"x": 1}, 2: {"x": 2}} and log.skipped_lines == {str(path): [2, 4]}


def test_a_resumed_run_appends_to_verls_file_logger(tmp_path, monkeypatch):
    from verl.utils.tracking import Tracking

    path = tmp_path / "metrics.jsonl"
    monkeypatch.setenv("VERL_FILE_LOGGER_PATH", str(path))
    first = Tracking(project_name="p", experiment_name="e", default_backend=["file"])
    for step in (1, 2, 3):
        first.log({"timing_s/step": 1.0}, step)
    first.logger["file"].finish()
    with resumed_file_logger(2):
        resumed = Tracking(project_name="p", experiment_name="e", default_backend=["file"])
    resumed.log({"timing_s/step": 2.0}, 3)
    resumed.logger["file"].finish()
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [line["step"] for line in lines] == [1, 2, 3, 2, 3] and lines[3]["data"] == {RESUMED_FROM: 2}
    assert read_metrics_file(str(path)).repeated_steps == [3]
    fresh = Tracking(project_name="p", experiment_name="e", default_backend=["file"])  # not resumed: verl's own
    fresh.logger["file"].finish()
    assert path.read_text() == ""


def test_the_logger_path_is_verls(tmp_path, monkeypatch):
    from verl.utils.tracking import FileLogger

    monkeypatch.delenv("VERL_FILE_LOGGER_PATH", raising=False)
    monkeypatch.setenv("VERL_FILE_LOGGER_ROOT", str(tmp_path))
    logger = FileLogger("proj", "exp")
    logger.finish()
    assert file_logger_path("proj", "exp") == logger.filepath
    monkeypatch.setenv("VERL_FILE_LOGGER_PATH", str(tmp_path / "x.jsonl"))
    assert file_logger_path("proj", "exp") == str(tmp_path / "x.jsonl")


def _checkpoint(root, step, with_state):
    folder = root / f"global_step_{step}"
    (folder / "actor").mkdir(parents=True)
    (root / "latest_checkpointed_iteration.txt").write_text(str(step))
    if with_state:
        (folder / "gtpo_state.json").write_text(json.dumps({"initial_entropy": 0.5, "entropy_watch": {}}))
    return folder


@pytest.mark.parametrize("mode", ["auto", "resume_path"])
def test_a_checkpoint_without_our_state_is_refused_before_ray_starts(tmp_path, mode):
    from gtpo_verl.trainer.validation import validate_gtpo_config

    base = compose_gtpo(*BASE, config_name="gtpo_trainer_cpu")
    folder = _checkpoint(tmp_path, 4, with_state=False)
    overrides = [f"trainer.default_local_dir={tmp_path}", f"trainer.resume_mode={mode}", "algorithm.adv_estimator=gtpo_traj"]
    if mode == "resume_path":
        overrides.append(f"trainer.resume_from_path={folder}")
    with pytest.raises(ValueError, match=r"no gtpo_state.json.*gtpo.remeasure_on_resume=true"):
        validate_gtpo_config(with_overrides(base, *overrides))
    validate_gtpo_config(with_overrides(base, *overrides, "gtpo.remeasure_on_resume=true"))
    validate_gtpo_config(with_overrides(base, *overrides[:-1] if mode == "resume_path" else overrides,
                                        "trainer.resume_mode=disable"))
    (folder / "gtpo_state.json").write_text("{}")
    validate_gtpo_config(with_overrides(base, *overrides))
