"""The estimators' (B, T) output on the CPU: a plain tensor, in transparent huge pages where the kernel allows.

The advice is the plugin's memory policy (``plugin/memory.py``): every estimator verl reaches through
its registry allocates its output through ``huge_page_empty``; the pure functions stay pure torch.
"""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from gtpo_verl.plugin import memory
from gtpo_verl.plugin.estimators import ESTIMATORS

THP_MODE = Path("/sys/kernel/mm/transparent_hugepage/enabled")


def _anon_huge_kib(address: int) -> int:
    """AnonHugePages of the mapping of this process that holds ``address`` (/proc/self/smaps)."""
    inside, total = False, 0
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()[0]
        if "-" in head and not head.endswith(":"):
            start, stop = (int(x, 16) for x in head.split("-"))
            inside = start <= address < stop
        elif inside and head == "AnonHugePages:":
            total += int(line.split()[1])
    return total


def _spy_on_madvise(monkeypatch):
    """Record the requests instead of making them (libc's call, not verl's code)."""
    advised = []
    monkeypatch.setattr(memory, "_LIBC_MADVISE", lambda start, length, advice: advised.append((start, length, advice)))
    return advised


def test_huge_page_empty_is_a_plain_writable_tensor():
    out = memory.huge_page_empty((300, 7000), dtype=torch.float32, device=torch.device("cpu"))
    assert out.shape == (300, 7000) and out.dtype == torch.float32 and out.is_contiguous()
    out.fill_(2.5)
    assert float(out.sum()) == pytest.approx(2.5 * 300 * 7000)
    small = memory.huge_page_empty((3, 5), dtype=torch.float64, device=torch.device("cpu"))  # under one huge page
    assert small.shape == (3, 5) and small.dtype == torch.float64


@pytest.mark.skipif(not sys.platform.startswith("linux") or not THP_MODE.exists()
                    or "[never]" in THP_MODE.read_text(), reason="no transparent huge pages on this machine")
def test_a_large_output_lands_in_huge_pages():
    out = memory.huge_page_empty((4096, 4096), dtype=torch.float32, device=torch.device("cpu"))  # 64 MiB
    out.fill_(1.0)
    assert _anon_huge_kib(out.data_ptr() + out.numel() * 2) >= 2048  # a 2 MiB page inside the tensor


def test_only_outputs_up_to_the_cap_are_advised(monkeypatch):
    """Above HUGE_PAGE_MAX_BYTES a request can stall in the kernel's compaction: those stay in plain pages."""
    advised = _spy_on_madvise(monkeypatch)
    monkeypatch.setattr(memory, "HUGE_PAGE_MAX_BYTES", 16 << 20)
    cpu = torch.device("cpu")
    inside = memory.huge_page_empty((4, 1 << 20), dtype=torch.float32, device=cpu)  # 16 MiB: at the cap
    assert len(advised) == 1 and advised[0][2] == memory._MADV_HUGEPAGE
    start, length, _ = advised[0]
    assert start % memory.HUGE_PAGE_BYTES == 0 and length % memory.HUGE_PAGE_BYTES == 0 and length >= 14 << 20
    assert inside.data_ptr() <= start and start + length <= inside.data_ptr() + (16 << 20)
    memory.huge_page_empty((4, (1 << 20) + 1), dtype=torch.float32, device=cpu)  # 4 elements over the cap
    memory.huge_page_empty((4, 1 << 20), dtype=torch.float32, device=torch.device("meta"))  # not the CPU
    assert len(advised) == 1


def test_the_request_can_be_turned_off():
    code = "from gtpo_verl.plugin import memory; print(memory._LIBC_MADVISE is None)"
    env = {**os.environ, "GTPO_VERL_HUGE_PAGES": "0"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert done.stdout.strip() == "True"


@pytest.mark.parametrize("name", list(ESTIMATORS))
def test_every_estimator_verl_calls_asks_for_huge_pages_for_its_output(monkeypatch, name):
    """Through verl's registry, the adapter's output (B, T) is the tensor whose pages were advised."""
    from verl.trainer.ppo.core_algos import get_adv_estimator_fn

    advised = _spy_on_madvise(monkeypatch)
    rows, width = 16, 1 << 16  # 4 MiB of float32: at least one whole 2 MiB page inside
    g = torch.Generator().manual_seed(0)
    mask = torch.ones(rows, width, dtype=torch.int64)
    rewards = torch.zeros(rows, width)
    rewards[:, -1] = torch.tensor([1.0, 0.0] * (rows // 2))
    entropy = torch.rand(rows, width, generator=g)
    responses = torch.randint(0, 3, (rows, width), generator=g)
    uids = np.array([f"u{i // 4}" for i in range(rows)], dtype=object)
    config = OmegaConf.create({name: {}})
    advantages, _ = get_adv_estimator_fn(name)(rewards, mask, index=uids, config=config, entropys=entropy,
                                               responses=responses)
    assert advised, f"{name}: no huge-page request"
    start, length, advice = advised[0]
    assert advice == memory._MADV_HUGEPAGE and length >= memory.HUGE_PAGE_BYTES
    # the first request is the output's own: verl's advantages are that tensor (already float32)
    assert advantages.data_ptr() <= start and start + length <= advantages.data_ptr() + rows * width * 4
