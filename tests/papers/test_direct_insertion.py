"""Tests of direct_insertion: renderer geometry, triplets, the typed adapters, metrics, the
flow-matching Gaussian check and a tiny training run."""

import dataclasses

import numpy as np
import pytest
import torch

from compendium.papers import direct_insertion as paper
from compendium.papers.direct_insertion import experiment as X

R = X.R


def test_rotation_is_orthonormal_and_periodic():
    rng = np.random.default_rng(0)
    pose = rng.uniform(-90, 90, (5, 3))
    r = paper.rotation(pose)
    assert np.allclose(r @ np.swapaxes(r, 1, 2), np.eye(3), atol=1e-12)
    assert np.allclose(np.linalg.det(r), 1.0)
    assert np.allclose(paper.rotation(pose + 360.0), r, atol=1e-12)


def test_cube_render_matches_geometry():
    lo, hi, valid = np.full((1, 1, 3), -0.5), np.full((1, 1, 3), 0.5), np.ones((1, 1), bool)
    out = paper.render(lo, hi, valid, np.zeros((1, 3)), size=64)
    # head-on: a 1 x 1 square on a 2.6 x 2.6 plane, depth 2.5 (the ray starts at z = -3), normal -z
    area = out["mask"].sum() / 64**2 * 2.6**2
    assert abs(area - 1.0) < 0.1
    assert np.allclose(out["depth"][out["mask"]], 2.5)
    assert np.allclose(out["normal"][out["mask"]], [0, 0, -1])
    assert set(np.unique(out["face"][out["mask"]])) == {4}  # z axis, negative side
    # yaw by 45 degrees widens the silhouette by sqrt(2)
    out45 = paper.render(lo, hi, valid, np.array([[45.0, 0, 0]]), size=64)
    assert abs(out45["mask"].sum() / out["mask"].sum() - np.sqrt(2)) < 0.08
    # depth is monotone: a box further along +z is rendered deeper
    far = paper.render(lo + [0, 0, 0.5], hi + [0, 0, 0.5], valid, np.zeros((1, 3)), size=64)
    assert np.all(far["depth"][far["mask"]] > out["depth"][out["mask"]].max())


def test_union_takes_the_nearest_box():
    lo = np.array([[[-0.5, -0.5, -0.5], [-0.2, -0.2, -0.9]]])
    hi = np.array([[[0.5, 0.5, 0.5], [0.2, 0.2, -0.5]]])
    out = paper.render(lo, hi, np.ones((1, 2), bool), np.zeros((1, 3)), size=32)
    c = out["depth"][0, 16, 16]
    assert np.isclose(c, 3 - 0.9)  # the front box
    off = paper.render(lo, hi, np.array([[True, False]]), np.zeros((1, 3)), size=32)
    assert np.isclose(off["depth"][0, 16, 16], 2.5)  # invalid boxes are ignored


def test_proxy_contains_the_shape_and_oracle_is_exact():
    rng = np.random.default_rng(1)
    lo, hi, valid, _ = paper.random_shapes(rng, 6)
    plo, phi = paper.proxy_boxes(lo, hi, 0.05, 0.1)
    assert np.all(plo <= lo) and np.all(phi >= hi)
    olo, ohi = paper.proxy_boxes(lo, hi, 0.0, 0.0)
    assert np.array_equal(olo, lo) and np.array_equal(ohi, hi)


def test_triplets_shapes_and_no_pose_leak():
    d = paper.make_triplets(np.random.default_rng(2), 16, gap_range=(30, 90))
    assert d["appearance"].shape == (16, 32, 32, 3) and d["geometry"].shape == (16, 32, 32, 4)
    bm = R.box_mask()
    # the context mask channel is the same fixed box for every triplet
    assert np.all(d["context"][..., 3] == bm)
    assert np.all(d["context"][..., :3][:, bm > 0] == 0)
    assert np.all(d["gap"] >= 30)
    # the object stays inside the box; outside it the target is the background
    assert np.all(d["target"][..., 3][:, bm == 0] == 0)
    assert np.allclose(d["target"][..., :3][:, bm == 0], d["background"][:, bm == 0])
    oracle = paper.make_triplets(np.random.default_rng(2), 16, proxy_levels=((0.0, 0.0),))
    assert np.allclose(oracle["proxy_error"], 0.0)


def test_rank0_tied_shared_equals_E_and_adapters_matter():
    torch.manual_seed(0)
    d0 = paper.InContextTransformer(dim=16, heads=2, rank=0, tied=True, positions="shared")
    e0 = paper.InContextTransformer(dim=16, heads=2, rank=0, tied=True, positions="shared", shared_adapter=True)
    e0.load_state_dict(d0.state_dict())
    b = X.to_torch(paper.make_triplets(np.random.default_rng(3), 4))
    with torch.no_grad():
        assert torch.allclose(d0(b), e0(b), atol=1e-6)
    d = paper.InContextTransformer(dim=16, heads=2, rank=2)
    with torch.no_grad():
        for blk in d.blocks:
            blk.attn1.processor.b.normal_()
        y = d(b)
        for blk in d.blocks:
            blk.attn1.processor.b.zero_()
        assert (d(b) - y).abs().max() > 1e-3


def test_variants_parameters_matched():
    pd_, pe = paper.parameter_count(paper.variant("D", 32, 2, 4, 4)), paper.parameter_count(paper.variant("E", 32, 2, 4, 4))
    assert abs(pd_ - pe) / pd_ <= 0.02
    with pytest.raises(ValueError):
        paper.variant("Z")


def test_metrics_on_hand_made_inputs():
    a = np.zeros((2, 4, 4), bool)
    b = np.zeros((2, 4, 4), bool)
    a[0, :2], b[0, 1:3] = True, True
    assert np.allclose(paper.iou(a, b), [1 / 3, 1.0])
    face = np.full((1, 4, 4), -1)
    face[0, :2] = 0
    face[0, 2:] = 1
    true = np.zeros((1, 4, 4, 3))
    pred = true.copy()
    pred[0, :2] += 0.3
    assert np.isclose(paper.face_colour_error(pred, true, face)[0], 0.15)
    alb = np.full((1, 4, 4, 3), 0.5)
    mask = np.ones((1, 4, 4), bool)
    tint = np.array([[0.8, 0.9, 1.0]])
    assert np.allclose(paper.tint_error(alb * tint[:, None, None], alb, mask, tint), 0.0)
    assert np.isclose(paper.tint_error(alb, alb, mask, tint)[0], (0.2 + 0.1) / 3)
    assert np.isclose(paper.ols_slope([0, 1, 2], [1, 3, 5]), 2.0)


def test_composite_is_exact_outside_box():
    rng = np.random.default_rng(4)
    out = rng.normal(size=(3, 32, 32, 4)).astype(np.float32)
    bg = rng.uniform(size=(3, 32, 32, 3)).astype(np.float32)
    c = paper.composite(out, bg)
    bm = R.box_mask()
    assert np.array_equal(c[:, bm == 0], bg[:, bm == 0])
    assert np.array_equal(c[:, bm > 0], out[..., :3][:, bm > 0])


def test_euler_gaussian_check_detects_a_wrong_velocity():
    rng = np.random.default_rng(5)
    ok = paper.euler_gaussian_check([1.0, -2.0], [0.5, 2.0], 4000, 100, rng)
    assert ok["max_se_gap"] < 3.5
    # the sampler's moments are far from another Gaussian's: the check has power
    assert abs(ok["mean"][0] - 1.0) < 0.05 and abs(ok["var"][1] - 4.0) < 0.4


def test_pose_a_copy_is_a_weak_answer_at_far_gaps_only():
    # elongated objects: a yaw turn of 30-90 degrees changes the silhouette, so pasting the
    # reference view unturned is far from the target there, and near the target at small gaps
    levels = [X.PROXY_LEVELS[i] for i in X.TRAIN_LEVELS]
    far = R.make_triplets(np.random.default_rng(3), 128, gap_range=(30.0, 90.0), proxy_levels=levels)
    near = R.make_triplets(np.random.default_rng(4), 64, gap_range=(0.0, 5.0), proxy_levels=levels)
    copy_far = paper.iou(far["appearance_mask"], far["target"][..., 3] > 0.5).mean()
    copy_near = paper.iou(near["appearance_mask"], near["target"][..., 3] > 0.5).mean()
    assert copy_far < 0.6 and copy_near > 0.9
    lo, hi, valid, _ = paper.random_shapes(np.random.default_rng(5), 50)
    size = hi[:, 0] - lo[:, 0]
    assert np.all(size[:, 0] > 2 * size[:, 1:].max(1))  # the base box is long along x


def test_config_validation():
    with pytest.raises(ValueError):
        paper.Config(test_far=2)
    with pytest.raises(ValueError):
        paper.Config(gap_near=40.0, gap_far=30.0)


def test_tiny_training_lowers_the_loss():
    st = dataclasses.replace(paper.settings_for("smoke"), steps=15, batch=8, pool=32, dim=16, heads=2, rank=2)
    pools = {"proxy": paper.make_triplets(np.random.default_rng(6), 32)}
    torch.manual_seed(0)
    net, log = X.train_variant("D", pools, st, 0)
    losses = [l for _, l in log.to_dict()["losses"]] if isinstance(log.to_dict()["losses"][0], (list, tuple)) else log.to_dict()["losses"]
    assert losses[-1] < losses[0]


def test_tiny_flow_training_lowers_the_loss_and_samples():
    st = dataclasses.replace(paper.settings_for("smoke"), steps=20, batch=8, pool=32, dim=16, heads=2, rank=2,
                             objective="flow")
    pools = {"proxy": paper.make_triplets(np.random.default_rng(6), 32)}
    net, log = X.train_variant("D", pools, st, 0)
    assert net.flow
    losses = np.ravel([np.ravel(x)[-1] for x in log.to_dict()["losses"]])
    assert losses[-1] < losses[0]
    b = X.to_torch(pools["proxy"], slice(0, 4))
    out = X.sample(net.eval(), b, 3, seed=1)
    assert out.shape == (4, 32, 32, 4) and torch.isfinite(out).all()
    # the same noise seed gives the same sample (paired comparisons between variants)
    assert torch.equal(out, X.sample(net, b, 3, seed=1))


class _ExactVelocity(torch.nn.Module):
    """A point mass at x0: the rectified-flow velocity is exactly (x_t - x0) / sigma."""

    flow = True

    def __init__(self, x0):
        super().__init__()
        self.x0 = x0

    def forward(self, b):
        return (b["x_t"] - self.x0) / b["sigma"][:, None, None, None]


def test_euler_sampler_with_exact_velocity_lands_on_the_target():
    rng = np.random.default_rng(7)
    x0 = torch.from_numpy(rng.uniform(-1, 1, (2, 32, 32, 4)).astype(np.float32))
    b = {"context": torch.zeros(2, 32, 32, 4)}
    out = X.sample(_ExactVelocity(x0), b, 8, seed=0)
    assert torch.allclose(out[..., :3], (x0[..., :3] + 1) / 2, atol=1e-4)
    assert torch.allclose(out[..., 3], x0[..., 3], atol=1e-4)


def test_coordinate_probe_has_power_and_ignores_shading():
    P = X.P
    train = paper.make_triplets(np.random.default_rng(8), 192)
    probe = P.fit(train)
    # chromaticity features do not change when the light dims every channel alike
    f = P.features(train["target"][:4, ..., :3], train["colours"][:4], train["tint"][:4])
    g = P.features(0.7 * train["target"][:4, ..., :3], train["colours"][:4], train["tint"][:4])
    assert np.allclose(f, g, atol=1e-6)
    far = paper.make_triplets(np.random.default_rng(9), 96, gap_range=(30, 90))
    truth = P.coordinate_error(probe, far["target"][..., :3], far["target"][..., 3] > 0.5, far)
    copy = P.coordinate_error(probe, *P.pose_a_copy(far), far)
    blank = P.coordinate_error(probe, far["background"], np.zeros(far["gap"].shape + (32, 32), bool), far)
    assert truth.mean() + 0.05 < copy.mean() and truth.mean() + 0.05 < blank.mean()
    near = paper.make_triplets(np.random.default_rng(10), 64, gap_range=(0, 2))
    t_near = P.coordinate_error(probe, near["target"][..., :3], near["target"][..., 3] > 0.5, near)
    c_near = P.coordinate_error(probe, *P.pose_a_copy(near), near)
    assert abs(c_near.mean() - t_near.mean()) < 0.02
    # a blank image reads the training mean everywhere: its error is the mean distance to it
    true = far["target"][..., 3] > 0.5
    d = np.linalg.norm(far["coords"] - probe["mean"], axis=-1)
    assert np.allclose(blank, (d * true).sum((1, 2)) / true.sum((1, 2)))


def test_conjunction_of_the_headline_halves():
    assert paper.conjunction(["pass", "pass"]) == "pass"
    assert paper.conjunction(["pass", "fail"]) == "fail"
    assert paper.conjunction(["inconclusive", "fail"]) == "fail"
    assert paper.conjunction(["pass", "inconclusive"]) == "inconclusive"
    assert paper.conjunction(["pass", "unsupported"]) == "unsupported"
    assert paper.conjunction(["unsupported", "fail"]) == "fail"
    assert paper.conjunction(["unsupported", "unsupported"]) == "unsupported"


def test_swap_conditions_gives_each_swapped_triplet_another_scenes_condition():
    data = paper.make_triplets(np.random.default_rng(11), 9)
    out = paper.swap_conditions(data, ("geometry",), share=1 / 3)
    k = 3
    assert np.array_equal(out["geometry"][:k], data["geometry"][1 : k + 1])
    assert np.array_equal(out["geometry"][k:], data["geometry"][k:])
    for key in data:
        if key != "geometry":
            assert out[key] is data[key]
    full = paper.swap_conditions(data, ("appearance", "context"))
    assert np.array_equal(full["appearance"][-1], data["appearance"][0])
    # a derangement: no triplet keeps its own condition (independent scenes differ)
    for key in ("appearance", "context"):
        assert all(not np.array_equal(full[key][i], data[key][i]) for i in range(9))
    assert np.array_equal(full["geometry"], data["geometry"]) and np.array_equal(full["target"], data["target"])
    assert np.array_equal(paper.swap_conditions(data, ("geometry",), 0.0)["geometry"], data["geometry"])


def test_control_sets_are_the_declared_perturbations():
    cs = paper.CONTROL_SETS
    # context-tint: D with another scene's context; decomposition: E with another scene's appearance
    # and proxy; oracle: D with another scene's proxy; robustness: a swapped share growing with the level
    assert cs["far_ctxswap"] == ("D", "far", ("context",), 1.0)
    assert cs["far_broken_E"] == ("E", "far", ("appearance", "geometry"), 1.0)
    assert cs["far_proxyswap"] == ("D", "far", ("geometry",), 1.0)
    shares = [cs[f"level{j}_swap"][3] for j in range(1, 5)]
    assert shares == sorted(shares) and shares[0] == 0.0 and shares[-1] == 1.0
    assert all(cs[f"level{j}_swap"][:3] == ("D", f"level{j}", ("geometry",)) for j in range(1, 5))


def test_run_evaluates_the_controls_paired_with_their_claims():
    rng = np.random.default_rng(12)
    probe = X.P.fit(paper.make_triplets(rng, 64))
    meta = {"probe": {"weights": probe["weights"].tolist(), "mean": probe["mean"].tolist()}, "settings": {"sample_steps": 2}}
    models = {}
    for v in paper.VARIANTS:
        models[v] = []
        for k in range(2):
            torch.manual_seed(k)
            models[v].append(paper.variant(v, 16, 1, 2, 2).eval())
    cfg = paper.Config(seed=0, test_far=8, test_near=4, test_per_level=6)
    res = paper.run(cfg, models, meta)
    for name, (v, base, keys, share) in paper.CONTROL_SETS.items():
        s, b = res.sets[name], res.sets[base]
        n = int(round(share * len(b["gap"])))
        for key in keys:
            assert np.array_equal(s[key][:n], np.roll(b[key], -1, axis=0)[:n]) and np.array_equal(s[key][n:], b[key][n:])
        assert np.array_equal(s["target"], b["target"]) and np.array_equal(s["tint"], b["tint"])
        assert all((name, v, k) in res.metrics for k in range(2))
    # share 0 is D itself, bit for bit
    assert np.array_equal(res.metrics[("level1_swap", "D", 0)]["iou"], res.metrics[("level1", "D", 0)]["iou"])
    m = paper.measurements(res)
    for key in ("tint_ctxswap_minus_D", "face_brokenE_minus_D", "iou_D_minus_brokenE", "D_minus_copy_iou"):
        assert len(m[key]) == 2
    # the floor: the copy baseline's IoU is that of the pose-A silhouette against the target's
    far = res.sets["far"]
    copy_iou = paper.iou(np.asarray(far["appearance_mask"], bool), far["target"][..., 3] > 0.5)
    assert np.isclose(m["D_minus_copy_iou"][0].point, (res.metrics[("far", "D", 0)]["iou"] - copy_iou).mean())
    d = res.metrics
    assert np.isclose(m["tint_ctxswap_minus_D"][0].point,
                      (d[("far_ctxswap", "D", 0)]["tint_error"] - d[("far", "D", 0)]["tint_error"]).mean())
    assert np.isclose(m["iou_D_minus_brokenE"][1].point, (d[("far", "D", 1)]["iou"] - d[("far_broken_E", "E", 1)]["iou"]).mean())
    assert np.isclose(m["slope_D_minus_Dswap"].point, np.mean([m["slopes"][("D", k)] - m["slopes"][("D-swap", k)] for k in range(2)]))
    assert np.isclose(m["slope_E"].point, np.mean([m["slopes"][("E", k)] for k in range(2)])) and m["slope_E"].n == 2
    assert np.isclose(m["Dswap_minus_D"].point,
                      np.mean([d[("far_proxyswap", "D", k)]["iou"].mean() - d[("far", "D", k)]["iou"].mean() for k in range(2)]))
