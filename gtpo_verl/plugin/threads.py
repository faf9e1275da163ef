"""Run an estimator's CPU passes on the calling thread alone, without changing anyone's settings.

The plugin applies it to every estimator it registers (``plugin/estimators/``) and to every
advantage transform (``plugin/extensions.py``): whatever the caller's thread setting, an
advantage step on the CPU runs on one OpenMP thread.

Every torch op on a CPU tensor with more than one torch thread opens an OpenMP parallel
region that ends when all its threads are done. When another process holds a core, each
region waits for a descheduled thread, one scheduler time slice at a time: an estimator made
of a few hundred ops then costs 5-35x verl's ``grpo``, whose time is a Python loop of tiny
ops that never go parallel (docs/performance.md). The estimators are memory-bound, so a
second thread buys little even on a quiet machine.

``one_cpu_thread`` therefore caps the OpenMP team of the *calling thread* to one for the
duration of a ``with`` block and restores it afterwards. OpenMP keeps the thread count per thread
(the ``nthreads-var`` ICV), so other Python threads, other processes and
``torch.set_num_threads`` are untouched; ``torch.get_num_threads()`` reads 1 inside the block,
so the row blocks are cache-sized there (``blocks.block_elements``). Accelerator tensors are not
affected.
If no OpenMP runtime is loaded (a torch built with another thread pool, or no ``/proc``), the
call runs as it is, with the thread count the caller set.
"""

from __future__ import annotations

import ctypes
import os
import threading
from contextlib import contextmanager
from typing import Any, Iterator, Optional

import torch

_OPENMP_NAMES = ("libgomp", "libiomp5", "libomp")
_runtime_lock = threading.Lock()
_runtime: Optional[ctypes.CDLL] = None
_looked_up = False


def _loaded_openmp_paths() -> list[str]:
    """Paths of the OpenMP runtimes mapped into this process, torch's own first."""
    try:
        with open("/proc/self/maps") as f:
            paths = {line.split()[-1] for line in f if any(name in line for name in _OPENMP_NAMES)}
    except OSError:
        return []
    torch_dir = os.path.dirname(torch.__file__)
    return sorted((p for p in paths if os.path.exists(p)), key=lambda p: not p.startswith(torch_dir))


def openmp_runtime() -> Optional[ctypes.CDLL]:
    """The OpenMP runtime torch's CPU ops use, or None when none is loaded."""
    global _runtime, _looked_up
    with _runtime_lock:
        if not _looked_up:
            torch.get_num_threads()  # makes sure torch has loaded (and initialised) its runtime
            for path in _loaded_openmp_paths():
                try:
                    lib = ctypes.CDLL(path)  # the already-loaded library, not a second copy
                    lib.omp_get_max_threads.restype = ctypes.c_int
                    lib.omp_set_num_threads.argtypes = [ctypes.c_int]
                except (OSError, AttributeError):
                    continue
                _runtime = lib
                break
            _looked_up = True
    return _runtime


@contextmanager
def one_cpu_thread(tensor: Any) -> Iterator[None]:
    """Inside the ``with`` block, run this thread's CPU ops on one OpenMP thread if ``tensor`` is on the CPU.

    The cap is thread-local and undone on exit, also on error (see the module docstring).
    """
    if not (isinstance(tensor, torch.Tensor) and tensor.device.type == "cpu"):
        yield
        return
    torch.get_num_threads()  # torch sets this thread's OpenMP count on first use: let it happen before the cap
    runtime = openmp_runtime()
    previous = runtime.omp_get_max_threads() if runtime is not None else 1
    if previous <= 1:
        yield
        return
    runtime.omp_set_num_threads(1)
    try:
        yield
    finally:
        runtime.omp_set_num_threads(previous)
