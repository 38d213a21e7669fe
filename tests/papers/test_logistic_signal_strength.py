"""Tests for compendium.papers.logistic_signal_strength: shapes, properties, references, tiny run."""

import dataclasses

import numpy as np
import pytest
import scipy.integrate
import scipy.optimize
import scipy.stats
from scipy.special import expit

from compendium.papers import logistic_signal_strength as paper
from compendium.runtime import make_rng

TINY = dict(cells=((0.1, 2.0), (0.3, 15.0)), num_samples=200, num_reps=2, quadrature_nodes=24,
            separability_samples=60, separability_reps=5, simulation_samples=200, simulation_seeds=2,
            rate_sizes=(100, 150, 200), probe_reps=1, crosscheck_samples=120)


# ---------------------------------------------------------------- shapes
def test_shapes():
    rng = make_rng(0)
    X, y, beta = paper.simulate(40, 6, 2.0, 0.5, rng)
    assert X.shape == (40, 6) and y.shape == (40,) and beta.shape == (6,)
    assert set(np.unique(y)) <= {0.0, 1.0} and int((beta == 0).sum()) == 3
    assert paper.prox_logistic(2.0, np.zeros((3, 4))).shape == (3, 4)
    z1, z2, w = paper.gauss_hermite_grid(8)
    assert z1.shape == z2.shape == w.shape == (64,)
    X1, y1, X2, _ = paper.split_halves(X, y)
    q, lam = paper.loo_predictors(X1, y1, np.zeros(6), X2, 0.5)
    assert q.shape == lam.shape == (40,)
    assert paper.system_residuals(1.2, 1.0, 1.0, 0.2, 2.0, nodes=8).shape == (3,)


# ---------------------------------------------------------------- properties
def test_prox_solves_its_equation_for_all_scales():
    x = np.linspace(-60, 60, 2001)
    for lam in (1e-4, 0.3, 3.0, 100.0, 1e4):
        t = paper.prox_logistic(lam, x)
        assert np.max(np.abs(t + lam * expit(t) - x)) <= 1e-12 * (1 + lam)
        assert np.all(np.diff(t) > 0)  # the prox of a convex function is increasing
    # mirror identity used by the system: prox(-x + lam) = -prox(x)
    np.testing.assert_allclose(paper.prox_logistic(2.5, -x + 2.5), -paper.prox_logistic(2.5, x), atol=1e-12)


def test_quadrature_is_symmetric_and_exact_on_moments():
    z1, z2, w = paper.gauss_hermite_grid(20)
    np.testing.assert_array_equal(z1[::-1], -z1)
    np.testing.assert_array_equal(z2[::-1], -z2)
    assert abs(w.sum() - 1) < 1e-14 and abs(w @ (z1**2 * z2**2) - 1) < 1e-12 and abs(w @ z1**4 - 3) < 1e-11


def test_system_small_kappa_limit_and_frontier_monotone():
    # kappa -> 0: classical asymptotics, alpha -> 1 and sigma^2 / kappa -> 1 / E[rho''(gamma Z)]
    sol = paper.solve_system(0.002, 1.0, nodes=40)
    z, w = np.polynomial.hermite_e.hermegauss(60)
    fisher = (w / w.sum()) @ (expit(z) * (1 - expit(z)))
    assert abs(sol.alpha - 1) < 0.01 and abs(sol.sigma**2 / 0.002 * fisher - 1) < 0.02
    kh = [paper.mle_frontier_kappa(g) for g in (0.0, 1.0, 2.0, 4.0)]
    assert abs(kh[0] - 0.5) < 1e-9 and np.all(np.diff(kh) < 0)


def test_split_mixture_reduces_to_mle_of_first_half_as_penalty_vanishes():
    # pi = 1/2, mu -> 0: the logistic rows form an MLE problem at kappa / pi
    split = paper.solve_system(0.1, 1.5, paper.Mixture(0.5, 1e-7), nodes=40)
    mle_half = paper.solve_system(0.2, 1.5, nodes=40)
    np.testing.assert_allclose([split.alpha, split.sigma], [mle_half.alpha, mle_half.sigma], rtol=1e-4)


def test_existence_certificate_and_lp_agree():
    rng = make_rng(1)
    X, y, _ = paper.simulate(300, 15, 2.0, 0.3, rng)  # kappa = 0.05: MLE exists
    stats = paper.mle_statistics(X, y)
    assert stats["exists"] and not paper.is_separable(X, y)
    Xs, ys, _ = paper.simulate(100, 60, 2.0, 0.3, rng)  # kappa = 0.6 > 1/2: always separable
    stats = paper.mle_statistics(Xs, ys)
    assert not stats["exists"] and stats["separable"] and paper.is_separable(Xs, ys)
    # near the frontier (kappa_h(sqrt 5) = 0.326) the certificate shortcuts always agree with the LP
    verdicts = []
    for p in (24, 28, 32, 36, 40, 44) * 2:
        Xn, yn, _ = paper.simulate(100, p, 5.0, 0.5, rng)
        verdicts.append(paper.decide_separable(Xn, yn)[0])
        assert verdicts[-1] == paper.is_separable(Xn, yn)
    assert 0 < sum(verdicts) < len(verdicts)  # both outcomes were exercised


def test_theory_curve_inversion_round_trip():
    curve = paper.theory_curve(0.1, paper.split_mixture(0.03), gamma_sq_max=12.0, num_points=24, nodes=40)
    g2 = np.array([0.7, 3.0, 9.5])
    stats = []
    for g in g2:
        s = paper.solve_system(0.1, float(np.sqrt(g)), paper.split_mixture(0.03), nodes=40)
        stats.append(paper.link_slope(s.alpha, s.sigma, float(np.sqrt(g)), nodes=40))
    est, clipped = curve.invert("link_slope", stats)
    np.testing.assert_allclose(est, g2, rtol=2e-3)
    assert not clipped.any()
    est, clipped = curve.invert("link_slope", [-1.0, 1e3, np.nan])
    assert est[0] == 0 and est[1] == curve.gamma_sq[-1] and np.isnan(est[2]) and list(clipped) == [True, True, False]


# ---------------------------------------------------------------- references
def test_published_values_and_frontier():
    sol = paper.solve_system(0.2, np.sqrt(5.0))
    assert abs(sol.alpha - 1.499) < 1e-3 and abs(sol.lam - 3.027) < 1e-3 and abs(sol.sigma - 2.121) < 1e-3
    assert sol.residual < 1e-10
    assert abs(paper.solve_system(0.1, np.sqrt(5.0)).alpha - 1.1678) < 1e-3
    assert abs(paper.mle_frontier_gamma(0.2) - 4.55) < 0.01


def test_frontier_against_adaptive_2d_quadrature():
    # brute force: the frontier objective with both expectations done by adaptive quadrature
    gamma, t = 2.0, 0.8

    def inner(v):
        return scipy.integrate.quad(lambda z: max(z - t * v, 0.0) ** 2 * scipy.stats.norm.pdf(z), t * v, np.inf)[0]

    brute = 2 * scipy.integrate.quad(lambda v: expit(gamma * v) * inner(v) * scipy.stats.norm.pdf(v), -12, 12, limit=200)[0]
    v, w = np.polynomial.hermite_e.hermegauss(200)
    closed = 2 * (w / w.sum()) @ (expit(gamma * v) * paper.theory._positive_part_moment(t * v))
    assert abs(brute - closed) < 1e-8
    assert paper.mle_frontier_kappa(gamma) <= closed + 1e-12  # the frontier minimises over t


def test_loo_predictors_match_refits():
    rng = make_rng(2)
    X, y, _ = paper.simulate(160, 12, 2.0, 0.4, rng)
    X1, y1, X2, _ = paper.split_halves(X, y)
    mu = 0.4
    b, ok = paper.fit_logistic(X1, y1, X2, mu, tol=1e-13)
    assert ok
    q, _ = paper.loo_predictors(X1, y1, b, X2, mu)
    for i in (0, 5, 79):  # a logistic row: refit without it
        keep = np.arange(80) != i
        bi, _ = paper.fit_logistic(X1[keep], y1[keep], X2, mu, tol=1e-13)
        assert abs(q[i] - X1[i] @ bi) < 0.02 * (1 + abs(q[i]))
    for j in (0, 40):  # a penalty row: refit without it
        keep = np.arange(80) != j
        bj, _ = paper.fit_logistic(X1, y1, X2[keep], mu, tol=1e-13)
        assert abs(q[80 + j] - X2[j] @ bj) < 0.02 * (1 + abs(q[80 + j]))


def test_split_solvers_agree():
    rng = make_rng(3)
    X, y, _ = paper.simulate(200, 20, 5.0, 0.5, rng)
    X1, y1, X2, _ = paper.split_halves(X, y)
    b = {k: paper.fit_split(X1, y1, X2, 0.03, backend=k) for k in ("newton", "lbfgs", "cvxpy")}
    scale = np.linalg.norm(b["newton"])
    assert np.linalg.norm(b["lbfgs"] - b["newton"]) / scale < 1e-6
    assert np.linalg.norm(b["cvxpy"] - b["newton"]) / scale < 1e-5
    with pytest.raises(ValueError):
        paper.fit_split(X1, y1, X2, 0.03, backend="adam")


def test_link_slope_recovers_a_logistic_slope():
    rng = make_rng(4)
    q = rng.standard_normal(20000) * 2
    y = (rng.random(q.size) < expit(0.7 * q)).astype(float)
    assert abs(paper.fit_link_slope(q, y) - 0.7) < 0.05


# ---------------------------------------------------------------- config and tiny run
@pytest.mark.parametrize("bad", [
    dict(cells=((0.6, 1.0),)), dict(cells=((0.3, 5.0),)), dict(cells=()), dict(num_reps=1),
    dict(rate_sizes=(200, 100, 300)), dict(ridge_strength=0.0), dict(ar1_correlation=0.99),
    dict(num_samples=True), dict(cells=((0.1, 2.0, 3.0),)),
])
def test_config_rejects_bad_values(bad):
    with pytest.raises(ValueError):
        paper.Config(**bad)


def test_tiny_run_is_deterministic_and_complete():
    config = paper.Config(**TINY)
    assert dataclasses.replace(config) == config
    a, b = paper.run(config), paper.run(config)
    assert a.reps.equals(b.reps) and a.summary.equals(b.summary) and a.crosscheck == b.crosscheck
    assert a.separability.equals(b.separability) and a.simulation.equals(b.simulation) and a.rate_slope == b.rate_slope
    assert set(a.reps["region"]) == {"inside", "beyond"} and len(a.reps) == 4
    beyond = a.reps[a.reps["region"] == "beyond"]
    assert beyond["split"].notna().all()  # the split estimator exists on separable data
    assert set(a.summary["estimator"]) == set(paper.ESTIMATORS)
