"""The lab's two tasks, in Paper A's tag format, over one small vocabulary.

A response is ``<reasoning>…</reasoning><answer>…</answer><eos>``: the format reward and the
answer extraction are Paper A's (``gtpo_verl.rewards.format_math``); correctness is an exact
string match (Paper A's substring rule would let "79" answer "9", which a tiny policy finds).

- ``max_digit``: the prompt shows four digits; the answer is the largest. One valid answer per
  prompt; the trap is a fixed digit (``9`` is right whenever a 9 is shown, ~34 % of prompts).
- ``digit_sum``: the prompt shows a target S in 10..24; any string of 1..5 non-zero digits whose
  sum is S is right. Many valid answers per prompt and a length that matters: S ≥ 19 needs at
  least three digits, so a policy that learned short answers cannot solve the top of the range.

The warm start is supervised learning on noisy demonstrations: well-formed responses whose
answer is right with probability ``demo_accuracy``, so the policy starts with pass@1 ≪ pass@16.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable, Optional

import torch

from gtpo_verl.rewards.format_math import FORMAT_REWARD, CORRECTNESS_REWARD, extract_answer, format_reward

PAD, BOS, EOS = "<pad>", "<bos>", "<eos>"
TAGS = ("<reasoning>", "</reasoning>", "<answer>", "</answer>")
THOUGHT_LETTERS = "abcdefgh"
TASK_WORDS = ("max", "sum", ":")
VOCAB = (PAD, BOS, EOS) + tuple("0123456789") + tuple(THOUGHT_LETTERS) + TAGS + TASK_WORDS
TOKEN_ID = {token: i for i, token in enumerate(VOCAB)}
PAD_ID, BOS_ID, EOS_ID = TOKEN_ID[PAD], TOKEN_ID[BOS], TOKEN_ID[EOS]
MAX_RESPONSE_TOKENS = 16


def encode(tokens: list[str]) -> list[int]:
    return [TOKEN_ID[t] for t in tokens]


def decode_response(ids: list[int]) -> str:
    """The response text up to (not including) EOS; special tokens dropped."""
    out = []
    for i in ids:
        if i == EOS_ID or i == PAD_ID:
            break
        if i != BOS_ID:
            out.append(VOCAB[i])
    return "".join(out)


@dataclass(frozen=True)
class Scored:
    """One response's outcome: ``acc`` ∈ {0, 1}, Paper A's score F + C ∈ {0, 1, 1.5, 10, 20}, the answer."""

    acc: float
    paper_a_score: float
    pred: Optional[str]


def _score(text: str, is_correct: Callable[[str], bool]) -> Scored:
    fmt = format_reward(text)
    pred = extract_answer(text)
    correct = fmt == FORMAT_REWARD and pred is not None and is_correct(pred)
    return Scored(acc=float(correct), paper_a_score=fmt + (CORRECTNESS_REWARD if correct else 0.0), pred=pred)


def _thought(rng: random.Random) -> list[str]:
    return [rng.choice(THOUGHT_LETTERS) for _ in range(rng.randint(1, 3))]


def _demo(answer: list[str], rng: random.Random) -> list[str]:
    return ["<reasoning>", *_thought(rng), "</reasoning>", "<answer>", *answer, "</answer>", EOS]


@dataclass(frozen=True)
class Task:
    """A task: prompt sampler, scorer and noisy demonstrations; prompts are fixed-length token lists."""

    name: str
    demo_accuracy: float

    def sample_problem(self, rng: random.Random) -> tuple[int, ...]:
        raise NotImplementedError

    def prompt(self, problem: tuple[int, ...]) -> list[int]:
        raise NotImplementedError

    def score(self, text: str, problem: tuple[int, ...]) -> Scored:
        raise NotImplementedError

    def demonstration(self, problem: tuple[int, ...], rng: random.Random) -> list[int]:
        raise NotImplementedError


class MaxDigit(Task):
    def sample_problem(self, rng):
        return tuple(rng.randint(0, 9) for _ in range(4))

    def prompt(self, problem):
        return encode([BOS, "max", ":", *map(str, problem)])

    def score(self, text, problem):
        return _score(text, lambda pred: pred == str(max(problem)))

    def demonstration(self, problem, rng):
        digit = max(problem) if rng.random() < self.demo_accuracy else rng.randint(0, 9)
        return encode(_demo([str(digit)], rng))


SUM_RANGE = (10, 24)
MAX_SUM_DIGITS = 5


def _is_decomposition(pred: str, target: int) -> bool:
    return 1 <= len(pred) <= MAX_SUM_DIGITS and all(c in "123456789" for c in pred) and sum(map(int, pred)) == target


class DigitSum(Task):
    def sample_problem(self, rng):
        return (rng.randint(*SUM_RANGE),)

    def prompt(self, problem):
        return encode([BOS, "sum", ":", *f"{problem[0]:02d}"])

    def score(self, text, problem):
        return _score(text, lambda pred: _is_decomposition(pred, problem[0]))

    def demonstration(self, problem, rng):
        target = problem[0]
        if rng.random() < self.demo_accuracy:  # a random valid decomposition of random length
            while True:
                length = rng.randint(-(-target // 9), MAX_SUM_DIGITS)
                digits = [rng.randint(1, 9) for _ in range(length - 1)]
                last = target - sum(digits)
                if 1 <= last <= 9:
                    answer = [*map(str, digits), str(last)]
                    break
        else:
            answer = [str(rng.randint(1, 9)) for _ in range(rng.randint(1, 4))]
        return encode(_demo(answer, rng))


TASKS: dict[str, Task] = {
    "max_digit": MaxDigit(name="max_digit", demo_accuracy=0.3),
    "digit_sum": DigitSum(name="digit_sum", demo_accuracy=0.25),
}


def prompt_tensor(task: Task, problems: list[tuple[int, ...]]) -> torch.Tensor:
    return torch.tensor([task.prompt(p) for p in problems], dtype=torch.long)


class PromptStream:
    """The training prompts of one seed: an endless, seeded sequence of problems, consumed in order."""

    def __init__(self, task: Task, seed: int):
        self.task = task
        self.rng = random.Random(seed)

    def take(self, count: int) -> list[tuple[int, ...]]:
        return [self.task.sample_problem(self.rng) for _ in range(count)]


def validation_problems(task: Task, count: int, seed: int = 20260) -> list[tuple[int, ...]]:
    """The fixed validation set (the same for every seed and method)."""
    rng = random.Random(seed)
    return [task.sample_problem(rng) for _ in range(count)]
