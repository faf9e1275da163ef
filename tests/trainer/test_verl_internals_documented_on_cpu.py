"""docs/trainer.md's "verl internals this relies on" names every verl method the trainer overrides
and every replay-buffer attribute the watchdog wraps or reads: the list a verl upgrade is checked against."""

import re

from support.paths import REPO_ROOT

DOC = (REPO_ROOT / "docs" / "trainer.md").read_text()
SECTION = DOC[DOC.index("## verl internals this relies on"):DOC.index("## Limits")]


def named(name: str) -> bool:
    return re.search(rf"`[\w.\[\]]*\b{re.escape(name)}\b[^`]*`", SECTION) is not None


def test_every_overridden_trainer_method_is_listed():
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    from gtpo_verl.trainer.mixin import GTPOTrainerMixin

    overridden = sorted(name for name in vars(GTPOTrainerMixin) if hasattr(PPOTrainer, name) and not name.startswith("__"))
    assert {"_compute_advantage", "_val_metrics_update", "fit"} <= set(overridden)  # the check sees the overrides
    assert not [name for name in overridden if not named(name)], overridden


def test_every_replay_buffer_attribute_the_watchdog_touches_is_listed():
    source = (REPO_ROOT / "gtpo_verl" / "trainer" / "watchdog.py").read_text()
    touched = sorted(set(re.findall(r"\bbuffer\.(\w+)", source)))
    assert {"sample", "_wait_for_next_poll", "pending_keys"} <= set(touched)
    assert not [name for name in touched if not named(name)], touched
    assert named("global_load_balancer") and named("get_status")
