"""A tiny causal transformer in plain torch: KV-cached sampling, and old log-probs / entropy as verl's actor computes them.

verl's actor divides the logits by the rollout temperature, then takes
``verl.utils.torch_functional.logprobs_from_logits`` and ``entropy_from_logits`` of them
(``workers/actor/dp_actor.py``); ``score`` does exactly that, with verl's functions.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class PolicySize:
    """Width and depth of the tiny policy."""

    d_model: int = 32
    n_layers: int = 1
    n_heads: int = 4
    max_len: int = 32


class _Block(nn.Module):
    def __init__(self, size: PolicySize):
        super().__init__()
        self.n_heads = size.n_heads
        self.ln1 = nn.LayerNorm(size.d_model)
        self.qkv = nn.Linear(size.d_model, 3 * size.d_model)
        self.proj = nn.Linear(size.d_model, size.d_model)
        self.ln2 = nn.LayerNorm(size.d_model)
        self.mlp = nn.Sequential(nn.Linear(size.d_model, 4 * size.d_model), nn.GELU(), nn.Linear(4 * size.d_model, size.d_model))

    def _heads(self, x: torch.Tensor) -> torch.Tensor:  # (B, L, D) → (B, H, L, D/H)
        b, l, d = x.shape
        return x.view(b, l, self.n_heads, d // self.n_heads).transpose(1, 2)

    def forward(self, x: torch.Tensor, cache: dict | None = None, start: int = 0) -> torch.Tensor:
        q, k, v = self.qkv(self.ln1(x)).chunk(3, dim=-1)
        q, k, v = self._heads(q), self._heads(k), self._heads(v)
        if cache is None:
            attn = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # preallocated (B, H, prompt + new tokens, D/H) buffers: positions [start, start + L) are written once
            end = start + q.shape[2]
            cache["k"][:, :, start:end] = k
            cache["v"][:, :, start:end] = v
            if start == 0:
                attn = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:  # one new position attends to every cached one: no mask; at this size two
                # broadcast products beat the fused kernel's per-call cost
                keys, values = cache["k"][:, :, :end], cache["v"][:, :, :end]
                weights = torch.softmax((q * keys).sum(-1, keepdim=True) * q.shape[-1] ** -0.5, dim=2)
                attn = (weights * values).sum(2, keepdim=True)
        b, h, l, dh = attn.shape
        x = x + self.proj(attn.transpose(1, 2).reshape(b, l, h * dh))
        return x + self.mlp(self.ln2(x))


class TinyCausalLM(nn.Module):
    """Token + position embeddings, pre-LN blocks, a tied-free output head; logits ``(B, L, V)``."""

    def __init__(self, vocab_size: int, size: PolicySize = PolicySize()):
        super().__init__()
        self.size = size
        self.tok = nn.Embedding(vocab_size, size.d_model)
        self.pos = nn.Embedding(size.max_len, size.d_model)
        self.blocks = nn.ModuleList(_Block(size) for _ in range(size.n_layers))
        self.ln = nn.LayerNorm(size.d_model)
        self.head = nn.Linear(size.d_model, vocab_size)

    def forward(self, ids: torch.Tensor, caches: list | None = None, start: int = 0) -> torch.Tensor:
        positions = torch.arange(start, start + ids.shape[1])
        x = self.tok(ids) + self.pos(positions)[None]
        for i, block in enumerate(self.blocks):
            x = block(x, None if caches is None else caches[i], start)
        return self.head(self.ln(x))


@torch.inference_mode()
def sample(
    model: TinyCausalLM,
    prompts: torch.Tensor,
    max_new_tokens: int,
    eos_id: int,
    pad_id: int,
    temperature: float,
    generator: torch.Generator,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample responses ``(B, T)`` (pad after EOS) and their mask ``(B, T)`` (1 up to and including EOS).

    Each token is drawn by inverting the CDF of softmax(logits / temperature) at one uniform from
    ``generator``, so a policy that has not changed draws the same tokens from the same seed.

    ``prompts`` ``(B, P)`` all have the same length (the lab's tasks use fixed-length prompts),
    so the batch needs no left padding. One forward per new token, with a key/value cache.
    """
    batch = prompts.shape[0]
    size = model.size
    shape = (batch, size.n_heads, prompts.shape[1] + max_new_tokens, size.d_model // size.n_heads)
    caches = [dict(k=torch.empty(shape), v=torch.empty(shape)) for _ in model.blocks]
    logits = model(prompts, caches, start=0)[:, -1]
    done = torch.zeros(batch, dtype=torch.bool)
    tokens, masks = [], []
    for step in range(max_new_tokens):
        probs = torch.softmax(logits / temperature, dim=-1)
        # inverse-CDF draw: one uniform per row and position whatever the probabilities, so the
        # same generator seed gives a frozen policy the same samples (fixed-sample validation)
        uniform = torch.rand(batch, 1, generator=generator)
        token = (torch.cumsum(probs, dim=-1) < uniform).sum(-1).clamp_max(probs.shape[-1] - 1)
        token = torch.where(done, torch.full_like(token, pad_id), token)
        masks.append(~done)
        tokens.append(token)
        done = done | (token == eos_id)
        if bool(done.all()) or step == max_new_tokens - 1:
            break
        logits = model(token[:, None], caches, start=prompts.shape[1] + step)[:, -1]
    return torch.stack(tokens, dim=1), torch.stack(masks, dim=1).to(torch.int64)


def score(
    model: TinyCausalLM, prompts: torch.Tensor, responses: torch.Tensor, temperature: float, with_entropy: bool = True
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Per-token log-probs and entropy ``(B, T)`` of ``responses`` given ``prompts``, as verl's actor computes them."""
    from verl.utils.torch_functional import entropy_from_logits, logprobs_from_logits

    ids = torch.cat([prompts, responses], dim=1)
    logits = model(ids[:, :-1])[:, prompts.shape[1] - 1 :]  # position t predicts response token t
    logits = logits / temperature  # verl: logits.div_(temperature)
    # verl's fallback takes one logsumexp per row of the first dimension; all tokens as one row give
    # the same values in one call
    log_probs = logprobs_from_logits(logits.reshape(1, -1, logits.shape[-1]), responses.reshape(1, -1)).view_as(responses)
    entropy = entropy_from_logits(logits) if with_entropy else None
    return log_probs, entropy


def parameter_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def init_seed(seed: int, salt: int) -> int:
    """A per-purpose seed derived from the run seed (warm start, prompt stream, sampler, validation)."""
    return (seed * 1_000_003 + salt * 7919) % (2**31 - 1)


__all__ = ["PolicySize", "TinyCausalLM", "sample", "score", "parameter_count", "init_seed"]
