"""``gtpo_verl/verl_surface.py``: the list of verl names gtpo_verl uses is complete, every name is in the
installed verl 0.9.1, both checks (installed and source tree) fail when a name goes, and a verl without
the V1 trainer or TransferQueue stops ``python -m gtpo_verl.main`` with one line before Ray starts."""

import ast
import os
import shutil
import sys
from pathlib import Path

import pytest

import gtpo_verl
from gtpo_verl import verl_surface
from gtpo_verl.verl_surface import KINDS, SURFACE, check_installed, check_source

PACKAGE = Path(gtpo_verl.__file__).parent
VERL_ROOTS = ("verl", "transfer_queue")


def installed_verl_tree() -> Path:
    import verl

    return Path(verl.__file__).parent


def copy_of_verl(tmp_path: Path) -> Path:
    """The installed verl's sources (``.py`` and configs), to edit."""
    target = tmp_path / "verl"
    shutil.copytree(installed_verl_tree(), target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.so"))
    return target


def delete_definition(path: Path, class_name: str, member: str = "") -> None:
    """Remove ``class_name`` (or its method ``member``) from the file at ``path``."""
    lines = path.read_text().splitlines(keepends=True)
    cls = next(n for n in ast.parse("".join(lines)).body if isinstance(n, ast.ClassDef) and n.name == class_name)
    node = cls if not member else next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == member)
    first = min([node.lineno] + [d.lineno for d in node.decorator_list])
    path.write_text("".join(lines[: first - 1] + lines[node.end_lineno:]))


def listed() -> set:
    return {(s.module, s.name) for s in SURFACE}


# ------------------------------------------------------------------ (a) the installed verl has every name
def test_the_list_is_well_formed():
    assert all(s.kind in KINDS and s.used_in and s.piece for s in SURFACE)
    assert len({(s.module, s.name, s.kind) for s in SURFACE}) == len(SURFACE)  # no name twice
    assert all((PACKAGE / s.used_in).is_file() for s in SURFACE), [s.used_in for s in SURFACE if not (PACKAGE / s.used_in).is_file()]
    assert len(verl_surface.__file__ and open(verl_surface.__file__).readlines()) < 450


def test_every_listed_name_is_in_the_installed_verl():
    import verl

    assert verl.__version__ == "0.9.1"
    assert check_installed() == []


def test_the_source_checker_agrees_on_the_installed_tree():
    assert check_source(str(installed_verl_tree())) == []


# ------------------------------------------------------------------ (b) the checks fail when a name goes
def test_the_source_checker_finds_a_deleted_method(tmp_path, capsys):
    tree = copy_of_verl(tmp_path)
    delete_definition(tree / "trainer" / "ppo" / "v1" / "trainer_base.py", "PPOTrainer", "_compute_advantage")
    missing = check_source(str(tree))
    assert [m.symbol.path for m in missing] == ["verl.trainer.ppo.v1.trainer_base.PPOTrainer._compute_advantage"]
    assert verl_surface.main(["--source", str(tmp_path)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("missing: verl.trainer.ppo.v1.trainer_base.PPOTrainer._compute_advantage (method,")
    assert out[-1].startswith("1 of ") and len(out) == 2


def test_the_source_checker_finds_a_deleted_task_runner_and_requirement(tmp_path):
    tree = copy_of_verl(tmp_path)
    delete_definition(tree / "trainer" / "main_ppo.py", "TaskRunnerV1")
    (tmp_path / "requirements.txt").write_text("torch\nray[default]\n")  # a checkout whose packaging dropped TransferQueue
    missing = {m.symbol.path for m in check_source(str(tmp_path))}
    assert missing == {"verl.trainer.main_ppo.TaskRunnerV1", "verl.trainer.main_ppo.TaskRunnerV1.run",
                       "verl.trainer.main_ppo.TaskRunnerV1.__ray_actor_class__",
                       "TransferQueue (a requirement of verl)"}
    (tmp_path / "requirements.txt").write_text("TransferQueue>=0.1.10\n")
    assert "TransferQueue (a requirement of verl)" not in {m.symbol.path for m in check_source(str(tmp_path))}


def test_the_installed_check_finds_a_removed_method_and_a_missing_package(monkeypatch):
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    monkeypatch.delattr(PPOTrainer, "_val_metrics_update")
    monkeypatch.setitem(sys.modules, "transfer_queue", None)  # not installed
    missing = {m.symbol.path for m in check_installed()}
    assert "verl.trainer.ppo.v1.trainer_base.PPOTrainer._val_metrics_update" in missing
    assert {"transfer_queue", "transfer_queue.kv_batch_get", "transfer_queue.KVBatchMeta.tags"} <= missing
    assert "verl.trainer.ppo.v1.trainer_base.PPOTrainer.fit" not in missing


# ------------------------------------------------------------------ (c) the list is complete
def _verl_uses(path: Path) -> list[tuple[str, str]]:
    """(module, name) of each verl / TransferQueue name the file imports, and of ``alias.attr`` on an
    imported verl module or class (``core_algos.X``, ``tq.kv_batch_get``, ``Tracking.supported_backend``)."""
    uses, aliases = [], {}
    tree = ast.parse(path.read_text())
    modules = {s.module for s in SURFACE if s.kind == "module"}
    classes = {(s.module, s.name) for s in SURFACE if s.kind == "class"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] in VERL_ROOTS:
                    uses.append((a.name, ""))
                    aliases[a.asname or a.name] = (a.name, "")
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] in VERL_ROOTS:
            for a in node.names:
                submodule = f"{node.module}.{a.name}"
                uses.append((submodule, "") if submodule in modules else (node.module, a.name))
                aliases[a.asname or a.name] = uses[-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
            module, name = aliases[node.value.id]
            if (name and (module, name) not in classes) or node.attr.startswith("__") and node.attr != "__ray_actor_class__":
                continue  # a registry's .get, a module's __file__
            uses.append((module, f"{name}.{node.attr}" if name else node.attr))
    return uses


def test_every_verl_name_the_package_imports_is_listed():
    found = {}
    for path in PACKAGE.rglob("*.py"):
        if path.name != "verl_surface.py":
            for use in _verl_uses(path):
                found.setdefault(use, str(path.relative_to(PACKAGE)))
    assert ("verl.trainer.main_ppo", "TaskRunnerV1.__ray_actor_class__") in found  # the scan sees attribute uses
    assert ("transfer_queue", "kv_batch_put") in found
    assert {use: where for use, where in found.items() if use not in listed()} == {}


def test_every_trainer_method_the_mixin_overrides_is_listed():
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    from gtpo_verl.trainer.mixin import GTPOTrainerMixin

    overridden = {name for name in vars(GTPOTrainerMixin) if hasattr(PPOTrainer, name) and not name.startswith("__")}
    assert {"_compute_advantage", "fit", "on_init_end"} <= overridden
    assert {("verl.trainer.ppo.v1.trainer_base", f"PPOTrainer.{name}") for name in overridden} <= listed()


def _attributes_read(path: Path, variable: str, parameter: bool = False) -> set:
    """``variable.attr`` and ``getattr(variable, "attr", ...)`` in the file at ``path`` (with ``parameter``: only
    in functions whose first parameter is ``variable``)."""
    tree = ast.parse(path.read_text())
    roots = [f for f in ast.walk(tree) if isinstance(f, ast.FunctionDef) and f.args.args
             and f.args.args[0].arg == variable] if parameter else [tree]
    nodes = [n for root in roots for n in ast.walk(root)]
    return {n.attr for n in nodes if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == variable} | {
        n.args[1].value for n in nodes if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "getattr"
        and isinstance(n.args[0], ast.Name) and n.args[0].id == variable and isinstance(n.args[1], ast.Constant)}


def test_every_verl_attribute_the_trainer_side_reads_is_listed():
    from gtpo_verl.trainer.mixin import GTPOTrainerMixin

    trainer = PACKAGE / "trainer"
    own = set(dir(GTPOTrainerMixin)) | {"__dict__", "__class__"}
    on_self = {a for a in _attributes_read(trainer / "mixin.py", "self") if a not in own and not a.startswith("_gtpo")}
    on_trainer = set().union(*(_attributes_read(trainer / f, "trainer", parameter=True)  # the PPOTrainer passed in
                               for f in ("watchdog.py", "audit_dump.py", "probe.py")))
    assert {"config", "global_steps"} <= on_self and {"replay_buffer", "llm_server_manager"} <= on_trainer
    assert {("verl.trainer.ppo.v1.trainer_base", f"PPOTrainer.{a}") for a in on_self | on_trainer} <= listed()
    on_buffer = _attributes_read(trainer / "watchdog.py", "buffer")
    assert {"sample", "_wait_for_next_poll", "pending_keys"} <= on_buffer
    assert {("verl.trainer.ppo.v1.replay_buffer", f"ReplayBuffer.{a}") for a in on_buffer} <= listed()
    on_batch = set().union(*(_attributes_read(trainer / f, "batch") for f in ("mixin.py", "fields.py", "audit_dump.py")))
    assert {"keys", "partition_id", "tags"} == on_batch
    assert {("transfer_queue", f"KVBatchMeta.{a}") for a in on_batch} <= listed()


# ------------------------------------------------------------------ start-up: one line, before Ray
@pytest.fixture
def entry_point(monkeypatch):
    """``python -m gtpo_verl.main``'s body, in-process, on the package's config; training must not start."""
    from support.bad_inputs import BASE
    from support.hydra import compose_gtpo

    import gtpo_verl.main as entry

    def no_training(config):
        raise AssertionError("training started")

    monkeypatch.setattr(entry, "_train", no_training)
    config = compose_gtpo(*BASE, "gtpo.dry_run=true")
    return lambda: entry.main.__wrapped__(config)


@pytest.mark.parametrize("remove,piece,name", [
    ("task_runner", "the V1 trainer", "verl.trainer.main_ppo.TaskRunnerV1"),
    ("transfer_queue", "TransferQueue", "transfer_queue"),
])
def test_a_verl_without_a_piece_is_one_line_at_start_up(entry_point, monkeypatch, capsys, remove, piece, name):
    import ray
    import verl.trainer.main_ppo

    if remove == "task_runner":
        monkeypatch.delattr(verl.trainer.main_ppo, "TaskRunnerV1")
    else:
        monkeypatch.setitem(sys.modules, "transfer_queue", None)
    with pytest.raises(SystemExit) as exited:
        entry_point()
    assert exited.value.code == 1
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and captured.out == "", captured
    assert lines[0].startswith("gtpo_verl: verl 0.9.1 at ") and f"lacks {piece} ({name}" in lines[0]
    assert "gtpo_verl supports verl 0.9.1 only" in lines[0] and "pip install 'verl[verl-core]==0.9.1'" in lines[0]
    assert not ray.is_initialized()


def test_the_installed_verl_passes_the_start_up_check():
    assert verl_surface.check_startup() is None
    assert {s.piece for s in SURFACE if s.required} >= {"the V1 trainer", "TransferQueue"}
