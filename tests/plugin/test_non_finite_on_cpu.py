"""Non-finite data never becomes an advantage: a NaN/Inf score, entropy or result at a valid position is one
error naming the row and its uid; NaN garbage outside the response mask changes nothing.

Through verl's own registry (``get_adv_estimator_fn``) for our estimators and a user's, and through
``apply_adv_transforms`` for the transforms, as the trainer calls them.
"""

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY, get_adv_estimator_fn

import gtpo_verl
from gtpo_verl.plugin.extensions import apply_adv_transforms, parse_adv_transforms

ESTIMATORS = ("gtpo_token", "grpo_s", "gtpo_traj")
CONFIG = OmegaConf.create({"gtpo_traj": {"entropy_filter_scope": "all"}})


def _batch(seed=0, groups=3, group=4, width=7):
    g = torch.Generator().manual_seed(seed)
    rows = groups * group
    mask = torch.ones(rows, width)
    mask[1, 4:] = 0
    mask[6, 2:] = 0
    rewards = torch.zeros(rows, width)
    rewards[:, 1] = (torch.rand(rows, generator=g) > 0.5).float()
    entropy = torch.rand(rows, width, generator=g) * 2
    responses = torch.randint(0, 6, (rows, width), generator=g)
    uids = np.array([f"prompt-{i // group}" for i in range(rows)], dtype=object)
    return rewards, mask, uids, entropy, responses


def _call(name, rewards, mask, uids, entropy, responses):
    return get_adv_estimator_fn(name)(rewards, mask, index=uids, config=CONFIG, entropys=entropy, responses=responses)[0]


@pytest.mark.parametrize("name", ESTIMATORS)
@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf")])
def test_a_non_finite_score_names_its_row_and_uid(name, value):
    rewards, mask, uids, entropy, responses = _batch()
    rewards[9, 1] = value
    with pytest.raises(ValueError, match=rf"'{name}': non-finite score \({value}\).*row 9 \(uid 'prompt-2'\)"):
        _call(name, rewards, mask, uids, entropy, responses)


@pytest.mark.parametrize("name", ESTIMATORS)
def test_a_non_finite_entropy_at_a_valid_token_names_its_row_and_uid(name):
    rewards, mask, uids, entropy, responses = _batch()
    entropy[6, 1] = float("nan")  # row 6 is valid up to token 2
    with pytest.raises(ValueError, match=r"non-finite entropys \(nan\).*row 6 \(uid 'prompt-1'\), token 1"):
        _call(name, rewards, mask, uids, entropy, responses)


@pytest.mark.parametrize("name", ESTIMATORS)
def test_nan_outside_the_mask_changes_nothing(name):
    rewards, mask, uids, entropy, responses = _batch()
    clean = _call(name, rewards, mask, uids, entropy, responses)
    entropy[6, 3:] = float("nan")
    entropy[1, 5] = float("inf")
    assert torch.equal(_call(name, rewards, mask, uids, entropy, responses), clean)


def test_a_users_estimator_returning_nan_is_caught(monkeypatch):
    monkeypatch.setitem(ADV_ESTIMATOR_REGISTRY, "_nan_test", None)  # restored after the test
    del ADV_ESTIMATOR_REGISTRY["_nan_test"]

    @gtpo_verl.register_entropy_aware_estimator("_nan_test", inputs=("entropys",))
    def broken(token_level_rewards, response_mask, index=None, config=None, *, entropys, **kwargs):
        out = torch.log(entropys - 1.0) * response_mask  # NaN where H < 1
        return out, out

    rewards, mask, uids, entropy, responses = _batch()
    with pytest.raises(ValueError, match=r"'_nan_test': non-finite advantages.*uid 'prompt-"):
        get_adv_estimator_fn("_nan_test")(rewards, mask, index=uids, config=CONFIG, entropys=entropy)


@pytest.mark.parametrize("entry", ["{name: entropy_advantage}", "{name: high_entropy_tokens, rho: 0.5}"])
def test_transforms_refuse_a_non_finite_entropy_and_name_the_uid(entry):
    rewards, mask, uids, entropy, _ = _batch()
    transforms = parse_adv_transforms(OmegaConf.create(f"[{entry}]"))
    advantages = torch.randn(mask.shape) * mask
    entropy[10, 0] = float("inf")
    with pytest.raises(ValueError, match=r"advantage transform .*non-finite entropys \(inf\).*row 10 \(uid 'prompt-2'\)"):
        apply_adv_transforms(transforms, advantages, mask, {"entropys": entropy}, uids=lambda: list(uids))


def test_a_transform_returning_nan_is_caught(monkeypatch):
    from gtpo_verl.plugin import extensions

    monkeypatch.setattr(extensions, "_TRANSFORMS", dict(extensions._TRANSFORMS))

    @gtpo_verl.register_adv_transform("_nan_transform")
    def broken(advantages, response_mask, knobs):
        return advantages / (advantages - advantages)  # 0/0

    rewards, mask, uids, entropy, _ = _batch()
    transforms = parse_adv_transforms(OmegaConf.create("[{name: _nan_transform}]"))
    with pytest.raises(ValueError, match=r"'_nan_transform': non-finite advantages .*row 0 \(uid 'prompt-0'\)"):
        apply_adv_transforms(transforms, torch.ones(mask.shape), mask, {}, uids=list(uids))
