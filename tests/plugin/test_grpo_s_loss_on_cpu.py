"""The `grpo_s` policy loss: value and gradient against the hand formula (Eq. S33-S34),
float64 gradcheck, and verl's real `ppo_loss` with micro-batches (global normalisation)."""

import pytest
import torch
from tensordict import TensorDict
from torch.testing import assert_close

from gtpo_verl.plugin.loss_config import GTPOPolicyLossConfig
from support.actor import actor_config


def hand_loss(log_prob, old_log_prob, seq_adv, mask, clip_low=0.2, clip_high=0.28, geometric=False):
    """(1/G) Σ_i −min(ŵ_i Â_i, clip(ŵ_i) Â_i), ŵ_i the mean token ratio of row i (Eq. S33-S34)."""
    losses = []
    for i in range(log_prob.shape[0]):
        valid = mask[i].bool()
        if not valid.any():
            continue
        diff = (log_prob[i] - old_log_prob[i])[valid]
        w = diff.mean().exp() if geometric else diff.exp().mean()
        a = seq_adv[i]
        losses.append(-torch.minimum(w * a, torch.clamp(w, 1 - clip_low, 1 + clip_high) * a))
    return torch.stack(losses).sum() / len(losses)


def _batch(rows=6, width=5, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, width + 1, (rows,), generator=g)
    mask = (torch.arange(width).unsqueeze(0) < lengths.unsqueeze(1)).to(torch.int64)
    old = -torch.rand(rows, width, generator=g, dtype=dtype) * 2
    new = old + (torch.rand(rows, width, generator=g, dtype=dtype) - 0.5) * 0.6  # some ratios clip
    seq_adv = torch.randn(rows, generator=g, dtype=dtype)
    return old, new, seq_adv, mask


@pytest.mark.parametrize("ratio_mean", ["arithmetic", "geometric"])
def test_value_and_gradient_match_hand_formula(ratio_mean):
    from verl.trainer.ppo.core_algos import get_policy_loss_fn

    old, new, seq_adv, mask = _batch()
    advantages = seq_adv.unsqueeze(-1) * mask
    log_prob = new.clone().requires_grad_(True)
    loss, metrics = get_policy_loss_fn("grpo_s")(
        old_log_prob=old,
        log_prob=log_prob,
        advantages=advantages,
        response_mask=mask.bool(),
        loss_agg_mode="seq-mean-token-mean",
        config=actor_config(ratio_mean=ratio_mean),
        rollout_is_weights=None,
    )
    loss.backward()
    reference_lp = new.clone().requires_grad_(True)
    reference = hand_loss(reference_lp, old, seq_adv, mask, geometric=ratio_mean == "geometric")
    reference.backward()
    assert_close(loss, reference)
    assert_close(log_prob.grad, reference_lp.grad)
    assert set(metrics) >= {"actor/pg_clipfrac", "actor/ppo_kl", "actor/pg_clipfrac_lower", "actor/seq_ratio_mean"}
    assert 0.0 < metrics["actor/pg_clipfrac"] < 1.0  # the batch has clipped and unclipped sequences


def test_gradcheck_float64():
    from gtpo_verl.plugin.losses import compute_policy_loss_grpo_s

    old, new, seq_adv, mask = _batch(rows=4, width=4)
    cfg = actor_config()
    # keep away from the clip kinks, where the derivative is undefined
    new = old + 0.01 * torch.randn_like(old)

    def loss_of(lp):
        return compute_policy_loss_grpo_s(old, lp, seq_adv.unsqueeze(-1) * mask, mask.bool(), config=cfg)[0]

    assert torch.autograd.gradcheck(loss_of, (new.clone().requires_grad_(True),))


def _ppo_loss_inputs(old, new, advantages, mask, prompt_len=2):
    """A padded (non-nested) micro-batch in the layout verl's `ppo_loss` reads, plus model output."""
    from verl.utils import tensordict_utils as tu

    rows, width = mask.shape
    lengths = mask.sum(-1)
    attention = torch.cat([torch.ones(rows, prompt_len, dtype=torch.int64), mask], dim=1)
    data = TensorDict(
        {
            "prompts": torch.ones(rows, prompt_len, dtype=torch.int64),
            "responses": torch.ones(rows, width, dtype=torch.int64),
            "attention_mask": attention,
            "response_mask": mask,
            "old_log_probs": old,
            "advantages": advantages,
        },
        batch_size=[rows],
    )
    # the model emits one value per (prompt + response) token, shifted left by one
    pieces = []
    for i in range(rows):
        n = int(lengths[i])
        pieces += [new.new_zeros(prompt_len - 1), new[i, :n], new.new_zeros(1)]
    return data, {"log_probs": torch.cat(pieces)}, tu


def test_micro_batches_through_verl_ppo_loss_equal_the_whole_mini_batch():
    from verl.workers.utils.losses import ppo_loss

    old, new, seq_adv, mask = _batch(rows=8, width=6, dtype=torch.float32)
    advantages = seq_adv.unsqueeze(-1) * mask
    leaf = new.clone().requires_grad_(True)
    cfg = actor_config()
    total = 0.0
    for rows in (slice(0, 3), slice(3, 8)):  # uneven micro-batches, as dynamic batching makes
        data, model_output, tu = _ppo_loss_inputs(old[rows], leaf[rows], advantages[rows], mask[rows])
        tu.assign_non_tensor(data, dp_size=1, batch_num_tokens=int(mask.sum()), global_batch_size=8)
        loss, metrics = ppo_loss(cfg, model_output, data)
        loss.backward()  # verl's engine calls backward per micro-batch, no 1/grad_accum
        total = total + loss.detach()
        assert "actor/pg_loss" in metrics
    reference_lp = new.clone().requires_grad_(True)
    reference = hand_loss(reference_lp, old, seq_adv, mask)
    reference.backward()
    assert_close(total, reference.detach(), rtol=1e-5, atol=1e-6)
    assert_close(leaf.grad, reference_lp.grad, rtol=1e-5, atol=1e-6)


def test_data_parallel_scaling_matches_global_mean():
    """Two DP ranks, each with half the batch: verl averages gradients over ranks, so each rank's
    loss is scaled by dp_size; the mean of the two equals the single-rank loss."""
    from verl.workers.utils.losses import ppo_loss

    old, new, seq_adv, mask = _batch(rows=8, width=6, dtype=torch.float32)
    advantages = seq_adv.unsqueeze(-1) * mask
    cfg = actor_config()
    rank_losses = []
    for rows in (slice(0, 4), slice(4, 8)):
        data, model_output, tu = _ppo_loss_inputs(old[rows], new[rows], advantages[rows], mask[rows])
        tu.assign_non_tensor(data, dp_size=2, batch_num_tokens=int(mask.sum()), global_batch_size=8)
        rank_losses.append(ppo_loss(cfg, model_output, data)[0])
    assert_close(sum(rank_losses) / 2, hand_loss(new, old, seq_adv, mask), rtol=1e-5, atol=1e-6)


def test_token_mean_mode_weights_sequences_by_length():
    """With token-mean, L_i counts once per token (documented; the paper's form is seq-mean-token-mean)."""
    from verl.trainer.ppo.core_algos import get_policy_loss_fn

    old, new, seq_adv, mask = _batch()
    loss, _ = get_policy_loss_fn("grpo_s")(
        old_log_prob=old, log_prob=new, advantages=seq_adv.unsqueeze(-1) * mask, response_mask=mask.bool(),
        loss_agg_mode="token-mean", config=actor_config("token-mean"),
    )
    per_seq = []
    for i in range(mask.shape[0]):
        per_seq.append(hand_loss(new[i : i + 1], old[i : i + 1], seq_adv[i : i + 1], mask[i : i + 1]) * mask[i].sum())
    assert_close(loss, torch.stack(per_seq).sum() / mask.sum())


def test_unknown_ratio_mean_is_rejected():
    with pytest.raises(ValueError, match="sequence_ratio_mean"):
        GTPOPolicyLossConfig(loss_mode="grpo_s", sequence_ratio_mean="harmonic")
