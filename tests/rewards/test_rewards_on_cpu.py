"""Paper A's format + correctness reward (gtpo_verl/rewards/format_math.py), docs/spec.md A.7.

Golden values are worked out by hand from the official reward_math.py rules (quoted in the
module docstring); each case says which rule fires.
"""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gtpo_verl.rewards import format_math as fm

GOOD = "<reasoning>\n48 / 2 = 24, 48 + 24 = 72\n</reasoning>\n<answer>72</answer>"


@pytest.mark.parametrize(
    ("completion", "expected"),
    [
        # both pairs, answer last → 10
        (GOOD, 10.0),
        # `$` also matches before one final newline → still 10
        (GOOD + "\n", 10.0),
        # text after </answer>: the answer pair is not at the end; reasoning pair only, and a
        # stray <answer> tag exists → 1.5
        (GOOD + " Done.", 1.5),
        # reasoning pair only, no answer tag at all → 1
        ("<reasoning>think</reasoning> so 72", 1.0),
        # answer pair only → 1; with an unclosed <reasoning> tag → 1.5
        ("72 <answer>72</answer>", 1.0),
        ("<reasoning> 72 <answer>72</answer>", 1.5),
        # nothing → 0
        ("The answer is 72.", 0.0),
        # two trailing newlines: `$` no longer matches → reasoning pair + stray tags → 1.5
        (GOOD + "\n\n", 1.5),
    ],
)
def test_format_reward_golden(completion, expected):
    assert fm.format_reward(completion) == expected


@pytest.mark.parametrize(
    ("pred", "ref", "expected"),
    [
        ("72", "72", 10.0),  # exact
        ("71.999", "72", 10.0),  # |Δ| = 0.001 ≤ 0.01 + 1e-5·72
        ("3.98", "4", 0.0),  # |Δ| = 0.02 > 0.01004, and "4" ⊄ "3.98"
        ("4.02", "4", 10.0),  # not close, but "4" ⊂ "4.02" (official substring rule)
        ("12", "2", 10.0),  # same quirk: "2" ⊂ "12"
        ("1e3", "1000", 10.0),  # float("1e3") = 1000
        (r"\frac{1}{2}", r"\frac{1}{2}", 10.0),  # not numeric → substring
        ("x = 3", "3", 10.0),  # "3" ⊂ "x = 3"
        ("3", "x = 3", 0.0),  # "x = 3" ⊄ "3"
        (None, "3", 0.0),  # no final answer block
    ],
)
def test_correctness_reward_golden(pred, ref, expected):
    assert fm.correctness_reward(pred, ref) == expected


def test_compute_score_total_and_extra_info():
    # correct and well formatted: 10 + 10
    out = fm.compute_score("openai/gsm8k", GOOD, "72")
    assert out == {"score": 20.0, "format": 10.0, "correctness": 10.0, "acc": 1.0, "pred": "72"}
    # well formatted, wrong answer: 10 + 0
    assert fm.compute_score("openai/gsm8k", GOOD.replace(">72<", ">70<"), "72")["score"] == 10.0
    # right answer but text after it: format 1.5, correctness not counted (needs format 10)
    late = fm.compute_score("openai/gsm8k", GOOD + " Done.", "72")
    assert (late["score"], late["acc"], late["pred"]) == (1.5, 0.0, fm.NO_ANSWER)
    # answer block only: format 1, correctness not counted even though the answer is right
    assert fm.compute_score("x", "<answer>72</answer>", "72")["score"] == 1.0


def test_tagged_reference_as_in_the_official_data():
    # the official data stored "<reasoning>…</reasoning>\n<answer>a</answer>" as the reference
    tagged = "<reasoning>\nNatalia sold 48/2 = 24 clips in May.\n</reasoning>\n<answer>72</answer>"
    assert fm.reference_answer(tagged) == "72"
    assert fm.compute_score("openai/gsm8k", GOOD, tagged)["score"] == 20.0


def test_loaded_by_verls_custom_reward_loader():
    """The recipes' `reward.custom_reward_function.path=pkg://…` form, through verl's own loader."""
    from omegaconf import OmegaConf
    from verl.trainer.ppo.reward import get_custom_reward_fn

    config = OmegaConf.create(
        {
            "reward": {
                "custom_reward_function": {
                    "path": "pkg://gtpo_verl.rewards.format_math",
                    "name": "compute_score",
                    "reward_kwargs": {},
                }
            }
        }
    )
    fn = get_custom_reward_fn(config)
    # the keyword call of verl's reward managers, with the router kwargs some of them add
    out = fn(
        data_source="openai/gsm8k",
        solution_str=GOOD,
        ground_truth="72",
        extra_info={"index": 0},
        reward_router_address=None,
        reward_model_tokenizer=None,
    )
    assert out["score"] == 20.0


_PIECES = ["<reasoning>", "</reasoning>", "<answer>", "</answer>", "72", "x", "\n", " "]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(_PIECES), max_size=12), st.sampled_from(["72", "7", "x"]))
def test_reachable_values(pieces, ref):
    score = fm.compute_score("any", "".join(pieces), ref)["score"]
    assert score in {0.0, 1.0, 1.5, 10.0, 20.0}
