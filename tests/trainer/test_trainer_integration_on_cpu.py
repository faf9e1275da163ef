"""The V1-trainer mixin against a real local TransferQueue (Ray + TQ SimpleStorage on CPU),
verl's real checkpoint layout, the entry point's Hydra config, and start-up validation.

Worker groups (FSDP actors, vLLM) cannot run here; where verl's checkpoint code calls them,
a recording stub stands in (named `GpuWorkerGroupStub`, it only records the call).
"""

import math
import os
import subprocess
import sys

import pytest
import torch
from torch.testing import assert_close

from verl.trainer.ppo.core_algos import get_adv_estimator_fn

from gtpo_verl.plugin.estimators import ESTIMATORS
from support.hydra import compose_gtpo
from support.transfer_queue import TQ_OVERRIDES, local_transfer_queue
from support.v1_batch import make_v1_trainer, put_v1_batch


def compose_config(*overrides):
    return compose_gtpo(
        "actor_rollout_ref.rollout.n=4",
        *TQ_OVERRIDES,
        *overrides,
    )


@pytest.fixture(scope="module")
def transfer_queue():
    yield from local_transfer_queue(compose_config().transfer_queue)


def put_batch(tq, seed, prompts=3, group=4, padding_rows=2, prefix="b"):
    """A batch in the layout verl's V1 trainer leaves before _compute_advantage (token ids in 0-2)."""
    return put_v1_batch(tq, seed, prompts, group, padding_rows, prefix, vocab=3, old_log_probs=False)


make_trainer = make_v1_trainer


def read_advantages(tq, meta):
    return tq.kv_batch_get(keys=meta.keys, partition_id="train", select_fields=["advantages"])["advantages"].to_padded_tensor(0)


@pytest.mark.parametrize(
    "estimator,extra",
    [
        ("gtpo_token", ["algorithm.gtpo_token.negative_shaping=true"]),
        ("grpo_s", ["actor_rollout_ref.actor.policy_loss.loss_mode=grpo_s"]),
        ("gtpo_traj", ["algorithm.gtpo_traj.preset=paper"]),
    ],
)
def test_mixin_advantages_equal_the_estimator_and_need_no_model_pass(transfer_queue, estimator, extra, monkeypatch):
    config = compose_config(f"algorithm.adv_estimator={estimator}", *extra)
    meta, direct = put_batch(transfer_queue, seed=1, prefix=estimator)
    trainer = make_trainer(config)
    metrics = {}
    reads = []
    real_get = transfer_queue.kv_batch_get

    def recording_get(*args, **kwargs):
        reads.append(list(kwargs.get("select_fields") or []))
        return real_get(*args, **kwargs)

    monkeypatch.setattr(transfer_queue, "kv_batch_get", recording_get)
    out = trainer._compute_advantage(meta, metrics)
    monkeypatch.undo()
    # verl's own read fetches rm_scores and uid; ours only the fields verl never fetches (the health check
    # reads the estimator's own scores and groups)
    assert sum("rm_scores" in fields or "uid" in fields for fields in reads) == 1, reads
    scores = direct["token_level_rewards"].sum(-1)[:-2].tolist()  # the last two rows are V1 padding
    groups: dict = {}
    for uid, score in zip(list(direct["index"])[:-2], scores):
        groups.setdefault(uid, set()).add(score)
    assert metrics["gtpo/health/all_equal_groups_frac"] == pytest.approx(sum(len(v) == 1 for v in groups.values()) / len(groups))
    assert "advantages" in out.fields and "entropy" in out.fields

    initial = trainer.gtpo_state.initial_entropy
    if estimator == "gtpo_traj":  # the paper preset's gate measured ⟨H⟩_ini on this first batch
        mask = direct["response_mask"].float()
        rows = mask.sum(-1) > 0
        per_response = (direct["entropys"] * mask).sum(-1)[rows] / mask.sum(-1)[rows]
        assert initial == pytest.approx(float(per_response.mean()), rel=1e-6)
        assert metrics["gtpo/entropy/initial"] == pytest.approx(initial)
    expected, _ = get_adv_estimator_fn(estimator)(config=config.algorithm, initial_entropy=initial, **direct)
    got = read_advantages(transfer_queue, meta)
    assert_close(got, expected[:, : got.shape[1]])
    assert torch.equal(got[-2:], torch.zeros_like(got[-2:]))  # V1 padding rows
    gtpo_metrics = {k: v for k, v in metrics.items() if k.startswith("gtpo/")}
    assert gtpo_metrics and all(math.isfinite(v) for v in gtpo_metrics.values())
    assert {"gtpo/adv/success/mean", "gtpo/adv/failure/mean", "gtpo/entropy/collapse_warning"} <= set(gtpo_metrics)
    if estimator == "gtpo_traj":
        assert {"gtpo/conflict/pos_token_frac", "gtpo/delta/filtered_frac", "gtpo/conflict/zeroed_tokens"} <= set(metrics)
    else:
        assert "gtpo/bonus_share/mean" in metrics


def test_other_estimators_pass_through_untouched(transfer_queue):
    config = compose_config("algorithm.adv_estimator=grpo")
    meta, direct = put_batch(transfer_queue, seed=2, prefix="grpo")
    metrics = {}
    make_trainer(config)._compute_advantage(meta, metrics)
    # only the entropy watch and the all-equal-groups health check, on the same definitions as for our estimators
    assert {k for k in metrics if k.startswith("gtpo/")} == {
        "gtpo/entropy/batch_mean", "gtpo/entropy/baseline", "gtpo/entropy/rise_ratio",
        "gtpo/entropy/collapse_warning", "gtpo/entropy/fall_warning", "gtpo/entropy/warnings_total",
        "gtpo/entropy/floor", "gtpo/entropy/rise_steps",
        "gtpo/health/all_equal_groups_frac", "gtpo/health/all_equal_groups",
    }
    mask = direct["response_mask"].bool()
    mask[-2:] = False  # padding rows do not count
    scores = direct["token_level_rewards"].sum(-1)[:-2].tolist()
    groups: dict = {}
    for uid, score in zip(list(direct["index"])[:-2], scores):
        groups.setdefault(uid, set()).add(score)
    all_equal = sum(len(v) == 1 for v in groups.values()) / len(groups)
    assert metrics["gtpo/health/all_equal_groups_frac"] == pytest.approx(all_equal)
    assert metrics["gtpo/health/all_equal_groups"] == float(all_equal >= 0.5)
    assert metrics["gtpo/entropy/batch_mean"] == pytest.approx(float(direct["entropys"][mask].mean()), rel=1e-6)
    from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage

    expected, _ = compute_grpo_outcome_advantage(direct["token_level_rewards"], direct["response_mask"], direct["index"])
    got = read_advantages(transfer_queue, meta)
    assert_close(got, expected[:, : got.shape[1]])


class GpuWorkerGroupStub:
    """Stands in for the FSDP actor worker group (GPU workers cannot run here): records calls."""

    def __init__(self):
        self.calls = []

    def save_checkpoint(self, *args, **kwargs):
        self.calls.append("save_checkpoint")

    def load_checkpoint(self, *args, **kwargs):
        self.calls.append("load_checkpoint")


class DataloaderStub:
    def state_dict(self):
        return {}

    def load_state_dict(self, state):
        pass


def test_state_survives_verl_checkpoint_and_resume_decides_identically(transfer_queue, tmp_path):
    from verl.trainer.ppo.v1.trainer_base import build_checkpoint_callback

    overrides = [
        "algorithm.adv_estimator=gtpo_traj",
        "algorithm.gtpo_traj.preset=paper",
        f"trainer.default_local_dir={tmp_path}",
        "trainer.resume_mode=auto",
    ]
    config = compose_config(*overrides)

    def trainer_with_checkpointing():
        return make_trainer(
            config,
            actor_rollout_wg=GpuWorkerGroupStub(),
            train_dataloader=DataloaderStub(),
            checkpoint_callback=build_checkpoint_callback(config),
            use_critic=False,
            trainer_mode="sync",
        )

    uninterrupted = trainer_with_checkpointing()
    uninterrupted.global_steps = 1
    uninterrupted._compute_advantage(put_batch(transfer_queue, seed=3, prefix="run")[0], {})  # measures ⟨H⟩_ini
    uninterrupted._save_checkpoint()  # verl's real checkpoint layout, our state inside it
    assert os.path.exists(tmp_path / "global_step_1" / "gtpo_state.json")
    assert (tmp_path / "latest_checkpointed_iteration.txt").read_text() == "1"

    resumed = trainer_with_checkpointing()
    resumed._load_checkpoint()  # verl's real resume_mode=auto lookup
    assert resumed.global_steps == 1
    assert resumed.gtpo_state.initial_entropy == uninterrupted.gtpo_state.initial_entropy
    assert resumed.gtpo_entropy_watch.state_dict() == uninterrupted.gtpo_entropy_watch.state_dict()

    # step 2 has higher entropy: ⟨H⟩_ini (from step 1) decides the gate, so both must agree
    meta_a, _ = put_batch(transfer_queue, seed=4, prefix="a")
    meta_b, _ = put_batch(transfer_queue, seed=4, prefix="b")
    metrics_a, metrics_b = {}, {}
    uninterrupted._compute_advantage(meta_a, metrics_a)
    resumed._compute_advantage(meta_b, metrics_b)
    assert torch.equal(read_advantages(transfer_queue, meta_a), read_advantages(transfer_queue, meta_b))
    assert metrics_a == metrics_b

    fresh = trainer_with_checkpointing()  # without the restored state ⟨H⟩_ini would be re-measured on step 2
    fresh._compute_advantage(put_batch(transfer_queue, seed=4, prefix="c")[0], {})
    assert fresh.gtpo_state.initial_entropy != uninterrupted.gtpo_state.initial_entropy


def test_resume_without_our_state_is_refused_unless_accepted(transfer_queue, tmp_path):
    """The backstop in the trainer (the driver refuses first, tests/trainer/test_resume_on_cpu.py)."""
    from verl.trainer.ppo.v1.trainer_base import build_checkpoint_callback

    from gtpo_verl.trainer.state import STATE_FILE, MissingAlgorithmState

    def trainer(*extra):
        config = compose_config("algorithm.adv_estimator=gtpo_traj", "algorithm.gtpo_traj.preset=paper",
                                f"trainer.default_local_dir={tmp_path}", "trainer.resume_mode=auto", *extra)
        return make_trainer(config, actor_rollout_wg=GpuWorkerGroupStub(), train_dataloader=DataloaderStub(),
                            checkpoint_callback=build_checkpoint_callback(config), use_critic=False, trainer_mode="sync")

    saved = trainer()
    saved.global_steps = 1
    saved._compute_advantage(put_batch(transfer_queue, seed=5, prefix="ms")[0], {})
    saved._save_checkpoint()
    os.remove(tmp_path / "global_step_1" / STATE_FILE)  # as if saved by stock verl
    with pytest.raises(MissingAlgorithmState, match="gtpo.remeasure_on_resume=true"):
        trainer()._load_checkpoint()
    accepted = trainer("gtpo.remeasure_on_resume=true")
    accepted._load_checkpoint()
    assert accepted.global_steps == 1 and accepted.gtpo_state.initial_entropy is None  # measured again on use


def test_trainer_substitution_keeps_every_mode_and_restores_the_registry():
    from verl.trainer.ppo.v1 import trainer_base

    from gtpo_verl.trainer.mixin import GTPOTrainerMixin, gtpo_trainers

    for mode in ("sync", "colocate_async", "separate_async"):
        base = trainer_base.TRAINER_REGISTRY[mode]
        with gtpo_trainers(mode) as cls:
            assert trainer_base.get_trainer_cls(mode) is cls
            assert issubclass(cls, GTPOTrainerMixin) and issubclass(cls, base)
        assert trainer_base.TRAINER_REGISTRY[mode] is base


def test_entropy_watch_flags_a_rise_and_round_trips():
    from gtpo_verl.trainer.diagnostics import EntropyWatch

    watch = EntropyWatch(ratio=1.5, momentum=0.5, warmup_steps=2, persist_steps=1)
    flags = [watch.update(h)["gtpo/entropy/collapse_warning"] for h in (1.0, 1.0, 1.1, 2.0)]
    assert flags == [0.0, 0.0, 0.0, 1.0]
    copy = EntropyWatch(ratio=1.5, momentum=0.5, warmup_steps=2, persist_steps=1)
    copy.load_state_dict(watch.state_dict())
    assert copy.update(1.0) == watch.update(1.0)


def test_entropy_watch_flags_a_fall_only_when_asked():
    from gtpo_verl.trainer.diagnostics import EntropyWatch

    curve = (1.0, 1.0, 0.9, 0.5, 0.5)
    watch = EntropyWatch(ratio=1.5, fall_ratio=1.5, momentum=0.5, warmup_steps=2)
    steps = [watch.update(h) for h in curve]
    # baseline after 0.9 is 0.95: 0.5 < 0.95 / 1.5; then baseline 0.725: 0.5 < 0.483 is false
    assert [m["gtpo/entropy/fall_warning"] for m in steps] == [0.0, 0.0, 0.0, 1.0, 0.0]
    assert [m["gtpo/entropy/collapse_warning"] for m in steps] == [0.0] * 5
    assert steps[-1]["gtpo/entropy/warnings_total"] == 1.0
    off = EntropyWatch(ratio=1.5, fall_ratio=None, momentum=0.5, warmup_steps=2)
    assert [off.update(h)["gtpo/entropy/fall_warning"] for h in curve] == [0.0] * 5


def test_health_monitor_flags_each_step_and_warns_when_a_flag_turns_on(caplog):
    from gtpo_verl.trainer.health import HealthMonitor

    monitor = HealthMonitor(momentum=0.5)
    key = "gtpo/delta/filtered_frac"
    values = (0.5, 1.0, 1.0, 0.2, 1.0, 1.0)
    # running means 0.5, 0.75, 0.875, 0.5375, 0.769, 0.884: one good batch clears it, it never reaches 0.9
    with caplog.at_level("WARNING", logger="gtpo_verl.trainer.health"):
        flags = [monitor.update({key: v}).get("gtpo/health/delta_filtered") for v in values]
        assert flags == [0.0] * 6
        flags = [monitor.update({key: 1.0})["gtpo/health/delta_filtered"] for _ in range(2)]  # 0.942, 0.971
        flags += [monitor.update({key: 0.0})["gtpo/health/delta_filtered"]]  # 0.486
        flags += [monitor.update({key: 1.0})["gtpo/health/delta_filtered"] for _ in range(4)]  # 0.743 … 0.968
    assert flags == [1.0, 1.0, 0.0, 0.0, 0.0, 1.0, 1.0]
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 2 and all("entropy_threshold" in w for w in warnings)  # the key that fixes it
    assert monitor.update({}) == {}  # a check whose metric is absent (another estimator) stays silent


def test_all_equal_groups_frac_counts_groups_not_rows():
    import numpy as np

    from gtpo_verl.trainer.health import all_equal_groups_frac

    uids = np.array(["a", "a", "b", "b", "b", "c"], dtype=object)
    scores = torch.tensor([1.0, 1.0, 0.0, 1.0, 0.0, 0.5])
    assert all_equal_groups_frac(scores, uids) == pytest.approx(2 / 3)  # a (all 1) and c (one row) carry no signal
    assert all_equal_groups_frac(scores[:0], uids[:0]) == 0.0
    # the same groups as integer ids (the estimator's own), with an id no row of this subset has
    assert all_equal_groups_frac(scores, torch.tensor([3, 3, 7, 7, 7, 9])) == pytest.approx(2 / 3)


# ----------------------------------------------------------------------------- start-up validation
def validate(*overrides):
    """As ``python -m gtpo_verl.main`` does: the derived values, then the checks."""
    from gtpo_verl.trainer.derive import derive_config
    from gtpo_verl.trainer.validation import validate_gtpo_config

    config = compose_config(*overrides)
    derive_config(config)
    return validate_gtpo_config(config), config


@pytest.mark.parametrize(
    "overrides,match",
    [
        (["algorithm.adv_estimator=gtpo_token", "algorithm.rollout_correction.bypass_mode=true"], "bypass_mode"),
        (["trainer.use_v1=false"], "trainer.use_v1=false"),
        (
            [
                "algorithm.adv_estimator=gtpo_token",
                "algorithm.gtpo_token.variant=clipped_len",
                "algorithm.gtpo_token.kappa=3",
                "algorithm.gtpo_token.overlong_buffer_len=4096",
                "algorithm.gtpo_token.max_response_len=20480",
                "+reward.reward_kwargs.overlong_buffer_cfg.enable=true",
            ],
            "applied twice",
        ),
        (["algorithm.adv_estimator=gtpo_traj", "algorithm.gtpo_traj.preset=nope"], "gtpo_traj.preset"),
        (
            [
                "algorithm.adv_estimator=gtpo_traj",
                "algorithm.gtpo_traj.entropy_reg_mode=differentiable",
                "actor_rollout_ref.actor.entropy_coeff=0.01",
            ],
            "entropy_coeff=-0.1",
        ),
    ],
)
def test_startup_errors(overrides, match):
    with pytest.raises(ValueError, match=match):
        validate(*overrides)


@pytest.mark.parametrize(
    "overrides,match",
    [
        (["algorithm.adv_estimator=grpo_s"], "set policy_loss.loss_mode=grpo_s"),
        (["actor_rollout_ref.actor.policy_loss.loss_mode=grpo_s", "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean"], "adv_estimator=grpo_s"),
        (["algorithm.adv_estimator=gtpo_traj", "actor_rollout_ref.actor.use_kl_loss=true"], "KL-free"),
        (["algorithm.adv_estimator=gtpo_traj"], "loss_agg_mode=seq-mean-token-mean"),
    ],
)
def test_startup_warnings(overrides, match):
    from gtpo_verl.trainer.validation import GTPOConfigWarning

    with pytest.warns(GTPOConfigWarning, match=match):
        validate(*overrides)


def test_paper_setups_validate_silently_and_differentiable_mode_sets_entropy_coeff():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert validate("algorithm.adv_estimator=gtpo_token")[0] == []
        assert validate(
            "algorithm.adv_estimator=grpo_s",
            "actor_rollout_ref.actor.policy_loss.loss_mode=grpo_s",
            "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean",
        )[0] == []
        given, config = validate(
            "algorithm.adv_estimator=gtpo_traj",
            "algorithm.gtpo_traj.entropy_reg_mode=differentiable",
            "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean",
        )
    assert given == [] and config.actor_rollout_ref.actor.entropy_coeff == pytest.approx(-0.1)


def test_entry_point_composes_from_the_installed_package():
    out = subprocess.run(
        [sys.executable, "-m", "gtpo_verl.main", "--cfg", "job", "algorithm.adv_estimator=gtpo_traj",
         "algorithm.gtpo_traj.preset=paper"],
        capture_output=True, text=True, cwd="/", timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "adv_estimator: gtpo_traj" in out.stdout and "preset: paper" in out.stdout
    assert "gtpo_verl.plugin.loss_config.GTPOPolicyLossConfig" in out.stdout
