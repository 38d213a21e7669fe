"""Tests for compendium.papers.collapsed_operators: shapes, properties, references, tiny run."""

import dataclasses
import types
from itertools import combinations

import numpy as np
import pytest
import scipy.sparse.linalg as spla
import scipy.stats
import sympy

from compendium.papers import collapsed_operators as paper
from compendium.papers.collapsed_operators import symbolic

TINY = dict(num_complexes=10, max_vertices=10, num_seeds=5, community_size=8, triangles_per_community=6,
            smoothing_dof=4.0, num_dev_seeds=3)


def _complexes(count=12, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for i in range(count):
        if i % 2:
            out.append(paper.vietoris_rips_complex(rng.random((int(rng.integers(6, 16)), 2)), 0.4))
        else:
            out.append(paper.random_clique_complex(int(rng.integers(6, 16)), 0.45, rng))
    return [cx for cx in out if cx.num_triangles > 0]


def _pinv_form(cx, c):
    """S^+ = L0^+ + P H H^T P / c (valid on a connected graph)."""
    op = paper.graded_operator(cx, "triangle_shift", c)
    L0 = op.blocks()[0]
    H = paper.vertex_triangle_incidence(cx).toarray()
    P = np.eye(cx.num_vertices) - 1.0 / cx.num_vertices
    return np.linalg.pinv(np.linalg.pinv(L0) + P @ H @ H.T @ P / c)


# ---------------------------------------------------------------- shapes
def test_shapes():
    cx = paper.clique_complex(5, [(0, 1), (0, 2), (1, 2), (2, 3), (3, 4), (2, 4)])
    assert (cx.num_vertices, cx.num_edges, cx.num_triangles) == (5, 6, 2)
    B1, B2 = paper.boundary_matrices(cx)
    assert B1.shape == (5, 6) and B2.shape == (6, 2)
    assert paper.vertex_triangle_incidence(cx).shape == (5, 2)
    L0, L1 = paper.hodge_laplacians(B1, B2)
    assert L0.shape == (5, 5) and L1.shape == (6, 6)
    for scheme, h in (("triangle_shift", 2), ("signed_triangle", 2), ("unsigned_triangle", 2), ("signed_edge", 6)):
        op = paper.graded_operator(cx, scheme, 1.0)
        m00, m0h, mhh = op.blocks()
        assert m00.shape == (5, 5) and m0h.shape == (5, h) and mhh.shape == (h, h)
        assert op.matrix().shape == (5 + h, 5 + h)
        assert paper.collapsed_operator(op).shape == (5, 5)
    assert paper.collapsed_family(paper.graded_operator(cx), [0.0, 1.0, 2.0]).shape == (3, 5, 5)
    assert paper.higher_order_minimum(paper.graded_operator(cx), np.ones((5, 4))).shape == (4,)
    assert paper.spectral_embedding(np.asarray(L0.todense()), 2).shape == (5, 2)
    planted, labels = paper.triangle_planted_complex(3, 7, 5, 0.1, np.random.default_rng(1))
    assert planted.num_vertices == 21 and labels.shape == (21,) and 1 <= planted.num_triangles <= 15
    assert np.all(labels[planted.triangles] == labels[planted.triangles[:, :1]])  # aligned triangles


# ---------------------------------------------------------------- properties
def test_boundary_of_boundary_and_laplacian_kernel():
    for cx in _complexes():
        B1, B2 = paper.boundary_matrices(cx)
        assert abs(B1 @ B2).max() == 0
        L0 = (B1 @ B1.T).toarray()
        np.testing.assert_allclose(L0.sum(1), 0, atol=1e-12)
        np.testing.assert_array_equal(np.diag(L0), np.bincount(cx.edges.ravel(), minlength=cx.num_vertices))


def test_collapsed_operator_is_psd_below_l0_and_laplacian_like():
    for cx in _complexes():
        op = paper.graded_operator(cx, "triangle_shift", 0.7)
        assert np.linalg.eigvalsh(op.matrix())[0] > -1e-9
        L0, S = op.blocks()[0], paper.collapsed_operator(op)
        scale = np.linalg.norm(L0, 2)
        assert np.linalg.eigvalsh(S)[0] > -1e-10 * scale
        assert np.linalg.eigvalsh(L0 - S)[0] > -1e-10 * scale
        assert np.all(np.linalg.eigvalsh(S) <= np.linalg.eigvalsh(L0) + 1e-10 * scale)
        np.testing.assert_allclose(S @ np.ones(cx.num_vertices), 0, atol=1e-10 * scale)


def test_eps_monotone_and_limit():
    cx = _complexes()[0]
    op = paper.graded_operator(cx, "triangle_shift", 1.0)
    L0 = op.blocks()[0]
    fam = paper.collapsed_family(op, [0.0, 0.5, 5.0, 50.0, 1e9])
    for a, b in zip(fam[:-1], fam[1:]):
        assert np.linalg.eigvalsh(b - a)[0] > -1e-10
    dist = [np.linalg.norm(L0 - s, 2) for s in fam]
    assert all(x > y for x, y in zip(dist, dist[1:])) and dist[-1] < 1e-6 * np.linalg.norm(L0, 2)


def test_signed_couplings_collapse_trivially():
    for cx in _complexes(6):
        L0 = paper.graded_operator(cx).blocks()[0]
        for c, eps in ((1.0, 0.0), (0.0, 0.3), (2.0, 1.5)):
            s_edge = paper.collapsed_operator(paper.graded_operator(cx, "signed_edge", c), eps)
            np.testing.assert_allclose(s_edge, (c + eps) / (1 + c + eps) * L0, atol=1e-10)
        s_tri = paper.collapsed_operator(paper.graded_operator(cx, "signed_triangle", 1.0))
        np.testing.assert_allclose(s_tri, L0, atol=1e-12)


def test_triangle_shift_is_relabelling_equivariant_and_unsigned_is_not():
    cx = _complexes()[1]
    perm = np.random.default_rng(3).permutation(cx.num_vertices)
    moved = paper.make_complex(cx.num_vertices, perm[cx.edges], perm[cx.triangles])
    S = paper.collapsed_operator(paper.graded_operator(cx))
    S_moved = paper.collapsed_operator(paper.graded_operator(moved))
    np.testing.assert_allclose(S_moved[np.ix_(perm, perm)], S, atol=1e-10)  # S'[p(u), p(v)] = S[u, v]
    # the |B2| coupling depends on the edge orientation: some relabelling changes its spectrum
    gaps = []
    for seed in range(5):
        perm = np.random.default_rng(seed).permutation(cx.num_vertices)
        moved = paper.make_complex(cx.num_vertices, perm[cx.edges], perm[cx.triangles])
        a = np.linalg.eigvalsh(paper.collapsed_operator(paper.graded_operator(cx, "unsigned_triangle")))
        b = np.linalg.eigvalsh(paper.collapsed_operator(paper.graded_operator(moved, "unsigned_triangle")))
        gaps.append(np.abs(a - b).max())
    assert max(gaps) > 1e-3


# ---------------------------------------------------------------- references
def test_triangles_and_rips_against_brute_force():
    rng = np.random.default_rng(5)
    pts = rng.random((14, 2))
    cx = paper.vietoris_rips_complex(pts, 0.35)
    d = np.linalg.norm(pts[:, None] - pts[None], axis=-1)
    edges = [(i, j) for i, j in combinations(range(14), 2) if d[i, j] <= 0.35]
    tris = [t for t in combinations(range(14), 3) if all(d[a, b] <= 0.35 for a, b in combinations(t, 2))]
    np.testing.assert_array_equal(cx.edges, np.array(edges))
    np.testing.assert_array_equal(cx.triangles, np.array(tris).reshape(-1, 3))
    assert paper.clique_complex(4, list(combinations(range(4), 2))).num_triangles == 4


def test_boundary_matrix_matches_definition():
    cx = paper.make_complex(3, [(0, 1), (0, 2), (1, 2)], [(0, 1, 2)])
    B1, B2 = paper.boundary_matrices(cx)
    np.testing.assert_array_equal(B1.toarray(), [[-1, -1, 0], [1, 0, -1], [0, 1, 1]])
    np.testing.assert_array_equal(B2.toarray().ravel(), [1, -1, 1])  # [01] - [02] + [12]


def test_dense_factor_family_pinv_and_implicit_forms_agree():
    rng = np.random.default_rng(7)
    for cx in _complexes():
        op = paper.graded_operator(cx, "triangle_shift", 0.8)
        S = paper.collapsed_operator(op, eps=0.2)
        np.testing.assert_allclose(paper.collapsed_operator_factor_form(op, 0.2), S, atol=1e-10)
        np.testing.assert_allclose(paper.collapsed_family(op, [0.2])[0], S, atol=1e-10)
        L0 = op.blocks()[0]
        if np.sum(np.linalg.eigvalsh(L0) < 1e-9) == 1:  # connected: the pseudo-inverse form holds
            np.testing.assert_allclose(_pinv_form(cx, 1.0), S, atol=1e-8)
        x = rng.standard_normal(cx.num_vertices)
        np.testing.assert_allclose(paper.collapsed_matvec(op, x, 0.2), S @ x, atol=1e-8)
        np.testing.assert_allclose(paper.higher_order_minimum(op, x, 0.2), x @ S @ x, rtol=1e-10)


def test_implicit_eigsh_matches_dense_top_eigenvalue():
    cx = paper.vietoris_rips_complex(np.random.default_rng(2).random((80, 2)), 0.2)
    op = paper.graded_operator(cx, "triangle_shift", 1.0)
    top = spla.eigsh(paper.collapsed_linear_operator(op), k=1, which="LA", tol=1e-10)[0][0]
    assert abs(top - np.linalg.eigvalsh(paper.collapsed_operator(op))[-1]) < 1e-7


def test_smoothing_tools_and_sign_test():
    lam = np.array([0.0, 0.5, 1.0, 3.0, 8.0])
    tau = paper.tau_for_dof(lam, 2.5)
    assert abs(paper.effective_dof(lam, tau) - 2.5) < 1e-10
    A = np.diag(lam)
    y = np.arange(5.0)
    np.testing.assert_allclose(paper.tikhonov_smooth(A, y, tau), y / (1 + tau * lam))
    with pytest.raises(ValueError):
        paper.tau_for_dof(lam, 1.0)  # not above the number of zero eigenvalues
    test = paper.sign_test([1.0, 2.0, -1.0, 0.0, 3.0])
    assert (test["wins"], test["losses"], test["ties"]) == (3, 1, 1)
    assert abs(test["p_value"] - scipy.stats.binom.sf(2, 4, 0.5)) < 1e-12
    assert paper.sign_test([0.0, 0.0])["p_value"] == 1.0


def test_spectral_clustering_recovers_disconnected_blocks():
    cx, labels = paper.triangle_planted_complex(3, 8, 12, 0.0, np.random.default_rng(0))
    S = paper.collapsed_operator(paper.graded_operator(cx))
    from sklearn.metrics import adjusted_rand_score

    assert np.sum(np.linalg.eigvalsh(S) < 1e-9) == 3  # no noise edges: three components
    assert adjusted_rand_score(labels, paper.spectral_clustering(S, 3, 0)) == 1.0


# ---------------------------------------------------------------- sympy
def test_symbolic_residuals_vanish():
    assert symbolic.boundary_composition_residual(5) == 0
    assert sympy.simplify(symbolic.block_factorisation_residual()) == 0
    assert sympy.simplify(symbolic.completion_of_square_residual()) == 0
    assert sympy.simplify(symbolic.schur_psd_witness_residual()) == 0
    assert symbolic.scalar_schur_is_nonnegative() is True


def test_wrong_witness_residual_does_not_vanish():
    assert sympy.simplify(symbolic.schur_psd_witness_residual(witness_sign=1)) != 0
    with pytest.raises(ValueError, match="witness_sign"):
        symbolic.schur_psd_witness_residual(witness_sign=0)


def test_signed_edge_fill_is_never_denser_than_l0():
    fill = paper.signed_edge_fill(paper.Config(**TINY))
    assert fill.shape == (TINY["num_complexes"], 2)
    assert np.all(fill[:, 1] <= fill[:, 0])


def test_symbolic_residual_detects_a_broken_boundary(monkeypatch):
    original = symbolic.boundary_matrices

    def broken(cx):
        B1, B2 = original(cx)
        B2 = B2.tolil()
        B2[0, 0] = -B2[0, 0]
        return B1, B2.tocsr()

    monkeypatch.setattr(symbolic, "boundary_matrices", broken)
    assert symbolic.boundary_composition_residual(4) != 0


# ---------------------------------------------------------------- config, inputs and run
@pytest.mark.parametrize(
    "bad",
    [
        dict(num_complexes=5), dict(max_vertices=7), dict(max_vertices=61), dict(coupling_cost=0.0),
        dict(coupling_cost=-1.0), dict(num_seeds=4), dict(num_communities=1), dict(community_size=5),
        dict(triangles_per_community=0), dict(noise_edge_prob=0.6), dict(smoothing_dof=1.0),
        dict(smoothing_dof=60.0), dict(smoothing_noise=0.0), dict(seed=-1), dict(num_seeds=5.0),
        dict(coupling_cost=True), dict(community_size=6, num_communities=2, smoothing_dof=12.0),
    ],
)
def test_bad_config_raises(bad):
    with pytest.raises(ValueError):
        paper.Config(**bad)


def test_bad_inputs_raise():
    with pytest.raises(ValueError):
        paper.make_complex(3, [(0, 1), (1, 2)], [(0, 1, 2)])  # edge (0, 2) missing
    with pytest.raises(ValueError):
        paper.make_complex(3, [(0, 3)])
    with pytest.raises(ValueError):
        paper.make_complex(3, [(1, 1)])
    cx = paper.clique_complex(3, [(0, 1), (0, 2), (1, 2)])
    with pytest.raises(ValueError):
        paper.graded_operator(cx, "hodge")
    with pytest.raises(ValueError):
        paper.graded_operator(cx, coupling_cost=-0.1)
    with pytest.raises(ValueError):
        paper.collapsed_operator(paper.graded_operator(cx), eps=-1.0)
    with pytest.raises(ValueError):
        paper.collapsed_operator(paper.graded_operator(cx, coupling_cost=0.0), eps=0.0)
    with pytest.raises(ValueError):
        paper.collapsed_matvec(paper.graded_operator(cx), np.ones(4))
    with pytest.raises(ValueError):
        paper.vietoris_rips_complex(np.zeros((3, 2)), 0.0)


def test_tiny_run_is_deterministic():
    config = paper.Config(**TINY)
    first, second = paper.run(config), paper.run(config)
    for field in dataclasses.fields(paper.Result):
        a, b = getattr(first, field.name), getattr(second, field.name)
        if isinstance(a, np.ndarray):
            assert np.array_equal(a, b), field.name
        elif field.name == "tuning":
            assert a["tuned_c"] == b["tuned_c"] and a["tuned_w"] == b["tuned_w"] and a["own_c"] == b["own_c"]
        elif field.name == "tuned":
            for regime in a:
                assert a[regime]["tuned_c"] == b[regime]["tuned_c"] and a[regime]["tuned_w"] == b[regime]["tuned_w"]
                for m in a[regime]["ari"]:
                    assert np.array_equal(a[regime]["ari"][m], b[regime]["ari"][m]), (regime, m)
        elif isinstance(a, dict):
            assert a.keys() == b.keys(), field.name
            for k in a:
                assert np.array_equal(np.asarray(a[k]), np.asarray(b[k])) if not isinstance(a[k], sympy.Basic) else a[k] == b[k], (field.name, k)
        elif isinstance(a, paper.SimplicialComplex):
            assert np.array_equal(a.edges, b.edges) and np.array_equal(a.triangles, b.triangles)
    assert first.psd_margin.shape == (10,) and first.limit_distance.shape == (10, len(paper.EPS_GRID) + 1)
    assert all(first.ari[m].shape == (5,) for m in paper.METHODS)
    assert first.taus.shape == (5, 2)
    assert np.all(first.psd_margin > -1e-9) and np.all(first.eigen_excess < 1e-9)
    np.testing.assert_array_equal(first.ari_triangle_free["L0"], first.ari_triangle_free["collapsed S"])


def test_tuning_rule_picks_the_best_dev_mean_first_on_ties():
    dev = {("S", 0.1): np.array([0.5, 0.7]), ("S", 1.0): np.array([0.6, 0.6]), ("S", 10.0): np.array([0.2, 0.2])}
    assert paper.select(dev, "S", (0.1, 1.0, 10.0)) == 0.1  # tie at 0.6: the first grid value
    dev[("S", 10.0)] = np.array([0.9, 0.9])
    assert paper.select(dev, "S", (0.1, 1.0, 10.0)) == 10.0


def test_candidate_operators_contain_the_fusion_and_collapsed_family():
    cx, _ = paper.triangle_planted_complex(2, 8, 5, 0.2, rng=np.random.default_rng(0))
    ops = paper.candidate_operators(cx)
    L0, Ltri = ops["L0"], ops["triangle only"]
    for w in paper.FUSION_GRID:
        np.testing.assert_allclose(ops[("fusion", w)], L0 + w * Ltri)
    tops = [np.linalg.eigvalsh(ops[("S", c)])[-1] for c in paper.COUPLING_GRID]
    assert np.all(np.diff(tops) >= -1e-9) and tops[-1] <= np.linalg.eigvalsh(L0)[-1] + 1e-9  # S_c increases to L0 in c


def test_tuned_comparison_scores_the_main_planted_complexes_and_estimates_are_paired():
    config = paper.Config(**TINY)
    result = paper.run(config)
    planted = result.tuned["planted"]
    np.testing.assert_array_equal(planted["ari"]["L0"], result.ari["L0"])  # test stream = the main complexes
    np.testing.assert_array_equal(planted["ari"]["collapsed S (c)"], result.ari["collapsed S"])
    assert planted["tuned_c"] in paper.COUPLING_GRID and planted["tuned_w"] in paper.FUSION_GRID
    # one c and one w for both regimes, picked on the pooled dev split
    assert result.tuned["graph"]["tuned_c"] == planted["tuned_c"] == result.tuning["tuned_c"]
    assert result.tuned["graph"]["tuned_w"] == planted["tuned_w"] == result.tuning["tuned_w"]
    assert result.tuning["c_interior"] == paper.is_interior(planted["tuned_c"], paper.COUPLING_GRID)
    assert set(planted["ari"]) == set(paper.TUNED_METHODS)
    est = paper.ledger_estimates(result)
    gain = est["clustering_gain"]
    assert gain.n == config.num_seeds and gain.unit == "test complexes"
    assert gain.low <= gain.point <= gain.high
    assert np.isclose(gain.point, np.mean(result.ari["collapsed S"] - result.ari["L0"]))
    graph = result.tuned["graph"]["ari"]
    assert np.isclose(est["graph_triangle_only"].point, np.mean(graph["triangle only"] - graph["L0"]))


def test_single_c_is_picked_on_the_pooled_dev_split_and_interior_is_strict():
    grid = (0.1, 1.0, 10.0)
    assert not paper.is_interior(0.1, grid) and paper.is_interior(1.0, grid) and not paper.is_interior(10.0, grid)
    planted = {("S", 0.1): np.array([0.9, 0.9]), ("S", 1.0): np.array([0.8, 0.8]), ("S", 10.0): np.array([0.2, 0.2])}
    graph = {("S", 0.1): np.array([0.0, 0.0]), ("S", 1.0): np.array([0.7, 0.7]), ("S", 10.0): np.array([0.9, 0.9])}
    # each regime alone picks an end; pooled, the interior value wins
    assert paper.select(planted, "S", grid) == 0.1 and paper.select(graph, "S", grid) == 10.0
    assert paper.select(paper.baselines.pooled([planted, graph]), "S", grid) == 1.0


def test_grid_ends_fail_the_single_c_claim_on_a_crafted_result():
    """The far end (S ~ L0) passes the graph half trivially but not the planted half; the near end the reverse."""
    grid = paper.COUPLING_GRID
    rng = np.random.default_rng(0)
    l0_p, l0_g = rng.uniform(0.1, 0.2, 20), rng.uniform(0.85, 0.95, 20)
    sweep_p = {c: l0_p + (0.6 if c < grid[-1] else 0.0) + rng.normal(0, 0.01, 20) for c in grid}
    sweep_g = {c: l0_g - (0.5 if c == grid[0] else 0.0) + rng.normal(0, 0.01, 20) for c in grid}
    fake = types.SimpleNamespace(tuned={"planted": {"sweep": sweep_p, "ari": {"L0": l0_p}}, "graph": {"sweep": sweep_g, "ari": {"L0": l0_g}}})
    far, near, mid = (paper.one_c_serves_both(fake, c) for c in (grid[-1], grid[0], grid[2]))
    assert far["graph_verdict"] == "pass" and far["planted_verdict"] != "pass" and not far["passes"]
    assert near["planted_verdict"] == "pass" and near["graph_verdict"] == "fail" and not near["passes"]
    assert mid["passes"]
