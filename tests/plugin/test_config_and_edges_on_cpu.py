"""Config validation (one clear error naming key and fix), preset resolution, degenerate
inputs (finite, zero outside the mask), and reductions to verl's own `grpo`."""

import math

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from torch.testing import assert_close
from verl.trainer.ppo.core_algos import get_adv_estimator_fn

from gtpo_verl.algorithms.groups import group_ids_from_uids
from gtpo_verl.plugin.estimators.grpo_s import GRPOSConfig
from gtpo_verl.plugin.estimators.gtpo_token import GTPOTokenConfig
from gtpo_verl.plugin.estimators.gtpo_traj import GTPOTrajConfig
from gtpo_verl.plugin.estimators import ESTIMATORS


@pytest.mark.parametrize(
    "block,match",
    [
        (
            {"alpha1": 1.0, "alpha2": 0.1, "variant": "clipped_len", "kappa": 3.0, "overlong_buffer_len": 4, "max_response_len": 10},
            r"algorithm.gtpo_token.alpha1.*= 1.1 must be 1 for variant='clipped_len'.*lower clip bound",
        ),
        ({"alpha1": 0.0, "alpha2": 0.0}, r"algorithm.gtpo_token.alpha1.*both 0"),
        ({"variant": "unified_v6", "alpha1": 1.0, "alpha2": 0.1}, r"variant=unified_v6.*needs.*negative_shaping=true"),
        ({"variant": "clipped_len", "kappa": 1.0, "overlong_buffer_len": 4, "max_response_len": 10}, r"kappa=1.0.*> 1"),
        ({"variant": "clipped_len", "kappa": 20.0, "overlong_buffer_len": 4, "max_response_len": 10}, r"κ ≤ α1/α2 = 9"),
        ({"variant": "clipped_len", "kappa": 3.0, "overlong_buffer_len": 10, "max_response_len": 4}, r"overlong_buffer_len"),
        ({"variant": "v7"}, r"gtpo_token.variant='v7'.*choose one of"),
        ({"adv_norm": "zscore"}, r"adv_norm"),
        ({"alpha2": -0.1, "alpha1": 1.1}, r"alpha2=-0.1.*>= 0"),
        ({"alpha_2": 0.1}, r"unknown key.*algorithm.gtpo_token.alpha_2.*valid keys"),
    ],
)
def test_gtpo_token_config_errors(block, match):
    with pytest.raises(ValueError, match=match):
        GTPOTokenConfig.from_algorithm_config(OmegaConf.create({"gtpo_token": block}))


def test_valid_token_configs():
    assert GTPOTokenConfig.from_algorithm_config(None).alpha1 == 0.9
    v6 = GTPOTokenConfig.from_dict({"variant": "unified_v6", "alpha1": 1.0, "alpha2": 0.1, "negative_shaping": True})
    assert v6.alpha1 + v6.alpha2 == pytest.approx(1.1)
    one_weight = GTPOTokenConfig.from_dict({"alpha1": 1.0, "alpha2": 0.1})  # the seed text's r_i + α·share
    assert (one_weight.variant, one_weight.alpha1, one_weight.alpha2) == ("base", 1.0, 0.1)
    GTPOTokenConfig.from_dict({"variant": "clipped_len", "kappa": 9.0, "overlong_buffer_len": 4096, "max_response_len": 20480})


@pytest.mark.parametrize(
    "cls,block,match",
    [
        (GRPOSConfig, {"negative_share": "harmonic"}, "grpo_s.negative_share"),
        (GRPOSConfig, {"beta2": float("nan")}, "grpo_s.beta2"),
        (GRPOSConfig, {"success_share": "harmonic"}, "grpo_s.success_share"),
        (GRPOSConfig, {"sequence_entropy": "median"}, "grpo_s.sequence_entropy"),
        (GRPOSConfig, {"beta1": 0.0, "beta2": 0.0}, r"grpo_s.beta1.*both 0"),
        (GRPOSConfig, {"variant": "unified_v6", "beta1": 1.0}, r"grpo_s.variant=unified_v6.*needs.*grpo_s.negative_shaping=true"),
        (GTPOTrajConfig, {"preset": "unsloth"}, r"gtpo_traj.preset='unsloth'.*official"),
        (GTPOTrajConfig, {"gamma": -1.0}, r"gtpo_traj.gamma=-1.0.*set 0 to disable"),
        (GTPOTrajConfig, {"overlap": "max"}, "gtpo_traj.overlap"),
        (GTPOTrajConfig, {"entropy_threshold": 0.0}, "gtpo_traj.entropy_threshold"),
        (GTPOTrajConfig, {"entropy_threshold_ratio": 0.0}, "gtpo_traj.entropy_threshold_ratio"),
        (GTPOTrajConfig, {"entropy_threshold_ratio": 1.5, "entropy_threshold": 3.0},
         r"gtpo_traj.entropy_threshold_ratio=1.5.*gtpo_traj.entropy_threshold=3.0.*both set.*=null"),
    ],
)
def test_other_config_errors(cls, block, match):
    with pytest.raises(ValueError, match=match):
        cls.from_dict(block)


def test_presets_resolve_and_explicit_keys_win():
    official = GTPOTrajConfig().resolved_choices()
    assert official == dict(overlap="product", divisor="code", entropy_threshold=0.7, norm_adv_by_std=False, ini_entropy_gate=False)
    paper = GTPOTrajConfig(preset="paper").resolved_choices()
    assert paper == dict(overlap="union", divisor="none", entropy_threshold=math.log(2), norm_adv_by_std=True, ini_entropy_gate=True)
    assert GTPOTrajConfig(preset="paper", divisor="union").resolved_choices()["divisor"] == "union"


def _batch(prompts=4, group=4, width=6, seed=0, scores=None, entropy_scale=1.0):
    g = torch.Generator().manual_seed(seed)
    rows = prompts * group
    lengths = torch.randint(1, width + 1, (rows,), generator=g)
    mask = (torch.arange(width).unsqueeze(0) < lengths.unsqueeze(1)).to(torch.int64)
    score = torch.randint(0, 2, (rows,), generator=g).float() if scores is None else scores
    rewards = torch.zeros(rows, width)
    rewards[torch.arange(rows), lengths - 1] = score
    entropy = torch.rand(rows, width, generator=g) * entropy_scale
    responses = torch.randint(0, 3, (rows, width), generator=g)
    uids = np.array([f"u{i // group}" for i in range(rows)], dtype=object)
    return rewards, mask, uids, entropy, responses


def _run(name, rewards, mask, uids, entropy, responses, block=None):
    cfg = OmegaConf.create({name: block or {}})
    adv, ret = get_adv_estimator_fn(name)(rewards, mask, index=uids, config=cfg, entropys=entropy, responses=responses)
    assert torch.isfinite(adv).all()
    assert torch.equal(adv * (1 - mask), torch.zeros_like(adv))
    assert adv is ret or torch.equal(adv, ret)
    return adv


DEGENERATE = {
    "all_fail": dict(scores=torch.zeros(16)),
    "all_succeed": dict(scores=torch.ones(16)),
    "zero_entropy": dict(entropy_scale=0.0),
    "dapo_scores": dict(scores=torch.tensor([1.0, -1.0, -0.5, 1.0] * 4)),
}


@pytest.mark.parametrize("case", list(DEGENERATE))
@pytest.mark.parametrize(
    "name,block",
    [
        ("gtpo_token", {}),
        ("gtpo_token", {"negative_shaping": True}),
        ("gtpo_token", {"variant": "unified_v6", "alpha1": 1.0, "negative_shaping": True, "entropy_share": "geometric"}),
        ("gtpo_token", {"uniform_outcome_groups": "zero_adv"}),
        ("grpo_s", {"negative_shaping": True}),
        ("grpo_s", {"variant": "unified_v6", "beta1": 1.0, "negative_shaping": True, "negative_share": "geometric"}),
        ("gtpo_traj", {}),
        ("gtpo_traj", {"preset": "paper", "initial_entropy": 0.2}),
    ],
)
def test_degenerate_groups_stay_finite(case, name, block):
    _run(name, *_batch(**DEGENERATE[case]), block=block)


@pytest.mark.parametrize("name", list(ESTIMATORS))
def test_v1_padding_rows_single_groups_and_one_token_responses(name):
    rewards, mask, uids, entropy, responses = _batch()
    mask[:, 1:] = 0  # one-token responses
    mask[-3:] = 0  # V1 padding rows: all-masked, uid `pad…`, reward 0
    rewards = rewards * mask
    uids[-3:] = ["pad0a", "pad0b", "pad0c"]
    uids[0] = "lonely"  # a group of size 1
    adv = _run(name, rewards, mask, uids, entropy, responses)
    assert torch.equal(adv[-3:], torch.zeros_like(adv[-3:]))


def test_uniform_groups_get_zero_with_zero_adv():
    rewards, mask, uids, entropy, responses = _batch(scores=torch.ones(16))
    adv = _run("gtpo_token", rewards, mask, uids, entropy, responses, {"uniform_outcome_groups": "zero_adv"})
    assert torch.equal(adv, torch.zeros_like(adv))
    kept = _run("gtpo_token", rewards, mask, uids, entropy, responses, {"uniform_outcome_groups": "keep"})
    assert kept.abs().sum() > 0  # entropy redistribution among successes (docs/spec.md B.2)


def test_non_finite_entropy_at_a_valid_position_is_an_error():
    rewards, mask, uids, entropy, responses = _batch()
    entropy[0, 0] = float("nan")
    with pytest.raises(ValueError, match="non-finite"):
        get_adv_estimator_fn("gtpo_token")(rewards, mask, index=uids, config=None, entropys=entropy)


def test_ini_entropy_gate_needs_a_value_and_opens_the_filter():
    rewards, mask, uids, entropy, responses = _batch(entropy_scale=3.0)
    paper = OmegaConf.create({"gtpo_traj": {"preset": "paper"}})
    with pytest.raises(ValueError, match="ini_entropy_gate.*initial_entropy"):
        get_adv_estimator_fn("gtpo_traj")(rewards, mask, index=uids, config=paper, entropys=entropy, responses=responses)
    gated_open = OmegaConf.create({"gtpo_traj": {"preset": "paper", "initial_entropy": 1.0}})  # > ln 2: δ ≡ 1
    no_filter = OmegaConf.create({"gtpo_traj": {"preset": "paper", "entropy_filter_scope": "none", "ini_entropy_gate": False}})
    a, _ = get_adv_estimator_fn("gtpo_traj")(rewards, mask, index=uids, config=gated_open, entropys=entropy, responses=responses)
    b, _ = get_adv_estimator_fn("gtpo_traj")(rewards, mask, index=uids, config=no_filter, entropys=entropy, responses=responses)
    assert_close(a, b)


def test_threshold_ratio_scales_delta_to_the_measured_initial_entropy():
    """δ = ratio·⟨H⟩_ini: the same advantages as the absolute threshold ratio·⟨H⟩_ini, ⟨H⟩_ini bound or given."""
    from gtpo_verl.plugin.context import bind_estimator_inputs

    rewards, mask, uids, entropy, responses = _batch(entropy_scale=3.0)
    per_response = (entropy * mask).sum(1) / mask.sum(1)
    initial = float(per_response.mean())
    ratio = {"gtpo_traj": {"preset": "official", "entropy_threshold_ratio": 1.1}}
    absolute = {"gtpo_traj": {"preset": "official", "entropy_threshold": 1.1 * initial}}
    with pytest.raises(ValueError, match="entropy_threshold_ratio.*initial_entropy"):
        _run("gtpo_traj", rewards, mask, uids, entropy, responses, ratio["gtpo_traj"])
    expected = _run("gtpo_traj", rewards, mask, uids, entropy, responses, absolute["gtpo_traj"])
    with bind_estimator_inputs(initial_entropy=initial):  # as the trainer binds its measured ⟨H⟩_ini
        bound = _run("gtpo_traj", rewards, mask, uids, entropy, responses, ratio["gtpo_traj"])
    given = _run("gtpo_traj", rewards, mask, uids, entropy, responses,
                 dict(ratio["gtpo_traj"], initial_entropy=initial))
    assert_close(bound, expected) and assert_close(given, expected)
    kept = per_response <= 1.1 * initial
    assert 0 < int(kept.sum()) < len(kept)  # the threshold falls inside the batch: the test can tell
    assert GTPOTrajConfig(entropy_threshold_ratio=1.1).threshold(2.0) == pytest.approx(2.2)
    assert GTPOTrajConfig(entropy_threshold_ratio=1.1).needs_initial_entropy
    assert GTPOTrajConfig(entropy_threshold_ratio=1.1, entropy_filter_scope="none").threshold(2.0) is None
    assert not GTPOTrajConfig().needs_initial_entropy and GTPOTrajConfig().threshold() == 0.7


def test_grpo_s_with_no_entropy_weight_is_verl_grpo():
    from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage

    rewards, mask, uids, entropy, _ = _batch(prompts=6)
    ours = _run("grpo_s", rewards, mask, uids, entropy, None, {"beta1": 1.0, "beta2": 0.0})
    verl_adv, _ = compute_grpo_outcome_advantage(rewards, mask.float(), uids)
    assert_close(ours, verl_adv, atol=1e-5, rtol=1e-5)


def test_gtpo_traj_without_its_extras_is_verl_grpo():
    from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage

    rewards, mask, uids, entropy, _ = _batch(prompts=6)
    responses = torch.arange(mask.numel()).view_as(mask)  # no shared token anywhere: λ ≡ 1
    block = {"gamma": 0.0, "entropy_filter_scope": "none", "divisor": "none", "norm_adv_by_std": True}
    ours = _run("gtpo_traj", rewards, mask, uids, None, responses, block)
    verl_adv, _ = compute_grpo_outcome_advantage(rewards, mask.float(), uids)
    assert_close(ours, verl_adv, atol=1e-5, rtol=1e-5)


def test_group_ids_accept_tensor_uids():
    ids, k = group_ids_from_uids(torch.tensor([5, 3, 5]))
    assert k == 2 and ids[0] == ids[2] != ids[1]


def test_share_stats_follow_conservation():
    """Column shares average exactly 1 over success tokens (Σ_{i∈O+_t} share = d_t, Eq. S18)."""
    from gtpo_verl.algorithms.kernels.gtpo_token import gtpo_token_advantage, success_share_rows

    rewards, mask, uids, entropy, _ = _batch(prompts=5, entropy_scale=2.0)
    gid, k = group_ids_from_uids(uids)
    out = gtpo_token_advantage(mask, rewards.sum(-1), gid, k, entropy=entropy, alpha1=0.9, alpha2=0.1)
    rows = success_share_rows(out, mask, entropy=entropy)
    total, total_sq, largest = float(rows[:, 0].sum()), float(rows[:, 1].sum()), float(rows[:, 2].max())
    success_tokens = float(mask[out.success].sum())
    assert total / success_tokens == pytest.approx(1.0, rel=1e-5)
    assert total_sq / success_tokens >= 1.0 - 1e-5 and largest >= 1.0
    assert (rows[~out.success] == 0).all()  # O− rows carry no success share


@pytest.mark.parametrize("name", list(ESTIMATORS))
def test_row_blocking_changes_nothing(monkeypatch, name):
    """CPU estimators work in row blocks; tiny blocks (many blocks, a ragged last one) must give
    bitwise the same advantages as one block."""
    from gtpo_verl.algorithms import blocks

    rewards, mask, uids, entropy, responses = _batch(prompts=5, group=3, width=7)
    block = {"negative_shaping": True} if name != "gtpo_traj" else {}
    whole = _run(name, rewards, mask, uids, entropy, responses, block)
    monkeypatch.setattr(blocks, "CPU_BLOCK_ELEMENTS", 2 * 7)  # two rows per block, 15 rows
    blocked = _run(name, rewards, mask, uids, entropy, responses, block)
    assert torch.equal(whole, blocked)
