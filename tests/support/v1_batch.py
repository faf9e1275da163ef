"""A batch in the layout verl's V1 trainer leaves in TransferQueue before ``_compute_advantage``,
and a GTPO trainer built around it (no model workers: the advantage step must not need them)."""

from __future__ import annotations

import numpy as np
import torch


def put_v1_batch(tq, seed, prompts=3, group=4, padding_rows=2, prefix="b", partition_id="train", vocab=5,
                 old_log_probs=True, prompt_ids=False):
    """Write nested response-only fields (entropy, token ids, old log-probs, scores) and V1 padding rows.

    ``vocab`` bounds the token ids (a small one makes shared prefixes, i.e. conflict runs, likely);
    ``old_log_probs=False`` leaves that field out; ``prompt_ids=True`` adds verl's ``prompts`` (what a dump reads). Returns ``(KVBatchMeta, padded)``: ``padded``
    holds the same fields as ``(B, T)`` tensors plus ``index`` (the uids), in verl's estimator
    keyword names.
    """
    from tensordict import NonTensorStack, TensorDict

    g = torch.Generator().manual_seed(seed)
    rows = prompts * group
    lengths = torch.randint(1, 7, (rows,), generator=g).tolist() + [1] * padding_rows
    entropy = [(torch.rand(n, generator=g) * 1.5).tolist() for n in lengths]
    responses = [torch.randint(0, vocab, (n,), generator=g).tolist() for n in lengths]
    log_probs = [(-torch.rand(n, generator=g) * 3).tolist() for n in lengths] if old_log_probs else None
    scores = [float(torch.randint(0, 2, (1,), generator=g)) for _ in range(rows)] + [0.0] * padding_rows
    masks = [[1] * n for n in lengths[:rows]] + [[0] for _ in range(padding_rows)]  # V1 padding rows
    uids = [f"{prefix}{seed}u{i // group}" for i in range(rows)] + [f"pad{seed}{i}" for i in range(padding_rows)]

    def nested(values, dtype):
        return torch.nested.as_nested_tensor([torch.tensor(v, dtype=dtype) for v in values], layout=torch.jagged)

    rm_scores = [[0.0] * (n - 1) + [s] for n, s in zip(lengths, scores)]
    values = {
        "response_mask": nested(masks, torch.int64),
        "rm_scores": nested(rm_scores, torch.float32),
        "entropy": nested(entropy, torch.float32),
        "responses": nested(responses, torch.int64),
    }
    if log_probs is not None:
        values["old_log_probs"] = nested(log_probs, torch.float32)
    if prompt_ids:
        values["prompts"] = nested([[7, 8, 9, (i // group) % vocab] for i in range(len(uids))], torch.int64)
    fields = TensorDict({**values, "uid": NonTensorStack(*uids)}, batch_size=[len(uids)])
    keys = [f"{uid}_{i}_0" for i, uid in enumerate(uids)]  # verl's V1 key format {uid}_{session}_{index}
    tags = [{"is_padding": i >= rows} for i in range(len(uids))]
    meta = tq.kv_batch_put(keys=keys, partition_id=partition_id, fields=fields, tags=tags)
    padded = fields.to_padded_tensor()
    direct = dict(
        token_level_rewards=padded["rm_scores"],
        response_mask=padded["response_mask"],
        index=np.array(uids, dtype=object),
        entropys=padded["entropy"],
        responses=padded["responses"],
    )
    if log_probs is not None:
        direct["old_log_probs"] = padded["old_log_probs"]
    return meta, direct


class ForbiddenWorkers:
    """Any attribute access fails: proves a code path asks the model workers for nothing."""

    def __getattr__(self, name):
        raise AssertionError(f"model worker call `{name}` from the advantage step (an extra model pass)")


def make_v1_trainer(config, **attributes):
    """A ``GTPOPPOTrainerSync`` with ``config`` and no workers (only the advantage step can run)."""
    from verl.trainer.ppo.v1 import PPOTrainerSync

    from gtpo_verl.trainer.mixin import gtpo_trainer_class

    trainer = object.__new__(gtpo_trainer_class(PPOTrainerSync))
    trainer.config = config
    trainer.actor_rollout_wg = ForbiddenWorkers()
    for key, value in attributes.items():
        setattr(trainer, key, value)
    return trainer


def read_fields(tq, meta, *fields, partition_id="train"):
    """The nested TQ fields of ``meta``, padded ``(B, T)`` (zeros past each response)."""
    data = tq.kv_batch_get(keys=meta.keys, partition_id=partition_id, select_fields=list(fields))
    return {f: data[f].to_padded_tensor(0) for f in fields}
