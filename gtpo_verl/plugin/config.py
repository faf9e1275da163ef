"""Typed config blocks of the algorithms: ``algorithm.gtpo_token``, ``algorithm.grpo_s``,
``algorithm.gtpo_traj`` (the ``grpo_s`` loss's knob is in ``loss_config.py``; the operational
``gtpo.*`` settings are in ``trainer/settings.py``, built on the same ``ConfigBlock``).

These dataclasses are the single source of every default. ``gtpo_base.yaml``, the tables of
docs/config.md and the keyword defaults of the pure functions are checked against them, and
``function_kwargs`` is derived from the fields. Config is read one way: ``select`` finds a node,
``<Block>.from_config`` / ``from_dict`` build and validate it; every error names the full key, the
bad value and the fix.

No verl import here: this module is imported by the plugin while ``import verl`` runs.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, ClassVar, Optional

from gtpo_verl.algorithms.choices import (
    ADV_NORM_MODES,
    DIVISOR_MODES,
    ENTROPY_FILTER_SCOPES,
    ENTROPY_REG_MODES,
    ENTROPY_SHARES,
    LENGTH_DENOMINATORS,
    NEGATIVE_SHARES,
    OVERLAP_MODES,
    SEQUENCE_ENTROPY_MEANS,
    SEQUENCE_VARIANTS,
    SUCCESS_SHARES,
    TOKEN_VARIANTS,
    TRAJ_PRESET_NAMES,
    UNIFORM_GROUP_MODES,
)
from gtpo_verl.algorithms.trajectory import LN2

# α1 + α2 = 1 is checked to this tolerance (clipped_len's lower clip bound 1 assumes it).
_SUM_TOLERANCE = 1e-6


def to_dict(block: Any) -> dict[str, Any]:
    """A plain dict of a config node: a DictConfig (resolved), a dict, a dataclass, or None (empty)."""
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
        return {f.name: getattr(block, f.name) for f in dataclasses.fields(block)}
    raise TypeError(f"cannot read a config block of type {type(block).__name__}")


def to_list(node: Any) -> list:
    """A plain list of a list node (a ListConfig, resolved); anything else is returned unchanged."""
    try:
        from omegaconf import ListConfig, OmegaConf

        if isinstance(node, ListConfig):
            return OmegaConf.to_container(node, resolve=True)
    except ImportError:  # pragma: no cover - omegaconf ships with verl
        pass
    return node


def select(config: Any, dotted: str, default: Any = None) -> Any:
    """The node at ``dotted`` (``"a.b.c"``) of a DictConfig, dict or attribute object.

    Returns ``default`` where a level is missing or the value is None. The one way this
    package reads a composed config.
    """
    node = config
    for part in dotted.split("."):
        if node is None:
            return default
        if isinstance(node, dict) or hasattr(node, "get"):
            node = node.get(part, None)
        else:
            node = getattr(node, part, None)
    return default if node is None else node


def check_choice(key: str, value: Any, choices: tuple[str, ...]) -> None:
    """Raise a ``ValueError`` naming ``key``, ``value`` and the valid ``choices`` unless ``value`` is one."""
    if value not in choices:
        raise ValueError(f"`{key}={value!r}` is not valid; choose one of {list(choices)}.")


def check_at_least(key: str, value: float, low: float, fix: str, strict: bool = False) -> None:
    """Raise a ``ValueError`` naming ``key``, ``value`` and ``fix`` unless ``value`` is finite and ≥ ``low`` (> if ``strict``)."""
    bad = value <= low if strict else value < low
    if bad or not math.isfinite(value):
        rel = ">" if strict else ">="
        raise ValueError(f"`{key}={value}` must be finite and {rel} {low}; {fix}")


def _sub_block(f: dataclasses.Field) -> Optional[type]:
    """The block class of a nested field (declared with ``default_factory=<Block>``), else None."""
    factory = f.default_factory
    if isinstance(factory, type) and issubclass(factory, ConfigBlock):
        return factory
    return None


class ConfigBlock:
    """A typed config block at ``path``: unknown keys are refused, nested blocks are typed too.

    A new sub-block is one field: ``audit: AuditConfig = field(default_factory=AuditConfig)``
    with ``AuditConfig.path = "gtpo.audit"``.
    """

    path: ClassVar[str]
    # fields that configure the block but are not keyword arguments of its pure function
    config_only: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def from_config(cls, config: Any):
        """Read and validate the block from the composed trainer config (missing → defaults)."""
        return cls.from_dict(to_dict(select(config, cls.path)))

    @classmethod
    def from_algorithm_config(cls, algorithm_config: Any):
        """Read ``algorithm.<name>`` from the ``algorithm`` node (what verl hands an estimator)."""
        prefix, _, name = cls.path.partition(".")
        assert prefix == "algorithm", cls.path
        return cls.from_dict(to_dict(select(algorithm_config, name)))

    @classmethod
    def from_dict(cls, values: dict[str, Any]):
        fields = {f.name: f for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - set(fields))
        if unknown:
            raise ValueError(
                f"unknown key(s) {[cls.path + '.' + k for k in unknown]}; valid keys of {cls.path}: {sorted(fields)}"
            )
        kwargs = {}
        for name, value in values.items():
            sub = _sub_block(fields[name])
            kwargs[name] = sub.from_dict(to_dict(value)) if sub is not None else value
        return cls(**kwargs)

    def key(self, name: str) -> str:
        return f"{self.path}.{name}"

    def function_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of the block's pure function: every field but ``config_only``."""
        return {
            f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in self.config_only
        }


def _check_v6_failure_shaping(block: ConfigBlock, weight: str) -> None:
    if block.variant == "unified_v6" and not block.negative_shaping:
        raise ValueError(
            f"`{block.key('variant')}=unified_v6` needs `{block.key('negative_shaping')}=true`: v6 gives failures "
            f"−{weight}1 − {weight}2·share (docs/spec.md B.6, B.7); without the shaping every failure would get the "
            f"constant −{weight}1. Set {block.key('negative_shaping')}=true."
        )


@dataclass(frozen=True)
class GTPOTokenConfig(ConfigBlock):
    """``algorithm.gtpo_token``: Paper B token-level shaping (GTPO), arXiv:2508.04349 Eq. (S18)-(S30).

    The keyword arguments of ``gtpo_token_advantage``; formulas in docs/spec.md B.2-B.6.
    """

    path: ClassVar[str] = "algorithm.gtpo_token"

    alpha1: float = 0.9
    """α1, weight of the outcome reward r_i (S18)."""
    alpha2: float = 0.1
    """α2, weight of the entropy bonus H_{i,t}/ΣH·d_t (S18)."""
    variant: str = "base"
    """``base`` (S18), ``clipped_len`` (S23-S25: clipped bonus + length penalty, α1+α2=1), ``unified_v6`` (v6 Eq. 3/5)."""
    negative_shaping: bool = False
    """GTPO₂: failed tokens get −(1/H)/Σ(1/H)·h_t (S26-S30); ``unified_v6`` requires it (its −α2·share term)."""
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
        check_choice(self.key("variant"), self.variant, TOKEN_VARIANTS)
        check_choice(self.key("entropy_share"), self.entropy_share, ENTROPY_SHARES)
        check_choice(self.key("adv_norm"), self.adv_norm, ADV_NORM_MODES)
        check_choice(self.key("length_penalty_denominator"), self.length_penalty_denominator, LENGTH_DENOMINATORS)
        check_choice(self.key("uniform_outcome_groups"), self.uniform_outcome_groups, UNIFORM_GROUP_MODES)
        check_at_least(self.key("alpha1"), self.alpha1, 0.0, "set a non-negative outcome weight.")
        check_at_least(self.key("alpha2"), self.alpha2, 0.0, "set 0 to disable entropy shaping.")
        check_at_least(self.key("epsilon"), self.epsilon, 0.0, "use e.g. 1e-6.", strict=True)
        if self.alpha1 + self.alpha2 <= 0.0:
            raise ValueError(
                f"`{self.key('alpha1')}` and `{self.key('alpha2')}` are both 0: every token reward would be 0. "
                "Use e.g. alpha1=0.9 alpha2=0.1."
            )
        _check_v6_failure_shaping(self, "α")
        if self.variant == "clipped_len":
            if abs(self.alpha1 + self.alpha2 - 1.0) > _SUM_TOLERANCE:
                raise ValueError(
                    f"`{self.key('alpha1')}` + `{self.key('alpha2')}` = {self.alpha1 + self.alpha2:g} must be 1 for "
                    "variant='clipped_len': its lower clip bound 1 is the mean success reward only when α1+α2 = 1 "
                    "(Eq. S24, docs/spec.md B.4). Use e.g. alpha1=0.9 alpha2=0.1."
                )
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


@dataclass(frozen=True)
class GRPOSConfig(ConfigBlock):
    """``algorithm.grpo_s``: Paper B sequence-level shaping (GRPO-S), arXiv:2508.04349 Eq. (S31)-(S38).

    The keyword arguments of ``grpo_s_advantage``; formulas in docs/spec.md B.7.
    """

    path: ClassVar[str] = "algorithm.grpo_s"

    beta1: float = 0.9
    """β1, weight of the outcome reward r_i (S31)."""
    beta2: float = 0.1
    """β2, weight of the mean-entropy bonus Ĥ_i/ΣĤ·n (S31)."""
    variant: str = "base"
    """``base`` (v1: failures get 0) or ``unified_v6`` (failures get −β1 − β2·share, App. C)."""
    negative_shaping: bool = False
    """GRPO-S₂: failures get −(1/Ĥ_j)/Σ(1/Ĥ)·m (S36-S38); ``unified_v6`` requires it (its −β2·share term)."""
    negative_share: str = "arithmetic"
    """Failure share: 1/Ĥ_j over the ``arithmetic`` (S36) or ``geometric`` mean of 1/Ĥ over O− (App. C)."""
    success_share: str = "arithmetic"
    """Success share: Ĥ_i over the ``arithmetic`` (S31) or ``geometric`` mean of Ĥ over O+."""
    sequence_entropy: str = "arithmetic"
    """Ĥ_i as the ``arithmetic`` (S32) or ``geometric`` mean of the response's token entropies."""
    adv_norm: str = "two_zero_filled"
    """Normalisation sets when failures have a shaped reward: two_zero_filled | single_combined | per_class."""
    success_threshold: float = 0.0
    """O+ = responses whose sequence score is > this value."""
    uniform_outcome_groups: str = "keep"
    """All-success / all-failure groups: ``keep`` or ``zero_adv``."""
    std_unbiased: bool = True
    """Sample std (n−1), as verl's GRPO."""
    epsilon: float = 1e-6
    """ε in 1/(Ĥ+ε), the logs of the geometric means, and std + ε."""

    def __post_init__(self):
        check_choice(self.key("variant"), self.variant, SEQUENCE_VARIANTS)
        check_choice(self.key("negative_share"), self.negative_share, NEGATIVE_SHARES)
        check_choice(self.key("success_share"), self.success_share, SUCCESS_SHARES)
        check_choice(self.key("sequence_entropy"), self.sequence_entropy, SEQUENCE_ENTROPY_MEANS)
        check_choice(self.key("adv_norm"), self.adv_norm, ADV_NORM_MODES)
        check_choice(self.key("uniform_outcome_groups"), self.uniform_outcome_groups, UNIFORM_GROUP_MODES)
        check_at_least(self.key("beta1"), self.beta1, 0.0, "set a non-negative outcome weight.")
        check_at_least(self.key("beta2"), self.beta2, 0.0, "set 0 to disable entropy shaping.")
        check_at_least(self.key("epsilon"), self.epsilon, 0.0, "use e.g. 1e-6.", strict=True)
        if self.beta1 + self.beta2 <= 0.0:
            raise ValueError(
                f"`{self.key('beta1')}` and `{self.key('beta2')}` are both 0: every sequence reward would be 0. "
                "Use e.g. beta1=0.9 beta2=0.1."
            )
        _check_v6_failure_shaping(self, "β")


TRAJ_PRESETS: dict[str, dict[str, Any]] = {
    # the released code, github.com/winstonsmith1897/GTPO @ df35bd3 (docs/spec.md A.8)
    "official": dict(
        overlap="product", divisor="code", entropy_threshold=0.7, norm_adv_by_std=False, ini_entropy_gate=False
    ),
    # the paper text read literally: λ ∈ {0,1,2}, no divisor, ln 2, GRPO's Â_i, ⟨H⟩_ini gate
    "paper": dict(overlap="union", divisor="none", entropy_threshold=LN2, norm_adv_by_std=True, ini_entropy_gate=True),
}
assert tuple(TRAJ_PRESETS) == TRAJ_PRESET_NAMES


@dataclass(frozen=True)
class GTPOTrajConfig(ConfigBlock):
    """``algorithm.gtpo_traj``: Paper A (GTPO, trajectory), arXiv:2508.03772.

    Keys left ``null`` take the value of ``preset``; set them to override one choice.
    Formulas in docs/spec.md A.1-A.8.
    """

    path: ClassVar[str] = "algorithm.gtpo_traj"
    config_only: ClassVar[tuple[str, ...]] = ("preset", "ini_entropy_gate")

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
        check_choice(self.key("preset"), self.preset, TRAJ_PRESET_NAMES)
        check_choice(self.key("entropy_filter_scope"), self.entropy_filter_scope, ENTROPY_FILTER_SCOPES)
        check_choice(self.key("entropy_reg_mode"), self.entropy_reg_mode, ENTROPY_REG_MODES)
        check_at_least(self.key("gamma"), self.gamma, 0.0, "set 0 to disable the entropy regulariser.")
        check_at_least(self.key("conflict_weight"), self.conflict_weight, 0.0, "the paper uses 2.")
        check_at_least(self.key("epsilon"), self.epsilon, 0.0, "use e.g. 1e-6.", strict=True)
        resolved = self.resolved_choices()
        check_choice(self.key("overlap"), resolved["overlap"], OVERLAP_MODES)
        check_choice(self.key("divisor"), resolved["divisor"], DIVISOR_MODES)
        check_at_least(self.key("entropy_threshold"), resolved["entropy_threshold"], 0.0, "the paper uses ln 2 ≈ 0.693.", True)
        if self.initial_entropy is not None:
            check_at_least(self.key("initial_entropy"), self.initial_entropy, 0.0, "entropies are non-negative.")

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
        kwargs = super().function_kwargs()
        kwargs.update(
            entropy_threshold=choices["entropy_threshold"] if filtering else None,
            overlap=choices["overlap"],
            divisor=choices["divisor"],
            norm_adv_by_std=bool(choices["norm_adv_by_std"]),
            entropy_filter_scope=self.entropy_filter_scope if filtering else "all",
            initial_entropy=initial_entropy if choices["ini_entropy_gate"] else None,
        )
        return kwargs


ALGORITHM_BLOCKS = (GTPOTokenConfig, GRPOSConfig, GTPOTrajConfig)
"""The algorithm blocks (``algorithm.<estimator>``); the estimator table pairs each with its estimator."""
