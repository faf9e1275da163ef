"""A rank of verl's own RayWorkerGroup on a local Ray cluster in CPU mode, and a plain Ray task beside it:
prints the torch threads each computes on as JSON. Run in a fresh interpreter by
test_actor_threads_on_cpu.py (it selects the CPU platform for the whole process)."""

import json
import os

import ray
import torch

import verl  # noqa: F401  (loads the gtpo_verl plugin)
from gtpo_verl.cpu import activate
from verl.single_controller.base import Worker
from verl.single_controller.base.decorator import Dispatch, register
from verl.single_controller.ray import RayClassWithInitArgs, RayResourcePool, RayWorkerGroup


class ThreadsWorker(Worker):
    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def threads(self):
        return torch.get_num_threads()


@ray.remote(num_cpus=0)
def plain_task_threads():
    return torch.get_num_threads()


def main():
    activate()  # the driver; the workers select the platform on `import verl` (GTPO_VERL_CPU=1 below)
    env = {"GTPO_VERL_CPU": "1", "VERL_PLATFORM": "cpu", "VERL_ENGINE_DEVICE": "cuda"}
    ray.init(address="local", num_cpus=4, num_gpus=1, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": env})
    try:
        pool = RayResourcePool(process_on_nodes=[1], use_gpu=True, max_colocate_count=1)
        group = RayWorkerGroup(resource_pool=pool, ray_cls_with_init=RayClassWithInitArgs(cls=ray.remote(ThreadsWorker)),
                               device_name="cpu")
        report = {"rank_threads": group.threads(), "plain_task_threads": ray.get(plain_task_threads.remote(), timeout=240)}
    finally:
        ray.shutdown()
    print(json.dumps(report))


if __name__ == "__main__":
    os.environ.pop("RAY_ADDRESS", None)
    main()
