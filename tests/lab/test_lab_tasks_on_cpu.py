"""The lab tasks' rewards on hand-made strings, and the token round trip."""

import random

import pytest

from gtpo_verl.lab.tasks import EOS_ID, TASKS, TOKEN_ID, decode_response, encode

MAX = TASKS["max_digit"]
SUM = TASKS["digit_sum"]
FORMATTED = "<reasoning>ab</reasoning><answer>{}</answer>"


@pytest.mark.parametrize("text, acc, score, pred", [
    (FORMATTED.format("7"), 1.0, 20.0, "7"),  # both tag pairs (10) + correct (10)
    (FORMATTED.format("5"), 0.0, 10.0, "5"),  # well formed, wrong
    (FORMATTED.format("77"), 0.0, 10.0, "77"),  # exact match: Paper A's substring rule would accept "77" ⊃ "7"
    ("<reasoning>ab</reasoning>", 0.0, 1.0, None),  # one pair only: 1
    ("<answer>7</answer>", 0.0, 1.0, "7"),  # one pair, correct but unformatted: correctness not counted
    ("7", 0.0, 0.0, None),
])
def test_max_digit_rewards(text, acc, score, pred):
    scored = MAX.score(text, (3, 7, 1, 5))
    assert (scored.acc, scored.paper_a_score, scored.pred) == (acc, score, pred)


@pytest.mark.parametrize("answer, acc", [
    ("59", 1.0), ("95", 1.0), ("2228", 1.0), ("11129", 1.0),  # several valid answers for S = 14
    ("0059", 0.0),  # zero digits are not allowed
    ("122225", 0.0),  # sum 14 but six digits (at most five)
    ("58", 0.0), ("", 0.0),
])
def test_digit_sum_accepts_every_decomposition(answer, acc):
    assert SUM.score(FORMATTED.format(answer), (14,)).acc == acc


def test_decode_stops_at_eos_and_demonstrations_are_well_formed():
    ids = encode(["<reasoning>", "a", "</reasoning>", "<answer>", "4", "</answer>"]) + [EOS_ID, TOKEN_ID["9"]]
    assert decode_response(ids) == "<reasoning>a</reasoning><answer>4</answer>"
    rng = random.Random(0)
    for task in (MAX, SUM):  # the tag-format tasks (digit_chain's demonstrations: test_lab_digit_chain_on_cpu.py)
        for _ in range(50):
            problem = task.sample_problem(rng)
            demo = task.demonstration(problem, rng)
            assert demo[-1] == EOS_ID
            assert task.score(decode_response(demo), problem).paper_a_score >= 10.0  # the format is always right


def test_prompts_have_a_fixed_length_per_task():
    rng = random.Random(1)
    for task in TASKS.values():
        assert len({len(task.prompt(task.sample_problem(rng))) for _ in range(100)}) == 1
