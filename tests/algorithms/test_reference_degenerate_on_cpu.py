"""Degenerate groups (all success, all failure, zero entropy, empty rows) against the references."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from support.batches import golden_b1_group, make_batch_b
from support.compare import as_numpy, call_seq, call_token, call_traj, check_seq, check_token, check_traj, ref_token
from support.references import EPS, ref_stats


def _degenerate_batch(mixed_empty: bool, zero_entropy_everywhere: bool = False):
    """Groups: all fail, all succeed, zero entropy (mixed), single tokens, size-1 groups, empty rows."""
    rows = []  # (group, entropies, score, ids)
    rows += [(0, [0.5, 0.7, 1.1], -1.0), (0, [0.3, 0.2], -1.0), (0, [0.9], -1.0)]  # all fail
    rows += [(1, [0.5, 0.7, 1.1], 1.0), (1, [0.3, 0.2], 1.0), (1, [0.9, 0.1, 0.4, 2.0], 1.0)]  # all succeed
    rows += [(2, [0.0, 0.0, 0.0], 1.0), (2, [0.0, 0.0], 1.0), (2, [0.0, 0.0, 0.0, 0.0], -1.0), (2, [0.0], -1.0)]
    rows += [(3, [0.4], 1.0), (3, [1.3], -1.0), (3, [0.8], 1.0), (3, [2.2], -1.0)]  # single tokens
    rows += [(4, [0.6, 0.1], 1.0), (5, [0.6, 0.1, 0.3], -1.0), (6, [0.25], 1.0)]  # groups of size 1
    rows += [(7, [], 1.0), (8, [], -1.0)]  # empty rows alone
    rows += [(9, [0.0, 0.0], 1.0), (9, [0.0, 0.0, 0.0], 1.0)]  # all succeed, zero entropy
    if mixed_empty:
        rows += [(3, [], 1.0), (2, [], -1.0), (1, [], -1.0), (0, [], 1.0)]
    K = 10
    T = 6
    B = len(rows)
    rng = np.random.default_rng(0)
    H = np.full((B, T), 5.0)
    mask = np.zeros((B, T), dtype=np.int64)
    ids = rng.integers(0, 3, size=(B, T))
    scores = np.zeros(B)
    gids = np.zeros(B, dtype=np.int64)
    for i, (g, h, s) in enumerate(rows):
        H[i, : len(h)] = h
        mask[i, : len(h)] = 1
        scores[i] = s
        gids[i] = g
    if zero_entropy_everywhere:
        H[mask == 1] = 0.0
    perm = rng.permutation(B)
    return dict(entropy=torch.tensor(H[perm], dtype=torch.float32), mask=torch.tensor(mask[perm]),
                scores=torch.tensor(scores[perm], dtype=torch.float32), gids=torch.tensor(gids[perm]),
                responses=torch.tensor(ids[perm]), K=K)


def _finite_and_masked(res, mask):
    m = mask.numpy() == 0
    for name, v in res._asdict().items():
        if v is None or name == "shares":  # the fused call's share tables (not a tensor)
            continue
        a = as_numpy(v)
        assert np.isfinite(a).all() if a.dtype.kind == "f" else True, f"{name} not finite: {a}"
        if a.ndim == 2:
            assert (a[m] == 0).all(), f"{name} nonzero outside mask"


TOKEN_COMBOS = list(itertools.product(["base", "clipped_len", "unified_v6"], [False, True], ["column", "geometric"],
                                      ["two_zero_filled", "single_combined", "per_class"], ["keep", "zero_adv"]))


@pytest.mark.parametrize("zero_entropy", [False, True])
@pytest.mark.parametrize("mixed_empty", [False, True])
def test_degenerate_groups_gtpo_token(mixed_empty, zero_entropy):
    b = _degenerate_batch(mixed_empty, zero_entropy)
    lens = b["mask"].sum(1)
    for variant, neg, share, norm, uni in TOKEN_COMBOS:
        extra = dict(kappa=2.0, max_response_len=3, overlong_buffer_len=1) if variant == "clipped_len" else {}
        kw = dict(alpha1=0.9, alpha2=0.1, variant=variant, negative_shaping=neg, entropy_share=share,
                  adv_norm=norm, uniform_outcome_groups=uni, **extra)
        res = call_token(b, **kw)
        _finite_and_masked(res, b["mask"])
        assert (as_numpy(res.advantages)[lens.numpy() == 0] == 0).all()
        check_token(b, kw)
        adv = as_numpy(res.advantages)
        gid = b["gids"].numpy()
        if not neg and variant == "base":  # all-fail group: every reward 0 -> advantage exactly 0
            assert (adv[gid == 0] == 0).all(), kw
        if uni == "zero_adv":
            # in the mixed_empty batch groups 0 and 1 also hold a length-0 row of the other outcome,
            # which is no group member (test_gtpo_token_zero_adv_ignores_length0_rows_like_grpo_s)
            for g in (0, 1, 4, 5, 6, 9):
                assert (adv[gid == g] == 0).all(), (kw, g)


SEQ_COMBOS = list(itertools.product(["base", "unified_v6"], [False, True], ["arithmetic", "geometric"],
                                    ["two_zero_filled", "single_combined", "per_class"], ["keep", "zero_adv"]))


@pytest.mark.parametrize("zero_entropy", [False, True])
@pytest.mark.parametrize("mixed_empty", [False, True])
def test_degenerate_groups_grpo_s(mixed_empty, zero_entropy):
    b = _degenerate_batch(mixed_empty, zero_entropy)
    lens = b["mask"].sum(1).numpy()
    for variant, neg, share, norm, uni in SEQ_COMBOS:
        kw = dict(beta1=0.9, beta2=0.1, variant=variant, negative_shaping=neg, negative_share=share,
                  adv_norm=norm, uniform_outcome_groups=uni)
        res = call_seq(b, **kw)
        _finite_and_masked(res, b["mask"])
        assert (as_numpy(res.sequence_advantages)[lens == 0] == 0).all()
        if not mixed_empty:
            check_seq(b, kw)
        if uni == "zero_adv":  # uniform groups (length-0 rows are no group members) -> 0
            gid = b["gids"].numpy()
            for g in (0, 1, 4, 5, 6, 9):
                assert (as_numpy(res.advantages)[gid == g] == 0).all(), (kw, g)


# every (overlap, divisor, norm_adv_by_std) triple, twice, with the remaining switches cycled
_TRAJ_REST = list(itertools.product(["all", "neg_only"], [None, 1.5], ["advantage_offset", "differentiable"],
                                    [0.7, None]))
TRAJ_COMBOS = [
    (*head, *_TRAJ_REST[(5 * k + 3 * rep) % len(_TRAJ_REST)])
    for rep in range(2)
    for k, head in enumerate(itertools.product(["product", "union"], ["code", "union", "none"], [False, True]))
]


@pytest.mark.parametrize("zero_entropy", [False, True])
@pytest.mark.parametrize("mixed_empty", [False, True])
def test_degenerate_groups_gtpo_traj(mixed_empty, zero_entropy):
    b = _degenerate_batch(mixed_empty, zero_entropy)
    lens = b["mask"].sum(1).numpy()
    for overlap, div, norm, scope, ini, mode, thr in TRAJ_COMBOS:
        kw = dict(overlap=overlap, divisor=div, norm_adv_by_std=norm, entropy_filter_scope=scope,
                  initial_entropy=ini, entropy_reg_mode=mode, entropy_threshold=thr)
        res = call_traj(b, **kw)
        _finite_and_masked(res, b["mask"])
        assert (as_numpy(res.advantages)[lens == 0] == 0).all()
        if not mixed_empty:
            check_traj(b, kw)


def test_gtpo_token_unified_v6_without_negative_shaping_gives_constant_failure_reward():
    """The pure function with unified_v6 and negative_shaping=False gives every failure token the
    constant reward -alpha1, as grpo_s gives -beta1 (the config refuses this combination, spec B.6).
    Golden B1 group, alpha1 = 1, alpha2 = 0.1, two_zero_filled, sample std:
    R- = {0 x 5 success tokens, -1 x 4 failure tokens}: mean -4/9, std sqrt(180/648) = 0.527046,
    so every failure token gets (-1 + 4/9) / (0.527046 + eps) = -1.054093. With the shaping they
    would differ (golden B6: o2 [-1.034878, -1.054042, -1.054042], o3 [-1.073207]).
    """
    b = golden_b1_group()
    kw = dict(alpha1=1.0, alpha2=0.1, variant="unified_v6", negative_shaping=False, adv_norm="two_zero_filled")
    r_neg = [0.0] * 5 + [-1.0] * 4
    mean, std, _ = ref_stats(r_neg, unbiased=True)
    want = (-1.0 - mean) / (std + EPS)
    ref = ref_token(b, **kw)
    np.testing.assert_allclose(ref["advantages"][2:, :][b["mask"][2:].numpy() == 1], want, atol=1e-9)
    got = as_numpy(call_token(b, **kw).advantages)
    fail_tokens = got[2:][b["mask"][2:].numpy() == 1]
    np.testing.assert_allclose(
        fail_tokens, want, atol=2e-5,
        err_msg="failure tokens of unified_v6 with negative_shaping=False should all be (-alpha1 - mean(R-))/std(R-), "
                "without the alpha2 inverse-entropy share")
    # and on random batches (two_zero_filled / single_combined, column / geometric)
    rng = np.random.default_rng(7)
    for share, norm in itertools.product(["column", "geometric"], ["two_zero_filled", "single_combined"]):
        for _ in range(5):
            check_token(make_batch_b(rng), dict(alpha1=0.9, alpha2=0.1, variant="unified_v6", negative_shaping=False,
                                                entropy_share=share, adv_norm=norm))


def test_gtpo_token_zero_adv_ignores_length0_rows_like_grpo_s():
    """uniform_outcome_groups="zero_adv": a length-0 (all-padding) row has no token, no entropy and
    no reward in any set of spec B.2, so it is no group member. A group whose rows with tokens all
    succeed, plus one length-0 failure row, is an all-success group and gets 0, in gtpo_token as
    in grpo_s."""
    H = torch.tensor([[0.5, 0.9, 1.3], [1.1, 0.2, 0.0], [0.7, 0.0, 0.0], [0.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 0, 0], [0, 0, 0]])
    b = dict(entropy=H, mask=mask, scores=torch.tensor([1.0, 1.0, 1.0, -1.0]),
             gids=torch.zeros(4, dtype=torch.int64), K=1)
    seq = call_seq(b, beta1=0.9, beta2=0.1, uniform_outcome_groups="zero_adv")
    assert (as_numpy(seq.advantages) == 0).all()
    got = as_numpy(call_token(b, alpha1=0.9, alpha2=0.1, uniform_outcome_groups="zero_adv").advantages)
    ref = ref_token(b, alpha1=0.9, alpha2=0.1, uniform_outcome_groups="zero_adv")
    assert (ref["advantages"] == 0).all()
    np.testing.assert_array_equal(got, np.zeros_like(got),
                                  err_msg="all-success group (plus a length-0 failure row) not zeroed by zero_adv")
