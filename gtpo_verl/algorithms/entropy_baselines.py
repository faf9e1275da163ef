"""Two entropy-aware baselines as advantage transforms: pure torch, no verl import.

- **High-entropy tokens** ("Beyond the 80/20 Rule: High-Entropy Minority Tokens Drive Effective
  Reinforcement Learning for LLM Reasoning", Wang et al., arXiv:2506.01939): only the top ρ
  share of tokens by entropy, over the whole batch, keep a policy gradient (docs/spec.md C.1).
- **Entropy advantage** ("Reasoning with Exploration: An Entropy Perspective", Cheng et al.,
  arXiv:2506.14758): A + min(α·H, |A|/κ), entropy detached (docs/spec.md C.2).

Notation: B responses, T response length; ``entropy`` is the old-policy per-token entropy
``(B, T)``; ``response_mask`` ``(B, T)`` is 1 on valid tokens. Both functions run in O(B·T)
memory with no Python loop over rows or tokens.
"""

from __future__ import annotations

import math

import torch

# Paper defaults (docs/spec.md C.1, C.2).
DEFAULT_RHO = 0.2  # 2506.01939: the top 20% of tokens by entropy
DEFAULT_ALPHA = 0.4  # 2506.14758: α of ψ(H) = min(α·H, |A|/κ)
DEFAULT_KAPPA = 2.0  # 2506.14758: κ, the bonus never exceeds |A|/κ


def _valid_values(entropy: torch.Tensor, response_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    if entropy.shape != response_mask.shape:
        raise ValueError(f"entropy has shape {tuple(entropy.shape)} but response_mask has {tuple(response_mask.shape)}")
    valid = response_mask.bool()
    work = entropy.detach()
    if work.dtype != torch.float64:
        work = work.to(torch.float32)  # bf16/fp16 widen exactly; thresholds are compared in this dtype
    return valid, work


def batch_entropy_quantile(response_mask: torch.Tensor, *, entropy: torch.Tensor, q: float) -> float:
    """The ``q`` quantile of ``entropy`` over every valid token of the batch, as a Python float.

    Linear interpolation between the two neighbouring order statistics, the same value as
    ``numpy.quantile(values, q, method="linear")``: with N valid values sorted ascending as
    v_0 ≤ … ≤ v_{N−1}, p = q·(N − 1), j = ⌊p⌋, g = p − j, the quantile is
    v_j + (v_{j+1} − v_j)·g (numpy's two-branch form of that lerp, for the same rounding).

    NOTE: ``torch.quantile`` refuses inputs above 2^24 elements; this takes the lower order
    statistic with ``torch.kthvalue`` on the valid values (one O(N) copy) and the next one with two
    linear passes, so it runs on the papers' ~1.7e8-token batches.

    Raises ``ValueError`` when no token is valid (a quantile of nothing is undefined) or a
    valid entropy is not finite.
    """
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile q={q} must be in [0, 1]")
    valid, work = _valid_values(entropy, response_mask)
    values = torch.masked_select(work, valid)  # (N,), the only O(N) copy
    n = values.numel()
    if n == 0:
        raise ValueError("no valid token in the batch (response_mask is all zero): the entropy quantile is undefined")
    # a sum is finite iff every term is (entropies are far below float overflow); the exact check only on failure
    if not math.isfinite(float(values.sum(dtype=torch.float64))) and not bool(torch.isfinite(values).all()):
        raise ValueError("entropy has non-finite values on valid tokens; check the old-log-prob pass")
    position = q * (n - 1)
    low = min(int(math.floor(position)), n - 1)
    fraction = position - low
    v_low = float(torch.kthvalue(values, low + 1).values)  # the (low+1)-th smallest
    # the next order statistic without a second selection: v_low again if it is tied past rank low+1,
    # else the smallest value above it
    if low + 1 >= n:
        v_high = v_low
    else:
        at_most_low = values <= v_low
        if int(at_most_low.sum()) >= low + 2:
            v_high = v_low
        else:  # values is this function's own copy: mask in place
            v_high = float(values.masked_fill_(at_most_low, math.inf).min())
    diff = v_high - v_low
    # numpy's _lerp: a + d·g below one half, b − d·(1 − g) from one half (exact at both ends)
    return v_low + diff * fraction if fraction < 0.5 else v_high - diff * (1.0 - fraction)


def _at_least(values: torch.Tensor, threshold: float) -> torch.Tensor:
    """``values >= threshold`` with ``threshold`` a float64 number, exactly, in ``values``' dtype.

    Rounds the threshold up to the smallest representable value ≥ it, so a float32 tensor is
    compared without a float64 copy of the batch.
    """
    t = torch.tensor(threshold, dtype=values.dtype)
    if float(t) < threshold:
        t = torch.nextafter(t, torch.tensor(math.inf, dtype=values.dtype))
    return values >= t


def high_entropy_token_mask(
    response_mask: torch.Tensor, *, entropy: torch.Tensor, rho: float = DEFAULT_RHO
) -> torch.Tensor:
    """Bool ``(B, T)``: valid tokens whose entropy is at least τ^B_ρ, the batch's (1 − ρ) quantile.

    Implements the indicator 𝕀[H^i_t ≥ τ^B_ρ] of the objective J^B_HighEnt of arXiv:2506.01939
    (quoted in docs/spec.md C.1), τ^B_ρ taken over **all valid tokens of the whole batch** B,
    linear interpolation (``batch_entropy_quantile``).

    Args:
        response_mask: ``(B, T)`` 1 on valid tokens.
        entropy: ``(B, T)`` per-token entropy (detached; any float dtype), keyword-only.
        rho: ρ ∈ (0, 1], the share of tokens kept (paper: 0.2); ρ = 1 keeps every valid token.

    NOTE: the official code picks the top ⌈ρ·N⌉ tokens with ``torch.topk`` per micro-batch on the
    update pass's current-policy entropy; this takes τ over the whole batch on the old-policy
    entropy, as the paper's objective defines it (docs/spec.md C.1 lists the differences).
    Tied entropies at τ are all kept, so the kept share can exceed ρ (all-equal entropies keep all).
    """
    return high_entropy_token_mask_and_threshold(response_mask, entropy=entropy, rho=rho)[0]


def high_entropy_token_mask_and_threshold(
    response_mask: torch.Tensor, *, entropy: torch.Tensor, rho: float = DEFAULT_RHO
) -> tuple[torch.Tensor, float]:
    """``(high_entropy_token_mask(...), τ^B_ρ)``: the mask and the threshold it used."""
    if not (0.0 < rho <= 1.0) or not math.isfinite(rho):
        raise ValueError(f"rho={rho} must be in (0, 1] (the share of valid tokens kept; the paper uses 0.2)")
    valid, work = _valid_values(entropy, response_mask)
    tau = batch_entropy_quantile(valid, entropy=work, q=1.0 - rho)
    return _at_least(work, tau).logical_and_(valid), tau


def high_entropy_token_advantages(
    advantages: torch.Tensor, response_mask: torch.Tensor, *, entropy: torch.Tensor, rho: float = DEFAULT_RHO
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(advantages with every token outside the high-entropy mask set to 0, the mask)``.

    With a clipped surrogate, min(r·0, clip(r)·0) = 0, so a zero advantage is exactly the
    indicator of J^B_HighEnt (docs/spec.md C.1); the loss keeps verl's normalisation.
    """
    mask = high_entropy_token_mask(response_mask, entropy=entropy, rho=rho)
    return torch.where(mask, advantages, torch.zeros((), dtype=advantages.dtype)), mask


def entropy_advantage_bonus(
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    entropy: torch.Tensor,
    alpha: float = DEFAULT_ALPHA,
    kappa: float = DEFAULT_KAPPA,
) -> torch.Tensor:
    """``(B, T)`` shaped advantages A + ψ(H), ψ(H) = min(α·H^detach, |A|/κ); exactly 0 outside the mask.

    Implements the entropy-based advantage of arXiv:2506.14758 (its method section, "one line of
    code"; docs/spec.md C.2): ψ is gradient-free (H detached) and clipped by |A|/κ so the bonus never
    exceeds a 1/κ share of |A| and never flips the sign of a negative advantage (κ > 1).

    Args:
        advantages: ``(B, T)`` the estimator's advantages (any estimator).
        response_mask: ``(B, T)`` 1 on valid tokens.
        entropy: ``(B, T)`` per-token old-policy entropy, keyword-only.
        alpha: α ≥ 0 (paper: 0.4); 0 returns the advantages unchanged (masked).
        kappa: κ > 0 (paper: 2).

    NOTE: the paper adds ψ inside the actor update with the current policy's entropy; the
    transform uses the old-policy entropy of the same batch (equal on the first mini-batch of an
    on-policy update; docs/spec.md C.2).
    """
    return entropy_advantage_bonus_and_stats(advantages, response_mask, entropy=entropy, alpha=alpha, kappa=kappa)[0]


def entropy_advantage_bonus_and_stats(
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    entropy: torch.Tensor,
    alpha: float = DEFAULT_ALPHA,
    kappa: float = DEFAULT_KAPPA,
) -> tuple[torch.Tensor, float, int]:
    """``(entropy_advantage_bonus(...), Σ ψ over valid tokens (float64), valid tokens where |A|/κ < α·H)``.

    One output buffer plus one (B, T) temporary: ψ is built in place, the statistics come from it.
    """
    if not (alpha >= 0.0 and math.isfinite(alpha)):
        raise ValueError(f"alpha={alpha} must be finite and >= 0 (paper: 0.4; 0 disables the bonus)")
    if not (kappa > 0.0 and math.isfinite(kappa)):
        raise ValueError(f"kappa={kappa} must be finite and > 0 (paper: 2)")
    if entropy.shape != advantages.shape or response_mask.shape != advantages.shape:
        raise ValueError(
            f"advantages {tuple(advantages.shape)}, entropy {tuple(entropy.shape)} and response_mask "
            f"{tuple(response_mask.shape)} must have the same (B, T) shape"
        )
    if advantages.requires_grad:  # a graph through A (ψ stays a constant): one unblocked pass
        return _bonus_block(advantages, entropy.detach(), response_mask, alpha, kappa, differentiable=True)
    out = torch.empty_like(advantages)
    bonus_sum = torch.zeros((), dtype=torch.float64, device=advantages.device)
    clipped = torch.zeros((), dtype=torch.int64, device=advantages.device)
    width = max(int(advantages.shape[-1]), 1)
    rows = max(1, BLOCK_ELEMENTS // width)
    for start in range(0, int(advantages.shape[0]), rows):  # row blocks that stay in cache (not rows, not tokens)
        block = slice(start, start + rows)
        out[block], block_sum, block_clipped = _bonus_block(
            advantages[block], entropy[block].detach(), response_mask[block], alpha, kappa
        )
        bonus_sum += block_sum
        clipped += block_clipped
    return out, float(bonus_sum), int(clipped)


# (B, T) elements per row block of entropy_advantage_bonus: 4 MiB of float32 working set per temporary
BLOCK_ELEMENTS = 1 << 20


def _bonus_block(advantages, entropy, response_mask, alpha, kappa, differentiable=False):
    """A + min(α·H, |A|/κ) on one block of rows, with Σψ and the clipped count as 0-dim tensors."""
    invalid = torch.logical_not(response_mask)
    psi = entropy.to(advantages.dtype, copy=True).mul_(alpha)  # α·H
    cap = advantages.detach().abs().div_(kappa)  # |A|/κ
    clipped = (cap < psi).masked_fill_(invalid, False).sum()  # where the clip binds
    torch.minimum(psi, cap, out=psi)  # ψ = min(α·H, |A|/κ)
    del cap
    psi.masked_fill_(invalid, 0.0)
    bonus_sum = psi.sum(dtype=torch.float64)
    shaped = advantages + psi if differentiable else psi.add_(advantages)  # A + ψ
    shaped = shaped.masked_fill_(invalid, 0.0)
    if differentiable:
        return shaped, float(bonus_sum), int(clipped)
    return shaped, bonus_sum, clipped
