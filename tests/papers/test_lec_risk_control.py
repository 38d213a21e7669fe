"""Tests for compendium.papers.lec_risk_control: shapes, properties, references, tiny run."""

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from compendium.papers import lec_risk_control as paper

TINY = dict(num_splits=100, cal_sizes=(30, 60), alphas=(0.1,), separations=(2.0,), grid_size=5, routing_grid_size=4)


def _random_set(rng, n, ties=False):
    err = (rng.random(n) < rng.uniform(0.05, 0.5)).astype(int)
    u = rng.integers(0, 5, n).astype(float) if ties else rng.standard_normal(n) + 1.5 * err
    return u, err


# ---------------------------------------------------------------- shapes
def test_shapes():
    rng = np.random.default_rng(0)
    source = paper.GaussianSource(2.0, 0.3)
    u, e = source.sample(rng, 7, 40)
    assert u.shape == e.shape == (7, 40)
    cal = paper.sort_calibration(u, e)
    assert cal.scores.shape == cal.cum_errors.shape == cal.group_end.shape == (7, 40)
    grid = source.quantile(np.arange(1, 6) / 5)
    for lam in (paper.lec_thresholds(cal, 0.1), paper.plugin_thresholds(cal, 0.1), paper.cp_ucb_thresholds(cal, 0.1, 0.1),
                paper.cp_bonferroni_thresholds(cal, 0.1, 0.1, grid), paper.ltt_fixed_sequence_thresholds(cal, 0.1, 0.1, grid)):
        assert lam.shape == (7,)
    k, err = paper.counts_on_grid(cal, grid)
    assert k.shape == err.shape == (7, 5)
    assert paper.max_allowed_errors(30, 0.1, 0.1).shape == (31,)
    lam1, lam2 = paper.route_thresholds(u, e, u[::-1], e[::-1], 0.1, 4)
    assert lam1.shape == lam2.shape == (7,)


# ---------------------------------------------------------------- properties of the rule
@pytest.mark.parametrize("alpha", [0.05, 0.1, 0.2, 0.3])
def test_all_correct_and_all_error(alpha):
    need = int(np.ceil((1 - alpha) / alpha - 1e-9))
    rng = np.random.default_rng(1)
    for n in (need - 1, need, 3 * need):
        u = rng.standard_normal(n)
        lam = paper.lec_threshold(u, np.zeros(n, int), alpha)
        assert lam == (u.max() if n >= need else paper.NO_THRESHOLD)
        assert paper.lec_threshold(u, np.ones(n, int), alpha) == paper.NO_THRESHOLD


def test_condition_holds_at_threshold_and_fails_above():
    rng = np.random.default_rng(2)
    for i in range(200):
        u, e = _random_set(rng, int(rng.integers(5, 60)), ties=bool(i % 2))
        alpha = 0.15
        lam = paper.lec_threshold(u, e, alpha)
        lhs = lambda t: np.sum((u <= t) * (e - alpha)) + 1 - alpha  # noqa: E731
        if np.isfinite(lam):
            assert lhs(lam) <= 1e-9
        assert all(lhs(t) > 1e-9 for t in np.unique(u) if t > lam)


def test_ties_are_taken_as_whole_groups():
    u = np.array([0.0] * 9 + [1.0] * 4)
    e = np.array([0] * 9 + [0, 1, 1, 1])
    # a rule that stopped inside the tie group at 1.0 (after its correct point) would accept 10 points
    assert paper.lec_threshold(u, e, 0.2) == 0.0
    assert paper.lec_threshold(u[::-1], e[::-1], 0.2) == 0.0  # input order does not matter


def test_monotone_invariance():
    rng = np.random.default_rng(3)
    for _ in range(100):
        u, e = _random_set(rng, 50)
        chosen = u <= paper.lec_threshold(u, e, 0.1)
        for g in (np.exp, np.arctan, lambda x: 5 * x - 2):
            assert np.array_equal(chosen, g(u) <= paper.lec_threshold(g(u), e, 0.1))


def test_lec_is_between_plugin_and_nothing():
    rng = np.random.default_rng(4)
    u, e = paper.GaussianSource(1.5, 0.35).sample(rng, 500, 80)
    cal = paper.sort_calibration(u, e)
    for alpha in (0.05, 0.2):
        assert np.all(paper.lec_thresholds(cal, alpha) <= paper.plugin_thresholds(cal, alpha))
        # a larger slack is a stricter condition
        assert np.all(paper.lec_thresholds(cal, alpha, slack=1.0) <= paper.lec_thresholds(cal, alpha))


# ---------------------------------------------------------------- references
def test_vectorised_rule_matches_brute_force():
    rng = np.random.default_rng(5)
    for i in range(150):
        u, e = _random_set(rng, int(rng.integers(1, 70)), ties=bool(i % 3 == 0))
        for alpha in (0.05, 0.1, 0.25):
            assert paper.lec_threshold(u, e, alpha) == paper.lec_threshold_reference(u, e, alpha)


def test_clopper_pearson_duality():
    # U_{1-delta}(e, k) = Beta^{-1}(1 - delta; e + 1, k - e) <= alpha  <=>  e <= e_max[k]
    for alpha, delta in ((0.05, 0.1), (0.2, 0.01)):
        e_max = paper.max_allowed_errors(120, alpha, delta)
        for k in range(0, 121, 7):
            for e in range(0, k + 1):
                ucb = stats.beta.ppf(1 - delta, e + 1, k - e) if e < k else 1.0
                assert (ucb <= alpha) == (e <= e_max[k]), (alpha, delta, k, e)
    assert paper.max_allowed_errors(5, 0.05, 0.1)[5] == -1  # 5 clean points are too few


def test_counts_and_grid_rules_match_loops():
    rng = np.random.default_rng(6)
    u, e = paper.GaussianSource(2.0, 0.3).sample(rng, 60, 150)
    cal = paper.sort_calibration(u, e)
    grid = np.quantile(u, np.linspace(0.05, 1, 12))
    k, err = paper.counts_on_grid(cal, grid)
    np.testing.assert_array_equal(k, (u[:, :, None] <= grid).sum(1))
    np.testing.assert_array_equal(err, ((u[:, :, None] <= grid) & (e[:, :, None] == 1)).sum(1))
    alpha, delta = 0.15, 0.1
    p = stats.binom.cdf(err, k, alpha)
    bonf, ltt = paper.cp_bonferroni_thresholds(cal, alpha, delta, grid), paper.ltt_fixed_sequence_thresholds(cal, alpha, delta, grid)
    for s in range(u.shape[0]):
        rejected = [j for j in range(grid.size) if p[s, j] <= delta / grid.size]
        assert bonf[s] == (grid[max(rejected)] if rejected else -np.inf)
        j = 0
        while j < grid.size and p[s, j] <= delta:
            j += 1
        assert ltt[s] == (grid[j - 1] if j else -np.inf)


@pytest.mark.parametrize("tie_break", ["smallest", "largest"])
def test_routing_matches_brute_force(tie_break):
    rng = np.random.default_rng(7)
    n, grid_size, alpha = 25, 4, 0.2
    for _ in range(25):
        e1 = (rng.random(n) < 0.35).astype(int)
        e2 = (rng.random(n) < 0.2).astype(int)
        u1 = rng.integers(0, 6, n).astype(float) + e1
        u2 = np.round(rng.standard_normal(n) + e2, 1)
        lam1, lam2 = paper.route_thresholds(u1, e1, u2, e2, alpha, grid_size, tie_break=tie_break)
        levels = np.ceil(np.arange(1, grid_size + 1) * n / grid_size).astype(int) - 1
        cands = [-np.inf, paper.lec_threshold(u1, e1, alpha)] + list(np.sort(u1)[levels])
        assert (lam1[0], lam2[0]) == paper.route_reference(u1, e1, u2, e2, alpha, cands, tie_break=tie_break)


def test_routing_dominates_single_models_in_sample():
    rng = np.random.default_rng(8)
    routing = paper.PairedPoolSource("toy", paper.PoolSource("a", rng.random(300), (rng.random(300) < 0.3).astype(int)),
                                     paper.PoolSource("b", rng.random(300), (rng.random(300) < 0.15).astype(int)))
    u1, e1, u2, e2 = routing.sample(rng, 40, 80)
    lam1, lam2 = paper.route_thresholds(u1, e1, u2, e2, 0.15, 5)
    s1 = u1 <= lam1[:, None]
    s = s1 | (~s1 & (u2 <= lam2[:, None]))
    err = np.where(s1, e1, np.where(s, e2, 0))
    some = s.any(axis=1)  # the rule may accept nothing; otherwise the system condition holds
    assert some.any() and np.all(err.sum(1)[some] + 1 <= 0.15 * (s.sum(1)[some] + 1) + 1e-9)
    single1 = (u1 <= paper.lec_thresholds(paper.sort_calibration(u1, e1), 0.15)[:, None]).sum(1)
    single2 = (u2 <= paper.lec_thresholds(paper.sort_calibration(u2, e2), 0.15)[:, None]).sum(1)
    assert np.all(s.sum(1) >= np.maximum(single1, single2))


def test_sources_population_probabilities():
    source = paper.GaussianSource(1.5, 0.35)
    u, e = source.sample(np.random.default_rng(9), 1, 400_000)
    for lam in (-1.0, 0.3, 2.0):
        assert abs(np.mean(u <= lam) - source.accept_probability(lam)) < 4e-3
        assert abs(np.mean((u <= lam) & (e == 1)) - source.accepted_error_probability(lam)) < 4e-3
    q = np.array([0.1, 0.5, 0.9])
    np.testing.assert_allclose(source.accept_probability(source.quantile(q)), q, atol=1e-9)
    pool = paper.PoolSource("p", np.array([0.3, 0.1, 0.1, 0.7]), np.array([1, 0, 1, 0]))
    assert pool.accept_probability(0.1) == 0.5 and pool.accepted_error_probability(0.1) == 0.25
    assert pool.accept_probability(-np.inf) == 0 and pool.accepted_error_probability(np.inf) == 0.5
    np.testing.assert_array_equal(pool.quantile([0.25, 0.5, 0.75, 1.0]), [0.1, 0.1, 0.3, 0.7])
    assert paper.oracle_retention(pool, 0.4) == 0.0  # every threshold accepts errors at a rate >= 1/2
    assert paper.oracle_retention(pool, 0.5) == 1.0  # all four points: 2 errors in 4
    # brute force of the oracle: largest acceptance with conditional risk <= alpha
    best = max((np.mean(pool.scores <= t) for t in pool.scores
                if np.sum((pool.scores <= t) * pool.errors) <= 0.5 * np.sum(pool.scores <= t)), default=0.0)
    assert paper.oracle_retention(pool, 0.5) == best


def test_pooled_risk_and_sign_test():
    rng = np.random.default_rng(10)
    b = rng.uniform(0.1, 0.9, 3000)
    a = b * rng.uniform(0.05, 0.15, 3000)
    ratio, se = paper.pooled_risk(a, b)
    assert ratio == pytest.approx(a.sum() / b.sum())
    boot = [a[i].sum() / b[i].sum() for i in rng.integers(0, a.size, (400, a.size))]
    assert se == pytest.approx(np.std(boot), rel=0.15)  # delta method vs split-level bootstrap
    assert paper.pooled_risk(np.zeros(5), np.zeros(5)) == (0.0, 0.0)
    assert paper.sign_test(np.ones(10), np.zeros(10)) == (10, 0, 0, pytest.approx(2.0**-10))
    assert paper.sign_test([1, 1, 0], [1, 1, 0])[3] == 1.0  # no untied pair


# ---------------------------------------------------------------- bad input and config
@pytest.mark.parametrize(
    "bad",
    [dict(num_splits=50), dict(num_splits=2.5), dict(cal_sizes=()), dict(cal_sizes=(5,)), dict(cal_sizes=(50, 50)),
     dict(alphas=(0.0,)), dict(alphas=(0.5,)), dict(alphas=(True,)), dict(separations=(-1.0,)),
     dict(base_error_rate=1.0), dict(delta=0.0), dict(grid_size=1), dict(routing_grid_size=500), dict(seed=-1)],
)
def test_bad_config_raises(bad):
    with pytest.raises(ValueError):
        paper.Config(**bad)


def test_bad_inputs_raise():
    with pytest.raises(ValueError):
        paper.lec_threshold([0.1, 0.2], [0, 2], 0.1)
    with pytest.raises(ValueError):
        paper.lec_threshold([0.1, np.nan], [0, 1], 0.1)
    with pytest.raises(ValueError):
        paper.lec_threshold([0.1, 0.2], [0, 1], 1.5)
    with pytest.raises(ValueError):
        paper.lec_threshold([[0.1, 0.2]], [[0, 1]], 0.1)
    cal = paper.sort_calibration([0.1, 0.2], [0, 1])
    with pytest.raises(ValueError):
        paper.cp_bonferroni_thresholds(cal, 0.1, 0.1, [0.3, 0.2])
    with pytest.raises(ValueError):
        paper.route_thresholds([0.1], [0], [0.1, 0.2], [0, 1], 0.1, 3)
    with pytest.raises(ValueError):
        paper.route_thresholds([0.1], [0], [0.2], [1], 0.1, 3, tie_break="middle")
    with pytest.raises(ValueError):
        paper.dataset_source("iris", 0)


def test_config_converts_lists_to_tuples():
    config = paper.Config(cal_sizes=[50, 100], alphas=[0.1], separations=[2.0])
    assert config.cal_sizes == (50, 100) and config.alphas == (0.1,)
    hash(config)


# ---------------------------------------------------------------- tiny run
def test_tiny_run_is_deterministic():
    config = paper.Config(**TINY)
    first, second = paper.run(config), paper.run(config)
    for name in ("sources", "cells", "power", "oracle", "routing"):
        pd.testing.assert_frame_equal(getattr(first, name), getattr(second, name))
    assert len(first.oracle) == 4 * 2 and first.oracle.retention.between(0, 1).all()
    assert (first.power.gain_ltt_se >= 0).all() and (first.routing.gain_se >= 0).all()
    # LEC's threshold never exceeds the symmetric one on the same draw, so it never retains more
    assert (first.power.max_gain_star <= 1e-12).all() and (first.power.gain_star <= 1e-12).all()
    assert first.power.retention_star.between(0, 1).all() and (first.power.ltt_star_se >= 0).all()
    assert first.unit_checks == second.unit_checks and all(first.unit_checks.values())
    assert len(first.cells) == 4 * 2 * 1 * len(paper.METHODS)  # sources x n x alpha x methods
    assert set(first.cells.source) == {"gauss-2", "digits", "breast_cancer", "wine"}
    assert first.power.shape[0] == 4 * 2 and first.routing.shape[0] == 2
    assert first.routing_thresholds[(30, 0.1)][0].shape == (100,)
    assert first.cells.retention.between(0, 1).all() and first.cells.pac_fraction.between(0, 1).all()


# ---------------------------------------------------------------- the swap identity and the estimates
def test_swap_identity_matches_leave_one_out_sum():
    rng = np.random.default_rng(3)
    for _ in range(150):
        n = int(rng.integers(2, 35))
        alpha = float(rng.choice([0.05, 0.1, 0.2, 0.3]))
        u, e = _random_set(rng, n)
        assert paper.swap_sum_direct(u, e, alpha) == pytest.approx(paper.swap_sum_identity(u, e, alpha), abs=1e-9)
    with pytest.raises(ValueError):
        paper.swap_sum_identity([0.0, 0.0, 1.0], [0, 1, 0], 0.1)


def test_walk_positions_known_case():
    # alpha = 0.5, errors sorted 0 1 0 0 1 1: W = 0, -.5, 0, -.5, -1, -.5, 0
    walk, k0, k1 = paper.walk_positions([0, 1, 0, 0, 1, 1], 0.5)
    np.testing.assert_allclose(walk, [0, -0.5, 0, -0.5, -1, -0.5, 0])
    assert (k0, k1) == (6, 4)


def test_oracle_threshold_is_valid_in_sample():
    rng = np.random.default_rng(0)
    u = rng.standard_normal((50, 40))
    e = (rng.random((50, 40)) < 0.3).astype(int)
    lam = paper.oracle_thresholds(u, e, 0.1)
    accepted = u <= lam[:, None]
    assert np.all((accepted * (e - 0.1)).sum(1) <= 1e-9)  # the symmetric rule's own sum is <= 0


def test_worst_cell_decides_every_cell_criteria():
    labels = ["a", "b", "c"]
    est, cell = paper.worst_cell([-0.01, 0.005, -0.002], [0.001, 0.001, 0.001], labels, bad_side="high", num_draws=100, what="x")
    assert cell == "b" and est.low > 0 and est.n == 100 and est.unit == "calibration draws"  # a clear failure decides
    est, cell = paper.worst_cell([-0.01, -0.0005, -0.002], [0.001, 0.001, 0.001], labels, bad_side="high", num_draws=100, what="x")
    assert cell == "b" and est.low < 0 < est.high  # no clear failure: the highest upper end decides (inconclusive)
    est, cell = paper.worst_cell([0.01, 0.02, -0.005], [0.001, 0.001, 0.001], labels, bad_side="low", num_draws=100, what="x")
    assert cell == "c" and est.high < 0
    frame = pd.DataFrame(dict(source=["s", "s", "t"], n=[10, 20, 10], alpha=[0.1, 0.1, 0.1],
                              pooled_risk=[0.15, 0.2, 0.11], risk_se=[0.01, 0.01, 0.01]))
    est, cell = paper.flagged_on_every_source(frame, 100)
    assert cell.startswith("t,") and est.point == pytest.approx(0.01)  # t is the least clearly flagged source


def test_cells_with_few_accepting_draws_are_not_scored():
    ratio, se, excess = paper.experiment.scored(0.3, 0.0, 1, 0.1)  # one accepting draw: SE 0 is meaningless
    assert ratio == 0.3 and np.isnan(se) and np.isnan(excess)
    assert paper.experiment.scored(0.12, 0.01, 50, 0.1) == pytest.approx((0.12, 0.01, 0.12 - 0.1 - 0.03))


# ---------------------------------------------------------------- floor (precondition)
def test_accuracy_over_baseline_shifts_the_exact_interval():
    errors = np.array([0] * 70 + [1] * 30)
    source = paper.PoolSource("toy", np.linspace(0, 1, 100), errors)
    est = paper.accuracy_over_baseline(source, 0.25)
    ref = stats.binomtest(70, 100).proportion_ci(0.95, method="exact")
    assert est.point == pytest.approx(0.45)
    assert est.low == pytest.approx(ref.low - 0.25) and est.high == pytest.approx(ref.high - 0.25)
    assert est.n == 100 and est.unit == "inputs"
    # a model no better than the baseline sits at 0, below any positive margin
    assert paper.accuracy_over_baseline(source, 0.7).point == pytest.approx(0.0)


def test_majority_share_digits():
    share = paper.majority_share("digits")
    assert 0.1 < share < 0.11  # ten nearly balanced classes
    with pytest.raises(ValueError):
        paper.majority_share("mnist")


def test_lec_threshold_never_exceeds_the_symmetric_threshold():
    """The test point adds at most 1 - alpha to the sum, which LEC's slack already pays: lambda_hat <= lambda*."""
    rng = np.random.default_rng(7)
    for ties in (False, True):
        for alpha in (0.05, 0.1, 0.3):
            u = rng.integers(0, 6, (200, 31)).astype(float) if ties else rng.standard_normal((200, 31))
            e = (rng.random((200, 31)) < 0.25).astype(int)
            lam_hat = paper.lec_thresholds(paper.sort_calibration(u[:, :-1], e[:, :-1]), alpha)
            lam_star = paper.lec_thresholds(paper.sort_calibration(u, e), alpha, slack=0.0)
            assert np.all(lam_hat <= lam_star)
