"""Unbiased pass@k and maj@n recomputed from the raw validation samples verl dumps.

With ``trainer.validation_data_dir=DIR`` verl 0.9.1 writes ``DIR/<step>.jsonl`` at every
validation, one line per generated output (``trainer/ppo/v1/trainer_base.py``,
``_write_generations``): ``input``, ``output``, ``gts``, ``score``, ``step``, every reward extra
info (``reward``, and ``acc`` / ``pred`` when the reward function returns them) and ``uid`` =
``{prompt uid}_{session}_{index}``. A session's last index is its final output (multi-turn
agent loops write one line per turn); the prompt uid is the problem. Dumps from verl's legacy
trainer have no ``uid``: the prompt text is the problem then.

The numbers come from the trainer's own definition
(``gtpo_verl.trainer.validation_metrics.validation_metrics``, on
``gtpo_verl.algorithms.pass_at_k``): a sample succeeds when ``acc`` (else ``reward``) is above
``gtpo.validation_metrics.success_threshold``, so ``samples/<src>/pass@k`` equals the logged
``val-gtpo/<src>/pass@k`` of the same validation whenever the dump is complete.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Optional

import numpy as np

from gtpo_verl.trainer.metrics_file import _DecodeError, _loads
from gtpo_verl.trainer.validation_metrics import PREFIX as LOGGED_PREFIX
from gtpo_verl.trainer.validation_metrics import validation_metrics

PREFIX = "samples/"
STEP_FILE = re.compile(r"^(\d+)\.jsonl$")
# verl's logged validation names carry the data source: val-core/<src>/acc/mean@n, val-gtpo/<src>/pass@k
LOGGED_SOURCE = re.compile(r"^val-(?:core|aux|gtpo)/(?P<src>.+?)/(?:(?:acc|reward|score)/mean@\d+|pass@\d+)$")


def dump_steps(folder: str) -> dict[int, Path]:
    """``{step: file}`` of verl's validation dumps in ``folder`` (``<step>.jsonl``)."""
    found = {}
    for path in Path(folder).iterdir():
        match = STEP_FILE.match(path.name)
        if match and path.is_file():
            found[int(match.group(1))] = path
    return found


def logged_sources(metric_names) -> list[str]:
    """The validation data sources a run's logged metric names mention, in first-seen order."""
    return list(dict.fromkeys(m["src"] for m in map(LOGGED_SOURCE.match, metric_names) if m))


def _final_outputs(rows: list[dict]) -> list[dict]:
    """One row per session: the highest ``index`` of each ``{uid}_{session}`` (the final turn)."""
    final: dict[str, tuple[int, dict]] = {}
    for position, row in enumerate(rows):
        uid = row.get("uid")
        parts = str(uid).rsplit("_", 2) if uid is not None else []
        if len(parts) == 3 and parts[1].isdigit() and parts[2].isdigit():
            session, index, problem = f"{parts[0]}_{parts[1]}", int(parts[2]), parts[0]
        else:  # legacy dumps and plain uids: every line is its own session
            session, index = f"line{position}", 0
            problem = str(uid) if uid is not None else str(row.get("input"))
        if session not in final or index > final[session][0]:
            final[session] = (index, dict(row, _problem=problem))
    return [row for _, row in final.values()]


def step_metrics(path: Path, default_source: str, success_threshold: float, notes: list[str]) -> dict[str, float]:
    """``samples/<src>/pass@k`` (k in ``pass_ks(n)``) and ``maj@n`` for one dump file."""
    rows, bad = [], 0
    with open(path, "rb") as handle:
        for line in handle:
            if not line.strip():
                continue
            try:
                row = _loads(line)
            except _DecodeError:
                bad += 1
                continue
            if isinstance(row, dict):
                rows.append(row)
            else:
                bad += 1
    if bad:
        notes.append(f"{path}: {bad} line(s) skipped, not a JSON object")
    rows = _final_outputs(rows)
    if not rows:
        return {}
    infos = {}
    for key in ("acc", "reward", "pred"):
        column = [row.get(key) for row in rows]
        if any(value is not None for value in column):
            infos[key] = column
    if "reward" not in infos:  # verl stores the summed reward as `score` and as the extra info `reward`
        infos["reward"] = [row.get("score") for row in rows]
    sources = [str(row.get("data_source", default_source)) for row in rows]
    computed = validation_metrics(sources, [row["_problem"] for row in rows], infos,
                                  success_threshold=success_threshold)
    return {PREFIX + name[len(LOGGED_PREFIX):]: value for name, value in computed.items()}


def recompute(folder: str, metric_names, success_threshold: float = 0.0,
              notes: Optional[list[str]] = None) -> dict[int, dict[str, float]]:
    """``{step: {samples/<src>/pass@k: value, ...}}`` for every dump in ``folder``.

    Dumps without a ``data_source`` field take the one data source the run logged (its
    ``val-core``/``val-gtpo`` names), or ``all`` when it logged none or several.
    """
    notes = notes if notes is not None else []
    sources = logged_sources(metric_names)
    default_source = sources[0] if len(sources) == 1 else "all"
    return {step: step_metrics(path, default_source, success_threshold, notes)
            for step, path in sorted(dump_steps(folder).items())}


def as_series(per_step: dict[int, dict[str, float]]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """``{metric: (steps, values)}`` from ``recompute``'s per-step dicts."""
    series: dict[str, tuple[list, list]] = {}
    for step, metrics in per_step.items():
        for name, value in metrics.items():
            steps, values = series.setdefault(name, ([], []))
            steps.append(step)
            values.append(value)
    return {name: (np.asarray(s, dtype=np.int64), np.asarray(v, dtype=np.float64)) for name, (s, v) in series.items()}
