"""Tests for compendium.papers.s2m_net: shapes, identities, references, descriptors, losses, a tiny run."""

import numpy as np
import pytest
import sympy
import torch

from compendium.papers import s2m_net as paper
from compendium.stacking import StackedModules


# ---------------------------------------------------------------- layers
@pytest.mark.parametrize("mixer", paper.MIXERS)
def test_unet_shapes(mixer):
    net = paper.TinyUNet(4, mixer, modes=4)
    y = net(torch.randn(2, 1, 32, 32))
    assert y.shape == (2, 1, 32, 32)
    with pytest.raises(ValueError):
        net(torch.randn(1, 1, 30, 30))


def test_spectral_mixer_identity_and_truncation():
    x = torch.randn(2, 3, 16, 16, dtype=torch.float64)
    mixer = paper.SpectralMixer(3, 16).double().set_identity()
    assert torch.allclose(mixer(x), x, atol=1e-12)
    # K < H keeps the rfft2 modes k_y in [-2, 2), 0 <= k_x <= 2 and, through Hermitian symmetry,
    # their conjugate partners: the reference applies that mask to the full fft2 spectrum
    low = paper.SpectralMixer(3, 4).double().set_identity()
    keep = torch.zeros(16, 16, dtype=torch.bool)
    for r in (0, 1, 14, 15):
        for col in (0, 1, 2):
            keep[r, col] = True
        for col in (1, 2):
            keep[(-r) % 16, (-col) % 16] = True
    ref = torch.fft.ifft2(torch.fft.fft2(x) * keep).real
    assert torch.allclose(low(x), ref, atol=1e-10)
    with pytest.raises(ValueError):
        paper.SpectralMixer(3, 5)
    with pytest.raises(ValueError):
        paper.SpectralMixer(3, 8)(torch.randn(1, 3, 4, 4))


def test_flop_counter_matches_formulas():
    block = paper.SSTMBlock(8, 4, 16)
    assert paper.count_flops(block, 16, 16, 8) == pytest.approx(paper.flops_sstm(256, 8, 4, 16), rel=1e-12)
    att = paper.SelfAttention2d(8)
    assert paper.count_flops(att, 8, 8, 8) == pytest.approx(paper.flops_attention(64, 8), rel=1e-12)
    ratio, limit = paper.flop_ratio_symbolic()
    assert ratio > 100 and limit == sympy.oo
    # attention grows faster than SSTM
    assert paper.flops_attention(4096, 16) / paper.flops_attention(1024, 16) > paper.flops_sstm(4096, 16, 8) / paper.flops_sstm(1024, 16, 8)


def test_receptive_field():
    torch.manual_seed(0)
    assert paper.corner_gradient(paper.SSTMBlock(4, 8, 16), 4) > 1e-8
    conv = torch.nn.Sequential(*[torch.nn.Conv2d(4, 4, 3, padding=1) for _ in range(4)])
    assert paper.corner_gradient(conv, 4) == 0.0


def test_width_matching():
    target = paper.parameter_count(paper.TinyUNet(8, "sstm", 8, 16))
    for mixer in paper.MIXERS:
        w = paper.width_for(mixer, target, 8, 16)
        assert abs(paper.parameter_count(paper.TinyUNet(w, mixer, 8, 16)) / target - 1) < 0.15
    assert paper.width_for("none", target, 8, 16) > 8       # no mixer: the plain U-Net is wider


# ---------------------------------------------------------------- spectra
def test_energy_fraction_properties():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 64))
    f = [paper.low_frequency_energy_fraction(x, k) for k in (4, 16, 64)]
    assert f[0] < f[1] < f[2] and f[2] == pytest.approx(1.0)
    assert abs(np.mean([paper.low_frequency_energy_fraction(rng.standard_normal((64, 64)), 16) for _ in range(50)]) - 16**2 / 64**2) < 0.01
    yy, xx = np.mgrid[0:64, 0:64]
    smooth = np.cos(2 * np.pi * 2 * xx / 64) + 5.0         # one low frequency plus a mean
    assert paper.low_frequency_energy_fraction(smooth, 8) == pytest.approx(1.0)
    assert paper.low_frequency_energy_fraction(x + 100.0, 4, remove_mean=False) > 0.99   # DC dominates
    assert paper.parseval_gap(x) < 1e-12
    with pytest.raises(ValueError):
        paper.low_frequency_energy_fraction(np.ones((8, 8)), 4)


# ---------------------------------------------------------------- descriptors, losses, MASL
def test_descriptors():
    yy, xx = np.mgrid[0:64, 0:64]
    disc = (yy - 31.5) ** 2 + (xx - 31.5) ** 2 <= 24**2
    c, t, irr, s = paper.descriptors(disc)
    assert 0.85 <= c <= 1.05 and irr < 0.02 and s == pytest.approx(disc.mean())
    square = np.zeros((64, 64), bool)
    square[10:40, 20:50] = True
    assert paper.descriptors(square)[2] == 0.0
    line = np.zeros((64, 64), bool)
    line[32, 8:56] = True
    assert paper.descriptors(line)[1] == 1.0
    rng = np.random.default_rng(0)
    assert paper.descriptors(paper.star_mask(rng, 64))[2] > paper.descriptors(paper.ellipse_mask(rng, 64))[2] - 1e-9
    assert paper.descriptors(paper.vessel_mask(rng, 64))[1] > paper.descriptors(disc)[1]
    assert (paper.descriptors(np.zeros((8, 8), bool)) == 0).all()


def test_vessels_span_the_image():
    rng = np.random.default_rng(3)
    for _ in range(3):
        m = paper.vessel_mask(rng, 64)
        cols = np.flatnonzero(m.any(0))
        assert cols.min() <= 2 and cols.max() >= 40


def test_losses():
    g = torch.zeros(2, 1, 16, 16)
    g[:, :, 4:12, 4:12] = 1
    sdf = torch.from_numpy(np.stack([paper.signed_distance(g[i, 0].numpy() > 0) for i in range(2)])[:, None]).float()
    perfect = (g * 2 - 1) * 20.0
    terms = paper.loss_terms(perfect, g, sdf)
    assert terms.shape == (2, 5)
    assert terms[:, [0, 1, 2, 4]].max() < 1e-3 and terms[:, 3].abs().max() < 1e-3
    rand = torch.randn(2, 1, 16, 16)
    assert (paper.boundary_loss(rand, g, sdf) >= 0).all()
    assert (paper.loss_terms(rand, g, sdf) > terms).all()


def test_soft_skeleton_of_thick_line():
    x = torch.zeros(1, 1, 21, 40)
    x[..., 8:13, 5:35] = 1.0                                   # 5 px thick horizontal bar
    skel = paper.soft_skeleton(x, iterations=5)[0, 0]
    rows = skel.sum(1)
    assert rows.argmax() == 10 and rows[10] > 0.8 * rows.sum()


def test_masl_weights_simplex_and_floor():
    masl = paper.MASL(np.zeros(4), np.ones(4), floor=0.05)
    with torch.no_grad():
        masl.theta.normal_(0, 3)
        masl.phi.normal_(0, 3)
    w = masl.weights(torch.randn(100, 4) * 5)
    assert torch.allclose(w.sum(1), torch.ones(100), atol=1e-6) and w.min() >= 0.05 - 1e-7
    fixed = paper.MASL(np.zeros(4), np.ones(4), floor=0.2)
    assert torch.allclose(fixed.weights(torch.randn(5, 4)), torch.full((5, 5), 0.2))
    with pytest.raises(ValueError):
        paper.MASL(np.zeros(4), np.ones(4), floor=0.3)
    # the prior moves weight to clDice for a tubular sample
    prior = paper.MASL(np.zeros(4), np.ones(4), floor=0.05)
    w = prior.weights(torch.tensor([[0.0, 2.0, 0.0, 0.0]]))[0]
    assert w.argmax() == paper.LOSSES.index("cldice")


def test_metrics():
    a = np.zeros((32, 32), bool)
    a[5:10, 5:25] = True
    b = a.copy()
    b[20:25, 5:25] = True
    assert paper.dice_score(a, a) == 1.0 and paper.cldice_score(a, a) == 1.0
    assert paper.betti0_error(b, a) == 1 and paper.dice_score(np.zeros_like(a), np.zeros_like(a)) == 1.0
    assert 0 < paper.dice_score(a, b) < 1


def test_decide():
    from compendium.stats import Estimate
    est = {"seed 0": Estimate(1.0, 0.5, 1.5), "seed 1": Estimate(0.3, 0.1, 0.5), "seed 2": Estimate(-1, -2, -0.5)}
    assert paper.decide(est, 0.0) == ("seed 2", est["seed 2"])
    assert paper.decide({k: est[k] for k in ("seed 0", "seed 1")}, 0.0)[0] == "seed 1"
    # a seed whose whole interval is below the bar decides even when another reaches lower
    est["seed 3"] = Estimate(0.0, -5.0, 0.4)
    assert paper.decide({k: est[k] for k in ("seed 0", "seed 3")}, 0.5)[0] == "seed 3"
    assert paper.decide({k: est[k] for k in ("seed 2", "seed 3")}, 0.0)[0] == "seed 2"


def test_frozen_and_cldice_heavy_weights_stay_fixed():
    """The frozen-prior MASL keeps theta = 0 and Phi = the prior; the clDice-heavy arm keeps its
    fixed weights on every sample; learned MASL moves theta."""
    st = paper.AssetSettings(sizes=(32,), train_images=12, steps=3, batch_size=4, learning_rate=1e-2, base_width=4,
                             modes=4, gate_dim=8, floor=0.05, prior_strength=1.0, num_seeds=2)
    train = paper.training_set(np.random.default_rng(0), st.train_images, 32, st)
    d = torch.from_numpy(train["descriptors"]).float()
    for model, _ in paper.train_arm("s2m_masl_frozen", 4, train, st, [0, 1]):
        assert torch.equal(model["masl"].theta, torch.zeros(5))
        assert torch.equal(model["masl"].phi, paper.morphology_prior(1.0))
    for model, _ in paper.train_arm("s2m_cldice_heavy", 4, train, st, [0, 1]):
        w = model["masl"].weights(d)
        assert torch.allclose(w, torch.tensor(paper.CLDICE_HEAVY_WEIGHTS).expand_as(w), atol=1e-6)
    (learned, _), = paper.train_arm("s2m_masl", 4, train, st, 0)
    assert not torch.equal(learned["masl"].theta, torch.zeros(5))


# ---------------------------------------------------------------- training and a tiny run
def test_training_is_deterministic_and_arms_share_batches(monkeypatch):
    st = paper.AssetSettings(sizes=(32,), train_images=12, steps=3, batch_size=4, learning_rate=1e-3, base_width=4,
                             modes=4, gate_dim=8, floor=0.05, prior_strength=1.0, num_seeds=1)
    train = paper.training_set(np.random.default_rng(0), st.train_images, 32, st)
    (m1, log1), = paper.train_arm("s2m_masl", 4, train, st, 0)
    (m2, log2), = paper.train_arm("s2m_masl", 4, train, st, 0)
    assert log1["losses"] == log2["losses"]
    for (k, a), b in zip(m1.state_dict().items(), m2.state_dict().values()):
        assert torch.equal(a, b), k
    for arm in ("s2m_masl_permuted", "s2m_fixed5", "s2m_masl_frozen", "s2m_cldice_heavy", "unet"):
        (_, log), = paper.train_arm(arm, 4, train, st, 0)
        assert np.isfinite(log["final_loss"])


def test_stacked_training_equals_separate_training():
    """Two seeds trained as one vmapped stack end where each trained alone ends (no clipping:
    grad_clip is sqrt(S) on the joint norm, so use a tiny learning rate that keeps it inactive)."""
    st = paper.AssetSettings(sizes=(32,), train_images=12, steps=3, batch_size=2, learning_rate=1e-4, base_width=4,
                             modes=4, gate_dim=8, floor=0.05, prior_strength=1.0, num_seeds=2)
    train = paper.training_set(np.random.default_rng(1), st.train_images, 32, st)
    for arm in ("unet",):   # (MASL arms agree to float rounding, which Adam's sign-like first steps amplify)
        both = paper.train_arm(arm, 4, train, st, [3, 4])
        for k, (model, _) in zip((3, 4), both):
            (alone, _), = paper.train_arm(arm, 4, train, st, k)
            for (name, a), b in zip(model.state_dict().items(), alone.state_dict().values()):
                assert torch.allclose(a, b, atol=1e-5), (arm, k, name)
    nets = [paper.TinyUNet(4, "sstm", 4, 8) for _ in range(2)]
    x = torch.randn(2, 3, 1, 32, 32)
    with torch.no_grad():
        assert torch.allclose(StackedModules(nets)(x), torch.stack([n(x[i]) for i, n in enumerate(nets)]), atol=1e-5)


def test_hd95_matches_brute_force():
    from scipy.spatial.distance import cdist
    rng = np.random.default_rng(0)
    for _ in range(5):
        a = paper.family_mask("ellipses", rng, 32)
        b = np.roll(paper.family_mask("stars", rng, 32), 2, axis=1)
        pa, pb = np.argwhere(paper.boundary_pixels(a)), np.argwhere(paper.boundary_pixels(b))
        d = cdist(pa, pb)
        ref = max(np.percentile(d.min(1), 95), np.percentile(d.min(0), 95))
        assert abs(paper.hd95(a, b) - ref) < 1e-9
    sq = np.zeros((20, 20), bool)
    sq[5:10, 5:10] = True
    assert paper.hd95(sq, sq) == 0.0 and paper.hd95(sq, np.roll(sq, 3, 0)) == 3.0
    assert paper.hd95(np.zeros_like(sq), np.zeros_like(sq)) == 0.0 and paper.hd95(sq, np.zeros_like(sq)) == np.hypot(20, 20)
    assert paper.boundary_pixels(sq).sum() == 16


def test_tiny_run(tmp_path, monkeypatch):
    st = paper.AssetSettings(sizes=(32,), train_images=12, steps=2, batch_size=4, learning_rate=1e-3, base_width=4,
                             modes=4, gate_dim=8, floor=0.05, prior_strength=1.0, num_seeds=2)
    monkeypatch.setattr(paper.experiment, "settings_for", lambda scale: st)
    monkeypatch.setattr(paper.experiment, "real_images", lambda side: {
        "photo: china": np.random.default_rng(1).random((side, side)), "photo: flower": np.random.default_rng(2).random((side, side)),
        "retina (skimage)": np.random.default_rng(3).random((side, side)), "camera (skimage)": np.random.default_rng(4).random((side, side))})
    paper.build_asset(tmp_path, "smoke", 0)
    models, meta = paper.load_models(tmp_path)
    assert len(models) == 11 and all(len(v) == 2 for v in models.values())
    cfg = paper.Config(test_per_family=3, energy_size=64, energy_modes=(4, 32), headline_modes=32, energy_synthetic=1,
                       attention_sizes=(8, 12, 16), sstm_sizes=(32, 40, 48), timing_channels=4, timing_repeats=1)
    result = paper.run(cfg, models, meta)
    m = paper.measurements(result)
    assert set(result.metrics) | {(32, a) for a in paper.INSTRUMENT_ARMS} == set(models)
    assert result.instrument["s2m_3class"].shape == (2, 3, 2) and m["instrument_s2m_vs_unet"][1].n == 3
    assert result.checks["identity_gap"] < 1e-5 and result.checks["corner_gradient"]["conv3x3 x4"] == 0.0
    assert m["flop_slope_attention"] > 1.7 and 0.9 < m["flop_slope_sstm"] < 1.3
    assert result.symbolic["spectrum_gap"] == 0 and result.symbolic["limit_is_infinite"]
    assert m["masl_vs_dicebce"][1].n == 3 and len(m["table"]) == 9 * 3 and "hd95" in m["table"][0]
    for key in ("cldice_heavy_vs_dicebce", "frozen_vs_dicebce", "frozen_vs_learned", "unet_learned_32", "instrument_learned"):
        assert m[key][0] in ("seed 0", "seed 1"), key
    assert m["unet_learned_32"][1].n == 3 and 0 <= m["energy_retina"] <= 1
    assert set(m["vessel_weights"]) >= {"s2m_masl", "s2m_masl_frozen", "s2m_cldice_heavy"}
    assert m["vessel_weights"]["s2m_cldice_heavy"]["cldice"] == pytest.approx(0.6, abs=1e-4)
    with pytest.raises(ValueError):
        paper.Config(energy_modes=(4, 16), headline_modes=32)


def test_instrument_variant():
    rng = np.random.default_rng(0)
    d = paper.make_instrument_dataset(rng, 4, 32, noise=0.3)
    assert d["images"].shape == (4, 1, 32, 32) and d["labels"].shape == (4, 32, 32)
    for lab in d["labels"]:
        assert set(np.unique(lab)) == {0, 1, 2}
    lab = torch.from_numpy(d["labels"])
    perfect = 50.0 * torch.nn.functional.one_hot(lab, 3).permute(0, 3, 1, 2).float()
    assert paper.multiclass_loss(perfect, lab).max() < 1e-3
    assert paper.multiclass_loss(perfect, lab, class_weight=torch.tensor([0.1, 1.0, 2.0])).max() < 1e-3
    uniform = torch.zeros(4, 3, 32, 32)
    assert torch.allclose(paper.multiclass_loss(uniform, lab, class_weight=torch.ones(3)), paper.multiclass_loss(uniform, lab))
    assert (paper.multiclass_loss(torch.zeros(4, 3, 32, 32), lab) > 0.5).all()
    assert np.allclose(paper.multiclass_dice_scores(d["labels"][0], d["labels"][0], 3), 1.0)
    assert np.allclose(paper.multiclass_dice_scores(np.zeros((32, 32), int), d["labels"][0], 3), 0.0)
