"""Side channel for the data verl's ``compute_advantage`` cannot forward to an estimator.

verl 0.9.1 calls a registered estimator with rewards, mask, uids and config only. The
per-token inputs an estimator declares (``entropys``, ``responses``, ``old_log_probs``;
``plugin/extensions.py``) and ⟨H⟩_ini (Paper A's gate: one number measured on the run's first
batch) are data verl never sees, so the caller binds them here for the duration of one call
and the registered wrapper reads the ones not passed as keyword arguments. That is all this
channel carries: control flags are arguments, never bound here (``bind_estimator_inputs``
takes only the names in ``BOUND_DATA``). The estimator hands its detailed result back through
the yielded dict. Always bound with ``with``; reset in ``finally``.
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Iterator, Optional

import torch

# the per-token inputs an estimator may declare: estimator keyword → TransferQueue field of verl 0.9.1's V1 trainer
INPUT_FIELDS = {"entropys": "entropy", "responses": "responses", "old_log_probs": "old_log_probs"}
BOUND_DATA = (*INPUT_FIELDS, "initial_entropy")  # the per-token inputs and ⟨H⟩_ini

_ESTIMATOR_INPUTS: ContextVar[dict[str, Any] | None] = ContextVar("gtpo_estimator_inputs", default=None)
_ESTIMATOR_OUTPUTS: ContextVar[dict[str, Any] | None] = ContextVar("gtpo_estimator_outputs", default=None)


@contextmanager
def bind_estimator_inputs(**data: Optional[torch.Tensor | float]) -> Iterator[dict[str, Any]]:
    """Bind the data verl cannot forward (keywords from ``BOUND_DATA``; None = not bound); yields a dict the
    estimator fills with its result. Any other keyword (a control flag) is a ``TypeError``."""
    unknown = sorted(set(data) - set(BOUND_DATA))
    if unknown:
        raise TypeError(f"{unknown} are not data bound for estimators (flags are arguments); bound data: {list(BOUND_DATA)}")
    outputs: dict[str, Any] = {}
    in_token = _ESTIMATOR_INPUTS.set({k: v for k, v in data.items() if v is not None})
    out_token = _ESTIMATOR_OUTPUTS.set(outputs)
    try:
        yield outputs
    finally:
        _ESTIMATOR_INPUTS.reset(in_token)
        _ESTIMATOR_OUTPUTS.reset(out_token)


def bound_estimator_input(name: str) -> Any:
    """Return the bound datum ``name`` (one of ``BOUND_DATA``), or None outside ``bind_estimator_inputs``."""
    if name not in BOUND_DATA:
        raise KeyError(f"{name!r} is not data bound for estimators; bound data: {list(BOUND_DATA)}")
    inputs = _ESTIMATOR_INPUTS.get()
    return None if inputs is None else inputs.get(name)


def record_estimator_output(name: str, result: Any) -> None:
    """Hand an estimator's detailed result to the caller that bound the inputs (if any)."""
    outputs = _ESTIMATOR_OUTPUTS.get()
    if outputs is not None:
        outputs[name] = result
