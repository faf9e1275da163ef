"""Entropy audit: prove that each old-policy entropy value reaching an estimator sits on its own token.

Opt-in with ``gtpo.audit.steps=[k, …]`` and ``gtpo.audit.dir=DIR``. For each listed global step
the trainer mixin dumps, after verl's balancing, padding, dynamic-sampling refill and the
data-parallel gather, every estimator input row as the estimator saw it (uid, sample key,
prompt and response token ids, response mask, old-policy entropy, token-level reward, score,
is-padding) and the advantages verl stored for the actor, to ``DIR/step_<k>.pt``.

``python -m gtpo_verl.audit DIR`` then checks each dump:

- advantages: recomputed offline with the pure functions of ``gtpo_verl.algorithms`` from the
  dumped inputs (max abs diff ≤ 1e-6);
- entropy: recomputed outside verl with plain ``transformers`` from an HF-format copy of the
  weights the step's old-log-prob pass used (the initial model for step 1; for step k > 1 the
  checkpoint of step k-1, saved by verl with ``hf_model`` in
  ``actor_rollout_ref.actor.checkpoint.save_contents``), on temperature-scaled logits at the
  rollout temperature, over every valid token of every non-padding row (max abs diff ≤ 1e-3).

It prints a JSON report (``rows_checked``, ``tokens_checked``, ``entropy_max_abs_diff``,
``advantage_max_abs_diff``, ``passed``) and exits non-zero when a check fails.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys
from typing import Any, Optional

import torch

ENTROPY_TOLERANCE = 1e-3
ADVANTAGE_TOLERANCE = 1e-6
DUMP_PATTERN = "step_{step}.pt"
HF_SUBDIR = os.path.join("actor", "huggingface")  # where verl's FSDP checkpoint manager writes hf_model
ESTIMATORS = ("gtpo_token", "grpo_s", "gtpo_traj")


# ---------------------------------------------------------------------------------------- config
def audit_settings(config: Any):
    """``gtpo.audit`` as its typed block (``AuditConfig``: steps sorted, each ≥ 1)."""
    from gtpo_verl.integration.config import GTPOSettings

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
def _padded(value: torch.Tensor, fill=0) -> torch.Tensor:
    return value.to_padded_tensor(fill) if getattr(value, "is_nested", False) else value


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
    mask = _padded(data["response_mask"]).to(torch.int64)
    width = mask.shape[-1]
    rewards = _padded(data["token_level_rewards" if kl_in_reward else "rm_scores"]).to(torch.float32)[..., :width]
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
        "responses": (responses if responses is not None else _padded(data["responses"]).to(torch.int64))[..., :width].clone(),
        "token_level_rewards": rewards,
        "scores": rewards.sum(-1),
        # what verl stored for the actor
        "advantages": _padded(data["advantages"]).to(torch.float32)[..., :width],
    }
    os.makedirs(settings.dir, exist_ok=True)
    path = os.path.join(settings.dir, DUMP_PATTERN.format(step=step))
    tmp = path + ".tmp"
    torch.save(record, tmp)
    os.replace(tmp, path)
    return path


# ---------------------------------------------------------------------------------------- check
def recompute_advantages(record: dict) -> torch.Tensor:
    """The estimator's advantages from the dumped inputs, through the pure functions only."""
    from omegaconf import OmegaConf

    from gtpo_verl.algorithms.groups import group_ids_from_uids
    from gtpo_verl.algorithms.sequence_shaping import grpo_s_advantage
    from gtpo_verl.algorithms.token_shaping import gtpo_token_advantage
    from gtpo_verl.algorithms.trajectory import gtpo_traj_advantage
    from gtpo_verl.integration.config import GRPOSConfig, GTPOTokenConfig, GTPOTrajConfig

    algorithm = OmegaConf.create(record["algorithm"])
    mask, entropys, scores = record["response_mask"], record["entropys"], record["scores"]
    group_ids, num_groups = group_ids_from_uids(record["uids"])
    estimator = record["estimator"]
    if estimator == "gtpo_token":
        kwargs = GTPOTokenConfig.from_algorithm_config(algorithm).function_kwargs()
        result = gtpo_token_advantage(entropys, mask, scores, group_ids, num_groups, **kwargs)
    elif estimator == "grpo_s":
        kwargs = GRPOSConfig.from_algorithm_config(algorithm).function_kwargs()
        result = grpo_s_advantage(entropys, mask, scores, group_ids, num_groups, **kwargs)
    elif estimator == "gtpo_traj":
        cfg = GTPOTrajConfig.from_algorithm_config(algorithm)
        kwargs = cfg.function_kwargs(initial_entropy=record["initial_entropy"])
        result = gtpo_traj_advantage(
            record["responses"], mask, scores, group_ids, num_groups, entropys if cfg.needs_entropy else None, **kwargs
        )
    else:
        raise ValueError(f"{estimator!r} is not one of gtpo_verl's estimators {list(ESTIMATORS)}")
    return result.advantages.to(torch.float32)


def recompute_entropy(record: dict, weights: str, rows_per_pass: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token entropy of the non-padding rows with plain transformers: ``(entropy, valid)`` as ``(R, T)``.

    H_t = logsumexp(z) - Σ softmax(z)·z with z = logits / temperature, the logits at the position
    before each response token (the model predicting it from the prompt and earlier response).
    """
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(weights, dtype=torch.float32, attn_implementation="eager")
    model.eval()
    real = [i for i, pad in enumerate(record["is_padding"]) if not pad]
    width = record["response_mask"].shape[-1]
    out = torch.zeros(len(real), width, dtype=torch.float32)
    for start in range(0, len(real), rows_per_pass):  # bounded memory; each pass is one batched forward
        rows = real[start : start + rows_per_pass]
        prompts = [record["prompt_ids"][i] for i in rows]
        responses = [record["response_ids"][i][:width] for i in rows]
        sequences = [p + r for p, r in zip(prompts, responses)]
        length = max(len(s) for s in sequences)
        input_ids = torch.zeros(len(rows), length, dtype=torch.int64)
        attention = torch.zeros(len(rows), length, dtype=torch.int64)
        for j, seq in enumerate(sequences):  # right padding: valid positions keep ids 0..L-1
            input_ids[j, : len(seq)] = torch.tensor(seq)
            attention[j, : len(seq)] = 1
        positions = torch.arange(length).expand(len(rows), -1)
        with torch.no_grad():
            logits = model(input_ids=input_ids, attention_mask=attention, position_ids=positions).logits.float()
        logits = logits / record["temperature"]
        prompt_len = torch.tensor([len(p) for p in prompts])
        take = (prompt_len.unsqueeze(1) - 1 + torch.arange(width)).clamp(max=length - 1)
        z = logits.gather(1, take.unsqueeze(-1).expand(-1, -1, logits.shape[-1]))
        entropy = torch.logsumexp(z, -1) - (torch.softmax(z, -1) * z).sum(-1)
        out[start : start + len(rows)] = entropy
    valid = record["response_mask"][real] > 0
    return out, valid


def check_step(record: dict, weights: Optional[str] = None) -> dict:
    """Both checks for one dump; returns the figures."""
    mask = record["response_mask"] > 0
    recomputed = recompute_advantages(record)
    advantage_diff = float((torch.where(mask, recomputed, 0.0) - torch.where(mask, record["advantages"], 0.0)).abs().max())
    padding = torch.tensor(record["is_padding"], dtype=torch.bool)
    padding_nonzero = bool(record["advantages"][padding].abs().sum() > 0) if bool(padding.any()) else False

    weights = weights or record["weights"]
    if not os.path.isdir(weights):
        raise FileNotFoundError(
            f"step {record['step']}: no HF-format weights at {weights}; the old-log-prob pass of step k uses the "
            "weights saved at step k-1: run with trainer.save_freq=1 and hf_model in "
            "actor_rollout_ref.actor.checkpoint.save_contents (or pass --weights)"
        )
    entropy, valid = recompute_entropy(record, weights)
    dumped = record["entropys"][~padding]
    entropy_diff = float((entropy - dumped)[valid].abs().max()) if bool(valid.any()) else float("nan")
    return {
        "step": record["step"],
        "estimator": record["estimator"],
        "weights": weights,
        "rows": len(record["uids"]),
        "rows_checked": int((~padding).sum()),
        "padding_rows": int(padding.sum()),
        "tokens_checked": int(valid.sum()),
        "entropy_max_abs_diff": entropy_diff,
        "advantage_max_abs_diff": advantage_diff,
        "padding_advantages_zero": not padding_nonzero,
    }


def check_audit_dir(directory: str, weights: Optional[str] = None) -> dict:
    """Check every dump in ``directory``; the report ``make demo-cluster`` puts in its summary."""
    paths = sorted(glob.glob(os.path.join(directory, DUMP_PATTERN.format(step="*"))))
    if not paths:
        raise FileNotFoundError(f"no audit dumps ({DUMP_PATTERN.format(step='<k>')}) in {directory}: run with gtpo.audit.steps=[k] gtpo.audit.dir={directory}")
    steps = [check_step(torch.load(p, weights_only=False), weights) for p in paths]
    entropy_diff = max(s["entropy_max_abs_diff"] for s in steps)
    advantage_diff = max(s["advantage_max_abs_diff"] for s in steps)
    return {
        "steps": steps,
        "rows_checked": sum(s["rows_checked"] for s in steps),
        "tokens_checked": sum(s["tokens_checked"] for s in steps),
        "padding_rows": sum(s["padding_rows"] for s in steps),
        "entropy_max_abs_diff": entropy_diff,
        "advantage_max_abs_diff": advantage_diff,
        "entropy_tolerance": ENTROPY_TOLERANCE,
        "advantage_tolerance": ADVANTAGE_TOLERANCE,
        "passed": bool(
            entropy_diff <= ENTROPY_TOLERANCE
            and advantage_diff <= ADVANTAGE_TOLERANCE
            and all(s["padding_advantages_zero"] and s["tokens_checked"] > 0 for s in steps)
        ),
    }


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gtpo_verl.audit", description=__doc__.split("\n\n")[0])
    parser.add_argument("dir", help="gtpo.audit.dir of the run")
    parser.add_argument("--weights", help="HF-format weights to use instead of the ones each dump names")
    parser.add_argument("--out", help="also write the JSON report here")
    args = parser.parse_args(argv)
    report = check_audit_dir(args.dir, args.weights)
    text = json.dumps(report, indent=1)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
