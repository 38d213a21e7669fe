"""Tests for compendium.papers.c2_gmae: shapes, properties, references, tiny run."""

import math

import numpy as np
import pytest
import scipy.spatial.distance
import torch

from compendium.papers import c2_gmae as paper
from compendium.stats import Estimate

TINY = dict(num_nodes=60, digits_nodes=60, digits_k=4, num_seeds=2, epochs=3, check_graphs=2, check_epochs=3,
            mean_degree=4.0, feature_dim=8, pe_dim=4)


def _graph(n=80, h=0.5, seed=0, d=8):
    return paper.csbm_dc(n, 4, h, 6.0, d, 1.0, np.random.default_rng(seed))


# ------------------------------------------------------------------------------------ shapes
def test_shapes():
    gr = _graph()
    assert gr.x.shape == (80, 8) and gr.y.shape == (80,) and gr.edge_index.shape[0] == 2
    A = gr.adjacency()
    assert (A == A.T).all() and not np.diag(A).any()
    P, lam = paper.laplacian_pe(A, 5)
    assert P.shape == (80, 5) and lam.shape == (5,)
    assert paper.rwse(A, 3).shape == (80, 3)
    s = paper.TrainSettings(epochs=2)
    model = paper.GraphMAE(8, 5, s)
    h = model.encode(torch.cat([gr.x, torch.tensor(P, dtype=torch.float32)], 1), gr.edge_index)
    assert h.shape == (80, s.heads * s.head_dim)
    z = model.decode(h, torch.arange(10), gr.edge_index)
    assert z.shape == (80, 8)


def test_digits_knn_graph():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((200, 6))
    y = np.arange(200) % 4
    X[:, :3] += 8 * y[:, None]                     # classes separable on three pixels: the kNN graph is homophilous
    clean = paper.digits_knn(X, y, 120, 5, 0.0, 0.0, np.random.default_rng(1))
    rewired = paper.digits_knn(X, y, 120, 5, 0.6, 0.0, np.random.default_rng(1))
    assert clean.x.shape == (120, 6)
    assert paper.edge_homophily(clean) > 0.9 > paper.edge_homophily(rewired)
    assert clean.degree().min() >= 5                       # every node keeps its k out-neighbours
    with pytest.raises(ValueError):
        paper.digits_knn(X, y, 120, 5, 1.5, 0.0, rng)


def test_csbm_homophily_and_degrees():
    gr = paper.csbm_dc(800, 4, 0.2, 10.0, 8, 1.0, np.random.default_rng(3))
    assert abs(paper.edge_homophily(gr) - 0.2) < 0.04
    assert abs(gr.degree().mean() - 10.0) < 1.5
    assert gr.degree().max() > 4 * np.median(gr.degree())          # Pareto propensities: a heavy tail
    assert abs(paper.edge_homophily(paper.csbm_dc(800, 4, 0.8, 10.0, 8, 1.0, np.random.default_rng(4))) - 0.8) < 0.04
    with pytest.raises(ValueError):
        paper.csbm_dc(50, 4, 1.0, 5.0, 4, 1.0, np.random.default_rng(0))


# ------------------------------------------------------------------------- math properties
def test_laplacian_pe_eigenpairs_and_rwse_on_a_cycle():
    gr = _graph(60)
    assert paper.laplacian_pe_error(gr, 6) < 1e-10
    n = 10
    A = np.zeros((n, n))
    A[np.arange(n), (np.arange(n) + 1) % n] = A[(np.arange(n) + 1) % n, np.arange(n)] = 1
    R = paper.rwse(A, 4)
    np.testing.assert_allclose(R[:, 0], 0.0)          # no self loops: return probability after 1 step
    np.testing.assert_allclose(R[:, 1], 0.5)          # back along the edge just taken
    np.testing.assert_allclose(R[:, 3], 6 / 16)       # C(4, 2) / 2^4 on a long cycle
    P, lam = paper.laplacian_pe(A, 2)                 # cycle: lambda = 1 - cos(2 pi k / n), k = 1 twice
    np.testing.assert_allclose(lam, 1 - math.cos(2 * math.pi / n), atol=1e-12)


def test_rwse_equals_its_spectral_form_and_densities_on_a_known_graph():
    gr = _graph(50, seed=2)
    assert paper.rwse_error(gr, 6) < 1e-10
    # a triangle 0-1-2 with a pendant 3 on node 2 and an isolated node 4
    ei = torch.tensor([[0, 1, 0, 2, 1, 2, 2, 3], [1, 0, 2, 0, 2, 1, 3, 2]])
    small = paper.Graph(torch.zeros(5, 2), np.zeros(5, int), ei, "toy")
    np.testing.assert_array_equal(paper.node_density(small, "degree"), [2, 2, 3, 1, 0])
    np.testing.assert_array_equal(paper.node_density(small, "kcore"), [2, 2, 2, 1, 0])
    np.testing.assert_allclose(paper.node_density(small, "clustering"), [1, 1, 1 / 3, 0, 0])
    with pytest.raises(ValueError):
        paper.node_density(small, "pagerank")
    np.testing.assert_allclose(paper.rwse(small.adjacency(), 3), paper.rwse_spectral(small.adjacency(), 3), atol=1e-12)


def test_segment_conv_equals_gatconv_with_dropout_and_gradients():
    gr = _graph(40, seed=5)
    ei = paper.with_self_loops(gr.edge_index, gr.num_nodes)
    bias = torch.log(paper.hetero_edge_weights(gr.x, ei, 2.0))
    torch.manual_seed(0)
    plain = paper.BiasedGATConv(8, 5, heads=3, dropout=0.3, add_self_loops=False)
    ours = paper.SegmentGATConv(8, 5, heads=3, dropout=0.3, add_self_loops=False)
    ours.load_state_dict(plain.state_dict())
    for edge_attr in (None, bias):
        for train in (True, False):
            plain.train(train), ours.train(train)
            torch.manual_seed(1)
            a = plain(gr.x, ei, edge_attr=edge_attr)
            torch.manual_seed(1)                       # the same dropout draw
            b = ours(gr.x, ei, edge_attr=edge_attr)
            torch.testing.assert_close(b, a, atol=1e-5, rtol=1e-5)
            ga = torch.autograd.grad(a.square().sum(), plain.att_src)[0]
            gb = torch.autograd.grad(b.square().sum(), ours.att_src)[0]
            torch.testing.assert_close(gb, ga, atol=1e-4, rtol=1e-4)
    plain.train(), ours.train()
    torch.manual_seed(2)
    a = plain(gr.x, ei)
    torch.manual_seed(3)                               # another draw: the outputs differ (the check is not vacuous)
    assert (ours(gr.x, ei) - a).abs().max() > 1e-3


def test_kernel_training_gap_and_js_arm():
    gr = _graph(60, seed=4)
    s = paper.TrainSettings(epochs=5)
    arms = paper.arms(1.0, 1.0, 10.0)
    out = paper.kernel_training_gap(gr, s, 0, arms["c2"], 4)
    assert out["backend"] == "reference" and out["loss_gap"] <= 1e-4 and out["embed_gap"] <= 1e-3
    pe, _ = paper.laplacian_pe(gr.adjacency(), 4)
    bins = paper.degree_quartiles(gr.degree(), np.random.default_rng(0))
    _, js = paper.train_gmae(gr.x, gr.edge_index, pe, bins, arms["c2_js"], s, 0)
    _, cos = paper.train_gmae(gr.x, gr.edge_index, pe, bins, arms["c2"], s, 0)
    assert np.isfinite(js).all() and js[0] != cos[0]    # same masks and init, another consistency term
    with pytest.raises(ValueError):
        paper.ArmSpec(consistency="l2")


def test_hea_weights_properties():
    gr = _graph()
    assert paper.hea_weight_violations(gr, 2.0) == {"asymmetric": 0, "below_one": 0, "non_monotone": 0}
    w0 = paper.hetero_edge_weights(gr.x, gr.edge_index, 0.0)
    assert torch.equal(w0, torch.ones_like(w0))
    x = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]])
    ei = torch.tensor([[0, 0, 0], [1, 2, 3]])
    np.testing.assert_allclose(paper.hetero_edge_weights(x, ei, 2.0).numpy(), [1.0, 2.0, 3.0], atol=1e-6)
    with pytest.raises(ValueError):
        paper.hetero_edge_weights(x, ei, -1.0)


def test_sce_loss_known_values():
    x = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
    assert float(paper.sce_loss(x, 3 * x)) == pytest.approx(0.0, abs=1e-7)
    assert float(paper.sce_loss(x, x.flip(1))) == pytest.approx(1.0)
    assert float(paper.sce_loss(x, -x, alpha=2.0)) == pytest.approx(4.0)


def test_js_per_target_matches_scipy():
    rng = np.random.default_rng(0)
    target = torch.tensor([0, 0, 0, 1, 1, 2])
    p = torch.tensor(rng.random(6))
    q = torch.tensor(rng.random(6))
    for t in range(3):
        sel = target == t
        p[sel] /= p[sel].sum()
        q[sel] /= q[sel].sum()
    js = paper.js_per_target(p, q, target, 4).numpy()
    for t in range(3):
        sel = (target == t).numpy()
        ref = scipy.spatial.distance.jensenshannon(p.numpy()[sel], q.numpy()[sel]) ** 2
        assert js[t] == pytest.approx(ref, abs=1e-12)
    assert js[3] == 0.0
    assert paper.js_per_target(p, p, target, 3).abs().max() == 0


# ------------------------------------------------------------------------------ masks
def test_density_partition_mask_counts_and_coverage():
    rng = np.random.default_rng(1)
    bins = paper.degree_quartiles(rng.integers(1, 30, 103), rng)
    assert sorted(np.bincount(bins)) == [25, 26, 26, 26]
    gen = torch.Generator().manual_seed(0)
    mem = paper.CoverageMemory(bins, 1.0)
    mem_inf = paper.CoverageMemory(bins, float("inf"))
    for _ in range(30):
        mask = paper.density_partition_mask(mem, 0.3, gen).numpy()
        assert len(set(mask)) == len(mask)
        for q in range(4):
            assert (bins[mask] == q).sum() == round(0.3 * (bins == q).sum())
        paper.density_partition_mask(mem_inf, 0.3, gen)
        for q in range(4):
            assert np.ptp(mem_inf.counts.numpy()[bins == q]) <= 1
    # tau = 1 spreads coverage more evenly than random masks, which it is not without memory
    rand = np.zeros(103)
    for _ in range(30):
        rand[paper.random_mask(103, 0.3, gen).numpy()] += 1
    assert mem.counts.numpy().std() < rand.std()


def test_mask_count_checks_have_power():
    c = paper.Config(**TINY)
    out = paper.mask_count_checks(c, 5, 10, np.random.default_rng(0))
    assert out["dpm_max_deviation"] <= 1 and out["tau_inf_max_spread"] <= 1
    assert out["random_max_deviation"] >= 2           # the same check fails for GraphMAE's random mask


def test_split_mask_matches_graphmae_fractions():
    gen = torch.Generator().manual_seed(0)
    mask = torch.arange(40)
    token, noise, src = paper.split_mask(mask, 100, 0.1, gen)
    assert len(token) == 36 and len(noise) == 4 and len(src) == 4
    assert set(token.tolist()).isdisjoint(noise.tolist())


# ---------------------------------------------------------------------------- references
def test_biased_gat_is_gatconv_without_bias_and_reweights_with_it():
    from torch_geometric.nn import GATConv

    gr = _graph(30)
    torch.manual_seed(0)
    plain = GATConv(8, 4, heads=2, fill_value=0.0)
    ours = paper.BiasedGATConv(8, 4, heads=2, fill_value=0.0)
    ours.load_state_dict(plain.state_dict())
    assert torch.equal(plain(gr.x, gr.edge_index), ours(gr.x, gr.edge_index))
    # bias = log w: attention becomes w_ij * exp(e_ij) / sum_k w_ik exp(e_ik) (dense reference)
    w = paper.hetero_edge_weights(gr.x, gr.edge_index, 3.0)
    _, (ei, a0) = ours(gr.x, gr.edge_index, return_attention_weights=True)
    _, (ei1, a1) = ours(gr.x, gr.edge_index, edge_attr=torch.log(w), return_attention_weights=True)
    assert torch.equal(ei, ei1)
    wfull = torch.ones(ei.shape[1])
    wfull[: w.numel()] = w                             # self loops are appended after the edges, weight 1
    num = a0 * wfull[:, None]
    den = torch.zeros(gr.num_nodes, 2).index_add_(0, ei[1], num)
    torch.testing.assert_close(a1, num / den[ei[1]], atol=1e-6, rtol=1e-5)


def test_all_c2_parts_off_is_graphmae_bit_for_bit():
    gr = _graph(50)
    assert paper.bit_for_bit_gap(gr, paper.TrainSettings(epochs=4), 3) == 0.0
    # and an arm with a C2 part on does change the curve (the check is not vacuous)
    s = paper.TrainSettings(epochs=4)
    _, ref = paper.train_gmae(gr.x, gr.edge_index, None, np.zeros(50, int), paper.ArmSpec(), s, 3)
    _, hea = paper.train_gmae(gr.x, gr.edge_index, None, np.zeros(50, int), paper.ArmSpec(hea_beta=1.0), s, 3)
    assert np.abs(ref - hea).max() > 0


def test_training_reduces_the_loss_and_is_seeded():
    gr = _graph(80)
    pe, _ = paper.laplacian_pe(gr.adjacency(), 4)
    bins = paper.degree_quartiles(gr.degree(), np.random.default_rng(0))
    arm = paper.arms(1.0, 1.0)["c2"]
    s = paper.TrainSettings(epochs=25)
    _, a = paper.train_gmae(gr.x, gr.edge_index, pe, bins, arm, s, 0)
    _, b = paper.train_gmae(gr.x, gr.edge_index, pe, bins, arm, s, 0)
    assert np.array_equal(a, b)
    assert a[-5:].mean() < a[:5].mean()


def test_deciding_level():
    e = {"a": Estimate(1.0, 0.5, 1.5), "b": Estimate(0.2, -0.1, 0.5), "c": Estimate(0.3, 0.1, 0.5)}
    assert paper.deciding_level(e)[0] == "c" and paper.levels_passing(e) == 2
    e["c"] = Estimate(-0.3, -0.5, -0.1)
    assert paper.deciding_level(e)[0] == "b" and paper.levels_passing(e) == 1


def test_config_validation():
    with pytest.raises(ValueError):
        paper.Config(homophily_levels=(0.5, 0.2, 0.8))
    with pytest.raises(ValueError):
        paper.Config(mask_rate=1.0)
    with pytest.raises(ValueError):
        paper.Config(num_seeds=1)


def test_tiny_run_is_deterministic_with_variants():
    config = paper.Config(**TINY, variants=True)
    r1, r2 = paper.run(config), paper.run(config)
    for name in config.dataset_names():
        for arm, v in r1.accuracy[name].items():
            assert np.array_equal(v, r2.accuracy[name][arm]) and v.shape == (2,)
    assert r1.checks["bit_for_bit"] == 0.0 and r1.checks["masks"]["dpm_max_deviation"] <= 1
    m = paper.measurements(r1)
    assert isinstance(m["headline"], Estimate) and m["headline_key"] in config.dataset_names()
    assert 0.0 <= m["gap_p"] <= 1.0
    assert 0.0 <= m["similar_sce_noise_floor"] <= 1.0 and m["headline_half_width"] >= 0.0
    assert isinstance(m["feature_floor"], Estimate)
    assert r1.correct["h=0.2"]["graphmae"].shape == (2, len(r1.correct["h=0.2"]["graphmae"][0]))
    for v in paper.VARIANTS:                            # the variants: trained on the three levels, not on digits
        assert r1.accuracy["h=0.5"][v].shape == (2,) and v not in r1.accuracy["digits"]
        assert isinstance(m["variants"][v]["vs_c2"], Estimate) and 0 <= m["variants"][v]["passing"] <= 3
    assert "rwse_only" in r1.accuracy["h=0.2"] and isinstance(m["js_loss_js"], Estimate)
    assert r1.checks["rwse_error"] < 1e-8 and r1.checks["kernel_training"]["loss_gap"] <= 1e-4
    assert set(r1.checks["density_coverage"]) == {"random", "degree", "kcore", "clustering"}


def test_self_path_is_bit_for_bit_and_changes_the_encoder():
    gr = _graph(50)
    s = paper.TrainSettings(epochs=3, self_path=True)
    assert paper.bit_for_bit_gap(gr, s, 2) == 0.0                  # the reference writes the skip out itself
    torch.manual_seed(0)
    model = paper.GraphMAE(8, 0, s)
    assert model.skip1.weight.shape == (64, 8) and model.skip2.weight.shape == (64, 64)
    model.eval()
    ei = paper.with_self_loops(gr.edge_index, 50)
    with_skip = model.encode(gr.x, ei)
    model.skip1, model.skip2 = None, None
    assert not torch.allclose(with_skip, model.encode(gr.x, ei))
    # the GAT layers are drawn before the skips: the same seed gives the same GAT weights with or without
    torch.manual_seed(0)
    plain = paper.GraphMAE(8, 0, paper.TrainSettings(epochs=3))
    assert plain.skip1 is None and torch.equal(plain.enc1.lin.weight, model.enc1.lin.weight)
    # the kernel check still trains through the segment kernel with the self path on
    arm = paper.arms(1.0, 1.0)["c2"]
    gap = paper.kernel_training_gap(gr, paper.TrainSettings(epochs=2, self_path=True), 0, arm, 4, backend="reference")
    assert gap["loss_gap"] <= 1e-4


def test_noise_floor_fraction_known_values():
    n = 100
    a = np.zeros(n, bool)
    b = a.copy()
    b[:4] = True                                                   # 4 discordant nodes; > 2 points needs |2B - 4| > 2: B in {0, 4}
    sce = np.array([1.0, 1.0])
    assert paper.noise_floor_fraction([np.stack([a, b])], [sce]) == pytest.approx(2 / 16)
    assert paper.noise_floor_fraction([np.stack([a, a])], [sce]) == 0.0          # identical predictions: no noise
    assert paper.noise_floor_fraction([np.stack([a, b])], [np.array([1.0, 2.0])]) == 0.0   # no close pair
    c = np.zeros(n, bool)
    c[:40] = True                                                  # many discordant nodes: noise alone often > 2 points
    assert paper.noise_floor_fraction([np.stack([a, c])], [sce]) > 0.5
