"""Tests for compendium.papers.speculative_coupled_decoding: shapes, properties, references, tiny run."""

import dataclasses
import json

import numpy as np
import pytest
import scipy.stats

from compendium.papers import speculative_coupled_decoding as paper

TINY_LM = paper.TrainSettings(n_embd=8, n_layer=1, n_head=2, steps=3, batch_size=8)
TINY = dict(lossless_samples=1000, lossless_seeds=1, coupling_draws=1000, markov_sequences=10, markov_seeds=2,
            markov_length=8, window=4, prompts=10, samples_per_prompt=1, timing_prompts=1, joint_samples=1000)


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    """Tiny models run fastest on one thread (two threads spin badly on a busy 2-core machine)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def tiny_lm(tmp_path_factory, one_torch_thread):
    out = tmp_path_factory.mktemp("digits_lm")
    paper.build_asset(out, "smoke", 0, settings=TINY_LM)
    return out


def chain(vocab=3, order=2, alpha=1.0, seed=0):
    return paper.random_ngram(vocab, order, alpha, np.random.default_rng(seed))


# ---------------------------------------------------------------- shapes
@pytest.mark.parametrize("method", ["ar", *paper.METHODS])
def test_decode_shapes_and_bookkeeping(method):
    model = chain(vocab=4, order=1)
    out = paper.decode(model, method, 11, 4, 3, np.random.default_rng(1), batch=7)
    assert out.tokens.shape == (7, 11) and out.nfe.shape == (7,)
    assert out.tokens.min() >= 0 and out.tokens.max() < 4
    assert out.accepted.shape[0] == 7 and out.accepted.shape[1] == out.nfe.max()
    assert np.array_equal(out.accepted.sum(axis=1), np.full(7, 11)), "every token is committed once"
    assert np.all(out.nfe <= 11) and np.all(out.nfe >= int(np.ceil(11 / 3)))
    running = np.arange(out.accepted.shape[1])[None] < out.nfe[:, None]
    assert np.all(out.accepted[running] >= 1) and np.all(out.accepted[~running] == 0)
    assert np.all(out.accepted <= 3)


def test_model_shapes():
    model = chain(vocab=3, order=2)
    assert model.vocab == 3 and model.order == 2 and model.table.shape == (4, 4, 3)
    tokens = np.zeros((5, 6), dtype=np.int64)
    assert model(tokens, np.zeros((5, 2), dtype=np.int64)).shape == (5, 2, 3)
    assert paper.all_sequences(3, 4).shape == (81, 4)


def test_digits_lm_shapes_and_layout(tiny_lm):
    lm = paper.DigitsLM.load(tiny_lm)
    prompts, full = lm.prompts(6, paper.PROMPT_PIXELS)
    assert prompts.shape == (6, 1 + paper.PROMPT_PIXELS) and full.shape == (6, 65)
    assert np.all(prompts[:, 0] >= paper.PIXEL_LEVELS) and np.all(full[:, 1:] < paper.PIXEL_LEVELS)
    probs = lm(full, np.array([[1, 5, 64]] * 6))
    assert probs.shape == (6, 3, paper.PIXEL_LEVELS)
    np.testing.assert_allclose(probs.sum(-1), 1.0, atol=1e-12)
    out = paper.decode(lm, "scd_maximal", 64 - paper.PROMPT_PIXELS, paper.PIXEL_LEVELS, 8,
                       np.random.default_rng(0), prefix=prompts)
    assert out.tokens.shape == (6, 56) and out.tokens.max() < paper.PIXEL_LEVELS


def test_grouped_forward_equals_one_full_pass(tiny_lm):
    """Rows grouped by how far they reach give the probabilities of one pass over all 65 tokens."""
    import torch

    lm = paper.DigitsLM.load(tiny_lm)
    _, full = lm.prompts(12, paper.PROMPT_PIXELS)
    rng = np.random.default_rng(0)
    starts = rng.integers(1, 62, size=12)
    positions = np.minimum(starts[:, None] + np.arange(4), 64)  # rows end anywhere from 4 to 64
    grouped = lm(full, positions)
    with torch.no_grad():
        logits = lm.model(input_ids=torch.from_numpy(full[:, :64])).logits[..., :paper.PIXEL_LEVELS].double()
    one_pass = torch.softmax(logits, dim=-1).numpy()[np.arange(12)[:, None], positions - 1]
    np.testing.assert_allclose(grouped, one_pass, atol=1e-6)
    assert len(np.unique((positions.max(1) - 1) // paper.digits_lm.GROUP_TOKENS)) > 2, "several groups were used"


def test_shared_prefix_view_equals_the_plain_call(tiny_lm):
    """One prefix encoded once and broadcast gives the plain call's distributions; short common
    prefixes and single rows take the plain call itself (so decoder timings are untouched)."""
    lm = paper.DigitsLM.load(tiny_lm)
    shared = paper.digits_lm.SharedPrefixLM(lm)
    _, full = lm.prompts(3, paper.PROMPT_PIXELS)
    rng = np.random.default_rng(1)
    tokens = np.concatenate([np.broadcast_to(full[0, :30], (40, 30)), rng.integers(0, paper.PIXEL_LEVELS, (40, 20))], 1)
    positions = np.minimum(31 + rng.integers(0, 12, 40)[:, None] + np.arange(5), 49)  # rows reach several groups
    np.testing.assert_allclose(shared(tokens, positions), lm(tokens, positions), atol=1e-6)
    # the Jacobi decoder through the view draws the same tokens (same stream, same laws up to round-off)
    prefix = np.broadcast_to(full[0, :30], (200, 30)).copy()
    a = paper.decode(shared, "scd_maximal", 3, paper.PIXEL_LEVELS, 3, np.random.default_rng(4), prefix=prefix)
    b = paper.decode(lm, "scd_maximal", 3, paper.PIXEL_LEVELS, 3, np.random.default_rng(4), prefix=prefix)
    assert np.mean(a.tokens == b.tokens) > 0.99
    ar_shared = shared.sample_autoregressive(prefix, 5, np.random.default_rng(5))
    ar_plain = lm.sample_autoregressive(prefix, 5, np.random.default_rng(5))
    assert np.mean(ar_shared.tokens == ar_plain.tokens) > 0.99 and np.all(ar_shared.nfe == 5)
    calls = []
    lm_spy = type("Spy", (), {"vocab": lm.vocab, "__call__": lambda self, t, p: calls.append(len(t)) or lm(t, p)})()
    view = paper.digits_lm.SharedPrefixLM(lm_spy, minimum=16)
    view(full[:1], np.array([[40, 41]]))                       # one row: the plain call
    view(full[:3], np.array([[40, 41]] * 3))                   # different digits share fewer than 16 tokens
    assert calls == [1, 3]
    short = np.concatenate([np.broadcast_to(full[0, :12], (40, 12)), tokens[:, 30:35]], 1)   # a 12-token prefix
    np.testing.assert_allclose(shared(short, np.minimum(positions - 18, 16)), lm(short, np.minimum(positions - 18, 16)),
                               atol=1e-6)
    with pytest.raises(ValueError):
        shared(tokens, np.zeros_like(positions))


def test_cached_autoregressive_sampler_matches_the_uncached_one(tiny_lm):
    lm = paper.DigitsLM.load(tiny_lm)
    prompts, _ = lm.prompts(20, paper.PROMPT_PIXELS)
    cached = lm.sample_autoregressive(prompts, 56, np.random.default_rng(3))
    plain = paper.decode(lm, "ar", 56, paper.PIXEL_LEVELS, 1, np.random.default_rng(3), prefix=prompts)
    # same generator stream and (up to float round-off) the same distributions: the same draws
    assert np.mean(cached.tokens == plain.tokens) > 0.99
    assert np.all(cached.nfe == 56)


# ---------------------------------------------------------------- properties
def test_residual_and_acceptance_properties():
    rng = np.random.default_rng(0)
    p, q = rng.dirichlet(np.ones(6), size=50), rng.dirichlet(np.ones(6), size=50)
    r = paper.residual_distribution(p, q)
    assert np.all(r >= 0)
    np.testing.assert_allclose(r.sum(-1), 1.0, atol=1e-12)
    assert np.all(r[p <= q] == 0), "the residual lives where p exceeds q"
    np.testing.assert_allclose(paper.residual_distribution(p, p), p)  # nothing left: fall back to p
    # a one-hot draft is accepted with probability p(d) and its residual is p without d
    d = rng.integers(0, 6, size=50)
    onehot = np.eye(6)[d]
    np.testing.assert_allclose(paper.acceptance_ratio(d, onehot, p), p[np.arange(50), d])
    expected = p.copy()
    expected[np.arange(50), d] = 0
    np.testing.assert_allclose(paper.residual_distribution(p, onehot), expected / expected.sum(-1, keepdims=True))
    tv = paper.total_variation(p, q)
    np.testing.assert_allclose(tv, 0.5 * np.abs(p - q).sum(-1))


def test_window_one_is_autoregressive_in_cost():
    out = paper.decode(chain(vocab=5, order=1), "scd_maximal", 9, 5, 1, np.random.default_rng(0), batch=20)
    assert np.all(out.nfe == 9)


def test_deterministic_target_is_decoded_in_one_pass_per_window():
    table = np.zeros((4, 3))  # order 1: token t -> t + 1 mod 3, deterministic
    for c in range(4):
        table[c, (c + 1) % 3] = 1.0
    model = paper.NGramModel(table)
    for method in ("scd_maximal", "scd_gumbel"):
        out = paper.decode(model, method, 12, 3, 4, np.random.default_rng(0), batch=50)
        assert np.all(out.tokens == (np.arange(12) + 1) % 3)  # BOS row maps to token 1
        assert np.all(out.nfe <= 12)


def test_sequence_probabilities_sum_to_one_and_index_roundtrip():
    model = chain(vocab=3, order=2)
    probs = paper.sequence_probabilities(model, 3, 5)
    assert probs.shape == (243,) and np.all(probs > 0)
    assert abs(probs.sum() - 1) < 1e-12
    seqs = paper.all_sequences(3, 5)
    assert np.array_equal(paper.sequence_index(seqs, 3), np.arange(243))


def test_ngram_matches_a_direct_lookup():
    model = chain(vocab=4, order=2, seed=3)
    tokens = np.array([[2, 0, 3, 1]])
    p = model(tokens, np.array([[0, 1, 2, 3]]))[0]
    bos = 4
    np.testing.assert_array_equal(p[0], model.table[bos, bos])
    np.testing.assert_array_equal(p[1], model.table[bos, 2])
    np.testing.assert_array_equal(p[3], model.table[0, 3])


def test_statistics_helpers():
    counts = np.array([30, 50, 20])
    probs = np.array([0.3, 0.5, 0.2])
    stat, dof, p = paper.pooled_chisquare(counts * 10, probs)
    ref = scipy.stats.chisquare(counts * 10, probs * 1000)
    assert dof == 2 and abs(stat - ref.statistic) < 1e-12 and abs(p - ref.pvalue) < 1e-12
    # cells expected below 5 are pooled
    _, dof_small, _ = paper.pooled_chisquare(np.array([90, 5, 5]), np.array([0.92, 0.04, 0.04]))
    assert dof_small == 1
    np.testing.assert_allclose(paper.holm(np.array([0.01, 0.04, 0.03])), [0.03, 0.06, 0.06])
    assert paper.homogeneity_test(np.array([50, 50, 0]), np.array([50, 50, 0])) == 1.0
    assert paper.homogeneity_test(np.array([90, 10]), np.array([10, 90])) < 1e-20
    with pytest.raises(ValueError):
        paper.pooled_chisquare(np.ones(3), np.ones(3))
    # acceptance curve: means over the running sequences, cut where too few still run
    accepted, nfe = np.array([[2, 2, 0], [1, 1, 1], [3, 0, 0]]), np.array([2, 3, 1])
    np.testing.assert_allclose(paper.mean_acceptance(accepted, nfe), [2.0, 1.5, 1.0])
    np.testing.assert_allclose(paper.mean_acceptance(accepted, nfe, min_fraction=0.5), [2.0, 1.5])


# ---------------------------------------------------------------- references
def test_maximal_coupling_exact_joint_and_sampler():
    rng = np.random.default_rng(5)
    p, q = rng.dirichlet(np.ones(5)), rng.dirichlet(np.ones(5))
    # the joint law of (d, d') written out by hand
    keep = np.minimum(1, p / q)
    joint = np.diag(q * keep) + np.outer(q * (1 - keep), paper.residual_distribution(p, q))
    np.testing.assert_allclose(joint.sum(axis=0), p, atol=1e-12)  # marginal of d' is p
    np.testing.assert_allclose(joint.sum(axis=1), q, atol=1e-12)
    assert abs(np.trace(joint) - (1 - paper.total_variation(p, q))) < 1e-12
    n = 200_000
    d = paper.categorical(np.broadcast_to(q, (n, 5)), rng)
    d2 = paper.maximal_coupling(d, np.broadcast_to(q, (n, 5)), np.broadcast_to(p, (n, 5)), rng)
    counts = np.zeros((5, 5))
    np.add.at(counts, (d, d2), 1)
    _, _, pval = paper.pooled_chisquare(counts.ravel(), joint.ravel() / joint.sum())
    assert pval > 1e-4


def test_gumbel_agreement_formula_and_bounds():
    rng = np.random.default_rng(2)
    p, q = rng.dirichlet(np.ones(4)), rng.dirichlet(np.ones(4))
    g1, g2 = paper.gumbel_coupling(q, p, rng.gumbel(size=(200_000, 4)))
    exact = paper.gumbel_agreement(p, q)
    assert abs(np.mean(g1 == g2) - exact) < 5 * np.sqrt(exact * (1 - exact) / 200_000)
    for _ in range(200):
        p, q = rng.dirichlet(np.full(6, 0.3)), rng.dirichlet(np.full(6, 0.3))
        tv = paper.total_variation(p, q)
        assert (1 - tv) / (1 + tv) - 1e-12 <= paper.gumbel_agreement(p, q) <= 1 - tv + 1e-12


def _reference_gumbel_decode(model, length, vocab, window, noise, row):
    """Slow one-sequence SCD-Gumbel, written position by position from the algorithm."""
    tokens = np.zeros(length, dtype=np.int64)
    q = np.zeros((length, vocab))
    n, nfe, end = 0, 0, 0

    def probs(k):
        return model(tokens[None], np.array([[k]]))[0, 0]

    for k in range(min(window, length)):  # first window: argmax of the noise, one-hot q
        tokens[k] = np.argmax(noise.draft_gumbel[row, k])
        q[k] = np.eye(vocab)[tokens[k]]
    end = min(window, length)
    while n < length:
        p = {k: probs(k) for k in range(n, end)}  # one "forward pass" on the current tokens
        nfe += 1
        m = n
        while m < end:
            ratio = min(1.0, p[m][tokens[m]] / q[m][tokens[m]])
            if noise.accept_uniform[row, m] < ratio:
                m += 1
                continue
            res = paper.residual_distribution(p[m], q[m])
            with np.errstate(divide="ignore"):
                tokens[m] = np.argmax(np.log(res) + noise.residual_gumbel[row, m])
            break
        committed = m + 1 if m < end else end
        for k in range(committed, end):  # renew the stale drafts by the shared noise
            with np.errstate(divide="ignore"):
                tokens[k] = np.argmax(np.log(p[k]) + noise.draft_gumbel[row, k])
            q[k] = p[k]
        n = committed
        new_end = min(n + window, length)
        for k in range(end, new_end):
            tokens[k] = np.argmax(noise.draft_gumbel[row, k])
            q[k] = np.eye(vocab)[tokens[k]]
        end = new_end
    return tokens, nfe


def test_vectorised_gumbel_decoder_matches_slow_reference():
    model = chain(vocab=4, order=2, alpha=0.5, seed=7)
    B, T, V, L = 12, 10, 4, 3
    noise = paper.NoiseTable.draw(B, T, V, np.random.default_rng(11))
    fast = paper.decode(model, "scd_gumbel", T, V, L, np.random.default_rng(0), batch=B, noise=noise)
    for row in range(B):
        tokens, nfe = _reference_gumbel_decode(model, T, V, L, noise, row)
        assert np.array_equal(fast.tokens[row], tokens), row
        assert fast.nfe[row] == nfe


@pytest.mark.parametrize("method", ["ar", *paper.METHODS])
def test_lossless_on_exact_chain_and_stale_control_rejected(method):
    model = chain(vocab=3, order=2)
    exact = paper.sequence_probabilities(model, 3, 5)
    out = paper.decode(model, method, 5, 3, 3, np.random.default_rng(42), batch=30_000)
    counts = np.bincount(paper.sequence_index(out.tokens, 3), minlength=243)
    pval = paper.pooled_chisquare(counts, exact)[2]
    if method == "scd_stale":  # regression test: the stored q must be p_k, not the old q_k
        assert pval < 1e-3
    else:
        assert pval > 1e-4


def test_gumbel_decode_is_a_function_of_the_noise_table():
    model = chain(vocab=3, order=1)
    noise = paper.NoiseTable.draw(40, 8, 3, np.random.default_rng(3))
    a = paper.decode(model, "scd_gumbel", 8, 3, 4, np.random.default_rng(0), batch=40, noise=noise)
    b = paper.decode(model, "scd_gumbel", 8, 3, 4, np.random.default_rng(99), batch=40, noise=noise)
    assert np.array_equal(a.tokens, b.tokens) and np.array_equal(a.nfe, b.nfe)
    c = paper.decode(model, "scd_gumbel", 8, 3, 4, np.random.default_rng(0), batch=40,
                     noise=paper.NoiseTable.draw(40, 8, 3, np.random.default_rng(4)))
    assert not np.array_equal(a.tokens, c.tokens)


def test_coupling_beats_independent_redraws_on_a_markov_chain():
    model = chain(vocab=16, order=1, alpha=1.0, seed=1)
    tpf = {m: paper.decode(model, m, 32, 16, 8, np.random.default_rng(0), batch=100).tokens_per_forward.mean()
           for m in ("sjd", "scd_maximal")}
    assert tpf["scd_maximal"] > 1.2 * tpf["sjd"]


# ---------------------------------------------------------------- the asset
def test_build_asset_is_deterministic_and_leaves_global_rng(tiny_lm, tmp_path):
    import torch

    state = torch.get_rng_state()
    paper.build_asset(tmp_path, "smoke", 0, settings=TINY_LM)
    assert torch.equal(state, torch.get_rng_state()), "the builder must not move the global torch RNG"
    assert {"model.pt", "config.json", "metadata.json"} <= {p.name for p in tmp_path.iterdir()}
    a = torch.load(tiny_lm / "model.pt", weights_only=True)
    b = torch.load(tmp_path / "model.pt", weights_only=True)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    meta = json.loads((tmp_path / "metadata.json").read_text())
    assert len(meta["test_indices"]) == 297 and meta["metrics"]["test_nll"] > 0
    with pytest.raises(ValueError):
        paper.settings_for("medium")


def test_quantize_and_split():
    assert paper.quantize(np.array([0, 1, 8, 16])).tolist() == [0, 0, 7, 15]
    seqs, train, test = paper.digit_sequences()
    assert seqs.shape == (1797, 65) and len(np.intersect1d(train, test)) == 0 and len(train) + len(test) == 1797


# ---------------------------------------------------------------- config and run
@pytest.mark.parametrize(
    "bad",
    [dict(lossless_samples=10), dict(lossless_seeds=0), dict(coupling_draws=2.5), dict(markov_seeds=1),
     dict(window=0), dict(window=20, markov_length=16), dict(prompts=300), dict(samples_per_prompt=True),
     dict(timing_prompts=0), dict(seed=-1)],
)
def test_bad_config_raises(bad):
    with pytest.raises(ValueError):
        paper.Config(**bad)


def test_bad_inputs_raise():
    model = chain()
    with pytest.raises(ValueError):
        paper.decode(model, "sjd_fast", 5, 3, 2, np.random.default_rng(0), batch=2)
    with pytest.raises(ValueError):
        paper.decode(model, "sjd", 0, 3, 2, np.random.default_rng(0), batch=2)
    with pytest.raises(ValueError):
        paper.NGramModel(np.ones((3, 3)))
    with pytest.raises(ValueError):
        paper.random_ngram(3, 1, 0.0, np.random.default_rng(0))


def test_tiny_run_is_deterministic(tiny_lm, monkeypatch):
    from compendium.papers.speculative_coupled_decoding import experiment

    monkeypatch.setattr(experiment, "JOINT_PROMPTS", 1)  # keep the test fast: one prefix
    lm = paper.DigitsLM.load(tiny_lm)
    config = paper.Config(**TINY)
    first, second = paper.run(config, lm), paper.run(config, lm)

    def same(a, b):
        if isinstance(a, dict):
            return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
        if isinstance(a, np.ndarray):
            return np.array_equal(a, b)
        return a == b

    for field in dataclasses.fields(paper.Result):
        if field.name != "lm":
            assert same(getattr(first, field.name), getattr(second, field.name)), field.name
    for field in dataclasses.fields(paper.LMResult):
        if field.name != "timing":
            assert same(getattr(first.lm, field.name), getattr(second.lm, field.name)), field.name
    assert first.markov_tokens_per_forward.shape == (3, 2, len(paper.SPEED_METHODS))
    assert first.lm.tokens_per_forward.shape == (10, len(paper.LM_METHODS))
    assert set(first.lm.joint["tests"]) == set(paper.JOINT_SAMPLERS)
    assert len(first.lm.joint["prefix_lengths"]) == 1
    assert all(0 <= t["p_value"] <= 1 and t["dof"] >= 0 for t in first.lm.joint["tests"].values())
    assert np.all(first.lm.tokens_per_forward[:, 0] == 1.0)  # AR: one token per pass
    assert first.lm.gumbel_replay_mismatches == 0 and first.lossless_gumbel_replay_mismatches == 0
    assert set(first.lossless) == set(paper.LOSSLESS_SAMPLERS)
    assert set(first.lm.sequence_test) == set(paper.LM_TESTED)
    assert all(0 <= r["p_value"] <= 1 and r["tokens"] == 10 * 56 for r in first.lm.sequence_test.values())


def test_ratio_estimates_are_paired_per_chain_and_bonferroni():
    rng = np.random.default_rng(3)
    tpf = np.empty((3, 5, 2))
    tpf[..., 0] = rng.uniform(1.5, 2.5, (3, 5))
    tpf[..., 1] = tpf[..., 0] * rng.uniform(1.6, 1.8, (3, 5))
    ests = paper.ratio_estimates(tpf)
    assert len(ests) == 3 and all(e.n == 5 and e.unit == "Markov chains (seeds)" for e in ests)
    assert all(e.low <= e.point <= e.high and 1.6 <= e.point <= 1.8 for e in ests)
    np.testing.assert_allclose([e.point for e in ests], (tpf[..., 1] / tpf[..., 0]).mean(1))
    assert abs(ests[0].level - (1 - 0.05 / 3)) < 1e-12
    low = paper.smallest_estimate(ests, 0.95)
    assert low.point == min(e.point for e in ests) and low.low == min(e.low for e in ests)
    assert low.high == min(e.high for e in ests) and low.level == 0.95
    with pytest.raises(ValueError):
        paper.ratio_estimates(tpf[:, :1])
    with pytest.raises(ValueError):
        paper.smallest_estimate([], 0.95)


def test_sequence_score_test_is_calibrated_and_sees_the_stale_sampler():
    chain = paper.random_ngram(16, 1, 1.0, np.random.default_rng(0))
    empty = np.zeros((300, 0), dtype=np.int64)
    zs = []
    for s in range(20):  # AR samples: z should look standard normal
        out = paper.decode(chain, "ar", 24, 16, 8, np.random.default_rng(100 + s), batch=300)
        zs.append(paper.sequence_score_test(chain, empty, out.tokens)["z"])
    assert abs(np.mean(zs)) < 0.8 and 0.5 < np.std(zs) < 1.6
    long_empty = np.zeros((300, 0), dtype=np.int64)
    stale = paper.decode(chain, "scd_stale", 56, 16, 16, np.random.default_rng(7), batch=300)
    assert paper.sequence_score_test(chain, long_empty, stale.tokens)["p_value"] < 1e-6
    coupled = paper.decode(chain, "scd_maximal", 56, 16, 16, np.random.default_rng(7), batch=300)
    assert paper.sequence_score_test(chain, long_empty, coupled.tokens)["p_value"] > 1e-3
    with pytest.raises(ValueError):
        paper.sequence_score_test(chain, empty[:2], stale.tokens)


def test_holm_is_the_shared_one():
    from compendium import stats

    assert paper.holm is stats.holm


# ---------------------------------------------------------------- round-2 checks
def test_redrawn_control_has_sjd_speed_and_coupling_does_not():
    model = chain(vocab=16, order=1, alpha=1.0, seed=1)
    tpf = {m: paper.decode(model, m, 32, 16, 8, np.random.default_rng(0), batch=150).tokens_per_forward.mean()
           for m in ("sjd", "scd_maximal", "scd_redrawn")}
    assert abs(tpf["scd_redrawn"] / tpf["sjd"] - 1) < 0.08  # same law as SJD: no speed-up
    assert tpf["scd_maximal"] > 1.2 * tpf["scd_redrawn"]


def test_placebo_and_envelope_estimates():
    rng = np.random.default_rng(5)
    tpf = np.empty((3, 6, 2))
    tpf[..., 0] = rng.uniform(1.5, 2.5, (3, 6))
    tpf[..., 1] = tpf[..., 0] * rng.uniform(0.97, 1.03, (3, 6))
    ests = paper.placebo_estimates(tpf, num=1)
    np.testing.assert_allclose([e.point for e in ests], (tpf[..., 1] / tpf[..., 0] - 1).mean(1))
    assert abs(ests[0].level - (1 - 0.10 / 3)) < 1e-12
    env = paper.envelope_estimate(ests, 0.90)
    assert env.low == min(e.low for e in ests) and env.high == max(e.high for e in ests)
    assert abs(env.point) == max(abs(e.point) for e in ests) and env.level == 0.90
    with pytest.raises(ValueError):
        paper.envelope_estimate([], 0.9)


def test_exact_joint_test_passes_exact_samplers_and_rejects_biased_ones():
    model = chain(vocab=4, order=1, alpha=1.0, seed=2)
    prefix = np.array([1, 2])
    exact = paper.exact_continuations(model, prefix, 3)
    seqs = paper.all_sequences(4, 3)
    brute = np.ones(len(seqs))  # one position at a time, an independent path through the model
    for t in range(3):
        full = np.concatenate([np.broadcast_to(prefix, (len(seqs), 2)), seqs], axis=1)
        brute *= model(full, np.full((len(seqs), 1), 2 + t))[:, 0][np.arange(len(seqs)), seqs[:, t]]
    np.testing.assert_allclose(exact, brute, rtol=1e-12)
    batch = np.broadcast_to(prefix, (20_000, 2)).copy()
    for method in ("ar", "scd_maximal"):
        out = paper.decode(model, method, 3, 4, 3, np.random.default_rng(11), prefix=batch)
        assert paper.joint_test([out.tokens], [exact], 4)["p_value"] > 1e-3, method
    hot = paper.Tempered(model, 1.1)  # a deliberately biased sampler, as in the chapter's control
    biased = paper.decode(hot, "ar", 3, 4, 3, np.random.default_rng(3), prefix=batch)
    hot_exact = paper.exact_continuations(hot, prefix, 3)
    both = paper.exact_continuations(model, prefix, 3, (1.0, 1.1))
    np.testing.assert_allclose(both[0], exact, rtol=1e-12)
    np.testing.assert_allclose(both[1], hot_exact, rtol=1e-10)
    assert 0.005 < 0.5 * np.abs(hot_exact - exact).sum() < 0.2
    assert paper.joint_test([biased.tokens], [exact], 4)["p_value"] < 1e-3
    assert paper.joint_test([biased.tokens], [hot_exact], 4)["p_value"] > 1e-3
    rng = np.random.default_rng(4)
    assert paper.simulated_power([exact], [hot_exact], 20_000, rng, replicates=20) >= 0.8
    assert paper.simulated_power([exact], [exact], 2_000, rng, replicates=40) <= 0.15  # the test's size
