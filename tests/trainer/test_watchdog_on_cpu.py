"""The generation watchdog against verl's real V1 replay buffer and a real local TransferQueue.

A sync DAPO trainer (the GTPO mixin on verl's ``PPOTrainerSync``) builds verl's own ReplayBuffer
and registers prompts with verl's own ``_submit_batch_to_rollout``; verl's own
``AgentLoopWorkerTQ._run_prompt`` runs each prompt's sessions and publishes their status. Only the
per-session generation (vLLM + reward, ``_run_agent_loop``) cannot run here: a stand-in writes each
session's trajectory to TransferQueue as verl's post-processing does, after a delay, and for the
injected hang never returns. The checkpoint engine (GPU weight sync) is a recording stub.
"""

import asyncio
import threading
import time

import pytest
from hydra import compose, initialize_config_dir

import gtpo_verl
from gtpo_verl.trainer.health import NOOP_EXIT_STATUS, MethodSwitchedOffError
from gtpo_verl.trainer.watchdog import EXIT_STATUS, GenerationStalledError, error_in, exit_on_known_error
from support.hydra import compose_gtpo
from support.transfer_queue import TQ_OVERRIDES, local_transfer_queue

CONFIG_DIR = str(__import__("pathlib").Path(gtpo_verl.__file__).parent / "config")
PROMPTS, GROUP = 3, 2


def compose_config(*overrides):
    return compose_gtpo(
        f"actor_rollout_ref.rollout.n={GROUP}",
        f"data.train_batch_size={PROMPTS}",
        "algorithm.filter_groups.enable=true",  # sync DAPO, as in the recipes
        "algorithm.filter_groups.metric=acc",
        "algorithm.filter_groups.max_inflight_gen_batches=1",
        *TQ_OVERRIDES,
        *overrides,
    )


@pytest.fixture(scope="module")
def transfer_queue():
    yield from local_transfer_queue(compose_config().transfer_queue)


@pytest.fixture(autouse=True)
def empty_partition(transfer_queue):
    """Each test starts from an empty train partition (an injected hang leaves its prompt running)."""
    yield
    keys = list((transfer_queue.kv_list() or {}).get("train", {}))
    if keys:
        transfer_queue.kv_clear(partition_id="train", keys=keys)


class CheckpointEngineStub:
    """Stands in for verl's CheckpointEngineManager (GPU weight sync): records the call only."""

    def __init__(self):
        self.calls = []

    def update_weights(self, global_steps):
        self.calls.append(global_steps)


class AgentLoops:
    """verl's AgentLoopWorkerTQ._run_prompt on a background event loop; generation is a stand-in.

    ``delays[prompt_index]`` is how long each of that prompt's sessions takes; None never returns.
    """

    def __init__(self, config, delays):
        from verl.trainer.ppo.v1.agent_loop_tq import AgentLoopWorkerTQ

        # the Ray actor's class; its __init__ starts vLLM clients and reward workers
        self.worker = object.__new__(AgentLoopWorkerTQ.__ray_actor_class__)
        self.worker.config = config
        self.worker._run_agent_loop = self._generate
        self.delays = delays
        self.loop = asyncio.new_event_loop()
        self.hang = asyncio.Event()  # never set: the injected generation that never returns
        threading.Thread(target=self.loop.run_forever, daemon=True).start()
        self.order = {}

    async def _generate(self, sampling_params, trajectory, trace, session_id, uid, **prompt):
        import transfer_queue as tq
        from verl.utils.tensordict_utils import list_of_dict_to_tensordict

        delay = self.delays[self.order[uid]]
        if delay is None:
            await self.hang.wait()
        await asyncio.sleep(delay * (session_id + 1))
        field = {"extra_fields": {"reward_extra_info": {"acc": float(session_id % 2)}}}  # mixed group: kept by DAPO
        await tq.async_kv_batch_put(
            keys=[f"{uid}_{session_id}_0"], fields=list_of_dict_to_tensordict([field]),
            tags=[{"status": "success", "global_steps": 1}], partition_id="train",
        )

    def generate_sequences(self, batch):  # AgentLoopManagerTQ: dispatch without waiting
        for uid in batch["uid"]:
            self.order[uid] = len(self.order)
            trajectory = {"validate": False, "step": 1, "sample_index": 0, "rollout_n": 0}
            asyncio.run_coroutine_threadsafe(
                self.worker._run_prompt({"uid": uid}, {"temperature": 1.0}, trajectory=trajectory), self.loop
            )

    def close(self):
        self.loop.call_soon_threadsafe(self.loop.stop)


def make_trainer(config, delays):
    import numpy as np
    from tensordict import NonTensorStack, TensorDict
    from verl.trainer.ppo.v1 import PPOTrainerSync

    from gtpo_verl.trainer.mixin import gtpo_trainer_class

    trainer = object.__new__(gtpo_trainer_class(PPOTrainerSync))
    trainer.config = config
    trainer.trainer_mode = "sync"
    trainer.global_steps = 1
    trainer.replay_buffer = trainer._build_replay_buffer()  # verl's own sync ReplayBuffer with DAPO filtering
    trainer.replay_buffer.poll_interval = 0.2
    trainer.checkpoint_manager = CheckpointEngineStub()
    trainer.agent_loop_manager = AgentLoops(config, delays)
    trainer.on_init_end()  # verl's hook chain: the mixin installs the watchdog here
    uids = [f"p{i}-{np.random.randint(1 << 30)}" for i in range(PROMPTS)]
    batch = TensorDict({"uid": NonTensorStack(*uids)}, batch_size=[PROMPTS])
    trainer._submit_batch_to_rollout(batch)  # verl: register the prompts in TQ, dispatch them
    return trainer, uids


def test_a_generation_that_never_returns_fails_the_run_with_one_clear_message(transfer_queue):
    config = compose_config("gtpo.watchdog.generation_timeout_s=3")
    trainer, uids = make_trainer(config, delays=[0.1, 0.1, None])  # prompt 2: one session hangs forever
    try:
        start = time.monotonic()
        with pytest.raises(GenerationStalledError) as caught:
            trainer.replay_buffer.sample(global_steps=1, partition_id="train", batch_size=PROMPTS)
        waited = time.monotonic() - start
    finally:
        trainer.agent_loop_manager.close()
    assert 3 <= waited < 3 + 10, waited  # within the timeout (plus the sessions that did finish, and a poll)
    message = str(caught.value)
    assert "no progress for 3s (gtpo.watchdog.generation_timeout_s=3)" in message
    assert "1 prompts running, 0 pending, 2 finished, 0 failed, 4 trajectories written" in message
    assert f"unfinished prompts: {uids[2]} (step 1)" in message and uids[0] not in message
    assert f"status {EXIT_STATUS}" in message and "trainer.resume_mode=auto" in message
    assert trainer.checkpoint_manager.calls == [1]  # verl's own on_init_end ran too


def test_slow_but_progressing_generation_is_not_a_stall(transfer_queue):
    config = compose_config("gtpo.watchdog.generation_timeout_s=2.5")
    # 6 sessions finishing 0.9 s apart: 5.4 s in total, over twice the timeout, never 2.5 s without progress
    trainer, uids = make_trainer(config, delays=[0.9, 1.8, 2.7])
    try:
        start = time.monotonic()
        batch, _ = trainer.replay_buffer.sample(global_steps=1, partition_id="train", batch_size=PROMPTS)
        waited = time.monotonic() - start
    finally:
        trainer.agent_loop_manager.close()
    assert waited > 2.5 * 1.5
    assert sorted({key.split("_")[0] for key in batch.keys}) == sorted(uids) and len(batch.keys) == PROMPTS * GROUP


def test_watchdog_is_off_unless_configured(transfer_queue):
    from gtpo_verl.trainer.watchdog import install_generation_watchdog

    for overrides in ((), ("gtpo.watchdog.generation_timeout_s=0",)):
        trainer, _ = make_trainer(compose_config(*overrides), delays=[0.1] * PROMPTS)
        trainer.agent_loop_manager.close()
        assert install_generation_watchdog(trainer) is None
        assert "sample" not in vars(trainer.replay_buffer)  # verl's own method, unwrapped
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        cpu = compose(config_name="gtpo_trainer_cpu")
    assert cpu.gtpo.watchdog.generation_timeout_s is None  # off in the CPU preset


def test_the_driver_exits_with_one_line_when_the_task_runner_raised_it(transfer_queue, capsys):
    """Through Ray's real error wrapping: the watchdog's status 3 (requeued), a no-op method's 4 (not)."""
    import ray

    @ray.remote(num_cpus=0)  # the TransferQueue actors hold this test cluster's two CPUs
    def task_runner(kind, message):
        raise kind(message)

    for kind, status, message in (
        (GenerationStalledError, 3, "generation made no progress for 9s (gtpo.watchdog.generation_timeout_s=9): …"),
        (MethodSwitchedOffError, 4, "the method trains nothing: algorithm.gtpo_traj's δ = 0.7 nats filtered …"),
    ):
        with pytest.raises(ray.exceptions.RayTaskError) as caught:
            ray.get(task_runner.remote(kind, message))
        assert error_in(caught.value, kind).args[0] == message
        with pytest.raises(SystemExit) as exited:
            exit_on_known_error(caught.value)
        assert exited.value.code == status
        err = capsys.readouterr().err
        assert err == f"gtpo_verl: {message}\n"
    assert EXIT_STATUS == 3 and NOOP_EXIT_STATUS == 4
    assert error_in(ValueError("other")) is None
    exit_on_known_error(ValueError("other"))  # not ours: returns, the caller re-raises
