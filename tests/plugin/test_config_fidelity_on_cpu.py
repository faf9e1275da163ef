"""Paper-fidelity choices made at the config level (docs/spec.md): the one-weight form of GTPO,
v6 only with its failure shaping, the ⟨H⟩_ini gate's first-batch warning (Paper A's tie rule is
tested with the other fidelity edges, tests/algorithms/test_fidelity_edges_on_cpu.py)."""

import warnings

import numpy as np
import pytest
import torch
from torch.testing import assert_close

from gtpo_verl.algorithms.sequence_shaping import grpo_s_advantage
from gtpo_verl.algorithms.kernels.gtpo_token import gtpo_token_advantage
from gtpo_verl.plugin.estimators.gtpo_token import GTPOTokenConfig
from gtpo_verl.trainer.validation import GTPOConfigWarning, validate_gtpo_config
from support.batches import golden_b1_group, make_batch_b
from support.hydra import compose_gtpo
from support.references import ref_gtpo_token


def _token_advantages(batch, block):
    kwargs = GTPOTokenConfig.from_dict(block).function_kwargs()
    return gtpo_token_advantage(batch["mask"], batch["scores"].double(), batch["gids"],
                                batch["K"], entropy=batch["entropy"].double(), **kwargs).advantages


@pytest.mark.parametrize("alpha", [0.1, 0.5, 2.0])
@pytest.mark.parametrize("entropy_share", ["column", "geometric"])
def test_one_weight_form_is_reachable_and_equals_the_normalised_weights(alpha, entropy_share):
    """r̃ = r_i + α·share is alpha1=1, alpha2=α; the z-score removes the common factor 1/(1+α),
    so (1, α) and (1, α)/(1+α) give the same advantages up to the ε of std + ε (spec B.2)."""
    rng = np.random.default_rng(int(alpha * 10))
    for _ in range(20):
        batch = make_batch_b(rng)
        one_weight = _token_advantages(batch, dict(alpha1=1.0, alpha2=alpha, entropy_share=entropy_share))
        convex = _token_advantages(
            batch, dict(alpha1=1 / (1 + alpha), alpha2=alpha / (1 + alpha), entropy_share=entropy_share)
        )
        assert_close(one_weight, convex, atol=1e-5, rtol=1e-5)
        # and the independent float64 reference of the one-weight form agrees
        reference = ref_gtpo_token(batch["entropy"].double().numpy(), batch["mask"].numpy(),
                                   batch["scores"].double().numpy(), batch["gids"].numpy(), batch["K"],
                                   alpha1=1.0, alpha2=alpha, entropy_share=entropy_share)
        well_conditioned = torch.from_numpy(~reference["degenerate"])
        assert_close(one_weight[well_conditioned], torch.from_numpy(reference["advantages"])[well_conditioned],
                     atol=1e-5, rtol=1e-5)
    # a change of the weights' ratio does change the advantages (the check above can fail)
    batch = golden_b1_group()  # two successes with different entropies, two failures
    other_ratio = _token_advantages(batch, dict(alpha1=1.0, alpha2=2 * alpha + 0.5, entropy_share=entropy_share))
    assert not torch.allclose(_token_advantages(batch, dict(alpha1=1.0, alpha2=alpha, entropy_share=entropy_share)),
                              other_ratio, atol=1e-4)


def test_one_weight_form_of_grpo_s_equals_the_normalised_weights():
    rng = np.random.default_rng(3)
    for _ in range(20):
        b = make_batch_b(rng)
        args = (b["mask"], b["scores"].double(), b["gids"], b["K"])
        entropy = b["entropy"].double()
        one_weight = grpo_s_advantage(*args, entropy=entropy, beta1=1.0, beta2=0.3).advantages
        convex = grpo_s_advantage(*args, entropy=entropy, beta1=1 / 1.3, beta2=0.3 / 1.3).advantages
        assert_close(one_weight, convex, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    "estimator,block", [("gtpo_token", "algorithm.gtpo_token"), ("grpo_s", "algorithm.grpo_s")]
)
def test_v6_without_its_failure_shaping_is_refused_at_startup(estimator, block):
    # groups of 4: a group estimator with one response per prompt is refused on its own
    overrides = [f"algorithm.adv_estimator={estimator}", f"{block}.variant=unified_v6", "actor_rollout_ref.rollout.n=4"]
    if estimator == "grpo_s":
        overrides += ["actor_rollout_ref.actor.policy_loss.loss_mode=grpo_s",
                      "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean"]
    with pytest.raises(ValueError, match=rf"`{block}.variant=unified_v6` needs `{block}.negative_shaping=true`.*"
                                         rf"Set {block}.negative_shaping=true"):
        validate_gtpo_config(compose_gtpo(*overrides))
    with warnings.catch_warnings():  # verl's engines announce their missing backends once, at import: not a config warning
        warnings.simplefilter("ignore")
        import verl.workers.engine  # noqa: F401
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert validate_gtpo_config(compose_gtpo(*overrides, f"{block}.negative_shaping=true")) == []


def _traj_overrides(*extra):
    return ("algorithm.adv_estimator=gtpo_traj", "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean", *extra)


def test_small_first_batch_deciding_the_entropy_gate_warns_with_the_fix():
    # Paper A's GSM8K setting: 1 prompt × 8 responses, the paper preset (gate on), ⟨H⟩_ini unset
    tiny = _traj_overrides("algorithm.gtpo_traj.preset=paper", "data.train_batch_size=1", "actor_rollout_ref.rollout.n=8")
    with pytest.warns(GTPOConfigWarning, match=r"1 prompt\(s\) × 8 responses = 8.*initial_entropy=<value>"):
        validate_gtpo_config(compose_gtpo(*tiny))
    quiet = [
        tiny + ("algorithm.gtpo_traj.initial_entropy=0.5",),  # set explicitly
        _traj_overrides("algorithm.gtpo_traj.preset=paper", "data.train_batch_size=8", "actor_rollout_ref.rollout.n=8"),
        _traj_overrides("data.train_batch_size=1", "actor_rollout_ref.rollout.n=8"),  # official preset: no gate
    ]
    for overrides in quiet:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert validate_gtpo_config(compose_gtpo(*overrides)) == [], overrides


def test_unknown_gtpo_key_is_refused_at_startup():
    with pytest.raises(ValueError, match=r"unknown key.*gtpo\.diagnostic\b.*valid keys of gtpo"):
        validate_gtpo_config(compose_gtpo("+gtpo.diagnostic=false"))
