"""top_adapter's point-cloud primitives: FPS, grouping, triangle areas, invariance of tau."""

import numpy as np
import pytest
import torch

from compendium.papers.top_adapter import SHAPES, fps, group, random_se3, sample_shape, simplex_features, triangle_area


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
