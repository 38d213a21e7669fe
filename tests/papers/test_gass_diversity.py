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
    cfg = paper.Config(num_models=2, num_classes=2, train_steps=20, batch_size=4, num_batches=2,
                       sampler_steps=4, guided_steps=2, low_cfg_grid=(1.0,), real_per_class=40)
    r1, r2 = paper.run(cfg), paper.run(cfg)
    for arm in r1.arms:
        for m in r1.arms[arm]:
            assert np.array_equal(r1.arms[arm][m], r2.arms[arm][m])
    assert r1.arms["vanilla"]["dep"].shape == (2, 4)
