"""The float64 references and the package both reproduce the golden values of docs/spec.md."""

from __future__ import annotations

import numpy as np
import torch

from support.batches import golden_a1_group, golden_b1_group, valid_rows
from support.compare import as_numpy, call_seq, call_token, call_traj, ref_seq, ref_token, ref_traj
from support.references import LN2, ref_gtpo_token_rewards, ref_length_penalty


def test_golden_b1_b2_b6_gtpo_token():
    b = golden_b1_group()
    m = b["mask"].numpy()
    want_b1 = [[0.936037, 0.746726, 0.841381], [0.746726, 0.936037], [-1.051727] * 3, [-1.051727]]
    want_b1_pop = [[0.992817, 0.792022, 0.89242], [0.792022, 0.992817], [-1.115525] * 3, [-1.115525]]
    want_b2 = [[0.936037, 0.746726, 0.841381], [0.746726, 0.936037],
               [-0.838626, -1.048283, -1.048283], [-1.257939]]
    want_b6 = {
        "two_zero_filled": [[0.927793, 0.755625, 0.841709], [0.755625, 0.927793],
                            [-1.034878, -1.054042, -1.054042], [-1.073207]],
        "single_combined": [[0.885973, 0.799771, 0.842872], [0.799771, 0.885973],
                            [-1.044012, -1.05359, -1.05359], [-1.063168]],
        "per_class": [[1.0, -1.0, 0.0], [-1.0, 1.0], [1.22461, 0.0, 0.0], [-1.22461]],
    }
    cases = [(dict(alpha1=0.9, alpha2=0.1), want_b1),
             (dict(alpha1=0.9, alpha2=0.1, std_unbiased=False), want_b1_pop),
             (dict(alpha1=0.9, alpha2=0.1, negative_shaping=True), want_b2)]
    for norm, want in want_b6.items():
        cases.append((dict(alpha1=1.0, alpha2=0.1, variant="unified_v6", negative_shaping=True, adv_norm=norm), want))
    for kw, want in cases:
        ref = ref_token(b, **kw)
        got = call_token(b, **kw)
        for a in (ref["advantages"], as_numpy(got.advantages)):
            flat_a = [v for r in valid_rows(a, m) for v in r]
            flat_w = [v for r in want for v in r]
            np.testing.assert_allclose(flat_a, flat_w, atol=5e-5, err_msg=str(kw))  # B6 per-class is printed rounded


def test_golden_b1_rewards_b3_b4_reference():
    b = golden_b1_group()
    rw, _, _ = ref_gtpo_token_rewards(b["entropy"].double().numpy(), b["mask"].numpy(), b["scores"].numpy(),
                                      b["gids"].numpy(), 1, alpha1=0.9, alpha2=0.1)
    assert [round(rw[(0, t)], 6) for t in range(3)] == [1.05, 0.95, 1.0]
    assert [round(rw[(1, t)], 6) for t in range(2)] == [0.95, 1.05]
    rw, _, _ = ref_gtpo_token_rewards(b["entropy"].double().numpy(), b["mask"].numpy(), b["scores"].numpy(),
                                      b["gids"].numpy(), 1, alpha1=0.9, alpha2=0.1, negative_shaping=True)
    np.testing.assert_allclose([rw[(2, t)] for t in range(3)] + [rw[(3, 0)]],
                               [-0.888889, -1, -1, -1.111111], atol=1e-6)
    # B3 clip: d = 4, H = [2, 0, 0, 0] and d = 3, H = [1.5, 0.3, 0.2], kappa = 3, no length penalty
    for col, want in (([2.0, 0, 0, 0], [1.2, 1, 1, 1]), ([1.5, 0.3, 0.2], [1.125, 1, 1])):
        H = np.array(col)[:, None]
        rw, _, _ = ref_gtpo_token_rewards(H, np.ones_like(H), np.ones(len(col)), np.zeros(len(col)), 1,
                                          alpha1=0.9, alpha2=0.1, variant="clipped_len", kappa=3.0,
                                          overlong_buffer_len=100, max_response_len=200)
        np.testing.assert_allclose([rw[(i, 0)] for i in range(len(col))], want, atol=1e-6)
    # B3 length penalty: L1 = 4, L2 = 10
    assert [ref_length_penalty(n, 4, 10) for n in (5, 6, 8, 10, 12)] == [0, 0, -0.5, -1.0, -1]
    assert [ref_length_penalty(n, 4, 10, "l2") for n in (5, 6, 8, 10, 12)] == [0, 0, -0.2, -0.4, -1]
    # B4 geometric: H = [0.5, 2.0] (GM = 1)
    H = np.array([[0.5, 2.0]])
    rw, _, _ = ref_gtpo_token_rewards(H, np.ones_like(H), np.array([1.0]), np.zeros(1), 1,
                                      alpha1=0.9, alpha2=0.1, entropy_share="geometric")
    np.testing.assert_allclose([rw[(0, 0)], rw[(0, 1)]], [0.95, 1.10], atol=1e-5)
    rw, _, _ = ref_gtpo_token_rewards(H, np.ones_like(H), np.array([-1.0]), np.zeros(1), 1,
                                      alpha1=0.9, alpha2=0.1, entropy_share="geometric", negative_shaping=True)
    np.testing.assert_allclose([rw[(0, 0)], rw[(0, 1)]], [-2.0, -0.5], atol=1e-5)


def test_golden_b5_b7_grpo_s():
    b = golden_b1_group()
    cases = [
        (dict(beta1=0.9, beta2=0.1), [0.900305, 0.831051, -0.865678, -0.865678]),
        (dict(beta1=0.9, beta2=0.1, negative_shaping=True), [0.900305, 0.831051, -0.665409, -1.045643]),
        (dict(beta1=1.0, beta2=0.1, variant="unified_v6", negative_shaping=True, adv_norm="single_combined"),
         [0.881675, 0.850187, -0.857184, -0.874678]),
        (dict(beta1=1.0, beta2=0.1, variant="unified_v6", negative_shaping=True, adv_norm="single_combined",
              negative_share="geometric"), [0.881671, 0.850191, -0.857132, -0.87473]),
    ]
    for kw, want in cases:
        ref = ref_seq(b, **kw)
        got = call_seq(b, **kw)
        np.testing.assert_allclose(ref["sequence_advantages"], want, atol=2e-6, err_msg=str(kw))
        np.testing.assert_allclose(as_numpy(got.sequence_advantages), want, atol=2e-5, err_msg=str(kw))


def test_golden_a1_a3_traj():
    b = golden_a1_group()
    m = b["mask"].numpy()
    lens = m.sum(1)
    for side in ("ref", "pkg"):
        out = ref_traj(b) if side == "ref" else {k: as_numpy(v) for k, v in call_traj(b)._asdict().items()}
        assert list(zip(out["forward_run"], out["backward_run"])) == [(3, 3), (2, 3), (1, 2), (0, 2)], side
        assert list(out["conflict_divisor"]) == [3, 3, 2, 2], side
        np.testing.assert_allclose(out["shaped_advantage"], [11.97, -8.05, 0, -6.069], atol=1e-5)
        coeff = valid_rows(out["advantages"] / lens[:, None], m)
        want = [[1.14, 1.14, 1.14, 0.57, 1.14, 1.14, 1.14], [0, 0, -0.447222, 0, 0, 0], [0] * 6,
                [-0.6069, -0.6069, -0.6069, 0, 0]]
        for r, w in zip(coeff, want):
            np.testing.assert_allclose(r, w, atol=2e-5, err_msg=side)
    # paper-literal: union lambda, no divisor, threshold ln 2; coefficient / (G |o|)
    kw = dict(overlap="union", divisor="none", entropy_threshold=LN2)
    for side in ("ref", "pkg"):
        out = ref_traj(b, **kw) if side == "ref" else {k: as_numpy(v) for k, v in call_traj(b, **kw)._asdict().items()}
        coeff = valid_rows(out["advantages"] / lens[:, None] / 4, m)
        want = [[0.855, 0.855, 0.855, 0.4275, 0.855, 0.855, 0.855], [0, 0, -0.335417, 0, 0, 0], [0] * 6,
                [-0.30345, -0.30345, -0.30345, 0, 0]]
        for r, w in zip(coeff, want):
            np.testing.assert_allclose(r, w, atol=2e-5, err_msg=side)
    # union divisor |F u B|
    assert list(ref_traj(b, divisor="union")["conflict_divisor"]) == [6, 5, 3, 2]


def test_golden_a2_a4_traj():
    ids = torch.tensor([[7, 8, 2, 0], [7, 8, 8, 2]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]])
    b = dict(responses=ids, mask=mask, scores=torch.tensor([1.0, 0.0]), gids=torch.zeros(2, dtype=torch.int64),
             entropy=torch.zeros(2, 4), K=1)
    for kw, lam0, nconf in ((dict(), [2, 4, 2], [2, 2]), (dict(overlap="union", divisor="union"), [2, 2, 2], [3, 4])):
        for side in ("ref", "pkg"):
            out = ref_traj(b, **kw) if side == "ref" else {k: as_numpy(v) for k, v in call_traj(b, **kw)._asdict().items()}
            assert list(out["forward_run"]) == [2, 2] and list(out["backward_run"]) == [2, 2]
            assert list(out["conflict_divisor"]) == nconf
            np.testing.assert_allclose(out["advantages"][0, :3], 0.5 * np.array(lam0) / nconf[0], atol=1e-6)
            np.testing.assert_allclose(out["advantages"][1], 0.0, atol=0)
    # A4: rewards [20, 20], <H> = [0.2, 0.8]: A = 0, delta = [1, 0], A~ = [-0.02, 0], lambda = 1
    ids = torch.tensor([[5, 6, 2], [5, 6, 2]])
    b = dict(responses=ids, mask=torch.ones(2, 3, dtype=torch.int64), scores=torch.tensor([20.0, 20.0]),
             gids=torch.zeros(2, dtype=torch.int64), entropy=torch.tensor([[0.2] * 3, [0.8] * 3]), K=1)
    for side in ("ref", "pkg"):
        out = ref_traj(b) if side == "ref" else {k: as_numpy(v) for k, v in call_traj(b)._asdict().items()}
        np.testing.assert_allclose(out["shaped_advantage"], [-0.02, 0.0], atol=1e-6)
        np.testing.assert_allclose(out["advantages"] / 3, [[-0.006667] * 3, [0.0] * 3], atol=1e-6)
        assert list(out["keep"]) == [True, False]
