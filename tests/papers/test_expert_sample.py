"""Tests for compendium.papers.expert_sample: shapes, properties, brute-force references, tiny run."""

from fractions import Fraction
from itertools import combinations


import numpy as np
import pytest
import torch

from compendium.kernels.routing import expert_sample_route_reference, gumbel_noise
from compendium.papers import expert_sample as paper
from compendium.papers.expert_sample.model import PROMPT_LEN, SEQ_LEN, VOCAB, answer_code, encode


def tiny_models(count=2, steps=3):
    settings = paper.model.TrainSettings(max_steps=steps, batch_size=16, eval_every=1000, dev_eval_problems=10)
    config = paper.MoEConfig(dim=16, num_layers=1, num_heads=2, num_experts=8, experts_per_token=4, expert_hidden=4)
    return [paper.train(config, settings, seed)[0] for seed in range(count)]


def test_task_encoding_and_splits():
    seq = encode(np.array([47, 99, 0]), np.array([85, 99, 5]))
    assert seq.shape == (3, SEQ_LEN)
    assert answer_code(seq[:, PROMPT_LEN:]).tolist() == [132, 198, 5]
    data = paper.splits()
    assert [len(data[s]) for s in ("test", "dev", "train")] == [1000, 500, 8500]
    keys = {tuple(r) for s in data.values() for r in s[:, :4]}
    assert len(keys) == 10_000  # the splits are disjoint and cover every problem


def test_model_shapes_and_router_hook():
    model = tiny_models(1, steps=1)[0]
    tokens = torch.as_tensor(paper.splits()["test"][:5, :-1])
    captured = []
    logits, balance = model(tokens, capture=captured)
    assert logits.shape == (5, SEQ_LEN - 1, VOCAB) and balance.ndim == 0
    assert len(captured) == 1 and captured[0].shape == (5, SEQ_LEN - 1, 8)
    # the top-k policy through the hook reproduces the default forward exactly
    policy = paper.RoutingPolicy.top_k(4, 8)
    again, _ = model(tokens, paper.sampling.make_router(policy, None))
    assert torch.equal(logits, again)
    answers = paper.sample_answers(model, tokens[:, :PROMPT_LEN].numpy(), 3, paper.RoutingPolicy(4, 2, 4, 1.0), 0.5,
                                   torch.Generator().manual_seed(0))
    assert answers.shape == (5, 3) and answers.min() >= 0 and answers.max() <= 999


def test_pass_at_k_matches_brute_force():
    for n in range(1, 7):
        for c in range(n + 1):
            for k in range(1, n + 1):
                exact = paper.pass_at_k_brute_force([True] * c + [False] * (n - c), k)
                assert paper.pass_at_k(n, c, k) == pytest.approx(float(exact), abs=1e-12)
    assert paper.pass_at_k_brute_force([True, False, False], 2) == Fraction(2, 3)
    with pytest.raises(ValueError):
        paper.pass_at_k(4, 5, 1)


def test_gumbel_topk_first_draw_is_softmax():
    # the first tail pick is the arg-max of z/tau + Gumbel, so its law is softmax(z / tau)
    z = torch.tensor([0.5, 0.0, -1.0, 1.5])
    gen = torch.Generator().manual_seed(1)
    draws = 40_000
    idx, _ = expert_sample_route_reference(z.expand(draws, 4), gumbel_noise((draws, 4), gen), 1, 0, 4, 2.0)
    freq = np.bincount(idx[:, 0].numpy(), minlength=4) / draws
    np.testing.assert_allclose(freq, torch.softmax(z / 2.0, 0).numpy(), atol=0.01)


def test_expert_sample_keeps_head_and_uses_original_weights():
    gen = torch.Generator().manual_seed(0)
    z = torch.randn(500, 16, generator=gen)
    idx, w = expert_sample_route_reference(z, gumbel_noise((500, 16), gen), 6, 3, 8, 5.0)
    ranks = torch.sort(z, dim=-1, descending=True, stable=True).indices
    assert torch.equal(idx[:, :3], ranks[:, :3])                                  # head kept, in rank order
    assert bool((idx.sort(-1).values.diff(dim=-1) > 0).all())                      # distinct
    rank_of = torch.argsort(ranks, -1)
    assert int(rank_of.gather(-1, idx[:, 3:]).max()) < 3 + 8                      # tail from the pool
    expected = torch.softmax(z, -1).gather(-1, idx)
    torch.testing.assert_close(w, expected / expected.sum(-1, keepdim=True))


def test_best_of_n_majority_and_helpers():
    answers = np.array([[3, 5, 5, 7], [1, 2, 3, 4]])
    scores = np.array([[0.0, -1.0, -2.0, 5.0], [1.0, 1.0, 0.0, 0.0]])
    assert paper.best_of_n(answers, scores).tolist() == [7, 1]
    assert paper.majority_vote(answers).tolist() == [5, 1]
    assert paper.distinct_rate(answers) == pytest.approx((3 + 4) / 2 / 4)
    assert paper.bracket(1.5, [1.0, 2.0, 3.0]) == (0, 1) and paper.bracket(2.5, [3.0, 2.0, 1.0]) == (0, 1)
    assert paper.bracket(9.0, [1.0, 2.0]) is None
    assert paper.neighbour_gap(3.0, (1.0, 1.0), (2.0, 2.5)) == pytest.approx(0.5)


def test_exact_checks():
    assert paper.pass_at_k_error(6) < 1e-12
    inv = paper.routing_invariants(0, rows=256)
    assert inv["tau0_mismatch"] == 0 and inv["head_kept"] and inv["distinct"] and inv["weights_sum_to_one"]
    assert inv["tail_varies"]
    assert paper.plackett_luce_check(20_000, 0)["p_value"] > 1e-4


@pytest.mark.parametrize("bad", [dict(samples_per_problem=8), dict(token_temperature=0.0), dict(routing_temperatures=()),
                                 dict(perturbation_scale=2.0), dict(test_problems=5), dict(chi2_draws=10),
                                 dict(routing_draws=2), dict(token_temperatures=[0.5, 0.1]), dict(head_sizes=[])])
def test_bad_config(bad):
    with pytest.raises(ValueError):
        paper.Config(**bad)


def test_tiny_run_is_deterministic():
    models = tiny_models()
    config = paper.Config(test_problems=12, head_experts=2, tail_pool=3, head_sizes=[1, 2], tail_pools=[2, 4],
                          routing_temperatures=[1.0], token_temperatures=[0.1, 0.7], bootstrap_resamples=200, seed=3)
    first, second = paper.run(config, models), paper.run(config, models)
    assert first.methods == second.methods
    assert first.metrics["best_of_n"] == second.metrics["best_of_n"]
    assert set(first.methods) >= {"greedy", "head_greedy", "topk@T", "es@T", "es_unshared@T", "es_h2_m3", "es_h1_m3", "es_h2_m2", "es_h2_m4",
                                  "noise_1", "temp_0.7"}
    assert first.curves["temperature"] == ["greedy", "temp_0.1", "temp_0.7"]
    assert len(first.curves["profile"]) == 8
    assert abs(first.curves["profile"].sum() - 1) < 1e-5
    assert first.metrics["prefill_error"] < 1e-5
    for name in ("greedy_drop", "es_passk_gain", "unshared_passk_gain", "bon_majority", "jaccard_ratio"):
        assert first.estimates[name] == second.estimates[name]
        assert first.estimates[name].low <= first.estimates[name].high
    with pytest.raises(ValueError):
        paper.run(paper.Config(head_experts=4, test_problems=10), models)  # head must be < k = 4
    with pytest.raises(ValueError):
        paper.run(config, models[:1])  # intervals need two models at least


def test_shared_prefill_equals_full_forward_and_sampling_law():
    models = tiny_models()
    seq = paper.splits()["test"][:40]
    es = paper.RoutingPolicy.expert_sample(4, 2, 2, 1.0)
    assert paper.prefill_equivalence_error(models[0], seq, es, 0) < 1e-5
    gen = torch.Generator().manual_seed(0)
    answers = paper.sample_answers_shared(models[0], seq, 16, es, 0.7, gen)
    assert answers.shape == (40, 16)
    np.testing.assert_allclose(paper.answer_loglik_shared(models[0], seq, answers),
                               paper.answer_loglik(models[0], seq[:, :5], answers), atol=1e-4)
    # teacher-forced success probability matches the sampled rate (standard routing, T = 1)
    topk = paper.RoutingPolicy.top_k(4, 8)
    p = paper.correct_probability(paper.target_logits(models[0], seq, topk, 4, gen), seq, 1.0)
    # one prefill serves every policy: passing it in changes nothing (run() does this)
    pre = paper.prefill(models[0], seq)
    for policy in (topk, es):
        assert torch.equal(paper.target_logits(models[0], seq, policy, 4, torch.Generator().manual_seed(5)),
                           paper.target_logits(models[0], seq, policy, 4, torch.Generator().manual_seed(5), pre))
    assert np.array_equal(paper.sample_answers_shared(models[0], seq, 8, es, 0.7, torch.Generator().manual_seed(6)),
                          paper.sample_answers_shared(models[0], seq, 8, es, 0.7, torch.Generator().manual_seed(6), pre))
    assert p.shape == (1, 40)
    many = paper.sample_answers_shared(models[0], seq, 400, topk, 1.0, gen)
    hits = (many == answer_code(seq[:, 5:])[:, None]).mean(1)
    assert np.abs(hits - p[0]).max() < 0.12


def test_pass_at_k_from_draws_is_unbiased():
    rng = np.random.default_rng(0)
    p = rng.uniform(0, 1, (6, 3))
    brute = np.array([1 - np.mean([np.prod([1 - p[r, j] for r in sub]) for sub in combinations(range(6), 4)])
                      for j in range(3)])
    np.testing.assert_allclose(paper.pass_at_k_draws(p, 4), brute)
    np.testing.assert_allclose(paper.pass_at_k_draws(p[:1], 4), 1 - (1 - p[0]) ** 4)
    with pytest.raises(ValueError):
        paper.pass_at_k_draws(p[:3], 4)


def test_largest_estimate_and_vectorised_neighbour_gap():
    gaps = paper.neighbour_gap(np.array([0.5, 0.2]), (0.0, np.array([0.1, 0.3])), (1.0, np.array([0.4, 0.1])))
    np.testing.assert_allclose(gaps, [0.1, -0.1])   # above both neighbours, per replicate
    from compendium.stats import Estimate

    big = paper.largest_estimate([Estimate(1, 0, 2, 0.98), Estimate(3, -1, 4, 0.98)], 0.95)
    assert (big.point, big.low, big.high, big.level) == (3, 0, 4, 0.95)
    assert paper.largest_estimate([], 0.95) is None


def test_unshared_logits_route_the_prompt_too():
    """The power control's decoder: without noise it is the full forward pass (and the shared-prefill
    one); with noise, the first answer digit's logits vary between draws, which the shared prefill
    never lets happen."""
    model = tiny_models(1, steps=1)[0]
    seq = paper.splits()["test"][:20]
    topk = paper.RoutingPolicy.top_k(4, 8)
    full, _ = model(torch.as_tensor(seq[:, :SEQ_LEN - 1]))
    plain = paper.target_logits_unshared(model, seq, topk, 4, torch.Generator().manual_seed(0), chunk=7)
    assert plain.shape == (1, 20, 3, 10)
    torch.testing.assert_close(plain[0], full[:, PROMPT_LEN - 1:, :10])
    torch.testing.assert_close(plain, paper.target_logits(model, seq, topk, 4, torch.Generator().manual_seed(0)),
                               atol=1e-4, rtol=1e-4)
    es = paper.RoutingPolicy.expert_sample(4, 1, 7, 2.0)
    shared = paper.target_logits(model, seq, es, 4, torch.Generator().manual_seed(1))
    noisy = paper.target_logits_unshared(model, seq, es, 4, torch.Generator().manual_seed(1), chunk=30)
    assert noisy.shape == (4, 20, 3, 10)
    assert torch.equal(shared[:, :, 0], shared[:1, :, 0].expand(4, -1, -1))      # first digit: no noise
    assert (noisy[:, :, 0] - noisy[:1, :, 0]).abs().amax() > 1e-3                 # first digit: noisy
    again = paper.target_logits_unshared(model, seq, es, 4, torch.Generator().manual_seed(1), chunk=4096)
    torch.testing.assert_close(noisy, again)                                      # chunking changes nothing
