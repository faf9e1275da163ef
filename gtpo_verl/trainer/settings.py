"""The operational ``gtpo.*`` settings of the trainer: diagnostics, the entropy watch, the generation
watchdog, the validation metrics, the audit dump and the preflight switch (not algorithm choices).

Typed blocks on ``plugin/config.py``'s ``ConfigBlock``, like the algorithm blocks
(``plugin/estimators/<estimator>.py``): the single source of every default, checked against
``gtpo_base.yaml`` and docs/config.md; errors name the full key and the fix.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Optional

from gtpo_verl.plugin.config import ConfigBlock, check_at_least


@dataclass(frozen=True)
class EntropyWarningConfig(ConfigBlock):
    """``gtpo.entropy_warning``: the entropy watch (docs/metrics.md, ``gtpo/entropy/*``)."""

    path: ClassVar[str] = "gtpo.entropy_warning"

    ratio: float = 1.5
    """Warn when the batch mean entropy exceeds ratio × its running baseline (rising: Paper A's collapse)."""
    fall_ratio: Optional[float] = None
    """Warn when it drops below its running baseline / fall_ratio (entropy collapse); null = off.
    In the lab 1.1 warned before most degrading runs and in most of the others too (docs/lab.md)."""
    momentum: float = 0.9
    """EMA momentum of the baseline."""
    warmup_steps: int = 3
    """Steps that only build the baseline."""

    def __post_init__(self):
        check_at_least(self.key("ratio"), self.ratio, 1.0, "e.g. 1.5 (warn at a 50% rise).", strict=True)
        if self.fall_ratio is not None:
            check_at_least(self.key("fall_ratio"), self.fall_ratio, 1.0, "e.g. 1.5 (warn at a fall to 2/3), or null.", strict=True)
        if not 0.0 <= self.momentum < 1.0:
            raise ValueError(f"`{self.key('momentum')}={self.momentum}` must be in [0, 1); e.g. 0.9.")
        check_at_least(self.key("warmup_steps"), self.warmup_steps, 0, "e.g. 3.")


@dataclass(frozen=True)
class WatchdogConfig(ConfigBlock):
    """``gtpo.watchdog``: fail a run whose generation stalls (trainer/watchdog.py)."""

    path: ClassVar[str] = "gtpo.watchdog"

    generation_timeout_s: Optional[float] = None
    """Seconds without generation progress before the run exits with status 3; null or <= 0 = off."""

    @property
    def timeout_s(self) -> Optional[float]:
        """The timeout in seconds, or None when the watchdog is off."""
        value = self.generation_timeout_s
        return float(value) if value is not None and float(value) > 0 else None


@dataclass(frozen=True)
class ValidationMetricsConfig(ConfigBlock):
    """``gtpo.validation_metrics``: unbiased pass@k and maj@n next to verl's validation metrics."""

    path: ClassVar[str] = "gtpo.validation_metrics"

    enable: bool = True
    """Log ``val-gtpo/<data_source>/pass@k`` and ``maj@n`` when validation draws n > 1 samples."""
    success_threshold: float = 0.0
    """A sample succeeds when its ``acc`` (or ``reward`` without ``acc``) is above this."""


@dataclass(frozen=True)
class AuditConfig(ConfigBlock):
    """``gtpo.audit``: dump the estimator's inputs and outputs of chosen steps (``trainer/audit_dump.py``; checked by ``gtpo-audit``)."""

    path: ClassVar[str] = "gtpo.audit"

    steps: tuple[int, ...] = ()
    """Global steps (from 1) whose estimator inputs and advantages are dumped."""
    dir: Optional[str] = None
    """Folder for the dumps (``step_<k>.pt``); required when ``steps`` is set."""

    def __post_init__(self):
        steps = self.steps
        if isinstance(steps, (int, str)):
            steps = [steps]
        try:
            steps = tuple(sorted({int(s) for s in steps}))
        except (TypeError, ValueError):
            raise ValueError(
                f"`{self.key('steps')}={list(self.steps)}` must be a list of global step numbers, e.g. [2]"
            ) from None
        if any(s < 1 for s in steps):
            raise ValueError(f"`{self.key('steps')}={list(steps)}`: global steps start at 1")
        object.__setattr__(self, "steps", steps)
        if self.dir is not None:
            object.__setattr__(self, "dir", str(self.dir))


@dataclass(frozen=True)
class GTPOSettings(ConfigBlock):
    """``gtpo``: the trainer integration's own knobs (not algorithm choices)."""

    path: ClassVar[str] = "gtpo"

    preflight: bool = True
    """``python -m gtpo_verl.main`` first checks every node of the cluster (``gtpo-preflight``)."""
    diagnostics: bool = True
    """Compute the ``gtpo/*`` metrics each step (from tensors already at hand)."""
    entropy_warning: EntropyWarningConfig = field(default_factory=EntropyWarningConfig)
    """The entropy watch."""
    watchdog: WatchdogConfig = field(default_factory=WatchdogConfig)
    """The generation watchdog."""
    validation_metrics: ValidationMetricsConfig = field(default_factory=ValidationMetricsConfig)
    """pass@k / maj@n at validation."""
    audit: AuditConfig = field(default_factory=AuditConfig)
    """The entropy audit (off unless steps are chosen)."""


