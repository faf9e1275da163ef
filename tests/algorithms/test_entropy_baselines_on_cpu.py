"""The two entropy baselines (docs/spec.md C.1, C.2): hand-computed golden values, an independent
float64 reference written here (numpy.quantile for the batch threshold, loops for the bonus),
and the edge cases (ties, ρ = 1, one token, empty mask, garbage at masked positions)."""

import math

import numpy as np
import pytest
import torch
from torch.testing import assert_close

from gtpo_verl.algorithms.entropy_baselines import (
    DEFAULT_ALPHA,
    DEFAULT_KAPPA,
    DEFAULT_RHO,
    batch_entropy_quantile,
    entropy_advantage_bonus,
    high_entropy_token_advantages,
    high_entropy_token_mask,
    high_entropy_token_mask_and_threshold,
)


# ----------------------------------------------------------------------------- float64 references
def reference_mask(entropy, mask, rho):
    """𝕀[H ≥ τ], τ = numpy.quantile(valid H, 1 − ρ, method="linear") over the whole batch, float64."""
    h = entropy.double().numpy()
    valid = mask.numpy().astype(bool)
    tau = np.quantile(h[valid], 1.0 - rho, method="linear")
    out = np.zeros_like(valid)
    for i in range(h.shape[0]):
        for t in range(h.shape[1]):
            out[i, t] = bool(valid[i, t] and h[i, t] >= tau)
    return torch.from_numpy(out), float(tau)


def reference_bonus(adv, entropy, mask, alpha, kappa):
    """A + min(α·H, |A|/κ) on valid tokens, 0 elsewhere, token by token in float64."""
    a, h, m = adv.double().tolist(), entropy.double().tolist(), mask.tolist()
    out = [[0.0] * len(a[0]) for _ in a]
    for i in range(len(a)):
        for t in range(len(a[0])):
            if m[i][t]:
                out[i][t] = a[i][t] + min(alpha * h[i][t], abs(a[i][t]) / kappa)
    return torch.tensor(out, dtype=torch.float64)


def random_batch(seed, rows, width, ties=False, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(0, width + 1, (rows,), generator=g)
    lengths[0] = max(int(lengths[0]), 1)  # at least one valid token
    mask = (torch.arange(width).unsqueeze(0) < lengths.unsqueeze(1)).to(torch.int64)
    entropy = torch.rand(rows, width, generator=g) * 2.5
    if ties:
        entropy = (entropy * 4).round() / 4  # few distinct values: many ties at the threshold
    entropy = torch.where(mask.bool(), entropy, torch.full_like(entropy, 1e6))  # garbage where masked
    adv = torch.randn(rows, width, generator=g)
    return entropy.to(dtype), mask, adv


# ----------------------------------------------------------------------------- golden values
def test_golden_threshold_and_mask():
    # valid entropies 0.1 0.5 0.9 | 0.3 0.7 (9.9 is masked): sorted 0.1 0.3 0.5 0.7 0.9, N = 5
    entropy = torch.tensor([[0.1, 0.5, 0.9], [0.3, 0.7, 9.9]], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    # ρ = 0.2: q = 0.8, p = 0.8·4 = 3.2, τ = v3 + 0.2·(v4 − v3) = 0.7 + 0.2·0.2 = 0.74 → only 0.9 kept
    assert batch_entropy_quantile(mask, entropy=entropy, q=0.8) == pytest.approx(0.74, abs=1e-12)
    assert high_entropy_token_mask(mask, entropy=entropy, rho=0.2).tolist() == [[False, False, True], [False, False, False]]
    # ρ = 0.5: p = 2, τ = v2 = 0.5 → 0.5, 0.7, 0.9 kept (H ≥ τ keeps the tie)
    assert high_entropy_token_mask(mask, entropy=entropy, rho=0.5).tolist() == [[False, True, True], [False, True, False]]
    # ρ = 1: τ = min = 0.1 → every valid token
    assert torch.equal(high_entropy_token_mask(mask, entropy=entropy, rho=1.0), mask.bool())


def test_golden_zeroed_advantages():
    entropy = torch.tensor([[0.1, 0.5, 0.9], [0.3, 0.7, 9.9]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    adv = torch.tensor([[1.0, 1.0, 1.0], [-2.0, -2.0, 0.0]])
    new, kept = high_entropy_token_advantages(adv, mask, entropy=entropy, rho=0.5)
    assert new.tolist() == [[0.0, 1.0, 1.0], [0.0, -2.0, 0.0]]
    assert kept.sum() == 3


def test_golden_entropy_bonus():
    # α = 0.4, κ = 2:
    #   A = 1.0,  H = 0.5 → min(0.2, 0.5) = 0.2 → 1.2
    #   A = −1.0, H = 3.0 → min(1.2, 0.5) = 0.5 → −0.5 (the clip keeps the sign)
    #   A = 0.2,  H = 1.0 → min(0.4, 0.1) = 0.1 → 0.3
    #   A = 0.0,  H = 2.0 → min(0.8, 0.0) = 0   → 0 (no advantage, no bonus)
    #   masked            → exactly 0
    adv = torch.tensor([[1.0, -1.0, 0.2, 0.0, 5.0]], dtype=torch.float64)
    entropy = torch.tensor([[0.5, 3.0, 1.0, 2.0, 1.0]], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 1, 0]])
    out = entropy_advantage_bonus(adv, mask, entropy=entropy, alpha=0.4, kappa=2.0)
    assert_close(out, torch.tensor([[1.2, -0.5, 0.3, 0.0, 0.0]], dtype=torch.float64), rtol=0, atol=1e-12)


def test_paper_defaults():
    assert (DEFAULT_RHO, DEFAULT_ALPHA, DEFAULT_KAPPA) == (0.2, 0.4, 2.0)


# ----------------------------------------------------------------------------- float64 reference
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("rows,width", [(1, 1), (2, 3), (16, 9), (64, 40)])
@pytest.mark.parametrize("rho", [0.05, 0.2, 0.5, 0.999, 1.0])
@pytest.mark.parametrize("ties", [False, True])
def test_mask_equals_numpy_quantile_reference(seed, rows, width, rho, ties):
    entropy, mask, _ = random_batch(seed, rows, width, ties)
    expected, tau = reference_mask(entropy, mask, rho)
    assert batch_entropy_quantile(mask, entropy=entropy, q=1.0 - rho) == pytest.approx(tau, rel=0, abs=1e-12)
    assert torch.equal(high_entropy_token_mask(mask, entropy=entropy, rho=rho), expected)


def test_threshold_above_torch_quantiles_limit_equals_numpy():
    """The papers' batches hold ~1.7e8 valid tokens; ``torch.quantile`` refuses more than 2^24 elements,
    ``batch_entropy_quantile`` does not, and its τ and mask equal numpy's on a batch above the limit."""
    gen = torch.Generator().manual_seed(0)
    rows, width = 1100, 16384
    lengths = torch.randint(15500, width + 1, (rows,), generator=gen)
    mask = torch.arange(width).unsqueeze(0) < lengths.unsqueeze(1)
    # a per-row level times a per-token uniform, rounded to 3 decimals (many ties), as on real batches
    entropy = torch.rand(rows, width, generator=gen).mul_(3.0).mul_(torch.rand(rows, 1, generator=gen))
    entropy = entropy.mul_(1000).round_().div_(1000)
    assert int(mask.sum()) > 2**24
    with pytest.raises(RuntimeError):
        torch.quantile(entropy[mask], 0.8)
    kept, tau = high_entropy_token_mask_and_threshold(mask, entropy=entropy, rho=0.2)
    h = entropy.numpy().astype(np.float64)
    tau_numpy = float(np.quantile(h[mask.numpy()], 0.8, method="linear"))
    assert tau == pytest.approx(tau_numpy, rel=0, abs=1e-12)
    assert torch.equal(kept, torch.from_numpy(mask.numpy() & (h >= tau_numpy)))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_mask_dtypes(dtype):
    entropy, mask, _ = random_batch(5, 32, 17, ties=False, dtype=dtype)
    expected, _ = reference_mask(entropy.float(), mask, 0.2)
    assert torch.equal(high_entropy_token_mask(mask, entropy=entropy, rho=0.2), expected)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
@pytest.mark.parametrize("alpha,kappa", [(0.4, 2.0), (0.0, 2.0), (1.0, 0.5), (0.05, 10.0)])
def test_bonus_equals_reference(seed, alpha, kappa):
    entropy, mask, adv = random_batch(seed, 24, 11)
    out = entropy_advantage_bonus(adv.double(), mask, entropy=entropy.double(), alpha=alpha, kappa=kappa)
    assert_close(out, reference_bonus(adv, entropy, mask, alpha, kappa), rtol=0, atol=1e-12)
    out32 = entropy_advantage_bonus(adv, mask, entropy=entropy, alpha=alpha, kappa=kappa)
    assert out32.dtype == torch.float32
    assert_close(out32.double(), reference_bonus(adv, entropy, mask, alpha, kappa), rtol=1e-6, atol=1e-6)


# ----------------------------------------------------------------------------- properties and edges
def test_bonus_never_flips_a_sign_and_alpha_zero_is_identity():
    entropy, mask, adv = random_batch(7, 32, 13)
    entropy = torch.where(mask.bool(), entropy, torch.zeros_like(entropy))
    out = entropy_advantage_bonus(adv, mask, entropy=entropy, alpha=10.0, kappa=1.5)
    valid = mask.bool()
    assert bool(((out[valid] >= 0) == (adv[valid] >= 0)).all())
    assert torch.equal(entropy_advantage_bonus(adv, mask, entropy=entropy, alpha=0.0, kappa=2.0), torch.where(valid, adv, torch.zeros(())))


def test_bonus_carries_no_entropy_gradient():
    entropy, mask, adv = random_batch(3, 4, 5)
    entropy = entropy.clone().requires_grad_(True)
    adv = adv.clone().requires_grad_(True)
    entropy_advantage_bonus(adv, mask, entropy=entropy).sum().backward()
    assert entropy.grad is None  # H is detached (ψ is a constant of the update)
    assert adv.grad is not None


def test_all_equal_entropies_keep_every_valid_token():
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    entropy = torch.full((2, 3), 0.7)
    assert torch.equal(high_entropy_token_mask(mask, entropy=entropy, rho=0.2), mask.bool())


def test_one_valid_token():
    mask = torch.tensor([[0, 1, 0]])
    entropy = torch.tensor([[5.0, 0.3, 5.0]])
    assert high_entropy_token_mask(mask, entropy=entropy, rho=0.2).tolist() == [[False, True, False]]


def test_masked_garbage_changes_nothing():
    entropy, mask, adv = random_batch(11, 20, 9)
    noisy = torch.where(mask.bool(), entropy, torch.full_like(entropy, float("nan")))
    assert torch.equal(high_entropy_token_mask(mask, entropy=noisy, rho=0.2), high_entropy_token_mask(mask, entropy=entropy, rho=0.2))
    a = entropy_advantage_bonus(adv, mask, entropy=noisy)
    b = entropy_advantage_bonus(adv, mask, entropy=entropy)
    assert torch.equal(a, b) and not bool(a.isnan().any())


def test_empty_mask_is_a_clear_error_never_nan():
    entropy = torch.rand(2, 3)
    with pytest.raises(ValueError, match="no valid token"):
        high_entropy_token_mask(torch.zeros(2, 3), entropy=entropy, rho=0.2)
    out = entropy_advantage_bonus(torch.randn(2, 3), torch.zeros(2, 3), entropy=entropy)
    assert torch.equal(out, torch.zeros(2, 3))


@pytest.mark.parametrize("rho", [0.0, -0.1, 1.5, math.nan])
def test_rho_out_of_range(rho):
    with pytest.raises(ValueError, match="rho"):
        high_entropy_token_mask(torch.ones(2, 2), entropy=torch.rand(2, 2), rho=rho)


def test_non_finite_valid_entropy_is_an_error():
    entropy = torch.rand(2, 2)
    entropy[0, 0] = float("inf")
    with pytest.raises(ValueError, match="non-finite"):
        high_entropy_token_mask(torch.ones(2, 2), entropy=entropy, rho=0.2)


@pytest.mark.parametrize("alpha,kappa", [(-0.1, 2.0), (0.4, 0.0), (math.inf, 2.0)])
def test_bonus_knobs_out_of_range(alpha, kappa):
    with pytest.raises(ValueError):
        entropy_advantage_bonus(torch.zeros(1, 1), torch.ones(1, 1), entropy=torch.zeros(1, 1), alpha=alpha, kappa=kappa)


@pytest.mark.parametrize("block", [1, 7, 64])
def test_bonus_row_blocks_change_nothing(monkeypatch, block):
    from gtpo_verl.algorithms import entropy_baselines

    entropy, mask, adv = random_batch(9, 33, 11)
    whole, bonus_sum, clipped = entropy_baselines.entropy_advantage_bonus_and_stats(adv, mask, entropy=entropy, alpha=0.4, kappa=2.0)
    monkeypatch.setattr(entropy_baselines, "BLOCK_ELEMENTS", block)
    blocked, blocked_sum, blocked_clipped = entropy_baselines.entropy_advantage_bonus_and_stats(adv, mask, entropy=entropy, alpha=0.4, kappa=2.0)
    assert torch.equal(blocked, whole) and blocked_clipped == clipped
    assert blocked_sum == pytest.approx(bonus_sum, rel=1e-12)
    expected = reference_bonus(adv, entropy, mask, 0.4, 2.0)
    valid = mask.bool()
    assert bonus_sum == pytest.approx(float((expected - adv.double())[valid].sum()), rel=1e-6)
    h, a = entropy.double(), adv.double()
    assert clipped == int(((a.abs() / 2.0 < 0.4 * h) & valid).sum())
