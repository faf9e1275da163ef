#!/usr/bin/env python3
"""DAPO-Math-17k → verl parquet, the training set of the DAPO runs (docs/reproduce.md).

    python3 recipes/data/prepare_dapo_math.py --output ~/verl/data/dapo-math-17k.parquet
    python3 recipes/data/prepare_dapo_math.py --input dapo-math-17k.parquet --output …   # offline

Without --input it downloads ``BytedTsinghua-SIA/DAPO-Math-17k`` (split ``train``). The
published parquet is already in verl's format (``data_source=math_dapo``, DAPO's "Answer:"
prompt, ``reward_model.ground_truth``) and repeats each of its ~17.9k problems about 100 times
(1,791,700 rows): the upstream DAPO script trains one epoch over those rows, so this script keeps
them by default. ``--dedup`` keeps one row per problem; then raise ``trainer.total_epochs`` to keep
the number of steps. Rows of another layout (``problem``/``prompt`` text + ``answer``/``solution``)
get DAPO's prompt.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from verl_data import dapo_prompt, dedup_by_problem, load_hf, make_row, read_records, write_parquet  # noqa: E402

HF_NAME = "BytedTsinghua-SIA/DAPO-Math-17k"
DATA_SOURCE = "math_dapo"  # verl's default_compute_score → reward_score/math_dapo.py (±1, acc, pred)


def to_verl_row(record: dict[str, Any], index: int, data_source: str = DATA_SOURCE) -> dict[str, Any]:
    """Normalise a DAPO-format row, or build one from a plain problem/answer row."""
    prompt = record.get("prompt")
    extra = {k: v for k, v in dict(record.get("extra_info") or {}).items() if k not in ("split", "index")}
    source_index = (record.get("extra_info") or {}).get("index")
    if source_index is not None:
        extra["source_index"] = str(source_index)  # the published rows carry a uuid here
    if isinstance(prompt, list):  # already verl-format (the published parquet)
        ground_truth = (record.get("reward_model") or {}).get("ground_truth")
    else:
        prompt = dapo_prompt(str(prompt if prompt is not None else record["problem"]))
        ground_truth = record.get("answer", record.get("solution"))
    if ground_truth is None:
        raise ValueError(f"row {index} has no ground truth (reward_model.ground_truth, answer or solution)")
    extra.update({"split": "train", "index": index})
    return make_row(data_source, prompt, str(ground_truth), record.get("ability") or "MATH", extra)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--input", help="local .parquet/.jsonl/.json file or folder (default: download from the HF hub)")
    parser.add_argument("--output", required=True, help="output parquet path")
    parser.add_argument("--hf-name", default=HF_NAME)
    parser.add_argument("--dedup", action="store_true", help="one row per problem (see the docstring)")
    args = parser.parse_args(argv)

    records = read_records(args.input) if args.input else load_hf(args.hf_name, None, "train")
    rows = [to_verl_row(r, i) for i, r in enumerate(records)]
    if args.dedup:
        rows = dedup_by_problem(rows)
        for i, row in enumerate(rows):
            row["extra_info"]["index"] = i
    write_parquet(rows, args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
