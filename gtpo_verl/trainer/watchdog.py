"""Generation watchdog: a run whose generation stops making progress fails, instead of idling forever.

verl 0.9.1's V1 replay buffer polls TransferQueue until enough prompt groups are finished, with no
timeout (and ``filter_groups.max_num_gen_batches`` is ignored), so one generation request that never
returns holds every GPU of a sync run at 0 % until someone notices. With
``gtpo.watchdog.generation_timeout_s`` set, the replay buffer's poll loop (``sample`` →
``_wait_for_next_poll``, the same in sync and async modes) also checks that its snapshot of the
partition changed in that time: a prompt dispatched, started or finished, a trajectory written, a
group evicted. If nothing changed, it logs what is in flight (replay-buffer state, the stuck
prompts, per-replica in-flight requests from verl's global load balancer) and raises
``GenerationStalledError``; ``python -m gtpo_verl.main`` turns that into one message and exit
status 3, so a scheduler's requeue resumes from the last checkpoint (``trainer.resume_mode=auto``).

The timeout must exceed the longest legitimate silence: the slowest single response once all
others are done (the recipes allow 20k tokens and use 3600 s).
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Any, Callable, Optional

from gtpo_verl.trainer.settings import GTPOSettings

logger = logging.getLogger(__name__)

EXIT_STATUS = 3  # python -m gtpo_verl.main exits with this when generation stalled
SHOWN_PROMPTS = 8  # stuck prompt ids listed in the message


class GenerationStalledError(RuntimeError):
    """Generation made no progress for ``gtpo.watchdog.generation_timeout_s`` seconds."""


def generation_timeout_s(config) -> Optional[float]:
    """The configured timeout, or None when the watchdog is off (null or <= 0)."""
    return GTPOSettings.from_config(config).watchdog.timeout_s


def partition_state(buffer, partition_id: str) -> tuple[int, int, int, int, int]:
    """(pending, running, finished, failure prompts, trajectories) of the buffer's latest snapshot."""
    return (
        len(buffer.pending_keys[partition_id]),
        len(buffer.running_keys[partition_id]),
        len(buffer.finished_keys[partition_id]),
        len(buffer.failure_keys[partition_id]),
        len(buffer.partitions[partition_id]),
    )


class GenerationWatchdog:
    """Raises when ``observe`` sees the same state for ``timeout_s`` seconds since ``start``."""

    def __init__(self, timeout_s: float, clock: Callable[[], float] = time.monotonic):
        self.timeout_s = float(timeout_s)
        self.clock = clock
        self.start()

    def start(self) -> None:
        self._state: Any = None
        self._since = self.clock()

    def stalled_for(self, state) -> float:
        """Seconds without a change of ``state`` (0 when it just changed)."""
        now = self.clock()
        if state != self._state:
            self._state, self._since = state, now
        return now - self._since


def describe_in_flight(buffer, partition_id: str, global_steps: int, replicas: Optional[dict]) -> str:
    pending, running, finished, failure, trajectories = partition_state(buffer, partition_id)
    steps = buffer.prompt_global_steps[partition_id]
    stuck = sorted(buffer.running_keys[partition_id] | buffer.pending_keys[partition_id], key=lambda k: steps.get(k, 0))
    shown = ", ".join(f"{uid} (step {steps.get(uid, '?')})" for uid in stuck[:SHOWN_PROMPTS])
    more = f" and {len(stuck) - SHOWN_PROMPTS} more" if len(stuck) > SHOWN_PROMPTS else ""
    text = (
        f"partition {partition_id!r} at global step {global_steps}: {running} prompts running, {pending} pending, "
        f"{finished} finished, {failure} failed, {trajectories} trajectories written"
    )
    if stuck:
        text += f"; unfinished prompts: {shown}{more}"
    if replicas is not None:
        text += f"; in-flight requests per rollout replica: {replicas}"
    return text


def replica_loads(trainer) -> Optional[dict]:
    """In-flight requests per vLLM replica from verl's global load balancer (None if unavailable)."""
    try:
        import ray

        balancer = trainer.llm_server_manager.global_load_balancer
        return dict(ray.get(balancer.get_status.remote(), timeout=30).get("servers", {}))
    except Exception as exc:  # the balancer may be what hangs: say so, do not hang here too
        logger.warning("gtpo watchdog: could not read the rollout load balancer (%s)", exc)
        return None


def install_generation_watchdog(trainer) -> Optional[GenerationWatchdog]:
    """Watch ``trainer.replay_buffer`` for ``gtpo.watchdog.generation_timeout_s``; None when off."""
    timeout_s = generation_timeout_s(trainer.config)
    buffer = getattr(trainer, "replay_buffer", None)
    if timeout_s is None or buffer is None:
        return None
    watchdog = GenerationWatchdog(timeout_s)
    current = {"step": 0}
    sample, wait_for_next_poll = buffer.sample, buffer._wait_for_next_poll

    def watched_sample(global_steps: int, partition_id: str, batch_size: int):
        watchdog.start()  # the time spent training since the last sample is not generation time
        current["step"] = global_steps
        return sample(global_steps=global_steps, partition_id=partition_id, batch_size=batch_size)

    def watched_wait(partition_id: str, last_debug_time: float) -> float:
        stalled = watchdog.stalled_for(partition_state(buffer, partition_id))
        if stalled >= watchdog.timeout_s:
            in_flight = describe_in_flight(buffer, partition_id, current["step"], replica_loads(trainer))
            message = (
                f"generation made no progress for {stalled:.0f}s (gtpo.watchdog.generation_timeout_s={timeout_s:g}): "
                f"{in_flight}. Exiting with status {EXIT_STATUS} so the job can be requeued; it resumes from the "
                "last checkpoint (trainer.resume_mode=auto)."
            )
            logger.error("gtpo watchdog: %s", message)
            raise GenerationStalledError(message)
        return wait_for_next_poll(partition_id, last_debug_time)

    buffer.sample = watched_sample
    buffer._wait_for_next_poll = watched_wait
    logger.info("gtpo watchdog: generation must progress at least every %gs", timeout_s)
    return watchdog


def error_in(exc: BaseException, kind: type = GenerationStalledError) -> Optional[BaseException]:
    """The innermost ``kind`` error inside ``exc`` (Ray wraps remote errors), or None."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        inner = getattr(exc, "cause", None) or exc.__cause__ or exc.__context__
        if isinstance(exc, kind) and not isinstance(inner, kind):
            return exc  # the innermost one: Ray's wrapper repeats it with a traceback
        exc = inner
    return None


def exit_on_known_error(exc: BaseException) -> None:
    """If ``exc`` carries a GenerationStalledError (status 3, requeued by the SLURM launcher), a
    MethodSwitchedOffError (status 4, not requeued) or the probe's ProbeFinished (0, its report written):
    print its message on one line and exit with its status."""
    from gtpo_verl.trainer.health import NOOP_EXIT_STATUS, MethodSwitchedOffError
    from gtpo_verl.trainer.probe import ProbeFinished

    for kind, status in ((GenerationStalledError, EXIT_STATUS), (MethodSwitchedOffError, NOOP_EXIT_STATUS),
                         (ProbeFinished, 0)):
        found = error_in(exc, kind)
        if found is not None:
            message = found.args[0] if found.args else str(found)
            print(f"gtpo_verl: {message}", file=sys.stderr if status else sys.stdout, flush=True)  # not Ray's traceback
            raise SystemExit(status) from None
