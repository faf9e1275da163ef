"""The fields Paper B's two estimators share (arXiv:2508.04349): ``algorithm.gtpo_token`` and
``algorithm.grpo_s`` both extend ``PaperBBlock``; each adds its own weights and switches."""

from __future__ import annotations

from dataclasses import dataclass

from gtpo_verl.algorithms.choices import ADV_NORM_MODES, UNIFORM_GROUP_MODES
from gtpo_verl.plugin.config import ConfigBlock, ConfigError, choice, number


@dataclass(frozen=True)
class PaperBBlock(ConfigBlock):
    """Outcome split, normalisation sets and ε of Paper B's token (S18-S30) and sequence (S31-S38) shaping."""

    adv_norm: str = choice("two_zero_filled", ADV_NORM_MODES)
    """Normalisation sets when failures have a shaped reward: two_zero_filled | single_combined | per_class."""
    success_threshold: float = number(0.0)
    """O+ = responses whose sequence score (sum of token rewards) is > this value."""
    uniform_outcome_groups: str = choice("keep", UNIFORM_GROUP_MODES)
    """All-success / all-failure groups: ``keep`` the formulas, or ``zero_adv`` (0 as in GRPO)."""
    std_unbiased: bool = True
    """Sample std (n−1) as verl's GRPO, else population std."""
    epsilon: float = number(1e-6, gt=0.0, le=1.0, fix="use e.g. 1e-6.")
    """ε in the inverse entropies, the logs of the geometric means and std + ε (Remark 2.1)."""

    def check_v6_failure_shaping(self, weight: str) -> None:
        """Refuse ``variant=unified_v6`` without ``negative_shaping`` (weights α or β)."""
        if self.variant == "unified_v6" and not self.negative_shaping:
            raise ConfigError(
                self.key("variant"),
                f"`{self.key('variant')}=unified_v6` needs `{self.key('negative_shaping')}=true`: v6 gives failures "
                f"−{weight}1 − {weight}2·share (docs/spec.md B.6, B.7); without the shaping every failure would get "
                f"the constant −{weight}1. Set {self.key('negative_shaping')}=true.",
            )
