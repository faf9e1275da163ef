"""Claim ids, unique across the project, and the endpoint windows of each place where claims are scored.

An id starts with where its claim is scored, then the paper (``A``, ``B``), then what the claim tests:

- ``lab-…``: the lab's primary claims (``gtpo_verl.lab.verdicts.PRIMARY_CLAIMS``; ``python -m gtpo_verl.lab``,
  docs/lab.md);
- ``lm-…``: the real-LM study's Holm families (``FAMILIES`` in ``examples/cpu_demo/lm_study.py``,
  docs/real_lm.md);
- ``pipeline-…``: the δ re-run through the real pipeline (``docs/lab/pipeline/``, docs/lab.md; its
  launcher is not part of this repository).

One id is one claim: one comparison (method − baseline), one endpoint, one direction.

Endpoint windows, each defined once per context:

- lab: ``verdicts.ENDPOINT_STEPS`` (the last 50 training steps), ``verdicts.ENDPOINT_EVALS`` (the last 4
  validations) and ``verdicts.PEAK_WINDOW`` (the 10-step moving means of the peak entropy ratio);
- lm: ``lm_study.FIRST_HALF`` and ``lm_study.SECOND_HALF`` (steps 1-3 and 4-6 of its 6);
- pipeline: ``PIPELINE_EDGE_FRACTION`` (the first and the last 20 % of its steps), below.

Committed result files keep the ids they were written with: ``docs/lab/results.json`` and
``docs/lab/table.md`` (the lab's default study, scored on the rows it was registered with) and
``docs/lab/pipeline/`` (``results.json``, ``table.md``, ``verdicts.md``). There one written id,
``A-no-collapse``, is two claims (the ``collapse`` end-state indicator in the first, the entropy change
in the second), so ``COMMITTED_CLAIM_IDS`` maps each written id together with its endpoint to its
project id, and ``read_committed_claims`` reads a file's rows under their project ids.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

PREFIXES = ("lab-", "lm-", "pipeline-")
COMMITTED_CLAIM_IDS = {
    # docs/lab/results.json and docs/lab/table.md: the default study's registered primary rows
    ("B-entropy-token", "entropy"): "lab-B-entropy-token",
    ("B-entropy-seq", "entropy"): "lab-B-entropy-seq",
    ("B-length-token", "length"): "lab-B-length-token",
    ("B-length-seq", "length"): "lab-B-length-seq",
    ("B-pass16-token", "pass@16"): "lab-B-pass16-token",
    ("B-pass16-seq", "pass@16"): "lab-B-pass16-seq",
    ("A-no-collapse", "collapse"): "lab-A-collapse-end-state",
    ("A-steadier", "drawdown"): "lab-A-steady-whole-run",
    ("A-no-collapse-scaled", "collapse"): "lab-A-collapse-end-state-scaled",
    ("A-steadier-scaled", "drawdown"): "lab-A-steady-whole-run-scaled",
    # docs/lab/pipeline/: GTPO_TRAJ (official preset) against GRPO
    ("A-no-collapse", "token_mean_entropy change"): "pipeline-A-entropy-change",
    ("A-steady-reward", "reward step-to-step std"): "pipeline-A-steady-reward",
    ("A-steady-pass1", "pass@1 drawdown"): "pipeline-A-steady-pass1",
    ("A-pass1", "final pass@1"): "pipeline-A-final-pass1",
    ("A-reward", "reward last 20%"): "pipeline-A-reward-last-fifth",
}
"""(id as written, endpoint) → the project's id, for the rows of the committed result files."""

PIPELINE_EDGE_FRACTION = 0.2
"""The pipeline re-run's endpoint window: the first and the last 20 % of a run's training steps (4 of its 20)."""


def project_claim_id(written_id: str, endpoint: str) -> str:
    """The project's id of a claim row written as ``written_id`` on ``endpoint``: an id that already has a
    ``PREFIXES`` prefix is kept; a committed file's id is mapped by ``COMMITTED_CLAIM_IDS``."""
    if written_id.startswith(PREFIXES):
        return written_id
    try:
        return COMMITTED_CLAIM_IDS[(written_id, endpoint)]
    except KeyError:
        known = sorted(f"{i} ({e})" for i, e in COMMITTED_CLAIM_IDS)
        raise ValueError(f"claim {written_id!r} on endpoint {endpoint!r} has no project id: an id starts with one of "
                         f"{list(PREFIXES)}, or is a committed file's, one of {known}") from None


def read_committed_claims(path: str) -> list[dict[str, Any]]:
    """The claim rows of a results file (the lab's ``results.json``: ``verdicts.primary``; the pipeline
    re-run's: ``verdicts.claims``), each under its project id (``id``) with the id it was written with
    (``written_id``)."""
    with open(path) as handle:
        verdicts = json.load(handle)["verdicts"]
    rows = verdicts["primary"] if "primary" in verdicts else verdicts["claims"]
    return [dict(row, id=project_claim_id(row["id"], row["endpoint"]), written_id=row["id"]) for row in rows]


def edge_steps(steps: int) -> int:
    """The steps in one ``PIPELINE_EDGE_FRACTION`` window of a run of ``steps`` steps (at least 1)."""
    return max(1, round(PIPELINE_EDGE_FRACTION * steps))


def pipeline_window_endpoints(train: dict) -> dict[str, float]:
    """The pipeline re-run's windowed endpoints of one run from its per-step curves (its ``results.json``
    ``runs[method][seed]["train"]``): ``token_mean_entropy change``, the mean over the last window minus
    the mean over the first, and ``reward last 20%``, the mean reward over the last window."""
    entropy = np.asarray(train["token_mean_entropy"], dtype=np.float64)
    reward = np.asarray(train["reward"], dtype=np.float64)
    window = edge_steps(len(reward))
    return {"token_mean_entropy change": float(entropy[-window:].mean() - entropy[:window].mean()),
            "reward last 20%": float(reward[-window:].mean())}
