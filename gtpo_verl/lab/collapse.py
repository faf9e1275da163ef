"""Paper A's collapse setting and its pre-registered GRPO pilot (docs/lab.md, "carry_trap and the collapse pilot").

Paper A (GTPO-trajectory, arXiv:2508.03772) says GRPO's policy collapses where the policy is confident:
below ln 2 nats most of a position's probability sits on one token, and a negative advantage then
pushes mass onto unlikely tokens (S15); its entropy filter δ (S16) drops the responses above ln 2
when the initial mean entropy ⟨H⟩_ini is itself below ln 2. The lab's ``digit_chain`` has none of
this (⟨H⟩_ini 1.3–1.5 nats, so the paper preset's gate turns δ off), and no method collapsed on it.

A ``CollapseSetting`` is the data of a setting that should make GRPO collapse: a task with a confident
warm start that is confidently wrong on a sizeable share of prompts and has room to flatten
(``tasks.CarryTrap``), the run length, and the off-policy pressure every arm of a study on it
trains with: Adam's learning rate and the update schedule (mini-batches × epochs per rollout batch,
so that most updates are made with a policy that has already moved from the one that sampled).

The pilot, fixed before it runs: GRPO (the lab's ``GRPO`` row, under the setting's schedule) on
``PILOT_SEEDS`` seeds; the setting is kept for a study only if at least ``PILOT_MIN_COLLAPSED_SHARE``
of them (3 of 5) end ``collapsed-flat`` by ``verdicts.end_state`` (Paper A's collapse: end entropy ≥
``FLAT_ENTROPY_RATIO``·H₀ and pass@1 < P₀). The result is written either way.

    python -m gtpo_verl.lab --measure-warm-start --setting carry_trap --seeds 5   # seconds: ⟨H⟩_ini, confidently wrong share
    python -m gtpo_verl.lab --pilot-collapse --setting carry_trap --out docs/lab/collapse_pilot
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np
import torch

from gtpo_verl.algorithms.trajectory import LN2
from gtpo_verl.algorithms.trajectory import initial_entropy as measured_initial_entropy
from gtpo_verl.lab.methods import Method
from gtpo_verl.lab.tasks import TASKS, validation_problems
from gtpo_verl.lab.verdicts import FLAT_ENTROPY_RATIO, endpoints

PILOT_METHOD = "GRPO"
"""The pilot's one arm: the lab's GRPO row, with the setting's learning rate and update schedule."""
PILOT_SEEDS = 5
"""Pre-registered: the pilot's seeds (``--first-seed`` … + 4)."""
PILOT_MIN_COLLAPSED_SHARE = 0.5
"""Pre-registered: the setting is kept if at least this share of the pilot's seeds end ``collapsed-flat`` (3 of 5)."""
CONFIDENT_SHARE = 0.75
"""A prompt is confidently wrong when one wrong answer holds at least this share of its validation samples."""
STUDY_METHODS = ("GRPO", "GRPO_TWIN", "GTPO_TRAJ_PAPER", "GTPO_TRAJ", "GTPO_TRAJ_D10")
"""A kept setting's study: GRPO and its null twin, the paper preset (the primary arm), δ at the official 0.7 nats and
δ = ⟨H⟩_ini (sensitivity rows); ``verdicts.PRIMARY_CLAIMS`` and ``SENSITIVITY`` score them. The other scaled rows
(×0.8, ×1.2) stay in the methods table; five arms keep a study of 24 seeds under 45 minutes on two cores."""


@dataclass(frozen=True)
class CollapseSetting:
    """A task and the training pressure every arm of a run on it gets (module docstring)."""

    name: str
    task: str
    """A ``tasks.TASKS`` name."""
    steps: int
    """RL steps per run (``--steps`` overrides it, e.g. for a short check)."""
    lr: float
    """Adam's learning rate for the RL steps (``LabSize.lr``; the lab's default is 2e-4)."""
    mini_batches: int
    """Optimiser steps per rollout batch and epoch (``Method.mini_batches``; the lab's GRPO row has 1)."""
    ppo_epochs: int
    """Passes over each rollout batch (``Method.ppo_epochs``; the lab's GRPO row has 1)."""
    eval_every: int = 50
    """Validation spacing in steps (``--eval-every`` overrides it)."""

    def __post_init__(self):
        if self.task not in TASKS:
            raise ValueError(f"CollapseSetting {self.name!r}: task {self.task!r} is not a lab task {sorted(TASKS)}")
        for key in ("steps", "mini_batches", "ppo_epochs", "eval_every"):
            value = getattr(self, key)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"CollapseSetting {self.name!r}: {key}={value!r} must be an int >= 1")
        if not self.lr > 0:
            raise ValueError(f"CollapseSetting {self.name!r}: lr={self.lr!r} must be > 0")

    def schedule(self) -> dict[str, int]:
        """The ``Method`` fields the setting sets on every arm."""
        return {"mini_batches": self.mini_batches, "ppo_epochs": self.ppo_epochs}

    def method(self, method: Method) -> Method:
        """``method`` under the setting's update schedule (its name kept, so the verdicts' claims still pair it)."""
        return dataclasses.replace(method, **self.schedule())


SETTINGS: dict[str, CollapseSetting] = {
    # lr 15× the lab's 2e-4 and 4 mini-batches × 2 epochs: 8 optimiser steps per rollout batch against GRPO's 1. Short
    # checks on seed 0 (docs/lab.md, "carry_trap"): the lab's own GRPO solves the task; 1.5e-3 learns it; 3e-3 breaks
    # pass@1 with entropy above H₀; 6e-3 freezes on one degenerate wrong answer near H₀
    "carry_trap": CollapseSetting(name="carry_trap", task="carry_trap", steps=1000, lr=3e-3, mini_batches=4, ppo_epochs=2),
}


def keep_rule(end_states: Sequence[str]) -> dict:
    """The pilot's pre-registered verdict on its seeds' end states: kept iff at least
    ``PILOT_MIN_COLLAPSED_SHARE`` of them are ``collapsed-flat`` (``needed`` = ⌈share × seeds⌉)."""
    collapsed = sum(state == "collapsed-flat" for state in end_states)
    needed = math.ceil(PILOT_MIN_COLLAPSED_SHARE * len(end_states))
    return {"seeds": len(end_states), "collapsed": collapsed, "needed": needed,
            "kept": bool(end_states) and collapsed >= needed, "end_states": dict(Counter(end_states)),
            "preregistered_seeds": PILOT_SEEDS, "min_collapsed_share": PILOT_MIN_COLLAPSED_SHARE}


def pilot_row(run: dict) -> dict:
    """One pilot seed: its end state and what decides it (H₀, the end entropy, P₀, the end pass@1), ⟨H⟩_ini and
    ``entropy_peak_ratio``; the end values are ``verdicts.endpoints``' (last 50 steps, last 4 validations)."""
    ends = endpoints(run)
    h0 = next((h for h in run["curves"]["entropy"] if h == h), float("nan"))
    return {"seed": run["seed"], "end_state": ends["end_state"], "entropy_peak_ratio": ends["entropy_peak_ratio"],
            "H0": h0, "end_entropy": ends["entropy"], "end_entropy_over_H0": ends["entropy"] / h0 if h0 > 0 else float("nan"),
            "initial_entropy": run.get("initial_entropy"), "P0": run["validation"][0]["pass@1"], "end_pass@1": ends["pass@1"],
            "last_pass@1": run["validation"][-1]["pass@1"], "steps": len(run["curves"]["entropy"])}


def pilot_summary(runs: Sequence[dict], setting: CollapseSetting) -> dict:
    """The pilot's result: the setting, one ``pilot_row`` per seed and ``keep_rule`` over their end states."""
    rows = [pilot_row(run) for run in sorted(runs, key=lambda r: r["seed"])]
    return {"setting": dataclasses.asdict(setting), "method": PILOT_METHOD, "flat_entropy_ratio": FLAT_ENTROPY_RATIO,
            "rows": rows, "keep_rule": keep_rule([row["end_state"] for row in rows])}


def pilot_markdown(summary: dict) -> str:
    """A short report of ``pilot_summary``: the setting, the per-seed table and the verdict."""
    s, rule = summary["setting"], summary["keep_rule"]
    steps = sorted({row["steps"] for row in summary["rows"]}) or [s["steps"]]
    lines = [f"# Collapse pilot: `{s['name']}` (pre-registered)", "",
             f"GRPO on `{s['task']}`, {'/'.join(map(str, steps))} steps (the setting's: {s['steps']}), Adam lr {s['lr']:g}, "
             f"{s['mini_batches']} mini-batches × {s['ppo_epochs']} epochs per rollout batch. `collapsed-flat`: end entropy ≥ "
             f"{summary['flat_entropy_ratio']}·H₀ and end pass@1 < P₀ (`gtpo_verl/lab/verdicts.py`).", "",
             "| seed | end state | entropy_peak_ratio | H₀ | end entropy (/H₀) | ⟨H⟩_ini | P₀ | end pass@1 |",
             "|---|---|---|---|---|---|---|---|"]
    for row in summary["rows"]:
        peak = "–" if row["entropy_peak_ratio"] is None else f"{row['entropy_peak_ratio']:.2f}"
        lines.append(f"| {row['seed']} | {row['end_state']} | {peak} | {row['H0']:.3f} | {row['end_entropy']:.3f} "
                     f"({row['end_entropy_over_H0']:.2f}) | {row['initial_entropy']:.3f} | {row['P0']:.3f} "
                     f"| {row['end_pass@1']:.3f} |")
    verdict = "KEPT" if rule["kept"] else "NOT KEPT"
    lines += ["", f"**{verdict}**: {rule['collapsed']} of {rule['seeds']} seeds end `collapsed-flat`; the rule needs "
              f"{rule['needed']} (at least {rule['min_collapsed_share']:.0%} of the pre-registered {rule['preregistered_seeds']})."]
    if rule["seeds"] != rule["preregistered_seeds"]:
        lines.append(f"Not the pre-registered pilot: it ran {rule['seeds']} seeds, not {rule['preregistered_seeds']}.")
    return "\n".join(lines) + "\n"


def confidently_wrong(preds: Sequence[Optional[str]], acc: Sequence[float]) -> bool:
    """One prompt's samples: does a single wrong answer (a missing answer counts as one) hold ≥ ``CONFIDENT_SHARE`` of them?"""
    wrong = Counter(pred for pred, a in zip(preds, acc) if not a > 0)
    return bool(wrong) and max(wrong.values()) >= CONFIDENT_SHARE * len(preds)


def warm_start_confidence(task_name: str, seed: int, size, weights: Optional[dict] = None) -> dict:
    """The warm start alone, before any RL step: ⟨H⟩_ini and the token-mean entropy of the first training batch (as
    the trainer measures them; Paper A's gate keeps δ on when ⟨H⟩_ini ≤ ln 2), and on the fixed validation set
    (the run's step-0 samples) P₀ and the share of prompts the policy is confidently wrong on (``confidently_wrong``)."""
    from gtpo_verl.lab.calibration import first_batch
    from gtpo_verl.lab.policy import TinyCausalLM, init_seed
    from gtpo_verl.lab.train import SALT_VALIDATION, _rollout, policy_size, warm_start, warm_start_steps

    task = TASKS[task_name]
    weights = weights if weights is not None else warm_start(task, seed, size)
    _, _, mask, _, entropy = first_batch(task, seed, size, weights)
    fmask = mask.float()
    initial = measured_initial_entropy(fmask, entropy=entropy)
    model = TinyCausalLM(task.vocab_size, policy_size(task, size))
    model.load_state_dict(weights)
    problems = validation_problems(task, size.eval_prompts)
    generator = torch.Generator().manual_seed(init_seed(seed, SALT_VALIDATION))
    with torch.no_grad():
        _, _, _, scored = _rollout(model, task, problems, size.eval_samples, size.temperature, generator)
    n = size.eval_samples
    acc = np.array([s.acc for s in scored]).reshape(-1, n)
    wrong = [confidently_wrong([s.pred for s in scored[i * n:(i + 1) * n]], acc[i]) for i in range(len(problems))]
    return {"task": task_name, "seed": seed, "warm_start_steps": warm_start_steps(task, size), "initial_entropy": initial,
            "token_entropy": float((entropy * fmask).sum() / fmask.sum()), "ln2": LN2, "delta_gate_on": bool(initial <= LN2),
            "P0": float(acc.mean()), "confidently_wrong_share": float(np.mean(wrong)), "confident_share": CONFIDENT_SHARE,
            "eval_prompts": len(problems), "eval_samples": n}


__all__ = ["CollapseSetting", "SETTINGS", "STUDY_METHODS", "PILOT_METHOD", "PILOT_SEEDS", "PILOT_MIN_COLLAPSED_SHARE",
           "CONFIDENT_SHARE", "keep_rule", "pilot_row", "pilot_summary", "pilot_markdown", "confidently_wrong",
           "warm_start_confidence"]
