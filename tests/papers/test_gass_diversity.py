"""Tests for compendium.papers.gass_diversity: geometry identities, target, hook, metrics, tiny run."""

import numpy as np
import torch

torch.set_num_threads(1)

from compendium.papers import gass_diversity as paper


def _sphere(n, d, rng):
    E = rng.standard_normal((n, d))
    return E / np.linalg.norm(E, axis=1, keepdims=True)


def test_decomposition_variance_identity():
    rng = np.random.default_rng(0)
    E, e_t = _sphere(50, 32, rng), _sphere(1, 32, rng)[0]
    a, R = paper.decompose_on_axis(E, e_t)
    assert np.abs(R @ e_t).max() < 1e-12
    tr = np.trace(np.cov(E.T))
    assert abs(tr - (np.var(a, ddof=1) + np.trace(np.cov(R.T)))) < 1e-12


def test_candidates_orthonormal_and_target_unit():
    rng = np.random.default_rng(1)
    E, e_t = _sphere(20, 32, rng), _sphere(1, 32, rng)[0]
    C = paper.orthogonal_candidates(e_t, 10, rng)
    assert np.abs(C @ C.T - np.eye(10)).max() < 1e-12 and np.abs(C @ e_t).max() < 1e-12
    T, u = paper.build_e_target(E, e_t, 1, 1, 0.1, 0.1, rng)
    assert np.abs(np.linalg.norm(T, axis=1) - 1).max() < 1e-12
    T0, _ = paper.build_e_target(E, e_t, 0, 0, 0.1, 0.1, rng)
    assert np.array_equal(T0, E)
    # the chosen u_ind maximises mean |<r, b>| among the candidates
    _, R = paper.decompose_on_axis(E, e_t)
    best = paper.select_u_ind(R, C)
    assert np.abs(R @ best).mean() >= np.abs(R @ C.T).mean(axis=0).max() - 1e-15


def test_target_moves_projection_by_the_draw():
    rng = np.random.default_rng(2)
    E, e_t = _sphere(200, 32, rng), _sphere(1, 32, rng)[0]
    T, _ = paper.build_e_target(E, e_t, 1, 0, 0.3, 0.3, np.random.default_rng(3))
    a, _ = paper.decompose_on_axis(E, e_t)
    a2, _ = paper.decompose_on_axis(T, e_t)
    assert np.var(a2) > np.var(a)  # dep-only widens the spread of a (before renormalisation shrink)


def test_vendi_reference_values():
    x = np.ones((7, 5))
    assert abs(paper.vendi_score(x) - 1) < 1e-9
    assert abs(paper.vendi_score(np.eye(6)) - 6) < 1e-9


def test_density_coverage_brute_force():
    rng = np.random.default_rng(4)
    real, fake = rng.standard_normal((40, 3)), rng.standard_normal((30, 3))
    d, c = paper.density_coverage(real, fake, k=5)
    rad = [sorted(np.linalg.norm(real - r, axis=1))[5] for r in real]
    dens = sum(np.linalg.norm(f - real[i]) <= rad[i] for f in fake for i in range(40)) / (5 * 30)
    cov = np.mean([min(np.linalg.norm(fake - real[i], axis=1)) <= rad[i] for i in range(40)])
    assert abs(d - dens) < 1e-12 and abs(c - cov) < 1e-12


def test_zero_step_hook_is_bit_identical():
    toy = paper.make_toy(2, np.random.default_rng(0))
    model = paper.train_flow(toy, 2, steps=5, seed=0)
    enc = paper.Encoder(0)
    e_t = _sphere(1, 32, np.random.default_rng(1))[0]
    x0, _ = paper.sample(model, enc, e_t, 0, 8, paper.Arm("v"), np.random.default_rng(5), steps=4)
    x1, _ = paper.sample(model, enc, e_t, 0, 8, paper.Arm("g", w1=1, w2=1, guided=True),
                         np.random.default_rng(5), steps=4, guided_steps=0)
    assert np.array_equal(x0, x1)


def test_optimiser_raises_cosine():
    enc = paper.Encoder(0)
    x = torch.randn(8, 16)
    tgt = enc(torch.randn(8, 16)).detach().numpy()
    before = float((enc(x) * torch.as_tensor(tgt)).sum(-1).mean())
    x2, steps = paper.optimise_x0_to_target(x, tgt, enc)
    after = float((enc(x2) * torch.as_tensor(tgt)).sum(-1).mean())
    assert after > before and 1 <= steps <= 60


def test_velocity_rewrite_round_trip():
    x, v, s = torch.randn(4, 16), torch.randn(4, 16), torch.tensor(0.7)
    x0 = x - s * v
    assert torch.allclose(paper.rf_velocity_from_x0(x, x0, s), v, atol=1e-6)


def test_tiny_run_is_deterministic():
    cfg = paper.ToyConfig(num_models=2, num_classes=2, train_steps=20, batch_size=4, num_batches=2,
                          sampler_steps=4, guided_steps=2, low_cfg_grid=(1.0,), real_per_class=40)
    r1, r2 = paper.run_toy(cfg), paper.run_toy(cfg)
    for arm in r1.arms:
        for m in r1.arms[arm]:
            assert np.array_equal(r1.arms[arm][m], r2.arms[arm][m])
    assert r1.arms["vanilla"]["dep"].shape == (2, 4)


# ---------------------------------------------------------------------------------------------
# the digits setting (diffusers UNet + DDIM, a tiny untrained dual encoder as φ)
# ---------------------------------------------------------------------------------------------
def _tiny_digits():
    from compendium.papers.gass_diversity import digits, generator
    from compendium.papers.prototype_tta import model as clip_model

    clip = clip_model.build_model(clip_model.EncoderConfig(conv1_channels=4, conv2_channels=4, hidden=8,
                                                           text_embedding=4, text_hidden=8, embed_dim=8), 0).eval()
    settings = generator.GeneratorSettings(steps=3, batch_size=8, channels=(8, 16))
    split = clip_model.split_indices_for(0)
    unet, metrics = generator.train(settings, 0, split["train"], log=lambda *_: None)
    return digits, clip, unet, split, metrics


def test_tiny_generator_trains_and_samples():
    digits, clip, unet, split, metrics = _tiny_digits()
    assert np.isfinite(metrics["final_loss_mean_100"]) and metrics["parameters"] > 0
    phi = digits.DigitPhi(clip).eval()
    e_t, axes, share = digits.class_axes(clip, *digits.digit_data.load_digit_images(), split["train"], 2, 0)
    assert all(abs(np.linalg.norm(e_t[k]) - 1) < 1e-9 and abs(axes["fixed"][k] @ e_t[k]) < 1e-9 for k in range(2))
    noise = torch.randn(8, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    lab = np.repeat([0, 1], 4)
    x, moved = digits.ddim_sample(unet, phi, lab, noise, digits.DigitArm("g", 5.0, "gass", 1, 1, 0.1), e_t, axes,
                                  4, 4, 2, 0)
    assert x.shape == (8, 1, 8, 8) and torch.isfinite(x).all() and moved > 0
    xr, moved_r = digits.ddim_sample(unet, phi, lab, noise, digits.DigitArm("r", 5.0, "repel", lr=8e-3), e_t, axes,
                                     4, 4, 2, 0)
    assert torch.isfinite(xr).all() and moved_r > 0


def test_ddim_zero_step_hook_is_bit_identical():
    digits, clip, unet, split, _ = _tiny_digits()
    phi = digits.DigitPhi(clip).eval()
    e_t, axes, _ = digits.class_axes(clip, *digits.digit_data.load_digit_images(), split["train"], 2, 0)
    noise = torch.randn(8, 1, 8, 8, generator=torch.Generator().manual_seed(1))
    lab = np.repeat([0, 1], 4)
    xa, _ = digits.ddim_sample(unet, phi, lab, noise, digits.DigitArm("v", 5.0), e_t, axes, 4, 4, 0, 0)
    for arm in (digits.DigitArm("g", 5.0, "gass", 1, 1, 0.02), digits.DigitArm("r", 5.0, "repel")):
        xb, _ = digits.ddim_sample(unet, phi, lab, noise, arm, e_t, axes, 4, 4, 0, 0)
        assert torch.equal(xa, xb)


def test_tiny_digits_run_shapes_and_determinism():
    digits, clip, unet, split, _ = _tiny_digits()
    cfg = digits.DigitsConfig(num_models=2, num_classes=2, num_batches=2, batch_size=4, sampler_steps=3,
                              guided_steps=1, low_cfg_grid=(2.0,), repel_grid=(8e-3,), dose_grid=(0.02, 0.1),
                              guided_grid=(1, 2))
    r1 = digits.run_digits(cfg, [unet, unet], clip, split)
    r2 = digits.run_digits(cfg, [unet, unet], clip, split)
    assert set(r1.arms) == {a.name for a in digits.digit_arms(cfg)}
    for arm in r1.arms:
        for m in r1.arms[arm]:
            assert r1.arms[arm][m].shape == (2, 4)
            assert np.array_equal(r1.arms[arm][m], r2.arms[arm][m])
    assert r1.images["gass"].shape == (2, 4, 8, 8)
    assert digits.guided_arm(cfg, 2) == "gass_g2" and "gass_g2" in r1.arms and digits.guided_arm(cfg, 1) == "gass"


def test_guided_arm_guides_more_steps():
    digits, clip, unet, split, _ = _tiny_digits()
    phi = digits.DigitPhi(clip).eval()
    e_t, axes, _ = digits.class_axes(clip, *digits.digit_data.load_digit_images(), split["train"], 2, 0)
    noise = torch.randn(8, 1, 8, 8, generator=torch.Generator().manual_seed(2))
    lab = np.repeat([0, 1], 4)
    arm = digits.DigitArm("g", 5.0, "gass", 1, 1, 0.1)
    # an arm's own guided count overrides the run's: guided=0 is vanilla, guided=2 equals the run's 2
    xv, _ = digits.ddim_sample(unet, phi, lab, noise, digits.DigitArm("v", 5.0), e_t, axes, 4, 4, 0, 0)
    x0, _ = digits.ddim_sample(unet, phi, lab, noise, digits.DigitArm("g", 5.0, "gass", 1, 1, 0.1, guided=0),
                               e_t, axes, 4, 4, 2, 0)
    x2a, _ = digits.ddim_sample(unet, phi, lab, noise, arm, e_t, axes, 4, 4, 2, 0)
    x2b, _ = digits.ddim_sample(unet, phi, lab, noise, digits.DigitArm("g", 5.0, "gass", 1, 1, 0.1, guided=2),
                                e_t, axes, 4, 4, 1, 0)
    assert torch.equal(xv, x0) and torch.equal(x2a, x2b)


def test_guided_grid_validation():
    import pytest
    from compendium.papers.gass_diversity import digits

    for grid in ((10, 15), (10, 5), (5, 25)):
        with pytest.raises(ValueError):
            digits.DigitsConfig(guided_steps=5, guided_grid=grid)
    names = {a.name for a in digits.digit_arms(digits.DigitsConfig(guided_grid=(2, 5, 10)))}
    assert {"gass_g2", "gass_g10"} <= names and "gass_g5" not in names


# ---------------------------------------------------------------------------------------------
# the ledger statistics (analysis)
# ---------------------------------------------------------------------------------------------
def _arms_fixture():
    rng = np.random.default_rng(0)
    base = rng.normal(0.3, 0.01, (3, 6))
    return {"vanilla": {"dep": base, "ind": base + 0.1, "vendi": base * 10, "align": base},
            "gass": {"dep": base + 0.05, "ind": base + 0.1 + np.array([[0.05], [0.05], [-0.05]]),
                     "vendi": base * 10 + 0.5, "align": base - 0.001},
            "cfg_1": {"dep": base, "ind": base, "vendi": base * 10 + 2.0, "align": base - 0.05},
            "cfg_2": {"dep": base, "ind": base, "vendi": base * 10 + 0.6, "align": base - 0.02}}


def test_analysis_seed_means_and_every_model():
    from compendium.papers.gass_diversity import analysis as an

    arms = _arms_fixture()
    assert np.allclose(an.seed_means(arms, "gass", "dep"), arms["gass"]["dep"].mean(1))
    ests = an.raises_every_model(arms, "gass")
    assert set(ests) == {f"{m}/{j}" for m in ("dep", "ind") for j in range(3)}
    key, est = an.deciding(ests)
    assert key == "ind/2" and est.high < 0  # the model whose interval lies wholly below 0 decides
    assert abs(ests["dep/0"].point - 0.05) < 1e-12


def test_analysis_match_and_matched_difference():
    from compendium.papers.gass_diversity import analysis as an

    arms = _arms_fixture()
    assert an.match_arm(arms, "cfg_", "gass", dev=0) == "cfg_2"
    est = an.matched_difference(arms, "gass", "cfg_2", "align", dev=0)
    assert abs(est.point - 0.019) < 1e-12 and est.n == 12  # the dev model is held out


def test_analysis_dose_steps_and_shift():
    from compendium.papers.gass_diversity import analysis as an

    arms = _arms_fixture()
    steps = an.dose_steps(arms, ["vanilla", "gass"])
    assert set(steps) == {"dep: vanilla -> gass", "ind: vanilla -> gass"}
    assert abs(steps["dep: vanilla -> gass"].point - 0.05) < 1e-12 and steps["dep: vanilla -> gass"].n == 3
    z = an.shift_in_sds(arms, "gass", ("dep",))
    sd = arms["vanilla"]["dep"].mean(1).std(ddof=1)
    assert abs(z - 0.05 / sd) < 1e-9
    assert abs(an.relative_drop(arms, "gass", "align").point
               - np.mean(1 - arms["gass"]["align"].mean(1) / arms["vanilla"]["align"].mean(1))) < 1e-12


def test_planted_spread_raises_factor_spreads_by_the_fraction():
    from compendium.papers.gass_diversity import toy

    t = paper.make_toy(2, np.random.default_rng(0))
    x, _, _ = paper.sample_data(t, np.zeros(64, dtype=int), np.random.default_rng(1))
    xp = toy.plant_spread(x, (t.classes[0], t.d_ind), 0.1)
    for axis in (t.classes[0], t.d_ind):
        assert abs(np.std(xp @ axis) / np.std(x @ axis) - 1.1) < 1e-4
    other = t.classes[1]
    assert np.allclose(xp @ other, x @ other, atol=1e-5)


def test_vendi2_and_top_pc():
    E = torch.eye(6, dtype=torch.float64)
    assert abs(float(torch.exp(-paper.vendi2_loss(E, 1))) * 36 - 6) < 1e-9
    same = torch.ones(2, 5, 3, dtype=torch.float64) / 3 ** 0.5
    assert abs(float(torch.exp(-paper.vendi2_loss(same.reshape(10, 3), 2))) * 25 - 1) < 1e-9
    rng = np.random.default_rng(0)
    R = rng.standard_normal((400, 3)) * np.array([3.0, 1.0, 0.5])
    assert abs(abs(paper.top_pc(R)[0]) - 1) < 0.05
