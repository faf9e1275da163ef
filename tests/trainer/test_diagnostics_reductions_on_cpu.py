"""The gtpo/* diagnostics from masked reductions equal the same statistics from selected copies, and
GRPO-S's bonus share is the estimator's own share (one rule, not a second one in the diagnostics)."""

import math

import pytest
import torch

from gtpo_verl.algorithms.groups import group_ids_from_uids
from gtpo_verl.algorithms.kernels.gtpo_token import gtpo_token_advantage
from gtpo_verl.algorithms.sequence_shaping import grpo_s_advantage
from gtpo_verl.plugin.extensions import INPUT_FIELDS, estimator_inputs
from gtpo_verl.plugin.estimators import EstimatorBatch, EstimatorCall
from gtpo_verl.plugin.estimators.grpo_s import GRPOSConfig
from gtpo_verl.plugin.estimators.gtpo_token import GTPOTokenConfig
from gtpo_verl.trainer.diagnostics import estimator_metrics, masked_token_mean


def _batch(rows=24, width=10, seed=0):
    gen = torch.Generator().manual_seed(seed)
    entropy = torch.rand(rows, width, generator=gen) * 2
    lengths = torch.randint(0, width + 1, (rows,), generator=gen)
    mask = (torch.arange(width) < lengths[:, None]).to(torch.int64)
    entropy[mask == 0] = 123.0  # garbage outside the mask
    scores = (torch.rand(rows, generator=gen) < 0.5).float()
    group_ids, k = group_ids_from_uids([f"u{i % 4}" for i in range(rows)])
    real = torch.ones(rows, dtype=torch.bool)
    real[-2:] = False  # V1 padding rows
    return entropy, mask, scores, group_ids, k, real


def _call(name, block, mask, scores, group_ids, k, entropy, result):
    batch = EstimatorBatch(owner=name, response_mask=mask, sequence_scores=scores, group_ids=group_ids, num_groups=k,
                           entropys=entropy)
    return EstimatorCall(name, block, batch, result)


def _selected_stats(values, mask, rows):
    picked = values[rows][mask[rows] > 0].double()
    if not picked.numel():
        return dict(mean=0.0, std=0.0, min=0.0, max=0.0, tokens=0.0)
    return dict(mean=float(picked.mean()), std=float(picked.std(unbiased=False)), min=float(picked.min()),
                max=float(picked.max()), tokens=float(picked.numel()))


@pytest.mark.parametrize("name", ["gtpo_token", "grpo_s"])
def test_token_stats_equal_boolean_selection(name):
    entropy, mask, scores, group_ids, k, real = _batch()
    if name == "gtpo_token":
        block = GTPOTokenConfig(alpha1=0.9, alpha2=0.1, negative_shaping=True)
        result = gtpo_token_advantage(mask, scores, group_ids, k, entropy=entropy, **block.function_kwargs())
    else:
        block = GRPOSConfig(beta1=1.0, beta2=0.1)
        result = grpo_s_advantage(mask, scores, group_ids, k, entropy=entropy, **block.function_kwargs())
    metrics = estimator_metrics(_call(name, block, mask, scores, group_ids, k, entropy, result), mask, real)
    valid_rows = real & (mask.sum(-1) > 0)
    for label, rows in (("success", result.success & valid_rows), ("failure", ~result.success & valid_rows)):
        expected = _selected_stats(result.advantages, mask, rows)
        for stat, value in expected.items():
            assert metrics[f"gtpo/adv/{label}/{stat}"] == pytest.approx(value, rel=1e-5, abs=1e-6), (label, stat)


@pytest.mark.parametrize("success_share", ["arithmetic", "geometric"])
@pytest.mark.parametrize("zero_entropy_group", [False, True])
def test_grpo_s_bonus_share_is_the_share_the_estimator_rewarded(success_share, zero_entropy_group):
    """gtpo/bonus_share/* of GRPO-S: Ĥ_i over the (arithmetic or geometric) mean Ĥ of its group's
    successes, 1 where they all have Ĥ = 0 (Eq. S31), from a loop over the groups written here."""
    entropy, mask, scores, group_ids, k, real = _batch()
    if zero_entropy_group:
        entropy[group_ids == 0] = 0.0
    epsilon = 1e-6
    result = grpo_s_advantage(mask, scores, group_ids, k, entropy=entropy, beta1=1.0, beta2=0.1,
                              success_share=success_share, epsilon=epsilon)
    block = GRPOSConfig(beta1=1.0, beta2=0.1, success_share=success_share, epsilon=epsilon)
    metrics = estimator_metrics(_call("grpo_s", block, mask, scores, group_ids, k, entropy, result), mask, real)
    expected = []
    for i in range(len(scores)):
        members = [j for j in range(len(scores)) if group_ids[j] == group_ids[i] and bool(result.success[j])]
        if not (bool(result.success[i]) and bool(real[i])):
            continue
        h = [float(result.mean_entropy[j]) for j in members]
        if success_share == "arithmetic":
            mean = sum(h) / len(h)
            expected.append(float(result.mean_entropy[i]) / mean if mean > 0 else 1.0)
        else:
            geometric = math.exp(sum(math.log(x + epsilon) for x in h) / len(h))
            expected.append(float(result.mean_entropy[i]) / geometric)
    assert expected
    picked = torch.tensor(expected, dtype=torch.float64)
    assert metrics["gtpo/bonus_share/mean"] == pytest.approx(float(picked.mean()), rel=1e-5)
    assert metrics["gtpo/bonus_share/std"] == pytest.approx(float(picked.std(unbiased=False)), rel=1e-4, abs=1e-7)
    assert metrics["gtpo/bonus_share/max"] == pytest.approx(float(picked.max()), rel=1e-5)


def test_masked_token_mean_ignores_padding_rows_and_garbage():
    entropy, mask, _, _, _, real = _batch()
    expected = float(entropy[(mask > 0) & real.unsqueeze(-1)].double().mean())
    assert masked_token_mean(entropy, mask, real) == pytest.approx(expected, rel=1e-6)
    assert masked_token_mean(entropy, torch.zeros_like(mask), real) == 0.0


def test_only_gtpo_traj_fetches_token_ids():
    import gtpo_verl.plugin.registry  # noqa: F401  (registers the estimators)

    def fields(name):
        return tuple(INPUT_FIELDS[i] for i in estimator_inputs(name))

    assert fields("gtpo_token") == ("entropy",)
    assert fields("grpo_s") == ("entropy",)
    assert set(fields("gtpo_traj")) == {"entropy", "responses"}
