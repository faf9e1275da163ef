"""Start-up validation: runs in the driver before Ray or any worker starts.

Errors are incompatible settings (one ``ValueError`` naming the key and the fix); warnings
are settings that run but depart from what the papers use. ``validate_gtpo_config`` may
also fill one derived value (the differentiable entropy regulariser's ``entropy_coeff``).
"""

from __future__ import annotations

import logging
import warnings
from typing import Any

from gtpo_verl.plugin.config import select
from gtpo_verl.plugin.estimators import ALGORITHM_BLOCKS, ESTIMATORS
from gtpo_verl.plugin.losses import LOSS_AGG_MODE, LOSS_NAME
from gtpo_verl.trainer.settings import GTPOSettings

logger = logging.getLogger(__name__)


class GTPOConfigWarning(UserWarning):
    """A setting that runs but departs from the paper's setup."""


def _warn(message: str) -> None:
    logger.warning(message)
    warnings.warn(message, GTPOConfigWarning, stacklevel=3)


def validate_gtpo_config(config: Any) -> list[str]:
    """Check a composed trainer config; raise on incompatible settings, return the warnings given."""
    given: list[str] = []

    def warn(message: str) -> None:
        given.append(message)
        _warn(message)

    estimator = str(select(config, "algorithm.adv_estimator", ""))
    loss_mode = str(select(config, "actor_rollout_ref.actor.policy_loss.loss_mode", "vanilla"))
    agg = str(select(config, "actor_rollout_ref.actor.loss_agg_mode", "token-mean"))
    row = ESTIMATORS.get(estimator)

    if not bool(select(config, "trainer.use_v1", True)):
        raise ValueError(
            "`trainer.use_v1=false` (verl's deprecated V0 trainer) is not supported by gtpo_verl: its fit() pops the "
            "old-policy entropy our estimators need and has no DAPO dynamic sampling. Set trainer.use_v1=true."
        )
    for block_cls in (*ALGORITHM_BLOCKS, GTPOSettings):  # every block must parse, used or not
        block_cls.from_config(config)

    transforms = validate_adv_transforms(config)
    declared = _declared_estimator_inputs(estimator) or ()
    reads_old_pass = row is not None or "entropys" in declared or "old_log_probs" in declared
    needs_entropy = [f"algorithm.adv_estimator={estimator}"] if reads_old_pass else []
    needs_entropy += [
        f"algorithm.adv_transforms[{i}].name={t.name}" for i, (t, _knobs) in enumerate(transforms) if "entropys" in t.inputs
    ]
    if needs_entropy and bool(select(config, "algorithm.rollout_correction.bypass_mode", False)):
        raise ValueError(
            f"`{needs_entropy[0]}` needs old-policy entropy / log-probs, which verl does not compute when "
            "`algorithm.rollout_correction.bypass_mode=true` (the old-log-prob pass is skipped). "
            "Set algorithm.rollout_correction.bypass_mode=false."
        )
    for i, (t, _knobs) in enumerate(transforms):
        if t.name == "high_entropy_tokens" and agg != "token-mean":
            warn(
                f"`algorithm.adv_transforms[{i}].name=high_entropy_tokens` with "
                f"`actor_rollout_ref.actor.loss_agg_mode={agg}`: the paper's objective (and its code) is a token "
                "mean over the batch (docs/spec.md C.1); set actor_rollout_ref.actor.loss_agg_mode=token-mean."
            )
    if row is not None and row.policy_loss is not None and loss_mode != row.policy_loss:
        warn(
            f"`algorithm.adv_estimator={estimator}` with `actor_rollout_ref.actor.policy_loss.loss_mode={loss_mode}`: "
            f"{estimator}'s advantages are written for its paper's {row.policy_loss} policy loss; "
            f"set policy_loss.loss_mode={row.policy_loss}."
        )
    if loss_mode == LOSS_NAME and (row is None or row.policy_loss != LOSS_NAME):
        warn(
            f"`policy_loss.loss_mode={LOSS_NAME}` with `algorithm.adv_estimator={estimator}`: the loss treats each "
            "response's mean token advantage as its sequence advantage; the paper pairs it with the estimator of "
            f"the same name (adv_estimator={LOSS_NAME})."
        )
    if row is not None:
        row.check(config, row.config.from_config(config), warn)

    if row is not None or loss_mode == LOSS_NAME:
        written_for = row.loss_agg_mode if row is not None else LOSS_AGG_MODE
        owner = estimator if row is not None else f"the {LOSS_NAME} loss"
        if agg != written_for:
            warn(
                f"`actor_rollout_ref.actor.loss_agg_mode={agg}` differs from what {owner} is written for; "
                f"the paper's form is loss_agg_mode={written_for}."
            )
    return given


def validate_adv_transforms(config: Any) -> list:
    """Parse ``algorithm.adv_transforms`` against the registered transforms (one clear error per problem)."""
    entries = select(config, "algorithm.adv_transforms")
    if entries is None or len(entries) == 0:
        return []
    import verl  # noqa: F401  (loads every verl.plugins entry point: users' transforms register there)

    import gtpo_verl.plugin.registry  # noqa: F401  (the built-in transforms)
    from gtpo_verl.plugin.extensions import parse_adv_transforms

    return parse_adv_transforms(entries)


def _declared_estimator_inputs(estimator: str):
    from gtpo_verl.plugin.extensions import estimator_inputs

    return estimator_inputs(estimator)
