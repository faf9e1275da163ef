"""Synthetic runs in verl's file-logger format, for the report's benchmark and browser test.

Metric names are those real CPU runs logged (tests/fixtures/cpu_run_metrics/) plus the ones only
a GPU run logs (dynamic sampling, accelerator memory, ⟨H⟩_ini, the high-entropy transform),
padded with ``extra/metric_<i>`` to the size asked for; validation names are logged every
``test_freq`` steps and at step 0, as verl does. Values are float64 random walks at full
precision (the largest text and payload per value), integers where verl logs counts.
"""

from __future__ import annotations

import glob
import json
import os
import re
from pathlib import Path

import numpy as np

from gtpo_verl.trainer.metrics_file import read_metrics_file

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "cpu_run_metrics"
GPU_ONLY = (
    "training/filter_groups/evicted_samples", "perf/max_memory_allocated_gb", "gtpo/entropy/initial",
    "gtpo/transform/high_entropy_tokens/kept_fraction", "gtpo/transform/high_entropy_tokens/kept_tokens",
    "gtpo/transform/high_entropy_tokens/entropy_threshold",
)
COUNTS = re.compile(r"tokens$|evicted_samples$|padding_rows$|global_step$|warnings_total$|_warning$|^gtpo/health/(?!all_equal_groups_frac)")


def real_names() -> tuple[list[str], list[str]]:
    """(training metric names, validation metric names) the fixture runs logged."""
    names: set[str] = set()
    for path in glob.glob(str(FIXTURES / "*.jsonl")):
        for data in read_metrics_file(path).steps.values():
            names.update(data)
    names.update(GPU_ONLY)
    return sorted(n for n in names if not n.startswith("val-")), sorted(n for n in names if n.startswith("val-"))


def write_run(path: str, steps: int, metrics: int, seed: int = 0, test_freq: int = 10) -> dict:
    """Write one run of ``steps`` training steps logging ``metrics`` names in all; returns its values."""
    train, val = real_names()
    extra = max(0, metrics - len(train) - len(val))
    train = (train + [f"extra/metric_{i}" for i in range(extra)])[: max(0, metrics - len(val))]
    rng = np.random.default_rng(seed)
    walks = np.cumsum(rng.normal(0.0, 0.05, size=(steps + 1, len(train) + len(val))), axis=0) + rng.uniform(0, 1, len(train) + len(val))
    counts = np.array([bool(COUNTS.search(n)) for n in train + val])
    walks[:, counts] = np.abs(np.round(walks[:, counts] * 100))
    logged = {}
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as handle:
        for step in range(steps + 1):
            data = {}
            if step > 0:
                data.update({name: float(walks[step, i]) if not counts[i] else int(walks[step, i]) for i, name in enumerate(train)})
            if step % test_freq == 0 or step == steps:
                offset = len(train)
                data.update({name: float(walks[step, offset + i]) for i, name in enumerate(val)})
            handle.write(json.dumps({"step": step, "data": data}) + "\n")
            logged[step] = data
    return logged
