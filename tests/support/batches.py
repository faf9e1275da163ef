"""Batch builders: padded rows, random Paper A / Paper B batches, the spec's golden groups."""

from __future__ import annotations

import numpy as np
import torch

from support.references import LN2


def padded(rows, width=None, fill=0.0, dtype=torch.float32):
    """Right-pad a list of per-row lists into ``(B, width)`` values and a 0/1 mask."""
    width = width or max((len(r) for r in rows), default=0)
    values = torch.full((len(rows), width), fill, dtype=dtype)
    mask = torch.zeros(len(rows), width, dtype=torch.int64)
    for i, row in enumerate(rows):
        values[i, : len(row)] = torch.tensor(row, dtype=dtype)
        mask[i, : len(row)] = 1
    return values, mask


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
# the golden groups of docs/spec.md (B1 and A1)
# ----------------------------------------------------------------------------------------------


def golden_b1_group():
    H = torch.tensor([[0.6, 0.2, 1.0], [0.2, 0.6, 0.0], [0.5, 0.5, 0.5], [0.4, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 1, 1], [1, 0, 0]])
    return dict(entropy=H, mask=mask, scores=torch.tensor([1.0, 1.0, -1.0, -1.0]),
                gids=torch.zeros(4, dtype=torch.int64), K=1)


def golden_a1_group():
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


def valid_rows(adv, mask):
    return [[round(float(v), 6) for v, m in zip(r, mr) if m] for r, mr in zip(np.asarray(adv), np.asarray(mask))]
