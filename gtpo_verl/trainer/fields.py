"""Reading verl's TransferQueue fields in the TaskRunner: nested (jagged) response-only tensors as
``(B, T)`` right-padded ones, and which rows are verl's synthetic padding rows."""

from __future__ import annotations

import torch


def padded(value: torch.Tensor) -> torch.Tensor:
    """A nested (jagged) field as a right-padded ``(B, T)`` tensor (zeros after each row); others as they are."""
    return value.to_padded_tensor(0) if getattr(value, "is_nested", False) else value


def real_rows(batch) -> torch.Tensor:
    """``(B,)`` bool: False for the synthetic padding rows verl's V1 trainer adds (``tags[i]["is_padding"]``)."""
    return torch.tensor([not tag.get("is_padding", False) for tag in batch.tags], dtype=torch.bool)


def response_mask_like(nested: torch.Tensor, padded_value: torch.Tensor) -> torch.Tensor:
    """The right-padded response mask of a nested response-only field (from its lengths), float32.

    float32 because every consumer (diagnostics, entropy watch, ⟨H⟩_ini) multiplies by it: one
    conversion here instead of one per consumer (an int64 (B, T) mask costs 8 bytes a position).
    """
    if not getattr(nested, "is_nested", False):
        return torch.ones(padded_value.shape, dtype=torch.float32)
    lengths = nested.offsets().diff()
    return (torch.arange(padded_value.shape[-1]).unsqueeze(0) < lengths.unsqueeze(1)).to(torch.float32)
