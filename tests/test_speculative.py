"""Tests for compendium.speculative: the shared speculative-sampling rule, acceptance formulas and
the batched verify step (properties, closed forms, a slow reference, losslessness)."""

import numpy as np
import pytest
import scipy.stats

from compendium import speculative as spec


def _pairs(rng, n, V, conc=1.0):
    return rng.dirichlet(np.full(V, conc), size=n), rng.dirichlet(np.full(V, conc), size=n)


def test_residual_acceptance_and_tv_properties():
    rng = np.random.default_rng(0)
    p, q = _pairs(rng, 50, 6)
    r = spec.residual_distribution(p, q)
    assert np.all(r >= 0)
    np.testing.assert_allclose(r.sum(-1), 1.0, atol=1e-12)
    assert np.all(r[p <= q] == 0), "the residual lives where p exceeds q"
    np.testing.assert_allclose(spec.residual_distribution(p, p), p)  # nothing left: fall back to p
    tv = spec.total_variation(p, q)
    np.testing.assert_allclose(tv, 0.5 * np.abs(p - q).sum(-1))
    np.testing.assert_allclose(spec.acceptance_rate(p, q), 1 - tv, atol=1e-12)
    np.testing.assert_allclose(spec.acceptance_rate(p, p), 1.0)
    # the expected acceptance of the test min(1, p/q) under d ~ q is sum_v min(p, q)
    d = np.arange(6)
    ratio = spec.acceptance_ratio(np.broadcast_to(d, (50, 6)), q[:, None, :].repeat(6, 1), p[:, None, :].repeat(6, 1))
    np.testing.assert_allclose((q * ratio).sum(-1), spec.acceptance_rate(p, q), atol=1e-12)


def test_expected_tokens_closed_form_and_limits():
    for gamma in (1, 2, 4, 7):
        for alpha in (0.0, 0.3, 0.5, 0.9, 0.999):
            closed = (1 - alpha ** (gamma + 1)) / (1 - alpha)
            assert abs(spec.expected_tokens(alpha, gamma) - closed) < 1e-12
        assert spec.expected_tokens(1.0, gamma) == gamma + 1
        assert spec.expected_tokens(0.0, gamma) == 1.0
    out = spec.expected_tokens(np.array([0.2, 0.6]), 3)
    assert out.shape == (2,) and np.all(np.diff(out) > 0)
    assert abs(spec.modeled_speedup(0.5, 4, 0.1) - spec.expected_tokens(0.5, 4) / 1.4) < 1e-12
    assert spec.modeled_speedup(0.0, 4, 0.0) == 1.0
    for bad in (dict(alpha=1.5, gamma=2), dict(alpha=0.5, gamma=0), dict(alpha=0.5, gamma=2.0)):
        with pytest.raises(ValueError):
            spec.expected_tokens(**bad)
    with pytest.raises(ValueError):
        spec.modeled_speedup(0.5, 2, -1.0)


def test_exponential_race_samples_the_normalised_weights():
    rng = np.random.default_rng(1)
    w = np.array([0.0, 2.0, 1.0, 0.5, 0.0, 0.5])
    n = 100_000
    draws = spec.exponential_race(np.broadcast_to(w, (n, 6)), rng.exponential(size=(n, 6)))
    counts = np.bincount(draws, minlength=6)
    assert counts[0] == 0 and counts[4] == 0, "zero weight never wins"
    keep = w > 0
    assert scipy.stats.chisquare(counts[keep], n * w[keep] / w.sum()).pvalue > 1e-4


def _slow_verify(p, q, d, u, e):
    """Row by row, written from the rule."""
    B, gamma, V = q.shape
    n_acc, nxt = np.zeros(B, dtype=int), np.zeros(B, dtype=int)
    for b in range(B):
        m = 0
        while m < gamma and u[b, m] < min(1.0, p[b, m, d[b, m]] / q[b, m, d[b, m]]):
            m += 1
        r = np.maximum(p[b, m] - (q[b, m] if m < gamma else 0.0), 0.0)
        if r.sum() == 0:
            r = p[b, m]
        race = [e[b, v] / r[v] if r[v] > 0 else np.inf for v in range(V)]
        n_acc[b], nxt[b] = m, int(np.argmin(race))
    return n_acc, nxt


@pytest.mark.parametrize("gamma, V", [(1, 3), (4, 16), (6, 5)])
def test_spec_verify_matches_a_slow_reference(gamma, V):
    rng = np.random.default_rng(gamma * 10 + V)
    B = 300
    p = rng.dirichlet(np.full(V, 0.5), size=(B, gamma + 1))
    q = rng.dirichlet(np.full(V, 0.5), size=(B, gamma))
    d = spec.categorical(q, rng)
    u, e = rng.random((B, gamma)), rng.exponential(size=(B, V))
    q[:7] = p[:7, :gamma]  # identical draft: everything is accepted
    n_acc, nxt = spec.spec_verify(p, q, d, u, e)
    ref = _slow_verify(p, q, d, u, e)
    assert np.array_equal(n_acc, ref[0]) and np.array_equal(nxt, ref[1])
    assert np.all(n_acc[:7] == gamma)
    assert n_acc.dtype == np.int64 and nxt.min() >= 0 and nxt.max() < V


def test_spec_verify_is_lossless_and_accepts_at_rate_alpha():
    rng = np.random.default_rng(7)
    V, gamma, n = 8, 3, 60_000
    p1, q1 = rng.dirichlet(np.ones(V)), rng.dirichlet(np.ones(V))
    p = np.broadcast_to(p1, (n, gamma + 1, V))
    q = np.broadcast_to(q1, (n, gamma, V))
    d = spec.categorical(q, rng)
    n_acc, nxt = spec.spec_verify(p, q, d, rng.random((n, gamma)), rng.exponential(size=(n, V)))
    # the first emitted token is d_0 if accepted, else the residual draw: its law is p
    first = np.where(n_acc > 0, d[:, 0], nxt)
    assert scipy.stats.chisquare(np.bincount(first, minlength=V), n * p1).pvalue > 1e-4
    alpha = spec.acceptance_rate(p1, q1)
    # positions are independent here, so P(n_acc >= k) = alpha^k
    for k in range(1, gamma + 1):
        share = np.mean(n_acc >= k)
        assert abs(share - alpha**k) < 5 * np.sqrt(alpha**k * (1 - alpha**k) / n)
    tokens = n_acc + 1
    se = tokens.std() / np.sqrt(n)
    assert abs(tokens.mean() - spec.expected_tokens(alpha, gamma)) < 5 * se


def test_spec_verify_float32_and_bad_inputs():
    rng = np.random.default_rng(3)
    p = rng.dirichlet(np.ones(4), size=(5, 3)).astype(np.float32)
    q = rng.dirichlet(np.ones(4), size=(5, 2)).astype(np.float32)
    d = spec.categorical(q, rng)
    u, e = rng.random((5, 2)).astype(np.float32), rng.exponential(size=(5, 4)).astype(np.float32)
    n_acc, nxt = spec.spec_verify(p, q, d, u, e)
    assert n_acc.shape == (5,) and nxt.shape == (5,)
    with pytest.raises(ValueError):
        spec.spec_verify(p[:, :2], q, d, u, e)
    with pytest.raises(ValueError):
        spec.spec_verify(p, q, d[:, :1], u, e)
    with pytest.raises(ValueError):
        spec.spec_verify(p, q, d + 4, u, e)
    with pytest.raises(ValueError):
        spec.spec_verify(p, q, d, u, e[:, :3])


def test_the_coupled_decoding_chapter_uses_this_module():
    from compendium.papers import speculative_coupled_decoding as scd
    from compendium.papers.speculative_coupled_decoding import decoding

    for name in ("acceptance_ratio", "categorical", "maximal_coupling", "residual_distribution", "total_variation"):
        assert getattr(scd, name) is getattr(spec, name)
        assert getattr(decoding, name) is getattr(spec, name)
