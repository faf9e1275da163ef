"""One calling convention across the pure functions: the per-token inputs are keyword-only."""

import importlib
import inspect
import pkgutil

import gtpo_verl.algorithms as algorithms

PER_TOKEN_INPUTS = ("entropy", "responses")


def _public_functions():
    for info in pkgutil.walk_packages(algorithms.__path__, "gtpo_verl.algorithms."):
        module = importlib.import_module(info.name)
        for name, fn in vars(module).items():
            if inspect.isfunction(fn) and fn.__module__ == module.__name__ and not name.startswith("_"):
                yield f"{module.__name__}.{name}", inspect.signature(fn).parameters


def test_entropy_and_responses_are_keyword_only_in_every_public_function():
    seen, positional = set(), []
    for where, params in _public_functions():
        for name in PER_TOKEN_INPUTS:
            if name in params:
                seen.add(where)
                if params[name].kind is not inspect.Parameter.KEYWORD_ONLY:
                    positional.append(f"{where}({name})")
    assert not positional
    # the estimators' and the baselines' entry points are among those checked
    assert {
        "gtpo_verl.algorithms.kernels.gtpo_token.gtpo_token_advantage",
        "gtpo_verl.algorithms.token_shaping.gtpo_token_advantage_reference",
        "gtpo_verl.algorithms.sequence_shaping.grpo_s_advantage",
        "gtpo_verl.algorithms.trajectory.gtpo_traj_advantage",
        "gtpo_verl.algorithms.entropy_baselines.high_entropy_token_mask",
        "gtpo_verl.algorithms.entropy_baselines.entropy_advantage_bonus",
    } <= seen


def test_the_readable_twin_takes_the_fused_forms_arguments():
    """The twin repeats the fused form's signature on purpose (each reads alone); this keeps them one."""
    from gtpo_verl.algorithms.kernels.gtpo_token import gtpo_token_advantage
    from gtpo_verl.algorithms.token_shaping import gtpo_token_advantage_reference

    fused = dict(inspect.signature(gtpo_token_advantage).parameters)
    twin = dict(inspect.signature(gtpo_token_advantage_reference).parameters)
    assert [(p.name, p.kind, p.default) for p in fused.values()] == [(p.name, p.kind, p.default) for p in twin.values()]
