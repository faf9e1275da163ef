"""Non-finite data never becomes an advantage: one check, used on every estimator's and transform's
inputs and results.

A NaN or Inf score, entropy or advantage at a valid position raises one ``ValueError`` naming the
owner, the value, the row and its uid, and where to look. The common case costs one reduction
over the tensor: its sum is finite whenever every element is (a sum that overflows only sends the
check down its exact path, which then finds nothing). Only then is the tensor searched, position
by position against the mask, so NaN garbage outside the response mask, which changes nothing,
is let through.
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence, Union

import torch

# where each checked quantity comes from, for the error's fix
SOURCES = {
    "score": "the reward for that response (verl's reward loop wrote it to rm_scores / token_level_rewards): "
    "fix the reward function, a NaN/Inf reward is never turned into an advantage",
    "entropys": "the old-log-prob pass (actor/entropy): logits that overflow, e.g. in low precision",
    "old_log_probs": "the old-log-prob pass: logits that overflow, e.g. in low precision",
    "advantages": "the estimator or transform that returned it: its inputs at that row were finite; "
    "check its config and code",
}


def check_finite(
    values: torch.Tensor,
    what: str,
    owner: str,
    uids: Union[Sequence[Any], Callable[[], Sequence[Any]], None] = None,
    response_mask: Optional[torch.Tensor] = None,
) -> None:
    """Raise one ``ValueError`` if ``values`` ``(B,)`` or ``(B, T)`` has a NaN/Inf (at a valid position of ``response_mask``).

    ``uids`` (row-aligned) name the row's prompt; a callable is called only to write the error.
    """
    if not values.is_floating_point() or values.numel() == 0 or bool(torch.isfinite(values.sum())):
        return
    bad = ~torch.isfinite(values)
    if response_mask is not None and values.dim() == response_mask.dim():
        bad &= response_mask.bool()
    if not bool(bad.any()):
        return  # garbage outside the mask only
    positions = torch.nonzero(bad)
    row = int(positions[0, 0])
    rows = int(torch.unique(positions[:, 0]).numel())
    first = values[tuple(positions[0].tolist())].item()
    valid = " valid" if response_mask is not None else ""
    uids = uids() if callable(uids) else uids
    where = f"row {row}" + (f" (uid {_uid(uids, row)!r})" if uids is not None else "")
    if values.dim() > 1:
        where += f", token {int(positions[0, 1])}"
    raise ValueError(
        f"{owner}: non-finite {what} ({first}) at {len(positions)}{valid} position(s) in {rows} row(s); first at {where}. "
        f"Look at {SOURCES.get(what, 'where it was computed')}."
    )


def _uid(uids: Sequence[Any], row: int) -> Any:
    try:
        value = uids[row]
    except (IndexError, TypeError, KeyError):
        return "?"
    return value.item() if hasattr(value, "item") else value
