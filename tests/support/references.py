"""Independent float64 references of the three estimators, written from docs/spec.md.

Plain Python loops over groups, rows and tokens in float64 that share no code with
``gtpo_verl.algorithms``: Paper A (spec A.1-A.6), Paper B (spec B.1-B.7). Each returns the
advantages plus, for z-scored tokens, whether the token's set is "degenerate" (a tiny std
that float32 cannot resolve) and the |z| bound of its set (see ``support.compare``).
"""

from __future__ import annotations

import math

import numpy as np

EPS = 1e-6
LN2 = math.log(2.0)
# a z-score set with at least two members, not all exactly 0, and a std below this is
# ill-conditioned in float32 (noise / (noise + eps)): only its bound is checked
DEGENERATE_STD = 0.05


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


def ref_stats(values, unbiased):
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
    mean, std, n = ref_stats(set_values, unbiased)
    z = (x - mean) / (std + EPS)
    degenerate = n >= 2 and std < DEGENERATE_STD and any(v != 0.0 for v in set_values)
    return z, degenerate, math.sqrt(max(n, 1))


def ref_length_penalty(length, overlong_buffer_len, max_response_len, denominator="l1"):
    """R(i) of (S23), spec B.4: L1 = buffer, L2 = max response length, L = L2 - L1."""
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
    """Per-token shaped rewards r~ (spec B.2-B.6) -> dict (i, t) -> reward, plus success flags."""
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
        mean, std, _ = ref_stats(r, unbiased=True)
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
