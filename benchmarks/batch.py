"""Benchmark batches: the named sizes, and a reproducible verl-like batch (lengths, scores, entropies, token ids)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

import numpy as np
import torch


# ----------------------------------------------------------------------------- batch layout

GROUP_SIZE = 16
VOCAB_SIZE = 150_000
SHARED_PREFIX = 16  # tokens every response of a group starts with
SHARED_SUFFIX = 4  # tokens every response of a group ends with (before its padding)
PAD_ID = 0
FULL_LENGTH_FRACTION = 0.1

SIZES: dict[str, list[tuple[int, int, int]]] = {
    "small": [(8, GROUP_SIZE, 256)],
    "default": [(64, GROUP_SIZE, 1024), (128, GROUP_SIZE, 4096)],
    "all": [(64, GROUP_SIZE, 1024), (128, GROUP_SIZE, 4096), (32, GROUP_SIZE, 20480)],
    # the papers' own batch: 512 prompts x 16 responses, up to 20,480 tokens
    "papers": [(512, GROUP_SIZE, 20480)],
}
# shortest response of a size (default T/4); the papers' batch draws lengths uniform in 1,000-20,480
MIN_LENGTHS: dict[tuple[int, int, int], int] = {(512, GROUP_SIZE, 20480): 1000}


def size_label(size: tuple[int, int, int]) -> str:
    return "x".join(str(s) for s in size)


def parse_size(text: str) -> tuple[int, int, int]:
    parts = tuple(int(p) for p in text.lower().split("x"))
    if len(parts) != 3 or min(parts) <= 0:
        raise argparse.ArgumentTypeError(f"size {text!r} is not PROMPTSxGROUPxLENGTH, e.g. 128x16x4096")
    return parts  # type: ignore[return-value]


@dataclass
class Batch:
    """One verl-like batch: B = prompts * group rows, T response positions, rows shuffled."""

    token_level_rewards: torch.Tensor  # (B, T) float32, the 0/1 score on the last valid token
    response_mask: torch.Tensor  # (B, T) int64, right-padded
    entropys: torch.Tensor  # (B, T) float32 in [0, 3]
    responses: torch.Tensor  # (B, T) int64 token ids, PAD_ID after each response
    uids: np.ndarray  # (B,) object array of str, like verl's non_tensor_batch["uid"]
    size: tuple[int, int, int]

    @property
    def numel(self) -> int:
        return self.response_mask.numel()

    def tensors(self) -> dict[str, torch.Tensor]:
        return {
            "token_level_rewards": self.token_level_rewards,
            "response_mask": self.response_mask,
            "entropys": self.entropys,
            "responses": self.responses,
        }

    def to(self, device: torch.device) -> "Batch":
        """A copy on ``device`` (a real copy even when ``device`` is where the batch already is)."""
        moved = {k: v.to(device, copy=True) for k, v in self.tensors().items()}
        return Batch(**moved, uids=self.uids.copy(), size=self.size)


def traffic_floor_bytes(batch: Batch, inputs: tuple[str, ...] = ()) -> int:
    """Bytes an ideal estimator moves: the token rewards, the mask and each ``(B, T)`` input in
    ``inputs`` (``"entropys"``, ``"responses"``) read once, the float32 output written once."""
    nbytes = lambda t: t.numel() * t.element_size()  # noqa: E731
    total = nbytes(batch.token_level_rewards) + nbytes(batch.response_mask)
    return total + sum(nbytes(getattr(batch, name)) for name in inputs) + batch.numel * 4


def streaming_pass(batch: Batch):
    """A fused ``torch.add`` over ``(B, T)`` float32 (two reads, one write, pages already touched),
    and the bytes it moves: timed beside the candidates, it gives the streaming bandwidth of the run."""
    shape, device = tuple(batch.response_mask.shape), batch.response_mask.device
    a = torch.rand(shape, device=device)
    b, c = torch.rand_like(a), torch.zeros_like(a)
    return (lambda: torch.add(a, b, out=c)), 3 * a.numel() * a.element_size()


def make_batch(prompts: int, group: int, length: int, *, seed: int = 0, device: str | torch.device = "cpu") -> Batch:
    """Build a reproducible batch (generated on CPU, then moved to ``device``).

    - lengths uniform in [T/4, T] (``MIN_LENGTHS`` for the papers' size), about 10 % of rows
      exactly T (no padding);
    - about half of each group is correct (Bernoulli(0.5) score on the last valid token);
    - entropies in [0, 3]: uniform per token times a per-row level in [0, 1], so row means
      spread over [0, 1.5] and the gtpo_traj entropy filter (threshold 0.7 / ln 2) keeps
      about half the rows instead of none;
    - token ids uniform in [1, 150000), every row of a group starting with the group's 16
      prefix tokens and ending with its 4 suffix tokens (realistic conflict runs for gtpo_traj).
    """
    gen = torch.Generator().manual_seed(seed)
    rows = prompts * group
    # rows in shuffled group order, built in place (no permuted copies: the papers' batch is 4 GB)
    group_of_row = (torch.arange(rows) // group)[torch.randperm(rows, generator=gen)]
    shortest = MIN_LENGTHS.get((prompts, group, length), max(1, length // 4))
    lengths = torch.randint(shortest, length + 1, (rows,), generator=gen)
    lengths = torch.where(torch.rand(rows, generator=gen) < FULL_LENGTH_FRACTION, length, lengths)
    positions = torch.arange(length)
    response_mask = (positions.unsqueeze(0) < lengths.unsqueeze(1)).to(torch.int64)

    scores = (torch.rand(rows, generator=gen) < 0.5).to(torch.float32)
    token_level_rewards = torch.zeros(rows, length, dtype=torch.float32)
    token_level_rewards[torch.arange(rows), lengths - 1] = scores

    row_level = torch.rand(rows, 1, generator=gen)
    entropys = torch.rand(rows, length, generator=gen).mul_(3.0).mul_(row_level)

    responses = torch.randint(1, VOCAB_SIZE, (rows, length), generator=gen, dtype=torch.int64)
    prefix = torch.randint(1, VOCAB_SIZE, (prompts, SHARED_PREFIX), generator=gen, dtype=torch.int64)
    suffix = torch.randint(1, VOCAB_SIZE, (prompts, SHARED_SUFFIX), generator=gen, dtype=torch.int64)
    width = min(SHARED_PREFIX, length)
    responses[:, :width] = prefix[group_of_row, :width]
    suffix_cols = (lengths.unsqueeze(1) - SHARED_SUFFIX + torch.arange(SHARED_SUFFIX)).clamp_min(0)
    responses.scatter_(1, suffix_cols, suffix[group_of_row])
    responses.masked_fill_(response_mask == 0, PAD_ID)

    del positions
    uids = np.array([f"uid{g}" for g in group_of_row.tolist()], dtype=object)
    batch = Batch(
        token_level_rewards=token_level_rewards,
        response_mask=response_mask,
        entropys=entropys,
        responses=responses,
        uids=uids,
        size=(prompts, group, length),
    )
    return batch.to(torch.device(device)) if torch.device(device).type != "cpu" else batch
