"""The entropy watch's rising flag: persistence against the floor, its config, its start-up warning,
old checkpoint state, and the lab replay that chose its defaults (docs/lab.md).

Golden values are worked by hand in comments; the replay numbers are recomputed here by plain loops
that do not import the watch (``_reference_first_flag``, ``_reference_noise_at``).
"""

import json
import math
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from gtpo_verl.plugin.config import ConfigError
from gtpo_verl.trainer.diagnostics import EntropyWatch
from gtpo_verl.trainer.settings import GTPOSettings

ROOT = Path(__file__).resolve().parents[2]
FLAG = "gtpo/entropy/collapse_warning"


def _flags(watch, series):
    return [watch.update(h)[FLAG] for h in series]


def test_a_rise_must_persist():
    # warmup 1, momentum 0.5: after step 1 baseline = floor = 1. Steps 3-6 are 2 > 1.5 × 1 (streak 1, 2, 3, 4):
    # the flag from the third in a row. Baselines 1.5, 1.75, ... never lower the floor below 1.
    watch = EntropyWatch(ratio=1.5, momentum=0.5, warmup_steps=1, persist_steps=3)
    assert _flags(watch, [1.0, 1.0, 2.0, 2.0, 2.0, 2.0]) == [0.0, 0.0, 0.0, 0.0, 1.0, 1.0]
    assert watch.warnings == 2 and watch.floor == 1.0
    # a ratio to the baseline would drop it: at step 4, 2 / 1.5 = 1.33 < 1.5


def test_a_sustained_rise_is_flagged_after_the_stated_delay():
    # 1 for 5 steps, then 1 + 0.1·(t - 5): above 1.25 × floor (floor 1) from t = 8 (1.3); 3 in a row at t = 10
    series = [1.0] * 5 + [1.0 + 0.1 * (t - 5) for t in range(6, 16)]
    watch = EntropyWatch(ratio=1.25, momentum=0.5, warmup_steps=1, persist_steps=3)
    flags = _flags(watch, series)
    assert flags.index(1.0) + 1 == 10  # delay from the rise's start (step 5): 3 steps to cross + 3 - 1
    assert all(flags[9:])


def test_batch_noise_is_not_flagged():
    # every other batch doubles: no two in a row above 1.5 × floor (floor stays 1)
    watch = EntropyWatch(ratio=1.5, momentum=0.5, warmup_steps=1, persist_steps=2)
    assert _flags(watch, [1.0, 1.0] + [2.0, 1.0] * 10) == [0.0] * 22


def test_persist_steps_one_flags_a_single_batch():
    watch = EntropyWatch(ratio=1.5, momentum=0.5, warmup_steps=1, persist_steps=1)
    assert _flags(watch, [1.0, 1.0, 1.6, 1.0]) == [0.0, 0.0, 1.0, 0.0]


def test_old_state_without_floor_or_streak_loads():
    old = {"ratio": 1.5, "fall_ratio": None, "momentum": 0.9, "warmup_steps": 3, "baseline": 0.8, "steps": 10, "warnings": 2}
    watch = EntropyWatch(ratio=1.25, persist_steps=2)
    watch.load_state_dict(old)
    assert (watch.floor, watch.streak, watch.baseline) == (0.8, 0, 0.8)
    first = watch.update(1.1)  # 1.1 > 1.25 × 0.8 = 1.0: one step in a row
    assert first["gtpo/entropy/rise_steps"] == 1.0 and first[FLAG] == 0.0
    assert watch.update(1.1)[FLAG] == 1.0 and watch.warnings == 3
    young = EntropyWatch(warmup_steps=3)
    young.load_state_dict({**old, "steps": 1})
    assert young.floor is None  # not warm yet: the floor starts after warm-up


def test_new_state_round_trips():
    watch = EntropyWatch(ratio=1.25, momentum=0.5, warmup_steps=1, persist_steps=3)
    _flags(watch, [1.0, 0.5, 1.0, 1.0])
    copy = EntropyWatch(ratio=1.25, momentum=0.5, warmup_steps=1, persist_steps=3)
    copy.load_state_dict(json.loads(json.dumps(watch.state_dict())))
    assert copy.update(1.0) == watch.update(1.0)


@pytest.mark.parametrize("value", [0, -1, 2.5, "'3'", True, None])
def test_a_bad_persist_steps_is_one_error_naming_the_key(value):
    with pytest.raises(ConfigError, match=r"gtpo\.entropy_warning\.persist_steps"):
        GTPOSettings.from_config(OmegaConf.create({"gtpo": {"entropy_warning": {"persist_steps": value}}}))


def _startup_warnings(prompts, **watch):
    from gtpo_verl.trainer.validation import _check_entropy_watch_batch

    given = []
    config = OmegaConf.create({"data": {"train_batch_size": prompts}, "gtpo": {"entropy_warning": watch}})
    _check_entropy_watch_batch(config, given.append)
    return given


def test_startup_warns_when_the_batch_holds_fewer_prompts_than_the_rule_needs():
    assert _startup_warnings(1) == []  # the defaults (1.25 × 10) were quiet from 1 prompt
    assert _startup_warnings(2, ratio=1.5, persist_steps=5) == []  # quiet from 2
    (line,) = _startup_warnings(1, ratio=1.5, persist_steps=5)
    assert "`data.train_batch_size=1`" in line and "gtpo.entropy_warning.persist_steps=5" in line
    assert "data.train_batch_size>=2" in line and "gtpo.entropy_warning.persist_steps=10" in line
    # 1.5 × 3 needed 64; a rule between replayed ones reads the looser neighbour (1.6 → 1.5, 4 → 3)
    assert len(_startup_warnings(32, ratio=1.6, persist_steps=4)) == 1 and _startup_warnings(64, ratio=1.6, persist_steps=4) == []
    (never,) = _startup_warnings(64, ratio=1.05, persist_steps=10)  # looser than any replayed rule
    assert "data.train_batch_size>=" not in never and "gtpo.entropy_warning.ratio=1.25" in never
    assert _startup_warnings(1, ratio=1.5, persist_steps=1) != []


def test_no_startup_warning_without_diagnostics():
    from gtpo_verl.trainer.validation import _check_entropy_watch_batch

    given = []
    config = OmegaConf.create({"data": {"train_batch_size": 1},
                               "gtpo": {"diagnostics": False, "entropy_warning": {"persist_steps": 1}}})
    _check_entropy_watch_batch(config, given.append)
    assert given == []


# ------------------------------------------------------------------ the lab replay (docs/lab.md)
def _reference_first_flag(curve, ratio, persist, floor_reference, after=0, momentum=0.9, warmup=3):
    """The rising rule written out: reference = floor (lowest baseline once warm) or the EMA baseline itself."""
    baseline, floor, seen, streak = None, None, 0, 0
    for step, value in enumerate(curve, start=1):
        if not (value == value and value > 0):
            continue
        reference = floor if floor_reference else baseline
        if seen >= warmup and reference is not None and value > ratio * reference:
            streak += 1
        else:
            streak = 0
        if streak >= persist and step > after:
            return step
        baseline = value if baseline is None else momentum * baseline + (1 - momentum) * value
        seen += 1
        if seen >= warmup:
            floor = baseline if floor is None else min(floor, baseline)
    return None


def _reference_noise_at(curve, prompts, half=5):
    logs = [math.log(v) if v == v and v > 0 else None for v in curve]
    out = []
    for t, x in enumerate(logs):
        window = [v for v in logs[max(0, t - half):t + half + 1] if v is not None]
        out.append(math.nan if x is None else math.exp(sum(window) / len(window) + (x - sum(window) / len(window)) * math.sqrt(8 / prompts)))
    return out


@pytest.fixture(scope="module")
def quiet_curves():
    from gtpo_verl.lab.health import degradation_step

    runs = json.loads((ROOT / "docs" / "lab" / "results.json").read_text())["runs"]
    curves = [run["curves"]["entropy"] for run in runs if degradation_step(run) is None]
    assert len(curves) == 118
    return curves


def test_the_replay_of_the_committed_runs(quiet_curves):
    from gtpo_verl.lab.health import prompt_noise_replay, quiet_min_prompts

    def alarms(curves, ratio, persist, floor_reference=True):
        return sum(_reference_first_flag(c, ratio, persist, floor_reference) is not None for c in curves)

    assert alarms(quiet_curves, 1.5, 1, floor_reference=False) == 62  # a single batch over the EMA baseline
    assert alarms(quiet_curves, 1.25, 10) == 0
    by_prompts = {p: alarms([_reference_noise_at(c, p) for c in quiet_curves], 1.5, 5) for p in (1, 2, 64)}
    assert by_prompts == {1: 1, 2: 0, 64: 0}
    for p in (1, 32):  # the defaults are quiet at every replayed batch size
        assert alarms([_reference_noise_at(c, p) for c in quiet_curves], 1.25, 10) == 0
    assert alarms([_reference_noise_at(c, 32) for c in quiet_curves], 1.5, 1, floor_reference=False) == 5
    # the lab module's replay agrees, and so does the trainer's table
    from gtpo_verl.lab.health import LAB_PROMPTS
    from gtpo_verl.trainer.settings import RISING_FLAG_QUIET_PROMPTS

    runs = [{"curves": {"entropy": c}, "validation": []} for c in quiet_curves]
    replay = prompt_noise_replay(runs, 1.5, 5)
    assert LAB_PROMPTS == 8 and {p: replay[p] for p in (1, 2, 64)} == by_prompts
    assert quiet_min_prompts(replay) == RISING_FLAG_QUIET_PROMPTS[(1.5, 5)] == 2


def test_the_synthetic_collapse_delays(quiet_curves):
    from gtpo_verl.lab.health import ramp_delays

    def ramp(curve, slope, start=200):
        return [v + slope * (step - start) if step > start and v == v else v for step, v in enumerate(curve, start=1)]

    delays = sorted((lambda f: math.inf if f is None else f - 200)(_reference_first_flag(ramp(c, 0.01), 1.25, 10, True, after=200))
                    for c in quiet_curves)
    assert (delays[58] + delays[59]) / 2 == 43 and max(delays) == 123  # docs/lab.md: median 43, at most 123
    runs = [{"curves": {"entropy": c}, "validation": []} for c in quiet_curves]
    assert sorted(ramp_delays(runs, 1.25, 10, 0.01)) == delays
    flagged_by_the_single_batch_rule = [sum(_reference_first_flag(ramp(c, s), 1.5, 1, False, after=200) is not None
                                            for c in quiet_curves) for s in (0.005, 0.01, 0.02)]
    assert flagged_by_the_single_batch_rule == [29, 28, 43]  # docs/lab.md: 28–43 of 118
