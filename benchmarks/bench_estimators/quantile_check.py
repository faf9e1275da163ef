"""The batch entropy quantile of ``high_entropy_tokens`` above ``torch.quantile``'s 2^24-element limit.

    python -m benchmarks.bench_estimators.quantile_check                 # ~2.1e7 valid tokens
    python -m benchmarks.bench_estimators.quantile_check --rows 8192 --length 20480 --min-length 1000

Builds a batch whose valid tokens exceed 2^24 = 16,777,216, then checks, against an independent
float64 reference (``numpy.quantile(valid H, 1 − ρ, method="linear")`` and ``H >= τ`` in numpy):

- τ from ``batch_entropy_quantile`` equals numpy's (|Δ| ≤ 1e-12) and the mask is identical;
- ``torch.quantile`` itself refuses the same input (the limit this works around);
- wall time of ours and of the numpy reference (one call each, after a warm-up on a small batch),
  and of verl's ``grpo`` on a batch of the same shape for scale, with the machine's load average.

Prints one JSON object; exit status 1 if a check fails.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np
import torch

TORCH_QUANTILE_LIMIT = 2**24


def _batch(rows: int, length: int, min_length: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(min_length, length + 1, (rows,), generator=gen)
    mask = torch.arange(length).unsqueeze(0) < lengths.unsqueeze(1)
    # a per-row level times a uniform per token (as benchmarks' batches); 3 decimals make many ties
    entropy = torch.rand(rows, length, generator=gen).mul_(3.0).mul_(torch.rand(rows, 1, generator=gen))
    entropy = entropy.mul_(1000).round_().div_(1000)
    return entropy, mask


def _timed(fn):
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=2048)
    p.add_argument("--length", type=int, default=16384)
    p.add_argument("--min-length", type=int, default=4096)
    p.add_argument("--rho", type=float, default=0.2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1, as the estimator benchmark)")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)

    from gtpo_verl.algorithms.entropy_baselines import batch_entropy_quantile, high_entropy_token_mask_and_threshold

    warm_h, warm_m = _batch(4, 64, 16, args.seed)
    high_entropy_token_mask_and_threshold(warm_h, warm_m, args.rho)

    entropy, mask = _batch(args.rows, args.length, args.min_length, args.seed)
    valid = int(mask.sum())
    result = {
        "rows": args.rows, "length": args.length, "valid_tokens": valid, "above_2^24": valid > TORCH_QUANTILE_LIMIT,
        "rho": args.rho, "threads": torch.get_num_threads(), "loadavg_before": list(os.getloadavg()),
    }
    try:
        torch.quantile(entropy[mask], 1.0 - args.rho)
        result["torch_quantile"] = "accepted the input"
    except RuntimeError as err:
        result["torch_quantile"] = f"refused: {str(err).splitlines()[0][:120]}"

    (ours, tau), seconds = _timed(lambda: high_entropy_token_mask_and_threshold(entropy, mask, args.rho))
    result["ours_seconds"] = round(seconds, 3)

    def numpy_reference():
        h = entropy.numpy().astype(np.float64)
        m = mask.numpy()
        t = float(np.quantile(h[m], 1.0 - args.rho, method="linear"))
        return torch.from_numpy(m & (h >= t)), t

    (expected, tau_ref), seconds = _timed(numpy_reference)
    result["numpy_reference_seconds"] = round(seconds, 3)
    result["tau"], result["tau_numpy"] = tau, tau_ref
    result["tau_abs_diff"] = abs(tau - tau_ref)
    result["mask_equal"] = bool(torch.equal(ours, expected))
    result["kept_fraction"] = float(ours.sum()) / valid
    result["quantile_only_equal"] = batch_entropy_quantile(entropy, mask, 1.0 - args.rho) == tau
    del expected

    import verl  # noqa: F401  (the plugin)
    from verl.trainer.ppo.core_algos import get_adv_estimator_fn

    rewards = torch.zeros(args.rows, args.length)
    uids = np.array([f"u{i // 16}" for i in range(args.rows)], dtype=object)
    grpo = get_adv_estimator_fn("grpo")
    _, seconds = _timed(lambda: grpo(token_level_rewards=rewards, response_mask=mask.to(torch.int64), index=uids))
    result["verl_grpo_seconds_same_shape"] = round(seconds, 3)
    result["ours_over_grpo"] = round(result["ours_seconds"] / max(seconds, 1e-9), 3)
    result["loadavg_after"] = list(os.getloadavg())
    result["passed"] = result["mask_equal"] and result["tau_abs_diff"] <= 1e-12 and result["above_2^24"]
    print(json.dumps(result, indent=1))
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
