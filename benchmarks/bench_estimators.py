"""Time and peak memory of gtpo_verl's estimators, transforms and ``grpo_s`` loss against verl's own.

    python -m benchmarks.bench_estimators                          # 64x16x1024 and 128x16x4096, one thread
    python -m benchmarks.bench_estimators --size 128x16x4096 --threads 1,0 --contention
    python -m benchmarks.bench_estimators --sizes papers --no-memory   # 512x16x20480, ~4 GB of inputs

Every candidate is looked up in verl's registries (``get_adv_estimator_fn`` / ``get_policy_loss_fn``),
as the trainer does, and called on the same batch (``benchmarks/batch.py``):

- verl's ``grpo`` (the reference of every estimator ratio) and ``grpo_vectorized``;
- ours: ``gtpo_token`` (default and ``negative_shaping``), ``grpo_s``, ``gtpo_traj`` (preset
  ``official``; preset ``paper`` with ``initial_entropy=0.5``), with ``entropys`` and ``responses``;
- verl's ``grpo`` followed by each advantage transform, timed as one call (ratio − 1 is the
  transform's own cost in units of ``grpo``);
- the ``grpo_s`` policy loss forward + backward against verl's ``vanilla`` loss.

Time: in each of ``--repeats`` rounds every candidate runs once, round-robin, the order rotated
every round (a noisy machine's noise is spread over all candidates); calls under 20 ms are looped
inside a sample; the median is reported, and the ratio divides by verl's reference measured in the
same mode. Modes: every ``--threads`` setting (0 = torch's default), each also next to a CPU-bound
neighbour process with ``--contention``. Peak memory (``--memory``, on by default): on the CPU one
fresh process per (candidate, size) resets the RSS high-water mark right before one call and reads
it after; on CUDA ``torch.cuda.max_memory_allocated``. It is reported in (B, T) float32 tensors
(the output counts, so an estimator's floor is 1×). Prints a Markdown table; ``--out DIR`` also
writes ``bench_estimators.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import math
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch

from benchmarks.batch import SIZES, Batch, make_batch, parse_size, size_label, streaming_pass, traffic_floor_bytes

DEFAULT_THREADS = torch.get_num_threads()  # torch's own choice, before anything changes it
MIN_SAMPLE_SECONDS = 0.02  # fast calls are looped so one timing sample lasts at least this long
MMAP_THRESHOLD = 128 * 1024  # the memory children fix glibc's: every tensor above it is its own mmap
GRPO, VANILLA = "grpo (verl)", "vanilla loss fwd+bwd (verl)"
STREAM = "fused add (streaming pass)"  # timed with the candidates: the bandwidth of each mode


@dataclass(frozen=True)
class Candidate:
    name: str
    registry_name: str  # the estimator's or loss's name in verl's registry
    kind: str = "estimator"  # "estimator" | "loss" | "health" (gtpo/health/* of the estimator's call)
    config: dict = field(default_factory=dict)  # the algorithm node (estimators)
    ours: bool = False  # gets ``entropys`` and ``responses``
    transforms: tuple = ()  # algorithm.adv_transforms entries applied after the estimator

    @property
    def reference(self) -> str:
        return VANILLA if self.kind == "loss" else GRPO

    def floor_inputs(self) -> tuple[str, ...] | None:
        """The (B, T) inputs of its traffic floor besides rewards and mask; None where no floor is stated."""
        if self.kind != "estimator" or self.transforms:
            return None
        if not self.ours:
            return ()
        from gtpo_verl.plugin.estimators import ESTIMATORS

        row = ESTIMATORS[self.registry_name]
        return (*row.inputs, *row.optional)  # what check_device's floor reads too


_BASE = {"norm_adv_by_std_in_grpo": True}
CANDIDATES = [
    Candidate(GRPO, "grpo", config=_BASE),
    Candidate("grpo_vectorized (verl)", "grpo_vectorized", config=_BASE),
    Candidate("gtpo_token", "gtpo_token", config={**_BASE, "gtpo_token": {}}, ours=True),
    Candidate("gtpo_token[negative_shaping]", "gtpo_token", config={**_BASE, "gtpo_token": {"negative_shaping": True}}, ours=True),
    Candidate("grpo_s", "grpo_s", config={**_BASE, "grpo_s": {}}, ours=True),
    Candidate("gtpo_traj[official]", "gtpo_traj", config={**_BASE, "gtpo_traj": {"preset": "official"}}, ours=True),
    Candidate("gtpo_traj[paper]", "gtpo_traj", config={**_BASE, "gtpo_traj": {"preset": "paper", "initial_entropy": 0.5}},
              ours=True),
    Candidate("grpo (verl) + high_entropy_tokens", "grpo", config=_BASE, transforms=({"name": "high_entropy_tokens", "rho": 0.2},)),
    Candidate("grpo (verl) + entropy_advantage", "grpo", config=_BASE,
              transforms=({"name": "entropy_advantage", "alpha": 0.4, "kappa": 2.0},)),
    # the per-step health metrics (trainer/health.py): one more call of the estimator without entropy, counted alone
    Candidate("gtpo_token health", "gtpo_token", kind="health", config={"gtpo_token": {}}, ours=True),
    Candidate("grpo_s health", "grpo_s", kind="health", config={"grpo_s": {}}, ours=True),
    Candidate("gtpo_traj[official] health", "gtpo_traj", kind="health", config={"gtpo_traj": {"preset": "official"}},
              ours=True),
    Candidate(VANILLA, "vanilla", kind="loss"),
    Candidate("grpo_s loss fwd+bwd", "grpo_s", kind="loss", ours=True),
]
CANDIDATES_BY_NAME = {c.name: c for c in CANDIDATES}


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def make_runner(cand: Candidate, batch: Batch) -> Callable[[], torch.Tensor]:
    """A zero-argument call of ``cand`` on ``batch``: the advantages, or the loss's gradient after backward."""
    import verl  # noqa: F401  (loads the gtpo_verl plugin through the verl.plugins entry point)
    from omegaconf import OmegaConf
    from verl.trainer.ppo import core_algos

    if cand.kind == "estimator":
        fn = core_algos.get_adv_estimator_fn(cand.registry_name)
        kwargs: dict[str, Any] = dict(token_level_rewards=batch.token_level_rewards, response_mask=batch.response_mask,
                                      index=batch.uids, config=OmegaConf.create(cand.config))
        if cand.ours:
            kwargs.update(entropys=batch.entropys, responses=batch.responses)
        from gtpo_verl.plugin.extensions import apply_adv_transforms, parse_adv_transforms

        transforms = parse_adv_transforms([dict(t) for t in cand.transforms])

        def run_estimator() -> torch.Tensor:
            advantages, _returns = fn(**kwargs)
            if transforms:
                advantages, _mask = apply_adv_transforms(transforms, advantages, batch.response_mask,
                                                         {"entropys": batch.entropys})
            return advantages

        return run_estimator
    if cand.kind == "health":
        return health_runner(cand, batch)

    from verl.workers.config import ActorConfig, PolicyLossConfig

    # per-sequence advantages on every valid token (what both losses receive), from verl's grpo_vectorized
    gen = torch.Generator().manual_seed(1234)
    shape, device = tuple(batch.response_mask.shape), batch.response_mask.device
    old_log_prob = (-5.0 * torch.rand(shape, generator=gen)).to(device)
    log_prob = (old_log_prob.cpu() + 0.05 * torch.randn(shape, generator=gen)).to(device).requires_grad_(True)
    advantages = make_runner(CANDIDATES_BY_NAME["grpo_vectorized (verl)"], batch)().detach()
    loss_fn = core_algos.get_policy_loss_fn(cand.registry_name)
    config = ActorConfig(strategy="fsdp", rollout_n=1, ppo_micro_batch_size_per_gpu=1, clip_ratio=0.2,
                         clip_ratio_low=0.2, clip_ratio_high=0.28, loss_agg_mode="token-mean",
                         policy_loss=PolicyLossConfig(loss_mode=cand.registry_name))

    def run_loss() -> torch.Tensor:
        log_prob.grad = None
        loss, _metrics = loss_fn(old_log_prob=old_log_prob, log_prob=log_prob, advantages=advantages,
                                 response_mask=batch.response_mask, loss_agg_mode="token-mean", config=config,
                                 rollout_is_weights=None)
        loss.backward()
        return log_prob.grad

    return run_loss


def health_runner(cand: Candidate, batch: Batch) -> Callable[[], dict]:
    """``method_health`` of one call of the estimator on ``batch`` (the call itself made once, outside the timing)."""
    from gtpo_verl.plugin.estimators import ESTIMATORS, EstimatorBatch, EstimatorCall
    from gtpo_verl.trainer.health import method_health

    row = ESTIMATORS[cand.registry_name]
    block = row.config(**cand.config[cand.registry_name])
    estimator_batch = EstimatorBatch.build(cand.name, batch.token_level_rewards.sum(-1), batch.response_mask, batch.uids,
                                           entropys=batch.entropys, responses=batch.responses)
    with torch.no_grad():
        call = EstimatorCall(row.name, block, estimator_batch, row.run(block, estimator_batch))
    real = torch.ones(batch.response_mask.shape[0], dtype=torch.bool, device=batch.response_mask.device)
    return lambda: method_health(call, batch.response_mask, real)


def time_round_robin(runners: dict[str, Callable], repeats: int, device: torch.device) -> dict[str, float]:
    """Median milliseconds per call, the candidates interleaved (order rotated every round)."""
    loops = {}
    for name, run in runners.items():  # warm-up, and how many calls make one sample
        synchronize(device)
        start = time.perf_counter()
        run()
        synchronize(device)
        loops[name] = max(1, min(1000, math.ceil(MIN_SAMPLE_SECONDS / max(time.perf_counter() - start, 1e-9))))
    names, samples = list(runners), {name: [] for name in runners}
    for rep in range(repeats):
        for name in names[rep % len(names):] + names[: rep % len(names)]:
            gc.collect()
            synchronize(device)
            start = time.perf_counter()
            for _ in range(loops[name]):
                runners[name]()
            synchronize(device)
            samples[name].append((time.perf_counter() - start) / loops[name] * 1e3)
    return {name: statistics.median(values) for name, values in samples.items()}


@contextlib.contextmanager
def busy_neighbour(enabled: bool):
    """A CPU-bound Python process of equal priority for the duration: what the TaskRunner's reward,
    agent-loop and TransferQueue processes are to the advantage step."""
    if not enabled:
        yield
        return
    proc = subprocess.Popen([sys.executable, "-c", "while True:\n    pass\n"], stdin=subprocess.DEVNULL)
    try:
        time.sleep(0.2)
        yield
    finally:
        proc.kill()
        proc.wait()


def _status_kib(key: str) -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(key + ":"))


def memory_child(name: str, size: tuple[int, int, int]) -> dict[str, Any]:
    """In a fresh process: the RSS high-water mark's growth over one call, in (B, T) float32 tensors."""
    cand = CANDIDATES_BY_NAME[name]
    make_runner(cand, make_batch(2, size[1], 64))()  # imports and first-call initialisation
    batch = make_batch(*size)
    run = make_runner(cand, batch)
    gc.collect()
    gc.disable()
    rss = _status_kib("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:  # reset the high-water mark to the current RSS
        f.write("5")
    run()
    peak = (_status_kib("VmHWM") - rss) * 1024
    return {"peak_extra_bytes": peak, "memory_multiple": round(peak / (batch.numel * 4), 2)}


def peak_memory(name: str, size: tuple[int, int, int], device: torch.device, batch: Batch, run: Callable) -> float:
    if device.type == "cuda":
        gc.collect()
        torch.cuda.empty_cache()
        base = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        run()
        synchronize(device)
        return round((torch.cuda.max_memory_allocated(device) - base) / (batch.numel * 4), 2)
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": str(MMAP_THRESHOLD), "MALLOC_TRIM_THRESHOLD_": str(MMAP_THRESHOLD)}
    cmd = [sys.executable, "-m", "benchmarks.bench_estimators", "--memory-child", name, "--size", size_label(size),
           "--threads", str(torch.get_num_threads())]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=str(Path(__file__).resolve().parents[1]))
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError((proc.stderr or proc.stdout)[-1000:])
    return json.loads(lines[-1])["memory_multiple"]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", choices=sorted(SIZES), default="default")
    p.add_argument("--size", type=parse_size, action="append", help="PROMPTSxGROUPxLENGTH (repeatable), replaces --sizes")
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--threads", default="1", help="comma-separated torch thread counts, each timed in turn (0 = torch's default)")
    p.add_argument("--contention", action="store_true", help="also time every thread setting next to a busy neighbour")
    p.add_argument("--memory", action=argparse.BooleanOptionalAction, default=True, help="measure peak extra memory")
    p.add_argument("--candidates", help="comma-separated candidate names (default: all)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--out", help="folder for bench_estimators.json")
    p.add_argument("--memory-child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    threads = [int(t) or DEFAULT_THREADS for t in args.threads.split(",")]
    torch.set_num_threads(threads[0])
    sizes = args.size or SIZES[args.sizes]
    if args.memory_child:
        print(json.dumps(memory_child(args.memory_child, sizes[0])))
        return 0
    device = torch.device(args.device)
    names = args.candidates.split(",") if args.candidates else [c.name for c in CANDIDATES]
    unknown = sorted(set(names) - set(CANDIDATES_BY_NAME))
    if unknown:
        print(f"unknown candidate(s) {unknown}; known: {list(CANDIDATES_BY_NAME)}", file=sys.stderr)
        return 2
    candidates = [c for c in CANDIDATES if c.name in names or any(CANDIDATES_BY_NAME[n].reference == c.name for n in names)]
    modes = [(count, busy) for busy in ([False, True] if args.contention else [False]) for count in threads]
    results: dict[str, Any] = {"device": str(device), "torch": torch.__version__, "load_before": os.getloadavg(), "sizes": []}
    for size in sizes:
        print(f"timing {size_label(size)}", file=sys.stderr, flush=True)
        batch = make_batch(*size, device=device)
        runners = {c.name: make_runner(c, batch) for c in candidates}
        runners[STREAM], stream_bytes = streaming_pass(batch)
        entry: dict[str, Any] = {"size": size_label(size), "modes": {}, "memory": {}}
        for count, busy in modes:
            torch.set_num_threads(count)
            with busy_neighbour(busy):
                medians = time_round_robin(runners, args.repeats, device)
            bandwidth = stream_bytes / medians.pop(STREAM)  # bytes per ms
            timings: dict[str, Any] = {"bandwidth_gb_s": round(bandwidth / 1e6, 1)}
            for name, ms in medians.items():
                cand = CANDIDATES_BY_NAME[name]
                timings[name] = {"ms": round(ms, 2), "ratio": round(ms / medians[cand.reference], 2)}
                if cand.floor_inputs() is not None:
                    floor = traffic_floor_bytes(batch, cand.floor_inputs()) / bandwidth
                    timings[name].update(floor_ms=round(floor, 2), to_floor=round(ms / floor, 2))
            entry["modes"][f"{'busy' if busy else 'quiet'}, {count} thread{'s' * (count > 1)}"] = timings
        torch.set_num_threads(threads[0])
        del runners[STREAM]
        if args.memory:
            for cand in candidates:
                entry["memory"][cand.name] = peak_memory(cand.name, size, device, batch, runners[cand.name])
        results["sizes"].append(entry)
        del runners, batch
    results["load_after"] = os.getloadavg()
    print(to_markdown(results))
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "bench_estimators.json").write_text(json.dumps(results, indent=1))
    return 0


def to_markdown(results: dict[str, Any]) -> str:
    lines = [f"device {results['device']}, torch {results['torch']}, load average "
             f"{[round(x, 2) for x in results['load_before']]} → {[round(x, 2) for x in results['load_after']]}", ""]
    for entry in results["sizes"]:
        modes = list(entry["modes"])
        header = "| candidate | " + " | ".join(f"{m}: ms (ratio) | ×floor" for m in modes)
        header += " | peak extra memory (× B·T·f32) |" if entry["memory"] else " |"
        streams = ", ".join(f"{m} {entry['modes'][m]['bandwidth_gb_s']} GB/s" for m in modes)
        lines += [f"{entry['size']} (streaming bandwidth of a fused add: {streams}):", "", header,
                  "|---|" + "---:|" * (2 * len(modes) + bool(entry["memory"]))]
        names = [name for name in entry["modes"][modes[0]] if name != "bandwidth_gb_s"]
        for name in names:
            cells = []
            for m in modes:
                t = entry["modes"][m][name]
                cells += [f"{t['ms']:.1f} ({t['ratio']:.2f}×)", f"{t['to_floor']:.1f}×" if "to_floor" in t else "–"]
            memory = [f"{entry['memory'][name]:.2f}×"] if entry["memory"] else []
            lines.append(f"| {name} | " + " | ".join(cells + memory) + " |")
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
