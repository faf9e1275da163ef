"""Paired seeds: a seed fixes the warm start, the prompt stream and the sampler for every method."""

import dataclasses
import json

import pytest
import torch

import verl  # noqa: F401  (loads the plugin)
from gtpo_verl.lab.methods import METHODS, resolve_methods
from gtpo_verl.lab.policy import init_seed
from gtpo_verl.lab.tasks import TASKS, PromptStream
from gtpo_verl.lab.train import SALT_PROMPTS, LabSize, train_run, warm_start

TINY = LabSize(steps=3, prompts=2, group=4, eval_every=3, eval_prompts=4, eval_samples=4, warm_start_steps=3, warm_start_batch=8)
TASK = TASKS["max_digit"]


def test_warm_start_and_prompt_stream_depend_on_the_seed_only():
    a, b, other = warm_start(TASK, 7, TINY), warm_start(TASK, 7, TINY), warm_start(TASK, 8, TINY)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not all(torch.equal(a[k], other[k]) for k in a)
    stream = lambda seed: PromptStream(TASK, init_seed(seed, SALT_PROMPTS)).take(20)  # noqa: E731
    assert stream(7) == stream(7) != stream(8)


def test_methods_of_one_seed_start_identically():
    weights = warm_start(TASK, 3, TINY)
    # GRPO and GTPO_TRAJ share the schedule (no dynamic sampling, one update): the same prompts and
    # sampler draws give the same first batch, so the first step's reward, entropy and length agree
    grpo = train_run(METHODS["GRPO"], TASK, 3, TINY, weights)
    traj = train_run(METHODS["GTPO_TRAJ"], TASK, 3, TINY, weights)
    assert grpo["validation"][0] == traj["validation"][0]
    for key in ("reward", "entropy", "length"):
        assert grpo["curves"][key][0] == traj["curves"][key][0]
    again = train_run(METHODS["GRPO"], TASK, 3, TINY, weights)
    assert json.dumps(again["curves"]) == json.dumps(grpo["curves"])  # NaN-safe equality (unused health keys are NaN)
    assert again["validation"] == grpo["validation"]


def test_a_clip_cov_run_does_not_depend_on_the_global_rng_it_finds():
    # verl's clip_cov picks its clipped tokens with torch.randperm on the global RNG; at the lab's
    # batch size it has candidates to choose from
    size = LabSize(steps=2, eval_every=2, eval_prompts=4, eval_samples=4, warm_start_steps=30)
    task = TASKS["digit_chain"]
    weights = warm_start(task, 0, size)
    runs = []
    for state in (1, 2):
        torch.manual_seed(state)
        runs.append(train_run(METHODS["CLIP_COV"], task, 0, size, weights))
    assert runs[0]["curves"]["clipfrac"][0] > 0  # the selection acted
    assert json.dumps(runs[0]["curves"]) == json.dumps(runs[1]["curves"]) and runs[0]["validation"] == runs[1]["validation"]


def test_methods_accept_registered_estimators_and_transform_lists():
    custom = resolve_methods("grpo_s+entropy_advantage,DAPO")
    assert custom[0].estimator == "grpo_s" and custom[0].transforms == ({"name": "entropy_advantage"},)
    assert dataclasses.replace(custom[0], name="DAPO", estimator="grpo", transforms=()) == custom[1]
    with pytest.raises(ValueError, match="registered estimator"):
        resolve_methods("no_such_estimator")
    with pytest.raises(ValueError, match="unknown transform"):
        resolve_methods("grpo+no_such_transform")
