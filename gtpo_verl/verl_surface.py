"""verl's surface: every verl module, class, function, method and attribute gtpo_verl uses, in one list.

``SURFACE`` is data: one ``Symbol`` per name (its module, its name there, its kind, the file of
gtpo_verl that uses it, whether a training run needs it at start-up, and the piece of verl it
belongs to). Two checks read it:

- ``check_installed()``: against the verl this process imports (import + getattr; an instance
  attribute is found where its class, or a base, assigns ``self.<name>``). ``python -m
  gtpo_verl.main`` runs it on the ``required`` symbols before anything else (``check_startup``): a
  verl without the V1 trainer or TransferQueue is one line naming the missing piece, before Ray.
- ``check_source(root)``: against a verl source tree, without importing it (``ast``): the module file
  exists, the class or function is defined (or imported) there, a method is defined in the class
  or a base class found in the tree, an attribute is assigned there; a requirement is named in the
  checkout's requirements.txt / pyproject.toml / setup.py. TransferQueue's own names (a separate
  package) are not checked there; that verl still requires it, and that its V1 trainer still hands
  over TransferQueue's ``KVBatchMeta``, are.

    python -m gtpo_verl.verl_surface                 # the installed verl
    python -m gtpo_verl.verl_surface --source PATH   # a verl checkout (PATH/verl/ or PATH itself)

prints one line per missing symbol and exits 1 if any is missing. Standard library only at import.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import importlib.metadata
import inspect
import os
import sys
import textwrap
from typing import Iterable, Optional

KINDS = ("module", "class", "function", "method", "attribute", "file", "requirement")
PACKAGING = ("requirements.txt", "pyproject.toml", "setup.py", "setup.cfg")  # where verl names its requirements
V1, TQ = "the V1 trainer", "TransferQueue"


@dataclasses.dataclass(frozen=True)
class Symbol:
    module: str  # the module (or package, for a file) it lives in
    name: str  # "" for the module itself; "Class.member" for a method or a class attribute
    kind: str  # one of KINDS; a requirement: a distribution verl's packaging names (``name``)
    used_in: str  # the gtpo_verl file that uses it
    required: bool  # a training run needs it: checked at start-up
    piece: str  # the part of verl it belongs to, as the start-up line names it

    @property
    def path(self) -> str:
        if self.kind == "requirement":
            return f"{self.name} (a requirement of {self.module})"
        return f"{self.module}.{self.name}" if self.name else self.module


def _group(module: str, kind: str, used_in: str, required: bool, piece: str, *names: str) -> list[Symbol]:
    return [Symbol(module, name, kind, used_in, required, piece) for name in (names or ("",))]


_TB, _RB, _CA = "verl.trainer.ppo.v1.trainer_base", "verl.trainer.ppo.v1.replay_buffer", "verl.trainer.ppo.core_algos"
_PM, _WC = "verl.plugin.platform.platform_manager", "verl.workers.config"
SURFACE: list[Symbol] = [
    # the V1 trainer: the entry point, the TaskRunner subclassed, the trainer the mixin overrides
    *_group("verl", "module", "trainer/validation.py", True, "verl's plugin loading"),
    *_group("verl.trainer.main_ppo", "module", "main.py", True, V1),
    *_group("verl.trainer.main_ppo", "function", "main.py", True, V1, "run_ppo"),
    *_group("verl.trainer.main_ppo", "class", "trainer/mixin.py", True, V1, "TaskRunnerV1"),
    *_group("verl.trainer.main_ppo", "attribute", "trainer/mixin.py", True, V1, "TaskRunnerV1.__ray_actor_class__"),
    *_group("verl.trainer.main_ppo", "method", "trainer/mixin.py", True, V1, "TaskRunnerV1.run"),
    *_group(_TB, "module", "trainer/mixin.py", True, V1),
    *_group(_TB, "attribute", "trainer/mixin.py", True, V1, "TRAINER_REGISTRY"),
    *_group(_TB, "function", "trainer/mixin.py", True, V1, "get_trainer_cls"),  # reads the registry at call time
    *_group(_TB, "class", "trainer/mixin.py", True, V1, "PPOTrainer"),
    *_group(_TB, "method", "trainer/mixin.py", True, V1, "PPOTrainer.on_init_end", "PPOTrainer._compute_advantage",
            "PPOTrainer._val_metrics_update", "PPOTrainer._save_checkpoint", "PPOTrainer._load_checkpoint",
            "PPOTrainer.fit"),
    *_group(_TB, "attribute", "trainer/mixin.py", True, V1, "PPOTrainer.config", "PPOTrainer.global_steps"),
    *_group(_TB, "attribute", "trainer/watchdog.py", True, V1, "PPOTrainer.replay_buffer"),
    *_group(_TB, "attribute", "trainer/watchdog.py", False, V1, "PPOTrainer.llm_server_manager"),
    # the replay buffer and the load balancer: the generation watchdog (gtpo.watchdog, off by default)
    *_group(_RB, "class", "trainer/watchdog.py", False, V1, "ReplayBuffer"),
    *_group(_RB, "method", "trainer/watchdog.py", False, V1, "ReplayBuffer.sample", "ReplayBuffer._wait_for_next_poll"),
    *_group(_RB, "attribute", "trainer/watchdog.py", False, V1, "ReplayBuffer.pending_keys", "ReplayBuffer.running_keys",
            "ReplayBuffer.finished_keys", "ReplayBuffer.failure_keys", "ReplayBuffer.partitions",
            "ReplayBuffer.prompt_global_steps"),
    *_group("verl.workers.rollout.llm_server", "attribute", "trainer/watchdog.py", False, V1,
            "LLMServerManager.global_load_balancer"),
    *_group("verl.workers.rollout.router", "method", "trainer/watchdog.py", False, V1,
            "GlobalRequestLoadBalancer.get_status"),
    *_group("verl.workers.utils.padding", "function", "trainer/mixin.py", True, V1, "response_to_nested"),
    # TransferQueue: the batch store the V1 trainer reads and writes (a package of its own)
    *_group(_TB, "class", "trainer/mixin.py", True, TQ, "KVBatchMeta"),  # what verl's trainer hands over
    *_group("verl", "requirement", "trainer/mixin.py", False, TQ, "TransferQueue"),  # verl still installs it
    *_group("transfer_queue", "module", "trainer/mixin.py", True, TQ),
    *_group("transfer_queue", "function", "trainer/mixin.py", True, TQ, "kv_batch_get", "kv_batch_put"),
    *_group("transfer_queue", "class", "trainer/fields.py", True, TQ, "KVBatchMeta"),
    *_group("transfer_queue", "attribute", "trainer/fields.py", True, TQ, "KVBatchMeta.keys",
            "KVBatchMeta.partition_id", "KVBatchMeta.tags"),
    # the registries and the loss: the plugin (plugin/registry.py, extensions.py, losses.py)
    *_group(_CA, "module", "plugin/registry.py", True, "core_algos"),
    *_group(_CA, "attribute", "plugin/registry.py", True, "core_algos", "ADV_ESTIMATOR_REGISTRY", "POLICY_LOSS_REGISTRY"),
    *_group(_CA, "function", "plugin/extensions.py", True, "core_algos", "register_adv_est"),
    *_group(_CA, "function", "plugin/losses.py", True, "core_algos", "register_policy_loss", "agg_loss"),
    *_group(_WC, "module", "plugin/loss_config.py", True, "the worker configs"),
    *_group(_WC, "class", "plugin/loss_config.py", True, "the worker configs", "PolicyLossConfig"),
    *_group(_WC, "attribute", "plugin/losses.py", False, "the worker configs", "ActorConfig.clip_ratio",
            "ActorConfig.clip_ratio_low", "ActorConfig.clip_ratio_high", "ActorConfig.global_batch_info"),
    # the start-up checks (trainer/validation.py, derive.py, verl_keys.py) and the metric file
    *_group("verl.trainer.config", "module", "config/gtpo_trainer.yaml", True, "verl's config"),
    *_group("verl.trainer.config", "file", "config/gtpo_trainer.yaml", True, "verl's config", "ppo_trainer.yaml"),
    *_group("verl.trainer.ppo.utils", "function", "trainer/validation.py", True, "the start-up checks",
            "need_critic", "need_reference_policy"),
    *_group("verl.utils.config", "function", "trainer/validation.py", True, "the start-up checks", "validate_config"),
    *_group("verl.utils.checkpoint.checkpoint_manager", "function", "trainer/validation.py", True,
            "the start-up checks", "find_latest_ckpt_path"),
    *_group("verl.utils.device", "function", "trainer/derive.py", True, "the start-up checks", "auto_set_device"),
    *_group("verl.utils.tracking", "module", "trainer/metrics_file.py", True, "the metric file"),
    *_group("verl.utils.tracking", "class", "trainer/verl_keys.py", True, "the metric file", "Tracking"),
    *_group("verl.utils.tracking", "attribute", "trainer/verl_keys.py", True, "the metric file",
            "Tracking.supported_backend"),
    *_group("verl.utils.tracking", "class", "trainer/metrics_file.py", True, "the metric file", "FileLogger"),
    *_group("verl.utils.tracking", "method", "trainer/metrics_file.py", True, "the metric file", "FileLogger.log"),
    *_group("verl.utils.tracking", "attribute", "trainer/metrics_file.py", True, "the metric file", "FileLogger.fp"),
    # CPU mode (trainer.device=cpu): the platform registry
    *_group("verl.plugin.platform", "module", "cpu/platform.py", False, "the platform registry"),
    *_group("verl.plugin.platform.platform_base", "class", "cpu/platform.py", False, "the platform registry",
            "PlatformBase"),
    *_group(_PM, "module", "cpu/platform.py", False, "the platform registry"),
    *_group(_PM, "class", "cpu/platform.py", False, "the platform registry", "PlatformRegistry"),
    *_group(_PM, "method", "cpu/platform.py", False, "the platform registry", "PlatformRegistry.register"),
    *_group(_PM, "function", "cpu/platform.py", False, "the platform registry", "set_platform"),
    # the tools (gtpo-preflight) and the lab
    *_group("verl.trainer.constants_ppo", "function", "tools/cluster_probe.py", False, "the preflight",
            "get_ppo_ray_runtime_env"),
    *_group("verl.trainer.ppo", "module", "lab/update.py", False, "core_algos"),
    *_group(_CA, "function", "lab/update.py", False, "core_algos", "get_policy_loss_fn", "get_adv_estimator_fn",
            "compute_grpo_outcome_advantage"),
    *_group(_WC, "class", "lab/update.py", False, "the worker configs", "ActorConfig"),
    *_group(_WC, "attribute", "lab/update.py", False, "the worker configs", "ActorConfig.loss_scale_factor",
            "ActorConfig.policy_loss", "ActorConfig.loss_agg_mode"),
    *_group("verl.utils.torch_functional", "function", "lab/policy.py", False, "the lab",
            "entropy_from_logits", "logprobs_from_logits"),
]


@dataclasses.dataclass(frozen=True)
class Missing:
    symbol: Symbol
    why: str

    def line(self) -> str:
        s = self.symbol
        when = "required at start-up" if s.required else "optional"
        return f"missing: {s.path} ({s.kind}, {s.piece}; gtpo_verl/{s.used_in}; {when}): {self.why}"


# ------------------------------------------------------------------ the class body (both checks)
def _self_assigns(cls_node: ast.ClassDef, name: str) -> bool:
    """``name`` is a class-body field, a property, or assigned as ``self.<name>`` in a method."""
    for stmt in cls_node.body:
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target] if isinstance(stmt, ast.AnnAssign) else []
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            return True
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name == name:
            return True  # a property, or a method read as an attribute
    for node in ast.walk(cls_node):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, (ast.AnnAssign, ast.AugAssign)) else []
        for t in targets:
            if isinstance(t, ast.Attribute) and t.attr == name and isinstance(t.value, ast.Name) and t.value.id == "self":
                return True
    return False


def _is_ray_actor(cls_node: ast.ClassDef) -> bool:
    """Decorated ``@ray.remote`` (or ``@ray.remote(...)``): Ray gives it ``__ray_actor_class__``."""
    for d in cls_node.decorator_list:
        d = d.func if isinstance(d, ast.Call) else d
        if isinstance(d, ast.Attribute) and d.attr == "remote" or isinstance(d, ast.Name) and d.id == "remote":
            return True
    return False


def _class_node(cls: type) -> Optional[ast.ClassDef]:
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    except (OSError, TypeError, SyntaxError):
        return None
    return next((n for n in tree.body if isinstance(n, ast.ClassDef)), None)


# ------------------------------------------------------------------ the installed verl
def _check_one_installed(symbol: Symbol) -> Optional[str]:
    """Why ``symbol`` is missing from what this process imports, or None."""
    try:
        module = importlib.import_module(symbol.module)
    except Exception as exc:  # ImportError, or a module that fails while importing
        return f"cannot import {symbol.module} ({type(exc).__name__}: {exc})"
    if symbol.kind == "module":
        return None
    if symbol.kind == "requirement":
        import re

        try:
            requires = importlib.metadata.requires(symbol.module) or []
        except importlib.metadata.PackageNotFoundError:
            return f"no installed distribution {symbol.module}"
        names = {re.split(r"[\s;<>=!~\[@(]", r, maxsplit=1)[0].lower() for r in requires}
        return None if symbol.name.lower() in names else f"{symbol.module}'s requirements do not name {symbol.name}"
    if symbol.kind == "file":
        folder = os.path.dirname(getattr(module, "__file__", "") or "")
        return None if os.path.isfile(os.path.join(folder, symbol.name)) else f"no {symbol.name} in {folder}"
    owner, _, member = symbol.name.rpartition(".")
    target = module
    for part in owner.split(".") if owner else []:
        if not hasattr(target, part):
            return f"{symbol.module} has no {part}"
        target = getattr(target, part)
    if not owner:
        return None if hasattr(module, member) else f"{symbol.module} has no {member}"
    if hasattr(target, member):
        return None
    cls = getattr(target, "__ray_actor_class__", target)  # a @ray.remote class: its methods live on the class
    if hasattr(cls, member):
        return None
    if symbol.kind == "attribute" and inspect.isclass(cls):
        if dataclasses.is_dataclass(cls) and member in {f.name for f in dataclasses.fields(cls)}:
            return None
        for base in cls.__mro__:
            node = _class_node(base)
            if node is not None and _self_assigns(node, member):
                return None
    return f"{owner} has no {member}"


def check_installed(symbols: Iterable[Symbol] = SURFACE) -> list[Missing]:
    """The symbols missing from the installed verl (and TransferQueue), in list order."""
    return [Missing(s, why) for s in symbols if (why := _check_one_installed(s)) is not None]


# ------------------------------------------------------------------ a verl source tree
class SourceTree:
    """A verl checkout read with ``ast``: ``root`` holds the ``verl/`` package."""

    def __init__(self, root: str):
        root = os.path.abspath(root)
        if os.path.basename(root) == "verl" and os.path.isfile(os.path.join(root, "__init__.py")):
            root = os.path.dirname(root)
        if not os.path.isfile(os.path.join(root, "verl", "__init__.py")):
            raise FileNotFoundError(f"{root} holds no verl/__init__.py: give a verl checkout or its verl/ folder")
        self.root, self._parsed = root, {}

    def file(self, module: str) -> Optional[str]:
        base = os.path.join(self.root, *module.split("."))
        for path in (base + ".py", os.path.join(base, "__init__.py")):
            if os.path.isfile(path):
                return path
        return None

    def parse(self, module: str) -> Optional[ast.Module]:
        if module not in self._parsed:
            path = self.file(module)
            self._parsed[module] = ast.parse(open(path, encoding="utf-8").read(), path) if path else None
        return self._parsed[module]

    @staticmethod
    def _top(body: list) -> Iterable[ast.stmt]:
        """Module-level statements, through ``if`` / ``try`` blocks."""
        for stmt in body:
            yield stmt
            if isinstance(stmt, ast.If):
                yield from SourceTree._top(stmt.body + stmt.orelse)
            elif isinstance(stmt, ast.Try):
                yield from SourceTree._top(stmt.body + stmt.orelse + stmt.finalbody + [s for h in stmt.handlers for s in h.body])

    def _absolute(self, module: str, node: ast.ImportFrom) -> str:
        if not node.level:
            return node.module or ""
        package = module if self.file(module) and self.file(module).endswith("__init__.py") else module.rpartition(".")[0]
        for _ in range(node.level - 1):
            package = package.rpartition(".")[0]
        return f"{package}.{node.module}" if node.module else package

    def binding(self, module: str, name: str, seen: Optional[set] = None):
        """What ``name`` is at ``module``'s top level: ``(module, ClassDef/FunctionDef/stmt)`` where it is
        defined, ``(None, None)`` when imported from outside verl's tree, or None when not there."""
        seen = set() if seen is None else seen
        if (module, name) in seen or (tree := self.parse(module)) is None:
            return None
        seen.add((module, name))
        for stmt in self._top(tree.body):
            if isinstance(stmt, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name == name:
                return module, stmt
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target] if isinstance(stmt, ast.AnnAssign) else []
            if any(isinstance(t, ast.Name) and t.id == name for t in targets) or any(
                    isinstance(t, ast.Tuple) and any(isinstance(e, ast.Name) and e.id == name for e in t.elts) for t in targets):
                return module, stmt
            if isinstance(stmt, ast.Import) and any((a.asname or a.name.split(".")[0]) == name for a in stmt.names):
                return None, None
            if isinstance(stmt, ast.ImportFrom):
                source = self._absolute(module, stmt)
                for alias in stmt.names:
                    if alias.name == "*" and source.split(".")[0] == "verl":
                        found = self.binding(source, name, seen)
                        if found is not None:
                            return found
                    elif (alias.asname or alias.name) == name:
                        if source.split(".")[0] != "verl":
                            return None, None
                        if self.file(f"{source}.{alias.name}"):
                            return f"{source}.{alias.name}", None  # a submodule
                        return self.binding(source, alias.name, seen)
        if self.file(f"{module}.{name}"):
            return f"{module}.{name}", None  # a submodule, reachable as an attribute once imported
        return None

    def class_node(self, module: str, name: str):
        found = self.binding(module, name)
        return found if found and isinstance(found[1], ast.ClassDef) else None

    def _bases(self, module: str, node: ast.ClassDef) -> Iterable[tuple]:
        for base in node.bases:
            if isinstance(base, ast.Name) and (found := self.class_node(module, base.id)):
                yield found
            elif isinstance(base, ast.Attribute) and isinstance(base.value, ast.Name):
                holder = self.binding(module, base.value.id)  # module.Class
                if holder and holder[0] and holder[1] is None and (found := self.class_node(holder[0], base.attr)):
                    yield found

    def has_member(self, module: str, node: ast.ClassDef, member: str, kind: str, depth: int = 0) -> bool:
        if kind == "method":
            here = any(isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)) and s.name == member for s in node.body)
        else:
            here = _self_assigns(node, member) or (member == "__ray_actor_class__" and _is_ray_actor(node))
        return here or (depth < 20 and any(self.has_member(m, n, member, kind, depth + 1) for m, n in self._bases(module, node)))

    def packaging(self) -> list[str]:
        """verl's packaging files at the checkout root (none when given the bare ``verl/`` folder)."""
        return [p for p in (os.path.join(self.root, name) for name in PACKAGING) if os.path.isfile(p)]

    def checkable(self, symbol: Symbol) -> bool:
        """In verl's tree (a requirement: where the checkout's packaging files are there to read)."""
        return symbol.module.split(".")[0] == "verl" and (symbol.kind != "requirement" or bool(self.packaging()))

    def why_missing(self, symbol: Symbol) -> Optional[str]:
        if symbol.kind == "requirement":
            import re

            pattern = re.compile(rf"(?<![\w-]){re.escape(symbol.name)}(?![\w-])", re.IGNORECASE)
            found = any(pattern.search(open(p, encoding="utf-8").read()) for p in self.packaging())
            return None if found else f"none of {', '.join(map(os.path.basename, self.packaging()))} names {symbol.name}"
        if self.file(symbol.module) is None:
            return f"no module {symbol.module} (no {symbol.module.replace('.', '/')}.py or package)"
        if symbol.kind == "module":
            return None
        if symbol.kind == "file":
            folder = os.path.dirname(self.file(symbol.module))
            return None if os.path.isfile(os.path.join(folder, symbol.name)) else f"no file {symbol.name}"
        owner, _, member = symbol.name.rpartition(".")
        if not owner:
            found = self.binding(symbol.module, member)
            if found is None:
                return f"{symbol.module} does not define {member}"
            if symbol.kind == "class" and found[1] is not None and not isinstance(found[1], (ast.ClassDef, ast.Assign)):
                return f"{symbol.module}.{member} is not a class"
            return None
        cls = self.class_node(symbol.module, owner)
        if cls is None:
            return f"{symbol.module} defines no class {owner}"
        if not self.has_member(*cls, member, symbol.kind):
            what = "defines no method" if symbol.kind == "method" else "never assigns"
            return f"{owner} (or a base class in the tree) {what} {member}"
        return None


def check_source(root: str, symbols: Iterable[Symbol] = SURFACE) -> list[Missing]:
    """The symbols missing from the verl source tree at ``root`` (those it cannot check skipped)."""
    tree = SourceTree(root)
    return [Missing(s, why) for s in symbols if tree.checkable(s) and (why := tree.why_missing(s)) is not None]


# ------------------------------------------------------------------ start-up
class UnsupportedVerl(RuntimeError):
    """The installed verl lacks a piece a training run needs; ``str()`` is the one start-up line."""


def supported_verl() -> tuple[str, str]:
    """(version, install command) from the package's verl pin (``config/REQUIRED_VERL.txt``)."""
    from gtpo_verl.tools.required_verl import PIN_FILE, read_fields, required_verl

    text = open(os.path.join(os.path.dirname(__file__), "config", PIN_FILE), encoding="utf-8").read()
    return required_verl(text)[0], read_fields(text)["PIP_INSTALL"]


def startup_line(missing: list[Missing]) -> str:
    """One line naming each missing piece (and its first missing names) and the supported verl."""
    pieces: dict[str, list[str]] = {}
    for m in missing:
        pieces.setdefault(m.symbol.piece, []).append(m.symbol.path)
    named = "; ".join(f"{piece} ({', '.join(paths[:3])}{f' and {len(paths) - 3} more' if len(paths) > 3 else ''})"
                      for piece, paths in pieces.items())
    try:
        import verl

        found = f"verl {getattr(verl, '__version__', '?')} at {os.path.dirname(verl.__file__)}"
    except Exception:
        found = "the installed verl"
    version, install = supported_verl()
    return (f"{found} lacks {named}: gtpo_verl supports verl {version} only "
            f"(gtpo_verl/config/REQUIRED_VERL.txt); install it: {install}")


def check_startup() -> None:
    """Raise ``UnsupportedVerl`` (one line) unless every ``required`` symbol is in the installed verl."""
    missing = check_installed([s for s in SURFACE if s.required])
    if missing:
        raise UnsupportedVerl(startup_line(missing))


def main(argv: Optional[list[str]] = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m gtpo_verl.verl_surface", description=__doc__.split("\n")[0])
    parser.add_argument("--source", metavar="PATH", help="a verl source tree (checkout root or its verl/ folder), "
                        "read without importing it; default: the installed verl")
    args = parser.parse_args(argv)
    if args.source:
        try:
            missing = check_source(args.source)
        except FileNotFoundError as err:
            print(f"gtpo_verl.verl_surface: {err}", file=sys.stderr)
            return 2
        tree = SourceTree(args.source)
        checked = [s for s in SURFACE if tree.checkable(s)]
        where = f"{tree.root} ({len(SURFACE) - len(checked)} outside verl's tree not checked)"
    else:
        missing, checked, where = check_installed(), SURFACE, "the installed verl"
    for m in missing:
        print(m.line())
    print(f"{len(missing)} of {len(checked)} listed symbols missing in {where}")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
