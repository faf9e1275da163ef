"""verl's own padding rows through the trainer mixin, against a real local TransferQueue.

verl's V1 trainer makes the batch divisible by the data-parallel size with
``verl.trainer.ppo.padding_utils.upsample_batch_to_divisible_size``: every padding row of a
call shares ONE uid (``pad<hex>``), has a one-token response ``[eos]`` with response mask
``[0]`` and zero scores; the old-log-prob pass later gives it a one-token entropy like any
row. The rows here are made by that very function; only the rollout's and the old-log-prob
pass's outputs are written by hand (they need the model workers, which cannot run here).
"""

import math

import numpy as np
import pytest
import torch

from verl.trainer.ppo.core_algos import get_adv_estimator_fn

from gtpo_verl.plugin.estimators import ESTIMATORS
from support.hydra import compose_gtpo
from support.transfer_queue import TQ_OVERRIDES, local_transfer_queue

EOS = 2
PROMPTS, GROUP, MULTIPLE = 3, 4, 16  # 12 real rows → verl adds 4 padding rows

ESTIMATOR_OVERRIDES = {
    "gtpo_token": ["algorithm.gtpo_token.negative_shaping=true"],
    "grpo_s": ["actor_rollout_ref.actor.policy_loss.loss_mode=grpo_s"],
    "gtpo_traj": ["algorithm.gtpo_traj.preset=paper"],
}


def compose_config(*overrides):
    return compose_gtpo(
        f"actor_rollout_ref.rollout.n={GROUP}",
        *TQ_OVERRIDES,
        *overrides,
    )


@pytest.fixture(scope="module")
def transfer_queue():
    yield from local_transfer_queue(compose_config().transfer_queue)


def nested(rows, dtype):
    return torch.nested.as_nested_tensor([torch.tensor(r, dtype=dtype) for r in rows], layout=torch.jagged)


def rollout_then_verl_padding(tq, seed, prefix):
    """Real rows as the rollout leaves them, verl's padding, then the old-log-prob entropy."""
    from tensordict import NonTensorStack, TensorDict
    from verl.trainer.ppo.padding_utils import upsample_batch_to_divisible_size

    g = torch.Generator().manual_seed(seed)
    rows = PROMPTS * GROUP
    lengths = torch.randint(2, 8, (rows,), generator=g).tolist()
    prompts = [torch.randint(3, 50, (5,), generator=g).tolist() for _ in range(rows)]
    responses = [torch.randint(3, 50, (n,), generator=g).tolist() for n in lengths]
    # group 0 all-success, group 1 all-failure (uniform outcomes), group 2 mixed
    scores = [1.0] * GROUP + [0.0] * GROUP + [1.0, 0.0, 1.0, 0.0]
    uids = [f"{prefix}u{i // GROUP}" for i in range(rows)]
    fields = TensorDict(
        {
            "prompts": nested(prompts, torch.int64),
            "responses": nested(responses, torch.int64),
            "input_ids": nested([p + r for p, r in zip(prompts, responses)], torch.int64),
            "attention_mask": nested([[1] * (len(p) + len(r)) for p, r in zip(prompts, responses)], torch.int64),
            "position_ids": nested([list(range(len(p) + len(r))) for p, r in zip(prompts, responses)], torch.int64),
            "response_mask": nested([[1] * n for n in lengths], torch.int64),
            "rm_scores": nested([[0.0] * (n - 1) + [s] for n, s in zip(lengths, scores)], torch.float32),
            "uid": NonTensorStack(*uids),
        },
        batch_size=[rows],
    )
    keys = [f"{uid}_{i}_0" for i, uid in enumerate(uids)]
    tags = [{"prompt_len": 5, "response_len": n, "seq_len": 5 + n} for n in lengths]
    meta = tq.kv_batch_put(keys=keys, partition_id="train", fields=fields, tags=tags)
    meta = upsample_batch_to_divisible_size(meta, MULTIPLE, eos_token_id=EOS)  # verl's own padding rows

    # the old-log-prob pass: response-only entropy with the response mask's lengths, padding rows included
    masks = tq.kv_batch_get(keys=meta.keys, partition_id="train", select_fields=["response_mask"])["response_mask"]
    widths = masks.offsets().diff().tolist()
    entropy = [(torch.rand(n, generator=g) * 1.5 + 0.1).tolist() for n in widths]
    tq.kv_batch_put(
        keys=meta.keys, partition_id="train", fields=TensorDict({"entropy": nested(entropy, torch.float32)}, batch_size=[len(widths)])
    )
    real = dict(
        token_level_rewards=nested([[0.0] * (n - 1) + [s] for n, s in zip(lengths, scores)], torch.float32).to_padded_tensor(0),
        response_mask=nested([[1] * n for n in lengths], torch.int64).to_padded_tensor(0),
        index=np.array(uids, dtype=object),
        entropys=nested(entropy[:rows], torch.float32).to_padded_tensor(0),
        responses=nested(responses, torch.int64).to_padded_tensor(0),
    )
    return meta, real


def make_trainer(config):
    from verl.trainer.ppo.v1 import PPOTrainerSync

    from gtpo_verl.trainer.mixin import gtpo_trainer_class

    trainer = object.__new__(gtpo_trainer_class(PPOTrainerSync))
    trainer.config = config
    return trainer


def test_verl_padding_rows_share_one_uid_and_a_masked_one_token_response(transfer_queue):
    meta, real = rollout_then_verl_padding(transfer_queue, seed=11, prefix="shape")
    rows = PROMPTS * GROUP
    assert len(meta) == MULTIPLE
    assert [bool(t.get("is_padding", False)) for t in meta.tags] == [False] * rows + [True] * (MULTIPLE - rows)
    data = transfer_queue.kv_batch_get(
        keys=meta.keys, partition_id="train", select_fields=["uid", "response_mask", "responses", "rm_scores"]
    )
    uids = list(data["uid"])
    assert len(set(uids[rows:])) == 1 and uids[rows] not in set(uids[:rows])  # ONE uid for all padding rows
    assert data["response_mask"].offsets().diff()[rows:].tolist() == [1] * (MULTIPLE - rows)
    assert data["response_mask"].to_padded_tensor(-1)[rows:, 0].tolist() == [0] * (MULTIPLE - rows)
    assert data["responses"].to_padded_tensor(-1)[rows:, 0].tolist() == [EOS] * (MULTIPLE - rows)


@pytest.mark.parametrize("estimator", list(ESTIMATOR_OVERRIDES))
def test_estimators_give_exact_zeros_on_verl_padding_rows_and_leave_real_groups_alone(transfer_queue, estimator):
    config = compose_config(f"algorithm.adv_estimator={estimator}", *ESTIMATOR_OVERRIDES[estimator])
    meta, real = rollout_then_verl_padding(transfer_queue, seed=12, prefix=estimator)
    rows = PROMPTS * GROUP
    trainer = make_trainer(config)
    metrics = {}
    trainer._compute_advantage(meta, metrics)

    got = transfer_queue.kv_batch_get(keys=meta.keys, partition_id="train", select_fields=["advantages"])["advantages"]
    got = got.to_padded_tensor(float("nan"))
    assert torch.isfinite(got[:, 0]).all()
    assert torch.equal(got[rows:, :1], torch.zeros(MULTIPLE - rows, 1))  # exact zeros, not merely small
    assert all(math.isfinite(v) for k, v in metrics.items() if k.startswith("gtpo/"))

    # real rows: the estimator on the real rows alone (no padding rows in the call), same ⟨H⟩_ini
    expected, _ = get_adv_estimator_fn(estimator)(config=config.algorithm, initial_entropy=trainer.gtpo_state.initial_entropy, **real)
    width = real["response_mask"].shape[1]
    mask = real["response_mask"].bool()
    assert torch.equal(torch.where(mask, got[:rows, :width], 0.0), expected * mask)
    assert expected[2 * GROUP :].abs().sum() > 0  # the mixed group carries signal (not a vacuous comparison)


@pytest.mark.parametrize("estimator", list(ESTIMATOR_OVERRIDES))
def test_pure_estimators_with_one_shared_padding_uid(estimator):
    """The registered estimators called directly with verl's padding layout: one uid for all padding rows."""
    config = compose_config(f"algorithm.adv_estimator={estimator}", *ESTIMATOR_OVERRIDES[estimator])
    g = torch.Generator().manual_seed(3)
    real_rows, pad_rows, width = 8, 3, 6
    mask = torch.ones(real_rows + pad_rows, width, dtype=torch.int64)
    mask[real_rows:] = 0  # padding rows: nothing valid
    rewards = torch.zeros(real_rows + pad_rows, width)
    rewards[:real_rows, -1] = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.0])
    entropys = torch.rand(real_rows + pad_rows, width, generator=g) + 0.1
    responses = torch.randint(3, 9, (real_rows + pad_rows, width), generator=g)
    responses[real_rows:] = EOS
    index = np.array(["a"] * 4 + ["b"] * 4 + ["padabc"] * pad_rows, dtype=object)
    kwargs = dict(config=config.algorithm, entropys=entropys, responses=responses, initial_entropy=0.5)
    with_padding, _ = get_adv_estimator_fn(estimator)(rewards, mask, index, **kwargs)
    assert torch.isfinite(with_padding).all()
    assert torch.equal(with_padding[real_rows:], torch.zeros(pad_rows, width))
    kwargs.update(entropys=entropys[:real_rows], responses=responses[:real_rows])
    alone, _ = get_adv_estimator_fn(estimator)(rewards[:real_rows], mask[:real_rows], index[:real_rows], **kwargs)
    assert torch.equal(with_padding[:real_rows], alone)
