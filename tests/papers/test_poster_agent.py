"""Tests for compendium.papers.poster_agent: the layout environment (reward, hidden text height,
edits, determinism), the policy's masking, the arms' batches and losses (equal samples, the K = 0
identity, the permuted control), a tiny training run and the statistics helpers."""

from dataclasses import replace

import numpy as np
import pytest
import torch

from compendium.papers import poster_agent as paper
from compendium.papers.poster_agent import env as E
from compendium.rl import group_advantages
from compendium.stats import Estimate

TINY = replace(paper.settings_for("smoke"), updates=2, prompts_per_update=2, group_size=4, hidden=8,
               curve_every=1, monitor_prompts=4, num_seeds=2)


def _prompts(n=1, kappa=1.0, present=(1, 1, 1, 0, 0, 0)):
    pres = np.tile(np.array(present, dtype=bool), (n, 1))
    value = np.where(pres, np.array([0.5, 1.0, 0.6, 0.6, 0.6, 0.0]), 0.0)
    return E.Prompts(pres, value, np.full(n, kappa))


def _stacked_layout():
    """Title, image and text stacked with a shared left edge, inside the canvas."""
    lay = np.zeros((1, 6, 4), dtype=int)
    lay[0, 0] = [2, 0, 11, 1]       # x = 2/16, y = 0, w = 12/16, h = 2 bins
    lay[0, 1] = [2, 3, 11, 4]
    lay[0, 2] = [2, 9, 11, 3]
    return lay


def test_reward_components_in_range_and_weights_sum_to_one():
    p = E.LayoutEnv(3, 6, seed=1).sample(300)
    lay = np.random.default_rng(0).integers(0, E.NUM_BINS, size=(300, 6, 4))
    total, parts = E.reward(p, lay, components=True)
    assert set(parts) == set(E.COMPONENTS)
    for v in parts.values():
        assert v.shape == (300,) and np.all((v >= 0) & (v <= 1))
    assert np.allclose(total, sum(w * parts[c] for w, c in zip(E.WEIGHTS, E.COMPONENTS)))
    assert abs(E.WEIGHTS.sum() - 1.0) < 1e-12 and np.all((total >= 0) & (total <= 1))


def test_reward_known_values_on_a_hand_made_layout():
    p = _prompts()
    lay = _stacked_layout()
    _, parts = E.reward(p, lay, components=True)
    assert parts["overlap"][0] == 1.0 and parts["bounds"][0] == 1.0       # stacked, disjoint, inside
    assert parts["alignment"][0] == 1.0 and parts["hierarchy"][0] == 1.0  # shared left edge, tops in order
    # text fit by hand: rendered height kappa * c * length / w, box height (h + 1) / 16 * 1.4
    w = 12 / 16
    need_title, need_text = 0.08 * 0.5 / w, 0.18 * 0.6 / w
    h_title, h_text = 2 / 16 * 1.4, 4 / 16 * 1.4
    fit = (min(h_title, need_title) / max(h_title, need_title) + min(h_text, need_text) / max(h_text, need_text)) / 2
    assert parts["overflow"][0] == pytest.approx(fit, abs=1e-12)
    # putting the text on top of the image overlaps and breaks the reading order
    lay2 = lay.copy()
    lay2[0, 2, 1] = 3
    _, parts2 = E.reward(p, lay2, components=True)
    assert parts2["overlap"][0] < 1.0 and parts2["hierarchy"][0] < 1.0


def test_translating_a_valid_layout_inside_the_canvas_keeps_non_overlap_and_bounds():
    p = _prompts()
    lay = _stacked_layout()
    _, a = E.reward(p, lay, components=True)
    moved = lay.copy()
    moved[0, :3, 0] += 2                                                   # right by two bins, still inside
    _, b = E.reward(p, moved, components=True)
    for c in ("overlap", "bounds", "overflow", "alignment", "hierarchy", "whitespace"):
        assert a[c][0] == pytest.approx(b[c][0], abs=1e-12), c


def test_hidden_factor_enters_only_through_rendering():
    lay = _stacked_layout()
    lo, hi = _prompts(kappa=0.6), _prompts(kappa=1.6)
    assert np.array_equal(E.draft_features(lo), E.draft_features(hi))      # the drafter cannot see kappa
    need_lo, need_hi = E.render(lo, lay)["need"], E.render(hi, lay)["need"]
    assert np.allclose(need_hi[0, [0, 2]], need_lo[0, [0, 2]] * 1.6 / 0.6)
    assert need_lo[0, 1] == 0 and need_lo[0, 3] == 0                       # image and absent slots
    assert not np.array_equal(E.refine_features(lo, lay, 0.0), E.refine_features(hi, lay, 0.0))
    assert E.refine_features(lo, lay, 0.0).shape == (1, 8 * 6 + 1)


def test_edits_move_one_coordinate_and_return_the_reward_increment():
    p = _prompts()
    lay = _stacked_layout()
    # element 2 (text1), op 7 = h + 1
    new, delta = E.apply_edit(p, lay, np.array([2 * 8 + 7]))
    assert new[0, 2, 3] == lay[0, 2, 3] + 1 and (new != lay).sum() == 1
    assert delta[0] == pytest.approx(E.reward(p, new)[0] - E.reward(p, lay)[0], abs=0)
    same, d0 = E.apply_edit(p, lay, np.array([E.num_refine_actions() - 1]))   # the no-op
    assert np.array_equal(same, lay) and d0[0] == 0.0
    absent, d1 = E.apply_edit(p, lay, np.array([4 * 8 + 1]))                  # text3 is absent
    assert np.array_equal(absent, lay) and d1[0] == 0.0
    edge = lay.copy()
    edge[0, 0, 1] = 0
    clipped, _ = E.apply_edit(p, edge, np.array([0 * 8 + 2]))                 # title y - 1 at the top
    assert clipped[0, 0, 1] == 0


def test_environment_is_deterministic_per_seed_and_seeds_differ():
    assert paper.determinism_gap(3, 6, seed=5) == 0.0
    a, b = E.LayoutEnv(3, 6, seed=1).sample(50), E.LayoutEnv(3, 6, seed=2).sample(50)
    assert not np.array_equal(a.kappa, b.kappa)
    counts = a.present.sum(-1)
    assert counts.min() >= 3 and counts.max() <= 6 and np.all(a.present[:, :3])
    with pytest.raises(ValueError):
        E.LayoutEnv(2, 6)


def test_policy_masks_edits_of_absent_elements():
    pol = paper.LayoutPolicy(2, 8, [0, 1])
    p = _prompts(n=3)
    feats = torch.randn(2, 3, 8 * 6 + 1)
    present = torch.as_tensor(np.broadcast_to(p.present, (2, 3, 6)).copy())
    logits = pol.refine_logits(feats, present)
    assert logits.shape == (2, 3, E.num_refine_actions())
    assert torch.all(logits[..., 3 * 8:6 * 8] < -1e8) and torch.all(logits[..., :3 * 8] > -1e8)
    assert pol.draft_logits(torch.randn(2, 3, 12)).shape == (2, 3, 6, 4, 16)


def test_arms_use_equal_samples_and_k0_identity_has_power():
    prompts = E.LayoutEnv(3, 3, seed=0).sample((2, 2))
    counts = {}
    for arm in paper.ARMS:
        pol = paper.LayoutPolicy(2, 8, [0, 1])
        b = paper.collect(arm, pol, prompts, TINY, torch.Generator().manual_seed(0), np.random.default_rng(0))
        counts[arm] = b["samples"]
        loss = paper.arm_loss(pol, b, prompts, TINY)
        assert loss.dim() == 0 and torch.isfinite(loss)
    assert len(set(counts.values())) == 1 and counts["sarl"] == 2 * 2 * TINY.group_size * (TINY.refine_steps + 1)
    assert paper.k0_gradient_gap(TINY) <= 1e-10
    # with K > 0 the two arms' drafts get different credit, so the gradients differ
    grads = []
    for arm in ("trajectory", "sarl"):
        pol = paper.LayoutPolicy(2, 8, [0, 1]).double()
        b = paper.collect(arm, pol, prompts, TINY, torch.Generator().manual_seed(0), np.random.default_rng(0), dtype=torch.float64)
        loss = paper.arm_loss(pol, b, prompts, TINY, dtype=torch.float64)
        grads.append(torch.cat([g.reshape(-1) for g in torch.autograd.grad(loss, list(pol.drafter.parameters()))]))
    assert (grads[0] - grads[1]).abs().max() > 1e-6


def test_advantages_are_normalised_per_group():
    out = paper.advantage_checks(TINY)
    assert out["max_abs_mean"] < 1e-10 and out["max_std_gap"] < 1e-10 and out["max_refine_gap"] < 1e-10
    assert out["tied_groups"] >= 2 and out["max_tied_adv"] == 0.0 and out["max_zero_edit_adv"] == 0.0
    adv = group_advantages(torch.tensor([[0.1, 0.3, 0.3, 0.5]], dtype=torch.float64))
    assert adv.sum().abs() < 1e-12


def test_refine_advantages_scale_without_centring():
    d = np.array([[0.0, -0.2, -0.1, 0.3], [0.05, 0.05, 0.05, 0.05]])
    adv = paper.refine_advantages(d)
    s = d[0].std(ddof=1)
    assert torch.allclose(adv[0], torch.as_tensor(d[0] / (s + 1e-4)))
    assert adv[0, 0] == 0.0 and adv[0, 1] < 0 < adv[0, 3]            # the unchanged layout gets 0, not a bonus
    assert torch.all(adv[1] == 0)                                        # a tied group carries no signal
    # the centred GRPO advantage would have rewarded the edit that changed nothing
    assert group_advantages(torch.as_tensor(d[:1]))[0, 0] > 0
    with pytest.raises(ValueError):
        paper.refine_advantages(np.zeros(1))


def test_oracle_refiner_takes_the_best_edit_and_never_loses():
    p = E.LayoutEnv(3, 6, seed=3).sample(6)
    lay = np.random.default_rng(1).integers(0, E.NUM_BINS, size=(2, 6, 6, 4))
    r = paper.oracle_refine(p, lay, 2)
    assert r.shape == (2, 6, 3) and np.all(np.diff(r, axis=-1) >= -1e-12)
    assert np.allclose(r[..., 0], E.reward(p, lay))
    # first step: the best single edit, found here by brute force on one prompt
    one = p.take([0])
    best = max(E.apply_edit(one, lay[0, :1], np.array([a]))[1][0] for a in range(E.num_refine_actions()))
    assert r[0, 0, 1] - r[0, 0, 0] == pytest.approx(best, abs=1e-12)


def test_permuted_control_shuffles_refine_rewards_within_groups():
    prompts = E.LayoutEnv(3, 3, seed=0).sample((2, 2))
    pol = paper.LayoutPolicy(2, 8, [0, 1])
    b = paper.collect("sarl_permuted", pol, prompts, replace(TINY, refine_steps=1), torch.Generator().manual_seed(0),
                      np.random.default_rng(0))
    pol2 = paper.LayoutPolicy(2, 8, [0, 1])
    c = paper.collect("sarl", pol2, prompts, replace(TINY, refine_steps=1), torch.Generator().manual_seed(0),
                      np.random.default_rng(0))
    a_perm, a_sarl = b["refine"][4].reshape(2, 2, -1), c["refine"][4].reshape(2, 2, -1)
    assert torch.allclose(torch.sort(a_perm, -1).values, torch.sort(a_sarl, -1).values)   # same multiset per group
    assert not torch.equal(a_perm, a_sarl)                                                  # but shuffled


def test_tiny_training_run_evaluation_and_asset_roundtrip(tmp_path, monkeypatch):
    from compendium.papers.poster_agent import training
    monkeypatch.setattr(training, "settings_for", lambda scale: TINY)
    training.build_asset(tmp_path, "smoke", 0)
    policies, meta = paper.load_policies(tmp_path)
    assert set(policies) == set(paper.ARMS)
    res = paper.run(paper.Config(seed=1, test_prompts=20), policies, meta)
    K = TINY.refine_steps
    ep = res.episodes["sarl"]
    assert ep["R"].shape == (2, 20, K + 1) and ep["dR"].shape == (2, 20, K) and res.best_of.shape == (2, 20)
    assert paper.telescoping_gap(res) <= 1e-12
    lo, hi = paper.component_range(res)
    assert 0.0 <= lo <= hi <= 1.0
    m = paper.measurements(res)
    # the unit is the trained model: one value per training seed, per-seed prompt intervals as details
    e = m["sarl_vs_traj"]
    assert isinstance(e, Estimate) and e.n == 2 and e.unit == paper.UNIT
    per_model = (ep["R"][:, :, -1] - res.episodes["trajectory"]["R"][:, :, -1]).mean(1)
    assert np.isclose(e.point, per_model.mean())
    assert len(m["sarl_vs_traj_by_seed"]) == 2 and m["sarl_vs_traj_by_seed"][0].n == 20
    assert np.isclose(m["sarl_zero_share"].point, (ep["dR"] == 0).mean())
    # the learned-model floor's chance reward: one value in [0, 1] per held-out prompt, and the floor
    # estimate is the arm's final reward minus it
    assert res.random_layout.shape == (20,) and np.all((res.random_layout >= 0) & (res.random_layout <= 1))
    assert set(m["floor"]) == {"sarl", "trajectory"} and m["floor"]["sarl"].n == 2
    assert np.isclose(m["floor"]["sarl"].point, (ep["R"][:, :, -1] - res.random_layout).mean())
    # the oracle starts from the stronger baseline's final layouts and can only gain
    o = res.oracle[m["headroom_method"]]
    assert o.shape == (2, 20, K + 1) and m["oracle_gain"].point >= 0
    assert np.allclose(res.oracle["trajectory GRPO"][..., 0], res.episodes["trajectory"]["R"][:, :, -1])
    assert np.allclose(res.oracle["best of K+1 one-shot drafts"][..., 0], res.best_of)
    assert len(meta["arms"]["sarl"]["curve"]["update"]) == TINY.updates + 1
    # best of K + 1 drafts is at least the greedy draft of the same policy
    assert np.all(res.best_of >= res.episodes["one_shot"]["R"][:, :, 0] - 1e-12)


def test_weakest_and_config_validation():
    es = [Estimate(0.1, 0.05, 0.15, 0.95, "p", 10), Estimate(0.2, -0.01, 0.4, 0.95, "p", 10)]
    w, i = paper.weakest(es)
    assert i == 1 and w.low == -0.01
    with pytest.raises(ValueError):
        paper.Config(test_prompts=5)
    with pytest.raises(ValueError):
        paper.Config(reward_margin=-0.1)
    with pytest.raises(ValueError):
        paper.settings_for("medium")
