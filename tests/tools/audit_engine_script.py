"""verl's real FSDP2 engine on CPU against the audit's entropy recomputation. Executed in a fresh
process by test_audit_on_cpu.py (it selects verl's CPU platform and starts a torch.distributed
group for the whole process); prints a JSON report.

One update moves the weights away from the initial model; verl's own checkpoint manager saves
them with ``hf_model`` in the checkpoint contents; verl's old-log-prob pass
(``TrainingWorker.infer_batch``, ``calculate_entropy=True``) computes per-token entropy at
temperature 0.7; ``gtpo_verl.tools.audit.recompute_entropy`` recomputes it from the HF copy with plain
transformers, and — as a control — from the initial weights, which the check must reject.
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

B, T, TEMPERATURE = 6, 7, 0.7


def compose_actor(model_path):
    from hydra import compose, initialize_config_dir

    import gtpo_verl

    with initialize_config_dir(config_dir=os.path.join(os.path.dirname(gtpo_verl.__file__), "config"), version_base=None):
        return compose(
            config_name="gtpo_trainer_cpu",
            overrides=[
                f"actor_rollout_ref.model.path={model_path}",
                f"actor_rollout_ref.actor.ppo_mini_batch_size={B}",
                "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=3",
                "actor_rollout_ref.rollout.n=1",
                "actor_rollout_ref.actor.optim.lr=0.05",
                "actor_rollout_ref.actor.checkpoint.save_contents=[model,hf_model]",
            ],
        )


def make_rows():
    """Rows of different prompt and response lengths (verl's no-padding layout after conversion)."""
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(10, 200, (int(n),), generator=g).tolist() for n in torch.randint(3, 9, (B,), generator=g)]
    responses = [torch.randint(10, 200, (int(n),), generator=g).tolist() for n in torch.randint(2, T + 1, (B,), generator=g)]
    return prompts, responses


def worker_input(prompts, responses, **response_fields):
    """The nested (no-padding) TensorDict verl's engine takes, as the V1 trainer sends it."""
    from tensordict import TensorDict
    from verl.utils import tensordict_utils as tu

    def nested(rows, dtype=torch.int64):
        return torch.nested.as_nested_tensor([torch.as_tensor(r, dtype=dtype) for r in rows], layout=torch.jagged)

    sequences = [p + r for p, r in zip(prompts, responses)]
    td = TensorDict(
        {
            "prompts": nested(prompts),
            "responses": nested(responses),
            "input_ids": nested(sequences),
            "attention_mask": nested([[1] * len(s) for s in sequences]),
            "position_ids": nested([list(range(len(s))) for s in sequences]),
            "response_mask": nested([[1] * len(r) for r in responses]),
            "loss_mask": nested([[1] * len(r) for r in responses]),
            **{k: nested(v, torch.float32) for k, v in response_fields.items()},
        },
        batch_size=[len(prompts)],
    )
    tu.assign_non_tensor(td, temperature=TEMPERATURE, use_dynamic_bsz=False, micro_batch_size_per_gpu=3)
    return td


def main():
    activate()
    init_gloo_process_group()
    from verl.utils import tensordict_utils as tu
    from verl.utils.config import omega_conf_to_dataclass
    from verl.workers.config import TrainingWorkerConfig
    from verl.workers.engine_workers import TrainingWorker
    from verl.workers.utils.losses import ppo_loss
    from verl.workers.utils.padding import response_from_nested

    from gtpo_verl.tools.audit import recompute_entropy
    from gtpo_verl.trainer.audit_dump import HF_SUBDIR

    root = tempfile.mkdtemp()
    model_path = build_tiny_qwen2(os.path.join(root, "tiny_qwen2"), seed=3)
    config = compose_actor(model_path)
    actor_cfg = omega_conf_to_dataclass(config.actor_rollout_ref.actor)
    worker = TrainingWorker(
        TrainingWorkerConfig(
            model_type="language_model",
            model_config=omega_conf_to_dataclass(config.actor_rollout_ref.model),
            engine_config=actor_cfg.engine,
            optimizer_config=actor_cfg.optim,
            checkpoint_config=actor_cfg.checkpoint,
        )
    )
    worker.reset()
    worker.set_loss_fn(partial(ppo_loss, config=actor_cfg))
    prompts, responses = make_rows()

    def old_log_prob_pass():
        td = worker_input(prompts, responses)
        tu.assign_non_tensor(td, calculate_entropy=True, compute_loss=False)
        out = worker.infer_batch(td)
        return out["log_probs"], out["entropy"], td["response_mask"]

    # one update with random advantages: the weights of "step 1" differ from the initial model
    log_probs, _, mask = old_log_prob_pass()
    g = torch.Generator().manual_seed(2)
    old = [row.tolist() for row in response_from_nested(log_probs, mask).unbind()]
    advantages = [torch.randn(len(r), generator=g).tolist() for r in responses]
    td = worker_input(prompts, responses, old_log_probs=old, advantages=advantages)
    tu.assign_non_tensor(
        td, calculate_entropy=False, global_batch_size=B, mini_batch_size=B, epochs=1, seed=1, dataloader_kwargs={"shuffle": False}
    )
    worker.train_mini_batch(td)
    step_dir = os.path.join(root, "checkpoints", "global_step_1")
    worker.save_checkpoint(os.path.join(step_dir, "actor"), None, 1, None)  # verl's own checkpoint (with hf_model)

    # "step 2": verl's old-log-prob entropy with the updated weights
    _, entropy, mask = old_log_prob_pass()
    entropy = response_from_nested(entropy, mask).to_padded_tensor(0.0)
    width = max(len(r) for r in responses)
    response_mask = torch.zeros(B, width, dtype=torch.int64)
    for i, r in enumerate(responses):
        response_mask[i, : len(r)] = 1
    record = {
        "prompt_ids": prompts,
        "response_ids": responses,
        "response_mask": response_mask,
        "is_padding": [False] * B,
        "temperature": TEMPERATURE,
    }
    valid = response_mask > 0
    hf_weights = os.path.join(step_dir, HF_SUBDIR)
    recomputed, _ = recompute_entropy(record, hf_weights)
    control, _ = recompute_entropy(record, model_path)
    report = {
        "hf_files": sorted(os.listdir(hf_weights)),
        "tokens": int(valid.sum()),
        "entropy_mean": float(entropy[valid].mean()),
        "max_abs_diff_saved_weights": float((recomputed - entropy[:, :width])[valid].abs().max()),
        "max_abs_diff_initial_weights": float((control - entropy[:, :width])[valid].abs().max()),
    }
    print("REPORT " + json.dumps(report))


if __name__ == "__main__":
    sys.exit(main())
