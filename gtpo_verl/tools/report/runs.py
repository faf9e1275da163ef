"""A run as the report sees it: verl's file-logger JSONL merged into one value per (step, metric).

verl 0.9.1's ``FileLogger`` (``trainer.logger`` with ``file``; ``verl/utils/tracking.py``) writes
one line per ``Tracking.log`` call, ``{"step": N, "data": {metric: value}}``, to
``$VERL_FILE_LOGGER_PATH``, else ``$VERL_FILE_LOGGER_ROOT/<project>/<experiment>.jsonl``. A run is
one or more such files (a requeued run's attempts as separate files, or one file a resumed run
appended to), read by the package's one reader, ``gtpo_verl.trainer.metrics_file.read_metrics_file``,
and its resume rule: a step logged more than once keeps its last write. The steps logged again (a
resumed run trains the steps after its checkpoint again, and ``val_before_train`` validates the
resume step again), the resume markers and the lines that are not metric lines are listed on the
page, never hidden. NaN and ±inf reach the file as ``null`` (orjson).
"""

from __future__ import annotations

import itertools
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import numpy as np

from gtpo_verl.trainer.metrics_file import MetricFile, MetricsFile, read_metrics_file

# "<method>_seed<k>" (the demos' run names) → group "<method>", seed k
SEED_SUFFIX = re.compile(r"^(?P<group>.+?)[_\-. ]?seed[_\-]?(?P<seed>\d+)$", re.IGNORECASE)
# what orjson / json give for a number, a boolean (0 / 1) and null
NUMBER_TYPES = frozenset({int, float, bool, type(None)})
# how many examples a note lists before it says "and N more"
NOTE_EXAMPLES = 5


class ReportInputError(ValueError):
    """Input the report cannot use; the message is one line that names the input and the fix."""


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


def _reading_notes(log: MetricsFile) -> list[str]:
    """What the one reader found in the files, as the page's notes: resume markers and skipped lines."""
    notes = [f"{path}: line {number}: the run resumed from its checkpoint of step {step}; the steps after it were trained again"
             for path, number, step in log.resumed_from]
    notes += [f"{path}: {len(bad)} line(s) skipped, not a {{\"step\": N, \"data\": {{...}}}} JSON object "
              f"(a write cut off when the job stopped?): line {_examples(bad)}" for path, bad in log.skipped_lines.items()]
    return notes


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
    """The metric files ``paths`` of one run, read by ``read_metrics_file`` (a step logged more than once keeps
    its last write)."""
    if not paths:
        raise ReportInputError(f"run {name!r}: no metrics files (verl's file logger *.jsonl) given")
    for path in paths:
        if not os.path.isfile(path):
            raise ReportInputError(f"{path}: no such metrics file")
    log = read_metrics_file(*paths)
    notes = _reading_notes(log)
    merged, rewritten, files = log.steps, log.rewritten, log.files
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
      is one run whose ``*.jsonl`` are its attempts (a step logged more than once keeps its last write);
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
