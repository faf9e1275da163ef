"""The real-LM demo's task: small arithmetic, generated locally and seeded, in verl's RL data format.

Each problem is "Compute a OP b. Reply with only the number." with a, b single digits and OP one
of ``OPERATIONS`` (subtraction keeps a ≥ b, so every answer is a non-negative integer). The rows
are written by ``recipes/data/verl_data.py`` (``make_row``, ``write_parquet``), the code every
data-preparation recipe uses: one chat user message (verl renders it with the model's chat
template), the answer as the rule ground truth, and ``data_source = "openai/gsm8k"``.

Scoring is verl's own: ``verl.utils.reward_score.gsm8k.compute_score`` in its flexible mode (the
last number in the response's final 300 characters must equal the ground truth as a string; no
format reward), run by verl's reward loop. verl calls a custom reward function with
``data_source=…, extra_info=…`` keywords that the gsm8k scorer does not take, and its default
routing for ``openai/gsm8k`` uses the strict ``#### <answer>`` mode, which this model almost never
writes; ``compute_score`` below only forwards the two arguments the scorer reads.

Note what verl's flexible mode counts: its pattern ``-?[0-9.,]+`` keeps a trailing full stop, so
"7 + 6 = 13." extracts "13." and scores 0, while "7 + 6 = 13" scores 1. The prompt asks for the
number only; the policy can learn the rest.
"""

from __future__ import annotations

import os
import random
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "recipes", "data"))

from verl_data import make_row, write_parquet  # noqa: E402

DATA_SOURCE = "openai/gsm8k"
OPERATIONS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b}
TEMPLATE = "Compute {a} {op} {b}. Reply with only the number."


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    """verl's gsm8k scorer in flexible mode: 1.0 if the response's last number equals ``ground_truth``, else 0.0."""
    from verl.utils.reward_score import gsm8k

    return float(gsm8k.compute_score(solution_str, ground_truth, method="flexible"))


def problems(count: int, seed: int, operations: str = "+-") -> list[tuple[int, str, int, int]]:
    """``count`` seeded problems ``(a, op, b, answer)``; a, b in 0..9, subtraction with a ≥ b."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        op = rng.choice(operations)
        a, b = rng.randint(0, 9), rng.randint(0, 9)
        if op == "-" and a < b:
            a, b = b, a
        out.append((a, op, b, OPERATIONS[op](a, b)))
    return out


def rows(count: int, seed: int, split: str, operations: str = "+-") -> list[dict]:
    """verl RL rows (``recipes/data/verl_data.make_row``) for ``count`` seeded problems."""
    return [
        make_row(
            DATA_SOURCE,
            [{"role": "user", "content": TEMPLATE.format(a=a, op=op, b=b)}],
            str(answer),
            "arithmetic",
            {"split": split, "index": index, "operation": op},
        )
        for index, (a, op, b, answer) in enumerate(problems(count, seed, operations))
    ]


def write_splits(out_dir: str, train: int = 512, val: int = 64, operations: str = "+-") -> tuple[str, str]:
    """Write ``train.parquet`` (seed 0) and ``val.parquet`` (seed 1) under ``out_dir``."""
    train_path = write_parquet(rows(train, 0, "train", operations), os.path.join(out_dir, "train.parquet"))
    val_path = write_parquet(rows(val, 1, "val", operations), os.path.join(out_dir, "val.parquet"))
    return str(train_path), str(val_path)
