"""The CPU demo's task: "answer with an even digit", in Paper A's tag format.

Prompt: a short instruction. Response: ``<reasoning>…</reasoning><answer>D</answer>``.
A tiny model learns it within a CPU budget: after a short supervised warm start that teaches
the format with uniformly random digits, about half the answers are even, so every group has
successes and failures, and RL only has to shift probability towards even digits. The tag
format gives GTPO-trajectory real shared prefixes/suffixes for its conflict mask.

Rewards (verl custom reward functions, selected per run):
- ``compute_score``: 1 for a well-formed even answer, else 0, with ``acc`` for DAPO's filter.
- ``compute_score_paper_a``: Paper A's scale: 10 for the format, +10 when also correct.
"""

from __future__ import annotations

import os
import random
import re
import time

DATA_SOURCE = "gtpo_cpu_demo/even_digit"
# the demo's watchdog drill: while the file this names exists, scoring waits, so generation stalls
STALL_FILE_ENV = "GTPO_DEMO_STALL_FILE"
# the tags are single tokens of the demo tokenizer, so a response is ~8 tokens long
TAGS = ("<reasoning>", "</reasoning>", "<answer>", "</answer>")
INSTRUCTION = "Think between <reasoning> and </reasoning>, then give an even digit between <answer> and </answer>."
ANSWER = re.compile(r"<reasoning>(.*?)</reasoning>\s*<answer>\s*(\d)\s*</answer>\s*$", re.DOTALL)


def formatted_response(rng: random.Random) -> str:
    """A well-formed response with a random digit (the warm-start data)."""
    thought = "".join(rng.choice("abcdefgh") for _ in range(rng.randint(1, 3)))
    return f"<reasoning>{thought}</reasoning><answer>{rng.randint(0, 9)}</answer>"


def prompts(count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [f"#{rng.randint(0, 999)}: {INSTRUCTION}" for _ in range(count)]


def write_parquet(path: str, count: int, seed: int, split: str) -> str:
    """Write verl RL parquet rows (``prompt`` as chat messages, rule reward, ``data_source``)."""
    import pandas as pd

    rows = [
        {
            "data_source": DATA_SOURCE,
            "prompt": [{"role": "user", "content": text}],
            "ability": "format",
            "reward_model": {"style": "rule", "ground_truth": "even"},
            "extra_info": {"split": split, "index": index},
        }
        for index, text in enumerate(prompts(count, seed))
    ]
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    pd.DataFrame(rows).to_parquet(path)
    return path


def _parse(solution_str: str):
    match = ANSWER.search(solution_str.strip())
    return None if match is None else int(match.group(2))


def _wait_while_stalled() -> None:
    stall_file = os.environ.get(STALL_FILE_ENV)
    while stall_file and os.path.exists(stall_file):
        time.sleep(1.0)


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    """Binary outcome: 1.0 for a well-formed even answer, else 0.0 (``acc`` for dynamic sampling)."""
    _wait_while_stalled()
    digit = _parse(solution_str)
    correct = digit is not None and digit % 2 == 0
    return {"score": float(correct), "acc": float(correct)}


def compute_score_paper_a(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    """Paper A's reward scale (official reward_math.py): 10 for the format, +10 when correct."""
    digit = _parse(solution_str)
    formatted = digit is not None
    correct = formatted and digit % 2 == 0
    return {"score": 10.0 * formatted + 10.0 * correct, "acc": float(correct)}
