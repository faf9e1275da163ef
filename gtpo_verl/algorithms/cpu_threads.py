"""Run an estimator's CPU passes on the calling thread alone, without changing anyone's settings.

Every torch op on a CPU tensor with more than one torch thread opens an OpenMP parallel
region that ends when all its threads are done. When another process holds a core, each
region waits for a descheduled thread, one scheduler time slice at a time: an estimator made
of a few hundred ops then costs 5-35x verl's ``grpo``, whose time is a Python loop of tiny
ops that never go parallel (docs/performance.md). The estimators are memory-bound, so a
second thread buys little even on a quiet machine.

``one_cpu_thread`` therefore caps the OpenMP team of the *calling thread* to one for the
duration of the call and restores it afterwards. OpenMP keeps the thread count per thread
(the ``nthreads-var`` ICV), so other Python threads, other processes and
``torch.set_num_threads`` are untouched; ``torch.get_num_threads()`` reads 1 inside the call,
which is also what selects the cache-sized row passes. Accelerator tensors are not affected.
If no OpenMP runtime is loaded (a torch built with another thread pool, or no ``/proc``), the
call runs as it is, with the thread count the caller set.
"""

from __future__ import annotations

import ctypes
import functools
import os
import threading
from typing import Callable, Optional, TypeVar

import torch

F = TypeVar("F", bound=Callable)
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


def one_cpu_thread(fn: F) -> F:
    """Decorate a function whose first argument is a tensor: on the CPU, run it on one thread.

    The cap is thread-local and undone in ``finally`` (see the module docstring).
    """

    @functools.wraps(fn)
    def wrapper(first, *args, **kwargs):
        if not (isinstance(first, torch.Tensor) and first.device.type == "cpu"):
            return fn(first, *args, **kwargs)
        torch.get_num_threads()  # torch sets this thread's OpenMP count on first use: let it happen before the cap
        runtime = openmp_runtime()
        previous = runtime.omp_get_max_threads() if runtime is not None else 1
        if previous <= 1:
            return fn(first, *args, **kwargs)
        runtime.omp_set_num_threads(1)
        try:
            return fn(first, *args, **kwargs)
        finally:
            runtime.omp_set_num_threads(previous)

    return wrapper  # type: ignore[return-value]
