"""Tests for compendium.papers.prototype_tta: shapes, properties, references, builder, tiny run."""

import dataclasses
import json

import numpy as np
import pytest
import torch

from compendium.papers import prototype_tta as paper

TINY_ENCODER = paper.EncoderConfig(conv1_channels=4, conv2_channels=4, hidden=16, text_embedding=4,
                                   text_hidden=8, embed_dim=8)
TINY_TRAIN = paper.TrainSettings(steps=3, batch_size=16, encoder=TINY_ENCODER)


def unit_rows(rng, n, d):
    x = rng.standard_normal((n, d))
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def random_stream(seed=0, n=120, C=6, d=8, scale=20.0):
    rng = np.random.default_rng(seed)
    text = unit_rows(rng, C, d)
    labels = rng.integers(0, C, n)
    feats = text[labels] + 0.6 * rng.standard_normal((n, d))
    feats /= np.linalg.norm(feats, axis=1, keepdims=True)
    return feats, scale * feats @ text.T, labels


@pytest.fixture(scope="module")
def tiny_model():
    model, _ = paper.train(TINY_TRAIN, seed=0, log=lambda *_: None)
    return model


# ---------------------------------------------------------------- shapes
def test_data_shapes_and_ranges():
    images, labels = paper.load_digit_images()
    assert images.shape == (1797, 8, 8) and labels.shape == (1797,)
    assert images.min() >= 0 and images.max() <= 1
    assert paper.all_prompts().shape == (1110, 3)
    assert len({tuple(r) for r in paper.all_prompts()}) == 1110
    np.testing.assert_array_equal(paper.three_digit_prompts([7, 342]), [[0, 0, 7], [3, 4, 2]])
    rng = np.random.default_rng(0)
    tokens = paper.three_digit_prompts([5, 123, 999])
    for dom in paper.DOMAINS:
        canvas = paper.domain_canvases(dom, tokens, images, labels, rng)
        assert canvas.shape == (3, 8, 24)
        assert canvas.min() >= 0 and canvas.max() <= 1, dom
    one = paper.single_digit_canvases(images[:4])
    assert one.shape == (4, 8, 24) and np.all(one[:, :, :16] == 0)
    seg = paper.segment_digit(8, rng)
    assert seg.shape == (8, 8) and seg.max() <= 1 and seg.sum() > paper.segment_digit(1, rng).sum()


def test_model_and_methods_shapes():
    model = paper.build_model(TINY_ENCODER, seed=0)
    canvases = np.zeros((5, 8, 24))
    feats = paper.image_features(model, canvases)
    assert feats.shape == (5, 8)
    np.testing.assert_allclose(np.linalg.norm(feats, axis=1), 1.0, atol=1e-12)
    assert paper.zero_shot_logits(model, feats, paper.single_digit_prompts()).shape == (5, 10)
    assert model(torch.zeros(5, 1, 8, 24), torch.from_numpy(paper.all_prompts())).shape == (5, 1110)
    f, s, _ = random_stream(C=7, d=8)
    for method in (paper.ZeroShot(7, 8), paper.PTA(7, 8), paper.PTA(7, 8, mode="hard"),
                   paper.TDA(7, 8), paper.TDA(7, 8, retrieval="released")):
        assert paper.run_stream(method, f[:20], s[:20]).shape == (20, 7)


def test_split_is_stratified_and_disjoint():
    split = paper.split_indices_for(0)
    _, labels = paper.load_digit_images()
    assert set(split["train"]) & set(split["test"]) == set() and set(split["val"]) & set(split["test"]) == set()
    assert sum(len(v) for v in split.values()) == 1797
    assert np.all(np.bincount(labels[split["test"]]) == 50) and np.all(np.bincount(labels[split["val"]]) == 20)


# ---------------------------------------------------------------- mathematical properties
def test_pta_prototypes_are_order_invariant_and_match_closed_form():
    f, s, _ = random_stream(seed=1)
    for mode in ("soft", "hard"):
        forward, shuffled = paper.PTA(6, 8, mode=mode), paper.PTA(6, 8, mode=mode)
        paper.run_stream(forward, f, s)
        perm = np.random.default_rng(2).permutation(len(f))
        paper.run_stream(shuffled, f[perm], s[perm])
        closed = paper.pta_prototypes(f, s, mode)
        np.testing.assert_allclose(forward.prototypes, closed, atol=1e-12)
        np.testing.assert_allclose(shuffled.prototypes, closed, atol=1e-12)
        # the incrementally updated squared norms equal the direct ones
        np.testing.assert_allclose(forward.sq_norms, (forward.prototypes ** 2).sum(1), rtol=1e-10)
        np.testing.assert_allclose(forward.mass, paper.pta_weights(s, mode).sum(0), rtol=1e-12)


def test_pta_with_update_weight_zero_is_zero_shot_exactly():
    f, s, _ = random_stream(seed=3)
    out = paper.run_stream(paper.PTA(6, 8, alpha=4.0, beta=3.0, update_weight=0.0), f, s)
    assert np.array_equal(out, s)
    # any positive update weight gives the same logits (prototypes are only used through cosines)
    a = paper.run_stream(paper.PTA(6, 8, update_weight=1.0), f, s)
    b = paper.run_stream(paper.PTA(6, 8, update_weight=7.5), f, s)
    np.testing.assert_allclose(a, b, rtol=1e-12)


def test_pta_read_out_by_hand():
    """Two samples, two classes: the logits follow the equations written out by hand."""
    f = np.array([[1.0, 0.0], [0.6, 0.8]])
    s = np.array([[2.0, 0.0], [0.0, 1.0]])
    pta = paper.PTA(2, 2, alpha=2.0, beta=5.0)
    out = paper.run_stream(pta, f, s)
    p1, p2 = paper.softmax(s[0]), paper.softmax(s[1])
    P = p1[:, None] * f[0] + p2[:, None] * f[1]
    cos = P @ f[1] / np.linalg.norm(P, axis=1)
    np.testing.assert_allclose(out[1], s[1] + 2.0 * np.exp(-5.0 * (1 - cos)), rtol=1e-12)
    np.testing.assert_allclose(out[0], s[0] + 2.0, rtol=1e-12)  # after one sample every cosine is 1


def test_step_cost_scaling():
    d = 64
    for C in (10, 100, 1000):
        assert paper.step_cost("zero-shot", C, d) == C * d + C
        assert paper.step_cost("PTA-soft", C, d) - paper.step_cost("zero-shot", C, d) == 2 * C * d + 18 * C
    full = lambda C, m: paper.step_cost(m, C, d, n_pos=3 * C, n_neg=2 * C)
    # with full caches TDA as released is quadratic in C, PTA linear
    assert full(1000, "TDA-released") / full(100, "TDA-released") > 50
    assert paper.step_cost("PTA-soft", 1000, d) / paper.step_cost("PTA-soft", 100, d) < 11
    with pytest.raises(ValueError):
        paper.step_cost("nope", 10, d)


# ---------------------------------------------------------------- references
def test_tda_matches_dict_reference():
    for seed in range(3):
        f, s, _ = random_stream(seed=seed, n=150, C=5, d=6, scale=8.0)  # mid entropies fill the negative cache
        ref = paper.tda_reference_logits(f, s, alpha=2.0, beta=5.0)
        for retrieval in ("released", "vectorised"):
            tda = paper.TDA(5, 6, alpha=2.0, beta=5.0, retrieval=retrieval)
            np.testing.assert_allclose(paper.run_stream(tda, f, s), ref, atol=1e-12)
        assert tda.neg_count.sum() > 0, "the test stream should exercise the negative cache"


def test_tda_keeps_lowest_entropy_samples():
    """Capacity 2: entropies 0.5, 0.3, 0.4, 0.6 for one class leave 0.3 and 0.4 in the cache."""
    C, d = 3, 2
    tda = paper.TDA(C, d, pos_capacity=2, neg_capacity=0)
    targets = [0.5, 0.3, 0.4, 0.6]
    from scipy.optimize import brentq

    for k, h in enumerate(targets):
        # logits with the wanted entropy (the third class is negligible), class 0 predicted
        gap = brentq(lambda g: float(paper.entropy(paper.softmax(np.array([g, 0.0, -50.0])))) - h, 1e-6, 30)
        tda.observe(np.array([np.cos(k), np.sin(k)]), np.array([gap, 0.0, -50.0]))
    np.testing.assert_allclose(np.sort(tda.pos_entropy[0]), [0.3, 0.4], atol=1e-9)
    assert tda.pos_count[0] == 2 and tda.pos_count[1:].sum() == 0


def test_traces_match_the_step_by_step_methods():
    f, s, _ = random_stream(seed=4, n=80, C=5, d=6, scale=8.0)
    cos, live = paper.pta_trace(f, s, "soft")
    np.testing.assert_allclose(paper.pta_logits(s, cos, live, 3.0, 2.0),
                               paper.run_stream(paper.PTA(5, 6, 3.0, 2.0), f, s), atol=1e-12)
    pos, neg = paper.tda_trace(f, s, [1.0, 5.0])
    np.testing.assert_allclose(paper.tda_logits(s, pos[1], neg, 4.0),
                               paper.run_stream(paper.TDA(5, 6, 4.0, 5.0), f, s), atol=1e-12)


def test_encoder_macs_match_a_forward_hook_count():
    model = paper.build_model(paper.EncoderConfig(), seed=0)
    counted = []

    def hook(module, inputs, output):
        if isinstance(module, torch.nn.Conv2d):
            k = module.kernel_size[0] * module.kernel_size[1] * module.in_channels + 1
            counted.append(output.numel() * k)
        elif isinstance(module, torch.nn.Linear):
            counted.append(output.numel() * (module.in_features + 1))

    handles = [m.register_forward_hook(hook) for m in model.image.modules()]
    with torch.no_grad():
        model.image(torch.zeros(1, 1, 8, 24))
    for h in handles:
        h.remove()
    cfg = paper.EncoderConfig()
    extra = 3 * cfg.embed_dim + 8 * 24 * cfg.conv1_channels + 48 * cfg.conv2_channels + cfg.hidden
    assert paper.encoder_macs(cfg) == sum(counted) + extra


# ---------------------------------------------------------------- builder and tiny run
def test_builder_is_deterministic_and_loadable(tmp_path):
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir()
    second.mkdir()
    paper.build_asset(first, "smoke", 0, settings=TINY_TRAIN, num_encoders=2)
    paper.build_asset(second, "smoke", 0, settings=TINY_TRAIN, num_encoders=2)
    assert (first / "model.pt").read_bytes() == (second / "model.pt").read_bytes()
    assert (first / "encoder_1" / "model.pt").read_bytes() == (second / "encoder_1" / "model.pt").read_bytes()
    assert (first / "encoder_1" / "model.pt").read_bytes() != (first / "model.pt").read_bytes()  # another seed
    encoders = paper.load_encoders(first)
    assert len(encoders) == 2 and encoders[1][1]["split"] == encoders[0][1]["split"]  # one shared split
    meta = json.loads((first / "metadata.json").read_text())
    assert meta["settings"]["steps"] == 3 and len(meta["split"]["test"]) == 500
    model, meta2 = paper.load_asset(first)
    assert meta2 == meta
    assert 0.0 <= meta["metrics"]["clean_accuracy_10"] <= 1.0
    feats = paper.image_features(model, np.zeros((2, 8, 24)))
    assert feats.shape == (2, TINY_ENCODER.embed_dim)
    with pytest.raises(ValueError):
        paper.settings_for("huge")


def test_tiny_run_is_deterministic(tiny_model):
    split = {k: v[::10] for k, v in paper.split_indices_for(0).items()}  # 5 test, 2 val digits per class
    config = paper.Config(num_orders=2, class_counts=(10, 20), samples_per_class=1, timing_samples=3,
                          alpha_grid=(1.0, 2.0), beta_grid=(5.0,), validation_streams=2)
    a = paper.run(config, tiny_model, split, timing=False)
    gains = paper.gains_over_encoders(config, [(tiny_model, {"split": split})] * 2, a)
    assert gains[0] == gains[1]  # the same encoder twice: adaptation() reproduces run()'s steps 1-3
    assert np.isclose(gains[0]["pta_vs_zero_shot"], a.accuracy["PTA"].mean() - a.accuracy["zero-shot"].mean())
    est = paper.encoder_estimates(gains)
    assert est["pta_vs_tda"].n == 2 and est["pta_vs_tda"].unit == "trained encoders"
    b = paper.run(config, tiny_model, split, timing=True)
    assert a.accuracy["PTA"].shape == (2, len(paper.TARGET_DOMAINS))
    for field in dataclasses.fields(a):
        if field.name in ("latency_ns", "measured_throughput"):  # timings: never compared
            continue
        x, y = getattr(a, field.name), getattr(b, field.name)
        if isinstance(x, dict):
            assert x.keys() == y.keys()
            for k in x:
                np.testing.assert_array_equal(np.asarray(x[k]), np.asarray(y[k]))
        else:
            np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    assert a.weight_zero_gap == 0.0 and a.order_invariance < 1e-12
    assert a.cost["TDA-released"][-1] >= a.cost["PTA"][-1] or a.occupancy["pos"][-1] < 20
    # the timing pass reports a positive median for every method, and nothing without it
    assert a.latency_ns == {} and a.measured_throughput == {}
    assert all(np.all(v > 0) for v in b.latency_ns.values())
    np.testing.assert_array_equal(b.measured_throughput["zero-shot"], 1.0)


@pytest.mark.parametrize("bad", [dict(num_orders=1), dict(class_counts=(10,)), dict(class_counts=(30, 10)),
                                 dict(class_counts=(5, 10)), dict(contamination=1.0), dict(pta_mode="mean"),
                                 dict(alpha_grid=()), dict(beta_grid=(0.0,)), dict(samples_per_class=0),
                                 dict(seed=-1), dict(validation_streams=0), dict(hyperparameters="best"),
                                 dict(alpha=0.0), dict(beta=-1.0)])
def test_config_rejects_bad_values(bad):
    with pytest.raises(ValueError):
        paper.Config(**bad)


def test_methods_reject_bad_input():
    with pytest.raises(ValueError):
        paper.PTA(3, 2, mode="mean")
    with pytest.raises(ValueError):
        paper.PTA(3, 2, update_weight=-1.0)
    with pytest.raises(ValueError):
        paper.TDA(3, 2, retrieval="fast")
    with pytest.raises(ValueError):
        paper.corrupt(np.zeros((1, 8, 24)), np.zeros((1, 3), dtype=int), "fog", np.random.default_rng(0))
    with pytest.raises(ValueError):
        paper.run_stream(paper.ZeroShot(3, 2), np.zeros((4, 2)), np.zeros((3, 3)))
    with pytest.raises(ValueError):
        paper.EncoderConfig(hidden=0)


def test_uniform_weights_ignore_confidence():
    logits = np.array([[3.0, 0.0, 0.0], [0.0, 0.5, 0.0]])
    w = paper.pta_weights(logits, "uniform")
    np.testing.assert_array_equal(w, [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    hard = paper.pta_weights(logits, "hard")
    assert hard[0, 0] < 1.0 and hard[1, 1] < w[1, 1]  # hard keeps the confidence, uniform does not
    online = paper.PTA(3, 2, mode="uniform")
    feats = np.array([[1.0, 0.0], [0.0, 1.0]])
    for f, s_ in zip(feats, logits):
        online.step(f, s_)
    np.testing.assert_allclose(online.prototypes, paper.pta_prototypes(feats, logits, "uniform"))


def test_break_even_encoder_size():
    # (E + 10) / (E + 100) >= 0.9  <=>  E >= (90 - 10) / 0.1 = 800
    assert paper.break_even_encoder_macs(10.0, 100.0, 0.9) == pytest.approx(800.0)
    assert paper.break_even_encoder_macs(100.0, 100.0, 0.9) == 0.0
    with pytest.raises(ValueError):
        paper.break_even_encoder_macs(1.0, 2.0, 1.0)


def test_encoder_gains_floor_is_zero_shot_minus_chance():
    table = {"zero-shot": np.array([[30.0, 50.0]]), "PTA": np.array([[40.0, 50.0]]), "TDA": np.array([[35.0, 45.0]]),
             "PTA-uniform": np.array([[38.0, 48.0]]), "oracle": np.array([[44.0, 52.0]])}
    g = paper.encoder_gains({"accuracy": table, "contaminated": table})
    assert g["zero_shot_over_chance"] == pytest.approx(40.0 - 100.0 / paper.DIGIT_CLASSES)
    assert g["pta_vs_zero_shot"] == pytest.approx(5.0)
    assert g["oracle_vs_zero_shot"] == pytest.approx(8.0)  # the power control's gain
    assert g["tda_vs_zero_shot"] == pytest.approx(0.0)


def test_hyperparameter_rules(tiny_model):
    """fixed: both methods use (alpha, beta) whatever the validation grid says; validated: the grid's pick."""
    split = {k: v[::10] for k, v in paper.split_indices_for(0).items()}
    common = dict(num_orders=2, alpha_grid=(0.5, 8.0), beta_grid=(1.0, 8.0), validation_streams=2)
    fixed = paper.adaptation(paper.Config(**common, alpha=3.0, beta=4.0), tiny_model, split, validation_grid=True)
    assert fixed["hyper"] == {"PTA": (3.0, 4.0), "TDA": (3.0, 4.0)}
    assert fixed["grids"]["PTA"].shape == (2, 2) and set(fixed["validated"]) == {"PTA", "TDA"}
    assert paper.adaptation(paper.Config(**common), tiny_model, split)["grids"] is None  # not computed when unused
    validated = paper.adaptation(paper.Config(**common, hyperparameters="validated"), tiny_model, split)
    assert validated["hyper"] == fixed["validated"]
    assert all(a in (0.5, 8.0) and b in (1.0, 8.0) for a, b in validated["hyper"].values())
    assert (paper.PUBLISHED_ALPHA, paper.PUBLISHED_BETA) == (paper.Config().alpha, paper.Config().beta) == (2.0, 5.0)
