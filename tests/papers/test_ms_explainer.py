"""Tests for compendium.papers.ms_explainer: generators, masks, metrics, statistics, a tiny run."""

import copy
from dataclasses import replace

import networkx as nx
import numpy as np
import pytest
import scipy.stats
import torch

from compendium.papers import ms_explainer as paper
from compendium.stats import Estimate


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    """Tiny graphs run fastest on one thread (two threads spin badly on a busy 2-core machine)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def tiny(one_torch_thread):
    """A tiny dataset and one briefly trained GCN (a few seconds)."""
    gs = paper.make_dataset("ba_2motifs", 24, seed=3)
    settings = paper.AssetSettings(num_graphs=24, num_models=1, steps=40)
    model, _ = paper.train_gcn(gs.graphs[:16], gs.num_classes, settings, seed=0)
    for p in model.parameters():
        p.requires_grad_(False)
    return gs, model


@pytest.fixture(scope="module")
def tiny_node(one_torch_thread):
    """Tree-Cycles (node level) and one briefly trained node GCN (under a second)."""
    gs = paper.make_dataset("tree_cycles", 0, seed=3)
    settings = paper.AssetSettings(num_graphs=0, num_models=1, steps=1, node_steps=60)
    idx = paper.split_nodes(gs.graphs[0], settings)
    model, _ = paper.train_node_gcn(gs.graphs[0], idx["train"], gs.num_classes, settings, seed=0)
    for p in model.parameters():
        p.requires_grad_(False)
    return gs, idx, model


# ---------------------------------------------------------------- generators
@pytest.mark.parametrize("name", [d for d in paper.DATASETS if d not in paper.NODE_DATASETS])
def test_generator_counts_and_motifs(name):
    gs = paper.make_dataset(name, 12, seed=1)
    rep = paper.generator_report(name, gs.graphs)
    assert len(rep["node_counts"]) == 1 and rep["motif_ok"] == 12 and rep["symmetric"]
    assert len(set(rep["class_counts"])) == 1 and sum(rep["class_counts"]) == 12
    for g in gs.graphs:
        motif = paper.motif_graph(name, int(g.y))
        assert int(g.gt.sum()) == 2 * motif.number_of_edges()
        assert g.edge_index.shape[1] == g.gt.shape[0] and g.x.shape == (g.num_nodes, 8) and (g.x.sum(1) == 1).all()


@pytest.mark.parametrize("name", paper.NODE_DATASETS)
def test_node_generator(name):
    gs = paper.make_dataset(name, 0, seed=1)
    spec = paper.node_spec(name)
    assert gs.task == "node" and len(gs.graphs) == 1 and gs.num_classes == spec["num_classes"]
    rep = paper.generator_report(name, gs.graphs)
    assert rep["ok"] and rep["motif_ok"] == spec["num_motifs"] and sum(rep["class_counts"]) == rep["node_counts"][0]
    g = gs.graphs[0]
    motif = paper.motif_graph(name)
    assert int(g.gt.sum()) == 2 * motif.number_of_edges() * spec["num_motifs"]
    assert (g.y[g.motif < 0] == 0).all() and (g.y[g.motif >= 0] > 0).all()
    assert sorted(g.order.tolist()) == list(range(g.num_nodes)) and g.x.shape == (g.num_nodes, 8)
    bad = paper.make_dataset(name, 0, seed=1).graphs[0]
    bad.y = bad.y.clone()
    bad.y[0] = 1                                   # a base node with a motif label
    assert not paper.generator_report(name, [bad])["ok"]


def _check_extra(ei0, ei, gt, count):
    """``ei`` is ``ei0`` followed by ``count`` new undirected edges (both directions), none ground truth."""
    assert torch.equal(ei[:, :ei0.shape[1]], ei0) and ei.shape[1] == ei0.shape[1] + 2 * count
    extra = ei[:, ei0.shape[1]:]
    assert not gt[ei0.shape[1]:].any()
    pairs = set(map(tuple, extra.t().tolist()))
    assert len(pairs) == 2 * count and all((j, i) in pairs for i, j in pairs)        # symmetric, no duplicates
    assert not (extra[0] == extra[1]).any()                                           # no self-loops
    assert not pairs & set(map(tuple, ei0.t().tolist()))                              # none already present
    return extra


@pytest.mark.parametrize("name", paper.DATASETS)
def test_extra_edge_rule(name):
    """round(0.1 |E|) new undirected edges (|E| before adding), endpoints anywhere, motif nodes included."""
    if name in paper.NODE_DATASETS:
        g0 = paper.make_dataset(name, 0, seed=4, extra_edge_fraction=0.0).graphs[0]
        g = paper.make_dataset(name, 0, seed=4).graphs[0]          # same base and motifs (same torch seed)
        count = round(0.1 * g0.edge_index.shape[1] / 2)
        assert count == paper.extra_edge_count(g0.edge_index, 0.1) > 0
        extra = _check_extra(g0.edge_index, g.edge_index, g.gt, count)
        assert (g.motif[extra] >= 0).any()                          # some new edge touches a motif node
        assert (g.motif[extra] < 0).any()
        return
    from compendium.papers.ms_explainer.data import _add_extra_edges
    gs = paper.make_dataset(name, 12, seed=4, extra_edge_fraction=0.0)
    rng = np.random.default_rng(0)
    touched_motif = False
    for g in gs.graphs:
        count = paper.extra_edge_count(g.edge_index, 0.1)
        assert count == round(0.1 * g.edge_index.shape[1] / 2) > 0
        extra = _add_extra_edges(g.edge_index, g.num_nodes, count, rng)
        ei = torch.cat([g.edge_index, extra], 1)
        gt = torch.cat([g.gt, torch.zeros(extra.shape[1], dtype=torch.bool)])
        _check_extra(g.edge_index, ei, gt, count)
        motif_nodes = set(g.edge_index[:, g.gt].flatten().tolist())
        touched_motif |= bool(set(extra.flatten().tolist()) & motif_nodes)
    assert touched_motif
    with pytest.raises(ValueError):                                 # more edges than the complete graph has
        _add_extra_edges(g.edge_index, g.num_nodes, g.num_nodes ** 2, rng)
    # the generated sets carry the rule too: every graph has round(0.1 |E0|) non-motif edges more than before
    full = paper.make_dataset(name, 12, seed=4)
    e0 = sorted(g.edge_index.shape[1] // 2 for g in gs.graphs)
    e1 = sorted(g.edge_index.shape[1] // 2 for g in full.graphs)
    assert e1 == sorted(e + round(0.1 * e) for e in e0) or len(e0) != len(e1)


def test_generator_is_seeded_and_leaves_global_stream():
    torch.manual_seed(5)
    before = torch.rand(1)
    torch.manual_seed(5)
    a = paper.make_dataset("multiscale", 6, seed=2)
    after = torch.rand(1)
    b = paper.make_dataset("multiscale", 6, seed=2)
    assert torch.equal(before, after)
    assert all(torch.equal(x.edge_index, y.edge_index) for x, y in zip(a.graphs, b.graphs))


def test_house_ring_shapes():
    ring = paper.house_ring()
    assert ring.number_of_nodes() == 15 and ring.number_of_edges() == 21 and nx.is_connected(ring)


def test_generator_rejects_bad_input():
    with pytest.raises(ValueError):
        paper.make_dataset("nope", 10, seed=0)
    with pytest.raises(ValueError):
        paper.make_dataset("ba_2motifs", 1, seed=0)


# ---------------------------------------------------------------- masks
def test_rank_and_nested_topk_against_brute_force():
    rng = np.random.default_rng(0)
    g = torch.from_numpy(np.repeat(np.arange(4), [7, 10, 3, 12]))
    s = torch.from_numpy(rng.normal(size=len(g))).float()
    rank = paper.within_graph_rank(s, g)
    keys = paper.topk_masks(s, g, (0.1, 0.2, 0.3))
    assert (keys[:-1] <= keys[1:]).all()
    for k in range(4):
        sel = (g == k).numpy()
        order = np.argsort(-s.numpy()[sel], kind="stable")
        assert (rank.numpy()[sel][order] == np.arange(sel.sum())).all()
        for r, key in zip((0.1, 0.2, 0.3), keys):
            assert key.numpy()[sel].sum() == max(1, int(np.ceil(r * sel.sum() - 1e-9)))


def test_soft_threshold_separates_topk():
    rng = np.random.default_rng(1)
    g = torch.from_numpy(np.repeat(np.arange(3), [10, 20, 30]))
    s = torch.from_numpy(rng.normal(size=len(g)))
    theta = paper.soft_thresholds(s, g, 0.2)
    key = paper.topk_masks(s, g, (0.2,))[0]
    assert ((s > theta) == key).all()


def test_all_ones_mask_is_the_model(tiny):
    gs, model = tiny
    p = paper.prepare(model, gs.graphs[16:])
    _, logits = paper.masked_forward(model, p.x, p.edge_index, p.batch, torch.ones(p.edge_index.shape[1]))
    assert torch.equal(logits, model(p.x, p.edge_index, p.batch))
    _, zero = paper.masked_forward(model, p.x, p.edge_index, p.batch, torch.zeros(p.edge_index.shape[1]))
    assert not torch.allclose(zero, logits)          # the mask does act


# ---------------------------------------------------------------- metrics
def test_auc_matches_sklearn_and_truth():
    from sklearn.metrics import roc_auc_score

    rng = np.random.default_rng(2)
    g = torch.from_numpy(np.repeat(np.arange(3), 20))
    gt = torch.from_numpy(rng.random(60) < 0.3)
    s = torch.from_numpy(np.round(rng.normal(size=60), 1))    # ties
    auc = paper.auc_per_graph(s, gt, g)
    for k in range(3):
        sel = (g == k).numpy()
        assert auc[k] == pytest.approx(roc_auc_score(gt.numpy()[sel], s.numpy()[sel]))
    assert (paper.auc_per_graph(gt.float(), gt, g) == 1).all()
    assert (paper.auc_per_graph(-gt.float(), gt, g) == 0).all()


def test_jaccard_and_spearman():
    g = torch.zeros(10, dtype=torch.long)
    a = torch.arange(10.0)
    assert paper.topk_jaccard(a, a, g, 0.3)[0] == 1.0
    assert paper.topk_jaccard(a, -a, g, 0.3)[0] == 0.0
    assert paper.spearman_per_graph(a, -a, g)[0] == pytest.approx(-1.0)
    rng = np.random.default_rng(4)
    gg = torch.from_numpy(np.repeat(np.arange(3), [8, 12, 9]))
    x, y = torch.from_numpy(rng.normal(size=29)), torch.from_numpy(rng.normal(size=29))
    rho = paper.spearman_per_graph(x, y, gg)
    for k in range(3):
        sel = (gg == k).numpy()
        assert rho[k] == pytest.approx(scipy.stats.spearmanr(x.numpy()[sel], y.numpy()[sel]).statistic)
    assert paper.pairwise_mean([a, a, a], lambda x, y: paper.topk_jaccard(x, y, g, 0.3)) == 1.0


def test_noise_edges_keep_originals_first():
    gs = paper.make_dataset("tree_cycles", 4, seed=0)
    noisy = paper.add_noise_edges(gs.graphs, 0.05, np.random.default_rng(0))
    for a, b in zip(gs.graphs, noisy):
        E = a.edge_index.shape[1]
        assert torch.equal(b.edge_index[:, :E], a.edge_index) and b.edge_index.shape[1] > E
        assert len(set(map(tuple, b.edge_index.t().tolist()))) == b.edge_index.shape[1]


def test_fidelity_extremes(tiny):
    gs, model = tiny
    p = paper.prepare(model, gs.graphs[16:])
    E = p.edge_index.shape[1]
    fp, fm = paper.fidelity(model, p, torch.ones(E, dtype=torch.bool))   # key = whole graph
    assert fm == 0.0
    fp0, fm0 = paper.fidelity(model, p, torch.zeros(E, dtype=torch.bool))
    assert fp0 == 0.0 and fm0 == fp


# ---------------------------------------------------------------- explainers
@pytest.mark.parametrize("node", [False, True])
def test_parameter_sharing_counts(node):
    one = paper.parameter_count(paper.MSExplainer(32, (0.2,), node=node))
    three = paper.parameter_count(paper.MSExplainer(32, (0.1, 0.2, 0.3), node=node))
    unshared = paper.parameter_count(paper.MSExplainer(32, (0.1, 0.2, 0.3), shared=False, node=node))
    assert one == three and unshared == 3 * three
    assert three == (3 if node else 2) * 32 * 64 + 64 + 64 + 1


def test_triangle_inequality_property(tiny):
    gs, model = tiny
    p = paper.prepare(model, gs.graphs[16:])
    s = torch.randn(p.edge_index.shape[1], generator=torch.Generator().manual_seed(0))
    assert paper.triangle_gap(model, p, s, (0.1, 0.2, 0.3)) <= 1e-9


def test_explainers_train_and_are_seeded(tiny):
    gs, model = tiny
    batches = [paper.prepare(model, gs.graphs[:12])]
    p = paper.prepare(model, gs.graphs[16:20])
    st = paper.ExplainerSettings(epochs=2, learning_rate=0.01)
    a = paper.ms_scores(paper.train_ms(model, batches, st, seed=1), p)
    b = paper.ms_scores(paper.train_ms(model, batches, st, seed=1), p)
    c = paper.ms_scores(paper.train_ms(model, batches, replace(st, shared=False), seed=2), p)
    assert torch.equal(a, b) and not torch.equal(a, c) and a.shape == (p.edge_index.shape[1],)
    pa = paper.pg_scores(paper.train_pg(model, batches, st, seed=1), p)
    pb = paper.pg_scores(paper.train_pg(model, batches, st, seed=1), p)
    assert torch.equal(pa, pb) and pa.shape == a.shape
    ga = paper.run_gnnexplainer(model, p, 3, 0.01, seed=1)
    assert ga.shape == a.shape and torch.equal(ga, paper.run_gnnexplainer(model, p, 3, 0.01, seed=1))


def test_cached_normalisation_is_bit_for_bit_the_plain_layers():
    """The GCN's NormCache hands each GCNConv the gcn_norm it would compute: outputs and gradients
    equal a plain forward (each layer's own gcn_norm), with and without explain-mode edge masks;
    an in-place edit or another tensor of equal shape is never served a stale entry."""
    from torch_geometric.explain.algorithm.utils import clear_masks, set_masks
    from torch_geometric.nn import global_max_pool

    def plain(model, x, ei, batch):
        for conv in model.convs:
            x = torch.relu(type(conv).forward(conv, x, ei))     # GCNConv's own forward, no cache slot set
        return model.head(global_max_pool(x, batch))

    torch.manual_seed(0)
    model = paper.GCN(2)
    graphs = [paper.make_dataset("ba_2motifs", 4, seed=0).graphs[i] for i in range(4)]
    b = paper.batch_of(graphs)
    mask = torch.rand(b.edge_index.shape[1], requires_grad=True)
    outs = []
    for use_cache in (True, False, True):                         # miss, plain, hit
        for m in (None, mask):
            if m is not None:
                set_masks(model, m, b.edge_index, apply_sigmoid=False)
            try:
                out = model(b.x, b.edge_index, b.batch) if use_cache else plain(model, b.x, b.edge_index, b.batch)
            finally:
                clear_masks(model)
            grad = torch.autograd.grad(out.sum(), [mask, *model.parameters()], allow_unused=True) if m is not None else ()
            outs.append((out.detach(), [g for g in grad if g is not None]))
    assert model.norm_cache.hits >= 1
    for k in (0, 1):
        for other in (outs[2 + k], outs[4 + k]):
            assert torch.equal(outs[k][0], other[0])
            assert all(torch.equal(g1, g2) for g1, g2 in zip(outs[k][1], other[1]))
    # an edited edge_index (in place) and a fresh tensor of equal shape get their own normalisation
    ei = b.edge_index.clone()
    first = model(b.x, ei, b.batch)
    ei[:, :2] = ei[:, :2].flip(0)
    assert torch.equal(model(b.x, ei, b.batch), plain(model, b.x, ei, b.batch))
    other = b.edge_index[:, torch.randperm(ei.shape[1])]
    assert torch.equal(model(b.x, other, b.batch), plain(model, b.x, other, b.batch))
    assert torch.equal(first, plain(model, b.x, b.edge_index, b.batch))
    cache = paper.NormCache(size=2)
    tensors = [b.edge_index.clone() for _ in range(3)]
    for t in tensors:
        cache(t, b.x.shape[0], b.x.dtype)
    assert len(cache.entries) == 2 and all(e[0] is not tensors[0] for e in cache.entries.values())
    with torch.inference_mode():
        cache(b.edge_index.clone(), b.x.shape[0], b.x.dtype)
    assert len(cache.entries) == 2


def test_pg_coefficients_do_not_leak():
    from torch_geometric.explain import PGExplainer

    model = paper.GCN(2)
    paper.explainers._pg_explainer(model, paper.ExplainerSettings(epochs=1, learning_rate=0.01, size_weight=0.5), 5)
    assert PGExplainer.coeffs["edge_size"] == pytest.approx(0.1)
    paper.explainers._pg_explainer(model, paper.ExplainerSettings(epochs=1, learning_rate=0.01), 1)
    assert PGExplainer.coeffs["edge_size"] == pytest.approx(0.05)


# ---------------------------------------------------------------- statistics
def _e(point, low, high):
    return Estimate(point, low, high, unit="u", n=3)


def test_count_estimate():
    groups = {"a": [_e(1, 0.5, 2), _e(1, 0.1, 2)],      # decided
              "b": [_e(1, -0.5, 2), _e(1, 0.1, 2)],     # possible
              "c": [_e(-1, -2, -0.5), _e(1, 0.1, 2)],   # excluded
              "d": [_e(-0.1, -1, 1), _e(1, 0.1, 2)]}    # possible, point below
    e = paper.count_estimate(groups)
    assert (e.low, e.point, e.high, e.n) == (1, 2, 3, 4)
    with pytest.raises(ValueError):
        paper.count_estimate({})


def test_deciding():
    ests = {"a": _e(0, -0.005, 0.01), "b": _e(0.02, 0.01, 0.03)}
    assert paper.deciding(ests, -0.01)[0] == "a"
    ests["c"] = _e(-0.05, -0.06, -0.04)
    assert paper.deciding(ests, -0.01)[0] == "c"


def test_config_validation():
    with pytest.raises(ValueError):
        paper.Config(datasets=("nope",))
    with pytest.raises(ValueError):
        paper.Config(ratios=(0.3, 0.2, 0.1))
    with pytest.raises(ValueError):
        paper.Config(fidelity_ratio=0.25)
    assert paper.Config(datasets=["multiscale"]).datasets == ("multiscale",)
    with pytest.raises(ValueError):             # the reduction row needs its family and a dataset to run on
        paper.Config(families=paper.CORE)
    with pytest.raises(ValueError):
        paper.Config(ablation_datasets=())
    with pytest.raises(ValueError):
        paper.Config(extra_weights=(0.0, 1.0))


def test_family_settings_reduced_and_tuned_weights():
    cfg = paper.Config()
    ms = paper.family_settings("ms", 0.01, cfg, (0.3, 0.1))
    assert (ms.complement_weight, ms.consistency_weight, ms.ratios) == (0.3, 0.1, cfg.ratios)
    nocons, nocomp = (paper.family_settings(f, 0.01, cfg, (0.3, 0.1)) for f in ("ms_nocons", "ms_nocomp"))
    assert (nocons.complement_weight, nocons.consistency_weight) == (0.3, 0.0)
    assert (nocomp.complement_weight, nocomp.consistency_weight) == (0.0, 0.1)
    red = paper.family_settings("ms_reduced", 0.03, cfg, (0.3, 0.1))
    pg = paper.family_settings("pg", 0.03, cfg, (0.3, 0.1))
    assert red.ratios == (cfg.fidelity_ratio,) and red.complement_weight == red.consistency_weight == 0.0
    assert replace(red, ratios=pg.ratios, complement_weight=pg.complement_weight,
                   consistency_weight=pg.consistency_weight) == pg      # PGExplainer's loss weights and budget otherwise


def test_tune_ms_is_the_learning_rate_procedure_in_turn(monkeypatch):
    # a made-up dev AUC: best lr 0.01, then best complement weight 0.1, then consistency by (lr, wc)
    calls = []

    def fake(family, model, batches, dev, lr, seed, cfg, weights=(1.0, 1.0)):
        calls.append((lr, *weights))
        wc, wg = weights
        return {0.003: 0.5, 0.01: 0.7, 0.03: 0.6}[lr] + (0.1 if wc == 0.1 else 0) + (0.05 if (wc, wg) == (0.1, 0.3) else 0)

    monkeypatch.setattr(paper.experiment, "_dev_auc", fake)
    cfg = paper.Config(learning_rates=(0.003, 0.01, 0.03), extra_weights=(0.1, 0.3, 1.0))
    t = paper.tune_ms(None, None, None, cfg, seed=0)
    assert t["lr"][0] == 0.01 and t["complement"][0] == 0.1 and t["consistency"][0] == 0.3
    assert len(calls) == len(set(calls)) == 3 + 2 + 2          # (0.01, 1, 1) and (0.01, 0.1, 1) are reused
    assert all(c[0] == 0.01 for c in calls[3:]) and all(c[1] == 0.1 for c in calls[5:])
    monkeypatch.setattr(paper.experiment, "_dev_auc", lambda *a, **k: 0.5)      # ties: the smaller value
    t = paper.tune_ms(None, None, None, cfg, seed=0)
    assert (t["lr"][0], t["complement"][0], t["consistency"][0]) == (0.003, 0.1, 0.1)


def test_floor_leaves_chance_datasets_out_of_the_counts():
    cfg = paper.Config(datasets=("ba_2motifs", "tree_cycles"), ablation_datasets=("ba_2motifs",), explainer_seeds=3)
    rng = np.random.default_rng(0)
    res = paper.Result(config=cfg)
    for n, pg_auc in (("ba_2motifs", 0.8), ("tree_cycles", 0.45)):
        # MS is far more stable than PG on both sets (seed-to-seed spread 0.001 against 0.1)
        res.auc[n] = {"pg": pg_auc + 0.1 * rng.standard_normal((3, 3)), "ms": 0.8 + 0.001 * rng.standard_normal((3, 3))}
        res.jaccard[n] = {"pg": np.array([0.5, 0.52, 0.48]), "ms": np.array([0.9, 0.91, 0.92])}
    res.auc["tree_cycles"]["pg"] = 0.45 + 0.1 * rng.standard_normal((3, 3))
    assert paper.experiment.floor_datasets(res) == ["ba_2motifs"]
    groups = paper.experiment.stability_groups(res, "pg", datasets=paper.experiment.floor_datasets(res))
    e = paper.count_estimate(groups, n=2)
    assert set(groups) == {"ba_2motifs"} and e.n == 2 and e.high <= 1


# ---------------------------------------------------------------- tiny run
def test_tiny_run(tiny):
    gs, model = tiny
    settings = paper.AssetSettings(num_graphs=24, num_models=2, steps=40, train_fraction=0.5, dev_fraction=0.25)
    idx = paper.split(24, settings)
    model2 = copy.deepcopy(model)                   # a second "trained model": perturbed weights
    with torch.no_grad():
        g = torch.Generator().manual_seed(0)
        for p in model2.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=g))
    asset = {"ba_2motifs": {"graphs": gs.graphs, "split": idx, "models": [model, model2], "num_classes": 2}}
    cfg = paper.Config(datasets=("ba_2motifs",), num_models=2, explainer_seeds=2, epochs=1, batch_graphs=12,
                       learning_rates=(0.01,), gnnexplainer_epochs=2, timing_repeats=1, extra_weights=(0.3, 1.0),
                       families=paper.REQUIRED, ablation_datasets=("ba_2motifs",))
    res = paper.run(cfg, asset)
    m = paper.measurements(res)
    assert res.auc["ba_2motifs"]["ms"].shape == (2, 2) and res.nested and res.ones_gap == 0.0
    assert res.truth_auc_min == 1.0 and res.triangle <= 1e-9 and m["generator_ok"]
    assert m["stability"]["pg"].n == 1 and res.times["ratio"] > 0
    assert 0.0 <= m["random_auc"].point <= 1.0
    assert res.weights["ba_2motifs"][0] in (0.3, 1.0) and set(res.weight_scores["ba_2motifs"]["consistency"]) == {0.3, 1.0}
    assert res.auc["ba_2motifs"]["ms_reduced"].shape == (2, 2) and m["reduced_key"] == "ba_2motifs"
    assert m["reduced"].margin == cfg.reduced_margin and m["reduced"].estimate.n == 2


def test_pg_with_batch_embeddings_equals_torch_geometric_pg(tiny):
    # train_pg hands PGExplainer each batch's precomputed embeddings; the explainer it trains must
    # be bit for bit the one torch_geometric's own PGExplainer (embeddings recomputed) trains
    from torch_geometric.explain import PGExplainer

    from compendium.training import seeded_init

    gs, model = tiny
    batches = [paper.prepare(model, gs.graphs[:8]), paper.prepare(model, gs.graphs[8:14])]
    p = paper.prepare(model, gs.graphs[16:20])
    st = paper.ExplainerSettings(epochs=3, learning_rate=0.01)
    ours = paper.train_pg(model, batches, st, seed=4)
    assert ours.batch_z is None
    rng = np.random.default_rng([4, 3])
    with seeded_init(4):
        ref = PGExplainer(epochs=st.epochs, lr=st.learning_rate, edge_size=st.size_weight / batches[0].num_graphs,
                          edge_ent=st.entropy_weight, temp=list(st.temperature), bias=st.bias)
        from torch_geometric.explain import Explainer
        Explainer(model, algorithm=ref, explanation_type="phenomenon", edge_mask_type="object",
                  model_config=paper.MODEL_CONFIG)
        for epoch in range(st.epochs):
            for bi in rng.permutation(len(batches)):
                b = batches[bi]
                ref.train(epoch, model, b.x, b.edge_index, target=b.yhat, batch=b.batch)
    assert torch.equal(paper.pg_scores(ours, p), paper.pg_scores(ref, p))
    for a, b in zip(ours.mlp.parameters(), ref.mlp.parameters()):
        assert torch.equal(a, b)


# ---------------------------------------------------------------- node level
def _node_batch(tiny_node, part="test", n=12):
    gs, idx, model = tiny_node
    nodes = paper.explained_nodes(gs.graphs[0], idx[part], 3)[:n]
    return gs.graphs[0], nodes, model, paper.prepare_nodes(model, gs.graphs[0], nodes)


def test_explained_nodes_and_computation_subgraphs(tiny_node):
    g, nodes, model, p = _node_batch(tiny_node)
    from torch_geometric.utils import k_hop_subgraph

    assert p.num_graphs == len(nodes) and p.node_level and (g.motif[torch.tensor(nodes)] >= 0).all()
    for b, t in enumerate(nodes):
        subset, _, _, emask = k_hop_subgraph(t, 3, g.edge_index, num_nodes=g.num_nodes)
        sel = p.edge_graph == b
        assert torch.equal(p.eid[sel], emask.nonzero().view(-1))            # the subgraph's edges, in order
        assert int((p.batch == b).sum()) == len(subset)
        assert p.gt[sel].any() and not p.gt[sel].all()
        # the explained node's relabelled position holds its features
        assert torch.equal(p.x[p.target[b]], g.x[t])
    # a node whose subgraph is its cycle alone is left out
    motif = [int(v) for v in range(g.num_nodes) if g.motif[v] >= 0]
    assert len(paper.explained_nodes(g, motif, 3)) < len(motif)


def test_node_all_ones_mask_is_the_model_and_the_full_graph(tiny_node):
    g, nodes, model, p = _node_batch(tiny_node)
    E = p.edge_index.shape[1]
    h, logits = paper.forward_prepared(model, p, torch.ones(E))
    assert torch.equal(logits, model(p.x, p.edge_index, index=p.target, norm=p.norm))
    assert torch.equal(h, p.h)
    whole = model(g.x, g.edge_index)[torch.tensor(nodes)]
    assert torch.allclose(logits, whole, atol=1e-5, rtol=0)            # the full graph's normalisation
    own = model(p.x, p.edge_index)[p.target]                            # the subgraph's own degrees differ
    assert not torch.allclose(own, whole, atol=1e-5, rtol=0)
    _, zero = paper.forward_prepared(model, p, torch.zeros(E))
    assert not torch.allclose(zero, logits)


def test_node_truth_auc_nested_and_triangle(tiny_node):
    g, nodes, model, p = _node_batch(tiny_node)
    assert (paper.auc_per_graph(p.gt.float(), p.gt, p.edge_graph) == 1).all()
    s = torch.randn(p.edge_index.shape[1], generator=torch.Generator().manual_seed(0))
    keys = paper.topk_masks(s, p.edge_graph, (0.1, 0.2, 0.3))
    assert (keys[:-1] <= keys[1:]).all()
    assert paper.triangle_gap(model, p, s, (0.1, 0.2, 0.3)) <= 1e-9
    fp, fm = paper.fidelity(model, p, torch.ones(p.edge_index.shape[1], dtype=torch.bool))
    assert fm == 0.0


def test_node_explainers_train_and_are_seeded(tiny_node):
    g, nodes, model, p = _node_batch(tiny_node)
    _, tr, _, batch = _node_batch(tiny_node, "train", 20)
    st = paper.ExplainerSettings(epochs=2, learning_rate=0.01)
    ms = paper.train_ms(model, [batch], st, seed=1)
    assert ms.node and ms.mlps[0][0].in_features == 3 * p.z.shape[1]
    a = paper.ms_scores(ms, p)
    assert torch.equal(a, paper.ms_scores(paper.train_ms(model, [batch], st, seed=1), p)) and a.shape == (p.edge_index.shape[1],)
    c = paper.ms_scores(paper.train_ms(model, [batch], replace(st, shared=False), seed=2), p)
    assert not torch.equal(a, c)
    pg = paper.train_pg(model, [batch], st, seed=1)
    pa = paper.pg_scores(pg, p)
    assert torch.equal(pa, paper.pg_scores(paper.train_pg(model, [batch], st, seed=1), p)) and pa.shape == a.shape
    assert pg.mlp[0].in_channels == 3 * p.z.shape[1] and pg.batch_edge_target is None
    ga = paper.run_gnnexplainer(model, p, 3, 0.01, seed=1)
    assert ga.shape == a.shape and torch.equal(ga, paper.run_gnnexplainer(model, p, 3, 0.01, seed=1))


def test_batched_node_pg_step_is_the_library_node_step(tiny_node):
    """One explained node: a step of our batched node-level PGExplainer on its computation subgraph and
    a step of torch_geometric's own node-level PGExplainer on the whole graph (scalar index, hard mask)
    give the same loss and the same MLP, with the concrete noise made deterministic (bias 0.5)."""
    from torch_geometric.explain import Explainer, PGExplainer

    from compendium.training import seeded_init

    gs, idx, model = tiny_node
    g = gs.graphs[0]
    t = paper.explained_nodes(g, idx["train"], 3)[0]
    p = paper.prepare_nodes(model, g, [t])
    st = paper.ExplainerSettings(epochs=1, learning_rate=0.01, bias=0.5)
    ours = paper.train_pg(model, [p], st, seed=4)
    with seeded_init(4):
        ref = PGExplainer(epochs=1, lr=0.01, edge_size=st.size_weight, edge_ent=st.entropy_weight,
                          temp=list(st.temperature), bias=0.5)
        Explainer(model, algorithm=ref, explanation_type="phenomenon", edge_mask_type="object",
                  model_config=paper.NODE_MODEL_CONFIG)
        yhat = model(g.x, g.edge_index).argmax(-1)
        ref.train(0, model, g.x, g.edge_index, target=yhat, index=t)
    for a, b in zip(ours.mlp.parameters(), ref.mlp.parameters()):
        assert torch.allclose(a, b, atol=1e-6, rtol=0)
    from torch_geometric.utils import get_embeddings

    with torch.no_grad():
        full = ref.mlp(ref._get_inputs(get_embeddings(model, g.x, g.edge_index)[-1], g.edge_index, t)).view(-1)
    assert torch.allclose(paper.pg_scores(ours, p), full[p.eid], atol=1e-5, rtol=0)


def test_noisy_positions(tiny_node):
    g, nodes, model, p = _node_batch(tiny_node)
    noisy = paper.add_noise_edges([g], 0.05, np.random.default_rng(0))[0]
    pn = paper.prepare_nodes(model, noisy, nodes)
    pos = paper.noisy_positions(p, pn)
    assert torch.equal(pn.eid[pos], p.eid) and torch.equal(pn.edge_graph[pos], p.edge_graph)
    assert pn.edge_index.shape[1] >= p.edge_index.shape[1]


def test_tiny_node_run(tiny_node):
    gs, idx, model = tiny_node
    model2 = copy.deepcopy(model)
    with torch.no_grad():
        g = torch.Generator().manual_seed(0)
        for p in model2.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=g))
    asset = {"tree_cycles": {"graphs": gs.graphs, "split": idx, "models": [model, model2], "num_classes": 2, "task": "node"}}
    cfg = paper.Config(datasets=("tree_cycles",), num_models=2, explainer_seeds=2, epochs=1, batch_graphs=8,
                       learning_rates=(0.01,), gnnexplainer_epochs=2, timing_repeats=1, explained_nodes=16,
                       extra_weights=(1.0,), families=paper.REQUIRED + ("gnnexplainer",), ablation_datasets=("tree_cycles",))
    res = paper.run(cfg, asset)
    m = paper.measurements(res)
    assert res.auc["tree_cycles"]["ms"].shape == (2, 2) and res.nested and res.ones_gap == 0.0
    assert res.subgraph_gap < 1e-5 and res.truth_auc_min == 1.0 and res.triangle <= 1e-9 and m["generator_ok"]
    assert res.explained["tree_cycles"]["test"] == 16 and res.examples["tree_cycles"]["node_level"]
    assert np.isfinite(res.noise_jaccard["tree_cycles"]["ms"]).all() and res.times["ratio"] > 0
