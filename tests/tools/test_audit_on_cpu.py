"""The entropy audit: the mixin's dump through a real local TransferQueue (with verl's own
padding rows) and the offline checker, which must pass on aligned data and fail on misaligned.

The old-log-prob pass (an FSDP worker) cannot run here; the test computes the per-token
entropy it would write with an independent float64 reference (one row at a time, no padding,
``torch.distributions.Categorical``) and writes it into TransferQueue in its place.
"""

import json
import os
import subprocess
import sys

import pytest
import torch

from gtpo_verl.tools.audit import check_audit_dir
from gtpo_verl.trainer.audit_dump import load_audit_step, save_audit_step, validate_audit_config
from support.hydra import compose_gtpo
from support.transfer_queue import TQ_OVERRIDES, local_transfer_queue

GROUP, PROMPTS, MULTIPLE, TEMPERATURE = 4, 3, 16, 0.7


def compose_config(*overrides):
    return compose_gtpo(
        f"actor_rollout_ref.rollout.n={GROUP}",
        *TQ_OVERRIDES,
        *overrides,
    )


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    from gtpo_verl.cpu.tiny_model import build_tiny_qwen2

    return build_tiny_qwen2(str(tmp_path_factory.mktemp("audit_model")), seed=5)


def reference_entropy(model_dir, prompt, response, temperature):
    """Float64, one row, no padding: H of the next-token distribution before each response token."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float64, attn_implementation="eager")
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt + response])).logits[0].double()
    steps = logits[len(prompt) - 1 : len(prompt) - 1 + len(response)] / temperature
    return torch.distributions.Categorical(logits=steps).entropy().tolist()


@pytest.fixture(scope="module")
def transfer_queue():
    yield from local_transfer_queue(compose_config().transfer_queue)


def nested(rows, dtype):
    return torch.nested.as_nested_tensor([torch.tensor(r, dtype=dtype) for r in rows], layout=torch.jagged)


def put_audited_batch(tq, model_dir, prefix, misalign=False):
    """Rollout rows, verl's padding rows, then the old-log-prob entropy (reference values)."""
    from tensordict import NonTensorStack, TensorDict
    from verl.trainer.ppo.padding_utils import upsample_batch_to_divisible_size

    g = torch.Generator().manual_seed(7)
    rows = PROMPTS * GROUP
    prompts = [torch.randint(3, 200, (int(torch.randint(3, 9, (1,), generator=g)),), generator=g).tolist() for _ in range(rows)]
    responses = [torch.randint(3, 200, (int(torch.randint(2, 7, (1,), generator=g)),), generator=g).tolist() for _ in range(rows)]
    scores = [1.0, 0.0, 1.0, 0.0] * PROMPTS
    uids = [f"{prefix}u{i // GROUP}" for i in range(rows)]
    fields = TensorDict(
        {
            "prompts": nested(prompts, torch.int64),
            "responses": nested(responses, torch.int64),
            "response_mask": nested([[1] * len(r) for r in responses], torch.int64),
            "rm_scores": nested([[0.0] * (len(r) - 1) + [s] for r, s in zip(responses, scores)], torch.float32),
            "uid": NonTensorStack(*uids),
        },
        batch_size=[rows],
    )
    keys = [f"{u}_{i}_0" for i, u in enumerate(uids)]
    tags = [{"prompt_len": len(p), "response_len": len(r), "seq_len": len(p) + len(r)} for p, r in zip(prompts, responses)]
    meta = tq.kv_batch_put(keys=keys, partition_id="train", fields=fields, tags=tags)
    meta = upsample_batch_to_divisible_size(meta, MULTIPLE, eos_token_id=2)
    meta.reorder(torch.randperm(len(meta), generator=g).tolist())  # as verl's balance_batch does

    entropy = {k: reference_entropy(model_dir, p, r, TEMPERATURE) for k, p, r in zip(keys, prompts, responses)}
    if misalign:  # the bug the audit exists to catch: entropy shifted one token to the left
        entropy = {k: v[1:] + v[:1] for k, v in entropy.items()}
    rows_entropy = [entropy.get(k, [0.37]) for k in meta.keys]  # padding rows: one token, any value
    tq.kv_batch_put(
        keys=meta.keys, partition_id="train",
        fields=TensorDict({"entropy": nested(rows_entropy, torch.float32)}, batch_size=[len(meta)]),
    )
    return meta


def run_audited_step(tq, model_dir, audit_dir, misalign=False):
    from verl.trainer.ppo.v1 import PPOTrainerSync

    from gtpo_verl.trainer.mixin import gtpo_trainer_class

    config = compose_config(
        "algorithm.adv_estimator=gtpo_token",
        f"actor_rollout_ref.model.path={model_dir}",
        f"actor_rollout_ref.rollout.temperature={TEMPERATURE}",
        "gtpo.audit.steps=[1]",
        f"gtpo.audit.dir={audit_dir}",
    )
    trainer = object.__new__(gtpo_trainer_class(PPOTrainerSync))
    trainer.config = config
    trainer.global_steps = 1
    meta = put_audited_batch(tq, model_dir, prefix=f"m{int(misalign)}", misalign=misalign)
    trainer._compute_advantage(meta, {})
    return meta


def test_audit_passes_on_aligned_entropy_and_fails_on_shifted(transfer_queue, tiny_model, tmp_path):
    meta = run_audited_step(transfer_queue, tiny_model, tmp_path / "good")
    dump = load_audit_step(str(tmp_path / "good" / "step_1.json"))
    assert dump["keys"] == list(meta.keys)  # rows in the order the estimator saw them (after the reorder)
    assert sum(dump["is_padding"]) == MULTIPLE - PROMPTS * GROUP
    assert len({u for u, p in zip(dump["uids"], dump["is_padding"]) if p}) == 1

    report = check_audit_dir(str(tmp_path / "good"))
    assert report["passed"], report
    assert report["rows_checked"] == PROMPTS * GROUP and report["tokens_checked"] == int(dump["response_mask"].sum())
    assert report["entropy_max_abs_diff"] <= 1e-5  # float32 batched forward vs float64 reference
    assert report["advantage_max_abs_diff"] <= 1e-6

    run_audited_step(transfer_queue, tiny_model, tmp_path / "bad", misalign=True)
    bad = check_audit_dir(str(tmp_path / "bad"))
    assert not bad["passed"] and bad["entropy_max_abs_diff"] > 1e-3

    # tampered advantages (as if rows had been permuted after the estimator) fail the advantage check
    dump["advantages"] = dump["advantages"].roll(1, dims=0)
    save_audit_step(dump, str(tmp_path / "tampered"))
    tampered = check_audit_dir(str(tmp_path / "tampered"))
    assert not tampered["passed"] and tampered["advantage_max_abs_diff"] > 1e-3

    # the command line: JSON report, exit status 0 / 1
    good = subprocess.run([sys.executable, "-m", "gtpo_verl.tools.audit", str(tmp_path / "good")], capture_output=True, text=True)
    assert good.returncode == 0 and json.loads(good.stdout)["passed"] is True
    failed = subprocess.run([sys.executable, "-m", "gtpo_verl.tools.audit", str(tmp_path / "bad")], capture_output=True, text=True)
    assert failed.returncode == 1


@pytest.mark.parametrize(
    "overrides,match",
    [
        (["gtpo.audit.steps=[2]"], "gtpo.audit.dir"),
        (["gtpo.audit.steps=[0]", "gtpo.audit.dir=/tmp/x"], "start at 1"),
        (["algorithm.adv_estimator=grpo", "gtpo.audit.steps=[1]", "gtpo.audit.dir=/tmp/x"], "adv_estimator=grpo"),
        (["gtpo.audit.steps=[3]", "gtpo.audit.dir=/tmp/x", "trainer.save_freq=-1"], "trainer.save_freq"),
        (["gtpo.audit.steps=[3]", "gtpo.audit.dir=/tmp/x", "trainer.save_freq=1"], "save_contents"),
    ],
)
def test_audit_config_errors_name_the_key(overrides, match):
    config = compose_config("algorithm.adv_estimator=gtpo_token", *overrides)
    with pytest.raises(ValueError, match=match):
        validate_audit_config(config)


def test_audit_config_accepts_a_checkpointed_previous_step():
    config = compose_config(
        "algorithm.adv_estimator=grpo_s",
        "gtpo.audit.steps=[1,3]",
        "gtpo.audit.dir=/tmp/x",
        "trainer.save_freq=2",
        "actor_rollout_ref.actor.checkpoint.save_contents=[model,optimizer,extra,hf_model]",
    )
    assert validate_audit_config(config).steps == (1, 3)
    assert validate_audit_config(compose_config()).steps == ()
    # dumps for analysis only: later steps without their weights are accepted when asked for
    analysis = compose_config("algorithm.adv_estimator=gtpo_token", "gtpo.audit.steps=[1,2,3]", "gtpo.audit.dir=/tmp/x",
                              "trainer.save_freq=-1", "gtpo.audit.require_weights=false")
    assert validate_audit_config(analysis).steps == (1, 2, 3)


def test_entropy_recomputation_matches_verls_engine_from_verls_hf_checkpoint():
    """verl's real FSDP2 old-log-prob pass vs the audit's plain-transformers recomputation."""
    script = os.path.join(os.path.dirname(__file__), "audit_engine_script.py")
    out = subprocess.run([sys.executable, script], capture_output=True, text=True, timeout=900)
    lines = [line for line in out.stdout.splitlines() if line.startswith("REPORT ")]
    assert out.returncode == 0 and lines, out.stdout[-3000:] + out.stderr[-3000:]
    report = json.loads(lines[-1][len("REPORT ") :])
    assert "model.safetensors" in report["hf_files"]  # verl's hf_model checkpoint option wrote it
    assert report["tokens"] > 0 and report["entropy_mean"] > 0
    assert report["max_abs_diff_saved_weights"] <= 1e-4  # the weights that pass used, at its temperature
    assert report["max_abs_diff_initial_weights"] > 1e-2  # the step's weights matter: a stale copy fails
