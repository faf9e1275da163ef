"""gtpo_token's equations, its readable twin, and its fused form (``kernels/gtpo_token.py``).

The fused ``gtpo_token_advantage`` must equal the readable twin for every switch, in any row
blocking; the twin itself is held to hand-computed values through the equation functions; the
conservation shortcut the fused form relies on is checked directly and through the debug mode.
"""

import itertools

import pytest
import torch

from gtpo_verl.algorithms import blocks
from gtpo_verl.algorithms.kernels import gtpo_token as fused
from gtpo_verl.algorithms.kernels.gtpo_token import gtpo_token_advantage
from gtpo_verl.algorithms.token_shaping import (
    check_share_conservation,
    clipped_bonus,
    column_share,
    column_share_scale,
    geometric_share,
    gtpo_token_advantage_reference,
    inverse_entropy,
    share_conservation_totals,
)


def _batch(rows=30, width=11, groups=6, seed=0, dtype=torch.float64):
    gen = torch.Generator().manual_seed(seed)
    entropy = torch.rand(rows, width, generator=gen, dtype=dtype) * 2
    entropy[0, :3] = 0.0  # zero entropies (Remark 2.1)
    entropy[1, 2] = -2e-6  # rounding below 0
    lengths = torch.randint(0, width + 1, (rows,), generator=gen)
    mask = (torch.arange(width) < lengths[:, None]).to(torch.int64)
    entropy[mask == 0] = float("nan")  # garbage outside the mask must not matter
    scores = (torch.rand(rows, generator=gen) < 0.5).to(dtype)
    group_ids = torch.randint(0, groups, (rows,), generator=gen)
    return entropy, mask, scores, group_ids, groups


def _kwargs(negative, variant, share, norm, uniform="keep"):
    clipped = variant == "clipped_len"
    return dict(
        alpha1=0.5 if clipped else 0.9,
        alpha2=0.5 if clipped else 0.1,
        negative_shaping=negative,
        variant=variant,
        entropy_share=share,
        adv_norm=norm,
        kappa=2.0,
        overlong_buffer_len=3,
        max_response_len=9,
        uniform_outcome_groups=uniform,
    )


@pytest.fixture(params=["whole", "split"])
def blocking(request, monkeypatch):
    """How the fused form splits the batch into row blocks: the default cache-sized blocks (the whole
    test batch is one), or the smallest blocks the thread count allows.

    Every block is computed on its own (column sums accumulated across blocks), so the result may
    not depend on the blocking; the spy checks that the chosen blocking is the one that ran.
    """
    if request.param == "split":
        monkeypatch.setattr(blocks, "CPU_BLOCK_ELEMENTS", 1)
    seen = []
    real_init = blocks.RowBlocks.__init__

    def spy_init(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        seen.append(len(self.slices))

    monkeypatch.setattr(blocks.RowBlocks, "__init__", spy_init)
    yield request.param
    assert seen and (min(seen) > 1 if request.param == "split" else set(seen) == {1})


SWITCHES = list(
    itertools.product(
        [False, True], ["base", "clipped_len", "unified_v6"], ["column", "geometric"],
        ["two_zero_filled", "single_combined", "per_class"], ["keep", "zero_adv"],
    )
)


@pytest.mark.parametrize("negative,variant,share,norm,uniform", SWITCHES)
def test_fused_passes_equal_the_readable_twin(blocking, negative, variant, share, norm, uniform):
    entropy, mask, scores, group_ids, k = _batch()
    kwargs = _kwargs(negative, variant, share, norm, uniform)
    fused = gtpo_token_advantage(mask, scores, group_ids, k, entropy=entropy, **kwargs).advantages
    twin = gtpo_token_advantage_reference(mask, scores, group_ids, k, entropy=entropy, **kwargs)
    assert torch.isfinite(fused).all()
    torch.testing.assert_close(fused, twin, atol=1e-10, rtol=1e-10)
    assert bool((fused[mask == 0] == 0).all())


@pytest.mark.parametrize("negative", [False, True])
def test_fused_equals_twin_in_float32_and_with_tiny_blocks(monkeypatch, negative):
    entropy, mask, scores, group_ids, k = _batch(rows=70, width=13, groups=9, dtype=torch.float32, seed=3)
    kwargs = _kwargs(negative, "base", "column", "two_zero_filled")
    twin = gtpo_token_advantage_reference(mask, scores, group_ids, k, entropy=entropy.double(), **kwargs)
    whole = gtpo_token_advantage(mask, scores, group_ids, k, entropy=entropy, **kwargs).advantages
    monkeypatch.setattr(blocks, "CPU_BLOCK_ELEMENTS", 1)  # one row per block
    tiny = gtpo_token_advantage(mask, scores, group_ids, k, entropy=entropy, **kwargs).advantages
    torch.testing.assert_close(whole.double(), twin, atol=2e-5, rtol=1e-5)
    torch.testing.assert_close(tiny.double(), twin, atol=2e-5, rtol=1e-5)


def test_column_share_by_hand():
    # one group; column 0: successes with H = 1, 3 (d = 2) → shares 2·1/4, 2·3/4; column 1: only
    # the first success is active with H = 0 → uniform share 1 (Remark 2.1); the failure row is
    # outside the set → 0
    values = torch.tensor([[1.0, 0.0], [3.0, 0.0], [5.0, 7.0]], dtype=torch.float64)
    members = torch.tensor([[1.0, 1.0], [1.0, 0.0], [0.0, 0.0]], dtype=torch.float64)
    share = column_share(values, members, torch.zeros(3, dtype=torch.int64), 1)
    expected = torch.tensor([[0.5, 1.0], [1.5, 0.0], [0.0, 0.0]], dtype=torch.float64)
    torch.testing.assert_close(share, expected)


def test_geometric_share_inverse_and_clip_by_hand():
    # golden B4 of docs/spec.md: H = [0.5, 2.0], GM = 1 → shares H, inverse shares 1/H
    entropy = torch.tensor([[0.5, 2.0]], dtype=torch.float64)
    mask = torch.ones_like(entropy)
    log_h = torch.log(entropy)  # ε = 0 here, so GM(H) = sqrt(0.5 · 2) = 1
    torch.testing.assert_close(geometric_share(entropy, log_h, mask), entropy)
    inverse = inverse_entropy(entropy=entropy, epsilon=0.0)
    torch.testing.assert_close(geometric_share(inverse, -log_h, mask), torch.tensor([[2.0, 0.5]], dtype=torch.float64))
    # (S24): clip(α1 + α2·share, 1, α1(1 + 1/κ)) with α1 = 0.8, κ = 2: bounds [1, 1.2]
    bonus = torch.tensor([0.1, 0.3, 0.6], dtype=torch.float64)
    torch.testing.assert_close(clipped_bonus(bonus, alpha1=0.8, kappa=2.0), torch.tensor([1.0, 1.1, 1.2], dtype=torch.float64))


def test_in_place_scale_equals_the_equation():
    gen = torch.Generator().manual_seed(2)
    column_sum = torch.rand(9, 6, generator=gen, dtype=torch.float64) * 2
    column_count = torch.randint(0, 4, (9, 6), generator=gen).to(torch.float64)
    column_sum[column_count == 0] = 0.0
    column_sum[1, :3] = 0.0
    column_count[1, :3] = 3.0  # all-zero columns with members
    scale, uniform = column_share_scale(column_sum, column_count)
    fused_scale, fused_uniform = fused._column_share_scale_(column_sum.clone(), column_count.clone())
    torch.testing.assert_close(fused_scale, scale, atol=0, rtol=0)
    torch.testing.assert_close(fused_uniform, uniform, atol=0, rtol=0)


def test_conservation_holds_for_the_share_formula():
    """Σ_{i∈set_t} share_{i,t} = d_t: the shortcut behind the fused set means."""
    gen = torch.Generator().manual_seed(1)
    column_sum = torch.rand(7, 5, generator=gen, dtype=torch.float64) * 3
    column_count = torch.randint(0, 4, (7, 5), generator=gen).to(torch.float64)
    column_sum[column_count == 0] = 0.0
    column_sum[0, :2] = 0.0  # all-zero columns with members → uniform shares
    column_count[0, :2] = 2.0
    scale, uniform = column_share_scale(column_sum, column_count)
    totals, counts = share_conservation_totals(scale, uniform, column_sum, column_count)
    torch.testing.assert_close(totals, counts)
    check_share_conservation(scale, uniform, column_sum, column_count)  # does not raise
    # and per token, from the shares themselves (not the tables): each segment's shares sum to d_t
    entropy, mask, scores, group_ids, k = _batch()
    valid = mask.to(torch.float64)
    h = torch.where(mask > 0, entropy, 0.0).clamp_min(0.0)
    on_success = valid * (scores > 0).to(torch.float64).unsqueeze(-1)
    share = column_share(h, on_success, group_ids, k)
    from gtpo_verl.algorithms.groups import group_sum

    torch.testing.assert_close(group_sum(share, group_ids, k), group_sum(on_success, group_ids, k))


def test_debug_mode_catches_a_share_formula_that_breaks_conservation(monkeypatch, blocking):
    entropy, mask, scores, group_ids, k = _batch()
    kwargs = _kwargs(True, "base", "column", "two_zero_filled")
    monkeypatch.setattr(fused, "DEBUG_CHECKS", True)
    gtpo_token_advantage(mask, scores, group_ids, k, entropy=entropy, **kwargs)  # the real formula passes

    real_scale_ = fused._column_share_scale_

    def mean_free_scale_(column_sum, column_count):  # x / Σx without the d_t factor
        counts = column_count.clone()
        scale, uniform = real_scale_(column_sum, column_count)
        return scale.div_(counts.clamp_min(1)), uniform

    monkeypatch.setattr(fused, "_column_share_scale_", mean_free_scale_)
    with pytest.raises(AssertionError, match="no longer sum to the token count"):
        gtpo_token_advantage(mask, scores, group_ids, k, entropy=entropy, **kwargs)


def test_share_stats_equal_the_readable_shares_in_any_blocking(monkeypatch):
    """The diagnostics' (Σ, Σ², max) of the success tokens' shares: fused, in two blockings, and from the equations."""
    entropy, mask, scores, group_ids, k = _batch(dtype=torch.float64)
    kwargs = _kwargs(True, "base", "column", "two_zero_filled")
    def share_stats():
        rows = fused.success_share_rows(gtpo_token_advantage(mask, scores, group_ids, k, entropy=entropy, **kwargs),
                                        mask, entropy=entropy)
        return torch.stack([rows[:, 0].sum(), rows[:, 1].sum(), rows[:, 2].max()])

    stats = [share_stats()]
    monkeypatch.setattr(blocks, "CPU_BLOCK_ELEMENTS", 1)
    stats.append(share_stats())
    torch.testing.assert_close(stats[0], stats[1])
    valid = mask > 0
    on_success = (valid & (scores > 0).unsqueeze(-1)).to(torch.float64)
    share = column_share(torch.where(valid, entropy, 0.0).clamp_min(0.0), on_success, group_ids, k)  # (S18)
    torch.testing.assert_close(stats[0], torch.stack([share.sum(), share.square().sum(), share.max()]))
    success_tokens = float((valid & (scores > 0).unsqueeze(-1)).sum())
    assert float(stats[0][0]) / success_tokens == pytest.approx(1.0, rel=1e-9)  # shares average 1 (conservation)


def test_results_do_not_depend_on_the_thread_count_and_leave_it_alone():
    entropy, mask, scores, group_ids, k = _batch(rows=64, width=300, groups=8, dtype=torch.float32)
    kwargs = _kwargs(True, "base", "column", "two_zero_filled")
    saved = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = gtpo_token_advantage(mask, scores, group_ids, k, entropy=entropy, **kwargs).advantages
        assert torch.get_num_threads() == 1
        torch.set_num_threads(2)
        two = gtpo_token_advantage(mask, scores, group_ids, k, entropy=entropy, **kwargs).advantages
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(saved)
    torch.testing.assert_close(one, two, atol=1e-6, rtol=1e-5)
