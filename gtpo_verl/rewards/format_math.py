"""Paper A's format + correctness reward, as a verl custom reward function.

GTPO (trajectory), arXiv:2508.03772; the official ``reward_math.py`` of
github.com/winstonsmith1897/GTPO (docs/spec.md A.7). The recipes in
``recipes/gtpo_traj/`` select it with::

    reward.custom_reward_function.path=pkg://gtpo_verl.rewards.format_math
    reward.custom_reward_function.name=compute_score

(``pkg://`` imports it from the installed package in verl's reward-loop workers, so no file
path has to exist on the cluster nodes.) The prompt the reward expects is ``SYSTEM_PROMPT``;
``recipes/data/prepare_gsm8k.py`` and ``prepare_math.py`` put it in every row.

Reward of one completion o with reference answer a:

    R = F(o) + C(o, a),   C counted only when F(o) = 10

    F(o) = 10                      <reasoning>…</reasoning> anywhere and <answer>…</answer> at the end
         = 1 or 1.5                only one of the two pairs: 1.5 if a tag of the other pair appears
         = 0                       neither pair
    C(o, a) = 10 iff float(â) ≈ float(a) (|â−a| ≤ 0.01 + 1e-5·|a|, numpy's isclose) or a ⊂ â (substring)

with â the text inside the final ``<answer>`` tags. Reachable values: {0, 1, 1.5, 10, 20}
(partial credits above 1.5 cannot occur: having both pairs already gives the full 10).

NOTE (kept from the official code on purpose): "ends with </answer>" is Python's ``$``, which
also matches before one final newline; the substring test also applies to numbers, so a
reference "2" is matched by "12" and by "4.02" ⊃ "4".
"""

from __future__ import annotations

import re
from typing import Any, Optional

# The official config.yaml's system instruction (folded YAML; its trailing newline dropped).
SYSTEM_PROMPT = (
    "You are a helpful assistant for solving math problems. Given a question, first think step by step "
    "between <reasoning> and </reasoning>. Then, give the final answer between <answer> and </answer>."
)

FORMAT_REWARD = 10.0  # both tag pairs present, answer last
CORRECTNESS_REWARD = 10.0  # added only on top of FORMAT_REWARD
PAIR_CREDIT = 1.0  # one tag pair only
PAIR_CREDIT_WITH_STRAY_TAG = 1.5  # one tag pair plus a tag of the other pair
NUMERIC_ATOL = 1e-2  # np.isclose(pred, ref, atol=1e-2) in the official code
NUMERIC_RTOL = 1e-5  # np.isclose's default rtol, which the official call keeps
NO_ANSWER = "[NO_ANSWER]"  # "pred" when no final <answer> block (keeps maj@k votes well defined)

_REASONING_PAIR = re.compile(r"<reasoning>.*?</reasoning>", re.DOTALL)
_ANSWER_PAIR_AT_END = re.compile(r"<answer>.*?</answer>$", re.DOTALL)
_FINAL_ANSWER = re.compile(r"<answer>\s*(.*?)\s*</answer>$", re.DOTALL)
_REASONING_TAG = re.compile(r"</?reasoning>")
_ANSWER_TAG = re.compile(r"</?answer>")


def format_reward(text: str) -> float:
    """Return F(o): 10 for both tag pairs (answer last), else 1 / 1.5 per single pair, else 0."""
    has_reasoning = _REASONING_PAIR.search(text) is not None
    has_answer = _ANSWER_PAIR_AT_END.search(text) is not None
    if has_reasoning and has_answer:
        return FORMAT_REWARD
    if has_reasoning:
        return PAIR_CREDIT_WITH_STRAY_TAG if _ANSWER_TAG.search(text) else PAIR_CREDIT
    if has_answer:
        return PAIR_CREDIT_WITH_STRAY_TAG if _REASONING_TAG.search(text) else PAIR_CREDIT
    return 0.0


def extract_answer(text: str) -> Optional[str]:
    """Return the stripped text of the final ``<answer>…</answer>`` block, or None."""
    match = _FINAL_ANSWER.search(text)
    return match.group(1).strip() if match else None


def reference_answer(ground_truth: Any) -> str:
    """Return the reference answer a: the bare string, or the ``<answer>`` part of a tagged reference.

    The data preparation stores the bare answer; the official code compared against the
    whole tagged solution ``<reasoning>…</reasoning>\\n<answer>a</answer>``, which is accepted too.
    """
    text = str(ground_truth)
    tagged = extract_answer(text)
    return tagged if tagged is not None else text.strip()


def _numerically_close(pred: str, ref: str) -> bool:
    try:
        p, r = float(pred), float(ref)  # float() as the official code: accepts "1e3", "1_000", " 4 "
    except (TypeError, ValueError):
        return False
    return p == r or abs(p - r) <= NUMERIC_ATOL + NUMERIC_RTOL * abs(r)


def correctness_reward(pred: Optional[str], ref: str) -> float:
    """Return C: 10 if the extracted answer equals the reference numerically (isclose) or contains it."""
    if pred is None:
        return 0.0
    if _numerically_close(pred, ref) or ref in pred:
        return CORRECTNESS_REWARD
    return 0.0


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: Any,
    extra_info: Optional[dict] = None,
    **kwargs: Any,
) -> dict[str, Any]:
    """Return verl's reward dict: ``score`` = F + C, plus ``format``, ``correctness``, ``acc``, ``pred``.

    verl's reward managers call ``compute_score(data_source=…, solution_str=…, ground_truth=…,
    extra_info=…, **kwargs)`` and use ``score`` as the reward; the other keys become
    ``reward_extra_info``. ``acc`` (1 iff C = 10) makes verl's validation log pass@k as
    ``val-core/<data_source>/acc/best@k`` and, with ``pred``, maj@k. ``data_source`` is unused:
    the same reward applies to every data set of Paper A.
    """
    del data_source, extra_info, kwargs
    fmt = format_reward(solution_str)
    pred = extract_answer(solution_str)
    correct = correctness_reward(pred, reference_answer(ground_truth)) if fmt == FORMAT_REWARD else 0.0
    return {
        "score": fmt + correct,
        "format": fmt,
        "correctness": correct,
        "acc": float(correct > 0.0),
        "pred": pred if pred is not None else NO_ANSWER,
    }
