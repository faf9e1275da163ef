"""A task's warm start, profiled: the entropy profile of its first training batches and, for a task
with grammar roles, where its entropy sits (decision, forced, off the grammar).

``warm_start_profile`` pools one first batch (``prompts`` × ``group`` responses, the sampler of
step 1) per seed, after each seed's warm start; the profile's definitions are
``gtpo_verl.lab.entropy_profile``'s, the ones docs/real_lm.md applies to a real LM's batches.

``mechanism_check`` is the pre-registered test of a Paper B task, run before any study uses it:
on one seed's first batch at group size 16, GTPO-token's bonus (Eq. S18's column share, through
``train.gtpo_bonus_shares``, the lab's ``bonus_decision_share``) must put at least
``MECHANISM_MIN_RATIO`` times their token share on decision tokens, or the task is not used. Eq.
S18's bonus sums to d_t over each column t of a group's successes, so it can favour decisions only
where a column mixes decisions and lower-entropy tokens. The warm start's entropy profile, pass
rate and length are reported next to their targets (``PROFILE_TARGETS``), not part of the verdict.

    python -m gtpo_verl.lab --check-mechanism --tasks unary_chain --first-seed 0
"""

from __future__ import annotations

import random
from typing import Optional, Sequence

import numpy as np
import torch

from gtpo_verl.lab.entropy_profile import DELTA_OFFICIAL, delta_filter, entropy_profile
from gtpo_verl.lab.policy import TinyCausalLM, init_seed, score
from gtpo_verl.lab.tasks import EOS_ID, ROLE_DECISION, ROLE_FORCED, ROLE_OFF, TASKS, PromptStream, Task, prompt_tensor
from gtpo_verl.lab.train import (
    SALT_PROMPTS, SALT_SAMPLER, LabSize, _rollout, gtpo_bonus_shares, policy_size, warm_start, warm_start_steps,
)

ROLE_NAMES = {ROLE_DECISION: "decision", ROLE_FORCED: "forced", ROLE_OFF: "off_grammar"}
MECHANISM_MIN_RATIO = 1.2
"""Pre-registered: Eq. S18's bonus share on decisions ≥ this × the decisions' share of the success tokens."""
MECHANISM_GROUP = 16
"""Pre-registered: responses per prompt of the checked batch."""
STUDY_METHODS = ("DAPO", "DAPO_TWIN", "DAPO_TOKEN", "DAPO_TOKEN_ROW", "DAPO_SEQ")
"""Paper B's study on a task that passed the check (docs/lab.md): DAPO and its null twin, GTPO-token with the column
share (S18) and the row share (S20), GRPO-S; at ``MECHANISM_GROUP`` responses per prompt."""
PROFILE_TARGETS = {"share_above_0.7": 0.2, "median_below": DELTA_OFFICIAL, "pass_rate": (0.3, 0.7), "length": (20, 40)}
"""Reported next to the check, not part of its verdict: about a reasoning LLM's 20 % of tokens above 0.7 nats,
a median well below 0.7, a training pass rate in 0.3–0.7, responses of 20–40 tokens."""


def first_batch(task: Task, seed: int, size: LabSize, weights: Optional[dict] = None):
    """``(prompts, responses, mask, scored, entropy)`` of the seed's first training batch after its warm start
    (step 1's prompts and sampler stream; ``weights`` or a fresh warm start)."""
    model = TinyCausalLM(task.vocab_size, policy_size(task, size))
    model.load_state_dict(weights if weights is not None else warm_start(task, seed, size))
    problems = PromptStream(task, init_seed(seed, SALT_PROMPTS)).take(size.prompts)
    generator = torch.Generator().manual_seed(init_seed(seed, SALT_SAMPLER))
    with torch.no_grad():
        prompts, responses, mask, scored = _rollout(model, task, problems, size.group, size.temperature, generator)
        _, entropy = score(model, prompts, responses, size.temperature)
    return prompts, responses, mask, scored, entropy


def warm_start_batches(task_name: str, seeds: Sequence[int], size: LabSize = LabSize(),
                       weights: Optional[dict] = None) -> tuple[np.ndarray, np.ndarray, Optional[np.ndarray]]:
    """``(entropy, mask, roles)`` ``(N, T)`` in float64 / int64 of each seed's first batch after its warm start, pooled."""
    task = TASKS[task_name]
    entropies, masks, roles = [], [], []
    for seed in seeds:
        prompts, responses, mask, _, entropy = first_batch(task, seed, size, None if weights is None else weights[seed])
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


def decision_bonus_check(entropy: torch.Tensor, mask: torch.Tensor, acc: torch.Tensor, roles: torch.Tensor, group: int) -> dict:
    """Eq. S18's bonus share on decision tokens against their share of the success tokens, and the verdict.

    Over the groups with mixed outcomes only: the ones dynamic sampling keeps, so the only ones whose
    bonus reaches DAPO_TOKEN's update (an all-success group's S18 bonus is trained on by no method here).
    The shares are ``train.gtpo_bonus_shares``'s, the lab's ``bonus_decision_share`` and
    ``decision_share_of_success_tokens``; successes are ``acc > 0``.
    """
    outcome = acc.view(-1, group)
    mixed = ~(outcome == outcome[:, :1]).all(1)
    rows = (mixed.nonzero()[:, 0, None] * group + torch.arange(group)[None]).flatten()
    share, token_share = gtpo_bonus_shares(entropy[rows], mask[rows], acc[rows] > 0, roles[rows], group)
    ratio = share / token_share if token_share > 0 else float("nan")
    return {"bonus_on_decisions": share, "decision_token_share": token_share, "ratio": ratio,
            "min_ratio": MECHANISM_MIN_RATIO, "passed": bool(ratio >= MECHANISM_MIN_RATIO),
            "mixed_groups": int(mixed.sum()), "groups": int(mixed.numel())}


def mechanism_check(task_name: str, seed: int = 0, size: Optional[LabSize] = None, weights: Optional[dict] = None) -> dict:
    """The pre-registered mechanism check (module docstring) on ``seed``'s first batch after its warm start.

    ``size`` defaults to the lab's sizes with ``MECHANISM_GROUP`` responses per prompt (and the task's own
    warm-start length, ``train.warm_start_steps``; ``warm_start_steps`` in the result is the one used). Returns
    ``decision_bonus_check``'s shares and verdict, the batch's entropy profile (``entropy_profile``),
    role profile, pass rate (``acc``) and ``PROFILE_TARGETS``.
    """
    task = TASKS[task_name]
    probe = prompt_tensor(task, [task.sample_problem(random.Random(0))])
    if task.token_roles(probe, torch.full((1, 1), EOS_ID), torch.ones(1, 1)) is None:  # before the warm start's cost
        raise ValueError(f"task {task_name!r} gives its tokens no grammar roles: the mechanism check needs decisions")
    size = size if size is not None else LabSize(group=MECHANISM_GROUP)
    prompts, responses, mask, scored, entropy = first_batch(task, seed, size, weights)
    roles = task.token_roles(prompts, responses, mask)
    acc = torch.tensor([s.acc for s in scored])
    entropy64, mask64 = entropy.double().numpy(), mask.numpy()
    return {"task": task_name, "seed": seed, "prompts": size.prompts, "group": size.group,
            "warm_start_steps": warm_start_steps(task, size) if weights is None else None,
            **decision_bonus_check(entropy, mask, acc, roles, size.group),
            "pass_rate": float(acc.mean()), "profile": entropy_profile(entropy64, mask64),
            "roles": role_profile(entropy64, mask64, roles.numpy()), "targets": PROFILE_TARGETS}


__all__ = ["warm_start_batches", "warm_start_profile", "role_profile", "first_batch", "decision_bonus_check", "mechanism_check",
           "MECHANISM_MIN_RATIO", "MECHANISM_GROUP", "PROFILE_TARGETS"]
