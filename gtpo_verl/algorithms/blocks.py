"""The CPU blocking policy of a ``(B, T)`` pass, and the masked first pass ``grpo_s`` and ``gtpo_traj`` share.

On the CPU a fresh ``(B, T)`` temporary costs about three in-place passes (its pages are faulted
in on first write), so the estimators work through the batch in blocks of rows: every temporary
is a block-sized scratch buffer and the only ``(B, T)`` allocation is the output. On an
accelerator the whole batch is one block (no Python loop; temporaries are cheap there). Each
block is still one whole-tensor operation over its rows.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import torch

from gtpo_verl.algorithms.groups import row_dot

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


class RowBlocks:
    """Row blocks of a ``(B, T)`` computation, with the float mask and a scratch buffer per block.

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


def masked_product_(
    values: torch.Tensor,
    mask: torch.Tensor,
    out: torch.Tensor,
    what: str = "value",
    first_row: int = 0,
    *,
    clamp_min: float | None = None,
) -> torch.Tensor:
    """Write ``values * mask`` into ``out`` (exactly 0 outside the mask) and return its ``(B,)`` row sums.

    ``out`` is a preallocated block or scratch buffer (it may be ``values`` itself). ``clamp_min``
    clamps the products from below (before the sums). Rows with NaN/Inf garbage outside the mask
    are redone with ``where``; non-finite values inside the mask raise a ``ValueError`` naming
    the rows (offset by ``first_row``).
    """
    product = torch.mul(values, mask, out=out)
    if clamp_min is not None:
        product.clamp_min_(clamp_min)
    sums = product.sum(-1)
    bad = ~torch.isfinite(sums)
    if bool(bad.any()):
        rows = torch.nonzero(bad).flatten()
        zero = torch.zeros((), dtype=out.dtype, device=out.device)
        redone = torch.where(mask[rows] > 0, values[rows].to(out.dtype), zero)
        product[rows] = redone if clamp_min is None else redone.clamp_min(clamp_min)
        sums[rows] = product[rows].sum(-1)  # same kernel as the clean rows: bitwise equal
        still_bad = torch.nonzero(~torch.isfinite(sums)).flatten()
        if still_bad.numel():
            raise ValueError(
                f"non-finite {what} at valid response positions of rows {(still_bad + first_row)[:5].tolist()} "
                "(NaN/Inf entropy?)"
            )
    return sums


class MaskedRows(NamedTuple):
    """The first pass of a sequence-level estimator: what it needs of each row, and its output buffer."""

    out: torch.Tensor  # (B, T) the float response mask; the estimator scales it in place into its advantages
    counts: torch.Tensor  # (B,) valid tokens |o_i|
    entropy_sums: torch.Tensor | None  # (B,) Σ_t max(H, 0) over valid tokens, or Σ_t log(max(H, 0) + ε)
    last_position: torch.Tensor | None  # (B,) 1 + the position of the last valid token (0 for an empty row)


def masked_rows(
    response_mask: torch.Tensor,
    dtype: torch.dtype,
    *,
    entropy: torch.Tensor | None = None,
    log_epsilon: float | None = None,
    last_position: bool = False,
    empty: Callable[..., torch.Tensor] = torch.empty,
) -> MaskedRows:
    """One blocked pass over ``response_mask`` ``(B, T)`` (and ``entropy``): the row facts of ``MaskedRows``.

    Entropies below 0 (floating-point rounding) count as 0; ``log_epsilon`` sums
    log(max(H, 0) + ε) instead (the geometric mean's log). Garbage at masked positions is ignored.
    ``empty`` allocates the ``(B, T)`` output (``torch.empty``'s signature; the plugin passes its
    huge-page allocator, ``plugin/memory.py``).
    """
    batch, width = response_mask.shape
    device = response_mask.device
    blocks = RowBlocks(response_mask, dtype)
    out = empty((batch, width), dtype=dtype, device=device)
    counts = torch.empty(batch, dtype=dtype, device=device)
    entropy_sums = None if entropy is None else torch.empty(batch, dtype=dtype, device=device)
    last = torch.zeros(batch, dtype=dtype, device=device) if last_position else None
    positions = torch.arange(1, width + 1, dtype=dtype, device=device) if last_position else None
    for block in blocks:
        mask = out[block].copy_(response_mask[block])
        torch.sum(mask, -1, out=counts[block])
        if last is not None and width:
            torch.amax(torch.mul(mask, positions, out=blocks.scratch(block)), -1, out=last[block])
        if entropy_sums is not None:
            product = blocks.scratch(block)
            entropy_sums[block] = masked_product_(
                entropy[block].detach(), mask, product, "entropy", first_row=block.start, clamp_min=0.0
            )
            if log_epsilon is not None:
                entropy_sums[block] = row_dot(product.add_(log_epsilon).log_(), mask)
    return MaskedRows(out, counts, entropy_sums, last)
