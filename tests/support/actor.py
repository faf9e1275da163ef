"""verl actor configs for loss tests."""

from __future__ import annotations


def actor_config(loss_agg_mode="seq-mean-token-mean", ratio_mean="arithmetic", loss_mode="grpo_s"):
    """verl's ``ActorConfig`` with DAPO's clip pair (0.2 / 0.28) and our policy-loss config."""
    from verl.workers.config import ActorConfig

    from gtpo_verl.plugin.loss_config import GTPOPolicyLossConfig

    return ActorConfig(
        strategy="fsdp",
        rollout_n=1,
        ppo_micro_batch_size_per_gpu=1,
        clip_ratio=0.2,
        clip_ratio_low=0.2,
        clip_ratio_high=0.28,
        loss_agg_mode=loss_agg_mode,
        policy_loss=GTPOPolicyLossConfig(loss_mode=loss_mode, sequence_ratio_mean=ratio_mean),
    )
