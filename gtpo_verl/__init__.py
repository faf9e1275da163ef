"""gtpo_verl: entropy-aware credit assignment for verl.

- ``gtpo_verl.algorithms``: the papers' equations as pure, vectorised torch functions.
- ``gtpo_verl.plugin``: what ``import verl`` loads in every process (registration, the estimator
  table, losses, transforms, config blocks); ``gtpo_verl.trainer``: the driver / TaskRunner side;
  ``gtpo_verl.tools``: the command-line tools.
- ``gtpo_verl.register_entropy_aware_estimator`` / ``gtpo_verl.register_adv_transform``: the
  decorators for your own estimators and transforms (docs/trainer.md).

Docs: docs/algorithms.md. Importing this package imports neither verl nor the registry.
"""

__version__ = "0.1.0"

_PUBLIC_API = {
    "register_entropy_aware_estimator": "gtpo_verl.plugin.extensions",
    "register_adv_transform": "gtpo_verl.plugin.extensions",
    "TransformResult": "gtpo_verl.plugin.extensions",
    "KnobError": "gtpo_verl.plugin.extensions",
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
