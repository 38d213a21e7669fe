"""Tests for compendium.papers.online_spec: shapes, gradients, learners, losslessness, tiny run."""

import dataclasses

import numpy as np
import pytest
import scipy.stats

from compendium import speculative as spec
from compendium.papers import online_spec as paper

TINY = dict(vocab=12, gamma=3, draft_rank=2, offline_sequences=32, prompts_per_chunk=6, tokens_per_prompt=8,
            chunks_per_segment=2, replicates=2, check_pairs=4, check_rounds=400, pinsker_pairs=200)


def target(V=12, seed=0, **kw):
    args = dict(leak=0.05, sharpness=1.0, interaction=1.0) | kw
    return paper.block_target(V, 3, args["leak"], args["sharpness"], args["interaction"], np.random.default_rng(seed))


# ---------------------------------------------------------------- shapes and the target
def test_target_rows_are_distributions_that_stay_in_the_block():
    tg = target()
    table = tg.model.table
    assert table.shape == (13, 13, 12)
    np.testing.assert_allclose(table.sum(-1), 1.0)
    for k, block in enumerate(tg.blocks):
        outside = np.setdiff1d(np.arange(12), block)
        assert np.all(table[:, block][..., outside] == 0), "the newest token's block is closed"
    assert np.all(table[:, 12] > 0), "after the start symbol every token is possible"
    with pytest.raises(ValueError):
        paper.block_target(4, 3, 0.0, 1.0, 1.0, np.random.default_rng(0))


def test_prompts_and_contexts_stay_in_their_domain():
    tg = target()
    rng = np.random.default_rng(1)
    prompts = paper.domain_prompts(tg, np.array([0.0, 1.0, 0.0]), 50, rng)
    assert prompts.shape == (50, 2) and np.all(np.isin(prompts, tg.blocks[1]))
    a, b = paper.sample_contexts(tg, np.array([0.0, 0.0, 1.0]), 20, 6, rng)
    assert a.shape == (120,) and np.all(np.isin(b, tg.blocks[2])) and np.all(np.isin(a, tg.blocks[2]))
    with pytest.raises(ValueError):
        paper.domain_prompts(tg, np.array([0.5, 0.6, 0.0]), 5, rng)


def test_draft_table_equals_direct_probabilities_and_survives_huge_logits():
    shape = paper.DraftShape(12, 2)
    theta = shape.init(np.random.default_rng(2), scale=1.0)
    a, b = np.divmod(np.arange(169), 13)
    table = paper.draft_table(shape, theta)
    np.testing.assert_allclose(table[a, b], paper.draft_probs(shape, theta, a, b), atol=1e-12)
    big = theta * 400  # factorised maxima underflow: rows are recomputed directly
    np.testing.assert_allclose(paper.draft_table(shape, big)[a, b], paper.draft_probs(shape, big, a, b), atol=1e-9)
    assert np.all(np.isfinite(paper.draft_table(shape, big)))


# ---------------------------------------------------------------- gradients and training
def test_kl_gradient_matches_finite_differences():
    tg = target()
    shape = paper.DraftShape(12, 2)
    rng = np.random.default_rng(3)
    theta = shape.init(rng, scale=0.5)
    a, b = rng.integers(0, 13, 40), rng.integers(0, 13, 40)
    p = tg.rows(a, b)
    w = rng.dirichlet(np.ones(40))
    loss, grad = paper.kl_loss_and_grad(shape, theta, a, b, p, w)
    q = paper.draft_probs(shape, theta, a, b)
    kl = (p * (np.log(np.where(p > 0, p, 1)) - np.log(q))).sum(1)
    assert abs(loss - w @ kl) < 1e-12 and loss >= 0
    for i in rng.choice(theta.size, 25, replace=False):
        e = np.zeros_like(theta)
        e[i] = 1e-6
        fd = (paper.kl_loss_and_grad(shape, theta + e, a, b, p, w)[0] - paper.kl_loss_and_grad(shape, theta - e, a, b, p, w)[0]) / 2e-6
        assert abs(fd - grad[i]) < 1e-6 * max(1.0, abs(fd)), i


def test_offline_fit_converges_and_gains_acceptance_on_its_domain_only():
    tg = target(V=15)
    shape = paper.DraftShape(15, 2)
    rng = np.random.default_rng(4)
    a, b = paper.sample_contexts(tg, np.array([1.0, 0, 0]), 64, 8, rng)
    aB, bB = paper.sample_contexts(tg, np.array([0, 1.0, 0]), 64, 8, rng)
    theta0 = shape.init(rng)
    theta, info = paper.fit_offline(tg, shape, theta0, a, b)
    before, after = (paper.expected_acceptance(tg, shape, th, a, b) for th in (theta0, theta))
    assert after > before + 0.2 and info["loss"] >= 0
    assert paper.expected_acceptance(tg, shape, theta, aB, bB) < 0.05, "domain B is closed: A's draft misses it"


# ---------------------------------------------------------------- decoding and learners
def test_decode_chunk_bookkeeping_and_exact_alpha():
    tg = target()
    shape = paper.DraftShape(12, 2)
    rng = np.random.default_rng(5)
    theta = shape.init(rng, scale=1.0)
    prompts = paper.domain_prompts(tg, np.array([1 / 3] * 3), 9, rng)
    draft = paper.StackedDraft(shape, [paper.Fixed(shape, theta)], 9)
    chunk = paper.decode_chunk(tg, draft, prompts, 10, 3, rng)
    assert chunk.tokens.shape == (9, 12) and np.array_equal(chunk.tokens[:, :2], prompts)
    assert np.all(chunk.accepted >= 0) and np.all(chunk.accepted <= 3)
    per_row = np.bincount(chunk.call_row, weights=chunk.accepted + 1, minlength=9)
    assert np.all(per_row >= 10), "each sequence gets at least its tokens"
    np.testing.assert_allclose(chunk.p, tg.rows(chunk.a, chunk.b))
    np.testing.assert_allclose(chunk.q, paper.draft_probs(shape, theta, chunk.a, chunk.b), atol=1e-12)
    np.testing.assert_allclose(chunk.alpha, spec.acceptance_rate(chunk.p, chunk.q))
    # every emitted token after its context is one the target allows
    tok = chunk.tokens
    assert np.all(tg.rows(tok[:, :-2], tok[:, 1:-1])[np.arange(9)[:, None], np.arange(10), tok[:, 2:]] > 0)


def test_stacked_draft_gives_each_learner_its_own_rows_and_mixture():
    shape = paper.DraftShape(12, 2)
    rng = np.random.default_rng(6)
    t1, t2 = shape.init(rng, 1.0), shape.init(rng, 1.0)
    mix = paper.HedgeMixture(shape, t1, [0.1, 1.0, 3.0], 1.0, 0.0)
    mix.thetas = [t1, t2, t1]
    mix.log_w = np.log(np.array([0.2, 0.5, 0.3]))
    stacked = paper.StackedDraft(shape, [paper.Fixed(shape, t1), mix, paper.Fixed(shape, t2)], 4)
    rows = np.array([0, 3, 4, 7, 8, 11])
    a, b = rng.integers(0, 13, 6), rng.integers(0, 13, 6)
    q = stacked(rows, a, b)
    q1, q2 = paper.draft_probs(shape, t1, a, b), paper.draft_probs(shape, t2, a, b)
    np.testing.assert_allclose(q[:2], q1[:2])
    np.testing.assert_allclose(q[2:4], 0.5 * q1[2:4] + 0.5 * q2[2:4])
    np.testing.assert_allclose(q[4:], q2[4:])


def _chunk(tg, shape, rng, n=30):
    a, b = rng.integers(0, 12, n), rng.integers(0, 12, n)
    p = tg.rows(a, b)
    return paper.Chunk(np.zeros(n, int), a, b, p, p, np.ones(n), np.zeros(1, int), np.zeros(1, int), np.zeros((1, 2), int))


def test_learner_updates_follow_their_equations():
    tg = target()
    shape = paper.DraftShape(12, 2)
    rng = np.random.default_rng(7)
    theta = shape.init(rng)
    c1, c2 = _chunk(tg, shape, rng), _chunk(tg, shape, rng)
    ne1, ne2 = paper.entropy_term(c1.p), paper.entropy_term(c2.p)

    def grad(th, c):
        return paper.kl_loss_and_grad(shape, th, c.a, c.b, c.p)[1]

    ogd = paper.OGD(shape, theta, 2.0)
    ogd.update(c1, ne1, 0)
    np.testing.assert_allclose(ogd.theta, theta - 2.0 * grad(theta, c1))
    opt = paper.Optimistic(shape, theta, 2.0)
    opt.update(c1, ne1, 0)
    x1 = theta - 2.0 * 2 * grad(theta, c1)
    np.testing.assert_allclose(opt.theta, x1)
    opt.update(c2, ne2, 1)
    np.testing.assert_allclose(opt.theta, x1 - 2.0 * (2 * grad(x1, c2) - grad(theta, c1)))
    mom = paper.Momentum(shape, theta, 2.0, 0.5)
    mom.update(c1, ne1, 0)
    mom.update(c2, ne2, 1)
    v1 = grad(theta, c1)
    y1 = theta - 0.5 * 2.0 * v1
    np.testing.assert_allclose(mom.theta, y1 - 0.5 * 2.0 * (0.5 * v1 + grad(y1, c2)))
    fixed = paper.Fixed(shape, theta, schedule=[theta, theta + 1, theta + 2])
    fixed.update(c1, ne1, 0)
    np.testing.assert_allclose(fixed.theta, theta + 1)


def test_hedge_weights_move_to_the_better_step_size():
    w = paper.hedge_step(np.log(np.full(3, 1 / 3)), np.array([1.0, 0.0, 2.0]), 2.0, 0.0)
    assert np.isclose(np.exp(w).sum(), 1) and np.argmax(w) == 1
    shared = paper.hedge_step(np.log(np.array([1.0, 1e-30, 1e-30]) / (1 + 2e-30)), np.zeros(3), 1.0, 0.3)
    assert np.exp(shared).min() >= 0.1 - 1e-12, "fixed share keeps every weight above share / K"
    tg = target()
    shape = paper.DraftShape(12, 2)
    rng = np.random.default_rng(8)
    ens = paper.HedgeAverage(shape, shape.init(rng), [0.1, 1.0, 3.0], 5.0, 0.0)
    c = _chunk(tg, shape, rng)
    ne = paper.entropy_term(c.p)
    ens.update(c, ne, 0)
    np.testing.assert_allclose(ens.theta, np.mean(ens.proposals, axis=0))  # equal weights on chunk 0
    before = ens.weights.copy()
    ens.update(c, ne, 1)
    assert not np.allclose(before, ens.weights) and np.isclose(ens.weights.sum(), 1)


def test_streams():
    for kind in paper.STREAMS:
        w = paper.stream_weights(kind, 12, 3)
        assert w.shape == (12, 3) and np.allclose(w.sum(1), 1)
    np.testing.assert_array_equal(paper.segment_domains(8), [0, 0, 1, 1, 2, 2, 0, 0])
    smooth = paper.stream_weights("smooth", 12, 3)
    assert np.argmax(smooth[0]) == 0 and np.argmax(smooth[4]) == 1 and np.argmax(smooth[8]) == 2
    with pytest.raises(ValueError):
        paper.stream_weights("wavy", 12, 3)


# ---------------------------------------------------------------- losslessness and the statistics
def test_online_decoding_is_lossless_per_context():
    tg = target(V=9, leak=0.1)
    shape = paper.DraftShape(9, 1)
    rng = np.random.default_rng(9)
    learner = paper.OGD(shape, shape.init(rng, 1.0), 5.0)
    runs = paper.run_streams(tg, [learner], paper.stream_weights("smooth", 12, 3), 60, 30, 3, rng, keep_emitted=(0,))
    p, n = paper.context_lossless_p(runs[0].emitted, tg, 12)
    assert n.min() > 100 and np.mean(p < 0.01) <= 0.2
    # the same test sees the resample-from-p bug
    fm = paper.run_formula_checks(paper.Config(**TINY))
    assert np.mean(paper.control_p_values(fm["control_samples"], 400) < 0.05) >= 0.5


def test_statistics_helpers():
    d = paper.every_replicate_difference(np.array([0.5, 0.6, 0.4]), np.array([0.4, 0.61, 0.1]))
    assert d["smallest"] == pytest.approx(-0.01) and d["wins"] == 2
    run = paper.StreamRun(np.array([0.5, 0.8]), np.array([0.4, 0.1]), np.ones(2), np.ones(2))
    lhs, rhs = paper.cumulative_pinsker(run)
    np.testing.assert_allclose(lhs, [0.5, 0.7])
    np.testing.assert_allclose(rhs, [np.sqrt(0.5 * 0.4), np.sqrt(1.0 * 0.5)])
    assert paper.geometric_identity() == 0
    pk = paper.pinsker_check(paper.Config(**TINY))
    assert pk["violations"] == 0 and pk["min_gap"] >= 0


# ---------------------------------------------------------------- config and run
@pytest.mark.parametrize("bad", [dict(vocab=5), dict(gamma=0), dict(learning_rates=(1.0, 2.0)),
                                 dict(learning_rates=(3.0, 2.0, 1.0)), dict(replicates=1), dict(hedge_share=1.0),
                                 dict(momentum=True), dict(target_smoothing=1.0), dict(seed=-1),
                                 dict(transformer_width=30), dict(transformer_temperature=0.0), dict(transformer_rank=0)])
def test_bad_config_raises(bad):
    with pytest.raises(ValueError):
        paper.Config(**bad)


def test_tiny_run_is_deterministic_and_complete():
    config = paper.Config(**TINY)
    first, second = paper.run(config), paper.run(config)
    for stream in paper.STREAMS:
        assert first.methods(stream) == second.methods(stream)
        for m in first.methods(stream):
            assert np.array_equal(first.curve(stream, m), second.curve(stream, m)), (stream, m)
            assert first.curve(stream, m).shape == (2, config.chunks)
    assert "oracle" in first.methods("piecewise") and "oracle" not in first.methods("smooth")
    assert first.ogd("piecewise") == f"ogd@{config.learning_rates[1]:g}" and first.ogd("stationary") == "ogd"
    assert np.array_equal(first.online_lossless_p, second.online_lossless_p)
    cmp = paper.ensemble_comparison(first, "piecewise", "hedge-average")
    assert cmp["vs_best"].n == 2 and cmp["best_lr"] in config.learning_rates
    assert paper.cumulative_bound_ratio(first)["max_ratio"] <= 1.0
    off = paper.offline_alpha_estimate(first)
    assert 0 <= off.point <= 1
    sp = paper.speedups(first, "piecewise", ["offline", "oracle"])
    assert all(v > 0 for v in sp.values())
    regret = paper.dynamic_regret(first)
    assert regret["oracle"] == 0.0
    assert dataclasses.is_dataclass(first)


def test_the_mixture_and_kl_helpers_agree_with_scipy():
    rng = np.random.default_rng(10)
    p, q = rng.dirichlet(np.ones(7), size=5), rng.dirichlet(np.ones(7), size=5)
    ref = scipy.stats.entropy(p.T, q.T)
    np.testing.assert_allclose(paper.entropy_term(p) - (p * np.log(q)).sum(1), ref)


def test_kernel_checks_on_the_cpu_reference():
    out = paper.kernel_checks(paper.Config(**TINY), "cpu", shapes=20)
    assert out["backend"] == "reference" and out["shapes"] == 20 and out["mismatches"] == 0
    assert out["lossless_p"].shape == (TINY["check_pairs"],) and np.all((0 <= out["lossless_p"]) & (out["lossless_p"] <= 1))


# ---------------------------------------------------------------- the second target: a random-init GPT-2
def test_transformer_target_is_the_gpt2_read_through_two_tokens():
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    from compendium.training import seeded_init

    V, T = 12, 0.7
    tg = paper.transformer_target(V, 3, 0.0, T, 0.5, 8, seed=5, heads=2)
    table = tg.model.table
    assert table.shape == (13, 13, 12)
    np.testing.assert_allclose(table.sum(-1), 1.0)
    for block in tg.blocks:
        outside = np.setdiff1d(np.arange(V), block)
        assert np.all(table[:, block][..., outside] == 0), "the newest token's block is closed"
    # an independent forward pass of the same config and seed gives the same rows (logits / T in the block)
    cfg = GPT2Config(vocab_size=V + 1, n_positions=2, n_embd=8, n_layer=2, n_head=2, resid_pdrop=0.0, embd_pdrop=0.0,
                     attn_pdrop=0.0, initializer_range=0.5, tie_word_embeddings=False)
    with seeded_init(5):
        model = GPT2LMHeadModel(cfg).eval()
    for a, b in [(0, 1), (7, 2), (12, 3), (5, 9)]:
        with torch.no_grad():
            z = model(input_ids=torch.tensor([[a, b]])).logits[0, -1, :V].double().numpy()
        block = next(bl for bl in tg.blocks if b in bl)
        expected = np.exp((z[block] - z[block].max()) / T)
        np.testing.assert_allclose(table[a, b, block], expected / expected.sum(), rtol=1e-5)
    # the older token matters (attention), and the seed decides the model
    assert np.abs(table[0, 1] - table[2, 1]).max() > 1e-3
    again = paper.transformer_target(V, 3, 0.0, T, 0.5, 8, seed=5, heads=2)
    other = paper.transformer_target(V, 3, 0.0, T, 0.5, 8, seed=6, heads=2)
    assert np.array_equal(again.model.table, table) and not np.allclose(other.model.table, table)
    # temperature: half the temperature doubles the in-block log-odds
    cold = paper.transformer_target(V, 3, 0.0, T / 2, 0.5, 8, seed=5, heads=2).model.table
    blk = tg.blocks[1]
    lo = np.log(table[3, 5, blk]) - np.log(table[3, 5, blk[0]])
    np.testing.assert_allclose(np.log(cold[3, 5, blk]) - np.log(cold[3, 5, blk[0]]), 2 * lo, atol=1e-8)
    with pytest.raises(ValueError):
        paper.transformer_target(V, 3, 0.0, 0.0, 0.5, 8, seed=5, heads=2)


def test_block_law_matches_the_ngram_target():
    rng = np.random.default_rng(11)
    tg = target(V=9, seed=3)
    scores = np.log(np.maximum(tg.model.table, 1e-300))  # re-applying the law to its own log-table
    again = paper.block_law(scores, tg.blocks, 0.0).table
    np.testing.assert_allclose(again, tg.model.table, atol=1e-12)
    with pytest.raises(ValueError):
        paper.block_law(rng.normal(size=(9, 10, 9)), tg.blocks, 0.0)


def test_tiny_run_has_the_transformer_setting():
    config = paper.Config(**TINY)
    result = paper.run(config)
    tf = result.setting("transformer")
    assert result.setting("ngram") is result
    assert tf.methods("piecewise") == ["offline"] + [f"ogd@{eta:g}" for eta in config.learning_rates] + ["oracle"]
    assert tf.methods("stationary") == ["offline", "ogd"] and len(tf.replicates) == config.replicates
    assert tf.replicates[0].runs.keys() == {"piecewise", "stationary"}
    assert tf.curve("piecewise", "oracle").shape == (2, config.chunks)
    assert not np.array_equal(tf.replicates[0].target.model.table[:12, :12], result.replicates[0].target.model.table[:12, :12])
    assert tf.online_lossless_p.shape == (TINY["check_pairs"],) and tf.control_lossless_p.shape == (TINY["check_pairs"],)
    assert np.all(np.diff(tf.online_lossless_n) <= 0), "the most frequent (replicate, context) groups, largest first"
    assert paper.cumulative_bound_ratio(tf)["max_ratio"] <= 1.0
    assert paper.every_replicate_difference(tf.alpha("piecewise", "oracle"), tf.alpha("piecewise", "offline"))["n"] == 2
    with pytest.raises(ValueError):
        result.setting("lstm")
    with pytest.raises(ValueError):
        paper.run(config, transformer=False).setting("transformer")


def test_pooled_context_test_uses_each_replicates_own_target():
    rng = np.random.default_rng(12)
    t1, t2 = target(V=9, seed=1, leak=0.1), target(V=9, seed=2, leak=0.1)

    def replicate(tg, source, n=3000):
        ctx = np.array([[0, 1], [4, 5], [7, 8]])[rng.integers(0, 3, n)]
        x = np.array([rng.choice(9, p=source.rows(a, b)) for a, b in ctx])
        run = paper.StreamRun(np.ones(2), np.ones(2), np.ones(2), np.ones(2), np.column_stack([ctx, x]))
        return paper.Replicate({"piecewise": {"ogd": run}}, {}, 0.5, {}, tg)

    good = [replicate(t1, t1), replicate(t2, t2)]
    p, n = paper.pooled_context_lossless_p(good, 4)
    assert n.shape == (4,) and np.all(np.diff(n) <= 0) and n.sum() <= 6000
    assert np.all(p > 1e-4)
    p_bad, _ = paper.pooled_context_lossless_p([replicate(t1, t2), replicate(t2, t1)], 4)
    assert np.all(p_bad < 1e-4), "tokens from the other target are rejected"
    with pytest.raises(ValueError):
        paper.pooled_context_lossless_p([paper.Replicate({"s": {}}, {}, 0.5, {}, t1)], 4)


# ---------------------------------------------------------------- the floor: the uniform draft
def test_uniform_acceptance_and_the_floor():
    p = np.array([[1.0, 0.0, 0.0, 0.0], [0.25, 0.25, 0.25, 0.25], [0.5, 0.5, 0.0, 0.0]])
    np.testing.assert_allclose(paper.uniform_acceptance(p), [0.25, 1.0, 0.5])
    # recorded on the learner's own verified positions, with no random draws of its own
    tg = target(V=9, leak=0.1)
    shape = paper.DraftShape(9, 1)
    theta = shape.init(np.random.default_rng(3), 0.0)  # zero parameters: the draft is uniform itself
    runs = paper.run_streams(tg, [paper.Fixed(shape, theta)], paper.stream_weights("piecewise", 4, 3), 8, 6, 2,
                             np.random.default_rng(4))
    np.testing.assert_allclose(runs[0].uniform_alpha, runs[0].alpha, atol=1e-12)
    assert runs[0].mean_uniform_alpha == pytest.approx(runs[0].alpha.mean())
    # the floor is the paired difference learned - uniform over replicates, on the same positions
    result = paper.run(paper.Config(**TINY), transformer=False)
    est = paper.uniform_floor(result, "piecewise", "oracle")
    diff = result.alpha("piecewise", "oracle") - result.uniform_alpha("piecewise", "oracle")
    assert est.n == 2 and est.point == pytest.approx(diff.mean())
    assert est.point > 0, "the oracle draft, trained on each segment's domain, beats the uniform draft"
    assert 0 < paper.FLOOR_MARGIN < 1


# ---------------------------------------------------------------- overlapping domains, power
def test_shared_tokens_overlap_the_domains_without_losing_them():
    V, shared = 12, 3
    tg = paper.block_target(V, 3, 0.05, 1.0, 1.0, np.random.default_rng(4), shared=shared)
    table = tg.model.table
    np.testing.assert_allclose(table.sum(-1), 1.0)
    common = np.arange(V - shared, V)
    np.testing.assert_array_equal(tg.shared, common)
    assert sum(len(b) for b in tg.blocks) == V - shared
    for block in tg.blocks:
        others = np.setdiff1d(np.arange(V - shared), block)
        after_domain = table[:, block]  # newest token in the block: its block or a shared token
        assert np.all(after_domain[..., others] == 0) and np.all(after_domain[..., common] > 0)
        after_shared = table[block][:, common]  # a shared token after a domain token: back to the block
        assert np.all(after_shared[..., common] == 0) and np.all(after_shared[..., others] == 0)
    rng = np.random.default_rng(5)
    a, b = paper.sample_contexts(tg, np.array([0.0, 1.0, 0.0]), 40, 10, rng)
    assert np.all(np.isin(b, np.concatenate([tg.blocks[1], common])))
    assert np.isin(b, common).any(), "sequences use the shared tokens"
    closed = paper.block_target(V, 3, 0.05, 1.0, 1.0, np.random.default_rng(4))
    assert closed.shared.size == 0 and len(closed.blocks[0]) == 4
    with pytest.raises(ValueError):
        paper.block_target(V, 3, 0.05, 1.0, 1.0, np.random.default_rng(4), shared=7)


def test_lossless_power_matches_a_simulated_biased_sampler():
    out = paper.lossless_power(400, 9, 50)
    assert out["allowance"] == 5
    assert out["false_alarm"] == pytest.approx(scipy.stats.binom.sf(5, 50, 0.05))
    assert scipy.stats.binom.sf(5, 50, out["reject_needed"]) == pytest.approx(0.8, abs=1e-6)
    # a Pearson test at the stated divergence rejects at about reject_needed
    rng = np.random.default_rng(0)
    p = np.full(10, 0.1)
    d = np.sqrt(out["delta2"]) * 0.1 * np.array([1, -1] * 5)  # sum d^2 / p = 10 * delta2 / 100 / 0.1 = delta2
    q = p + d
    counts = rng.multinomial(400, q, size=4000)
    stat = ((counts - 40.0) ** 2 / 40.0).sum(1)
    rate = np.mean(stat > scipy.stats.chi2.ppf(0.95, 9))
    assert abs(rate - out["reject_needed"]) < 0.03


def test_offline_drift_alpha_is_the_bc_segments_mean():
    config = paper.Config(**TINY)
    result = paper.run(config, transformer=False)
    est = paper.offline_drift_alpha(result)
    bc = np.isin(paper.segment_domains(config.chunks), [1, 2])
    np.testing.assert_allclose(est.point, result.curve("piecewise", "offline")[:, bc].mean())
    assert est.n == config.replicates
