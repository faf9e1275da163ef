"""Shared fixtures. Tests import verl once per session; nothing here mocks verl."""

import os

import pytest
import torch

os.environ.setdefault("TORCH_COMPILE_DISABLE", "1")
os.environ.setdefault("RAY_DEDUP_LOGS", "0")


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    yield


def padded(rows, width=None, fill=0.0, dtype=torch.float32):
    """Right-pad a list of per-row lists into ``(B, width)`` values and a 0/1 mask."""
    width = width or max((len(r) for r in rows), default=0)
    values = torch.full((len(rows), width), fill, dtype=dtype)
    mask = torch.zeros(len(rows), width, dtype=torch.int64)
    for i, row in enumerate(rows):
        values[i, : len(row)] = torch.tensor(row, dtype=dtype)
        mask[i, : len(row)] = 1
    return values, mask


@pytest.fixture
def pad():
    """The ``padded`` helper as a fixture (test modules are not importable packages)."""
    return padded
