"""verl's metric file across restarts, and the one reader of it: a resumed run appends to the file and
marks where it resumed; a step logged more than once keeps its last write.

verl 0.9.1's ``FileLogger`` (``trainer.logger`` containing ``file``) writes one JSON line per log
call, ``{"step": N, "data": {...}}``, to ``$VERL_FILE_LOGGER_PATH`` or
``$VERL_FILE_LOGGER_ROOT/<project>/<experiment>.jsonl``, and opens it with mode ``"wb"``: a run
that resumes from a checkpoint (a requeue, a relaunch after a crash) truncates everything the
earlier attempts logged. ``resumed_file_logger`` makes the logger of a resumed run append instead,
after one marker line ``{"step": K, "data": {"gtpo/resumed_from_step": K}}`` (K the checkpoint's
step), so the steps after K, trained again, are known to repeat.

``read_metrics_file`` is the package's one reader of such files: the report (``gtpo-report``), the
demos, the real-LM study and the benchmarks read through it. Its resume rule (``RESUME_RULE``): a
step logged more than once keeps its last write. Files of one run are read in the order they were
written (first step logged, then modification time, then name); within one attempt the lines of
a step merge, each metric keeping its last value (verl logs validation as a line of its own); a
step trained again by a later attempt (after a ``RESUMED_FROM`` marker, or, in files written
without one, a training step logged again after a later one) keeps only that attempt's training
metrics, and its earlier validation metrics unless that attempt validated again. The repeated
steps, the values written again and the lines that are not metric lines (a write cut off when
a job was killed) are returned, never hidden.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
from dataclasses import dataclass, field
from typing import Iterator, Optional

try:  # verl's own JSON library (a verl dependency); json is the fallback
    import orjson

    _loads = orjson.loads
    _DecodeError: tuple = (orjson.JSONDecodeError, UnicodeDecodeError)
except ImportError:  # pragma: no cover - orjson comes with verl
    _loads = json.loads
    _DecodeError = (json.JSONDecodeError, UnicodeDecodeError)

RESUMED_FROM = "gtpo/resumed_from_step"  # the marker line's only key: the checkpoint's global step
RESUME_RULE = "a step logged more than once keeps its last write"
TRAINING_KEYS = ("training/global_step", "timing_s/step")
"""A line holding one of these is a training step's (verl logs them at every step); any other line at a step
(validation, a marker) is not."""


def file_logger_path(project_name: str, experiment_name: str) -> str:
    """The path verl's ``FileLogger`` writes for this run (its own rule: the env var, else root/project/experiment)."""
    path = os.getenv("VERL_FILE_LOGGER_PATH", None)
    if path is None:
        root = os.path.expanduser(os.getenv("VERL_FILE_LOGGER_ROOT", "."))
        path = os.path.join(root, project_name, f"{experiment_name}.jsonl")
    return path


@contextlib.contextmanager
def resumed_file_logger(resumed_from_step: int) -> Iterator[None]:
    """While open, a ``FileLogger`` verl creates appends (after the marker line) when ``resumed_from_step`` > 0."""
    if resumed_from_step <= 0:
        yield
        return
    from verl.utils import tracking

    original = tracking.FileLogger

    class AppendingFileLogger(original):
        def __init__(self, project_name: str, experiment_name: str):  # noqa: D401  (verl's signature)
            self.project_name, self.experiment_name = project_name, experiment_name
            self.filepath = file_logger_path(project_name, experiment_name)
            os.makedirs(os.path.dirname(os.path.abspath(self.filepath)), exist_ok=True)
            print(f"Appending to file logger at {os.path.abspath(self.filepath)} (resumed from step {resumed_from_step})")
            self.fp = open(self.filepath, "ab", buffering=0)
            self.log({RESUMED_FROM: resumed_from_step}, resumed_from_step)

    tracking.FileLogger = AppendingFileLogger  # looked up by name when Tracking builds its loggers
    try:
        yield
    finally:
        tracking.FileLogger = original


def is_training(data: dict) -> bool:
    """Whether a metric line (its ``data``) is a training step's (``TRAINING_KEYS``)."""
    return any(key in data for key in TRAINING_KEYS)


@dataclass
class MetricFile:
    """One file of a run as read: its path, metric lines and first and last step (None without a line)."""

    path: str
    rows: int
    first_step: Optional[int]
    last_step: Optional[int]


@dataclass
class MetricLines:
    """One file's lines: ``lines`` ``(line number, step, data)`` of every metric line and ``RESUMED_FROM``
    marker in file order, ``skipped`` the numbers of lines that are not ``{"step": N, "data": {...}}``."""

    path: str
    lines: list[tuple[int, int, dict]] = field(default_factory=list)
    skipped: list[int] = field(default_factory=list)

    @property
    def rows(self) -> list[tuple[int, dict]]:
        """``(step, data)`` of the metric lines (markers left out)."""
        return [(step, data) for _, step, data in self.lines if RESUMED_FROM not in data]

    @property
    def markers(self) -> list[tuple[int, int]]:
        """``(line number, checkpoint step)`` of each ``RESUMED_FROM`` line."""
        return [(number, data[RESUMED_FROM]) for number, _, data in self.lines if RESUMED_FROM in data]


def read_metric_lines(path: str) -> MetricLines:
    """The metric lines of one file; a line that is not one (a write cut off when the job stopped) is skipped
    and its number kept. NaN and ±inf reach verl's file as ``null`` (orjson); a writer that spells them out is
    read with ``json``."""
    out = MetricLines(path)
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
                    out.skipped.append(number)
                    continue
            step, data = (row.get("step"), row.get("data")) if isinstance(row, dict) else (None, None)
            if isinstance(step, bool) or not isinstance(step, int) or not isinstance(data, dict):
                out.skipped.append(number)
                continue
            out.lines.append((number, step, data))
    return out


@dataclass
class MetricsFile:
    """A run's metric file(s) read by the resume rule (module docstring).

    ``steps`` {step: metrics}; ``repeated_steps`` the steps trained more than once; ``rewritten``
    {step: number of metric values written again at it}; ``by_attempt`` each attempt's own {step: metrics};
    ``files`` the files in the order read; ``resumed_from`` ``(path, line, checkpoint step)`` of each marker;
    ``skipped_lines`` {path: numbers of lines that are not metric lines}.
    """

    steps: dict[int, dict] = field(default_factory=dict)
    repeated_steps: list[int] = field(default_factory=list)
    attempts: int = 1
    rewritten: dict[int, int] = field(default_factory=dict)
    by_attempt: list[dict[int, dict]] = field(default_factory=list)
    files: list[MetricFile] = field(default_factory=list)
    resumed_from: list[tuple[str, int, int]] = field(default_factory=list)
    skipped_lines: dict[str, list[int]] = field(default_factory=dict)

    def rows(self) -> list[dict]:
        """``[{"step": k, **metrics}, ...]`` in step order."""
        return [dict(step=k, **v) for k, v in sorted(self.steps.items())]


def read_metrics_file(*paths: str) -> MetricsFile:
    """The metrics of one run from its file(s) by ``RESUME_RULE`` (module docstring); a path that does not
    exist (yet) is skipped."""
    files = [read_metric_lines(path) for path in paths if os.path.exists(path)]
    # the attempts in the order they were written: first step logged, then modification time, then name
    files.sort(key=lambda f: (min((s for s, _ in f.rows), default=math.inf), os.path.getmtime(f.path), f.path))
    out = MetricsFile()
    attempts: list[dict[int, dict]] = [{}]
    written: dict[int, set] = {}
    last_training_step = None
    for read in files:
        steps = [s for s, _ in read.rows]
        out.files.append(MetricFile(os.path.abspath(read.path), len(read.rows), min(steps, default=None), max(steps, default=None)))
        out.resumed_from += [(read.path, number, step) for number, step in read.markers]
        if read.skipped:
            out.skipped_lines[read.path] = list(read.skipped)
        for _, step, data in read.lines:
            if RESUMED_FROM in data:
                attempts.append({})
                last_training_step = None
                continue
            training = is_training(data)
            if training and last_training_step is not None and step <= last_training_step:
                attempts.append({})  # a restart that left no marker
            if training:
                last_training_step = step
            again = len(written.setdefault(step, set()) & data.keys())
            if again:
                out.rewritten[step] = out.rewritten.get(step, 0) + again
            written[step].update(data)
            attempts[-1].setdefault(step, {}).update(data)
    out.by_attempt = [a for a in attempts if a]
    out.attempts = len(out.by_attempt) or 1
    seen_training: set[int] = set()
    for attempt in out.by_attempt:
        for step, data in attempt.items():
            training = is_training(data)
            if training and step in seen_training:
                out.repeated_steps.append(step)
                # the step was trained again: its earlier training metrics are superseded
                out.steps[step] = {k: v for k, v in out.steps[step].items() if k.startswith("val")}
            if training:
                seen_training.add(step)
            out.steps.setdefault(step, {}).update(data)
    out.repeated_steps = sorted(set(out.repeated_steps))
    return out
