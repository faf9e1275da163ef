"""gtpo_verl: entropy-aware credit assignment for verl.

- ``gtpo_verl.algorithms``: the papers' equations as pure, vectorised torch functions.
- ``gtpo_verl.integration``: verl registration, config blocks, trainer integration.
- ``gtpo_verl.register_entropy_aware_estimator`` / ``gtpo_verl.register_adv_transform``: the
  decorators for your own estimators and transforms (docs/trainer.md).

Docs: docs/algorithms.md. Importing this package imports neither verl nor the registry.
"""

__version__ = "0.1.0"

_PUBLIC_API = {
    "register_entropy_aware_estimator": "gtpo_verl.integration.extensions",
    "register_adv_transform": "gtpo_verl.integration.extensions",
    "TransformResult": "gtpo_verl.integration.extensions",
    "KnobError": "gtpo_verl.integration.extensions",
}


def __getattr__(name: str):
    """Resolve the public API on first use (keeps ``import gtpo_verl`` free of verl)."""
    module = _PUBLIC_API.get(name)
    if module is None:
        raise AttributeError(f"module 'gtpo_verl' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)


def __dir__():
    return sorted(list(globals()) + list(_PUBLIC_API))
