"""Tests for compendium.papers.ccc_grpo_regression: shapes, properties, references, a tiny run."""

import numpy as np
import pytest
import sympy as sp
import torch

from compendium.papers import ccc_grpo_regression as paper
from compendium.papers.ccc_grpo_regression import policy

TINY = dict(num_seeds=2, train_size=600, test_size=200, sft_steps=15, grpo_steps=3, batch_sizes=(16, 64),
            real_train_cap=300, hidden_size=16)


# ----------------------------------------------------------------------------------- shapes
def test_shapes():
    rng = np.random.default_rng(0)
    preds, y = torch.as_tensor(rng.normal(size=(3, 10, 4))), torch.as_tensor(rng.normal(size=(3, 10)))
    assert paper.ccc_loo_rewards(preds, y).shape == (3, 10, 4)
    assert paper.pointwise_rewards(preds, y, torch.ones(3)).shape == (3, 10, 4)
    task = paper.longtail_task(500, 100, rng=rng)
    assert task.x_train.shape == (500, 16) and task.x_test.shape == (100, 16)
    assert task.centers.shape == (100,) and set(task.test_region) <= set(paper.REGIONS)
    counts = np.bincount(paper.to_bins(task.y_train, task.edges), minlength=100)
    assert paper.SUPPORT_MIN == 5
    assert np.array_equal(task.test_supported, counts[paper.to_bins(task.y_test, task.edges)] >= paper.SUPPORT_MIN)
    assert task.test_supported[task.test_region != "few"].all()        # many and medium bins have >= 20
    assert np.array_equal(paper.supported_bins([0, 0, 1, 2, 2, 2], 4, minimum=2), [True, False, True, False])
    model = paper.EnsembleMLP([1, 2, 3], 16, 8, 100)
    assert model(torch.zeros(3, 5, 16)).shape == (3, 5, 100)
    assert policy.pad_members([np.ones((2, 3)), np.ones((4, 2))], 5).shape == (2, 4, 5)


# ------------------------------------------------------------------------------- properties
def test_ccc_bounds_equality_and_shift_scale():
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=(200, 30)), rng.normal(size=(200, 30))
    c = paper.ccc(x, y)
    assert (c >= -1).all() and (c <= 1).all()
    assert paper.ccc(-y[0], y[0]) >= -1 - 1e-12
    assert np.allclose(paper.ccc(y, y), 1.0)
    z = y[0]
    for shifted in (z + 0.5, 1.5 * z, 0.7 * z - 0.2):
        assert paper.ccc(shifted, z) < 1 - 1e-3
        assert paper.pearson(shifted, z) == pytest.approx(1.0)


def test_sympy_identities():
    assert sp.simplify(paper.ccc_identity_gap()) == 0
    assert all(sp.simplify(g) == 0 for g in paper.ccc_bound_gaps())
    assert all(sp.simplify(g) == 0 for g in paper.ccc_shift_scale())


def test_reward_argmax_calibrated_and_compressed():
    y = np.clip(np.exp(np.log(10) + 0.8 * np.random.default_rng(3).standard_normal(64)), 0.5, 79)
    centers = np.arange(200) * 0.8 + 0.4                     # wide enough that the argmax is interior
    top = int(np.argmax(y))
    assert abs(paper.reward_argmax(y, y, top, centers) - y[top]) <= 0.8
    compressed = y.mean() + 0.5 * (y - y.mean())
    assert paper.reward_argmax(y, compressed, top, centers) > y[top] + 0.8


def test_lds_weights_and_regions_and_metrics():
    bins = np.array([0] * 200 + [5] * 50 + [9] * 3)
    w = paper.lds_weights(bins, 10)
    assert w.mean() == pytest.approx(1.0)
    assert w[-1] > w[210] > w[0]
    regions = paper.shot_regions(bins, 10)
    assert regions[0] == "many" and regions[5] == "medium" and regions[9] == "few" and regions[3] == "few"
    y = np.linspace(1, 10, 50)
    assert paper.rtm_slope(y, y) == pytest.approx(1.0)
    assert paper.rtm_slope(y, 0.5 * y + 3) == pytest.approx(0.5)
    assert paper.gm_error([0, 0], [1, 4]) == pytest.approx(2.0)
    assert paper.to_bins([-1, 0.5, 99], paper.value_grid(0, 10, 10)).tolist() == [0, 0, 9]


# ------------------------------------------------------------------------------- references
def test_loo_rewards_equal_bruteforce_loop():
    rng = np.random.default_rng(4)
    preds, y = rng.normal(20, 8, (2, 12, 5)), rng.lognormal(2, 0.8, (2, 12))
    fast = paper.ccc_loo_rewards(torch.as_tensor(preds), torch.as_tensor(y)).numpy()
    for k in range(2):
        assert np.abs(fast[k] - paper.ccc_loo_rewards_bruteforce(preds[k], y[k])).max() < 1e-12


def test_ensemble_training_equals_separate_training():
    rng = np.random.default_rng(5)
    tasks = [paper.longtail_task(300, 50, rng=np.random.default_rng(s)) for s in (1, 2)]
    bins = [paper.to_bins(t.y_train, t.edges) for t in tasks]
    joint = paper.EnsembleMLP([11, 12], 16, 8, 100)
    paper.sft_train(joint, [t.x_train for t in tasks], bins, [np.ones(300)] * 2, steps=5, batch_size=16,
                    rngs=[np.random.default_rng(21), np.random.default_rng(22)])
    for m, (seed, t, b) in enumerate(zip((11, 12), tasks, bins)):
        alone = paper.EnsembleMLP([seed], 16, 8, 100)
        paper.sft_train(alone, [t.x_train], [b], [np.ones(300)], steps=5, batch_size=16,
                        rngs=[np.random.default_rng(21 + m)])
        assert torch.allclose(alone.w2[0], joint.w2[m], atol=1e-6)
    assert rng is not None


def test_grpo_pointwise_arm_raises_its_reward():
    task = paper.longtail_task(400, 50, rng=np.random.default_rng(6))
    model = paper.EnsembleMLP([3], 16, 16, 100)
    out = paper.grpo_train(model, model.select([0]), ["pointwise"], [task.x_train], [task.y_train], [task.centers],
                           steps=60, batch_size=32, group_size=8, learning_rate=3e-3, clip_eps=0.2, kl_coef=0.0,
                           inner_updates=2, reward_scale=[float(task.y_train.std())],
                           batch_rngs=[np.random.default_rng(0)], generator=torch.Generator().manual_seed(0))
    r = out["reward"][:, 0]
    assert r[-10:].mean() > r[:10].mean() + 0.2
    assert (out["clip_fraction"] >= 0).all() and out["reward"].shape == (60, 1)


# ----------------------------------------------------------------------------------- a tiny run
def test_config_rejects_bad_values():
    with pytest.raises(ValueError):
        paper.Config(num_seeds=1)
    with pytest.raises(ValueError):
        paper.Config(distribution="gamma")
    with pytest.raises(ValueError):
        paper.Config(batch_sizes=(2, 64))
    with pytest.raises(ValueError):
        paper.Config(pareto_toy="yes")


def test_tiny_run_is_deterministic():
    config = paper.Config(**TINY)
    a, b = paper.run(config), paper.run(config)
    for task in a.metrics:
        for method in a.metrics[task]:
            for key, values in a.metrics[task][method].items():
                assert np.array_equal(values, b.metrics[task][method][key], equal_nan=True), (task, method, key)
    assert set(a.metrics["toy"]) == {"sft", "lds", *paper.ARMS}
    assert set(a.sweep) == {16, 64}
    assert a.checks["bruteforce_gap"] < 1e-10 and a.checks["equal_adv_max"] == 0.0


def test_pareto_toy_runs_apart_and_leaves_the_other_runs_unchanged():
    with_it = paper.run(paper.Config(**TINY, pareto_toy=True))
    without = paper.run(paper.Config(**TINY, pareto_toy=False))
    assert set(with_it.metrics) == set(without.metrics) | {"pareto"}
    assert set(with_it.metrics["pareto"]) == {"sft", "lds", "pointwise", "ccc"}
    for task in without.metrics:
        for method in without.metrics[task]:
            for key, values in without.metrics[task][method].items():
                assert np.array_equal(values, with_it.metrics[task][method][key], equal_nan=True), (task, method, key)
    from compendium.papers.ccc_grpo_regression.experiment import _paired_gain
    gain, wins = _paired_gain(with_it.metrics["pareto"], "sft", "ccc", "mae_few")   # the reported full-range gain
    assert np.isfinite(gain.point) and gain.n == 2 and 0 <= wins <= 2
    # the Pareto toy draws from its own law (median near 8.7, not the log-normal's 10), not a copy
    from compendium.papers.ccc_grpo_regression.tasks import longtail_task
    a = longtail_task(4000, 10, distribution="lognormal", rng=np.random.default_rng(0)).y_train
    b = longtail_task(4000, 10, distribution="pareto_mixture", rng=np.random.default_rng(0)).y_train
    assert np.median(b) < 9.3 < np.median(a)


def test_predict_median_and_greedy_read_outs():
    model = paper.EnsembleMLP([0], 4, 8, 5)
    probs = torch.tensor([0.1, 0.15, 0.2, 0.1, 0.45])             # cdf 0.1, 0.25, 0.45, 0.55, 1.0
    with torch.no_grad():
        model.w2.zero_()
        model.b2.copy_(probs.log()[None, None, :])
    centers = np.arange(5.0) * 10
    x = [np.random.default_rng(0).normal(size=(3, 4))]
    assert paper.predict(model, x, [centers])[0].tolist() == [30.0] * 3          # first bin with cdf >= 1/2
    assert paper.predict(model, x, [centers], "greedy")[0].tolist() == [40.0] * 3
    with pytest.raises(ValueError):
        paper.predict(model, x, [centers], "mean")
