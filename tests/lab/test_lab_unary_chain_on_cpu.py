"""unary_chain: rewards and grammar roles on hand-made responses, decisions at varying positions across
successes, and the mechanism check's arithmetic on a hand-built batch (expected shares worked by hand)."""

import dataclasses
import random

import pytest
import torch

from gtpo_verl.lab.calibration import MECHANISM_MIN_RATIO, decision_bonus_check, mechanism_check
from gtpo_verl.lab.policy import PolicySize
from gtpo_verl.lab.tasks import (
    EOS_ID, PAD_ID, ROLE_DECISION as D, ROLE_FORCED as F, ROLE_NONE as N, ROLE_OFF as O, TASKS, decode_response, encode,
)
from gtpo_verl.lab.train import WARM_START_STEPS, LabSize, policy_size, warm_start, warm_start_steps

CHAIN = TASKS["unary_chain"]
EOS = "<eos>"


@pytest.mark.parametrize("text, acc, score_a, pred", [
    ("9hgfedcba9hgfedcba2a=", 1.0, 20.0, "992"),  # 9 + 9 + 2 = 20, each digit then its countdown
    ("5dcba5dcba5dcba5dcba=", 1.0, 20.0, "5555"),  # another success for S = 20
    ("1111111111111111111a1=", 0.0, 0.0, None),  # "1" has no countdown: the stray "a" breaks the grammar
    ("9hgfedcba=", 0.0, 10.0, "9"),  # well formed, wrong sum
    ("9hgfedcb9hgfedcba2a=", 0.0, 0.0, None),  # a countdown cut short
    ("9hgfedcba9hgfedcba2a", 0.0, 0.0, None),  # no "="
    ("0=", 0.0, 0.0, None), ("=", 0.0, 0.0, None), ("", 0.0, 0.0, None),
])
def test_unary_chain_rewards(text, acc, score_a, pred):
    scored = CHAIN.score(text, (20,))
    assert (scored.acc, scored.paper_a_score, scored.pred) == (acc, score_a, pred)


def _batch(target: int, responses: list[list[str]]):
    width = max(map(len, responses))
    ids = torch.tensor([encode(r) + [PAD_ID] * (width - len(r)) for r in responses])
    mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in responses])
    prompts = torch.tensor([CHAIN.prompt((target,))] * len(responses))
    return prompts, ids, mask


def test_token_roles_follow_the_grammar():
    prompts, ids, mask = _batch(5, [
        ["3", "b", "a", "2", "a", "=", EOS],  # digits and "go on or =" are decisions; countdown letters and <eos> forced
        ["1", "4", "c", "b", "a", "=", EOS],  # "1" has no countdown: the next token is a decision again
        ["3", "b", "b", "2", "a", "=", EOS],  # a wrong countdown letter is forced; what follows it is off the grammar
        ["=", "3", "b", "a", EOS],  # "=" before any digit leaves the grammar
        ["3", "b", "a", "0", "=", EOS],  # no zero digit
        ["3", "b", "a", EOS],  # <eos> in place of a digit or "=": that position was a decision
    ])
    assert CHAIN.token_roles(prompts, ids, mask).tolist() == [
        [D, F, F, D, F, D, F],
        [D, D, F, F, F, D, F],
        [D, F, F, O, O, O, O],
        [D, O, O, O, O, N, N],
        [D, F, F, D, O, O, N],
        [D, F, F, D, N, N, N],
    ]


def _successes(target: int, count: int, seed: int) -> list[list[int]]:
    task = dataclasses.replace(CHAIN, demo_accuracy=1.0)
    rng = random.Random(seed)
    return [task.demonstration((target,), rng) for _ in range(count)]


def test_successes_hold_decisions_at_varying_positions_with_varying_forced_segments():
    low, high = CHAIN.target_range
    for target in range(low, high + 1):
        demos = _successes(target, 16, seed=target)  # one group of successes for one prompt
        assert all(CHAIN.score(decode_response(d), (target,)).acc == 1.0 for d in demos)
        assert {len(d) for d in demos} == {target + 2} and 20 <= target + 2 <= 40 <= CHAIN.max_response_tokens
        width = target + 2
        ids = torch.tensor(demos)
        prompts = torch.tensor([CHAIN.prompt((target,))] * len(demos))
        roles = CHAIN.token_roles(prompts, ids, torch.ones_like(ids))
        assert bool(((roles == D) | (roles == F)).all())  # a success has no off-grammar token
        chains = [CHAIN.score(decode_response(d), (target,)).pred for d in demos]  # each success's digits
        assert [int((r == D).sum()) for r in roles] == [len(c) + 1 for c in chains]  # each digit, then "="
        # every success decides at 0 and writes "=" at S; in between its decisions sit where its digits put them
        positions = {tuple(torch.nonzero(r == D)[:, 0].tolist()) for r in roles}
        assert all(p[0] == 0 and p[-1] == target for p in positions)
        assert len({p[1] for p in positions}) >= 2  # the second decision at ≥ 2 absolute positions
        mixed_columns = [t for t in range(width) if (roles[:, t] == D).any() and (roles[:, t] == F).any()]
        assert len(mixed_columns) >= 2  # columns where S18's bonus can favour decisions over forced tokens
        countdowns = {int(d) - 1 for c in chains for d in c}
        assert len(countdowns) >= 2  # forced segments of varying length before the next decision


def test_wrong_demonstrations_are_well_formed_chains_that_fit_the_response_cap():
    rng = random.Random(1)
    outcomes = []
    for _ in range(400):
        problem = CHAIN.sample_problem(rng)
        demo = CHAIN.demonstration(problem, rng)
        scored = CHAIN.score(decode_response(demo), problem)
        assert demo[-1] == EOS_ID and len(demo) <= CHAIN.max_response_tokens and scored.paper_a_score >= 10.0
        outcomes.append(scored.acc)
    assert 0.6 <= sum(outcomes) / len(outcomes) <= 0.8  # demo_accuracy 0.7


def test_only_unary_chain_widens_the_policys_context():
    size = LabSize()
    assert policy_size(CHAIN, size) == dataclasses.replace(PolicySize(), max_len=5 + 40)
    assert all(policy_size(TASKS[name], size) == size.policy for name in ("digit_chain", "max_digit", "digit_sum"))


def test_unary_chain_warm_starts_for_600_steps_the_other_tasks_for_the_shared_150():
    assert WARM_START_STEPS == 150 and LabSize().warm_start_steps is None
    assert warm_start_steps(CHAIN, LabSize()) == 600
    assert all(warm_start_steps(TASKS[name], LabSize()) == 150 for name in ("digit_chain", "max_digit", "digit_sum"))
    assert all(warm_start_steps(TASKS[name], LabSize(warm_start_steps=7)) == 7 for name in TASKS)  # set explicitly: it wins


def test_the_warm_start_trains_for_the_tasks_own_length():
    # a task's own length and the same length set in LabSize give the same weights (tiny lengths keep it fast)
    short = dataclasses.replace(CHAIN, warm_start_steps=2)
    own = warm_start(short, 0, LabSize(warm_start_batch=8))
    explicit = warm_start(CHAIN, 0, LabSize(warm_start_steps=2, warm_start_batch=8))
    overridden = warm_start(short, 0, LabSize(warm_start_steps=3, warm_start_batch=8))
    assert all(torch.equal(own[k], explicit[k]) for k in own)
    assert not all(torch.equal(own[k], overridden[k]) for k in own)


def test_digit_chains_default_warm_start_is_the_old_150_steps():
    # digit_chain sets no length of its own: the default gives the weights of an explicit 150 (the old default)
    task = TASKS["digit_chain"]
    default = warm_start(task, 0, LabSize(warm_start_batch=4))
    explicit = warm_start(task, 0, LabSize(warm_start_steps=150, warm_start_batch=4))
    assert all(torch.equal(default[k], explicit[k]) for k in default)


def test_the_check_cli_warm_starts_for_the_tasks_length_at_group_16_unless_told(monkeypatch, tmp_path):
    import gtpo_verl.lab.calibration as calibration
    from gtpo_verl.lab.__main__ import main

    sizes = []

    def fake_check(task_name, seed, size):
        sizes.append(size)
        profile = {"share_above_0.7": 0.2, "median": 0.01, "mean_length": 30.0}
        return {"task": task_name, "seed": seed, "prompts": size.prompts, "group": size.group,
                "warm_start_steps": warm_start_steps(TASKS[task_name], size), "bonus_on_decisions": 0.6,
                "decision_token_share": 0.3, "ratio": 2.0, "min_ratio": MECHANISM_MIN_RATIO, "passed": True,
                "mixed_groups": 8, "groups": 8, "pass_rate": 0.4, "profile": profile, "targets": calibration.PROFILE_TARGETS}

    monkeypatch.setattr(calibration, "mechanism_check", fake_check)
    assert main(["--check-mechanism", "--tasks", "unary_chain", "--group", "4", "--out", str(tmp_path)]) == 0
    assert main(["--check-mechanism", "--tasks", "unary_chain", "--warm-start-steps", "150", "--out", str(tmp_path)]) == 0
    assert [s.group for s in sizes] == [16, 16]  # the pre-registered group, whatever --group says
    assert [warm_start_steps(CHAIN, s) for s in sizes] == [600, 150]
    assert (tmp_path / "mechanism_check_unary_chain_seed0.json").exists()


# The check's arithmetic on one hand-built batch, group size 4. Group 0 (mixed: rows 0–1 succeed):
#   column 0: D 2.0, D 1.0          → bonus 2·2/3, 2·1/3: 2 on decisions of d_0 = 2
#   column 1: F 0.1, D 1.5          → 2·0.1/1.6 = 1/8 forced, 2·1.5/1.6 = 15/8 decision
#   column 2: D 1.0, F 0.5          → 2·1/1.5 = 4/3 decision, 2/3 forced
#   column 3: F 0.3 (row 1 padded)  → 1 forced (d_3 = 1)
# bonus on decisions 2 + 15/8 + 4/3 = 125/24 of Σ d_t = 7: 125/168; decisions are 4 of 7 success tokens.
# Group 1 (all succeed) is dropped, as dynamic sampling drops it: counted, it would change both shares.
ENTROPY = [[2.0, 0.1, 1.0, 0.3], [1.0, 1.5, 0.5, 0.0], [0.7, 0.7, 0.7, 0.7], [0.2, 0.2, 0.0, 0.0]] + [[1.0, 1.0, 1.0, 1.0]] * 4
MASK = [[1, 1, 1, 1], [1, 1, 1, 0], [1, 1, 1, 1], [1, 1, 0, 0]] + [[1, 1, 1, 1]] * 4
ROLES = [[D, F, D, F], [D, D, F, N], [D, D, D, D], [D, D, N, N]] + [[F, F, F, F]] * 4
ACC = [1, 1, 0, 0] + [1] * 4


def test_the_mechanism_check_arithmetic_on_a_hand_built_batch():
    result = decision_bonus_check(torch.tensor(ENTROPY), torch.tensor(MASK), torch.tensor(ACC, dtype=torch.float32),
                                  torch.tensor(ROLES), group=4)
    assert result["bonus_on_decisions"] == pytest.approx(125 / 168, rel=1e-6)
    assert result["decision_token_share"] == pytest.approx(4 / 7, rel=1e-6)
    assert result["ratio"] == pytest.approx(125 / 96, rel=1e-6) and 125 / 96 >= MECHANISM_MIN_RATIO
    assert result["passed"] and (result["mixed_groups"], result["groups"]) == (1, 2)


def test_the_check_fails_where_decisions_share_their_columns_with_decisions_only():
    # both successes decide at 0 and are forced at 1–2, as in digit_chain: the bonus keeps the token share
    entropy = torch.tensor([[2.0, 0.1, 0.1], [1.0, 0.5, 0.9], [1.0, 1.0, 1.0], [1.0, 1.0, 1.0]])
    roles = torch.tensor([[D, F, F], [D, F, F], [D, D, D], [D, D, D]])
    result = decision_bonus_check(entropy, torch.ones(4, 3), torch.tensor([1.0, 1.0, 0.0, 0.0]), roles, group=4)
    assert result["bonus_on_decisions"] == pytest.approx(1 / 3) and result["decision_token_share"] == pytest.approx(1 / 3)
    assert result["ratio"] == pytest.approx(1.0) and not result["passed"]


def test_the_mechanism_check_runs_end_to_end_at_a_tiny_size():
    size = LabSize(prompts=2, group=4, warm_start_steps=2, warm_start_batch=8)
    result = mechanism_check("unary_chain", seed=0, size=size)
    assert (result["prompts"], result["group"], result["profile"]["responses"], result["warm_start_steps"]) == (2, 4, 8, 2)
    assert result["profile"]["mean_length"] <= CHAIN.max_response_tokens
    assert {"bonus_on_decisions", "decision_token_share", "ratio", "passed", "pass_rate", "roles", "targets"} <= set(result)
    with pytest.raises(ValueError, match="no grammar roles"):
        mechanism_check("max_digit", seed=0, size=size)
