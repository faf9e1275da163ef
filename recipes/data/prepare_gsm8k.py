#!/usr/bin/env python3
"""GSM8K → verl parquet with Paper A's <reasoning>/<answer> prompt (recipes/gtpo_traj/*gsm8k*).

    python3 recipes/data/prepare_gsm8k.py --output-dir ~/verl/data/gsm8k_reasoning
    python3 recipes/data/prepare_gsm8k.py --input ./gsm8k_main --output-dir …   # offline

Without --input it downloads ``openai/gsm8k`` (config ``main``): train 7,473, test 1,319 rows.
``--input`` is a folder holding one file set per split whose names start with the split
(``train-00000-of-00001.parquet``, ``test.jsonl``, …), i.e. a downloaded copy of the HF repo.

Each row: system = ``gtpo_verl.rewards.format_math.SYSTEM_PROMPT`` (official config.yaml), user =
the question; ground truth = the text after ``####`` (official ``format_gsm8k``: the last
``#### x`` line, else the text after the last ``###``, else the last word without its final ".").
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from verl_data import load_hf, make_row, read_records, write_parquet  # noqa: E402

HF_NAME, HF_CONFIG = "openai/gsm8k", "main"
DATA_SOURCE = "openai/gsm8k"
SPLITS = ("train", "test")


def final_answer(solution: str) -> str:
    """Return GSM8K's final answer, as the official ``format_gsm8k`` extracts it."""
    match = re.search(r"####\s*(.+)\s*$", solution, flags=re.MULTILINE)
    if match:
        return match.group(1).strip()
    if "###" in solution:
        return solution.rsplit("###", 1)[1].strip()
    return solution.strip().split()[-1].strip(".")


def to_verl_row(record: dict[str, Any], split: str, index: int) -> dict[str, Any]:
    from gtpo_verl.rewards.format_math import SYSTEM_PROMPT

    question, solution = str(record["question"]), str(record["answer"])
    prompt = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": question}]
    extra = {"split": split, "index": index, "question": question, "solution": solution}
    return make_row(DATA_SOURCE, prompt, final_answer(solution), "math", extra)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--input", help="local folder with train*/test* files (default: download from the HF hub)")
    parser.add_argument("--output-dir", required=True, help="writes train.parquet and test.parquet here")
    parser.add_argument("--hf-name", default=HF_NAME)
    args = parser.parse_args(argv)

    for split in SPLITS:
        records = read_records(args.input, split=split) if args.input else load_hf(args.hf_name, HF_CONFIG, split)
        write_parquet([to_verl_row(r, split, i) for i, r in enumerate(records)], Path(args.output_dir) / f"{split}.parquet")
    return 0


if __name__ == "__main__":
    sys.exit(main())
