"""Shared fixtures. Tests import verl once per session; nothing here mocks verl."""

import os

import pytest
import torch

from support.batches import padded

os.environ.setdefault("TORCH_COMPILE_DISABLE", "1")
os.environ.setdefault("RAY_DEDUP_LOGS", "0")


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    yield


@pytest.fixture
def pad():
    """``support.batches.padded`` as a fixture."""
    return padded
