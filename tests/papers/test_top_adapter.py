"""top_adapter's point-cloud primitives: FPS, grouping, triangle areas, invariance of tau."""

import numpy as np
import pytest
import torch

from compendium.papers.top_adapter import (SHAPES, fan_triangles, fps, group, random_se3, sample_shape,
                                          simplex_features, triangle_area)


def test_fps_on_a_line_starts_and_continues_at_the_far_ends():
    x = torch.tensor([0.0, 1.0, 2.0, 3.0, 10.0])
    pts = torch.stack([x, torch.zeros(5), torch.zeros(5)], -1)[None]
    idx = fps(pts, 3)[0].tolist()
    assert idx[:2] == [4, 0]          # farthest from the centroid (10), then the other end (0)
    assert idx[2] == 3                # 3 is the point farthest from both {0, 10}
    with pytest.raises(ValueError):
        fps(pts, 6)


def test_unit_right_triangle_has_area_half():
    a, b, c = torch.tensor([0.0, 0, 0]), torch.tensor([1.0, 0, 0]), torch.tensor([0.0, 1, 0])
    assert float(triangle_area(a, b, c)) == 0.5


def test_group_shapes_and_centring():
    pts = torch.tensor(sample_shape("torus", 256, np.random.default_rng(0)))[None]
    neigh, centers = group(pts, 16, 8)
    assert neigh.shape == (1, 16, 8, 3) and centers.shape == (1, 16, 3)
    assert float(neigh[:, :, 0].abs().max()) == 0.0       # each centre is its own nearest point


def test_tau_is_invariant_to_rigid_motion_permutation_and_scale():
    rng = np.random.default_rng(1)
    pts = sample_shape("two_hole", 256, rng).astype(np.float64)
    rot, t = random_se3(rng)
    perm = rng.permutation(256)
    variants = [pts @ rot.T + t, pts[perm], 2.7 * pts]

    def tau(p):
        p = torch.tensor(p)[None]
        _, centers = group(p, 12, 8)
        return simplex_features(p, centers, scales=(8, 16))

    base = tau(pts)
    assert base.shape == (1, 12, 36) and torch.isfinite(base).all()
    for v in variants:
        assert float((tau(v) - base).abs().max()) < 1e-5
    # and it is not constant: a sphere and a disk differ
    s = torch.tensor(sample_shape("sphere", 256, rng).astype(np.float64))[None]
    d = torch.tensor(sample_shape("disk", 256, rng).astype(np.float64))[None]
    ts = simplex_features(s, group(s, 12, 8)[1], (8,)).mean(1)
    td = simplex_features(d, group(d, 12, 8)[1], (8,)).mean(1)
    assert float((ts - td).abs().max()) > 0.05


def test_drawn_fan_triangles_are_the_ones_tau_measures():
    rng = np.random.default_rng(3)
    cloud = torch.tensor(sample_shape("torus", 256, rng))[None]
    centers = group(cloud, 10, 8)[1]
    tri = fan_triangles(cloud, centers, 8)
    assert tri.shape == (1, 10, 8, 3, 3)
    assert torch.equal(tri[..., 0, :], centers[:, :, None].expand(-1, -1, 8, -1))   # every fan starts at its centre
    assert torch.allclose(tri[..., 2, :], tri[..., 1, :].roll(-1, dims=2))          # and closes around it
    # tau's mean 2-simplex area (feature 15 of the scale's 18, in units of the mean neighbour distance)
    rel = tri[..., 1, :] - tri[..., 0, :]
    s = rel.norm(dim=-1).mean(-1)
    area = triangle_area(tri[..., 0, :], tri[..., 1, :], tri[..., 2, :]).mean(-1) / s ** 2
    tau = simplex_features(cloud, centers, scales=(8,))
    torch.testing.assert_close(area, tau[..., 15], rtol=1e-5, atol=1e-7)


def test_every_shape_samples():
    rng = np.random.default_rng(2)
    for name in SHAPES:
        p = sample_shape(name, 64, rng)
        assert p.shape == (64, 3) and np.isfinite(p).all()
    with pytest.raises(ValueError):
        sample_shape("klein_bottle", 8, rng)


def test_adapter_modules_are_the_identity_at_init_and_train():
    from compendium.papers.top_adapter import GeometricController, TopoTransfer

    torch.manual_seed(0)
    t, tau = torch.randn(2, 5, 16), torch.randn(2, 5, 36)
    for gated in (True, False):
        ctrl = GeometricController(16, 36, gated=gated)
        fused, e = ctrl(t, tau)
        assert torch.equal(fused, t) and float(e.detach().abs().max()) == 0.0
        fused.pow(2).sum().backward()
        assert float(ctrl.phi[2].weight.grad.abs().max()) > 0       # the zero layer gets a gradient
    tt = TopoTransfer(16, 4)
    streams = tt.streams(torch.randn(2, 5, 16))
    assert len(streams) == 4 and all(float(s.detach().abs().max()) == 0.0 for s in streams)
    sum(s.sum() for s in streams).backward()
    assert float(tt.alpha.grad.abs().max()) > 0


# ---- backbone, methods and the experiment (tiny configurations) ----

def _tiny_backbone():
    from compendium.papers.top_adapter import PointBackbone
    from compendium.training import seeded_init

    with seeded_init(0):
        return PointBackbone(d=16, depth=2, heads=2).eval()


def _tiny_data(bb, n_per_class=2, seed=0):
    from compendium.papers.top_adapter.experiment import make_split

    settings = {"n_points": 64, "n_groups": 8, "k": 8}
    return make_split(n_per_class, np.random.default_rng(seed), bb, settings, (4, 8, 12))


def test_chamfer_is_zero_on_equal_sets_and_symmetric():
    from compendium.papers.top_adapter import chamfer_l2

    a, b = torch.randn(3, 7, 3), torch.randn(3, 5, 3)
    assert float(chamfer_l2(a, a[:, torch.randperm(7)])) < 1e-10
    assert abs(float(chamfer_l2(a, b)) - float(chamfer_l2(b, a))) < 1e-6 and float(chamfer_l2(a, b)) > 0
    # one point against two: the mean squared distance both ways, by hand
    p, q = torch.zeros(1, 1, 3), torch.tensor([[[1.0, 0, 0], [3.0, 0, 0]]])
    assert abs(float(chamfer_l2(p, q)) - (1.0 + (1.0 + 9.0) / 2)) < 1e-6


def test_pretraining_lowers_the_masked_chamfer_loss():
    from compendium.papers.top_adapter import pretrain, superquadric

    p = superquadric(100, np.random.default_rng(0))
    assert p.shape == (100, 3) and np.isfinite(p).all()
    enc, log = pretrain(n_clouds=32, n_points=64, n_groups=8, k=8, d=16, depth=1, steps=40, batch=16, seed=0)
    losses = [v for _, v in log["train"]["losses"]]
    assert losses[-1] < losses[0]
    assert not enc.training


def test_budgets_match_topadapter_and_only_the_right_parts_train():
    from compendium.papers.top_adapter import Tuned, budget_ranks, trainable

    bb = _tiny_backbone()
    f = 54
    ranks = budget_ranks(16, 2, f)
    head = 2 * 16 * 10 + 10
    counts = {m: trainable(Tuned(bb, m, 10, f, ranks)) for m in ("linear", "adapter", "lora", "vpt", "idpt", "top", "full")}
    assert counts["linear"] == head
    assert counts["full"] == head + sum(p.numel() for p in bb.parameters())
    assert counts["top"] - head == ranks["target"]
    # adapter r, LoRA r and VPT P within one unit of the target
    assert abs(counts["adapter"] - head - ranks["target"]) <= 2 * (2 * 16 + 1)
    assert abs(counts["lora"] - head - ranks["target"]) <= 2 * (16 + 48)
    assert abs(counts["vpt"] - head - ranks["target"]) <= 2 * 16
    # IDPT-like: embed (D H + H) + out (H P D + P D); H within one unit of the target
    h, pd = ranks["idpt"], 8 * 16
    assert counts["idpt"] - head == 16 * h + h + h * pd + pd
    assert abs(counts["idpt"] - head - ranks["target"]) <= 16 + 1 + pd
    lora = Tuned(bb, "lora", 10, f, ranks)
    assert all("lora_" in n for n, p in lora.named_parameters() if p.requires_grad and not n.startswith("head"))
    with pytest.raises(ValueError):
        Tuned(bb, "prefix", 10, f, ranks)


def test_every_method_starts_at_the_frozen_backbone_or_trains():
    """adapter, LoRA and TopAdapter are exactly the frozen backbone + head at init (same seed)."""
    from compendium.papers.top_adapter import METHODS, Tuned, budget_ranks, finetune
    from compendium.papers.top_adapter.methods import accuracy
    from compendium.training import seeded_init

    bb = _tiny_backbone()
    data = _tiny_data(bb)
    f = data["tau"].shape[-1]
    ranks = budget_ranks(16, 2, f)

    def logits(m):
        with seeded_init(5):
            model = Tuned(bb, m, 10, f, ranks).eval()
        with torch.no_grad():
            return model(data["tokens"], data["centers"], data["tau"], data["neigh"])

    base = logits("linear")
    for m in ("adapter", "lora", "top", "top_no_transfer", "top_no_controller", "top_single_scale", "full"):
        assert float((logits(m) - base).abs().max()) < 1e-6, m
    assert float((logits("vpt") - base).abs().max()) > 1e-4       # prompts change the sequence at init
    assert float((logits("idpt") - base).abs().max()) > 1e-4
    # IDPT-like prompts are instance-aware: each cloud gets its own, computed from its tokens
    with seeded_init(5):
        idpt = Tuned(bb, "idpt", 10, f, ranks)
    p = idpt.dynamic(data["tokens"])
    assert p.shape == (20, 8, 16) and float((p[0] - p[1]).abs().max()) > 1e-6
    for m in METHODS:
        model, info = finetune(bb, m, data, 10, ranks, steps=3, batch=8, lr=1e-2, seed=1, scales=3)
        assert np.isfinite(info["final_loss"]) and accuracy(model, data).shape == (20,)
    # the backbone itself is never changed by fine-tuning a copy
    assert torch.equal(logits("linear"), base)


def test_linear_probe_is_fitted_to_convergence_and_standardises_like_at_test():
    from compendium.papers.top_adapter import Tuned, budget_ranks, finetune
    bb = _tiny_backbone()
    data = _tiny_data(bb, n_per_class=3)
    ranks = budget_ranks(16, 2, data["tau"].shape[-1])
    model, info = finetune(bb, "linear", data, 10, ranks, steps=1, batch=4, lr=1e-3, seed=0)
    # the penalised logistic objective is at its minimum: the gradient vanishes
    assert info["grad_norm"] < 1e-4, info
    bn = model.head[0]
    with torch.no_grad():
        feats = model.backbone.encode(data["tokens"], data["centers"])
    assert torch.allclose(bn.running_mean, feats.mean(0), atol=1e-6) and not bn.training
    # and it is well below the objective at the initial head
    with torch.no_grad():
        z = bn(feats)
    obj = lambda lin: float(torch.nn.functional.cross_entropy(lin(z), data["y"]) + 0.5 * lin.weight.pow(2).sum() / 30)
    from compendium.training import seeded_init
    with seeded_init(0):
        fresh = Tuned(bb, "linear", 10, data["tau"].shape[-1], ranks)
    assert obj(model.head[1]) < obj(fresh.head[1]) - 0.5
    # and the fitted model predicts from the standardised features (training accuracy above chance)
    from compendium.papers.top_adapter.methods import accuracy
    assert accuracy(model, data).mean() > 0.3


def test_config_checks_and_tiny_run(tmp_path):
    from compendium.papers.top_adapter import Config, run
    from compendium.papers.top_adapter import experiment

    with pytest.raises(ValueError):
        Config(replicates=1)
    with pytest.raises(ValueError):
        Config(lr_grid=())
    with pytest.raises(ValueError):
        Config(scales=(8, 16))
    old = dict(experiment.ASSET_SETTINGS)
    experiment.ASSET_SETTINGS["tiny"] = {"n_clouds": 16, "n_points": 64, "n_groups": 8, "k": 8, "d": 16, "depth": 1,
                                         "steps": 3, "batch": 8}
    try:
        experiment.build_asset(tmp_path, "tiny", 0)
    finally:
        experiment.ASSET_SETTINGS.clear()
        experiment.ASSET_SETTINGS.update(old)
    res = run(Config(scales=(4, 8, 12), shots=2, dev_per_class=1, test_per_class=2, replicates=2, steps=2, batch=8,
                     lr_grid=(1e-3, 1e-2), full_data_shots=3), tmp_path)
    m = res.metrics
    assert set(res.accuracy) == set(experiment.METHODS) | {"top_permuted", "linear_random_init"}
    # the full-data run: PEFT methods, TopAdapter and full FT alike, best PEFT on its own dev
    assert set(res.full_data) == set(experiment.PEFT) | {"top", "full"} and res.full_data_best_peft in experiment.PEFT
    fd = res.full_data["top"] - res.full_data[res.full_data_best_peft]
    assert abs(m["full_data_headline"].point - fd.mean()) < 1e-9
    assert abs(m["full_data_vs_full"].point - (res.full_data["top"] - res.full_data["full"]).mean()) < 1e-9
    assert np.isnan(res.lr["linear"]) and res.trainable["linear_random_init"] == res.trainable["linear"]
    assert abs(m["vs_random_init"].point - (res.accuracy["linear"] - res.accuracy["linear_random_init"]).mean()) < 1e-9
    assert all(v.shape == (2,) and ((0 <= v) & (v <= 100)).all() for v in res.accuracy.values())
    assert res.best_peft in experiment.PEFT and res.lr["top"] in (1e-3, 1e-2)
    assert res.identity_gap < 1e-6 and res.tau_gap < 1e-5 and res.knn_gap < 1e-9
    d = res.accuracy["top"] - res.accuracy[res.best_peft]
    assert abs(m["headline"].point - d.mean()) < 1e-9
    # the permuted control is an equivalence test of its difference to the best PEFT, at the headline's margin
    dp = res.accuracy["top_permuted"] - res.accuracy[res.best_peft]
    assert abs(m["permuted_tost"].estimate.point - dp.mean()) < 1e-9 and m["permuted_tost"].margin == 3.0
    # headroom is the best PEFT's accuracy; full-ft-learns is full FT against the probe it starts from
    assert abs(m["headroom"].point - res.accuracy[res.best_peft].mean()) < 1e-9
    assert abs(m["full_vs_probe"].point - (res.accuracy["full"] - res.accuracy["linear"]).mean()) < 1e-9
    assert np.isnan(res.lr["features_mlp"])
    assert np.isclose(res.lr["full"], 1e-4) or np.isclose(res.lr["full"], 1e-3)      # lr_grid x FULL_LR_SCALE
    with pytest.raises(ValueError):
        Config(min_effect=0.0)


def test_fine_tuning_starts_from_the_converged_probe_and_keeps_its_standardisation():
    from compendium.papers.top_adapter import budget_ranks, finetune
    from compendium.papers.top_adapter.methods import accuracy

    bb = _tiny_backbone()
    data = _tiny_data(bb, n_per_class=3)
    ranks = budget_ranks(16, 2, data["tau"].shape[-1])
    probe, _ = finetune(bb, "linear", data, 10, ranks, steps=1, batch=4, lr=1e-3, seed=0)
    head = {k: v.clone() for k, v in probe.head.state_dict().items()}
    with torch.no_grad():
        ref = probe(data["tokens"], data["centers"], data["tau"], data["neigh"])
    for m in ("adapter", "lora", "top", "full"):
        # a vanishing learning rate: the zero-initialised methods stay at the probe they start from
        model, _ = finetune(bb, m, data, 10, ranks, steps=2, batch=8, lr=1e-12, seed=3, head=head)
        model.eval()
        with torch.no_grad():
            out = model(data["tokens"], data["centers"], data["tau"], data["neigh"])
        assert float((out - ref).abs().max()) < 1e-4, m
        # training kept the probe's standardisation (batch statistics would have moved it)
        assert torch.equal(model.head[0].running_mean, head["0.running_mean"]), m
        assert torch.equal(model.head[0].running_var, head["0.running_var"]), m
    # a real step moves away from the probe; without head= the model starts from a fresh head
    moved, _ = finetune(bb, "top", data, 10, ranks, steps=5, batch=8, lr=1e-2, seed=3, head=head)
    fresh, _ = finetune(bb, "adapter", data, 10, ranks, steps=1, batch=8, lr=1e-12, seed=3)
    moved.eval(), fresh.eval()
    with torch.no_grad():
        assert float((moved(data["tokens"], data["centers"], data["tau"], data["neigh"]) - ref).abs().max()) > 1e-3
        assert float((fresh(data["tokens"], data["centers"], data["tau"], data["neigh"]) - ref).abs().max()) > 1e-3
    assert accuracy(moved, data).shape == (30,)


def test_features_mlp_is_fitted_to_convergence():
    from compendium.papers.top_adapter import budget_ranks, finetune
    from compendium.training import torch_threads
    from compendium.papers.top_adapter.methods import accuracy

    bb = _tiny_backbone()
    data = _tiny_data(bb, n_per_class=3)
    ranks = budget_ranks(16, 2, data["tau"].shape[-1])
    with torch_threads(1):
        model, info = finetune(bb, "features_mlp", data, 10, ranks, steps=1, batch=4, lr=1e-3, seed=0)
    # L-BFGS ends near a stationary point of the penalised objective and fits the draw
    assert info["grad_norm"] < 0.05, info
    assert accuracy(model, data).mean() > 0.8
    bn = model.head[0]
    assert torch.allclose(bn.running_mean, model.tau_summary(data["tau"]).mean(0), atol=1e-6) and not bn.training

