"""Unbiased pass@k and maj@n over n samples per problem (numpy; the trainer's validation metrics and the lab use them).

pass@k (Chen et al. 2021, "Evaluating Large Language Models Trained on Code", Eq. 1): with
n samples of which c are correct, the probability that k samples drawn *without replacement*
contain a correct one is

    pass@k = 1 - C(n - c, k) / C(n, k) = 1 - prod_{j=0}^{k-1} (1 - c / (n - j)),

an unbiased estimate of the model's pass@k. The product form has every factor in [0, 1], so
it never forms a large binomial coefficient; a factor is exactly 0 once j = n - c, which is
the C(n - c, k) = 0 case (k > n - c → pass@k = 1).

verl 0.9.1's ``best@N/mean`` (``trainer/ppo/metric_utils.py``) is a different statistic: the
mean over 1000 bootstrap draws *with replacement* of N of the n samples of the max value.
At N = n it is 1 - (1 - c/n)^n for a 0/1 metric, biased low against pass@n (= 1 for c ≥ 1):
0.64, 0.87, 0.99 for c = 1, 2, 4 at n = 32. Both are logged (``trainer/validation_metrics.py``).

maj@n: the answer (``pred``) given most often among a problem's n samples, scored as verl's
``calc_maj_val`` scores it (the value of the first sample with that answer; ties go to the
answer seen first), over all n samples (no bootstrap).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np


def _counts(num_samples, num_correct) -> tuple[np.ndarray, np.ndarray]:
    n = np.asarray(num_samples)
    c = np.asarray(num_correct)
    if n.shape != c.shape or n.ndim > 1:
        raise ValueError(f"num_samples {n.shape} and num_correct {c.shape} must be equal-length 1-D arrays (one per problem)")
    if n.size == 0:
        raise ValueError("pass@k needs at least one problem (num_samples is empty)")
    if not (np.issubdtype(n.dtype, np.integer) and np.issubdtype(c.dtype, np.integer)):
        if not (np.all(n == np.round(n)) and np.all(c == np.round(c))):
            raise ValueError("num_samples and num_correct must be whole counts")
    n, c = n.astype(np.int64), c.astype(np.int64)
    if np.any(c < 0) or np.any(c > n):
        raise ValueError("need 0 <= num_correct <= num_samples for every problem")
    return np.atleast_1d(n), np.atleast_1d(c)


def pass_at_k_per_problem(num_samples, num_correct, k: int) -> np.ndarray:
    """Unbiased pass@k of each problem (float64 array); requires ``1 <= k <= num_samples``."""
    n, c = _counts(num_samples, num_correct)
    k = int(k)
    if k < 1 or np.any(n < k):
        raise ValueError(f"pass@k needs 1 <= k <= num_samples for every problem; got k={k}, min num_samples={int(n.min())}")
    # (P, k) factors 1 - c/(n - j); n - j >= n - k + 1 >= 1, so no division by zero
    factors = 1.0 - c[:, None] / (n[:, None] - np.arange(k)[None, :]).astype(np.float64)
    return 1.0 - np.prod(np.clip(factors, 0.0, 1.0), axis=1)


def pass_at_k(num_samples, num_correct, k: int) -> float:
    """Mean over problems of the unbiased pass@k (Chen et al. 2021).

    ``num_samples`` and ``num_correct`` are per-problem counts (scalars or 1-D arrays).
    """
    return float(pass_at_k_per_problem(num_samples, num_correct, k).mean())


def pass_ks(n: int) -> list[int]:
    """The k values logged for n samples: 1, 2, 4, … below n, then n (verl's best@N grid plus 1)."""
    ks, k = [], 1
    while k < n:
        ks.append(k)
        k *= 2
    return ks + [n] if n >= 1 else []


def majority_success(problem, answers: Sequence[Any], values: np.ndarray, num_problems: int) -> np.ndarray:
    """Per problem: the value of its most frequent answer (ties: the answer seen first).

    ``problem`` (int array), ``answers`` and ``values`` are per sample, in sample order; the value
    of an answer is that of its first sample (verl's ``calc_maj_val``).
    """
    problem = np.asarray(problem, dtype=np.int64)
    _, answer = np.unique(np.asarray([str(a) for a in answers], dtype=object), return_inverse=True)
    pair = problem * (int(answer.max()) + 1) + answer
    pairs, first, count = np.unique(pair, return_index=True, return_counts=True)
    pair_problem = problem[first]
    # per problem: highest count first, then earliest first occurrence
    order = np.lexsort((first, -count, pair_problem))
    winner = order[np.r_[True, pair_problem[order][1:] != pair_problem[order][:-1]]]
    result = np.full(num_problems, np.nan)
    result[pair_problem[winner]] = np.asarray(values, dtype=np.float64)[first[winner]]
    return result
