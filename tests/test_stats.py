"""Tests of compendium.stats: agreement with scipy, known values, coverage, input checks.

Coverage tests simulate datasets from known distributions and check that the empirical coverage
of a nominal 95 % interval lies within 3 binomial standard errors of 0.95. Sample sizes are chosen
where the methods' own small-sample error is well inside that band (measured once on 2000-4000
datasets, quoted beside each test), so a failure means a broken interval, not bad luck.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import scipy.stats

from compendium import stats
from compendium.stats import Estimate

NOMINAL = 0.95


def assert_covers_nominal(hits: int, datasets: int):
    """Empirical coverage within 3 Monte-Carlo (binomial) standard errors of the nominal level."""
    coverage = hits / datasets
    tolerance = 3 * math.sqrt(NOMINAL * (1 - NOMINAL) / datasets)
    assert abs(coverage - NOMINAL) <= tolerance, f"coverage {coverage:.3f}, allowed {NOMINAL} +- {tolerance:.3f}"


def coverage(interval, datasets, truth) -> int:
    hits = 0
    for data in datasets:
        e = interval(data)
        hits += e.low <= truth <= e.high
    return hits


# --------------------------------------------------------------------------------------------------
# Against scipy
# --------------------------------------------------------------------------------------------------


def test_mean_interval_matches_scipy_t_interval():
    x = np.random.default_rng(0).exponential(size=17)
    e = stats.mean_interval(x, level=0.9, unit="trained models")
    low, high = scipy.stats.t.interval(0.9, x.size - 1, loc=x.mean(), scale=scipy.stats.sem(x))
    assert (e.point, e.low, e.high) == pytest.approx((x.mean(), low, high), rel=1e-12)
    assert (e.unit, e.n, e.level) == ("trained models", 17, 0.9)


def test_paired_difference_t_is_the_t_interval_of_differences():
    rng = np.random.default_rng(1)
    a, b = rng.normal(size=12), rng.normal(size=12)
    e = stats.paired_difference(a, b, unit="tasks")
    ref = scipy.stats.ttest_rel(a, b).confidence_interval(0.95)
    assert (e.low, e.high) == pytest.approx((ref.low, ref.high), rel=1e-12)
    assert e.n == 12 and e.unit == "tasks"


@pytest.mark.parametrize("kind, scipy_method", [("percentile", "percentile"), ("bca", "BCa")])
def test_bootstrap_interval_matches_scipy_bootstrap(kind, scipy_method):
    x = np.random.default_rng(2).exponential(size=25)
    e = stats.bootstrap_interval(x, np.mean, level=0.9, unit="problems", rng=np.random.default_rng(3),
                                 resamples=999, kind=kind)
    ref = scipy.stats.bootstrap((x,), np.mean, confidence_level=0.9, n_resamples=999, method=scipy_method,
                                rng=np.random.default_rng(3), vectorized=True).confidence_interval
    assert (e.low, e.high) == pytest.approx((ref.low, ref.high), rel=1e-12)
    assert e.point == pytest.approx(x.mean()) and e.n == 25


def test_bootstrap_interval_non_vectorised_statistic_gives_same_result():
    x = np.random.default_rng(4).normal(size=15)
    fast = stats.bootstrap_interval(x, np.median, unit="u", rng=5, resamples=300)
    slow = stats.bootstrap_interval(x, lambda v: float(np.median(v)), unit="u", rng=5, resamples=300)
    assert (fast.low, fast.high) == pytest.approx((slow.low, slow.high))


def test_welch_matches_scipy_ttest_ind():
    rng = np.random.default_rng(6)
    a, b = rng.normal(1.0, 1.0, size=9), rng.normal(0.0, 3.0, size=14)
    ref = scipy.stats.ttest_ind(a, b, equal_var=False)
    e = stats.welch(a, b, level=0.95, unit="seeds")
    ci = ref.confidence_interval(0.95)
    assert (e.point, e.low, e.high) == pytest.approx((a.mean() - b.mean(), ci.low, ci.high), rel=1e-12)
    assert e.n == 23
    for alternative in ("two-sided", "greater", "less"):
        assert stats.welch_p(a, b, alternative=alternative) == pytest.approx(
            scipy.stats.ttest_ind(a, b, equal_var=False, alternative=alternative).pvalue, rel=1e-12)


@pytest.mark.parametrize("successes, trials", [(0, 10), (3, 17), (10, 10), (50, 120)])
def test_clopper_pearson_matches_binomtest(successes, trials):
    e = stats.clopper_pearson(successes, trials, level=0.9, unit="problems")
    ref = scipy.stats.binomtest(successes, trials).proportion_ci(confidence_level=0.9, method="exact")
    assert (e.low, e.high) == pytest.approx((ref.low, ref.high), rel=1e-9, abs=1e-12)
    assert e.point == successes / trials and e.n == trials


def test_wilcoxon_matches_scipy_and_drops_zeros():
    d = np.array([0.3, -0.1, 0.8, 0.0, 1.2, 0.5, -0.4, 0.9, 0.0, 0.7])
    for alternative in ("two-sided", "greater", "less"):
        expected = scipy.stats.wilcoxon(d[d != 0], alternative=alternative).pvalue
        assert stats.wilcoxon_signed_rank(d, alternative=alternative) == pytest.approx(expected)
    assert stats.wilcoxon_signed_rank(np.zeros(5)) == 1.0


def _holm_brute_force(p):
    """Holm = closed testing with Bonferroni local tests: max over every subset containing i."""
    m = len(p)
    adjusted = np.zeros(m)
    for i in range(m):
        for size in range(1, m + 1):
            for subset in itertools.combinations(range(m), size):
                if i in subset:
                    adjusted[i] = max(adjusted[i], min(1.0, size * min(p[j] for j in subset)))
    return adjusted


def test_holm_matches_closed_testing_brute_force():
    rng = np.random.default_rng(7)
    for m in (1, 2, 5, 7):
        p = rng.uniform(0, 0.3, size=m) ** 2
        adjusted = stats.holm(p)
        np.testing.assert_allclose(adjusted, _holm_brute_force(p), rtol=1e-12)
        assert np.all(adjusted >= p) and np.all(adjusted <= 1)
        order = np.argsort(p)
        assert np.all(np.diff(adjusted[order]) >= 0)
    np.testing.assert_allclose(stats.holm([0.01, 0.04, 0.03, 0.005]), [0.03, 0.06, 0.06, 0.02])
    assert stats.holm([0.6, 0.5])[0] == 1.0  # capped


def test_tost_matches_two_one_sided_scipy_tests_paired():
    rng = np.random.default_rng(8)
    a = rng.normal(size=30)
    b = a + rng.normal(0.05, 0.2, size=30)
    margin = 0.2
    result = stats.tost(a, b, margin=margin, unit="tasks", paired=True)
    d = a - b
    p_lower = scipy.stats.ttest_1samp(d, -margin, alternative="greater").pvalue
    p_upper = scipy.stats.ttest_1samp(d, margin, alternative="less").pvalue
    assert (result.p_lower, result.p_upper) == pytest.approx((p_lower, p_upper), rel=1e-10)
    assert result.p_value == pytest.approx(max(p_lower, p_upper))
    low, high = scipy.stats.t.interval(0.90, d.size - 1, loc=d.mean(), scale=scipy.stats.sem(d))
    assert (result.estimate.low, result.estimate.high) == pytest.approx((low, high))
    assert result.estimate.level == pytest.approx(0.90)
    assert result.equivalent == (p_lower < 0.05 and p_upper < 0.05)
    assert result.equivalent == (-margin < result.estimate.low and result.estimate.high < margin)
    same = stats.tost(d, margin=margin, unit="tasks")  # differences given directly
    assert same.p_value == pytest.approx(result.p_value)


def test_tost_matches_two_one_sided_welch_tests_unpaired():
    rng = np.random.default_rng(9)
    a, b = rng.normal(0.0, 1.0, size=40), rng.normal(0.1, 2.0, size=25)
    margin = 1.5
    result = stats.tost(a, b, margin=margin, unit="seeds")
    p_lower = scipy.stats.ttest_ind(a + margin, b, equal_var=False, alternative="greater").pvalue
    p_upper = scipy.stats.ttest_ind(a - margin, b, equal_var=False, alternative="less").pvalue
    assert (result.p_lower, result.p_upper) == pytest.approx((p_lower, p_upper), rel=1e-10)
    assert result.equivalent and result.estimate.n == 65
    assert -margin < result.estimate.low < result.estimate.high < margin


def test_tost_rejects_equivalence_for_a_real_difference():
    d = np.random.default_rng(10).normal(1.0, 0.5, size=20)
    result = stats.tost(d, margin=0.2, unit="tasks")
    assert not result.equivalent and result.p_value > 0.5


# --------------------------------------------------------------------------------------------------
# Known values
# --------------------------------------------------------------------------------------------------


def test_sign_test_known_values():
    d = np.array([1, 2, 3, 4, 5, 6, 7, 8, -1, -2, 0, 0.0])  # 8 positive, 2 negative, 2 ties dropped
    assert stats.sign_test(d) == pytest.approx(56 / 1024)  # P(Bin(10, 1/2) >= 8)
    assert stats.sign_test(d, alternative="two-sided") == pytest.approx(112 / 1024)
    assert stats.sign_test(d, alternative="less") == pytest.approx(1013 / 1024)  # P(Bin(10, 1/2) <= 8)
    assert stats.sign_test(np.ones(5)) == pytest.approx(1 / 32)
    assert stats.sign_test(np.zeros(4)) == 1.0


def test_loglog_slope_recovers_known_exponent():
    rng = np.random.default_rng(11)
    x = np.geomspace(10, 10_000, 12)
    y = 3.0 * x**-0.5 * np.exp(rng.normal(0, 0.02, size=x.size))
    e = stats.loglog_slope(x, y)
    assert e.low < -0.5 < e.high and e.high - e.low < 0.05
    assert e.n == 12 and e.unit == "points"
    fit = scipy.stats.linregress(np.log(x), np.log(y))
    assert e.point == pytest.approx(fit.slope)
    exact = stats.loglog_slope(x, 2 * x**1.5)
    assert exact.point == pytest.approx(1.5) and exact.high - exact.low < 1e-9


def test_loglog_slope_by_replicate_is_mean_interval_of_slopes():
    rng = np.random.default_rng(12)
    x = np.array([1.0, 2, 4, 8, 16])
    exponents = rng.normal(0.7, 0.05, size=(8, 1))
    Y = x**exponents * np.exp(rng.normal(0, 0.01, size=(8, 5)))
    e = stats.loglog_slope_by_replicate(x, Y, unit="seeds")
    slopes = [scipy.stats.linregress(np.log(x), np.log(row)).slope for row in Y]
    ref = stats.mean_interval(slopes, unit="seeds")
    assert (e.point, e.low, e.high) == pytest.approx((ref.point, ref.low, ref.high))
    assert e.n == 8 and e.unit == "seeds" and e.low < 0.7 < e.high


def test_jackknife_se_of_mean_is_the_standard_error():
    x = np.random.default_rng(13).normal(size=23)
    assert stats.jackknife_se(x) == pytest.approx(x.std(ddof=1) / math.sqrt(x.size))
    rows = np.random.default_rng(14).normal(size=(10, 4))  # statistic over rows (one unit = one row)
    se = stats.jackknife_se(rows, lambda r: r.mean(axis=0).sum())
    assert se == pytest.approx(rows.sum(axis=1).std(ddof=1) / math.sqrt(10))


def test_flip_probability_matches_exact_binomial():
    # pool of 0/1 outcomes with mean 0.6: the mean of n draws with replacement is Bin(n, 0.6) / n;
    # it flips across 0.5 when at most n/2 successes.
    pool = np.array([1] * 60 + [0] * 40, dtype=float)
    n, resamples = 25, 20_000
    exact = scipy.stats.binom.cdf(12, n, 0.6)
    got = stats.flip_probability(pool, 0.5, n, rng=np.random.default_rng(15), resamples=resamples)
    assert abs(got - exact) <= 4 * math.sqrt(exact * (1 - exact) / resamples)
    # more units, fewer flips; without replacement the whole pool never flips
    assert stats.flip_probability(pool, 0.5, 100, rng=16, resamples=5000) < got
    assert stats.flip_probability(pool, 0.5, 100, rng=16, resamples=200, replace=False) == 0.0


def test_flip_probability_agrees_with_normal_approximation():
    pool = np.random.default_rng(17).normal(0.2, 1.0, size=5000)
    margin, sigma1, n = pool.mean(), pool.std(ddof=1), 30
    approx = scipy.stats.norm.cdf(-margin * math.sqrt(n) / sigma1)
    got = stats.flip_probability(pool, 0.0, n, rng=18, resamples=20_000)
    assert got == pytest.approx(approx, abs=0.015)


def test_resampling_is_reproducible_from_seed_and_generator():
    x = np.random.default_rng(19).normal(size=20)
    first = stats.bootstrap_interval(x, unit="u", rng=5, resamples=200)
    assert first == stats.bootstrap_interval(x, unit="u", rng=np.random.default_rng(5), resamples=200)
    c = np.random.default_rng(20).normal(size=(6, 4))
    assert stats.cluster_bootstrap(c, unit="m", rng=3, resamples=200) == \
        stats.cluster_bootstrap(c, unit="m", rng=3, resamples=200)


# --------------------------------------------------------------------------------------------------
# Cluster bootstrap: shapes and layouts
# --------------------------------------------------------------------------------------------------


def test_cluster_bootstrap_labels_and_matrix_agree_and_count_clusters():
    block = np.random.default_rng(21).normal(size=(5, 40))  # 5 trained models x 40 sequences
    labels = np.repeat(["m0", "m1", "m2", "m3", "m4"], 40)
    from_matrix = stats.cluster_bootstrap(block, unit="trained models", rng=1, resamples=500)
    from_labels = stats.cluster_bootstrap(block.ravel(), labels, unit="trained models", rng=1, resamples=500)
    assert from_matrix.n == from_labels.n == 5  # 5 units, not 200
    assert from_matrix.point == pytest.approx(block.mean())
    # the balanced (vectorised) and labelled paths draw the same clusters from the same seed
    assert (from_matrix.low, from_matrix.high) == pytest.approx((from_labels.low, from_labels.high))


def test_cluster_bootstrap_unbalanced_clusters():
    rng = np.random.default_rng(22)
    sizes = [3, 8, 5, 12, 6, 9]
    values = np.concatenate([rng.normal(i, 0.1, size=s) for i, s in enumerate(sizes)])
    labels = np.repeat(np.arange(len(sizes)), sizes)
    e = stats.cluster_bootstrap(values, labels, unit="tasks", rng=2, resamples=400, resample_within=True)
    assert e.n == 6 and e.point == pytest.approx(values.mean())
    assert e.low < e.point < e.high
    assert "items within" in e.method


# --------------------------------------------------------------------------------------------------
# Coverage at the nominal level (Monte-Carlo error: 3 binomial SEs)
# --------------------------------------------------------------------------------------------------


def test_mean_interval_covers_on_normal_and_exponential():
    rng = np.random.default_rng(100)
    datasets = 1000
    # normal, n = 10: the t interval is exact
    hits = coverage(lambda x: stats.mean_interval(x, unit="u"), rng.normal(3.0, 2.0, size=(datasets, 10)), 3.0)
    assert_covers_nominal(hits, datasets)
    # exponential is skewed: the t interval needs n ~ 200 (0.946 over 4000 datasets; 0.93 at n = 50)
    hits = coverage(lambda x: stats.mean_interval(x, unit="u"), rng.exponential(2.0, size=(datasets, 200)), 2.0)
    assert_covers_nominal(hits, datasets)


def test_paired_difference_covers_with_unit_effects():
    rng = np.random.default_rng(101)
    datasets = 1000

    def pairs(n, skewed):
        unit_effect = rng.normal(0, 3.0, size=n)  # shared by both arms: pairing removes it
        noise = rng.exponential(size=n) - 1.0 if skewed else rng.normal(size=n)
        return unit_effect + 0.5 + rng.normal(size=n), unit_effect + 0.5 + noise  # true difference 0

    # t, normal differences, n = 10: exact
    hits = coverage(lambda ab: stats.paired_difference(*ab, unit="tasks"),
                    [pairs(10, skewed=False) for _ in range(datasets)], 0.0)
    assert_covers_nominal(hits, datasets)
    # bootstrap, skewed differences, n = 50: 0.939 over 4000 datasets with 500 resamples (the
    # percentile interval undercovers at n = 10, about 0.91)
    hits = coverage(lambda ab: stats.paired_difference(*ab, unit="tasks", method="bootstrap", rng=rng, resamples=500),
                    [pairs(50, skewed=True) for _ in range(datasets)], 0.0)
    assert_covers_nominal(hits, datasets)


@pytest.mark.parametrize("kind", ["percentile", "bca"])
def test_bootstrap_interval_covers_on_normal_and_exponential(kind):
    rng = np.random.default_rng(102)
    datasets = 600
    # normal, n = 50: 0.940 (percentile) and 0.941 (BCa) over 4000 datasets with 500 resamples
    hits = coverage(lambda x: stats.bootstrap_interval(x, unit="u", rng=rng, resamples=500, kind=kind),
                    rng.normal(size=(datasets, 50)), 0.0)
    assert_covers_nominal(hits, datasets)
    # exponential, n = 200: 0.942 (percentile) and 0.941 (BCa) over 4000 datasets; about 0.93 at n = 50
    hits = coverage(lambda x: stats.bootstrap_interval(x, unit="u", rng=rng, resamples=500, kind=kind),
                    rng.exponential(size=(datasets, 200)), 1.0)
    assert_covers_nominal(hits, datasets)


def _clustered(rng, clusters=40, items=5):
    """Random cluster effects: y_ij = u_i + e_ij, u ~ N(0, 1), e ~ N(0, 1); the true mean is 0."""
    return rng.normal(size=(clusters, 1)) + rng.normal(size=(clusters, items))


def test_cluster_bootstrap_covers_where_a_naive_bootstrap_does_not():
    rng = np.random.default_rng(103)
    datasets = 800
    data = [_clustered(rng) for _ in range(datasets)]
    # 40 clusters: percentile coverage over clusters is 0.937 over 4000 datasets (the small-sample
    # undercoverage of any percentile bootstrap over 40 units), inside the band
    hits = coverage(lambda x: stats.cluster_bootstrap(x, unit="clusters", rng=rng, resamples=500), data, 0.0)
    assert_covers_nominal(hits, datasets)
    # the same data treated as 200 independent items: the interval ignores the cluster variance
    # (expected coverage about 2 Phi(1.96 sqrt(0.4 / 1.2)) - 1 = 0.74, measured 0.733); the test has power
    naive = coverage(lambda x: stats.bootstrap_interval(x.ravel(), unit="items", rng=rng, resamples=500), data, 0.0)
    tolerance = 3 * math.sqrt(NOMINAL * (1 - NOMINAL) / datasets)
    assert naive / datasets < NOMINAL - tolerance
    assert naive / datasets < 0.85


def test_cluster_bootstrap_two_stage_does_not_undercover():
    rng = np.random.default_rng(104)
    datasets = 400
    data = [_clustered(rng) for _ in range(datasets)]
    hits = coverage(lambda x: stats.cluster_bootstrap(x, unit="clusters", rng=rng, resamples=500,
                                                      resample_within=True), data, 0.0)
    # resampling items too counts their noise twice: wider, at or above nominal (0.952 over 4000 datasets)
    assert hits / datasets >= NOMINAL - 3 * math.sqrt(NOMINAL * (1 - NOMINAL) / datasets)


# --------------------------------------------------------------------------------------------------
# Crossed designs
# --------------------------------------------------------------------------------------------------


def test_crossed_weights_are_independent_draws_of_rows_and_columns():
    X = np.random.default_rng(20).normal(size=(3, 7))
    wl, wp = stats.crossed_weights(3, 7, rng=0, resamples=50)
    assert wl.shape == (50, 3) and wp.shape == (50, 7)
    assert (wl.sum(1) == 3).all() and (wp.sum(1) == 7).all()
    # one replicate by explicit index draws: the mean of the cells (i*, j*) over the crossed draws
    i = np.repeat(np.arange(3), wl[4].astype(int))
    j = np.repeat(np.arange(7), wp[4].astype(int))
    assert stats.crossed_means(X, (wl, wp))[4] == pytest.approx(X[np.ix_(i, j)].mean())
    with pytest.raises(ValueError):
        stats.crossed_means(X[:, :5], (wl, wp))


def test_crossed_bootstrap_mapping_and_sequence_agree_and_replicates_match_a_loop():
    rng = np.random.default_rng(7)
    a, b = rng.normal(1.0, 1.0, (4, 30)), rng.normal(0.0, 1.0, (4, 30))
    w = stats.crossed_weights(4, 30, rng=3, resamples=300)
    named = stats.crossed_bootstrap({"a": a, "b": b}, lambda m: m["a"] - m["b"], unit="models", weights=w)
    positional = stats.crossed_bootstrap((a, b), lambda x, y: x - y, unit="models", weights=w)
    assert named == positional
    assert named.point == pytest.approx(a.mean() - b.mean()) and named.n == 4 and named.unit == "models"
    loop = [float(np.average(a - b, weights=np.outer(w[0][r], w[1][r]))) for r in range(300)]
    assert (named.low, named.high) == pytest.approx(tuple(np.quantile(loop, [0.025, 0.975])))
    seeded = stats.crossed_bootstrap({"a": a}, lambda m: m["a"], unit="models", rng=5, resamples=300)
    again = stats.crossed_bootstrap({"a": a}, lambda m: m["a"], unit="models", rng=5, resamples=300)
    assert seeded == again and seeded.low < a.mean() < seeded.high


def test_crossed_bootstrap_covers_the_model_effect_where_an_item_bootstrap_does_not():
    """With a between-model effect, resampling items alone undercovers; the crossed bootstrap does not."""
    rng = np.random.default_rng(21)
    hit_crossed = hit_items = 0
    sims, M, P = 150, 8, 30
    for s in range(sims):
        X = rng.normal(0, 1.0, (M, 1)) + rng.normal(0, 1.0, (1, P)) + rng.normal(0, 0.5, (M, P))
        wl, wp = stats.crossed_weights(M, P, rng=s, resamples=400)
        a = stats.crossed_bootstrap((X,), lambda x: x, unit="models", weights=(wl, wp))
        b = stats.crossed_bootstrap((X,), lambda x: x, unit="models", weights=(np.ones_like(wl), wp))  # models fixed
        hit_crossed += a.low <= 0.0 <= a.high
        hit_items += b.low <= 0.0 <= b.high
    assert hit_crossed / sims >= 0.85 and hit_items / sims <= 0.75


@pytest.mark.parametrize("call", [
    lambda: stats.crossed_bootstrap({"a": np.ones((1, 5))}, lambda m: m["a"], unit="u", rng=0),   # one model
    lambda: stats.crossed_bootstrap({"a": np.ones((3, 1))}, lambda m: m["a"], unit="u", rng=0),   # one item
    lambda: stats.crossed_bootstrap({"a": np.ones((3, 4)), "b": np.ones((3, 5))}, lambda m: m["a"], unit="u", rng=0),
    lambda: stats.crossed_bootstrap({"a": np.ones(4)}, lambda m: m["a"], unit="u", rng=0),
    lambda: stats.crossed_bootstrap({"a": np.full((3, 4), np.nan)}, lambda m: m["a"], unit="u", rng=0),
    lambda: stats.crossed_bootstrap({"a": np.ones((3, 4))}, lambda m: m["a"], unit="u"),            # no rng, no weights
    lambda: stats.crossed_bootstrap({"a": np.ones((3, 4))}, lambda m: 1.0, unit="u", rng=0),       # not vectorised
    lambda: stats.crossed_bootstrap({}, lambda m: 0.0, unit="u", rng=0),
    lambda: stats.crossed_weights(0, 4, rng=0),
    lambda: stats.crossed_weights(3, 4, rng=None),
])
def test_crossed_bootstrap_rejects_bad_input(call):
    with pytest.raises(ValueError):
        call()


# --------------------------------------------------------------------------------------------------
# Invalid input
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("call", [
    lambda: stats.mean_interval([], unit="u"),
    lambda: stats.mean_interval([1.0], unit="u"),
    lambda: stats.mean_interval([1.0, np.nan, 2.0], unit="u"),
    lambda: stats.mean_interval([1.0, 2.0], level=1.0, unit="u"),
    lambda: stats.mean_interval([1.0, 2.0], level=0.0, unit="u"),
    lambda: stats.mean_interval([1.0, 2.0], unit="u", method="z"),
    lambda: stats.paired_difference([1.0, 2.0], [1.0, 2.0, 3.0], unit="u"),
    lambda: stats.paired_difference([1.0, 2.0], [1.0, 2.0], unit="u", method="bootstrap"),  # no rng
    lambda: stats.bootstrap_interval([1.0, 2.0, 3.0], unit="u", rng=None),
    lambda: stats.bootstrap_interval([1.0, 2.0, 3.0], unit="u", rng=1, kind="basic"),
    lambda: stats.bootstrap_interval([1.0, 2.0, 3.0], unit="u", rng=1, resamples=0),
    lambda: stats.cluster_bootstrap([1.0, 2.0, 3.0], unit="u", rng=1),  # 1-D without labels
    lambda: stats.cluster_bootstrap([1.0, 2.0, 3.0], [0, 1], unit="u", rng=1),
    lambda: stats.cluster_bootstrap([[1.0, 2.0]], unit="u", rng=1),  # one cluster
    lambda: stats.cluster_bootstrap([[1.0, np.nan], [1.0, 2.0]], unit="u", rng=1),
    lambda: stats.sign_test([1.0, 2.0], alternative="bigger"),
    lambda: stats.sign_test([]),
    lambda: stats.wilcoxon_signed_rank([np.nan, 1.0]),
    lambda: stats.clopper_pearson(5, 4, unit="u"),
    lambda: stats.clopper_pearson(-1, 4, unit="u"),
    lambda: stats.clopper_pearson(0, 0, unit="u"),
    lambda: stats.clopper_pearson(1.5, 4, unit="u"),
    lambda: stats.holm([0.1, 1.2]),
    lambda: stats.holm([]),
    lambda: stats.welch([1.0], [1.0, 2.0], unit="u"),
    lambda: stats.welch_p([1.0, 2.0], [1.0, 2.0], alternative="up"),
    lambda: stats.loglog_slope([1.0, 2.0, 3.0], [1.0, 0.0, 2.0]),
    lambda: stats.loglog_slope([-1.0, 2.0, 3.0], [1.0, 1.0, 2.0]),
    lambda: stats.loglog_slope([1.0, 2.0], [1.0, 2.0]),  # no degrees of freedom
    lambda: stats.loglog_slope([1.0, 2.0, 3.0], [1.0, 2.0]),
    lambda: stats.loglog_slope([2.0, 2.0, 2.0], [1.0, 2.0, 3.0]),
    lambda: stats.loglog_slope_by_replicate([1.0, 2.0], [[1.0, 2.0]]),  # one replicate
    lambda: stats.tost([0.1, 0.2, 0.0], margin=0.0, unit="u"),
    lambda: stats.tost([0.1, 0.2, 0.0], margin=-1.0, unit="u"),
    lambda: stats.tost([0.1, 0.2], [0.1], margin=1.0, unit="u", paired=True),
    lambda: stats.tost([0.1, 0.2], margin=1.0, unit="u", paired=True),  # paired without b
    lambda: stats.jackknife_se([1.0]),
    lambda: stats.jackknife_se([]),
    lambda: stats.flip_probability([1.0, 2.0, 3.0], 2.0, 5, rng=1),  # pool mean on the threshold
    lambda: stats.flip_probability([1.0, 2.0, 3.0], 0.0, 5, rng=1, replace=False),
    lambda: stats.flip_probability([1.0, 2.0, 3.0], 0.0, 0, rng=1),
    lambda: stats.flip_probability([1.0, 2.0, 3.0], 0.0, 2, rng=None),
])
def test_invalid_input_raises_value_error(call):
    with pytest.raises(ValueError):
        call()


def test_estimates_carry_unit_and_count():
    e = stats.cluster_bootstrap(np.arange(12.0).reshape(4, 3), unit="trained models", rng=0, resamples=100)
    assert isinstance(e, Estimate) and e.text().endswith("(95 %, 4 trained models)")
    assert stats.tost([0.01, -0.02, 0.0, 0.01], margin=1.0, unit="tasks").estimate.text().endswith(
        "(90 %, 4 tasks)")


def test_five_models_forty_sequences_t_interval_of_cluster_means_covers():
    # 5 trained models x 40 sequences are 5 units: the t interval over the 5 model means covers
    # (exact here: the model means are normal), the 200-item view does not
    rng = np.random.default_rng(105)
    datasets = 1000
    data = [_clustered(rng, clusters=5, items=40) for _ in range(datasets)]
    hits = coverage(lambda x: stats.mean_interval(x.mean(axis=1), unit="trained models"), data, 0.0)
    assert_covers_nominal(hits, datasets)
    pooled = coverage(lambda x: stats.mean_interval(x.ravel(), unit="sequences"), data, 0.0)
    assert pooled / datasets < 0.6


def test_spearman_is_pearson_of_ranks_and_its_interval_covers():
    # rho = Pearson correlation of average ranks (ties included); the Fisher-z interval covers the
    # population rank correlation (0 under independence) near its nominal 90 %
    x = np.array([1.0, 2.0, 2.0, 3.0, 5.0, 4.0, 7.0, 6.0])
    y = np.array([2.0, 1.0, 3.0, 3.0, 6.0, 5.0, 4.0, 8.0])
    est, p = stats.spearman(x, y, unit="trained models")
    rx, ry = scipy.stats.rankdata(x), scipy.stats.rankdata(y)
    assert est.point == pytest.approx(np.corrcoef(rx, ry)[0, 1], abs=1e-12)
    assert est.low < est.point < est.high and est.n == 8 and est.unit == "trained models"
    _, p_less = stats.spearman(x, y, unit="m", alternative="less")
    assert p + p_less == pytest.approx(1.0, abs=1e-9) and p < 0.05
    rng = np.random.default_rng(7)
    draws = [stats.spearman(rng.standard_normal(30), rng.standard_normal(30), unit="m")[0] for _ in range(1000)]
    cover = np.mean([d.low <= 0 <= d.high for d in draws])
    assert 0.87 <= cover <= 0.93
    with pytest.raises(ValueError):
        stats.spearman([1, 2, 3, 4], [1, 2, 3, 4], unit="m")
    with pytest.raises(ValueError):
        stats.spearman(np.ones(6), np.arange(6.0), unit="m")


def test_spearman_difference_point_coverage_and_errors():
    # point = difference of the two rhos; identical groups give an interval around 0; a large true
    # difference is resolved; under equal population correlations the 90 % interval covers 0 near
    # its nominal rate; the same generator state gives the same interval
    rng = np.random.default_rng(3)
    x1, x2 = rng.standard_normal(20), rng.standard_normal(20)
    y1, y2 = x1 + 0.3 * rng.standard_normal(20), rng.standard_normal(20)
    est = stats.spearman_difference(x1, y1, x2, y2, unit="models", rng=0)
    want = scipy.stats.spearmanr(x1, y1).statistic - scipy.stats.spearmanr(x2, y2).statistic
    assert est.point == pytest.approx(want, abs=1e-12) and est.low > 0 and est.n == 40
    assert est == stats.spearman_difference(x1, y1, x2, y2, unit="models", rng=0)
    same = stats.spearman_difference(x1, y1, x1, y1, unit="models", rng=1)
    assert same.point == 0 and same.low < 0 < same.high
    cover = []
    for _ in range(200):
        a, b = rng.standard_normal(18), rng.standard_normal(18)
        c, d = rng.standard_normal(18), rng.standard_normal(18)
        e = stats.spearman_difference(a, a + b, c, c + d, unit="m", rng=rng, resamples=400)
        cover.append(e.low <= 0 <= e.high)
    assert 0.82 <= np.mean(cover) <= 0.97
    with pytest.raises(ValueError, match="constant"):
        stats.spearman_difference(np.ones(6), np.arange(6.0), x2, y2, unit="m", rng=0)
    with pytest.raises(ValueError):
        stats.spearman_difference([1, 2, 3], [1, 2, 3], x2, y2, unit="m", rng=0)


def test_mantel_spearman_finds_a_monotone_link_and_is_uniform_under_the_null():
    x = np.arange(8.0)
    D = np.abs(x[:, None] - x[None, :])
    rho, p = stats.mantel_spearman(D, D ** 2, rng=0, permutations=500)
    assert rho == pytest.approx(1.0) and p < 0.01
    rng = np.random.default_rng(1)
    ps = []
    for _ in range(40):
        a, b = rng.random(8), rng.random(8)
        ps.append(stats.mantel_spearman(np.abs(a[:, None] - a), np.abs(b[:, None] - b), rng=rng, permutations=100)[1])
    assert 0.3 < np.mean(ps) < 0.7                     # roughly uniform under the null
    with pytest.raises(ValueError):
        stats.mantel_spearman(np.zeros((3, 2)), np.zeros((3, 2)), rng=0)


def test_one_se_pick_prefers_the_simplest_candidate_within_one_standard_error():
    rng = np.random.default_rng(21)
    base = rng.integers(0, 2, size=200).astype(float)         # the best candidate's per-unit scores
    se = base.std(ddof=1) / math.sqrt(base.size)
    worse = base.copy()
    worse[np.flatnonzero(base == 1)[:3]] = 0.0               # 3 / 200 = 0.015 below: within one SE (~0.035)
    far = base.copy()
    far[np.flatnonzero(base == 1)[:20]] = 0.0                # 0.10 below: outside
    pick = stats.one_se_pick([worse, base], unit="recordings")
    assert (pick.index, pick.best, pick.n) == (0, 1, 200)
    assert pick.standard_error == pytest.approx(se) and pick.threshold == pytest.approx(base.mean() - se)
    assert stats.one_se_pick([far, base], unit="recordings").index == 1
    assert stats.one_se_pick([far, worse, base], unit="recordings").index == 1
    # equal candidates: the first (simplest); a single candidate is its own pick
    assert stats.one_se_pick([base, base], unit="recordings").index == 0
    assert stats.one_se_pick([base], unit="recordings").index == 0
    # brute force on random score tables
    for trial in range(50):
        table = rng.normal(size=(4, 30)) + rng.normal(scale=0.3, size=(4, 1))
        means = table.mean(1)
        b = int(np.argmax(means))
        limit = means[b] - table[b].std(ddof=1) / math.sqrt(30)
        assert stats.one_se_pick(table, unit="units").index == min(k for k in range(4) if means[k] >= limit)


@pytest.mark.parametrize("bad", [[1.0, 2.0], [[1.0]], [[1.0, np.nan]], [["a", "b"]], np.zeros((0, 3))])
def test_one_se_pick_rejects_bad_scores(bad):
    with pytest.raises(ValueError):
        stats.one_se_pick(bad, unit="units")


# ---------------------------------------------------------------- deciding_estimate

def _iv(low, high):
    return Estimate(point=(low + high) / 2, low=low, high=high, unit="trained models", n=3)


def test_deciding_estimate_prefers_a_failing_replicate_over_a_wider_one():
    ests = {"a": _iv(-5.0, 4.0), "b": _iv(-1.0, -0.5), "c": _iv(1.0, 2.0)}
    assert stats.deciding_estimate(ests, threshold=0.0) == "b"      # wholly below: the conjunction fails
    assert stats.deciding_estimate(ests) == "a"                     # no threshold: lowest lower end


def test_deciding_estimate_sides_and_sequences():
    ests = [_iv(0.5, 1.0), _iv(0.2, 3.0), _iv(-0.1, 0.1)]
    assert stats.deciding_estimate(ests) == 2
    assert stats.deciding_estimate(ests, side="high") == 1
    assert stats.deciding_estimate(ests, side="high", threshold=0.4) == 0
    assert stats.deciding_estimate(ests, side="abs") == 1
    # the pick's verdict equals the conjunction's: every lower end above 0.3 fails or not on the pick
    key = stats.deciding_estimate(ests, threshold=0.3)
    assert (ests[key].low > 0.3) == all(e.low > 0.3 for e in ests)


def test_deciding_estimate_rejects_bad_input():
    with pytest.raises(ValueError):
        stats.deciding_estimate([])
    with pytest.raises(ValueError):
        stats.deciding_estimate([_iv(0, 1)], side="middle")
    with pytest.raises(TypeError):
        stats.deciding_estimate([0.3])
