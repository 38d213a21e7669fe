"""Tests for compendium.papers.timesx_benchmark: shapes, properties, references, tiny run."""

import numpy as np
import pandas as pd
import pytest
import scipy.integrate
import scipy.stats

from compendium.papers import timesx_benchmark as paper

TINY = dict(num_series=10, num_pretrain_series=5, num_context_series=40, num_replicates=2, mlp_hidden=8,
            mlp_steps=5, p_relevant_levels=(0.5, 1.0), bootstrap_resamples=200)


@pytest.fixture(scope="module")
def tiny():
    return paper.run(paper.Config(**TINY))


@pytest.fixture(scope="module")
def tpl():
    return paper.templates()


# ---------------------------------------------------------------- shapes
def test_series_and_contexts_shapes(tpl):
    rng = np.random.default_rng(0)
    domains = np.array([paper.DOMAINS[i % 5] for i in range(15)])
    y = paper.make_series(domains, rng, paper.real_series())
    assert y.shape == (15, paper.LENGTH) and np.all(y > 0)
    draws = paper.draw_events(15, rng)
    c = paper.make_contexts(domains, draws, paper.CLEAN, tpl)
    assert len(c.texts) == 15 and c.stated_log_multiplier.shape == (15, paper.HORIZON)
    assert set(c.kind) == {"relevant"} and not c.heldout.any()
    np.testing.assert_array_equal(c.stated_log_multiplier, c.true_log_multiplier)  # clean: exact
    X, Y, scale, ends = paper.windows_from(y, [60, 100])
    assert X.shape == (30, paper.INPUT) and Y.shape == (30, paper.HORIZON) and ends.max() == 112


def test_tiny_run_shapes(tiny):
    cfg = tiny.config
    variants = 3 + len(cfg.p_relevant_levels)
    assert len(tiny.scores) == cfg.num_replicates * variants * cfg.num_series * len(paper.METHODS)
    assert len(tiny.cells) == cfg.num_replicates * variants and len(tiny.leakage) == cfg.num_replicates
    assert set(tiny.base_choice) <= set(paper.UNIMODAL)


# ---------------------------------------------------------------- properties
def test_mase_is_scale_invariant():
    assert paper.mase_scale_invariance(np.random.default_rng(1), trials=50) < 1e-12


def test_mean_ensemble_mase_at_most_mean_of_components():
    rng = np.random.default_rng(2)
    y, a, b = rng.normal(size=(3, 200, 12))
    scale = rng.uniform(0.5, 2, 200)
    ens = paper.mase(y, paper.mean_ensemble(a, b), scale)
    assert np.all(ens <= (paper.mase(y, a, scale) + paper.mase(y, b, scale)) / 2 + 1e-12)


def test_knobs_map_common_draws_monotonically(tpl):
    """Raising p_relevant only turns non-relevant windows into relevant ones (common random numbers)."""
    domains = np.array([paper.DOMAINS[i % 5] for i in range(200)])
    draws = paper.draw_events(200, np.random.default_rng(3))
    low = paper.make_contexts(domains, draws, paper.Knobs(0.3, 0.2, 0.0, 0.0), tpl)
    high = paper.make_contexts(domains, draws, paper.Knobs(0.7, 0.2, 0.0, 0.0), tpl)
    assert np.all(high.kind[low.kind == "relevant"] == "relevant")
    assert np.all(low.true_log_multiplier[low.kind != "relevant"] == 0)
    assert np.all(low.stated_log_multiplier[low.kind == "distractor"] == 0)


def test_shuffled_contexts_keep_the_truth(tpl):
    domains = np.array([paper.DOMAINS[i % 5] for i in range(20)])
    draws = paper.draw_events(20, np.random.default_rng(4))
    perm = np.random.default_rng(5).permutation(20)
    base = paper.make_contexts(domains, draws, paper.CLEAN, tpl)
    shuf = paper.make_contexts(domains, draws, paper.CLEAN, tpl, permutation=perm)
    np.testing.assert_array_equal(shuf.true_log_multiplier, base.true_log_multiplier)
    assert shuf.texts == [base.texts[j] for j in perm]


# ---------------------------------------------------------------- references and known values
def test_sympy_derivation_and_closed_form_against_numerical_integration():
    diff, _ = paper.derive_gaussian_crps()
    assert diff == 0
    for y, mu, sigma in ((0.3, -0.2, 1.7), (2.0, 0.0, 0.5), (-1.0, 1.0, 2.0)):
        cdf = lambda x: scipy.stats.norm.cdf(x, mu, sigma)  # noqa: E731
        lo, hi = mu - 12 * sigma, mu + 12 * sigma
        direct = scipy.integrate.quad(lambda x: cdf(x) ** 2, lo, y)[0] + scipy.integrate.quad(lambda x: (1 - cdf(x)) ** 2, y, hi)[0]
        assert paper.gaussian_crps(y, mu, sigma) == pytest.approx(direct, rel=1e-7)


def test_quantile_crps_weights_and_accuracy():
    np.testing.assert_allclose(paper.quantile_weights(np.arange(1, 100) / 100), 0.01)
    assert paper.quantile_crps_max_error(99) < 0.01
    assert paper.quantile_crps_max_error(999) < paper.quantile_crps_max_error(99)
    with pytest.raises(ValueError):
        paper.quantile_weights(np.array([0.5, 0.2]))


def test_seasonal_naive_matches_a_loop():
    rng = np.random.default_rng(6)
    hist, periods = rng.normal(size=(4, 50)), np.array([7, 12, 24, 3])
    got = paper.seasonal_naive(hist, periods, 12)
    for i, m in enumerate(periods):
        np.testing.assert_array_equal(got[i], [hist[i, 50 - m + (h % m)] for h in range(12)])


def test_holt_winters_recovers_a_clean_seasonal_series():
    t = np.arange(120)
    y = 50 + 0.1 * t + 5 * np.sin(2 * np.pi * t / 12)
    f, failures = paper.holt_winters(y[None, :96], np.array([12]), 12)
    assert failures == 0 and np.max(np.abs(f[0] - y[96:108])) < 0.5


def test_audit_passes_real_windows_and_catches_each_planted_leak(tpl):
    domains = np.array([paper.DOMAINS[i % 5] for i in range(30)])
    c = paper.make_contexts(domains, paper.draw_events(30, np.random.default_rng(7)), paper.Knobs(0.5, 0.2, 0.3, 0.5), tpl)
    assert paper.leakage_audit(c.windows) == []
    assert paper.scheduled_future_items(c.windows) == int(np.sum(c.kind != "distractor"))
    caught = paper.leakage_audit(paper.planted_leaky_windows())
    assert sorted({s for s, _ in caught}) == [0, 1, 2]


def test_parser_reads_train_templates_and_fails_on_swapped_order(tpl):
    text = tpl["event"]["train"][0].format(event="promotion", start=3, duration=2, magnitude="strong")
    assert paper.parse_dates(text) == (3, 2)
    held = tpl["event"]["heldout"][0].format(event="x", start=3, duration=2, magnitude="y")
    assert paper.parse_dates(held) == (2, 3)
    assert paper.parse_dates("no numbers here") is None


def test_context_model_learns_sign_times_magnitude(tpl):
    domains = np.array([paper.DOMAINS[i % 5] for i in range(400)])
    draws = paper.draw_events(400, np.random.default_rng(8))
    c = paper.make_contexts(domains, draws, paper.CLEAN, tpl)
    effect = c.true_log_multiplier.sum(1) / draws.duration
    model = paper.ContextModel().fit(c.texts, effect)
    lm = model.log_multipliers(c.texts)
    assert np.mean(np.abs(lm - c.true_log_multiplier)) < 0.02


def test_config_validation():
    with pytest.raises(ValueError):
        paper.Config(num_series=3)
    with pytest.raises(ValueError):
        paper.Config(p_relevant_levels=(0.5, 1.5))
    assert paper.Config().sweep_knobs(1.0).p_misleading == 0.0


# ---------------------------------------------------------------- tiny run
def test_tiny_run_is_deterministic_and_audited(tiny):
    again = paper.run(paper.Config(**TINY))
    pd.testing.assert_frame_equal(tiny.scores, again.scores)
    pd.testing.assert_frame_equal(tiny.cells, again.cells)
    assert tiny.cells.audit_problems.sum() == 0 and tiny.cells.jensen_max.max() <= 1e-12
    assert all(a["clean_windows_past_cutoff"] == 0 and a["leaky_windows_past_cutoff"] == a["leaked_windows"]
               for a in tiny.checks["training_audit"])
    count, ests = paper.seeds_excluding_zero(tiny, "clean", "mean ensemble", "context-adjusted")
    assert 0 <= count <= TINY["num_replicates"] and len(ests) == TINY["num_replicates"]
    assert np.isfinite(paper.gain_correlation(tiny)[0])


def test_crps_mase_rank_correlation_is_spearman_over_cells():
    import pandas as pd

    table = pd.DataFrame({"mase": [1.0, 2.0, 3.0, 4.0], "crps": [0.1, 0.3, 0.2, 0.9]})
    assert paper.crps_mase_rank_correlation(table) == pytest.approx(0.8)
    assert paper.crps_mase_rank_correlation(table.assign(crps=-table.crps)) == pytest.approx(-0.8)


def test_shuffled_context_gap_is_a_series_bootstrap_of_the_shuffled_difference(tiny):
    est = paper.shuffled_context_gap(tiny)
    d = paper.paired(tiny.scores, "shuffled", "unimodal (dev-selected)", "context-adjusted")
    assert est.unit == "series" and est.n == len(d) and est.low <= est.high
    assert est.point == pytest.approx(float(np.mean(d)))
    assert paper.shuffled_context_gap(tiny) == est  # seeded: the same interval every time


def test_floor_reduction_is_a_t_interval_of_event_free_relative_mase(tiny):
    rows = tiny.checks["event_free_mase"]
    assert len(rows) == tiny.config.num_replicates and all(set(r) == set(paper.UNIMODAL) for r in rows)
    est = paper.floor_reduction(tiny, "global MLP", "seasonal naive")
    r = [1 - row["global MLP"] / row["seasonal naive"] for row in rows]
    assert est.n == len(r) and est.point == pytest.approx(float(np.mean(r))) and est.low <= est.point <= est.high
    # the baseline against itself has no edge: zero reduction in every replicate
    assert paper.floor_reduction(tiny, "seasonal naive", "seasonal naive").point == 0.0
    # seasonal naive on an event-free horizon: recompute replicate 0 from scratch
    rep = paper.run_replicate(tiny.config, 0, paper.templates(), paper.real_series())
    assert rep["event_free_mase"] == rows[0]


def test_context_floor_is_the_clean_relative_gap_to_unimodal(tiny):
    est = paper.headroom(tiny, "context-adjusted")
    s = tiny.scores[tiny.scores.variant == "clean"]
    r = [1 - s[(s.replicate == k) & (s.method == "context-adjusted")].mase.mean()
         / s[(s.replicate == k) & (s.method == "unimodal (dev-selected)")].mase.mean() for k in range(tiny.config.num_replicates)]
    assert est.n == len(r) and est.point == pytest.approx(float(np.mean(r)))
    assert paper.headroom(tiny, "unimodal (dev-selected)").point == 0.0  # no adjustment: no gain


def test_memorising_forecast_returns_stored_targets_only_for_stored_inputs(tiny):
    rng = np.random.default_rng(0)
    history = np.exp(rng.normal(size=(4, paper.INPUT + 3))) + 5
    model = paper.train_global_mlp(rng.normal(size=(8, paper.INPUT)), rng.normal(size=(8, paper.HORIZON)),
                                   hidden=4, steps=2, seed=0)
    x = history[:, -paper.INPUT:]
    scale = x.mean(axis=1, keepdims=True)
    target = rng.normal(size=(4, paper.HORIZON))
    out = paper.memorising_forecast(model, (x / scale)[[1, 3]], target[[1, 3]], history)
    base = paper.mlp_forecast(model, history)
    np.testing.assert_allclose(out[[1, 3]], target[[1, 3]] * scale[[1, 3]])
    np.testing.assert_allclose(out[[0, 2]], base[[0, 2]])
    np.testing.assert_allclose(paper.memorising_forecast(model, x[:0], target[:0], history), base)
    # in the run, the twin never does worse than the clean MLP (it changes only windows it memorised)
    assert (tiny.leakage.mase_memoriser <= tiny.leakage.mase_clean + 1e-12).all()


def test_partial_gain_correlation_holds_the_level_fixed(tiny):
    cells = paper.sweep_cells(tiny)
    rho, p = paper.partial_gain_correlation(tiny, permutations=199)
    assert -1 <= rho <= 1 and 0 < p <= 1
    # a gain that is a pure level effect (constant within levels) has no within-level association
    lv = cells.p_relevant.to_numpy()
    resid = paper.experiment._within_level_rank_residuals(lv * 10, lv)
    np.testing.assert_allclose(resid, 0.0)
    # the statistic equals the Pearson correlation of the within-level-centred ranks
    a = paper.experiment._within_level_rank_residuals(cells.error_correlation.to_numpy(), lv)
    b = paper.experiment._within_level_rank_residuals(cells.gain_over_best.to_numpy(), lv)
    assert rho == pytest.approx(float(np.corrcoef(a, b)[0, 1]))
