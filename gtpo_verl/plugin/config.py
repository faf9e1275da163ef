"""How the package reads config: ``ConfigBlock``, the typed block every ``algorithm.<estimator>`` block
(``plugin/estimators/<estimator>.py``) and the operational ``gtpo.*`` settings (``trainer/settings.py``)
are built on, and the readers and checks they share.

The blocks are the single source of every default. ``gtpo_base.yaml``, the tables of
docs/config.md and the keyword defaults of the pure functions are checked against them, and
``function_kwargs`` is derived from the fields. Config is read one way: ``select`` finds a node,
``<Block>.from_config`` / ``from_dict`` build and validate it; every error names the full key, the
bad value and the fix.

No verl import here: this module is imported by the plugin while ``import verl`` runs.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, ClassVar, Optional


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


def check_v6_failure_shaping(block: ConfigBlock, weight: str) -> None:
    """Refuse ``variant=unified_v6`` without ``negative_shaping`` (Paper B's two blocks, weights α or β)."""
    if block.variant == "unified_v6" and not block.negative_shaping:
        raise ValueError(
            f"`{block.key('variant')}=unified_v6` needs `{block.key('negative_shaping')}=true`: v6 gives failures "
            f"−{weight}1 − {weight}2·share (docs/spec.md B.6, B.7); without the shaping every failure would get the "
            f"constant −{weight}1. Set {block.key('negative_shaping')}=true."
        )
