"""The per-step half of the entropy audit: dump what one step's estimator saw, inside training.

Opt-in with ``gtpo.audit.steps=[k, …]`` and ``gtpo.audit.dir=DIR``. For each listed global step
the trainer mixin dumps, after verl's balancing, padding, dynamic-sampling refill and the
data-parallel gather, every estimator input row as the estimator saw it (uid, sample key,
prompt and response token ids, response mask, old-policy entropy, token-level reward, score,
is-padding) and the advantages verl stored for the actor, to ``DIR/step_<k>.safetensors`` (every
tensor; the per-row prompt and response ids as one flat tensor plus row lengths) and
``DIR/step_<k>.json`` (everything else). Neither format can carry code: reading a dump another job
or user wrote runs nothing (no pickle). ``gtpo-audit DIR`` (``tools/audit.py``) then checks the
dumps offline; ``load_audit_step`` reads one.
"""

from __future__ import annotations

import json
import os
from typing import Any, Optional

import torch

from gtpo_verl.plugin.config import ConfigError
from gtpo_verl.plugin.estimators import ESTIMATORS, EstimatorCall
from gtpo_verl.trainer.fields import padded
from gtpo_verl.trainer.settings import AuditConfig, GTPOSettings

DUMP_PATTERN = "step_{step}.json"  # the record; its tensors lie beside it in step_<k>.safetensors
TENSORS_SUFFIX = ".safetensors"
FORMAT = "gtpo-verl-audit-2"
RAGGED = ("prompt_ids", "response_ids")  # per-row token lists: a flat tensor and the row lengths
HF_SUBDIR = os.path.join("actor", "huggingface")  # where verl's FSDP checkpoint manager writes hf_model


def audit_settings(config: Any):
    """``gtpo.audit`` as its typed block (``AuditConfig``: steps sorted, each ≥ 1)."""
    return GTPOSettings.from_config(config).audit


def validate_audit_config(config: Any):
    """Start-up check: one clear error naming the key and the fix, before any worker starts."""
    settings = audit_settings(config)
    if not settings.steps:
        return settings
    estimator = str(config.algorithm.adv_estimator)
    if estimator not in ESTIMATORS:
        raise ConfigError(
            "gtpo.audit.steps",
            f"`gtpo.audit.steps` audits gtpo_verl's estimators {list(ESTIMATORS)}, not `algorithm.adv_estimator={estimator}`"
        )
    later = [s for s in settings.steps if s > 1]
    if later and settings.require_weights:
        trainer = config.trainer
        save_freq = int(trainer.get("save_freq", -1))
        contents = list(config.actor_rollout_ref.actor.checkpoint.get("save_contents", []))
        missing = [s - 1 for s in later if save_freq <= 0 or (s - 1) % save_freq]
        if missing:
            raise ConfigError(
                "gtpo.audit.steps",
                f"`gtpo.audit.steps={list(settings.steps)}` needs the weights of steps {missing} (their checkpoints), "
                f"but `trainer.save_freq={save_freq}` does not save them: use trainer.save_freq=1, audit steps k "
                "with k-1 a multiple of save_freq, or gtpo.audit.require_weights=false to dump them for analysis only"
            )
        if "hf_model" not in contents:
            raise ConfigError(
                "actor_rollout_ref.actor.checkpoint.save_contents",
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


def dump_audit_step(trainer, batch, settings: AuditConfig, call: EstimatorCall,
                    entropy: Optional[torch.Tensor] = None) -> Optional[str]:
    """Write ``DIR/step_<k>.json`` + ``.safetensors`` when the current global step is audited (called after the advantages).

    ``settings`` is ``gtpo.audit`` (parsed once, with the trainer's settings); ``call`` the estimator's
    call (its batch holds the inputs as the estimator read them); ``entropy`` the old-policy entropy
    field, for an estimator that does not read it.
    """
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
        "estimator": call.name,
        "algorithm": OmegaConf.to_container(config.algorithm, resolve=True),
        "initial_entropy": call.batch.initial_entropy,
        "temperature": float(config.actor_rollout_ref.rollout.temperature),
        "weights": weights,
        "keys": list(batch.keys),
        "uids": [str(u) for u in data["uid"]],
        "is_padding": [bool(tag.get("is_padding", False)) for tag in batch.tags],
        "prompt_ids": _rows(data["prompts"]),
        "response_ids": _rows(data["responses"]),
        # the estimator's inputs, exactly as bound / as verl handed them
        "response_mask": mask,
        "entropys": (call.batch.entropys if call.batch.entropys is not None else entropy)[..., :width].clone(),
        # token ids: the bound ones where the estimator reads them, else verl's (same rows, same order)
        "responses": (call.batch.responses if call.batch.responses is not None else padded(data["responses"]).to(torch.int64))[..., :width].clone(),
        "token_level_rewards": rewards,
        "scores": rewards.sum(-1),
        # what verl stored for the actor
        "advantages": padded(data["advantages"]).to(torch.float32)[..., :width],
    }
    return save_audit_step(record, settings.dir)


# ---------------------------------------------------------------------------------------- format
def save_audit_step(record: dict, folder: str) -> str:
    """Write ``record`` as ``step_<k>.safetensors`` + ``step_<k>.json`` in ``folder``; returns the JSON's path.

    Tensors go to safetensors, ``RAGGED`` id lists to a flat tensor plus row lengths, the rest to
    JSON. Both files are written to temporary names first; the JSON, written last, marks a
    complete dump.
    """
    from safetensors.torch import save_file

    tensors, plain = {}, {"format": FORMAT}
    for key, value in record.items():
        if isinstance(value, torch.Tensor):
            tensors[key] = value.detach().contiguous().cpu()
        elif key in RAGGED:
            tensors[key] = torch.tensor([t for row in value for t in row], dtype=torch.int64)
            tensors[key + ".lengths"] = torch.tensor([len(row) for row in value], dtype=torch.int64)
        else:
            plain[key] = value
    plain["tensors"] = sorted(tensors)
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, DUMP_PATTERN.format(step=record["step"]))
    tensor_path = path.removesuffix(".json") + TENSORS_SUFFIX
    save_file(tensors, tensor_path + ".tmp")
    os.replace(tensor_path + ".tmp", tensor_path)
    with open(path + ".tmp", "w") as f:
        json.dump(plain, f)
    os.replace(path + ".tmp", path)
    return path


class AuditDumpError(ValueError):
    """A dump that cannot be read: the message names the file and what is wrong with it."""


def load_audit_step(path: str) -> dict:
    """Read the dump whose record is ``path`` (``step_<k>.json``) without unpickling anything."""
    from safetensors.torch import load_file

    tensor_path = path.removesuffix(".json") + TENSORS_SUFFIX
    try:
        with open(path) as f:
            plain = json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise AuditDumpError(f"{path}: not a readable audit record ({type(err).__name__}: {err})") from None
    if not isinstance(plain, dict) or plain.get("format") != FORMAT:
        raise AuditDumpError(f"{path}: not a {FORMAT} audit record (format {plain.get('format') if isinstance(plain, dict) else None!r})")
    try:
        tensors = load_file(tensor_path)
    except Exception as err:  # missing, truncated or not safetensors at all
        raise AuditDumpError(f"{tensor_path}: the tensors of {os.path.basename(path)} cannot be read ({err}); "
                             "the dump is partial or corrupt: re-run the audited step") from None
    missing = sorted(set(plain.get("tensors", [])) - set(tensors))
    if missing:
        raise AuditDumpError(f"{tensor_path}: tensors {missing} are missing: the dump is partial")
    record = {k: v for k, v in plain.items() if k not in ("format", "tensors")}
    for key in RAGGED:
        if key in tensors:
            flat, lengths = tensors.pop(key), tensors.pop(key + ".lengths")
            if int(lengths.sum()) != flat.numel() or bool((lengths < 0).any()):
                raise AuditDumpError(f"{tensor_path}: {key} and its row lengths disagree: the dump is corrupt")
            record[key] = [row.tolist() for row in torch.split(flat, lengths.tolist())]
    record.update(tensors)
    return record
