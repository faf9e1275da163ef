#!/usr/bin/env python
"""verl's own FSDP2 actor on a device: its entropy and log-probs against Hugging Face, and one update per loss.

    PYTHONPATH=. python -m benchmarks.check_actor_device --device cuda [--out DIR]
    PYTHONPATH=. python -m benchmarks.check_actor_device --device cpu --out DIR      (the same code, tiny sizes)

Builds a Qwen2 causal LM from a config with random weights (no download): ``--model qwen2.5-0.5b``
(the default on CUDA) has Qwen2.5-0.5B's shapes and 151,936-token vocabulary, ``tiny`` (the default
on the CPU) two layers of 128. The output layer is untied and drawn wider than the default
initialisation, so that the next-token distributions are far from uniform and an error in a position,
a row or a mask moves the log-probs by nats. verl 0.9.1's ``TrainingWorker`` (the FSDP2 engine, one
rank: NCCL and gloo on CUDA, gloo and gtpo_verl's CPU platform on the CPU) with verl's ``ppo_loss``
then runs one synthetic step (left-padded prompts, right-padded responses, 0/1 scores mixed in every
group), once per setting:

- ``bf16``: bf16 compute over float32 parameters, packed sequences (``use_remove_padding``), the
  entropy from verl's ``torch.compile``d ``entropy_from_logits`` (compiled on CUDA only: inductor on the
  CPU needs a C++ toolchain);
- ``bf16_offload``: the same with parameters and optimiser state in host memory between calls;
- ``bf16_chunked``: the same with ``entropy_from_logits_with_chunking`` (float32 chunks of the logits);
- ``fp32``: float32 compute, where the comparison with Hugging Face is tight.

In each: the old-log-prob pass (``infer_batch`` with entropy, ``--repeats`` calls, the first paying for
compilation), its entropy and log-probs against the same checkpoint in Hugging Face's model in float32
(one unpadded row at a time, entropy and log-softmax in float64); then one update with DAPO_TOKEN's
loss set-up (``gtpo_token`` advantages from that entropy, verl's vanilla clipped loss, token-mean,
DAPO's clips) and one with DAPO_SEQ's (a fresh old-log-prob pass, ``grpo_s`` advantages and loss,
seq-mean-token-mean), each with finite loss metrics, a positive gradient norm and every parameter
tensor changed. Every call's seconds (device synchronised) and, on CUDA, its peak allocated memory
(``torch.cuda.max_memory_allocated`` after a reset) are recorded.

Writes ``check_actor_device.json`` (after each setting, so that a stopped run keeps what it finished) and
``check_actor_device.md`` to ``--out``. Exit status: 0 every setting passed, 1 a failure or an error,
2 the device is not usable.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import math
import os
import shutil
import signal
import socket
import statistics
import sys
import tempfile
import time
import traceback
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any, Callable

import torch

ROOT = Path(__file__).resolve().parents[1]

# name → config of the random-weight model (Qwen2.5-0.5B's config.json shapes; `tiny` as the CPU tests' model)
MODELS: dict[str, dict[str, int]] = {
    "qwen2.5-0.5b": dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                         num_key_value_heads=2, vocab_size=151_936),
    "tiny": dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=2,
                 num_key_value_heads=2, vocab_size=320),
}
# the output layer's weights ~ N(0, (LOGIT_STD / sqrt(hidden))²): logits of standard deviation about
# LOGIT_STD after the final norm, so each token's log-prob is its own (about ±3 nats around the mean)
LOGIT_STD = 3.0
# the step's sizes per device: prompts × group rows, prompt and response lengths, rows per micro-batch,
# tokens per entropy chunk (the CPU's small enough that its few tokens still make several chunks)
STEPS: dict[str, dict[str, int]] = {
    "cuda": dict(prompts=8, group=8, prompt_length=128, response_length=512, micro_batch=16, entropy_chunk=2048),
    "cpu": dict(prompts=2, group=4, prompt_length=8, response_length=16, micro_batch=4, entropy_chunk=16),
}
SETTINGS: dict[str, dict[str, Any]] = {
    "bf16": dict(dtype="bf16", offload=False, chunked=False),
    "bf16_offload": dict(dtype="bf16", offload=True, chunked=False),
    "bf16_chunked": dict(dtype="bf16", offload=False, chunked=True),
    "fp32": dict(dtype="fp32", offload=False, chunked=False),
}
# |verl − Hugging Face float32| over the response tokens, nats. float32 compute agrees to rounding;
# bf16 compute only to bf16's rounding of weights, activations and (unchunked) the entropy itself,
# so its bounds catch a wrong position, row or mask (nats), not a precision change
TOLERANCES = {"fp32": {"max": 1e-2, "mean": 1e-3}, "bf16": {"max": 2.5, "mean": 0.25}}
LEARNING_RATE = 1e-5  # Adam's first step moves every parameter with a gradient by about this much
METHODS = ("DAPO_TOKEN", "DAPO_SEQ")  # rows of the method table (gtpo_verl/config/methods.yaml)


class SettingTimeout(Exception):
    """A setting ran past ``--setting-timeout``."""


@contextmanager
def time_limit(seconds: int):
    """SIGALRM after ``seconds``: the setting stops at its next Python instruction, the next one still runs."""

    def expire(signum, frame):
        raise SettingTimeout(f"over the {seconds} s limit of a setting")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measured(device: torch.device, call: Callable[[], Any]) -> tuple[Any, dict[str, Any]]:
    """``call()`` and its seconds; on CUDA also its peak allocated memory and what was allocated before it (GiB)."""
    synchronize(device)
    record: dict[str, Any] = {}
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        record["allocated_before_gib"] = round(torch.cuda.memory_allocated(device) / 2**30, 3)
    start = time.perf_counter()
    out = call()
    synchronize(device)
    record["seconds"] = round(time.perf_counter() - start, 3)
    if device.type == "cuda":
        record["peak_gib"] = round(torch.cuda.max_memory_allocated(device) / 2**30, 3)
    return out, record


# ----------------------------------------------------------------------------- model, step, reference

def build_model(path: str, name: str, seed: int, device: torch.device) -> dict[str, Any]:
    """Write a random-weight Qwen2 (float32, drawn on ``device``) and the byte tokenizer verl loads beside it;
    returns its shape. The tokenizer is only read by verl: the step's token ids are drawn over the whole vocabulary."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from gtpo_verl.cpu.tiny_model import build_byte_tokenizer

    tokenizer = build_byte_tokenizer()
    shape = MODELS[name]
    config = Qwen2Config(**shape, max_position_embeddings=4096, tie_word_embeddings=False, torch_dtype="float32",
                         bos_token_id=None, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    torch.manual_seed(seed)
    with torch.device(device):  # on CUDA, drawing 0.6 B numbers there takes a fraction of the host's time
        model = Qwen2ForCausalLM(config)
    with torch.no_grad():
        model.lm_head.weight.normal_(0.0, LOGIT_STD / math.sqrt(shape["hidden_size"]))
    model.save_pretrained(path, safe_serialization=True)
    tokenizer.save_pretrained(path)
    return {"name": name, **shape, "parameters": sum(p.numel() for p in model.parameters())}


def make_step(prompts: int, group: int, prompt_length: int, response_length: int, vocab: int, seed: int):
    """One step as verl's trainer holds it: prompts left-padded, responses right-padded, a 0/1 score per row."""
    from verl import DataProto

    gen = torch.Generator().manual_seed(seed)
    rows = prompts * group
    prompt_lengths = torch.randint(prompt_length // 2, prompt_length + 1, (rows,), generator=gen)
    lengths = torch.randint(max(1, response_length // 4), response_length + 1, (rows,), generator=gen)
    # one row as long as each padded width, as in the committed real step (tests/fixtures/lm)
    prompt_lengths[0], lengths[-1] = prompt_length, response_length
    prompt_mask = (torch.arange(prompt_length)[None] >= prompt_length - prompt_lengths[:, None]).long()
    response_mask = (torch.arange(response_length)[None] < lengths[:, None]).long()
    prompt_ids = torch.randint(0, vocab, (rows, prompt_length), generator=gen) * prompt_mask
    responses = torch.randint(0, vocab, (rows, response_length), generator=gen) * response_mask
    attention = torch.cat([prompt_mask, response_mask], 1)
    batch = DataProto.from_dict(tensors={
        "prompts": prompt_ids, "responses": responses, "input_ids": torch.cat([prompt_ids, responses], 1),
        "attention_mask": attention, "position_ids": torch.clamp(torch.cumsum(attention, 1) - 1, min=0),
        "response_mask": response_mask,
    })
    scores = torch.randint(0, 2, (rows,), generator=gen).float()
    scores[0::group], scores[1::group] = 1.0, 0.0  # every group mixed: no group's advantages are all zero
    rewards = torch.zeros(rows, response_length)
    rewards[torch.arange(rows), lengths - 1] = scores
    uids = [f"prompt{row // group}" for row in range(rows)]
    return batch, rewards, uids


def hf_reference(model_dir: str, batch, device: torch.device) -> dict[str, torch.Tensor]:
    """Entropy and log-prob of every response token from Hugging Face's model on the same checkpoint, in float32,
    one unpadded row at a time (no packing, no mask), entropy and log-softmax in float64."""
    from transformers import AutoModelForCausalLM

    torch.backends.cuda.matmul.allow_tf32 = False  # float32 products in float32
    attention = "sdpa" if device.type == "cuda" else "eager"
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation=attention)
    model.to(device).eval()
    prompts, responses = batch.batch["prompts"], batch.batch["responses"]
    prompt_mask = batch.batch["attention_mask"][:, : prompts.shape[1]]
    response_mask = batch.batch["response_mask"]
    entropy, log_prob = torch.zeros(responses.shape, dtype=torch.float64), torch.zeros(responses.shape, dtype=torch.float64)
    with torch.no_grad():
        for row in range(responses.shape[0]):
            prompt = prompts[row][prompt_mask[row].bool()]
            response = responses[row][response_mask[row].bool()]
            ids = torch.cat([prompt, response]).to(device)
            logits = model(input_ids=ids[None], use_cache=False).logits[0].double()
            predicting = logits[len(prompt) - 1: len(ids) - 1]  # the positions whose next token is a response token
            log_softmax = torch.log_softmax(predicting, -1)
            entropy[row, : len(response)] = -(log_softmax.exp() * log_softmax).sum(-1).cpu()
            log_prob[row, : len(response)] = log_softmax.gather(-1, response.to(device)[:, None])[:, 0].cpu()
    del model
    return {"entropy": entropy, "log_prob": log_prob}


def differences(got: torch.Tensor, expected: torch.Tensor, mask: torch.Tensor) -> dict[str, float]:
    diff = (got.double() - expected).abs()[mask.bool()]
    return {"max": float(diff.max()), "mean": float(diff.mean())}


# ----------------------------------------------------------------------------- verl's actor

def start_process_group(device: torch.device) -> None:
    """One rank: on the CPU gtpo_verl's platform and gloo; on CUDA verl's own backend string (utils/distributed.py)."""
    import torch.distributed as dist

    if device.type == "cpu":
        from gtpo_verl.cpu import activate
        from gtpo_verl.cpu.platform import init_gloo_process_group

        activate()
        init_gloo_process_group()
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update({"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1",
                       "MASTER_PORT": str(port)})
    torch.cuda.set_device(device.index or 0)
    dist.init_process_group(backend="cpu:gloo,cuda:nccl", rank=0, world_size=1)


def compose(device: torch.device, setting: str, method: str, model_dir: str, step: dict[str, int]):
    """The package's trainer config (``gtpo_trainer_cpu`` on the CPU) with the setting's and the method's overrides."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    from gtpo_verl.methods import METHODS as TABLE
    from gtpo_verl.methods import pipeline_overrides
    from gtpo_verl.trainer.derive import derive_config

    knobs = SETTINGS[setting]
    flag = lambda value: str(bool(value)).lower()  # noqa: E731
    compiled = flag(device.type == "cuda")
    precision = f"{{param_dtype:{knobs['dtype']},reduce_dtype:fp32,buffer_dtype:fp32}}"
    overrides = [
        f"actor_rollout_ref.model.path={model_dir}",
        "actor_rollout_ref.model.use_remove_padding=true",  # verl's compiled and chunked entropy run on packed sequences only
        # flash-attn is not on the device image; eager as the CPU preset
        f"++actor_rollout_ref.model.override_config.attn_implementation={'sdpa' if device.type == 'cuda' else 'eager'}",
        "actor_rollout_ref.actor.strategy=fsdp2",
        f"actor_rollout_ref.actor.use_torch_compile={compiled}",
        f"actor_rollout_ref.actor.fsdp_config.use_torch_compile={compiled}",
        f"++actor_rollout_ref.actor.fsdp_config.mixed_precision={precision}",
        f"actor_rollout_ref.actor.fsdp_config.param_offload={flag(knobs['offload'])}",
        f"actor_rollout_ref.actor.fsdp_config.optimizer_offload={flag(knobs['offload'])}",
        f"actor_rollout_ref.actor.entropy_from_logits_with_chunking={flag(knobs['chunked'])}",
        f"actor_rollout_ref.actor.entropy_from_logits_chunk_size={step['entropy_chunk']}",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={step['prompts']}",  # one optimiser step over the whole batch
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={step['micro_batch']}",
        f"actor_rollout_ref.rollout.n={step['group']}",
        f"actor_rollout_ref.actor.optim.lr={LEARNING_RATE}",
        # the method's row without dynamic sampling: one update of a fixed batch, no rollout to refill
        *pipeline_overrides(dataclasses.replace(TABLE[method], dynamic_sampling=False)),
    ]
    name = "gtpo_trainer_cpu" if device.type == "cpu" else "gtpo_trainer"
    with initialize_config_dir(config_dir=str(ROOT / "gtpo_verl" / "config"), version_base=None):
        config = hydra_compose(config_name=name, overrides=overrides)
    derive_config(config)
    return config


def make_worker(config):
    from verl.utils.config import omega_conf_to_dataclass
    from verl.workers.config import TrainingWorkerConfig
    from verl.workers.engine_workers import TrainingWorker

    actor = omega_conf_to_dataclass(config.actor_rollout_ref.actor)
    worker = TrainingWorker(TrainingWorkerConfig(
        model_type="language_model", model_config=omega_conf_to_dataclass(config.actor_rollout_ref.model),
        engine_config=actor.engine, optimizer_config=actor.optim, checkpoint_config=actor.checkpoint))
    worker.reset()
    return worker


def loss_fn(config):
    from verl.utils.config import omega_conf_to_dataclass
    from verl.workers.utils.losses import ppo_loss

    return partial(ppo_loss, config=omega_conf_to_dataclass(config.actor_rollout_ref.actor))


def nested_mask(mask: torch.Tensor) -> torch.Tensor:
    """Right-padded (B, T) response mask → the nested one verl's helpers take."""
    return torch.nested.as_nested_tensor([row[: int(row.sum())] for row in mask], layout=torch.jagged)


def worker_input(batch, micro_batch: int, **response_tensors):
    """The trainer's hand-off to the actor: sequences without padding (nested), per-response fields nested."""
    from verl.utils import tensordict_utils as tu
    from verl.workers.utils.padding import left_right_2_no_padding, response_to_nested

    td = batch.batch.clone()
    for name, value in response_tensors.items():
        td[name] = response_to_nested(value, nested_mask(batch.batch["response_mask"]))
    td = left_right_2_no_padding(td)
    tu.assign_non_tensor(td, temperature=1.0, use_dynamic_bsz=False, micro_batch_size_per_gpu=micro_batch)
    return td


def old_log_prob(worker, batch, micro_batch: int) -> tuple[torch.Tensor, torch.Tensor]:
    """verl's old-log-prob pass with entropy → (log-probs, entropy), (B, T) right-padded with zeros."""
    from verl.utils import tensordict_utils as tu
    from verl.workers.utils.padding import response_from_nested

    td = worker_input(batch, micro_batch)
    tu.assign_non_tensor(td, calculate_entropy=True, compute_loss=False)
    out = worker.infer_batch(td)
    mask = batch.batch["response_mask"]

    def padded(values):
        dense = response_from_nested(values, nested_mask(mask)).to_padded_tensor(0.0)
        return torch.nn.functional.pad(dense, (0, mask.shape[1] - dense.shape[1]))  # as wide as the mask

    return padded(out["log_probs"]), padded(out["entropy"])


def update(worker, batch, micro_batch: int, old_log_probs, advantages) -> dict[str, list[float]]:
    """One mini-batch (the whole step, one optimiser step) through verl's ``train_mini_batch``: its metrics."""
    from verl.utils import tensordict_utils as tu

    rows = batch.batch.batch_size[0]
    td = worker_input(batch, micro_batch, old_log_probs=old_log_probs, advantages=advantages)
    tu.assign_non_tensor(td, calculate_entropy=False, global_batch_size=rows, mini_batch_size=rows, epochs=1, seed=1,
                         dataloader_kwargs={"shuffle": False})
    out = worker.train_mini_batch(td)
    return {k: [float(x) for x in (v if isinstance(v, list) else [v])] for k, v in out["metrics"].items()}


def parameters(worker) -> dict[str, torch.Tensor]:
    """A float32 host copy of every parameter (one rank: each DTensor's local shard is the whole tensor)."""
    from torch.distributed.tensor import DTensor

    return {name: (p.to_local() if isinstance(p, DTensor) else p).detach().to("cpu", torch.float32, copy=True)
            for name, p in worker.engine.module.named_parameters()}


def entropy_path(worker) -> dict[str, Any]:
    """Which entropy function verl's engine calls, and whether torch.compile wraps it."""
    fn = worker.engine.compute_entropy_from_logits
    original = getattr(fn, "_torchdynamo_orig_callable", None)  # set on what torch.compile returns
    return {"function": (original or fn).__name__, "compiled": original is not None}


def run_setting(setting: str, device: torch.device, args, model_dir: str, step: dict[str, int], batch, rewards, uids,
                reference: dict[str, torch.Tensor]) -> dict[str, Any]:
    from verl.trainer.ppo.core_algos import get_adv_estimator_fn

    knobs = SETTINGS[setting]
    configs = {method: compose(device, setting, method, model_dir, step) for method in METHODS}
    worker, init = measured(device, lambda: make_worker(configs["DAPO_TOKEN"]))
    result: dict[str, Any] = {"setting": setting, **knobs, "entropy_path": entropy_path(worker),
                              "param_offload": bool(worker.engine.is_param_offload_enabled), "calls": {"init": init}}
    mask = batch.batch["response_mask"]
    passes = []
    for _ in range(args.repeats):
        (log_probs, entropy), record = measured(device, lambda: old_log_prob(worker, batch, step["micro_batch"]))
        passes.append(record)
    result["calls"]["old_log_prob"] = passes
    result["entropy_vs_hf"] = differences(entropy, reference["entropy"], mask)
    result["log_prob_vs_hf"] = differences(log_probs, reference["log_prob"], mask)
    result["updates"] = {}
    for method in METHODS:
        if method != METHODS[0]:  # the policy moved: the next update's old log-probs and entropy are its own
            (log_probs, entropy), record = measured(device, lambda: old_log_prob(worker, batch, step["micro_batch"]))
            result["calls"][f"old_log_prob_before_{method}"] = record
        config = configs[method]
        advantages, _ = get_adv_estimator_fn(config.algorithm.adv_estimator)(rewards, mask, index=uids,
                                                                        config=config.algorithm, entropys=entropy)
        worker.set_loss_fn(loss_fn(config))
        before = parameters(worker)
        metrics, record = measured(device, lambda: update(worker, batch, step["micro_batch"], log_probs, advantages))
        after = parameters(worker)
        losses = {k: v for k, v in metrics.items() if "loss" in k}
        result["updates"][method] = {
            **record, "loss_agg_mode": str(config.actor_rollout_ref.actor.loss_agg_mode),
            "loss_mode": str(config.actor_rollout_ref.actor.policy_loss.loss_mode),
            "losses": {k: v[0] if len(v) == 1 else v for k, v in losses.items()},
            "grad_norm": metrics.get("grad_norm", [float("nan")])[0],
            "finite": bool(losses) and all(math.isfinite(x) for v in losses.values() for x in v),
            "non_finite_metrics": sorted(k for k, v in metrics.items() if not all(math.isfinite(x) for x in v)),
            "changed": sum(not torch.equal(before[n], after[n]) for n in before), "parameters": len(before),
        }
        del before, after
    del worker
    result["checks"] = setting_checks(result, device)
    result["passed"] = all(result["checks"].values())
    return result


def setting_checks(result: dict[str, Any], device: torch.device) -> dict[str, bool]:
    tolerance = TOLERANCES[result["dtype"]]
    within = lambda d: d["max"] <= tolerance["max"] and d["mean"] <= tolerance["mean"]  # noqa: E731
    expected_function = "entropy_from_logits_with_chunking" if result["chunked"] else "entropy_from_logits"
    checks = {
        "entropy_path": result["entropy_path"]["function"] == expected_function
        and result["entropy_path"]["compiled"] == (device.type == "cuda"),
        "offload": result["param_offload"] == result["offload"],
        "entropy_vs_hf": within(result["entropy_vs_hf"]),
        "log_prob_vs_hf": within(result["log_prob_vs_hf"]),
    }
    for method, u in result["updates"].items():
        checks[f"{method}_finite"] = u["finite"] and u["grad_norm"] > 0
        checks[f"{method}_changed"] = u["changed"] == u["parameters"]
    return checks


# ----------------------------------------------------------------------------- report

def report(results: dict[str, Any]) -> str:
    cuda = results["device"].startswith("cuda")
    model = results.get("model", {})
    lines = [f"verl {results['verl']}, torch {results['torch']}, transformers {results['transformers']}; "
             f"device {results['device']} ({results['device_name']})",
             f"Model: random-weight Qwen2 `{model.get('name')}`, {model.get('parameters', 0) / 1e6:.1f} M parameters; "
             f"step {results.get('step')}; Hugging Face reference {results.get('reference_seconds')} s", "",
             "| setting | entropy function | compiled | offload | init s | old-log-prob s (first; rest) | "
             "DAPO_TOKEN update s | DAPO_SEQ update s | peak GiB | entropy Δ max / mean | log-prob Δ max / mean | passed |",
             "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in results["settings"]:
        if "error" in r:
            lines.append(f"| {r['setting']} | **error**: {r['error'][:200]} |||||||||||")
            continue
        passes = [c["seconds"] for c in r["calls"]["old_log_prob"]]
        rest = f"; {statistics.median(passes[1:]):.2f}" if len(passes) > 1 else ""
        calls = [r["calls"]["init"], *r["calls"]["old_log_prob"], *r["updates"].values()]
        peak = f"{max(c['peak_gib'] for c in calls):.2f}" if cuda else "—"
        e, lp = r["entropy_vs_hf"], r["log_prob_vs_hf"]
        lines.append(
            f"| {r['setting']} | {r['entropy_path']['function']} | {'yes' if r['entropy_path']['compiled'] else 'no'} | "
            f"{'yes' if r['param_offload'] else 'no'} | {r['calls']['init']['seconds']:.2f} | {passes[0]:.2f}{rest} | "
            f"{r['updates']['DAPO_TOKEN']['seconds']:.2f} | {r['updates']['DAPO_SEQ']['seconds']:.2f} | {peak} | "
            f"{e['max']:.2e} / {e['mean']:.2e} | {lp['max']:.2e} / {lp['mean']:.2e} | "
            f"{'yes' if r['passed'] else '**no**: ' + ', '.join(k for k, v in r['checks'].items() if not v)} |")
    lines += ["", "Updates (loss metrics, gradient norm, parameter tensors changed):", ""]
    for r in results["settings"]:
        for method, u in r.get("updates", {}).items():
            losses = ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in u["losses"].items())
            lines.append(f"- {r['setting']} {method} ({u['loss_mode']}, {u['loss_agg_mode']}): {losses}; "
                         f"grad_norm {u['grad_norm']:.4g}; changed {u['changed']}/{u['parameters']}")
    lines += ["", f"Tolerances against Hugging Face float32 (nats): {json.dumps(TOLERANCES)}. "
                  f"All settings {'passed' if results['passed'] else '**did not pass**'}."]
    return "\n".join(lines)


def write(results: dict[str, Any], out: str | None) -> None:
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / "check_actor_device.json").write_text(json.dumps(results, indent=1))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--model", choices=sorted(MODELS), help="default: qwen2.5-0.5b on CUDA, tiny on the CPU")
    p.add_argument("--settings", default=",".join(SETTINGS), help=f"comma-separated, from {list(SETTINGS)}")
    p.add_argument("--repeats", type=int, default=3, help="old-log-prob calls per setting (the first compiles)")
    p.add_argument("--setting-timeout", type=int, default=120, help="seconds a setting may take before the next one starts")
    for key in STEPS["cuda"]:
        p.add_argument("--" + key.replace("_", "-"), type=int, help="default: the device's (STEPS)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None, help="folder for check_actor_device.json and check_actor_device.md")
    args = p.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("check_actor_device: torch.cuda.is_available() is False", file=sys.stderr)
        return 2
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import transformers
    import verl

    import gtpo_verl.plugin.registry  # noqa: F401  (registers the estimators and the loss where no entry point loaded it)

    start_process_group(device)
    step = {k: getattr(args, k) or v for k, v in STEPS["cuda" if device.type == "cuda" else "cpu"].items()}
    results: dict[str, Any] = {
        "device": str(device), "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__, "verl": verl.__version__, "transformers": transformers.__version__,
        "step": step, "tolerances": TOLERANCES, "settings": [], "passed": False,
    }
    workdir = tempfile.mkdtemp(prefix="check_actor_device_")
    try:
        model_dir = os.path.join(workdir, "model")
        model = args.model or ("qwen2.5-0.5b" if device.type == "cuda" else "tiny")
        results["model"] = build_model(model_dir, model, args.seed, device)
        batch, rewards, uids = make_step(step["prompts"], step["group"], step["prompt_length"], step["response_length"],
                                         results["model"]["vocab_size"], args.seed)
        reference, record = measured(device, lambda: hf_reference(model_dir, batch, device))
        results["reference_seconds"] = record["seconds"]
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
        for setting in args.settings.split(","):
            print(f"check_actor_device: {setting}", file=sys.stderr, flush=True)
            try:
                with time_limit(args.setting_timeout):
                    results["settings"].append(run_setting(setting, device, args, model_dir, step, batch, rewards, uids,
                                                           reference))
            except Exception as exc:  # reported, not raised: the next setting still runs
                results["settings"].append({"setting": setting, "passed": False, "error": f"{type(exc).__name__}: {exc}",
                                            "traceback": traceback.format_exc(limit=-6)})
            gc.collect()
            if device.type == "cuda":
                torch.cuda.empty_cache()
            results["passed"] = all(r["passed"] for r in results["settings"])
            write(results, args.out)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    text = report(results)
    print(text)
    if args.out:
        (Path(args.out) / "check_actor_device.md").write_text(text + "\n")
    return 0 if results["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
