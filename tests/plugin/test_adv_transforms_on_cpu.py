"""``algorithm.adv_transforms`` composed through Hydra and run after verl's own ``grpo``: through verl's
real ``compute_advantage`` and through the mixin's real ``_compute_advantage`` against a real local
TransferQueue (Ray + TQ SimpleStorage on CPU), both against float64 references written here;
the fields fetched; start-up validation of names and knobs."""

import math
from collections import defaultdict

import numpy as np
import pytest
import torch
from torch.testing import assert_close

from support.hydra import compose_gtpo
from support.transfer_queue import TQ_OVERRIDES, local_transfer_queue
from support.v1_batch import make_v1_trainer, put_v1_batch, read_fields

HIGH = "algorithm.adv_transforms=[{name:high_entropy_tokens,rho:0.3}]"
HIGH_KEPT = "algorithm.adv_transforms=[{name:high_entropy_tokens,rho:0.3,normalize_over:kept}]"
BONUS = "algorithm.adv_transforms=[{name:entropy_advantage}]"  # the paper's α = 0.4, κ = 2
BOTH = "algorithm.adv_transforms=[{name:high_entropy_tokens,rho:0.5},{name:entropy_advantage,alpha:1.0,kappa:3.0}]"


def compose_config(*overrides):
    return compose_gtpo("actor_rollout_ref.rollout.n=4", *TQ_OVERRIDES, *overrides)


# ----------------------------------------------------------------------------- float64 references
def reference_grpo(rewards, mask, uids, eps=1e-6):
    """verl's GRPO: (r − mean)/(std_unbiased + ε) per uid group; a lone response gets r − 0 over 1 + ε."""
    scores = rewards.double().sum(-1).tolist()
    groups = defaultdict(list)
    for i, uid in enumerate(uids):
        groups[uid].append(scores[i])
    out = torch.zeros(mask.shape, dtype=torch.float64)
    for i, uid in enumerate(uids):
        members = groups[uid]
        if len(members) == 1:
            mean, std = 0.0, 1.0
        else:
            mean = sum(members) / len(members)
            std = math.sqrt(sum((s - mean) ** 2 for s in members) / (len(members) - 1))
        for t in range(mask.shape[1]):
            out[i, t] = (scores[i] - mean) / (std + eps) * float(mask[i, t])
    return out


def reference_high_entropy(adv, entropy, mask, rho):
    h, valid = entropy.double().numpy(), mask.numpy().astype(bool)
    tau = np.quantile(h[valid], 1.0 - rho, method="linear")
    kept = torch.zeros(mask.shape, dtype=torch.bool)
    out = adv.clone()
    for i in range(mask.shape[0]):
        for t in range(mask.shape[1]):
            kept[i, t] = bool(valid[i, t] and h[i, t] >= tau)
            if not kept[i, t]:
                out[i, t] = 0.0
    return out, kept


def reference_bonus(adv, entropy, mask, alpha, kappa):
    out = torch.zeros_like(adv)
    for i in range(mask.shape[0]):
        for t in range(mask.shape[1]):
            if mask[i, t]:
                a = float(adv[i, t])
                out[i, t] = a + min(alpha * float(entropy[i, t]), abs(a) / kappa)
    return out


def reference(transforms_override, rewards, mask, uids, entropy):
    adv = reference_grpo(rewards, mask, uids)
    kept = mask.bool()
    if "high_entropy_tokens,rho:0.3" in transforms_override:
        adv, kept = reference_high_entropy(adv, entropy, mask, 0.3)
    elif transforms_override == BOTH:
        adv, kept = reference_high_entropy(adv, entropy, mask, 0.5)
        adv = reference_bonus(adv, entropy, mask, 1.0, 3.0)
    if transforms_override == BONUS:
        adv = reference_bonus(adv, entropy, mask, 0.4, 2.0)
    return adv, kept


def offline_batch(seed=0, prompts=4, group=4, width=9):
    g = torch.Generator().manual_seed(seed)
    rows = prompts * group
    lengths = torch.randint(1, width + 1, (rows,), generator=g)
    mask = (torch.arange(width).unsqueeze(0) < lengths.unsqueeze(1)).to(torch.int64)
    rewards = torch.zeros(rows, width)
    rewards[torch.arange(rows), lengths - 1] = torch.randint(0, 2, (rows,), generator=g).float()
    entropy = torch.rand(rows, width, generator=g) * 2
    uids = np.array([f"u{i // group}" for i in range(rows)], dtype=object)
    return rewards, mask, uids, entropy


# ----------------------------------------------------------------------------- verl's compute_advantage
@pytest.mark.parametrize("override", [HIGH, BONUS, BOTH])
def test_grpo_plus_transform_through_verl_compute_advantage(override):
    from verl import DataProto
    from verl.trainer.ppo.ray_trainer import compute_advantage

    from gtpo_verl.plugin.extensions import apply_adv_transforms
    from gtpo_verl.trainer.validation import validate_adv_transforms

    config = compose_config("algorithm.adv_estimator=grpo", override)
    transforms = validate_adv_transforms(config)
    rewards, mask, uids, entropy = offline_batch()
    data = DataProto.from_dict(tensors={"token_level_rewards": rewards, "response_mask": mask}, non_tensors={"uid": uids})
    data = compute_advantage(data, adv_estimator=config.algorithm.adv_estimator, config=config.algorithm)
    advantages, new_mask = apply_adv_transforms(transforms, data.batch["advantages"], mask, {"entropys": entropy}, {})
    expected, _ = reference(override, rewards, mask, uids, entropy)
    assert_close(advantages.double(), expected, rtol=1e-5, atol=1e-6)
    assert torch.equal(new_mask, mask)  # normalize_over=valid leaves verl's mask alone


# ----------------------------------------------------------------------------- the mixin against TQ
@pytest.fixture(scope="module")
def transfer_queue():
    yield from local_transfer_queue(compose_config().transfer_queue)


@pytest.fixture
def fetched(monkeypatch):
    """Records every ``select_fields`` list the advantage step asks TransferQueue for (then reads for real)."""
    import transfer_queue as tq

    calls, real_get = [], tq.kv_batch_get

    def recording_get(*args, **kwargs):
        calls.append(list(kwargs.get("select_fields") or []))
        return real_get(*args, **kwargs)

    monkeypatch.setattr(tq, "kv_batch_get", recording_get)
    return calls


@pytest.mark.parametrize("override", [HIGH, HIGH_KEPT, BONUS, BOTH])
def test_grpo_plus_transform_through_the_mixin(transfer_queue, fetched, override):
    config = compose_config("algorithm.adv_estimator=grpo", override, "gtpo.diagnostics=false")
    meta, direct = put_v1_batch(transfer_queue, seed=3, prefix="t" + str(abs(hash(override)) % 10**6))
    metrics = {}
    make_v1_trainer(config)._compute_advantage(meta, metrics)
    step_reads = list(fetched)
    out = read_fields(transfer_queue, meta, "advantages", "returns", "response_mask")
    mask = direct["response_mask"]
    expected, kept = reference(override, direct["token_level_rewards"], mask, list(direct["index"]), direct["entropys"])
    width = out["advantages"].shape[1]
    assert_close(out["advantages"].double(), expected[:, :width], rtol=1e-5, atol=1e-6)
    assert torch.equal(out["returns"], out["advantages"])  # GRPO: returns are the advantages
    assert torch.equal(out["advantages"][-2:], torch.zeros_like(out["advantages"][-2:]))  # V1 padding rows
    if override == HIGH_KEPT:  # the official code's denominator: verl's loss counts the kept tokens only
        assert torch.equal(out["response_mask"].bool(), kept[:, :width])
    else:
        assert torch.equal(out["response_mask"], mask[:, :width])
    # one read of the declared input before verl's step (diagnostics off: nothing else), one read-back after
    ours = [c for c in step_reads if "entropy" in c or "advantages" in c]
    assert ours == [["entropy"], ["advantages", "returns", "response_mask"]]
    assert not [k for k in metrics if k.startswith("gtpo/")]  # diagnostics off


def test_transform_diagnostics(transfer_queue):
    config = compose_config("algorithm.adv_estimator=grpo", BOTH)
    meta, direct = put_v1_batch(transfer_queue, seed=4, prefix="diag")
    metrics = {}
    make_v1_trainer(config)._compute_advantage(meta, metrics)
    mask = direct["response_mask"]
    valid = int(mask.sum())
    _, kept = reference_high_entropy(torch.zeros(mask.shape, dtype=torch.float64), direct["entropys"], mask, 0.5)
    assert metrics["gtpo/transform/high_entropy_tokens/kept_fraction"] == pytest.approx(int(kept.sum()) / valid)
    assert metrics["gtpo/transform/high_entropy_tokens/kept_tokens"] == int(kept.sum())
    h = direct["entropys"].double().numpy()[mask.numpy().astype(bool)]
    assert metrics["gtpo/transform/high_entropy_tokens/entropy_threshold"] == pytest.approx(np.quantile(h, 0.5))
    assert {"gtpo/transform/entropy_advantage/bonus_mean", "gtpo/transform/entropy_advantage/clipped_fraction"} <= set(metrics)
    assert "gtpo/entropy/batch_mean" in metrics  # the entropy watch, from the same single read
    assert all(math.isfinite(v) for k, v in metrics.items() if k.startswith("gtpo/"))


def test_gtpo_token_plus_entropy_advantage(transfer_queue, fetched):
    from verl.trainer.ppo.core_algos import get_adv_estimator_fn

    from gtpo_verl.plugin.estimators import ESTIMATORS

    config = compose_config("algorithm.adv_estimator=gtpo_token", BONUS)
    meta, direct = put_v1_batch(transfer_queue, seed=5, prefix="tok")
    metrics = {}
    make_v1_trainer(config)._compute_advantage(meta, metrics)
    step_reads = list(fetched)
    got = read_fields(transfer_queue, meta, "advantages")["advantages"]
    inputs = {k: direct[k] for k in ("token_level_rewards", "response_mask", "index", "entropys")}
    estimator, _ = get_adv_estimator_fn("gtpo_token")(config=config.algorithm, **inputs)
    expected = reference_bonus(estimator.double(), direct["entropys"], direct["response_mask"], 0.4, 2.0)
    assert_close(got.double(), expected[:, : got.shape[1]], rtol=1e-5, atol=1e-6)
    # estimator and transform share one read of the one field verl never fetches; the health check reads
    # the estimator's own scores and groups, so rm_scores and uid come only with verl's own read
    assert [c for c in step_reads if "entropy" in c] == [["entropy"]]
    assert sum("rm_scores" in c or "uid" in c for c in step_reads) == 1
    assert "gtpo/health/all_equal_groups_frac" in metrics
    assert "gtpo/adv/success/mean" in metrics and "gtpo/transform/entropy_advantage/bonus_mean" in metrics


# ----------------------------------------------------------------------------- start-up validation
def validate(*overrides):
    from gtpo_verl.trainer.validation import validate_gtpo_config

    return validate_gtpo_config(compose_config(*overrides))


@pytest.mark.parametrize(
    "override,match",
    [
        ("algorithm.adv_transforms=[{name:nope}]", r"algorithm.adv_transforms\[0\].name=nope.*entropy_advantage"),
        ("algorithm.adv_transforms=[{name:entropy_advantage},{name:high_entropy_tokens,bogus:1}]",
         r"algorithm.adv_transforms\[1\].bogus.*valid keys: \['normalize_over', 'rho'\]"),
        ("algorithm.adv_transforms=[{name:high_entropy_tokens,rho:0}]", r"algorithm.adv_transforms\[0\].rho=0.*0.2"),
        ("algorithm.adv_transforms=[{name:high_entropy_tokens,normalize_over:all}]",
         r"algorithm.adv_transforms\[0\].normalize_over='all'.*\['valid', 'kept'\]"),
        ("algorithm.adv_transforms=[{name:entropy_advantage,kappa:0}]", r"algorithm.adv_transforms\[0\].kappa=0"),
        ("algorithm.adv_transforms=[{rho:0.2}]", r"algorithm.adv_transforms\[0\].*needs a `name`"),
        ("algorithm.adv_transforms=entropy_advantage", r"must be a list"),
    ],
)
def test_transform_config_errors(override, match):
    with pytest.raises(ValueError, match=match):
        validate("algorithm.adv_estimator=grpo", override)


def test_bypass_mode_has_no_entropy_for_a_transform():
    with pytest.raises(ValueError, match=r"adv_transforms\[0\].name=entropy_advantage.*bypass_mode=false"):
        validate("algorithm.adv_estimator=grpo", BONUS, "algorithm.rollout_correction.bypass_mode=true")


def test_high_entropy_tokens_warns_off_token_mean():
    from gtpo_verl.trainer.validation import GTPOConfigWarning

    with pytest.warns(GTPOConfigWarning, match="loss_agg_mode=token-mean"):
        validate("algorithm.adv_estimator=grpo", HIGH, "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean")


def test_default_is_no_transform_and_paper_setups_validate_silently():
    import warnings

    assert list(compose_config().algorithm.adv_transforms) == []
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert validate("algorithm.adv_estimator=grpo", HIGH) == []
        assert validate("algorithm.adv_estimator=grpo", BONUS) == []


# ----------------------------------------------------------------------------- the public decorators
@pytest.fixture
def scratch_registries(monkeypatch):
    """verl's estimator registry and gtpo_verl's declared-input and transform registries, restored after the test."""
    from verl.trainer.ppo import core_algos

    from gtpo_verl.plugin import extensions

    monkeypatch.setattr(core_algos, "ADV_ESTIMATOR_REGISTRY", dict(core_algos.ADV_ESTIMATOR_REGISTRY))
    monkeypatch.setattr(extensions, "_ESTIMATOR_INPUTS", dict(extensions._ESTIMATOR_INPUTS))
    monkeypatch.setattr(extensions, "_TRANSFORMS", dict(extensions._TRANSFORMS))


def test_a_user_transform_through_the_public_decorator(scratch_registries):
    from dataclasses import dataclass

    import gtpo_verl
    from gtpo_verl.plugin.extensions import apply_adv_transforms, parse_adv_transforms

    @dataclass(frozen=True)
    class Knobs:
        factor: float = 1.0

        def __post_init__(self):
            if not self.factor > 0:
                raise gtpo_verl.KnobError("factor", "must be > 0; e.g. 0.5.")

    @gtpo_verl.register_adv_transform("scale_by_entropy", inputs=("entropys",), knobs=Knobs)
    def scale_by_entropy(advantages, response_mask, knobs, *, entropys):
        keep = entropys > 0.5  # also narrows the mask to those tokens
        return gtpo_verl.TransformResult(advantages * (1 + knobs.factor * entropys), keep, {"kept": float(keep.sum())})

    with pytest.raises(ValueError, match=r"algorithm.adv_transforms\[0\].factor=0`: must be > 0"):
        parse_adv_transforms([{"name": "scale_by_entropy", "factor": 0}])
    transforms = parse_adv_transforms([{"name": "scale_by_entropy", "factor": 0.5}])
    adv, mask = torch.ones(2, 3), torch.tensor([[1, 1, 0], [1, 0, 0]])
    entropy = torch.tensor([[0.2, 1.0, 9.0], [0.8, 9.0, 9.0]])
    metrics = {}
    new, new_mask = apply_adv_transforms(transforms, adv, mask, {"entropys": entropy}, metrics)
    assert_close(new, 1 + 0.5 * entropy)
    assert new_mask.tolist() == [[0, 1, 0], [1, 0, 0]]  # a subset of verl's mask, never more
    assert metrics == {"gtpo/transform/scale_by_entropy/kept": 5.0}  # entropies > 0.5: 1.0, 9.0 / 0.8, 9.0, 9.0
    with pytest.raises(ValueError, match="needs `entropys`.*python -m gtpo_verl.main"):
        apply_adv_transforms(transforms, adv, mask, {})
    with pytest.raises(ValueError, match="unknown input"):
        gtpo_verl.register_adv_transform("bad", inputs=("logits",))


def test_a_user_estimator_receives_old_log_probs_through_the_mixin(transfer_queue, fetched, scratch_registries):
    import gtpo_verl

    received = {}

    @gtpo_verl.register_entropy_aware_estimator("old_logp_probe", inputs=("old_log_probs",))
    def old_logp_probe(token_level_rewards, response_mask, index=None, config=None, *, old_log_probs, **kwargs):
        received["old_log_probs"] = old_log_probs.clone()
        return old_log_probs * response_mask, old_log_probs * response_mask

    config = compose_config("algorithm.adv_estimator=old_logp_probe", "gtpo.diagnostics=false")
    meta, direct = put_v1_batch(transfer_queue, seed=8, prefix="olp")
    make_v1_trainer(config)._compute_advantage(meta, {})
    width = received["old_log_probs"].shape[1]
    assert torch.equal(received["old_log_probs"], direct["old_log_probs"][:, :width])
    assert [c for c in fetched if "old_log_probs" in c][0] == ["old_log_probs"]  # exactly the declared field
    assert not [c for c in fetched if "entropy" in c]  # diagnostics off: no entropy read at all
