"""A model folder and parquet files the CPU preset can point at: what a config check, a dry run or the
preflight needs before Ray starts (the model's weights and the prompts' text are never read)."""

from __future__ import annotations

from pathlib import Path


def write_run_files(root: Path, train_rows: int = 8, val_rows: int | None = None) -> Path:
    """``root/model/config.json`` (empty), ``root/train.parquet`` with ``train_rows`` prompts and, unless
    ``val_rows`` is None, ``root/val.parquet`` with ``val_rows``; returns ``root``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    (root / "model").mkdir(exist_ok=True)
    (root / "model" / "config.json").write_text("{}")
    pq.write_table(pa.table({"prompt": [f"p{i}" for i in range(train_rows)]}), root / "train.parquet")
    if val_rows is not None:
        pq.write_table(pa.table({"prompt": [f"v{i}" for i in range(val_rows)]}), root / "val.parquet")
    return root
