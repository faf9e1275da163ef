"""The lab's methods: the package's method table (``gtpo_verl/config/methods.yaml``) plus what only the lab has.

Each row's estimator (``algorithm.adv_estimator``), advantage transforms, policy loss mode and
aggregation, knobs and dynamic sampling are the table's, the same rows the pipeline runs; its clips
too, where the table sets them. The update schedule, the reward scale, the sampler stream, the null
twins and the rows swept over one knob (δ's ratio, GTPO-token's α₁) are the lab's. ``--methods``
also takes any registered estimator name (run with DAPO's knobs) or ``estimator+transform[+transform]``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from gtpo_verl.methods import METHODS as TABLE


@dataclass(frozen=True)
class Method:
    """One training recipe of the lab."""

    name: str
    estimator: str
    """verl's ``algorithm.adv_estimator`` (resolved through ``core_algos.get_adv_estimator_fn``)."""
    transforms: tuple[dict, ...] = ()
    """``algorithm.adv_transforms`` entries, applied after the estimator."""
    loss_mode: str = "vanilla"
    """verl's ``actor.policy_loss.loss_mode`` (``get_policy_loss_fn``)."""
    loss_agg_mode: str = "token-mean"
    clip_ratio_low: float = 0.2
    clip_ratio_high: float = 0.28
    clip_ratio_c: float = 10.0
    """Dual-clip c (the DAPO recipe's 10.0)."""
    dynamic_sampling: bool = True
    """DAPO's ``filter_groups`` on ``acc``: drop all-equal groups, refill from the prompt stream."""
    mini_batches: int = 2
    """Optimiser steps per rollout batch (``train_batch / ppo_mini_batch``); ≥ 2 lets the ratio leave 1."""
    ppo_epochs: int = 1
    reward: str = "acc"
    """``acc`` (0/1, DAPO's ±1 up to an affine map) or ``paper_a`` (format 10 + correct 10, Paper A's scale)."""
    norm_adv_by_std_in_grpo: bool = True
    algorithm: dict = field(default_factory=dict)
    """Extra ``algorithm.<estimator>`` blocks (our typed configs read them)."""
    policy_loss: dict = field(default_factory=dict)
    """Extra ``actor.policy_loss`` fields (Clip-Cov / KL-Cov knobs)."""
    sampler_stream: int = 0
    """Which training sampler stream of the seed to draw from; a method's twin on another stream is the null comparison."""

    def algorithm_config(self) -> dict[str, Any]:
        return {"adv_estimator": self.estimator, "norm_adv_by_std_in_grpo": self.norm_adv_by_std_in_grpo,
                "gamma": 1.0, "lam": 1.0, **{k: dict(v) for k, v in self.algorithm.items()}}


def from_table(name: str, **lab: Any) -> Method:
    """The table's row ``name`` as a lab method, with the lab-only fields ``lab``."""
    row = TABLE[name]
    clips = {} if row.clips is None else dict(clip_ratio_low=row.clips.low, clip_ratio_high=row.clips.high,
                                                clip_ratio_c=row.clips.c)
    return Method(name=name, estimator=row.estimator, transforms=row.transforms, loss_mode=row.loss_mode or "vanilla",
                  loss_agg_mode=row.loss_agg_mode, dynamic_sampling=row.dynamic_sampling,
                  algorithm={row.estimator: dict(row.knobs)} if row.knobs else {}, policy_loss=dict(row.policy_loss),
                  **{**clips, **lab})


DAPO = from_table("DAPO")
# Paper A's schedule and reward in the lab: one update per rollout (the ratio stays 1), format 10 + correct
# 10, its clip ε = 0.2 on both sides
_PAPER_A = dict(mini_batches=1, reward="paper_a", clip_ratio_high=0.2)
DELTA_RATIOS = (0.8, 1.0, 1.2)
"""δ scaled to the model, × ⟨H⟩_ini: Paper A leaves δ's relation to a model's entropy open."""
TOKEN_ALPHA1 = (0.5,)
"""GTPO-token's α₁ besides the default 0.9 (α₂ = 1 − α₁): the paper leaves the split open."""
GRPO = from_table("GRPO", **_PAPER_A)
GTPO_TRAJ = from_table("GTPO_TRAJ", **_PAPER_A)
DAPO_TOKEN = from_table("DAPO_TOKEN")


def _gtpo_traj_scaled(ratio: float) -> Method:
    # δ scaled to the model: the package's own key, δ = ratio·⟨H⟩_ini with ⟨H⟩_ini measured on the first batch
    knobs = GTPO_TRAJ.algorithm[GTPO_TRAJ.estimator]
    return dataclasses.replace(GTPO_TRAJ, name=f"GTPO_TRAJ_D{round(ratio * 10):02d}",
                               algorithm={GTPO_TRAJ.estimator: {**knobs, "entropy_threshold_ratio": ratio}})


def _dapo_token_alpha(alpha1: float) -> Method:
    return dataclasses.replace(DAPO_TOKEN, name=f"DAPO_TOKEN_A{round(alpha1 * 10):02d}",
                               algorithm={DAPO_TOKEN.estimator: {"alpha1": alpha1, "alpha2": round(1.0 - alpha1, 10)}})


METHODS: dict[str, Method] = {
    m.name: m
    for m in (
        DAPO,
        dataclasses.replace(DAPO, name="DAPO_TWIN", sampler_stream=1),
        DAPO_TOKEN,
        *(_dapo_token_alpha(a) for a in TOKEN_ALPHA1),
        from_table("DAPO_TOKEN_ROW"),
        from_table("DAPO_SEQ"),
        from_table("DAPO_HIGH_ENTROPY"),
        from_table("DAPO_ENTROPY_ADV"),
        from_table("CLIP_COV"),
        from_table("KL_COV"),
        GRPO,
        dataclasses.replace(GRPO, name="GRPO_TWIN", sampler_stream=1),
        GTPO_TRAJ,
        from_table("GTPO_TRAJ_PAPER", **_PAPER_A),
        *(_gtpo_traj_scaled(r) for r in DELTA_RATIOS),
    )
}


def resolve_methods(spec: str) -> list[Method]:
    """Methods from ``--methods``: table names, registered estimator names, or ``estimator+transform…``."""
    import verl  # noqa: F401  (loads the plugin: our estimators and transforms register)
    from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY

    from gtpo_verl.plugin.extensions import registered_transforms

    out = []
    for item in [s.strip() for s in spec.split(",") if s.strip()]:
        if item in METHODS:
            out.append(METHODS[item])
            continue
        estimator, *transforms = item.split("+")
        if estimator not in ADV_ESTIMATOR_REGISTRY and estimator != "grpo":
            raise ValueError(
                f"--methods: {item!r} is neither a lab method {sorted(METHODS)} nor a registered estimator "
                f"{sorted(ADV_ESTIMATOR_REGISTRY)} (optionally +transform, transforms: {sorted(registered_transforms())})."
            )
        unknown = [t for t in transforms if t not in registered_transforms()]
        if unknown:
            raise ValueError(f"--methods: unknown transform(s) {unknown} in {item!r}; registered: {sorted(registered_transforms())}.")
        out.append(dataclasses.replace(DAPO, name=item, estimator=estimator, transforms=tuple({"name": t} for t in transforms)))
    names = [m.name for m in out]
    if len(set(names)) != len(names):
        raise ValueError(f"--methods lists a method twice: {names}")
    return out
