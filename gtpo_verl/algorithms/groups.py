"""Segment reductions over prompt groups, shared by every estimator.

Shape notation (torchtune style): ``B`` responses in the batch, ``T`` response length,
``K`` prompt groups. A group is the set of responses that share a verl ``uid``; groups
need not be contiguous, of equal size, or free of all-masked padding rows (verl's V1
trainer pads batches with rows whose ``response_mask`` is all zero).

Everything here is a whole-batch tensor operation: reductions go through ``index_add_``
and ``bmm``, never a Python loop over rows or tokens. ``RowBlocks`` splits a ``(B, T)``
computation into blocks of rows on the CPU (see its docstring); each block is still a
whole-tensor operation over its rows.

Functions create their tensors on the device of their inputs; ``group_ids_from_uids``
returns CPU ids (uids come from numpy), which the estimators move to the data's device.
"""

from __future__ import annotations

import numpy as np
import torch

# A spread below this fraction of |mean| is float32 rounding noise, not signal: such a
# group is treated as having no spread (its z-scores are 0, as when every value is equal).
SPREAD_RESOLUTION = 1e-6
# Elements per row block of a (B, T) computation on the CPU with one torch thread: ~1 MiB of
# float32, so a block's scratch stays in cache. Measured on a 2-core VM (docs/performance.md),
# 2^16-2^20 are all within 10 %; smaller blocks pay per-op overhead, a single block pays fresh
# (B, T) temporaries.
CPU_BLOCK_ELEMENTS = 1 << 18
# With several torch threads every op on a block is a parallel region that waits for all its
# threads; when a neighbour process holds a core, each wait costs a scheduler time slice. So a
# multi-threaded call splits the batch into at most this many blocks (few, large regions), with
# CPU_BLOCK_ELEMENTS as the lower bound. Scratch buffers are then (B, T) / this each.
PARALLEL_BLOCKS = 8


def block_elements(numel: int, device: torch.device) -> int:
    """Elements per block of a ``(B, T)`` pass of ``numel`` elements on ``device``.

    Accelerators: the whole batch. CPU: ``CPU_BLOCK_ELEMENTS`` with one torch thread (cache-
    sized blocks; no parallel regions), else at most ``PARALLEL_BLOCKS`` blocks. Reads the
    thread count, never sets it.
    """
    if device.type != "cpu":
        return max(1, numel)
    if torch.get_num_threads() <= 1:
        return CPU_BLOCK_ELEMENTS
    return max(CPU_BLOCK_ELEMENTS, -(-numel // PARALLEL_BLOCKS))


def group_ids_from_uids(index) -> tuple[torch.Tensor, int]:
    """Return ``(group_ids, num_groups)``: dense int64 ids in ``[0, K)`` for a uid array.

    ``index`` is what verl passes as ``index``: a numpy object array of uids (any hashable,
    comparable values), a list, or an integer tensor. Shape ``(B,)``.
    """
    if isinstance(index, torch.Tensor):
        _, inverse = torch.unique(index.reshape(-1), return_inverse=True)
        inverse = inverse.to(torch.int64).cpu()
    else:
        values = np.asarray(index).reshape(-1)
        if values.dtype == object:
            values = values.astype(str)
        _, inverse = np.unique(values, return_inverse=True)
        inverse = torch.from_numpy(inverse.astype(np.int64).reshape(-1))
    num_groups = int(inverse.max()) + 1 if inverse.numel() else 0
    return inverse, num_groups


def group_sum(values: torch.Tensor, group_ids: torch.Tensor, num_groups: int) -> torch.Tensor:
    """Return per-group sums ``(K, ...)`` of per-row ``values`` ``(B, ...)``."""
    out = values.new_zeros((num_groups, *values.shape[1:]))
    return out.index_add_(0, group_ids, values)


def row_dot(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Return ``(B,)`` row-wise dot products ``sum_t a[i, t] * b[i, t]`` without a temporary."""
    return torch.bmm(a.unsqueeze(1), b.unsqueeze(2)).view(-1)


def row_sum_squares(a: torch.Tensor) -> torch.Tensor:
    """Return ``(B,)`` ``sum_t a[i, t]**2`` (one read of ``a``; ~3x faster than ``row_dot(a, a)`` on CPU)."""
    return torch.linalg.vector_norm(a, dim=-1).square_()


def inverse_spread(mean: torch.Tensor, var: torch.Tensor, epsilon: float) -> torch.Tensor:
    """Return ``1 / (std + epsilon)``, or 0 where the spread is below float32 resolution.

    A z-score ``(x - mean) / (std + eps)`` of a group whose values are all equal should be
    exactly 0; after float32 rounding ``x - mean`` is a few ulps and ``std`` a few ulps, and the
    quotient is noise of order ``ulp / eps``. Zeroing the scale there gives the exact answer.
    """
    std = var.clamp_min(0.0).sqrt()
    below_resolution = std <= SPREAD_RESOLUTION * mean.abs()
    return torch.where(below_resolution, torch.zeros_like(std), 1.0 / (std + epsilon))


def sample_variance(sum_sq_dev: torch.Tensor, count: torch.Tensor, unbiased: bool) -> torch.Tensor:
    """Return the variance from a sum of squared deviations; 0 where it is undefined (n <= 1)."""
    dof = count - 1 if unbiased else count
    return torch.where(dof > 0, sum_sq_dev / dof.clamp_min(1), torch.zeros_like(sum_sq_dev))


def members_matrix(group_ids: torch.Tensor, num_groups: int) -> torch.Tensor:
    """Return ``(K, G_max)`` row indices of each group's members, ``-1`` where a group is shorter.

    Members keep their batch order inside a group. Built with one stable sort.
    """
    order = torch.argsort(group_ids, stable=True)
    sizes = torch.bincount(group_ids, minlength=num_groups)
    starts = torch.cumsum(sizes, 0) - sizes
    sorted_groups = group_ids[order]
    slot = torch.arange(group_ids.numel(), device=group_ids.device) - starts[sorted_groups]
    g_max = int(sizes.max()) if sizes.numel() else 0
    members = torch.full((num_groups, g_max), -1, dtype=torch.int64, device=group_ids.device)
    members[sorted_groups, slot] = order
    return members


def masked_product_(
    values: torch.Tensor,
    mask: torch.Tensor,
    out: torch.Tensor,
    what: str = "value",
    first_row: int = 0,
    *,
    clamp_min: float | None = None,
    source: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> torch.Tensor:
    """Write ``values * mask`` into ``out`` (exactly 0 outside the mask) and return its ``(B,)`` row sums.

    ``out`` is a preallocated (block or scratch) buffer, and may be ``values`` itself when
    ``source = (tensor, rows)`` says where ``values`` was gathered from (``tensor[rows]``).
    ``clamp_min`` clamps the products from below (before the sums). Rows with NaN/Inf garbage
    outside the mask are redone with ``where``; non-finite values inside the mask raise a
    ``ValueError`` naming the rows (offset by ``first_row``, or the ``source`` rows).
    """
    product = torch.mul(values, mask, out=out)
    if clamp_min is not None:
        product.clamp_min_(clamp_min)
    sums = product.sum(-1)
    bad = ~torch.isfinite(sums)
    if bool(bad.any()):
        rows = torch.nonzero(bad).flatten()
        zero = torch.zeros((), dtype=out.dtype, device=out.device)
        original = values[rows] if source is None else source[0].index_select(0, source[1][rows])
        redone = torch.where(mask[rows] > 0, original.to(out.dtype), zero)
        product[rows] = redone if clamp_min is None else redone.clamp_min(clamp_min)
        sums[rows] = product[rows].sum(-1)  # same kernel as the clean rows: bitwise equal
        still_bad = torch.nonzero(~torch.isfinite(sums)).flatten()
        if still_bad.numel():
            named = source[1][still_bad] if source is not None else still_bad + first_row
            raise ValueError(
                f"non-finite {what} at valid response positions of rows {named[:5].tolist()} (NaN/Inf entropy?)"
            )
    return sums


class RowBlocks:
    """Row blocks of a ``(B, T)`` computation, with the float mask and a scratch buffer per block.

    On the CPU a fresh ``(B, T)`` temporary costs about three in-place passes (its pages are
    faulted in on first write), so the estimators work through the batch in blocks of
    ``block_elements`` elements (cache-sized with one thread, at most ``PARALLEL_BLOCKS``
    blocks with more): every temporary is a block-sized scratch, and the only ``(B, T)``
    allocation is the output. On an accelerator the whole batch is one block (no Python loop;
    temporaries are cheap there).

    ``mask(block)`` is ``response_mask[block]`` in ``dtype`` (a view when the dtype already
    matches, else a copy into a reused buffer); ``scratch(block, k)`` is the k-th reused
    buffer of the block's shape. Both are overwritten by the next call for another block.
    """

    def __init__(self, response_mask: torch.Tensor, dtype: torch.dtype):
        batch, width = response_mask.shape
        device = response_mask.device
        step = max(1, block_elements(batch * width, device) // max(1, width))
        self.slices = [slice(start, min(batch, start + step)) for start in range(0, batch, step)]
        self._rows = min(step, batch)
        self._width, self._dtype, self._device = width, dtype, device
        self._response_mask = response_mask
        self._mask_buffer = None
        self._scratch: list[torch.Tensor] = []

    def __iter__(self):
        return iter(self.slices)

    def _buffer(self) -> torch.Tensor:
        return torch.empty(self._rows, self._width, dtype=self._dtype, device=self._device)

    def mask(self, block: slice) -> torch.Tensor:
        rows = self._response_mask[block]
        if rows.dtype == self._dtype:
            return rows
        if self._mask_buffer is None:
            self._mask_buffer = self._buffer()
        return self._mask_buffer[: rows.shape[0]].copy_(rows)

    def scratch(self, block: slice, k: int = 0) -> torch.Tensor:
        while len(self._scratch) <= k:
            self._scratch.append(self._buffer())
        return self._scratch[k][: block.stop - block.start]
