"""Reward conservation of the base GTPO reward (Proposition 2.2, docs/spec.md B.2)."""

from __future__ import annotations

import math

import numpy as np
import torch
from hypothesis import given, note, settings
from hypothesis import strategies as st

from support.batches import make_batch_b
from support.compare import HYP, SEEDS, as_numpy, call_token
from support.references import ref_gtpo_token_rewards


@settings(max_examples=200, **HYP)
@given(seed=SEEDS, alpha1=st.sampled_from([0.9, 0.8, 0.5, 0.3]))
def test_reference_reward_conservation(seed, alpha1):
    """sum_{i in O+_t} r~_{i,t} = d_t (alpha1 + alpha2 = 1) and sum_{j in O-_t} r-_{j,t} = -h_t."""
    b = make_batch_b(np.random.default_rng(seed))
    H = b["entropy"].double().numpy()
    lens = b["mask"].sum(1).numpy()
    rw, success, _ = ref_gtpo_token_rewards(H, b["mask"].numpy(), b["scores"].numpy(), b["gids"].numpy(), b["K"],
                                            alpha1=alpha1, alpha2=1 - alpha1, negative_shaping=True)
    gids = b["gids"].numpy()
    for g in range(b["K"]):
        for t in range(H.shape[1]):
            pos_t = [i for i in range(len(lens)) if gids[i] == g and success[i] and lens[i] > t]
            neg_t = [i for i in range(len(lens)) if gids[i] == g and not success[i] and lens[i] > t]
            assert math.isclose(sum(rw[(i, t)] for i in pos_t), len(pos_t), rel_tol=1e-12, abs_tol=1e-12)
            assert math.isclose(sum(rw[(j, t)] for j in neg_t), -len(neg_t), rel_tol=1e-12, abs_tol=1e-12)


@settings(max_examples=200, **HYP)
@given(seed=SEEDS, alpha1=st.sampled_from([0.9, 0.8, 0.5, 0.3]), unbiased=st.booleans())
def test_package_conservation_column_sums(seed, alpha1, unbiased):
    """Package-only check: with alpha1 + alpha2 = 1 the group reward mean is mu = #success tokens / #tokens
    whatever the entropies, so every failure token gets a- = -mu/(sigma+eps) and each column of
    active successes sums to d_t (1 - mu)/(sigma+eps) = -d_t a- (1 - mu)/mu."""
    rng = np.random.default_rng(seed)
    b = make_batch_b(rng)
    res = call_token(b, alpha1=alpha1, alpha2=1 - alpha1, std_unbiased=unbiased)
    adv = as_numpy(res.advantages)
    succ = (b["scores"] > 0).numpy()
    lens = b["mask"].sum(1).numpy()
    gids = b["gids"].numpy()
    checked = 0
    for g in range(b["K"]):
        rows = [i for i in range(len(lens)) if gids[i] == g and lens[i] > 0]
        pos = [i for i in rows if succ[i]]
        neg = [i for i in rows if not succ[i]]
        if not pos or not neg:
            continue
        n_tok = sum(lens[i] for i in rows)
        mu = sum(lens[i] for i in pos) / n_tok
        a_neg = np.concatenate([adv[j, : lens[j]] for j in neg])
        np.testing.assert_allclose(a_neg, a_neg[0], atol=1e-5)
        for t in range(int(max(lens[i] for i in pos))):
            pos_t = [i for i in pos if lens[i] > t]
            col = sum(float(adv[i, t]) for i in pos_t)
            want = -len(pos_t) * float(a_neg[0]) * (1 - mu) / mu
            assert math.isclose(col, want, rel_tol=5e-4, abs_tol=5e-4), (g, t, col, want)
            checked += 1
    note(f"columns checked: {checked}")


@settings(max_examples=100, **HYP)
@given(seed=SEEDS, n_fail=st.integers(0, 3))
def test_identical_success_rows_get_identical_advantages(seed, n_fail):
    """All successes share one entropy row (dyadic values: the arithmetic is exact): every share is 1,
    every success reward alpha1 + alpha2 = 1. Without failures the group is constant -> advantage 0;
    with failures every success token gets the same advantage."""
    rng = np.random.default_rng(seed)
    n_succ = int(rng.integers(1, 8))
    T = int(rng.integers(1, 8))
    row = rng.integers(1, 24, size=T) / 8.0
    B = n_succ + n_fail
    lens = [int(rng.integers(1, T + 1)) for _ in range(B)]
    H = np.tile(row, (B, 1))
    mask = np.zeros((B, T), dtype=np.int64)
    for i, n in enumerate(lens):
        mask[i, :n] = 1
    H[n_succ:] = rng.uniform(0.1, 2.0, size=(n_fail, T))
    scores = np.array([1.0] * n_succ + [-1.0] * n_fail)
    perm = rng.permutation(B)
    b = dict(entropy=torch.tensor(H[perm], dtype=torch.float32), mask=torch.tensor(mask[perm]),
             scores=torch.tensor(scores[perm], dtype=torch.float32), gids=torch.zeros(B, dtype=torch.int64), K=1)
    adv = as_numpy(call_token(b, alpha1=0.75, alpha2=0.25).advantages)
    m = b["mask"].numpy() == 1
    succ = (b["scores"] > 0).numpy()
    a_pos = adv[succ][m[succ]]
    if n_fail == 0:
        np.testing.assert_allclose(a_pos, 0.0, atol=1e-6)
    else:
        np.testing.assert_allclose(a_pos, a_pos[0], atol=1e-5)
        assert (a_pos > 0).all()
