"""The advantage step in named pieces, shared by the trainer mixin (``trainer/mixin.py``) and the lab
(``lab/update.py``): the same settings, the same estimator call, the same diagnostics and transforms.

1. ``AdvantageSettings.from_config``: ``gtpo.*``, the estimator's ``algorithm.<name>`` block and
   ``algorithm.adv_transforms``, parsed once at start (trainer init, lab run setup), never per step;
2. reading the fields: the caller's own (TransferQueue in the trainer, tensors at hand in the lab),
   into ``AdvantageFields``, the ``(B, T)`` inputs the estimator and transforms declared;
3. ``run_estimator``: the inputs bound as data (``plugin/context.py``) around the call that reaches
   verl's registry (verl's ``_compute_advantage`` in the trainer, ``get_adv_estimator_fn`` in the lab);
   returns the estimator's ``EstimatorCall`` (block, batch, result);
4. ``transform_advantages``: ``algorithm.adv_transforms``, in order;
5. ``advantage_diagnostics``: the ``gtpo/*`` metrics of the call, its ``gtpo/health/*`` (how much the
   entropy moves its advantage) and the all-equal-groups health input.

The entropy watch, ⟨H⟩_ini and writing back stay with the trainer (they are its state and its store).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional, TypeVar

import numpy as np
import torch

from gtpo_verl.plugin.config import select
from gtpo_verl.plugin.context import bind_estimator_inputs
from gtpo_verl.plugin.estimators import ESTIMATORS, Estimator, EstimatorCall
from gtpo_verl.plugin.extensions import (
    CALLED,
    INPUT_FIELDS,
    AdvTransform,
    advantage_input_fields,
    apply_adv_transforms,
    estimator_inputs,
    parse_adv_transforms,
)
from gtpo_verl.plugin.finite import check_finite
from gtpo_verl.trainer.diagnostics import estimator_metrics
from gtpo_verl.trainer.health import ALL_EQUAL_GROUPS_FRAC, all_equal_groups_frac, method_health
from gtpo_verl.trainer.settings import GTPOSettings

Out = TypeVar("Out")


@dataclass(frozen=True)
class AdvantageSettings:
    """Everything the advantage step reads from config, parsed once (``from_config``)."""

    estimator: str  # algorithm.adv_estimator
    row: Optional[Estimator]  # its row of the estimator table, None for verl's own and users' estimators
    block: Any  # the row's algorithm.<estimator> block, None without a row
    transforms: tuple[tuple[AdvTransform, Any], ...]  # algorithm.adv_transforms, parsed
    inputs: tuple[str, ...]  # estimator keywords the estimator and the transforms declared
    gtpo: GTPOSettings  # the operational gtpo.* settings
    kl_in_reward: bool = False  # algorithm.use_kl_in_reward: the token rewards are the scores minus a KL penalty

    @classmethod
    def from_config(cls, config: Any) -> "AdvantageSettings":
        estimator = str(select(config, "algorithm.adv_estimator"))
        row = ESTIMATORS.get(estimator)
        transforms = tuple(parse_adv_transforms(select(config, "algorithm.adv_transforms")))
        return cls(estimator=estimator, row=row, block=row.config.from_config(config) if row is not None else None,
                   transforms=transforms, inputs=advantage_input_fields(estimator, list(transforms)),
                   gtpo=GTPOSettings.from_config(config),
                   kl_in_reward=bool(select(config, "algorithm.use_kl_in_reward", False)))

    @property
    def diagnostics(self) -> bool:
        return self.gtpo.diagnostics

    @property
    def declared(self) -> bool:
        """The estimator registered through ``register_entropy_aware_estimator`` (it reports that verl called it)."""
        return estimator_inputs(self.estimator) is not None

    @property
    def health_from_call(self) -> bool:
        """The all-equal-groups check can read the table estimator's own scores and groups (no second read of
        ``rm_scores`` and ``uid``): true for the table's estimators when the token rewards are the scores
        (no KL penalty in the reward)."""
        return self.row is not None and not self.kl_in_reward

    @property
    def measures_initial_entropy(self) -> bool:
        return self.row is not None and self.row.measures_initial_entropy(self.block)

    def fields(self) -> list[str]:
        """The TransferQueue fields to read: the declared inputs, plus ``entropy`` for the diagnostics."""
        fields = [INPUT_FIELDS[name] for name in self.inputs]
        if self.diagnostics and "entropy" not in fields:
            fields.append("entropy")
        return fields


@dataclass(frozen=True)
class AdvantageFields:
    """One batch's inputs to the advantage step, ``(B, T)`` right-padded and aligned with ``mask``."""

    inputs: dict[str, torch.Tensor]  # estimator keyword → tensor (entropys as float32)
    mask: torch.Tensor  # (B, T) float32 response mask
    real: torch.Tensor  # (B,) bool: False on verl's synthetic padding rows
    entropy: Optional[torch.Tensor] = None  # (B, T) float32 old-policy entropy (diagnostics, ⟨H⟩_ini)
    scores: Optional[torch.Tensor] = None  # (B,) sequence scores (diagnostics)
    uids: Optional[np.ndarray] = None  # (B,) object uids (diagnostics)


def run_estimator(settings: AdvantageSettings, call: Callable[[], Out], inputs: dict[str, torch.Tensor],
                  initial_entropy: Optional[float]) -> tuple[Out, Optional[EstimatorCall]]:
    """``call()`` (which reaches verl's registry) with the inputs bound; its value and the table estimator's call.

    Raises when a declared estimator was not the one verl called (another plugin handling the name).
    """
    with bind_estimator_inputs(initial_entropy=initial_entropy, **inputs) as outputs:
        value = call()
    if settings.declared and outputs.get(CALLED) != settings.estimator:
        raise RuntimeError(
            f"verl did not call the {settings.estimator!r} estimator through its registry; is another plugin "
            "overriding algorithm.adv_estimator handling?"
        )
    return value, outputs.get(settings.estimator)


def transform_advantages(settings: AdvantageSettings, advantages: torch.Tensor, response_mask: torch.Tensor,
                         inputs: dict[str, torch.Tensor], metrics: dict, uids=None) -> tuple[torch.Tensor, torch.Tensor]:
    """``algorithm.adv_transforms`` in order → ``(advantages, response_mask)``; metrics logged with diagnostics on."""
    return apply_adv_transforms(list(settings.transforms), advantages, response_mask, inputs,
                                metrics if settings.diagnostics else None, uids=uids)


def advantage_diagnostics(settings: AdvantageSettings, call: Optional[EstimatorCall], fields: AdvantageFields,
                          metrics: dict) -> None:
    """The estimator's ``gtpo/*`` metrics (real rows only) and the all-equal-groups fraction, into ``metrics``.

    The fraction reads the scores and uids the caller fetched, or else (``settings.health_from_call``)
    the outcome scores and groups of the table estimator's own call, already checked finite there.
    """
    if call is not None:
        metrics.update(estimator_metrics(call, fields.mask, fields.real))
        metrics.update(method_health(call, fields.mask, fields.real))
    if call is not None and settings.health_from_call:
        real = fields.real.to(call.batch.group_ids.device)
        metrics[ALL_EQUAL_GROUPS_FRAC] = all_equal_groups_frac(call.batch.sequence_scores[real], call.batch.group_ids[real])
    elif fields.scores is not None and fields.uids is not None:
        scores, uids = fields.scores[fields.real], fields.uids[fields.real.numpy()]
        check_finite(scores, "score", f"algorithm.adv_estimator={settings.estimator}", uids)
        metrics[ALL_EQUAL_GROUPS_FRAC] = all_equal_groups_frac(scores, uids)
