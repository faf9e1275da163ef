"""How the package reads config: ``ConfigBlock``, the typed block every ``algorithm.<estimator>`` block
(``plugin/estimators/<estimator>.py``) and the operational ``gtpo.*`` settings (``trainer/settings.py``)
are built on, the typed fields they declare, and the readers they share.

The blocks are the single source of every default. ``gtpo_base.yaml``, the tables of
docs/config.md and the keyword defaults of the pure functions are checked against them, and
``function_kwargs`` is derived from the fields. Config is read one way: ``select`` finds a node,
``<Block>.from_config`` / ``from_dict`` build and validate it.

Every field is checked against its annotation when a block is built: a ``bool`` must be a YAML
boolean (the string ``'false'`` is an error, not true), a ``float`` a finite number (a string is an
error), an ``int`` an integer; the choices and the range of a field are declared once, with the
field (``choice``, ``number``). Each error is one ``ConfigError`` naming the full key, the bad value
and the fix.

No verl import here: this module is imported by the plugin while ``import verl`` runs.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from dataclasses import dataclass
from typing import Any, ClassVar, Optional, Union

# Weights and scales are bounded so that no product of a weight with a score or an entropy share can
# overflow float32 in the group z-scores: |value| ≤ 1e6 keeps every squared deviation below 1e14
# (scores and shares of a few units), summed over the ~10⁶ tokens of a group far below float32's 3.4e38.
WEIGHT_LIMIT = 1e6


class ConfigError(ValueError):
    """One bad config value: ``key`` is its full dotted key; the message names the value and the fix."""

    def __init__(self, key: str, message: str):
        super().__init__(message)
        self.key = key


def to_dict(block: Any, key: str = "config block") -> dict[str, Any]:
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
    raise ConfigError(
        key, f"`{key}={block!r}` is a {_kind(block)}, but `{key}` is a block of keys: set its keys one by one, "
        f"e.g. `{key}.<key>=<value>`."
    )


_SCALARS = (str, bool, int, float, type(None))


def content_key(values: Any) -> Optional[tuple]:
    """A hashable key of a plain config value (``to_dict``'s output), equal only for identical values (same
    keys, types and bits), or None when a leaf is not a YAML scalar (such a value is never cached).

    Every scalar carries its type: ``1``, ``1.0`` and ``True`` are equal in Python but not to a typed field;
    a float is keyed by its bits (``float.hex``: ``-0.0`` is not ``0.0``).
    """
    if isinstance(values, dict):
        items = [(key, content_key(value)) for key, value in values.items()]
        return None if any(item is None for _key, item in items) else ("dict", tuple(sorted(items, key=lambda kv: str(kv[0]))))
    if isinstance(values, (list, tuple)):
        items = [content_key(value) for value in values]
        return None if any(item is None for item in items) else ("list", tuple(items))
    if isinstance(values, float):
        return ("float", values.hex())
    return (type(values).__name__, values) if isinstance(values, _SCALARS) else None


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


# ----------------------------------------------------------------------------- typed fields
@dataclass(frozen=True)
class FieldSpec:
    """What a field accepts beyond its annotation: ``choices`` of a string, the range of a number."""

    choices: Optional[tuple[str, ...]] = None
    ge: Optional[float] = None  # value >= ge
    gt: Optional[float] = None  # value > gt
    le: Optional[float] = None  # value <= le
    lt: Optional[float] = None  # value < lt
    fix: str = ""  # what to set instead, appended to a range error

    def range_text(self) -> str:
        """``"> 1"``, ``">= 0 and <= 1e+06"``: the range as the error states it."""
        parts = [f">= {self.ge:g}" if self.ge is not None else f"> {self.gt:g}" if self.gt is not None else "",
                 f"<= {self.le:g}" if self.le is not None else f"< {self.lt:g}" if self.lt is not None else ""]
        return " and ".join(p for p in parts if p) or "finite"

    def has_range(self) -> bool:
        return (self.ge, self.gt, self.le, self.lt) != (None, None, None, None)

    def in_range(self, value: float) -> bool:
        return not (
            (self.ge is not None and value < self.ge)
            or (self.gt is not None and value <= self.gt)
            or (self.le is not None and value > self.le)
            or (self.lt is not None and value >= self.lt)
        )


_SPEC = "gtpo_field"


def choice(default: Optional[str], choices: tuple[str, ...]) -> Any:
    """A string field that accepts one of ``choices`` (None too when annotated ``Optional``)."""
    return dataclasses.field(default=default, metadata={_SPEC: FieldSpec(choices=tuple(choices))})


def number(default: Any, *, ge=None, gt=None, le=None, lt=None, fix: str = "") -> Any:
    """A numeric field with its range (``ge``/``gt`` below, ``le``/``lt`` above) and the fix a range error gives."""
    return dataclasses.field(default=default, metadata={_SPEC: FieldSpec(ge=ge, gt=gt, le=le, lt=lt, fix=fix)})


def weight(default: float, fix: str) -> Any:
    """A non-negative weight, at most ``WEIGHT_LIMIT`` (beyond it the shaping arithmetic can overflow)."""
    return number(default, ge=0.0, le=WEIGHT_LIMIT, fix=fix)


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, str):
        return "string"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, (list, tuple)):
        return "list"
    if isinstance(value, dict) or hasattr(value, "keys"):
        return "block of keys"
    return type(value).__name__


def _optional(hint: Any) -> tuple[Any, bool]:
    """``(inner, True)`` for ``Optional[inner]``, else ``(hint, False)``."""
    if typing.get_origin(hint) is Union:
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(args) == 1 and len(typing.get_args(hint)) == 2:
            return args[0], True
    return hint, False


def _show(value: Any) -> str:
    return repr(value) if isinstance(value, str) else str(value).lower() if isinstance(value, bool) else str(value)


def check_value(key: str, value: Any, hint: Any, spec: Optional[FieldSpec] = None) -> Any:
    """``value`` as field ``key`` of type ``hint`` takes it (ints as ints, lists as tuples), or a ``ConfigError``."""
    inner, optional = _optional(hint)
    if value is None:
        if optional:
            return None
        raise ConfigError(key, f"`{key}` is null but has no null setting: give it a value (see docs/config.md).")
    if inner is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(
            key, f"`{key}={_show(value)}` must be true or false, not a {_kind(value)}: write `{key}=true` or "
            f"`{key}=false`, unquoted (a quoted 'false' is a string)."
        )
    if inner in (int, float):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            within = f" {spec.range_text()}" if spec and spec.has_range() else ""
            raise ConfigError(
                key, f"`{key}={_show(value)}` must be a number{within}, not a {_kind(value)}: write a plain number, unquoted."
            )
        if not math.isfinite(value):
            raise ConfigError(key, f"`{key}={value}` must be a finite number" + (f", {spec.range_text()}." if spec and spec.has_range() else "."))
        if inner is int:
            if float(value) != int(value):
                raise ConfigError(key, f"`{key}={value}` must be an integer, e.g. `{key}={int(value)}`.")
            value = int(value)
        else:
            value = float(value)
        if spec is not None and not spec.in_range(value):
            raise ConfigError(key, f"`{key}={value}` must be {spec.range_text()}" + (f"; {spec.fix}" if spec.fix else "."))
        return value
    if inner is str:
        if not isinstance(value, str):
            raise ConfigError(key, f"`{key}={_show(value)}` must be a name, not a {_kind(value)}"
                              + (f"; choose one of {list(spec.choices)}." if spec and spec.choices else "."))
        if spec is not None and spec.choices is not None and value not in spec.choices:
            raise ConfigError(key, f"`{key}={value!r}` is not valid; choose one of {list(spec.choices)}.")
        return value
    if typing.get_origin(inner) is tuple:  # tuple[X, ...]: a list of X (a single X is a list of one)
        item = typing.get_args(inner)[0]
        items = to_list(value)
        if not isinstance(items, (list, tuple)):
            items = [items]
        return tuple(check_value(f"{key}[{i}]", v, item, spec) for i, v in enumerate(items))
    return value  # a type with no rule here (a user's knob of its own type): its own __post_init__ checks it


def check_choice(key: str, value: Any, choices: tuple[str, ...]) -> str:
    """``value`` if it is one of ``choices``, else a ``ConfigError`` naming ``key`` and the valid names."""
    return check_value(key, value, str, FieldSpec(choices=tuple(choices)))


def check_entries(cls: type, values: dict[str, Any], prefix: str) -> dict[str, Any]:
    """The entries of a dataclass ``cls`` (keys ``prefix.<field>``) type- and range-checked, before it is built."""
    hints = typing.get_type_hints(cls)
    specs = {f.name: f.metadata.get(_SPEC) for f in dataclasses.fields(cls)}
    return {k: check_value(f"{prefix}.{k}", v, hints.get(k, Any), specs.get(k)) for k, v in values.items()}


def check_fields(instance: Any, prefix: str) -> None:
    """Type- and range-check every field of the dataclass ``instance`` (keys ``prefix.<field>``), in place."""
    hints = typing.get_type_hints(type(instance))
    for f in dataclasses.fields(instance):
        value = getattr(instance, f.name)
        sub = _sub_block(f)
        if sub is not None:
            if not isinstance(value, sub):
                value = sub.from_dict(to_dict(value, f"{prefix}.{f.name}"))
        else:
            value = check_value(f"{prefix}.{f.name}", value, hints[f.name], f.metadata.get(_SPEC))
        object.__setattr__(instance, f.name, value)


def _sub_block(f: dataclasses.Field) -> Optional[type]:
    """The block class of a nested field (declared with ``default_factory=<Block>``), else None."""
    factory = f.default_factory
    if isinstance(factory, type) and issubclass(factory, ConfigBlock):
        return factory
    return None


class ConfigBlock:
    """A typed config block at ``path``: unknown keys are refused, every field is typed, nested blocks too.

    A subclass is a frozen dataclass whose fields declare their type, default, choices and range
    (``choice``, ``number``, ``weight``); ``check`` holds the checks that relate fields. A new
    sub-block is one field: ``audit: AuditConfig = field(default_factory=AuditConfig)`` with
    ``AuditConfig.path = "gtpo.audit"``.
    """

    path: ClassVar[str]
    # fields that configure the block but are not keyword arguments of its pure function
    config_only: ClassVar[tuple[str, ...]] = ()

    def __post_init__(self):
        check_fields(self, self.path)
        self.check()

    def check(self) -> None:
        """Checks that relate several fields (each field alone is already checked); raise ``ConfigError``."""

    @classmethod
    def from_config(cls, config: Any):
        """Read and validate the block from the composed trainer config (missing → defaults)."""
        return cls.from_dict(to_dict(select(config, cls.path), cls.path))

    @classmethod
    def from_algorithm_config(cls, algorithm_config: Any):
        """Read ``algorithm.<name>`` from the ``algorithm`` node (what verl hands an estimator)."""
        _prefix, _, name = cls.path.partition(".")
        return cls.from_dict(to_dict(select(algorithm_config, name), cls.path))

    @classmethod
    def from_dict(cls, values: dict[str, Any]):
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - fields)
        if unknown:
            raise ConfigError(
                f"{cls.path}.{unknown[0]}",
                f"unknown key(s) {[cls.path + '.' + k for k in unknown]}; valid keys of {cls.path}: {sorted(fields)}",
            )
        return cls(**values)

    def key(self, name: str) -> str:
        return f"{self.path}.{name}"

    def function_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of the block's pure function: every field but ``config_only``."""
        return {
            f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in self.config_only
        }

