"""Tests for compendium.papers.async_spade: shapes, properties, references, a tiny run."""

import dataclasses
import math

import numpy as np
import pytest
import torch

from compendium.kernels.quest_pages import page_metadata, quest_scores_reference
from compendium.kernels.sparse_decode import dense_masked_reference, sparse_decode_reference
from compendium.papers import async_spade as paper
from compendium.runtime import make_rng

KW = dict(sinks=2, local=4, page_size=8, window=6, ridge_lambda=1.0, ar_order=2)


def _qk(seed=0, b=2, h=4, hkv=2, t=40, d=16):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(b, h, t, d, generator=g), torch.randn(b, hkv, t, d, generator=g)


@pytest.fixture(scope="module")
def tiny_models():
    s = paper.ModelSettings(context=64, d_model=32, num_layers=2, num_heads=4, num_kv_heads=2, short_context=32,
                            short_batch_size=3, max_short_steps=3, long_steps=2, batch_size=2, num_models=2)
    return [paper.train_model(s, i)[0] for i in range(2)]


# ---------------------------------------------------------------- shapes
def test_shapes(tiny_models):
    tokens, answer = paper.make_sequences(3, 64, make_rng(0))
    assert tokens.shape == answer.shape == (3, 64) and answer.sum() == 3 * ((64 - 9) // 16)
    cap = []
    logits = tiny_models[0](torch.from_numpy(tokens), capture=cap)
    assert logits.shape == (3, 64, paper.lm.VOCAB)
    assert cap[0][0].shape == (3, 4, 64, 8) and cap[0][1].shape == (3, 2, 64, 8)
    Q, K = _qk()
    for method in ("full", "quest", "last", "mean", "ridge", "oracle"):
        assert paper.select(method, Q, K, 16, **KW).shape == (2, 2, 40, 40)
    assert paper.predict_queries(Q, "ridge", 6, 1.0, 2).shape == Q.shape


# ---------------------------------------------------------------- properties
def test_selection_sizes_and_causality():
    Q, K = _qk()
    t = Q.shape[2]
    for method in ("quest", "ridge", "oracle"):
        mask = paper.select(method, Q, K, 16, **KW)
        assert not (mask & ~torch.ones(t, t, dtype=torch.bool).tril()).any(), "never a future key"
        cand = (torch.arange(t)[None, :] >= 2) & (torch.arange(t)[None, :] <= torch.arange(t)[:, None] - 4)
        chosen = (mask & cand).sum(-1)
        assert (chosen <= 16).all()
        if method != "quest":                                 # token level fills the budget exactly
            assert (chosen == torch.clamp(cand.sum(-1), max=16)).all()
        steps = torch.arange(t)
        assert mask[..., steps >= 2, :2].all(), "sinks are kept once they exist"
    assert torch.equal(paper.select("full", Q, K, 16, **KW)[0, 0], torch.ones(t, t, dtype=torch.bool).tril())


def test_predictors_use_only_the_past_and_ridge_limits():
    Q, _ = _qk(t=30)
    Q2 = Q.clone()
    Q2[..., 20:, :] += 100.0                                  # change the future of step 20
    for p in ("last", "mean", "ridge", "ridge_shuffled"):
        a = paper.predict_queries(Q, p, 6, 1.0, 2)[..., :21, :]
        b = paper.predict_queries(Q2, p, 6, 1.0, 2)[..., :21, :]
        assert torch.allclose(a, b), p
    # a huge ridge shrinks to "copy the last query"
    big = paper.predict_queries(Q, "ridge", 6, 1e9, 2)
    assert torch.allclose(big[..., 8:, :], Q[..., 7:-1, :], atol=1e-4)
    # an exactly AR(1) sequence q_{t+1} = 0.9 q_t is recovered with a tiny ridge
    base = torch.randn(1, 2, 1, 8, dtype=torch.float64)
    ar = base * 0.9 ** torch.arange(30, dtype=torch.float64).view(1, 1, 30, 1)
    pred = paper.predict_queries(ar, "ridge", 6, 1e-9, 2)
    assert torch.allclose(pred[..., 8:, :], ar[..., 8:, :], rtol=1e-5)
    # a rotating query (exactly AR(2): q_{t+1} = 2 cos(th) q_t - q_{t-1}) is predicted by the ridge;
    # the control fits the same ridge on shifted targets and loses the temporal structure
    th = torch.arange(30, dtype=torch.float64) * 0.5
    rot = torch.stack([th.cos(), th.sin()], -1).view(1, 1, 30, 2)
    fit = paper.predict_queries(rot, "ridge", 6, 1e-9, 2)
    assert torch.allclose(fit[..., 8:, :], rot[..., 8:, :], atol=1e-5)
    shuffled = paper.predict_queries(rot, "ridge_shuffled", 6, 1e-9, 2)
    assert ((shuffled[..., 8:, :] - rot[..., 8:, :]).norm(dim=-1) > 0.3).all()
    # ...and shrinks to "copy the last query" like the ridge
    big = paper.predict_queries(Q, "ridge_shuffled", 6, 1e9, 2)
    assert torch.allclose(big[..., 8:, :], Q[..., 7:-1, :], atol=1e-4)


def test_quest_bound_and_oracle_recall():
    assert paper.quest_bound_slack(200, make_rng(1)) >= -1e-9
    Q, K = _qk(1)
    probs = paper.true_attention(Q, K)
    oracle = paper.select("oracle", Q, K, 16, **KW)
    rec, mass = paper.recall_and_mass(oracle, oracle, probs, 16, 2, 4)
    assert np.allclose(rec, 1.0) and (mass <= 1 + 1e-6).all()
    full = paper.select("full", Q, K, 16, **KW)
    _, mass_full = paper.recall_and_mass(full, oracle, probs, 16, 2, 4)
    assert np.allclose(mass_full, 1.0, atol=1e-5)


# ---------------------------------------------------------------- references
def test_quest_scores_against_brute_force():
    Q, K = _qk(2, b=1, t=21)
    b, h, t, d = Q.shape
    scores = paper.sparse.quest_page_scores(Q, K, 2, 4, 8)                  # (1, 2, T, 3)
    for step in (10, 17, 20):
        last = step - 4
        for g in range(2):
            for page in range(3):
                keys = [j for j in range(page * 8, page * 8 + 8) if 2 <= j <= last]
                if not keys:
                    assert scores[0, g, step, page] == float("-inf")
                    continue
                kk = K[0, g, keys]
                want = sum(float(torch.maximum(Q[0, hh, step] * kk.min(0).values, Q[0, hh, step] * kk.max(0).values).sum())
                           for hh in (2 * g, 2 * g + 1))
                assert math.isclose(float(scores[0, g, step, page]), want, rel_tol=1e-4, abs_tol=1e-4)


def test_masked_forward_equals_sparse_reference():
    g = torch.Generator().manual_seed(3)
    q, k, v = torch.randn(2, 4, 16, generator=g), torch.randn(2, 2, 37, 16, generator=g), torch.randn(2, 2, 37, 16, generator=g)
    idx = torch.argsort(torch.rand(2, 2, 37, generator=g), -1)[..., :11]
    assert (sparse_decode_reference(q, k, v, idx) - dense_masked_reference(q, k, v, idx)).abs().max() < 1e-5
    kmin, kmax, valid = page_metadata(k, 16, length=30)
    assert valid.tolist() == [[True, True, False]] * 2
    assert torch.equal(kmin[:, :, 1], k[:, :, 16:30].amin(2))
    assert quest_scores_reference(q, kmin, kmax).shape == (2, 2, 3)
    assert paper.kernel_exactness(20, make_rng(0)) < 1e-5


def test_decode_loop_matches_model(tiny_models):
    model = tiny_models[0]
    tokens = torch.from_numpy(paper.make_sequences(1, 64, make_rng(4))[0][0])
    kw = dict(budget=16, sinks=2, local=4, window=6, ridge_lambda=1.0, ar_order=2, page_size=4)
    with torch.no_grad():
        reference = model(tokens[None])[0]  # (T, V) full forward, dense causal attention
    for mode in ("full", "sync", "quest", "async"):
        logits = []
        times, sel, events = paper.timed_decode(model, tokens, 50, 5, mode, logits=logits, **kw)
        assert times.shape == sel.shape == (5,) and (times > 0).all() and len(logits) == 5
        if mode == "full":  # the KV-cached loop is the model's own forward, step by step
            torch.testing.assert_close(torch.stack(logits), reference[50:55], atol=1e-5, rtol=1e-5)
    # with a budget covering every candidate, sparse selection equals full attention too
    wide = dict(kw, budget=64)
    for mode in ("sync", "quest"):
        logits = []
        paper.timed_decode(model, tokens, 50, 5, mode, logits=logits, **wide)
        torch.testing.assert_close(torch.stack(logits), reference[50:55], atol=1e-5, rtol=1e-5)
    idx = paper.select_indices(torch.randn(1, 4, 50, 8), torch.randn(1, 2, 50, 8), **{k: kw[k] for k in kw if k != "page_size"})
    assert idx.shape == (1, 2, 16 + 2 + 4) and idx.max() <= 50


# ---------------------------------------------------------------- config and tiny run
def test_config_validation():
    with pytest.raises(ValueError):
        paper.Config(budgets=(60,))
    with pytest.raises(ValueError):
        paper.Config(ar_order=8, window=8)
    with pytest.raises(ValueError):
        paper.Config(ridge_lambda=0.0)
    assert paper.Config(budgets=[16, 32]).budgets == (16, 32)


def test_tiny_run_is_deterministic(tiny_models):
    config = paper.Config(model_seeds=2, eval_sequences=2, budgets=(16,), accuracy_budget=16, page_size=8,
                          sink_tokens=2, local_tokens=4, window=6, exactness_shapes=5, quest_bound_cases=20,
                          bootstrap_resamples=100, timing_steps=3)
    a = paper.run(config, tiny_models, with_timing=False)
    b = paper.run(config, tiny_models, with_timing=False)
    assert a.recall.keys() == b.recall.keys()
    for key in a.recall:
        assert np.array_equal(a.recall[key], b.recall[key]) and a.recall[key].shape == (4,)
    assert a.estimates == b.estimates and a.accuracy.keys() == {"full", "ridge", "last", "quest", "oracle", "random"}
    assert a.answer_mass.keys() == {"oracle", "ridge", "last", "mean", "quest", "ridge_shuffled"}
    assert {"ridge_shuffled_minus_last_16", "accuracy_oracle_minus_quest"} <= a.estimates.keys()
    np.testing.assert_allclose(a.per_model["accuracy_oracle_minus_quest"], 100 * (a.accuracy["oracle"] - a.accuracy["quest"]))
    np.testing.assert_allclose(a.per_model["accuracy_random_minus_quest"], 100 * (a.accuracy["random"] - a.accuracy["quest"]))
    assert a.estimates["drift_ridge_minus_last_16"].n == 2 and a.estimates["drift_ridge_minus_last_16"].unit == "drift replicates"
    assert a.drift["cos_lag1"] > 0.8
    for m, v in a.answer_mass.items():
        assert v.shape == (2,) and ((0 <= v) & (v <= 1 + 1e-6)).all()
        assert (v <= a.answer_mass["oracle"] + 1e-6).all() or m == "quest", "the oracle keeps the most mass among top-B sets"
    assert np.allclose(a.recall[("oracle", 16)], 1.0)
    with pytest.raises(ValueError):
        paper.run(dataclasses.replace(config, budgets=(64,)), tiny_models)
    c = paper.run(config, tiny_models, with_timing=True)
    assert {"full", "sync", "async", "t_fwd", "t_sel", "overlap_ratio"} <= set(c.timing)


def test_asset_sizes_follow_the_power_analysis():
    smoke, full = paper.settings_for("smoke"), paper.settings_for("full")
    # one recipe at both scales (model i is the same decoder); smoke 3 (CI budget), full 16 (power analysis)
    assert smoke == paper.ModelSettings(num_models=3)
    assert full == dataclasses.replace(smoke, num_models=16)
    # the 16 are the power analysis on the 5-model version's seed-0 ridge-minus-last spread at B=64
    seed0_b64 = np.array([0.004712492227554321, -0.0017203539609909058, 0.00616881251335144,
                          -0.017112545669078827, -0.0021319687366485596])
    assert paper.models_for_resolution(seed0_b64, paper.MIN_RECALL_EFFECT) == full.num_models
    with pytest.raises(ValueError):
        paper.settings_for("huge")
    with pytest.raises(ValueError):
        paper.Config(model_seeds=1)  # an interval over models needs two at least


@pytest.mark.slow  # trains one smoke-scale decoder (about 20 s of CPU)
def test_training_learns_the_lookup():
    """The smoke recipe learns the long-range lookup (the first version stayed at chance), and the
    first phase stops as soon as the held-out check passes."""
    s = paper.settings_for("smoke")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        _, metrics = paper.train_model(s, 0)
    finally:
        torch.set_num_threads(threads)
    assert metrics["recall_accuracy"] >= 0.9
    assert metrics["short_check_accuracy"] >= s.target_accuracy
    assert metrics["short_steps"] < s.max_short_steps and metrics["short_steps"] % s.check_every == 0


class _FakeStream:
    def __init__(self, log):
        self.log = log

    def wait_event(self, event):
        self.log.append(("wait", event))

    def synchronize(self):
        self.log.append(("sync",))


class _FakeCuda:
    def __init__(self, log):
        self.log = log

    def stream(self, side):
        log = self.log

        class _Ctx:
            def __enter__(self):
                log.append(("enter",))

            def __exit__(self, *exc):
                log.append(("exit",))

        return _Ctx()


def test_side_stream_waits_for_the_main_stream_before_reading():
    log = []
    side = _FakeStream(log)
    marked = []

    a = torch.zeros(2)
    a.record_stream = lambda s: marked.append(s)  # noqa: E731 (instance attribute shadows the method)

    def fn(x):
        log.append(("run",))
        return x + 1

    out = paper.run_on_side_stream(fn, (a,), side, "ready-event", cuda=_FakeCuda(log))
    assert torch.equal(out, torch.ones(2))
    assert log == [("wait", "ready-event"), ("enter",), ("run",), ("exit",), ("sync",)]
    assert marked == [side]
    assert torch.equal(paper.run_on_side_stream(fn, (a,), None, None), torch.ones(2))  # CPU: direct call


def test_model_level_estimates_and_power():
    cfg = paper.Config(model_seeds=3, eval_sequences=2, budgets=(64,))
    recall = {(m, 64): np.arange(6, dtype=float) * (0.1 if m == "ridge" else 0.05) for m in ("ridge", "quest", "last")}
    accuracy = {"ridge": np.array([0.5, 0.6, 0.7]), "quest": np.array([0.5, 0.5, 0.5])}
    per_model, est = paper.model_level_differences(recall, accuracy, cfg)
    np.testing.assert_allclose(per_model["ridge_minus_quest_64"], [0.025, 0.125, 0.225])
    assert est["ridge_minus_last_64"].n == 3 and est["ridge_minus_last_64"].unit == "trained models"
    np.testing.assert_allclose(per_model["accuracy_ridge_minus_quest"], [0, 10, 20])
    n = paper.models_for_resolution(np.array([0.0, 0.01, -0.01, 0.005, -0.005]), 0.01)
    assert n > 5
    assert paper.models_for_resolution(np.array([0.0, 1e-6]), 0.01) == 2


def test_cost_model_curve_and_crossover():
    curve = paper.cost_model_curve([256, 512, 1024], 64, 16, 8)
    np.testing.assert_allclose(curve["vs_quest"], [136 / 160, 136 / 192, 136 / 256])
    np.testing.assert_allclose(curve["vs_full"], [136 / 512, 136 / 1024, 136 / 2048])
    t = paper.crossover_context(0.8, 64, 16, 8)
    assert paper.cost_model(t, 64, 16, 8)["token_async"] / paper.cost_model(t, 64, 16, 8)["quest"] <= 0.8
    assert paper.cost_model(t - 16, 64, 16, 8)["token_async"] / paper.cost_model(t - 16, 64, 16, 8)["quest"] > 0.8


# ---------------------------------------------------------------- controls
def test_random_selector_ignores_queries_and_fills_the_budget():
    Q, K = _qk()
    t = Q.shape[2]
    a = paper.select("random", Q, K, 16, random_seed=3, **KW)
    b = paper.select("random", -5 * Q + 1, K, 16, random_seed=3, **KW)      # other queries: same set
    assert torch.equal(a, b)
    assert not torch.equal(a, paper.select("random", Q, K, 16, random_seed=4, **KW))
    cand = (torch.arange(t)[None, :] >= 2) & (torch.arange(t)[None, :] <= torch.arange(t)[:, None] - 4)
    assert ((a & cand).sum(-1) == torch.clamp(cand.sum(-1), max=16)).all()
    # a random set recalls about B / candidates of the oracle set, far less than the oracle itself
    oracle = paper.select("oracle", Q, K, 16, **KW)
    probs = paper.true_attention(Q, K)
    r, _ = paper.recall_and_mass(a, oracle, probs, 16, 2, 4)
    assert r.mean() < 0.8


def test_drift_language_has_the_premise_and_ridge_beats_last_on_it():
    Q, K = paper.drift_language(2, 4, 2, 80, 8, make_rng(0))
    assert Q.shape == (2, 4, 80, 8) and K.shape == (2, 2, 80, 8)
    np.testing.assert_allclose(Q.std(dim=(2, 3), correction=0).numpy(), 1.0, rtol=1e-4)
    assert paper.query_cosine_by_lag(Q, 1)[0] > 0.8              # slow drift, unlike the toy's queries
    with pytest.raises(ValueError):
        paper.drift_language(1, 1, 1, 10, 2, make_rng(0), ar=(1.0, 0.5))   # not stationary
    cfg = paper.Config(model_seeds=2, eval_sequences=2, budgets=(16,), accuracy_budget=16, page_size=8,
                       sink_tokens=2, local_tokens=4, window=6)
    out = paper.drift_control(cfg, 4, 2, 64, 8)
    assert out["per_model"]["drift_ridge_minus_last_16"].shape == (2,)
    assert np.allclose(out["recall"][("oracle", 16)], 1.0)
    # where the target drifts along an AR(2), the fitted ridge predicts better than the last query
    assert out["prediction_cosine"]["ridge"] > out["prediction_cosine"]["last"]
    assert (out["per_model"]["drift_ridge_minus_last_16"] > 0).all()
