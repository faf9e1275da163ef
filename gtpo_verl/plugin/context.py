"""Side channel for estimator inputs that verl's ``compute_advantage`` does not forward.

verl 0.9.1 calls a registered estimator with rewards, mask, uids and config only. The
trainer integration binds the inputs the configured estimator declared (``entropys``,
``responses``, ``old_log_probs``; ``plugin/extensions.py``) here for the duration of one
``_compute_advantage`` call; the registered wrapper reads them when they are not passed as
keyword arguments. Always bound with ``with``; reset in ``finally``.
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Iterator

_ESTIMATOR_INPUTS: ContextVar[dict[str, Any] | None] = ContextVar("gtpo_estimator_inputs", default=None)
_ESTIMATOR_OUTPUTS: ContextVar[dict[str, Any] | None] = ContextVar("gtpo_estimator_outputs", default=None)


@contextmanager
def bind_estimator_inputs(**inputs: Any) -> Iterator[dict[str, Any]]:
    """Bind extra estimator inputs; yields a dict the estimator fills with its detailed result."""
    outputs: dict[str, Any] = {}
    in_token = _ESTIMATOR_INPUTS.set(dict(inputs))
    out_token = _ESTIMATOR_OUTPUTS.set(outputs)
    try:
        yield outputs
    finally:
        _ESTIMATOR_INPUTS.reset(in_token)
        _ESTIMATOR_OUTPUTS.reset(out_token)


def bound_estimator_input(name: str) -> Any:
    """Return the bound input ``name``, or None outside ``bind_estimator_inputs``."""
    inputs = _ESTIMATOR_INPUTS.get()
    return None if inputs is None else inputs.get(name)


def record_estimator_output(name: str, result: Any) -> None:
    """Hand an estimator's detailed result to the caller that bound the inputs (if any)."""
    outputs = _ESTIMATOR_OUTPUTS.get()
    if outputs is not None:
        outputs[name] = result
