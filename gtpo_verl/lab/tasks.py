"""The lab's tasks over one small vocabulary.

``digit_chain`` (the default study's task) and ``unary_chain`` have no free tokens: every response token is either a
*decision* (the grammar allows several tokens there) or *forced* (the grammar allows exactly one),
and ``token_roles`` says which, from the grammar alone:

- ``digit_chain``: the prompt shows a target S in 6..14 (two digits, ``06``..``14``); the response
  is ``d₁ … d_k = S <eos>`` with 1 ≤ k ≤ 5 digits in 1..9 summing to S. Decisions: each digit, and after each of the first
  four digits whether to go on or write ``=``. Forced: ``=`` after a fifth digit, the two digits of
  S (copied from the prompt) and ``<eos>``. Well formed = the grammar with the right copy of S;
  correct = well formed and the digits sum to S. Paper A's scale: 10 for well formed + 10 for correct.

- ``unary_chain`` (Paper B's mechanism task): the prompt shows a target S in 18..38; the response
  is a chain of digits in 1..9 summing to S, each digit d written in unary, followed by a forced
  countdown of d − 1 letters (``3`` → ``3 b a``; ``a`` = 1 … ``h`` = 8), then ``= <eos>``: a
  success is S + 2 tokens (20–40). Decisions: each digit, and after each countdown whether to go
  on or write ``=``. Forced: the countdown letters and ``<eos>``. Because a digit's countdown is
  as long as the digit, successes that chose different digits hold their later decisions at
  different absolute positions, so a column of a group's successes mixes decisions and forced
  tokens: Eq. S18's column share can move credit between them (in ``digit_chain`` it cannot:
  decisions sit at the same positions in every success). Each forced token is set by the token
  before it, so a one-block policy can learn it from the last token alone. Well formed = the
  grammar; correct = well formed and the digits sum to S; Paper A's scale as for ``digit_chain``.

The other three tasks are in Paper A's tag format, ``<reasoning>…</reasoning><answer>…</answer><eos>``.
In the first two the reasoning is 1–3 free filler letters: most of their entropy sits on tokens that decide
nothing. Their format reward and answer extraction are Paper A's (``gtpo_verl.rewards.format_math``);
correctness is an exact string match (Paper A's substring rule would let "79" answer "9", which a
tiny policy finds).

- ``max_digit``: the prompt shows four digits; the answer is the largest. One valid answer per
  prompt; the trap is a fixed digit (``9`` is right whenever a 9 is shown, ~34 % of prompts).
- ``digit_sum``: the prompt shows a target S in 10..24; any string of 1..5 non-zero digits whose
  sum is S is right. Many valid answers per prompt and a length that matters: S ≥ 19 needs at
  least three digits, so a policy that learned short answers cannot solve the top of the range.
- ``carry_trap`` (Paper A's collapse setting, ``gtpo_verl/lab/collapse.py``): the prompt shows two digits a, b; the
  response is ``<reasoning> a b </reasoning> <answer> a + b </answer> <eos>`` (the sum without a leading zero, so a
  carry makes the answer two digits). Its reasoning copies the prompt, so no token is free filler. Its demonstrations
  forget the carry on the 45 % of prompts that have one (``7 5`` → ``2``, with probability ``carry_slip``), so the warm
  start is *confident* (most positions hold one likely token: mean response entropy below ln 2, where Paper A's S16
  keeps δ on) and *confidently wrong* on those prompts, with a wrong answer one token shorter than the right one; the
  other prompts it answers right. Its policy also has ``distractors`` outputs no demonstration uses (``DISTRACTORS``):
  room for the distribution to flatten onto, as an LLM's vocabulary has. Paper A's S15 argues that a negative
  advantage on such a confident token pushes probability onto unlikely tokens; this task gives that push a large
  share of prompts to act on and many unlikely tokens to go to.

The warm start is supervised learning on noisy demonstrations: responses whose answer is right
with probability ``demo_accuracy``, so the policy starts with pass@1 ≪ pass@16 (``digit_chain``'s
demonstrations also miscopy each digit of S with probability ``copy_noise``, which sets how much
entropy its forced tokens start with; ``unary_chain``'s wrong demonstrations are chains to a
nearby wrong total, so ``=`` comes early or late; ``carry_trap``'s wrong ones forget the carry).
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Callable, Optional

import torch

from gtpo_verl.rewards.format_math import FORMAT_REWARD, CORRECTNESS_REWARD, extract_answer, format_reward

PAD, BOS, EOS = "<pad>", "<bos>", "<eos>"
TAGS = ("<reasoning>", "</reasoning>", "<answer>", "</answer>")
THOUGHT_LETTERS = "abcdefgh"
TASK_WORDS = ("max", "sum", ":")
EQUALS = "="
VOCAB = (PAD, BOS, EOS) + tuple("0123456789") + tuple(THOUGHT_LETTERS) + TAGS + TASK_WORDS + (EQUALS,)
"""The shared vocabulary: every task's policy has these outputs (``Task.vocab_size``)."""
DISTRACTORS = tuple("ABCDEFGHIJKLMNOPQRSTUVWXYZ")
"""Tokens no demonstration uses, after ``VOCAB``: a task with ``distractors`` > 0 gives its policy that many of them,
room to flatten onto (``carry_trap``); the other tasks' policies never see them."""
TOKEN_ID = {token: i for i, token in enumerate(VOCAB + DISTRACTORS)}
PAD_ID, BOS_ID, EOS_ID = TOKEN_ID[PAD], TOKEN_ID[BOS], TOKEN_ID[EOS]
MAX_RESPONSE_TOKENS = 16
# token roles (``Task.token_roles``): padding, a grammar decision, a grammar-forced token, a token
# after the response has left the grammar
ROLE_NONE, ROLE_DECISION, ROLE_FORCED, ROLE_OFF = 0, 1, 2, 3


def encode(tokens: list[str]) -> list[int]:
    return [TOKEN_ID[t] for t in tokens]


def decode_response(ids: list[int]) -> str:
    """The response text up to (not including) EOS; special tokens dropped."""
    tokens = VOCAB + DISTRACTORS
    out = []
    for i in ids:
        if i == EOS_ID or i == PAD_ID:
            break
        if i != BOS_ID:
            out.append(tokens[i])
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
    warm_start_steps: Optional[int] = None
    """The task's own warm-start length in steps; None: the lab's shared one (``train.WARM_START_STEPS``).
    A ``LabSize.warm_start_steps`` set explicitly (``--warm-start-steps``) overrides both (``train.warm_start_steps``)."""

    @property
    def max_response_tokens(self) -> int:
        """The sampler's cap on a response (the policy's context holds the prompt and this many tokens)."""
        return MAX_RESPONSE_TOKENS

    @property
    def vocab_size(self) -> int:
        """The policy's outputs: ``VOCAB``, plus the first ``distractors`` of ``DISTRACTORS`` for a task that has them."""
        return len(VOCAB)

    def prompt_tokens(self) -> int:
        """The length of every prompt of the task (fixed per task)."""
        return len(self.prompt(self.sample_problem(random.Random(0))))

    def sample_problem(self, rng: random.Random) -> tuple[int, ...]:
        raise NotImplementedError

    def prompt(self, problem: tuple[int, ...]) -> list[int]:
        raise NotImplementedError

    def score(self, text: str, problem: tuple[int, ...]) -> Scored:
        raise NotImplementedError

    def demonstration(self, problem: tuple[int, ...], rng: random.Random) -> list[int]:
        raise NotImplementedError

    def token_roles(self, prompts: torch.Tensor, responses: torch.Tensor, mask: torch.Tensor) -> Optional[torch.Tensor]:
        """``(B, T)`` role of every response token (``ROLE_*``), or None when the task defines none."""
        return None


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


def _random_decomposition(target: int, rng: random.Random) -> list[int]:
    """A uniformly drawn length in the feasible range, then digits 1..9 summing to ``target``."""
    while True:
        length = rng.randint(-(-target // 9), MAX_SUM_DIGITS)
        digits = [rng.randint(1, 9) for _ in range(length - 1)]
        last = target - sum(digits)
        if 1 <= last <= 9:
            return [*digits, last]


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
            answer = list(map(str, _random_decomposition(target, rng)))
        else:
            answer = [str(rng.randint(1, 9)) for _ in range(rng.randint(1, 4))]
        return encode(_demo(answer, rng))


_DIGIT_IDS = torch.tensor([TOKEN_ID[str(d)] for d in range(10)])
_NONZERO_IDS = _DIGIT_IDS[1:]


@dataclass(frozen=True)
class DigitChain(Task):
    """``d₁ … d_k = S <eos>``: decisions and forced tokens only (module docstring)."""

    copy_noise: float = 0.0
    """Warm-start demonstrations miscopy each digit of S with this probability (forced-token entropy)."""
    target_range: tuple[int, int] = (6, 14)
    """S is drawn uniformly from this closed range (two digits in the prompt either way)."""

    def sample_problem(self, rng):
        return (rng.randint(*self.target_range),)

    def prompt(self, problem):
        return encode([BOS, "sum", ":", *f"{problem[0]:02d}"])

    def score(self, text, problem):
        match = re.fullmatch(r"([1-9]{1,%d})=(\d\d)" % MAX_SUM_DIGITS, text)
        well_formed = match is not None and match.group(2) == f"{problem[0]:02d}"
        correct = well_formed and sum(map(int, match.group(1))) == problem[0]
        return Scored(acc=float(correct), paper_a_score=(FORMAT_REWARD if well_formed else 0.0) + (CORRECTNESS_REWARD if correct else 0.0),
                      pred=match.group(1) if match is not None else None)

    def demonstration(self, problem, rng):
        target = problem[0]
        if rng.random() < self.demo_accuracy:
            digits = _random_decomposition(target, rng)
        else:
            digits = [rng.randint(1, 9) for _ in range(rng.randint(1, MAX_SUM_DIGITS))]
        copy = [c if rng.random() >= self.copy_noise else str(rng.randint(0, 9)) for c in f"{target:02d}"]
        return encode([*map(str, digits), EQUALS, *copy, EOS])

    def token_roles(self, prompts, responses, mask):
        """The grammar run over the batch, one position at a time (≤ 9 positions, vectorised over rows)."""
        batch, width = responses.shape
        target = prompts[:, -2:]  # the prompt ends with the two digits of S
        digits = torch.zeros(batch, dtype=torch.long)  # digits written so far
        phase = torch.zeros(batch, dtype=torch.long)  # 0 digits, 1–2 copying S, 3 <eos>, 4 off the grammar
        is_digit = torch.isin(responses, _NONZERO_IDS)
        roles = torch.zeros_like(responses)
        equals_id = TOKEN_ID[EQUALS]
        for t in range(width):
            token = responses[:, t]
            writing = phase == 0
            decision = writing & (digits < MAX_SUM_DIGITS)
            roles[:, t] = torch.where(phase == 4, ROLE_OFF, torch.where(decision, ROLE_DECISION, ROLE_FORCED))
            # the one valid token at a forced position; at a decision the valid set below
            expected = torch.where(phase == 1, target[:, 0], torch.where(phase == 2, target[:, 1], torch.full_like(token, EOS_ID)))
            digit_ok = writing & is_digit[:, t] & (digits < MAX_SUM_DIGITS)
            equals_ok = writing & (token == equals_id) & (digits > 0)
            copy_ok = (phase >= 1) & (phase <= 3) & (token == expected)
            digits = digits + digit_ok.long()
            phase = torch.where(digit_ok, phase, torch.where(equals_ok | copy_ok, phase + 1, torch.full_like(phase, 4)))
        return torch.where(mask.bool(), roles, torch.full_like(roles, ROLE_NONE))


_LETTER_VALUE = torch.zeros(len(VOCAB), dtype=torch.long)  # a countdown letter's value: a = 1 … h = 8; 0 for other tokens
_LETTER_VALUE[[TOKEN_ID[c] for c in THOUGHT_LETTERS]] = torch.arange(1, len(THOUGHT_LETTERS) + 1)
_DIGIT_VALUE = torch.full((len(VOCAB),), -1, dtype=torch.long)  # a digit token's value; -1 for other tokens
_DIGIT_VALUE[_DIGIT_IDS] = torch.arange(10)


def countdown(digit: int) -> list[str]:
    """The forced letters after ``digit``: d − 1 letters counting down to ``a`` (``3`` → ``b a``, ``1`` → none)."""
    return [THOUGHT_LETTERS[value - 1] for value in range(digit - 1, 0, -1)]


def unary_chain_digits(text: str) -> Optional[list[int]]:
    """The digits of a well-formed ``unary_chain`` response text (each digit then its countdown, then ``=``), else None."""
    match = re.fullmatch(r"((?:[1-9][a-h]*)+)=", text)
    if match is None:
        return None
    digits = []
    for segment in re.findall(r"[1-9][a-h]*", match.group(1)):
        digit = int(segment[0])
        if segment[1:] != "".join(countdown(digit)):
            return None
        digits.append(digit)
    return digits


def _unary_decomposition(total: int, rng: random.Random) -> list[int]:
    """Digits drawn one at a time, uniformly from 1..min(9, what is left), until they sum to ``total``."""
    digits = []
    while total > 0:
        digits.append(rng.randint(1, min(9, total)))
        total -= digits[-1]
    return digits


@dataclass(frozen=True)
class UnaryChain(Task):
    """Digits written in unary (each digit then a forced countdown), summing to S, then ``= <eos>`` (module docstring)."""

    target_range: tuple[int, int] = (18, 38)
    """S is drawn uniformly from this closed range: a success has S + 2 tokens."""
    wrong_total_spread: int = 4
    """A wrong demonstration's chain sums to a total within this distance of S (never S)."""

    @property
    def max_response_tokens(self) -> int:
        return self.target_range[1] + 2  # the longest success: S digits-and-letters, "=", <eos>

    def sample_problem(self, rng):
        return (rng.randint(*self.target_range),)

    def prompt(self, problem):
        return encode([BOS, "sum", ":", *f"{problem[0]:02d}"])

    def score(self, text, problem):
        digits = unary_chain_digits(text)
        correct = digits is not None and sum(digits) == problem[0]
        return Scored(acc=float(correct),
                      paper_a_score=(FORMAT_REWARD if digits is not None else 0.0) + (CORRECTNESS_REWARD if correct else 0.0),
                      pred="".join(map(str, digits)) if digits is not None else None)

    def demonstration(self, problem, rng):
        total = problem[0]
        if rng.random() >= self.demo_accuracy:  # a chain to a nearby wrong total: "=" early or late
            low, high = max(1, total - self.wrong_total_spread), min(self.target_range[1], total + self.wrong_total_spread)
            total = rng.choice([t for t in range(low, high + 1) if t != total])
        tokens = [token for digit in _unary_decomposition(total, rng) for token in (str(digit), *countdown(digit))]
        return encode([*tokens, EQUALS, EOS])

    def token_roles(self, prompts, responses, mask):
        """The grammar run over the batch, one position at a time (each state depends on the last; vectorised over rows)."""
        batch, width = responses.shape
        digit_value, letter_value = _DIGIT_VALUE[responses], _LETTER_VALUE[responses]
        owed = torch.zeros(batch, dtype=torch.long)  # countdown letters still owed after the last digit
        digits = torch.zeros(batch, dtype=torch.long)  # digits written ("=" needs one)
        phase = torch.zeros(batch, dtype=torch.long)  # 0 the chain, 1 <eos> after "=", 2 ended, 3 off the grammar
        roles = torch.zeros_like(responses)
        equals_id = TOKEN_ID[EQUALS]
        for t in range(width):
            token = responses[:, t]
            deciding = (phase == 0) & (owed == 0)
            roles[:, t] = torch.where(phase == 3, ROLE_OFF, torch.where(deciding, ROLE_DECISION, ROLE_FORCED))
            digit_ok = deciding & (digit_value[:, t] >= 1)
            equals_ok = deciding & (token == equals_id) & (digits > 0)
            letter_ok = (phase == 0) & (owed > 0) & (letter_value[:, t] == owed)
            eos_ok = (phase == 1) & (token == EOS_ID)
            owed = torch.where(digit_ok, digit_value[:, t] - 1, torch.where(letter_ok, owed - 1, owed))
            digits = digits + digit_ok.long()
            phase = torch.where(digit_ok | letter_ok, phase, torch.where(equals_ok | eos_ok, phase + 1, torch.full_like(phase, 3)))
        return torch.where(mask.bool(), roles, torch.full_like(roles, ROLE_NONE))


@dataclass(frozen=True)
class CarryTrap(Task):
    """``a + b`` in Paper A's tag format, the warm start confidently forgetting the carry (module docstring)."""

    carry_slip: float = 0.9
    """A demonstration of a prompt with a carry (a + b ≥ 10) writes only the units digit with this probability: wrong,
    and one token shorter than the right answer. The other demonstrations are right with probability ``demo_accuracy``."""
    distractors: int = len(DISTRACTORS)
    """The first this many of ``DISTRACTORS`` are outputs of the policy that no demonstration uses: room to flatten."""

    def __post_init__(self):
        if not 0 <= self.distractors <= len(DISTRACTORS):
            raise ValueError(f"CarryTrap.distractors={self.distractors} must be in 0..{len(DISTRACTORS)} (len(DISTRACTORS))")

    @property
    def vocab_size(self) -> int:
        return len(VOCAB) + self.distractors

    def sample_problem(self, rng):
        return (rng.randint(0, 9), rng.randint(0, 9))

    def prompt(self, problem):
        return encode([BOS, "sum", ":", *map(str, problem)])

    def score(self, text, problem):
        return _score(text, lambda pred: pred == str(sum(problem)))

    def demonstration(self, problem, rng):
        total = sum(problem)
        if total >= 10 and rng.random() < self.carry_slip:
            total -= 10  # the carry forgotten: 7 + 5 → "2"
        elif rng.random() >= self.demo_accuracy:
            total = rng.choice([t for t in range(19) if t != total])
        return encode(["<reasoning>", *map(str, problem), "</reasoning>", "<answer>", *str(total), "</answer>", EOS])


TASKS: dict[str, Task] = {
    "digit_chain": DigitChain(name="digit_chain", demo_accuracy=0.8, copy_noise=0.25),
    "max_digit": MaxDigit(name="max_digit", demo_accuracy=0.3),
    "digit_sum": DigitSum(name="digit_sum", demo_accuracy=0.25),
    # 150 warm-start steps leave its pass rate at 0.055; 600 put it in 0.3–0.7 (docs/lab.md, "unary_chain")
    "unary_chain": UnaryChain(name="unary_chain", demo_accuracy=0.7, warm_start_steps=600),
    # 600 warm-start steps left seed 1 without the units digit (P₀ 0.13); 1200 learn it (docs/lab.md, "carry_trap")
    "carry_trap": CarryTrap(name="carry_trap", demo_accuracy=1.0, carry_slip=0.9, warm_start_steps=1200),
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
