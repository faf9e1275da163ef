"""The entropy-aware estimator and advantage-transform API (``gtpo_verl.register_*``).

verl 0.9.1 calls a registered advantage estimator with rewards, mask, uids and config only.
An estimator registered here also declares which per-token TransferQueue fields it needs;
the trainer mixin (``trainer/mixin.py``) fetches exactly those fields for the configured
estimator and transforms, in one TransferQueue read, and binds them for verl's own
``_compute_advantage`` (``plugin/context.py``). The wrapper registered in verl's
``ADV_ESTIMATOR_REGISTRY`` hands them to the function as keyword arguments.

An advantage transform runs after any estimator, verl's built-in ``grpo`` and ``gae`` included,
on the advantages verl wrote to TransferQueue (``algorithm.adv_transforms``, in order).

Inputs, by keyword name (the TransferQueue field verl 0.9.1's V1 trainer stores them under):

- ``entropys``: old-policy per-token entropy ``(B, T)`` (field ``entropy``, written by
  ``_compute_old_log_prob``; absent with ``algorithm.rollout_correction.bypass_mode=true``);
- ``responses``: response token ids ``(B, T)`` (field ``responses``, from the rollout);
- ``old_log_probs``: old-policy per-token log-probabilities ``(B, T)`` (field ``old_log_probs``).

Importing this module does not import verl; registering an estimator does.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Optional, Union

import torch

from gtpo_verl.plugin.threads import one_cpu_thread
from gtpo_verl.plugin.config import ConfigError, check_entries, to_dict, to_list
from gtpo_verl.plugin.context import INPUT_FIELDS, bound_estimator_input, record_estimator_output
from gtpo_verl.plugin.finite import check_finite

FLOAT_INPUTS = ("entropys", "old_log_probs")  # checked for NaN/Inf at valid positions before any use
CALLED = "estimator_called"  # key of the context's outputs: the name verl called through its registry

LAUNCH_FIX = (
    "Launch training with `python -m gtpo_verl.main` (trainer.use_v1=true): its trainer fetches the "
    "declared fields from TransferQueue and hands them to the estimator; stock `verl.trainer.main_ppo` does not."
)


def _check_inputs(kind: str, name: str, inputs: Iterable[str]) -> tuple[str, ...]:
    if isinstance(inputs, str):
        inputs = (inputs,)
    inputs = tuple(inputs)
    unknown = [i for i in inputs if i not in INPUT_FIELDS]
    if unknown:
        raise ValueError(f"{kind} {name!r} declares unknown input(s) {unknown}; valid inputs: {sorted(INPUT_FIELDS)}")
    return tuple(dict.fromkeys(inputs))


def fit_width(tensor: torch.Tensor, width: int) -> torch.Tensor:
    """Crop or zero-pad the last dim to ``width`` (TransferQueue fields may be padded to different widths)."""
    if tensor.shape[-1] == width:
        return tensor
    if tensor.shape[-1] > width:
        return tensor[..., :width]
    return torch.nn.functional.pad(tensor, (0, width - tensor.shape[-1]))


def missing_input_error(name: str, owner: str, like: torch.Tensor) -> ValueError:
    """The one error for a declared input that is neither passed nor bound: its TransferQueue field and the fix."""
    return ValueError(
        f"{owner} needs `{name}` (TransferQueue field `{INPUT_FIELDS[name]}`, shape {tuple(like.shape)}), "
        f"which verl does not pass to advantage estimators. {LAUNCH_FIX}"
    )


def resolve_input(name: str, given: Optional[torch.Tensor], owner: str, like: torch.Tensor,
                  required: bool = True) -> Optional[torch.Tensor]:
    """``given``, else the bound input ``name``, aligned to ``like`` ``(B, T)``.

    The one place an input is looked up: a missing required input is ``missing_input_error``;
    a missing optional one is None.
    """
    value = given if given is not None else bound_estimator_input(name)
    if value is None:
        if required:
            raise missing_input_error(name, owner, like)
        return None
    if value.dim() != like.dim() or value.shape[0] != like.shape[0]:
        raise ValueError(
            f"{owner}: `{name}` has shape {tuple(value.shape)} but response_mask has {tuple(like.shape)}; "
            "they must be aligned row for row (same padded response layout)."
        )
    return fit_width(value, like.shape[-1])


# ----------------------------------------------------------------------------- estimators
_ESTIMATOR_INPUTS: dict[str, tuple[str, ...]] = {}


def register_entropy_aware_estimator(
    name: str, inputs: Iterable[str] = ("entropys",), optional: Iterable[str] = (), *, finite_by_construction: bool = False
) -> Callable:
    """Decorator: register ``fn`` in verl's ``ADV_ESTIMATOR_REGISTRY`` as ``name``, with per-token inputs.

    ``fn`` keeps verl's estimator signature (``token_level_rewards``, ``response_mask``, ``index``,
    ``config``, ``**kwargs`` → ``(advantages, returns)``) and takes each declared input as a
    keyword argument ``(B, T)`` aligned with ``response_mask``. Under ``python -m gtpo_verl.main``
    the trainer fetches the declared TransferQueue fields; outside it, the wrapper fails with
    one error naming the missing field. Inputs passed explicitly as keyword arguments win.
    ``optional`` inputs are fetched too but reach ``fn`` as None when absent (``fn`` decides;
    ``missing_input_error`` gives it the same error). Each input is looked up once, here; ``fn``
    receives it aligned and checked.

    A NaN/Inf reward, float input or returned advantage at a valid position raises one
    ``ValueError`` naming the row and its uid (``plugin/finite.py``). ``finite_by_construction``
    declares that ``fn`` itself raises ``ValueError`` on a non-finite float input at a valid
    position and never returns a non-finite advantage (the package's table estimators: their
    passes check as they read): the wrapper then skips those two whole-tensor checks and, when
    ``fn`` raises, runs the input checks to give the same error naming the row and its uid.

    Returns the registered wrapper (call it like the function).
    """
    required = _check_inputs("advantage estimator", name, inputs)
    declared = _check_inputs("advantage estimator", name, (*required, *optional))

    def decorator(fn: Callable) -> Callable:
        from verl.trainer.ppo.core_algos import register_adv_est

        owner = f"advantage estimator {name!r}"

        @functools.wraps(fn)
        def estimator(token_level_rewards, response_mask, index=None, config=None, **kwargs):
            # each declared input resolved once, here: passed, else bound (plugin/context.py), else missing
            for key in declared:
                kwargs[key] = resolve_input(key, kwargs.get(key), owner, response_mask, required=key in required)
            check_finite(token_level_rewards, "score", owner, index)  # anywhere in the row: scores are row sums

            def check_inputs() -> None:
                for key in FLOAT_INPUTS:
                    if kwargs.get(key) is not None:
                        check_finite(kwargs[key], key, owner, index, response_mask)

            if not finite_by_construction:
                check_inputs()
            record_estimator_output(CALLED, name)
            try:
                advantages, returns = fn(
                    token_level_rewards=token_level_rewards, response_mask=response_mask, index=index, config=config,
                    **kwargs,
                )
            except ValueError:
                if finite_by_construction:
                    check_inputs()  # the error naming the row and its uid, where an input was not finite
                raise
            if not finite_by_construction:
                check_finite(advantages, "advantages", owner, index, response_mask)
            return advantages, returns

        estimator.gtpo_inputs = declared
        register_adv_est(name)(estimator)
        _ESTIMATOR_INPUTS[name] = declared
        return estimator

    return decorator


def estimator_inputs(name: str) -> Optional[tuple[str, ...]]:
    """The inputs estimator ``name`` declared, or None for an estimator not registered through this API."""
    return _ESTIMATOR_INPUTS.get(name)


# ----------------------------------------------------------------------------- transforms
@dataclass(frozen=True)
class TransformResult:
    """What a transform returns: new advantages, optionally a narrowed response mask, and metrics.

    ``response_mask`` (``(B, T)``, a subset of the valid tokens) is written back to TransferQueue,
    so verl's loss aggregation counts only those tokens (as verl's own rejection sampling does).
    ``metrics`` keys are logged as ``gtpo/transform/<name>/<key>``.
    """

    advantages: torch.Tensor
    response_mask: Optional[torch.Tensor] = None
    metrics: dict[str, float] = field(default_factory=dict)


class KnobError(ValueError):
    """Raised by a transform's knob dataclass: ``knob`` is the field name, the message says the fix."""

    def __init__(self, knob: str, message: str):
        super().__init__(message)
        self.knob = knob


@dataclass(frozen=True)
class AdvTransform:
    """A registered transform: ``fn(advantages, response_mask, knobs, **inputs)``, its inputs and knob class."""

    name: str
    fn: Callable[..., Any]
    inputs: tuple[str, ...]
    knobs: Optional[type]  # a frozen dataclass, or None for a transform without knobs


_TRANSFORMS: dict[str, AdvTransform] = {}


def register_adv_transform(name: str, inputs: Iterable[str] = (), knobs: Optional[type] = None) -> Callable:
    """Decorator: register an advantage transform ``name`` for ``algorithm.adv_transforms``.

    ``fn(advantages, response_mask, knobs, **inputs)`` receives the estimator's advantages and
    verl's response mask ``(B, T)``, the knob dataclass built from the config entry (None without
    ``knobs``), and each declared input as a keyword argument; it returns new advantages or a
    ``TransformResult``. ``knobs`` is a frozen dataclass whose fields are the entry's keys (besides
    ``name``); its ``__post_init__`` raises ``KnobError(field, message)`` for a bad value.
    """
    declared = _check_inputs("advantage transform", name, inputs)
    if knobs is not None and not dataclasses.is_dataclass(knobs):
        raise TypeError(f"advantage transform {name!r}: knobs must be a dataclass, got {knobs!r}")

    def decorator(fn: Callable) -> Callable:
        existing = _TRANSFORMS.get(name)
        if existing is not None and existing.fn is not fn:
            raise ValueError(f"advantage transform {name!r} is already registered (by {existing.fn.__module__})")
        _TRANSFORMS[name] = AdvTransform(name=name, fn=fn, inputs=declared, knobs=knobs)
        return fn

    return decorator


def registered_transforms() -> dict[str, AdvTransform]:
    return dict(_TRANSFORMS)


def parse_adv_transforms(entries: Any) -> list[tuple[AdvTransform, Any]]:
    """Validate ``algorithm.adv_transforms`` (a list of ``{name: …, <knobs>}``) into ``(transform, knobs)`` pairs.

    One clear error per problem, naming ``algorithm.adv_transforms[i]``.
    """
    if entries is None:
        return []
    entries = to_list(entries)
    if not isinstance(entries, (list, tuple)):
        raise ConfigError(
            "algorithm.adv_transforms",
            f"`algorithm.adv_transforms` must be a list of {{name: ..., <knobs>}} entries, got {entries!r}; "
            "e.g. algorithm.adv_transforms='[{name:entropy_advantage}]'."
        )
    out = []
    for i, raw in enumerate(entries):
        key = f"algorithm.adv_transforms[{i}]"
        try:
            entry = to_dict(raw, key)
        except ConfigError:
            entry = None
        if not isinstance(entry, dict) or "name" not in entry:
            raise ConfigError(key, f"`{key}={raw!r}` needs a `name`; e.g. {{name: high_entropy_tokens, rho: 0.2}}.")
        name = entry.pop("name")
        transform = _TRANSFORMS.get(name) if isinstance(name, str) else None
        if transform is None:
            close = difflib.get_close_matches(str(name), list(_TRANSFORMS), n=1)
            raise ConfigError(
                f"{key}.name",
                f"`{key}.name={name}` is not a registered advantage transform"
                + (f" (did you mean {close[0]!r}?)" if close else "")
                + f"; valid names: {sorted(_TRANSFORMS)}. A transform from your own package registers through its "
                "`verl.plugins` entry point (docs/trainer.md, 'Write your own estimator or transform').",
            )
        fields = {f.name for f in dataclasses.fields(transform.knobs)} if transform.knobs else set()
        unknown = sorted(set(entry) - fields)
        if unknown:
            raise ConfigError(
                f"{key}.{unknown[0]}",
                f"unknown key(s) {[f'{key}.{k}' for k in unknown]} for transform {name!r}; valid keys: {sorted(fields)}.",
            )
        try:
            knobs = transform.knobs(**check_entries(transform.knobs, entry, key)) if transform.knobs else None
        except KnobError as err:
            raise ConfigError(f"{key}.{err.knob}", f"`{key}.{err.knob}={entry.get(err.knob)!r}`: {err}") from None
        out.append((transform, knobs))
    return out


def advantage_input_fields(estimator: str, transforms: list[tuple[AdvTransform, Any]]) -> tuple[str, ...]:
    """The estimator keywords the configured estimator and transforms declared, in declaration order."""
    names = list(estimator_inputs(estimator) or ())
    for transform, _knobs in transforms:
        names += transform.inputs
    return tuple(dict.fromkeys(names))


def apply_adv_transforms(
    transforms: list[tuple[AdvTransform, Any]],
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    inputs: dict[str, torch.Tensor],
    metrics: Optional[dict[str, float]] = None,
    uids: Union[list, Callable[[], list], None] = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Apply ``transforms`` in order; returns ``(advantages, response_mask)`` (the mask narrowed or not).

    On the CPU each runs on one thread, as the estimators do (``plugin/threads.py``). A NaN/Inf
    float input or result at a valid position raises one ``ValueError`` naming the row and its
    uid (``uids``, row-aligned, or a callable that reads them, called only for the message).
    """
    for transform, knobs in transforms:
        owner = f"advantage transform {transform.name!r}"
        kwargs = {k: resolve_input(k, inputs.get(k), owner, response_mask) for k in transform.inputs}
        for key in FLOAT_INPUTS:
            if key in kwargs:
                check_finite(kwargs[key], key, owner, uids, response_mask)
        with torch.no_grad(), one_cpu_thread(advantages):
            result = transform.fn(advantages, response_mask, knobs, **kwargs)
        if isinstance(result, torch.Tensor):
            result = TransformResult(advantages=result)
        if tuple(result.advantages.shape) != tuple(advantages.shape):
            raise ValueError(
                f"advantage transform {transform.name!r} returned shape {tuple(result.advantages.shape)} for "
                f"advantages of shape {tuple(advantages.shape)}"
            )
        advantages = result.advantages.to(advantages.dtype)
        check_finite(advantages, "advantages", owner, uids, response_mask)
        if result.response_mask is not None:
            response_mask = (result.response_mask.bool() & response_mask.bool()).to(response_mask.dtype)
        if metrics is not None:
            prefix = f"gtpo/transform/{transform.name}/"
            metrics.update({prefix + k: float(v) for k, v in result.metrics.items()})
    return advantages, response_mask
