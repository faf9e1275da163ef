"""The row type of the estimator table and the batch an estimator's ``run`` reads.

No verl import: the device check and the offline audit read rows with torch alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch

from gtpo_verl.plugin.extensions import resolve_input


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
    """One estimator, everything the package knows of it (``plugin/estimators/__init__.py`` lists the rows)."""

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


def success_failure(result) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``outcome`` of an estimator whose result carries its O+ rows as ``success``."""
    return result.success, ~result.success
