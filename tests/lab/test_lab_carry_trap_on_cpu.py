"""carry_trap: rewards and demonstrations on hand-written examples, its distractor outputs, and its warm start's
confidence measured on a small sample (⟨H⟩_ini below ln 2, confidently wrong on a sizeable share of prompts)."""

import dataclasses
import math
import random

import pytest

from support.torch_threads import torch_threads

from gtpo_verl.lab.collapse import warm_start_confidence
from gtpo_verl.lab.tasks import DISTRACTORS, EOS_ID, TASKS, TOKEN_ID, VOCAB, CarryTrap, decode_response, encode
from gtpo_verl.lab.train import LabSize, warm_start_steps

TRAP = TASKS["carry_trap"]


def _response(reasoning: str, answer: str) -> str:
    return f"<reasoning>{reasoning}</reasoning><answer>{answer}</answer>"


@pytest.mark.parametrize("text, problem, acc, score, pred", [
    (_response("75", "12"), (7, 5), 1.0, 20.0, "12"),  # 7 + 5 = 12: format 10 + correct 10
    (_response("75", "2"), (7, 5), 0.0, 10.0, "2"),  # the carry forgotten: well formed, wrong
    (_response("75", "012"), (7, 5), 0.0, 10.0, "012"),  # exact match: no leading zero
    (_response("75", "1A"), (7, 5), 0.0, 10.0, "1A"),  # a distractor inside the answer
    (_response("34", "7"), (3, 4), 1.0, 20.0, "7"),  # no carry: one digit
    (_response("34", "07"), (3, 4), 0.0, 10.0, "07"),
    (_response("", "0"), (0, 0), 1.0, 20.0, "0"),  # the reasoning's content is not scored
    ("<answer>12</answer>", (7, 5), 0.0, 1.0, "12"),  # no reasoning pair: Paper A's 1 for one pair, correctness not counted
    ("12", (7, 5), 0.0, 0.0, None),
])
def test_carry_trap_rewards(text, problem, acc, score, pred):
    scored = TRAP.score(text, problem)
    assert (scored.acc, scored.paper_a_score, scored.pred) == (acc, score, pred)


def test_demonstrations_forget_the_carry_with_a_shorter_answer():
    rng = random.Random(0)
    always, never = dataclasses.replace(TRAP, carry_slip=1.0), dataclasses.replace(TRAP, carry_slip=0.0)
    assert decode_response(always.demonstration((7, 5), rng)) == _response("75", "2")
    assert decode_response(never.demonstration((7, 5), rng)) == _response("75", "12")
    assert decode_response(always.demonstration((3, 4), rng)) == _response("34", "7")  # no carry: right either way
    wrong, right = always.demonstration((9, 9), rng), never.demonstration((9, 9), rng)
    assert len(right) - len(wrong) == 1 and wrong[-1] == right[-1] == EOS_ID  # "8" against "18"


def test_the_policy_has_distractor_outputs_no_demonstration_uses():
    assert len(VOCAB) == 29 and len(DISTRACTORS) == 26
    assert TRAP.vocab_size == 29 + 26
    assert all(TASKS[name].vocab_size == 29 for name in ("digit_chain", "max_digit", "digit_sum", "unary_chain"))
    assert TOKEN_ID["A"] == 29 and decode_response(encode(["<answer>", "A", "Z"]) + [EOS_ID]) == "<answer>AZ"
    rng = random.Random(1)
    used = {token for _ in range(300) for token in TRAP.demonstration(TRAP.sample_problem(rng), rng)}
    assert not used & set(range(29, 29 + 26))
    with pytest.raises(ValueError, match="distractors=27"):
        CarryTrap(name="x", demo_accuracy=1.0, distractors=27)


@pytest.fixture
def one_thread():
    """One torch thread, as each study worker runs its warm starts (``study._init_worker``)."""
    with torch_threads(1):
        yield


def test_the_warm_start_is_confident_and_confidently_wrong_on_a_sizeable_share(one_thread):
    # the task's own warm start (1200 steps), measured on a small sample: 8 × 8 first-batch responses, 32 × 8 validation
    size = LabSize(prompts=8, group=8, eval_prompts=32, eval_samples=8)
    assert warm_start_steps(TRAP, size) == 1200
    row = warm_start_confidence("carry_trap", 0, size)
    assert row["initial_entropy"] < math.log(2) and row["delta_gate_on"]  # S16's gate keeps δ on
    assert 0.25 <= row["confidently_wrong_share"] <= 0.6  # 45 % of prompts carry; most slip
    assert 0.4 <= row["P0"] <= 0.75
