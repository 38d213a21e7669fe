"""Tests for compendium.papers.doubly_regularized_mdp: shapes, properties, references, tiny run."""

import dataclasses

import numpy as np
import pytest
import scipy.optimize
import sympy

from compendium.papers import doubly_regularized_mdp as paper
from compendium.runtime import make_rng

TINY = dict(num_episodes=64, num_seeds=2, robust_seeds=3, num_kernels=12, num_instances=5, lock_length=4,
            linear_states=6, linear_actions=2, linear_features=2, num_states=3, num_actions=2, horizon=3)


# ---------------------------------------------------------------- shapes
def test_shapes():
    rng = make_rng(0)
    mdp = paper.random_mdp(4, 5, 3, 6, rng)
    assert mdp.kernel.shape == (4, 5, 3, 5) and mdp.reward.shape == (4, 5, 3)
    pi_ref = np.full((4, 5, 3), 1 / 3)
    pis, values = paper.dr_backward(paper.tabular_continuation(mdp.kernel, 0.7), mdp.reward, 6, pi_ref, 0.2)
    assert pis.shape == (6, 4, 5, 3) and values.shape == (7, 4, 5)
    np.testing.assert_allclose(pis.sum(-1), 1.0)
    assert paper.kl_robust_expectation(mdp.kernel, np.ones(5), 1.0).shape == (4, 5, 3)
    assert paper.tv_worst_expectation(mdp.kernel, np.arange(5.0), 0.2).shape == (4, 5, 3)
    lock = paper.combination_lock(3, 7, rng)
    assert lock.kernel.shape == (3, 8, 2, 8) and lock.horizon == 7
    lin = paper.linear_mdp(2, 9, 4, 3, 5, rng)
    assert lin.features.shape == (2, 9, 4, 3) and lin.factors.shape == (2, 3, 9)
    np.testing.assert_allclose(lin.kernel.sum(-1), 1.0)
    regret = paper.tabular_regret(lock, 5, 0.05, 1.0, 1.0, 0.05, rng)
    assert regret.shape == (3, 5)


# ---------------------------------------------------------------- properties
def test_kl_robust_expectation_limits_and_overflow():
    rng = make_rng(1)
    p = rng.dirichlet(np.ones(6), size=4)
    v = rng.uniform(0, 3, size=(4, 6))
    np.testing.assert_allclose(paper.kl_robust_expectation(p, v, 1e6), (p * v).sum(-1), atol=1e-5)
    np.testing.assert_allclose(paper.kl_robust_expectation(p, v, np.inf), (p * v).sum(-1))
    np.testing.assert_allclose(paper.kl_robust_expectation(p, v, 1e-4), v.min(-1), atol=2e-3)
    # values that would overflow exp(-V/beta) without the shift, and a support that misses the minimum
    big = paper.kl_robust_expectation(np.array([0.0, 0.5, 0.5]), np.array([-1e3, 5e3, 6e3]), 1.0)
    assert np.isfinite(big) and 5e3 - 1e-6 <= big <= 5e3 + np.log(2) + 1e-6
    # robust value never exceeds the nominal one and decreases as beta shrinks
    vals = [paper.kl_robust_expectation(p, v, b) for b in (10.0, 1.0, 0.1)]
    assert np.all(vals[0] <= (p * v).sum(-1) + 1e-12) and np.all(vals[1] <= vals[0]) and np.all(vals[2] <= vals[1])
    # per-row beta array, with inf mixed in
    mixed = paper.kl_robust_expectation(p, v, np.array([np.inf, 1.0, 1.0, np.inf]))
    np.testing.assert_allclose(mixed[[1, 2]], paper.kl_robust_expectation(p[[1, 2]], v[[1, 2]], 1.0))
    np.testing.assert_allclose(mixed[[0, 3]], (p * v).sum(-1)[[0, 3]])
    with pytest.raises(ValueError):
        paper.kl_robust_expectation(p, v, -1.0)


def test_soft_value_limits_and_policy():
    rng = make_rng(2)
    Q = rng.uniform(0, 2, size=(5, 4))
    ref = rng.dirichlet(np.ones(4), size=5)
    np.testing.assert_allclose(paper.soft_value(Q, ref, 1e-5), Q.max(-1), atol=1e-3)
    np.testing.assert_allclose(paper.soft_value(Q, ref, 1e6), (ref * Q).sum(-1), atol=1e-5)
    pi = paper.soft_policy(Q, ref, 0.3)
    # the soft policy attains the soft value: <pi, Q> - lambda KL(pi || ref)
    np.testing.assert_allclose(paper.regularised_action_value(pi, Q, ref, 0.3), paper.soft_value(Q, ref, 0.3))
    with pytest.raises(ValueError):
        paper.soft_value(Q, ref, 0.0)


def test_evaluating_the_optimal_policy_reproduces_its_value():
    mdp = paper.random_mdp(3, 4, 3, 5, make_rng(3))
    pi_ref = np.full((3, 4, 3), 1 / 3)
    cont = paper.tabular_continuation(mdp.kernel, 0.8)
    pis, v_opt = paper.dr_backward(cont, mdp.reward, 5, pi_ref, 0.1)
    _, v_eval = paper.dr_backward(cont, mdp.reward, 5, pi_ref, 0.1, policies=pis)
    np.testing.assert_allclose(v_eval, v_opt, atol=1e-12)
    other = make_rng(4).dirichlet(np.ones(3), size=(5, 3, 4))
    _, v_other = paper.dr_backward(cont, mdp.reward, 5, pi_ref, 0.1, policies=other)
    assert np.all(v_other[0] <= v_opt[0] + 1e-12)


def test_duality_and_certificate():
    rng = make_rng(5)
    for _ in range(5):
        p, v, beta = rng.dirichlet(np.ones(5)), rng.uniform(0, 4, 5), rng.uniform(0.3, 3)
        q = paper.worst_case_kernel(p, v, beta)
        rho = paper.kl_divergence(q, p)
        reg = paper.kl_robust_expectation(p, v, beta)
        np.testing.assert_allclose(reg - beta * rho, q @ v, atol=1e-12)
        np.testing.assert_allclose(paper.kl_ball_expectation(p, v, rho), q @ v, atol=1e-9)
    mdp = paper.random_mdp(1, 4, 2, 4, rng)
    out = paper.certificate(mdp, 1.0, 0.1, 12, rng)
    assert out["slack"].min() >= -1e-10
    assert np.abs(out["tight"]).max() <= 1e-10


def test_certificate_kernels_are_time_varying_kernels_of_six_kinds():
    rng = make_rng(12)
    mdp = paper.random_mdp(1, 4, 2, 3, rng)
    values = rng.uniform(0, 2, size=(3, 4))
    kernels = paper.certificate_kernels(mdp.kernel[0], values, 1.0, 14, rng)
    assert len(kernels) == 14 and len(paper.KERNEL_KINDS) == 6
    for P in kernels:
        assert P.shape == (3, 4, 2, 4) and P.min() >= 0
        np.testing.assert_allclose(P.sum(-1), 1.0)
    # a value tilt moves mass towards the low-value next states: its expected next value drops
    tilt = kernels[3]
    assert np.all(np.einsum("hsat,ht->hsa", tilt, values) <= np.einsum("sat,ht->hsa", mdp.kernel[0], values) + 1e-12)


def test_certificate_holds_and_its_control_detects_a_weaker_bound():
    """The Monte Carlo certificate can fail: the bound with penalty beta/4 is broken by some kernel."""
    for seed in (13, 14):
        rng = make_rng(seed)
        mdp = paper.random_mdp(1, 4, 2, 3, rng)
        out = paper.certificate(mdp, 1.0, 0.1, 12, rng)
        assert out["slack"].shape == out["control"].shape == (2, 12)
        assert out["slack"].min() >= -1e-10  # the true bound holds for every kernel
        assert (out["control"] < -1e-10).sum() >= 1  # the weaker one does not
        # the violations come from the kernels aimed at low values
        assert (out["control"][:, out["kind"] < 3] < -1e-10).sum() < (out["control"] < -1e-10).sum()
        # with 60 kernels a bound weakened only slightly (penalty 0.9 beta) is caught as well
        near = paper.certificate(mdp, 1.0, 0.1, 60, make_rng(seed), control_weight=0.9)
        assert near["slack"].min() >= -1e-10
        assert (near["control"] < -1e-10).sum() >= 1


def test_power_and_slopes_use_the_library_statistics():
    from compendium import stats

    # one helper per idea: the chapter's jackknife and log-log slope are compendium.stats'
    assert paper.power.jackknife_se is stats.jackknife_se and paper.evaluation.jackknife_se is stats.jackknife_se
    assert paper.power.mean_curve_slope is paper.evaluation.mean_curve_slope
    assert not hasattr(paper, "loglog_slope") and not hasattr(paper.agents, "loglog_slope")
    assert paper.power.flip_probability(0.0, 1.0, 10) == pytest.approx(0.5)
    assert paper.power.flip_probability(0.1, 1.0, 100) == pytest.approx(0.158655, abs=1e-6)
    cumulative = np.sqrt(np.arange(1, 17.0))  # cumulative regret sqrt(k): slope 1/2
    regret = np.tile(np.diff(np.r_[0.0, cumulative]), (3, 1))
    assert paper.power.mean_curve_slope((1, 2, 4, 8, 16), regret) == pytest.approx(0.5)
    # the library slope equals the least-squares fit the chapter used before (np.polyfit on logs)
    per_episode = make_rng(15).gamma(1.0, 1.0, (7, 400)) * np.arange(1, 401) ** -0.4
    cps = np.array([25, 50, 100, 200, 400])
    old = np.polyfit(np.log(cps), np.log(np.cumsum(per_episode, axis=1).mean(axis=0)[cps - 1]), 1)[0]
    assert paper.evaluation.mean_curve_slope(cps, per_episode) == pytest.approx(old, abs=1e-12)


def test_symbolic_residuals():
    assert paper.symbolic.gibbs_residual(2) == 0
    assert paper.symbolic.policy_gibbs_residual(2) == 0
    assert paper.symbolic.two_point_stationarity()[0] == 0
    assert paper.symbolic.regret_rate_exponent() == sympy.Rational(1, 2)
    assert paper.symbolic.beta_factor_limits() == (0, sympy.oo)
    assert paper.symbolic.beta_factor_value(np.inf, 5) == 5.0
    assert abs(paper.symbolic.beta_factor_value(1.0, 5) - (np.e**5 - 1)) < 1e-9
    # the residual has teeth: a wrong closed form (beta log Z with the wrong sign) does not vanish
    beta, v, p = sympy.symbols("beta v p", positive=True)
    assert sympy.simplify(v + beta * sympy.log(sympy.exp(-v / beta))) == 0
    assert sympy.simplify(v - beta * sympy.log(sympy.exp(-v / beta))) != 0


# ---------------------------------------------------------------- references
def test_closed_forms_against_brute_force_two_points():
    rng = make_rng(6)
    for _ in range(5):
        p, v1, v2, beta = rng.uniform(0.1, 0.9), *rng.uniform(0, 3, 2), rng.uniform(0.2, 2)

        def f(t):
            return t * v1 + (1 - t) * v2 + beta * (t * np.log(t / p) + (1 - t) * np.log((1 - t) / (1 - p)))

        res = scipy.optimize.minimize_scalar(f, bounds=(1e-12, 1 - 1e-12), method="bounded",
                                             options=dict(xatol=1e-12))
        closed = paper.kl_robust_expectation(np.array([p, 1 - p]), np.array([v1, v2]), beta)
        assert abs(res.fun - closed) < 1e-9
        assert abs(res.x - paper.worst_case_kernel(np.array([p, 1 - p]), np.array([v1, v2]), beta)[0]) < 1e-5


def test_cvxpy_references():
    rng = make_rng(7)
    p, v = rng.dirichlet(np.ones(5)), rng.uniform(0, 3, 5)
    value, q = paper.cvxpy_dynamics_dual(p, v, 0.6)
    assert abs(value - paper.kl_robust_expectation(p, v, 0.6)) < 1e-8
    ref, Q = rng.dirichlet(np.ones(4)), rng.uniform(0, 3, 4)
    value, pi = paper.cvxpy_policy_dual(ref, Q, 0.4)
    assert abs(value - paper.soft_value(Q, ref, 0.4)) < 1e-8
    for rho in (0.01, 0.3, 2.0):
        assert abs(paper.cvxpy_kl_ball(p, v, rho)[0] - paper.kl_ball_expectation(p, v, rho)) < 1e-7


def test_tv_worst_case_against_linear_program():
    rng = make_rng(8)
    for _ in range(5):
        n = 6
        p, v, eps = rng.dirichlet(np.full(n, 0.7)), rng.uniform(0, 5, n), rng.uniform(0, 0.6)
        # variables q, t with |q - p| <= t, sum t <= 2 eps, q on the simplex
        c = np.r_[v, np.zeros(n)]
        A_ub = np.block([[np.eye(n), -np.eye(n)], [-np.eye(n), -np.eye(n)], [np.zeros((1, n)), np.ones((1, n))]])
        b_ub = np.r_[p, -p, 2 * eps]
        A_eq = np.r_[np.ones(n), np.zeros(n)][None]
        lp = scipy.optimize.linprog(c, A_ub=A_ub, b_ub=b_ub, A_eq=A_eq, b_eq=[1.0], bounds=[(0, None)] * (2 * n))
        assert abs(lp.fun - paper.tv_worst_expectation(p, v, eps)) < 1e-8


def test_rectangular_operator_with_one_hot_features_is_tabular():
    rng = make_rng(9)
    S, A, d = 5, 3, 4
    factors = rng.dirichlet(np.ones(S), size=d)
    assign = rng.integers(d, size=(S, A))
    features = np.eye(d)[assign]
    V = rng.uniform(0, 2, S)
    rect = paper.rectangular_continuation(features, factors, 0.7)(V, 0)
    tab = paper.tabular_continuation(factors[assign], 0.7)(V, 0)
    np.testing.assert_allclose(rect, tab, atol=1e-12)


def test_lock_is_opened_by_chance_with_probability_two_to_minus_length():
    lock = paper.combination_lock(2, 6, make_rng(10))
    np.testing.assert_allclose(lock.kernel.sum(-1), 1.0)
    pi_ref = np.full(lock.kernel.shape[:-1], 0.5)
    uniform = np.broadcast_to(pi_ref, (6,) + pi_ref.shape)
    _, v = paper.dr_backward(paper.tabular_continuation(lock.kernel, np.inf), lock.reward, 6, pi_ref, 0.1,
                             policies=uniform)
    np.testing.assert_allclose(v[0][:, 0], 2.0**-6)


def test_gaussian_closed_form_against_quadrature():
    for args in ((0.3, 0.8, 1.5, -0.4, 0.2, 0.3), (-1.0, 2.0, 0.1, 1.0, 0.0, 1.0)):
        value, mean = paper.quadrature_soft_value(*args)
        assert abs(value - paper.gaussian_soft_value(*args)) < 1e-8
        ref_mean, ref_std, k, peak, _, lam = args
        assert abs(mean - paper.gaussian_soft_policy(ref_mean, ref_std, k, peak, lam)[0]) < 1e-7
    assert paper.gaussian_soft_value(0.0, 1.0, 0.0, 3.0, 0.7, 0.5) == pytest.approx(0.7)


def test_learners_have_nonnegative_pseudo_regret():
    rng = make_rng(11)
    mdp = paper.random_mdp(2, 3, 2, 3, rng)
    regret = paper.tabular_regret(mdp, 30, np.array([0.05, 0.0]), np.array([1.0, np.inf]), 1.0, 0.1, rng)
    assert regret.shape == (2, 30) and regret.min() >= -1e-12
    lin = paper.linear_mdp(2, 5, 2, 2, 3, rng)
    regret = paper.linear_regret(lin, 30, 0.05, 1.0, 0.1, rng)
    assert regret.shape == (2, 30) and regret.min() >= -1e-12


def test_config_rejects_bad_values():
    for bad in (dict(beta=0.0), dict(temperature=-1.0), dict(num_seeds=1), dict(perturbation=1.5),
                dict(num_episodes=10), dict(horizon=2.5), dict(bonus_scale=-0.1), dict(seed=-1)):
        with pytest.raises(ValueError):
            paper.Config(**bad)


# ---------------------------------------------------------------- tiny run
def _flatten(obj, prefix=""):
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _flatten(v, f"{prefix}/{k}")
    elif isinstance(obj, (tuple, list)) and obj and not isinstance(obj[0], (int, float)):
        for i, v in enumerate(obj):
            yield from _flatten(v, f"{prefix}/{i}")
    else:
        yield prefix, obj


def test_tiny_run_is_deterministic():
    config = paper.Config(**TINY)
    a, b = paper.run(config), paper.run(config)
    for field in dataclasses.fields(a):
        left, right = dict(_flatten(getattr(a, field.name))), dict(_flatten(getattr(b, field.name)))
        assert left.keys() == right.keys()
        for key in left:
            x, y = left[key], right[key]
            if isinstance(x, np.ndarray) or isinstance(x, float):
                np.testing.assert_array_equal(x, y, err_msg=f"{field.name}{key}")
            else:
                assert x == y, f"{field.name}{key}"
    assert set(a.regret) == {"random", "lock", "linear"}
    assert a.regret["lock"]["optimistic"].shape == (2, 64)
    assert a.checkpoints == (4, 8, 16, 32, 64)


# ---------------------------------------------------------------- hardening: adversaries and ledger statistics
def test_adversaries_against_brute_force_and_each_other():
    rng = np.random.default_rng(7)
    P = rng.dirichlet(np.ones(4), size=5)  # (5, 4)
    V = rng.normal(size=(5, 4))
    nominal = np.sum(P * V, axis=-1)
    for a in paper.ADVERSARIES:
        np.testing.assert_allclose(paper.adversary_expectation(P, V, 0.0, a), nominal)
        worst = paper.adversary_expectation(P, V, 0.2, a)
        assert np.all(worst <= nominal + 1e-12)
    cont = paper.adversary_expectation(P, V, 0.2, "contamination")
    np.testing.assert_allclose(cont, 0.8 * nominal + 0.2 * V.min(axis=-1))
    # contamination lies inside the TV ball of the same radius; KL(2 eps^2) inside it by Pinsker
    tv = paper.adversary_expectation(P, V, 0.2, "tv")
    assert np.all(tv <= cont + 1e-12)
    assert np.all(tv <= paper.adversary_expectation(P, V, 0.2, "kl") + 1e-9)
    with pytest.raises(ValueError):
        paper.adversary_expectation(P, V, 0.2, "wasserstein")


def test_robustness_by_adversary_matches_the_tv_curve():
    rob = paper.robustness(4, 4, 2, 3, 1.0, 0.1, (0.0, 0.2), 0.1, (1.0, np.inf), make_rng(0, 1), checked_radius=0.2)
    tv = rob["by_adversary"]["tv"]
    np.testing.assert_allclose(tv["returns"]["doubly regularised"], rob["returns"]["doubly regularised"][-1])
    np.testing.assert_allclose(tv["sweep"], rob["sweep"][:, -1])
    gain = paper.evaluation.robust_gain(rob, "kl")
    assert gain.n == 4 and gain.unit == "MDP instances" and gain.low <= gain.point <= gain.high
    rows = paper.evaluation.beta_sweep_table(rob, (1.0, np.inf))
    assert [r["adversary"] for r in rows] == list(paper.ADVERSARIES) and all(r["beta"] == 1.0 for r in rows)
    assert all(r["holds"] in ("yes", "no", "undecided") for r in rows)


def test_regret_slope_estimate_and_tail_excess():
    ev = paper.evaluation
    rng = np.random.default_rng(0)
    K = 64
    per_episode = (1.0 / np.sqrt(np.arange(1, K + 1)))[None, :] * rng.uniform(0.5, 1.5, (20, 1))
    est = ev.regret_slope_estimate((4, 8, 16, 32, 64), per_episode)
    assert 0.4 < est.point < 0.6 and est.low <= est.point <= est.high and est.n == 20
    constant = np.ones((5, K))  # linear regret: the slope is exactly 1 (what a control must show)
    assert ev.mean_curve_slope((4, 8, 16, 32, 64), constant) == pytest.approx(1.0)
    worse, better = ev.tail_excess({"a": constant * 2, "b": constant}, "a", "b", 48)
    np.testing.assert_allclose(worse - better, 1.0)


def test_uniform_regret_is_constant_and_positive_and_slope_by_window():
    rng = make_rng(11)
    mdp = paper.random_mdp(3, 4, 3, 4, rng)
    reg = paper.uniform_regret(mdp, 40, 1.0, 0.1)
    assert reg.shape == (3, 40) and np.all(reg > 0) and np.all(reg == reg[:, :1])
    # equals V* - V^{pi_ref} from an independent evaluation of the uniform policy
    pi_ref = np.full((3, 4, 3), 1.0 / 3)
    _, v = paper.dr_backward(paper.tabular_continuation(mdp.kernel, 1.0), mdp.reward, 4, pi_ref, 0.1,
                             policies=np.broadcast_to(pi_ref, (4, 3, 4, 3)))
    np.testing.assert_allclose(reg[:, 0], paper.optimal_start_value(mdp, 1.0, 0.1) - v[0][:, 0])
    ev = paper.evaluation
    assert ev.window_checkpoints(64) == (4, 8, 16, 32, 64)
    rows = ev.slope_by_window(np.ones((4, 3200)), smallest_start=50)
    assert [r["end"] for r in rows] == [3200, 1600, 800] and rows[-1]["start"] == 50
    assert all(r["estimate"].point == pytest.approx(1.0) for r in rows)
    K = 3200
    sqrt_like = (1.0 / np.sqrt(np.arange(1, K + 1)))[None, :] * np.linspace(0.5, 1.5, 6)[:, None]
    assert all(abs(r["estimate"].point - 0.5) < 0.04 for r in ev.slope_by_window(sqrt_like))  # 2 sqrt(K) + zeta(1/2)


def test_loss_share_is_a_ratio_of_means_with_a_jackknife_interval():
    gain, loss = np.array([0.1, 0.2, 0.3, 0.2]), np.array([1.0, 2.0, 2.0, 3.0])
    base = np.zeros(4)
    rob = {"by_adversary": {"tv": {"returns": {"doubly regularised": base + gain, "non-robust soft": base},
                                   "loss": loss}}}
    est = paper.evaluation.loss_share(rob, "tv")
    assert est.point == pytest.approx(gain.mean() / loss.mean()) and est.n == 4
    assert est.low < est.point < est.high and est.unit == "MDP instances"
    same = paper.evaluation.loss_share(rob, "tv", policy="non-robust soft")
    assert same.point == 0.0 and same.low == same.high == 0.0


def test_policy_planned_against_an_adversary_is_the_ceiling():
    rob = paper.robustness(6, 4, 3, 4, 1.0, 0.1, (0.0, 0.3), 0.1, (1.0, np.inf), make_rng(0, 2), checked_radius=0.3)
    np.testing.assert_allclose(rob["nominal"]["non-robust soft"], rob["returns"]["non-robust soft"][0])
    for a in paper.ADVERSARIES:
        block = rob["by_adversary"][a]
        assert np.all(block["loss"] >= -1e-12)
        ceiling = block["returns"]["adversary-robust"]
        for name, values in block["returns"].items():  # the rectangular robust policy is worst-case optimal
            assert np.all(ceiling >= values - 1e-10), (a, name)
        for values in block["sweep"]:
            assert np.all(ceiling >= values - 1e-10)
        share = paper.evaluation.loss_share(rob, a, policy="adversary-robust")
        assert 0.0 <= share.point <= 1.0
