"""Speed, memory and memory-traffic benchmark of gtpo_verl's estimators and loss against verl's.

Run (from the repository root, with the project's venv active)::

    python -m benchmarks.bench_estimators --sizes default

Every candidate is looked up in verl's registries (``core_algos.get_adv_estimator_fn`` /
``get_policy_loss_fn``), exactly as the trainer does, and called on the same batch:

- verl's ``grpo`` (the reference of every ratio) and ``grpo_vectorized``;
- ours: ``gtpo_token`` (default and ``negative_shaping``), ``grpo_s``, ``gtpo_traj`` (preset
  ``official`` and preset ``paper`` with ``initial_entropy=0.5``), with ``entropys`` and ``responses``;
- verl's ``grpo`` followed by each advantage transform (``high_entropy_tokens`` ρ = 0.2,
  ``entropy_advantage`` α = 0.4, κ = 2), timed as one call: ratio − 1 is the transform's own cost
  in units of verl ``grpo``;
- the ``grpo_s`` policy loss forward+backward against verl's ``vanilla`` loss.

``python -m benchmarks.bench_estimators.quantile_check`` checks the batch entropy quantile of
``high_entropy_tokens`` against ``numpy.quantile`` on a batch above ``torch.quantile``'s 2^24 limit.

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

Modules: ``sizes`` (batches), ``candidates`` (what is compared, the targets), ``timing``,
``measures`` (passes, profiles, memory, equality), ``report``, ``cli``.
"""

import os

# kineto prints a line per profiler start/stop otherwise; must be set before torch loads
os.environ.setdefault("KINETO_LOG_LEVEL", "99")

from benchmarks.bench_estimators.candidates import CANDIDATES, CANDIDATES_BY_NAME, GRPO, VANILLA  # noqa: E402
from benchmarks.bench_estimators.cli import main  # noqa: E402
from benchmarks.bench_estimators.sizes import SIZES, Batch, make_batch, parse_size, size_label  # noqa: E402

__all__ = ["CANDIDATES", "CANDIDATES_BY_NAME", "GRPO", "SIZES", "VANILLA", "Batch", "main", "make_batch",
           "parse_size", "size_label"]
