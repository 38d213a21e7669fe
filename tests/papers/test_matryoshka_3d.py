"""Tests for compendium.papers.matryoshka_3d: the toy, the three axes, the losses, the cube, a tiny run."""

import json
import math

import numpy as np
import pytest
import torch

from compendium.losses import hard_negative_loss, info_nce
from compendium.papers import matryoshka_3d as paper
from compendium.papers import matryoshka_3d_ceiling as ceil
from compendium.papers.matryoshka_3d import data as D
from compendium.stats import Estimate
from compendium.training import seeded_init

SPEC = D.TaskSpec(num_concepts=30, num_topics=4, topic_size=20, doc_min=4, doc_max=8)
TINY_ENCODER = paper.EncoderSettings(hidden_size=16, num_layers=2, num_heads=2, num_kv_heads=1, intermediate_size=32,
                                     rank=8)


def _task(seed=0):
    return D.make_task(SPEC, np.random.default_rng(seed))


def _encoder(factorized=False, seed=0):
    torch.manual_seed(seed)
    return paper.Encoder(TINY_ENCODER, SPEC.vocab_size, SPEC.max_length, factorized=factorized).eval()


# ---------------------------------------------------------------- the toy
def test_token_map_is_a_bijection():
    L, C, F = SPEC.num_languages, SPEC.num_concepts, SPEC.forms
    lang, conc, form = np.meshgrid(np.arange(L), np.arange(C), np.arange(F), indexing="ij")
    toks = D.token_of(SPEC, lang, conc, form).ravel()
    assert len(np.unique(toks)) == L * C * F and toks.min() == 2 and toks.max() == SPEC.vocab_size - 1


def test_documents_queries_and_rendering():
    task, rng = _task(), np.random.default_rng(1)
    topics, concepts = D.sample_documents(task, 50, rng)
    lengths = (concepts >= 0).sum(1)
    assert ((lengths >= SPEC.doc_min) & (lengths <= SPEC.doc_max)).all()
    for t, row in zip(topics, concepts):
        row = row[row >= 0]
        assert len(set(row)) == len(row) and set(row) <= set(task.topic_concepts[t])
    queries = D.sample_queries(task, concepts, rng)
    for q, doc in zip(queries, concepts):
        q = q[q >= 0]
        assert 1 <= len(q) <= len(doc[doc >= 0]) and set(q) <= set(doc)
    langs = rng.integers(0, SPEC.num_languages, 50)
    ids, lens = D.render(task, concepts, langs, rng)
    assert ids.shape == (50, SPEC.doc_max + 1) and (lens == lengths + 1).all()
    assert (ids[np.arange(50), lens - 1] == D.EOS).all() and (ids[np.arange(SPEC.doc_max + 1)[None] >= lens[:, None]] == D.PAD).all()
    # each token decodes to its language and to a concept of the document, in the language's word order
    for row, n, lang, doc in zip(ids, lens, langs, concepts):
        code = (row[:n - 1] - 2) // SPEC.forms
        assert (code // SPEC.num_concepts == lang).all()
        cs = code % SPEC.num_concepts
        assert set(cs) == set(doc[doc >= 0]) and (np.diff(task.order_rank[lang][cs]) > 0).all()


def test_pool_batches_have_same_topic_hard_negatives():
    task = _task()
    pool = D.TrainingPool.make(task, 60, 10, np.random.default_rng(2))
    assert np.bincount(pool.languages).tolist() == [60, 60, 10, 10, 10, 10]
    batch = pool.batch(12, np.random.default_rng(3))
    assert batch["q"][0].shape[0] == 12 and batch["n"][0].shape[0] == 12 * SPEC.hard_negatives
    same_topic = pool.topics[batch["negatives"]] == pool.topics[batch["index"]][:, None]
    assert same_topic.all() and (batch["negatives"] != batch["index"][:, None]).all()


def test_balanced_sampling_draws_every_language_equally_often():
    task = _task()
    pool = D.TrainingPool.make(task, 60, 10, np.random.default_rng(2))
    n = 6000
    plain = np.bincount(pool.languages[pool.sample_indices(n, np.random.default_rng(3))], minlength=6) / n
    balanced = np.bincount(pool.languages[pool.sample_indices(n, np.random.default_rng(3), balanced=True)], minlength=6) / n
    assert np.allclose(plain, [60 / 160] * 2 + [10 / 160] * 4, atol=0.02)      # pool shares
    assert np.allclose(balanced, 1 / 6, atol=0.02)                             # uniform over languages
    batch = pool.batch(12, np.random.default_rng(4), balanced=True)
    same_topic = pool.topics[batch["negatives"]] == pool.topics[batch["index"]][:, None]
    assert same_topic.all() and batch["q"][0].shape[0] == 12


# ---------------------------------------------------------------- the three axes
def test_axes_follow_the_code():
    assert paper.mrl_dims(64) == [8, 16, 32, 64] and paper.mrl_dims(1024)[-1] == 1024 and len(paper.mrl_dims(1024)) == 8
    w = paper.mrl_weights(sorted(paper.mrl_dims(1024), reverse=True), 1024)
    assert np.allclose(np.round(w, 3), paper.PAPER_WEIGHTS_1024)
    assert math.isclose(paper.mrl_weights([8, 64], 64)[0], 1 / (2 * math.sqrt(8)))
    assert paper.mll_layers(6) == [1, 2, 4, 6] and paper.mll_layers(40) == [1, 2, 4, 8, 16, 24, 32, 40]
    assert paper.mll_layers(1) == [1]
    assert paper.mel_ranks(32) == [4, 8, 16, 32] and paper.mel_ranks(512) == [64, 128, 256, 512]
    assert np.allclose(paper.rank_probabilities([64, 128, 256, 512]), [1 / 15, 2 / 15, 4 / 15, 8 / 15])


def test_rank_sampling_is_proportional_to_rank():
    out = paper.rank_frequency_test([4, 8, 16, 32], 6000, np.random.default_rng(4))
    assert out["p_value"] > 1e-3 and sum(out["counts"]) == 6000
    # power: a uniform sampler is rejected by the same test
    counts = np.bincount(np.random.default_rng(5).integers(0, 4, 6000))
    import scipy.stats
    assert scipy.stats.chisquare(counts, 6000 * paper.rank_probabilities([4, 8, 16, 32])).pvalue < 1e-10


def test_svd_factorisation_is_eckart_young_and_nested():
    g = torch.Generator().manual_seed(6)
    E = torch.randn(50, 16, generator=g, dtype=torch.float64)
    gap = paper.svd_init_gap(E, 8)
    assert gap["relative_gap"] < 1e-10
    emb = paper.FactorizedEmbedding.from_svd(E, 8)
    assert sum(p.numel() for p in emb.parameters()) == 50 * 8 + 8 * 16
    ids = torch.tensor([[0, 3, 7]])
    assert torch.allclose(emb(ids, 8), emb.matrix(8)[ids]) and torch.allclose(emb(ids, 2), emb.matrix(2)[ids])
    full = paper.FactorizedEmbedding.from_svd(E, 16)
    assert torch.allclose(full.matrix(), E, atol=1e-10)
    with pytest.raises(ValueError):
        emb(ids, 9)


# ---------------------------------------------------------------- encoder and losses
def test_encoder_exits_pooling_and_padding():
    model = _encoder()
    task, rng = _task(), np.random.default_rng(7)
    ids, lens = D.render(task, D.sample_documents(task, 5, rng)[1], np.zeros(5, int), rng)
    tokens, lengths = paper.pad_batch(ids, lens)
    with torch.no_grad():
        out = model(tokens, lengths, exits=[1, 2])
        assert out[1].shape == out[2].shape == (5, 16)
        ref = model.backbone(input_ids=tokens, output_hidden_states=True)
        rows = torch.arange(5)
        assert torch.allclose(out[2], ref.last_hidden_state[rows, lengths - 1], atol=1e-6)
        assert torch.allclose(out[1], model.backbone.norm(ref.hidden_states[1][rows, lengths - 1]), atol=1e-6)
        padded = torch.cat([tokens, torch.zeros(5, 4, dtype=torch.long)], 1)   # more right padding: same embedding
        assert torch.allclose(model(padded, lengths)[2], out[2], atol=1e-5)
        single = model(tokens[:1, :int(lengths[0])], lengths[:1])[2]            # alone, unpadded: same
        assert torch.allclose(single, out[2][:1], atol=1e-5)


def test_contrastive_terms_match_the_shared_losses():
    g = torch.Generator().manual_seed(8)
    q, p = torch.randn(6, 16, generator=g), torch.randn(6, 16, generator=g)
    n = torch.randn(6, 5, 16, generator=g)
    terms = paper.contrastive_terms(q, p, n, [4, 8, 16])
    for m, t in zip([4, 8, 16], terms):
        direct = info_nce(q[:, :m], p[:, :m]) + hard_negative_loss(q[:, :m], p[:, :m], n[..., :m])
        assert torch.allclose(t, direct, atol=1e-5)


def test_variant_losses_train_and_differ():
    task = _task()
    pool = D.TrainingPool.make(task, 30, 10, np.random.default_rng(9))
    batch = pool.batch(4, np.random.default_rng(10))
    values = {}
    for name in paper.VARIANTS:
        spec = paper.variant(name, TINY_ENCODER)
        model = _encoder()
        if spec.factorized:
            model.factorize()
        model.train()
        loss = paper.variant_loss(model, spec, batch, rank=spec.ranks[0] if spec.ranks else None)
        loss.backward()
        assert torch.isfinite(loss) and any(p.grad is not None for p in model.parameters())
        values[name] = float(loss)
    assert values["plain"] != values["mrl"] and values["plain"] != values["mll"]


def test_recall_and_monotonicity():
    S = torch.eye(4)
    assert paper.recall_at_1(S).all()
    S[0, 1] = 1.0                                                   # a tie counts against the query
    assert paper.recall_at_1(S).tolist() == [False, True, True, True]
    cube = np.ones((2, 3, 2)) * 0.5
    assert paper.monotonicity_violations(cube, [4, 8], [1, 2, 4], [8, 16]) == []
    cube[1, 2, 0] = 0.45                                            # rank 8, layer 4, dim 8 drops 5 points vs layer 2
    v = paper.monotonicity_violations(cube, [4, 8], [1, 2, 4], [8, 16])
    axes = sorted(x["axis"] for x in v)
    assert axes == ["layer", "rank"] and all(abs(x["drop"] - 0.05) < 1e-12 for x in v)


def test_paired_gain_and_equivalence():
    est = paper.paired_gain([0.6, 0.7, 0.65], [0.4, 0.45, 0.42])
    assert isinstance(est, Estimate) and est.n == 3 and est.low < est.point < est.high
    assert abs(est.point - np.mean([0.2, 0.25, 0.23])) < 1e-12
    t = paper.equivalence([0.500, 0.501, 0.499], [0.5, 0.5, 0.5])
    assert t.equivalent and -0.02 < t.estimate.low < t.estimate.high < 0.02
    assert not paper.equivalence([0.6, 0.62, 0.61], [0.5, 0.5, 0.5]).equivalent


def test_ceiling_variants_put_all_the_loss_on_one_size():
    enc = paper.EncoderSettings()
    w8, l2 = ceil.ceiling_spec("width8_only", enc), ceil.ceiling_spec("layer2_only", enc)
    assert (w8.dims, w8.weights, w8.exits, w8.factorized, w8.ranks) == ((8,), (1.0,), (6,), False, None)
    assert (l2.dims, l2.weights, l2.exits, l2.factorized, l2.ranks) == ((64,), (1.0,), (2,), False, None)
    # on a batch, the width-8-only loss is the MRL loss's width-8 term with weight 1 (not 0.088-ish)
    pool = D.TrainingPool.make(_task(), 30, 10, np.random.default_rng(9))
    batch = pool.batch(4, np.random.default_rng(10))
    model = _encoder()
    spec = ceil.ceiling_spec("width8_only", TINY_ENCODER)
    (qi, ql), (pi, pl), (ni, nl) = batch["q"], batch["p"], batch["n"]
    with torch.no_grad():
        loss = paper.variant_loss(model, spec, batch)
        q, p = model(*paper.pad_batch(qi, ql))[2], model(*paper.pad_batch(pi, pl))[2]
        n = model(*paper.pad_batch(ni, nl))[2].reshape(len(ql), -1, 16)
        terms = paper.contrastive_terms(q, p, n, [8, 16])
    assert abs(float(loss) - float(terms[0])) < 1e-5 and abs(float(terms[0]) - float(terms[1])) > 1e-4


def test_ceiling_measurements_use_the_claims_cells():
    exits, dims, ranks = [1, 2, 4, 6], [8, 16, 32, 64], [4, 8, 16, 32]
    res = paper.Result(config=paper.Config(), exits=exits, dims=dims, ranks=ranks, high_resource=2)
    base = np.full((3, 1, 4, 4), 0.5)
    res.cubes = {name: base.copy() for name in ("plain", "mrl", "mll")}
    ceilings = {name: base.copy() for name in ceil.CEILINGS}
    res.cubes["mrl"][:, 0, 3, 0] += [0.05, 0.06, 0.04]              # width 8, last layer
    ceilings["width8_only"][:, 0, 3, 0] += [0.30, 0.32, 0.31]
    ceilings["width8_only"][:, 0, 1, 0] += 0.9                       # another cell: must not count
    res.cubes["mll"][:, 0, 1, 3] += [0.21, 0.22, 0.23]               # exit 2, full width
    ceilings["layer2_only"][:, 0, 1, 3] += [0.10, 0.12, 0.11]
    m = ceil.ceiling_measurements(res, ceilings)
    assert np.allclose(m["ceiling_w8_per_seed"], [0.30, 0.32, 0.31]) and m["ceiling_w8_each_agrees"]
    assert np.allclose(m["ceiling_l2_per_seed"], [0.10, 0.12, 0.11]) and not m["ceiling_l2_each_agrees"]
    assert isinstance(m["ceiling_w8_gain"], Estimate) and m["ceiling_w8_gain"].n == 3
    assert abs(m["mrl_below_ceiling"].point - 0.26) < 1e-12 and abs(m["mll_below_ceiling"].point + 0.11) < 1e-12


def test_ceiling_reading_follows_the_verdicts():
    assert "falls short" in ceil.ceiling_reading("pass", "fail", "MRL")
    assert "reaches it" in ceil.ceiling_reading("pass", "pass", "MRL")
    assert "not decided" in ceil.ceiling_reading("pass", "inconclusive", "MRL")
    assert "out of reach" in ceil.ceiling_reading("fail", "fail", "MRL")
    assert "not backed" in ceil.ceiling_reading("inconclusive", "pass", "MRL")
    assert "not decided" in ceil.ceiling_reading("inconclusive", "fail", "MRL")
    assert "not calibrated" in ceil.ceiling_reading("pass", "fail", "MRL", calibrated=False)


def test_config_checks():
    with pytest.raises(ValueError):
        paper.Config(eval_docs=5)
    with pytest.raises(ValueError):
        paper.Config(rank_draws=10)
    with pytest.raises(ValueError):
        paper.variant("nope", TINY_ENCODER)
    with pytest.raises(ValueError):
        paper.settings_for("medium")


# ---------------------------------------------------------------- tiny asset and run
@pytest.fixture(scope="module")
def tiny_asset(tmp_path_factory):
    out = tmp_path_factory.mktemp("m3d")
    settings = paper.AssetSettings(task=SPEC, encoder=TINY_ENCODER, pairs_high=40, pairs_low=10, dev_queries=20,
                                   batch_size=4, stage0_max_steps=4, stage0_target=0.99, check_every=2,
                                   stage1_steps=2, num_seeds=2, balanced_languages=True, embedding_init_std=1.0,
                                   embedding_lr_multiplier=30.0)
    stage0_dir, variant_dirs = paper.asset_dirs(out)
    paper.build_stage0(stage0_dir, "smoke", 0, settings=settings)
    for name, path in variant_dirs.items():
        paper.build_variant(name, path, "smoke", 0, stage0_dir=stage0_dir)
    ceil.build_ceiling(out / ceil.CEILING_ASSET, "smoke", 0, stage0_dir=stage0_dir)
    return out


def test_stage0_embedding_rate_and_init():
    """The token embedding has its own init std and learning rate: at rate 0 it stays at its init."""
    task = _task()
    pool = D.TrainingPool.make(task, 40, 10, np.random.default_rng(11))
    dev = D.make_retrieval_set(task, 20, np.random.default_rng(12))
    settings = paper.AssetSettings(task=SPEC, encoder=TINY_ENCODER, batch_size=4, stage0_max_steps=3, check_every=3,
                                   stage0_target=0.99, balanced_languages=True, embedding_init_std=1.0,
                                   embedding_lr_multiplier=0.0)
    frozen, _ = paper.train_stage0(settings, task, pool, dev, seed=0)
    moved, _ = paper.train_stage0(paper.AssetSettings(**{**settings.__dict__, "embedding_lr_multiplier": 1.0}),
                                  task, pool, dev, seed=0)
    with seeded_init(0):
        fresh = paper.Encoder(TINY_ENCODER, SPEC.vocab_size, SPEC.max_length)
        fresh.backbone.embed_tokens.weight.data.normal_(0.0, 1.0)
    emb = frozen.backbone.embed_tokens.weight
    assert torch.equal(emb, fresh.backbone.embed_tokens.weight) and 0.9 < float(emb.std()) < 1.1
    assert not torch.equal(moved.backbone.embed_tokens.weight, emb)
    assert not torch.equal(frozen.backbone.layers[0].mlp.up_proj.weight, fresh.backbone.layers[0].mlp.up_proj.weight)


@pytest.mark.slow
def test_tiny_asset_and_run(tiny_asset):
    stage0_dir, variant_dirs = paper.asset_dirs(tiny_asset)
    assert json.loads((stage0_dir / "metadata.json").read_text())["stage0"]["log"]["steps"] == 4
    models, stage0, settings, meta = paper.load_assets(stage0_dir, variant_dirs)
    assert len(meta["models"]) == 2 * len(paper.VARIANTS)
    assert all(len(v) == 2 for v in models.values())
    # the ceiling asset: both ceilings at each training seed, on the plain model's batch stream
    ceiling_models, info = ceil.load_ceilings(tiny_asset / ceil.CEILING_ASSET, settings, meta["seed"])
    assert [len(ceiling_models[c]) for c in ceil.CEILINGS] == [2, 2]
    assert info["layer2_only_0"]["train_seed"] == meta["models"]["plain_0"]["train_seed"]
    with pytest.raises(ValueError, match="built at seed"):
        ceil.load_ceilings(tiny_asset / ceil.CEILING_ASSET, settings, 7)
    # stage 1 starts from stage 0: the factorised models' backbones share the stage-0 layers' shapes, and
    # the MEL run saw only the nested ranks
    assert set(meta["models"]["mel_0"]["log"]["ranks_seen"]) == {"1", "2", "4", "8"}
    config = paper.Config(eval_docs=24, rank_draws=200, kernel_rows=8)
    res = paper.run(config, models, stage0, settings, meta)
    assert res.cubes["plain"].shape == (2, 1, 2, 2) and res.cubes["ml3d"].shape == (2, 4, 2, 2)
    assert ((res.cubes["ml3d"] >= 0) & (res.cubes["ml3d"] <= 1)).all()
    assert res.kernel_gap < 1e-6 and res.one_dim_gap < 1e-6 and res.svd[0]["relative_gap"] < 1e-5
    assert res.embedding_parameters["mel"] == SPEC.vocab_size * 8 + 8 * 16
    m = paper.measurements(res)
    assert isinstance(m["mrl_gain"], Estimate) and m["mrl_gain"].n == 2
    ceilings = ceil.evaluate_ceilings(res, ceiling_models, settings, meta)
    assert ceilings["width8_only"].shape == (2, 1, 2, 2)
    # the evaluation set is the one run drew: the plain model scores the same through both paths
    again = ceil.evaluate_ceilings(res, {c: models["plain"] for c in ceil.CEILINGS}, settings, meta)
    assert np.array_equal(again["width8_only"], res.cubes["plain"])
    m.update(ceil.ceiling_measurements(res, ceilings))
    assert m["ceiling_w8_gain"].n == 2 and m["ceiling_l2_gain"].n == 2 and m["mrl_below_ceiling"].n == 2
    if res.sentence_transformers["ok"]:
        mrl, layers = res.sentence_transformers["mrl"], res.sentence_transformers["layers"]
        assert abs(mrl[0] - mrl[1]) < 1e-5 and abs(layers[0] - layers[1]) < 1e-5
    else:
        pytest.importorskip("sentence_transformers")
        pytest.fail(res.sentence_transformers["error"])


@pytest.mark.slow
def test_variant_assets_read_their_settings_from_stage0_and_refuse_a_mismatch(tiny_asset, tmp_path):
    """A variant asset takes the stage-0 asset's settings (the tiny ones here, not the smoke scale's),
    and loading refuses variants built at another asset seed; an unknown variant is refused."""
    stage0_dir, variant_dirs = paper.asset_dirs(tiny_asset)
    meta = json.loads((variant_dirs["mrl"] / "metadata.json").read_text())
    assert sorted(meta["models"]) == ["mrl_0", "mrl_1"]                 # num_seeds = 2, the tiny settings
    again = tmp_path / "mrl"
    paper.build_variant("mrl", again, "smoke", 0, stage0_dir=stage0_dir)
    for k in (0, 1):                                                      # deterministic: the same weights
        a = torch.load(again / f"mrl_{k}.pt", weights_only=True)
        b = torch.load(variant_dirs["mrl"] / f"mrl_{k}.pt", weights_only=True)
        assert all(torch.equal(a[n], b[n]) for n in a)
    with pytest.raises(ValueError, match="seed"):
        paper.build_variant("mrl", tmp_path / "other", "smoke", 1, stage0_dir=stage0_dir)
    with pytest.raises(ValueError, match="variant must be one of"):
        paper.build_variant("nope", tmp_path / "nope", "smoke", 0, stage0_dir=stage0_dir)
    moved = dict(variant_dirs)
    bad = tmp_path / "wrong_seed"
    bad.mkdir()
    for f in variant_dirs["plain"].iterdir():
        bad.joinpath(f.name).write_bytes(f.read_bytes())
    record = json.loads((bad / "metadata.json").read_text())
    (bad / "metadata.json").write_text(json.dumps({**record, "seed": 7}))
    moved["plain"] = bad
    with pytest.raises(ValueError, match="built at seed 7"):
        paper.load_assets(stage0_dir, moved)
