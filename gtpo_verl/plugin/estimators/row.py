"""The row type of the estimator table and the batch an estimator's ``run`` reads.

No verl import: the device check and the offline audit read rows with torch alone.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, Optional

import torch

from gtpo_verl.algorithms.groups import group_ids_from_uids, row_dot
from gtpo_verl.plugin.extensions import missing_input_error


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

    def require(self, name: str) -> torch.Tensor:
        """The input ``name`` (already resolved and aligned), or one error naming its TransferQueue field and the fix."""
        value = getattr(self, name)
        if value is None:
            raise missing_input_error(name, self.owner, self.response_mask)
        return value

    @classmethod
    def build(cls, owner: str, sequence_scores: torch.Tensor, response_mask: torch.Tensor, index,
              initial_entropy: Optional[float] = None, **inputs: Optional[torch.Tensor]) -> "EstimatorBatch":
        """The batch from the ``(B,)`` outcome scores (verl's token rewards summed), the mask, the uids and the
        resolved inputs: the one place it is built."""
        if index is None:
            raise ValueError(f"{owner} needs `index` (the uid of each response's prompt).")
        group_ids, num_groups = group_ids_from_uids(index)
        if group_ids.numel() != response_mask.shape[0]:
            raise ValueError(f"{owner}: {group_ids.numel()} uids for {response_mask.shape[0]} responses.")
        return cls(owner=owner, response_mask=response_mask, sequence_scores=sequence_scores,
                   group_ids=group_ids, num_groups=num_groups, entropys=inputs.get("entropys"),
                   responses=inputs.get("responses"), initial_entropy=initial_entropy)


@dataclass(frozen=True)
class EstimatorCall:
    """One call of a table estimator as its caller gets it back: the block it read, the batch, the result."""

    name: str
    block: Any  # the ``algorithm.<name>`` block
    batch: EstimatorBatch
    result: Any  # the pure function's detailed result


@dataclass(frozen=True)
class Estimator:
    """One estimator, everything the package knows of it (``plugin/estimators/__init__.py`` lists the rows)."""

    name: str
    summary: str  # paper and equations: the docstring of the registered adapter
    config: type  # the ``algorithm.<name>`` block
    function: Callable  # the pure function (algorithms/): the block's fields are its keyword arguments
    inputs: tuple[str, ...]  # always needed
    optional: tuple[str, ...]  # fetched, but ``run`` decides whether it needs them
    run: Callable[[Any, EstimatorBatch], Any]  # (block, batch) → the pure function's result
    outcome: Callable[[Any], tuple[torch.Tensor, torch.Tensor]]  # result → (success rows, failure rows)
    metrics: Callable[..., dict[str, float]]  # (call, counts, success, failure, real) → its own gtpo/* metrics
    health: Callable[..., dict[str, float]]  # (call, mask, real) → its gtpo/health/* metrics (trainer/health.py)
    loss_agg_mode: str  # the aggregation its paper's objective is written for
    policy_loss: Optional[str] = None  # the policy loss it pairs with, if any
    check: Callable[[Any, Any, Callable[[str], None]], None] = lambda config, block, warn: None  # start-up checks, read-only
    derive: Callable[[Any, Any], dict[str, Any]] = lambda config, block: {}  # {dotted key: value} derive_config sets
    measures_initial_entropy: Callable[[Any], bool] = lambda block: False  # ⟨H⟩_ini measured on the first batch


def entropy_moved_frac(call: EstimatorCall, mask: torch.Tensor, real: torch.Tensor, entropy_free: Any) -> float:
    """Σ|A − A₀| / max(Σ|A|, Σ|A₀|) over the real rows' valid tokens, A₀ the same call's advantages under
    ``entropy_free`` (a block, or a batch with the entropy made uninformative): how far the entropy terms move
    the method's advantage from its entropy-free form, in [0, 2]; 1 when they zero it (δ filtering all); 0 with
    no advantage at all."""
    block = entropy_free if not isinstance(entropy_free, EstimatorBatch) else call.block
    batch = entropy_free if isinstance(entropy_free, EstimatorBatch) else call.batch
    from gtpo_verl.plugin.estimators import ESTIMATORS  # the table's run (the row imports this module)
    from gtpo_verl.plugin.threads import one_cpu_thread

    with torch.no_grad(), one_cpu_thread(mask):
        free = ESTIMATORS[call.name].run(block, batch).advantages
    width = mask.shape[-1]
    weight = (mask > 0).to(torch.float32) * real[:, None].to(torch.float32)  # the real rows' valid tokens
    shaped, free = call.result.advantages[:, :width].to(torch.float32), free[:, :width].to(torch.float32)

    def total(values: torch.Tensor) -> float:  # per-row float32 dots, summed in float64
        return float(row_dot(values.abs_(), weight).to(torch.float64).sum())

    moved = total(shaped - free)
    scale = max(total(shaped.clone()), total(free))
    return moved / scale if scale else 0.0


def flat_entropy(call: EstimatorCall) -> EstimatorBatch:
    """The call's batch with every entropy 1: Paper B's shares become 1 per token (or per response)."""
    return replace(call.batch, entropys=torch.ones_like(call.batch.entropys))


def success_failure(result) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``outcome`` of an estimator whose result carries its O+ rows as ``success``."""
    return result.success, ~result.success
