"""The entropy profile of a batch: one set of definitions for the lab's tasks and a real LM's batches.

H_{i,t} is the old-policy entropy of token t of response i, o_i the response's valid tokens, ⟨H⟩_i
their mean. In float64 numpy over ``(B, T)`` arrays with a 0/1 mask:

- ``entropy_profile``: median and 90th percentile (linear interpolation) of H over all valid
  tokens; the share of valid tokens with H > 0.7; per response, the share of Σ_t H_{i,t} held by
  its top ⌈0.1·|o_i|⌉ and ⌈0.2·|o_i|⌉ tokens by entropy, averaged over responses with Σ_t H > 0.
- ``delta_filter``: Paper A's δ (S16, official reading δ_i = 1[⟨H⟩_i ≤ δ]): the share of responses
  with ⟨H⟩_i > δ, for δ = 0.7, ln 2, and 1.5·⟨H⟩_ini with ⟨H⟩_ini the mean of ⟨H⟩_i over the batch's
  non-empty responses, as the trainer measures it (``algorithms.trajectory.initial_entropy``).

``examples/cpu_demo/lm_mechanism.py`` (docs/real_lm.md) and the lab's calibration table
(docs/lab.md) both import them.
"""

from __future__ import annotations

import math

import numpy as np

DELTA_OFFICIAL, SCALED_FACTOR = 0.7, 1.5


def mean_entropy(entropy: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """(B,) ⟨H⟩_i, the mean entropy of each response's valid tokens (the package's one definition,
    ``algorithms.trajectory.response_mean_entropy``, in float64)."""
    import torch

    from gtpo_verl.algorithms.trajectory import response_mean_entropy

    return response_mean_entropy(torch.from_numpy(np.asarray(mask)),
                                 entropy=torch.from_numpy(np.asarray(entropy, dtype=np.float64))).numpy()


def top_mask(entropy: np.ndarray, mask: np.ndarray, fraction: float) -> np.ndarray:
    """(B, T) bool: each response's top ⌈fraction·|o_i|⌉ valid tokens by entropy (ties: earlier position first)."""
    valid = mask > 0
    h = np.where(valid, entropy, -np.inf)
    order = np.argsort(-h, axis=1, kind="stable")
    rank = np.empty_like(order)
    np.put_along_axis(rank, order, np.arange(h.shape[1])[None, :].repeat(h.shape[0], 0), axis=1)
    k = np.ceil(fraction * valid.sum(1)).astype(np.int64)
    return valid & (rank < k[:, None])


def top_share(entropy: np.ndarray, mask: np.ndarray, fraction: float) -> np.ndarray:
    """Per response: the share of Σ_t H_{i,t} on its top ⌈fraction·|o_i|⌉ tokens (NaN where Σ H = 0)."""
    h = np.where(mask > 0, np.clip(entropy, 0.0, None), 0.0)
    top = np.where(top_mask(h, mask, fraction), h, 0.0).sum(1)
    total = h.sum(1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(total > 0, top / total, np.nan)


def entropy_profile(entropy: np.ndarray, mask: np.ndarray) -> dict:
    """The profile of the module docstring, plus the token mean, the response-mean range and the mean length."""
    values = entropy[mask > 0]
    per_response = mean_entropy(entropy, mask)
    return {
        "responses": int(mask.shape[0]),
        "tokens": int(values.size),
        "token_mean": float(values.mean()),
        "median": float(np.median(values)),
        "p90": float(np.quantile(values, 0.9)),
        "share_above_0.7": float((values > DELTA_OFFICIAL).mean()),
        "top10_share": float(np.nanmean(top_share(entropy, mask, 0.1))),
        "top20_share": float(np.nanmean(top_share(entropy, mask, 0.2))),
        "response_mean_min": float(per_response.min()),
        "response_mean_max": float(per_response.max()),
        "mean_length": float((mask > 0).sum(1).mean()),
    }


def delta_filter(entropy: np.ndarray, mask: np.ndarray) -> dict:
    """Share of responses δ removes (⟨H⟩_i > δ) at 0.7, ln 2 and 1.5·⟨H⟩_ini (the trainer's ⟨H⟩_ini, in float64)."""
    import torch

    from gtpo_verl.algorithms.trajectory import initial_entropy

    per_response = mean_entropy(entropy, mask)
    initial = initial_entropy(torch.from_numpy(np.asarray(mask)),
                              entropy=torch.from_numpy(np.asarray(entropy, dtype=np.float64)))
    out = {"initial_entropy": initial, "scaled_threshold": SCALED_FACTOR * initial}
    for name, threshold in (("0.7", DELTA_OFFICIAL), ("ln2", math.log(2)), ("scaled", SCALED_FACTOR * initial)):
        out[f"filtered_at_{name}"] = float((per_response > threshold).mean())
    return out


__all__ = ["DELTA_OFFICIAL", "SCALED_FACTOR", "mean_entropy", "top_share", "top_mask", "entropy_profile", "delta_filter"]
