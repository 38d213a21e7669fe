"""Tests for compendium.papers.event2vec: simulator, embeddings, invariances, references, tiny run."""

import dataclasses

import numpy as np
import pytest
import torch

from compendium.papers import event2vec as paper
from compendium.papers.event2vec import asset as zoo
from compendium.papers.event2vec import events as ev
from compendium.stats import Estimate


@pytest.fixture(scope="module")
def data():
    return paper.simulate(np.repeat(np.arange(8), 3), np.random.default_rng(0))


# ---------------------------------------------------------------- simulator and event sets
def test_simulator_shapes_and_sorting(data):
    assert len(data) == 24 and data.x.shape == data.t.shape == (24, ev.SensorSettings().capacity)
    assert (data.counts > 300).all()
    assert data.x[data.valid].max() < 32 and data.y[data.valid].min() >= 0
    for i in range(len(data)):
        t = data.t[i, data.valid[i]]
        assert (np.diff(t) >= 0).all()
        assert data.valid[i, : data.counts[i]].all()              # valid events form a prefix
    assert 0.2 < data.p[data.valid].mean() < 0.8                 # ON and OFF both present


def test_simulator_is_deterministic_and_rejects_bad_labels():
    a = paper.simulate([0, 5], np.random.default_rng(3))
    b = paper.simulate([0, 5], np.random.default_rng(3))
    assert np.array_equal(a.t, b.t) and np.array_equal(a.x, b.x)
    with pytest.raises(ValueError):
        paper.simulate([8], np.random.default_rng(0))


def test_swipe_right_moves_right_and_zoom_grows():
    d = paper.simulate([0, 1, 6, 7], np.random.default_rng(4), dataclasses.replace(paper.SensorSettings(), noise_events=0.0, hot_events=0.0))
    slope = []
    for i in range(4):
        t, x, y = d.t[i, d.valid[i]], d.x[i, d.valid[i]], d.y[i, d.valid[i]]
        if i < 2:
            slope.append(np.corrcoef(t, x)[0, 1])
        else:
            slope.append(np.corrcoef(t, np.hypot(x - 15.5, y - 15.5))[0, 1])
    assert slope[0] > 0.5 and slope[1] < -0.5 and slope[2] > 0.3 and slope[3] < -0.3


def test_sample_events_is_a_sorted_subset(data):
    s = paper.sample_events(data, 64, np.random.default_rng(1))
    assert s.x.shape == (24, 64) and s.valid.all()
    for i in range(3):
        assert (np.diff(s.t[i]) >= 0).all()
        full = set(zip(data.x[i, data.valid[i]], data.y[i, data.valid[i]], data.t[i, data.valid[i]]))
        assert set(zip(s.x[i], s.y[i], s.t[i])) <= full
    few = paper.sample_events(data.subset([0]), 5000, np.random.default_rng(1))   # more than recorded: pads
    assert few.valid.sum() == data.counts[0]


def test_select_quantise_merge_shuffle(data):
    odd = ev.select_events(data, data.x % 2 == 1)
    assert (odd.x[odd.valid] % 2 == 1).all() and odd.valid.sum() == (data.valid & (data.x % 2 == 1)).sum()
    q = ev.quantise(data, 8)
    assert q.height == 8 and q.x[q.valid].max() < 8 and np.array_equal(q.x, data.x // 4)
    assert (ev.merge_polarity(data).p == 0).all()
    sh = ev.shuffle_timestamps(data, np.random.default_rng(2))
    assert np.array_equal(sh.t, data.t)
    i = 0
    a = sorted(zip(data.x[i, data.valid[i]], data.y[i, data.valid[i]]))
    assert sorted(zip(sh.x[i, sh.valid[i]], sh.y[i, sh.valid[i]])) == a
    with pytest.raises(ValueError):
        ev.quantise(data, 5)


def test_frames_count_every_event(data):
    s = paper.sample_events(data, 100, np.random.default_rng(5))
    frames = paper.events_to_frames(s, 8)
    assert frames.shape == (24, 16, 32, 32)
    assert np.array_equal(frames.sum((1, 2, 3)), s.valid.sum(1))
    # the first event goes to bin 0, the last to bin 7, of its polarity
    i = 0
    assert frames[i, s.p[i, 0] * 8, s.y[i, 0], s.x[i, 0]] >= 1
    assert frames[i, s.p[i, -1] * 8 + 7, s.y[i, -1], s.x[i, -1]] >= 1


# ---------------------------------------------------------------- embeddings and attention
def _tensors(data, n=40, seed=0):
    b = zoo.batch_tensors(paper.sample_events(data, n, np.random.default_rng(seed)))
    return b["x"], b["y"], b["p"], b["t"], b["mask"]


def test_lookup_index_bijection_and_gather(data):
    assert paper.lookup_bijection(32, 32) and paper.lookup_bijection(8, 8)
    model = paper.Event2Vec(dim=16)
    assert paper.gather_gap(model, data.subset([0, 1])) < 1e-12
    table = model.spatial.embedding_matrix()
    assert table.shape == (2 * 32 * 32 + 1, 16) and table[0].abs().max() == 0


def test_delta_t_invariances_and_padding():
    t = torch.tensor([[1.0, 2.0, 4.0, 0.0], [5.0, 5.0, 9.0, 13.0]], dtype=torch.float64)
    mask = torch.tensor([[True, True, True, False], [True, True, True, True]])
    dt = paper.delta_t(t, mask)
    torch.testing.assert_close(dt[0], torch.tensor([0.0, 1 / 3, 2 / 3, 0.0], dtype=torch.float64))
    torch.testing.assert_close(dt[1].sum(), torch.tensor(1.0, dtype=torch.float64))
    torch.testing.assert_close(paper.delta_t(2.5 * t + 7, mask), dt)


@pytest.mark.parametrize("embedding,attention", [("mlp", "forgetting"), ("lookup", "forgetting"), ("mlp", "softmax")])
def test_padding_shift_scale_invariance(data, embedding, attention):
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = paper.Event2Vec(dim=16, embedding=embedding, attention=attention).eval()
        for p in model.parameters():                               # non-trivial gates and norms
            p.data += 0.1 * torch.randn_like(p)
    gaps = paper.invariance_gaps(model, data.subset([0, 9, 17]), 30, np.random.default_rng(2))
    assert max(gaps.values()) < 1e-9, gaps


def test_padding_matters_without_the_mask(data):
    """Power check: the pad test fails when the pads are marked valid."""
    model = paper.Event2Vec(dim=16).double().eval()
    x, y, p, t, mask = _tensors(data.subset([0, 1]))
    t = t.double()
    with torch.no_grad():
        base = model(x, y, p, t, mask)
        cat = lambda a, v: torch.cat([a, torch.full((2, 3), v, dtype=a.dtype)], 1)
        wrong = model(cat(x, 3), cat(y, 3), cat(p, 1), cat(t, float(t.max()) + 1), cat(mask, True))
    assert (wrong - base).abs().max() > 1e-3


def test_forgetting_attention_sees_order_and_reduces_to_softmax():
    assert paper.softmax_limit_gap() < 1e-10
    with torch.random.fork_rng():
        torch.manual_seed(1)
        att = paper.ForgettingAttention(16, 2).double()
        soft = paper.ForgettingAttention(16, 2, gates=False).double()
        soft.load_state_dict({k: v for k, v in att.state_dict().items() if not k.startswith("gate")})
    h = torch.randn(1, 12, 16, dtype=torch.float64)
    mask = torch.ones(1, 12, dtype=torch.bool)
    rev = torch.arange(11, -1, -1)
    with torch.no_grad():
        # a set model commutes with a permutation of its tokens; forgetting attention does not
        torch.testing.assert_close(soft(h[:, rev], mask)[:, rev], soft(h, mask))
        perm = torch.randperm(12, generator=torch.Generator().manual_seed(0))
        assert (att(h[:, perm], mask)[:, torch.argsort(perm)] - att(h, mask)).abs().max() > 1e-4
        D = att.decay(h)
    # decay: zero on the diagonal, non-positive, monotone away from it along a row
    assert D.diagonal(dim1=-2, dim2=-1).abs().max() == 0 and D.max() <= 0
    row = D[0, 0, 5]
    assert (torch.diff(row[:6]) >= 0).all() and (torch.diff(row[5:]) <= 0).all()


def test_fused_tokens_equal_model_tokens(data):
    for embedding in ("mlp", "lookup"):
        model = paper.Event2Vec(dim=16, embedding=embedding).eval()
        assert paper.fused_gap(model, data.subset([0, 3]), 50, np.random.default_rng(0)) < 1e-5


def test_baselines_shapes_and_time_blindness(data):
    x, y, p, t, mask = _tensors(data.subset([0, 1, 2]))
    pn = paper.PointNet(use_time=False).eval()
    with torch.no_grad():
        out = pn(x, y, p, t, mask)
        perm = torch.randperm(x.shape[1])
        assert out.shape == (3, 8)
        torch.testing.assert_close(pn(x[:, perm], y[:, perm], p[:, perm], t[:, perm], mask[:, perm]), out)
        torch.testing.assert_close(pn(x, y, p, torch.zeros_like(t), mask), out)           # time-blind
    cnn = paper.FrameCNN(channels=8)
    assert cnn(torch.zeros(2, 16, 32, 32)).shape == (2, 8)
    blind = zoo.make_model("cnn_blind", 8, zoo.settings_for("smoke")).eval()          # one time bin: time-blind
    sampled = ev.sample_events(data.subset([0, 1, 2]), 40, np.random.default_rng(3))
    with torch.no_grad():
        torch.testing.assert_close(zoo.logits(blind, ev.shuffle_timestamps(sampled, np.random.default_rng(4))),
                                   zoo.logits(blind, sampled))
    assert paper.FrameCNN(height=8, width=8, channels=8)(torch.zeros(2, 16, 8, 8)).shape == (2, 8)
    assert paper.parameter_count(paper.Event2Vec(dim=32)) < paper.parameter_count(paper.Event2Vec(dim=32, embedding="lookup"))


# ---------------------------------------------------------------- statistics helpers
def test_pair_accuracies_and_worst_case():
    labels = np.array([0, 1, 2, 3, 4, 5, 6, 7])
    out = np.zeros((1, 8, 8))
    out[0, np.arange(8), labels] = 1.0                             # perfect
    assert np.array_equal(paper.pair_accuracies(out, labels), np.ones(4))
    out2 = np.zeros((1, 8, 8))
    out2[0, np.arange(8), labels ^ 1] = 1.0                        # always the reversed twin
    assert np.array_equal(paper.pair_accuracies(out2, labels), np.zeros(4))
    est = {"a": Estimate(0.5, 0.45, 0.55), "b": Estimate(0.5, 0.3, 0.62), "c": Estimate(0.9, 0.8, 1.0)}
    assert paper.worst_case(est, low=0.4, high=0.6)[0] == "c"
    assert paper.worst_case({k: est[k] for k in "ab"}, low=0.4, high=0.6)[0] == "b"
    assert paper.worst_case(est, low=0.7)[0] == "a"
    assert paper.worst_case({k: est[k] for k in "bc"}, low=0.7)[0] == "b"                 # b's whole interval fails


def test_config_validation():
    with pytest.raises(ValueError):
        paper.Config(headline_events=50)
    with pytest.raises(ValueError):
        paper.Config(event_counts=(64, 32))
    assert paper.Config(event_counts=[32, 64]).event_counts == (32, 64)


# ---------------------------------------------------------------- a tiny end-to-end run
def test_tiny_asset_and_run(tmp_path, monkeypatch):
    tiny = zoo.AssetSettings(train_per_class=4, dev_per_class=2, steps=3, train_events=(16, 32), resolutions=(8, 1),
                             num_seeds=2, batch_events=256, e2v_dims=(8, 16), cnn_channels=(4, 8))
    monkeypatch.setattr(zoo, "settings_for", lambda scale: tiny)
    small = dataclasses.replace(ev.SensorSettings(), capacity=256, steps=16)
    monkeypatch.setattr(ev, "SensorSettings", lambda **kw: dataclasses.replace(small, **kw))
    zoo.build_asset(tmp_path, "smoke", 0)
    models, meta = paper.load_models(tmp_path)
    assert set(models) == set(paper.FAMILIES) | {"e2v_res8", "e2v_res1"} and all(len(v) == 2 for v in models.values())
    assert meta["chosen"]["e2v"] in (8, 16) and meta["chosen"]["cnn"] in (4, 8)
    cfg = paper.Config(test_per_class=4, resamples=2, curve_resamples=1, headline_events=32, event_counts=(16, 32),
                       check_recordings=2)
    res = paper.run(cfg, models, meta)
    m = paper.measurements(res)
    assert res.curve["e2v"].shape == (2, 2) and res.pairs["e2v"].shape == (2, 4)
    assert max(res.exact["mlp"].values()) < 1e-9 and res.exact["bijection"] and res.exact["frame_total"] == 0
    assert isinstance(m["e2v_minus_cnn"], Estimate) and 0 < m["param_ratio"]


@pytest.fixture
def tiny_zoo(monkeypatch):
    """A two-step asset and a small sensor, so that dev-set sweeps run in seconds."""
    tiny = zoo.AssetSettings(train_per_class=3, dev_per_class=2, steps=2, train_events=(16, 32), resolutions=(1,),
                             num_seeds=1, batch_events=64, e2v_dims=(8,), cnn_channels=(4,), headline_events=32)
    monkeypatch.setattr(zoo, "settings_for", lambda scale: tiny)
    small = dataclasses.replace(ev.SensorSettings(), capacity=128, steps=8)
    monkeypatch.setattr(ev, "SensorSettings", lambda **kw: dataclasses.replace(small, **kw))


def test_dev_learning_rates_tiny(tiny_zoo):
    out = zoo.dev_learning_rates("smoke", grid=(1e-2, 3e-2), archs=("pointnet", "lookup"))
    assert set(out) == {"pointnet", "lookup"} and all(set(v) == {1e-2, 3e-2} for v in out.values())
    assert all(0.0 <= a <= 1.0 for v in out.values() for a in v.values())
    rates = dict(zoo.settings_for("full").learning_rates)
    assert set(rates) == {"e2v", "lookup", "softmax", "cnn", "pointnet", "pointnet_blind"}


def test_calibrate_noise_tiny(tiny_zoo):
    out = zoo.calibrate_noise(grid=(10.0, 40.0), target=0.8, channels=4)
    assert set(out["dev_accuracy"]) == {10.0, 40.0} and out["chosen"] in (10.0, 40.0)
    acc = out["dev_accuracy"]
    assert abs(acc[out["chosen"]] - 0.8) == min(abs(a - 0.8) for a in acc.values())
