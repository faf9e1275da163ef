"""Fidelity edges: negative entropies from rounding, Paper A's tie rule at every reward scale,
and GRPO-S's arithmetic/geometric switches against an independent float64 reference."""

import itertools
import math

import pytest
import torch

from gtpo_verl.algorithms.sequence_shaping import grpo_s_advantage
from gtpo_verl.algorithms.kernels.gtpo_token import gtpo_token_advantage
from gtpo_verl.algorithms.trajectory import group_relative_advantage, gtpo_traj_advantage


def _batch(rows=12, width=6, groups=3, seed=0):
    gen = torch.Generator().manual_seed(seed)
    entropy = torch.rand(rows, width, generator=gen) * 2
    lengths = torch.randint(1, width + 1, (rows,), generator=gen)
    mask = (torch.arange(width) < lengths[:, None]).to(torch.int64)
    scores = torch.tensor([1.0, 0.0] * (rows // 2))
    group_ids = torch.arange(rows) % groups
    return entropy, mask, scores, group_ids, groups


TOKEN_SWITCHES = list(itertools.product([False, True], ["base", "clipped_len", "unified_v6"], ["column", "geometric"]))


@pytest.mark.parametrize("negative,variant,share", TOKEN_SWITCHES)
def test_gtpo_token_negative_entropy_is_zero(negative, variant, share):
    """An entropy of −2e-6 (rounding) behaves as 0: finite, and equal to the run with 0."""
    entropy, mask, scores, group_ids, k = _batch()
    entropy[0, 0] = 0.0
    entropy[1, 0] = 0.0
    rounded = entropy.clone()
    rounded[0, 0] = -2e-6
    rounded[1, 0] = -2e-6
    kwargs = dict(
        alpha1=0.5 if variant == "clipped_len" else 0.9, alpha2=0.5 if variant == "clipped_len" else 0.1,
        negative_shaping=negative, variant=variant, entropy_share=share, kappa=2.0,
        overlong_buffer_len=2, max_response_len=6,
    )
    exact = gtpo_token_advantage(mask, scores, group_ids, k, entropy=entropy, **kwargs).advantages
    out = gtpo_token_advantage(mask, scores, group_ids, k, entropy=rounded, **kwargs).advantages
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, exact)


@pytest.mark.parametrize("negative,share,entropy_mean", list(itertools.product(
    [False, True], ["arithmetic", "geometric"], ["arithmetic", "geometric"])))
def test_grpo_s_negative_entropy_is_zero(negative, share, entropy_mean):
    entropy, mask, scores, group_ids, k = _batch()
    entropy[:2, :] = 0.0  # a success and a failure with zero entropy everywhere
    rounded = entropy.clone()
    rounded[:2, 0] = -2e-6
    kwargs = dict(beta1=1.0, beta2=0.1, negative_shaping=negative, negative_share=share,
                  success_share=share, sequence_entropy=entropy_mean)
    exact = grpo_s_advantage(mask, scores, group_ids, k, entropy=entropy, **kwargs).advantages
    out = grpo_s_advantage(mask, scores, group_ids, k, entropy=rounded, **kwargs).advantages
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, exact)


@pytest.mark.parametrize("preset", [dict(entropy_threshold=0.7), dict(entropy_threshold=math.log(2), norm_adv_by_std=True)])
def test_gtpo_traj_negative_entropy_is_zero(preset):
    entropy, mask, scores, group_ids, k = _batch()
    responses = torch.randint(1, 50, mask.shape)
    entropy[0] = 0.0
    rounded = entropy.clone()
    rounded[0, 0] = -2e-6
    exact = gtpo_traj_advantage(mask, scores, group_ids, k, responses=responses, entropy=entropy, **preset)
    out = gtpo_traj_advantage(mask, scores, group_ids, k, responses=responses, entropy=rounded, **preset)
    assert torch.isfinite(out.advantages).all() and float(out.mean_entropy[0]) == 0.0
    torch.testing.assert_close(out.advantages, exact.advantages)


@pytest.mark.parametrize(
    "rewards,expected",
    [
        # |r − mean| ≤ 1e-6·(1 + mean|r|): for rewards of order 1 or below the tolerance is ~1e-6, absolute
        ([0.0, 1e-7], [0.0, 0.0]),  # |A| = 5e-8 ≤ 1e-6·(1 + 5e-8): a tie, the group is inactive
        ([0.0, 4e-6], [-2e-6, 2e-6]),  # |A| = 2e-6 > 1e-6·(1 + 2e-6)
        ([0.0, 1e-5], [-5e-6, 5e-6]),
        ([0.0, 1e-3], [-5e-4, 5e-4]),
        # for large rewards it is relative to the mean magnitude
        ([1e4, 1e4 + 0.1], [-0.05, 0.05]),  # 0.05 > 1e-6·(1 + 1e4) ≈ 0.01
        ([1e4, 1e4 + 0.004], [0.0, 0.0]),  # 0.002 ≤ 0.01
        ([1e6, 1e6 + 1.0], [0.0, 0.0]),  # |A| = 0.5 ≤ 1e-6·(1 + 1e6 + 0.5) ≈ 1.0
        ([1e6, 1e6 + 4.0], [-2.0, 2.0]),  # |A| = 2 > 1e-6·(1 + 1e6 + 2) ≈ 1.0
        ([20.0, 20.0 + 1e-5], [0.0, 0.0]),  # Paper A's scale: |A| = 5e-6 ≤ 2.1e-5
    ],
)
def test_paper_a_tie_rule_is_as_documented(rewards, expected):
    """docs/spec.md A.1: a response is tied with its group mean (A = 0, as in an all-equal group) when
    |r_i − mean(r)| ≤ 1e-6·(1 + mean|r|); above it, A is the plain difference."""
    advantage = group_relative_advantage(torch.tensor(rewards, dtype=torch.float64), torch.zeros(2, dtype=torch.long), 1)
    assert bool((advantage != 0).any()) == any(expected), advantage
    assert advantage.tolist() == pytest.approx(expected, rel=1e-6, abs=0)


def _grpo_s_reference(entropy, mask, scores, group_ids, *, beta1, beta2, negative, success_share,
                      negative_share, sequence_entropy, eps=1e-6):
    """Independent float64 loop over groups: (S31)-(S37), App. C, with two_zero_filled sets."""
    entropy, mask = entropy.double(), mask.double()
    rows = entropy.shape[0]
    adv = [0.0] * rows
    for g in sorted(set(group_ids.tolist())):
        idx = [i for i in range(rows) if int(group_ids[i]) == g and float(mask[i].sum()) > 0]
        h = {}
        for i in idx:
            vals = [max(float(entropy[i, t]), 0.0) for t in range(entropy.shape[1]) if mask[i, t] > 0]
            if sequence_entropy == "arithmetic":
                h[i] = sum(vals) / len(vals)
            else:
                h[i] = math.exp(sum(math.log(v + eps) for v in vals) / len(vals))
        pos = [i for i in idx if float(scores[i]) > 0]
        neg = [i for i in idx if float(scores[i]) <= 0]
        reward = {i: 0.0 for i in idx}
        if pos:
            if success_share == "arithmetic":
                mean_pos = sum(h[i] for i in pos) / len(pos)
                share = {i: (h[i] / mean_pos if mean_pos > 0 else 1.0) for i in pos}
            else:
                gm = math.exp(sum(math.log(h[i] + eps) for i in pos) / len(pos))
                share = {i: h[i] / gm for i in pos}
            for i in pos:
                reward[i] = beta1 + beta2 * share[i]
        sets = [idx]
        if negative and neg:
            inv = {j: 1.0 / (h[j] + eps) for j in neg}
            if negative_share == "arithmetic":
                mean_inv = sum(inv.values()) / len(neg)
                for j in neg:
                    reward[j] = -inv[j] / mean_inv
            else:
                gm = math.exp(sum(math.log(v) for v in inv.values()) / len(neg))
                for j in neg:
                    reward[j] = -inv[j] / gm
        if negative:  # two_zero_filled: each class z-scored over all G, the other class at 0
            for cls in (pos, neg):
                values = [reward[i] if i in cls else 0.0 for i in idx]
                mean = sum(values) / len(values)
                var = sum((v - mean) ** 2 for v in values) / max(1, len(values) - 1)
                std = math.sqrt(var)
                for i in cls:
                    adv[i] = 0.0 if std <= 1e-6 * abs(mean) else (reward[i] - mean) / (std + eps)
        else:
            values = [reward[i] for i in idx]
            mean = sum(values) / len(values)
            std = math.sqrt(sum((v - mean) ** 2 for v in values) / max(1, len(values) - 1))
            for i in idx:
                adv[i] = 0.0 if std <= 1e-6 * abs(mean) else (reward[i] - mean) / (std + eps)
    return torch.tensor(adv, dtype=torch.float64)


@pytest.mark.parametrize("negative,success_share,negative_share,sequence_entropy", list(itertools.product(
    [False, True], ["arithmetic", "geometric"], ["arithmetic", "geometric"], ["arithmetic", "geometric"])))
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_grpo_s_switches_against_float64_reference(negative, success_share, negative_share, sequence_entropy, seed):
    gen = torch.Generator().manual_seed(seed)
    rows, width = 20, 9
    entropy = (torch.rand(rows, width, generator=gen) * 2.5).double()
    lengths = torch.randint(0, width + 1, (rows,), generator=gen)
    mask = (torch.arange(width) < lengths[:, None]).to(torch.int64)
    scores = (torch.rand(rows, generator=gen) < 0.5).double()
    group_ids = torch.randint(0, 4, (rows,), generator=gen)
    kwargs = dict(beta1=1.0, beta2=0.1, negative_shaping=negative, success_share=success_share,
                  negative_share=negative_share, sequence_entropy=sequence_entropy)
    out = grpo_s_advantage(mask, scores, group_ids, 4, entropy=entropy, **kwargs)
    expected = _grpo_s_reference(entropy, mask, scores, group_ids, beta1=1.0, beta2=0.1, negative=negative,
                                 success_share=success_share, negative_share=negative_share,
                                 sequence_entropy=sequence_entropy)
    torch.testing.assert_close(out.sequence_advantages, expected, atol=1e-9, rtol=1e-9)
    torch.testing.assert_close(out.advantages, expected.unsqueeze(-1) * mask.double())


def test_grpo_s_geometric_switches_change_the_result():
    """The new switches are read (not silently ignored): each changes Â on a mixed batch."""
    entropy, mask, scores, group_ids, k = _batch(seed=4)
    base = grpo_s_advantage(mask, scores, group_ids, k, entropy=entropy, beta1=1.0, beta2=0.5).sequence_advantages
    for switch in ("success_share", "sequence_entropy"):
        other = grpo_s_advantage(mask, scores, group_ids, k, entropy=entropy, beta1=1.0, beta2=0.5,
                                 **{switch: "geometric"}).sequence_advantages
        assert not torch.allclose(base, other), switch
