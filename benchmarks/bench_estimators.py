#!/usr/bin/env python
"""Speed, memory and memory-traffic benchmark of gtpo_verl's estimators and loss against verl's.

Run (from the repository root, with the project's venv active)::

    python -m benchmarks.bench_estimators --sizes default      # or: python benchmarks/bench_estimators.py

Every candidate is looked up in verl's registries (``core_algos.get_adv_estimator_fn`` /
``get_policy_loss_fn``), exactly as the trainer does, and called on the same batch:

- verl's ``grpo`` (the reference of every ratio) and ``grpo_vectorized``;
- ours: ``gtpo_token`` (default and ``negative_shaping``), ``grpo_s``, ``gtpo_traj`` (preset
  ``official`` and preset ``paper`` with ``initial_entropy=0.5``), with ``entropys`` and ``responses``;
- the ``grpo_s`` policy loss forward+backward against verl's ``vanilla`` loss.

Measurements (each a separate pass, so the timing runs stay clean):

1. time: candidates interleaved round-robin inside each repeat (start rotated per repeat);
   median over ``--repeats``; ratio = median / verl ``grpo`` median of the same run (for the two
   losses: / verl ``vanilla`` loss median).
2. passes: one call under a ``TorchDispatchMode`` that records every non-view aten op touching a
   tensor of >= B*T elements, or a row block of one (counted as its fraction, so the blocks of
   gtpo_verl's blocked CPU passes add up to whole passes); "traversals" counts the reads +
   writes of such tensors and
   "traffic" their bytes in units of one (B, T) float32 tensor, next to the floor (each input
   read once, the output written once).
3. where time goes: ``torch.profiler`` top aten ops (self time) and ``cProfile`` top package
   functions (cumulative time) for one call.
4. peak extra memory (``--memory``, default on for ``--sizes default|all``): on CPU one fresh
   subprocess per (candidate, size) that resets the RSS high-water mark (``/proc/self/clear_refs``)
   right before one call and reads ``VmHWM`` after it, with glibc's mmap threshold fixed so freed
   tensors leave the RSS; on CUDA ``torch.cuda.max_memory_allocated``. Reported as a multiple of
   one (B, T) float32 tensor (B*T*4 bytes); the output itself counts (floor 1x).

``--check`` compares our estimators' (and the losses') outputs on ``--device`` with CPU outputs
on one 64x16x1024 batch (``--device cpu`` runs the same code path against a copy of the batch,
with 3-row CPU row blocks against the default ones).
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import gc
import json
import math
import os
import platform
import pstats
import statistics
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

# kineto prints a line per profiler start/stop otherwise; must be set before torch loads
os.environ.setdefault("KINETO_LOG_LEVEL", "99")

import numpy as np  # noqa: E402
import torch  # noqa: E402

DEFAULT_THREADS = torch.get_num_threads()  # torch's own choice, before anything changes it

# ----------------------------------------------------------------------------- batch layout

GROUP_SIZE = 16
VOCAB_SIZE = 150_000
SHARED_PREFIX = 16  # tokens every response of a group starts with
SHARED_SUFFIX = 4  # tokens every response of a group ends with (before its padding)
PAD_ID = 0
FULL_LENGTH_FRACTION = 0.1

SIZES: dict[str, list[tuple[int, int, int]]] = {
    "small": [(8, GROUP_SIZE, 256)],
    "default": [(64, GROUP_SIZE, 1024), (128, GROUP_SIZE, 4096)],
    "all": [(64, GROUP_SIZE, 1024), (128, GROUP_SIZE, 4096), (32, GROUP_SIZE, 20480)],
    # the papers' own batch: 512 prompts x 16 responses, up to 20,480 tokens
    "papers": [(512, GROUP_SIZE, 20480)],
}
# shortest response of a size (default T/4); the papers' batch draws lengths uniform in 1,000-20,480
MIN_LENGTHS: dict[tuple[int, int, int], int] = {(512, GROUP_SIZE, 20480): 1000}
# a CPU-bound neighbour of equal priority (``--contention``): what the TaskRunner's reward,
# agent-loop and TransferQueue processes are to the advantage step
NEIGHBOUR_CODE = "while True:\n    pass\n"
TARGET_SIZE = (128, GROUP_SIZE, 4096)
CHECK_SIZE = (64, GROUP_SIZE, 1024)
LOSS_AGG_MODE = "token-mean"
MIN_SAMPLE_SECONDS = 0.02  # fast calls are looped so one timing sample lasts at least this long
MEMORY_CHILD_MMAP_THRESHOLD = 128 * 1024  # fixed => every tensor above it is its own mmap


def size_label(size: tuple[int, int, int]) -> str:
    return "x".join(str(s) for s in size)


def parse_size(text: str) -> tuple[int, int, int]:
    parts = tuple(int(p) for p in text.lower().split("x"))
    if len(parts) != 3 or min(parts) <= 0:
        raise argparse.ArgumentTypeError(f"size {text!r} is not PROMPTSxGROUPxLENGTH, e.g. 128x16x4096")
    return parts  # type: ignore[return-value]


@dataclass
class Batch:
    """One verl-like batch: B = prompts * group rows, T response positions, rows shuffled."""

    token_level_rewards: torch.Tensor  # (B, T) float32, the 0/1 score on the last valid token
    response_mask: torch.Tensor  # (B, T) int64, right-padded
    entropys: torch.Tensor  # (B, T) float32 in [0, 3]
    responses: torch.Tensor  # (B, T) int64 token ids, PAD_ID after each response
    uids: np.ndarray  # (B,) object array of str, like verl's non_tensor_batch["uid"]
    size: tuple[int, int, int]

    @property
    def numel(self) -> int:
        return self.response_mask.numel()

    def tensors(self) -> dict[str, torch.Tensor]:
        return {
            "token_level_rewards": self.token_level_rewards,
            "response_mask": self.response_mask,
            "entropys": self.entropys,
            "responses": self.responses,
        }

    def to(self, device: torch.device) -> "Batch":
        """A copy on ``device`` (a real copy even when ``device`` is where the batch already is)."""
        moved = {k: v.to(device, copy=True) for k, v in self.tensors().items()}
        return Batch(**moved, uids=self.uids.copy(), size=self.size)


def make_batch(prompts: int, group: int, length: int, *, seed: int = 0, device: str | torch.device = "cpu") -> Batch:
    """Build a reproducible batch (generated on CPU, then moved to ``device``).

    - lengths uniform in [T/4, T] (``MIN_LENGTHS`` for the papers' size), about 10 % of rows
      exactly T (no padding);
    - about half of each group is correct (Bernoulli(0.5) score on the last valid token);
    - entropies in [0, 3]: uniform per token times a per-row level in [0, 1], so row means
      spread over [0, 1.5] and the gtpo_traj entropy filter (threshold 0.7 / ln 2) keeps
      about half the rows instead of none;
    - token ids uniform in [1, 150000), every row of a group starting with the group's 16
      prefix tokens and ending with its 4 suffix tokens (realistic conflict runs for gtpo_traj).
    """
    gen = torch.Generator().manual_seed(seed)
    rows = prompts * group
    # rows in shuffled group order, built in place (no permuted copies: the papers' batch is 4 GB)
    group_of_row = (torch.arange(rows) // group)[torch.randperm(rows, generator=gen)]
    shortest = MIN_LENGTHS.get((prompts, group, length), max(1, length // 4))
    lengths = torch.randint(shortest, length + 1, (rows,), generator=gen)
    lengths = torch.where(torch.rand(rows, generator=gen) < FULL_LENGTH_FRACTION, length, lengths)
    positions = torch.arange(length)
    response_mask = (positions.unsqueeze(0) < lengths.unsqueeze(1)).to(torch.int64)

    scores = (torch.rand(rows, generator=gen) < 0.5).to(torch.float32)
    token_level_rewards = torch.zeros(rows, length, dtype=torch.float32)
    token_level_rewards[torch.arange(rows), lengths - 1] = scores

    row_level = torch.rand(rows, 1, generator=gen)
    entropys = torch.rand(rows, length, generator=gen).mul_(3.0).mul_(row_level)

    responses = torch.randint(1, VOCAB_SIZE, (rows, length), generator=gen, dtype=torch.int64)
    prefix = torch.randint(1, VOCAB_SIZE, (prompts, SHARED_PREFIX), generator=gen, dtype=torch.int64)
    suffix = torch.randint(1, VOCAB_SIZE, (prompts, SHARED_SUFFIX), generator=gen, dtype=torch.int64)
    width = min(SHARED_PREFIX, length)
    responses[:, :width] = prefix[group_of_row, :width]
    suffix_cols = (lengths.unsqueeze(1) - SHARED_SUFFIX + torch.arange(SHARED_SUFFIX)).clamp_min(0)
    responses.scatter_(1, suffix_cols, suffix[group_of_row])
    responses.masked_fill_(response_mask == 0, PAD_ID)

    del positions
    uids = np.array([f"uid{g}" for g in group_of_row.tolist()], dtype=object)
    batch = Batch(
        token_level_rewards=token_level_rewards,
        response_mask=response_mask,
        entropys=entropys,
        responses=responses,
        uids=uids,
        size=(prompts, group, length),
    )
    return batch.to(torch.device(device)) if torch.device(device).type != "cpu" else batch


# ----------------------------------------------------------------------------- candidates


@dataclass(frozen=True)
class Candidate:
    name: str
    kind: str  # "estimator" | "loss"
    registry_name: str
    config: dict = field(default_factory=dict)  # algorithm config (estimators)
    ours: bool = False
    reference: str = "grpo (verl)"  # the candidate whose median this one's ratio divides by
    floor_traversals: int = 3  # full (B, T) reads + writes an ideal implementation needs


GRPO = "grpo (verl)"
VANILLA = "vanilla loss fwd+bwd (verl)"
_BASE_CFG = {"norm_adv_by_std_in_grpo": True}
CANDIDATES: list[Candidate] = [
    Candidate(GRPO, "estimator", "grpo", dict(_BASE_CFG), floor_traversals=3),
    Candidate("grpo_vectorized (verl)", "estimator", "grpo_vectorized", dict(_BASE_CFG), floor_traversals=3),
    Candidate("gtpo_token", "estimator", "gtpo_token", {**_BASE_CFG, "gtpo_token": {}}, True, floor_traversals=4),
    Candidate(
        "gtpo_token[negative_shaping]",
        "estimator",
        "gtpo_token",
        {**_BASE_CFG, "gtpo_token": {"negative_shaping": True}},
        True,
        floor_traversals=4,
    ),
    Candidate("grpo_s", "estimator", "grpo_s", {**_BASE_CFG, "grpo_s": {}}, True, floor_traversals=4),
    Candidate(
        "gtpo_traj[official]",
        "estimator",
        "gtpo_traj",
        {**_BASE_CFG, "gtpo_traj": {"preset": "official"}},
        True,
        floor_traversals=5,
    ),
    Candidate(
        "gtpo_traj[paper]",
        "estimator",
        "gtpo_traj",
        {**_BASE_CFG, "gtpo_traj": {"preset": "paper", "initial_entropy": 0.5}},
        True,
        floor_traversals=5,
    ),
    # loss: reads old_log_prob, log_prob, advantages, mask; writes log_prob.grad
    Candidate(VANILLA, "loss", "vanilla", reference=VANILLA, floor_traversals=5),
    Candidate("grpo_s loss fwd+bwd", "loss", "grpo_s", ours=True, reference=VANILLA, floor_traversals=5),
]
CANDIDATES_BY_NAME = {c.name: c for c in CANDIDATES}

# targets of the issue, evaluated at TARGET_SIZE: (candidate, metric, bound, label)
TARGETS = [
    ("gtpo_token", "ratio", 2.0, "gtpo_token <= 2.0x verl grpo"),
    ("gtpo_token[negative_shaping]", "ratio", 2.0, "gtpo_token[negative_shaping] <= 2.0x verl grpo"),
    ("grpo_s", "ratio", 2.0, "grpo_s <= 2.0x verl grpo"),
    ("gtpo_traj[official]", "ratio", 3.0, "gtpo_traj[official] <= 3.0x verl grpo"),
    ("gtpo_traj[paper]", "ratio", 3.0, "gtpo_traj[paper] <= 3.0x verl grpo"),
    *[(n, "ratio", 1.0, f"stretch: {n} <= 1.0x verl grpo") for n in
      ("gtpo_token", "gtpo_token[negative_shaping]", "grpo_s", "gtpo_traj[official]", "gtpo_traj[paper]")],
    *[(n, "memory_multiple", 6.0, f"{n} peak extra memory <= 6x one (B,T) float32") for n in
      ("gtpo_token", "gtpo_token[negative_shaping]", "grpo_s", "gtpo_traj[official]", "gtpo_traj[paper]")],
    ("grpo_s loss fwd+bwd", "ratio", 1.2, "grpo_s loss fwd+bwd <= 1.2x verl vanilla"),
]


REPO_ROOT = Path(__file__).resolve().parents[1]


def use_code_dir(code_dir: Optional[str]) -> None:
    """Import gtpo_verl from ``code_dir`` (an exported revision) instead of the working tree."""
    if code_dir:
        sys.path.insert(0, code_dir)
        if "gtpo_verl" in sys.modules:
            raise RuntimeError("gtpo_verl was imported before --code-ref could take effect")


def export_code_ref(ref: str) -> tuple[str, str]:
    """``git archive`` the gtpo_verl package of revision ``ref`` into a temp dir: (dir, commit)."""
    import tarfile
    import tempfile

    commit = subprocess.run(["git", "-C", str(REPO_ROOT), "rev-parse", "--verify", f"{ref}^{{commit}}"],
                            capture_output=True, text=True, check=True).stdout.strip()
    target = tempfile.mkdtemp(prefix=f"gtpo_bench_{commit[:10]}_")
    archive = subprocess.run(["git", "-C", str(REPO_ROOT), "archive", "--format=tar", commit, "gtpo_verl"],
                             capture_output=True, check=True).stdout
    import io

    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        try:
            tar.extractall(target, filter="data")
        except TypeError:  # Python without extraction filters
            tar.extractall(target)
    return target, commit


def code_fingerprint() -> dict[str, Any]:
    """Which gtpo_verl source is loaded: its folder, a hash of its .py files, and git state.

    Other sessions may edit (or mutation-test) the package while a benchmark runs; the
    report flags a run whose code changed or differs from the commit it names.
    """
    import hashlib

    import gtpo_verl

    root = Path(gtpo_verl.__file__).resolve().parent
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode())
        digest.update(path.read_bytes())
    info: dict[str, Any] = {"package_dir": str(root), "source_sha256": digest.hexdigest()[:16]}
    if root == REPO_ROOT / "gtpo_verl":
        git = lambda *a: subprocess.run(["git", "-C", str(REPO_ROOT), *a], capture_output=True, text=True)  # noqa: E731
        head = git("rev-parse", "HEAD")
        if head.returncode == 0:
            info["git_head"] = head.stdout.strip()
            info["uncommitted_changes"] = bool(git("status", "--porcelain", "--", "gtpo_verl").stdout.strip())
    return info


def _core_algos():
    import verl  # noqa: F401  (loads the gtpo_verl plugin through the verl.plugins entry point)
    from verl.trainer.ppo import core_algos

    return core_algos


def actor_config(loss_mode: str):
    """verl's ActorConfig as verl's own loss tests build it."""
    from verl.workers.config import ActorConfig, PolicyLossConfig

    return ActorConfig(
        strategy="fsdp",
        rollout_n=1,
        ppo_micro_batch_size_per_gpu=1,
        clip_ratio=0.2,
        clip_ratio_low=0.2,
        clip_ratio_high=0.28,
        loss_agg_mode=LOSS_AGG_MODE,
        policy_loss=PolicyLossConfig(loss_mode=loss_mode),
    )


def make_runner(cand: Candidate, batch: Batch) -> Callable[[], torch.Tensor]:
    """Return a zero-argument callable doing one call of ``cand`` on ``batch``.

    Estimators return the advantages; losses run forward + backward and return the gradient.
    All inputs are prepared here, so the callable times only the candidate itself.
    """
    from omegaconf import OmegaConf

    core_algos = _core_algos()
    if cand.kind == "estimator":
        fn = core_algos.get_adv_estimator_fn(cand.registry_name)
        kwargs: dict[str, Any] = dict(
            token_level_rewards=batch.token_level_rewards,
            response_mask=batch.response_mask,
            index=batch.uids,
            config=OmegaConf.create(cand.config),
        )
        if cand.ours:
            kwargs.update(entropys=batch.entropys, responses=batch.responses)

        def run_estimator() -> torch.Tensor:
            advantages, _returns = fn(**kwargs)
            return advantages

        return run_estimator

    # loss: per-sequence advantages broadcast over the valid tokens (what both losses receive in
    # training), from verl's grpo_vectorized so the loss benchmark does not depend on our estimators
    gen = torch.Generator().manual_seed(1234)
    shape = tuple(batch.response_mask.shape)
    device = batch.response_mask.device
    old_log_prob = (-5.0 * torch.rand(shape, generator=gen)).to(device)
    log_prob = (old_log_prob.cpu() + 0.05 * torch.randn(shape, generator=gen)).to(device).requires_grad_(True)
    advantages = make_runner(CANDIDATES_BY_NAME["grpo_vectorized (verl)"], batch)().detach()
    loss_fn = core_algos.get_policy_loss_fn(cand.registry_name)
    config = actor_config(cand.registry_name)

    def run_loss() -> torch.Tensor:
        log_prob.grad = None
        loss, _metrics = loss_fn(
            old_log_prob=old_log_prob,
            log_prob=log_prob,
            advantages=advantages,
            response_mask=batch.response_mask,
            loss_agg_mode=LOSS_AGG_MODE,
            config=config,
            rollout_is_weights=None,
        )
        loss.backward()
        return log_prob.grad

    return run_loss


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
    cmd = [sys.executable, os.path.abspath(__file__), "--memory-child", candidate,
           "--child-size", size_label(size), "--seed", str(seed)]
    if threads:
        cmd += ["--threads", str(threads)]
    if code_dir:
        cmd += ["--code-dir", code_dir]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=str(Path(__file__).resolve().parents[1]))
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


# ----------------------------------------------------------------------------- report


def machine_info(device: torch.device) -> dict[str, Any]:
    cpu_model = platform.processor() or "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu_model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem_gib = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    mem_gib = round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count()
    versions = {}
    for mod in ("verl", "omegaconf", "gtpo_verl"):
        try:
            from importlib.metadata import version

            versions[mod] = version(mod)
        except Exception:
            versions[mod] = "?"
    info = {
        "cpu_model": cpu_model,
        "logical_cpus": os.cpu_count(),
        "usable_cpus": usable,
        "memory_gib": mem_gib,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "torch_interop_threads": torch.get_num_interop_threads(),
        "numpy": np.__version__,
        **{f"{k}_version": v for k, v in versions.items()},
        "device": str(device),
    }
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        info.update(gpu=props.name, gpu_memory_gib=round(props.total_memory / 2**30, 1), cuda=torch.version.cuda)
    return info


def loadavg() -> Optional[list[float]]:
    try:
        return [float(x) for x in open("/proc/loadavg").read().split()[:3]]
    except OSError:
        return None


def _cell(text: str, width: int) -> str:
    """Text made safe for one Markdown table cell."""
    return " ".join(str(text).replace("|", "/").split())[:width]


def _fmt(value: Any, spec: str = ".2f", suffix: str = "") -> str:
    if value is None:
        return "—"
    if isinstance(value, str):
        return value
    return f"{value:{spec}}{suffix}"


def evaluate_targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    label = size_label(TARGET_SIZE)
    entry = next((s for s in results["sizes"] if s["size"] == label), None)
    if entry is None:
        return []
    by_name = {c["name"]: c for c in entry["candidates"]}
    out = []
    for name, metric, bound, text in TARGETS:
        value = by_name.get(name, {}).get(metric)
        out.append({"target": text, "candidate": name, "metric": metric, "bound": bound, "value": value,
                    "met": None if value is None else bool(value <= bound)})
    return out


def to_markdown(results: dict[str, Any]) -> str:
    m = results["machine"]
    lines = ["## Machine", ""]
    desc = (f"- CPU: {m['cpu_model']}, {m['usable_cpus']} usable of {m['logical_cpus']} logical CPUs, "
            f"{m['memory_gib']} GiB RAM")
    lines.append(desc)
    lines.append(f"- torch {m['torch']} ({m['torch_threads']} intra-op threads), numpy {m['numpy']}, "
                 f"verl {m['verl_version']}, gtpo_verl {m['gtpo_verl_version']}, Python {m['python']}")
    if "gpu" in m:
        lines.append(f"- GPU: {m['gpu']} ({m['gpu_memory_gib']} GiB), CUDA {m['cuda']}")
    code = results.get("code")
    if code:
        where = (f"commit {code['commit'][:12]} (`--code-ref {code['code_ref']}`)" if code.get("commit")
                 else f"working tree at {code.get('git_head', '?')[:12]}"
                 + (" **with uncommitted changes**" if code.get("uncommitted_changes") else ""))
        lines.append(f"- gtpo_verl code: {where}, source sha256 {code['source_sha256']}"
                     + (" — **changed during the run: numbers mix versions**" if code.get("changed_during_run") else ""))
    s = results["settings"]
    lines.append(f"- device `{s['device']}`, {s['repeats']} repeats (round-robin, median), seed {s['seed']}, "
                 f"load average before/after: {s.get('loadavg_before')} / {s.get('loadavg_after')}")
    lines.append("")
    for entry in results["sizes"]:
        lines += [f"## {entry['size']} (B={entry['B']}, T={entry['T']}; one (B,T) float32 = "
                  f"{entry['bt_float32_bytes'] / 2**20:.1f} MiB)", ""]
        cal = entry.get("calibration")
        if cal:
            lines += [f"One float32 (B,T) elementwise pass on this machine: {cal['in_place_pass_ms']:.3f} ms into an "
                      f"existing tensor, {cal['fresh_output_pass_ms']:.3f} ms into a freshly allocated one; a row sum "
                      f"{cal['row_sum_pass_ms']:.3f} ms.", ""]
        lines.append("| candidate | median ms | ratio | vs | peak extra mem (× B·T·f32) | big ops | "
                     "traversals (floor) | traffic (floor) | fresh (B,T) allocs (units) |")
        lines.append("|---|---:|---:|---|---:|---:|---:|---:|---:|")
        for c in entry["candidates"]:
            if "error" in c:
                lines.append(f"| {c['name']} | error: {_cell(c['error'], 120)} | | | | | | | |")
                continue
            ref = "verl grpo" if c["reference"] == GRPO else "verl vanilla"
            mem = c.get("memory_multiple")
            mem_txt = _fmt(mem, ".2f", "×") if mem is not None else ("error" if c.get("memory_error") else "—")
            lines.append(
                f"| {c['name']} | {_fmt(c['median_ms'], '.2f')} | {_fmt(c.get('ratio'), '.2f', '×')} | {ref} | "
                f"{mem_txt} | {_fmt(c.get('big_ops'), 'g')} | "
                f"{_fmt(c.get('traversals'), 'g')} ({c['floor_traversals']}) | "
                f"{_fmt(c.get('traffic_units'), '.1f')} ({c['floor_traffic_units']:.1f}) | "
                f"{_fmt(c.get('big_allocs'), 'd')} ({_fmt(c.get('alloc_units'), '.1f')}) |"
            )
        lines.append("")
        lines += modes_table(entry)
    if results.get("targets"):
        lines += [f"## Targets at {size_label(TARGET_SIZE)}", "", "| target | value | met |", "|---|---:|---|"]
        for t in results["targets"]:
            met = "n/a" if t["met"] is None else ("yes" if t["met"] else "**no**")
            lines.append(f"| {t['target']} | {_fmt(t['value'], '.2f')} | {met} |")
        lines.append("")
    largest = results["sizes"][-1] if results["sizes"] else None
    if largest and any(c.get("top_ops") for c in largest["candidates"]):
        lines += [f"## Where time goes at {largest['size']} (one call)", "",
                  "| candidate | top aten ops by self time (share) | top package functions by cumulative time (share) |",
                  "|---|---|---|"]
        for c in largest["candidates"]:
            ops = ", ".join(f"{o['op']} {o['share']:.0%} ({o['calls']}×)" for o in c.get("top_ops", [])[:5])
            inner = [f for f in c.get("top_functions", []) if f["share"] < 0.97][:4]  # skip the entry point
            fns = ", ".join(f"`{f['function'].split('/')[-1]}` {f['share']:.0%}" for f in inner)
            lines.append(f"| {c['name']} | {ops} | {fns} |")
        lines.append("")
    check = results.get("check")
    if check:
        lines += [f"## Equality check: {check['device']} vs cpu at {check['size']}", "",
                  "| candidate | allclose | max abs diff | error |", "|---|---|---:|---|"]
        for r in check["rows"]:
            lines.append(f"| {r['candidate']} | {'yes' if r['allclose'] else '**no**'} | "
                         f"{_fmt(r.get('max_abs_diff'), '.2e')} | {_cell(r.get('error', ''), 160)} |")
        lines.append(f"\nInputs unchanged by every call: {'yes' if check['inputs_unchanged'] else '**no**'}. "
                     f"Check {'passed' if check['passed'] else '**FAILED**'}.\n")
    return "\n".join(lines)


def modes_table(entry: dict[str, Any]) -> list[str]:
    """Markdown: one column per timing mode (threads, neighbour), ``ms (ratio)`` per candidate."""
    modes = entry.get("modes") or []
    if len(modes) < 2:
        return []
    lines = [f"Timing modes at {entry['size']}: median ms (ratio to verl grpo, or to verl vanilla for the "
             "losses, in the same mode)", "",
             "| candidate | " + " | ".join(m["label"] for m in modes) + " |",
             "|---|" + "---:|" * len(modes)]
    for c in entry["candidates"]:
        cells = []
        for m in modes:
            t = (c.get("modes") or {}).get(m["label"])
            cells.append("—" if t is None else f"{t['median_ms']:.1f} ({_fmt(t['ratio'], '.2f', '×')})")
        lines.append(f"| {c['name']} | " + " | ".join(cells) + " |")
    loads = "; ".join(f"{m['label']}: {m['loadavg_before']} → {m['loadavg_after']}" for m in modes)
    lines += ["", f"Load average before → after each mode: {loads}", ""]
    return lines


def short_table(results: dict[str, Any]) -> str:
    """A compact summary: one line per (size, candidate), then the equality check verdicts."""
    m = results["machine"]
    lines = [f"{m.get('gpu', m['cpu_model'])} | torch {m['torch']} | device {results['settings']['device']}", "",
             f"{'size':<12} {'candidate':<30} {'median ms':>10} {'ratio':>7} {'mem x':>6}  note"]
    for entry in results["sizes"]:
        for c in entry["candidates"]:
            note = c.get("error", "")[:70]
            lines.append(f"{entry['size']:<12} {c['name']:<30} {_fmt(c.get('median_ms'), '10.3f'):>10} "
                         f"{_fmt(c.get('ratio'), '6.2f'):>7} {_fmt(c.get('memory_multiple'), '5.2f'):>6}  {note}")
    for entry in results["sizes"]:
        lines += [""] + modes_table(entry)
    check = results.get("check")
    if check:
        lines += ["", f"equality {check['device']} vs cpu at {check['size']}:"]
        for r in check["rows"]:
            verdict = "ok" if r["allclose"] else "MISMATCH"
            lines.append(f"  {r['candidate']:<30} {verdict:<8} max|diff| {_fmt(r.get('max_abs_diff'), '.2e')}"
                         f"  {r.get('error', '')[:90]}")
        lines.append(f"  inputs unchanged: {check['inputs_unchanged']}; check {'PASSED' if check['passed'] else 'FAILED'}")
    return "\n".join(lines)


# ----------------------------------------------------------------------------- main


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


def parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", choices=sorted(SIZES), default="default",
                   help="small=8x16x256 (development); default=64x16x1024,128x16x4096; all=default+32x16x20480")
    p.add_argument("--size", type=parse_size, action="append", default=None,
                   help="explicit PROMPTSxGROUPxLENGTH (repeatable), replaces --sizes")
    p.add_argument("--repeats", type=int, default=7, help="round-robin repeats; the median is reported (default 7)")
    p.add_argument("--out", default=None, help="output folder (default benchmarks/results/)")
    p.add_argument("--device", default="cpu", help="cpu (default) or cuda / cuda:N")
    mem = p.add_mutually_exclusive_group()
    mem.add_argument("--memory", dest="memory", action="store_true", default=None,
                     help="measure peak extra memory (default: on for --sizes default|all, off for small)")
    mem.add_argument("--no-memory", dest="memory", action="store_false")
    p.add_argument("--no-profile", dest="profile", action="store_false", help="skip the profiler pass")
    p.add_argument("--check", action="store_true", help=f"compare --device outputs with CPU at {size_label(CHECK_SIZE)}")
    p.add_argument("--candidates", default=None, help="comma-separated candidate names (default: all)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=parse_threads, default=None,
                   help="torch intra-op threads, or a comma-separated sweep timed in turn (e.g. 1,0); "
                        "0 = torch's default; default 1 on CPU, torch's default on CUDA")
    p.add_argument("--contention", action="store_true",
                   help="also time every thread setting with a CPU-bound neighbour process running")
    p.add_argument("--no-passes", dest="passes", action="store_false", help="skip the pass-counting call")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    p.add_argument("--short", action="store_true",
                   help="print a compact table (ms, ratio, memory, check) instead of the full Markdown report")
    p.add_argument("--code-ref", default=None,
                   help="benchmark gtpo_verl as committed at this git revision (e.g. HEAD), exported to a temp "
                        "folder, instead of the working tree (which other work may be editing)")
    p.add_argument("--code-dir", default=None, help=argparse.SUPPRESS)
    p.add_argument("--memory-child", default=None, help=argparse.SUPPRESS)
    p.add_argument("--child-size", type=parse_size, default=None, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv: Optional[list[str]] = None) -> int:
    args = parse_args(argv)
    if args.threads is None:
        args.threads = [1] if torch.device(args.device).type == "cpu" else [0]
    modes = timing_modes(args.threads, args.contention)
    torch.set_num_threads(modes[0]["threads"])
    args.threads = modes[0]["threads"]  # what the memory children run with
    if args.memory_child:
        use_code_dir(args.code_dir)
        print(json.dumps(memory_child(args.memory_child, args.child_size, args.seed)))
        return 0

    log = (lambda msg: None) if args.quiet else (lambda msg: print(msg, file=sys.stderr, flush=True))
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("--device cuda: torch.cuda.is_available() is False", file=sys.stderr)
        return 2
    sizes = args.size or SIZES[args.sizes]
    memory = args.memory if args.memory is not None else (args.size is not None or args.sizes != "small")
    names = [n.strip() for n in args.candidates.split(",")] if args.candidates else [c.name for c in CANDIDATES]
    unknown = [n for n in names if n not in CANDIDATES_BY_NAME]
    if unknown:
        print(f"unknown candidate(s) {unknown}; known: {list(CANDIDATES_BY_NAME)}", file=sys.stderr)
        return 2
    for needed in (GRPO, VANILLA):  # the references of the ratios are always measured
        if needed not in names and any(CANDIDATES_BY_NAME[n].reference == needed for n in names):
            names.insert(0, needed)
    if GRPO not in names:
        names.insert(0, GRPO)
    candidates = [c for c in CANDIDATES if c.name in names]
    out_dir = Path(args.out) if args.out else Path(__file__).resolve().parent / "results"
    out_dir.mkdir(parents=True, exist_ok=True)

    code_commit = None
    if args.code_ref:
        args.code_dir, code_commit = export_code_ref(args.code_ref)
        log(f"benchmarking gtpo_verl at {code_commit[:12]} (exported to {args.code_dir})")
    use_code_dir(args.code_dir)
    _core_algos()  # import verl (and the plugin) before any timing
    code_start = code_fingerprint()
    if code_commit:
        code_start["code_ref"] = args.code_ref
        code_start["commit"] = code_commit
    results: dict[str, Any] = {
        "machine": machine_info(device),
        "settings": {"device": str(device), "repeats": args.repeats, "seed": args.seed,
                     "threads": torch.get_num_threads(), "modes": [m["label"] for m in modes],
                     "sizes": [size_label(s) for s in sizes], "loss_agg_mode": LOSS_AGG_MODE,
                     "min_sample_seconds": MIN_SAMPLE_SECONDS, "loadavg_before": loadavg()},
        "sizes": [],
    }
    for size in sizes:
        prompts, group, length = size
        log(f"size {size_label(size)}: building batch")
        batch = make_batch(prompts, group, length, seed=args.seed, device=device)
        entry: dict[str, Any] = {"size": size_label(size), "B": prompts * group, "T": length,
                                 "bt_float32_bytes": batch.numel * 4, "candidates": []}
        runners, rows = {}, {}
        for cand in candidates:
            row = {"name": cand.name, "kind": cand.kind, "ours": cand.ours, "reference": cand.reference,
                   "floor_traversals": cand.floor_traversals,
                   "floor_traffic_units": round(floor_traffic_units(cand, batch), 2)}
            try:
                runners[cand.name] = make_runner(cand, batch)
            except Exception as exc:
                row["error"] = f"{type(exc).__name__}: {exc}"
            rows[cand.name] = row
        # a candidate that fails its first call is reported, not timed
        for name in list(runners):
            try:
                runners[name]()
            except Exception as exc:
                rows[name]["error"] = f"{type(exc).__name__}: {exc}"
                del runners[name]
                log(f"  {name}: error {rows[name]['error'][:200]}")
        entry["calibration"] = calibrate_passes(tuple(batch.response_mask.shape), device)
        entry["modes"] = []
        for index, mode in enumerate(modes):
            torch.set_num_threads(mode["threads"])
            log(f"  timing {len(runners)} candidates, {args.repeats} repeats, {mode['label']}")
            with busy_neighbour(mode["neighbour"]):
                load_before = loadavg()
                timings = time_round_robin(runners, args.repeats, device, log)
                entry["modes"].append({**mode, "loadavg_before": load_before, "loadavg_after": loadavg()})
            for name, t in timings.items():
                ref_t = timings.get(CANDIDATES_BY_NAME[name].reference)
                ratio = round(t["median_ms"] / ref_t["median_ms"], 3) if ref_t else None
                rows[name].setdefault("modes", {})[mode["label"]] = {
                    "median_ms": round(t["median_ms"], 3), "ratio": ratio, "samples_ms": t["samples_ms"]}
                if index == 0:
                    rows[name].update(t)
        torch.set_num_threads(modes[0]["threads"])
        for name, row in rows.items():
            ref = rows.get(CANDIDATES_BY_NAME[name].reference, {})
            grpo = rows.get(GRPO, {})
            if "median_ms" in row and "median_ms" in ref:
                row["ratio"] = round(row["median_ms"] / ref["median_ms"], 3)
            if "median_ms" in row and "median_ms" in grpo:
                row["ratio_vs_grpo"] = round(row["median_ms"] / grpo["median_ms"], 3)
            vec = rows.get("grpo_vectorized (verl)", {})
            if "median_ms" in row and "median_ms" in vec and row["kind"] == "estimator":
                row["ratio_vs_grpo_vectorized"] = round(row["median_ms"] / vec["median_ms"], 3)
        log("  counting passes" * args.passes + (" and profiling" if args.profile else ""))
        for name, run in runners.items():
            if args.passes:
                rows[name].update(count_passes(run, batch.numel))
            if args.profile:
                rows[name]["top_ops"] = profile_ops(run, device)
                rows[name]["top_functions"] = profile_functions(run)
            if memory and device.type == "cuda":
                rows[name].update(memory_cuda(run, batch.numel, device))
        entry["candidates"] = [rows[c.name] for c in candidates]
        results["sizes"].append(entry)
        del runners, batch
        gc.collect()
    results["settings"]["loadavg_after"] = loadavg()

    if memory and device.type == "cpu":
        for entry, size in zip(results["sizes"], sizes):
            for row in entry["candidates"]:
                if "error" in row:
                    continue
                log(f"memory {entry['size']} {row['name']}")
                mem = memory_in_subprocess(row["name"], size, args.seed, args.threads, args.code_dir)
                if "error" in mem:
                    row["memory_error"] = mem["error"]
                else:
                    row.update({k: mem[k] for k in ("peak_extra_bytes", "memory_multiple", "reliable")})
                    row["memory_source_sha256"] = mem.get("source_sha256")

    code_end = code_fingerprint()
    child_sources = {row.get("memory_source_sha256") for e in results["sizes"] for row in e["candidates"]} - {None}
    code_start["changed_during_run"] = code_end["source_sha256"] != code_start["source_sha256"] or bool(
        child_sources - {code_start["source_sha256"]})
    if code_end.get("uncommitted_changes"):
        code_start["uncommitted_changes"] = True
    results["code"] = code_start
    if code_start["changed_during_run"]:
        log("WARNING: the gtpo_verl source changed during the run (see 'code' in the JSON); rerun, or use --code-ref")

    exit_code = 0
    if args.check:
        log(f"equality check on {device} at {size_label(CHECK_SIZE)}")
        results["check"] = equality_check(device, args.seed, log)
        exit_code = 0 if results["check"]["passed"] else 1
    results["targets"] = evaluate_targets(results)

    stem = f"bench_{device.type}_{args.sizes if not args.size else 'custom'}"
    (out_dir / f"{stem}.json").write_text(json.dumps(results, indent=2))
    markdown = to_markdown(results)
    (out_dir / f"{stem}.md").write_text(markdown + "\n")
    print(short_table(results) if args.short else markdown)
    log(f"wrote {out_dir / (stem + '.json')} and {out_dir / (stem + '.md')}")
    if args.code_ref and args.code_dir:
        import shutil

        shutil.rmtree(args.code_dir, ignore_errors=True)
    return exit_code


if __name__ == "__main__":
    sys.exit(main())
