"""Start-up validation: runs in the driver before Ray or any worker starts.

Errors are incompatible settings (one ``ValueError`` naming the key and the fix); warnings
are settings that run but depart from what the papers use. ``validate_gtpo_config`` may
also fill one derived value (the differentiable entropy regulariser's ``entropy_coeff``).
"""

from __future__ import annotations

import logging
import warnings
from typing import Any

from gtpo_verl.integration.config import CONFIG_BLOCKS, ESTIMATOR_CONFIGS, GTPOTokenConfig, GTPOTrajConfig, select

logger = logging.getLogger(__name__)

# Aggregation each method is written for (docs/spec.md).
RECOMMENDED_LOSS_AGG = {
    "gtpo_token": "token-mean",  # Eq. (S22): DAPO's token-level surrogate
    "grpo_s": "seq-mean-token-mean",  # Eq. (S34): (1/G) Σ_i over sequences
    "gtpo_traj": "seq-mean-token-mean",  # official README objective: (1/G) Σ_i 1/|o_i| Σ_t (spec A.6)
}
# Fewer first-batch responses than this make a noisy ⟨H⟩_ini for Paper A's gate (docs/spec.md A.4).
MIN_INITIAL_ENTROPY_RESPONSES = 64


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
    ours = estimator in ESTIMATOR_CONFIGS

    if not bool(select(config, "trainer.use_v1", True)):
        raise ValueError(
            "`trainer.use_v1=false` (verl's deprecated V0 trainer) is not supported by gtpo_verl: its fit() pops the "
            "old-policy entropy our estimators need and has no DAPO dynamic sampling. Set trainer.use_v1=true."
        )
    for block_cls in CONFIG_BLOCKS:  # every block must parse, used or not
        block_cls.from_config(config)

    transforms = validate_adv_transforms(config)
    needs_entropy = [f"algorithm.adv_estimator={estimator}"] if ours else []
    needs_entropy += [
        f"algorithm.adv_transforms[{t.index}].name={t.name}" for t in transforms if "entropys" in t.transform.inputs
    ]
    declared = _declared_estimator_inputs(estimator)
    if not ours and declared and ("entropys" in declared or "old_log_probs" in declared):
        needs_entropy.insert(0, f"algorithm.adv_estimator={estimator}")
    if needs_entropy and bool(select(config, "algorithm.rollout_correction.bypass_mode", False)):
        raise ValueError(
            f"`{needs_entropy[0]}` needs old-policy entropy / log-probs, which verl does not compute when "
            "`algorithm.rollout_correction.bypass_mode=true` (the old-log-prob pass is skipped). "
            "Set algorithm.rollout_correction.bypass_mode=false."
        )
    for t in transforms:
        agg = str(select(config, "actor_rollout_ref.actor.loss_agg_mode", "token-mean"))
        if t.name == "high_entropy_tokens" and agg != "token-mean":
            warn(
                f"`algorithm.adv_transforms[{t.index}].name=high_entropy_tokens` with "
                f"`actor_rollout_ref.actor.loss_agg_mode={agg}`: the paper's objective (and its code) is a token "
                "mean over the batch (docs/spec.md C.1); set actor_rollout_ref.actor.loss_agg_mode=token-mean."
            )
    if estimator == "grpo_s" and loss_mode != "grpo_s":
        warn(
            f"`algorithm.adv_estimator=grpo_s` with `actor_rollout_ref.actor.policy_loss.loss_mode={loss_mode}`: "
            "GRPO-S clips the sequence ratio (Eq. S33-S34); set policy_loss.loss_mode=grpo_s."
        )
    if loss_mode == "grpo_s" and estimator != "grpo_s":
        warn(
            f"`policy_loss.loss_mode=grpo_s` with `algorithm.adv_estimator={estimator}`: the loss treats each response's "
            "mean token advantage as its sequence advantage; the paper pairs it with adv_estimator=grpo_s."
        )

    if estimator == "gtpo_token":
        token = GTPOTokenConfig.from_config(config)
        overlong = bool(select(config, "reward.reward_kwargs.overlong_buffer_cfg.enable", False))
        if token.variant == "clipped_len" and overlong:
            raise ValueError(
                "`algorithm.gtpo_token.variant=clipped_len` computes the length penalty R(i) itself (Eq. S23) and "
                "`reward.reward_kwargs.overlong_buffer_cfg.enable=true` adds DAPO's overlong penalty too: it would be "
                "applied twice. Set reward.reward_kwargs.overlong_buffer_cfg.enable=false (or use variant=base)."
            )

    if estimator == "gtpo_traj":
        traj = GTPOTrajConfig.from_config(config)
        if bool(select(config, "actor_rollout_ref.actor.use_kl_loss", False)) or bool(
            select(config, "algorithm.use_kl_in_reward", False)
        ):
            warn(
                "gtpo_traj is KL-free (no reference model, docs/spec.md A.6) but use_kl_loss or use_kl_in_reward "
                "is on; set actor_rollout_ref.actor.use_kl_loss=false algorithm.use_kl_in_reward=false."
            )
        if traj.entropy_reg_mode == "differentiable":
            _configure_differentiable_entropy(config, traj)
        if traj.resolved_choices()["ini_entropy_gate"] and traj.initial_entropy is None:
            prompts = int(select(config, "data.train_batch_size", 0))
            responses = prompts * int(select(config, "actor_rollout_ref.rollout.n", 1))
            if 0 < responses < MIN_INITIAL_ENTROPY_RESPONSES:
                warn(
                    f"`algorithm.gtpo_traj.ini_entropy_gate` is on and ⟨H⟩_ini will be measured on the first batch, "
                    f"which has only {prompts} prompt(s) × {responses // max(prompts, 1)} responses = {responses} "
                    f"(< {MIN_INITIAL_ENTROPY_RESPONSES}): the gate decides δ for the whole run from that noisy "
                    "estimate. Measure the initial model's mean entropy on a larger sample and set "
                    "algorithm.gtpo_traj.initial_entropy=<value> (docs/spec.md A.4)."
                )

    if ours or loss_mode == "grpo_s":
        agg = str(select(config, "actor_rollout_ref.actor.loss_agg_mode", "token-mean"))
        key = estimator if ours else "grpo_s"
        if agg != RECOMMENDED_LOSS_AGG[key]:
            warn(
                f"`actor_rollout_ref.actor.loss_agg_mode={agg}` differs from what {key} is written for; "
                f"the paper's form is loss_agg_mode={RECOMMENDED_LOSS_AGG[key]}."
            )
    return given


def validate_adv_transforms(config: Any) -> list:
    """Parse ``algorithm.adv_transforms`` against the registered transforms (one clear error per problem)."""
    entries = select(config, "algorithm.adv_transforms")
    if entries is None or len(entries) == 0:
        return []
    import verl  # noqa: F401  (loads every verl.plugins entry point: users' transforms register there)

    import gtpo_verl.integration.registry  # noqa: F401  (the built-in transforms)
    from gtpo_verl.integration.extensions import parse_adv_transforms

    return parse_adv_transforms(entries)


def _declared_estimator_inputs(estimator: str):
    from gtpo_verl.integration.extensions import estimator_inputs

    return estimator_inputs(estimator)


def _configure_differentiable_entropy(config: Any, traj: GTPOTrajConfig) -> None:
    """Map S17's −γ⟨H⟩ term onto verl's own entropy term: ``actor.entropy_coeff = −γ``.

    verl's ``ppo_loss`` subtracts ``entropy_coeff · agg_loss(H)`` with the current-policy
    entropy of the update pass and the global batch normalisation, so −γ turns its bonus into
    the paper's penalty; with seq-mean-token-mean it is exactly γ (1/G) Σ_i ⟨H⟩_i.
    """
    from omegaconf import open_dict

    coeff = float(select(config, "actor_rollout_ref.actor.entropy_coeff", 0.0))
    target = -traj.gamma
    if coeff == 0.0 and target != 0.0:
        with open_dict(config):
            config.actor_rollout_ref.actor.entropy_coeff = target
        logger.info("gtpo_traj differentiable entropy regulariser: actor_rollout_ref.actor.entropy_coeff=%s", target)
    elif abs(coeff - target) > 1e-12:
        raise ValueError(
            f"`algorithm.gtpo_traj.entropy_reg_mode=differentiable` with gamma={traj.gamma} needs "
            f"`actor_rollout_ref.actor.entropy_coeff={target}` (verl's entropy term with a negative sign), "
            f"but it is {coeff}. Leave entropy_coeff at 0 (it is set for you) or set it to {target}."
        )
