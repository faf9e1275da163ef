"""The lab's update path is verl's: one batch dumped from a real ``python -m gtpo_verl.main`` step
(``tests/fixtures/lab/real_step_gtpo_token.json`` + ``.safetensors``, a ``gtpo.audit`` dump of the CPU demo's DAPO_TOKEN
run) gets the advantages verl stored for the actor, and verl's own ``compute_advantage`` /
``ppo_loss`` give what the lab computes for every estimator and loss mode of the methods table."""

import dataclasses
import os

import numpy as np
import pytest
import torch

import verl  # noqa: F401  (loads the plugin)
from gtpo_verl.lab.methods import METHODS
from gtpo_verl.lab.update import AdvantageStep, actor_config, algorithm_config, policy_loss
from gtpo_verl.trainer.audit_dump import load_audit_step
from support.paths import FIXTURES

FIXTURE = str(FIXTURES / "lab" / "real_step_gtpo_token.json")


@pytest.fixture(scope="module")
def step():
    return load_audit_step(FIXTURE)


def _lab_advantages(method, step, initial_entropy=None):
    old_log_probs = torch.zeros_like(step["entropys"])
    return AdvantageStep.prepare(method, initial_entropy)(
        step["token_level_rewards"], step["response_mask"], np.array(step["uids"], dtype=object), step["entropys"],
        step["responses"], old_log_probs).advantages


def test_real_step_advantages_match_what_verl_stored(step):
    method = dataclasses.replace(METHODS["DAPO_TOKEN"], algorithm={"gtpo_token": step["algorithm"]["gtpo_token"]})
    assert step["estimator"] == method.estimator == "gtpo_token"
    torch.testing.assert_close(_lab_advantages(method, step), step["advantages"], atol=1e-6, rtol=0)


def _verl_compute_advantage(method, step, initial_entropy=None):
    """verl's ``ray_trainer.compute_advantage`` on a DataProto, the inputs bound as the trainer mixin binds them."""
    from verl import DataProto
    from verl.trainer.ppo.ray_trainer import compute_advantage

    from gtpo_verl.plugin.context import bind_estimator_inputs

    data = DataProto.from_dict(
        tensors={"token_level_rewards": step["token_level_rewards"], "response_mask": step["response_mask"]},
        non_tensors={"uid": np.array(step["uids"], dtype=object)},
    )
    config = algorithm_config(method)
    bound = {"entropys": step["entropys"], "responses": step["responses"], "old_log_probs": torch.zeros_like(step["entropys"])}
    with bind_estimator_inputs(initial_entropy=initial_entropy, **bound):
        out = compute_advantage(data, adv_estimator=method.estimator, gamma=1.0, lam=1.0, num_repeat=8,
                                norm_adv_by_std_in_grpo=config.get("norm_adv_by_std_in_grpo", True), config=config)
    return out.batch["advantages"]


@pytest.mark.parametrize("name", ["DAPO", "DAPO_TOKEN", "DAPO_SEQ", "GRPO", "GTPO_TRAJ", "GTPO_TRAJ_D08", "GTPO_TRAJ_D10", "GTPO_TRAJ_D12",
                                  "DAPO_TOKEN_A05"])
def test_every_estimator_of_the_table_matches_verls_compute_advantage(step, name):
    method = METHODS[name]
    initial_entropy = 0.5 if method.algorithm.get("gtpo_traj", {}).get("entropy_threshold_ratio") else None
    torch.testing.assert_close(_lab_advantages(method, step, initial_entropy), _verl_compute_advantage(method, step, initial_entropy),
                               atol=0, rtol=0)


def _verl_ppo_loss(config, old_log_probs, log_probs, advantages, mask):
    """verl's actor loss (``workers/utils/losses.ppo_loss``) on an unpadded layout with one prompt token per row."""
    from tensordict import TensorDict
    from verl.utils import tensordict_utils as tu
    from verl.workers.utils.losses import ppo_loss

    rows, width = mask.shape
    lengths = mask.sum(1)
    # flat model output: per row, the log-probs of its valid tokens then one value for the last position
    flat = torch.cat([torch.cat([log_probs[i, : lengths[i]], torch.zeros(1)]) for i in range(rows)])
    data = TensorDict({
        "prompts": torch.ones(rows, 1, dtype=torch.long),
        "responses": torch.ones(rows, width, dtype=torch.long),
        "attention_mask": torch.cat([torch.ones(rows, 1, dtype=torch.long), mask.long()], dim=1),
        "response_mask": mask.long(),
        "old_log_probs": old_log_probs,
        "advantages": advantages,
    }, batch_size=[rows])
    tu.assign_non_tensor(data, dp_size=1, batch_num_tokens=int(mask.sum()), global_batch_size=rows, max_response_len=width)
    loss, _ = ppo_loss(config, {"log_probs": flat}, data)
    return loss


@pytest.mark.parametrize("name", ["DAPO", "DAPO_SEQ", "GRPO", "CLIP_COV", "KL_COV"])
def test_every_loss_of_the_table_matches_verls_ppo_loss(step, name):
    method = METHODS[name]
    mask = step["response_mask"]
    generator = torch.Generator().manual_seed(0)
    old = -torch.rand(mask.shape, generator=generator) * 2
    new = old + 0.3 * torch.randn(mask.shape, generator=generator)  # ratios well outside [0.8, 1.28]: clipping acts
    advantages = step["advantages"]
    lab, _ = policy_loss(actor_config(method), old, new * mask, advantages, mask)
    verl_loss = _verl_ppo_loss(actor_config(method), old, new * mask, advantages, mask)
    torch.testing.assert_close(lab, verl_loss, atol=1e-6, rtol=0)
    assert lab.abs() > 1e-4  # a loss that is not trivially zero
