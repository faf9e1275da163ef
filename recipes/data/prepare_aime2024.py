#!/usr/bin/env python3
"""AIME 2024 → verl parquet with exactly 30 unique problems (the DAPO runs' validation set).

    python3 recipes/data/prepare_aime2024.py --output ~/verl/data/aime-2024-dedup.parquet
    python3 recipes/data/prepare_aime2024.py --input aime-2024.parquet --output …          # offline
    python3 recipes/data/prepare_aime2024.py --template reasoning --output …/aime24_reasoning.parquet

Without --input it downloads ``BytedTsinghua-SIA/AIME-2024`` (split ``train``), which repeats each
of the 30 problems 32 times (960 rows) so that the upstream script's ``val_kwargs.n=1`` yields
avg@32. Repeated rows get different uids in verl, so best@32 / maj@32 can only be computed per
problem from one row sampled 32 times: this script keeps one row per problem and the recipes set
``actor_rollout_ref.rollout.val_kwargs.n=32``. Plain rows (``problem``/``Problem`` +
``answer``/``Answer``, e.g. HuggingFaceH4/aime_2024) are accepted too.

``--template dapo`` (default) keeps DAPO's "Answer:" prompt and ``data_source=math_dapo``
(verl's math_dapo scorer, metrics ``val-*/math_dapo/…``); ``--template reasoning`` writes
Paper A's <reasoning>/<answer> prompt for its out-of-distribution evaluation (scored by
``gtpo_verl.rewards.format_math``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from verl_data import dapo_prompt, dedup_by_problem, load_hf, make_row, problem_text, read_records, write_parquet  # noqa: E402

HF_NAME = "BytedTsinghua-SIA/AIME-2024"
EXPECTED_PROBLEMS = 30  # AIME I + II, 15 each


def _field(record: dict[str, Any], *names: str) -> Any:
    for name in names:
        if record.get(name) is not None:
            return record[name]
    raise KeyError(f"none of {names} in row with keys {sorted(record)}")


def to_verl_rows(records: list[dict[str, Any]], template: str, data_source: str) -> list[dict[str, Any]]:
    """Build one verl row per input row (not yet deduplicated)."""
    from gtpo_verl.rewards.format_math import SYSTEM_PROMPT

    rows = []
    for i, record in enumerate(records):
        prompt = record.get("prompt")
        if isinstance(prompt, list):  # verl-format (the published parquet)
            problem = problem_text(prompt)
            answer = _field(record.get("reward_model") or {}, "ground_truth")
        else:
            problem = str(prompt if prompt is not None else _field(record, "problem", "Problem", "question"))
            answer = _field(record, "answer", "Answer", "solution")
        if template == "dapo":
            messages = prompt if isinstance(prompt, list) else dapo_prompt(problem)
        else:
            messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": problem}]
        source_id = record.get("id", record.get("ID", (record.get("extra_info") or {}).get("index", i)))
        extra = {"split": "test", "index": i, "source_id": str(source_id)}
        rows.append(make_row(data_source, messages, str(answer).strip(), "MATH", extra))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--input", help="local .parquet/.jsonl/.json file or folder (default: download from the HF hub)")
    parser.add_argument("--output", required=True, help="output parquet path")
    parser.add_argument("--hf-name", default=HF_NAME)
    parser.add_argument("--template", choices=("dapo", "reasoning"), default="dapo")
    parser.add_argument("--data-source", default=None, help="default: math_dapo (dapo template), aime2024 (reasoning)")
    parser.add_argument(
        "--expect-problems", type=int, default=EXPECTED_PROBLEMS, help="fail unless this many unique problems (0: any)"
    )
    args = parser.parse_args(argv)

    data_source = args.data_source or ("math_dapo" if args.template == "dapo" else "aime2024")
    records = read_records(args.input) if args.input else load_hf(args.hf_name, None, "train")
    rows = dedup_by_problem(to_verl_rows(records, args.template, data_source))
    if args.expect_problems and len(rows) != args.expect_problems:
        print(
            f"error: {len(rows)} unique problems in {args.input or args.hf_name} (from {len(records)} rows), "
            f"expected {args.expect_problems}; pass --expect-problems 0 to accept any number.",
            file=sys.stderr,
        )
        return 1
    for i, row in enumerate(rows):
        row["extra_info"]["index"] = i
    write_parquet(rows, args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
