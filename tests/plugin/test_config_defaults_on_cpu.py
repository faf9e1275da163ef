"""One source per default: the config dataclasses against gtpo_base.yaml, the pure functions'
keyword defaults and the tables of docs/config.md; shared vocabularies against the modules
that use them."""

import dataclasses
import inspect
import math
import re
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from gtpo_verl.algorithms import choices
from gtpo_verl.algorithms.sequence_shaping import grpo_s_advantage, sequence_importance_ratio
from gtpo_verl.algorithms.kernels.gtpo_token import gtpo_token_advantage
from gtpo_verl.algorithms.trajectory import gtpo_traj_advantage
from gtpo_verl.plugin.config import _sub_block
from gtpo_verl.plugin.estimators import ALGORITHM_BLOCKS
from gtpo_verl.plugin.estimators.grpo_s import GRPOSConfig
from gtpo_verl.plugin.estimators.gtpo_token import GTPOTokenConfig
from gtpo_verl.plugin.estimators.gtpo_traj import TRAJ_PRESETS, GTPOTrajConfig
from gtpo_verl.trainer.settings import GTPOSettings
from support.paths import REPO_ROOT

CONFIG_BLOCKS = (*ALGORITHM_BLOCKS, GTPOSettings)  # every typed block (sub-blocks through their parent)

ROOT = REPO_ROOT
BASE_YAML = ROOT / "gtpo_verl" / "config" / "gtpo_base.yaml"
CONFIG_DOC = ROOT / "docs" / "config.md"

PURE_FUNCTIONS = {GTPOTokenConfig: gtpo_token_advantage, GRPOSConfig: grpo_s_advantage, GTPOTrajConfig: gtpo_traj_advantage}
# keyword arguments of the pure functions that are call options or the batch's per-token inputs, not config
CALL_OPTIONS = {gtpo_token_advantage: {"empty"}, grpo_s_advantage: {"empty"}, gtpo_traj_advantage: {"empty"}}
TENSOR_INPUTS = {"entropy", "responses"}


def _flat_defaults(cls, prefix=""):
    """``{"a.b": default}`` for every leaf field of a block and its sub-blocks."""
    out = {}
    for f in dataclasses.fields(cls):
        sub = _sub_block(f)
        if sub is not None:
            out.update(_flat_defaults(sub, f"{prefix}{f.name}."))
        else:  # a tuple default is a YAML list
            out[prefix + f.name] = list(f.default) if isinstance(f.default, tuple) else f.default
    return out


def _flat_yaml(node, prefix=""):
    out = {}
    for key, value in node.items():
        if isinstance(value, dict):
            out.update(_flat_yaml(value, f"{prefix}{key}."))
        else:
            out[prefix + key] = value
    return out


@pytest.mark.parametrize("cls", CONFIG_BLOCKS, ids=lambda c: c.path)
def test_yaml_lists_every_field_with_the_dataclass_default(cls):
    yaml = OmegaConf.to_container(OmegaConf.load(BASE_YAML), resolve=True)
    node = yaml
    for part in cls.path.split("."):
        node = node[part]
    assert _flat_yaml(node) == _flat_defaults(cls)


def test_yaml_policy_loss_knob_matches_its_dataclass_and_the_pure_function():
    pytest.importorskip("verl")
    from gtpo_verl.plugin.loss_config import GTPOPolicyLossConfig

    yaml = OmegaConf.load(BASE_YAML)
    default = {f.name: f.default for f in dataclasses.fields(GTPOPolicyLossConfig)}["sequence_ratio_mean"]
    assert yaml.actor_rollout_ref.actor.policy_loss.sequence_ratio_mean == default
    assert inspect.signature(sequence_importance_ratio).parameters["mean"].default == default


@pytest.mark.parametrize("cls", list(PURE_FUNCTIONS), ids=lambda c: c.path)
def test_every_field_is_a_keyword_of_the_pure_function_with_the_same_default(cls):
    function = PURE_FUNCTIONS[cls]
    params = inspect.signature(function).parameters
    keywords = {n for n, p in params.items() if p.kind is inspect.Parameter.KEYWORD_ONLY}
    fields = {f.name: f for f in dataclasses.fields(cls) if f.name not in cls.config_only}
    # the two sets are equal: a field the function does not take would be lost, a keyword
    # without a field could not be configured
    assert set(fields) == keywords - CALL_OPTIONS[function] - TENSOR_INPUTS
    official = TRAJ_PRESETS["official"] if cls is GTPOTrajConfig else {}
    for name, f in fields.items():
        function_default = params[name].default
        if function_default is inspect.Parameter.empty:
            continue  # required by the function (α1, α2, β1, β2): the config's default is the only one
        expected = official.get(name, f.default)  # preset-controlled fields: None = the official preset
        assert function_default == expected, f"{function.__name__}({name}={function_default!r}) vs config {expected!r}"


def test_function_kwargs_are_the_fields():
    token = GTPOTokenConfig()
    assert token.function_kwargs() == {f.name: getattr(token, f.name) for f in dataclasses.fields(token)}
    seq = GRPOSConfig(success_share="geometric", sequence_entropy="geometric")
    assert seq.function_kwargs()["success_share"] == "geometric"
    assert seq.function_kwargs()["sequence_entropy"] == "geometric"
    traj = GTPOTrajConfig(preset="paper", entropy_filter_scope="neg_only", initial_entropy=0.5)
    kwargs = traj.function_kwargs()
    assert "preset" not in kwargs and "ini_entropy_gate" not in kwargs
    assert kwargs["entropy_threshold"] == pytest.approx(math.log(2)) and kwargs["initial_entropy"] == 0.5
    assert kwargs["overlap"] == "union" and kwargs["divisor"] == "none" and kwargs["norm_adv_by_std"] is True
    assert GTPOTrajConfig(entropy_filter_scope="none").function_kwargs()["entropy_threshold"] is None


def _doc_sections():
    """``{section heading: {key: default cell}}`` from the tables of docs/config.md."""
    sections, current = {}, None
    for line in CONFIG_DOC.read_text().splitlines():
        heading = re.match(r"^## `([^`]+)`", line)
        if heading:
            current = sections.setdefault(heading.group(1), {})
            continue
        row = re.match(r"^\| `([a-z0-9_.]+)` \| ([^|]+) \|", line)
        if row and current is not None:
            current[row.group(1)] = row.group(2).strip()
    return sections


def _doc_value(value):
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f"`{value}`"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(str(v) for v in value) + "]"
    if isinstance(value, float) and value != 0 and abs(value) < 1e-3:
        return f"{value:g}".replace("e-06", "e-6")
    return repr(value)


@pytest.mark.parametrize("cls", CONFIG_BLOCKS, ids=lambda c: c.path)
def test_docs_table_lists_every_field_with_the_dataclass_default(cls):
    table = _doc_sections()[cls.path]
    defaults = _flat_defaults(cls)
    assert set(table) == set(defaults)
    for key, default in defaults.items():
        preset_controlled = cls is GTPOTrajConfig and key in TRAJ_PRESETS["official"]
        expected = "*preset*" if preset_controlled else _doc_value(default)
        assert table[key] == expected, f"docs/config.md {cls.path}.{key}: {table[key]!r} vs {expected!r}"


def test_docs_presets_match_the_preset_table():
    rows = {}
    for line in CONFIG_DOC.read_text().splitlines():
        row = re.match(r"^\| `([a-z_]+)` \| \*preset\* \| ([^|]+) \| ([^|]+) \|", line)
        if row:
            rows[row.group(1)] = (row.group(2).strip(), row.group(3).strip())
    assert set(rows) == set(TRAJ_PRESETS["official"])
    for key, (official, paper) in rows.items():
        for cell, value in ((official, TRAJ_PRESETS["official"][key]), (paper, TRAJ_PRESETS["paper"][key])):
            expected = "ln 2" if value == math.log(2) else _doc_value(value).strip("`")
            assert cell.strip("`") == expected, (key, cell, expected)


def test_vocabularies_have_one_definition():
    """Every module that names a vocabulary agrees with ``choices``; the config blocks import it."""
    from gtpo_verl.algorithms import normalization, sequence_shaping, token_shaping, trajectory
    from gtpo_verl.plugin.estimators import grpo_s, gtpo_token, gtpo_traj

    blocks = (gtpo_token, grpo_s, gtpo_traj)
    shared = {n: v for n, v in vars(choices).items() if n.isupper()}
    for module in (*blocks, normalization, sequence_shaping, token_shaping, trajectory):
        for name, value in vars(module).items():
            if name in shared:
                assert value == shared[name], f"{module.__name__}.{name} = {value!r} differs from choices.{name}"
                if module in blocks:
                    assert value is shared[name]


def test_typed_gtpo_block_refuses_unknown_keys_with_the_full_key():
    settings = GTPOSettings.from_config(OmegaConf.create({"gtpo": {"entropy_warning": {"ratio": 2.0}}}))
    assert settings.entropy_warning.ratio == 2.0 and settings.diagnostics is True
    assert GTPOSettings.from_config(OmegaConf.create({})) == GTPOSettings()
    with pytest.raises(ValueError, match=r"unknown key.*gtpo\.entropy_warning\.rati\b"):
        GTPOSettings.from_config({"gtpo": {"entropy_warning": {"rati": 2.0}}})
    with pytest.raises(ValueError, match=r"gtpo\.entropy_warning\.momentum=1\.0"):
        GTPOSettings.from_config({"gtpo": {"entropy_warning": {"momentum": 1.0}}})


def _transform_doc_tables():
    """``{transform: {key: default cell}}`` from the ``### `name``` tables under algorithm.adv_transforms."""
    tables, current = {}, None
    for line in CONFIG_DOC.read_text().splitlines():
        heading = re.match(r"^### `([a-z_]+)`", line)
        if heading:
            current = tables.setdefault(heading.group(1), {})
            continue
        if line.startswith("## "):
            current = None
        row = re.match(r"^\| `([a-z_]+)` \| ([^|]+) \|", line)
        if row and current is not None:
            current[row.group(1)] = row.group(2).strip()
    return tables


def test_adv_transforms_default_and_docs_tables_match_the_knob_dataclasses():
    pytest.importorskip("verl")
    from gtpo_verl.algorithms.entropy_baselines import entropy_advantage_bonus, high_entropy_token_mask
    from gtpo_verl.plugin.transforms import TRANSFORM_KNOBS

    yaml = OmegaConf.to_container(OmegaConf.load(BASE_YAML), resolve=True)
    assert yaml["algorithm"]["adv_transforms"] == []
    tables = _transform_doc_tables()
    for name, knobs in TRANSFORM_KNOBS.items():
        defaults = {f.name: f.default for f in dataclasses.fields(knobs)}
        assert tables[name] == {k: _doc_value(v) for k, v in defaults.items()}, name
    # the pure functions' defaults are the knobs' defaults (the papers' values)
    assert inspect.signature(high_entropy_token_mask).parameters["rho"].default == TRANSFORM_KNOBS["high_entropy_tokens"]().rho
    bonus = inspect.signature(entropy_advantage_bonus).parameters
    knobs = TRANSFORM_KNOBS["entropy_advantage"]()
    assert (bonus["alpha"].default, bonus["kappa"].default) == (knobs.alpha, knobs.kappa)
