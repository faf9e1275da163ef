"""``gtpo_traj``: GTPO, Paper A's trajectory form (arXiv:2508.03772 Eq. (S12), (S16), (S17)).

Everything the package knows of this estimator: its name, its ``algorithm.gtpo_traj`` block and
presets, how it runs on a batch, its diagnostics and its start-up checks (KL-free, the
differentiable regulariser, the ⟨H⟩_ini gate). The equations are ``algorithms/trajectory.py``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, ClassVar, Optional

import torch

from gtpo_verl.algorithms.choices import (
    DIVISOR_MODES,
    ENTROPY_FILTER_SCOPES,
    ENTROPY_REG_MODES,
    OVERLAP_MODES,
    TRAJ_PRESET_NAMES,
)
from gtpo_verl.algorithms.trajectory import LN2, gtpo_traj_advantage
from gtpo_verl.plugin.config import ConfigBlock, ConfigError, choice, number, select, weight
from gtpo_verl.plugin.estimators.row import Estimator, EstimatorBatch, EstimatorCall, entropy_moved_frac
from gtpo_verl.plugin.memory import huge_page_empty

NAME = "gtpo_traj"  # algorithm.adv_estimator=gtpo_traj


# Fewer first-batch responses than this make a noisy ⟨H⟩_ini for Paper A's gate (docs/spec.md A.4).
MIN_INITIAL_ENTROPY_RESPONSES = 64


TRAJ_PRESETS: dict[str, dict[str, Any]] = {
    # the released code, github.com/winstonsmith1897/GTPO @ df35bd3 (docs/spec.md A.8)
    "official": dict(
        overlap="product", divisor="code", entropy_threshold=0.7, norm_adv_by_std=False, ini_entropy_gate=False
    ),
    # the paper text read literally: λ ∈ {0,1,2}, no divisor, ln 2, GRPO's Â_i, ⟨H⟩_ini gate
    "paper": dict(overlap="union", divisor="none", entropy_threshold=LN2, norm_adv_by_std=True, ini_entropy_gate=True),
}


@dataclass(frozen=True)
class GTPOTrajConfig(ConfigBlock):
    """``algorithm.gtpo_traj``: Paper A (GTPO, trajectory), arXiv:2508.03772.

    Keys left ``null`` take the value of ``preset``; set them to override one choice.
    Formulas in docs/spec.md A.1-A.8.
    """

    path: ClassVar[str] = f"algorithm.{NAME}"
    config_only: ClassVar[tuple[str, ...]] = ("preset", "ini_entropy_gate", "entropy_threshold_ratio")

    preset: str = choice("official", TRAJ_PRESET_NAMES)
    """``official`` (the released code) or ``paper`` (the literal paper text); fills the null keys below."""
    gamma: float = weight(0.1, "set 0 to disable the entropy regulariser.")
    """γ, entropy-regulariser weight (S17; official ENT_SCALE=0.1)."""
    conflict_weight: float = number(2.0, ge=0.0, le=1e3, fix="the paper uses 2.")
    """W, λ on conflict tokens of positive responses (S12; official W_RAW=2); λ reaches W² where the runs overlap."""
    entropy_filter_scope: str = choice("all", ENTROPY_FILTER_SCOPES)
    """δ applies to ``all`` responses, only to A<0 (``neg_only``, the "OnlyNeg" ablation), or ``none``."""
    entropy_reg_mode: str = choice("advantage_offset", ENTROPY_REG_MODES)
    """``advantage_offset``: Ã = δ(A − γ⟨H⟩) (official); ``differentiable``: −γ·H added in the actor loss."""
    initial_entropy: Optional[float] = number(None, ge=0.0, fix="entropies are non-negative.")
    """⟨H⟩_ini for the gate; null = measured on the first batch by the trainer integration."""
    entropy_threshold: Optional[float] = number(None, gt=0.0, fix="the paper uses ln 2 ≈ 0.693.")
    """δ_i = 1[⟨H⟩_i ≤ threshold] (S16); preset: 0.7 official, ln 2 paper."""
    entropy_threshold_ratio: Optional[float] = number(None, gt=0.0, le=100.0, fix="e.g. 1.5 (δ = 1.5·⟨H⟩_ini).")
    """δ scaled to the model: threshold = ratio·⟨H⟩_ini, with ⟨H⟩_ini measured on the first batch (or
    ``initial_entropy``) and kept in the checkpointed state; exclusive with ``entropy_threshold``."""
    overlap: Optional[str] = choice(None, OVERLAP_MODES)
    """λ where forward and backward runs overlap: ``product`` (4, official) or ``union`` (2, paper)."""
    divisor: Optional[str] = choice(None, DIVISOR_MODES)
    """Per-response 1/n_conf: ``code`` (max(k_f,k_b), official), ``union`` (|F∪B|) or ``none`` (paper)."""
    norm_adv_by_std: Optional[bool] = None
    """A_i = r_i − mean (official) or GRPO's (r − mean)/(std + ε) (paper)."""
    ini_entropy_gate: Optional[bool] = None
    """Paper S16: if ⟨H⟩_ini > threshold, δ ≡ 1 for the whole run (official: off)."""
    epsilon: float = number(1e-6, gt=0.0, le=1.0, fix="use e.g. 1e-6.")
    """ε of the std normalisation."""

    def check(self) -> None:
        if self.entropy_threshold_ratio is not None and self.entropy_threshold is not None:
            raise ConfigError(
                self.key("entropy_threshold_ratio"),
                f"`{self.key('entropy_threshold_ratio')}={self.entropy_threshold_ratio}` and "
                f"`{self.key('entropy_threshold')}={self.entropy_threshold}` are both set, but δ is one or the other: "
                f"set {self.key('entropy_threshold')}=null to scale δ to the model, or "
                f"{self.key('entropy_threshold_ratio')}=null to fix it in nats.",
            )

    @property
    def scales_threshold(self) -> bool:
        """δ = ratio·⟨H⟩_ini (``entropy_threshold_ratio``), with δ's filter on."""
        return self.entropy_threshold_ratio is not None and self.entropy_filter_scope != "none"

    @property
    def needs_initial_entropy(self) -> bool:
        """⟨H⟩_ini is needed (the gate, or a δ scaled to it) and not given in the config."""
        return self.initial_entropy is None and (bool(self.resolved_choices()["ini_entropy_gate"]) or self.scales_threshold)

    def threshold(self, initial_entropy: float | None = None) -> float | None:
        """δ's threshold in nats: the preset's or ``entropy_threshold``, or ratio·⟨H⟩_ini (None while
        ⟨H⟩_ini is unknown, or with the filter off)."""
        if self.entropy_filter_scope == "none":
            return None
        if self.entropy_threshold_ratio is None:
            return self.resolved_choices()["entropy_threshold"]
        initial = self.initial_entropy if self.initial_entropy is not None else initial_entropy
        return None if initial is None else self.entropy_threshold_ratio * initial

    def resolved_choices(self) -> dict[str, Any]:
        """The preset-controlled keys with the preset filled in where the block left them null."""
        out = dict(TRAJ_PRESETS[self.preset])
        for name in out:
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        return out

    @property
    def needs_entropy(self) -> bool:
        return self.entropy_filter_scope != "none" or (self.gamma > 0 and self.entropy_reg_mode == "advantage_offset")

    def function_kwargs(self, initial_entropy: float | None = None) -> dict[str, Any]:
        """Keyword arguments of ``gtpo_traj_advantage``; ``initial_entropy`` feeds the gate."""
        choices = self.resolved_choices()
        if self.initial_entropy is not None:
            initial_entropy = self.initial_entropy
        kwargs = super().function_kwargs()
        kwargs.update(
            entropy_threshold=self.threshold(initial_entropy),
            overlap=choices["overlap"],
            divisor=choices["divisor"],
            norm_adv_by_std=bool(choices["norm_adv_by_std"]),
            initial_entropy=initial_entropy if choices["ini_entropy_gate"] else None,
        )
        return kwargs


def _run(block: GTPOTrajConfig, batch: EstimatorBatch):
    kwargs = block.function_kwargs(initial_entropy=batch.initial_entropy)
    if block.needs_initial_entropy and batch.initial_entropy is None:
        uses = block.key("entropy_threshold_ratio") if block.scales_threshold else block.key("ini_entropy_gate")
        raise ValueError(
            f"`{uses}` needs ⟨H⟩_ini, which is unknown: run through "
            "`python -m gtpo_verl.main` (it measures ⟨H⟩_ini on the first batch and checkpoints it), "
            f"or set `{block.key('initial_entropy')}`."
        )
    entropy = batch.require("entropys") if block.needs_entropy else None
    return gtpo_traj_advantage(
        batch.response_mask, batch.sequence_scores, batch.group_ids, batch.num_groups,
        responses=batch.require("responses"), entropy=entropy, **kwargs, empty=huge_page_empty,
    )


def _metrics(call: EstimatorCall, counts, success, failure, real) -> dict[str, float]:
    """Conflict tokens (λ of S12) and the entropy filter (δ of S16)."""
    result = call.result
    lengths = counts.to(torch.float32)
    run_tokens = torch.minimum(lengths, (result.forward_run + result.backward_run).to(lengths.dtype))
    pos_tokens, neg_tokens = float(lengths[success].sum()), float(lengths[failure].sum())
    boosted, zeroed = float(run_tokens[success].sum()), float(run_tokens[failure].sum())
    rows = max(1, int(real.sum()))
    return {
        "conflict/pos_token_frac": boosted / pos_tokens if pos_tokens else 0.0,
        "conflict/neg_token_frac": zeroed / neg_tokens if neg_tokens else 0.0,
        "conflict/boosted_tokens": boosted,  # λ ≥ 2 (W) on positive responses
        "conflict/zeroed_tokens": zeroed,  # λ = 0 on negative responses
        "conflict/mean_divisor": float(result.conflict_divisor[real].to(torch.float64).mean()) if bool(real.any()) else 0.0,
        "delta/filtered_frac": float((~result.keep & real).sum()) / rows,
        **({"delta/threshold": float(threshold)} if (threshold := call.block.threshold(call.batch.initial_entropy))
           is not None else {}),
    }


def _health(call: EstimatorCall, mask: torch.Tensor, real: torch.Tensor) -> dict[str, float]:
    """The responses δ kept, the tokens the conflict mask reweights (λ ≠ 1, S12) among all valid tokens, and how
    much δ and the regulariser move the advantage against the same step without them (δ off, γ = 0)."""
    result = call.result
    real = real.to(result.keep.device)
    lengths = mask.sum(-1).to(torch.float64)
    nonempty = real & (lengths > 0)
    responses = int(nonempty.sum())
    run_tokens = torch.minimum(lengths, (result.forward_run + result.backward_run).to(lengths))
    tokens = float(lengths[nonempty].sum())
    entropy_free = replace(call.block, entropy_filter_scope="none", gamma=0.0)
    return {
        "health/delta_kept_frac": float((result.keep & nonempty).sum()) / responses if responses else 1.0,
        "health/conflict_token_frac": float(run_tokens[nonempty].sum()) / tokens if tokens else 0.0,
        "health/entropy_moved_frac": entropy_moved_frac(call, mask, real, entropy_free),
    }


def _check(config, block: GTPOTrajConfig, warn) -> None:
    if bool(select(config, "actor_rollout_ref.actor.use_kl_loss", False)) or bool(
        select(config, "algorithm.use_kl_in_reward", False)
    ):
        warn(
            f"{NAME} is KL-free (no reference model, docs/spec.md A.6) but use_kl_loss or use_kl_in_reward "
            "is on; set actor_rollout_ref.actor.use_kl_loss=false algorithm.use_kl_in_reward=false."
        )
    if block.entropy_reg_mode == "differentiable":
        _check_differentiable_entropy(config, block)
    if block.needs_initial_entropy:
        prompts = int(select(config, "data.train_batch_size", 0))
        responses = prompts * int(select(config, "actor_rollout_ref.rollout.n", 1))
        uses = block.key("entropy_threshold_ratio") if block.scales_threshold else block.key("ini_entropy_gate")
        if 0 < responses < MIN_INITIAL_ENTROPY_RESPONSES:
            warn(
                f"`{uses}` is set and ⟨H⟩_ini will be measured on the first batch, "
                f"which has only {prompts} prompt(s) × {responses // max(prompts, 1)} responses = {responses} "
                f"(< {MIN_INITIAL_ENTROPY_RESPONSES}): δ is decided for the whole run from that noisy "
                f"estimate. Measure the initial model's mean entropy on a larger sample and set "
                f"{block.key('initial_entropy')}=<value> (docs/spec.md A.4)."
            )


def _differentiable_entropy_coeff(block: GTPOTrajConfig) -> float:
    """S17's −γ⟨H⟩ term on verl's own entropy term: ``actor.entropy_coeff = −γ``.

    verl's ``ppo_loss`` subtracts ``entropy_coeff · agg_loss(H)`` with the current-policy
    entropy of the update pass and the global batch normalisation, so −γ turns its bonus into
    the paper's penalty; with seq-mean-token-mean it is exactly γ (1/G) Σ_i ⟨H⟩_i.
    """
    return -block.gamma


def _derive(config, block: GTPOTrajConfig) -> dict[str, Any]:
    """``actor.entropy_coeff = −γ`` for the differentiable regulariser, where it is left at 0 (``derive_config``)."""
    target = _differentiable_entropy_coeff(block)
    coeff = float(select(config, "actor_rollout_ref.actor.entropy_coeff", 0.0))
    if block.entropy_reg_mode == "differentiable" and coeff == 0.0 and target != 0.0:
        return {"actor_rollout_ref.actor.entropy_coeff": target}
    return {}


def _check_differentiable_entropy(config, block: GTPOTrajConfig) -> None:
    target = _differentiable_entropy_coeff(block)
    coeff = float(select(config, "actor_rollout_ref.actor.entropy_coeff", 0.0))
    if abs(coeff - target) > 1e-12:
        raise ConfigError(
            block.key("entropy_reg_mode"),
            f"`{block.key('entropy_reg_mode')}=differentiable` with gamma={block.gamma} needs "
            f"`actor_rollout_ref.actor.entropy_coeff={target}` (verl's entropy term with a negative sign), "
            f"but it is {coeff}. Leave entropy_coeff at 0 (python -m gtpo_verl.main derives it) or set it to {target}."
        )


GTPO_TRAJ = Estimator(
    name=NAME,
    summary="GTPO (Paper A, trajectory), arXiv:2508.03772 Eq. (S12), (S16), (S17); knobs in "
    f"``algorithm.{NAME}``. ⟨H⟩_ini (the gate's) is measured by the trainer on the first batch and "
    "kept in its checkpointed state.",
    config=GTPOTrajConfig,
    function=gtpo_traj_advantage,
    inputs=("responses",),
    optional=("entropys",),
    run=_run,
    outcome=lambda result: (result.raw_advantage > 0, result.raw_advantage < 0),
    metrics=_metrics,
    health=_health,
    loss_agg_mode="seq-mean-token-mean",  # official README objective: (1/G) Σ_i 1/|o_i| Σ_t (spec A.6)
    check=_check,
    derive=_derive,
    measures_initial_entropy=lambda block: block.needs_initial_entropy,
)
