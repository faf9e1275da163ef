"""Config blocks ``algorithm.gtpo_token``, ``algorithm.grpo_s`` and ``algorithm.gtpo_traj``
(the ``grpo_s`` loss's config is in ``loss_config.py``). Every knob of ALGORITHMS.md is a field here; docs/config.md
lists them. Values are checked when a block is read (start-up validation calls the same
code), and every error names the full key, the bad value and the fix.

No verl import here: this module is imported by the plugin while ``import verl`` runs.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, ClassVar, Optional

from gtpo_verl.algorithms.normalization import ADV_NORM_MODES
from gtpo_verl.algorithms.sequence_shaping import NEGATIVE_SHARES, SEQUENCE_VARIANTS
from gtpo_verl.algorithms.token_shaping import (
    ENTROPY_SHARES,
    LENGTH_DENOMINATORS,
    TOKEN_VARIANTS,
    UNIFORM_GROUP_MODES,
)
from gtpo_verl.algorithms.trajectory import DIVISOR_MODES, ENTROPY_REG_MODES, LN2, OVERLAP_MODES

# α1 + α2 = 1 is checked to this tolerance (conservation, Proposition 2.2).
_SUM_TOLERANCE = 1e-6


def _to_dict(block: Any) -> dict[str, Any]:
    if block is None:
        return {}
    if isinstance(block, dict):
        return dict(block)
    try:
        from omegaconf import DictConfig, OmegaConf

        if isinstance(block, DictConfig):
            return OmegaConf.to_container(block, resolve=True)
    except ImportError:  # pragma: no cover - omegaconf ships with verl
        pass
    if dataclasses.is_dataclass(block):
        return dataclasses.asdict(block)
    raise TypeError(f"cannot read a config block of type {type(block).__name__}")


def _choice(key: str, value: Any, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"`{key}={value!r}` is not valid; choose one of {list(choices)}.")


def _at_least(key: str, value: float, low: float, fix: str, strict: bool = False) -> None:
    bad = value <= low if strict else value < low
    if bad or not math.isfinite(value):
        rel = ">" if strict else ">="
        raise ValueError(f"`{key}={value}` must be finite and {rel} {low}; {fix}")


class _Block:
    """Shared reading of a ``algorithm.<name>`` block with unknown-key detection."""

    block_name: ClassVar[str]

    @classmethod
    def from_algorithm_config(cls, algorithm_config: Any):
        """Read and validate ``algorithm.<block_name>`` (missing block → defaults)."""
        block = None
        if algorithm_config is not None:
            getter = getattr(algorithm_config, "get", None)
            block = getter(cls.block_name, None) if getter else getattr(algorithm_config, cls.block_name, None)
        return cls.from_dict(_to_dict(block))

    @classmethod
    def from_dict(cls, values: dict[str, Any]):
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(
                f"unknown key(s) {['algorithm.' + cls.block_name + '.' + k for k in unknown]}; "
                f"valid keys of algorithm.{cls.block_name}: {sorted(known)}"
            )
        return cls(**values)

    def key(self, name: str) -> str:
        return f"algorithm.{self.block_name}.{name}"


@dataclass(frozen=True)
class GTPOTokenConfig(_Block):
    """``algorithm.gtpo_token``: Paper B token-level shaping (GTPO), arXiv:2508.04349 Eq. (S18)-(S30)."""

    block_name: ClassVar[str] = "gtpo_token"

    alpha1: float = 0.9
    """α1, weight of the outcome reward r_i (S18)."""
    alpha2: float = 0.1
    """α2, weight of the entropy bonus H_{i,t}/ΣH·d_t (S18)."""
    variant: str = "base"
    """``base`` (S18, α1+α2=1), ``clipped_len`` (S23-S25: clipped bonus + length penalty), ``unified_v6`` (v6 Eq. 3/5)."""
    negative_shaping: bool = False
    """GTPO₂: failed tokens get −(1/H)/Σ(1/H)·h_t (S26-S30); in ``unified_v6`` the −α2·share term."""
    entropy_share: str = "column"
    """``column``: share across the group at step t (S18, S26); ``geometric``: within the row (S20, S27)."""
    adv_norm: str = "two_zero_filled"
    """Normalisation sets when failures have a shaped reward: two_zero_filled | single_combined | per_class."""
    success_threshold: float = 0.0
    """O+ = responses whose sequence score (sum of token rewards) is > this value."""
    kappa: Optional[float] = None
    """κ > 1 of ``clipped_len``: the bonus is clipped to [1, α1(1+1/κ)] (S24); needs κ ≤ α1/α2."""
    overlong_buffer_len: Optional[int] = None
    """L1 of the length penalty R(i) (S23), e.g. DAPO's overlong buffer 4096."""
    max_response_len: Optional[int] = None
    """L2 of the length penalty R(i) (S23), e.g. the max response length 20480."""
    length_penalty_denominator: str = "l1"
    """``l1``: (L − |o|)/L1, continuous (DAPO); ``l2``: the text's literal /L2."""
    uniform_outcome_groups: str = "keep"
    """All-success / all-failure groups: ``keep`` the formulas, or ``zero_adv`` (0 as in GRPO)."""
    std_unbiased: bool = True
    """Sample std (n−1) as verl's GRPO, else population std."""
    epsilon: float = 1e-6
    """ε in 1/(H+ε), log(H+ε) and std + ε (Remark 2.1)."""

    def __post_init__(self):
        _choice(self.key("variant"), self.variant, TOKEN_VARIANTS)
        _choice(self.key("entropy_share"), self.entropy_share, ENTROPY_SHARES)
        _choice(self.key("adv_norm"), self.adv_norm, ADV_NORM_MODES)
        _choice(self.key("length_penalty_denominator"), self.length_penalty_denominator, LENGTH_DENOMINATORS)
        _choice(self.key("uniform_outcome_groups"), self.uniform_outcome_groups, UNIFORM_GROUP_MODES)
        _at_least(self.key("alpha1"), self.alpha1, 0.0, "set a non-negative outcome weight.")
        _at_least(self.key("alpha2"), self.alpha2, 0.0, "set 0 to disable entropy shaping.")
        _at_least(self.key("epsilon"), self.epsilon, 0.0, "use e.g. 1e-6.", strict=True)
        if self.variant in ("base", "clipped_len") and abs(self.alpha1 + self.alpha2 - 1.0) > _SUM_TOLERANCE:
            raise ValueError(
                f"`{self.key('alpha1')}` + `{self.key('alpha2')}` = {self.alpha1 + self.alpha2:g} must be 1 for "
                f"variant={self.variant!r} (Eq. S18: Σ_i r̃_i,t = d_t); e.g. alpha1=0.9 alpha2=0.1, "
                "or use variant=unified_v6 for the v6 weights alpha1=1.0 alpha2=0.1."
            )
        if self.variant == "clipped_len":
            if self.kappa is None or not self.kappa > 1.0:
                raise ValueError(f"`{self.key('kappa')}={self.kappa}` must be > 1 for variant=clipped_len (Eq. S24).")
            if self.alpha1 * (1.0 + 1.0 / self.kappa) < 1.0 - _SUM_TOLERANCE:
                raise ValueError(
                    f"`{self.key('kappa')}={self.kappa}` makes the clip range [1, α1(1+1/κ)] = "
                    f"[1, {self.alpha1 * (1 + 1 / self.kappa):g}] empty; need κ ≤ α1/α2 = "
                    f"{self.alpha1 / max(self.alpha2, 1e-12):g}."
                )
            l1, l2 = self.overlong_buffer_len, self.max_response_len
            if l1 is None or l2 is None or not (0 < int(l1) < int(l2)):
                raise ValueError(
                    f"variant=clipped_len needs 0 < `{self.key('overlong_buffer_len')}` (L1={l1}) < "
                    f"`{self.key('max_response_len')}` (L2={l2}), e.g. 4096 and 20480 as in DAPO."
                )

    def function_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of ``gtpo_token_advantage``."""
        return dict(
            alpha1=self.alpha1,
            alpha2=self.alpha2,
            success_threshold=self.success_threshold,
            negative_shaping=self.negative_shaping,
            variant=self.variant,
            entropy_share=self.entropy_share,
            adv_norm=self.adv_norm,
            kappa=self.kappa,
            overlong_buffer_len=self.overlong_buffer_len,
            max_response_len=self.max_response_len,
            length_penalty_denominator=self.length_penalty_denominator,
            uniform_outcome_groups=self.uniform_outcome_groups,
            std_unbiased=self.std_unbiased,
            epsilon=self.epsilon,
        )


@dataclass(frozen=True)
class GRPOSConfig(_Block):
    """``algorithm.grpo_s``: Paper B sequence-level shaping (GRPO-S), arXiv:2508.04349 Eq. (S31)-(S38)."""

    block_name: ClassVar[str] = "grpo_s"

    beta1: float = 0.9
    """β1, weight of the outcome reward r_i (S31)."""
    beta2: float = 0.1
    """β2, weight of the mean-entropy bonus Ĥ_i/ΣĤ·n (S31)."""
    variant: str = "base"
    """``base`` (v1: failures get 0) or ``unified_v6`` (failures get −β1, App. B/C)."""
    negative_shaping: bool = False
    """GRPO-S₂: failures get −(1/Ĥ_j)/Σ(1/Ĥ)·m (S36-S38); in ``unified_v6`` the −β2·share term."""
    negative_share: str = "arithmetic"
    """Failure share: ``arithmetic`` (S36) or ``geometric`` mean of 1/Ĥ over O− (App. C)."""
    adv_norm: str = "two_zero_filled"
    """Normalisation sets when failures have a shaped reward: two_zero_filled | single_combined | per_class."""
    success_threshold: float = 0.0
    """O+ = responses whose sequence score is > this value."""
    uniform_outcome_groups: str = "keep"
    """All-success / all-failure groups: ``keep`` or ``zero_adv``."""
    std_unbiased: bool = True
    """Sample std (n−1), as verl's GRPO."""
    epsilon: float = 1e-6
    """ε in 1/(Ĥ+ε) and std + ε."""

    def __post_init__(self):
        _choice(self.key("variant"), self.variant, SEQUENCE_VARIANTS)
        _choice(self.key("negative_share"), self.negative_share, NEGATIVE_SHARES)
        _choice(self.key("adv_norm"), self.adv_norm, ADV_NORM_MODES)
        _choice(self.key("uniform_outcome_groups"), self.uniform_outcome_groups, UNIFORM_GROUP_MODES)
        _at_least(self.key("beta1"), self.beta1, 0.0, "set a non-negative outcome weight.")
        _at_least(self.key("beta2"), self.beta2, 0.0, "set 0 to disable entropy shaping.")
        _at_least(self.key("epsilon"), self.epsilon, 0.0, "use e.g. 1e-6.", strict=True)

    def function_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of ``grpo_s_advantage``."""
        return dict(
            beta1=self.beta1,
            beta2=self.beta2,
            success_threshold=self.success_threshold,
            negative_shaping=self.negative_shaping,
            variant=self.variant,
            negative_share=self.negative_share,
            adv_norm=self.adv_norm,
            uniform_outcome_groups=self.uniform_outcome_groups,
            std_unbiased=self.std_unbiased,
            epsilon=self.epsilon,
        )


TRAJ_PRESETS: dict[str, dict[str, Any]] = {
    # winstonsmith1897/GTPO gtpo/gtpo_training.py (ALGORITHMS.md §A.3-A.8, [CODE])
    "official": dict(
        overlap="product", divisor="code", entropy_threshold=0.7, norm_adv_by_std=False, ini_entropy_gate=False
    ),
    # the paper text read literally: λ ∈ {0,1,2}, no divisor, ln 2, GRPO's Â_i, ⟨H⟩_ini gate
    "paper": dict(overlap="union", divisor="none", entropy_threshold=LN2, norm_adv_by_std=True, ini_entropy_gate=True),
}
ENTROPY_FILTER_SCOPES = ("all", "neg_only", "none")


@dataclass(frozen=True)
class GTPOTrajConfig(_Block):
    """``algorithm.gtpo_traj``: Paper A (GTPO, trajectory), arXiv:2508.03772.

    Keys left ``null`` take the value of ``preset``; set them to override one choice.
    """

    block_name: ClassVar[str] = "gtpo_traj"

    preset: str = "official"
    """``official`` (the released code) or ``paper`` (the literal paper text); fills the null keys below."""
    gamma: float = 0.1
    """γ, entropy-regulariser weight (S17; official ENT_SCALE=0.1)."""
    conflict_weight: float = 2.0
    """W, λ on conflict tokens of positive responses (S12; official W_RAW=2)."""
    entropy_filter_scope: str = "all"
    """δ applies to ``all`` responses, only to A<0 (``neg_only``, the "OnlyNeg" ablation), or ``none``."""
    entropy_reg_mode: str = "advantage_offset"
    """``advantage_offset``: Ã = δ(A − γ⟨H⟩) (official); ``differentiable``: −γ·H added in the actor loss."""
    initial_entropy: Optional[float] = None
    """⟨H⟩_ini for the gate; null = measured on the first batch by the trainer integration."""
    entropy_threshold: Optional[float] = None
    """δ_i = 1[⟨H⟩_i ≤ threshold] (S16); preset: 0.7 official, ln 2 paper."""
    overlap: Optional[str] = None
    """λ where forward and backward runs overlap: ``product`` (4, official) or ``union`` (2, paper)."""
    divisor: Optional[str] = None
    """Per-response 1/n_conf: ``code`` (max(k_f,k_b), official), ``union`` (|F∪B|) or ``none`` (paper)."""
    norm_adv_by_std: Optional[bool] = None
    """A_i = r_i − mean (official) or GRPO's (r − mean)/(std + ε) (paper)."""
    ini_entropy_gate: Optional[bool] = None
    """Paper S16: if ⟨H⟩_ini > threshold, δ ≡ 1 for the whole run (official: off)."""
    epsilon: float = 1e-6
    """ε of the std normalisation."""

    def __post_init__(self):
        _choice(self.key("preset"), self.preset, tuple(TRAJ_PRESETS))
        _choice(self.key("entropy_filter_scope"), self.entropy_filter_scope, ENTROPY_FILTER_SCOPES)
        _choice(self.key("entropy_reg_mode"), self.entropy_reg_mode, ENTROPY_REG_MODES)
        _at_least(self.key("gamma"), self.gamma, 0.0, "set 0 to disable the entropy regulariser.")
        _at_least(self.key("conflict_weight"), self.conflict_weight, 0.0, "the paper uses 2.")
        _at_least(self.key("epsilon"), self.epsilon, 0.0, "use e.g. 1e-6.", strict=True)
        resolved = self.resolved_choices()
        _choice(self.key("overlap"), resolved["overlap"], OVERLAP_MODES)
        _choice(self.key("divisor"), resolved["divisor"], DIVISOR_MODES)
        _at_least(self.key("entropy_threshold"), resolved["entropy_threshold"], 0.0, "the paper uses ln 2 ≈ 0.693.", True)
        if self.initial_entropy is not None:
            _at_least(self.key("initial_entropy"), self.initial_entropy, 0.0, "entropies are non-negative.")

    def resolved_choices(self) -> dict[str, Any]:
        """The preset-controlled keys with the preset filled in where the block left them null."""
        out = dict(TRAJ_PRESETS[self.preset])
        for name in out:
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        return out

    @property
    def needs_entropy(self) -> bool:
        return self.entropy_filter_scope != "none" or (self.gamma > 0 and self.entropy_reg_mode == "advantage_offset")

    def function_kwargs(self, initial_entropy: float | None = None) -> dict[str, Any]:
        """Keyword arguments of ``gtpo_traj_advantage``; ``initial_entropy`` feeds the gate."""
        choices = self.resolved_choices()
        filtering = self.entropy_filter_scope != "none"
        if self.initial_entropy is not None:
            initial_entropy = self.initial_entropy
        return dict(
            gamma=self.gamma,
            entropy_threshold=choices["entropy_threshold"] if filtering else None,
            conflict_weight=self.conflict_weight,
            overlap=choices["overlap"],
            divisor=choices["divisor"],
            norm_adv_by_std=bool(choices["norm_adv_by_std"]),
            entropy_filter_scope="all" if not filtering else self.entropy_filter_scope,
            initial_entropy=initial_entropy if choices["ini_entropy_gate"] else None,
            entropy_reg_mode=self.entropy_reg_mode,
            epsilon=self.epsilon,
        )


ESTIMATOR_CONFIGS = {cls.block_name: cls for cls in (GTPOTokenConfig, GRPOSConfig, GTPOTrajConfig)}
