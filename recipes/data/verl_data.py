"""Shared helpers of the data-preparation scripts: read local files or a HF dataset, write verl parquet.

A verl RL row (what ``verl.utils.dataset.rl_dataset.RLHFDataset`` and the reward managers read):

    data_source   str   selects the scorer (verl's default_compute_score) and names the val metrics
    prompt        list  chat messages [{"role": …, "content": …}], rendered with the model's chat template
    ability       str   free-form label
    reward_model  dict  {"style": "rule", "ground_truth": str}
    extra_info    dict  {"split": str, "index": int, …}

Only pyarrow is imported at module level (fast); ``datasets`` is imported only when a script
downloads from the HF hub, which no test does.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any, Iterable, Optional

import pyarrow as pa
import pyarrow.parquet as pq

# DAPO-Math-17k's prompt (BytedTsinghua-SIA/DAPO-Math-17k and AIME-2024 rows carry it verbatim);
# verl's math_dapo scorer reads the last "Answer: …" line it asks for.
DAPO_PREFIX = (
    "Solve the following math problem step by step. The last line of your response should be of the form "
    "Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\n"
)
DAPO_SUFFIX = '\n\nRemember to put your answer on its own line after "Answer:".'
READABLE_SUFFIXES = (".parquet", ".jsonl", ".json")


def dapo_prompt(problem: str) -> list[dict[str, str]]:
    """Return DAPO's single user message for ``problem``."""
    return [{"role": "user", "content": DAPO_PREFIX + problem.strip() + DAPO_SUFFIX}]


def problem_text(prompt: Any) -> str:
    """Return the bare problem of a prompt (chat list or string), DAPO's template and spacing removed."""
    if isinstance(prompt, (list, tuple)):
        text = "\n\n".join(str(m.get("content", "")) for m in prompt if m.get("role", "user") == "user")
    else:
        text = str(prompt)
    text = text.strip()
    if text.startswith(DAPO_PREFIX.strip()):
        text = text[len(DAPO_PREFIX.strip()) :]
    if text.endswith(DAPO_SUFFIX.strip()):
        text = text[: -len(DAPO_SUFFIX.strip())]
    return re.sub(r"\s+", " ", text).strip()


def read_records(path: str | Path, split: Optional[str] = None) -> list[dict[str, Any]]:
    """Read rows from a .parquet / .jsonl / .json file, or from every such file in a folder (recursively).

    With ``split``, a folder contributes only files whose name starts with it (``train-00000-of-00001.parquet``,
    ``algebra/test.jsonl``), the layout of a downloaded HF dataset repository.
    """
    path = Path(path)
    if path.is_dir():
        files = sorted(
            p
            for p in path.rglob("*")
            if p.is_file() and p.name.endswith(READABLE_SUFFIXES) and (split is None or p.name.startswith(split))
        )
        if not files:
            raise FileNotFoundError(f"no {'/'.join(READABLE_SUFFIXES)} files{f' for split {split!r}' if split else ''} under {path}")
        return [row for f in files for row in _read_file(f, subset=_subset_name(path, f))]
    if not path.exists():
        raise FileNotFoundError(f"--input {path} does not exist")
    return _read_file(path, subset=None)


def _subset_name(root: Path, file: Path) -> Optional[str]:
    rel = file.relative_to(root)
    return rel.parts[0] if len(rel.parts) > 1 else None


def _read_file(path: Path, subset: Optional[str]) -> list[dict[str, Any]]:
    if path.suffix == ".parquet":
        rows = pq.read_table(path).to_pylist()
    elif path.suffix == ".jsonl":
        with open(path, encoding="utf-8") as f:
            rows = [json.loads(line) for line in f if line.strip()]
    else:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        rows = data if isinstance(data, list) else [data]
    if subset is not None:
        for row in rows:
            row.setdefault("_subset", subset)
    return rows


def load_hf(name: str, config: Optional[str], split: str) -> list[dict[str, Any]]:
    """Download ``name`` (config, split) from the HF hub with ``datasets`` (cluster use only)."""
    from datasets import load_dataset

    return list(load_dataset(name, config, split=split))


def make_row(
    data_source: str,
    prompt: list[dict[str, str]],
    ground_truth: str,
    ability: str,
    extra_info: dict[str, Any],
) -> dict[str, Any]:
    """Return one verl RL row (schema in the module docstring)."""
    return {
        "data_source": data_source,
        "prompt": [{"role": str(m["role"]), "content": str(m["content"])} for m in prompt],
        "ability": ability,
        "reward_model": {"style": "rule", "ground_truth": str(ground_truth)},
        "extra_info": extra_info,
    }


def dedup_by_problem(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Keep the first row of each problem (DAPO template and spacing ignored), in first-seen order.

    Raises ``ValueError`` when copies of one problem disagree on the ground truth.
    """
    kept: dict[str, dict[str, Any]] = {}
    for row in rows:
        key = problem_text(row["prompt"])
        first = kept.setdefault(key, row)
        gt, first_gt = row["reward_model"]["ground_truth"], first["reward_model"]["ground_truth"]
        if gt != first_gt:
            raise ValueError(
                f"duplicate problem with different ground truths ({first_gt!r} vs {gt!r}): {key[:80]!r}…; "
                "fix the input file or drop one of the rows."
            )
    return list(kept.values())


def write_parquet(rows: list[dict[str, Any]], path: str | Path) -> Path:
    """Write ``rows`` as one parquet file (parents created) and print a one-line summary."""
    if not rows:
        raise ValueError(f"refusing to write an empty data set to {path}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)
    sources = sorted({r["data_source"] for r in rows})
    print(f"wrote {len(rows)} rows to {path} (data_source: {', '.join(sources)})", file=sys.stderr)
    return path
