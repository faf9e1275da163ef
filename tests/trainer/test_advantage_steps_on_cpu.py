"""The advantage step's named pieces (``trainer/advantage_steps.py``): the trainer mixin (real V1
trainer, real local TransferQueue) and the lab (verl's registry) run the same steps and give the same
advantages and metrics; settings are parsed once, not per step; start-up checks leave the config as
they found it (``derive_config`` is the one step that writes it); the ContextVar carries data only."""

import warnings

import pytest
import torch
from omegaconf import OmegaConf

from gtpo_verl.algorithms.groups import group_ids_from_uids
from gtpo_verl.algorithms.kernels.gtpo_token import gtpo_token_advantage
from gtpo_verl.algorithms.token_shaping import column_share, geometric_share
from gtpo_verl.lab.methods import Method
from gtpo_verl.lab.update import AdvantageStep
from gtpo_verl.plugin.context import bind_estimator_inputs
from gtpo_verl.plugin.estimators import EstimatorBatch, EstimatorCall
from gtpo_verl.plugin.estimators.gtpo_token import GTPOTokenConfig
from gtpo_verl.trainer import advantage_steps
from gtpo_verl.trainer.diagnostics import estimator_metrics
from gtpo_verl.trainer.settings import GTPOSettings
from support.hydra import compose_gtpo
from support.transfer_queue import TQ_OVERRIDES, local_transfer_queue
from support.v1_batch import make_v1_trainer, put_v1_batch, read_fields

CASES = {  # estimator → (its block, the transforms after it)
    "gtpo_token": ({"negative_shaping": True, "entropy_share": "geometric"}, [{"name": "entropy_advantage"}]),
    "grpo_s": ({"success_share": "geometric"}, []),
    "gtpo_traj": ({"preset": "paper"}, [{"name": "high_entropy_tokens", "rho": 0.5}]),
}


def compose_config(*overrides):
    return compose_gtpo("actor_rollout_ref.rollout.n=4", *TQ_OVERRIDES, *overrides)


def _overrides(name):
    block, transforms = CASES[name]
    out = [f"algorithm.adv_estimator={name}"] + [f"algorithm.{name}.{k}={str(v).lower()}" for k, v in block.items()]
    if transforms:
        entries = ",".join("{" + ",".join(f"{k}:{v}" for k, v in t.items()) + "}" for t in transforms)
        out.append(f"algorithm.adv_transforms=[{entries}]")
    return out


@pytest.fixture(scope="module")
def transfer_queue():
    yield from local_transfer_queue(compose_config().transfer_queue)


@pytest.mark.parametrize("name", list(CASES))
def test_the_mixin_and_the_lab_give_the_same_advantages_and_metrics(transfer_queue, name):
    config = compose_config(*_overrides(name))
    meta, direct = put_v1_batch(transfer_queue, seed=7, prefix=f"same{name}")
    trainer = make_v1_trainer(config)
    trainer_metrics: dict = {}
    trainer._compute_advantage(meta, trainer_metrics)
    fields = read_fields(transfer_queue, meta, "advantages", "response_mask")

    block, transforms = CASES[name]
    method = Method(name=name, estimator=name, algorithm={name: block}, transforms=tuple(transforms))
    initial = trainer.gtpo_state.initial_entropy  # the gate's ⟨H⟩_ini (gtpo_traj paper preset), measured by the mixin
    lab = AdvantageStep.prepare(method, initial)(
        direct["token_level_rewards"], direct["response_mask"], direct["index"], direct["entropys"],
        direct["responses"], direct["old_log_probs"],
    )
    width = fields["advantages"].shape[1]
    torch.testing.assert_close(fields["advantages"], lab.advantages[:, :width], atol=0, rtol=0)
    torch.testing.assert_close(fields["response_mask"], lab.response_mask[:, :width].to(fields["response_mask"].dtype))
    shared = {k for k in lab.metrics if k.startswith(("gtpo/adv/", "gtpo/bonus_share/", "gtpo/conflict/", "gtpo/delta/",
                                                      "gtpo/transform/", "gtpo/success_frac", "gtpo/health/"))}
    shared.discard("gtpo/health/all_equal_groups_frac")  # the lab has no V1 padding rows: it counts them as groups
    assert shared and shared <= set(trainer_metrics)
    assert "gtpo/health/entropy_moved_frac" in shared  # the method's health, the same in the lab and the trainer
    for key in shared:
        assert trainer_metrics[key] == pytest.approx(lab.metrics[key], rel=1e-6, abs=1e-9), key


def test_settings_and_transforms_are_parsed_once_across_steps(transfer_queue, monkeypatch):
    counts = {"settings": 0, "transforms": 0, "block": 0}
    parse_settings, parse_transforms = GTPOSettings.from_config.__func__, advantage_steps.parse_adv_transforms
    parse_block = GTPOTokenConfig.from_config.__func__

    def count(key, parse):
        def counted(*args, **kwargs):
            counts[key] += 1
            return parse(*args, **kwargs)
        return counted

    monkeypatch.setattr(GTPOSettings, "from_config", classmethod(count("settings", parse_settings)))
    monkeypatch.setattr(GTPOTokenConfig, "from_config", classmethod(count("block", parse_block)))
    monkeypatch.setattr(advantage_steps, "parse_adv_transforms", count("transforms", parse_transforms))
    trainer = make_v1_trainer(compose_config(*_overrides("gtpo_token")))
    steps = 3
    for step in range(steps):
        trainer._compute_advantage(put_v1_batch(transfer_queue, seed=20 + step, prefix="once")[0], {})
    assert counts == {"settings": 1, "transforms": 1, "block": 1}


def test_the_lab_prepares_its_settings_once_per_run(monkeypatch):
    from gtpo_verl.lab.tasks import TASKS
    from gtpo_verl.lab.train import LabSize, train_run

    prepared = []
    prepare = AdvantageStep.prepare.__func__
    monkeypatch.setattr(AdvantageStep, "prepare", classmethod(lambda cls, *a, **k: prepared.append(a) or prepare(cls, *a, **k)))
    size = LabSize(steps=3, prompts=2, group=4, eval_every=3, eval_prompts=4, eval_samples=4, warm_start_steps=3,
                   warm_start_batch=8)
    run = train_run(Method(name="t", estimator="gtpo_token", dynamic_sampling=False), TASKS["max_digit"], 3, size)
    assert len(run["curves"]["reward"]) == 3 and len(prepared) == 1


def test_start_up_checks_leave_the_config_as_they_found_it():
    from gtpo_verl.trainer.derive import derive_config
    from gtpo_verl.trainer.validation import check_training_config

    from support.bad_inputs import BASE

    def compose_valid(*overrides):
        return compose_gtpo(*BASE, *overrides)

    differentiable = ("algorithm.adv_estimator=gtpo_traj", "algorithm.gtpo_traj.entropy_reg_mode=differentiable",
                      "algorithm.gtpo_traj.gamma=0.3")
    for overrides in (("algorithm.adv_estimator=gtpo_token",), (*differentiable, "actor_rollout_ref.actor.entropy_coeff=-0.3"),
                      _overrides("gtpo_traj"), ("gtpo.audit.steps=[1]", "gtpo.audit.dir=/tmp/x", "algorithm.adv_estimator=grpo_s")):
        config = compose_valid(*overrides)
        before = OmegaConf.to_yaml(config)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # warnings are not the point here
            check_training_config(config)
        assert OmegaConf.to_yaml(config) == before, overrides
    # the derivation is its own step: without it the check refuses, naming the key; with it the value is set
    config = compose_valid(*differentiable)
    with pytest.raises(ValueError, match=r"entropy_coeff=-0.3.*derives it"):
        check_training_config(config)
    assert derive_config(config) == {"actor_rollout_ref.actor.entropy_coeff": -0.3}
    assert config.actor_rollout_ref.actor.entropy_coeff == pytest.approx(-0.3)
    check_training_config(config)
    assert derive_config(config) == {}  # derived once: a second pass changes nothing


def test_the_context_var_refuses_control_flags():
    with pytest.raises(TypeError):
        with bind_estimator_inputs(diagnostics=True):
            pass
    with pytest.raises(KeyError, match="bound data"):
        from gtpo_verl.plugin.context import bound_estimator_input

        bound_estimator_input("share_stats")


@pytest.mark.parametrize("entropy_share", ["column", "geometric"])
def test_bonus_share_metrics_equal_the_equations(entropy_share):
    """The diagnostics' Σ, Σ², max of the success tokens' shares (the fused call's tables) against the
    shares of the equation layer (S18 column, S20 geometric), over the real O+ rows only."""
    gen = torch.Generator().manual_seed(3)
    rows, width = 24, 9
    lengths = torch.randint(1, width + 1, (rows,), generator=gen)
    mask = (torch.arange(width) < lengths[:, None]).to(torch.int64)
    entropy = torch.rand(rows, width, generator=gen) * 2
    entropy[4:8] = 0.0  # an all-zero group: every share 1 (Remark 2.1)
    entropy[mask == 0] = float("nan")  # garbage off the mask changes nothing
    scores = (torch.rand(rows, generator=gen) < 0.5).float()
    scores[4:8] = 1.0
    real = torch.ones(rows, dtype=torch.bool)
    real[-4:] = False  # padding rows of the batch are left out of the metrics
    group_ids, k = group_ids_from_uids([f"u{i // 4}" for i in range(rows)])
    block = GTPOTokenConfig(entropy_share=entropy_share)
    result = gtpo_token_advantage(mask, scores, group_ids, k, entropy=entropy, **block.function_kwargs())
    batch = EstimatorBatch(owner="t", response_mask=mask, sequence_scores=scores, group_ids=group_ids, num_groups=k,
                           entropys=entropy)
    metrics = estimator_metrics(EstimatorCall("gtpo_token", block, batch, result), mask, real)

    valid = mask > 0
    h = torch.where(valid, entropy, 0.0).double().clamp_min(0.0)
    on_success = (valid & (scores > 0).unsqueeze(-1)).double()
    if entropy_share == "column":
        share = column_share(h, on_success, group_ids, k)
    else:
        share = geometric_share(h, torch.log(h + block.epsilon), on_success)
    kept = share[(scores > 0) & real]
    tokens = float(on_success[real].sum())
    mean = float(kept.sum()) / tokens
    assert metrics["gtpo/bonus_share/mean"] == pytest.approx(mean, rel=1e-5)
    assert metrics["gtpo/bonus_share/std"] == pytest.approx((float(kept.square().sum()) / tokens - mean * mean) ** 0.5, rel=1e-4)
    assert metrics["gtpo/bonus_share/max"] == pytest.approx(float(kept.max()), rel=1e-5)


def test_the_health_check_reads_the_call_only_where_its_scores_are_the_rewards():
    """The all-equal-groups check reuses a table estimator's own scores and groups, except when the token
    rewards carry a KL penalty (then they are no longer the scores) or the estimator is not the table's."""
    settings = advantage_steps.AdvantageSettings.from_config
    assert settings(compose_config("algorithm.adv_estimator=gtpo_token")).health_from_call
    assert not settings(compose_config("algorithm.adv_estimator=gtpo_token", "algorithm.use_kl_in_reward=true")).health_from_call
    assert not settings(compose_config("algorithm.adv_estimator=grpo")).health_from_call
