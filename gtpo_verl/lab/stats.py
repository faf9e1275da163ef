"""Paired statistics on per-seed endpoints: exact sign test, Wilcoxon signed-rank (exact; two-sided, and
one-sided where a claim states a direction), Holm, bootstrap CI;
the seed spread (mean ± sample std, pooled std) and the effect a test can detect with it.

Pure numpy/math (no scipy needed). Each test takes the paired differences d_s = x_s − y_s of
one seed's endpoint under a method and under its baseline; zero differences are dropped, as
both tests conventionally do.
"""

from __future__ import annotations

import math
from statistics import NormalDist
from typing import Sequence

import numpy as np

ZERO_TOLERANCE = 1e-12  # |d| below this counts as a tie (float endpoints of identical runs)


def nonzero_differences(differences: Sequence[float]) -> np.ndarray:
    """The differences both exact tests use: ties (|d| ≤ ``ZERO_TOLERANCE``) dropped."""
    d = np.asarray(differences, dtype=np.float64)
    return d[np.abs(d) > ZERO_TOLERANCE]


def sign_test(differences: Sequence[float]) -> float:
    """Two-sided exact sign-test p-value: 2·P(Bin(n, ½) ≤ min(#pos, #neg)), capped at 1; 1 when n = 0."""
    d = nonzero_differences(differences)
    n = d.size
    if n == 0:
        return 1.0
    k = int(min((d > 0).sum(), (d < 0).sum()))
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2.0**n
    return min(1.0, 2.0 * tail)


EXACT_MAX_PAIRS = 50
"""Up to this many nonzero pairs the signed-rank null is exact (its counts stay below 2⁵³, exact in float64)."""


def _signed_ranks(d: np.ndarray) -> np.ndarray:
    """Ranks of |d| from 1, averaged over tied magnitudes (within ``ZERO_TOLERANCE``)."""
    n = d.size
    magnitude = np.abs(d)
    order = np.argsort(magnitude, kind="stable")
    ranks = np.empty(n)
    sorted_mag = magnitude[order]
    i = 0
    while i < n:
        j = i
        while j + 1 < n and abs(sorted_mag[j + 1] - sorted_mag[i]) <= ZERO_TOLERANCE:
            j += 1
        ranks[order[i : j + 1]] = (i + j) / 2.0 + 1.0
        i = j + 1
    return ranks


def _doubled_w_plus_null(ranks: np.ndarray) -> np.ndarray:
    """P(2·W+ = k) for k = 0 … 2·Σranks under the null (each sign ±, independently, with probability ½), by
    dynamic programming over the ranks (average ranks are multiples of ½, so 2·rank is an integer)."""
    doubled = np.rint(2 * ranks).astype(np.int64)
    counts = np.zeros(int(doubled.sum()) + 1)
    counts[0] = 1.0
    for r in doubled:
        shifted = np.zeros_like(counts)
        shifted[r:] = counts[: counts.size - r]
        counts = counts + shifted
    return counts / counts.sum()


def _normal_tail(w_plus: float, ranks: np.ndarray, upper: bool) -> float:
    """P(W+ ≥ w_plus) (``upper``) or P(W+ ≤ w_plus), normal approximation with continuity and tie corrections."""
    n = ranks.size
    mean = float(ranks.sum()) / 2.0
    _, tie_counts = np.unique(ranks, return_counts=True)
    var = n * (n + 1) * (2 * n + 1) / 24.0 - (tie_counts**3 - tie_counts).sum() / 48.0
    if var <= 0:
        return 1.0
    z = ((w_plus - mean) - 0.5) / math.sqrt(var) if upper else ((mean - w_plus) - 0.5) / math.sqrt(var)
    return float(min(1.0, 0.5 * math.erfc(z / math.sqrt(2.0))))


def wilcoxon_signed_rank(differences: Sequence[float]) -> float:
    """Two-sided exact Wilcoxon signed-rank p-value (average ranks for ties in |d|); 1 when n = 0.

    The null distribution of W+ is exact (dynamic programming over the ranks) up to ``EXACT_MAX_PAIRS``
    nonzero pairs; above that the normal approximation with tie correction is used.
    """
    d = nonzero_differences(differences)
    n = d.size
    if n == 0:
        return 1.0
    ranks = _signed_ranks(d)
    w_plus = float(ranks[d > 0].sum())
    total = float(ranks.sum())
    if n <= EXACT_MAX_PAIRS:
        counts = _doubled_w_plus_null(ranks)
        observed = int(round(2 * w_plus))
        mirrored = int(round(2 * (total - w_plus)))
        low, high = min(observed, mirrored), max(observed, mirrored)
        p = counts[: low + 1].sum() + counts[high:].sum() if low != high else 1.0
        return float(min(1.0, p))
    return float(min(1.0, 2.0 * min(_normal_tail(w_plus, ranks, True), _normal_tail(w_plus, ranks, False))))


def wilcoxon_signed_rank_one_sided(differences: Sequence[float], direction: int) -> float:
    """One-sided exact Wilcoxon signed-rank p-value for differences shifted in ``direction`` (+1: positive, so
    P(W+ ≥ observed); −1: negative, P(W+ ≤ observed)); 1 when n = 0. Exact up to ``EXACT_MAX_PAIRS`` pairs,
    else the normal approximation (as ``wilcoxon_signed_rank``)."""
    if direction not in (1, -1):
        raise ValueError(f"direction must be +1 or -1, got {direction!r}")
    d = nonzero_differences(differences)
    if d.size == 0:
        return 1.0
    ranks = _signed_ranks(d)
    w_plus = float(ranks[d > 0].sum())
    if d.size > EXACT_MAX_PAIRS:
        return _normal_tail(w_plus, ranks, upper=direction > 0)
    counts = _doubled_w_plus_null(ranks)
    observed = int(round(2 * w_plus))
    return float(min(1.0, counts[observed:].sum() if direction > 0 else counts[: observed + 1].sum()))


def sign_test_one_sided(differences: Sequence[float], direction: int) -> float:
    """One-sided exact sign-test p-value for ``direction`` (+1: P(Bin(n, ½) ≥ #positive); −1: ≥ #negative); 1 when n = 0."""
    if direction not in (1, -1):
        raise ValueError(f"direction must be +1 or -1, got {direction!r}")
    d = nonzero_differences(differences)
    n = d.size
    if n == 0:
        return 1.0
    k = int((d > 0).sum() if direction > 0 else (d < 0).sum())
    return float(sum(math.comb(n, i) for i in range(k, n + 1)) / 2.0**n)


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm-adjusted p-values (step-down, monotone, capped at 1), in the input order."""
    p = np.asarray(p_values, dtype=np.float64)
    m = p.size
    order = np.argsort(p, kind="stable")
    adjusted = np.empty(m)
    running = 0.0
    for rank, idx in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p[idx]))
        adjusted[idx] = running
    return adjusted.tolist()


def bootstrap_mean_ci(differences: Sequence[float], seed: int = 0, resamples: int = 10_000, level: float = 0.95) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean paired difference (seeds resampled with replacement)."""
    d = np.asarray(differences, dtype=np.float64)
    if d.size == 0:
        return (float("nan"), float("nan"))
    rng = np.random.default_rng(seed)
    means = d[rng.integers(0, d.size, size=(resamples, d.size))].mean(axis=1)
    alpha = (1.0 - level) / 2.0
    return (float(np.quantile(means, alpha)), float(np.quantile(means, 1.0 - alpha)))


def smallest_exact_p(n: int, sides: int = 2) -> float:
    """The smallest p-value an exact sign or signed-rank test can give with n nonzero pairs: 2/2ⁿ two-sided,
    1/2ⁿ one-sided (``sides=1``)."""
    return min(1.0, sides / 2.0**n)


def seeds_for_power(
    differences: Sequence[float],
    alpha: float = 0.05,
    power: float = 0.8,
    effect: float | None = None,
    family_size: int | None = None,
    sides: int = 2,
) -> int | None:
    """Paired seeds needed to detect ``effect`` (default: the observed mean difference) by a z approximation,
    two-sided (``sides=2``) or one-sided (``sides=1``, a claim with a stated direction).

    n = ((z_{1−α'/sides} + z_{power}) · sd / effect)², with sd the sample std of the differences.

    Without ``family_size``: α' = α, and 0 when sd or the effect is 0 (the pilot formula).
    With ``family_size`` m (a Holm family): α' = α/m, the threshold Holm holds its smallest p to,
    and n is at least the fewest pairs whose exact test can reach it (sides/2ⁿ ≤ α/m); None when the
    observed effect is 0 or fewer than two differences exist (no effect to power for). A constant
    nonzero difference needs that floor only.
    """
    d = np.asarray(differences, dtype=np.float64)
    sd = float(d.std(ddof=1)) if d.size > 1 else float("nan")
    effect = abs(float(d.mean())) if effect is None else abs(effect)
    level = alpha if family_size is None else alpha / family_size
    if sides not in (1, 2):
        raise ValueError(f"sides must be 1 or 2, got {sides!r}")
    z = NormalDist().inv_cdf(1.0 - level / sides)
    z_power = NormalDist().inv_cdf(power)
    if family_size is None:
        if not (sd > 0 and effect > 0):
            return 0
        return int(math.ceil(((z + z_power) * sd / effect) ** 2))
    if not (d.size > 1 and effect > 0):
        return None
    floor = max(1, math.ceil(math.log2(sides / level)))  # the fewest pairs with smallest_exact_p(n, sides) ≤ level
    return max(floor, int(math.ceil(((z + z_power) * sd / effect) ** 2)) if sd > 0 else floor)


def mean_and_sample_std(values: Sequence[float | None]) -> dict:
    """``{"mean", "std", "seeds"}`` over the finite values: the mean and the sample std (ddof = 1); std None for one value."""
    finite = [float(v) for v in values if v is not None and math.isfinite(v)]
    if not finite:
        return {"mean": None, "std": None, "seeds": 0}
    std = float(np.std(finite, ddof=1)) if len(finite) > 1 else None
    return {"mean": float(np.mean(finite)), "std": std, "seeds": len(finite)}


def pooled_std(groups: Sequence[Sequence[float]]) -> float | None:
    """The within-group sample std pooled over groups, √(Σ (nₖ−1)·sₖ² / Σ (nₖ−1)); None without two values in a group."""
    num = dof = 0.0
    for values in groups:
        if len(values) > 1:
            num += float(np.var(values, ddof=1)) * (len(values) - 1)
            dof += len(values) - 1
    return math.sqrt(num / dof) if dof else None


def min_detectable_effect(sigma: float, seeds: int, alpha: float = 0.05, power: float = 0.8) -> float:
    """The smallest difference of two means over ``seeds`` seeds each (spread ``sigma``) a two-sided test
    finds with ``power`` at ``alpha``, by the normal approximation: (z_{1−α/2} + z_power)·σ·√(2/seeds).

    A lower bound for the exact tests, which cannot reach α at all below their seed floor (``smallest_exact_p``).
    """
    z = NormalDist().inv_cdf
    return (z(1.0 - alpha / 2.0) + z(power)) * sigma * math.sqrt(2.0 / seeds)


def std_gap_flags(a: Sequence[float], b: Sequence[float], ddof: int = 0) -> bool:
    """The rule the verdicts do NOT use: a difference "counts" when |mean a − mean b| > std a + std b.

    Kept to measure how often it fires on no difference (``std_gap_null_rate``).
    """
    return abs(float(np.mean(a)) - float(np.mean(b))) > float(np.std(a, ddof=ddof)) + float(np.std(b, ddof=ddof))


def std_gap_null_rate(seeds: int = 3, draws: int = 200_000, seed: int = 0, ddof: int = 0) -> float:
    """How often ``std_gap_flags`` fires for two methods with no difference at all (``seeds`` normal draws each)."""
    rng = np.random.default_rng(seed)
    a, b = rng.standard_normal((2, draws, seeds))
    gap = np.abs(a.mean(1) - b.mean(1))
    return float(np.mean(gap > a.std(1, ddof=ddof) + b.std(1, ddof=ddof)))


__all__ = ["sign_test", "sign_test_one_sided", "wilcoxon_signed_rank", "wilcoxon_signed_rank_one_sided", "holm", "bootstrap_mean_ci", "seeds_for_power", "smallest_exact_p", "nonzero_differences",
           "mean_and_sample_std", "pooled_std", "min_detectable_effect", "std_gap_flags", "std_gap_null_rate"]
