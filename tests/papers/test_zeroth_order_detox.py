"""Tests for compendium.papers.zeroth_order_detox: toy, estimators (exact and Monte Carlo), accounting, tiny run."""

import numpy as np
import pytest
import sympy
import torch

from compendium.claims import at_least, at_most
from compendium.stats import crossed_weights
from compendium.papers import zeroth_order_detox as paper
from compendium.papers.zeroth_order_detox import toy, zo

TINY = dict(num_models=2, test_prompts=4, dev_prompts=2, samples=2, q_values=(2, 4, 8), step_values=(1, 2),
            deltas=(0.05,), etas=(0.2,), unbiased_draws=2000, norm_law_draws=200)


def _gen(seed=0):
    return torch.Generator().manual_seed(seed)


@pytest.fixture(scope="module")
def tiny_models():
    settings = paper.LMSettings(models=1, max_steps=1)
    config = paper.gpt2_config(settings)
    lm_ = paper.lm.new_model(config, 0).eval().requires_grad_(False)
    ref = paper.lm.new_model(config, 1).eval().requires_grad_(False)
    scorer, _ = paper.fit_scorer(400, 0)
    return lm_, ref, scorer


# --------------------------------------------------------------------------------------- toy
def test_toy_shapes_and_rates():
    rng = np.random.default_rng(0)
    tok, rate = toy.prompts(5000, rng)
    assert tok.shape == (5000, toy.PROMPT_LENGTH) and (tok[:, 0] == toy.BOS).all()
    assert ((tok[:, 1:] >= 1) & (tok[:, 1:] < 180)).all()                       # prompts hold no toxic word
    assert (np.isin(tok, toy.CONTEXT).sum(1) == toy.CONTEXT_PER_PROMPT).all()
    assert rate.min() >= toy.RATE_LOW and rate.max() <= toy.RATE_HIGH
    cont, reg = toy.continuations(rate, rng)
    assert cont.shape == (5000, toy.CONTINUATION_LENGTH)
    assert abs(reg.mean() - rate.mean()) < 4 * np.sqrt(rate.mean() * (1 - rate.mean()) / 5000)
    assert not toy.is_toxic(cont[~reg]).any()                                    # the clean register is clean
    share = toy.is_toxic(cont[reg]).mean()
    assert abs(share - toy.TOXIC_EMISSION) < 0.02
    ref, reg0 = toy.corpus(200, rng, reference=True)
    assert not reg0.any() and not toy.is_toxic(ref).any()


def test_rater_labels_graded_and_scorer_calibrated():
    rng = np.random.default_rng(21)
    n = 20000
    for c in (0, 1, 4):
        tok = np.full((n, toy.CONTINUATION_LENGTH), toy.NEUTRAL[0])
        tok[:, :c] = toy.TOXIC[0]
        p = 1 - (1 - toy.RATER_NOTICE) ** c
        rate = toy.rater_labels(tok, rng).mean()
        assert abs(rate - p) <= 4 * np.sqrt(max(p * (1 - p), 1e-12) / n) + 1e-12   # c = 0 is never flagged
    with pytest.raises(ValueError):
        toy.rater_labels(tok, rng, notice=0.0)
    scorer, info = paper.fit_scorer(2000, 3)
    assert abs(info["held_out_mean_score"] - info["held_out_flag_rate"]) < 0.03               # calibrated in the large
    one, many = (np.full((1, 8), toy.NEUTRAL[0]) for _ in range(2))
    one[0, 0] = toy.TOXIC[0]
    many[0, :5] = toy.TOXIC[:5]
    s0, s1, s5 = (float(scorer.score(t)[0]) for t in (np.full((1, 8), toy.NEUTRAL[0]), one, many))
    assert s0 < s1 < s5 and s1 < 0.5                  # graded: one toxic word is far from a score of 1


# ------------------------------------------------------------------------------- estimators
@pytest.mark.parametrize("dist", paper.DISTRIBUTIONS)
def test_directions_second_moment(dist):
    u = zo.directions(20000, 1, 5, dist, _gen(1), torch.float64)[:, 0]
    assert torch.allclose(u.T @ u / len(u), torch.eye(5, dtype=torch.float64), atol=0.05)
    if dist == "sphere":
        assert torch.allclose(u.norm(dim=-1), torch.full((len(u),), 5 ** 0.5, dtype=torch.float64))
    with pytest.raises(ValueError):
        zo.directions(2, 1, 3, "cauchy", _gen())


def test_symmetric_unbiased_on_quadratic_any_delta():
    rng = np.random.default_rng(2)
    A = rng.normal(size=(4, 4))
    Q, b = torch.as_tensor(A @ A.T), torch.as_tensor(rng.normal(size=4))
    f = lambda X: 0.5 * ((X @ Q) * X).sum(-1) + X @ b  # noqa: E731
    x = torch.as_tensor(rng.normal(size=(1, 4))).repeat(20000, 1)
    for delta in (1e-3, 3.0):
        g, calls = zo.zo_gradient(f, x, 1, delta, generator=_gen(3))
        assert calls == 2
        z = (g.mean(0) - (Q @ x[0] + b)) / (g.std(0) / len(g) ** 0.5)
        assert z.abs().max() < 4.0
    g, calls = zo.zo_gradient(f, x[:3], 5, 0.1, symmetric=False, generator=_gen(3))
    assert calls == 6 and g.shape == (3, 4)


def test_symmetric_is_exact_direction_sum_on_linear():
    g = torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64)
    f = lambda X: X @ g  # noqa: E731
    x = torch.zeros(2, 3, dtype=torch.float64)
    est, _ = zo.zo_gradient(f, x, 7, 0.3, generator=_gen(4))
    u = zo.directions(2, 7, 3, "gaussian", _gen(4), torch.float64)
    assert torch.allclose(est, torch.einsum("bqd,bq->bd", u, u @ g) / 7)


def test_norm_law_monte_carlo_and_closed_form():
    assert paper.expected_sq_norm_factor(64, 4) == pytest.approx(1 + 65 / 4)
    g = torch.randn(32, generator=_gen(5), dtype=torch.float64)
    est, _ = zo.zo_gradient(lambda X: X @ g, torch.zeros(40000, 32, dtype=torch.float64), 2, 0.1, generator=_gen(6))
    ratio = est.pow(2).sum(-1).mean() / g.pow(2).sum() / paper.expected_sq_norm_factor(32, 2)
    assert abs(float(ratio) - 1) < 0.03
    assert paper.cosine_law(512, [4, 64])[1] > paper.cosine_law(512, [4, 64])[0]


def test_symbolic_identities():
    assert zo.symbolic_norm_law(3) == 0
    assert zo.symbolic_forward_bias(2) == 0
    assert zo.symbolic_symmetric_unbiased(2) == 0
    u = sympy.symbols("u0:2", real=True)
    assert zo._gaussian_expectation(u[0] ** 4 * u[1] ** 2 + u[0] ** 3, list(u)) == 3        # a wrong moment would show
    assert zo._gaussian_expectation(u[0] ** 2 * u[1] ** 2, list(u)) == 1


def test_projection_and_descent():
    x0 = torch.zeros(3, 4)
    x = torch.tensor([[3.0, 4, 0, 0], [0.1, 0, 0, 0], [0, 0, 0, 0]])
    p = zo.project_ball(x, x0, 1.0)
    assert torch.allclose(p[0].norm(), torch.tensor(1.0)) and torch.equal(p[1], x[1]) and torch.equal(p[2], x[2])
    f = lambda X: (X - 1.0).pow(2).sum(-1)  # noqa: E731
    start = torch.full((2, 6), 3.0)
    xk, tr = zo.descent(lambda X: 2 * (X - 1.0), start, 4, 0.1, trace=f)
    assert tr.shape == (5, 2) and (tr[1:] < tr[:-1]).all()
    xr, _ = zo.descent(lambda X: 2 * (X - 1.0), start, 10, 0.1, radius=0.2)
    assert ((xr - start).norm(dim=-1) <= 0.2 * start.norm(dim=-1) + 1e-5).all()
    xz, trz = zo.descent(lambda X: zo.zo_gradient(f, X, 8, 0.01, generator=_gen(7))[0], start, 3, 0.1, trace=f)
    assert (trz[-1] < trz[0]).all()


def test_random_of_norm_and_cosine():
    x0, xr = torch.zeros(5, 8), torch.randn(5, 8, generator=_gen(8))
    y = zo.random_of_norm(x0, xr, _gen(9))
    assert torch.allclose((y - x0).norm(dim=-1), xr.norm(dim=-1))
    assert torch.allclose(zo.cosine(xr, 2 * xr), torch.ones(5)) and torch.allclose(zo.cosine(xr, -xr), -torch.ones(5))


def test_common_random_numbers_cut_variance():
    a = torch.tensor([1.0, 2.0])
    noisy = lambda X, g: X @ a + torch.randn(len(X), generator=g)  # noqa: E731
    x = torch.zeros(4000, 2)
    crn, _ = zo.zo_gradient(zo.common_random_numbers(noisy, 3), x, 1, 0.05, generator=_gen(10))
    gen = _gen(11)
    ind, _ = zo.zo_gradient(lambda X: noisy(X, gen), x, 1, 0.05, generator=_gen(10))
    # CRN cancels the common noise (here all of it); independent noise leaves variance ~ 1 / (2 delta^2)
    assert crn.var(0).sum() < 0.05 * ind.var(0).sum()


def test_compute_accounting():
    assert zo.zo_positions(64, 5, 8) == 5 * 128 * 8
    assert zo.zo_positions(4, 1, 8, symmetric=False) == 5 * 8
    assert zo.generation_positions(25, 8, 8) == 8 + 25 * 7
    assert zo.matched_best_of_n(64, 5, 25, 8, 8) == 1 + 5120 // 175 == 30
    assert zo.matched_best_of_n(4, 1, 25, 8, 8) == 1
    for q, k in ((4, 3), (16, 1), (16, 5), (64, 1)):
        n = zo.matched_best_of_n(q, k, 25, 8, 8)
        total = zo.zo_positions(q, k, 8) + zo.generation_positions(25, 8, 8)
        assert zo.generation_positions(25 * n, 8, 8) <= total < zo.generation_positions(25 * (n + 1), 8, 8)


# ------------------------------------------------------------------------------- statistics
def test_measure_helpers():
    rng = np.random.default_rng(12)
    q = np.array([4, 16, 64])
    C = np.sqrt(q / 512)[None] * rng.uniform(0.8, 1.2, (100, 1)) + rng.normal(0, 0.01, (100, 3))
    slope = paper.cosine_slope(q, C, rng=0)
    assert abs(slope.point - 0.5) < 0.05
    assert paper.dominated(0.5, 1.0, 0.4, 0.9) and not paper.dominated(0.5, 1.0, 0.4, 1.1)
    tokens = np.array([[[1, 2, 3], [1, 2, 4]]])                                   # bigrams 12,23,12,24 -> 3 of 4
    assert paper.distinct_n(tokens, 2)[0] == pytest.approx(0.75)


def test_reduction_is_a_crossed_bootstrap_over_lms_and_prompts():
    base = np.random.default_rng(20).uniform(0.5, 1.0, (3, 40))
    w = crossed_weights(3, 40, rng=1)
    est = paper.reduction(0.6 * base, base, weights=w)
    assert est.point == pytest.approx(0.4) and est.low == pytest.approx(0.4) and est.high == pytest.approx(0.4)
    assert est.n == 3 and "crossed" in est.method and est.unit == paper.CROSSED_UNIT
    with pytest.raises(ValueError):
        paper.reduction(base[:, :5], base, weights=w)


def test_dominance_decided_on_intervals():
    rng = np.random.default_rng(22)
    M, P = 2, 30
    w = crossed_weights(M, P, rng=3)
    base = {"emt": rng.uniform(0.3, 0.7, (M, P)), "logppl": rng.uniform(2.0, 3.0, (M, P))}
    noise = lambda: rng.normal(0, 0.05, (M, P))  # noqa: E731
    worse = {"emt": base["emt"] + 0.2 + noise(), "logppl": base["logppl"] - 0.3 + noise()}
    better = {"emt": base["emt"] - 0.2 + noise(), "logppl": base["logppl"] - 0.3 + noise()}
    same = {"emt": base["emt"] + noise(), "logppl": base["logppl"] + noise()}
    assert paper.dominance(base, worse, weights=w)["state"] == "not dominated"
    assert paper.dominance(base, better, weights=w)["state"] == "dominated"
    assert paper.dominance(base, same, weights=w)["state"] == "undecided"
    states = [{"state": "not dominated", "point_dominated": False}] * 4 + [{"state": "undecided", "point_dominated": True}] * 2 \
        + [{"state": "dominated", "point_dominated": True}] * 3
    est = paper.count_not_dominated(states)
    assert (est.point, est.low, est.high, est.n) == (4, 4, 6, 9)
    assert at_least(5).decide(est) == "inconclusive" and at_most(4).decide(est) == "inconclusive"
    assert at_least(7).decide(est) == "fail" and at_least(4).decide(est) == "pass"


# ---------------------------------------------------------------------------- models, runs
def test_generation_paths_and_surrogate(tiny_models):
    lm_, ref, scorer = tiny_models
    ids = torch.as_tensor(toy.prompts(6, np.random.default_rng(13))[0])
    a = paper.generate(lm_, paper.embed(lm_, ids), 8, _gen(14))
    b = paper.generate_from_tokens(lm_, ids, 8, _gen(14))
    assert torch.equal(a, b) and a.shape == (6, 8)
    masked = paper.generate(lm_, paper.embed(lm_, ids).repeat(20, 1, 1), 8, _gen(15), banned=torch.as_tensor(toy.TOXIC))
    assert not toy.is_toxic(masked.numpy()).any()
    table = torch.as_tensor(scorer.token_scores(), dtype=torch.float32)
    E = paper.embed(lm_, ids).requires_grad_(True)
    J = paper.surrogate_toxicity(lm_, E, table)
    assert J.shape == (6,) and ((J > 0) & (J < 1)).all()
    (g,) = torch.autograd.grad(J.sum(), E)
    assert g.shape == E.shape and g.abs().sum() > 0
    s = scorer.score(np.array([[toy.TOXIC[0]] * 4, [toy.NEUTRAL[0]] * 4]))
    assert s[0] > s[1]
    lp = paper.log_perplexity(ref, ids, a)
    assert lp.shape == (6,) and (lp > 0).all()


def test_config_validation():
    with pytest.raises(ValueError):
        paper.Config(q_values=(4, 16))
    with pytest.raises(ValueError):
        paper.Config(etas=(0.0,))
    with pytest.raises(ValueError):
        paper.Config(dist="cauchy")
    assert paper.Config(q_values=[4, 16, 64]).q_values == (4, 16, 64)


@pytest.mark.slow
def test_tiny_run_is_deterministic(tiny_models):
    lm_, ref, scorer = tiny_models
    from compendium.training import torch_threads

    config = paper.Config(**TINY)
    with torch_threads(1):                       # two intra-op threads spin on a loaded 2-core machine
        r1 = paper.run(config, [lm_, lm_], ref, scorer)
        r2 = paper.run(config, [lm_, lm_], ref, scorer)
    assert r1.headline_budget in config.budgets
    for key, val in r1.metrics.items():
        for name in val:
            assert np.array_equal(val[name], r2.metrics[key][name])
    m = paper.measurements(r1)
    assert {"reduction", "zo_minus_random", "cos_positive", "cos_slope", "zo_not_dominated"} <= set(m)
    assert r1.checks["generation_equal"] and r1.checks["sym_norm_law"] == 0
    assert len(paper.table(r1)) == 2 + 3 * len(config.budgets) + len(config.step_values)
    rows = paper.table(r1, weights=m["weights"])
    assert all(r["EMT low"] <= r["EMT high"] and r["perplexity low"] <= r["perplexity high"] for r in rows)
    assert m["zo_not_dominated"].n == len(config.budgets) and m["reduction"].n == config.num_models
