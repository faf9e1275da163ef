"""One run as the report carries it, from loading to the page: its metrics and all that was read beside them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from gtpo_verl.tools.report.runs import Run


@dataclass(frozen=True)
class RunRecord:
    """A run: ``metrics`` (its metric files merged, validation recomputed from its samples included), the
    config Hydra saved for it, the warnings it raised, and its ``gtpo-mechanism`` report when it has audit dumps."""

    metrics: Run
    config: dict[str, str] = field(default_factory=dict)
    config_path: Optional[str] = None
    warnings: tuple[str, ...] = ()
    """The trainer's warnings, recovered from the run's own flags (and a dump the mechanism report could not read)."""
    log_warnings: tuple[str, ...] = ()
    """gtpo_verl's warning lines in the run folder's ``*.log``."""
    mechanism: Optional[dict] = None

    @property
    def name(self) -> str:
        return self.metrics.name

    @property
    def group(self) -> str:
        return self.metrics.group

    @property
    def seed(self) -> Optional[int]:
        return self.metrics.seed

    @property
    def folder(self) -> Optional[str]:
        return self.metrics.folder

    def points(self, metric: str) -> int:
        """How many finite values of ``metric`` the page draws for this run (a null is a gap, not a point)."""
        values = self.metrics.values.get(metric)
        return 0 if values is None else int(np.count_nonzero(~np.isnan(values)))
