"""Where the estimators' CPU outputs live: transparent huge pages, asked of the kernel through libc's ``madvise``.

The plugin passes ``huge_page_empty`` as the ``empty`` allocator of every estimator it runs
(``plugin/estimators/``): the pure functions (``algorithms/``) allocate their fresh ``(B, T)``
output, and the column tables of ``gtpo_token``, through it, and stay pure torch themselves.

A fresh ``(B, T)`` output of the CPU faults its pages in on first write, one trap per 4 KiB page.
Asking for 2 MiB pages before that write (``madvise(MADV_HUGEPAGE)``, honoured when the kernel's
THP mode is ``madvise`` or ``always``) turns 8,192 faults per 32 MiB into 16. A large request can
instead stall while the kernel compacts memory into 2 MiB blocks (its ``madvise`` defrag mode does
that in the fault): measured on a 2-core VM, outputs of 32-256 MiB were filled 20-37 % faster in
huge pages, while 512-671 MiB ones took 1.4-4.8 s instead of 0.9-1.7 s in half the calls. So only
allocations up to ``HUGE_PAGE_MAX_BYTES`` are advised; ``GTPO_VERL_HUGE_PAGES=0`` turns the request
off (docs/performance.md).
"""

from __future__ import annotations

import ctypes
import os
import sys
from typing import Sequence

import torch

HUGE_PAGE_BYTES = 2 << 20
HUGE_PAGE_MAX_BYTES = 128 << 20
_MADV_HUGEPAGE = 14  # linux/mman.h


def _madvise():
    """libc's ``madvise`` on Linux, else None (no huge-page request is made there, nor with GTPO_VERL_HUGE_PAGES=0)."""
    if not sys.platform.startswith("linux") or os.environ.get("GTPO_VERL_HUGE_PAGES", "1") == "0":
        return None
    try:
        madvise = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return None
    madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    madvise.restype = ctypes.c_int
    return madvise


_LIBC_MADVISE = _madvise()


def huge_page_empty(size: Sequence[int], *, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """``torch.empty(size)`` for an estimator's output, in huge pages on a Linux CPU where it spans some
    and is at most ``HUGE_PAGE_MAX_BYTES``.

    Only the whole 2 MiB pages inside the allocation are advised, before anything touches them;
    a failed request (THP off, a kernel without it) leaves ordinary pages and the same tensor.
    """
    out = torch.empty(size, dtype=dtype, device=device)
    if out.device.type == "cpu" and _LIBC_MADVISE is not None and out.numel() * out.element_size() <= HUGE_PAGE_MAX_BYTES:
        start = -(-out.data_ptr() // HUGE_PAGE_BYTES) * HUGE_PAGE_BYTES
        stop = (out.data_ptr() + out.numel() * out.element_size()) // HUGE_PAGE_BYTES * HUGE_PAGE_BYTES
        if stop > start:
            _LIBC_MADVISE(start, stop - start, _MADV_HUGEPAGE)
    return out


__all__ = ["HUGE_PAGE_BYTES", "HUGE_PAGE_MAX_BYTES", "huge_page_empty"]
