"""A run as the report sees it: verl's file-logger JSONL merged into one value per (step, metric).

verl 0.9.1's ``FileLogger`` (``trainer.logger`` with ``file``; ``verl/utils/tracking.py``) writes
one line per ``Tracking.log`` call, ``{"step": N, "data": {metric: value}}``, to
``$VERL_FILE_LOGGER_PATH``, else ``$VERL_FILE_LOGGER_ROOT/<project>/<experiment>.jsonl``, and
opens that file with ``"wb"``: a relaunch on the same path starts it afresh, so a requeued or
resumed run keeps its attempts apart only as separate files. A run is therefore one or more
files; they are read in order (first step logged, then modification time, then name) and every
(step, metric) keeps the last value written. A run that resumes from an earlier checkpoint
logs some steps again (and ``val_before_train`` logs the resume step's validation again): those
rewrites are counted and listed, never hidden. NaN and ±inf reach the file as ``null`` (orjson).
"""

from __future__ import annotations

import itertools
import json
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import numpy as np

from gtpo_verl.trainer.metrics_file import RESUMED_FROM

try:  # verl's own JSON library (a verl dependency); json is the fallback
    import orjson

    _loads = orjson.loads
    _DecodeError: tuple = (orjson.JSONDecodeError, UnicodeDecodeError)
except ImportError:  # pragma: no cover - orjson comes with verl
    _loads = json.loads
    _DecodeError = (json.JSONDecodeError, UnicodeDecodeError)

# "<method>_seed<k>" (the demos' run names) → group "<method>", seed k
SEED_SUFFIX = re.compile(r"^(?P<group>.+?)[_\-. ]?seed[_\-]?(?P<seed>\d+)$", re.IGNORECASE)
# what orjson / json give for a number, a boolean (0 / 1) and null
NUMBER_TYPES = frozenset({int, float, bool, type(None)})
# how many examples a note lists before it says "and N more"
NOTE_EXAMPLES = 5


class ReportInputError(ValueError):
    """Input the report cannot use; the message is one line that names the input and the fix."""


@dataclass
class MetricFile:
    path: str
    rows: int
    first_step: Optional[int]
    last_step: Optional[int]


@dataclass
class Run:
    """One training run: ``values[metric]`` is float64 aligned with ``steps`` (NaN: not logged there)."""

    name: str
    steps: np.ndarray
    values: dict[str, np.ndarray]
    files: list[MetricFile] = field(default_factory=list)
    rewritten: dict[int, int] = field(default_factory=dict)
    """step → number of metric values written again at that step (the last write is kept)."""
    notes: list[str] = field(default_factory=list)
    """What reading the files found: skipped lines, non-finite and non-numeric values, rewrites."""
    logged_null: dict[str, np.ndarray] = field(default_factory=dict)
    """metric → bool mask of the steps where the file holds ``null`` (a NaN or ±inf at training time)."""
    folder: Optional[str] = None
    group: str = ""
    seed: Optional[int] = None

    def __post_init__(self):
        if not self.group:
            self.group, self.seed = split_seed(self.name)

    def series(self, metric: str) -> tuple[np.ndarray, np.ndarray]:
        """``(steps, values)`` of the steps where ``metric`` was logged."""
        values = self.values.get(metric)
        if values is None:
            return self.steps[:0], np.empty(0)
        logged = ~np.isnan(values) | self.logged_null.get(metric, np.zeros(len(values), bool))
        return self.steps[logged], values[logged]


def split_seed(name: str) -> tuple[str, Optional[int]]:
    """``("DAPO_SEQ", 0)`` for ``"DAPO_SEQ_seed0"``; ``(name, None)`` for a name without a seed."""
    match = SEED_SUFFIX.match(name)
    return (match["group"], int(match["seed"])) if match else (name, None)


def _examples(items: list, limit: int = NOTE_EXAMPLES) -> str:
    shown = ", ".join(str(i) for i in items[:limit])
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")


def _read_rows(path: str, notes: list[str]) -> list[tuple[int, dict]]:
    """The file's ``(step, data)`` rows in file order; unreadable lines are skipped with a note."""
    rows, bad = [], []
    with open(path, "rb") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                row = _loads(line)
            except _DecodeError:
                try:  # a writer other than verl's may spell NaN / Infinity, which only json accepts
                    row = json.loads(line)
                except ValueError:
                    bad.append(number)
                    continue
            step, data = (row.get("step"), row.get("data")) if isinstance(row, dict) else (None, None)
            if isinstance(step, bool) or not isinstance(step, int) or not isinstance(data, dict):
                bad.append(number)
                continue
            if RESUMED_FROM in data:  # the line a resumed run writes before appending (trainer/metrics_file.py)
                notes.append(f"{path}: line {number}: the run resumed from its checkpoint of step {data[RESUMED_FROM]}; "
                             "the steps after it were trained again")
                continue
            rows.append((step, data))
    if bad:
        notes.append(f"{path}: {len(bad)} line(s) skipped, not a {{\"step\": N, \"data\": {{...}}}} JSON object "
                     f"(a write cut off when the job stopped?): line {_examples(bad)}")
    return rows


def _columns(merged: dict[int, dict], steps: np.ndarray):
    """``(values, nulls, non_numeric)``: float64 columns aligned with ``steps`` (NaN where not logged),
    the masks of non-finite values (``null``, or NaN / ±inf from a writer that spells them), and
    the steps of values that are not numbers.

    Rows with the same metric names (nearly all of a run's) convert as one matrix; a block holding
    a string, list or object converts cell by cell, and such a value is not drawn.
    """
    position = {int(step): index for index, step in enumerate(steps)}
    blocks: dict[tuple, tuple[list[int], list[list]]] = {}
    for step, data in merged.items():
        indices, rows = blocks.setdefault(tuple(data), ([], []))
        indices.append(position[step])
        rows.append(list(data.values()))
    values: dict[str, np.ndarray] = {}
    nulls: dict[str, np.ndarray] = {}
    non_numeric: dict[str, list[int]] = {}
    for names, (indices, rows) in blocks.items():
        where = np.asarray(indices)
        if NUMBER_TYPES.issuperset(map(type, itertools.chain.from_iterable(rows))):
            table = np.array(rows, dtype=np.float64)  # None → NaN; bool → 0 / 1
        else:
            table = np.full((len(rows), len(names)), np.nan)
            for i, row in enumerate(rows):
                for j, cell in enumerate(row):
                    if type(cell) in NUMBER_TYPES:
                        table[i, j] = np.nan if cell is None else float(cell)
                    else:
                        non_numeric.setdefault(names[j], []).append(int(steps[where[i]]))
        finite = np.isfinite(table)
        for j, metric in enumerate(names):
            if metric not in values:
                values[metric] = np.full(len(steps), np.nan)
            column = np.where(finite[:, j], table[:, j], np.nan)
            values[metric][where] = column
            bad = ~finite[:, j]
            if names[j] in non_numeric:  # a non-number is not a null
                bad &= ~np.isin(steps[where], non_numeric[names[j]])
            if bad.any():
                nulls.setdefault(metric, np.zeros(len(steps), bool))[where[bad]] = True
    return values, nulls, non_numeric


def read_run(paths: list[str], name: Optional[str] = None, folder: Optional[str] = None) -> Run:
    """Merge the metric files ``paths`` of one run (last write wins per step and metric)."""
    if not paths:
        raise ReportInputError(f"run {name!r}: no metrics files (verl's file logger *.jsonl) given")
    notes: list[str] = []
    read = []
    for path in paths:
        if not os.path.isfile(path):
            raise ReportInputError(f"{path}: no such metrics file")
        rows = _read_rows(path, notes)
        steps = [step for step, _ in rows]
        read.append((min(steps) if steps else math.inf, os.path.getmtime(path), path, rows))
    read.sort(key=lambda item: item[:3])  # attempts in the order they were written
    merged: dict[int, dict] = {}
    rewritten: dict[int, int] = {}
    files = []
    for _, _, path, rows in read:
        for step, data in rows:
            into = merged.setdefault(step, {})
            again = len(into.keys() & data.keys())
            if again:
                rewritten[step] = rewritten.get(step, 0) + again
            into.update(data)
        steps = [step for step, _ in rows]
        files.append(MetricFile(os.path.abspath(path), len(rows), min(steps, default=None), max(steps, default=None)))
    if not merged:
        raise ReportInputError(f"run {name or paths[0]!r}: no metric rows in {', '.join(paths)} "
                               "(expected verl's file logger JSONL: {\"step\": N, \"data\": {...}} per line)")
    steps = np.array(sorted(merged), dtype=np.int64)
    values, nulls, non_numeric = _columns(merged, steps)
    for metric in non_numeric:
        if np.isnan(values[metric]).all() and metric not in nulls:
            del values[metric]
    if rewritten:
        notes.append(f"{sum(rewritten.values())} value(s) at {len(rewritten)} step(s) were written more than once "
                     f"(a resumed or requeued attempt logged them again); the last write is shown: step "
                     f"{_examples(sorted(rewritten))}")
    for metric, mask in sorted(nulls.items()):
        bad_steps = steps[mask].tolist()
        notes.append(f"{metric}: null (NaN or ±inf at training time) at step {_examples(bad_steps)}; drawn as a gap")
    for metric, bad_steps in sorted(non_numeric.items()):
        notes.append(f"{metric}: not a number at step {_examples(sorted(bad_steps))}; not drawn")
    name = name or run_name(paths[0], folder)
    return Run(name=name, steps=steps, values=values, files=files, rewritten=rewritten, notes=notes,
               logged_null=nulls, folder=folder)


def run_name(path: str, folder: Optional[str]) -> str:
    """A folder's name, or a file's stem (``metrics.jsonl`` alone names nothing: its folder's name then);
    a folder ``seed<k>`` is named with its parent, ``<method>/seed<k>`` → ``<method>_seed<k>`` (one folder per seed)."""
    where = Path(folder) if folder else Path(path).parent
    if folder or Path(path).stem == "metrics":
        return f"{where.parent.name}_{where.name}" if re.fullmatch(r"seed\d+", where.name) else where.name
    return Path(path).stem


def metric_files(folder: str) -> list[str]:
    return sorted(str(p) for p in Path(folder).glob("*.jsonl") if p.is_file())


def is_run_folder(folder: str) -> bool:
    """A Hydra run folder (``hydra.run.dir``): its ``*.jsonl`` are one run's attempts."""
    return (Path(folder) / ".hydra" / "config.yaml").is_file()


def expand_inputs(inputs) -> list[tuple[Optional[str], list[str], Optional[str]]]:
    """``(name, metric files, run folder)`` for each run the inputs hold.

    - a metrics file is one run;
    - ``NAME=FOLDER``, a mapping ``{name: folder}``, or a Hydra run folder (``.hydra/config.yaml``)
      is one run whose ``*.jsonl`` are its attempts (merged: last write wins);
    - any other folder is a project: each ``*.jsonl`` in it is a run (verl's
      ``$VERL_FILE_LOGGER_ROOT/<project>/<experiment>.jsonl``) and each subfolder holding
      ``*.jsonl`` is a run folder (the demos' ``<out>/<run>/``);
    - ``NAME=PATH`` and a mapping's keys name the run; ``[files]`` as a mapping value are one run's attempts.
    """
    if isinstance(inputs, (str, os.PathLike)):
        inputs = [inputs]
    items: list[tuple[Optional[str], object]] = []
    if isinstance(inputs, dict):
        items = [(str(name), value) for name, value in inputs.items()]
    else:
        for item in inputs:
            text = os.fspath(item)
            name, sep, path = text.partition("=")
            items.append((name, path) if sep and name and not os.path.exists(text) else (None, text))
    runs: list[tuple[Optional[str], list[str], Optional[str]]] = []
    for name, value in items:
        if isinstance(value, (list, tuple)):
            runs.append((name, [os.fspath(p) for p in value], None))
            continue
        path = os.fspath(value)
        if os.path.isfile(path):
            runs.append((name, [path], None))
        elif not os.path.isdir(path):
            raise ReportInputError(f"{path}: no such file or folder")
        elif name or is_run_folder(path):
            runs.append((name, metric_files(path), path))
        else:
            found = [(None, [f], None) for f in metric_files(path)]
            found += [(None, metric_files(str(c)), str(c)) for c in sorted(Path(path).iterdir())
                      if c.is_dir() and metric_files(str(c))]
            if not found:
                raise ReportInputError(f"{path}: no metrics files (*.jsonl) in this folder or its subfolders; "
                                       "log with trainer.logger=[...,file] and give the file verl wrote")
            runs += found
    return runs


def add_series(run: Run, series: dict) -> None:
    """Add ``{metric: (steps, values)}`` to ``run`` (new steps extend its step axis)."""
    steps = np.union1d(run.steps, np.concatenate([s for s, _ in series.values()] or [run.steps[:0]]))
    if len(steps) != len(run.steps):
        where = np.searchsorted(steps, run.steps)
        for metric, values in run.values.items():
            grown = np.full(len(steps), np.nan)
            grown[where] = values
            run.values[metric] = grown
        for metric, mask in run.logged_null.items():
            grown_mask = np.zeros(len(steps), bool)
            grown_mask[where] = mask
            run.logged_null[metric] = grown_mask
        run.steps = steps
    for metric, (metric_steps, values) in series.items():
        column = np.full(len(steps), np.nan)
        column[np.searchsorted(steps, metric_steps)] = values
        run.values[metric] = column
