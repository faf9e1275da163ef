"""Where the real-LM actor's time goes: verl's own actor on SmolLM2-135M-Instruct, in one process.

    .venv-demo/bin/python -m benchmarks.bench_lm_actor [--settings pipeline,cpu_preset] [--repeats 3] [--profile]

Builds verl 0.9.1's ``TrainingWorker`` (the FSDP2 engine on gloo, verl's ``ppo_loss``) from the CPU
preset composed with the real-LM demo's sizes (``examples/cpu_demo/run_lm_demo.py``: 4 prompts × 8
responses of ≤ 48 tokens, two mini-batches), feeds it the committed real step
(``tests/fixtures/lm/dapo_token_step1``: its rendered prompts, response tokens, masks and
advantages) and times the two passes the trainer asks of the actor each step: the old-log-prob pass
(``infer_batch`` with entropy, ``timing_s/old_log_prob``) and the update (``train_mini_batch``, two
optimiser steps, ``timing_s/update_actor``). Each setting runs in a fresh process (the CPU platform
and the gloo process group are per process) on the thread count it names.

``--profile`` splits one repetition of each pass into exclusive wall time per part, by wrapping
the functions verl calls (this process only): the model's forward, the checkpointed layers'
recomputation inside the backward, the backward itself, the log-probs, the entropy, the rest of the
loss, the optimiser step, FSDP2's hooks, and everything else (verl's batching, nested-tensor
conversions, metrics). The ``model`` row is what the model itself needs for the same tokens:
Hugging Face's ``LlamaForCausalLM`` on the same micro-batches, forward (+ backward of a log-prob loss),
no verl, no checkpointing.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from contextlib import contextmanager

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURE = os.path.join(ROOT, "tests", "fixtures", "lm", "dapo_token_step1")
DEMO = os.path.join(ROOT, "examples", "cpu_demo")

# Each setting: torch threads in the actor (0 = every core, None = the CPU platform's rule), overrides
# on top of the real-LM demo's, and environment. `pipeline` is the actor as the CPU preset and the
# demo ran it before: Ray's one thread, gradient checkpointing on, micro-batches of 8 rows, float32;
# each next setting changes one thing; `lm_demo` is the demo as it ships.
MICRO_BATCH_8 = ["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8",
                 "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8"]
FP32 = ["actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=fp32"]
BF16 = ["actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=bf16"]
CKPT = ["actor_rollout_ref.model.enable_gradient_checkpointing=true"]
SETTINGS = {
    "pipeline": dict(threads=1, overrides=MICRO_BATCH_8 + FP32 + CKPT),
    "threads": dict(threads=0, overrides=MICRO_BATCH_8 + FP32 + CKPT),
    "no_checkpointing": dict(threads=0, overrides=MICRO_BATCH_8 + FP32),
    "bf16": dict(threads=0, overrides=MICRO_BATCH_8 + BF16),
    "lm_demo": dict(threads=None, overrides=[]),  # + one micro-batch per mini-batch: the demo as it ships
    "lm_demo_fp32": dict(threads=None, overrides=FP32),
    # tried, not kept (docs/performance.md)
    "packed": dict(threads=0, overrides=MICRO_BATCH_8 + FP32 + ["actor_rollout_ref.model.use_remove_padding=true"]),
    "micro_batch_4": dict(threads=0, overrides=BF16 + ["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
                                                       "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4"]),
    "no_reshard": dict(threads=0, overrides=["actor_rollout_ref.actor.fsdp_config.reshard_after_forward=false"]),
    "no_sync": dict(threads=0, overrides=MICRO_BATCH_8 + [
        "actor_rollout_ref.actor.fsdp_config.use_no_sync_for_gradient_accumulation=true"]),
    "huge_pages": dict(threads=0, overrides=[], env={"THP_MEM_ALLOC_ENABLE": "1"}),
}
PARTS = ("forward", "recompute", "backward", "log_probs", "entropy", "loss", "optimizer", "fsdp_hooks", "other")


def demo_overrides(model_dir: str, data_dir: str) -> list[str]:
    """The real-LM demo's actor overrides (its own function, its default arguments)."""
    sys.path.insert(0, DEMO)
    from run_lm_demo import lm_overrides, parse_args

    return lm_overrides(parse_args(["--smoke"]), data_dir, "DAPO_TOKEN", os.path.join(data_dir, "run"))


def fixture_batch(tokenizer, max_prompt_length: int):
    """The committed real step as verl's trainer holds it: prompts left-padded, responses right-padded."""
    import torch
    from safetensors.torch import load_file

    from verl import DataProto

    tensors = load_file(FIXTURE + ".safetensors")
    with open(FIXTURE + ".json") as f:
        meta = json.load(f)
    responses, response_mask = tensors["responses"], tensors["response_mask"]
    ids = [tokenizer(text, add_special_tokens=False)["input_ids"][-max_prompt_length:] for text in meta["prompts"]]
    prompts = torch.full((len(ids), max_prompt_length), tokenizer.pad_token_id, dtype=torch.long)
    prompt_mask = torch.zeros_like(prompts)
    for row, prompt in enumerate(ids):  # set-up only, not timed
        prompts[row, max_prompt_length - len(prompt):] = torch.tensor(prompt)
        prompt_mask[row, max_prompt_length - len(prompt):] = 1
    attention = torch.cat([prompt_mask, response_mask], 1)
    batch = DataProto.from_dict(tensors={
        "prompts": prompts, "responses": responses, "input_ids": torch.cat([prompts, responses], 1),
        "attention_mask": attention, "position_ids": torch.clamp(torch.cumsum(attention, 1) - 1, min=0),
        "response_mask": response_mask,
    })
    return batch, tensors["advantages"], int(attention.sum())


class PartTimer:
    """Exclusive wall time per part: a stack of open parts, time charged to the innermost."""

    def __init__(self):
        self.totals, self.stack, self.mark, self.active = defaultdict(float), [], 0.0, False

    def _switch(self):
        now = time.perf_counter()
        if self.active and self.stack:
            self.totals[self.stack[-1]] += now - self.mark
        self.mark = now

    def push(self, part):
        self._switch()
        self.stack.append(part)

    def pop(self):
        self._switch()
        self.stack.pop()

    @contextmanager
    def part(self, name):
        self.push(name)
        try:
            yield
        finally:
            self.pop()

    def wrap(self, owner, attr, part):
        original = getattr(owner, attr)

        def wrapped(*args, **kwargs):
            with self.part(part if isinstance(part, str) else part()):
                return original(*args, **kwargs)

        setattr(owner, attr, wrapped)

    @contextmanager
    def recording(self):
        self.totals.clear()
        self.stack, self.active = ["other"], True
        self.mark = time.perf_counter()
        try:
            yield self.totals
        finally:
            self._switch()
            self.active = False


def instrument(worker, timer: PartTimer) -> None:
    """Wrap what verl's engine calls with the timer's parts (this process only)."""
    import torch
    import verl.utils.torch_functional as verl_F
    import verl.workers.engine.fsdp.transformer_impl as impl
    from torch.distributed.fsdp._fully_shard import _fsdp_param_group as fsdp_group

    in_backward = lambda: torch._C._current_graph_task_id() != -1  # noqa: E731
    module = worker.engine.module
    layers = [m for name, m in module.named_modules() if name.endswith(tuple(f"layers.{i}" for i in range(1000)))]

    def forward_part():
        return "recompute" if in_backward() else "forward"

    for m in [module, *layers]:
        m.register_forward_pre_hook(lambda *_: timer.push(forward_part()))
        m.register_forward_hook(lambda *_: timer.pop(), always_call=True)  # a recomputation may stop early
    timer.wrap(torch.Tensor, "backward", "backward")
    timer.wrap(verl_F, "entropy_from_logits", "entropy")
    timer.wrap(impl, "logprobs_from_logits", "log_probs")
    timer.wrap(worker.engine, "optimizer_step", "optimizer")
    for hook in ("pre_forward", "post_forward", "pre_backward", "post_backward"):
        timer.wrap(fsdp_group.FSDPParamGroup, hook, "fsdp_hooks")
    loss_fn = worker.loss_fn

    def timed_loss(*args, **kwargs):
        with timer.part("loss"):
            return loss_fn(*args, **kwargs)

    worker.set_loss_fn(timed_loss)


def worker_input(batch, **response_tensors):
    """The trainer's hand-off to the actor: sequences without padding (nested), per-response fields."""
    from verl.utils import tensordict_utils as tu
    from verl.workers.utils.padding import left_right_2_no_padding

    td = batch.batch.clone()
    for name, value in response_tensors.items():  # (B, T) beside the (B, T) response mask, as the loss pads them
        td[name] = value
    td = left_right_2_no_padding(td)
    tu.assign_non_tensor(td, temperature=1.0)
    return td


def child(setting: str, repeats: int, profile: bool, data_dir: str, dump: str | None = None) -> dict:
    """One setting in this process: returns seconds per pass (and parts with ``profile``)."""
    import torch

    threads, extra = SETTINGS[setting]["threads"], SETTINGS[setting]["overrides"]
    import verl  # noqa: F401  (loads the gtpo_verl plugin)
    from gtpo_verl.cpu import activate
    from gtpo_verl.cpu.platform import init_gloo_process_group

    activate()
    init_gloo_process_group()
    from functools import partial

    from hydra import compose, initialize_config_dir
    from transformers import AutoTokenizer
    from verl.utils import tensordict_utils as tu
    from verl.utils.config import omega_conf_to_dataclass
    from verl.workers.config import TrainingWorkerConfig
    from verl.workers.engine_workers import TrainingWorker
    from verl.workers.utils.padding import response_from_nested
    from verl.workers.utils.losses import ppo_loss

    from gtpo_verl.cpu.workers import actor_threads
    from gtpo_verl.trainer.derive import derive_config

    sys.path.insert(0, DEMO)
    from convert_lm import DEFAULT_OUT as MODEL_DIR

    overrides = demo_overrides(MODEL_DIR, data_dir) + extra
    with initialize_config_dir(config_dir=os.path.join(ROOT, "gtpo_verl", "config"), version_base=None):
        config = compose(config_name="gtpo_trainer_cpu", overrides=[o for o in overrides if not o.startswith("+gtpo")])
    derive_config(config)
    torch.set_num_threads(actor_threads(1) if threads is None else (threads or os.cpu_count()))
    actor = config.actor_rollout_ref.actor
    actor_cfg = omega_conf_to_dataclass(actor)
    model_cfg = omega_conf_to_dataclass(config.actor_rollout_ref.model)
    worker = TrainingWorker(TrainingWorkerConfig(model_type="language_model", model_config=model_cfg,
                                                 engine_config=actor_cfg.engine, optimizer_config=actor_cfg.optim,
                                                 checkpoint_config=actor_cfg.checkpoint))
    worker.reset()
    worker.set_loss_fn(partial(ppo_loss, config=actor_cfg))
    tokenizer = AutoTokenizer.from_pretrained(MODEL_DIR)
    batch, advantages, tokens = fixture_batch(tokenizer, int(config.data.max_prompt_length))
    rows = batch.batch.batch_size[0]
    mini = int(actor.ppo_mini_batch_size) * int(config.actor_rollout_ref.rollout.n)
    log_prob_mb = int(config.actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu)

    nested_mask = torch.nested.as_nested_tensor(
        [row[: int(row.sum())] for row in batch.batch["response_mask"]], layout=torch.jagged)

    first_entropy = []

    def old_log_prob():
        td = worker_input(batch)
        tu.assign_non_tensor(td, calculate_entropy=True, compute_loss=False, use_dynamic_bsz=False,
                             micro_batch_size_per_gpu=log_prob_mb)
        out = worker.infer_batch(td)
        if not first_entropy:
            entropy = response_from_nested(out["entropy"], nested_mask).to_padded_tensor(0.0)
            first_entropy.append(entropy[:, : advantages.shape[1]])
        return out["log_probs"]

    def update(old_padded):
        td = worker_input(batch, old_log_probs=old_padded, advantages=advantages)
        tu.assign_non_tensor(td, calculate_entropy=False, global_batch_size=mini, mini_batch_size=mini, epochs=1,
                             seed=0, dataloader_kwargs={"shuffle": False}, use_dynamic_bsz=False,
                             micro_batch_size_per_gpu=int(actor.ppo_micro_batch_size_per_gpu))
        worker.train_mini_batch(td)

    timer = PartTimer()
    if profile:
        instrument(worker, timer)
    times = {"old_log_prob": [], "update_actor": []}
    parts = {}
    for rep in range(repeats):
        last = profile and rep == repeats - 1
        start = time.perf_counter()
        with timer.recording() if last else _nothing() as totals:
            old = old_log_prob()
        times["old_log_prob"].append(time.perf_counter() - start)
        if last:
            parts["old_log_prob"] = dict(totals)
        old_padded = response_from_nested(old, nested_mask).to_padded_tensor(0.0)[:, : advantages.shape[1]]
        if dump and rep == 0:  # the first pass, before any update: the initial model, as the fixture's step 1
            write_first_pass(dump, setting, old_padded, first_entropy[0])
        start = time.perf_counter()
        with timer.recording() if last else _nothing() as totals:
            update(old_padded)
        times["update_actor"].append(time.perf_counter() - start)
        if last:
            parts["update_actor"] = dict(totals)
    return {"setting": setting, "threads": torch.get_num_threads(), "rows": rows, "tokens": tokens,
            "micro_batch": int(actor.ppo_micro_batch_size_per_gpu), "log_prob_micro_batch": log_prob_mb,
            "gradient_checkpointing": bool(config.actor_rollout_ref.model.enable_gradient_checkpointing),
            "remove_padding": bool(config.actor_rollout_ref.model.use_remove_padding),
            "param_dtype": str(actor.fsdp_config.mixed_precision.param_dtype),
            "env": SETTINGS[setting].get("env", {}),
            "seconds": times, "parts": parts}


def write_first_pass(folder: str, setting: str, old_log_probs, entropy) -> None:
    """The old-log-prob pass's outputs on the fixture's batch, beside it in safetensors (the fixture's names)."""
    from safetensors.torch import save_file

    os.makedirs(folder, exist_ok=True)
    save_file({"old_log_probs": old_log_probs.float().contiguous(), "entropys": entropy.float().contiguous()},
              os.path.join(folder, f"{setting}.safetensors"))


@contextmanager
def _nothing():
    yield {}


def model_floor(repeats: int, threads: int, micro_batch: int, bf16: bool = False) -> dict:
    """The model's own cost for the same tokens: HF forward (+ backward) on the same padded micro-batches."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    sys.path.insert(0, DEMO)
    from convert_lm import DEFAULT_OUT as MODEL_DIR

    torch.set_num_threads(threads or os.cpu_count())
    tokenizer = AutoTokenizer.from_pretrained(MODEL_DIR)
    model = AutoModelForCausalLM.from_pretrained(MODEL_DIR, dtype=torch.float32, attn_implementation="eager")
    import verl  # noqa: F401

    batch, _, tokens = fixture_batch(tokenizer, 64)
    mask = batch.batch["attention_mask"].bool()
    seqs = [row[m] for row, m in zip(batch.batch["input_ids"], mask)]
    chunks = [seqs[i: i + micro_batch] for i in range(0, len(seqs), micro_batch)]

    def padded(chunk):
        longest = max(len(s) for s in chunk)
        ids = torch.zeros(len(chunk), longest, dtype=torch.long)
        att = torch.zeros(len(chunk), longest, dtype=torch.long)
        for i, s in enumerate(chunk):
            ids[i, : len(s)], att[i, : len(s)] = s, 1
        return ids, att

    inputs = [padded(c) for c in chunks]
    autocast = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if bf16 else (lambda: torch.autocast("cpu", enabled=False))

    def forward_backward(backward: bool):
        for ids, att in inputs:
            with torch.set_grad_enabled(backward), autocast():
                logits = model(input_ids=ids, attention_mask=att, use_cache=False).logits
            logp = torch.log_softmax(logits.float(), -1).gather(-1, ids.roll(-1, 1).unsqueeze(-1))
            if backward:
                (logp.squeeze(-1) * att).sum().div(att.sum()).neg().backward()

    times = {"forward": [], "forward_backward": []}
    for _ in range(repeats):
        start = time.perf_counter()
        forward_backward(False)
        times["forward"].append(time.perf_counter() - start)
        start = time.perf_counter()
        forward_backward(True)
        times["forward_backward"].append(time.perf_counter() - start)
    return {"setting": "model" + ("_bf16" if bf16 else ""), "threads": torch.get_num_threads(), "tokens": tokens,
            "micro_batch": micro_batch, "seconds": times}


def summarise(result: dict) -> dict:
    """Median over the repetitions after the first (the first pays one-time costs)."""
    return {k: round(statistics.median(v[1:] or v), 2) for k, v in result["seconds"].items()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--settings", default="pipeline,threads,no_checkpointing,bf16,lm_demo",
                        help=f"comma-separated, from {list(SETTINGS)}")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--profile", action="store_true", help="split the last repetition into its parts")
    parser.add_argument("--model-floor", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--out", default=None, help="write every result as JSON here")
    parser.add_argument("--dump", default=None, help="write each setting's first old-log-prob pass (log-probs, entropy) here")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--floor", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    data_dir = os.path.join(ROOT, "outputs", "bench_lm_actor")
    if args.child or args.floor:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        result = (child(args.child, args.repeats, args.profile, data_dir, args.dump) if args.child
                  else model_floor(args.repeats, 0, 8, bf16=args.floor == "model_bf16"))
        print("RESULT " + json.dumps(result), flush=True)
        return 0

    sys.path.insert(0, DEMO)
    from arithmetic_task import write_splits
    from convert_lm import convert

    convert()
    write_splits(data_dir, train=512, val=32)
    load = os.getloadavg()[0]
    results = []
    runs = [("--child", s) for s in args.settings.split(",")]
    if args.model_floor:
        runs += [("--floor", "model"), ("--floor", "model_bf16")]
    for flag, name in runs:
        cmd = [sys.executable, "-m", "benchmarks.bench_lm_actor", flag, name, "--repeats", str(args.repeats)]
        if args.profile:
            cmd.append("--profile")
        if args.dump and flag == "--child":
            cmd += ["--dump", os.path.abspath(args.dump)]
        env = SETTINGS[name].get("env", {}) if flag == "--child" else {}
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True,
                              env=dict(os.environ, PYTHONPATH=ROOT, TOKENIZERS_PARALLELISM="false", **env))
        line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
        if proc.returncode != 0 or line is None:
            print(f"{name}: failed (exit {proc.returncode})\n{proc.stderr[-3000:]}", file=sys.stderr)
            return 1
        result = json.loads(line[len("RESULT "):])
        result["median_s"] = summarise(result)
        results.append(result)
        print(json.dumps({k: result[k] for k in result if k not in ("seconds", "parts")}), flush=True)
        for phase, totals in result.get("parts", {}).items():
            total = sum(totals.values())
            print(f"  {phase}: " + ", ".join(f"{p} {totals.get(p, 0.0):.2f}" for p in PARTS) + f" (sum {total:.2f} s)")
    machine = {"cpu": _cpu_name(), "cores": os.cpu_count(), "load_before": round(load, 2),
               "load_after": round(os.getloadavg()[0], 2)}
    print(json.dumps(machine))
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "bench_lm_actor.json"), "w") as f:
            json.dump({"machine": machine, "results": results}, f, indent=1)
    return 0


def _cpu_name() -> str:
    with open("/proc/cpuinfo") as f:
        return next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "unknown")


if __name__ == "__main__":
    sys.exit(main())
