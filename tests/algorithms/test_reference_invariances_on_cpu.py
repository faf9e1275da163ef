"""Invariances: row order, extra padding columns and garbage at masked positions change nothing."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from support.batches import make_batch_a, make_batch_b
from support.compare import HYP, SEEDS, as_numpy, call_seq, call_token, call_traj, ref_seq, ref_token, ref_traj, seq_kwargs, token_kwargs, traj_kwargs


GARBAGE = np.array([np.nan, np.inf, -np.inf, 1e30, -1e30, 3.4e38, -7.0, 0.0, 1e-30], dtype=np.float32)
FINITE_GARBAGE = np.array([1e30, -1e30, 3.4e38, -7.0, 0.0, 1e-30, 123.456], dtype=np.float32)


def _garbage_like(rng, shape, pool=GARBAGE):
    return torch.from_numpy(rng.choice(pool, size=shape)).to(torch.float32)


def _outputs(kind, b, kw):
    if kind == "token":
        res = call_token(b, **kw)
    elif kind == "seq":
        res = call_seq(b, **kw)
    else:
        res = call_traj(b, **kw)
    # optional fields not requested; the fused call's share tables (not an output)
    return {k: v for k, v in res._asdict().items() if v is not None and k != "shares"}


def _reference(kind, b, kw):
    if kind == "token":
        return ref_token(b, **kw)
    if kind == "seq":
        return ref_seq(b, **kw)
    return ref_traj(b, **kw)


def _batch(kind, rng, kw):
    if kind == "traj":
        return make_batch_a(rng)
    return make_batch_b(rng, success_threshold=kw["success_threshold"])


@st.composite
def kind_and_kwargs(draw):
    kind = draw(st.sampled_from(["token", "seq", "traj"]))
    strat = {"token": token_kwargs(), "seq": seq_kwargs(), "traj": traj_kwargs()}[kind]
    return kind, draw(strat)


def _token_ok(kind, ref, B, T):
    """Tokens whose value is well conditioned (not in a degenerate z-score set)."""
    if kind == "traj":
        return np.ones((B, T), dtype=bool)
    return ~ref["degenerate"]


def _assert_same(a, b, ok, what):
    a, b = as_numpy(a), as_numpy(b)
    assert np.isfinite(a).all() and np.isfinite(b).all(), what
    if a.dtype.kind in "biu" or a.dtype == bool:
        assert np.array_equal(a, b), what
        return
    torch.testing.assert_close(a[ok], b[ok], atol=1e-5, rtol=1e-5, msg=lambda m: f"{what}: {m}")


@settings(max_examples=150, **HYP)
@given(seed=SEEDS, case=kind_and_kwargs())
def test_row_permutation_permutes_outputs(seed, case):
    kind, kw = case
    rng = np.random.default_rng(seed)
    b = _batch(kind, rng, kw)
    B, T = b["mask"].shape
    perm = torch.from_numpy(rng.permutation(B))
    pb = {k: (v[perm] if torch.is_tensor(v) else v) for k, v in b.items()}
    out, pout = _outputs(kind, b, kw), _outputs(kind, pb, kw)
    ref = _reference(kind, b, kw)
    ok2 = _token_ok(kind, ref, B, T)
    p = perm.numpy()
    for name, v in out.items():
        if v.dim() == 2:
            ok = ok2[p]
        elif name == "sequence_advantages":
            ok = ~ref["seq_degenerate"][p]
        else:
            ok = np.ones(B, dtype=bool)
        _assert_same(pout[name], v[perm], ok, f"{kind}.{name}")


@settings(max_examples=150, **HYP)
@given(seed=SEEDS, case=kind_and_kwargs(), extra=st.integers(1, 6))
def test_extra_padding_columns_change_nothing(seed, case, extra):
    kind, kw = case
    rng = np.random.default_rng(seed)
    b = _batch(kind, rng, kw)
    B, T = b["mask"].shape
    wide = dict(b)
    wide["mask"] = torch.cat([b["mask"], torch.zeros(B, extra, dtype=b["mask"].dtype)], dim=1)
    wide["entropy"] = torch.cat([b["entropy"], _garbage_like(rng, (B, extra))], dim=1)
    if "responses" in b:
        wide["responses"] = torch.cat([b["responses"], torch.from_numpy(rng.integers(0, 6, (B, extra)))], dim=1)
    out, wout = _outputs(kind, b, kw), _outputs(kind, wide, kw)
    ref = _reference(kind, b, kw)
    ok2 = _token_ok(kind, ref, B, T)
    for name, v in out.items():
        w = wout[name]
        if v.dim() == 2:
            assert torch.equal(w[:, T:], torch.zeros_like(w[:, T:])), f"{kind}.{name}: extra columns not 0"
            _assert_same(w[:, :T], v, ok2, f"{kind}.{name}")
        else:
            ok = ~ref["seq_degenerate"] if name == "sequence_advantages" else np.ones(B, dtype=bool)
            _assert_same(w, v, ok, f"{kind}.{name}")


@pytest.mark.parametrize("pool", ["finite", "with_nan_inf"])
@settings(max_examples=100, **HYP)
@given(seed=SEEDS, case=kind_and_kwargs())
def test_garbage_at_masked_positions_changes_nothing(pool, seed, case):
    """Bit-for-bit: masked entropies (huge, negative, or NaN/+-inf) and masked token ids never matter."""
    kind, kw = case
    rng = np.random.default_rng(seed)
    b = _batch(kind, rng, kw)
    masked = b["mask"] == 0
    dirty = dict(b)
    values = _garbage_like(rng, masked.shape, FINITE_GARBAGE if pool == "finite" else GARBAGE)
    dirty["entropy"] = torch.where(masked, values, b["entropy"])
    if "responses" in b:
        dirty["responses"] = torch.where(masked, torch.from_numpy(rng.integers(0, 6, masked.shape)), b["responses"])
    out, dout = _outputs(kind, b, kw), _outputs(kind, dirty, kw)
    for name, v in out.items():
        assert torch.equal(dout[name], v), f"{kind}.{name}: garbage at masked positions leaked"
