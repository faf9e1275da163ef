"""Cost of the whole advantage step inside verl's V1 trainer, with the GTPO mixin's entropy
and token-id fetch from TransferQueue, against verl's own `grpo` on the same batch.

    python -m benchmarks.bench_advantage_step [--prompts 64 --group 16 --length 1024 --repeats 5 --threads 1]

Runs `PPOTrainer._compute_advantage` (the real method: verl's own trainer class for the
baseline, the class with `GTPOTrainerMixin` for the others) against a real local
TransferQueue (Ray + SimpleStorage). Prints median wall time per candidate, the ratio to
verl's own `grpo` step and the added cost, interleaving the candidates round-robin with the
order rotated every round. "grpo + mixin" is the baseline with our mixin (its entropy watch). Starts Ray: on a shared machine run it under the lock
other Ray users take (e.g. `flock /tmp/gtpo_ray.lock python -m benchmarks.bench_advantage_step`).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--group", type=int, default=16)
    parser.add_argument("--length", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads (default 1: the TaskRunner is a Ray actor with num_cpus=1, so Ray "
                             "gives it OMP_NUM_THREADS=1); 0 = torch's default")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    import ray
    import transfer_queue as tq
    from hydra import compose, initialize_config_dir
    from tensordict import NonTensorStack, TensorDict
    from verl.trainer.ppo.v1 import PPOTrainerSync

    import gtpo_verl
    from gtpo_verl.trainer.mixin import gtpo_trainer_class

    config_dir = os.path.join(os.path.dirname(gtpo_verl.__file__), "config")

    def config_for(estimator):
        with initialize_config_dir(config_dir=config_dir, version_base=None):
            return compose(
                config_name="gtpo_trainer",
                overrides=[
                    f"algorithm.adv_estimator={estimator}",
                    f"actor_rollout_ref.rollout.n={args.group}",
                    "transfer_queue.enable=true",
                    "transfer_queue.backend.SimpleStorage.num_data_storage_units=1",
                    "transfer_queue.backend.SimpleStorage.total_storage_size=1000000",
                ],
            )

    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    tq.init(config_for("grpo").transfer_queue)

    rows, width = args.prompts * args.group, args.length
    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(width // 4, width + 1, (rows,), generator=g).tolist()
    prefix = torch.randint(0, 150_000, (args.prompts, 16), generator=g)

    def nested(values):
        return torch.nested.as_nested_tensor(values, layout=torch.jagged)

    responses = []
    for i, n in enumerate(lengths):
        ids = torch.randint(0, 150_000, (n,), generator=g)
        ids[:16] = prefix[i // args.group]
        responses.append(ids)
    scores = torch.randint(0, 2, (rows,), generator=g).float()
    fields = TensorDict(
        {
            "response_mask": nested([torch.ones(n, dtype=torch.int64) for n in lengths]),
            "rm_scores": nested([torch.cat([torch.zeros(n - 1), scores[i : i + 1]]) for i, n in enumerate(lengths)]),
            "entropy": nested([torch.rand(n, generator=g) * 3 for n in lengths]),
            "responses": nested(responses),
            "uid": NonTensorStack(*[f"u{i // args.group}" for i in range(rows)]),
        },
        batch_size=[rows],
    )
    keys = [f"u{i // args.group}_{i}_0" for i in range(rows)]
    meta = tq.kv_batch_put(keys=keys, partition_id="train", fields=fields, tags=[{} for _ in keys])

    # the baseline is verl's own trainer class (no mixin); "grpo + mixin" adds only our entropy watch
    trainers = {}
    for name, estimator, cls in (
        ("grpo (verl)", "grpo", PPOTrainerSync),
        ("grpo + mixin", "grpo", gtpo_trainer_class(PPOTrainerSync)),
        ("gtpo_token", "gtpo_token", gtpo_trainer_class(PPOTrainerSync)),
        ("grpo_s", "grpo_s", gtpo_trainer_class(PPOTrainerSync)),
        ("gtpo_traj", "gtpo_traj", gtpo_trainer_class(PPOTrainerSync)),
    ):
        trainer = object.__new__(cls)
        trainer.config = config_for(estimator)
        trainers[name] = trainer
    def read_entropy():  # the floor of our added cost: the TransferQueue read of the one extra field
        tq.kv_batch_get(keys=meta.keys, partition_id=meta.partition_id, select_fields=["entropy"])

    runners = {name: (lambda t=trainer: t._compute_advantage(meta, {})) for name, trainer in trainers.items()}
    runners["TQ read of entropy alone"] = read_entropy
    times: dict[str, list[float]] = {name: [] for name in runners}
    names = list(runners)
    load_before = os.getloadavg()
    for repeat in range(args.repeats + 1):
        shift = repeat % len(names)  # rotate the order, so no estimator always follows another
        for name in names[shift:] + names[:shift]:
            start = time.perf_counter()
            runners[name]()
            if repeat:  # the first round warms up
                times[name].append(time.perf_counter() - start)
    base = statistics.median(times["grpo (verl)"])
    print(f"advantage step, {args.prompts}x{args.group}x{args.length} ({rows} responses), median of "
          f"{args.repeats} interleaved rounds, torch threads {torch.get_num_threads()}, load average "
          f"{[round(x, 2) for x in load_before]} -> {[round(x, 2) for x in os.getloadavg()]}")
    print("| estimator | median ms | ratio to verl grpo | added cost vs verl grpo |\n|---|---:|---:|---:|")
    for name, values in times.items():
        median = statistics.median(values)
        added = "" if name == "grpo (verl)" else f"{(median - base) * 1e3:+.1f} ms ({(median - base) / base:+.1%})"
        print(f"| {name} | {median * 1e3:.1f} | {median / base:.2f}x | {added} |")
    tq.close()
    ray.shutdown()


if __name__ == "__main__":
    main()
