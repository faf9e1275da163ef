"""Every bad config ends in one clear error naming its key, before Ray or any worker starts.

The catalogue (``support/bad_inputs.py``) is written from docs/config.md: each key of gtpo_verl's
blocks with every bad value of its kind (strings, quoted booleans, NaN/Inf, out of range,
overflowing magnitudes, wrong types), whole blocks set to scalars, unknown keys, settings that
only fail together, misspelled estimator and loss names, batch shapes the group estimators cannot
use, and advantage-transform knobs. Each goes through ``check_training_config``, exactly what
``python -m gtpo_verl.main`` (and ``gtpo.dry_run=true``, and ``gtpo-preflight``) runs before Ray.
"""

import dataclasses
import math

import pytest
from omegaconf import OmegaConf

from gtpo_verl.plugin.config import ConfigError, _sub_block
from gtpo_verl.plugin.estimators import ALGORITHM_BLOCKS
from gtpo_verl.trainer.settings import GTPOSettings
from gtpo_verl.trainer.validation import check_training_config
from support.bad_inputs import BASE, KEYS, all_cases
from support.hydra import compose_gtpo, with_overrides


@pytest.fixture(scope="module")
def base():
    return compose_gtpo(*BASE, config_name="gtpo_trainer_cpu")


def _leaf_keys(cls, prefix):
    keys = []
    for f in dataclasses.fields(cls):
        sub = _sub_block(f)
        keys += _leaf_keys(sub, f"{prefix}.{f.name}") if sub else [f"{prefix}.{f.name}"]
    return keys


def test_the_catalogue_lists_every_key_of_every_block():
    keys = [k for cls in (*ALGORITHM_BLOCKS, GTPOSettings) for k in _leaf_keys(cls, cls.path)]
    keys.append("actor_rollout_ref.actor.policy_loss.sequence_ratio_mean")
    assert sorted(keys) == sorted(KEYS)


def test_the_base_config_is_valid(base):
    check_training_config(base)
    for estimator in ("grpo", "gtpo_token", "grpo_s", "gtpo_traj"):
        check_training_config(with_overrides(base, f"algorithm.adv_estimator={estimator}"))


def test_the_fast_override_path_matches_hydra_composition(base):
    for overrides in (("algorithm.gtpo_token.alpha2='0.9'",), ("gtpo.watchdog.generation_timeout_s=nan",),
                      ("+algorithm.gtpo_token.alpha3=1", "gtpo.audit.steps=[2]")):
        fast, composed = with_overrides(base, *overrides), compose_gtpo(*BASE, *overrides, config_name="gtpo_trainer_cpu")
        assert OmegaConf.to_yaml(fast) == OmegaConf.to_yaml(composed)  # as text: NaN equals itself there


@pytest.mark.parametrize("overrides,key", all_cases(), ids=lambda v: " ".join(v) if isinstance(v, tuple) else v)
def test_one_clear_error_naming_the_key(base, overrides, key):
    config = with_overrides(base, *overrides)
    with pytest.raises(ValueError) as caught:
        check_training_config(config)
    message = str(caught.value)
    assert f"`{key}" in message or f"{key}" in message.split(":")[0], message
    assert "\n" not in message.strip() and len(message) < 1200, message
    assert isinstance(caught.value, ConfigError), type(caught.value)


def test_the_overflow_bound_holds_with_extreme_batches():
    """At the weight bound (1e6) and with scores and entropies far beyond real ones, advantages stay finite."""
    import torch

    from gtpo_verl.plugin.config import WEIGHT_LIMIT
    from gtpo_verl.plugin.estimators import ESTIMATORS, EstimatorBatch

    g, groups, width = 16, 4, 512
    torch.manual_seed(0)
    mask = torch.ones(g * groups, width)
    mask[::3, width // 2 :] = 0
    batch = EstimatorBatch(
        owner="test", response_mask=mask, sequence_scores=torch.randint(0, 2, (g * groups,)).float() * 40.0 - 20.0,
        group_ids=torch.arange(groups).repeat_interleave(g), num_groups=groups,
        entropys=torch.rand(g * groups, width) * 12.0, responses=torch.randint(0, 5, (g * groups, width)),
    )
    blocks = {
        "gtpo_token": {"alpha1": WEIGHT_LIMIT, "alpha2": WEIGHT_LIMIT, "negative_shaping": True},
        "grpo_s": {"beta1": WEIGHT_LIMIT, "beta2": WEIGHT_LIMIT, "negative_shaping": True},
        "gtpo_traj": {"gamma": WEIGHT_LIMIT, "conflict_weight": 1e3, "entropy_filter_scope": "none"},
    }
    for name, values in blocks.items():
        row = ESTIMATORS[name]
        advantages = row.run(row.config.from_dict(values), batch).advantages
        assert bool(torch.isfinite(advantages).all()), name
        assert math.isfinite(float(advantages.abs().max()))
