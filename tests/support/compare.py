"""Calling the package and the float64 references on the same batch, and comparing them.

Numerical convention: the package receives float32 inputs; the references use the float64
values of the same float32 numbers. A z-score whose set has a tiny standard deviation is
ill-conditioned in float32 (noise / (noise + eps)); tokens in such a set ("degenerate" sets,
std < DEGENERATE_STD with at least two members, not all exactly zero) are only checked to be
finite and bounded by sqrt(n), the largest |z| any set of n numbers can produce.

The Hypothesis strategies draw every switch of the public functions.
"""

from __future__ import annotations

import numpy as np
import torch
from hypothesis import HealthCheck
from hypothesis import strategies as st

from gtpo_verl.algorithms.sequence_shaping import grpo_s_advantage
from gtpo_verl.algorithms.kernels.gtpo_token import gtpo_token_advantage
from gtpo_verl.algorithms.trajectory import gtpo_traj_advantage
from support.references import LN2, ref_grpo_s, ref_gtpo_token, ref_gtpo_traj

ATOL = 2e-4
RTOL = 2e-4

HYP = dict(
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)
SEEDS = st.integers(min_value=0, max_value=2**32 - 1)


def call_token(b, **kw):
    return gtpo_token_advantage(b["mask"], b["scores"], b["gids"], b["K"], entropy=b["entropy"], **kw)


def ref_token(b, **kw):
    return ref_gtpo_token(b["entropy"].double().numpy(), b["mask"].numpy(), b["scores"].double().numpy(),
                          b["gids"].numpy(), b["K"], **kw)


def call_seq(b, **kw):
    return grpo_s_advantage(b["mask"], b["scores"], b["gids"], b["K"], entropy=b["entropy"], **kw)


def ref_seq(b, **kw):
    return ref_grpo_s(b["entropy"].double().numpy(), b["mask"].numpy(), b["scores"].double().numpy(),
                      b["gids"].numpy(), b["K"], **kw)


def call_traj(b, use_entropy=True, **kw):
    ent = b["entropy"] if use_entropy else None
    return gtpo_traj_advantage(b["mask"], b["scores"], b["gids"], b["K"], responses=b["responses"], entropy=ent, **kw)


def ref_traj(b, use_entropy=True, **kw):
    ent = b["entropy"].double().numpy() if use_entropy else None
    return ref_gtpo_traj(b["responses"].numpy(), b["mask"].numpy(), b["scores"].double().numpy(),
                         b["gids"].numpy(), b["K"], ent, **kw)


def as_numpy(x):
    return x.detach().to(torch.float64).numpy() if x.is_floating_point() else x.detach().numpy()


def assert_adv_matches(got, ref, degenerate, bound, mask, atol=ATOL, rtol=RTOL, what="advantages"):
    got = as_numpy(got)
    mask = np.asarray(mask) != 0
    assert got.shape == ref.shape, (what, got.shape, ref.shape)
    assert np.isfinite(got).all(), f"{what}: non-finite values {got}"
    assert (got[~mask] == 0).all() if got.ndim == 2 else True, f"{what}: nonzero outside the mask"
    ok = ~degenerate
    torch.testing.assert_close(
        torch.from_numpy(got[ok]), torch.from_numpy(ref[ok]), atol=atol, rtol=rtol, msg=lambda m: f"{what}: {m}"
    )
    assert (np.abs(got[degenerate]) <= bound[degenerate] + 1e-3).all(), f"{what}: degenerate set out of bounds"


# ----------------------------------------------------------------------------------------------
# switch strategies
# ----------------------------------------------------------------------------------------------

ALPHAS = [(0.9, 0.1), (1.0, 0.1), (0.8, 0.2), (0.5, 0.5), (0.7, 0.3)]


@st.composite
def token_kwargs(draw, v6_unshaped=True):
    """Switches of gtpo_token_advantage. ``v6_unshaped=False`` leaves out variant="unified_v6" with
    negative_shaping=False (which the config refuses; the pure function still defines it)."""
    variant = draw(st.sampled_from(["base", "clipped_len", "unified_v6"]))
    alpha1, alpha2 = draw(st.sampled_from(ALPHAS if variant != "clipped_len" else [a for a in ALPHAS if a[0] >= 0.7]))
    kw = dict(
        alpha1=alpha1,
        alpha2=alpha2,
        success_threshold=draw(st.sampled_from([0.0, 0.25, -0.75])),
        negative_shaping=draw(st.booleans()) if (v6_unshaped or variant != "unified_v6") else True,
        variant=variant,
        entropy_share=draw(st.sampled_from(["column", "geometric"])),
        adv_norm=draw(st.sampled_from(["two_zero_filled", "single_combined", "per_class"])),
        uniform_outcome_groups=draw(st.sampled_from(["keep", "zero_adv"])),
        std_unbiased=draw(st.booleans()),
    )
    if variant == "clipped_len":
        # kappa with alpha1 (1 + 1/kappa) >= 1.05 (the config requires the bound >= 1, spec B.4)
        kappas = [k for k in (1.25, 1.5, 2.0, 3.0, 5.0) if alpha1 * (1 + 1 / k) >= 1.05]
        l2 = draw(st.integers(2, 10))
        kw.update(
            kappa=draw(st.sampled_from(kappas)),
            max_response_len=l2,
            overlong_buffer_len=draw(st.integers(1, l2 - 1)),
            length_penalty_denominator=draw(st.sampled_from(["l1", "l2"])),
        )
    return kw


@st.composite
def seq_kwargs(draw):
    beta1, beta2 = draw(st.sampled_from(ALPHAS))
    return dict(
        beta1=beta1,
        beta2=beta2,
        success_threshold=draw(st.sampled_from([0.0, 0.25, -0.75])),
        negative_shaping=draw(st.booleans()),
        variant=draw(st.sampled_from(["base", "unified_v6"])),
        negative_share=draw(st.sampled_from(["arithmetic", "geometric"])),
        adv_norm=draw(st.sampled_from(["two_zero_filled", "single_combined", "per_class"])),
        uniform_outcome_groups=draw(st.sampled_from(["keep", "zero_adv"])),
        std_unbiased=draw(st.booleans()),
    )


@st.composite
def traj_kwargs(draw):
    return dict(
        gamma=draw(st.sampled_from([0.1, 0.0, 0.5])),
        entropy_threshold=draw(st.sampled_from([0.7, LN2, 1.02, None])),
        conflict_weight=draw(st.sampled_from([2.0, 3.0, 1.5])),
        overlap=draw(st.sampled_from(["product", "union"])),
        divisor=draw(st.sampled_from(["code", "union", "none"])),
        norm_adv_by_std=draw(st.booleans()),
        entropy_filter_scope=draw(st.sampled_from(["all", "neg_only"])),
        initial_entropy=draw(st.sampled_from([None, None, 0.5, 1.5])),
        entropy_reg_mode=draw(st.sampled_from(["advantage_offset", "differentiable"])),
    )


def _assert_success(got, ref, b):
    """O+ membership (score > threshold) on rows with at least one valid token. Length-0 padding rows are
    no group member; what the package reports for them is not specified (it reports False)."""
    valid = b["mask"].sum(1).numpy() > 0
    assert np.array_equal(as_numpy(got.success).astype(bool)[valid], ref["success"][valid])


def check_token(b, kw):
    got = call_token(b, **kw)
    ref = ref_token(b, **kw)
    assert_adv_matches(got.advantages, ref["advantages"], ref["degenerate"], ref["bound"], b["mask"])
    _assert_success(got, ref, b)
    torch.testing.assert_close(as_numpy(got.mean_entropy), ref["mean_entropy"], atol=1e-5, rtol=1e-5)
    return got, ref


def check_seq(b, kw):
    got = call_seq(b, **kw)
    ref = ref_seq(b, **kw)
    assert_adv_matches(got.advantages, ref["advantages"], ref["degenerate"], ref["bound"], b["mask"])
    lens = b["mask"].sum(1).numpy()
    assert_adv_matches(got.sequence_advantages, ref["sequence_advantages"], ref["seq_degenerate"],
                       ref["seq_bound"], np.ones_like(lens), what="sequence_advantages")
    assert (as_numpy(got.sequence_advantages)[lens == 0] == 0).all()
    _assert_success(got, ref, b)
    torch.testing.assert_close(as_numpy(got.mean_entropy), ref["mean_entropy"], atol=1e-5, rtol=1e-5)
    return got, ref


def check_traj(b, kw, use_entropy=True):
    got = call_traj(b, use_entropy=use_entropy, **kw)
    ref = ref_traj(b, use_entropy=use_entropy, **kw)
    for name in ("forward_run", "backward_run", "conflict_divisor"):
        assert np.array_equal(as_numpy(getattr(got, name)).astype(np.int64), ref[name]), (
            name, as_numpy(getattr(got, name)), ref[name])
    assert np.array_equal(as_numpy(got.keep).astype(bool), ref["keep"]), (as_numpy(got.keep), ref["keep"])
    for name in ("raw_advantage", "shaped_advantage", "mean_entropy"):
        torch.testing.assert_close(as_numpy(getattr(got, name)), ref[name], atol=1e-5, rtol=1e-5,
                                   msg=lambda m, n=name: f"{n}: {m}")
    adv = as_numpy(got.advantages)
    assert np.isfinite(adv).all()
    assert (adv[b["mask"].numpy() == 0] == 0).all()
    torch.testing.assert_close(adv, ref["advantages"], atol=1e-5, rtol=1e-5)
    return got, ref
