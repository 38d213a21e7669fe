"""Tests for compendium.papers.last_iterate_vi: shapes, properties, references, tiny run."""

import dataclasses
import inspect

import numpy as np
import pytest
import sympy as sp
from scipy.optimize import minimize

from compendium.papers import last_iterate_vi as paper

TINY = dict(horizon=1000, num_seeds=2, sigmas=(0.0, 0.01, 0.03, 0.1, 0.3, 1.0), window_decades=1.0,
            checkpoints_per_decade=8)


@pytest.fixture(scope="module")
def problems():
    rng = np.random.default_rng(0)
    return {
        "bilinear": paper.bilinear_game(3, rng),
        "quad": paper.quadratic_game(3, 0.25, rng),
        "affine": paper.affine_monotone(6, rng),
        "cyclic": paper.cyclic_game(5, rng),
    }


@pytest.fixture(scope="module")
def tiny_result():
    return paper.run(paper.Config(**TINY))


# ---------------------------------------------------------------- shapes
def test_shapes(problems):
    p = problems["bilinear"]
    z = np.zeros((4, 3, 2, p.dim))
    assert p.operator(z).shape == z.shape and p.project(z).shape == z.shape
    assert p.gap(z).shape == (4, 3, 2) and p.restricted_gap(z).shape == (4, 3, 2)
    sigmas = (0.0, 1.0)
    methods = paper.main_methods(sigmas, 0.25, 10.0)
    ckpt = paper.checkpoint_times(50, 5)
    out = paper.simulate(p, methods, sigmas, 3, 50, ckpt, np.random.default_rng(1), chunk=7)
    assert out["gap_sq"].shape == (ckpt.size, len(methods), 2, 3) and out["restricted_sq"] is None
    assert out["final"].shape == (len(methods), 2, 3, p.dim)
    seg = paper.simulate_extragradient(p, 0.25, sigmas, 3, 50, ckpt, np.random.default_rng(1))
    assert seg.shape == (ckpt.size, 2, 3)
    assert ckpt[0] == 1 and ckpt[-1] == 50 and np.all(np.diff(ckpt) > 0)


# ---------------------------------------------------------------- properties
@pytest.mark.parametrize("name", ["bilinear", "quad", "affine", "cyclic"])
def test_projection_idempotent_nonexpansive_and_gaps_nonnegative(problems, name):
    p = problems[name]
    rng = np.random.default_rng(2)
    a, b = 3 * rng.standard_normal((2, 200, p.dim))
    pa, pb = p.project(a), p.project(b)
    np.testing.assert_allclose(p.project(pa), pa, atol=1e-12)
    assert np.all(np.linalg.norm(pa - pb, axis=-1) <= np.linalg.norm(a - b, axis=-1) + 1e-12)
    assert np.all(p.gap(pa) >= -1e-12), "the gap is non-negative on Z"
    assert abs(p.gap(p.solution)) <= 1e-12, "and zero at the solution"
    np.testing.assert_allclose(p.operator(p.solution) @ (pa - p.solution).T >= -1e-12, True)  # VI inequality
    if p.domain == "ball":
        assert np.all(p.restricted_gap(pa) >= -1e-12) and abs(p.restricted_gap(p.solution)) <= 1e-12
        assert np.all(p.restricted_gap(pa) <= p.gap(pa) + 1e-9), "monotone: Minty gap <= gap"


def test_schedules_are_horizon_free_and_consistent():
    for fn in (paper.base_schedule, paper.sigma_tuned_schedule, paper.strongly_monotone_schedule):
        assert not any("horizon" in n or n == "T" for n in inspect.signature(fn).parameters)
    t = np.arange(0, 10**5, 997)
    tuned1, base = paper.sigma_tuned_schedule(1.0, 0.25, 10.0), paper.base_schedule(0.25, 10.0)
    np.testing.assert_allclose(tuned1.step(t[1:]), base.step(t[1:]))
    np.testing.assert_allclose(tuned1.regularization(t), base.regularization(t))
    det = paper.sigma_tuned_schedule(0.0, 0.25, 10.0)
    assert np.all(det.step(t) == 0.25)
    np.testing.assert_allclose(det.regularization(t), (t + 10.0) ** -0.5)
    for s in (0.01, 0.1, 3.0):
        sch = paper.sigma_tuned_schedule(s, 0.25, 10.0)
        assert np.all(np.diff(sch.step(t)) <= 0) and np.all(np.diff(sch.regularization(t)) < 0)
        assert np.all(sch.step(t) <= 0.25)
    const = paper.constant_schedule(0.1)
    assert np.all(const.step(t) == 0.1) and np.all(const.regularization(t) == 0)


def test_optimism_converges_where_gradient_play_diverges(problems):
    p = problems["bilinear"]
    const = paper.constant_schedule(0.25)
    methods = [paper.Method("GDA", False, (const,)), paper.Method("OG", True, (const,))]
    ckpt = np.array([1, 2000])
    out = paper.simulate(p, methods, (0.0,), 2, 2000, ckpt, np.random.default_rng(3))
    gda, og = out["gap_sq"][-1, :, 0, 0]
    assert og < 1e-12 < 1e-2 < gda  # OG converges linearly; GDA spirals out to the boundary


def test_exponent_program_and_sigma_scaling():
    rg = paper.exponent_program(noisy=True, optimistic=False)
    assert (rg["a"], rg["b"], rg["rate"]) == (sp.Rational(3, 5), sp.Rational(1, 5), sp.Rational(2, 5))
    assert paper.exponent_program(noisy=False, optimistic=True)["rate"] == 1
    assert paper.exponent_program(noisy=False, optimistic=False)["rate"] == sp.Rational(2, 3)
    s = paper.sigma_scaling()
    assert (s["step_power"], s["reg_power"], s["sigma_power"]) == (sp.Rational(-4, 5), sp.Rational(2, 5), sp.Rational(4, 5))
    assert not s["depends_on_sigma"]
    assert set(paper.crossover_times().values()) == {sp.Symbol("sigma", positive=True) ** sp.Rational(-4, 3)}
    C = paper.strongly_monotone_constant()
    kappa, sigma, lam = sp.symbols("kappa sigma lambda", positive=True)
    assert sp.simplify(C.subs(kappa, 1) - sigma**2 / lam**2) == 0


def test_sigma_power_by_numerical_minimisation():
    # minimise f = s^2 c_eta/c_mu + (c_eta c_mu)^-2 + c_mu^2 numerically and fit the power of sigma
    sig = np.array([0.05, 0.2, 1.0, 4.0])
    best = [minimize(lambda v: s**2 * np.exp(v[0] - v[1]) + np.exp(-2 * (v[0] + v[1])) + np.exp(2 * v[1]),
                     np.zeros(2), method="Nelder-Mead", options={"xatol": 1e-10, "fatol": 1e-14}).fun for s in sig]
    assert abs(paper.fit_power(sig, best) - 0.8) < 1e-3


# ---------------------------------------------------------------- references
def test_restricted_gap_matches_cvxpy_and_closed_form(problems):
    rng = np.random.default_rng(4)
    for name in ("bilinear", "quad", "affine"):
        p = problems[name]
        check = paper.cvxpy_gap_check(p, rng, num_points=3)
        np.testing.assert_allclose(check["fast"], check["cvxpy"], atol=1e-6)
        if name == "bilinear":
            np.testing.assert_allclose(check["closed_form"], check["cvxpy"], atol=1e-6)
            np.testing.assert_allclose(check["gap"], check["closed_form"], atol=1e-12)
    z = problems["cyclic"].project(rng.standard_normal(10))  # simplex: cvxpy only; equals the duality gap
    A = problems["cyclic"].matrix[:5, 5:]
    duality_gap = (z[:5] @ A).max() - (A @ z[5:]).min()
    assert abs(paper.restricted_gap_cvxpy(problems["cyclic"], z) - duality_gap) < 1e-6
    assert abs(problems["cyclic"].gap(z) - duality_gap) < 1e-12


def test_simplex_projection_matches_bisection():
    rng = np.random.default_rng(5)
    z = 2 * rng.standard_normal((50, 7))
    lo, hi = z.min(axis=-1) - 1, z.max(axis=-1)
    for _ in range(200):  # sum(max(z - theta, 0)) = 1, decreasing in theta
        mid = 0.5 * (lo + hi)
        big = np.maximum(z - mid[:, None], 0).sum(-1) > 1
        lo, hi = np.where(big, mid, lo), np.where(big, hi, mid)
    np.testing.assert_allclose(paper.project_simplex(z), np.maximum(z - hi[:, None], 0), atol=1e-10)


def test_trust_region_against_sampling():
    rng = np.random.default_rng(6)
    B = rng.standard_normal((4, 2))
    S, c = B @ B.T, 3 * rng.standard_normal(4)
    y = paper.project_ball(rng.standard_normal((200000, 4)) * rng.uniform(0, 1.5, (200000, 1)), 1.0)
    brute = np.max(-np.einsum("ni,ij,nj->n", y, S, y) + y @ c)
    value = paper.ball_trust_region(S, c, 1.0)
    assert brute <= value + 1e-12 and value - brute < 1e-2


def test_simulate_matches_naive_loop(problems):
    p, T = problems["quad"], 40
    sigmas = (0.0, 0.5)
    methods = paper.main_methods(sigmas, 0.25, 10.0)[:3]
    ckpt = np.arange(1, T + 1)
    out = paper.simulate(p, methods, sigmas, 2, T, ckpt, np.random.default_rng(7), chunk=9)
    rng = np.random.default_rng(7)  # the same chunks of draws as simulate(chunk=9)
    xi = np.concatenate([rng.standard_normal((min(9, T - s), 2, p.dim)) for s in range(0, T, 9)])
    for m, meth in enumerate(methods):
        for k, s in enumerate(sigmas):
            for r in range(2):
                z, g_prev = p.anchor.copy(), None
                for t in range(T):
                    sch = meth.schedules[k]
                    g = p.matrix @ z + p.shift + s / np.sqrt(p.dim) * xi[t, r] + sch.regularization(t) * (z - p.anchor)
                    g_prev = g if g_prev is None else g_prev
                    d = 2 * g - g_prev if meth.optimistic else g
                    z = p.project(z - sch.step(t) * d)
                    g_prev = g
                    assert abs(out["gap_sq"][t, m, k, r] - p.gap(z) ** 2) <= 1e-12


def test_fits_recover_known_exponents():
    t = np.logspace(0, 5, 60)
    assert abs(paper.fit_loglog_slope(t, 3 * t**-0.4, (1e3, 1e5)) + 0.4) < 1e-12
    assert paper.fit_loglog_slope(t, np.where(t > 1e4, 0.0, 1.0), (1e3, 1e5)) == -np.inf
    sig = np.array([0.1, 0.2, 0.5, 1.0, 3.0])
    T = 10**6
    fit = paper.fit_two_term_rate(sig, 2.0 * sig**0.8 * T**-0.4 + 5.0 / T, T)
    assert abs(fit["p"] - 0.8) < 1e-6 and abs(fit["a"] - 2.0) < 1e-4 and abs(fit["b"] - 5.0) < 1e-2


# ---------------------------------------------------------------- run and config
def test_tiny_run_is_deterministic(tiny_result):
    again = paper.run(paper.Config(**TINY))
    np.testing.assert_array_equal(again.gap_sq, tiny_result.gap_sq)
    np.testing.assert_array_equal(again.strong_gap_sq, tiny_result.strong_gap_sq)
    assert again.metrics["slope"] == tiny_result.metrics["slope"]
    assert tiny_result.gap_sq.shape == (tiny_result.checkpoints.size, len(paper.MAIN_METHODS), 8, 2)  # 6 + 2 low-noise levels
    assert tiny_result.metrics["cvxpy_vs_closed_form"] < 1e-6
    for key in ("low_noise_ratio", "high_noise_ratio"):
        assert np.isfinite(tiny_result.metrics[key]) and tiny_result.metrics[key] > 0
    details = paper.slope_details(tiny_result, "RG", 1.0)
    assert details["num_seeds"] == 2 and details["seed_slope_min"] <= details["seed_slope_max"]


def test_config_rejects_bad_values():
    good = paper.Config(**TINY)
    for bad in (dict(horizon=10), dict(horizon=True), dict(num_seeds=1), dict(sigmas=(0.0, 0.1, 1.0)),
                dict(sigmas=(0.0, 0.01, 0.03, 0.3, 0.1, 1.0)), dict(sigmas=(-1.0, 0.0, 0.01, 0.03, 0.1, 0.3, 1.0)),
                dict(step_max=0.0), dict(step_max=0.8), dict(strong_monotonicity=0.0), dict(offset=0.5),
                dict(window_decades=3.0), dict(dimension=1), dict(checkpoints_per_decade=2), dict(seed=-1)):
        with pytest.raises(ValueError):
            dataclasses.replace(good, **bad)
    assert isinstance(paper.Config(sigmas=[0.0, 0.01, 0.03, 0.1, 0.3, 1.0]).sigmas, tuple)
    with pytest.raises(ValueError):
        paper.AffineVI("bad", -np.eye(2), np.zeros(2), ((0, 2),), "ball", 1.0, np.zeros(2), np.zeros(2))
    with pytest.raises(ValueError):
        paper.cyclic_game(4, np.random.default_rng(0))


# ---------------------------------------------------------------- hardening: comparison methods and intervals
def test_extra_methods_share_the_noise_of_the_main_run(tiny_result):
    r = tiny_result
    assert set(r.extra) == {"RG (low-noise)", "RG (sigma-tuned)", "OG (decaying)"}
    for name, e in r.extra.items():
        assert e["gap_sq"].shape == (r.checkpoints.size, len(paper.extra_sigmas(r.config.horizon)[name]), 2)
        assert r.curves(name, e["sigmas"][0]).shape == (r.checkpoints.size, 2)
    # at sigma = 0 the noise plays no role, and RG's own schedule differs from the fixed one
    assert not np.allclose(r.curves("RG (low-noise)", 0.0), r.curves("RG", 0.0))
    with pytest.raises(ValueError):
        r.curves("RG (low-noise)", 1.0)  # not run at that sigma
    sched = paper.methods.rg_low_noise_schedule(0.25, 10.0)
    t = np.array([0, 100, 10000])
    np.testing.assert_allclose(sched.step(t), np.minimum(0.25, (t + 10.0) ** (-1 / 3)))
    np.testing.assert_allclose(paper.methods.decaying_step_schedule(0.25, 10.0).regularization(t), 0.0)


def test_interval_estimates_over_seeds(tiny_result):
    ev = paper.evaluation
    r = tiny_result
    slope = ev.slope_estimate(r, "RG", 1.0)
    assert slope.unit == "seeds" and slope.n == 2 and slope.low <= slope.point <= slope.high
    d = paper.slope_details(r, "RG", 1.0)
    assert d["seed_slope_min"] - 1e-12 <= slope.point <= d["seed_slope_max"] + 1e-12
    ratio = ev.ratio_estimate(r, "ROG (fixed)", "RG", (0.0, 0.01), rng=0, resamples=50)
    expected = max(r.mean("ROG (fixed)", s)[-1] / r.mean("RG", s)[-1] for s in (0.0, 0.01))
    assert ratio.point == pytest.approx(expected) and ratio.low <= ratio.high
    power = ev.strong_power_estimate(r, (0.1, 0.3, 1.0))
    assert power.n == 2 and 1.0 < power.point < 3.0
    p = ev.variance_power_estimate(r, "ROG (sigma-tuned)", (0.1, 1.0), rng=0, resamples=20)
    assert np.isfinite(p.point) and p.low <= p.high


def test_exponents_display_rows():
    rows = paper.rates.exponents_display_rows()
    assert [r["regime"] for r in rows][-1] == "ROG, strongly monotone"
    assert rows[0]["rate r"] == "2/5" and len(rows) == 5


# ---------------------------------------------------------------- batched simulator, warm anchor, lambda sweep
def test_simulate_batch_equals_separate_runs(problems):
    # two ball problems advanced together see the same draws as each run alone with the same seed
    p, q = problems["bilinear"], problems["quad"]
    base, tuned = paper.base_schedule(0.25, 10.0), paper.sigma_tuned_schedule(0.3, 0.25, 10.0)
    arms_p = [(False, base, 0.1), (True, tuned, 0.3)]
    arms_q = [(True, paper.strongly_monotone_schedule(0.25, 0.25, 10.0), 1.0)]
    ckpt = paper.checkpoint_times(300, 6)
    both = paper.methods.simulate_batch([p, q], [arms_p, arms_q], 3, 300, ckpt, np.random.default_rng(8), chunk=37,
                                        restricted=(1,))
    alone_p = paper.methods.simulate_batch([p], [arms_p], 3, 300, ckpt, np.random.default_rng(8), chunk=37)[0]
    alone_q = paper.methods.simulate_batch([q], [arms_q], 3, 300, ckpt, np.random.default_rng(8), restricted=(0,))[0]
    np.testing.assert_allclose(both[0]["gap_sq"], alone_p["gap_sq"], rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(both[1]["gap_sq"], alone_q["gap_sq"], rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(both[1]["restricted_sq"], alone_q["restricted_sq"], rtol=1e-10, atol=1e-14)
    assert both[0]["restricted_sq"] is None and both[0]["final"].shape == (2, 3, p.dim)
    # a single ball of the full dimension is projected with the two-ball problems
    a = paper.affine_monotone(p.dim, np.random.default_rng(9))
    mixed = paper.methods.simulate_batch([p, a], [arms_p, arms_p], 2, 200, ckpt[ckpt <= 200], np.random.default_rng(1))
    solo = paper.methods.simulate_batch([a], [arms_p], 2, 200, ckpt[ckpt <= 200], np.random.default_rng(1))[0]
    np.testing.assert_allclose(mixed[1]["gap_sq"], solo["gap_sq"], rtol=1e-10, atol=1e-14)
    # a simplex problem of the same dimension rides along, projected on its own slice
    c = paper.cyclic_game(3, np.random.default_rng(10))
    with_simplex = paper.methods.simulate_batch([p, c], [arms_p, arms_p], 2, 200, ckpt[ckpt <= 200], np.random.default_rng(1))
    solo_c = paper.methods.simulate_batch([c], [arms_p], 2, 200, ckpt[ckpt <= 200], np.random.default_rng(1))[0]
    np.testing.assert_allclose(with_simplex[1]["gap_sq"], solo_c["gap_sq"], rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(with_simplex[0]["gap_sq"], mixed[0]["gap_sq"], rtol=1e-10, atol=1e-14)
    with pytest.raises(ValueError):  # the ball problems must come first
        paper.methods.simulate_batch([c, p], [arms_p, arms_p], 2, 10, np.array([10]), np.random.default_rng(0))
    with pytest.raises(ValueError):  # one dimension per batch
        paper.methods.simulate_batch([p, problems["cyclic"]], [arms_p, arms_p], 2, 10, np.array([10]), np.random.default_rng(0))


def test_warm_anchor_and_lambda_sweep(tiny_result):
    r = tiny_result
    assert r.warm["gap_sq"].shape == (r.checkpoints.size, 2, len(paper.WARM_SIGMAS), 2)
    assert r.lambda_sweep["gap_sq"].shape == (r.checkpoints.size, 3, 2) and r.lambda_sweep["dist_sq"].shape == (3, 2)
    np.testing.assert_allclose(r.lambda_sweep["lambdas"], [0.0625, 0.125, 0.25])
    # the lambda = strong_monotonicity member is the strong run's ROG at sigma = 1 (same draws)
    j = int(np.flatnonzero(np.isclose(r.strong_sigmas, 1.0))[0])
    np.testing.assert_array_equal(r.lambda_sweep["gap_sq"][:, -1], r.strong_gap_sq[:, 0, j])
    # the warm game is the bilinear game with the anchor moved towards the solution
    warm = paper.bilinear_game(5, np.random.default_rng(0), anchor_norm=paper.WARM_ANCHOR_NORM)
    first = paper.bilinear_game(5, np.random.default_rng(0))
    np.testing.assert_array_equal(warm.matrix, first.matrix)
    np.testing.assert_allclose(warm.anchor / paper.WARM_ANCHOR_NORM, first.anchor / 0.5)
    assert r.metrics["warm_final"][("RG", 1.0)] > r.metrics["warm_final"][("RG", 0.0)]


def test_ratio_and_power_estimates_on_known_values():
    ev = paper.evaluation
    num, den = np.array([2.0, 4.0, 6.0, 8.0]), np.array([1.0, 1.0, 1.0, 1.0])
    est = ev.final_ratio_estimate(num, den, rng=0, resamples=200)
    assert est.point == pytest.approx(5.0) and est.low <= 5.0 <= est.high and est.n == 4
    same = ev.final_ratio_estimate(den, den, rng=0, resamples=50)
    assert same.point == same.low == same.high == 1.0
    with pytest.raises(ValueError):
        ev.final_ratio_estimate(num, den[:3], rng=0)
    lam = np.array([0.1, 0.2, 0.4])
    rng = np.random.default_rng(3)
    final = lam[:, None] ** -2.0 * np.exp(0.01 * rng.standard_normal((3, 6)))
    power = ev.power_over_seeds(lam, final)
    assert power.n == 6 and power.low < -2.0 < power.high and abs(power.point + 2.0) < 0.05


# ---------------------------------------------------------------- round 2: the sigma-agnostic ROG and low noise
def test_adaptive_schedule_is_the_tuned_rule_at_the_estimated_sigma():
    ad = paper.adaptive_schedule(0.25, 10.0)
    for t in (0, 7, 123, 40000):
        for v in (0.0, 1e-6, 1e-3, 2.0, 500.0):
            s_hat = float(ad.noise_estimate(t, v))
            ref = paper.sigma_tuned_schedule(s_hat, 0.25, 10.0)
            assert np.isclose(ad.step(t, v), ref.step(t), rtol=1e-12)
            assert np.isclose(ad.regularization(t, v), ref.regularization(t), rtol=1e-12)
    assert ad.step(5, 0.0) == 0.25  # no variation yet: the deterministic regime
    with pytest.raises(ValueError):
        paper.AdaptiveSchedule(0.0)


def test_adaptive_arm_matches_naive_loop_and_estimates_sigma(problems):
    p, T, S = problems["bilinear"], 60, 2
    ad = paper.adaptive_schedule(0.25, 10.0)
    base = paper.base_schedule(0.25, 10.0)
    arms = [(False, base, 0.5), (True, ad, 0.0), (True, ad, 0.5)]
    ckpt = np.arange(1, T + 1)
    out = paper.methods.simulate_batch([p], [arms], S, T, ckpt, np.random.default_rng(3), chunk=13)[0]
    rng = np.random.default_rng(3)
    xi = np.concatenate([rng.standard_normal((min(13, T - s), S, p.dim)) for s in range(0, T, 13)])
    for a, (_, _, sigma) in enumerate(arms[1:], start=1):
        for r in range(S):
            z, g_prev, v = p.anchor.copy(), None, 0.0
            for t in range(T):
                mu = ad.regularization(t, v)
                g = p.matrix @ z + p.shift + sigma / np.sqrt(p.dim) * xi[t, r] + mu * (z - p.anchor)
                g_prev = g if g_prev is None else g_prev
                eta = ad.step(t, v)  # both read V_{t-1}
                v += float(np.sum((g - g_prev) ** 2))
                z = p.project(z - eta * (2 * g - g_prev))
                g_prev = g
                assert abs(out["gap_sq"][t, a, r] - p.gap(z) ** 2) <= 1e-12
            assert np.isclose(out["sigma_hat"][a, r], ad.noise_estimate(T, v))
    assert np.all(np.isnan(out["sigma_hat"][0]))
    # a long noisy run: the estimate converges to the true sigma
    long = paper.methods.simulate_batch([p], [[(True, ad, 0.3)]], 4, 4000, np.array([4000]), np.random.default_rng(0))[0]
    assert np.all(np.abs(long["sigma_hat"][0] / 0.3 - 1) < 0.05)


def test_low_noise_levels_lie_below_the_crossover(tiny_result):
    for T in (1000, 50000, 500000):
        low = paper.low_noise_sigmas(T)
        assert all(0 < s <= T ** -0.75 for s in low)
        assert all(s ** (-4 / 3) > T for s in low)  # the crossover lies beyond the horizon
        assert paper.below_crossover_sigmas(T) == (0.0, *low)
    r = tiny_result
    for s in paper.below_crossover_sigmas(r.config.horizon):
        for name in ("ROG (sigma-tuned)", paper.ADAPTIVE, "RG (low-noise)", "RG (sigma-tuned)", "RG", "ROG (fixed)"):
            assert r.curves(name, s).shape == (r.checkpoints.size, 2)
    assert r.sigma_hat.shape == (r.sigmas.size, 2)
    assert np.all(np.isfinite(r.sigma_hat))


def test_simulate_batch_is_split_into_short_pieces():
    src = inspect.getsource(paper.methods.simulate_batch)
    body = src[src.index('"""', src.index('"""') + 3) + 3:]
    assert len(body.strip().splitlines()) <= 60
