"""Tests for compendium.papers.lora_recycling: shapes, merging properties, peft references, tiny run."""

import math

import numpy as np
import pytest
import torch

from compendium.papers import lora_recycling as paper
from compendium.papers.lora_recycling.pool import AssetSettings, make_pool

TINY_POOL = AssetSettings(pretrain_steps=40, pool_size=12, pool_examples=64, pool_steps=20, eval_examples=200)
TINY = dict(num_targets=2, candidates_per_regime=2, num_seeds=2, num_selected=3, train_examples=16, dev_examples=8,
            test_examples=200, check_examples=100, merge_steps=5, lora_steps=6, learning_rate_factors=(1.0, 10.0))


@pytest.fixture(scope="module")
def tiny_asset():
    asset, meta, metrics = make_pool(TINY_POOL, 0)
    return asset


def _lora(out=5, inp=4, r=3, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(r, inp, generator=g, dtype=dtype), torch.randn(out, r, generator=g, dtype=dtype)


# ---------------------------------------------------------------- shapes
def test_shapes_and_broadcasting():
    base = paper.BaseMLP(6, 8)
    W = paper.base_weights(base)
    x = torch.randn(3, 5, 6)
    assert paper.mlp_forward(W, x).shape == (3, 5)
    deltas = {m: torch.zeros(3, 2, *W[m][0].shape) for m in paper.MODULES}
    assert paper.mlp_forward(W, x[:, None], deltas).shape == (3, 2, 5)
    A, B = torch.randn(4, 2, 3, 6), torch.randn(4, 2, 8, 3)
    assert paper.merge_components(A, B, torch.ones(4, 2)).shape == (4, 2, 8, 6)
    assert paper.merge_components(A, B, torch.ones(4, 2), "rank").shape == (4, 6, 8, 6)
    with torch.no_grad():
        assert torch.allclose(paper.mlp_forward(W, x[0]), base(x[0]), atol=1e-6)


def test_bad_input_raises():
    with pytest.raises(ValueError):
        paper.Config(num_targets=1)
    with pytest.raises(ValueError):
        paper.Config(matched_rank=8, lora_rank=4)
    with pytest.raises(ValueError):
        paper.Config(learning_rate_factors=(1.0, -1.0))
    with pytest.raises(ValueError):
        paper.activate(torch.zeros(2), "tanh")
    with pytest.raises(ValueError):
        paper.merge_components(torch.zeros(1, 2, 3), torch.zeros(1, 3, 2), torch.ones(1), "layer")


# ---------------------------------------------------------------- mathematical properties
def test_rank_pieces_sum_to_the_module_delta():
    A, B = torch.randn(2, 3, 4, dtype=torch.float64), torch.randn(2, 5, 3, dtype=torch.float64)
    s = torch.tensor([0.5, 2.0], dtype=torch.float64)
    pieces = paper.merge_components(A, B, s, "rank").reshape(2, 3, 5, 4).sum(1)
    assert torch.allclose(pieces, paper.merge_components(A, B, s, "module"))


def test_zero_coefficients_are_the_base_and_leaky_gradient():
    base = paper.BaseMLP(6, 8)
    W = paper.base_weights(base)
    D = {m: torch.randn(1, 4, *W[m][0].shape) for m in paper.MODULES}
    x = torch.randn(1, 7, 6)
    zero = {m: paper.merged_delta(torch.zeros(1, 1, 4), D[m], "leaky_relu")[:, 0] for m in paper.MODULES}
    assert torch.equal(paper.mlp_forward(W, x, zero), paper.mlp_forward(W, x))
    c = torch.zeros(4, requires_grad=True)
    paper.activate(c, "leaky_relu").sum().backward()
    assert torch.allclose(c.grad, torch.full((4,), 0.01))
    assert torch.allclose(paper.activate(torch.tensor([[1.0, 1.0]]), "softmax"), torch.tensor([[0.5, 0.5]]))


def test_trace_identity_symbolic_and_numeric():
    assert paper.trace_identity_gap() == 0
    A1, B1 = _lora(seed=1)
    A2, B2 = _lora(r=2, seed=2)
    dense = paper.dense_cosine(B1 @ A1, B2 @ A2)
    assert abs(paper.lora_cosine(A1, B1, A2, B2) - dense) < 1e-12
    assert abs(paper.lora_cosine(A1, B1, A1, B1) - 1.0) < 1e-12
    # the scalings cancel in a cosine
    assert abs(paper.lora_cosine(3 * A1, B1, A2, B2) - dense) < 1e-12


def test_batched_closeness_is_the_dense_cosine_of_whole_updates():
    g = torch.Generator().manual_seed(3)
    shapes = {"fc1": (5, 4), "fc2": (5, 5), "head": (1, 5)}
    pool = {m: (torch.randn(6, 3, i, generator=g, dtype=torch.float64), torch.randn(6, o, 3, generator=g, dtype=torch.float64),
                torch.rand(6, generator=g, dtype=torch.float64) + 0.5) for m, (o, i) in shapes.items()}
    # targets of rank 2 zero-padded to 3, as train_lora pads them
    target, s_t = {}, torch.rand(4, generator=g, dtype=torch.float64) + 0.5      # a LoRA's scaling is the same in every module
    for m, (o, i) in shapes.items():
        A, B = torch.randn(4, 3, i, generator=g, dtype=torch.float64), torch.randn(4, o, 3, generator=g, dtype=torch.float64)
        A[:, 2], B[:, :, 2] = 0.0, 0.0
        target[m] = (A, B, s_t)
    got = paper.lora_cosines(pool, target)
    assert got.shape == (4, 6)
    flat = lambda f, k: torch.cat([paper.lora_delta(f[m][0][k], f[m][1][k], f[m][2][k]).flatten() for m in shapes])
    for p in range(4):
        for n in range(6):
            assert abs(float(got[p, n]) - paper.dense_cosine(flat(pool, n), flat(target, p))) < 1e-12
    # a pool LoRA that is a rescaled copy of a target has cosine 1; a negated one -1
    twin = {m: (target[m][0][:2], torch.stack([target[m][1][0], -target[m][1][1]]), torch.tensor([7.0, 0.3], dtype=torch.float64))
            for m in shapes}
    c = paper.lora_cosines(twin, target)
    assert abs(float(c[0, 0]) - 1) < 1e-12 and abs(float(c[1, 1]) + 1) < 1e-12


def test_lorahub_search_minimises_within_bounds_and_keeps_the_best():
    target = np.array([0.7, -0.4, 1.2, 0.0])

    def quad(c):
        return ((c - target) ** 2).sum(-1)

    c, best, start, n = paper.lorahub_search(quad, 3, 4, 100, l1=0.0, seed=5)
    assert n == 1 + 99 // 8 * 8 and c.shape == (3, 4)                  # popsize 4 + int(3 ln 4) = 8; never over budget
    assert np.allclose(start, quad(np.zeros(4)))
    assert (best < start).all() and np.allclose(best, quad(c))        # the returned point has the returned value
    assert (np.abs(c) <= 1.5).all() and np.abs(c - target).max() < 0.35
    # an optimum outside the bounds is approached from inside them
    c_out, *_ = paper.lorahub_search(lambda c: ((c - 3.0) ** 2).sum(-1), 1, 2, 100, l1=0.0, seed=1)
    assert (c_out <= 1.5).all() and (c_out > 1.2).all()
    # the L1 penalty pulls towards zero; the search is deterministic and each problem independent
    c_l1, *_ = paper.lorahub_search(quad, 3, 4, 100, l1=5.0, seed=5)
    assert np.abs(c_l1).sum() < np.abs(c).sum()
    again, *_ = paper.lorahub_search(quad, 3, 4, 100, l1=0.0, seed=5)
    assert np.array_equal(again, c)
    alone, *_ = paper.lorahub_search(quad, 1, 4, 100, l1=0.0, seed=5)
    assert np.array_equal(alone[0], c[0])
    # a start that nothing beats is kept
    flat, best_flat, start_flat, _ = paper.lorahub_search(lambda c: np.abs(c).sum(-1), 2, 3, 40, seed=0)
    assert np.array_equal(flat, np.zeros((2, 3))) and np.array_equal(best_flat, start_flat)
    with pytest.raises(ValueError, match="budget"):
        paper.lorahub_search(quad, 1, 4, 1)
    with pytest.raises(ValueError, match="generation"):
        paper.lorahub_search(quad, 1, 4, 5)


def test_ties_hand_example_and_peft_reference():
    from peft.utils.merge_utils import ties as peft_ties

    T, expected = paper.ties_hand_example()
    assert torch.equal(paper.ties_merge(T, 0.4), expected)
    assert torch.allclose(peft_ties(list(T), torch.ones(3, dtype=T.dtype), 0.4), expected)
    g = torch.Generator().manual_seed(3)
    R = torch.randn(5, 6, 7, generator=g, dtype=torch.float64)
    w = torch.rand(5, generator=g, dtype=torch.float64)
    assert torch.allclose(paper.ties_merge(R, 0.3, w), peft_ties(list(R), w, 0.3))
    assert torch.allclose(paper.ties_merge(R, 1.0), paper.ties_merge(R, 1.0))   # density 1 keeps all
    same = torch.ones(3, 2, 2)
    assert torch.equal(paper.ties_merge(same, 1.0), torch.ones(2, 2))          # agreeing tensors: their mean
    assert torch.equal(paper.average_merge(R), R.mean(0))


def test_random_like_lora_is_std_matched_and_keeps_padding():
    g = torch.Generator().manual_seed(4)
    A = torch.zeros(2, 8, 300)
    B = torch.zeros(2, 200, 8)
    A[0, :2], B[0, :, :2] = torch.randn(2, 300, generator=g) * 0.3, torch.randn(200, 2, generator=g) * 0.05
    A[1, :8], B[1] = torch.randn(8, 300, generator=g) * 2.0, torch.randn(200, 8, generator=g) * 0.5
    Ar, Br = paper.random_like_lora(A, B, torch.tensor([2, 8]), g)
    assert (Ar[0, 2:] == 0).all() and (Br[0, :, 2:] == 0).all()
    for got, want in ((Ar[0, :2].std(), 0.3), (Br[0, :, :2].std(), 0.05), (Ar[1].std(), 2.0), (Br[1].std(), 0.5)):
        assert abs(float(got) / want - 1) < 0.08


def test_stacked_random_loras_are_independent():
    g = torch.Generator().manual_seed(5)
    A, B = torch.randn(6, 2, 10, generator=g, dtype=torch.float64), torch.randn(6, 9, 2, generator=g, dtype=torch.float64)
    Ar, Br = paper.random_like_lora(A, B, torch.full((6,), 2), g)
    assert torch.linalg.matrix_rank(paper.lora_delta(Ar, Br, torch.ones(6, dtype=torch.float64)).reshape(6, -1)) == 6


# ---------------------------------------------------------------- peft references
def test_peft_forward_merges_and_init():
    torch.manual_seed(0)
    base = paper.BaseMLP(6, 8).eval()
    W = paper.base_weights(base)
    names = ["p0", "p1", "p2"]
    model = paper.peft_pool(base, [2, 4, 1], [4.0, 8.0, 2.0], names)
    A0, B0, scales = paper.pool_tensors(model, names, 4)
    assert all((B0[m] == 0).all() for m in paper.MODULES)
    assert float(A0["fc2"][1].abs().max()) <= 1 / math.sqrt(8) + 1e-7              # peft's Kaiming-uniform bound
    assert np.allclose(scales, [2.0, 2.0, 2.0])
    g = torch.Generator().manual_seed(6)
    A = {m: A0[m] + 0.3 * torch.randn(A0[m].shape, generator=g) * (A0[m] != 0) for m in paper.MODULES}
    B = {m: torch.randn(B0[m].shape, generator=g) * (torch.arange(4) < torch.tensor([2, 4, 1])[:, None])[:, None, :]
         for m in paper.MODULES}
    paper.load_pool_tensors(model, names, A, B)
    D = {m: paper.lora_delta(A[m], B[m], torch.as_tensor(scales, dtype=torch.float32)) for m in paper.MODULES}
    x = torch.randn(10, 6, generator=g)
    for i, n in enumerate(names):
        ours = paper.mlp_forward(W, x, {m: D[m][i] for m in paper.MODULES})
        assert torch.allclose(paper.peft_forward(model, n, x), ours, atol=1e-5)
    w = [0.5, -1.5, 2.0]
    cat = paper.peft_merge_delta(model, names, w, "cat")
    for m in paper.MODULES:
        ours = paper.merged_delta(torch.tensor([w]), D[m], "linear")[0]
        assert torch.allclose(cat[m], ours, atol=1e-5)
    ties = paper.peft_merge_delta(model, names, [1.0] * 3, "ties_svd", density=0.4)
    for m in paper.MODULES:
        assert torch.allclose(ties[m], paper.ties_merge(D[m], 0.4), atol=1e-5)
    assert "_merged" not in model.peft_config


def test_batched_training_equals_separate_training():
    base = paper.BaseMLP(6, 8)
    W = paper.base_weights(base)
    g = torch.Generator().manual_seed(7)
    D = {m: torch.randn(2, 3, *W[m][0].shape, generator=g) * 0.1 for m in paper.MODULES}
    x, y = torch.randn(2, 12, 6, generator=g), (torch.rand(2, 12, generator=g) > 0.5).float()
    c_both, _ = paper.train_merge(W, D, "leaky_relu", 0.0, x, y, [0.05, 0.5], 8)
    for p in range(2):
        c_one, _ = paper.train_merge(W, {m: D[m][p:p + 1] for m in paper.MODULES}, "leaky_relu", 0.0, x[p:p + 1],
                                     y[p:p + 1], [0.05, 0.5], 8)
        assert torch.allclose(c_both[p], c_one[0], atol=1e-6)
    assert not torch.allclose(c_both[:, 0], c_both[:, 1])


def test_dev_choice_prefers_accuracy_then_loss():
    acc = torch.tensor([[0.5, 0.9, 0.9], [0.7, 0.7, 0.6]])
    loss = torch.tensor([[0.1, 0.5, 0.4], [0.3, 0.2, 0.1]])
    assert paper.dev_choice(acc, loss).tolist() == [2, 1]


# ---------------------------------------------------------------- tiny run
def test_tiny_run(tiny_asset):
    res = paper.run(paper.Config(**TINY), tiny_asset)
    T = 3 * TINY["candidates_per_regime"]
    assert set(res.accuracy) == set(paper.ARMS)
    assert all(v.shape == (T,) and ((0 <= v) & (v <= 1)).all() for v in res.accuracy.values())
    assert res.lorahub_moved.shape == (T,) and res.duplicate_selected_closeness.shape == (T,)
    g = res.gaps
    assert g["closeness_cosine"] < 1e-10 and g["lorahub_value"] < 1e-6
    assert g["zero_coefficients"] == 0.0 and g["peft_forward"] < 1e-10 and g["peft_cat_forward"] < 1e-10
    assert g["peft_average"] < 1e-5 and g["peft_ties"] < 1e-5 and g["trace_cosine"] < 1e-10
    assert g["random_stack_rank"] == g["random_stack_size"] == TINY["num_selected"]
    assert (res.near_duplicate[res.regime == "R3"] >= 0).all() and (res.near_duplicate[res.regime != "R3"] == -1).all()
    assert res.kept.sum() <= 3 * TINY["num_targets"]
    res.kept[:] = True                                    # the statistics on every candidate
    m = paper.measurements(res)
    assert m["headline"].estimate.n == 2 * TINY["candidates_per_regime"]
    for g in ("R1", "R2"):                                # the per-regime headline rows: one regime's targets each
        h, sel = m["headline_by_regime"][g], res.regime == g
        assert h.estimate.n == TINY["candidates_per_regime"]
        assert math.isclose(h.estimate.point, float(np.mean(res.accuracy["ours"][sel] - res.accuracy["ours_random_pool"][sel])),
                            abs_tol=1e-9)
        assert h.estimate.level == 0.9 and h.estimate.low <= h.estimate.point <= h.estimate.high
    assert 0 <= m["beats_base"].low <= m["beats_base"].high <= 1


def test_targets_follow_the_regimes(tiny_asset):
    from compendium.papers.lora_recycling.experiment import _targets

    cfg = paper.Config(**TINY)
    U, regime, masks, dup = _targets(cfg, tiny_asset, np.random.default_rng(0))
    T = tiny_asset["teachers"]
    assert np.allclose(np.linalg.norm(U, axis=1), 1)
    r1 = regime == "R1"
    assert np.abs(U[r1] @ T[masks[r1][0]].T).max() < 1e-10                        # orthogonal to every H_a task
    r3 = np.flatnonzero(regime == "R3")
    assert np.allclose([U[t] @ T[dup[t]] for t in r3], cfg.near_duplicate_cosine)
    assert all(tiny_asset["kind"][dup[t]] != "undertrained" for t in r3)
