"""The estimators' (B, T) output on the CPU: a plain tensor, in transparent huge pages where the kernel allows."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from gtpo_verl.algorithms import blocks

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


def test_fresh_output_is_a_plain_writable_tensor():
    out = blocks.fresh_output((300, 7000), torch.float32, torch.device("cpu"))
    assert out.shape == (300, 7000) and out.dtype == torch.float32 and out.is_contiguous()
    out.fill_(2.5)
    assert float(out.sum()) == pytest.approx(2.5 * 300 * 7000)
    small = blocks.fresh_output((3, 5), torch.float64, torch.device("cpu"))  # under one huge page: nothing advised
    assert small.shape == (3, 5) and small.dtype == torch.float64


@pytest.mark.skipif(not sys.platform.startswith("linux") or not THP_MODE.exists()
                    or "[never]" in THP_MODE.read_text(), reason="no transparent huge pages on this machine")
def test_a_large_output_lands_in_huge_pages():
    out = blocks.fresh_output((4096, 4096), torch.float32, torch.device("cpu"))  # 64 MiB
    out.fill_(1.0)
    assert _anon_huge_kib(out.data_ptr() + out.numel() * 2) >= 2048  # a 2 MiB page inside the tensor


def test_only_outputs_up_to_the_cap_are_advised(monkeypatch):
    """Above HUGE_PAGE_MAX_BYTES a request can stall in the kernel's compaction: those stay in plain pages."""
    advised = []
    monkeypatch.setattr(blocks, "_LIBC_MADVISE", lambda start, length, advice: advised.append((start, length, advice)))
    monkeypatch.setattr(blocks, "HUGE_PAGE_MAX_BYTES", 16 << 20)
    inside = blocks.fresh_output((4, 1 << 20), torch.float32, torch.device("cpu"))  # 16 MiB: at the cap
    assert len(advised) == 1 and advised[0][2] == blocks._MADV_HUGEPAGE
    start, length, _ = advised[0]
    assert start % blocks.HUGE_PAGE_BYTES == 0 and length % blocks.HUGE_PAGE_BYTES == 0 and length >= 14 << 20
    assert inside.data_ptr() <= start and start + length <= inside.data_ptr() + (16 << 20)
    blocks.fresh_output((4, (1 << 20) + 1), torch.float32, torch.device("cpu"))  # 4 elements over the cap
    blocks.fresh_output((4, 1 << 20), torch.float32, torch.device("meta"))  # not the CPU
    assert len(advised) == 1


def test_the_request_can_be_turned_off():
    code = "from gtpo_verl.algorithms import blocks; print(blocks._LIBC_MADVISE is None)"
    env = {**os.environ, "GTPO_VERL_HUGE_PAGES": "0"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert done.stdout.strip() == "True"
