"""The study's exploration task (research/exploration_task.py) and the study's aggregation of a
real CPU run's metrics file (tests/fixtures/cpu_run_metrics/)."""

import collections
import os
import random
import re

import pytest

from gtpo_verl.trainer.metrics_file import read_metrics_file
from research import exploration_task as task
from research import study_report
from support.paths import FIXTURES

RUN_METRICS = str(FIXTURES / "cpu_run_metrics")


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
    from research import study

    paths = sorted(p for p in os.listdir(RUN_METRICS) if p.endswith(".jsonl"))
    assert paths
    for name in paths:
        steps = read_metrics_file(os.path.join(RUN_METRICS, name)).steps  # how the study reads a run
        record = study.run_record(steps, 16)
        val, train = record["validation"], record["train"]
        assert val["step"][0] == 0 and len(val["step"]) >= 2  # before training, then at the end
        for key in ("mean@16", "best@16", "pass@1", "pass@16", "maj@16"):
            assert all(isinstance(v, float) and 0 <= v <= 1 for v in val[key]), (name, key)
        # pass@1 is the mean success rate: the same number as verl's acc mean@16
        assert val["pass@1"] == pytest.approx(val["mean@16"])
        assert all(a >= b - 1e-9 for a, b in zip(val["pass@16"], val["best@16"]))  # unbiased ≥ bootstrap
        assert train["step"] and all(isinstance(v, float) for v in train["reward"] + train["actor_entropy"])
    summary = study.summarize(study.endpoint_table({"M": {"0": record}}, 16))["M"]
    assert summary["final pass@16"]["seeds"] == 1
    table = study_report.markdown_table({"M": summary}, 16).splitlines()
    assert len(table) == 3 and table[2].startswith("| M | 1 | ")
    assert f"{val['pass@16'][-1]:.3f} (1 seed)" in table[2]  # one seed: no sample std to give


def test_study_records_the_delta_filter_and_clip_fractions():
    """The optional per-step curves: gtpo/delta/filtered_frac (gtpo_traj only) and every actor/*clipfrac*."""
    from research import study

    traj = study.run_record(read_metrics_file(os.path.join(RUN_METRICS, "GTPO_TRAJ_seed0.jsonl")).steps, 16)["train"]
    seq = study.run_record(read_metrics_file(os.path.join(RUN_METRICS, "DAPO_SEQ_seed0.jsonl")).steps, 16)["train"]
    assert traj["delta_filtered_frac"] == pytest.approx([0.984375, 0.921875])
    assert "delta_filtered_frac" not in seq  # not logged by grpo_s: no column of Nones
    for train in (traj, seq):
        assert train["pg_clipfrac"] == [0.0, 0.0] and train["pg_clipfrac_lower"] == [0.0, 0.0]
        assert len(train["token_mean_entropy"]) == len(train["step"]) == 2
    ends = study.run_endpoints({"train": traj, "validation": {"step": []}}, 16)
    assert ends["delta_filtered_frac mean"] == pytest.approx((0.984375 + 0.921875) / 2)
    assert ends["pg_clipfrac mean"] == 0.0
    # a synthetic row set: any actor/*clipfrac* metric is kept under its name without "actor/"
    rows = {1: {"timing_s/step": 1.0, "actor/pg_clipfrac": 0.1, "actor/seq_clipfrac_x": 0.2, "critic/score/mean": 0.5}}
    train = study.run_record(rows, 16)["train"]
    assert train["pg_clipfrac"] == [0.1] and train["seq_clipfrac_x"] == [0.2] and train["actor_entropy"] == [None]


def test_study_summary_uses_the_sample_std():
    from gtpo_verl.lab.stats import mean_and_sample_std
    from research import study

    assert mean_and_sample_std([1.0, 2.0, 3.0]) == {"mean": 2.0, "std": 1.0, "seeds": 3}
    assert mean_and_sample_std([0.5, None, float("nan")]) == {"mean": 0.5, "std": None, "seeds": 1}
    assert study_report._cell({"mean": 2.0, "std": 1.0}) == "2.000 ± 1.000"


@pytest.mark.parametrize(
    "diffs, sign_p, wilcoxon_p",
    [
        ([0.1, 0.2, 0.3], 0.25, 0.25),  # 3 seeds all one way: the smallest p attainable
        ([0.1, -0.2, 0.3], 1.0, 0.75),  # W+ = 4 of 6: |W − 3| ≥ 1 in 6 of 8 sign patterns
        ([1.0, 2.0, 3.0, 4.0, 5.0, 6.0], 2 / 64, 2 / 64),  # 6 seeds: the first n below 0.05
        ([0.0, 0.1, 0.2], 0.5, 0.5),  # zeros dropped
        ([0.0, 0.0], 1.0, 1.0),
    ],
)
def test_study_exact_paired_tests(diffs, sign_p, wilcoxon_p):
    """The study's paired tests are the lab's (gtpo_verl/lab/stats.py)."""
    from gtpo_verl.lab.stats import sign_test, smallest_exact_p, wilcoxon_signed_rank

    assert sign_test(diffs) == pytest.approx(sign_p)
    assert wilcoxon_signed_rank(diffs) == pytest.approx(wilcoxon_p)
    assert smallest_exact_p(3) == 0.25 and smallest_exact_p(6) < 0.05


def _synthetic_run(entropy: float, reward: float, pass1: float, pass16: float) -> dict:
    steps = list(range(1, 11))
    return {
        "train": {"step": steps, "reward": [reward + 0.01 * (i % 2) for i in steps],
                  "actor_entropy": [entropy] * 10, "token_mean_entropy": [entropy + 0.001 * i for i in steps],
                  "response_length": [8.0] * 10},
        "validation": {"step": [0, 10], "pass@1": [0.2, pass1], "pass@16": [0.9, pass16], "maj@16": [0.2, 0.2]},
    }


def test_study_rescores_a_results_file_without_metrics_files(tmp_path):
    """--rescore: summary (sample std), table.md and the paired verdicts from results.json's curves alone."""
    import json

    from research import study

    runs = {
        "DAPO": {str(s): _synthetic_run(0.9, 0.2, 0.2, 0.8) for s in range(3)},
        "DAPO_TOKEN": {str(s): _synthetic_run(1.0 + 0.1 * s, 0.25, 0.2 + 0.01 * s, 0.85) for s in range(3)},
    }
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"settings": {"val_n": 16}, "runs": runs}))
    assert study.main(["--rescore", str(path)]) == 0
    results = json.loads(path.read_text())
    assert results["runs"] == runs  # the curves are left as they were
    assert results["summary"]["DAPO_TOKEN"]["final pass@1"]["std"] == pytest.approx(0.01)  # ddof = 1
    claims = {(c["method"], c["endpoint"]): c for c in results["verdicts"]["claims"]}
    entropy = claims[("DAPO_TOKEN", "token_mean_entropy last 20%")]
    assert [v["difference"] for v in entropy["per_seed"].values()] == pytest.approx([0.1, 0.2, 0.3])
    assert entropy["seeds_as_claimed"] == 3 and entropy["p"] == pytest.approx(0.25)
    assert entropy["test"] == "exact Wilcoxon signed-rank" and entropy["sign_test_p"] == pytest.approx(0.25)
    assert entropy["verdict"] == "inconclusive"  # 3 seeds cannot reach α = 0.05
    low, high = entropy["ci95"]
    assert 0.1 - 1e-9 <= low <= entropy["mean_difference"] <= high <= 0.3 + 1e-9
    assert claims[("DAPO_TOKEN", "final pass@16")]["per_seed"]["0"]["difference"] == pytest.approx(0.05)
    assert all(c["baseline"] == "DAPO" for c in results["verdicts"]["claims"])  # no GRPO runs: Paper A skipped
    assert (tmp_path / "table.md").read_text().startswith("| method | seeds |")
    assert "| B-entropy-token: entropy rises under GTPO (vs DAPO) |" in (tmp_path / "verdicts.md").read_text()
    assert results["verdicts"]["std_gap_rule_step0_pass1"]["pairs"] == 1
    token = results["verdicts"]["runs"]["DAPO_TOKEN"]
    assert token["entropy_rose_seeds"] == 3 and token["flattening_seeds"] == 0  # entropy rose, reward flat
    assert token["best_pass_at_n_is_step0_seeds"] == 3  # 0.9 at step 0 > 0.85 at the end
    assert token["max_actor_vs_token_mean_entropy"] == pytest.approx(0.01)


def test_study_old_rule_flags_noise():
    """The "difference > sum of the two stds" rule (the lab's std_gap_flags, not used) flags identical methods often with 3 seeds."""
    from gtpo_verl.lab.stats import min_detectable_effect, std_gap_flags, std_gap_null_rate

    assert 0.10 < std_gap_null_rate(3, draws=50_000, ddof=0) < 0.16
    assert std_gap_flags([0.0, 0.1, 0.2], [0.5, 0.6, 0.7]) and not std_gap_flags([0.0, 0.2], [0.1, 0.3])
    assert min_detectable_effect(1.0, 3) == pytest.approx(2.8016 * (2 / 3) ** 0.5, rel=1e-3)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--test-freq", "20"], "--test-freq must be <= 10"),
        (["--val-n", "1"], "--val-n >= 2"),
        (["--methods", "DAPO,PPO"], "unknown \\['PPO'\\]"),
        (["--mini-batches", "3"], "--mini-batches must be >= 1 and divide --prompts"),
        (["--mini-batches", "0"], "--mini-batches must be >= 1"),
    ],
)
def test_study_rejects_settings_the_study_cannot_use(argv, message, capsys):
    from research import study

    with pytest.raises(SystemExit):
        study.main(argv + ["--aggregate-only"])
    assert re.search(message, capsys.readouterr().err)


def test_every_study_method_composes_with_the_real_config():
    """Each method's overrides compose on gtpo_trainer_cpu and pass our start-up checks."""
    from hydra import compose, initialize_config_dir

    import gtpo_verl
    from research import study
    from gtpo_verl.trainer.validation import validate_gtpo_config

    config_dir = os.path.join(os.path.dirname(gtpo_verl.__file__), "config")
    args = study.argparse.Namespace(out="/tmp/study", prompts=8, group=8, lr=1e-3, val_n=16, steps=60, test_freq=10, wandb=True)
    for method in study.METHODS:
        with initialize_config_dir(config_dir=config_dir, version_base=None):
            config = compose("gtpo_trainer_cpu", overrides=study.run_overrides(args, method, 0, "/tmp/study/run"))
        validate_gtpo_config(config)
        assert config.actor_rollout_ref.rollout.val_kwargs.n == 16 and config.trainer.test_freq == 10
        assert not config.actor_rollout_ref.actor.use_kl_loss and not config.algorithm.use_kl_in_reward
        assert config.actor_rollout_ref.actor.ppo_mini_batch_size == 8  # one optimiser step: ratio 1, no clip acts
    # --mini-batches 2: two optimiser steps per training step, so the second sees a ratio away from 1
    args.mini_batches = 2
    for method in ("DAPO", "DAPO_SEQ", "GTPO_TRAJ"):
        with initialize_config_dir(config_dir=config_dir, version_base=None):
            config = compose("gtpo_trainer_cpu", overrides=study.run_overrides(args, method, 0, "/tmp/study/run"))
        validate_gtpo_config(config)
        actor = config.actor_rollout_ref.actor
        assert actor.ppo_mini_batch_size == 4 and actor.ppo_micro_batch_size_per_gpu == 32 and actor.ppo_epochs == 1
