"""Between sampling and the optimiser step: verl's and our registered code only.

- advantages: the trainer's own named steps (``trainer/advantage_steps.py``): settings parsed once
  per run (``AdvantageStep.prepare``), ``run_estimator`` around ``core_algos.get_adv_estimator_fn(name)``
  called with the keyword arguments verl's ``compute_advantage`` (``trainer/ppo/ray_trainer.py``)
  passes, ``advantage_diagnostics`` and ``transform_advantages`` (``algorithm.adv_transforms``);
- loss: ``core_algos.get_policy_loss_fn(mode)`` with a verl ``ActorConfig``, its
  ``global_batch_info`` filled as verl's ``ppo_loss`` (``workers/utils/losses.py``) fills it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import numpy as np
import torch

from gtpo_verl.lab.methods import Method


@dataclass
class Advantages:
    advantages: torch.Tensor
    response_mask: torch.Tensor
    metrics: dict[str, float]


def algorithm_config(method: Method):
    """The ``algorithm`` DictConfig verl hands its estimators."""
    from omegaconf import OmegaConf

    return OmegaConf.create(method.algorithm_config())


@dataclass(frozen=True)
class AdvantageStep:
    """One run's advantage step: its config and settings, parsed once (``prepare``), then called per batch."""

    method: Method
    algorithm: Any  # the algorithm DictConfig verl hands the estimator
    settings: Any  # trainer.advantage_steps.AdvantageSettings
    initial_entropy: Optional[float] = None  # ⟨H⟩_ini, bound for the estimator (its gate, a δ scaled to it)

    @classmethod
    def prepare(cls, method: Method, initial_entropy: Optional[float] = None, diagnostics: bool = True) -> "AdvantageStep":
        """Parse the method's ``algorithm`` and ``gtpo`` settings as the trainer parses its config at init."""
        from omegaconf import OmegaConf

        from gtpo_verl.trainer.advantage_steps import AdvantageSettings

        algorithm = algorithm_config(method)
        config = OmegaConf.create({"algorithm": {**OmegaConf.to_container(algorithm),
                                                 "adv_transforms": [dict(t) for t in method.transforms]},
                                   "gtpo": {"diagnostics": diagnostics}})
        return cls(method=method, algorithm=algorithm, settings=AdvantageSettings.from_config(config),
                   initial_entropy=initial_entropy)

    def __call__(
        self,
        token_level_rewards: torch.Tensor,
        response_mask: torch.Tensor,
        uids: np.ndarray,
        entropys: torch.Tensor,
        responses: torch.Tensor,
        old_log_probs: torch.Tensor,
    ) -> Advantages:
        """Advantages ``(B, T)`` through verl's registry and our transforms, plus our ``gtpo/*`` health metrics."""
        from verl.trainer.ppo import core_algos

        from gtpo_verl.trainer.advantage_steps import (
            AdvantageFields,
            advantage_diagnostics,
            run_estimator,
            transform_advantages,
        )

        settings, estimator = self.settings, self.method.estimator
        inputs = {"entropys": entropys.to(torch.float32), "responses": responses, "old_log_probs": old_log_probs}

        def verl_call() -> torch.Tensor:
            if estimator == "grpo":  # verl's compute_advantage has a dedicated GRPO branch
                return core_algos.compute_grpo_outcome_advantage(
                    token_level_rewards=token_level_rewards, response_mask=response_mask, index=uids,
                    norm_adv_by_std_in_grpo=self.algorithm.get("norm_adv_by_std_in_grpo", True),
                )[0]
            estimator_fn = core_algos.get_adv_estimator_fn(estimator)
            return estimator_fn(token_level_rewards=token_level_rewards, response_mask=response_mask,
                                config=self.algorithm, index=uids)[0]

        advantages, call = run_estimator(settings, verl_call, inputs, self.initial_entropy)
        metrics: dict[str, float] = {}
        if settings.diagnostics:
            real = torch.ones(response_mask.shape[0], dtype=torch.bool)
            advantage_diagnostics(settings, call, AdvantageFields(inputs, response_mask.to(torch.float32), real), metrics)
        advantages, mask = transform_advantages(settings, advantages, response_mask, inputs, metrics)
        return Advantages(advantages=advantages, response_mask=mask, metrics=metrics)


def actor_config(method: Method):
    """verl's ``ActorConfig`` with the method's clip, aggregation and policy-loss knobs."""
    from verl.workers.config import ActorConfig

    from gtpo_verl.plugin.loss_config import GTPOPolicyLossConfig

    return ActorConfig(
        strategy="fsdp",
        rollout_n=1,
        ppo_micro_batch_size_per_gpu=1,
        clip_ratio=method.clip_ratio_low,
        clip_ratio_low=method.clip_ratio_low,
        clip_ratio_high=method.clip_ratio_high,
        clip_ratio_c=method.clip_ratio_c,
        loss_agg_mode=method.loss_agg_mode,
        entropy_coeff=0.0,
        use_kl_loss=False,
        policy_loss=GTPOPolicyLossConfig(loss_mode=method.loss_mode, **method.policy_loss),
    )


def policy_loss(
    config: Any,
    old_log_probs: torch.Tensor,
    log_probs: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
) -> tuple[torch.Tensor, dict[str, float]]:
    """One mini-batch's policy loss as verl's ``ppo_loss`` computes it (dp_size 1, no KL, no entropy bonus)."""
    from verl.trainer.ppo.core_algos import get_policy_loss_fn

    mask = response_mask.to(bool)
    config.global_batch_info["dp_size"] = 1
    config.global_batch_info["batch_num_tokens"] = int(mask.sum())
    config.global_batch_info["global_batch_size"] = int(mask.shape[0])
    config.global_batch_info["loss_scale_factor"] = config.loss_scale_factor
    loss_fn = get_policy_loss_fn(config.policy_loss.get("loss_mode", "vanilla"))
    loss, metrics = loss_fn(
        old_log_prob=old_log_probs,
        log_prob=log_probs,
        advantages=advantages,
        response_mask=mask,
        loss_agg_mode=config.loss_agg_mode,
        config=config,
        rollout_is_weights=None,
    )
    return loss, {k: float(v.item() if torch.is_tensor(v) else v) for k, v in metrics.items()}
