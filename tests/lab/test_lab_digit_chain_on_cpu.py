"""digit_chain: rewards and grammar roles on hand-made responses, GTPO-token's bonus share per role
against a float64 loop, and the inverse-CDF sampler behind fixed-sample validation."""

import dataclasses
import random

import numpy as np
import pytest
import torch

from gtpo_verl.lab.policy import PolicySize, TinyCausalLM, sample
from gtpo_verl.lab.tasks import (
    EOS_ID, PAD_ID, ROLE_DECISION as D, ROLE_FORCED as F, ROLE_NONE as N, ROLE_OFF as O, TASKS, VOCAB, decode_response, encode,
)
from gtpo_verl.lab.train import LabSize, gtpo_bonus_shares, validate

CHAIN = TASKS["digit_chain"]


@pytest.mark.parametrize("text, acc, score_a", [
    ("59=14", 1.0, 20.0), ("95=14", 1.0, 20.0), ("11129=14", 1.0, 20.0),  # several valid chains for S = 14
    ("58=14", 0.0, 10.0),  # well formed, wrong sum
    ("59=13", 0.0, 0.0),  # S miscopied: not well formed, so not correct either
    ("059=14", 0.0, 0.0), ("111119=14", 0.0, 0.0),  # no zero digit; at most five digits
    ("59=14=", 0.0, 0.0), ("=14", 0.0, 0.0), ("", 0.0, 0.0),
])
def test_digit_chain_rewards(text, acc, score_a):
    scored = CHAIN.score(text, (14,))
    assert (scored.acc, scored.paper_a_score) == (acc, score_a)


def _roles(target: int, responses: list[list[str]]):
    width = max(map(len, responses))
    ids = torch.tensor([encode(r) + [PAD_ID] * (width - len(r)) for r in responses])
    mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in responses])
    prompts = torch.tensor([CHAIN.prompt((target,))] * len(responses))
    return CHAIN.token_roles(prompts, ids, mask).tolist()


def test_token_roles_follow_the_grammar():
    eos = "<eos>"
    roles = _roles(14, [
        ["5", "9", "=", "1", "4", eos],  # digits and the choice to stop are decisions; S's copy and <eos> are forced
        ["1", "1", "1", "2", "9", "=", "1", "4", eos],  # after a fifth digit "=" is forced
        ["5", "=", "1", "3", eos],  # a miscopied digit is forced; what follows it is off the grammar
        ["=", "1", "4", eos],  # "=" before any digit leaves the grammar
        ["5", eos],  # <eos> in place of a digit or "=": that position was a decision
    ])
    assert roles == [
        [D, D, D, F, F, F, N, N, N],
        [D, D, D, D, D, F, F, F, F],
        [D, D, F, F, O, N, N, N, N],
        [D, O, O, O, N, N, N, N, N],
        [D, D, N, N, N, N, N, N, N],
    ]


def test_demonstrations_without_noise_are_correct_chains():
    task = dataclasses.replace(CHAIN, demo_accuracy=1.0, copy_noise=0.0)
    rng = random.Random(0)
    for _ in range(200):
        problem = task.sample_problem(rng)
        demo = task.demonstration(problem, rng)
        assert demo[-1] == EOS_ID and task.score(decode_response(demo), problem).acc == 1.0
    assert len({task.prompt(task.sample_problem(rng)).__len__() for _ in range(50)}) == 1


def _bonus_reference(entropy, mask, success, roles, group):
    """Eq. S18's bonus share by explicit loops in float64 (α2 cancels in a share)."""
    h, m, s, r = (np.asarray(x, dtype=np.float64) for x in (entropy, mask, success, roles))
    total = decision = 0.0
    for g in range(h.shape[0] // group):
        rows = range(g * group, (g + 1) * group)
        for t in range(h.shape[1]):
            active = [i for i in rows if s[i] and m[i, t]]
            column = sum(max(h[i, t], 0.0) for i in active)
            for i in active:
                b = max(h[i, t], 0.0) / column * len(active) if column > 0 else 1.0
                total += b
                decision += b if r[i, t] == D else 0.0
    return decision / total


def test_gtpo_bonus_share_per_role_matches_a_loop():
    generator = torch.Generator().manual_seed(3)
    rows, width, group = 12, 7, 4
    entropy = torch.rand(rows, width, generator=generator) * 2
    entropy[0, 0] = 0.0
    lengths = torch.randint(2, width + 1, (rows,), generator=generator)
    mask = (torch.arange(width)[None] < lengths[:, None]).float()
    success = torch.rand(rows, generator=generator) < 0.5
    success[:2] = True
    roles = torch.where(torch.rand(rows, width, generator=generator) < 0.6, D, F)
    share, token_share = gtpo_bonus_shares(entropy, mask, success, roles, group)
    assert share == pytest.approx(_bonus_reference(entropy, mask, success, roles, group), rel=1e-6)
    active = mask.bool() & success[:, None]
    assert token_share == pytest.approx(float((active & (roles == D)).sum() / active.sum()))


def test_the_inverse_cdf_sampler_draws_the_policys_distribution():
    torch.manual_seed(0)
    model = TinyCausalLM(len(VOCAB), PolicySize())
    prompts = torch.tensor([CHAIN.prompt((9,))] * 20_000)
    responses, _ = sample(model, prompts, 1, EOS_ID, PAD_ID, 1.0, torch.Generator().manual_seed(1))
    with torch.no_grad():
        log_probs = model(prompts[:1])[0, -1].log_softmax(-1)
    frequencies = torch.bincount(responses[:, 0], minlength=len(VOCAB)).double() / len(prompts)
    # each frequency within 5 binomial standard deviations of its probability
    probs = log_probs.exp().double()
    assert torch.all((frequencies - probs).abs() <= 5 * (probs * (1 - probs) / len(prompts)).sqrt() + 1e-12)


def test_a_policy_that_has_not_changed_validates_identically():
    torch.manual_seed(0)
    model = TinyCausalLM(len(VOCAB), PolicySize())
    size = LabSize(eval_prompts=8, eval_samples=8)
    first = validate(model, CHAIN, size, seed=5)
    assert validate(model, CHAIN, size, seed=5) == first  # no fresh draw between validations
