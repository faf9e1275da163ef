"""Independent float64 references of the three estimators, compared with the package on random batches.

The references below are written from ``shared/spec/ALGORITHMS.md`` only (Part A §A.1-A.7,
Part B §B.2-B.6, golden values of §3), as plain Python loops over groups, rows and tokens in
float64. They deliberately share no code with ``gtpo_verl.algorithms``. Hypothesis draws
thousands of batches with non-contiguous (shuffled) groups, groups of size 1..8, ragged right
padding, extra padding columns and all-padding (length 0) rows, and every switch of the
public functions.

Numerical convention: the package receives float32 inputs; the references use the float64
values of the same float32 numbers. A z-score whose set has a tiny standard deviation is
ill-conditioned in float32 (noise / (noise + eps)); tokens in such a set ("degenerate" sets,
std < DEGENERATE_STD with at least two members, not all exactly zero) are only checked to be
finite and bounded by sqrt(n), the largest |z| any set of n numbers can produce.

Two regression tests pin down disagreements this reference found and that were fixed in the
package: unified_v6 without negative shaping, and length-0 rows under zero_adv.
"""

from __future__ import annotations

import itertools
import math
import zlib

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from gtpo_verl.algorithms.sequence_shaping import grpo_s_advantage
from gtpo_verl.algorithms.token_shaping import gtpo_token_advantage
from gtpo_verl.algorithms.trajectory import gtpo_traj_advantage

EPS = 1e-6
LN2 = math.log(2.0)
DEGENERATE_STD = 0.05
ATOL = 2e-4
RTOL = 2e-4

HYP = dict(
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)
SEEDS = st.integers(min_value=0, max_value=2**32 - 1)


# ----------------------------------------------------------------------------------------------
# float64 references (written from the spec)
# ----------------------------------------------------------------------------------------------


def _lengths(mask) -> list[int]:
    mask = np.asarray(mask) != 0
    lens = mask.sum(axis=1).astype(int).tolist()
    for i, n in enumerate(lens):  # the tests only build right-padded masks
        assert mask[i, :n].all() and not mask[i, n:].any()
    return lens


def _masked_mean(H, lens) -> list[float]:
    out = []
    for i, n in enumerate(lens):
        out.append(sum(float(H[i, t]) for t in range(n)) / n if n > 0 else 0.0)
    return out


def _stats(values, unbiased):
    """mean, std (ddof 1 or 0; 0 for a set of <= 1 element), size."""
    n = len(values)
    if n == 0:
        return 0.0, 0.0, 0
    mean = sum(values) / n
    if n <= 1:
        return mean, 0.0, n
    ddof = 1 if unbiased else 0
    var = sum((v - mean) ** 2 for v in values) / (n - ddof)
    return mean, math.sqrt(var), n


def _z(x, set_values, unbiased):
    """(z, degenerate, bound) for x normalised by the statistics of set_values."""
    mean, std, n = _stats(set_values, unbiased)
    z = (x - mean) / (std + EPS)
    degenerate = n >= 2 and std < DEGENERATE_STD and any(v != 0.0 for v in set_values)
    return z, degenerate, math.sqrt(max(n, 1))


def ref_length_penalty(length, overlong_buffer_len, max_response_len, denominator="l1"):
    """R(i) of §B.4(b): L1 = buffer, L2 = max response length, L = L2 - L1."""
    l1, l2 = overlong_buffer_len, max_response_len
    soft = l2 - l1
    if length <= soft:
        return 0.0
    if length <= l2:
        return (soft - length) / (l1 if denominator == "l1" else l2)
    return -1.0


def ref_gtpo_token_rewards(
    H,
    mask,
    scores,
    group_ids,
    num_groups,
    *,
    alpha1,
    alpha2,
    success_threshold=0.0,
    negative_shaping=False,
    variant="base",
    entropy_share="column",
    kappa=None,
    overlong_buffer_len=None,
    max_response_len=None,
    length_penalty_denominator="l1",
):
    """Per-token shaped rewards r~ (§B.3, §B.4) -> dict (i, t) -> reward, plus success flags."""
    H = np.asarray(H, dtype=np.float64)
    lens = _lengths(mask)
    B = H.shape[0]
    success = [float(scores[i]) > success_threshold for i in range(B)]
    rewards = {}
    for g in range(num_groups):
        rows = [i for i in range(B) if int(group_ids[i]) == g and lens[i] > 0]
        pos = [i for i in rows if success[i]]
        neg = [i for i in rows if not success[i]]
        # row geometric means GM_i = exp(mean_t log(H_{i,t} + eps))   (S20, S27 with k = row index)
        gm = {}
        for i in rows:
            gm[i] = math.exp(sum(math.log(H[i, t] + EPS) for t in range(lens[i])) / lens[i])
        for t in range(max((lens[i] for i in rows), default=0)):
            pos_t = [i for i in pos if lens[i] > t]
            neg_t = [j for j in neg if lens[j] > t]
            d_t, h_t = len(pos_t), len(neg_t)
            col_sum = sum(H[k, t] for k in pos_t)
            for i in pos_t:
                if entropy_share == "column":
                    share = H[i, t] / col_sum * d_t if col_sum > 0 else 1.0
                else:
                    share = H[i, t] / gm[i]
                raw = alpha1 * 1.0 + alpha2 * share  # r_i = 1 for O+
                if variant == "clipped_len":
                    upper = alpha1 * (1.0 + 1.0 / kappa)
                    r = min(max(raw, 1.0), upper) + ref_length_penalty(
                        lens[i], overlong_buffer_len, max_response_len, length_penalty_denominator
                    )
                else:
                    r = raw
                rewards[(i, t)] = r
            inv_sum = sum(1.0 / (H[k, t] + EPS) for k in neg_t)
            for j in neg_t:
                if entropy_share == "column":
                    share_n = (1.0 / (H[j, t] + EPS)) / inv_sum * h_t
                else:
                    share_n = gm[j] / (H[j, t] + EPS)
                if variant == "unified_v6":
                    r = -alpha1 - alpha2 * share_n if negative_shaping else -alpha1
                else:
                    r = -share_n if negative_shaping else 0.0
                    if variant == "clipped_len":
                        r += ref_length_penalty(
                            lens[j], overlong_buffer_len, max_response_len, length_penalty_denominator
                        )
                rewards[(j, t)] = r
    return rewards, success, lens


def _normalise_groups(units, reward, success, mode, unbiased, zero_groups):
    """Shared normalisation of Part B. ``units[g]`` lists the keys of group g; key[0] is the row.

    mode: "single_combined" (one z-score of the combined rewards), "two_zero_filled" (each class
    normalised by its own reward set over ALL units of the group with the other class counted as 0),
    "per_class" (each class over its own units only).
    Returns dict key -> (z, degenerate, bound).
    """
    out = {}
    for g, keys in units.items():
        if not keys:
            continue
        if g in zero_groups:
            for k in keys:
                out[k] = (0.0, False, 1.0)
            continue
        if mode == "single_combined":
            values = [reward[k] for k in keys]
            for k in keys:
                out[k] = _z(reward[k], values, unbiased)
        elif mode == "two_zero_filled":
            r_pos = [reward[k] if success[k[0]] else 0.0 for k in keys]
            r_neg = [0.0 if success[k[0]] else reward[k] for k in keys]
            for k in keys:
                out[k] = _z(reward[k], r_pos if success[k[0]] else r_neg, unbiased)
        elif mode == "per_class":
            vp = [reward[k] for k in keys if success[k[0]]]
            vn = [reward[k] for k in keys if not success[k[0]]]
            for k in keys:
                out[k] = _z(reward[k], vp if success[k[0]] else vn, unbiased)
        else:
            raise AssertionError(mode)
    return out


def ref_gtpo_token(
    H,
    mask,
    scores,
    group_ids,
    num_groups,
    *,
    alpha1,
    alpha2,
    success_threshold=0.0,
    negative_shaping=False,
    variant="base",
    entropy_share="column",
    adv_norm="two_zero_filled",
    kappa=None,
    overlong_buffer_len=None,
    max_response_len=None,
    length_penalty_denominator="l1",
    uniform_outcome_groups="keep",
    std_unbiased=True,
):
    rewards, success, lens = ref_gtpo_token_rewards(
        H,
        mask,
        scores,
        group_ids,
        num_groups,
        alpha1=alpha1,
        alpha2=alpha2,
        success_threshold=success_threshold,
        negative_shaping=negative_shaping,
        variant=variant,
        entropy_share=entropy_share,
        kappa=kappa,
        overlong_buffer_len=overlong_buffer_len,
        max_response_len=max_response_len,
        length_penalty_denominator=length_penalty_denominator,
    )
    B, T = np.asarray(H).shape
    units, zero_groups = {}, set()
    for g in range(num_groups):
        rows = [i for i in range(B) if int(group_ids[i]) == g and lens[i] > 0]
        units[g] = [(i, t) for i in rows for t in range(lens[i])]
        n_pos = sum(success[i] for i in rows)
        if uniform_outcome_groups == "zero_adv" and (n_pos == 0 or n_pos == len(rows)):
            zero_groups.add(g)
    failures_shaped = negative_shaping or variant == "unified_v6"
    mode = adv_norm if failures_shaped else "single_combined"  # S21: one z-score when O- unshaped
    z = _normalise_groups(units, rewards, success, mode, std_unbiased, zero_groups)
    adv = np.zeros((B, T))
    degenerate = np.zeros((B, T), dtype=bool)
    bound = np.ones((B, T))
    for (i, t), (v, dg, bd) in z.items():
        adv[i, t], degenerate[i, t], bound[i, t] = v, dg, bd
    return dict(
        advantages=adv,
        degenerate=degenerate,
        bound=bound,
        success=np.array(success, dtype=bool),
        mean_entropy=np.array(_masked_mean(np.asarray(H, np.float64), lens)),
    )


def ref_grpo_s(
    H,
    mask,
    scores,
    group_ids,
    num_groups,
    *,
    beta1,
    beta2,
    success_threshold=0.0,
    negative_shaping=False,
    variant="base",
    negative_share="arithmetic",
    adv_norm="two_zero_filled",
    uniform_outcome_groups="keep",
    std_unbiased=True,
):
    H = np.asarray(H, dtype=np.float64)
    lens = _lengths(mask)
    B, T = H.shape
    success = [float(scores[i]) > success_threshold for i in range(B)]
    h_hat = _masked_mean(H, lens)  # (S32)
    reward, units, zero_groups = {}, {}, set()
    for g in range(num_groups):
        rows = [i for i in range(B) if int(group_ids[i]) == g and lens[i] > 0]
        units[g] = [(i,) for i in rows]
        pos = [i for i in rows if success[i]]
        neg = [j for j in rows if not success[j]]
        if uniform_outcome_groups == "zero_adv" and (not pos or not neg):
            zero_groups.add(g)
        n, m = len(pos), len(neg)
        s_pos = sum(h_hat[k] for k in pos)
        for i in pos:  # (S31)
            share = h_hat[i] / s_pos * n if s_pos > 0 else 1.0
            reward[(i,)] = beta1 + beta2 * share
        x = {j: 1.0 / (h_hat[j] + EPS) for j in neg}
        if neg:
            x_sum = sum(x.values())
            x_gm = math.exp(sum(math.log(v) for v in x.values()) / m)
        for j in neg:  # (S36) / App. C
            share_n = x[j] / x_sum * m if negative_share == "arithmetic" else x[j] / x_gm
            if variant == "unified_v6":
                reward[(j,)] = -beta1 - beta2 * share_n if negative_shaping else -beta1
            else:
                reward[(j,)] = -share_n if negative_shaping else 0.0
    failures_shaped = negative_shaping or variant == "unified_v6"
    mode = adv_norm if failures_shaped else "single_combined"  # (S35)
    z = _normalise_groups(units, reward, success, mode, std_unbiased, zero_groups)
    seq = np.zeros(B)
    seq_degenerate = np.zeros(B, dtype=bool)
    seq_bound = np.ones(B)
    for (i,), (v, dg, bd) in z.items():
        seq[i], seq_degenerate[i], seq_bound[i] = v, dg, bd
    adv = np.zeros((B, T))
    degenerate = np.zeros((B, T), dtype=bool)
    bound = np.ones((B, T))
    for i in range(B):
        for t in range(lens[i]):
            adv[i, t], degenerate[i, t], bound[i, t] = seq[i], seq_degenerate[i], seq_bound[i]
    return dict(
        advantages=adv,
        degenerate=degenerate,
        bound=bound,
        sequence_advantages=seq,
        seq_degenerate=seq_degenerate,
        seq_bound=seq_bound,
        success=np.array(success, dtype=bool),
        mean_entropy=np.array(h_hat),
    )


def ref_gtpo_traj(
    responses,
    mask,
    scores,
    group_ids,
    num_groups,
    entropy=None,
    *,
    gamma=0.1,
    entropy_threshold=0.7,
    conflict_weight=2.0,
    overlap="product",
    divisor="code",
    norm_adv_by_std=False,
    entropy_filter_scope="all",
    initial_entropy=None,
    entropy_reg_mode="advantage_offset",
):
    ids = np.asarray(responses)
    lens = _lengths(mask)
    B, T = ids.shape
    scores = [float(s) for s in scores]
    mean_h = _masked_mean(np.asarray(entropy, np.float64), lens) if entropy is not None else [0.0] * B
    # A.1 step 1: group advantage r - mean (optionally / (std_unbiased + eps))
    A = [0.0] * B
    for g in range(num_groups):
        rows = [i for i in range(B) if int(group_ids[i]) == g]
        if not rows:
            continue
        r = [scores[i] for i in rows]
        mean, std, _ = _stats(r, unbiased=True)
        for i in rows:
            a = scores[i] - mean
            A[i] = a / (std + EPS) if norm_adv_by_std else a
    # A.4 entropy filter
    keep = []
    for i in range(B):
        if entropy_threshold is None:
            d = True
        elif initial_entropy is not None and initial_entropy > entropy_threshold:
            d = True
        elif entropy_filter_scope == "neg_only" and A[i] >= 0:
            d = True
        else:
            d = mean_h[i] <= entropy_threshold
        keep.append(d)
    # A.5 shaped advantage
    shaped = []
    for i in range(B):
        if entropy_reg_mode == "advantage_offset":
            shaped.append((A[i] - gamma * mean_h[i]) if keep[i] else 0.0)
        else:
            shaped.append(A[i] if keep[i] else 0.0)
    # A.3 conflict runs
    k_f, k_b, n_conf = [0] * B, [0] * B, [1] * B
    adv = np.zeros((B, T))
    for i in range(B):
        members = [j for j in range(B) if int(group_ids[j]) == int(group_ids[i])]
        if A[i] > 0:
            opp = [j for j in members if A[j] < 0]
        elif A[i] < 0:
            opp = [j for j in members if A[j] > 0]
        else:
            opp = []
        kf = 0
        if opp:
            for t in range(lens[i]):
                if any(t < lens[j] and ids[j, t] == ids[i, t] for j in opp):
                    kf += 1
                else:
                    break
        kb = 0
        if opp:
            for u in range(lens[i]):
                if any(u < lens[j] and ids[j, lens[j] - 1 - u] == ids[i, lens[i] - 1 - u] for j in opp):
                    kb += 1
                else:
                    break
        k_f[i], k_b[i] = kf, kb
        if divisor == "code":
            n = max(1, max(kf, kb))
        elif divisor == "union":
            n = max(1, min(lens[i], kf + kb))
        else:
            n = 1
        n_conf[i] = n
        w = conflict_weight if A[i] > 0 else 0.0
        for t in range(lens[i]):
            in_f = t < kf
            in_b = t >= lens[i] - kb
            if overlap == "product":
                lam = (w if in_f else 1.0) * (w if in_b else 1.0)
            else:
                lam = w if (in_f or in_b) else 1.0
            if A[i] == 0:
                lam = 1.0
            adv[i, t] = shaped[i] * lam / n
    return dict(
        advantages=adv,
        raw_advantage=np.array(A),
        shaped_advantage=np.array(shaped),
        mean_entropy=np.array(mean_h),
        keep=np.array(keep, dtype=bool),
        forward_run=np.array(k_f),
        backward_run=np.array(k_b),
        conflict_divisor=np.array(n_conf),
    )


# ----------------------------------------------------------------------------------------------
# random batches
# ----------------------------------------------------------------------------------------------

SCORE_VALUES = (-1.0, -0.5, 0.0, 0.5, 1.0)


def make_batch_b(
    rng,
    *,
    success_threshold=0.0,
    max_groups=5,
    max_group_size=8,
    max_len=10,
    max_extra_cols=3,
    empty_rows=True,
    h_low=0.05,
    h_high=3.0,
):
    """Paper B batch: shuffled rows, dense group ids, ragged right padding, empty padding rows alone."""
    k_real = int(rng.integers(1, max_groups + 1))
    t_valid = int(rng.integers(1, max_len + 1))
    rows = []
    for g in range(k_real):
        size = int(rng.integers(1, max_group_size + 1))
        u = rng.random()
        p = float(rng.uniform(0.2, 0.8)) if u < 0.7 else (1.0 if u < 0.85 else 0.0)
        for _ in range(size):
            rows.append((g, int(rng.integers(1, t_valid + 1)), bool(rng.random() < p)))
    n_empty = int(rng.integers(0, 3)) if empty_rows else 0
    for e in range(n_empty):
        rows.append((k_real + e, 0, bool(rng.random() < 0.5)))
    k = k_real + n_empty
    relabel = rng.permutation(k)
    rows = [rows[i] for i in rng.permutation(len(rows))]
    B = len(rows)
    T = t_valid + int(rng.integers(0, max_extra_cols + 1))
    entropy = rng.uniform(h_low, h_high, size=(B, T))
    mask = np.zeros((B, T), dtype=np.int64)
    scores = np.zeros(B)
    gids = np.zeros(B, dtype=np.int64)
    ok_pos = [s for s in SCORE_VALUES if s > success_threshold]
    ok_neg = [s for s in SCORE_VALUES if s <= success_threshold]
    for i, (g, n, succ) in enumerate(rows):
        mask[i, :n] = 1
        gids[i] = relabel[g]
        scores[i] = rng.choice(ok_pos if succ else ok_neg)
    # finite garbage at masked positions (the invariance tests put NaN/inf there)
    garbage = rng.uniform(-5.0, 50.0, size=(B, T))
    entropy = np.where(mask == 1, entropy, garbage)
    return dict(
        entropy=torch.tensor(entropy, dtype=torch.float32),
        mask=torch.tensor(mask),
        scores=torch.tensor(scores, dtype=torch.float32),
        gids=torch.tensor(gids),
        K=k,
    )


def _nudge_means(entropy, mask, thresholds):
    """Move each row's mean entropy at least 1e-3 away from every threshold (no float ties)."""
    entropy = entropy.copy()
    for i in range(entropy.shape[0]):
        n = int(mask[i].sum())
        if n == 0:
            continue
        for _ in range(100):
            m = float(np.float32(entropy[i, :n]).astype(np.float64).mean())
            if all(abs(m - th) > 1e-3 for th in thresholds):
                break
            entropy[i, :n] = entropy[i, :n] * 1.003 + 1e-3
    return entropy


def make_batch_a(rng, *, max_groups=4, max_group_size=8, max_len=9, max_extra_cols=3, empty_rows=True):
    """Paper A batch: small vocabulary, shared prefixes / suffixes, integer scores."""
    k_real = int(rng.integers(1, max_groups + 1))
    t_valid = int(rng.integers(1, max_len + 1))
    vocab = int(rng.integers(2, 6))
    rows = []
    for g in range(k_real):
        size = int(rng.integers(1, max_group_size + 1))
        prefix = rng.integers(1, vocab + 1, size=int(rng.integers(0, 5)))
        suffix = rng.integers(1, vocab + 1, size=int(rng.integers(0, 4)))
        score_set = [(0, 1), (0, 1, 2, 3), (0, 10, 20), (1,), (-1, 1)][int(rng.integers(0, 5))]
        for _ in range(size):
            n = int(rng.integers(1, t_valid + 1))
            tok = rng.integers(1, vocab + 1, size=n)
            if rng.random() < 0.6:
                p = min(n, len(prefix))
                tok[:p] = prefix[:p]
            if rng.random() < 0.6:
                s = min(n, len(suffix))
                if s:
                    tok[n - s :] = suffix[len(suffix) - s :]
            rows.append((g, tok, float(rng.choice(score_set))))
    n_empty = int(rng.integers(0, 3)) if empty_rows else 0
    for e in range(n_empty):
        rows.append((k_real + e, np.zeros(0, dtype=np.int64), float(rng.integers(0, 2))))
    k = k_real + n_empty
    relabel = rng.permutation(k)
    rows = [rows[i] for i in rng.permutation(len(rows))]
    B = len(rows)
    T = t_valid + int(rng.integers(0, max_extra_cols + 1))
    ids = rng.integers(0, vocab + 1, size=(B, T))  # garbage (often valid-looking) at padding
    mask = np.zeros((B, T), dtype=np.int64)
    scores = np.zeros(B)
    gids = np.zeros(B, dtype=np.int64)
    for i, (g, tok, s) in enumerate(rows):
        ids[i, : len(tok)] = tok
        mask[i, : len(tok)] = 1
        gids[i] = relabel[g]
        scores[i] = s
    entropy = rng.uniform(0.05, 1.5, size=(B, T))
    entropy = _nudge_means(entropy, mask, (0.7, LN2, 1.02))
    entropy = np.where(mask == 1, entropy, rng.uniform(-5.0, 50.0, size=(B, T)))
    return dict(
        responses=torch.tensor(ids, dtype=torch.int64),
        mask=torch.tensor(mask),
        scores=torch.tensor(scores, dtype=torch.float32),
        gids=torch.tensor(gids),
        entropy=torch.tensor(entropy, dtype=torch.float32),
        K=k,
    )


# ----------------------------------------------------------------------------------------------
# calling both sides
# ----------------------------------------------------------------------------------------------


def call_token(b, **kw):
    return gtpo_token_advantage(b["entropy"], b["mask"], b["scores"], b["gids"], b["K"], **kw)


def ref_token(b, **kw):
    return ref_gtpo_token(b["entropy"].double().numpy(), b["mask"].numpy(), b["scores"].double().numpy(),
                          b["gids"].numpy(), b["K"], **kw)


def call_seq(b, **kw):
    return grpo_s_advantage(b["entropy"], b["mask"], b["scores"], b["gids"], b["K"], **kw)


def ref_seq(b, **kw):
    return ref_grpo_s(b["entropy"].double().numpy(), b["mask"].numpy(), b["scores"].double().numpy(),
                      b["gids"].numpy(), b["K"], **kw)


def call_traj(b, use_entropy=True, **kw):
    ent = b["entropy"] if use_entropy else None
    return gtpo_traj_advantage(b["responses"], b["mask"], b["scores"], b["gids"], b["K"], ent, **kw)


def ref_traj(b, use_entropy=True, **kw):
    ent = b["entropy"].double().numpy() if use_entropy else None
    return ref_gtpo_traj(b["responses"].numpy(), b["mask"].numpy(), b["scores"].double().numpy(),
                         b["gids"].numpy(), b["K"], ent, **kw)


def _np(x):
    return x.detach().to(torch.float64).numpy() if x.is_floating_point() else x.detach().numpy()


def assert_adv_matches(got, ref, degenerate, bound, mask, atol=ATOL, rtol=RTOL, what="advantages"):
    got = _np(got)
    mask = np.asarray(mask) != 0
    assert got.shape == ref.shape, (what, got.shape, ref.shape)
    assert np.isfinite(got).all(), f"{what}: non-finite values {got}"
    assert (got[~mask] == 0).all() if got.ndim == 2 else True, f"{what}: nonzero outside the mask"
    ok = ~degenerate
    torch.testing.assert_close(
        torch.from_numpy(got[ok]), torch.from_numpy(ref[ok]), atol=atol, rtol=rtol, msg=lambda m: f"{what}: {m}"
    )
    assert (np.abs(got[degenerate]) <= bound[degenerate] + 1e-3).all(), f"{what}: degenerate set out of bounds"


# ----------------------------------------------------------------------------------------------
# switch strategies
# ----------------------------------------------------------------------------------------------

ALPHAS = [(0.9, 0.1), (1.0, 0.1), (0.8, 0.2), (0.5, 0.5), (0.7, 0.3)]


@st.composite
def token_kwargs(draw, v6_unshaped=True):
    """Switches of gtpo_token_advantage. ``v6_unshaped=False`` leaves out variant="unified_v6" with
    negative_shaping=False, where the package disagrees with the reference (see
    test_gtpo_token_unified_v6_without_negative_shaping_gives_constant_failure_reward)."""
    variant = draw(st.sampled_from(["base", "clipped_len", "unified_v6"]))
    alpha1, alpha2 = draw(st.sampled_from(ALPHAS if variant != "clipped_len" else [a for a in ALPHAS if a[0] >= 0.7]))
    kw = dict(
        alpha1=alpha1,
        alpha2=alpha2,
        success_threshold=draw(st.sampled_from([0.0, 0.25, -0.75])),
        negative_shaping=draw(st.booleans()) if (v6_unshaped or variant != "unified_v6") else True,
        variant=variant,
        entropy_share=draw(st.sampled_from(["column", "geometric"])),
        adv_norm=draw(st.sampled_from(["two_zero_filled", "single_combined", "per_class"])),
        uniform_outcome_groups=draw(st.sampled_from(["keep", "zero_adv"])),
        std_unbiased=draw(st.booleans()),
    )
    if variant == "clipped_len":
        # kappa with alpha1 (1 + 1/kappa) >= 1.05 (the spec asserts the bound is >= 1)
        kappas = [k for k in (1.25, 1.5, 2.0, 3.0, 5.0) if alpha1 * (1 + 1 / k) >= 1.05]
        l2 = draw(st.integers(2, 10))
        kw.update(
            kappa=draw(st.sampled_from(kappas)),
            max_response_len=l2,
            overlong_buffer_len=draw(st.integers(1, l2 - 1)),
            length_penalty_denominator=draw(st.sampled_from(["l1", "l2"])),
        )
    return kw


@st.composite
def seq_kwargs(draw):
    beta1, beta2 = draw(st.sampled_from(ALPHAS))
    return dict(
        beta1=beta1,
        beta2=beta2,
        success_threshold=draw(st.sampled_from([0.0, 0.25, -0.75])),
        negative_shaping=draw(st.booleans()),
        variant=draw(st.sampled_from(["base", "unified_v6"])),
        negative_share=draw(st.sampled_from(["arithmetic", "geometric"])),
        adv_norm=draw(st.sampled_from(["two_zero_filled", "single_combined", "per_class"])),
        uniform_outcome_groups=draw(st.sampled_from(["keep", "zero_adv"])),
        std_unbiased=draw(st.booleans()),
    )


@st.composite
def traj_kwargs(draw):
    return dict(
        gamma=draw(st.sampled_from([0.1, 0.0, 0.5])),
        entropy_threshold=draw(st.sampled_from([0.7, LN2, 1.02, None])),
        conflict_weight=draw(st.sampled_from([2.0, 3.0, 1.5])),
        overlap=draw(st.sampled_from(["product", "union"])),
        divisor=draw(st.sampled_from(["code", "union", "none"])),
        norm_adv_by_std=draw(st.booleans()),
        entropy_filter_scope=draw(st.sampled_from(["all", "neg_only"])),
        initial_entropy=draw(st.sampled_from([None, None, 0.5, 1.5])),
        entropy_reg_mode=draw(st.sampled_from(["advantage_offset", "differentiable"])),
    )


def _assert_success(got, ref, b):
    """O+ membership (score > threshold) on rows with at least one valid token. Length-0 padding rows are
    no group member; what the package reports for them is not specified (it reports False)."""
    valid = b["mask"].sum(1).numpy() > 0
    assert np.array_equal(_np(got.success).astype(bool)[valid], ref["success"][valid])


def check_token(b, kw):
    got = call_token(b, **kw)
    ref = ref_token(b, **kw)
    assert_adv_matches(got.advantages, ref["advantages"], ref["degenerate"], ref["bound"], b["mask"])
    _assert_success(got, ref, b)
    torch.testing.assert_close(_np(got.mean_entropy), ref["mean_entropy"], atol=1e-5, rtol=1e-5)
    return got, ref


def check_seq(b, kw):
    got = call_seq(b, **kw)
    ref = ref_seq(b, **kw)
    assert_adv_matches(got.advantages, ref["advantages"], ref["degenerate"], ref["bound"], b["mask"])
    lens = b["mask"].sum(1).numpy()
    assert_adv_matches(got.sequence_advantages, ref["sequence_advantages"], ref["seq_degenerate"],
                       ref["seq_bound"], np.ones_like(lens), what="sequence_advantages")
    assert (_np(got.sequence_advantages)[lens == 0] == 0).all()
    _assert_success(got, ref, b)
    torch.testing.assert_close(_np(got.mean_entropy), ref["mean_entropy"], atol=1e-5, rtol=1e-5)
    return got, ref


def check_traj(b, kw, use_entropy=True):
    got = call_traj(b, use_entropy=use_entropy, **kw)
    ref = ref_traj(b, use_entropy=use_entropy, **kw)
    for name in ("forward_run", "backward_run", "conflict_divisor"):
        assert np.array_equal(_np(getattr(got, name)).astype(np.int64), ref[name]), (
            name, _np(getattr(got, name)), ref[name])
    assert np.array_equal(_np(got.keep).astype(bool), ref["keep"]), (_np(got.keep), ref["keep"])
    for name in ("raw_advantage", "shaped_advantage", "mean_entropy"):
        torch.testing.assert_close(_np(getattr(got, name)), ref[name], atol=1e-5, rtol=1e-5,
                                   msg=lambda m, n=name: f"{n}: {m}")
    adv = _np(got.advantages)
    assert np.isfinite(adv).all()
    assert (adv[b["mask"].numpy() == 0] == 0).all()
    torch.testing.assert_close(adv, ref["advantages"], atol=1e-5, rtol=1e-5)
    return got, ref


# ----------------------------------------------------------------------------------------------
# 0. the references reproduce the spec's golden values (§3), and so does the package
# ----------------------------------------------------------------------------------------------


def _b1_group():
    H = torch.tensor([[0.6, 0.2, 1.0], [0.2, 0.6, 0.0], [0.5, 0.5, 0.5], [0.4, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 1, 1], [1, 0, 0]])
    return dict(entropy=H, mask=mask, scores=torch.tensor([1.0, 1.0, -1.0, -1.0]),
                gids=torch.zeros(4, dtype=torch.int64), K=1)


def _rows(adv, mask):
    return [[round(float(v), 6) for v, m in zip(r, mr) if m] for r, mr in zip(np.asarray(adv), np.asarray(mask))]


def test_golden_b1_b2_b6_gtpo_token():
    b = _b1_group()
    m = b["mask"].numpy()
    want_b1 = [[0.936037, 0.746726, 0.841381], [0.746726, 0.936037], [-1.051727] * 3, [-1.051727]]
    want_b1_pop = [[0.992817, 0.792022, 0.89242], [0.792022, 0.992817], [-1.115525] * 3, [-1.115525]]
    want_b2 = [[0.936037, 0.746726, 0.841381], [0.746726, 0.936037],
               [-0.838626, -1.048283, -1.048283], [-1.257939]]
    want_b6 = {
        "two_zero_filled": [[0.927793, 0.755625, 0.841709], [0.755625, 0.927793],
                            [-1.034878, -1.054042, -1.054042], [-1.073207]],
        "single_combined": [[0.885973, 0.799771, 0.842872], [0.799771, 0.885973],
                            [-1.044012, -1.05359, -1.05359], [-1.063168]],
        "per_class": [[1.0, -1.0, 0.0], [-1.0, 1.0], [1.22461, 0.0, 0.0], [-1.22461]],
    }
    cases = [(dict(alpha1=0.9, alpha2=0.1), want_b1),
             (dict(alpha1=0.9, alpha2=0.1, std_unbiased=False), want_b1_pop),
             (dict(alpha1=0.9, alpha2=0.1, negative_shaping=True), want_b2)]
    for norm, want in want_b6.items():
        cases.append((dict(alpha1=1.0, alpha2=0.1, variant="unified_v6", negative_shaping=True, adv_norm=norm), want))
    for kw, want in cases:
        ref = ref_token(b, **kw)
        got = call_token(b, **kw)
        for a in (ref["advantages"], _np(got.advantages)):
            flat_a = [v for r in _rows(a, m) for v in r]
            flat_w = [v for r in want for v in r]
            np.testing.assert_allclose(flat_a, flat_w, atol=5e-5, err_msg=str(kw))  # B6 per-class is printed rounded


def test_golden_b1_rewards_b3_b4_reference():
    b = _b1_group()
    rw, _, _ = ref_gtpo_token_rewards(b["entropy"].double().numpy(), b["mask"].numpy(), b["scores"].numpy(),
                                      b["gids"].numpy(), 1, alpha1=0.9, alpha2=0.1)
    assert [round(rw[(0, t)], 6) for t in range(3)] == [1.05, 0.95, 1.0]
    assert [round(rw[(1, t)], 6) for t in range(2)] == [0.95, 1.05]
    rw, _, _ = ref_gtpo_token_rewards(b["entropy"].double().numpy(), b["mask"].numpy(), b["scores"].numpy(),
                                      b["gids"].numpy(), 1, alpha1=0.9, alpha2=0.1, negative_shaping=True)
    np.testing.assert_allclose([rw[(2, t)] for t in range(3)] + [rw[(3, 0)]],
                               [-0.888889, -1, -1, -1.111111], atol=1e-6)
    # B3 clip: d = 4, H = [2, 0, 0, 0] and d = 3, H = [1.5, 0.3, 0.2], kappa = 3, no length penalty
    for col, want in (([2.0, 0, 0, 0], [1.2, 1, 1, 1]), ([1.5, 0.3, 0.2], [1.125, 1, 1])):
        H = np.array(col)[:, None]
        rw, _, _ = ref_gtpo_token_rewards(H, np.ones_like(H), np.ones(len(col)), np.zeros(len(col)), 1,
                                          alpha1=0.9, alpha2=0.1, variant="clipped_len", kappa=3.0,
                                          overlong_buffer_len=100, max_response_len=200)
        np.testing.assert_allclose([rw[(i, 0)] for i in range(len(col))], want, atol=1e-6)
    # B3 length penalty: L1 = 4, L2 = 10
    assert [ref_length_penalty(n, 4, 10) for n in (5, 6, 8, 10, 12)] == [0, 0, -0.5, -1.0, -1]
    assert [ref_length_penalty(n, 4, 10, "l2") for n in (5, 6, 8, 10, 12)] == [0, 0, -0.2, -0.4, -1]
    # B4 geometric: H = [0.5, 2.0] (GM = 1)
    H = np.array([[0.5, 2.0]])
    rw, _, _ = ref_gtpo_token_rewards(H, np.ones_like(H), np.array([1.0]), np.zeros(1), 1,
                                      alpha1=0.9, alpha2=0.1, entropy_share="geometric")
    np.testing.assert_allclose([rw[(0, 0)], rw[(0, 1)]], [0.95, 1.10], atol=1e-5)
    rw, _, _ = ref_gtpo_token_rewards(H, np.ones_like(H), np.array([-1.0]), np.zeros(1), 1,
                                      alpha1=0.9, alpha2=0.1, entropy_share="geometric", negative_shaping=True)
    np.testing.assert_allclose([rw[(0, 0)], rw[(0, 1)]], [-2.0, -0.5], atol=1e-5)


def test_golden_b5_b7_grpo_s():
    b = _b1_group()
    cases = [
        (dict(beta1=0.9, beta2=0.1), [0.900305, 0.831051, -0.865678, -0.865678]),
        (dict(beta1=0.9, beta2=0.1, negative_shaping=True), [0.900305, 0.831051, -0.665409, -1.045643]),
        (dict(beta1=1.0, beta2=0.1, variant="unified_v6", negative_shaping=True, adv_norm="single_combined"),
         [0.881675, 0.850187, -0.857184, -0.874678]),
        (dict(beta1=1.0, beta2=0.1, variant="unified_v6", negative_shaping=True, adv_norm="single_combined",
              negative_share="geometric"), [0.881671, 0.850191, -0.857132, -0.87473]),
    ]
    for kw, want in cases:
        ref = ref_seq(b, **kw)
        got = call_seq(b, **kw)
        np.testing.assert_allclose(ref["sequence_advantages"], want, atol=2e-6, err_msg=str(kw))
        np.testing.assert_allclose(_np(got.sequence_advantages), want, atol=2e-5, err_msg=str(kw))


def _a1_group():
    seqs = [[11, 12, 13, 14, 15, 99, 2], [11, 12, 21, 15, 99, 2], [11, 22, 13, 14, 99, 2], [31, 12, 13, 99, 2]]
    T = 8
    ids = torch.zeros(4, T, dtype=torch.int64)
    mask = torch.zeros(4, T, dtype=torch.int64)
    H = torch.zeros(4, T)
    for i, (s, h) in enumerate(zip(seqs, [0.30, 0.50, 0.90, 0.69])):
        ids[i, : len(s)] = torch.tensor(s)
        mask[i, : len(s)] = 1
        H[i, : len(s)] = h
    return dict(responses=ids, mask=mask, scores=torch.tensor([20.0, 0.0, 10.0, 2.0]),
                gids=torch.zeros(4, dtype=torch.int64), entropy=H, K=1)


def test_golden_a1_a3_traj():
    b = _a1_group()
    m = b["mask"].numpy()
    lens = m.sum(1)
    for side in ("ref", "pkg"):
        out = ref_traj(b) if side == "ref" else {k: _np(v) for k, v in call_traj(b)._asdict().items()}
        assert list(zip(out["forward_run"], out["backward_run"])) == [(3, 3), (2, 3), (1, 2), (0, 2)], side
        assert list(out["conflict_divisor"]) == [3, 3, 2, 2], side
        np.testing.assert_allclose(out["shaped_advantage"], [11.97, -8.05, 0, -6.069], atol=1e-5)
        coeff = _rows(out["advantages"] / lens[:, None], m)
        want = [[1.14, 1.14, 1.14, 0.57, 1.14, 1.14, 1.14], [0, 0, -0.447222, 0, 0, 0], [0] * 6,
                [-0.6069, -0.6069, -0.6069, 0, 0]]
        for r, w in zip(coeff, want):
            np.testing.assert_allclose(r, w, atol=2e-5, err_msg=side)
    # paper-literal: union lambda, no divisor, threshold ln 2; coefficient / (G |o|)
    kw = dict(overlap="union", divisor="none", entropy_threshold=LN2)
    for side in ("ref", "pkg"):
        out = ref_traj(b, **kw) if side == "ref" else {k: _np(v) for k, v in call_traj(b, **kw)._asdict().items()}
        coeff = _rows(out["advantages"] / lens[:, None] / 4, m)
        want = [[0.855, 0.855, 0.855, 0.4275, 0.855, 0.855, 0.855], [0, 0, -0.335417, 0, 0, 0], [0] * 6,
                [-0.30345, -0.30345, -0.30345, 0, 0]]
        for r, w in zip(coeff, want):
            np.testing.assert_allclose(r, w, atol=2e-5, err_msg=side)
    # union divisor |F u B|
    assert list(ref_traj(b, divisor="union")["conflict_divisor"]) == [6, 5, 3, 2]


def test_golden_a2_a4_traj():
    ids = torch.tensor([[7, 8, 2, 0], [7, 8, 8, 2]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]])
    b = dict(responses=ids, mask=mask, scores=torch.tensor([1.0, 0.0]), gids=torch.zeros(2, dtype=torch.int64),
             entropy=torch.zeros(2, 4), K=1)
    for kw, lam0, nconf in ((dict(), [2, 4, 2], [2, 2]), (dict(overlap="union", divisor="union"), [2, 2, 2], [3, 4])):
        for side in ("ref", "pkg"):
            out = ref_traj(b, **kw) if side == "ref" else {k: _np(v) for k, v in call_traj(b, **kw)._asdict().items()}
            assert list(out["forward_run"]) == [2, 2] and list(out["backward_run"]) == [2, 2]
            assert list(out["conflict_divisor"]) == nconf
            np.testing.assert_allclose(out["advantages"][0, :3], 0.5 * np.array(lam0) / nconf[0], atol=1e-6)
            np.testing.assert_allclose(out["advantages"][1], 0.0, atol=0)
    # A4: rewards [20, 20], <H> = [0.2, 0.8]: A = 0, delta = [1, 0], A~ = [-0.02, 0], lambda = 1
    ids = torch.tensor([[5, 6, 2], [5, 6, 2]])
    b = dict(responses=ids, mask=torch.ones(2, 3, dtype=torch.int64), scores=torch.tensor([20.0, 20.0]),
             gids=torch.zeros(2, dtype=torch.int64), entropy=torch.tensor([[0.2] * 3, [0.8] * 3]), K=1)
    for side in ("ref", "pkg"):
        out = ref_traj(b) if side == "ref" else {k: _np(v) for k, v in call_traj(b)._asdict().items()}
        np.testing.assert_allclose(out["shaped_advantage"], [-0.02, 0.0], atol=1e-6)
        np.testing.assert_allclose(out["advantages"] / 3, [[-0.006667] * 3, [0.0] * 3], atol=1e-6)
        assert list(out["keep"]) == [True, False]


# ----------------------------------------------------------------------------------------------
# 1-3. random batches vs the float64 references
# ----------------------------------------------------------------------------------------------


@settings(max_examples=400, **HYP)
@given(seed=SEEDS, kw=token_kwargs())
def test_gtpo_token_matches_reference(seed, kw):
    b = make_batch_b(np.random.default_rng(seed), success_threshold=kw["success_threshold"])
    check_token(b, kw)


@pytest.mark.parametrize("variant", ["base", "clipped_len", "unified_v6"])
@pytest.mark.parametrize("negative_shaping", [False, True])
@pytest.mark.parametrize("entropy_share", ["column", "geometric"])
@pytest.mark.parametrize("adv_norm", ["two_zero_filled", "single_combined", "per_class"])
def test_gtpo_token_every_switch_combination(variant, negative_shaping, entropy_share, adv_norm):
    rng = np.random.default_rng(zlib.crc32(repr((variant, negative_shaping, entropy_share, adv_norm)).encode()))
    extra = dict(kappa=2.0, max_response_len=8, overlong_buffer_len=3) if variant == "clipped_len" else {}
    for _ in range(6):
        b = make_batch_b(rng)
        check_token(b, dict(alpha1=0.9, alpha2=0.1, variant=variant, negative_shaping=negative_shaping,
                            entropy_share=entropy_share, adv_norm=adv_norm, **extra))


@settings(max_examples=300, **HYP)
@given(seed=SEEDS, kw=seq_kwargs())
def test_grpo_s_matches_reference(seed, kw):
    b = make_batch_b(np.random.default_rng(seed), success_threshold=kw["success_threshold"])
    check_seq(b, kw)


@settings(max_examples=300, **HYP)
@given(seed=SEEDS, kw=traj_kwargs(), use_entropy=st.sampled_from([True, True, True, False]))
def test_gtpo_traj_matches_reference(seed, kw, use_entropy):
    b = make_batch_a(np.random.default_rng(seed))
    check_traj(b, kw, use_entropy=use_entropy)


@settings(max_examples=100, **HYP)
@given(seed=SEEDS, preset=st.sampled_from(["official", "paper"]))
def test_gtpo_traj_preset_like_combinations(seed, preset):
    if preset == "official":
        kw = dict(gamma=0.1, entropy_threshold=0.7, conflict_weight=2.0, overlap="product", divisor="code",
                  norm_adv_by_std=False)
    else:
        kw = dict(gamma=0.1, entropy_threshold=LN2, conflict_weight=2.0, overlap="union", divisor="none",
                  norm_adv_by_std=True)
    b = make_batch_a(np.random.default_rng(seed))
    got, ref = check_traj(b, kw)
    # the runs are a property of ids, mask and signs only: identical under both presets
    other = ref_traj(b, **{**kw, "overlap": "union" if preset == "official" else "product"})
    assert np.array_equal(other["forward_run"], _np(got.forward_run))


# ----------------------------------------------------------------------------------------------
# 4. invariances
# ----------------------------------------------------------------------------------------------

GARBAGE = np.array([np.nan, np.inf, -np.inf, 1e30, -1e30, 3.4e38, -7.0, 0.0, 1e-30], dtype=np.float32)
FINITE_GARBAGE = np.array([1e30, -1e30, 3.4e38, -7.0, 0.0, 1e-30, 123.456], dtype=np.float32)


def _garbage_like(rng, shape, pool=GARBAGE):
    return torch.from_numpy(rng.choice(pool, size=shape)).to(torch.float32)


def _outputs(kind, b, kw):
    if kind == "token":
        res = call_token(b, **kw)
    elif kind == "seq":
        res = call_seq(b, **kw)
    else:
        res = call_traj(b, **kw)
    return {k: v for k, v in res._asdict().items() if v is not None}  # optional fields not requested


def _reference(kind, b, kw):
    if kind == "token":
        return ref_token(b, **kw)
    if kind == "seq":
        return ref_seq(b, **kw)
    return ref_traj(b, **kw)


def _batch(kind, rng, kw):
    if kind == "traj":
        return make_batch_a(rng)
    return make_batch_b(rng, success_threshold=kw["success_threshold"])


@st.composite
def kind_and_kwargs(draw):
    kind = draw(st.sampled_from(["token", "seq", "traj"]))
    strat = {"token": token_kwargs(), "seq": seq_kwargs(), "traj": traj_kwargs()}[kind]
    return kind, draw(strat)


def _token_ok(kind, ref, B, T):
    """Tokens whose value is well conditioned (not in a degenerate z-score set)."""
    if kind == "traj":
        return np.ones((B, T), dtype=bool)
    return ~ref["degenerate"]


def _assert_same(a, b, ok, what):
    a, b = _np(a), _np(b)
    assert np.isfinite(a).all() and np.isfinite(b).all(), what
    if a.dtype.kind in "biu" or a.dtype == bool:
        assert np.array_equal(a, b), what
        return
    torch.testing.assert_close(a[ok], b[ok], atol=1e-5, rtol=1e-5, msg=lambda m: f"{what}: {m}")


@settings(max_examples=150, **HYP)
@given(seed=SEEDS, case=kind_and_kwargs())
def test_row_permutation_permutes_outputs(seed, case):
    kind, kw = case
    rng = np.random.default_rng(seed)
    b = _batch(kind, rng, kw)
    B, T = b["mask"].shape
    perm = torch.from_numpy(rng.permutation(B))
    pb = {k: (v[perm] if torch.is_tensor(v) else v) for k, v in b.items()}
    out, pout = _outputs(kind, b, kw), _outputs(kind, pb, kw)
    ref = _reference(kind, b, kw)
    ok2 = _token_ok(kind, ref, B, T)
    p = perm.numpy()
    for name, v in out.items():
        if v.dim() == 2:
            ok = ok2[p]
        elif name == "sequence_advantages":
            ok = ~ref["seq_degenerate"][p]
        else:
            ok = np.ones(B, dtype=bool)
        _assert_same(pout[name], v[perm], ok, f"{kind}.{name}")


@settings(max_examples=150, **HYP)
@given(seed=SEEDS, case=kind_and_kwargs(), extra=st.integers(1, 6))
def test_extra_padding_columns_change_nothing(seed, case, extra):
    kind, kw = case
    rng = np.random.default_rng(seed)
    b = _batch(kind, rng, kw)
    B, T = b["mask"].shape
    wide = dict(b)
    wide["mask"] = torch.cat([b["mask"], torch.zeros(B, extra, dtype=b["mask"].dtype)], dim=1)
    wide["entropy"] = torch.cat([b["entropy"], _garbage_like(rng, (B, extra))], dim=1)
    if "responses" in b:
        wide["responses"] = torch.cat([b["responses"], torch.from_numpy(rng.integers(0, 6, (B, extra)))], dim=1)
    out, wout = _outputs(kind, b, kw), _outputs(kind, wide, kw)
    ref = _reference(kind, b, kw)
    ok2 = _token_ok(kind, ref, B, T)
    for name, v in out.items():
        w = wout[name]
        if v.dim() == 2:
            assert torch.equal(w[:, T:], torch.zeros_like(w[:, T:])), f"{kind}.{name}: extra columns not 0"
            _assert_same(w[:, :T], v, ok2, f"{kind}.{name}")
        else:
            ok = ~ref["seq_degenerate"] if name == "sequence_advantages" else np.ones(B, dtype=bool)
            _assert_same(w, v, ok, f"{kind}.{name}")


@pytest.mark.parametrize("pool", ["finite", "with_nan_inf"])
@settings(max_examples=100, **HYP)
@given(seed=SEEDS, case=kind_and_kwargs())
def test_garbage_at_masked_positions_changes_nothing(pool, seed, case):
    """Bit-for-bit: masked entropies (huge, negative, or NaN/+-inf) and masked token ids never matter."""
    kind, kw = case
    rng = np.random.default_rng(seed)
    b = _batch(kind, rng, kw)
    masked = b["mask"] == 0
    dirty = dict(b)
    values = _garbage_like(rng, masked.shape, FINITE_GARBAGE if pool == "finite" else GARBAGE)
    dirty["entropy"] = torch.where(masked, values, b["entropy"])
    if "responses" in b:
        dirty["responses"] = torch.where(masked, torch.from_numpy(rng.integers(0, 6, masked.shape)), b["responses"])
    out, dout = _outputs(kind, b, kw), _outputs(kind, dirty, kw)
    for name, v in out.items():
        assert torch.equal(dout[name], v), f"{kind}.{name}: garbage at masked positions leaked"


# ----------------------------------------------------------------------------------------------
# 5. conservation (Prop. 2.2) for the base GTPO reward
# ----------------------------------------------------------------------------------------------


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
    adv = _np(res.advantages)
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
    adv = _np(call_token(b, alpha1=0.75, alpha2=0.25).advantages)
    m = b["mask"].numpy() == 1
    succ = (b["scores"] > 0).numpy()
    a_pos = adv[succ][m[succ]]
    if n_fail == 0:
        np.testing.assert_allclose(a_pos, 0.0, atol=1e-6)
    else:
        np.testing.assert_allclose(a_pos, a_pos[0], atol=1e-5)
        assert (a_pos > 0).all()


# ----------------------------------------------------------------------------------------------
# 6. degenerate groups
# ----------------------------------------------------------------------------------------------


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
        if v is None:  # optional diagnostics field (share_stats) not requested
            continue
        a = _np(v)
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
        assert (_np(res.advantages)[lens.numpy() == 0] == 0).all()
        check_token(b, kw)
        adv = _np(res.advantages)
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
        assert (_np(res.sequence_advantages)[lens == 0] == 0).all()
        if not mixed_empty:
            check_seq(b, kw)
        if uni == "zero_adv":  # uniform groups (length-0 rows are no group members) -> 0
            gid = b["gids"].numpy()
            for g in (0, 1, 4, 5, 6, 9):
                assert (_np(res.advantages)[gid == g] == 0).all(), (kw, g)


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
        assert (_np(res.advantages)[lens == 0] == 0).all()
        if not mixed_empty:
            check_traj(b, kw)


# ----------------------------------------------------------------------------------------------
# disagreements between the package and the spec-derived reference (kept failing on purpose)
# ----------------------------------------------------------------------------------------------


def test_gtpo_token_unified_v6_without_negative_shaping_gives_constant_failure_reward():
    """unified_v6 without negative shaping: every failure token has r- = -alpha1 (the brief:
    "in unified_v6 r- = -alpha1 - alpha2 share (with negative_shaping) or -alpha1 (without)"; the
    same switch in grpo_s(variant="unified_v6") does give the constant -beta1). With the golden B1
    group, alpha1 = 1, alpha2 = 0.1, two_zero_filled, unbiased std:
    R- = {0 x 5 success tokens, -1 x 4 failure tokens}: mean -4/9, unbiased std sqrt(180/648) = 0.527046,
    so every failure token must get the SAME advantage (-1 + 4/9) / (0.527046 + eps) = -1.054093.
    The package returns o2 [-1.034878, -1.054042, -1.054042], o3 [-1.073207]: the golden B6 values
    WITH negative shaping (inverse-entropy share applied although negative_shaping=False).
    """
    b = _b1_group()
    kw = dict(alpha1=1.0, alpha2=0.1, variant="unified_v6", negative_shaping=False, adv_norm="two_zero_filled")
    r_neg = [0.0] * 5 + [-1.0] * 4
    mean, std, _ = _stats(r_neg, unbiased=True)
    want = (-1.0 - mean) / (std + EPS)
    ref = ref_token(b, **kw)
    np.testing.assert_allclose(ref["advantages"][2:, :][b["mask"][2:].numpy() == 1], want, atol=1e-9)
    got = _np(call_token(b, **kw).advantages)
    fail_tokens = got[2:][b["mask"][2:].numpy() == 1]
    np.testing.assert_allclose(
        fail_tokens, want, atol=2e-5,
        err_msg="failure tokens of unified_v6 with negative_shaping=False should all be (-alpha1 - mean(R-))/std(R-); "
                "the package applies the alpha2 inverse-entropy share anyway")
    # and on random batches (two_zero_filled / single_combined, column / geometric)
    rng = np.random.default_rng(7)
    for share, norm in itertools.product(["column", "geometric"], ["two_zero_filled", "single_combined"]):
        for _ in range(5):
            check_token(make_batch_b(rng), dict(alpha1=0.9, alpha2=0.1, variant="unified_v6", negative_shaping=False,
                                                entropy_share=share, adv_norm=norm))


def test_gtpo_token_zero_adv_ignores_length0_rows_like_grpo_s():
    """uniform_outcome_groups="zero_adv": a group whose rows WITH tokens are all successes, plus one
    length-0 (all-padding) failure row, is an all-success group: the length-0 row has no token, no
    entropy and no reward in any set of §B.3, and grpo_s_advantage already treats such rows as no
    group member (it zeroes this group). Expected: advantages 0. gtpo_token_advantage counts the
    padding row as a failure and returns the entropy redistribution instead."""
    H = torch.tensor([[0.5, 0.9, 1.3], [1.1, 0.2, 0.0], [0.7, 0.0, 0.0], [0.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 0, 0], [0, 0, 0]])
    b = dict(entropy=H, mask=mask, scores=torch.tensor([1.0, 1.0, 1.0, -1.0]),
             gids=torch.zeros(4, dtype=torch.int64), K=1)
    seq = call_seq(b, beta1=0.9, beta2=0.1, uniform_outcome_groups="zero_adv")
    assert (_np(seq.advantages) == 0).all()
    got = _np(call_token(b, alpha1=0.9, alpha2=0.1, uniform_outcome_groups="zero_adv").advantages)
    ref = ref_token(b, alpha1=0.9, alpha2=0.1, uniform_outcome_groups="zero_adv")
    assert (ref["advantages"] == 0).all()
    np.testing.assert_array_equal(got, np.zeros_like(got),
                                  err_msg="all-success group (plus a length-0 failure row) not zeroed by zero_adv")
