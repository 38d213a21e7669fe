"""Tests for compendium.papers.cofact_gvr: scenes, counterfactual cells, the gap and bonus, Q-PAS,
the policy's shapes and model independence, a tiny lock-step training run and the statistics."""

from dataclasses import replace

import numpy as np
import pytest
import torch

from compendium.papers import cofact_gvr as paper
from compendium.papers.cofact_gvr import training
from compendium.rl import grpo_loss


def test_scenes_have_unique_answers_equal_shape_areas_and_the_cue_rate():
    train, test = paper.make_scenes(4000, 0.85, np.random.default_rng(0), cues=(paper.TEST_CUE,))
    assert train.images.shape == (4000, 3, 24, 24) and train.images.dtype == np.float32
    assert np.all((train.cell_shape >= 0).sum(1) == 6)
    assert np.all(np.sort(train.cell_colour[train.cell_colour >= 0].reshape(4000, 6), 1) == np.arange(6))
    assert np.all(train.cell_shape[np.arange(4000), train.target] == train.question)
    assert np.all(train.cell_colour[np.arange(4000), train.target] == train.answer)
    assert set(paper.SHAPE_MASKS[:6].sum((1, 2))) == {16} and paper.SHAPE_MASKS[6].sum() == 0
    assert len({m.tobytes() for m in paper.SHAPE_MASKS[:6]}) == 6
    # paired scenes: same layouts, only the tint differs; cue rates 0.85 and 1/6 (4000 draws, 4 SE)
    assert np.array_equal(train.cell_shape, test.cell_shape) and np.array_equal(train.answer, test.answer)
    for s, p in ((train, 0.85), (test, 1 / 6)):
        rate = (s.tint == s.answer).mean()
        assert abs(rate - p) < 4 * np.sqrt(p * (1 - p) / 4000)
    # the global colour mean carries the tint only: it is the same for two scenes with one tint
    same = np.flatnonzero(train.tint == train.tint[0])[:50]
    means = train.images[same].mean((2, 3))
    assert np.ptp(means, axis=0).max() < 0.01
    with pytest.raises(ValueError):
        paper.make_scenes(0, 0.5, np.random.default_rng(0))


def test_cell_crops_and_masking_invert_the_rendering():
    s = paper.make_scenes(20, 0.85, np.random.default_rng(1))
    crops = paper.cell_crops(s.images)
    assert crops.shape == (20, 9, 3, 8, 8)
    assert np.array_equal(crops[:, 4], s.images[:, :, 8:16, 8:16])
    assert torch.equal(paper.cell_crops(torch.from_numpy(s.images)), torch.from_numpy(crops))
    masked = paper.mask_cells(s.images, s.target)
    mc = paper.cell_crops(masked)
    assert np.all(mc[np.arange(20), s.target] == 0)
    other = (s.target + 1) % 9
    assert np.array_equal(mc[np.arange(20), other], crops[np.arange(20), other])


def test_counterfactual_cells_are_other_in_bounds_cells_with_iou_zero():
    out = paper.counterfactual_cell_check(5000, np.random.default_rng(2))
    assert out["in_bounds"] and out["max_iou"] == 0.0 and out["coverage"] == 9
    e = torch.arange(9).repeat(10)
    cf = paper.counterfactual_cells(e, ("shift", "mask"), torch.Generator().manual_seed(0))
    assert cf.shape == (90, 2) and torch.all(cf[:, 0] != e) and torch.all(cf[:, 1] == paper.MASKED)
    assert paper.box_iou(paper.cell_box(3), paper.cell_box(3)) == 1.0
    with pytest.raises(ValueError):
        paper.counterfactual_cells(e, ("blur",), torch.Generator())
    with pytest.raises(ValueError):
        paper.cell_box(9)


def test_gap_is_zero_for_a_crop_blind_policy_and_one_for_a_crop_reader():
    s = paper.make_scenes(60, 0.85, np.random.default_rng(3))
    policy = paper.GroundedPolicy(3, [0, 1, 2])
    assert paper.crop_blind_gap(policy, s, np.random.default_rng(0)) < 1e-6          # float32 rounding only
    assert paper.crop_reader_gap(s, np.random.default_rng(0)) == (1.0, 1.0)
    # and the untouched random policy does depend on its crop (the check has power)
    enc = policy.encode(torch.from_numpy(s.images).expand(3, -1, -1, -1, -1), torch.from_numpy(s.question).expand(3, -1))
    a = policy.answer_logits(enc, torch.zeros(3, 60, dtype=torch.long))
    b = policy.answer_logits(enc, torch.ones(3, 60, dtype=torch.long))
    assert (a - b).abs().max() > 1e-3


def test_bonus_and_rewards():
    correct = torch.tensor([1, 0, 1, 0], dtype=torch.bool)
    gap = torch.tensor([0.5, 0.5, -0.2, -0.2])
    on = torch.tensor([1, 1, 0, 0], dtype=torch.bool)
    assert torch.allclose(paper.selective_bonus(correct, gap, scale=2.0), torch.tensor([1.0, 0, 0, 0]))
    assert torch.allclose(paper.selective_bonus(correct, gap, scale=2.0, selective=False), torch.tensor([1.0, 1.0, 0, 0]))
    assert torch.allclose(paper.shaped_reward("answer", correct, gap, on, scale=1.0), torch.tensor([1.0, 0, 1, 0]))
    assert torch.allclose(paper.shaped_reward("iou", correct, gap, on, scale=1.0), torch.tensor([2.0, 1, 1, 0]))
    assert torch.allclose(paper.shaped_reward("selective", correct, gap, on, scale=1.0), torch.tensor([1.5, 0, 1, 0]))
    assert torch.allclose(paper.shaped_reward("all", correct, gap, on, scale=1.0), torch.tensor([1.5, 0.5, 1, 0]))
    assert torch.allclose(paper.mediator_gap(torch.tensor([0.9]), torch.tensor([[0.1, 0.3]])), torch.tensor([0.7]))
    with pytest.raises(ValueError):
        paper.shaped_reward("box", correct, gap, on, scale=1.0)
    with pytest.raises(ValueError):
        paper.mediator_gap(torch.zeros(3), torch.zeros(2, 2))


def test_q_pas_drops_floor_qn_matches_its_frequencies_and_reduces_to_uniform():
    out = paper.q_pas_checks(20000, np.random.default_rng(4))
    assert out["max_drop_error"] == 0
    assert out["chi2_p"] > 0.01 and out["prob_formula_gap"] < 1e-12
    assert out["uniform_gap"] == 0.0 and out["uniform_chi2_p"] > 0.01
    # power: the same chi-square rejects uniform draws tested against the |A| probabilities
    draws = np.random.default_rng(0).integers(0, 64, 20000)
    assert paper.chi_square_frequencies(out["expected"], draws) < 1e-6
    # ties at the cut are broken by position; all-zero advantages give uniform over the kept
    p = paper.q_pas_probabilities(torch.zeros(1, 10), quantile=0.3, alpha=1.0)
    assert torch.equal(p[0, :3], torch.zeros(3, dtype=p.dtype)) and torch.allclose(p[0, 3:], torch.full((7,), 1 / 7, dtype=p.dtype))
    idx, w, _ = paper.q_pas_select(torch.randn(2, 16), quantile=0.3, alpha=1.0, size=40,
                                   generator=torch.Generator().manual_seed(0), beta=0.5)
    assert idx.shape == w.shape == (2, 40) and torch.allclose(w.mean(-1), torch.ones(2))
    with pytest.raises(ValueError):
        paper.q_pas_probabilities(torch.zeros(1, 4), quantile=1.0, alpha=1.0)


def test_models_in_the_policy_are_independent():
    s = paper.make_scenes(8, 0.85, np.random.default_rng(5))
    policy = paper.GroundedPolicy(2, [7, 8])
    images = torch.from_numpy(s.images).expand(2, -1, -1, -1, -1)
    q = torch.from_numpy(s.question).expand(2, -1)
    enc = policy.encode(images, q)
    assert enc["evidence"].shape == (2, 8, 9) and enc["cells"].shape == (2, 8, 9, 32)
    logits = policy.answer_logits(enc, torch.zeros(2, 8, 3, dtype=torch.long))
    assert logits.shape == (2, 8, 3, 6)
    logits[0].sum().backward()
    assert all(p.grad is None or p.grad[1].abs().max() == 0 for p in policy.parameters())
    single = paper.GroundedPolicy(1, [8])
    enc1 = single.encode(images[1:], q[1:])
    assert torch.allclose(enc1["evidence"][0], enc["evidence"][1], atol=1e-6)


def test_grpo_loss_is_the_shared_one_on_two_token_rollouts():
    logp = torch.randn(6, 2, requires_grad=True)
    adv = torch.randn(6)
    out = grpo_loss(logp, logp.detach(), adv)
    out.loss.backward()
    assert torch.allclose(logp.grad, -adv[:, None].expand(6, 2) / 12)


def test_updates_to_target():
    rounds = np.array([0, 2, 4, 8])
    assert paper.updates_to_target(np.array([0.1, 0.5, 0.9, 0.95]), rounds, 0.9) == 4.0
    assert paper.updates_to_target(np.array([0.1, 0.2, 0.3, 0.4]), rounds, 0.9) == 12.0
    assert paper.checkpoint_rounds(60)[0] == 0 and 20 in paper.checkpoint_rounds(60) and paper.checkpoint_rounds(60)[-1] == 60


def test_tiny_training_run_is_deterministic_and_records_every_checkpoint():
    st = replace(paper.settings_for("smoke"), train_questions=64, updates=12, questions_per_update=4, num_seeds=2,
                 curve_questions=16)
    arms = [a for a in paper.ARMS if a.name in ("grpo", "cofact", "uniform_rescaled")]
    curve = dict(zip(("id", "ood"), paper.make_scenes(16, 0.85, np.random.default_rng(0), cues=(paper.TEST_CUE,))))
    p1, models, log, snaps = training.train_arms(arms, st, 0, curve)
    p2, _, log2, _ = training.train_arms(arms, st, 0, curve)
    assert len(models) == 6 and "third" in snaps
    assert all(torch.equal(a, b) for a, b in zip(p1.state_dict().values(), p2.state_dict().values()))
    assert log["curves"]["round"] == paper.checkpoint_rounds(12)
    assert np.all(np.isfinite(log["train"]["final_loss"]))


def test_config_rejects_bad_values():
    with pytest.raises(ValueError):
        paper.Config(test_questions=5)
    with pytest.raises(ValueError):
        paper.Config(headline_margin=1.5)
    with pytest.raises(ValueError):
        paper.settings_for("medium")


def test_pretrained_base_is_copied_into_every_arm_of_its_seed():
    st = replace(paper.settings_for("smoke"), train_questions=64, updates=0, questions_per_update=4, num_seeds=2,
                 pretrain_steps=3, pretrain_batch=8)
    base, log = training.pretrain_base(st, 0)
    assert base.num_models == 2 and len(log.to_dict()["losses"]) >= 1
    fresh = paper.GroundedPolicy(2, [0, 1])
    assert not torch.equal(base.w_cell, fresh.w_cell)
    arms = [a for a in paper.ARMS if a.name in ("grpo", "cofact")]
    models = [(a, s) for a in arms for s in range(2)]
    start = training.initial_policy(models, st, 0, base)
    for i, (arm, s) in enumerate(models):
        for name, param in start.named_parameters():
            assert torch.equal(param[i], getattr(base, name)[s]), (arm.name, s, name)
    with pytest.raises(ValueError):
        training.initial_policy(models, replace(st, num_seeds=3), 0, base)


def test_answer_accuracy_given_reads_the_shown_cell():
    scenes = paper.make_scenes(12, 0.85, np.random.default_rng(1))
    policy = paper.GroundedPolicy(2, [3, 4])
    acc = training.answer_accuracy_given(policy, scenes, scenes.target)
    assert acc.shape == (2, 12) and set(np.unique(acc)) <= {0.0, 1.0}
    enc = policy.encode(torch.from_numpy(scenes.images).expand(2, -1, -1, -1, -1),
                        torch.from_numpy(scenes.question).expand(2, -1))
    pick = policy.answer_logits(enc, torch.from_numpy(scenes.target).expand(2, -1)[..., None]).squeeze(2).argmax(-1)
    assert np.array_equal(acc, (pick.numpy() == scenes.answer).astype(float))
