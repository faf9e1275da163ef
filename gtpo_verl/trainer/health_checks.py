"""The algorithm-health checks as data (no torch): the metric each watches, its threshold, and the
warning with the key that fixes it. ``gtpo_verl.trainer.health`` runs them during training;
``gtpo-report`` shows them beside the ``gtpo/health/*`` flags.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class HealthCheck:
    name: str
    metric: str
    threshold: float
    message: str
    """The warning, with ``{share}`` where the watched share goes (e.g. "93%", "most")."""

    def describe(self, share: str) -> str:
        """The warning with ``share`` (already formatted text) in its place."""
        return self.message.format(share=share)


ALL_EQUAL_GROUPS_FRAC = "gtpo/health/all_equal_groups_frac"

HEALTH_CHECKS = (
    HealthCheck(
        "delta_filtered", "gtpo/delta/filtered_frac", 0.9,
        "the δ entropy filter drops {share} of responses (⟨H⟩_i above algorithm.gtpo_traj.entropy_threshold), "
        "so their entropy regulariser and most of the update are gone; scale δ to the model "
        "(algorithm.gtpo_traj.entropy_threshold_ratio, e.g. 1.5), raise the threshold above the model's per-response "
        "entropy (gtpo/entropy/batch_mean) or set algorithm.gtpo_traj.ini_entropy_gate=true",
    ),
    HealthCheck(
        "bonus_clipped", "gtpo/transform/entropy_advantage/clipped_fraction", 0.9,
        "the entropy-advantage bonus hits its cap |A|/κ on {share} of tokens, so it is a rescaled advantage, "
        "not an entropy term; raise kappa or lower alpha in algorithm.adv_transforms",
    ),
    HealthCheck(
        "all_equal_groups", ALL_EQUAL_GROUPS_FRAC, 0.9,
        "{share} of the batch's groups have one reward for every response and carry no outcome signal "
        "(the policy is deterministic on them, solved or trapped: compare pass@k with pass@1); turn on dynamic "
        "sampling (algorithm.filter_groups.enable=true) or use harder prompts",
    ),
)
"""Thresholds the lab replays on runs with known outcomes (``python -m gtpo_verl.lab``: ``results.json["health"]``)."""
