"""The estimator table: one row per advantage estimator gtpo_verl ships, read by everything that needs one.

A row (``Estimator``) holds the registered name (``algorithm.adv_estimator=<name>``), the per-token
inputs it declares (``plugin/extensions.py``), its config block (``algorithm.<name>``), its pure
function and ``run`` (that function called from the block and one ``EstimatorBatch``), the
diagnostics hook (``outcome``:
which rows count as successes and failures; ``metrics``: its own ``gtpo/*`` metrics), the loss
aggregation and policy loss its paper writes, and its start-up checks.

Readers: ``register_estimators`` (one verl adapter per row, below), start-up validation, the
diagnostics and the audit dump (``trainer/``), the offline audit (``tools/audit.py``, whose
recomputation is ``run``) and the device check (``benchmarks/check_device.py``). A new estimator
is one row here, beside its pure function (``algorithms/``) and its config block
(``plugin/config.py``).

No verl import at module level: the device check reads the table with torch alone.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch

from gtpo_verl.algorithms.groups import group_ids_from_uids
from gtpo_verl.algorithms.kernels.gtpo_token import gtpo_token_advantage
from gtpo_verl.algorithms.kernels.threads import one_cpu_thread
from gtpo_verl.algorithms.sequence_shaping import grpo_s_advantage
from gtpo_verl.algorithms.trajectory import gtpo_traj_advantage
from gtpo_verl.plugin.config import GRPOSConfig, GTPOTokenConfig, GTPOTrajConfig, select
from gtpo_verl.plugin.context import bound_estimator_input, record_estimator_output
from gtpo_verl.plugin.extensions import register_entropy_aware_estimator, resolve_input
from gtpo_verl.plugin.losses import LOSS_NAME

logger = logging.getLogger(__name__)

# Fewer first-batch responses than this make a noisy ⟨H⟩_ini for Paper A's gate (docs/spec.md A.4).
MIN_INITIAL_ENTROPY_RESPONSES = 64


@dataclass(frozen=True)
class EstimatorBatch:
    """One batch as an estimator sees it: ``(B, T)`` tensors aligned row for row with ``response_mask``."""

    owner: str  # "advantage estimator '<name>'": who asks, in the error for a missing input
    response_mask: torch.Tensor
    sequence_scores: torch.Tensor  # (B,) the outcome score, Σ_t of the token-level rewards
    group_ids: torch.Tensor  # (B,) int64 in [0, K)
    num_groups: int
    entropys: Optional[torch.Tensor] = None  # old-policy per-token entropy
    responses: Optional[torch.Tensor] = None  # response token ids
    initial_entropy: Optional[float] = None  # ⟨H⟩_ini measured on the first batch (Paper A's gate)
    share_stats: bool = False  # also compute the share statistics the diagnostics log

    def require(self, name: str) -> torch.Tensor:
        """The input ``name``, or one error naming its TransferQueue field and the fix."""
        return resolve_input(name, getattr(self, name), self.owner, self.response_mask)


@dataclass(frozen=True)
class Estimator:
    """One row of the table (see the module docstring)."""

    name: str
    summary: str  # paper and equations: the docstring of the registered adapter
    config: type  # the ``algorithm.<name>`` block
    function: Callable  # the pure function (algorithms/): the block's fields are its keyword arguments
    inputs: tuple[str, ...]  # always needed
    optional: tuple[str, ...]  # fetched, but ``run`` decides whether it needs them
    run: Callable[[Any, EstimatorBatch], Any]  # (block, batch) → the pure function's result
    outcome: Callable[[Any], tuple[torch.Tensor, torch.Tensor]]  # result → (success rows, failure rows)
    metrics: Callable[..., dict[str, float]]  # (result, counts, success, failure, real) → its own gtpo/* metrics
    loss_agg_mode: str  # the aggregation its paper's objective is written for
    policy_loss: Optional[str] = None  # the policy loss it pairs with, if any
    check: Callable[[Any, Any, Callable[[str], None]], None] = lambda config, block, warn: None  # start-up checks
    measures_initial_entropy: Callable[[Any], bool] = lambda block: False  # ⟨H⟩_ini measured on the first batch


# ----------------------------------------------------------------------------- gtpo_token
def _run_gtpo_token(block: GTPOTokenConfig, batch: EstimatorBatch):
    return gtpo_token_advantage(
        batch.response_mask, batch.sequence_scores, batch.group_ids, batch.num_groups,
        entropy=batch.require("entropys"), return_share_stats=batch.share_stats, **block.function_kwargs(),
    )


def _gtpo_token_metrics(result, counts, success, failure, real) -> dict[str, float]:
    """The success tokens' entropy shares (S18): their mean is 1 by conservation; std and max show concentration."""
    if result.share_stats is None:
        return {}
    total, total_sq, largest = (float(v) for v in result.share_stats)
    tokens = float(counts[success].sum()) if bool(success.any()) else 0.0
    if not tokens:
        return {"bonus_share/mean": 0.0, "bonus_share/std": 0.0, "bonus_share/max": 0.0}
    mean = total / tokens
    return {"bonus_share/mean": mean, "bonus_share/std": math.sqrt(max(0.0, total_sq / tokens - mean * mean)),
            "bonus_share/max": largest}


def _check_gtpo_token(config, block: GTPOTokenConfig, warn) -> None:
    if block.variant == "clipped_len" and bool(select(config, "reward.reward_kwargs.overlong_buffer_cfg.enable", False)):
        raise ValueError(
            f"`{block.key('variant')}=clipped_len` computes the length penalty R(i) itself (Eq. S23) and "
            "`reward.reward_kwargs.overlong_buffer_cfg.enable=true` adds DAPO's overlong penalty too: it would be "
            "applied twice. Set reward.reward_kwargs.overlong_buffer_cfg.enable=false (or use variant=base)."
        )


# ----------------------------------------------------------------------------- grpo_s
def _run_grpo_s(block: GRPOSConfig, batch: EstimatorBatch):
    return grpo_s_advantage(
        batch.response_mask, batch.sequence_scores, batch.group_ids, batch.num_groups,
        entropy=batch.require("entropys"), **block.function_kwargs(),
    )


def _grpo_s_metrics(result, counts, success, failure, real) -> dict[str, float]:
    """Each success's share Ĥ_i / mean_{k∈O+} Ĥ_k of the bonus (S31), exactly as the estimator computed it."""
    picked = result.success_share[success].to(torch.float64)
    if not picked.numel():
        return {}
    return {"bonus_share/mean": float(picked.mean()), "bonus_share/std": float(picked.std(unbiased=False)),
            "bonus_share/max": float(picked.max())}


# ----------------------------------------------------------------------------- gtpo_traj
def _run_gtpo_traj(block: GTPOTrajConfig, batch: EstimatorBatch):
    kwargs = block.function_kwargs(initial_entropy=batch.initial_entropy)
    if block.resolved_choices()["ini_entropy_gate"] and kwargs["initial_entropy"] is None:
        raise ValueError(
            f"`{block.key('ini_entropy_gate')}` is on but ⟨H⟩_ini is unknown: run through "
            "`python -m gtpo_verl.main` (it measures ⟨H⟩_ini on the first batch and checkpoints it), "
            f"or set `{block.key('initial_entropy')}`."
        )
    entropy = batch.require("entropys") if block.needs_entropy else None
    return gtpo_traj_advantage(
        batch.response_mask, batch.sequence_scores, batch.group_ids, batch.num_groups,
        responses=batch.require("responses"), entropy=entropy, **kwargs,
    )


def _gtpo_traj_metrics(result, counts, success, failure, real) -> dict[str, float]:
    """Conflict tokens (λ of S12) and the entropy filter (δ of S16)."""
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
    }


def _check_gtpo_traj(config, block: GTPOTrajConfig, warn) -> None:
    if bool(select(config, "actor_rollout_ref.actor.use_kl_loss", False)) or bool(
        select(config, "algorithm.use_kl_in_reward", False)
    ):
        warn(
            "gtpo_traj is KL-free (no reference model, docs/spec.md A.6) but use_kl_loss or use_kl_in_reward "
            "is on; set actor_rollout_ref.actor.use_kl_loss=false algorithm.use_kl_in_reward=false."
        )
    if block.entropy_reg_mode == "differentiable":
        _configure_differentiable_entropy(config, block)
    if block.resolved_choices()["ini_entropy_gate"] and block.initial_entropy is None:
        prompts = int(select(config, "data.train_batch_size", 0))
        responses = prompts * int(select(config, "actor_rollout_ref.rollout.n", 1))
        if 0 < responses < MIN_INITIAL_ENTROPY_RESPONSES:
            warn(
                f"`{block.key('ini_entropy_gate')}` is on and ⟨H⟩_ini will be measured on the first batch, "
                f"which has only {prompts} prompt(s) × {responses // max(prompts, 1)} responses = {responses} "
                f"(< {MIN_INITIAL_ENTROPY_RESPONSES}): the gate decides δ for the whole run from that noisy "
                f"estimate. Measure the initial model's mean entropy on a larger sample and set "
                f"{block.key('initial_entropy')}=<value> (docs/spec.md A.4)."
            )


def _configure_differentiable_entropy(config, block: GTPOTrajConfig) -> None:
    """Map S17's −γ⟨H⟩ term onto verl's own entropy term: ``actor.entropy_coeff = −γ``.

    verl's ``ppo_loss`` subtracts ``entropy_coeff · agg_loss(H)`` with the current-policy
    entropy of the update pass and the global batch normalisation, so −γ turns its bonus into
    the paper's penalty; with seq-mean-token-mean it is exactly γ (1/G) Σ_i ⟨H⟩_i.
    """
    from omegaconf import open_dict

    coeff = float(select(config, "actor_rollout_ref.actor.entropy_coeff", 0.0))
    target = -block.gamma
    if coeff == 0.0 and target != 0.0:
        with open_dict(config):
            config.actor_rollout_ref.actor.entropy_coeff = target
        logger.info("gtpo_traj differentiable entropy regulariser: actor_rollout_ref.actor.entropy_coeff=%s", target)
    elif abs(coeff - target) > 1e-12:
        raise ValueError(
            f"`{block.key('entropy_reg_mode')}=differentiable` with gamma={block.gamma} needs "
            f"`actor_rollout_ref.actor.entropy_coeff={target}` (verl's entropy term with a negative sign), "
            f"but it is {coeff}. Leave entropy_coeff at 0 (it is set for you) or set it to {target}."
        )


# ----------------------------------------------------------------------------- the table
def _success_failure(result) -> tuple[torch.Tensor, torch.Tensor]:
    return result.success, ~result.success


ESTIMATORS: dict[str, Estimator] = {
    row.name: row
    for row in (
        Estimator(
            name="gtpo_token",
            summary="GTPO (Paper B, token level), arXiv:2508.04349 Eq. (S18)-(S30); knobs in ``algorithm.gtpo_token``.",
            config=GTPOTokenConfig,
            function=gtpo_token_advantage,
            inputs=("entropys",),
            optional=(),
            run=_run_gtpo_token,
            outcome=_success_failure,
            metrics=_gtpo_token_metrics,
            loss_agg_mode="token-mean",  # Eq. (S22): DAPO's token-level surrogate
            check=_check_gtpo_token,
        ),
        Estimator(
            name="grpo_s",
            summary="GRPO-S (Paper B, sequence level), arXiv:2508.04349 Eq. (S31)-(S37); knobs in "
            "``algorithm.grpo_s``. Pair with ``actor_rollout_ref.actor.policy_loss.loss_mode=grpo_s`` for the "
            "sequence ratio (S33-S34).",
            config=GRPOSConfig,
            function=grpo_s_advantage,
            inputs=("entropys",),
            optional=(),
            run=_run_grpo_s,
            outcome=_success_failure,
            metrics=_grpo_s_metrics,
            loss_agg_mode="seq-mean-token-mean",  # Eq. (S34): (1/G) Σ_i over sequences
            policy_loss=LOSS_NAME,
        ),
        Estimator(
            name="gtpo_traj",
            summary="GTPO (Paper A, trajectory), arXiv:2508.03772 Eq. (S12), (S16), (S17); knobs in "
            "``algorithm.gtpo_traj``. ⟨H⟩_ini (the gate's) is measured by the trainer on the first batch and "
            "kept in its checkpointed state.",
            config=GTPOTrajConfig,
            function=gtpo_traj_advantage,
            inputs=("responses",),
            optional=("entropys",),
            run=_run_gtpo_traj,
            outcome=lambda result: (result.raw_advantage > 0, result.raw_advantage < 0),
            metrics=_gtpo_traj_metrics,
            loss_agg_mode="seq-mean-token-mean",  # official README objective: (1/G) Σ_i 1/|o_i| Σ_t (spec A.6)
            check=_check_gtpo_traj,
            measures_initial_entropy=lambda block: block.resolved_choices()["ini_entropy_gate"]
            and block.initial_entropy is None,
        ),
    )
}


# ----------------------------------------------------------------------------- verl adapters
def _verl_adapter(row: Estimator) -> Callable:
    """verl's estimator signature around ``row.run``: ``(token_level_rewards, response_mask, index, config)``
    plus the declared inputs as keyword arguments → ``(advantages, returns)``, zeros outside the mask.

    ``config`` is verl's ``algorithm`` node; ``index`` the uids. The detailed result (and the name
    verl called) reach the trainer through ``plugin/context.py``. On the CPU the call runs on one
    thread (``kernels/threads.py``).
    """
    owner = f"advantage estimator {row.name!r}"

    def adapter(token_level_rewards, response_mask, index=None, config=None, *, initial_entropy=None, **inputs):
        block = row.config.from_algorithm_config(config)
        if index is None:
            raise ValueError(f"{owner} needs `index` (the uid of each response's prompt).")
        group_ids, num_groups = group_ids_from_uids(index)
        if group_ids.numel() != response_mask.shape[0]:
            raise ValueError(f"{owner}: {group_ids.numel()} uids for {response_mask.shape[0]} responses.")
        batch = EstimatorBatch(
            owner=owner,
            response_mask=response_mask,
            sequence_scores=token_level_rewards.sum(-1),
            group_ids=group_ids,
            num_groups=num_groups,
            entropys=inputs.get("entropys"),
            responses=inputs.get("responses"),
            initial_entropy=initial_entropy if initial_entropy is not None else bound_estimator_input("initial_entropy"),
            share_stats=bool(bound_estimator_input("diagnostics")),
        )
        with torch.no_grad(), one_cpu_thread(response_mask):
            result = row.run(block, batch)
        record_estimator_output(row.name, result)
        advantages = result.advantages.to(token_level_rewards.dtype)
        return advantages, advantages

    adapter.__name__ = adapter.__qualname__ = f"compute_{row.name}_advantage"
    adapter.__doc__ = row.summary
    return adapter


def register_estimators() -> None:
    """Register every row in verl's ``ADV_ESTIMATOR_REGISTRY`` through the public decorator (imports verl)."""
    for row in ESTIMATORS.values():
        register_entropy_aware_estimator(row.name, inputs=row.inputs, optional=row.optional)(_verl_adapter(row))
