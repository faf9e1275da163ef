#!/usr/bin/env python
"""Device check that needs only torch, numpy and this repository on ``PYTHONPATH`` (no verl, Ray, vLLM).

    PYTHONPATH=. python -m benchmarks.check_device --device cuda [--sizes 128x16x4096,512x16x20480]

1. equality: every row of the estimator table (``plugin/estimators/``: its pure function,
   called as the verl adapter calls it, at the config defaults and two variants) and
   the ``grpo_s`` loss (per-sequence terms, seq-mean-token-mean aggregation, forward and
   backward) on ``--device`` against the same code on CPU, on one 64x16x1024 batch;
2. speed against the memory floor, at each ``--sizes`` entry: median time of one call / the time
   the device needs to read each input once and write the output once. The floor's bandwidth
   is measured in the same run with a fused ``torch.add(a, b, out=c)`` over float32 (B, T)
   tensors (12 bytes per element moved), so the ratio is a physical anchor, not a comparison
   with other software.

Exit status: 0 all equal, 1 a mismatch or an error, 2 the device is not usable.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

import torch

from benchmarks.batch import make_batch, parse_size, size_label, traffic_floor_bytes
from gtpo_verl.algorithms.sequence_shaping import grpo_s_sequence_loss
from gtpo_verl.plugin.estimators import ESTIMATORS, EstimatorBatch

CHECK_SIZE = (64, 16, 1024)
RTOL, ATOL = 1e-4, 1e-5
# every row of the estimator table at its config defaults, and the variants the benchmark also times:
# label → (row, algorithm block overrides)
CANDIDATES: dict[str, tuple[str, dict[str, Any]]] = {name: (name, {}) for name in ESTIMATORS}
CANDIDATES.update({
    "gtpo_token[negative_shaping]": ("gtpo_token", {"negative_shaping": True}),
    "gtpo_traj[paper]": ("gtpo_traj", {"preset": "paper", "initial_entropy": 0.5}),
})


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def estimator_call(label: str, batch) -> Callable[[], torch.Tensor]:
    """One call as the verl adapter makes it (the row's ``run``): scores from the token rewards, uids to group ids."""
    name, overrides = CANDIDATES[label]
    row = ESTIMATORS[name]
    block = row.config.from_dict(overrides)

    def run() -> torch.Tensor:
        inputs = EstimatorBatch.build(label, batch.token_level_rewards.sum(-1), batch.response_mask, batch.uids,
                                      entropys=batch.entropys, responses=batch.responses)
        return row.run(block, inputs).advantages

    return run


def floor_bytes(label: str, batch) -> int:
    """Bytes an ideal estimator moves: each (B, T) input it declares read once, the float32 output written once."""
    row = ESTIMATORS[CANDIDATES[label][0]]
    return traffic_floor_bytes(batch, (*row.inputs, *row.optional))


def loss_terms(batch, device: torch.device) -> dict[str, torch.Tensor]:
    """grpo_s loss (seq-mean-token-mean of the per-sequence terms) and its gradient on ``device``."""
    gen = torch.Generator().manual_seed(1234)
    shape = tuple(batch.response_mask.shape)
    old = -5.0 * torch.rand(shape, generator=gen, dtype=torch.float64)
    new = old + 0.05 * torch.randn(shape, generator=gen, dtype=torch.float64)
    adv = torch.randn(shape[0], 1, generator=gen, dtype=torch.float64).expand(shape)
    log_prob = new.float().to(device).requires_grad_(True)
    mask = batch.response_mask.to(device)
    terms = grpo_s_sequence_loss(old.float().to(device), log_prob, adv.float().to(device), mask,
                                 clip_low=0.2, clip_high=0.28)
    has_tokens = (terms.counts > 0).to(terms.row_loss.dtype)
    loss = (terms.row_loss * has_tokens).sum() / has_tokens.sum().clamp_min(1)  # seq-mean-token-mean
    loss.backward()
    return {"loss": loss.detach(), "grad": log_prob.grad, "sequence_ratio": terms.sequence_ratio.detach()}


def equality(device: torch.device, seed: int) -> dict[str, Any]:
    reference = make_batch(*CHECK_SIZE, seed=seed)
    pristine = {k: v.clone() for k, v in reference.tensors().items()}
    moved = reference.to(device)
    rows = []
    for name in CANDIDATES:
        row: dict[str, Any] = {"candidate": name}
        try:
            expected = estimator_call(name, reference)()
            got = estimator_call(name, moved)().cpu()
            row["max_abs_diff"] = float((got - expected).abs().max())
            row["allclose"] = bool(torch.allclose(got, expected, rtol=RTOL, atol=ATOL))
        except Exception as exc:  # reported, not raised: the other candidates still run
            row.update(allclose=False, error=f"{type(exc).__name__}: {exc}")
        rows.append(row)
    row = {"candidate": "grpo_s loss fwd+bwd"}
    try:
        expected, got = loss_terms(reference, torch.device("cpu")), loss_terms(moved, device)
        diffs = {k: float((got[k].cpu() - v).abs().max()) for k, v in expected.items()}
        row["max_abs_diff"] = max(diffs.values())
        row["allclose"] = all(torch.allclose(got[k].cpu(), v, rtol=RTOL, atol=ATOL) for k, v in expected.items())
    except Exception as exc:
        row.update(allclose=False, error=f"{type(exc).__name__}: {exc}")
    rows.append(row)
    unchanged = all(torch.equal(v, pristine[k]) for k, v in reference.tensors().items()) and all(
        torch.equal(v.cpu(), pristine[k]) for k, v in moved.tensors().items())
    return {"device": str(device), "size": size_label(CHECK_SIZE), "rows": rows, "inputs_unchanged": unchanged,
            "passed": unchanged and all(r["allclose"] for r in rows)}


def median_seconds(run: Callable[[], Any], device: torch.device, repeats: int) -> float:
    run()  # warm-up
    values = []
    for _ in range(repeats):
        synchronize(device)
        start = time.perf_counter()
        out = run()
        synchronize(device)
        values.append(time.perf_counter() - start)
        del out
    return statistics.median(values)


def floor_ratios(size: tuple[int, int, int], device: torch.device, repeats: int, seed: int) -> dict[str, Any]:
    batch = make_batch(*size, seed=seed, device=device)
    numel = batch.response_mask.numel()
    a = torch.rand(batch.response_mask.shape, device=device)
    b, c = torch.rand_like(a), torch.empty_like(a)
    add_seconds = median_seconds(lambda: torch.add(a, b, out=c), device, repeats)
    bandwidth = 12 * numel / add_seconds  # bytes/s of one fused read-read-write pass
    del a, b, c
    rows = []
    for name in CANDIDATES:
        seconds = median_seconds(estimator_call(name, batch), device, repeats)
        floor = floor_bytes(name, batch) / bandwidth
        rows.append({"candidate": name, "median_ms": round(seconds * 1e3, 3), "floor_ms": round(floor * 1e3, 3),
                     "ratio_to_floor": round(seconds / floor, 2)})
    return {"size": size_label(size), "bandwidth_gb_s": round(bandwidth / 1e9, 1),
            "add_pass_ms": round(add_seconds * 1e3, 3), "rows": rows}


def report(results: dict[str, Any]) -> str:
    check = results["check"]
    lines = [f"device {results['device']} ({results['device_name']}), torch {torch.__version__}, "
             f"threads {torch.get_num_threads()}, verl imported: {'verl' in sys.modules}", "",
             f"Equality {check['device']} vs cpu at {check['size']} (rtol {RTOL}, atol {ATOL}):", "",
             "| candidate | allclose | max abs diff | error |", "|---|---|---:|---|"]
    for r in check["rows"]:
        diff = r.get("max_abs_diff")
        lines.append(f"| {r['candidate']} | {'yes' if r['allclose'] else '**no**'} | "
                     f"{'—' if diff is None else f'{diff:.2e}'} | {r.get('error', '')[:160]} |")
    lines += ["", f"Inputs unchanged: {'yes' if check['inputs_unchanged'] else '**no**'}; "
                  f"check {'passed' if check['passed'] else '**FAILED**'}.", ""]
    for entry in results["floors"]:
        lines += [f"Speed at {entry['size']} against the memory floor (fused add: {entry['add_pass_ms']} ms, "
                  f"{entry['bandwidth_gb_s']} GB/s):", "",
                  "| candidate | median ms | floor ms | ratio to floor |", "|---|---:|---:|---:|"]
        for r in entry["rows"]:
            lines.append(f"| {r['candidate']} | {r['median_ms']:.2f} | {r['floor_ms']:.2f} | {r['ratio_to_floor']:.2f}× |")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--sizes", default="128x16x4096,512x16x20480",
                   help="comma-separated PROMPTSxGROUPxLENGTH for the floor timings ('' for none)")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None, help="folder for check_device.json and check_device.md")
    args = p.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("check_device: torch.cuda.is_available() is False", file=sys.stderr)
        return 2
    sizes = [parse_size(s) for s in args.sizes.split(",") if s.strip()]
    results: dict[str, Any] = {
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "check": equality(device, args.seed),
        "floors": [],
    }
    for size in sizes:
        print(f"check_device: timing {size_label(size)}", file=sys.stderr, flush=True)
        results["floors"].append(floor_ratios(size, device, args.repeats, args.seed))
        if device.type == "cuda":
            torch.cuda.empty_cache()
    text = report(results)
    print(text)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "check_device.json").write_text(json.dumps(results, indent=2))
        (out / "check_device.md").write_text(text + "\n")
    return 0 if results["check"]["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
