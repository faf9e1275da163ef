"""Measurements besides time: passes over (B, T) data, profiles, peak memory, device equality."""

from __future__ import annotations

import cProfile
import contextlib
import gc
import json
import os
import pstats
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Optional

import torch

from benchmarks.bench_estimators.candidates import CANDIDATES, CANDIDATES_BY_NAME, Candidate, VANILLA, _core_algos, make_runner
from benchmarks.bench_estimators.sizes import Batch, GROUP_SIZE, make_batch, size_label
from benchmarks.bench_estimators.source import REPO_ROOT, code_fingerprint
from benchmarks.bench_estimators.timing import synchronize


CHECK_SIZE = (64, GROUP_SIZE, 1024)
MEMORY_CHILD_MMAP_THRESHOLD = 128 * 1024  # fixed => every tensor above it is its own mmap

# ----------------------------------------------------------------------------- passes

_WRITE_ONLY_SELF = {"copy_", "fill_", "zero_", "normal_", "uniform_", "random_", "bernoulli_"}
# take only shape/dtype/device from their tensor argument; the empty ones write nothing either
_LIKE_FACTORIES = {"new_zeros", "new_ones", "new_full", "new_empty", "new_empty_strided", "zeros_like", "ones_like",
                   "full_like", "empty_like", "rand_like", "randn_like", "randint_like"}
_NO_WRITE = {"new_empty", "new_empty_strided", "empty_like", "empty", "empty_strided"}
_SPARSE_ACCESS = {"index", "index_put", "index_put_", "_index_put_impl_", "gather", "index_select", "take", "scatter", "scatter_"}


def _dense_elements(t: torch.Tensor) -> int:
    """Elements actually stored behind ``t`` (a broadcast dimension, stride 0, counts once)."""
    n = 1
    for size, stride in zip(t.shape, t.stride()):
        if stride != 0:
            n *= size
    return n


def _big_fraction(t: torch.Tensor, threshold: int) -> float:
    """``t``'s stored elements / threshold if it lives in a storage of >= threshold elements, else 0.

    A full (B, T) tensor counts 1; a row block of one (gtpo_verl's CPU ``RowBlocks``) counts its
    share, so the blocks of one blocked pass add up to one pass.
    """
    if t.untyped_storage().nbytes() < threshold * t.element_size():
        return 0.0
    return _dense_elements(t) / threshold


class PassCounter:
    """TorchDispatchMode recording non-view aten ops that touch a tensor of >= ``threshold`` elements.

    A "big" operand is a tensor whose storage holds >= threshold elements: a full (B, T) tensor
    counts as one, a row block of one as its fraction (blocked passes add up to whole passes).

    - ``big_ops``: ops with a big input or output (one pass each, a block op its largest fraction);
    - ``traversals``: reads of big inputs + writes of big outputs (in-place ops read
      and write ``self``; gather/index/index_put-like ops touch only what they select and count
      no full traversal of their big operand; broadcast views count their stored elements);
    - ``traffic_units``: the bytes of those traversals / (threshold * 4), i.e. in (B, T) float32 tensors;
    - ``big_allocs`` / ``alloc_units``: how many big outputs were freshly allocated, and their bytes in
      the same units (on CPU each fresh tensor's pages are faulted in on first write).
    """

    def __init__(self, threshold: int):
        from torch.utils._python_dispatch import TorchDispatchMode
        from torch.utils._pytree import tree_leaves

        counter = self
        self.threshold = threshold
        self.big_ops = 0
        self.traversals = 0
        self.traffic_bytes = 0
        self.big_allocs = 0
        self.alloc_bytes = 0
        self.op_counts: Counter[str] = Counter()

        class _Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                kwargs = kwargs or {}
                out = func(*args, **kwargs)
                if func.is_view:
                    return out
                name = func.overloadpacket.__name__
                ins = [t for t in tree_leaves((args, {k: v for k, v in kwargs.items() if k != "out"}))
                       if isinstance(t, torch.Tensor)]
                outs = [t for t in tree_leaves(out) if isinstance(t, torch.Tensor)]
                share = lambda t: _big_fraction(t, counter.threshold)  # noqa: E731
                big_in = [] if name in _LIKE_FACTORIES else [t for t in ins if share(t) > 0]
                big_out = [t for t in outs if share(t) > 0]
                if not big_in and not big_out:
                    return out
                counter.big_ops += min(1.0, max(share(t) for t in big_in + big_out))
                counter.op_counts[str(func)] += 1
                if name in _SPARSE_ACCESS:
                    reads = []  # only the selected elements of the big operand are touched
                    writes = [] if name.endswith("_") else big_out  # in place: only the selection is written
                else:
                    reads = big_in
                    if name in _WRITE_ONLY_SELF and ins:
                        reads = [t for t in big_in if t is not ins[0]]
                    writes = [] if name in _NO_WRITE else big_out
                # a big output whose storage is not one of the arguments' is a fresh allocation
                arg_storages = {t.untyped_storage().data_ptr() for t in tree_leaves((args, kwargs))
                                if isinstance(t, torch.Tensor)}
                fresh = [t for t in big_out
                         if t.numel() >= counter.threshold and t.untyped_storage().data_ptr() not in arg_storages]
                counter.big_allocs += len(fresh)
                counter.alloc_bytes += sum(t.numel() * t.element_size() for t in fresh)
                counter.traversals += sum(min(1.0, share(t)) for t in reads) + sum(min(1.0, share(t)) for t in writes)
                counter.traffic_bytes += sum(_dense_elements(t) * t.element_size() for t in reads)
                counter.traffic_bytes += sum(t.numel() * t.element_size() for t in writes)
                return out

        self.mode = _Mode()

    def result(self) -> dict[str, Any]:
        return {
            "big_ops": round(self.big_ops, 1),
            "traversals": round(self.traversals, 1),
            "traffic_units": round(self.traffic_bytes / (self.threshold * 4), 2),
            "big_allocs": self.big_allocs,
            "alloc_units": round(self.alloc_bytes / (self.threshold * 4), 2),
            "op_counts": dict(self.op_counts.most_common()),
        }


def count_passes(run: Callable[[], Any], numel: int) -> dict[str, Any]:
    counter = PassCounter(numel)
    with counter.mode:
        out = run()
    del out
    return counter.result()


def floor_traffic_units(cand: Candidate, batch: Batch) -> float:
    """Bytes an ideal implementation moves (inputs read once, output written once), in f32 (B,T) units."""
    unit = batch.numel * 4
    rewards, mask = batch.token_level_rewards, batch.response_mask
    nbytes = lambda t: t.numel() * t.element_size()  # noqa: E731
    if cand.kind == "loss":  # old_log_prob, log_prob, advantages (float32), mask; grad write
        return (3 * unit + nbytes(mask) + unit) / unit
    total = nbytes(rewards) + nbytes(mask) + unit  # + the output
    if cand.ours:
        total += nbytes(batch.entropys)
        if cand.registry_name == "gtpo_traj":
            total += nbytes(batch.responses)
    return total / unit


# ----------------------------------------------------------------------------- where time goes


def profile_ops(run: Callable[[], Any], device: torch.device, top: int = 8) -> list[dict[str, Any]]:
    """Top aten ops of one call by self time (CPU; device time on CUDA)."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    synchronize(device)
    with profile(activities=activities) as prof:
        out = run()
        synchronize(device)
    del out
    events = [e for e in prof.key_averages() if not e.key.startswith("ProfilerStep")]

    def self_time(e) -> float:
        if device.type == "cuda":
            return float(getattr(e, "self_device_time_total", getattr(e, "self_cuda_time_total", 0.0)))
        return float(e.self_cpu_time_total)

    total = sum(self_time(e) for e in events) or 1.0
    ranked = sorted(events, key=self_time, reverse=True)[:top]
    return [
        {"op": e.key, "self_ms": round(self_time(e) / 1e3, 3), "share": round(self_time(e) / total, 3), "calls": e.count}
        for e in ranked
    ]


def profile_functions(run: Callable[[], Any], top: int = 8) -> list[dict[str, Any]]:
    """Top Python functions of gtpo_verl / verl for one call, by cumulative time (cProfile)."""
    prof = cProfile.Profile()
    prof.enable()
    out = run()
    prof.disable()
    del out
    stats = pstats.Stats(prof).stats  # type: ignore[attr-defined]
    total = max((v[3] for v in stats.values()), default=0.0) or 1.0
    rows = []
    for (filename, line, func), (_cc, ncalls, _tt, cumtime, _callers) in stats.items():
        norm = filename.replace("\\", "/")
        if "/gtpo_verl/" in norm:
            where = "gtpo_verl/" + norm.split("/gtpo_verl/", 1)[1]
        elif "/verl/" in norm:
            where = "verl/" + norm.rsplit("/verl/", 1)[1]
        else:
            continue
        rows.append({"function": f"{where}:{line}({func})", "cum_ms": round(cumtime * 1e3, 3),
                     "share": round(cumtime / total, 3), "calls": ncalls})
    rows.sort(key=lambda r: r["cum_ms"], reverse=True)
    return rows[:top]


# ----------------------------------------------------------------------------- memory


def _proc_status_kib(key: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise KeyError(key)


def _reset_rss_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def memory_child(candidate: str, size: tuple[int, int, int], seed: int) -> dict[str, Any]:
    """Runs in a fresh process: peak RSS growth of one call, in bytes and in (B, T) float32 tensors."""
    cand = CANDIDATES_BY_NAME[candidate]
    _core_algos()
    source = code_fingerprint()["source_sha256"]
    small = make_batch(2, size[1], 64, seed=seed)
    make_runner(cand, small)()  # lazy imports / first-call initialisation
    del small
    batch = make_batch(*size, seed=seed)
    run = make_runner(cand, batch)
    gc.collect()
    gc.disable()
    rss_before = _proc_status_kib("VmRSS")
    reset = _reset_rss_peak()
    hwm_before = _proc_status_kib("VmHWM")
    out = run()
    hwm_after = _proc_status_kib("VmHWM")
    del out
    peak_bytes = (hwm_after - rss_before) * 1024
    return {
        "candidate": candidate,
        "size": size_label(size),
        "peak_extra_bytes": peak_bytes,
        "memory_multiple": round(peak_bytes / (batch.numel * 4), 2),
        "hwm_reset": reset,
        "source_sha256": source,
        # without a reset, the high-water mark may predate the call and hide a smaller peak
        "reliable": reset or hwm_before <= rss_before,
    }


def memory_in_subprocess(
    candidate: str, size: tuple[int, int, int], seed: int, threads: Optional[int], code_dir: Optional[str]
) -> dict:
    env = dict(os.environ)
    env["MALLOC_MMAP_THRESHOLD_"] = str(MEMORY_CHILD_MMAP_THRESHOLD)
    env["MALLOC_TRIM_THRESHOLD_"] = str(MEMORY_CHILD_MMAP_THRESHOLD)
    cmd = [sys.executable, "-m", "benchmarks.bench_estimators", "--memory-child", candidate,
           "--child-size", size_label(size), "--seed", str(seed)]
    if threads:
        cmd += ["--threads", str(threads)]
    if code_dir:
        cmd += ["--code-dir", code_dir]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=str(REPO_ROOT))
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        return {"candidate": candidate, "size": size_label(size), "error": (proc.stderr or proc.stdout)[-2000:]}
    return json.loads(lines[-1])


def memory_cuda(run: Callable[[], Any], numel: int, device: torch.device) -> dict[str, Any]:
    gc.collect()
    synchronize(device)
    torch.cuda.empty_cache()
    base = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    out = run()
    synchronize(device)
    peak = torch.cuda.max_memory_allocated(device) - base
    del out
    return {"peak_extra_bytes": int(peak), "memory_multiple": round(peak / (numel * 4), 2), "reliable": True}


# ----------------------------------------------------------------------------- equality check


@contextlib.contextmanager
def small_row_blocks(rows: int):
    """Make gtpo_verl's CPU row blocks ``rows`` rows high (plus one element, so blocks are uneven)."""
    from gtpo_verl.algorithms import groups

    saved = groups.CPU_BLOCK_ELEMENTS
    groups.CPU_BLOCK_ELEMENTS = rows * CHECK_SIZE[2] + 1
    try:
        yield
    finally:
        groups.CPU_BLOCK_ELEMENTS = saved


def equality_check(device: torch.device, seed: int, log: Callable[[str], None]) -> dict[str, Any]:
    """Our estimators (and both losses) on ``device`` vs CPU on one CHECK_SIZE batch.

    With ``--device cpu`` the second run uses a separate copy of the batch and 3-row CPU row
    blocks (``groups.RowBlocks``) against the default ~64-row blocks of the reference run, so
    the blocked code path is compared with a differently blocked one. Also checks no input
    was modified.
    """
    reference_batch = make_batch(*CHECK_SIZE, seed=seed)
    pristine = {k: v.clone() for k, v in reference_batch.tensors().items()}
    device_batch = reference_batch.to(device)
    rows = []
    for cand in CANDIDATES:
        if not (cand.ours or cand.name == "grpo_vectorized (verl)" or cand.name == VANILLA):
            continue
        row: dict[str, Any] = {"candidate": cand.name}
        try:
            expected = make_runner(cand, reference_batch)().detach().clone()
            with small_row_blocks(3) if device.type == "cpu" else contextlib.nullcontext():
                got = make_runner(cand, device_batch)()
            synchronize(device)
            got = got.detach().to("cpu")
            row["device"] = str(device)
            row["shape_dtype_equal"] = tuple(got.shape) == tuple(expected.shape) and got.dtype == expected.dtype
            row["max_abs_diff"] = float((got.double() - expected.double()).abs().max()) if got.numel() else 0.0
            row["allclose"] = bool(row["shape_dtype_equal"] and torch.allclose(got, expected, rtol=1e-4, atol=1e-5))
        except Exception as exc:  # a device bug must show in the table, not stop the check
            row["allclose"] = False
            row["error"] = f"{type(exc).__name__}: {exc}"[:400]
        rows.append(row)
        log(f"  check {cand.name}: {'ok' if row['allclose'] else 'FAILED'}")
    unchanged = all(torch.equal(pristine[k], v) for k, v in reference_batch.tensors().items()) and all(
        torch.equal(pristine[k], v.cpu()) for k, v in device_batch.tensors().items()
    )
    return {
        "size": size_label(CHECK_SIZE),
        "device": str(device),
        "rows": rows,
        "inputs_unchanged": unchanged,
        "passed": unchanged and all(r["allclose"] for r in rows),
    }
