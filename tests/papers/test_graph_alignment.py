"""Tests for compendium.papers.graph_alignment: shapes, properties, references, tiny run."""

import itertools

import numpy as np
import pytest
import scipy.stats
import sympy
import torch

from compendium.papers import graph_alignment as paper
from compendium.stats import Estimate

TINY = dict(eval_pairs=4, generator_pairs=20, baseline_pairs=2, lp_matrices=3, lp_size=4, probe_graphs=2,
            probe_steps=3, num_nodes=12, mean_degree=3.0)
TINY_E0 = 2                      # index of the default headline_eta (0.1) in the default grid


def _pairs(G=6, n=20, eta=0.1, seed=0):
    return paper.make_pairs(G, n, 4.0, eta, np.random.default_rng(seed))


# ---------------------------------------------------------------- shapes and generator
def test_shapes():
    A, B, perm = _pairs()
    assert A.shape == B.shape == (6, 20, 20) and perm.shape == (6, 20)
    assert (A == A.transpose(0, 2, 1)).all() and not A[:, np.arange(20), np.arange(20)].any()
    assert (B == B.transpose(0, 2, 1)).all() and not B[:, np.arange(20), np.arange(20)].any()
    model = paper.SiameseGNN("gat", 16, out_dim=8)
    S = paper.similarity(model, A, B)
    assert S.shape == (6, 20, 20)


def test_permutation_convention():
    rng = np.random.default_rng(1)
    A = paper.erdos_renyi(3, 15, 4.0, rng)
    B, perm = paper.random_permute(A, rng)
    for a, b, p in zip(A, B, perm):
        i, j = np.nonzero(a)
        assert (b[p[i], p[j]]).all() and a.sum() == b.sum()
        assert paper.edge_overlap(a, b, p) == 1.0


def test_corruption_zero_and_regular_degree():
    rng = np.random.default_rng(2)
    A = paper.erdos_renyi(4, 20, 4.0, rng)
    assert (paper.bernoulli_corruption(A, 0.0, rng) == A).all()
    assert paper.regular_degree_gap() == 0
    # a d-regular ring lattice: empirical mean degree after corruption stays near d
    n, d = 30, 4
    ring = np.zeros((n, n), bool)
    for k in (1, 2):
        ring[np.arange(n), (np.arange(n) + k) % n] = True
    ring = ring | ring.T
    B = paper.bernoulli_corruption(np.repeat(ring[None], 4000, 0), 0.3, rng)
    assert abs(B.sum(-1).mean() - d) < 0.02


def test_unrelated_pairs_are_chance_for_an_oracle_free_rule():
    A, B, perm = paper.unrelated_pairs(400, 10, 3.0, np.random.default_rng(3))
    acc = np.mean([paper.lap_accuracy(paper.degree_similarity(a, b), p) for a, b, p in zip(A, B, perm)])
    assert abs(acc - 0.1) < 0.03


# ---------------------------------------------------------------- metrics: references
def test_hungarian_matches_brute_force_and_lp():
    rng = np.random.default_rng(4)
    for _ in range(5):
        S = rng.normal(size=(5, 5))
        best = max(itertools.permutations(range(5)), key=lambda p: S[np.arange(5), list(p)].sum())
        sigma = paper.lap_assignment(S)
        assert np.isclose(S[np.arange(5), sigma].sum(), S[np.arange(5), list(best)].sum())
        assert abs(S[np.arange(5), sigma].sum() - paper.assignment_lp_value(S)) < 1e-6


def test_metrics_properties():
    rng = np.random.default_rng(5)
    p = rng.permutation(10)
    assert paper.lap_accuracy(np.eye(10)[p], p) == 1.0 and paper.row_top1(np.eye(10)[p], p) == 1.0
    S = np.ones((10, 10))
    S[:, 0] = 2.0                                     # every row's argmax is column 0
    assert paper.coverage_top1(S) == 0.1
    assert paper.edge_overlap(np.zeros((4, 4), bool), np.zeros((4, 4), bool), np.arange(4)) == 1.0


def test_faq_recovers_an_isomorphic_copy():
    rng = np.random.default_rng(6)
    A, B, perm = paper.make_pairs(3, 16, 4.0, 0.0, rng)
    for a, b in zip(A, B):
        sigma = paper.faq_assignment(a, b, rng)
        assert paper.edge_overlap(a, b, sigma) <= 1.0


# ---------------------------------------------------------------- models
@pytest.mark.parametrize("arch", paper.ARCHITECTURES)
def test_parameter_counts_match(arch):
    target = 12000
    count = paper.parameter_count(paper.SiameseGNN(arch, paper.width_for(arch, target)))
    assert abs(count - target) / target <= 0.10


@pytest.mark.parametrize("arch", paper.ARCHITECTURES)
def test_relabelling_both_graphs_is_exact(arch):
    rng = np.random.default_rng(7)
    A, B, perm = _pairs(4, 15, 0.1, 8)
    A2, B2, perm2, tau = paper.relabel_pairs(A, B, perm, rng)
    for a, b, p, a2, b2, p2 in zip(A, B, perm, A2, B2, perm2):       # the relabelled pair is a pair
        assert paper.edge_overlap(a, b, p) == paper.edge_overlap(a2, b2, p2)
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = paper.SiameseGNN(arch, 16, out_dim=8).double().eval()
    with torch.no_grad():
        S, S2 = paper.similarity(model, A, B).numpy(), paper.similarity(model, A2, B2).numpy()
    assert np.abs(S2[:, tau][:, :, tau] - S).max() < 1e-9            # exact equivariance of S
    one = paper.evaluate_model(model, A, B, perm)["lap"]
    two = paper.evaluate_model(model, A2, B2, perm2)["lap"]
    checked = 0
    for g in range(len(A)):                          # accuracy: equal unless rows or columns of S tie
        rounded = np.round(S[g], 9)
        if len(np.unique(rounded, axis=0)) == len(np.unique(rounded, axis=1).T) == len(rounded):
            assert one[g] == two[g]
            checked += 1
    assert checked >= 1


def test_alignment_loss_is_cross_entropy():
    S = torch.randn(2, 5, 5)
    perm = np.array([np.arange(5), np.arange(5)[::-1]])
    expected = -np.mean([torch.log_softmax(S[g], 1)[i, perm[g][i]].item() for g in range(2) for i in range(5)])
    assert np.isclose(paper.alignment_loss(S, perm).item(), expected, atol=1e-6)


# ---------------------------------------------------------------- statistics of the ledger
def test_significant_pairs_against_scipy():
    rng = np.random.default_rng(9)
    scores = {"a": rng.normal(0, 1, 5), "b": rng.normal(3, 1, 5), "c": rng.normal(0, 1, 5)}
    count, adjusted = paper.significant_pairs(scores)
    raw = [scipy.stats.ttest_rel(scores[x], scores[y]).pvalue for x, y in itertools.combinations("abc", 2)]
    m = len(raw)                                              # Holm by hand: step-down, monotone
    order = np.argsort(raw)
    expected = np.empty(m)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * raw[i]))
        expected[i] = running
    assert np.allclose([adjusted[k] for k in itertools.combinations("abc", 2)], expected)
    assert count == sum(p < 0.05 for p in adjusted.values())
    same = {"a": np.ones(5), "b": np.ones(5)}
    assert paper.significant_pairs(same) == (0, {("a", "b"): 1.0})


def test_difficulty_margin_and_each_estimate():
    assert paper.difficulty_margin([0, 3, 1, 0]) == 3
    assert paper.difficulty_margin([2, 2, 2]) == 0
    est = {"x": Estimate(0.2, 0.1, 0.3), "y": Estimate(0.1, 0.02, 0.2), "z": Estimate(-0.1, -0.2, -0.05)}
    assert paper.each_estimate(est, 0.0)[0] == "z"
    assert paper.each_estimate({k: est[k] for k in "xy"}, 0.0)[0] == "y"


def test_minimum_detectable_effect():
    d = np.array([0.1, 0.3, -0.2, 0.0, 0.4])
    t = scipy.stats.t.ppf(0.95, 4) + scipy.stats.t.ppf(0.8, 4)
    assert paper.minimum_detectable_effect(d) == pytest.approx(t * d.std(ddof=1) / np.sqrt(5))
    assert paper.minimum_detectable_effect(2 * d) == pytest.approx(2 * paper.minimum_detectable_effect(d))
    with pytest.raises(ValueError):
        paper.minimum_detectable_effect([0.1])


def test_spectral_embedding_lets_the_probe_read_edges():
    rng = np.random.default_rng(11)
    A = paper.erdos_renyi(8, 50, 6.0, rng)
    H = torch.as_tensor(paper.spectral_embedding(A, 32), dtype=torch.float32)
    assert paper.probe_balanced_accuracy(H[:4], A[:4], H[4:], A[4:], 100, 0) > 0.8
    assert paper.spectral_embedding(A[:1, :12, :12], 32).shape == (1, 12, 32)     # padded where dim > n


def test_snapshots_leave_training_unchanged_and_load(tmp_path, monkeypatch):
    base = paper.AssetSettings(architectures=("gcn", "gat"), num_seeds=2, steps=4, batch_pairs=2,
                               param_target=3000, num_nodes=12, mean_degree=3.0)
    snap = paper.AssetSettings(**{**base.__dict__, "checkpoints": (2,)})
    width = paper.width_for("gat", 3000)
    plain, _ = paper.train_model("gat", width, base, 0)
    kept, _ = paper.train_model("gat", width, snap, 0)
    assert all(torch.equal(a, b) for a, b in zip(plain.state_dict().values(), kept.state_dict().values()))
    assert set(kept.snapshots) == {2}
    assert not all(torch.equal(a, b) for a, b in zip(kept.snapshots[2].values(), kept.state_dict().values()))
    monkeypatch.setattr(paper.models, "settings_for", lambda scale: snap)
    paper.build_asset(tmp_path, "smoke", 0)
    ckpt = paper.load_checkpoints(tmp_path)
    assert set(ckpt) == {"gcn", "gat"} and set(ckpt["gat"]) == {2, 4} and len(ckpt["gat"][2]) == 2
    models, _ = paper.load_models(tmp_path)
    res = paper.run(paper.Config(**TINY), models, ckpt)
    assert res.curve_steps == (2, 4) and res.curve["gat"].shape == (2, 2)
    assert np.array_equal(res.curve["gat"][:, -1], res.lap["gat"][:, TINY_E0])
    meas = paper.measurements(res)
    assert set(meas["convergence_pairs"]) == {"gcn", "gat"} and len(meas["gap_curve"]["gat-gcn"]) == 2
    assert meas["mde"] >= 0 and 0.0 <= res.probe_spectral <= 1.0


def test_probe_reads_planted_structure():
    rng = np.random.default_rng(10)
    A = paper.erdos_renyi(4, 12, 3.0, rng)
    H = torch.from_numpy(A.astype(np.float32))               # row i of A as h_i: h_i^T W h_j can see edges
    good = paper.probe_balanced_accuracy(H[:2], A[:2], H[2:], A[2:], 200, 0)
    noise = torch.randn(4, 12, 12)
    bad = paper.probe_balanced_accuracy(noise[:2], A[:2], noise[2:], A[2:], 200, 0)
    assert good > bad and 0.0 <= bad <= 1.0


# ---------------------------------------------------------------- tiny run
def test_config_validates():
    with pytest.raises(ValueError):
        paper.Config(headline_eta=0.33)
    with pytest.raises(ValueError):
        paper.Config(etas=(0.3, 0.1, 0.2))


def test_tiny_run_is_deterministic(tmp_path):
    settings = paper.AssetSettings(architectures=("gcn", "gat"), num_seeds=2, steps=2, batch_pairs=2,
                                   param_target=3000, num_nodes=12, mean_degree=3.0)
    models = {}
    for arch in settings.architectures:
        width = paper.width_for(arch, settings.param_target, settings.out_dim)
        models[arch] = []
        for k in range(settings.num_seeds):
            model, log = paper.train_model(arch, width, settings, k)
            model.train_seed = k
            models[arch].append(model)
            assert log["steps"] == 2
    cfg = paper.Config(**TINY)
    one, two = paper.run(cfg, models), paper.run(cfg, models)
    for arch in settings.architectures:
        assert np.array_equal(one.lap[arch], two.lap[arch]) and one.lap[arch].shape == (2, 6)
        assert ((0 <= one.lap[arch]) & (one.lap[arch] <= 1)).all()
    meas = paper.measurements(one)
    assert len(meas["significant_counts"]) == 6 and isinstance(meas["headline"], Estimate)
    assert one.equivariance_gap < 1e-9 and one.identity_accuracy == 1.0 and one.lp_gap < 1e-6
