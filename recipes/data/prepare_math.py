#!/usr/bin/env python3
"""Hendrycks MATH → verl parquet with Paper A's <reasoning>/<answer> prompt (recipes/gtpo_traj/*math*).

    python3 recipes/data/prepare_math.py --output-dir ~/verl/data/math_reasoning
    python3 recipes/data/prepare_math.py --input ./hendrycks_math --output-dir …   # offline

Without --input it downloads the seven subsets of ``EleutherAI/hendrycks_math`` (official
train_model.py): train 7,500, test 5,000 rows. ``--input`` is a folder with one subfolder per
subset holding train*/test* files (the HF repo layout), or flat train*/test* files.

Ground truth = the content of the solution's last ``\\boxed{…}``, braces balanced.
NOTE: the official ``format_hendrycks_math`` uses the regex ``\\\\boxed\\{([^}]*)\\}``, which stops
at the first "}" (``\\boxed{\\frac{1}{2}}`` → ``\\frac{1``; with the substring rule of the reward,
every answer containing ``\\frac{1`` would then count as correct). ``--answer-extraction official``
reproduces it.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))
from verl_data import load_hf, make_row, read_records, write_parquet  # noqa: E402

HF_NAME = "EleutherAI/hendrycks_math"
SUBSETS = (
    "algebra",
    "counting_and_probability",
    "geometry",
    "intermediate_algebra",
    "number_theory",
    "prealgebra",
    "precalculus",
)
DATA_SOURCE = "EleutherAI/hendrycks_math"
SPLITS = ("train", "test")


def last_boxed(solution: str) -> Optional[str]:
    """Return the content of the last ``\\boxed{…}`` (or ``\\fbox{…}``) with balanced braces, or None."""
    start = max(solution.rfind("\\boxed{"), solution.rfind("\\fbox{"))
    if start < 0:
        return None
    i = solution.index("{", start) + 1
    depth, begin = 1, i
    while i < len(solution):
        depth += {"{": 1, "}": -1}.get(solution[i], 0)
        if depth == 0:
            return solution[begin:i].strip()
        i += 1
    return None  # unbalanced


def official_boxed(solution: str) -> Optional[str]:
    """Return what the official regex keeps: the last ``\\boxed{`` up to the first ``}``."""
    matches = list(re.finditer(r"\\boxed\{([^}]*)\}", solution, flags=re.DOTALL))
    return matches[-1].group(1).strip() if matches else None


def final_answer(solution: str, extraction: str = "balanced") -> str:
    """Return the reference answer; without a box, the last word without its final "." (official fallback)."""
    boxed = last_boxed(solution) if extraction == "balanced" else official_boxed(solution)
    return boxed if boxed is not None else solution.strip().split()[-1].strip(".")


def to_verl_row(record: dict[str, Any], split: str, index: int, extraction: str) -> dict[str, Any]:
    from gtpo_verl.rewards.format_math import SYSTEM_PROMPT

    problem, solution = str(record["problem"]), str(record["solution"])
    prompt = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": problem}]
    extra = {
        "split": split,
        "index": index,
        "level": str(record.get("level", "")),
        "type": str(record.get("type", record.get("_subset", ""))),
        "solution": solution,
    }
    return make_row(DATA_SOURCE, prompt, final_answer(solution, extraction), "math", extra)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--input", help="local folder (subset subfolders) with train*/test* files (default: HF hub)")
    parser.add_argument("--output-dir", required=True, help="writes train.parquet and test.parquet here")
    parser.add_argument("--hf-name", default=HF_NAME)
    parser.add_argument("--answer-extraction", choices=("balanced", "official"), default="balanced")
    args = parser.parse_args(argv)

    for split in SPLITS:
        if args.input:
            records = read_records(args.input, split=split)
        else:
            records = [r for subset in SUBSETS for r in load_hf(args.hf_name, subset, split)]
        rows = [to_verl_row(r, split, i, args.answer_extraction) for i, r in enumerate(records)]
        write_parquet(rows, Path(args.output_dir) / f"{split}.parquet")
    return 0


if __name__ == "__main__":
    sys.exit(main())
