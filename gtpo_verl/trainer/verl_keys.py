"""verl's own keys, typed before Ray starts: a string where verl's dataclass declares a number, a quoted
``'false'`` where it declares a bool, is one clear error here instead of a crash (or a silent
misreading) inside a worker.

verl 0.9.1 declares its config sections as dataclasses (the ``_target_`` of each node: the actor,
rollout, optimizer, algorithm, reward, …) but does not check values against the declared types. This
walks the composed config and checks every set value of a declared ``bool``, ``int``, ``float`` or
``str`` field (``Optional`` too) against its annotation, through the same checker as gtpo_verl's own
blocks. A null is left to verl (its annotations are not strict about ``Optional``). The two
sections verl keeps untyped, ``trainer`` and ``data``, are checked for the keys the package and its
recipes read (``UNTYPED``).
"""

from __future__ import annotations

import dataclasses
import importlib
import math
import typing
from typing import Any, Optional

from gtpo_verl.plugin.config import ConfigError, FieldSpec, check_value

_SIMPLE = (bool, int, float, str)

# keys of verl's untyped sections that the package and its recipes rely on: (type, range or choices)
UNTYPED: dict[str, tuple[Any, Optional[FieldSpec]]] = {
    "trainer.total_epochs": (int, FieldSpec(ge=1)),
    "trainer.total_training_steps": (Optional[int], FieldSpec(ge=1)),
    "trainer.save_freq": (int, None),
    "trainer.test_freq": (int, None),
    "trainer.nnodes": (int, FieldSpec(ge=1)),
    "trainer.n_gpus_per_node": (int, FieldSpec(ge=1)),
    "trainer.resume_mode": (str, FieldSpec(choices=("auto", "disable", "resume_path"))),
    "trainer.val_before_train": (bool, None),
    "trainer.max_actor_ckpt_to_keep": (Optional[int], FieldSpec(ge=1)),
    "data.max_prompt_length": (int, FieldSpec(ge=1)),
    "data.max_response_length": (int, FieldSpec(ge=1)),
    "trainer.device": (str, FieldSpec(choices=("cuda", "npu", "cpu"))),
    # typed by verl, but without the range its use needs
    "actor_rollout_ref.actor.ppo_epochs": (int, FieldSpec(ge=1)),
    "actor_rollout_ref.rollout.temperature": (float, FieldSpec(gt=0.0, fix="verl divides the logits by it for the "
                                                                          "old-policy entropy; 1.0 in the papers.")),
    "actor_rollout_ref.rollout.val_kwargs.n": (int, FieldSpec(ge=1)),
    # the aggregations verl 0.9.1's ActorConfig accepts (it raises without naming the key)
    "actor_rollout_ref.actor.loss_agg_mode": (str, FieldSpec(choices=(
        "token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"))),
}


def _simple(hint: Any) -> Optional[type]:
    """The bool/int/float/str a hint declares (through Optional), else None (not checked here)."""
    if typing.get_origin(hint) is typing.Union:
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        hint = args[0] if len(args) == 1 else None
    return hint if hint in _SIMPLE else None


def _dataclass(target: Any) -> Optional[type]:
    if not isinstance(target, str) or not target.startswith(("verl.", "gtpo_verl.")):
        return None
    module, _, name = target.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        return None
    return cls if dataclasses.is_dataclass(cls) else None


def _hints(cls: Optional[type]) -> dict[str, Any]:
    if cls is None:
        return {}
    try:
        return typing.get_type_hints(cls)
    except Exception:  # an annotation that does not resolve in this process: leave the section to verl
        return {}


def _walk(node, path: str, cls: Optional[type]) -> None:
    from omegaconf import DictConfig, OmegaConf

    cls = _dataclass(node.get("_target_", None)) or cls
    hints = _hints(cls)
    for key in node.keys():
        if key == "_target_" or OmegaConf.is_missing(node, key) or OmegaConf.is_interpolation(node, key):
            continue  # an interpolation is checked where its value is set
        try:
            value = node[key]
        except Exception:  # an interpolation that needs what is not set yet: verl reports it
            continue
        hint = hints.get(key)
        full = f"{path}.{key}" if path else str(key)
        if isinstance(value, DictConfig):
            sub = hint if isinstance(hint, type) and dataclasses.is_dataclass(hint) else None
            _walk(value, full, sub)
            continue
        kind = _simple(hint)
        if kind is None or value is None:
            continue
        if kind is float and isinstance(value, float) and math.isinf(value):
            continue  # verl uses inf for "no limit" in places
        check_value(full, value, kind)


def check_verl_keys(config: Any) -> None:
    """Raise one ``ConfigError`` for the first value of a typed verl key that is not of its declared type."""
    from gtpo_verl.plugin.config import select

    _walk(config, "", None)
    for key, (hint, spec) in UNTYPED.items():
        value = select(config, key)
        if value is not None or typing.get_origin(hint) is not typing.Union:
            check_value(key, value, hint, spec)
    _check_loggers(select(config, "trainer.logger"))


def _check_loggers(value: Any) -> None:
    """``trainer.logger``: each backend one verl's ``Tracking`` supports (it asserts that only in ``fit``)."""
    from verl.utils.tracking import Tracking

    from gtpo_verl.plugin.config import to_list

    names = [value] if isinstance(value, str) else to_list(value)
    if names is None:
        return
    if not isinstance(names, (list, tuple)):
        raise ConfigError("trainer.logger", f"`trainer.logger={value!r}` must be a list of backends, e.g. '[console,file]'.")
    supported = list(Tracking.supported_backend)
    for name in names:
        if name not in supported:
            raise ConfigError(
                "trainer.logger", f"`trainer.logger` names {name!r}, which verl's Tracking does not support; choose from {supported}."
            )


