"""gtpo_verl: entropy-aware credit assignment for verl.

- ``gtpo_verl.algorithms``: the papers' equations as pure, vectorised torch functions.
- ``gtpo_verl.integration``: verl registration, config blocks, trainer integration.

Docs: docs/algorithms.md. Importing this package imports neither verl nor the registry.
"""

__version__ = "0.1.0"
