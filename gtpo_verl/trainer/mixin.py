"""V1-trainer integration: hands per-token TransferQueue fields to entropy-aware estimators.

verl 0.9.1's V1 trainer already computes per-token entropy in the old-log-prob pass and
keeps it in TransferQueue as ``entropy`` (trainer_base.py ``_compute_old_log_prob``), next
to ``old_log_probs`` and the rollout's ``responses``; its ``_compute_advantage`` just never
fetches them. The mixin's ``_compute_advantage`` runs the named steps of
``trainer/advantage_steps.py`` (the lab runs the same ones): settings parsed once at init; the
fields the configured estimator and transforms declared, read in one TransferQueue read;
verl's own ``_compute_advantage`` run with them bound (no copy of verl's logic, no extra model
pass); ``algorithm.adv_transforms`` applied to the advantages verl wrote and written back; the
``gtpo/*`` diagnostics and the entropy watch. The algorithm state (⟨H⟩_ini, the entropy watch)
is kept in checkpoints.
Validation adds unbiased pass@k and maj@n next to verl's bootstrap best@N (``_val_metrics_update``).

The verl internals it overrides, patches, reads and calls are listed, complete, in docs/trainer.md
and, as data checked at start-up and against any verl checkout, in ``gtpo_verl/verl_surface.py``
(tests keep both in step with this class).
"""

from __future__ import annotations

import logging
import os
from contextlib import contextmanager
from typing import Any, Iterator, Optional

import numpy as np
import torch

from gtpo_verl.algorithms.trajectory import initial_entropy as measured_initial_entropy
from gtpo_verl.plugin.extensions import INPUT_FIELDS
from gtpo_verl.plugin.registry import check_registered
from gtpo_verl.trainer.advantage_steps import (
    AdvantageFields,
    AdvantageSettings,
    advantage_diagnostics,
    run_estimator,
    transform_advantages,
)
from gtpo_verl.trainer.audit_dump import dump_audit_step
from gtpo_verl.trainer.checkpoints import prune_checkpoints
from gtpo_verl.trainer.diagnostics import PREFIX, EntropyWatch, masked_token_mean
from gtpo_verl.trainer.fields import padded, real_rows, response_mask_like
from gtpo_verl.trainer.health import HealthMonitor, NoopGuard
from gtpo_verl.trainer.probe import run_probe
from gtpo_verl.trainer.metrics_file import resumed_file_logger
from gtpo_verl.trainer.state import STATE_FILE, GTPOAlgorithmState, MissingAlgorithmState
from gtpo_verl.trainer.validation_metrics import gtpo_validation_metrics
from gtpo_verl.trainer.watchdog import install_generation_watchdog

logger = logging.getLogger(__name__)

class GTPOTrainerMixin:
    """Mix into a verl V1 ``PPOTrainer`` subclass: ``type("GTPO" + Base.__name__, (GTPOTrainerMixin, Base), {})``."""

    # ------------------------------------------------------------------ state
    @property
    def gtpo_state(self) -> GTPOAlgorithmState:
        if not hasattr(self, "_gtpo_state"):
            self._gtpo_state = GTPOAlgorithmState()
        return self._gtpo_state

    @property
    def gtpo_advantage_settings(self) -> AdvantageSettings:
        """``gtpo.*``, the estimator block and ``algorithm.adv_transforms``: parsed once, at trainer init."""
        if not hasattr(self, "_gtpo_advantage_settings"):
            self._gtpo_advantage_settings = AdvantageSettings.from_config(self.config)
        return self._gtpo_advantage_settings

    @property
    def gtpo_entropy_watch(self) -> EntropyWatch:
        if not hasattr(self, "_gtpo_entropy_watch"):
            knobs = self.gtpo_advantage_settings.gtpo.entropy_warning
            watch = EntropyWatch(ratio=knobs.ratio, fall_ratio=knobs.fall_ratio, momentum=knobs.momentum,
                                 warmup_steps=knobs.warmup_steps, persist_steps=knobs.persist_steps)
            if self.gtpo_state.entropy_watch:
                watch.load_state_dict(self.gtpo_state.entropy_watch)
            self._gtpo_entropy_watch = watch
        return self._gtpo_entropy_watch

    # ------------------------------------------------------------------ hooks
    @property
    def gtpo_health(self) -> HealthMonitor:
        if not hasattr(self, "_gtpo_health"):
            self._gtpo_health = HealthMonitor()
        return self._gtpo_health

    @property
    def gtpo_noop_guard(self) -> NoopGuard:
        if not hasattr(self, "_gtpo_noop_guard"):
            knobs = self.gtpo_advantage_settings.gtpo.health
            self._gtpo_noop_guard = NoopGuard(on_noop=knobs.on_noop, window=knobs.window, share=knobs.noop_share)
        return self._gtpo_noop_guard

    def on_init_end(self):
        super().on_init_end()
        check_registered()  # plugin import errors are silent in verl: fail here, in the TaskRunner
        self.gtpo_advantage_settings  # noqa: B018  (parsed once, here)
        install_generation_watchdog(self)  # gtpo.watchdog.generation_timeout_s (off when null)

    def _compute_advantage(self, batch, metrics: dict):
        """verl's advantage step with the fields it never fetches bound for the estimator (``trainer/advantage_steps.py``)."""
        settings = self.gtpo_advantage_settings
        fields = self._gtpo_read_fields(batch, settings)
        if fields is not None and settings.declared:
            metrics[PREFIX + "batch/padding_rows"] = float((~fields.real).sum())  # verl's dp-divisibility rows
        initial_entropy = self._gtpo_initial_entropy(settings, fields)
        verl_step = super()._compute_advantage
        batch, call = run_estimator(settings, lambda: verl_step(batch, metrics),
                                    fields.inputs if fields is not None else {}, initial_entropy)
        if call is not None:  # opt-in: gtpo.audit
            dump_audit_step(self, batch, settings.gtpo.audit, call, fields.entropy)
        if settings.diagnostics and fields is not None:
            advantage_diagnostics(settings, call, fields, metrics)
            self._gtpo_update_watch(fields.entropy, fields.mask, fields.real, metrics)  # baselines too
            if self.gtpo_state.initial_entropy is not None:
                metrics[PREFIX + "entropy/initial"] = float(self.gtpo_state.initial_entropy)
        batch = self._gtpo_transform_advantages(batch, settings, fields.inputs if fields is not None else {}, metrics)
        if settings.diagnostics:
            metrics.update(self.gtpo_health.update(metrics))
        if call is not None and fields is not None:  # gtpo.health.on_noop: raises MethodSwitchedOffError to stop
            metrics.update(self.gtpo_noop_guard.update(call, fields.mask, fields.real, self.gtpo_state.initial_entropy,
                                                       metrics if settings.diagnostics else None))
            if settings.gtpo.probe:  # the report, then ProbeFinished: no update, no checkpoint
                run_probe(self, batch, call, fields.mask, fields.real, fields.entropy)
        return batch

    def _gtpo_read_fields(self, batch, settings: AdvantageSettings) -> Optional[AdvantageFields]:
        """Exactly the fields the estimator and the transforms declared (+ entropy, scores, uids for the
        diagnostics), in one TransferQueue read; None when nothing is needed."""
        fields = settings.fields()
        if not fields:
            return None
        import transfer_queue as tq

        # the all-equal-groups check, in the same read, unless it reads the table estimator's own call
        health_fields = ["rm_scores", "uid"] if settings.diagnostics and not settings.health_from_call else []
        data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=fields + health_fields)
        # response-only fields are nested like verl's response_mask (same rows, same lengths): padded,
        # they take the (B, T) layout verl's _compute_advantage builds; the estimator wrapper aligns widths
        padded_fields = {field: padded(data[field]) for field in fields}
        inputs = {name: padded_fields[INPUT_FIELDS[name]] for name in settings.inputs}
        if "entropys" in inputs:
            inputs["entropys"] = inputs["entropys"].to(torch.float32)
        reference = next(f for f in ("entropy", "old_log_probs", *fields) if f in padded_fields)  # response-only first
        return AdvantageFields(
            inputs=inputs,
            mask=response_mask_like(data[reference], padded_fields[reference]),
            real=real_rows(batch),
            entropy=padded_fields["entropy"].to(torch.float32) if "entropy" in padded_fields else None,
            scores=padded(data["rm_scores"]).sum(-1) if health_fields else None,
            uids=np.array(list(data["uid"]), dtype=object) if health_fields else None,
        )

    def _gtpo_transform_advantages(self, batch, settings: AdvantageSettings, inputs: dict, metrics: dict):
        """Apply ``algorithm.adv_transforms`` to the advantages verl wrote, and write them back the same way."""
        if not settings.transforms:
            return batch
        import transfer_queue as tq
        from tensordict import TensorDict
        from verl.workers.utils.padding import response_to_nested

        data = tq.kv_batch_get(
            keys=batch.keys, partition_id=batch.partition_id, select_fields=["advantages", "returns", "response_mask"]
        )
        nested_mask = data["response_mask"]
        response_mask = padded(nested_mask)
        advantages, returns = padded(data["advantages"]), padded(data["returns"])
        returns_are_advantages = torch.equal(advantages, returns)  # GRPO family; GAE's returns are value targets
        def uids() -> list:  # read only to name a row in an error
            return list(tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=["uid"])["uid"])

        new_advantages, new_mask = transform_advantages(settings, advantages, response_mask, inputs, metrics, uids=uids)
        output = {"advantages": response_to_nested(new_advantages, nested_mask)}
        if returns_are_advantages:
            output["returns"] = output["advantages"]
        if not torch.equal(new_mask, response_mask):  # high_entropy_tokens normalize_over=kept
            output["response_mask"] = response_to_nested(new_mask, nested_mask)
        return tq.kv_batch_put(
            keys=batch.keys, partition_id=batch.partition_id, fields=TensorDict(output, batch_size=len(batch))
        )

    def _gtpo_update_watch(self, entropy, mask, real, metrics: dict) -> None:
        """Token-mean old-policy entropy of the real rows → the entropy watch's metrics."""
        batch_mean = masked_token_mean(entropy, mask, real)
        watch_metrics = self.gtpo_entropy_watch.update(batch_mean)
        watch = self.gtpo_entropy_watch
        if watch_metrics[PREFIX + "entropy/collapse_warning"]:
            logger.warning(
                "gtpo: mean old-policy entropy %.4f has been above %.2fx its floor %.4f for %d steps in a row: "
                "entropy is rising, which Paper A observes before a policy collapse.",
                batch_mean, watch.ratio, watch_metrics[PREFIX + "entropy/floor"], watch.streak,
            )
        if watch_metrics[PREFIX + "entropy/fall_warning"]:
            logger.warning(
                "gtpo: mean old-policy entropy %.4f is %.2fx its running baseline (threshold 1/%.2f): "
                "entropy is collapsing; pass@k is about to meet pass@1.",
                batch_mean, watch_metrics[PREFIX + "entropy/rise_ratio"], watch.fall_ratio,
            )
        metrics.update(watch_metrics)

    def _gtpo_initial_entropy(self, settings: AdvantageSettings, fields: Optional[AdvantageFields]) -> Optional[float]:
        """⟨H⟩_ini for Paper A's gate: measured once, on the first batch, before any update (None if unused)."""
        if fields is None or not settings.measures_initial_entropy:
            return None
        if self.gtpo_state.initial_entropy is None:
            self.gtpo_state.initial_entropy = measured_initial_entropy(fields.mask, entropy=fields.entropy, rows=fields.real)
            logger.info("gtpo: %s measured ⟨H⟩_ini = %.4f on the first batch", settings.estimator,
                        self.gtpo_state.initial_entropy)
        return self.gtpo_state.initial_entropy

    def _val_metrics_update(self, data_sources, sample_uids, reward_extra_infos_dict, sample_turns, **kwargs):
        """verl's validation metrics plus unbiased ``val-gtpo/<data_source>/pass@k`` and ``maj@n``."""
        metric_dict = super()._val_metrics_update(data_sources, sample_uids, reward_extra_infos_dict, sample_turns, **kwargs)
        metric_dict.update(gtpo_validation_metrics(self.config, data_sources, sample_uids, reward_extra_infos_dict, **kwargs))
        return metric_dict

    # ------------------------------------------------------------------ checkpoints
    def _gtpo_checkpoint_folder(self) -> str:
        folder = self.config.trainer.default_local_dir
        if self.config.trainer.resume_mode == "resume_path" and self.config.trainer.get("resume_from_path"):
            folder_for_step = self.config.trainer.resume_from_path
        else:
            folder_for_step = os.path.join(folder, f"global_step_{self.global_steps}")
        return folder_for_step if os.path.isabs(folder_for_step) else os.path.join(os.getcwd(), folder_for_step)

    def _save_checkpoint(self):
        if hasattr(self, "_gtpo_entropy_watch"):
            self.gtpo_state.entropy_watch = self._gtpo_entropy_watch.state_dict()
        # written before verl's files, so `latest_checkpointed_iteration.txt` never points at a
        # checkpoint without our state
        self.gtpo_state.save(
            os.path.join(self.config.trainer.default_local_dir, f"global_step_{self.global_steps}")
        )
        super()._save_checkpoint()
        prune_checkpoints(self.config, self.global_steps)  # verl's own rotation forgets those saved before a restart

    def _load_checkpoint(self):
        result = super()._load_checkpoint()
        if getattr(self, "global_steps", 0) > 0:
            folder = self._gtpo_checkpoint_folder()
            state = GTPOAlgorithmState.load(folder)
            if state is None:
                if not self.gtpo_advantage_settings.gtpo.remeasure_on_resume:
                    raise MissingAlgorithmState(
                        f"gtpo: the checkpoint {folder} has no {STATE_FILE} (⟨H⟩_ini, the entropy watch): it was not "
                        "saved through python -m gtpo_verl.main. Resuming would measure ⟨H⟩_ini again on the trained "
                        "policy and move Paper A's gate. Set gtpo.remeasure_on_resume=true to accept that, or resume "
                        "from a checkpoint gtpo_verl saved."
                    )
                logger.warning("gtpo: no %s in %s; gtpo.remeasure_on_resume=true: algorithm state starts fresh",
                               STATE_FILE, folder)
            else:
                self._gtpo_state = state
                self.__dict__.pop("_gtpo_entropy_watch", None)
                logger.info("gtpo: restored algorithm state from %s", folder)
        return result

    def fit(self, *args, **kwargs):
        # a resumed run appends to verl's metric file (verl's FileLogger truncates it), after a marker line
        with resumed_file_logger(int(getattr(self, "global_steps", 0))):
            return super().fit(*args, **kwargs)


_MIXED: dict[type, type] = {}


def gtpo_trainer_class(base: type) -> type:
    """Return (and cache) ``GTPO<Base>``, the mixin applied to a V1 trainer class."""
    if base not in _MIXED:
        _MIXED[base] = type("GTPO" + base.__name__, (GTPOTrainerMixin, base), {"__module__": __name__})
    return _MIXED[base]


@contextmanager
def gtpo_trainers(mode: str) -> Iterator[type]:
    """Substitute the trainer registered for ``mode`` by its GTPO subclass for the duration.

    The mode name is kept (verl compares ``trainer_mode == "sync"`` in several places), so
    sync, colocate_async and separate_async all work unchanged.
    """
    from verl.trainer.ppo.v1 import trainer_base

    registry = trainer_base.TRAINER_REGISTRY
    base = registry[mode]
    if issubclass(base, GTPOTrainerMixin):
        yield base
        return
    registry[mode] = gtpo_trainer_class(base)
    try:
        yield registry[mode]
    finally:
        registry[mode] = base


def make_task_runner():
    """Return the Ray actor class that runs verl's V1 TaskRunner with GTPO trainers."""
    import ray
    from verl.trainer.main_ppo import TaskRunnerV1

    class GTPOTaskRunner(TaskRunnerV1.__ray_actor_class__):
        def run(self, config):
            import gtpo_verl.plugin.registry  # noqa: F401  (normally loaded by the plugin)

            check_registered()
            if str(config.trainer.device) == "cpu":  # verl's 8/8/8 helper processes would starve a small machine
                from gtpo_verl.cpu.workers import cap_worker_counts

                cap_worker_counts(config)
            with gtpo_trainers(config.trainer.v1.trainer_mode):
                return super().run(config)

    return ray.remote(num_cpus=1)(GTPOTaskRunner)
