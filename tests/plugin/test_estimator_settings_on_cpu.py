"""The estimator adapter verl calls parses its ``algorithm.<name>`` block once per run, never a stale one.

Reached as verl reaches it, through ``get_adv_estimator_fn``; the parser is the block's real
``from_dict``, counted by a wrapper that calls it.
"""

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from verl.trainer.ppo.core_algos import get_adv_estimator_fn

from gtpo_verl.plugin.config import ConfigError, content_key
from gtpo_verl.plugin.context import bind_estimator_inputs
from gtpo_verl.plugin.estimators.gtpo_token import GTPOTokenConfig


def _batch():
    g = torch.Generator().manual_seed(0)
    rows, width = 8, 5
    mask = torch.ones(rows, width, dtype=torch.int64)
    rewards = torch.zeros(rows, width)
    rewards[:, -1] = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0, 0.0])
    entropy = torch.rand(rows, width, generator=g)
    uids = np.array([f"u{i // 4}" for i in range(rows)], dtype=object)
    return rewards, mask, uids, entropy


@pytest.fixture
def parses(monkeypatch):
    """Every block ``GTPOTokenConfig.from_dict`` builds, in order (the real parser runs)."""
    built = []
    parse = GTPOTokenConfig.from_dict.__func__

    def counted(cls, values):
        block = parse(cls, values)
        built.append(block)
        return block

    monkeypatch.setattr(GTPOTokenConfig, "from_dict", classmethod(counted))
    return built


def _call(config):
    """One call through verl's registry; the block the estimator ran with."""
    rewards, mask, uids, entropy = _batch()
    with bind_estimator_inputs() as outputs:
        advantages, _ = get_adv_estimator_fn("gtpo_token")(rewards, mask, index=uids, config=config, entropys=entropy)
    return outputs["gtpo_token"].block, advantages


def test_the_same_config_is_parsed_once(parses):
    config = OmegaConf.create({"adv_estimator": "gtpo_token", "gtpo_token": {"alpha1": 0.9, "alpha2": 0.37}})
    first, a = _call(config)
    second, b = _call(config)
    third, _ = _call(OmegaConf.create(OmegaConf.to_container(config)))  # another object, the same content
    assert len(parses) == 1 and first is second is third
    assert first.alpha2 == 0.37 and torch.equal(a, b)


def test_a_changed_config_gives_the_new_settings(parses):
    config = OmegaConf.create({"gtpo_token": {"alpha1": 0.9, "alpha2": 0.41}})
    before, a = _call(config)
    config.gtpo_token.alpha2 = 0.2  # the same object, changed in place
    after, b = _call(config)
    assert len(parses) == 2 and (before.alpha2, after.alpha2) == (0.41, 0.2)
    assert not torch.equal(a, b)
    config.gtpo_token.entropy_share = "geometric"
    assert _call(config)[0].entropy_share == "geometric" and len(parses) == 3


def test_a_value_equal_in_python_but_of_another_type_is_parsed_again(parses):
    config = OmegaConf.create({"gtpo_token": {"alpha1": 0.9, "alpha2": 1.0}})
    _call(config)
    config.gtpo_token.alpha2 = True  # == 1.0 in Python, but not a number to the typed field
    with pytest.raises(ConfigError, match="gtpo_token.alpha2=true"):
        _call(config)
    assert len(parses) == 1  # the refused value built no block


def test_content_key_tells_apart_what_python_calls_equal():
    assert content_key({"a": 1}) != content_key({"a": 1.0}) != content_key({"a": True})
    assert content_key({"a": 0.0}) != content_key({"a": -0.0})
    assert content_key({"a": [1, "x"], "b": None}) == content_key({"b": None, "a": [1, "x"]})
    assert content_key({"a": object()}) is None  # not a YAML scalar: never cached
