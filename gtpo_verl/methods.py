"""The training methods as data: ``config/methods.yaml``, one table that every caller reads.

A method is its estimator, policy loss and aggregation, its knobs, its clips, DAPO's dynamic sampling
on or off, and KL or none. The lab builds its rows from the table (adding what only the simulator has:
mini-batches, reward scale, sampler stream); the CPU demos, the real-LM demo and study and the device
check take ``pipeline_overrides(method)``, the trainer's Hydra overrides derived from the row, and add
their own sizes and reward. The table ships as package data because the lab, inside the package, reads
it as much as the examples outside it do; it is YAML because it is data: it spells the estimators'
names, which the package's Python spells only in each estimator's own module.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Union

TABLE_PATH = Path(__file__).parent / "config" / "methods.yaml"
# DAPO's dynamic sampling as the recipes set it: evict groups whose `acc` is all-equal, refill
DYNAMIC_SAMPLING = ["algorithm.filter_groups.enable=true", "algorithm.filter_groups.metric=acc"]
NO_KL = ["algorithm.use_kl_in_reward=false", "actor_rollout_ref.actor.use_kl_loss=false"]
ACTOR = "actor_rollout_ref.actor"


@dataclass(frozen=True)
class Clips:
    """PPO's clip range (clip-higher: ``high`` above ``low``) and the dual clip ``c``."""

    low: float
    high: float
    c: float


@dataclass(frozen=True)
class MethodSpec:
    """One row of ``config/methods.yaml`` (the file's header says what each field sets)."""

    name: str
    estimator: str
    loss_agg_mode: str
    loss_mode: Optional[str] = None
    """None: the config's (verl's ``vanilla``)."""
    knobs: dict = field(default_factory=dict)
    policy_loss: dict = field(default_factory=dict)
    transforms: tuple[dict, ...] = ()
    clips: Optional[Clips] = None
    """None: the config's."""
    dynamic_sampling: bool = False
    kl: Optional[bool] = None
    """False: KL off in the loss and the reward; None: the config's."""


FIELDS = {f.name for f in dataclasses.fields(MethodSpec)} - {"name"}


def _spec(name: str, row: dict) -> MethodSpec:
    row = dict(row)
    if row.get("clips") is not None:
        row["clips"] = Clips(**row["clips"])
    row["transforms"] = tuple(dict(t) for t in row.get("transforms", ()))
    return MethodSpec(name=name, **row)


def load_methods(path: Union[str, Path] = TABLE_PATH) -> dict[str, MethodSpec]:
    """Every row of the table at ``path``, its ``base`` rows resolved, in the file's order."""
    import yaml

    with open(path) as f:
        raw = yaml.safe_load(f)
    resolved: dict[str, dict] = {}

    def resolve(name: str, seen: tuple[str, ...] = ()) -> dict:
        if name in resolved:
            return resolved[name]
        if name not in raw or name in seen:
            raise ValueError(f"{path}: {name!r} is {'a cycle of bases' if name in seen else 'not a method'}")
        row = dict(raw[name])
        unknown = set(row) - FIELDS - {"base"}
        if unknown:
            raise ValueError(f"{path}: {name} has unknown fields {sorted(unknown)}; known: {sorted(FIELDS | {'base'})}")
        base = row.pop("base", None)
        resolved[name] = {**(resolve(base, seen + (name,)) if base else {}), **row}
        return resolved[name]

    return {name: _spec(name, resolve(name)) for name in raw}


METHODS: dict[str, MethodSpec] = load_methods()


def _value(value: Any) -> str:
    """A value in Hydra's override grammar."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_value(v) for v in value) + "]"
    return str(value)


def method(name_or_spec: Union[str, MethodSpec]) -> MethodSpec:
    """The table's row ``name`` (a ``MethodSpec`` passes through)."""
    if isinstance(name_or_spec, MethodSpec):
        return name_or_spec
    if name_or_spec not in METHODS:
        raise KeyError(f"{name_or_spec!r} is not a method of {TABLE_PATH.name}: {sorted(METHODS)}")
    return METHODS[name_or_spec]


def recipe_overrides(name_or_spec: Union[str, MethodSpec]) -> list[str]:
    """The recipe's knobs around the estimator: the clips, dynamic sampling, KL (each only where the row sets it)."""
    m = method(name_or_spec)
    out = []
    if m.clips is not None:
        out += [f"{ACTOR}.clip_ratio_low={_value(m.clips.low)}", f"{ACTOR}.clip_ratio_high={_value(m.clips.high)}",
                f"{ACTOR}.clip_ratio_c={_value(m.clips.c)}"]
    if m.dynamic_sampling:
        out += DYNAMIC_SAMPLING
    if m.kl is False:
        out += NO_KL
    return out


def estimator_overrides(name_or_spec: Union[str, MethodSpec]) -> list[str]:
    """The estimator, its loss and aggregation, its knobs, the policy-loss fields and the transforms."""
    m = method(name_or_spec)
    out = [f"algorithm.adv_estimator={m.estimator}"]
    if m.loss_mode is not None:
        out.append(f"{ACTOR}.policy_loss.loss_mode={m.loss_mode}")
    out.append(f"{ACTOR}.loss_agg_mode={m.loss_agg_mode}")
    out += [f"algorithm.{m.estimator}.{key}={_value(v)}" for key, v in m.knobs.items()]
    out += [f"{ACTOR}.policy_loss.{key}={_value(v)}" for key, v in m.policy_loss.items()]
    if m.transforms:
        out.append(f"algorithm.adv_transforms={_value(list(m.transforms))}")
    return out


def pipeline_overrides(name_or_spec: Union[str, MethodSpec]) -> list[str]:
    """The method's Hydra overrides for the trainer (``gtpo_trainer`` / ``gtpo_trainer_cpu``): distinct keys, so
    their order does not matter; a caller adds its sizes, reward and seed."""
    return recipe_overrides(name_or_spec) + estimator_overrides(name_or_spec)
