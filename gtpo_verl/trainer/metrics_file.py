"""verl's metric file across restarts: a resumed run appends to it and marks where it resumed; readers
keep the last attempt of every step.

verl 0.9.1's ``FileLogger`` (``trainer.logger`` containing ``file``) writes one JSON line per log
call, ``{"step": N, "data": {...}}``, to ``$VERL_FILE_LOGGER_PATH`` or
``$VERL_FILE_LOGGER_ROOT/<project>/<experiment>.jsonl``, and opens it with mode ``"wb"``: a run
that resumes from a checkpoint (a requeue, a relaunch after a crash) truncates everything the
earlier attempts logged. ``resumed_file_logger`` makes the logger of a resumed run append instead,
after one marker line ``{"step": K, "data": {"gtpo/resumed_from_step": K}}`` (K the checkpoint's
step), so the steps after K, trained again, are known to repeat.

``read_metrics_file`` is how every reader of the package (the demos, the study, the report) reads
such a file: lines of one step within one attempt merge (verl logs validation separately), a step
trained again in a later attempt replaces the earlier attempt's lines of that step, and the
repeated steps are returned so a page can say so.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass, field
from typing import Iterator

RESUMED_FROM = "gtpo/resumed_from_step"  # the marker line's only key: the checkpoint's global step


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


@dataclass
class MetricsFile:
    """A metric file read with restarts resolved: ``steps`` {step: metrics}, the steps logged more than once."""

    steps: dict[int, dict] = field(default_factory=dict)
    repeated_steps: list[int] = field(default_factory=list)
    attempts: int = 1

    def rows(self) -> list[dict]:
        """``[{"step": k, **metrics}, ...]`` in step order."""
        return [dict(step=k, **v) for k, v in sorted(self.steps.items())]


def read_metrics_file(*paths: str) -> MetricsFile:
    """The metrics of one run from its file(s), in the order written; a later attempt of a step wins.

    A new attempt starts at a ``RESUMED_FROM`` marker, or (files written without it) where a training
    step is logged again after a later one. Within an attempt, lines of one step merge.
    """
    attempts: list[dict[int, dict]] = [{}]
    last_training_step = None
    for path in paths:
        if not os.path.exists(path):
            continue
        with open(path) as f:
            for number, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                    step, data = int(row["step"]), dict(row["data"])
                except (ValueError, KeyError, TypeError) as err:
                    raise ValueError(f"{path}:{number}: not a verl metric line ({type(err).__name__}: {err})") from None
                if RESUMED_FROM in data:
                    attempts.append({})
                    last_training_step = None
                    continue
                training = "training/global_step" in data or "timing_s/step" in data
                if training and last_training_step is not None and step <= last_training_step:
                    attempts.append({})  # a restart that left no marker
                if training:
                    last_training_step = step
                attempts[-1].setdefault(step, {}).update(data)
    out = MetricsFile(attempts=sum(1 for a in attempts if a) or 1)
    seen_training: set[int] = set()
    for attempt in attempts:
        for step, data in attempt.items():
            training = "training/global_step" in data or "timing_s/step" in data
            if training and step in seen_training:
                out.repeated_steps.append(step)
                # the step was trained again: its earlier training metrics are superseded
                out.steps[step] = {k: v for k, v in out.steps[step].items() if k.startswith("val")}
            if training:
                seen_training.add(step)
            out.steps.setdefault(step, {}).update(data)
    out.repeated_steps = sorted(set(out.repeated_steps))
    return out
