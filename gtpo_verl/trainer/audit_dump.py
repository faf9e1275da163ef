"""The per-step half of the entropy audit: dump what one step's estimator saw, inside training.

Opt-in with ``gtpo.audit.steps=[k, …]`` and ``gtpo.audit.dir=DIR``. For each listed global step
the trainer mixin dumps, after verl's balancing, padding, dynamic-sampling refill and the
data-parallel gather, every estimator input row as the estimator saw it (uid, sample key,
prompt and response token ids, response mask, old-policy entropy, token-level reward, score,
is-padding) and the advantages verl stored for the actor, to ``DIR/step_<k>.pt``.
``gtpo-audit DIR`` (``tools/audit.py``) then checks the dumps offline.
"""

from __future__ import annotations

import os
from typing import Any, Optional

import torch

from gtpo_verl.plugin.estimators import ESTIMATORS
from gtpo_verl.trainer.fields import padded
from gtpo_verl.trainer.settings import GTPOSettings

DUMP_PATTERN = "step_{step}.pt"
HF_SUBDIR = os.path.join("actor", "huggingface")  # where verl's FSDP checkpoint manager writes hf_model


def audit_settings(config: Any):
    """``gtpo.audit`` as its typed block (``AuditConfig``: steps sorted, each ≥ 1)."""
    return GTPOSettings.from_config(config).audit


def validate_audit_config(config: Any):
    """Start-up check: one clear error naming the key and the fix, before any worker starts."""
    settings = audit_settings(config)
    if not settings.steps:
        return settings
    if not settings.dir:
        raise ValueError("`gtpo.audit.steps` is set but `gtpo.audit.dir` is not: set gtpo.audit.dir=<folder for the dumps>")
    estimator = str(config.algorithm.adv_estimator)
    if estimator not in ESTIMATORS:
        raise ValueError(
            f"`gtpo.audit.steps` audits gtpo_verl's estimators {list(ESTIMATORS)}, not `algorithm.adv_estimator={estimator}`"
        )
    later = [s for s in settings.steps if s > 1]
    if later:
        trainer = config.trainer
        save_freq = int(trainer.get("save_freq", -1))
        contents = list(config.actor_rollout_ref.actor.checkpoint.get("save_contents", []))
        missing = [s - 1 for s in later if save_freq <= 0 or (s - 1) % save_freq]
        if missing:
            raise ValueError(
                f"`gtpo.audit.steps={list(settings.steps)}` needs the weights of steps {missing} (their checkpoints), "
                f"but `trainer.save_freq={save_freq}` does not save them: use trainer.save_freq=1 or audit steps k "
                "with k-1 a multiple of save_freq"
            )
        if "hf_model" not in contents:
            raise ValueError(
                f"`gtpo.audit.steps` needs an HF-format copy of the weights: add hf_model to "
                f"`actor_rollout_ref.actor.checkpoint.save_contents` (now {contents})"
            )
    return settings


# ---------------------------------------------------------------------------------------- dump
def _rows(value: torch.Tensor) -> list[list[int]]:
    """Per-row token lists of a nested (jagged) or padded-without-padding tensor."""
    if getattr(value, "is_nested", False):
        return [t.tolist() for t in value.unbind()]
    return value.tolist()


def dump_audit_step(trainer, batch, estimator: str, entropy: torch.Tensor, responses: torch.Tensor,
                    initial_entropy: Optional[float]) -> Optional[str]:
    """Write ``DIR/step_<k>.pt`` when the current global step is audited (called after the advantages)."""
    settings = audit_settings(trainer.config)
    step = int(getattr(trainer, "global_steps", 0))
    if step not in settings.steps:
        return None
    import transfer_queue as tq
    from omegaconf import OmegaConf

    config = trainer.config
    kl_in_reward = bool(config.algorithm.get("use_kl_in_reward", False))
    fields = ["uid", "prompts", "responses", "response_mask", "advantages", "token_level_rewards" if kl_in_reward else "rm_scores"]
    data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=fields)
    mask = padded(data["response_mask"]).to(torch.int64)
    width = mask.shape[-1]
    rewards = padded(data["token_level_rewards" if kl_in_reward else "rm_scores"]).to(torch.float32)[..., :width]
    checkpoint_dir = os.path.abspath(str(config.trainer.default_local_dir))
    weights = (
        str(config.actor_rollout_ref.model.path)
        if step == 1
        else os.path.join(checkpoint_dir, f"global_step_{step - 1}", HF_SUBDIR)
    )
    record = {
        "step": step,
        "estimator": estimator,
        "algorithm": OmegaConf.to_container(config.algorithm, resolve=True),
        "initial_entropy": initial_entropy,
        "temperature": float(config.actor_rollout_ref.rollout.temperature),
        "weights": weights,
        "keys": list(batch.keys),
        "uids": [str(u) for u in data["uid"]],
        "is_padding": [bool(tag.get("is_padding", False)) for tag in batch.tags],
        "prompt_ids": _rows(data["prompts"]),
        "response_ids": _rows(data["responses"]),
        # the estimator's inputs, exactly as bound / as verl handed them
        "response_mask": mask,
        "entropys": entropy[..., :width].clone(),
        # token ids: the bound ones where the estimator reads them, else verl's (same rows, same order)
        "responses": (responses if responses is not None else padded(data["responses"]).to(torch.int64))[..., :width].clone(),
        "token_level_rewards": rewards,
        "scores": rewards.sum(-1),
        # what verl stored for the actor
        "advantages": padded(data["advantages"]).to(torch.float32)[..., :width],
    }
    os.makedirs(settings.dir, exist_ok=True)
    path = os.path.join(settings.dir, DUMP_PATTERN.format(step=step))
    tmp = path + ".tmp"
    torch.save(record, tmp)
    os.replace(tmp, path)
    return path
