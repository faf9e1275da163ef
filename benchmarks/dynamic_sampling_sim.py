"""DAPO dynamic-sampling throughput model: verl 0.9.1's own sync ReplayBuffer driven by a generation latency model.

    python -m benchmarks.dynamic_sampling_sim              # the table of docs/performance.md
    python -m benchmarks.dynamic_sampling_sim --steps 2    # quicker

A model, not a measurement: it estimates how long DAPO's dynamic sampling (groups whose responses
all score alike are evicted and refilled until a batch of mixed groups is kept) keeps a GPU
cluster generating per training step under each generation schedule, at the DAPO recipes' sizes.
Nothing in it ran on GPUs.

What is real: ``verl.trainer.ppo.v1.replay_buffer.ReplayBuffer`` (sync mode, DAPO filtering on
``acc``, ``max_inflight_gen_batches=3``, ``gen_batch_size=1``), i.e. verl's eviction, its 2k refill
credit per k evicted groups, its in-flight cap, the drain of every in-flight request once enough
groups are kept, and its discard of the surplus. Its TransferQueue calls go to an in-memory store
with the same key/tag layout (prompt ``uid`` with ``status``; trajectories ``{uid}_{session}_0`` with
``extra_fields.reward_extra_info.acc``), and its 2 s sleep advances a simulated clock instead.

The model (assumptions, not measurements):
- 32 GPUs, vLLM tensor parallel 4 → 8 replicas; requests routed to the replica with the fewest in
  flight (verl's GlobalRequestLoadBalancer); at most 160 sequences decode at once per replica (a
  Qwen2.5-32B KV cache of ~0.7 M tokens per TP-4 replica at ~4.4k tokens per sequence), the rest wait;
- decoding: every running sequence of a replica gains one token per engine step of
  ``20 ms + 0.15 ms × running`` (memory-bound decode; ≈ 26 tokens/s per sequence at 160); prefill ignored;
- DAPO-like lengths: per prompt a median of 1.8k tokens × lognormal(0.8) × (1 + 0.8 · (1 − p)) (harder
  prompts answer longer), per response × lognormal(0.7), capped at 20480 (~2 % hit the cap; mean ≈ 3.9k tokens);
- per-prompt accuracy p: a fraction always right, a fraction always wrong (their groups are evicted),
  the rest Beta(1.5, 1.5); the mixed fraction sets the step's keep rate;
- the recipe's sizes: 512 prompts × 16 responses per step, 3 × 512 prompts in flight at most.

Reported per step and schedule: generation time; waves = that time over the time one batch of 512
prompts takes on the idle cluster with nothing evicted (upstream DAPO's batch generation needs 1 wave
when one gen batch yields enough groups); idle = fraction of replica-time with nothing to decode;
waste = generated tokens not in the trained batch; bias = mean response length of the trained groups
over that of every dispatched group the filter would keep (finished or not), minus 1 (≈ 0 % = the
trained groups are a fair sample of the kept groups).

Schedules: ``current`` (verl 0.9.1 as the recipes run it); ``upfront`` (all 3 × 512 prompts
dispatched at the start of the step); ``abort`` (stop at the first 512 kept groups in *dispatch
order* and abort everything else in flight: a fair sample, since the cut does not look at lengths);
``upfront+abort``; ``abort-first-finished`` (stop at the first 512 kept groups to *finish*: fast,
but biased to short responses, shown for contrast); and, as a reference outside verl's buffer,
upstream DAPO's V0 trainer (batches of 1536 prompts, each fully generated, until 512 groups are kept).
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import math
import os
import sys
from collections import deque
from dataclasses import dataclass, field

import numpy as np

REPLICAS = 8  # 32 GPUs / TP 4
MAX_RUNNING = 160
STEP_BASE_S, STEP_PER_SEQ_S = 0.020, 0.00015
BATCH, GROUP, MAX_INFLIGHT_BATCHES = 512, 16, 3
MAX_LEN = 20480
POLL_S = 30.0  # coarser than verl's 2 s to keep the model fast; delays every schedule's refills alike
KEEP_RATES = (0.8, 0.6, 0.45, 0.3)


# ------------------------------------------------------------------ workload
@dataclass
class Prompt:
    uid: str
    order: int  # dispatch order within the step
    accuracy: float
    lengths: np.ndarray  # (GROUP,) response lengths
    acc: np.ndarray  # (GROUP,) 0/1 per response
    done: int = 0


class Workload:
    def __init__(self, rng: np.random.Generator, keep_rate: float):
        self.rng = rng
        self.mixed = min(1.0, keep_rate / 0.87)  # Beta(1.5,1.5) groups of 16 are mixed ~87 % of the time
        self.count = itertools.count()

    def prompt(self, order: int) -> Prompt:
        rng = self.rng
        u = rng.random()
        if u < self.mixed:
            p = rng.beta(1.5, 1.5)
        else:
            p = 1.0 if rng.random() < 0.6 else 0.0  # always right (easy) or always wrong (hard)
        median = 1800.0 * math.exp(0.8 * rng.standard_normal()) * (1 + 0.8 * (1 - p))
        lengths = np.minimum(MAX_LEN, np.maximum(16, median * np.exp(0.7 * rng.standard_normal(GROUP)))).astype(int)
        acc = (rng.random(GROUP) < p).astype(float)
        return Prompt(uid=f"u{next(self.count)}", order=order, accuracy=p, lengths=lengths, acc=acc)


# ------------------------------------------------------------------ generation model
@dataclass
class Replica:
    progress: float = 0.0  # tokens every running sequence has gained since t = 0
    running: list = field(default_factory=list)  # heap of (finish progress, request id)
    queue: deque = field(default_factory=deque)
    idle_s: float = 0.0

    def inflight(self) -> int:
        return len(self.running) + len(self.queue)

    def step_s(self) -> float:
        return STEP_BASE_S + STEP_PER_SEQ_S * len(self.running)

    def admit(self, lengths: dict) -> None:
        while self.queue and len(self.running) < MAX_RUNNING:
            rid = self.queue.popleft()
            heapq.heappush(self.running, (self.progress + lengths[rid], rid))


class Cluster:
    """8 vLLM replicas decoding at a shared per-step rate; session completions call ``on_done``."""

    def __init__(self, on_done):
        self.replicas = [Replica() for _ in range(REPLICAS)]
        self.time = 0.0
        self.lengths: dict = {}
        self.owner: dict = {}  # request id → (prompt, session)
        self.aborted: set = set()
        self.on_done = on_done
        self.tokens = 0.0
        self.last_done = 0.0
        self.ids = itertools.count()

    def submit(self, prompt: Prompt) -> None:
        for session, length in enumerate(prompt.lengths):
            rid = next(self.ids)
            self.lengths[rid], self.owner[rid] = int(length), (prompt, session)
            replica = min(self.replicas, key=Replica.inflight)  # least in flight, as verl's balancer
            replica.queue.append(rid)
            replica.admit(self.lengths)

    def abort(self, prompts) -> None:
        uids = {p.uid for p in prompts}
        for replica in self.replicas:  # what they decoded so far stays counted (as waste)
            replica.running = [(f, r) for f, r in replica.running if self.owner[r][0].uid not in uids]
            heapq.heapify(replica.running)
            replica.queue = deque(r for r in replica.queue if self.owner[r][0].uid not in uids)
            replica.admit(self.lengths)

    def busy(self) -> bool:
        return any(r.running for r in self.replicas)

    def advance_to(self, target: float) -> None:
        while True:
            best, best_replica = target, None
            for replica in self.replicas:
                if replica.running:
                    at = self.time + (replica.running[0][0] - replica.progress) * replica.step_s()
                    if at < best:
                        best, best_replica = at, replica
            if best_replica is None and math.isinf(target):
                return  # nothing left to decode: stop at the last completion
            dt = best - self.time
            for replica in self.replicas:
                if replica.running:
                    gained = dt / replica.step_s()
                    replica.progress += gained
                    self.tokens += gained * len(replica.running)
                else:
                    replica.idle_s += dt
            self.time = best
            if best_replica is None:
                return
            finish, rid = heapq.heappop(best_replica.running)
            best_replica.progress = finish
            best_replica.admit(self.lengths)
            prompt, session = self.owner[rid]
            self.last_done = self.time
            self.on_done(prompt, session)


# ------------------------------------------------------------------ TransferQueue stand-in
class MemoryTQ:
    """The four TransferQueue calls verl's ReplayBuffer makes, on a dict (same keys and tags)."""

    def __init__(self):
        self.tags: dict = {"train": {}}
        self.values: dict = {}

    def kv_list(self):
        return self.tags

    def kv_batch_get(self, keys, partition_id, select_fields):
        return {"extra_fields": [self.values[key] for key in keys]}

    def kv_clear(self, partition_id, keys):
        for key in keys:
            self.tags[partition_id].pop(key, None)
            self.values.pop(key, None)


# ------------------------------------------------------------------ one step of a schedule
def run_step(schedule: str, rng: np.random.Generator, keep_rate: float) -> dict:
    from verl.trainer.ppo.v1 import replay_buffer as verl_replay_buffer

    tq = MemoryTQ()
    workload = Workload(rng, keep_rate)
    dispatched: list[Prompt] = []
    kept_all: list[Prompt] = []

    def session_done(prompt: Prompt, session: int) -> None:  # what AgentLoopWorkerTQ writes
        key = f"{prompt.uid}_{session}_0"
        tq.tags["train"][key] = {"status": "success", "global_steps": 1}
        tq.values[key] = {"reward_extra_info": {"acc": float(prompt.acc[session])}}
        prompt.done += 1
        if prompt.done == GROUP:
            tq.tags["train"][prompt.uid]["status"] = "finished"
            if prompt.acc.std() > 0:
                kept_all.append(prompt)

    cluster = Cluster(session_done)

    def refill(count: int) -> int:  # the trainer's _add_prompts_to_generate
        for _ in range(count):
            prompt = workload.prompt(len(dispatched))
            dispatched.append(prompt)
            tq.tags["train"][prompt.uid] = {"is_prompt": True, "status": "running", "global_steps": 1}
            cluster.submit(prompt)
        return count

    real_tq, verl_replay_buffer.tq = verl_replay_buffer.tq, tq  # verl's module global: its TransferQueue client
    buffer = verl_replay_buffer.ReplayBuffer(
        trainer_mode="sync", trainer_config={}, max_off_policy_threshold=None, max_off_policy_strategy="drop",
        sampler_kwargs={}, poll_interval=POLL_S, refill_fn=refill, filter_groups_metric="acc",
        train_batch_size=BATCH, gen_batch_size=1, max_inflight_gen_batches=MAX_INFLIGHT_BATCHES,
    )
    abort = schedule in ("abort", "upfront+abort", "abort-first-finished")
    done_aborting = [False]

    def cut_and_abort() -> None:
        """Stop generating once 512 kept groups are settled; abort the rest, clear their surplus."""
        if schedule == "abort-first-finished":
            chosen = kept_all[:BATCH]  # in finish order
        else:  # the first 512 kept groups in dispatch order, once every earlier prompt is finished
            chosen, settled = [], True
            for prompt in dispatched:
                if prompt.done < GROUP:
                    settled = False
                    break
                if prompt.acc.std() > 0:
                    chosen.append(prompt)
                    if len(chosen) == BATCH:
                        break
            if not settled or len(chosen) < BATCH:
                return
        if len(chosen) < BATCH:
            return
        keep = {p.uid for p in chosen}
        unfinished = [p for p in dispatched if p.done < GROUP]
        cluster.abort(unfinished)
        surplus = [p for p in dispatched if p.uid not in keep and p.acc.std() > 0 and p.done == GROUP]
        for prompt in unfinished + surplus:
            tq.kv_clear("train", [prompt.uid] + [f"{prompt.uid}_{s}_0" for s in range(GROUP)])
        done_aborting[0] = True

    def wait_for_next_poll(partition_id: str, last_debug_time: float) -> float:  # instead of time.sleep
        cluster.advance_to(cluster.time + POLL_S)
        if abort and not done_aborting[0]:
            cut_and_abort()
        return last_debug_time

    buffer._wait_for_next_poll = wait_for_next_poll
    try:
        refill(BATCH * (MAX_INFLIGHT_BATCHES if schedule.startswith("upfront") else 1))  # PPOTrainer.prepare_step
        batch, _ = buffer.sample(global_steps=1, partition_id="train", batch_size=BATCH)
    finally:
        verl_replay_buffer.tq = real_tq
    trained = {key.split("_")[0] for key in batch.keys}
    by_uid = {p.uid: p for p in dispatched}
    trained_tokens = sum(int(by_uid[u].lengths.sum()) for u in trained)
    finished = [p for p in dispatched if p.done == GROUP]
    return {
        "gen_s": cluster.time,
        "idle": sum(r.idle_s for r in cluster.replicas) / (REPLICAS * cluster.time),
        "waste": 1 - trained_tokens / cluster.tokens,
        "keep": len(kept_all) / max(1, len(finished)),
        "dispatched": len(dispatched),
        # against every dispatched group the filter keeps, finished or not (the sample the step should be)
        "bias": np.mean([by_uid[u].lengths.mean() for u in trained])
        / np.mean([p.lengths.mean() for p in dispatched if p.acc.std() > 0]) - 1,
    }


def run_upstream_step(rng: np.random.Generator, keep_rate: float) -> dict:
    """Upstream DAPO's V0 trainer (no verl buffer): batches of 1536 prompts until 512 groups are kept."""
    workload = Workload(rng, keep_rate)
    cluster = Cluster(lambda prompt, session: None)
    dispatched: list[Prompt] = []
    while sum(p.acc.std() > 0 for p in dispatched) < BATCH:
        for _ in range(BATCH * MAX_INFLIGHT_BATCHES):
            dispatched.append(workload.prompt(len(dispatched)))
            cluster.submit(dispatched[-1])
        cluster.advance_to(math.inf)  # the whole generation batch, to its last response
    kept = [p for p in dispatched if p.acc.std() > 0]
    trained = kept[:BATCH]
    return {
        "gen_s": cluster.time,
        "idle": sum(r.idle_s for r in cluster.replicas) / (REPLICAS * cluster.time),
        "waste": 1 - sum(int(p.lengths.sum()) for p in trained) / cluster.tokens,
        "keep": len(kept) / len(dispatched),
        "dispatched": len(dispatched),
        "bias": np.mean([p.lengths.mean() for p in trained]) / np.mean([p.lengths.mean() for p in kept]) - 1,
    }


def one_wave_s(rng: np.random.Generator, keep_rate: float) -> float:
    """Time to generate one batch of 512 prompts × 16 on the idle cluster (nothing evicted)."""
    workload = Workload(rng, keep_rate)
    cluster = Cluster(lambda prompt, session: None)
    for order in range(BATCH):
        cluster.submit(workload.prompt(order))
    cluster.advance_to(math.inf)
    return cluster.time


UPSTREAM = "upstream V0 (reference)"
SCHEDULES = ("current", "upfront", "abort", "upfront+abort", "abort-first-finished", UPSTREAM)


def main() -> None:
    if os.environ.get("PYTHONHASHSEED") != "0":  # verl picks among equally old groups in set order
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, "PYTHONHASHSEED": "0"})
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=len(KEEP_RATES), help="steps (keep rates cycle through %s)" % (KEEP_RATES,))
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    rows = []
    for step in range(args.steps):
        keep_rate = KEEP_RATES[step % len(KEEP_RATES)]
        wave = np.mean([one_wave_s(np.random.default_rng([args.seed, step, 99, k]), keep_rate) for k in range(2)])
        for schedule in SCHEDULES:
            step_rng = np.random.default_rng([args.seed, step])
            result = run_upstream_step(step_rng, keep_rate) if schedule == UPSTREAM else run_step(schedule, step_rng, keep_rate)
            rows.append((step + 1, schedule, keep_rate, wave, result))

    print("| step | schedule | kept groups | prompts dispatched | generation (min) | waves | GPU idle | tokens wasted | length bias of trained groups |")
    print("|---|---|---|---|---|---|---|---|---|")
    for step, schedule, keep_rate, wave, r in rows:
        print(
            f"| {step} | {schedule} | {r['keep']:.0%} | {r['dispatched']} | {r['gen_s'] / 60:.1f} | {r['gen_s'] / wave:.2f} "
            f"| {r['idle']:.0%} | {r['waste']:.0%} | {r['bias']:+.1%} |"
        )
    print()
    print("| schedule | mean generation (min) | speed-up vs current | mean waves | mean GPU idle | mean length bias |")
    print("|---|---|---|---|---|---|")
    base = np.mean([r["gen_s"] for _, s, _, _, r in rows if s == "current"])
    for schedule in SCHEDULES:
        mine = [(r, wave) for _, s, _, wave, r in rows if s == schedule]
        gen = np.mean([r["gen_s"] for r, _ in mine])
        print(
            f"| {schedule} | {gen / 60:.1f} | {base / gen:.2f}× | {np.mean([r['gen_s'] / w for r, w in mine]):.2f} "
            f"| {np.mean([r['idle'] for r, _ in mine]):.0%} | {np.mean([r['bias'] for r, _ in mine]):+.1%} |"
        )


if __name__ == "__main__":
    main()
