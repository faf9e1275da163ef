"""The study's exploration task (benchmarks/exploration_task.py) and the study's aggregation of a
real CPU run's metrics file (tests/fixtures/cpu_run_metrics/)."""

import collections
import os
import random
import re

import pytest

from benchmarks import exploration_task as task

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "cpu_run_metrics")


def test_ground_truth_is_the_largest_digit_of_the_prompt():
    for text, answer in task.problems(200, 3):
        digits = re.search(r"digits (\d) (\d) (\d)\?", text).groups()
        assert answer == max(digits)
        assert all(tag in text for tag in task.TAGS)
    assert task.problems(5, 1) == task.problems(5, 1)


@pytest.mark.parametrize(
    "response, truth, score, pred",
    [
        ("<reasoning>abc</reasoning><answer>7</answer>", "7", 1.0, "7"),
        ("<reasoning>abc</reasoning><answer>9</answer>", "7", 0.0, "9"),
        ("<reasoning></reasoning> <answer> 7 </answer>", "7", 1.0, "7"),
        ("<reasoning>abc</reasoning>7</answer>", "7", 0.0, "[no answer]"),
        ("7", "7", 0.0, "[no answer]"),
        ("<reasoning>a</reasoning><answer>7</answer>junk", "7", 0.0, "[no answer]"),
    ],
)
def test_reward_is_one_only_for_a_well_formed_correct_answer(response, truth, score, pred):
    result = task.compute_score(task.DATA_SOURCE, response, truth)
    assert result == {"score": score, "acc": score, "pred": pred}


def test_warm_start_answers_follow_the_prior_of_the_max_not_the_prompt():
    rng = random.Random(0)
    digits = [int(task.parse_answer(task.formatted_response(rng))) for _ in range(20000)]
    counts = collections.Counter(digits)
    prior = {d: ((d + 1) ** 3 - d**3) / 1000 for d in range(10)}
    for d in range(10):
        assert counts[d] / 20000 == pytest.approx(prior[d], abs=0.01)
    # the step-0 success rate of a prompt-blind policy with this prior: sum_d P(d)^2
    assert sum(p * p for p in prior.values()) == pytest.approx(0.179, abs=1e-3)


def test_parquet_rows_are_verls_rl_format(tmp_path):
    import pandas as pd

    path = task.write_parquet(str(tmp_path / "val.parquet"), 4, 1, "val")
    frame = pd.read_parquet(path)
    assert list(frame["data_source"]) == [task.DATA_SOURCE] * 4
    assert frame["prompt"][0][0]["role"] == "user"
    assert [row["ground_truth"] for row in frame["reward_model"]] == [a for _, a in task.problems(4, 1)]


def test_study_aggregates_a_real_cpu_run():
    from benchmarks import study

    paths = sorted(p for p in os.listdir(FIXTURES) if p.endswith(".jsonl"))
    assert paths
    for name in paths:
        steps = study.read_metrics(os.path.join(FIXTURES, name))
        record = study.run_record(steps, 16)
        val, train = record["validation"], record["train"]
        assert val["step"][0] == 0 and len(val["step"]) >= 2  # before training, then at the end
        for key in ("mean@16", "best@16", "pass@1", "pass@16", "maj@16"):
            assert all(isinstance(v, float) and 0 <= v <= 1 for v in val[key]), (name, key)
        # pass@1 is the mean success rate: the same number as verl's acc mean@16
        assert val["pass@1"] == pytest.approx(val["mean@16"])
        assert all(a >= b - 1e-9 for a, b in zip(val["pass@16"], val["best@16"]))  # unbiased ≥ bootstrap
        assert train["step"] and all(isinstance(v, float) for v in train["reward"] + train["actor_entropy"])
    summary = study.summarize({"M": {"0": record}}, 16)["M"]
    assert summary["final pass@16"]["seeds"] == 1
    table = study.markdown_table({"M": summary}, 16).splitlines()
    assert len(table) == 3 and table[2].startswith("| M | 1 | ")
    assert f"{val['pass@16'][-1]:.3f} ± 0.000" in table[2]  # final pass@16 of the one seed


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--test-freq", "20"], "--test-freq must be <= 10"),
        (["--val-n", "1"], "--val-n >= 2"),
        (["--methods", "DAPO,PPO"], "unknown \\['PPO'\\]"),
    ],
)
def test_study_rejects_settings_the_study_cannot_use(argv, message, capsys):
    from benchmarks import study

    with pytest.raises(SystemExit):
        study.main(argv + ["--aggregate-only"])
    assert re.search(message, capsys.readouterr().err)


def test_every_study_method_composes_with_the_real_config():
    """Each method's overrides compose on gtpo_trainer_cpu and pass our start-up checks."""
    from hydra import compose, initialize_config_dir

    import gtpo_verl
    from benchmarks import study
    from gtpo_verl.integration.validation import validate_gtpo_config

    config_dir = os.path.join(os.path.dirname(gtpo_verl.__file__), "config")
    args = study.argparse.Namespace(out="/tmp/study", prompts=8, group=8, lr=1e-3, val_n=16, steps=60, test_freq=10, wandb=True)
    for method in study.METHODS:
        with initialize_config_dir(config_dir=config_dir, version_base=None):
            config = compose("gtpo_trainer_cpu", overrides=study.run_overrides(args, method, 0, "/tmp/study/run"))
        validate_gtpo_config(config)
        assert config.actor_rollout_ref.rollout.val_kwargs.n == 16 and config.trainer.test_freq == 10
        assert not config.actor_rollout_ref.actor.use_kl_loss and not config.algorithm.use_kl_in_reward
