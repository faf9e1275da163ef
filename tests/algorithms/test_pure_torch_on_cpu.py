"""The equations folder is pure torch: no module of ``gtpo_verl/algorithms`` imports ctypes, verl, Ray or Hydra.

Read from the source (``ast``), so an import inside a function counts as well; memory policy
(huge pages through libc) lives in the plugin (``plugin/memory.py``).
"""

import ast
from pathlib import Path

import gtpo_verl.algorithms as algorithms

ALGORITHMS = Path(algorithms.__file__).parent
FORBIDDEN = {"ctypes", "verl", "ray", "hydra", "omegaconf"}


def imported_top_level_modules(source: str) -> set[str]:
    """The top-level names of every module ``source`` imports (``import a.b`` and ``from a.b import c`` give ``a``)."""
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_the_scan_sees_every_form_of_import():
    source = "import ctypes\nfrom ctypes import CDLL\ndef f():\n    import verl.trainer\n    from ray import get\n"
    assert imported_top_level_modules(source) == {"ctypes", "verl", "ray"}
    assert imported_top_level_modules("from . import groups\nimport torch\n") == {"torch"}


def test_no_module_of_the_algorithms_package_imports_ctypes_verl_ray_or_hydra():
    files = sorted(ALGORITHMS.rglob("*.py"))
    assert {"blocks.py", "token_shaping.py", "gtpo_token.py"} <= {f.name for f in files}  # kernels/ included
    bad = {str(f.relative_to(ALGORITHMS)): sorted(imported_top_level_modules(f.read_text()) & FORBIDDEN) for f in files}
    assert not {name: found for name, found in bad.items() if found}
