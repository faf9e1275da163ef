"""A task's warm start, profiled: the entropy profile of its first training batches and, for a task
with grammar roles, where its entropy sits (decision, forced, off the grammar).

``warm_start_profile`` pools one first batch (``prompts`` × ``group`` responses, the sampler of
step 1) per seed, after each seed's warm start; the profile's definitions are
``gtpo_verl.lab.entropy_profile``'s, the ones docs/real_lm.md applies to a real LM's batches.
"""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np
import torch

from gtpo_verl.lab.entropy_profile import delta_filter, entropy_profile
from gtpo_verl.lab.policy import TinyCausalLM, init_seed, score
from gtpo_verl.lab.tasks import ROLE_DECISION, ROLE_FORCED, ROLE_OFF, TASKS, VOCAB, PromptStream
from gtpo_verl.lab.train import SALT_PROMPTS, SALT_SAMPLER, LabSize, _rollout, warm_start

ROLE_NAMES = {ROLE_DECISION: "decision", ROLE_FORCED: "forced", ROLE_OFF: "off_grammar"}


def warm_start_batches(task_name: str, seeds: Sequence[int], size: LabSize = LabSize(),
                       weights: Optional[dict] = None) -> tuple[np.ndarray, np.ndarray, Optional[np.ndarray]]:
    """``(entropy, mask, roles)`` ``(N, T)`` in float64 / int64 of each seed's first batch after its warm start, pooled."""
    task = TASKS[task_name]
    entropies, masks, roles = [], [], []
    for seed in seeds:
        model = TinyCausalLM(len(VOCAB), size.policy)
        model.load_state_dict(weights[seed] if weights is not None else warm_start(task, seed, size))
        problems = PromptStream(task, init_seed(seed, SALT_PROMPTS)).take(size.prompts)
        generator = torch.Generator().manual_seed(init_seed(seed, SALT_SAMPLER))
        with torch.no_grad():
            prompts, responses, mask, _ = _rollout(model, task, problems, size.group, size.temperature, generator)
            _, entropy = score(model, prompts, responses, size.temperature)
        entropies.append(entropy.double().numpy())
        masks.append(mask.numpy())
        role = task.token_roles(prompts, responses, mask)
        roles.append(None if role is None else role.numpy())
    width = max(e.shape[1] for e in entropies)

    def pooled(arrays):
        return np.concatenate([np.pad(a, ((0, 0), (0, width - a.shape[1]))) for a in arrays])

    return pooled(entropies), pooled(masks), None if roles[0] is None else pooled(roles)


def role_profile(entropy: np.ndarray, mask: np.ndarray, roles: np.ndarray) -> dict:
    """Per role: its share of the valid tokens, its share of their summed entropy, its mean entropy."""
    valid = mask > 0
    total_tokens, total_entropy = valid.sum(), np.where(valid, entropy, 0.0).sum()
    out = {}
    for code, name in ROLE_NAMES.items():
        selected = valid & (roles == code)
        count = int(selected.sum())
        out[name] = {"token_share": count / total_tokens, "entropy_share": float(entropy[selected].sum() / total_entropy),
                     "mean_entropy": float(entropy[selected].mean()) if count else float("nan")}
    return out


def warm_start_profile(task_name: str, seeds: Sequence[int], size: LabSize = LabSize(), weights: Optional[dict] = None) -> dict:
    """The entropy profile, δ's filtered shares and (tasks with roles) the role profile of the warm start."""
    entropy, mask, roles = warm_start_batches(task_name, seeds, size, weights)
    out = {"task": task_name, "seeds": list(seeds), "profile": entropy_profile(entropy, mask), "delta": delta_filter(entropy, mask)}
    if roles is not None:
        out["roles"] = role_profile(entropy, mask, roles)
    return out


__all__ = ["warm_start_batches", "warm_start_profile", "role_profile"]
