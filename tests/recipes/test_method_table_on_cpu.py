"""The method table (``gtpo_verl/config/methods.yaml``) and its loader: every row composes with the trainer's
CPU preset and passes the start-up checks; a row's ``base`` is copied field by field; a typo is refused."""

import dataclasses

import pytest
from hydra import compose, initialize_config_dir

from gtpo_verl.methods import METHODS, TABLE_PATH, Clips, load_methods, pipeline_overrides
from gtpo_verl.plugin.estimators import ESTIMATORS


def test_every_row_composes_and_passes_the_start_up_checks(tmp_path):
    from support.run_files import write_run_files

    from gtpo_verl.cpu.launch import run_sizes
    from gtpo_verl.trainer.derive import derive_config
    from gtpo_verl.trainer.validation import check_training_config

    root = write_run_files(tmp_path, train_rows=8, val_rows=8)
    sizes = run_sizes(str(root), str(root / "model"), prompts=4, group=4, mini_batch=2, lr=1e-5, steps=2, seed=0,
                      micro_batch=8, log_prob_micro_batch=8)
    for name, row in METHODS.items():
        overrides = pipeline_overrides(name)
        keys = [o.split("=", 1)[0] for o in overrides]
        assert len(set(keys)) == len(keys), name  # distinct keys: any order composes the same
        with initialize_config_dir(config_dir=str(TABLE_PATH.parent), version_base=None):
            config = compose(config_name="gtpo_trainer_cpu", overrides=sizes + overrides)
        actor = config.actor_rollout_ref.actor
        assert config.algorithm.adv_estimator == row.estimator and actor.loss_agg_mode == row.loss_agg_mode
        assert actor.policy_loss.loss_mode == (row.loss_mode or "vanilla")
        assert config.algorithm.filter_groups.enable == row.dynamic_sampling
        assert [dict(t) for t in config.algorithm.adv_transforms] == list(row.transforms), name
        for key, value in row.knobs.items():
            assert config.algorithm[row.estimator][key] == value, (name, key)
        derive_config(config)
        check_training_config(config)  # raises on an invalid run


def test_each_estimator_row_pairs_the_estimator_with_its_own_loss():
    for row in METHODS.values():
        if row.estimator in ESTIMATORS and ESTIMATORS[row.estimator].policy_loss:
            assert row.loss_mode == ESTIMATORS[row.estimator].policy_loss, row.name
            assert row.loss_agg_mode == ESTIMATORS[row.estimator].loss_agg_mode, row.name


def test_a_base_row_is_copied_and_each_given_field_replaces_its_own(tmp_path):
    path = tmp_path / "methods.yaml"
    path.write_text("A:\n  estimator: grpo\n  loss_agg_mode: token-mean\n  clips: {low: 0.2, high: 0.28, c: 10.0}\n"
                    "  knobs: {x: 1}\nB:\n  base: A\n  knobs: {y: 2}\n")
    table = load_methods(path)
    assert list(table) == ["A", "B"]
    assert table["B"] == dataclasses.replace(table["A"], name="B", knobs={"y": 2})
    assert table["B"].clips == Clips(0.2, 0.28, 10.0)
    assert pipeline_overrides(table["B"])[-1] == "algorithm.grpo.y=2"


@pytest.mark.parametrize("text, message", [
    ("A:\n  estimator: grpo\n  loss_agg_mode: token-mean\n  dynamic_sampling_on: true\n", "unknown fields"),
    ("A:\n  base: Z\n  estimator: grpo\n", "not a method"),
    ("A:\n  base: B\nB:\n  base: A\n", "cycle"),
])
def test_a_bad_table_is_refused(tmp_path, text, message):
    path = tmp_path / "methods.yaml"
    path.write_text(text)
    with pytest.raises(ValueError, match=message):
        load_methods(path)
