"""Validation metrics the trainer mixin adds to verl's: unbiased pass@k and maj@n.

Config (``gtpo.validation_metrics``): ``enable`` (default true) and ``success_threshold``
(a sample succeeds when ``acc``, or ``reward`` for data sources without ``acc``, is above it).
Logged only when validation draws more than one sample per problem
(``actor_rollout_ref.rollout.val_kwargs.n > 1``).
"""

from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

from gtpo_verl.integration.config import GTPOSettings
from gtpo_verl.metrics import validation_metrics


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
