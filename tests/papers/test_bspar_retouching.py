"""Tests for compendium.papers.bspar_retouching: the world, the reward, the trainer, a tiny run."""

import dataclasses
import json
import math

import numpy as np
import pytest
import scipy.stats
import torch

from compendium.papers import bspar_retouching as paper
from compendium.rl.grpo import group_advantages, masked_group_advantages

TINY = dict(iterations=4, images_per_iteration=2, seed_blocks=1, seeds_per_block=2, eval_every=2, eval_images=8,
            train_images=16, test_images=8, final_rollouts=1, pool_size=8, anchor_size=4)


def _world(n=5, seed=0):
    rng = np.random.default_rng(seed)
    return paper.make_world(np.clip(rng.normal(8, 5, (n, 64)), 0, 16), np.arange(n), rng), rng


# ---------------------------------------------------------------- the world
def test_actions_and_micro_edits():
    delta, micro = paper.action_table()
    assert delta.shape == (17, 4) and micro.shape == (17,)
    assert not delta[paper.STOP].any()
    assert micro.sum() == 4 and set(np.nonzero(micro)[0]) == {5, 6, 9, 10}     # small contrast / saturation
    assert np.allclose(np.abs(delta[micro]).sum(1), 0.2)


def test_closed_form_statistics_equal_pixels_and_decode_inverts():
    world, rng = _world()
    looks = rng.uniform(-4, 4, (5, 4))
    images = paper.render(world.luma, world.chroma, looks)
    assert images.shape == (5, 16, 16, 3)
    closed = paper.image_statistics(looks)
    assert np.abs(paper.image_statistics_rendered(images) - closed).max() < 1e-10
    assert np.abs(paper.decode_look(closed) - looks).max() < 1e-9
    t = paper.image_statistics(torch.as_tensor(looks))                     # the torch path agrees
    assert torch.allclose(t, torch.as_tensor(closed))


def test_oracle_success_is_greedy_and_stops():
    world, _ = _world(n=3)
    target = np.zeros((3, 4))
    as_shot = np.array([[2.0, 0, 0, 0], [0, 0, 0, 0], [0.5, 0, 0, 0]])
    world = dataclasses.replace(world, as_shot=as_shot, target=target)
    sig = lambda x: 1 / (1 + np.exp(-x))                                       # noqa: E731
    # two big steps reach the target; at the target it stops (0.5); from 0.5 the big step does not
    # help, two small ones leave 0.1 and a third would not lower the distance
    got = paper.oracle_success(world, horizon=6)
    assert np.allclose(got, [sig(2.0), 0.5, sig(0.4)])
    assert np.allclose(paper.oracle_success(world, horizon=1), [sig(1.0), 0.5, sig(0.2)])
    assert np.allclose(paper.oracle_success(world, horizon=6, slope=2.0)[0], sig(4.0))


def test_rater_and_proxy():
    assert paper.human_probability(2.0, 2.0) == 0.5
    assert paper.human_probability(3.0, 1.0, slope=1.0) == pytest.approx(1 / (1 + math.exp(-2)))
    assert paper.proxy_gain(3.0, 2.0, 4, gamma=1.0) == 5.0 and paper.proxy_gain(3.0, 2.0, 4, gamma=0.0) == 1.0


# ---------------------------------------------------------------- the reward
def test_beta_posterior_against_scipy():
    m, k, s, n = 0.3, 4.0, 2.5, 6.0
    mean, var = paper.beta_posterior(m, k, s, n)
    ref = scipy.stats.beta(k * m + s, k * (1 - m) + n - s)
    assert mean == pytest.approx(ref.mean()) and var == pytest.approx(ref.var())
    with pytest.raises(ValueError):
        paper.beta_posterior(0.5, 0.0, 0.0, 0.0)


def test_symbolic_checks_are_zero():
    checks = paper.symbolic_checks()
    assert all(v == 0 for v in checks.values())


def test_numeric_checks():
    out = paper.numeric_checks(30, np.random.default_rng(0))
    assert out["no_labels_gap"] < 1e-12 and out["monotone_min_change"] >= 0
    assert out["group_sum_max"] < 1e-9 and out["tied_group_max"] == 0 and out["masked_full_gap"] < 1e-12
    assert out["clip_outside_grad"] == 0 and out["clip_inside_grad_min"] > 0.1
    assert out["statistics_gap"] < 1e-9 and out["decode_gap"] < 1e-9


def test_kernel_counts_and_bandwidth_against_loops():
    g = torch.Generator().manual_seed(0)
    f, pf = torch.randn(2, 5, 3, generator=g), torch.randn(2, 6, 3, generator=g)
    py = torch.bernoulli(torch.full((2, 6), 0.5), generator=g)
    pv = torch.tensor([[1, 1, 1, 0, 1, 1], [1, 0, 0, 0, 0, 0]], dtype=torch.bool)
    h = paper.median_bandwidth(pf, pv)
    d = [np.linalg.norm(pf[0, i] - pf[0, j]) for i in range(6) for j in range(6) if i != j and pv[0, i] and pv[0, j]]
    lower_median = sorted(d)[(len(d) - 1) // 2]                               # torch.nanmedian: the lower median
    assert h[0].item() == pytest.approx(lower_median, rel=1e-6) and h[1].item() == 1.0   # one entry: fallback 1
    succ, trials = paper.kernel_pooled_counts(f, pf, py, pv, h)
    for m in range(2):
        for i in range(5):
            w = [math.exp(-float(((f[m, i] - pf[m, j]) ** 2).sum()) / (2 * h[m] ** 2)) * bool(pv[m, j]) for j in range(6)]
            assert trials[m, i].item() == pytest.approx(sum(w), rel=1e-5)
            assert succ[m, i].item() == pytest.approx(sum(wj * float(py[m, j]) for j, wj in enumerate(w)), rel=1e-5, abs=1e-7)


def test_bayes_reward_limits():
    g = torch.Generator().manual_seed(1)
    proxy, f = torch.randn(1, 8, generator=g, dtype=torch.float64), torch.randn(1, 8, 3, generator=g, dtype=torch.float64)
    pf, py = f[:, :3].clone(), torch.tensor([[1.0, 0.0, 1.0]], dtype=torch.float64)
    pv = torch.ones(1, 3, dtype=torch.bool)
    r, var = paper.bayes_reward(proxy, f, pf, py, pv, strength=1e-9)
    succ, trials = paper.kernel_pooled_counts(f, pf, py, pv, paper.median_bandwidth(pf, pv))
    assert torch.allclose(r, succ / trials, atol=1e-8)                       # kappa -> 0: kernel label frequency
    assert (var > 0).all() and (r > 0).all() and (r < 1).all()
    # a labelled trajectory sits in its own pool entry with weight 1
    big = paper.bayes_reward(proxy, f, pf, py, pv, strength=4.0, bandwidth_scale=1e-6)[0]
    z = torch.sigmoid(paper.standardise(proxy))
    assert big[0, 0].item() == pytest.approx((4 * z[0, 0].item() + 1) / 5)
    assert torch.allclose(big[0, 3:], z[0, 3:])                             # no neighbours: the prior


def test_masked_group_advantages():
    r = torch.tensor([[1.0, 0.0, 5.0, 1.0], [1.0, 1.0, 0.0, 7.0], [2.0, 3.0, 4.0, 5.0]])
    mask = torch.tensor([[1, 1, 0, 1], [1, 1, 0, 0], [0, 0, 1, 0]], dtype=torch.bool)
    a = masked_group_advantages(r, mask)
    assert a[0, 2] == 0 and abs(float(a[0].sum())) < 1e-6
    ref = group_advantages(torch.tensor([[1.0, 0.0, 1.0]]))[0]
    assert torch.allclose(a[0, [0, 1, 3]], ref)
    assert (a[1] == 0).all() and (a[2] == 0).all()                           # tied valid rewards; one valid reward
    full = torch.randn(6, 8, generator=torch.Generator().manual_seed(2))
    assert torch.allclose(masked_group_advantages(full, torch.ones_like(full, dtype=torch.bool)), group_advantages(full))


def test_advantage_redraw_variance():
    R = torch.tensor([[0.0, 1.0, 0.0, 1.0], [0.0, 1.0, 0.0, 1.0]])
    assert paper.advantage_redraw_variance(R, group_size=2).item() == 0.0     # nothing changes between draws
    R2 = torch.tensor([[0.0, 1.0], [1.0, 0.0]])
    assert paper.advantage_redraw_variance(R2, group_size=2).item() > 0


# ---------------------------------------------------------------- policy, planner, rollouts
def test_heuristic_prior_is_a_distribution_and_fixes_exposure():
    look = torch.tensor([[2.0, 0.0, 0.0, 0.5], [0.1, 2.0, -2.0, 0.1]])
    p = paper.heuristic_prior(paper.image_statistics(look))
    assert torch.allclose(p.sum(-1), torch.ones(2))
    assert p[0].argmax().item() == 0                                          # exposure -big
    assert p[1].argmax().item() in range(4, 12) or p[1].argmax().item() == paper.STOP
    assert abs(p[1, 4:12].sum().item() + p[1, paper.STOP].item() - (0.5 + 9 * 0.5 / 17)) < 1e-6


def test_policy_init_is_per_seed_and_models_are_independent():
    pol = paper.BatchedPolicy([3, 3, 4])
    assert torch.equal(pol.w[0][0], pol.w[0][1]) and not torch.equal(pol.w[0][0], pol.w[0][2])
    x = torch.randn(3, 5, 11)
    logits = pol(x)
    assert logits.shape == (3, 5, 17)
    logits[0].sum().backward()
    assert pol.w[0].grad[1:].abs().max() == 0 and pol.w[0].grad[0].abs().max() > 0


def test_rollout_masks_and_stop():
    pol = paper.BatchedPolicy([0, 1])
    with torch.no_grad():                                                     # force STOP at the first step
        pol.b[-1][0, 0, paper.STOP] = 50.0
    start = torch.ones(2, 3, 4)
    ro = paper.rollout(pol, start, torch.zeros(2, 3, 4), 6, torch.Generator().manual_seed(0))
    assert ro.actions.shape == ro.alive.shape == (2, 3, 6) and ro.inputs.shape == (2, 3, 6, 11)
    assert (ro.actions[0, :, 0] == paper.STOP).all() and not ro.alive[0, :, 1:].any()
    assert torch.equal(ro.final[0], start[0]) and ro.alive[:, :, 0].all()
    delta, _ = paper.action_table()
    edits = ro.alive[1] & (ro.actions[1] != paper.STOP)
    moved = (torch.as_tensor(delta, dtype=torch.float32)[ro.actions[1]] * edits[..., None]).sum(1)
    assert torch.allclose(ro.final[1], start[1] + moved)


# ---------------------------------------------------------------- tiny runs
@pytest.fixture(scope="module")
def tiny_asset(tmp_path_factory):
    settings = dataclasses.replace(paper.settings_for("smoke"), **TINY)
    trainer, record = paper.train_all(settings, seed=0)
    path = tmp_path_factory.mktemp("asset")
    (path / "runs.json").write_text(json.dumps(record))
    torch.save({"weights": [w.detach() for w in trainer.policy.w], "biases": [b.detach() for b in trainer.policy.b]},
               path / "policies.pt")
    return path, record, settings


def test_tiny_training_record(tiny_asset):
    _, record, settings = tiny_asset
    M = len(settings.arms) * 2
    assert len(record["model_arm"]) == M and record["curve_iterations"] == [0, 2, 4]
    assert np.array(record["curves"]["success"]).shape == (M, 3)
    assert record["labels_per_model"] == settings.iterations * round(0.1 * 16)
    s = np.array(record["final"]["success"])
    assert ((s > 0) & (s < 1)).all()
    _, again = paper.train_all(settings, seed=0)                               # deterministic
    assert again["final"] == record["final"]


def test_tiny_run_and_measurements(tiny_asset):
    path, record, settings = tiny_asset
    config = paper.Config(seed=0, variance_redraws=4, variance_images=2, monotonicity_instances=5)
    result = paper.run(config, path)
    assert set(result.final) == set(settings.arms) and result.final["bspar"]["success"].shape == (2,)
    assert result.variance["ratio"].shape == (2,) and (result.variance["ratio"] > 0).all()
    assert paper.auc(result, "bspar").shape == (2,) and paper.entropy_at(result, "no_anchor").shape == (2,)
    m = paper.measurements(result)
    assert m["headline_b2"].n == 2 and m["headline_b2"].unit == paper.UNIT and m["headline_b2"].level == 0.9
    assert m["shuffled_vs_b3"].n == 2 and 0 <= m["collapsed_seeds"] <= 2
    assert np.isclose(m["premise_success"].point, np.mean(result.final["bspar"]["success"] - result.final["b1"]["success"]))
    F = result.final
    assert np.isclose(m["headline_no_bayes"].point, np.mean(F["bspar"]["success"] - F["no_bayes"]["success"]))
    assert np.isclose(m["headline_shuffled"].point, np.mean(F["bspar"]["success"] - F["shuffled"]["success"]))
    assert m["headline_no_bayes"].n == 2 and m["headline_no_bayes"].level == 0.9
    assert np.isclose(m["floor"].point, np.mean(F["bspar"]["success"]) - paper.DO_NOTHING)
    assert 0.5 <= result.oracle_success < 1 and m["headroom_arm"] in paper.HEADLINE_COMPARATORS
    assert np.isclose(m["headroom"].point, result.oracle_success - np.mean(F[m["headroom_arm"]]["success"]))
    assert all(np.mean(F[m["headroom_arm"]]["success"]) >= np.mean(F[a]["success"]) for a in paper.HEADLINE_COMPARATORS)
    with pytest.raises(ValueError, match="seed"):
        paper.run(dataclasses.replace(config, seed=1), path)


def test_config_validation():
    with pytest.raises(ValueError):
        paper.Config(variance_redraws=1)
    with pytest.raises(ValueError):
        paper.Config(seed=-1)
    with pytest.raises(ValueError):
        paper.settings_for("medium")
