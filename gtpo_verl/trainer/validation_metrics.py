"""Validation metrics the trainer mixin adds to verl's: unbiased pass@k and maj@n.

Config (``gtpo.validation_metrics``): ``enable`` (default true) and ``success_threshold``
(a sample succeeds when ``acc``, or ``reward`` for data sources without ``acc``, is above it).
Logged only when validation draws more than one sample per problem
(``actor_rollout_ref.rollout.val_kwargs.n > 1``).
"""

from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

import numpy as np

from gtpo_verl.algorithms.pass_at_k import majority_success, pass_at_k, pass_ks
from gtpo_verl.trainer.settings import GTPOSettings

PREFIX = "val-gtpo/"


def gtpo_validation_metrics(
    config,
    data_sources: Sequence[str],
    sample_uids: Sequence[str],
    reward_extra_infos_dict: Mapping[str, Sequence[Any]],
    expected_acc_counts: Optional[Mapping[tuple[str, str], int]] = None,
    **_: Any,
) -> dict[str, float]:
    """``val-gtpo/<data_source>/pass@k`` and ``maj@n`` for one validation pass (empty when disabled)."""
    knobs = GTPOSettings.from_config(config).validation_metrics
    if not knobs.enable:
        return {}
    return validation_metrics(
        data_sources,
        sample_uids,
        reward_extra_infos_dict,
        expected_counts=expected_acc_counts,
        success_threshold=float(knobs.success_threshold),
    )


def validation_metrics(
    data_sources: Sequence[str],
    sample_uids: Sequence[str],
    infos: Mapping[str, Sequence[Any]],
    expected_counts: Optional[Mapping[tuple[str, str], int]] = None,
    success_threshold: float = 0.0,
) -> dict[str, float]:
    """``val-gtpo/<data_source>/pass@k`` (k in ``pass_ks(n)``) and ``maj@n`` for every data source.

    The arguments are those verl's ``_val_metrics_update`` receives. A sample succeeds when verl's
    core validation variable, ``acc`` if the data source reports it, else ``reward``, is above
    ``success_threshold`` (0: acc ∈ {0, 1} and ±1 rewards map to fail/success). As in verl,
    ``expected_counts[(data_source, uid)]`` sessions are expected for sources with ``acc``;
    missing ones count as failures. Data sources with one sample per problem are skipped.
    """
    sources = np.asarray([str(s) for s in data_sources], dtype=object)
    uids = np.asarray([str(u) for u in sample_uids], dtype=object)
    metrics: dict[str, float] = {}
    for source in dict.fromkeys(sources.tolist()):
        rows = np.flatnonzero(sources == source)
        acc = infos.get("acc")
        has_acc = acc is not None and any(acc[i] is not None for i in rows)
        column = infos["acc" if has_acc else "reward"]
        scored = np.asarray([column[i] is not None for i in rows])
        rows = rows[scored]
        if rows.size == 0:
            continue
        values = np.asarray([float(column[i]) for i in rows], dtype=np.float64)
        problem_uids, problem = np.unique(uids[rows], return_inverse=True)
        num_problems = problem_uids.size
        successes = np.bincount(problem, weights=values > success_threshold, minlength=num_problems).astype(np.int64)
        samples = np.bincount(problem, minlength=num_problems)
        if has_acc and expected_counts:  # verl's rule: sessions that never reached the reward count as failures
            expected = np.asarray([expected_counts.get((source, uid), 0) for uid in problem_uids], dtype=np.int64)
            samples = np.maximum(samples, expected)
        n = int(samples.min())
        if n <= 1:
            continue
        prefix = f"{PREFIX}{source}/"
        for k in pass_ks(n):
            metrics[f"{prefix}pass@{k}"] = pass_at_k(samples, successes, k)
        preds = infos.get("pred")
        if preds is not None and all(preds[i] is not None for i in rows):
            maj_values = majority_success(problem, [preds[i] for i in rows], values > success_threshold, num_problems)
            metrics[f"{prefix}maj@{n}"] = float(np.mean(maj_values))
    return metrics
