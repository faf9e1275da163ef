"""The candidates (verl's estimators and loss, and ours, looked up in verl's registries) and the targets."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from benchmarks.bench_estimators.sizes import Batch, GROUP_SIZE


TARGET_SIZE = (128, GROUP_SIZE, 4096)
LOSS_AGG_MODE = "token-mean"

# ----------------------------------------------------------------------------- candidates


@dataclass(frozen=True)
class Candidate:
    name: str
    kind: str  # "estimator" | "loss"
    registry_name: str
    config: dict = field(default_factory=dict)  # algorithm config (estimators)
    ours: bool = False
    reference: str = "grpo (verl)"  # the candidate whose median this one's ratio divides by
    floor_traversals: int = 3  # full (B, T) reads + writes an ideal implementation needs
    # algorithm.adv_transforms entries applied after the estimator (its ratio then prices estimator + transforms)
    transforms: tuple = ()


GRPO = "grpo (verl)"
VANILLA = "vanilla loss fwd+bwd (verl)"
_BASE_CFG = {"norm_adv_by_std_in_grpo": True}
CANDIDATES: list[Candidate] = [
    Candidate(GRPO, "estimator", "grpo", dict(_BASE_CFG), floor_traversals=3),
    Candidate("grpo_vectorized (verl)", "estimator", "grpo_vectorized", dict(_BASE_CFG), floor_traversals=3),
    Candidate("gtpo_token", "estimator", "gtpo_token", {**_BASE_CFG, "gtpo_token": {}}, True, floor_traversals=4),
    Candidate(
        "gtpo_token[negative_shaping]",
        "estimator",
        "gtpo_token",
        {**_BASE_CFG, "gtpo_token": {"negative_shaping": True}},
        True,
        floor_traversals=4,
    ),
    Candidate("grpo_s", "estimator", "grpo_s", {**_BASE_CFG, "grpo_s": {}}, True, floor_traversals=4),
    Candidate(
        "gtpo_traj[official]",
        "estimator",
        "gtpo_traj",
        {**_BASE_CFG, "gtpo_traj": {"preset": "official"}},
        True,
        floor_traversals=5,
    ),
    Candidate(
        "gtpo_traj[paper]",
        "estimator",
        "gtpo_traj",
        {**_BASE_CFG, "gtpo_traj": {"preset": "paper", "initial_entropy": 0.5}},
        True,
        floor_traversals=5,
    ),
    # verl's grpo followed by one transform, timed together: ratio − 1 is the transform's cost in units of
    # grpo; floor = grpo's 3 + the transform's read of A, H, mask and write of A'. Not `ours` (no
    # estimator targets: grpo + anything is > 1x grpo by construction)
    Candidate(
        "grpo (verl) + high_entropy_tokens",
        "estimator",
        "grpo",
        dict(_BASE_CFG),
        floor_traversals=7,
        transforms=({"name": "high_entropy_tokens", "rho": 0.2},),
    ),
    Candidate(
        "grpo (verl) + entropy_advantage",
        "estimator",
        "grpo",
        dict(_BASE_CFG),
        floor_traversals=7,
        transforms=({"name": "entropy_advantage", "alpha": 0.4, "kappa": 2.0},),
    ),
    # loss: reads old_log_prob, log_prob, advantages, mask; writes log_prob.grad
    Candidate(VANILLA, "loss", "vanilla", reference=VANILLA, floor_traversals=5),
    Candidate("grpo_s loss fwd+bwd", "loss", "grpo_s", ours=True, reference=VANILLA, floor_traversals=5),
]
CANDIDATES_BY_NAME = {c.name: c for c in CANDIDATES}

# targets at TARGET_SIZE (one thread unless the timing modes say otherwise): (candidate, metric, bound, label)
OURS = ("gtpo_token", "gtpo_token[negative_shaping]", "grpo_s", "gtpo_traj[official]", "gtpo_traj[paper]")
TARGETS = [
    *[(n, "ratio", 1.0, f"{n} <= 1.0x verl grpo") for n in OURS],
    *[(n, "memory_multiple", 2.0, f"{n} peak extra memory <= 2x one (B,T) float32") for n in OURS],
    ("grpo_s loss fwd+bwd", "ratio", 1.2, "grpo_s loss fwd+bwd <= 1.2x verl vanilla"),
]
# targets per timing mode (--threads / --contention), at every size: (mode kind, bound)
MODE_TARGETS = {"quiet": 1.0, "busy": 2.0}


def _core_algos():
    import verl  # noqa: F401  (loads the gtpo_verl plugin through the verl.plugins entry point)
    from verl.trainer.ppo import core_algos

    return core_algos


def actor_config(loss_mode: str):
    """verl's ActorConfig as verl's own loss tests build it."""
    from verl.workers.config import ActorConfig, PolicyLossConfig

    return ActorConfig(
        strategy="fsdp",
        rollout_n=1,
        ppo_micro_batch_size_per_gpu=1,
        clip_ratio=0.2,
        clip_ratio_low=0.2,
        clip_ratio_high=0.28,
        loss_agg_mode=LOSS_AGG_MODE,
        policy_loss=PolicyLossConfig(loss_mode=loss_mode),
    )


def make_runner(cand: Candidate, batch: Batch) -> Callable[[], torch.Tensor]:
    """Return a zero-argument callable doing one call of ``cand`` on ``batch``.

    Estimators return the advantages; losses run forward + backward and return the gradient.
    All inputs are prepared here, so the callable times only the candidate itself.
    """
    from omegaconf import OmegaConf

    core_algos = _core_algos()
    if cand.kind == "estimator":
        fn = core_algos.get_adv_estimator_fn(cand.registry_name)
        kwargs: dict[str, Any] = dict(
            token_level_rewards=batch.token_level_rewards,
            response_mask=batch.response_mask,
            index=batch.uids,
            config=OmegaConf.create(cand.config),
        )
        if cand.ours:
            kwargs.update(entropys=batch.entropys, responses=batch.responses)
        if cand.transforms:
            from gtpo_verl.integration.extensions import apply_adv_transforms, parse_adv_transforms

            transforms = parse_adv_transforms([dict(t) for t in cand.transforms])
            inputs = {"entropys": batch.entropys}

            def run_estimator_and_transforms() -> torch.Tensor:
                advantages, _returns = fn(**kwargs)
                advantages, _mask = apply_adv_transforms(transforms, advantages, batch.response_mask, inputs)
                return advantages

            return run_estimator_and_transforms

        def run_estimator() -> torch.Tensor:
            advantages, _returns = fn(**kwargs)
            return advantages

        return run_estimator

    # loss: per-sequence advantages broadcast over the valid tokens (what both losses receive in
    # training), from verl's grpo_vectorized so the loss benchmark does not depend on our estimators
    gen = torch.Generator().manual_seed(1234)
    shape = tuple(batch.response_mask.shape)
    device = batch.response_mask.device
    old_log_prob = (-5.0 * torch.rand(shape, generator=gen)).to(device)
    log_prob = (old_log_prob.cpu() + 0.05 * torch.randn(shape, generator=gen)).to(device).requires_grad_(True)
    advantages = make_runner(CANDIDATES_BY_NAME["grpo_vectorized (verl)"], batch)().detach()
    loss_fn = core_algos.get_policy_loss_fn(cand.registry_name)
    config = actor_config(cand.registry_name)

    def run_loss() -> torch.Tensor:
        log_prob.grad = None
        loss, _metrics = loss_fn(
            old_log_prob=old_log_prob,
            log_prob=log_prob,
            advantages=advantages,
            response_mask=batch.response_mask,
            loss_agg_mode=LOSS_AGG_MODE,
            config=config,
            rollout_is_weights=None,
        )
        loss.backward()
        return log_prob.grad

    return run_loss
