"""Runs verl 0.9.1's real actor (TrainingWorker → FSDP2 engine on gloo → ppo_loss → our loss)
on CPU with a tiny locally built Qwen2, and prints a JSON report. Executed in a fresh
process by test_actor_fsdp_on_cpu.py, because it selects verl's CPU platform and starts a
torch.distributed process group for the whole process.
"""

import json
import os
import sys
import tempfile
from functools import partial

import torch

import verl  # noqa: F401  (loads the gtpo_verl plugin)
from gtpo_verl.cpu import activate
from gtpo_verl.cpu.platform import init_gloo_process_group
from gtpo_verl.cpu.tiny_model import build_tiny_qwen2

B, P, T, GROUP = 8, 4, 6, 4


def compose_actor(model_path, *overrides):
    from support.hydra import compose_gtpo  # tests/ is on the runner's PYTHONPATH

    return compose_gtpo(
        f"actor_rollout_ref.model.path={model_path}",
        "actor_rollout_ref.model.use_remove_padding=False",
        "+actor_rollout_ref.model.override_config.attn_implementation=eager",
        "actor_rollout_ref.actor.strategy=fsdp2",
        "actor_rollout_ref.actor.use_torch_compile=False",
        "+actor_rollout_ref.actor.fsdp_config.mixed_precision={param_dtype:fp32,reduce_dtype:fp32,buffer_dtype:fp32}",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={B // GROUP}",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",  # two micro-batches per mini-batch
        f"actor_rollout_ref.rollout.n={GROUP}",
        "actor_rollout_ref.actor.optim.lr=0.01",
        "trainer.device=cpu",
        *overrides,
    )


def make_batch():
    from verl import DataProto

    g = torch.Generator().manual_seed(0)
    prompts = torch.randint(10, 200, (B, P), generator=g)
    responses = torch.randint(10, 200, (B, T), generator=g)
    lengths = torch.randint(2, T + 1, (B,), generator=g)
    response_mask = (torch.arange(T)[None] < lengths[:, None]).long()
    attention = torch.cat([torch.ones(B, P, dtype=torch.long), response_mask], 1)
    positions = torch.clamp(torch.cumsum(attention, 1) - 1, min=0)
    return DataProto.from_dict(
        tensors={
            "prompts": prompts,
            "responses": responses,
            "input_ids": torch.cat([prompts, responses], 1),
            "attention_mask": attention,
            "position_ids": positions,
            "response_mask": response_mask,
        }
    )


def to_worker_input(batch, **extra_tensors):
    from verl.utils import tensordict_utils as tu
    from verl.workers.utils.padding import left_right_2_no_padding, response_to_nested

    td = batch.batch.clone()
    for name, value in extra_tensors.items():
        td[name] = response_to_nested(value, response_to_nested_mask(batch.batch["response_mask"]))
    td = left_right_2_no_padding(td)
    tu.assign_non_tensor(td, temperature=1.0, use_dynamic_bsz=False, micro_batch_size_per_gpu=4)
    return td


def infer(worker, batch):
    from verl.utils import tensordict_utils as tu
    from verl.workers.utils.padding import response_from_nested

    td = to_worker_input(batch)
    tu.assign_non_tensor(td, calculate_entropy=True, compute_loss=False)
    out = worker.infer_batch(td)
    mask = batch.batch["response_mask"]
    pad = lambda x: response_from_nested(x, response_to_nested_mask(mask)).to_padded_tensor(0.0)[:, : mask.shape[1]]  # noqa: E731
    return pad(out["log_probs"]), pad(out["entropy"])


def response_to_nested_mask(mask):
    """Right-padded (B, T) mask → the nested response mask verl's helpers take."""
    return torch.nested.as_nested_tensor([row[: int(row.sum())] for row in mask], layout=torch.jagged)


def update(worker, batch, old_log_probs, advantages, calculate_entropy):
    from verl.utils import tensordict_utils as tu

    td = to_worker_input(batch, old_log_probs=old_log_probs, advantages=advantages)
    tu.assign_non_tensor(
        td,
        calculate_entropy=calculate_entropy,
        global_batch_size=B,
        mini_batch_size=B,
        epochs=1,
        seed=1,
        dataloader_kwargs={"shuffle": False},
    )
    out = worker.train_mini_batch(td)
    return {k: [float(x) for x in (v if isinstance(v, list) else [v])] for k, v in out["metrics"].items()}


def main():
    activate()
    init_gloo_process_group()
    from omegaconf import OmegaConf
    from verl.utils.config import omega_conf_to_dataclass
    from verl.workers.config import TrainingWorkerConfig
    from verl.workers.engine_workers import TrainingWorker
    from verl.workers.utils.losses import ppo_loss

    from verl.trainer.ppo.core_algos import get_adv_estimator_fn

    from gtpo_verl.plugin.estimators import ESTIMATORS
    from gtpo_verl.trainer.derive import derive_config
    from gtpo_verl.trainer.validation import validate_gtpo_config

    model_path = build_tiny_qwen2(os.path.join(tempfile.mkdtemp(), "tiny_qwen2"))
    report = {}

    # --- GRPO-S: grpo_s estimator on the old-policy entropy of verl's log-prob pass, grpo_s loss
    seq_cfg = compose_actor(
        model_path,
        "algorithm.adv_estimator=grpo_s",
        "actor_rollout_ref.actor.policy_loss.loss_mode=grpo_s",
        "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean",
    )
    report["grpo_s_warnings"] = validate_gtpo_config(seq_cfg)
    actor_cfg = omega_conf_to_dataclass(seq_cfg.actor_rollout_ref.actor)
    worker = TrainingWorker(
        TrainingWorkerConfig(
            model_type="language_model",
            model_config=omega_conf_to_dataclass(seq_cfg.actor_rollout_ref.model),
            engine_config=actor_cfg.engine,
            optimizer_config=actor_cfg.optim,
            checkpoint_config=actor_cfg.checkpoint,
        )
    )
    worker.reset()
    worker.set_loss_fn(partial(ppo_loss, config=actor_cfg))
    report["engine"] = type(worker.engine).__name__
    report["policy_loss_config"] = type(actor_cfg.policy_loss).__name__

    batch = make_batch()
    mask = batch.batch["response_mask"]
    old_log_probs, old_entropy = infer(worker, batch)
    scores = torch.tensor([1.0, 0, 0, 1, 0, 1, 1, 0])
    rewards = torch.zeros(B, T)
    rewards[torch.arange(B), mask.sum(-1) - 1] = scores
    uids = [f"u{i // GROUP}" for i in range(B)]
    advantages, _ = get_adv_estimator_fn("grpo_s")(rewards, mask, index=uids, config=seq_cfg.algorithm, entropys=old_entropy)
    report["grpo_s_metrics"] = update(worker, batch, old_log_probs, advantages, calculate_entropy=False)
    new_log_probs, _ = infer(worker, batch)
    seq_adv = (advantages * mask).sum(-1) / mask.sum(-1)
    # the GRPO-S surrogate (1/G) Σ_i Â_i ŵ_i must improve over its value at ŵ ≡ 1 after one step
    seq_ratio = (torch.exp(new_log_probs - old_log_probs) * mask).sum(-1) / mask.sum(-1)
    report["grpo_s_surrogate_gain"] = float((seq_adv * (seq_ratio - 1.0)).mean())

    # --- Paper A, differentiable entropy regulariser: derive_config sets entropy_coeff = -γ and verl's
    # ppo_loss adds +γ·agg_loss(H_current) (global normalisation); with zero advantages it is the
    # only gradient, so the current-policy entropy must fall
    traj_cfg = compose_actor(
        model_path,
        "algorithm.adv_estimator=gtpo_traj",
        "algorithm.gtpo_traj.entropy_reg_mode=differentiable",
        "algorithm.gtpo_traj.gamma=0.5",
        "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean",
        "actor_rollout_ref.actor.optim.lr=0.05",
    )
    derive_config(traj_cfg)
    report["traj_warnings"] = validate_gtpo_config(traj_cfg)
    report["traj_entropy_coeff"] = float(OmegaConf.select(traj_cfg, "actor_rollout_ref.actor.entropy_coeff"))
    traj_actor_cfg = omega_conf_to_dataclass(traj_cfg.actor_rollout_ref.actor)
    worker.set_loss_fn(partial(ppo_loss, config=traj_actor_cfg))
    old_log_probs, entropy_before = infer(worker, batch)
    zero_adv = torch.zeros(B, T)
    report["traj_metrics"] = update(worker, batch, old_log_probs, zero_adv, calculate_entropy=True)
    _, entropy_after = infer(worker, batch)
    mean = lambda h: float((h * mask).sum() / mask.sum())  # noqa: E731
    report["entropy_before"], report["entropy_after"] = mean(entropy_before), mean(entropy_after)
    # what verl's seq-mean-token-mean agg_loss of the entropy should give over the whole mini-batch
    report["entropy_seq_mean_before"] = float(((entropy_before * mask).sum(-1) / mask.sum(-1)).mean())
    print("REPORT " + json.dumps(report))


if __name__ == "__main__":
    sys.exit(main())
