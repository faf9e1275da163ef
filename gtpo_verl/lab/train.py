"""One lab run: warm start, then RL steps (sample → reward → dynamic sampling → old log-probs →
advantages → mini-batch updates), validating on the fixed set every ``eval_every`` steps.

A seed fixes the warm start, the prompt stream and the sampler RNG; every method of that seed
starts from the same weights and reads the same prompts in the same order.
"""

from __future__ import annotations

import functools
import random
from dataclasses import asdict, dataclass
from typing import Callable, Optional

import numpy as np
import torch

from gtpo_verl.lab.methods import Method
from gtpo_verl.lab.policy import PolicySize, TinyCausalLM, init_seed, sample, score
from gtpo_verl.lab.tasks import EOS_ID, MAX_RESPONSE_TOKENS, PAD_ID, VOCAB, PromptStream, Task, decode_response, prompt_tensor, validation_problems
from gtpo_verl.lab.update import actor_config, compute_advantages, policy_loss

SALT_WARM_START, SALT_PROMPTS, SALT_SAMPLER, SALT_VALIDATION = 1, 2, 3, 4
PASS_KS = (1, 2, 4, 8, 16)


@dataclass(frozen=True)
class LabSize:
    """Every size of a lab run (stated in results.json)."""

    steps: int = 400
    prompts: int = 8
    """Prompts per training batch (after dynamic sampling)."""
    group: int = 8
    """Responses per prompt (``rollout.n``)."""
    lr: float = 1e-3
    temperature: float = 1.0
    eval_every: int = 25
    eval_prompts: int = 32
    eval_samples: int = 16
    gen_batch_multiplier: int = 2
    """With dynamic sampling, prompts per generation batch = this × ``prompts`` (the DAPO recipe's gen_prompt_bsz uses 3)."""
    max_refills: int = 1
    """Dynamic sampling draws at most this many extra generation batches per step (verl's max_num_gen_batches − 1)."""
    warm_start_steps: int = 150
    warm_start_batch: int = 64
    warm_start_lr: float = 3e-3
    grad_clip: float = 1.0
    policy: PolicySize = PolicySize()


def warm_start(task: Task, seed: int, size: LabSize) -> dict:
    """Weights after supervised learning on the task's noisy demonstrations (a state_dict; seeded)."""
    torch.manual_seed(init_seed(seed, SALT_WARM_START))
    rng = random.Random(init_seed(seed, SALT_WARM_START))
    model = TinyCausalLM(len(VOCAB), size.policy)
    optimizer = torch.optim.Adam(model.parameters(), lr=size.warm_start_lr, fused=True)
    for _ in range(size.warm_start_steps):
        problems = [task.sample_problem(rng) for _ in range(size.warm_start_batch)]
        prompts = prompt_tensor(task, problems)
        demos = [task.demonstration(p, rng) for p in problems]
        width = max(map(len, demos))
        responses = torch.tensor([d + [PAD_ID] * (width - len(d)) for d in demos])
        mask = torch.tensor([[1] * len(d) + [0] * (width - len(d)) for d in demos], dtype=torch.float32)
        log_probs, _ = score(model, prompts, responses, 1.0, with_entropy=False)
        loss = -(log_probs * mask).sum() / mask.sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return {k: v.clone() for k, v in model.state_dict().items()}


@functools.lru_cache(maxsize=1 << 16)
def _score(task: Task, response: tuple[int, ...], problem: tuple[int, ...]):
    # a sharpening policy repeats its responses: each (response, problem) is parsed once
    return task.score(decode_response(response), problem)


def _rollout(model, task: Task, problems, group: int, temperature: float, generator):
    prompts = prompt_tensor(task, problems).repeat_interleave(group, dim=0)
    responses, mask = sample(model, prompts, MAX_RESPONSE_TOKENS, EOS_ID, PAD_ID, temperature, generator)
    scored = [_score(task, tuple(row), problems[i // group]) for i, row in enumerate(responses.tolist())]
    return prompts, responses, mask, scored


def _pad_cat(tensors: list[torch.Tensor], fill: int = 0) -> torch.Tensor:
    width = max(t.shape[1] for t in tensors)
    return torch.cat([torch.nn.functional.pad(t, (0, width - t.shape[1]), value=fill) for t in tensors])


def validate(model, task: Task, size: LabSize, seed: int, step: int) -> dict[str, float]:
    """Unbiased pass@k (``gtpo_verl.algorithms.pass_at_k``), maj@n and distinct answers per prompt on the fixed set."""
    from gtpo_verl.algorithms.pass_at_k import majority_success, pass_at_k

    problems = validation_problems(task, size.eval_prompts)
    generator = torch.Generator().manual_seed(init_seed(seed, SALT_VALIDATION) + step)
    _, responses, mask, scored = _rollout(model, task, problems, size.eval_samples, size.temperature, generator)
    n = size.eval_samples
    acc = np.array([s.acc for s in scored]).reshape(-1, n)
    preds = [s.pred if s.pred is not None else "" for s in scored]
    problem = np.repeat(np.arange(len(problems)), n)
    out = {f"pass@{k}": pass_at_k(np.full(len(problems), n), acc.sum(1).astype(np.int64), k) for k in PASS_KS if k <= n}
    out[f"maj@{n}"] = float(np.mean(majority_success(problem, preds, acc.reshape(-1), len(problems))))
    grouped = [preds[i * n : (i + 1) * n] for i in range(len(problems))]
    correct = [[p for p, a in zip(g, acc[i]) if a > 0] for i, g in enumerate(grouped)]
    out["distinct_answers"] = float(np.mean([len(set(g)) for g in grouped]))
    out["distinct_correct"] = float(np.mean([len(set(c)) for c in correct]))
    out["length"] = float(mask.sum(1).float().mean())
    return out


def _token_mean(values: torch.Tensor, mask: torch.Tensor) -> float:
    return float((values * mask).sum() / mask.sum().clamp_min(1))


HEALTH_KEYS = {
    "gtpo/delta/filtered_frac": "delta_filtered_frac",
    "gtpo/transform/entropy_advantage/clipped_fraction": "bonus_clipped_frac",
    "gtpo/transform/high_entropy_tokens/kept_fraction": "high_entropy_kept_frac",
    "gtpo/conflict/pos_token_frac": "conflict_pos_token_frac",
}


def train_run(
    method: Method,
    task: Task,
    seed: int,
    size: LabSize,
    initial_weights: Optional[dict] = None,
    on_step: Optional[Callable[[], None]] = None,
) -> dict:
    """Train one (method, task, seed); returns its curves, validations and sizes (results.json's ``runs`` entry)."""
    weights = initial_weights if initial_weights is not None else warm_start(task, seed, size)
    model = TinyCausalLM(len(VOCAB), size.policy)
    model.load_state_dict(weights)
    optimizer = torch.optim.Adam(model.parameters(), lr=size.lr, fused=True)
    stream = PromptStream(task, init_seed(seed, SALT_PROMPTS))
    generator = torch.Generator().manual_seed(init_seed(seed, SALT_SAMPLER))
    config = actor_config(method)
    curves: dict[str, list[float]] = {k: [] for k in ("reward", "entropy", "length", "clipfrac", "all_equal_frac", "kept_groups", *HEALTH_KEYS.values())}
    validations = [dict(step=0, **validate(model, task, size, seed, 0))]
    initial_entropy = None
    for step in range(1, size.steps + 1):
        kept, sampled_groups, equal_groups, rewards_seen, entropy_seen, lengths_seen = [], 0, 0, [], [], []
        for draw in range(1 + (size.max_refills if method.dynamic_sampling else 0)):
            problems = stream.take(size.prompts * (size.gen_batch_multiplier if method.dynamic_sampling else 1))
            prompts, responses, mask, scored = _rollout(model, task, problems, size.group, size.temperature, generator)
            acc = torch.tensor([s.acc for s in scored]).view(-1, size.group)
            equal = (acc == acc[:, :1]).all(1)
            sampled_groups += len(problems)
            equal_groups += int(equal.sum())
            rewards_seen.append(acc.mean())
            lengths_seen.append(mask.sum(1).float().mean())
            keep = ~equal if method.dynamic_sampling else torch.ones_like(equal)
            for g in torch.nonzero(keep).flatten().tolist():
                rows = slice(g * size.group, (g + 1) * size.group)
                reward = [s.paper_a_score if method.reward == "paper_a" else s.acc for s in scored[rows]]
                kept.append((f"{step}-{draw}-{g}", prompts[rows], responses[rows], mask[rows], reward))
            if len(kept) >= size.prompts:
                break
        kept = kept[: size.prompts]
        stats = {"reward": float(torch.stack(rewards_seen).mean()), "length": float(torch.stack(lengths_seen).mean()),
                 "all_equal_frac": equal_groups / sampled_groups, "kept_groups": float(len(kept))}
        metrics: dict[str, float] = {}
        clipfracs = []
        if kept:
            prompts = torch.cat([k[1] for k in kept])
            responses = _pad_cat([k[2] for k in kept], PAD_ID)
            mask = _pad_cat([k[3] for k in kept])
            uids = np.array([k[0] for k in kept for _ in range(size.group)], dtype=object)
            scores = torch.tensor([r for k in kept for r in k[4]], dtype=torch.float32)
            lengths = mask.sum(1)
            token_level_rewards = torch.zeros(mask.shape, dtype=torch.float32)
            token_level_rewards[torch.arange(len(lengths)), lengths - 1] = scores  # verl: score on the last valid token
            with torch.no_grad():  # the old-log-prob pass (π_θold = the sampling policy)
                old_log_probs, entropys = score(model, prompts, responses, size.temperature)
            entropy_seen = _token_mean(entropys, mask.float())
            if initial_entropy is None:  # ⟨H⟩_ini: mean of per-response mean entropy on the first batch
                initial_entropy = float(((entropys * mask).sum(1) / lengths.clamp_min(1)).mean())
            adv = compute_advantages(method, token_level_rewards, mask, uids, entropys, responses, old_log_probs, initial_entropy)
            metrics.update(adv.metrics)
            order = torch.randperm(len(kept), generator=generator)
            chunks = order.chunk(min(method.mini_batches, len(kept)))
            for _ in range(method.ppo_epochs):
                for chunk in chunks:
                    rows = (chunk[:, None] * size.group + torch.arange(size.group)[None]).flatten()
                    log_probs, _ = score(model, prompts[rows], responses[rows], size.temperature, with_entropy=False)
                    loss, loss_metrics = policy_loss(config, old_log_probs[rows], log_probs, adv.advantages[rows], adv.response_mask[rows])
                    optimizer.zero_grad()
                    loss.backward()
                    torch.nn.utils.clip_grad_norm_(model.parameters(), size.grad_clip)
                    optimizer.step()
                    clipfracs.append(loss_metrics.get("actor/pg_clipfrac", 0.0))
        stats["entropy"] = entropy_seen if kept else float("nan")
        stats["clipfrac"] = float(np.mean(clipfracs)) if clipfracs else 0.0
        for key, name in HEALTH_KEYS.items():
            stats[name] = float(metrics[key]) if key in metrics else float("nan")
        for key, value in stats.items():
            curves[key].append(round(value, 5))
        if step % size.eval_every == 0 or step == size.steps:
            validations.append(dict(step=step, **validate(model, task, size, seed, step)))
        if on_step is not None:
            on_step()
    return {"method": method.name, "task": task.name, "seed": seed, "initial_entropy": initial_entropy,
            "curves": curves, "validation": validations}


def size_dict(size: LabSize) -> dict:
    return asdict(size)
