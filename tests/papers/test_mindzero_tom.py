"""Tests for compendium.papers.mindzero_tom: planner, BIP, ELBO pieces, label-freeness, tiny run."""

import numpy as np
import pytest

from compendium.papers import mindzero_tom as paper


def _queries(n=12, seed=0):
    ep = paper.generate_episodes(n, np.random.default_rng(seed))
    return ep, *paper.make_queries(ep)


def test_shapes_and_fixed_prefix_lengths():
    ep, q, idx = _queries()
    assert q.features.shape == (3 * 12, paper.N_GOALS, paper.N_FEATURES)
    assert q.logliks.shape == (36, paper.N_GOALS)
    # prefix lengths depend on f only, never on the goal (no length leak)
    k = (q.actions >= 0).sum(1)
    for f, want in zip(paper.FRACTIONS, (3, 6, 9)):
        assert np.all(k[q.fraction == f] == want)


def test_queries_have_no_goal_field():
    _, q, _ = _queries(4)
    with pytest.raises(AttributeError):
        q.goal


def test_elbo_identity_and_maximiser():
    assert paper.elbo_identity_gap() < 1e-12
    assert paper.elbo_identity_symbolic() == 0
    a, b = paper.maximiser_gaps(n=3)
    assert a < 1e-6 and b < 1e-6
    # the posterior maximises the reward: any other q is worse
    rng = np.random.default_rng(3)
    logp = rng.normal(size=4)
    best = paper.elbo_reward(paper.bip_posterior(logp), logp)
    for _ in range(50):
        assert paper.elbo_reward(rng.dirichlet(np.ones(4)), logp) <= best + 1e-12


def test_boltzmann_limit_floor_and_permutation():
    q = np.random.default_rng(1).normal(size=(20, 4))
    assert np.abs(paper.boltzmann_policy(q, 1e-4, min_prob=0.0) - np.eye(4)[q.argmax(1)]).max() < 1e-9
    assert paper.boltzmann_policy(q * 1e3, 0.1).min() >= paper.MIN_PROB
    _, qs, _ = _queries(6, seed=2)
    perm = np.array([3, 1, 0, 2])
    pol = paper.goal_policies(qs.goal_cells[:, perm], qs.temperature)
    post = paper.bip_posterior(paper.trajectory_logliks(pol, qs.states, qs.actions))
    assert np.abs(post - paper.bip_posterior(qs.logliks)[:, perm]).max() < 1e-12


def test_reference_loglik_and_cache():
    _, q, _ = _queries(3, seed=4)
    fresh = paper.goal_policies(q.goal_cells, q.temperature, cached=False)
    assert np.abs(fresh - paper.goal_policies(q.goal_cells, q.temperature)).max() < 1e-12
    assert np.abs(paper.loglik_loop(fresh, q.states, q.actions) - q.logliks).max() < 1e-10


def test_planner_moves_towards_goal():
    # at T = 0.1 the planner's most likely action from a far cell reduces the distance to the goal
    pol = paper.policy_table(0.1)
    g = 0
    far = np.flatnonzero(paper.DIST[g] >= 3)
    best = pol[g, far].argmax(1)
    assert np.all(paper.DIST[paper.NEXT[far, best], g] < paper.DIST[far, g])


def test_exact_bip_beats_chance_and_weak_baseline_misses():
    ep, q, idx = _queries(200, seed=5)
    goal = ep.goal[idx]
    acc = (paper.bip_posterior(q.logliks).argmax(1) == goal).mean()
    assert acc > 0.5
    pred, _ = paper.weak_bip_predict(q, goal, 1.0, 3.0, np.random.default_rng(0))
    assert np.all(pred != goal)          # miss rate 1: the true goal is never proposed


def test_training_refuses_labels_for_label_free_objectives():
    _, q, _ = _queries(5)
    cfg = paper.Config(train_steps=2)
    with pytest.raises(ValueError):
        paper.train_net(q, "elbo", cfg, seed=0, labels=np.zeros(len(q.goal_cells), int))
    with pytest.raises(ValueError):
        paper.train_net(q, "supervised", cfg, seed=0)


def test_tiny_run_is_deterministic_and_learns():
    cfg = paper.Config(num_seeds=2, train_episodes=300, test_episodes=40, train_steps=60, timing_queries=10)
    a, b = paper.run(cfg), paper.run(cfg)
    for k in a.metrics["acc_all"]:
        assert np.array_equal(a.metrics["acc_all"][k], b.metrics["acc_all"][k])
    for k in paper.PREFERENCE_METHODS:                      # the preference task is deterministic too
        assert np.array_equal(a.metrics["preference"][k], b.metrics["preference"][k])
    acc = a.metrics["acc_all"]
    assert acc["elbo"].mean() > 0.4                       # chance is 0.25
    assert np.all(acc["exact"] >= 0.4)
    m = paper.measurements(a)
    assert 0 <= m["weak_seeds_pass"] <= 2
    # the learned-model floor: ELBO net minus the heading rule on the heading-hard set, over seeds
    hard = a.metrics["acc_hard"]
    assert m["heading_gap"].n == 2 and np.isclose(m["heading_gap"].point, (hard["elbo"] - hard["heading"]).mean())
    assert np.isclose(m["heading_gap_all"].point, (acc["elbo"] - acc["heading"]).mean())
    # per-seed tests: episodes are the clusters, the point is the query-level gain on the hard set
    for s, e in zip(a.per_seed, m["weak_tests"]):
        rows = s["hard"]
        assert e.n == len(np.unique(s["episode"][rows])) and e.level == 0.98
        assert np.isclose(e.point, (s["correct"]["elbo"] - s["correct"]["weak"])[rows].mean())
    # weakened BIP drops only the true goal, so it is right only where tempered BIP is right
    for s in a.per_seed:
        assert np.all(s["correct"]["weak"] <= s["correct"]["tempered"])


def test_heading_hard_set_is_label_free_and_where_heading_disagrees_with_bip():
    ep, q, idx = _queries(150, seed=6)
    hard = paper.heading_hard(q)
    assert 0 < hard.sum() < len(hard)
    assert np.all(paper.heading_heuristic(q)[hard] != paper.bip_posterior(q.logliks).argmax(1)[hard])
    assert np.all(paper.heading_heuristic(q)[~hard] == paper.bip_posterior(q.logliks).argmax(1)[~hard])
    goal = ep.goal[idx]
    # exact BIP beats the heading rule there (it is Bayes-optimal; on the set they always disagree)
    acc_exact = (paper.bip_posterior(q.logliks).argmax(1) == goal)[hard].mean()
    acc_heading = (paper.heading_heuristic(q) == goal)[hard].mean()
    assert acc_exact > acc_heading


def test_seed_gap_tests_counts_a_seed_only_with_margin_and_significance():
    rng = np.random.default_rng(0)
    n_ep = 60
    episode = np.repeat(np.arange(n_ep), 3)
    base = rng.random(3 * n_ep) < 0.3
    strong = base | (rng.random(3 * n_ep) < 0.5)          # about 35 points better
    seeds = [dict(hard=np.ones(3 * n_ep, bool), episode=episode,
                  correct={"a": strong.astype(float), "b": base.astype(float), "c": base.astype(float)})] * 2
    _, passed = paper.seed_gap_tests(seeds, "a", "b")
    assert passed == 2
    _, passed = paper.seed_gap_tests(seeds, "c", "b")    # identical arms: no gain, no pass
    assert passed == 0


def test_preference_task_prior_enters_reward_model_and_not_heading():
    fav = np.array([0, 1, 2, 3] * 100)
    lp = paper.goal_log_prior(fav)
    assert np.allclose(np.exp(lp).sum(1), 1.0) and np.allclose(np.exp(lp[np.arange(400), fav]), paper.FAVOURITE_PROB)
    ep = paper.generate_episodes(400, np.random.default_rng(7), favourite=fav)
    share = (ep.goal == fav).mean()
    assert abs(share - paper.FAVOURITE_PROB) < 0.1       # the goal is drawn from the prior
    base, idx = paper.make_queries(ep)
    q, idx2, lp_q = paper.preference_queries(ep, fav)
    assert np.array_equal(idx, idx2) and q.features.shape[2] == paper.N_FEATURES + 1
    assert np.allclose(q.logliks, base.logliks + lp_q)    # the log joint: likelihood plus log prior
    assert np.array_equal(q.features[:, :, -1].argmax(1), fav[idx])
    assert np.array_equal(paper.heading_heuristic(q), paper.heading_heuristic(base))   # the rule ignores the prior
    goal = ep.goal[idx]
    with_prior = (paper.bip_posterior(q.logliks).argmax(1) == goal).mean()
    without = (paper.bip_posterior(base.logliks).argmax(1) == goal).mean()
    assert with_prior > without                           # the prior carries information here
    # the weakened baseline adds the same prior to its hot-planner likelihoods
    pred, post = paper.weak_bip_predict(q, goal, 0.0, 1.0, np.random.default_rng(0), log_prior=lp_q)
    assert np.allclose(post, paper.bip_posterior(q.logliks))


def test_preference_task_per_seed_tests_use_every_query():
    cfg = paper.Config(num_seeds=2, train_episodes=200, test_episodes=30, train_steps=20, timing_queries=10)
    out = paper.preference_task(cfg, 0)
    assert out["hard"].all() and set(out["correct"]) == set(paper.PREFERENCE_METHODS)
    assert np.all(out["correct"]["weak"] <= out["correct"]["tempered"])
    tests, _ = paper.seed_gap_tests([out, out], "elbo", "weak", subset="all")
    assert tests[0].n == len(np.unique(out["episode"]))
