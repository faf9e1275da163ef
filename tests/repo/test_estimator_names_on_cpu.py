"""The package's Python spells our estimators' names (``gtpo_token``, ``grpo_s``, ``gtpo_traj``) only in
each estimator's own module (``gtpo_verl/plugin/estimators/``); everywhere else it imports the module's
name constant, so that renaming an estimator is one edit. Docstrings and comments may name them, YAML
files are data (the method table spells them), and a file named after an estimator (``kernels/gtpo_token.py``)
is a file name, not the estimator's."""

import ast
import re

from support.paths import REPO_ROOT

PACKAGE = REPO_ROOT / "gtpo_verl"
ESTIMATORS = PACKAGE / "plugin" / "estimators"
NAME = re.compile(r"(?<!\w)(gtpo_token|grpo_s|gtpo_traj)(?!\w|\.py\b)")
# torch-free modules that gtpo-report and gtpo-dashboard import: the estimator modules import torch, so these
# spell the config keys of their fix hints themselves
TORCH_FREE = {"trainer/health_checks.py"}


def _docstrings(tree: ast.AST) -> set[int]:
    """Every string that is a statement of its own: module, class, function and attribute docstrings."""
    return {id(node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)}


def spelled_names(path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    skip = _docstrings(tree)
    return [f"{path.relative_to(PACKAGE)}:{node.lineno}: {node.value!r}" for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip
            and NAME.search(node.value)]


def test_no_estimator_name_outside_its_module():
    found = [hit for path in sorted(PACKAGE.rglob("*.py")) if ESTIMATORS not in path.parents
             and str(path.relative_to(PACKAGE)) not in TORCH_FREE for hit in spelled_names(path)]
    assert not found, "\n".join(found)


def test_the_scan_sees_names():
    """The scan finds a name in a string, an f-string and a config key, and skips docstrings and identifiers."""
    source = ('"""gtpo_token in a docstring."""\n'
              'A = "algorithm.gtpo_traj.preset"\nB = f"{A}: grpo_s"\nC = "gtpo_token_advantage_reference"\n'
              'D = "kernels/gtpo_token.py"\n')
    tree = ast.parse(source)
    skip = _docstrings(tree)
    hits = [node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and id(node) not in skip and NAME.search(node.value)]
    assert hits == ["algorithm.gtpo_traj.preset", ": grpo_s"]
    assert all(spelled_names(PACKAGE / path) for path in TORCH_FREE)  # each exemption still needs to be one
