"""Interleaved timing, thread settings and the busy-neighbour process of ``--contention``."""

from __future__ import annotations

import argparse
import contextlib
import gc
import math
import statistics
import subprocess
import sys
import time
from typing import Any, Callable

import torch


DEFAULT_THREADS = torch.get_num_threads()  # torch's own choice, before anything changes it

# a CPU-bound neighbour of equal priority (``--contention``): what the TaskRunner's reward,
# agent-loop and TransferQueue processes are to the advantage step
NEIGHBOUR_CODE = "while True:\n    pass\n"
MIN_SAMPLE_SECONDS = 0.02  # fast calls are looped so one timing sample lasts at least this long

# ----------------------------------------------------------------------------- timing


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_round_robin(
    runners: dict[str, Callable[[], Any]], repeats: int, device: torch.device, log: Callable[[str], None]
) -> dict[str, dict[str, Any]]:
    """Median per-call milliseconds, the candidates interleaved round-robin inside each repeat."""
    numbers: dict[str, int] = {}
    for name, run in runners.items():  # warm-up + calibration (one call each)
        synchronize(device)
        start = time.perf_counter()
        out = run()
        synchronize(device)
        elapsed = time.perf_counter() - start
        del out
        numbers[name] = max(1, min(1000, math.ceil(MIN_SAMPLE_SECONDS / max(elapsed, 1e-9))))
    samples: dict[str, list[float]] = {name: [] for name in runners}
    names = list(runners)
    if not names:
        return {}
    gc_enabled = gc.isenabled()
    try:
        for rep in range(repeats):
            shift = rep % len(names)
            for name in names[shift:] + names[:shift]:
                run, number = runners[name], numbers[name]
                gc.collect()
                gc.disable()
                synchronize(device)
                start = time.perf_counter()
                for _ in range(number):
                    out = run()
                synchronize(device)
                elapsed = time.perf_counter() - start
                if gc_enabled:
                    gc.enable()
                del out
                samples[name].append(elapsed / number * 1e3)
            log(f"    repeat {rep + 1}/{repeats} done")
    finally:
        if gc_enabled:
            gc.enable()
    return {
        name: {
            "median_ms": statistics.median(values),
            "min_ms": min(values),
            "max_ms": max(values),
            "samples_ms": [round(v, 4) for v in values],
            "calls_per_sample": numbers[name],
        }
        for name, values in samples.items()
    }


def calibrate_passes(shape: tuple[int, int], device: torch.device, repeats: int = 5) -> dict[str, float]:
    """Median ms of one float32 elementwise pass over ``shape``: into a fresh tensor vs in place.

    On CPU a fresh large tensor is backed by pages the kernel must fault in on first write; on a
    VM that can cost several passes' worth of time, so allocations matter as much as arithmetic.
    """
    x = torch.rand(shape, device=device)
    out = torch.empty_like(x)

    def median_ms(fn: Callable[[], Any]) -> float:
        values = []
        for _ in range(repeats):
            synchronize(device)
            start = time.perf_counter()
            result = fn()
            synchronize(device)
            values.append((time.perf_counter() - start) * 1e3)
            del result
        return round(statistics.median(values), 3)

    return {
        "fresh_output_pass_ms": median_ms(lambda: x * 2.0),
        "in_place_pass_ms": median_ms(lambda: torch.mul(x, 2.0, out=out)),
        "row_sum_pass_ms": median_ms(lambda: x.sum(-1)),
    }


def parse_threads(text: str) -> list[int]:
    try:
        values = [int(v) for v in str(text).split(",") if v.strip()]
    except ValueError:
        values = []
    if not values or min(values) < 0:
        raise argparse.ArgumentTypeError(f"--threads {text!r}: give counts >= 0 (0 = torch's default), e.g. 1,0")
    return values


@contextlib.contextmanager
def busy_neighbour(enabled: bool):
    """Run a CPU-bound Python process (same priority) for the duration, if ``enabled``."""
    if not enabled:
        yield None
        return
    proc = subprocess.Popen([sys.executable, "-c", NEIGHBOUR_CODE], stdin=subprocess.DEVNULL)
    try:
        time.sleep(0.2)  # let it reach its loop
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()


def timing_modes(threads: list[int], contention: bool) -> list[dict[str, Any]]:
    """The (threads, neighbour) settings every size is timed under, quiet ones first."""
    modes = []
    for busy in ([False, True] if contention else [False]):
        for count in threads:
            resolved = count or DEFAULT_THREADS
            label = f"{'busy' if busy else 'quiet'}, {count or f'default ({DEFAULT_THREADS})'} thread{'s' if resolved > 1 else ''}"
            modes.append({"label": label, "threads": resolved, "neighbour": busy})
    return modes
