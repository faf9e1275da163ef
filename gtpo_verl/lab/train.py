"""One lab run: warm start, then RL steps (sample → reward → dynamic sampling → old log-probs →
advantages → mini-batch updates), validating on the fixed set every ``eval_every`` steps.

A seed fixes the warm start, the prompt stream, the sampler RNG, torch's global RNG (verl's
Clip-Cov draws from it) and the validation samples; every
method of that seed starts from the same weights and reads the same prompts in the same order.

Per step, every method is measured on the same population: the responses to the step's first
``prompts`` prompts (the training batch verl's V1 trainer dispatches first), before dynamic
sampling drops or adds any group. ``reward``, ``entropy`` (token mean of the old-policy entropy),
``entropy_decision`` / ``entropy_forced`` (the same over the tokens of each grammar role, tasks
with roles only), ``length`` and ``all_equal_frac`` are that population's. ``kept_groups``,
``prompts_sampled`` and ``stalled`` describe dynamic sampling (``gtpo_verl/lab/schedule.py``);
``bonus_decision_share`` is the share of GTPO-token's entropy bonus (Eq. S18) on decision tokens
of the trained batch's successes, next to ``decision_share_of_success_tokens``, those tokens' share.

Validation draws the same uniforms at every validation (``SALT_VALIDATION`` and the seed only,
inverse-CDF sampling in ``policy.sample``): a policy that has not changed scores the same, so a
fall of validation pass@1 is a change of the policy, never a fresh draw.
"""

from __future__ import annotations

import dataclasses
import functools
import random
from dataclasses import asdict, dataclass
from typing import Callable, Optional

import numpy as np
import torch

from gtpo_verl.algorithms.token_shaping import column_share
from gtpo_verl.algorithms.trajectory import initial_entropy as measured_initial_entropy
from gtpo_verl.lab.methods import Method
from gtpo_verl.lab.policy import PolicySize, TinyCausalLM, init_seed, sample, score
from gtpo_verl.lab.schedule import fill_training_batch
from gtpo_verl.lab.tasks import (
    EOS_ID, PAD_ID, ROLE_DECISION, ROLE_FORCED, ROLE_OFF, PromptStream, Task, decode_response,
    prompt_tensor, validation_problems,
)
from gtpo_verl.lab.update import AdvantageStep, actor_config, policy_loss
from gtpo_verl.plugin.estimators.gtpo_token import GTPO_TOKEN

SALT_WARM_START, SALT_PROMPTS, SALT_SAMPLER, SALT_VALIDATION, SALT_GLOBAL = 1, 2, 3, 4, 5
PASS_KS = (1, 2, 4, 8, 16)
WARM_START_STEPS = 150
"""The lab's shared warm-start length, for a task that does not set its own (``Task.warm_start_steps``)."""


@dataclass(frozen=True)
class LabSize:
    """Every size of a lab run (stated in results.json)."""

    steps: int = 400
    prompts: int = 8
    """Prompts per training batch (``data.train_batch_size``; dynamic sampling fills it)."""
    group: int = 8
    """Responses per prompt (``rollout.n``)."""
    lr: float = 2e-4
    temperature: float = 1.0
    eval_every: int = 25
    eval_prompts: int = 128
    """The fixed validation set's prompts (× ``eval_samples``): pass@4 and pass@8, the endpoints below saturation,
    are means over 128 prompts."""
    eval_samples: int = 16
    max_inflight_gen_batches: int = 3
    """Dynamic sampling: prompts in flight at most, in training batches (``algorithm.filter_groups.max_inflight_gen_batches``, the DAPO recipes' 3)."""
    stall_batches: int = 16
    """The lab's bound on one step's prompts, in training batches (verl has none: its step would never end)."""
    warm_start_steps: Optional[int] = None
    """Set: every task's warm start takes this many steps. None: each task's own (``Task.warm_start_steps``),
    else ``WARM_START_STEPS`` (``warm_start_steps``)."""
    warm_start_batch: int = 64
    warm_start_lr: float = 3e-3
    grad_clip: float = 1.0
    policy: PolicySize = PolicySize()


def policy_size(task: Task, size: LabSize) -> PolicySize:
    """``size.policy``, its context widened to the task's prompt and longest response where they do not fit
    (``unary_chain``'s 45 tokens; the other tasks fit the default 32, so their policies are unchanged)."""
    context = task.prompt_tokens() + task.max_response_tokens
    return size.policy if size.policy.max_len >= context else dataclasses.replace(size.policy, max_len=context)


def warm_start_steps(task: Task, size: LabSize) -> int:
    """The warm start's length: ``size.warm_start_steps`` where set, else the task's own, else ``WARM_START_STEPS``."""
    if size.warm_start_steps is not None:
        return size.warm_start_steps
    return task.warm_start_steps if task.warm_start_steps is not None else WARM_START_STEPS


def warm_start(task: Task, seed: int, size: LabSize) -> dict:
    """Weights after ``warm_start_steps(task, size)`` steps of supervised learning on the task's noisy
    demonstrations (a state_dict; seeded)."""
    torch.manual_seed(init_seed(seed, SALT_WARM_START))
    rng = random.Random(init_seed(seed, SALT_WARM_START))
    model = TinyCausalLM(task.vocab_size, policy_size(task, size))
    optimizer = torch.optim.Adam(model.parameters(), lr=size.warm_start_lr, fused=True)
    for _ in range(warm_start_steps(task, size)):
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
    responses, mask = sample(model, prompts, task.max_response_tokens, EOS_ID, PAD_ID, temperature, generator)
    scored = [_score(task, tuple(row), problems[i // group]) for i, row in enumerate(responses.tolist())]
    return prompts, responses, mask, scored


def _pad_cat(tensors: list[torch.Tensor], fill: int = 0) -> torch.Tensor:
    width = max(t.shape[1] for t in tensors)
    return torch.cat([torch.nn.functional.pad(t, (0, width - t.shape[1]), value=fill) for t in tensors])


def validate(model, task: Task, size: LabSize, seed: int) -> dict[str, float]:
    """Unbiased pass@k (``gtpo_verl.algorithms.pass_at_k``), maj@n and distinct answers per prompt on the
    fixed set, from the same uniforms at every call (module docstring)."""
    from gtpo_verl.algorithms.pass_at_k import majority_success, pass_at_k

    problems = validation_problems(task, size.eval_prompts)
    generator = torch.Generator().manual_seed(init_seed(seed, SALT_VALIDATION))
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
    """Mean of ``values`` over the tokens ``mask`` selects; NaN when it selects none (never 0)."""
    count = float(mask.sum())
    return float((values * mask).sum()) / count if count > 0 else float("nan")


def gtpo_bonus_shares(entropy: torch.Tensor, mask: torch.Tensor, success: torch.Tensor, roles: torch.Tensor, group: int) -> tuple[float, float]:
    """``(bonus share on decision tokens, decision tokens' share of success tokens)`` of a group-contiguous batch.

    GTPO-token's bonus (Eq. S18 without α2, which cancels in a share) is the estimator's own column share
    (``algorithms.token_shaping.column_share``): H_{i,t} · d_t / Σ_{k∈O+_t} H_{k,t} on success tokens.
    """
    active = (mask > 0) & success[:, None]
    if not bool(active.any()):
        return float("nan"), float("nan")
    group_ids = torch.arange(entropy.shape[0]) // group
    bonus = column_share(entropy.clamp_min(0.0), active.to(entropy.dtype), group_ids, entropy.shape[0] // group)
    decision = active & (roles == ROLE_DECISION)
    return float(bonus[decision].sum() / bonus.sum()), float(decision.sum() / active.sum())


HEALTH_KEYS = {
    "gtpo/delta/filtered_frac": "delta_filtered_frac",
    "gtpo/transform/entropy_advantage/clipped_fraction": "bonus_clipped_frac",
    "gtpo/transform/high_entropy_tokens/kept_fraction": "high_entropy_kept_frac",
    "gtpo/conflict/pos_token_frac": "conflict_pos_token_frac",
}
CURVES = ("reward", "entropy", "entropy_decision", "entropy_forced", "off_grammar_frac", "length", "clipfrac", "all_equal_frac",
          "kept_groups", "prompts_sampled", "stalled", "bonus_decision_share", "decision_share_of_success_tokens",
          "cov_selected_tokens", *HEALTH_KEYS.values())


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
    model = TinyCausalLM(task.vocab_size, policy_size(task, size))
    model.load_state_dict(weights)
    optimizer = torch.optim.Adam(model.parameters(), lr=size.lr, fused=True)
    stream = PromptStream(task, init_seed(seed, SALT_PROMPTS))
    generator = torch.Generator().manual_seed(init_seed(seed, SALT_SAMPLER) + method.sampler_stream * 7_777_777)
    # verl's clip_cov draws its clipped tokens from torch's global RNG: seeded per run, so a run does
    # not depend on which worker ran what before it
    torch.manual_seed(init_seed(seed, SALT_GLOBAL) + method.sampler_stream * 7_777_777)
    config = actor_config(method)
    group = size.group
    curves: dict[str, list[float]] = {k: [] for k in CURVES}
    validations = [dict(step=0, **validate(model, task, size, seed))]
    initial_entropy = None
    advantage_step = None  # prepared once ⟨H⟩_ini is known (the scaled δ reads it): the run's settings, parsed once
    for step in range(1, size.steps + 1):
        waves = []  # (prompts, responses, mask, scored, group keep flags) per dispatch

        def dispatch(count: int) -> list[bool]:
            problems = stream.take(count)
            prompts, responses, mask, scored = _rollout(model, task, problems, group, size.temperature, generator)
            acc = torch.tensor([s.acc for s in scored]).view(-1, group)
            informative = ~(acc == acc[:, :1]).all(1)
            waves.append((prompts, responses, mask, scored, informative))
            return informative.tolist()

        if method.dynamic_sampling:
            filled = fill_training_batch(size.prompts, dispatch, size.max_inflight_gen_batches, size.stall_batches * size.prompts)
            kept_groups, dispatched, stalled = filled.kept, filled.dispatched, filled.stalled
        else:
            dispatch(size.prompts)
            kept_groups, dispatched, stalled = list(range(size.prompts)), size.prompts, False
        prompts = torch.cat([w[0] for w in waves])
        responses = _pad_cat([w[1] for w in waves], PAD_ID)
        mask = _pad_cat([w[2] for w in waves])
        scored = [s for w in waves for s in w[3]]
        first = size.prompts * group  # the population every method is measured on: the first batch's responses
        kept_rows = (torch.tensor(kept_groups, dtype=torch.long)[:, None] * group + torch.arange(group)[None]).flatten()
        rows = torch.unique(torch.cat([torch.arange(first), kept_rows]))  # sorted: the first batch, then kept refills
        width = int(mask[rows].sum(1).max())
        prompts, responses, mask = prompts[rows], responses[rows, :width], mask[rows, :width]
        scored = [scored[i] for i in rows.tolist()]
        with torch.no_grad():  # the old-log-prob pass (π_θold = the sampling policy), verl's entropy with it
            old_log_probs, entropys = score(model, prompts, responses, size.temperature)
        roles = task.token_roles(prompts, responses, mask)
        fmask = mask.float()
        base = slice(0, first)
        acc = torch.tensor([s.acc for s in scored])
        stats = {"reward": float(acc[base].mean()), "entropy": _token_mean(entropys[base], fmask[base]),
                 "length": float(fmask[base].sum(1).mean()), "all_equal_frac": 1.0 - float(waves[0][4].float().mean()),
                 "kept_groups": float(len(kept_groups)), "prompts_sampled": float(dispatched), "stalled": float(stalled)}
        if roles is not None:
            for name, role in (("entropy_decision", ROLE_DECISION), ("entropy_forced", ROLE_FORCED)):
                stats[name] = _token_mean(entropys[base], (roles[base] == role).float())
            stats["off_grammar_frac"] = float((roles[base] == ROLE_OFF).sum() / fmask[base].sum())
        if initial_entropy is None:  # ⟨H⟩_ini on the first batch, as the trainer measures it
            initial_entropy = measured_initial_entropy(fmask[base], entropy=entropys[base])
            advantage_step = AdvantageStep.prepare(method, initial_entropy)
        metrics: dict[str, float] = {}
        clipfracs, selected = [], []
        if kept_groups:
            train = torch.searchsorted(rows, kept_rows)  # positions of the kept rows among the scored ones
            prompts_t, responses_t, mask_t = prompts[train], responses[train], mask[train]
            lengths = mask_t.sum(1)
            rewards = torch.tensor([scored[i].paper_a_score if method.reward == "paper_a" else scored[i].acc for i in train.tolist()],
                                   dtype=torch.float32)
            token_level_rewards = torch.zeros(mask_t.shape, dtype=torch.float32)
            token_level_rewards[torch.arange(len(lengths)), lengths - 1] = rewards  # verl: score on the last valid token
            uids = np.repeat(np.array([f"{step}-{g}" for g in kept_groups], dtype=object), group)
            old_log_probs_t = old_log_probs[train]
            adv = advantage_step(token_level_rewards, mask_t, uids, entropys[train], responses_t, old_log_probs_t)
            metrics.update(adv.metrics)
            if method.estimator == GTPO_TOKEN.name and roles is not None:
                share, token_share = gtpo_bonus_shares(entropys[train], mask_t, rewards > 0, roles[train], group)
                stats["bonus_decision_share"], stats["decision_share_of_success_tokens"] = share, token_share
            order = torch.randperm(len(kept_groups), generator=generator)
            chunks = order.chunk(min(method.mini_batches, len(kept_groups)))
            for _ in range(method.ppo_epochs):
                for chunk in chunks:
                    mb = (chunk[:, None] * group + torch.arange(group)[None]).flatten()
                    log_probs, _ = score(model, prompts_t[mb], responses_t[mb], size.temperature, with_entropy=False)
                    loss, loss_metrics = policy_loss(config, old_log_probs_t[mb], log_probs, adv.advantages[mb], adv.response_mask[mb])
                    optimizer.zero_grad()
                    loss.backward()
                    torch.nn.utils.clip_grad_norm_(model.parameters(), size.grad_clip)
                    optimizer.step()
                    clipfracs.append(loss_metrics.get("actor/pg_clipfrac", 0.0))
                    selected.append(_cov_selected(method, loss_metrics, int(mask_t[mb].sum())))
        stats["clipfrac"] = float(np.mean(clipfracs)) if clipfracs else float("nan")
        stats["cov_selected_tokens"] = float(np.mean(selected)) if selected and selected[0] is not None else float("nan")
        for key, name in HEALTH_KEYS.items():
            stats[name] = float(metrics[key]) if key in metrics else float("nan")
        for key in CURVES:
            value = stats.get(key, float("nan"))
            curves[key].append(round(value, 5) if value == value else value)
        if step % size.eval_every == 0 or step == size.steps:
            validations.append(dict(step=step, **validate(model, task, size, seed)))
        if on_step is not None:
            on_step()
    return {"method": method.name, "task": task.name, "seed": seed, "initial_entropy": initial_entropy,
            "curves": curves, "validation": validations}


def _cov_selected(method: Method, loss_metrics: dict, tokens: int) -> Optional[float]:
    """Tokens verl's Clip-Cov / KL-Cov act on in one mini-batch: Clip-Cov's realised count (its ``pg_clipfrac``
    is the selected share), KL-Cov's ``max(1, int(kl_cov_ratio · tokens))``; None for other losses."""
    if method.loss_mode == "clip_cov":
        return loss_metrics.get("actor/pg_clipfrac", 0.0) * tokens
    if method.loss_mode == "kl_cov":
        return float(max(1, int(method.policy_loss["kl_cov_ratio"] * tokens)))
    return None


def size_dict(size: LabSize) -> dict:
    return asdict(size)
