"""The lab's methods: one table, with the recipes' knobs (recipes/dapo/common.sh, recipes/gtpo_traj/common.sh).

Each row names verl's advantage estimator (``algorithm.adv_estimator``), our advantage
transforms (``algorithm.adv_transforms``), verl's policy loss mode and aggregation, the clip
knobs, the update schedule and whether DAPO's dynamic sampling runs. ``--methods`` also takes
any registered estimator name (run with DAPO's knobs) or ``estimator+transform[+transform]``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from gtpo_verl.plugin.estimators.grpo_s import GRPO_S
from gtpo_verl.plugin.estimators.gtpo_token import GTPO_TOKEN
from gtpo_verl.plugin.estimators.gtpo_traj import GTPO_TRAJ


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


DAPO = Method(name="DAPO", estimator="grpo")
# verl's Clip-Cov / KL-Cov act on max(1, int(ratio · tokens)) tokens of a mini-batch. At the
# recipes' 0.0002 that is 1 token of the lab's ~200-token mini-batches (the floor); 2 % selects about
# 4 (results.json logs the count, ``cov_selected_tokens``).
_COV_RATIO = 0.02
_PAPER_A = dict(dynamic_sampling=False, mini_batches=1, loss_agg_mode="seq-mean-token-mean", reward="paper_a",
                clip_ratio_high=0.2)
_OFFICIAL = {"preset": "official"}  # Paper A's released code (docs/spec.md A.8): δ at 0.7 nats
_PAPER = {"preset": "paper"}  # Paper A's text read literally (docs/spec.md): δ at ln 2 with the ⟨H⟩_ini gate, union λ, no divisor
DELTA_RATIOS = (0.8, 1.0, 1.2)
"""δ scaled to the model, × ⟨H⟩_ini: Paper A leaves δ's relation to a model's entropy open."""
TOKEN_ALPHA1 = (0.5,)
"""GTPO-token's α₁ besides the default 0.9 (α₂ = 1 − α₁): the paper leaves the split open."""
GRPO = Method(name="GRPO", estimator="grpo", **_PAPER_A)


def _gtpo_traj_scaled(ratio: float) -> Method:
    # δ scaled to the model: the package's own key, δ = ratio·⟨H⟩_ini with ⟨H⟩_ini measured on the first batch
    return Method(name=f"GTPO_TRAJ_D{round(ratio * 10):02d}", estimator=GTPO_TRAJ.name,
                  algorithm={GTPO_TRAJ.name: {**_OFFICIAL, "entropy_threshold_ratio": ratio}}, **_PAPER_A)


def _dapo_token_alpha(alpha1: float) -> Method:
    return dataclasses.replace(DAPO, name=f"DAPO_TOKEN_A{round(alpha1 * 10):02d}", estimator=GTPO_TOKEN.name,
                               algorithm={GTPO_TOKEN.name: {"alpha1": alpha1, "alpha2": round(1.0 - alpha1, 10)}})


METHODS: dict[str, Method] = {
    m.name: m
    for m in (
        DAPO,
        dataclasses.replace(DAPO, name="DAPO_TWIN", sampler_stream=1),
        dataclasses.replace(DAPO, name="DAPO_TOKEN", estimator=GTPO_TOKEN.name),
        *(_dapo_token_alpha(a) for a in TOKEN_ALPHA1),
        dataclasses.replace(DAPO, name="DAPO_TOKEN_ROW", estimator=GTPO_TOKEN.name,
                            algorithm={GTPO_TOKEN.name: {"entropy_share": "geometric"}}),
        dataclasses.replace(DAPO, name="DAPO_SEQ", estimator=GRPO_S.name, loss_mode=GRPO_S.policy_loss,
                            loss_agg_mode=GRPO_S.loss_agg_mode),
        dataclasses.replace(DAPO, name="DAPO_HIGH_ENTROPY", transforms=({"name": "high_entropy_tokens", "rho": 0.2},)),
        dataclasses.replace(DAPO, name="DAPO_ENTROPY_ADV", transforms=({"name": "entropy_advantage"},)),
        dataclasses.replace(DAPO, name="CLIP_COV", loss_mode="clip_cov", policy_loss={"clip_cov_ratio": _COV_RATIO}),
        dataclasses.replace(DAPO, name="KL_COV", loss_mode="kl_cov", policy_loss={"kl_cov_ratio": _COV_RATIO}),
        GRPO,
        dataclasses.replace(GRPO, name="GRPO_TWIN", sampler_stream=1),
        Method(name="GTPO_TRAJ", estimator=GTPO_TRAJ.name, algorithm={GTPO_TRAJ.name: _OFFICIAL}, **_PAPER_A),
        Method(name="GTPO_TRAJ_PAPER", estimator=GTPO_TRAJ.name, algorithm={GTPO_TRAJ.name: _PAPER}, **_PAPER_A),
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
