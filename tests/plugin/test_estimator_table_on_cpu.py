"""The estimator table (``plugin/estimators/``) is the one place that knows an estimator: its name is a
literal of its own module only, and the registration, the start-up check, the audit, the lab and the
device check all read its row."""

import ast
import importlib.util
import inspect

import pytest
import torch
from support.paths import REPO_ROOT

from gtpo_verl.plugin.estimators import ESTIMATORS, EstimatorBatch
from gtpo_verl.plugin.losses import LOSS_NAME

PACKAGE = REPO_ROOT / "gtpo_verl"


def _string_literals(path):
    tree = ast.parse(path.read_text())
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef)) and node.body
                  and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    return {node.value for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings}


def test_each_estimator_name_is_a_literal_of_its_own_module_only():
    """Anywhere in the package, the lab and the grpo_s policy loss (which shares its estimator's name)
    included: the name is spelt once, in the estimator's module, and everything else reads the row."""
    where = {name: [] for name in ESTIMATORS}
    for path in sorted(PACKAGE.rglob("*.py")):
        for name in where.keys() & _string_literals(path):
            where[name].append(str(path.relative_to(PACKAGE)))
    assert where == {name: [f"plugin/estimators/{name}.py"] for name in ESTIMATORS}
    assert list(ESTIMATORS) == ["gtpo_token", "grpo_s", "gtpo_traj"]
    assert LOSS_NAME == ESTIMATORS[LOSS_NAME].policy_loss  # the estimator names the loss it pairs with


def test_the_lab_trains_the_rows_it_names():
    from gtpo_verl.lab.methods import METHODS

    assert {m.estimator for m in METHODS.values()} - {"grpo"} == set(ESTIMATORS)
    assert (METHODS["DAPO_SEQ"].loss_mode, METHODS["DAPO_SEQ"].loss_agg_mode) == ("grpo_s", "seq-mean-token-mean")


def test_every_row_is_registered_with_its_declared_inputs_and_checked():
    from verl.trainer.ppo import core_algos

    from gtpo_verl.plugin import registry
    from gtpo_verl.plugin.extensions import estimator_inputs

    for name, row in ESTIMATORS.items():
        adapter = core_algos.get_adv_estimator_fn(name)
        assert estimator_inputs(name) == row.inputs + row.optional, name
        assert adapter.__doc__ == row.summary and adapter.__name__ == f"compute_{name}_advantage"
        assert row.config.path == f"algorithm.{name}"
        assert set(inspect.signature(row.function).parameters) >= {"entropy"} | ({"responses"} & set(row.inputs))
    registry.check_registered()


def test_the_start_up_check_names_a_missing_row(monkeypatch):
    from verl.trainer.ppo import core_algos

    from gtpo_verl.plugin import registry

    monkeypatch.setattr(core_algos, "ADV_ESTIMATOR_REGISTRY", dict(core_algos.ADV_ESTIMATOR_REGISTRY))
    core_algos.ADV_ESTIMATOR_REGISTRY.pop("gtpo_traj")
    with pytest.raises(RuntimeError, match="missing estimator 'gtpo_traj'"):
        registry.check_registered()


def test_the_device_check_times_every_row():
    spec = importlib.util.spec_from_file_location("check_device", REPO_ROOT / "benchmarks" / "check_device.py")
    check_device = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(check_device)
    assert {row for row, _overrides in check_device.CANDIDATES.values()} == set(ESTIMATORS)


def test_run_asks_for_a_missing_input_by_its_field_and_fix():
    mask = torch.ones(2, 3)
    batch = EstimatorBatch(owner="advantage estimator 'x'", response_mask=mask, sequence_scores=torch.tensor([1.0, 0.0]),
                           group_ids=torch.zeros(2, dtype=torch.int64), num_groups=1)
    for name, row in ESTIMATORS.items():
        with pytest.raises(ValueError, match=r"advantage estimator 'x' needs `(entropys|responses)`.*gtpo_verl.main"):
            row.run(row.config(), batch)
