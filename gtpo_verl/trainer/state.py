"""The algorithm state that must survive a resume, saved beside verl's checkpoint as ``global_step_N/gtpo_state.json``.

⟨H⟩_ini (Paper A's δ gate, measured once on the first batch) and the entropy watch. Plain JSON,
written atomically; floats round-trip exactly, so a resumed run continues bit for bit.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from typing import Any, Optional

STATE_FILE = "gtpo_state.json"


class MissingAlgorithmState(RuntimeError):
    """A resume from a checkpoint without ``gtpo_state.json``, not accepted by ``gtpo.remeasure_on_resume``."""


@dataclass
class GTPOAlgorithmState:
    """Running state that must survive a resume (saved as ``global_step_N/gtpo_state.json``)."""

    initial_entropy: Optional[float] = None  # ⟨H⟩_ini, Paper A's δ gate (measured before the first update)
    entropy_watch: dict[str, Any] = field(default_factory=dict)

    def save(self, folder: str) -> str:
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, STATE_FILE)
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(asdict(self), f, indent=1)
        os.replace(tmp, path)  # atomic: a crash never leaves a half-written state
        return path

    @classmethod
    def load(cls, folder: str) -> Optional["GTPOAlgorithmState"]:
        path = os.path.join(folder, STATE_FILE)
        if not os.path.exists(path):
            return None
        with open(path) as f:
            return cls(**json.load(f))
