"""The operational ``gtpo.*`` settings of the trainer: diagnostics, the entropy watch, the generation
watchdog, the no-op guard, the validation metrics, the audit dump and the preflight switch (not
algorithm choices).

Typed blocks on ``plugin/config.py``'s ``ConfigBlock``, like the algorithm blocks
(``plugin/estimators/<estimator>.py``): the single source of every default, checked against
``gtpo_base.yaml`` and docs/config.md; errors name the full key and the fix.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Optional

from gtpo_verl.plugin.config import ConfigBlock, ConfigError, choice, number


# The fewest prompts a step from which the rising flag raised no false alarm on the lab's runs that never
# degrade, replayed at 1-64 prompts a step (docs/lab.md, `python -m gtpo_verl.lab.health`); None: at none.
RISING_FLAG_QUIET_PROMPTS: dict[tuple[float, int], Optional[int]] = {
    (1.1, 1): None, (1.1, 3): None, (1.1, 5): None, (1.1, 10): None,
    (1.25, 1): None, (1.25, 3): None, (1.25, 5): None, (1.25, 10): 1,
    (1.5, 1): None, (1.5, 3): 64, (1.5, 5): 2, (1.5, 10): 1,
    (2.0, 1): 32, (2.0, 3): 4, (2.0, 5): 1, (2.0, 10): 1,
}


@dataclass(frozen=True)
class EntropyWarningConfig(ConfigBlock):
    """``gtpo.entropy_warning``: the entropy watch (docs/metrics.md, ``gtpo/entropy/*``)."""

    path: ClassVar[str] = "gtpo.entropy_warning"

    ratio: float = number(1.25, gt=1.0, fix="e.g. 1.25 (warn at a 25% rise).")
    """Warn when the batch mean entropy stays above ratio × its floor, the lowest running baseline since
    warm-up, for ``persist_steps`` steps in a row (rising: Paper A's collapse)."""
    fall_ratio: Optional[float] = number(None, gt=1.0, fix="e.g. 1.5 (warn at a fall to 2/3), or null.")
    """Warn when it drops below its running baseline / fall_ratio (entropy collapse); null = off.
    In the lab 1.1 warned before most degrading runs and in most of the others too (docs/lab.md)."""
    momentum: float = number(0.9, ge=0.0, lt=1.0, fix="e.g. 0.9.")
    """EMA momentum of the baseline."""
    warmup_steps: int = number(3, ge=0, fix="e.g. 3.")
    """Steps that only build the baseline."""
    persist_steps: int = number(10, ge=1, fix="e.g. 10 (steps in a row; 1 flags every single batch above the ratio).")
    """Steps in a row above ratio × floor before the rising flag. With ratio 1.25, 10 raised no false alarm
    on the lab's runs replayed at 1 to 64 prompts a step (docs/lab.md)."""

    def quiet_min_prompts(self) -> Optional[int]:
        """The prompts a step the rising flag needs to stay quiet on the lab's runs (``RISING_FLAG_QUIET_PROMPTS``),
        read for the nearest replayed rule at least as loose as this one; None: quiet at no replayed batch size."""
        ratios = [r for r, _ in RISING_FLAG_QUIET_PROMPTS if r <= self.ratio]
        steps = [k for _, k in RISING_FLAG_QUIET_PROMPTS if k <= self.persist_steps]
        return RISING_FLAG_QUIET_PROMPTS[(max(ratios), max(steps))] if ratios else None


@dataclass(frozen=True)
class WatchdogConfig(ConfigBlock):
    """``gtpo.watchdog``: fail a run whose generation stalls (trainer/watchdog.py)."""

    path: ClassVar[str] = "gtpo.watchdog"

    generation_timeout_s: Optional[float] = number(None, ge=0.0, fix="give seconds, e.g. 3600, or null (or 0) for off.")
    """Seconds without generation progress before the run exits with status 3; null or 0 = off."""

    @property
    def timeout_s(self) -> Optional[float]:
        """The timeout in seconds, or None when the watchdog is off."""
        value = self.generation_timeout_s
        return value if value else None


@dataclass(frozen=True)
class HealthConfig(ConfigBlock):
    """``gtpo.health``: what a run does when its method trains nothing (``trainer/health.py``, ``NoopGuard``)."""

    path: ClassVar[str] = "gtpo.health"

    on_noop: str = choice("stop", ("stop", "warn"))
    """``stop``: end the run (exit status 4, never requeued) with one line naming the key and a δ that trains;
    ``warn``: log that line once and train on. For gtpo_verl's estimators (verl's own are not watched)."""
    window: int = number(3, ge=1, fix="e.g. 3 (steps in a row).")
    """Steps in a row with δ filtering, or zero advantages on the mixed groups, at or above ``noop_share``."""
    noop_share: float = number(0.99, gt=0.0, le=1.0, fix="a share in (0, 1], e.g. 0.99.")
    """The share of responses filtered (or of mixed-group tokens with A = 0) that counts a step as trained on nothing."""


@dataclass(frozen=True)
class ValidationMetricsConfig(ConfigBlock):
    """``gtpo.validation_metrics``: unbiased pass@k and maj@n next to verl's validation metrics."""

    path: ClassVar[str] = "gtpo.validation_metrics"

    enable: bool = True
    """Log ``val-gtpo/<data_source>/pass@k`` and ``maj@n`` when validation draws n > 1 samples."""
    success_threshold: float = number(0.0)
    """A sample succeeds when its ``acc`` (or ``reward`` without ``acc``) is above this."""


@dataclass(frozen=True)
class AuditConfig(ConfigBlock):
    """``gtpo.audit``: dump the estimator's inputs and outputs of chosen steps (``trainer/audit_dump.py``; checked by ``gtpo-audit``)."""

    path: ClassVar[str] = "gtpo.audit"

    steps: tuple[int, ...] = number((), ge=1, fix="global steps start at 1, e.g. [2].")
    """Global steps (from 1) whose estimator inputs and advantages are dumped."""
    dir: Optional[str] = None
    """Folder for the dumps (``step_<k>.safetensors`` + ``.json``); required when ``steps`` is set."""
    require_weights: bool = True
    """Refuse at start-up to dump a step k > 1 whose old-policy weights (the checkpoint of step k-1) are
    not saved, since ``gtpo-audit`` recomputes entropy from them; false dumps such steps for offline
    analysis of the estimator only (``gtpo-audit`` then needs ``--weights``)."""

    def check(self):
        object.__setattr__(self, "steps", tuple(sorted(set(self.steps))))
        if self.steps and not self.dir:
            raise ConfigError(
                self.key("dir"), f"`{self.key('steps')}={list(self.steps)}` is set but `{self.key('dir')}` is not: "
                f"set {self.key('dir')}=<folder for the dumps>."
            )


@dataclass(frozen=True)
class GTPOSettings(ConfigBlock):
    """``gtpo``: the trainer integration's own knobs (not algorithm choices)."""

    path: ClassVar[str] = "gtpo"

    preflight: bool = True
    """``python -m gtpo_verl.main`` first checks every node of the cluster (``gtpo-preflight``)."""
    dry_run: bool = False
    """``python -m gtpo_verl.main gtpo.dry_run=true``: run every start-up check training runs, then exit 0 before Ray starts."""
    probe: bool = False
    """Run the first step up to its advantages (rollout, old-log-prob pass, estimator; no update, no checkpoint, no
    validation), write its dump and mechanism report to ``<trainer.default_local_dir>/probe`` and exit 0."""
    diagnostics: bool = True
    """Compute the ``gtpo/*`` metrics each step (from tensors already at hand)."""
    remeasure_on_resume: bool = False
    """Resume from a checkpoint without ``gtpo_state.json`` (one not saved by gtpo_verl) by measuring ⟨H⟩_ini
    again on the resumed policy and starting the entropy watch afresh; false refuses such a checkpoint."""
    entropy_warning: EntropyWarningConfig = field(default_factory=EntropyWarningConfig)
    """The entropy watch."""
    watchdog: WatchdogConfig = field(default_factory=WatchdogConfig)
    """The generation watchdog."""
    health: HealthConfig = field(default_factory=HealthConfig)
    """What a run does when its method trains nothing."""
    validation_metrics: ValidationMetricsConfig = field(default_factory=ValidationMetricsConfig)
    """pass@k / maj@n at validation."""
    audit: AuditConfig = field(default_factory=AuditConfig)
    """The entropy audit (off unless steps are chosen)."""
