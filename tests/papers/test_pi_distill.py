"""Tests for compendium.papers.pi_distill: maze and expert, PI, the one-module policy, the objective's
limits, KL, the KV cache, the recipes, a tiny lock-step training run and the statistics."""

from dataclasses import replace

import numpy as np
import pytest
import torch

from compendium.papers import pi_distill as paper
from compendium.papers.pi_distill import losses, training, transfer
from compendium.papers.pi_distill.maze import PAD, maze_keys
from compendium.rl import grpo_loss


def _mazes(n=30, seed=0, size=5, horizon=10):
    return paper.generate_mazes(n, size, horizon, 0.25, np.random.default_rng(seed))


def test_bfs_expert_is_optimal_and_reaches_the_goal():
    st = paper.settings_for("smoke")
    out = paper.bfs_expert_gap(st, seed=3, count=40)
    assert out["max_length_gap"] == 0 and out["reached"] == out["mazes"] == 40
    m = _mazes()
    d = paper.bfs_distance(m.walls[0], int(m.goal[0]))
    assert d[m.goal[0]] == 0 and d[m.start[0]] == m.length[0]
    assert np.all(d[m.walls[0].ravel()] == -1)


def test_mazes_are_distinct_and_exclusion_makes_splits_disjoint():
    a = _mazes(40, seed=1)
    b = paper.generate_mazes(40, 5, 10, 0.25, np.random.default_rng(1), exclude=maze_keys(a))
    assert len(maze_keys(a)) == 40 and not (maze_keys(a) & maze_keys(b))
    assert np.all((a.length >= 3) & (a.length <= 10))
    with pytest.raises(ValueError):
        paper.generate_mazes(5, 1, 10, 0.25, np.random.default_rng(0))


def test_pi_kinds():
    m = _mazes(300, seed=2)
    rng = np.random.default_rng(0)
    full, half = paper.make_pi(m, "full", rng), paper.make_pi(m, "half", rng)
    noisy, rand = paper.make_pi(m, "noisy", rng), paper.make_pi(m, "random", rng)
    live = m.trace != PAD
    assert np.array_equal(full, m.trace)
    assert np.array_equal((half != PAD).sum(1), np.ceil(m.length / 2).astype(int))
    assert np.all((noisy != PAD) == live) and np.all((rand != PAD) == live)
    flipped = (noisy != full)[live].mean()
    assert 0.25 < flipped < 0.35                       # 30 % of actions corrupted, each to another move
    assert np.all(noisy[live] < 4) and np.all(rand[live] < 4)
    with pytest.raises(ValueError):
        paper.make_pi(m, "oracle", rng)


def test_objective_limits():
    gaps = paper.degeneracy_gaps()
    assert max(gaps.values()) < 1e-7, gaps


def test_teacher_term_equals_grpo_with_a_kl_penalty_and_weights_are_clipped():
    g = torch.Generator().manual_seed(0)
    lt = torch.log_softmax(torch.randn(4, 3, 5, generator=g, dtype=torch.float64), -1)[..., 1]
    ls = lt + 3.0                                      # pi_S / pi_T = e^3 > clip
    adv, mask = torch.tensor([1.0, -1.0, 0.5, 0.0], dtype=torch.float64), torch.ones(4, 3, dtype=torch.float64)
    kl = torch.rand(4, 3, generator=g, dtype=torch.float64)
    got = losses.teacher_loss(lt, adv, mask, kl_T_S=kl, beta=0.3)
    ref = grpo_loss(lt, lt, adv, mask=mask, reduction="none").loss + 0.3 * kl.mean(1)
    assert torch.allclose(got, ref)
    reward = torch.tensor([1.0, 0.0, 1.0, 1.0], dtype=torch.float64)
    off = losses.student_offpolicy_loss(ls, lt, reward, mask, clip=2.0)
    assert torch.allclose(off, -(2.0 * reward[:, None] * ls).mean(1))


def test_kl_nonnegative_and_zero_with_pi_masked_on_both_sides():
    out = paper.kl_checks()
    assert out["min_kl_random"] >= 0.0 and out["masked_both_kl"] == 0.0
    p = torch.randn(50, 5)
    assert losses.action_kl(p, p).abs().max() < 1e-6
    assert losses.action_kl(p, p.flip(0)).sum() > 0


def test_teacher_and_student_are_one_module():
    out = paper.shared_parameter_check()
    assert out["student_logit_change"] > 1e-4 and out["teacher_logit_change"] > 1e-4
    policy = paper.PISlotPolicy(3, 4, 8, width=16, layers=1, heads=2, init_seeds=[5, 5, 6])
    with torch.no_grad():
        assert torch.equal(policy.cell[0], policy.cell[1])      # same seed, same init
        assert not torch.equal(policy.cell[0], policy.cell[2])


def test_kv_cache_equals_full_forward():
    assert paper.kv_cache_gap() < 1e-5


def test_recipe_phases():
    r = paper.Recipe("pi_distill", "noisy", 1.0, 0.0, 0)
    assert r.phase(0, 5) == (training.TEACHER, {"grpo_T": 1.0, "kl_T": 0.0, "offpolicy_S": 0.0})
    assert paper.Recipe("sequential", "full", 0, 0, 0).phase(6, 5) == (training.TEACHER, {"offpolicy_S": 1.0})
    assert paper.Recipe("cot_rl", "", 0, 0, 0).phase(1, 5)[0] == training.REPLAY_EXPERT
    assert paper.Recipe("cot_rl", "", 0, 0, 0).phase(5, 5) == (training.STUDENT, {"grpo_S": 1.0})
    with pytest.raises(ValueError):
        paper.Recipe("dpo", "", 0, 0, 0).phase(0, 1)
    st = paper.settings_for("smoke")
    rec = paper.recipes_for(st)
    per_seed = len(st.pi_kinds) * len(st.alphas) * len(st.betas) + 2 * (len(st.bc_kinds) + 2 * len(st.distill_kinds) + 2)
    assert len(rec) == st.num_seeds * per_seed and len({r.name for r in rec}) == len(rec)
    assert {r.init for r in rec if r.method == "pi_distill"} == {"base"}
    assert sum(r.init == "scratch" for r in rec) == sum(r.init == "base" and r.method != "pi_distill" for r in rec)


@pytest.mark.slow          # the first torch.optim import (AdamW in fit) takes seconds on a loaded machine
def test_tiny_lockstep_training_and_evaluation():
    st = replace(paper.settings_for("smoke"), train_mazes=30, steps=3, mazes_per_step=2, group_size=4, width=16,
                 layers=1, num_seeds=1, curve_every=2, curve_mazes=6)
    pool, pis = training.train_pool(st, 0)
    recipes = [paper.Recipe(m, p, a, b, 0) for m, p, a, b in
               [("pi_distill", "noisy", 0.5, 0.1), ("grpo", "", 0, 0), ("bc", "noisy", 0, 0), ("cot_rl", "", 0, 0),
                ("opsd", "full", 1, 0.1), ("sequential", "full", 0, 0)]]
    cm = paper.generate_mazes(6, st.size, st.horizon, st.wall_density, np.random.default_rng(9))
    cp = {k: paper.make_pi(cm, k, np.random.default_rng(1)) for k in paper.PI_KINDS}
    base, blog = training.pretrain_base(pool, replace(st, pretrain_steps=2), 0)
    assert blog["steps"] == 2 and base.num_models == 1
    policy, log = paper.train_chunk(recipes, pool, pis, st, 0, cm, cp, base=base)
    fresh, _ = paper.train_chunk(recipes[:1], pool, pis, replace(st, steps=1, learning_rate=1e-9), 0, base=base)
    assert torch.allclose(fresh.cell[0], base.cell[0], atol=1e-6)           # every method starts from the base
    assert log["train"]["steps"] == 3 and np.isfinite(log["train"]["final_loss"])
    assert len(log["curves"]["step"]) == 3 and len(log["curves"]["kl"][0]) == len(recipes)
    succ = training.evaluate(policy, cm, cp, recipes, show_pi=True)
    assert succ.shape == (len(recipes), 6) and set(np.unique(succ)) <= {0.0, 1.0}


def _fake_result(pd_noisy, bc, grpo, pd_random, pd_full, cot, val_best=(0.5, 0.1)):
    st = replace(paper.settings_for("smoke"), num_seeds=len(grpo))
    recipes, test = [], []
    for s in range(len(grpo)):
        for pi in st.pi_kinds:
            for a in st.alphas:
                for b in st.betas:
                    recipes.append(paper.Recipe("pi_distill", pi, a, b, s))
                    base = {"noisy": pd_noisy, "random": pd_random, "full": pd_full}[pi][s]
                    test.append(base if (a, b) == val_best else 0.0)
            recipes.append(paper.Recipe("bc", pi, 0, 0, s))
            test.append(bc[s] if pi == "noisy" else 0.0)
        recipes += [paper.Recipe("grpo", "", 0, 0, s), paper.Recipe("cot_rl", "", 0, 0, s)]
        test += [grpo[s], cot[s]]
    test = np.repeat(np.array(test)[:, None], 4, 1)
    kl = np.array([0.5 if r.beta == 0 else 0.2 for r in recipes]) + np.arange(len(recipes)) * 1e-3
    res = paper.Result(recipes, test.copy(), test, test + 0.1, kl, {}, st)
    res.selected = {pi: paper.select_grid_point(res, pi) for pi in st.pi_kinds}
    return res


def test_selection_and_measurements_on_known_values():
    s = 5
    res = _fake_result(pd_noisy=[0.6, 0.7, 0.65, 0.6, 0.7], bc=[0.4, 0.5, 0.45, 0.42, 0.5], grpo=[0.2] * 2 + [0.25] * 3,
                       pd_random=[0.21, 0.2, 0.26, 0.25, 0.24], pd_full=[0.8] * s, cot=[0.79, 0.8, 0.81, 0.8, 0.8])
    assert res.selected["noisy"] == (0.5, 0.1)
    m = paper.measurements(res, paper.Config())
    assert m["vs_bc"].point == pytest.approx(np.mean([0.2, 0.2, 0.2, 0.18, 0.2]))
    assert m["vs_bc"].n == 5 and m["vs_bc"].level == 0.9
    assert m["vs_cot"].point == pytest.approx(0.0)
    assert abs(m["random_vs_grpo"].point) < 0.03
    assert m["kl_lower_seeds"] == 5            # beta = 0.1 has the lower KL at every seed
    assert m["headroom_method"] == "SFT w/ CoT + RL" and m["headroom"].point == pytest.approx(0.8)


def test_config_rejects_bad_values():
    with pytest.raises(ValueError):
        paper.Config(test_mazes=3)
    with pytest.raises(ValueError):
        paper.Config(bc_margin=2.0)


# ------------------------------------------------------------------ the w = 1 student term (transfer.py)
def test_unit_weight_student_term():
    g = torch.Generator().manual_seed(3)
    logp_S = torch.log_softmax(torch.randn(6, 5, 5, generator=g, dtype=torch.float64), -1)[..., 0].requires_grad_()
    logp_T = torch.log_softmax(torch.randn(6, 5, 5, generator=g, dtype=torch.float64), -1)[..., 0]
    mask = torch.ones(6, 5, dtype=torch.float64)
    mask[0, 3:] = 0
    reward = torch.tensor([1.0, 0, 1, 1, 0, 1], dtype=torch.float64)
    one = transfer.student_unit_weight_loss(logp_S, reward, mask)
    # w = 1 is the clipped term wherever the importance ratio is 1 (teacher and student agree)
    same = losses.student_offpolicy_loss(logp_S, logp_S, reward, mask)
    assert torch.allclose(one, same, atol=1e-12)
    # a failed episode contributes nothing; a successful one is -mean log pi_S over its turns
    assert float(one[1].detach()) == 0.0
    assert torch.isclose(one[0], -logp_S[0, :3].mean())
    # where the student is less likely than the teacher, the clipped weight shrinks the gradient; w = 1 does not
    (grad_one,) = torch.autograd.grad(one.sum(), logp_S)
    (grad_clip,) = torch.autograd.grad(losses.student_offpolicy_loss(logp_S, logp_T, reward, mask).sum(), logp_S)
    low = (logp_S.detach() < logp_T) & (mask > 0) & (reward[:, None] > 0)
    assert low.any() and torch.all(grad_clip[low].abs() < grad_one[low].abs())


def test_train_arms_equals_train_chunk_when_clipped():
    st = replace(paper.settings_for("smoke"), train_mazes=30, steps=2, mazes_per_step=2, group_size=4, width=16,
                 layers=1, num_seeds=2)
    pool, pis = training.train_pool(st, 0)
    base, _ = training.pretrain_base(pool, replace(st, pretrain_steps=1), 0)
    recipes = [paper.Recipe("pi_distill", "full", 0.75, 0.1, s) for s in range(2)]
    ref, _ = paper.train_chunk(recipes, pool, pis, st, 0, base=base)
    mine, _ = transfer.train_arms([transfer.Arm(r, False) for r in recipes], pool, pis, st, 0, base=base)
    for (name, p), (_, q) in zip(ref.named_parameters(), mine.named_parameters()):
        assert torch.allclose(p, q, atol=1e-6), name
    with pytest.raises(ValueError):
        transfer.train_arms([transfer.Arm(paper.Recipe("grpo", "", 0, 0, 0), True)], pool, pis, st, 0)


def test_base_log_gap_and_transfer_measurements():
    log = {"losses": [[1, 2.0], [2, 1.5]]}
    assert transfer.base_log_gap(log, {"losses": [[1, 2.0], [2, 1.25]]}) == 0.25
    assert transfer.base_log_gap(log, {"losses": [[1, 2.0]]}) == float("inf")
    assert transfer.base_log_gap(log, {}) == float("inf")
    tr = {"w1": np.array([0.5, 0.6, 0.7, 0.6, 0.5]), "w1_teacher": np.array([0.8, 0.8, 0.8, 0.7, 0.7])}
    m = transfer.transfer_measurements(tr, [0.2, 0.3, 0.3, 0.2, 0.25], [0.8, 0.7, 0.9, 0.8, 0.75])
    assert np.isclose(m["w1_vs_weighted"].point, 0.33) and m["w1_vs_weighted"].level == 0.90
    assert m["w1_vs_weighted"].low > 0.05 and m["comparator_teacher"].n == 5
    assert np.isclose(m["weighted_gap"].point, 0.79 - 0.25) and np.isclose(m["w1_gap"].point, 0.76 - 0.58)
