"""The collapse pilot's pre-registered keep rule and per-seed rows on hand-made runs (golden values by hand), the
setting's data and how the CLI applies it."""

import dataclasses

import pytest

from gtpo_verl.lab.collapse import (
    SETTINGS, CollapseSetting, confidently_wrong, keep_rule, pilot_markdown, pilot_row, pilot_summary,
)
from gtpo_verl.lab.methods import METHODS
from gtpo_verl.lab.study import _parser, study_size, study_tasks

C, T, S, F = "collapsed-flat", "trap", "solved", "flat"


@pytest.mark.parametrize("states, collapsed, needed, kept", [
    ([C, C, C, T, S], 3, 3, True),  # ⌈0.5 · 5⌉ = 3: three of five is enough
    ([C, C, C, C, C], 5, 3, True),
    ([C, C, F, F, F], 2, 3, False),  # two of five is not half
    ([T, T, T, T, T], 0, 3, False),
    ([C, C, T, T], 2, 2, True),  # an even count: half is enough
    ([], 0, 0, False),  # no seeds: never kept
])
def test_keep_rule(states, collapsed, needed, kept):
    rule = keep_rule(states)
    assert (rule["collapsed"], rule["needed"], rule["kept"], rule["seeds"]) == (collapsed, needed, kept, len(states))


def _run(seed: int, start: float, end: float, p0: float, end_pass1: float, end_pass16: float) -> dict:
    # 60 steps: entropy `start` for 10, then `end` for 50 (the endpoint's last 50 steps); validations at 0, 15, …, 60
    entropy = [start] * 10 + [end] * 50
    validation = [{"step": 0, "pass@1": p0, "pass@16": p0 + 0.2}]
    validation += [{"step": s, "pass@1": end_pass1, "pass@16": end_pass16} for s in (15, 30, 45, 60)]
    return {"seed": seed, "method": "GRPO", "task": "carry_trap", "initial_entropy": start + 0.001,
            "curves": {"entropy": entropy}, "validation": validation}


def test_pilot_rows_by_hand():
    # entropy 0.04 → 0.06 (1.5 ≥ 1.25 × H₀) and pass@1 0.6 → 0.2 (< P₀): Paper A's collapse
    row = pilot_row(_run(0, 0.04, 0.06, 0.6, 0.2, 0.5))
    assert row["end_state"] == C and row["steps"] == 60
    assert row["H0"] == 0.04 and row["end_entropy"] == pytest.approx(0.06) and row["end_entropy_over_H0"] == pytest.approx(1.5)
    assert row["entropy_peak_ratio"] == pytest.approx(1.5)  # best 10-step mean 0.06 over the first 10 steps' 0.04
    assert (row["P0"], row["end_pass@1"], row["last_pass@1"]) == (0.6, pytest.approx(0.2), 0.2)
    # entropy falls (0.03 / 0.04 = 0.75) while pass@1 falls: not Paper A's collapse; pass@16 − pass@1 = 0.02 < 0.05: a trap
    assert pilot_row(_run(1, 0.04, 0.03, 0.6, 0.1, 0.12))["end_state"] == T
    # entropy 1.2 × H₀ is below 1.25: pass@1 0.2, pass@16 0.5: none of solved, trap, partial
    assert pilot_row(_run(2, 0.05, 0.06, 0.6, 0.2, 0.5))["end_state"] == F


def test_pilot_summary_and_report():
    setting = SETTINGS["carry_trap"]
    runs = [_run(s, 0.04, 0.06, 0.6, 0.2, 0.5) for s in (4, 0, 2)] + [_run(s, 0.04, 0.03, 0.6, 0.1, 0.12) for s in (1, 3)]
    summary = pilot_summary(runs, setting)
    assert [row["seed"] for row in summary["rows"]] == [0, 1, 2, 3, 4]
    assert [row["end_state"] for row in summary["rows"]] == [C, T, C, T, C]
    assert summary["keep_rule"]["kept"] and summary["keep_rule"]["collapsed"] == 3
    report = pilot_markdown(summary)
    assert "**KEPT**: 3 of 5 seeds end `collapsed-flat`; the rule needs 3" in report
    assert "Not the pre-registered pilot" not in report
    short = pilot_markdown(pilot_summary(runs[3:], setting))  # seeds 1 and 3, both traps
    assert "**NOT KEPT**: 0 of 2 seeds" in short and "Not the pre-registered pilot: it ran 2 seeds, not 5." in short


def test_confidently_wrong_by_hand():
    assert confidently_wrong(["2", "2", "2", "12"], [0, 0, 0, 1])  # one wrong answer holds 3 of 4 = 0.75
    assert not confidently_wrong(["2", "2", "12", "12"], [0, 0, 1, 1])
    assert not confidently_wrong(["2", "3", "4", "5"], [0, 0, 0, 0])  # wrong, but not one answer
    assert confidently_wrong([None, None, None, "2"], [0, 0, 0, 0])  # no answer counts as one answer


def test_the_preregistered_setting():
    setting = SETTINGS["carry_trap"]
    assert (setting.task, setting.steps, setting.lr, setting.mini_batches, setting.ppo_epochs, setting.eval_every) == (
        "carry_trap", 1000, 3e-3, 4, 2, 50)
    grpo = setting.method(METHODS["GRPO"])
    assert (grpo.name, grpo.mini_batches, grpo.ppo_epochs) == ("GRPO", 4, 2)
    assert dataclasses.replace(grpo, mini_batches=1, ppo_epochs=1) == METHODS["GRPO"]  # nothing else changes
    for bad, match in (({"task": "nope"}, "not a lab task"), ({"lr": 0.0}, "lr=0.0"), ({"steps": 0}, "steps=0")):
        with pytest.raises(ValueError, match=match):
            CollapseSetting(**{**dataclasses.asdict(setting), **bad})


def test_the_cli_applies_the_setting():
    args = _parser().parse_args(["--setting", "carry_trap"])
    size = study_size(args)
    assert (size.steps, size.lr, size.eval_every, study_tasks(args)) == (1000, 3e-3, 50, ["carry_trap"])
    args = _parser().parse_args(["--setting", "carry_trap", "--steps", "7", "--eval-every", "3"])
    assert (study_size(args).steps, study_size(args).eval_every, study_size(args).lr) == (7, 3, 3e-3)
    plain = _parser().parse_args([])
    assert (study_size(plain).steps, study_size(plain).lr, study_tasks(plain)) == (400, 2e-4, ["digit_chain"])


@pytest.mark.parametrize("argv, message", [
    (["--pilot-collapse"], "--pilot-collapse needs --setting"),
    (["--setting", "carry_trap", "--tasks", "digit_chain"], "the setting trains on its own task 'carry_trap'"),
])
def test_cli_mistakes_are_one_line(argv, message, capsys):
    from gtpo_verl.lab.__main__ import main

    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and message in err and len(err.strip().splitlines()) == 1
