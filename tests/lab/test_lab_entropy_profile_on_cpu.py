"""The lab's δ-filter profile scales δ by the same ⟨H⟩_ini the trainer measures (``initial_entropy``)."""

import numpy as np
import pytest
import torch

from gtpo_verl.algorithms.trajectory import initial_entropy
from gtpo_verl.lab.entropy_profile import delta_filter

# Row 1's third token, row 2 (empty) and row 3's masked tokens hold garbage that must not count.
ENTROPY = np.array([[0.3, 0.6, 0.9], [1.0, 0.4, 99.0], [5.0, 5.0, 5.0], [1.4, np.nan, np.inf]])
MASK = np.array([[1, 1, 1], [1, 1, 0], [0, 0, 0], [1, 0, 0]])


def test_delta_filter_reads_the_trainers_initial_entropy():
    out = delta_filter(ENTROPY, MASK)
    # ⟨H⟩_i = [0.6, 0.7, 0 (empty), 1.4]; ⟨H⟩_ini over the non-empty ones: (0.6 + 0.7 + 1.4)/3 = 0.9
    assert out["initial_entropy"] == pytest.approx(0.9, abs=1e-12)
    assert out["initial_entropy"] == initial_entropy(torch.from_numpy(MASK), entropy=torch.from_numpy(ENTROPY))
    assert out["scaled_threshold"] == pytest.approx(1.35, abs=1e-12)  # 1.5 · 0.9
    assert out["filtered_at_scaled"] == pytest.approx(1 / 4)  # only 1.4 > 1.35, of the 4 responses
    assert out["filtered_at_ln2"] == pytest.approx(2 / 4)  # 0.7 and 1.4 > ln 2 ≈ 0.693
