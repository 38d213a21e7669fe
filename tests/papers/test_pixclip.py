"""Tests for compendium.papers.pixclip: scenes, masks, crops, alpha embedding, losses, recall, tiny training."""

import numpy as np
import pytest
import torch

from compendium.losses import info_nce_from_logits
from compendium.papers import pixclip as paper
from compendium.training import seeded_init


def test_mask_to_bbox_and_box():
    m = np.zeros((32, 32), bool)
    m[3:7, 10:12] = True
    m[5, 20] = True
    assert paper.mask_to_bbox(m) == (3, 10, 7, 21)
    assert paper.box_mask(m).sum() == 4 * 11
    with pytest.raises(ValueError):
        paper.mask_to_bbox(np.zeros((4, 4), bool))


def test_crop_full_box_is_identity_and_crop_selects_region():
    img = torch.rand(2, 3, 32, 32)
    full = torch.tensor([[0, 0, 32, 32], [0, 0, 32, 32]])
    assert torch.allclose(paper.crop_resize(img, full), img, atol=1e-5)
    half = torch.tensor([[0, 0, 16, 16]])
    out = paper.crop_resize(img[:1], half, "nearest")
    assert torch.allclose(out[0, :, ::2, ::2], img[0, :, :16, :16], atol=1e-6)


def test_scenes_masks_and_held_out():
    sc = paper.make_scenes(40, np.random.default_rng(0))
    assert sc.images.shape == (40, 3, 32, 32) and sc.exact.shape == (40, 4, 32, 32)
    assert (sc.exact <= sc.box).all()
    n_obj = sc.exact.sum(1)
    assert n_obj.max() <= 1                                   # exact masks never overlap
    held = set(paper.HELD_OUT)
    pairs = {(int(c), int(s)) for s, c in sc.attrs[sc.valid][:, :2]}
    assert not pairs & held
    test = paper.make_scenes(60, np.random.default_rng(1), split="test")
    assert {(int(c), int(s)) for s, c in test.attrs[test.valid][:, :2]} & held


def test_texts_deterministic_lengths_and_late_prefix():
    sc = paper.make_scenes(30, np.random.default_rng(2))
    a, b = paper.region_tokens(sc), paper.region_tokens(paper.make_scenes(30, np.random.default_rng(2)))
    assert (a == b).all()
    lengths = (a[sc.valid] != 0).sum(1)
    assert lengths.min() >= 13 and lengths.max() <= 19
    foil = paper.region_tokens(sc, "colour", np.random.default_rng(0))
    for i in np.nonzero(sc.late)[0]:
        rows = np.nonzero(sc.valid[i])[0]
        assert (a[i, rows, :8] == a[i, rows[0], :8]).all()    # the first 8 tokens are shared
        diff = np.nonzero(a[i, rows[0]] != foil[i, rows[0]])[0]
        assert len(diff) == 1 and diff[0] >= 8                # the foil differs once, after token 8


def test_alpha_embedding_zero_init_and_fused_conv():
    with seeded_init(0):
        vit = paper.AlphaViT()
    img, m = torch.rand(3, 3, 32, 32), (torch.rand(3, 1, 32, 32) > 0.5).float()
    assert (vit(img, m) - vit(img, torch.ones_like(m))).abs().max() < 1e-6
    torch.nn.init.normal_(vit.alpha_embed.weight, std=0.05)
    assert (vit.tokens(img, m) - vit.fused_tokens(img, m)).abs().max() < 1e-5
    assert (vit(img, m) - vit(img, torch.ones_like(m))).abs().max() > 1e-3


def test_infonce_identity_closed_form_and_recall():
    logits = 3.0 * torch.eye(5)
    assert abs(float(info_nce_from_logits(logits, symmetric=True)) - np.log(1 + 4 * np.exp(-3.0))) < 1e-6
    assert paper.recall_at_1(np.eye(6), np.arange(6)) == 1.0
    assert paper.recall_at_1(np.ones((2, 4)), np.array([0, 1])) == pytest.approx(0.25)


def test_branch_losses_and_tiny_training():
    settings = paper.TrainSettings(steps=3, batch_scenes=4, train_scenes=12, dim=16)
    pool = paper.make_batches(paper.make_scenes(12, np.random.default_rng(0)))
    model, log = paper.train_variant("d_pixclip", settings, 0, pool=pool)
    assert np.isfinite(log["final_loss"]) and log["steps"] == 3
    batch = {k: v for k, v in pool.items()}
    _, parts = paper.branch_losses(model, "d_pixclip", batch, 0.07)
    assert set(parts) == {"L1", "L2", "L3"}
    _, parts = paper.branch_losses(model, "global_clip", batch, 0.07)
    assert set(parts) == {"L3"}
    sc = paper.make_scenes(64, np.random.default_rng(3), split="test")
    out = paper.evaluate(model, "c_long_nomask", sc, np.random.default_rng(0), group=8)
    assert out["region_r1_box"] == pytest.approx(out["region_r1_exact"])   # no mask: masks do not matter
    out = paper.evaluate(model, "a_clip_short", sc, np.random.default_rng(0), group=8)
    assert out["late_choice"] == 50.0                                       # 8 tokens: foil identical
    with pytest.raises(ValueError):
        paper.train_variant("nope", settings, 0, pool=pool)
    with pytest.raises(ValueError):
        paper.Config(test_scenes=10)
