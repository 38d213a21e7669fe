"""Point-cloud primitives for top_adapter: shapes sampled from trimesh, FPS + kNN grouping, and the
simplex features tau (all inferred, see the package docstring).

- ``sample_shape(name, n, rng)``: ``n`` surface points of one of ``SHAPES``, sampled from a
  ``trimesh`` primitive (sphere, torus, cylinder, box, cone, annulus, ...) with a uniform area
  sampler, then scaled anisotropically, rotated, noised.
- ``fps(points, m)``: farthest-point sampling started at the point farthest from the centroid, so
  the result does not depend on point order (nor on rotation, translation or scale).
- ``group(points, G, k)``: FPS centres and the ``k`` nearest points of each (``compendium.kernels.knn``).
- ``simplex_features(points, centers, scales)``: per group and scale ``k_s``, on the neighbourhood
  centred at its centre and divided by its mean centre-to-neighbour distance (scale-free):
  0-simplices: normalised covariance eigenvalues, linearity, planarity, sphericity (6);
  1-simplices: std of the centre-neighbour edge lengths and an 8-bin histogram on [0, 3) (9);
  2-simplices: triangles (centre, n_i, n_{i+1}) of angularly consecutive neighbours in the local
  tangent plane: area mean and std, and normal dispersion 1 - |mean unit normal| (3).
  F = 18 per scale. Every feature is invariant to rotation, translation, global scale and point order.
"""

from __future__ import annotations

import functools

import numpy as np
import torch

from compendium.kernels.knn import knn

SHAPES = ("sphere", "ellipsoid", "torus", "thin_torus", "two_hole", "cylinder", "cube", "cone", "disk", "annulus")


def random_se3(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """A uniformly random rotation (QR of a Gaussian matrix, det +1) and a translation in [-1, 1]^3."""
    q, r = np.linalg.qr(rng.normal(size=(3, 3)))
    q = q * np.sign(np.diag(r))
    if np.linalg.det(q) < 0:
        q[:, 0] = -q[:, 0]
    return q, rng.uniform(-1, 1, size=3)


@functools.cache
def _mesh(name: str):
    import trimesh

    c = trimesh.creation
    if name in ("sphere", "ellipsoid"):
        m = c.icosphere(subdivisions=3)
        if name == "ellipsoid":
            m.apply_scale([1.0, 0.6, 0.35])
        return m
    if name == "torus":
        return c.torus(major_radius=1.0, minor_radius=0.4)
    if name == "thin_torus":
        return c.torus(major_radius=1.0, minor_radius=0.85)   # the hole is nearly closed
    if name == "two_hole":
        a = c.torus(major_radius=0.8, minor_radius=0.3)
        b = c.torus(major_radius=0.8, minor_radius=0.3)
        b.apply_translation([1.5, 0.0, 0.0])
        return trimesh.util.concatenate([a, b])
    if name == "cylinder":       # open: the caps are dropped
        m = c.cylinder(radius=0.6, height=2.0, sections=48)
        keep = np.abs(m.face_normals[:, 2]) < 0.5
        return trimesh.Trimesh(m.vertices, m.faces[keep], process=False)
    if name == "cube":
        return c.box(extents=(1.5, 1.5, 1.5))
    if name == "cone":
        return c.cone(radius=0.8, height=1.6, sections=48)
    if name == "disk":
        return c.annulus(r_min=0.0, r_max=1.0, height=0.02, sections=48)
    if name == "annulus":
        return c.annulus(r_min=0.55, r_max=1.0, height=0.02, sections=48)
    raise ValueError(f"unknown shape {name!r}; choose from {SHAPES}")


def sample_shape(name: str, n: int, rng: np.random.Generator, noise: float = 0.01) -> np.ndarray:
    """``n`` points (float32, (n, 3)) on the surface of shape ``name``: area-uniform triangle
    sampling, anisotropic scale in [0.7, 1.3], a random rotation, Gaussian noise ``noise``."""
    mesh = _mesh(name)
    tri = mesh.triangles                                             # (T, 3, 3)
    area = mesh.area_faces
    face = rng.choice(len(tri), size=n, p=area / area.sum())
    u, v = rng.random(n), rng.random(n)
    flip = u + v > 1
    u[flip], v[flip] = 1 - u[flip], 1 - v[flip]
    t = tri[face]
    pts = t[:, 0] + u[:, None] * (t[:, 1] - t[:, 0]) + v[:, None] * (t[:, 2] - t[:, 0])
    pts = (pts - pts.mean(0)) * rng.uniform(0.7, 1.3, size=3)
    rot, _ = random_se3(rng)
    return (pts @ rot.T + rng.normal(scale=noise, size=pts.shape)).astype(np.float32)


def fps(points: torch.Tensor, m: int) -> torch.Tensor:
    """Farthest-point sampling. points (B, N, 3) -> LongTensor (B, m), started at the point farthest
    from the centroid (order-free), each next point the farthest from those chosen (ties: lowest index)."""
    if points.ndim != 3 or not 1 <= m <= points.shape[1]:
        raise ValueError(f"points must be (B, N, C) and 1 <= m <= N; got {tuple(points.shape)}, m={m}")
    B = points.shape[0]
    ar = torch.arange(B)
    start = (points - points.mean(1, keepdim=True)).norm(dim=-1).argmax(1)
    idx = torch.empty(B, m, dtype=torch.long)
    idx[:, 0] = start
    dmin = (points - points[ar, start][:, None]).norm(dim=-1)
    for j in range(1, m):
        nxt = dmin.argmax(1)
        idx[:, j] = nxt
        dmin = torch.minimum(dmin, (points - points[ar, nxt][:, None]).norm(dim=-1))
    return idx


def group(points: torch.Tensor, n_groups: int, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """FPS centres (B, G, 3) and their k nearest points, centred (B, G, k, 3)."""
    centers = points.gather(1, fps(points, n_groups)[..., None].expand(-1, -1, points.shape[-1]))
    idx, _ = knn(points, centers, k)
    B, G, _ = idx.shape
    neigh = points[torch.arange(B)[:, None, None], idx]
    return neigh - centers[:, :, None], centers


def triangle_area(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """Areas of triangles (..., 3) x 3 -> (...)."""
    return 0.5 * torch.linalg.cross(b - a, c - a, dim=-1).norm(dim=-1)


def _angular_ring(rel: torch.Tensor, evecs: torch.Tensor) -> torch.Tensor:
    """Neighbours rel (B, G, k, 3) ordered by their angle in the plane of the first two principal
    axes (evecs (B, G, 3, 3), columns by descending eigenvalue): the fan of 2-simplices
    (centre, n_i, n_{i+1}) that tau's triangle features and :func:`fan_triangles` use."""
    x = (rel * evecs[..., None, :, 0]).sum(-1)
    y = (rel * evecs[..., None, :, 1]).sum(-1)
    order = torch.atan2(y, x).argsort(-1)
    return rel.gather(2, order[..., None].expand_as(rel))


def fan_triangles(points: torch.Tensor, centers: torch.Tensor, k: int = 8) -> torch.Tensor:
    """The 2-simplices of tau at scale k, as vertices (B, G, k, 3, 3): (centre, n_i, n_{i+1}).

    The same neighbourhoods, normalisation and angular order as :func:`simplex_features` (for the
    figure of a cloud with its triangles, and to test that the drawn triangles are the measured ones).
    """
    idx, _ = knn(points, centers, k + 1)                              # the centre is its own nearest point
    B = idx.shape[0]
    rel = points[torch.arange(B)[:, None, None], idx[..., 1:]] - centers[:, :, None]
    s = rel.norm(dim=-1).mean(-1, keepdim=True).clamp_min(1e-12)
    unit = rel / s[..., None]
    cov = torch.einsum("bgki,bgkj->bgij", unit, unit) / unit.shape[2]
    _, evecs = torch.linalg.eigh(cov.double())
    ring = _angular_ring(unit, evecs.flip(-1).to(unit.dtype)) * s[..., None]
    c = centers[:, :, None].expand_as(ring)
    return torch.stack([c, c + ring, c + ring.roll(-1, dims=2)], dim=-2)


def _scale_features(rel: torch.Tensor) -> torch.Tensor:
    """rel (B, G, k, 3): neighbours minus their centre (the centre itself, at 0, excluded) -> (B, G, 18)."""
    length = rel.norm(dim=-1)                                         # 1-simplices centre-neighbour
    s = length.mean(-1, keepdim=True).clamp_min(1e-12)
    rel, length = rel / s[..., None], length / s
    cov = torch.einsum("bgki,bgkj->bgij", rel, rel) / rel.shape[2]
    evals, evecs = torch.linalg.eigh(cov.double())                    # ascending
    evals, evecs = evals.flip(-1).clamp_min(0).to(rel.dtype), evecs.flip(-1).to(rel.dtype)
    l1, l2, l3 = evals.unbind(-1)
    tot = evals.sum(-1, keepdim=True).clamp_min(1e-12)
    l1c = l1.clamp_min(1e-12)
    f0 = torch.cat([evals / tot, torch.stack([(l1 - l2) / l1c, (l2 - l3) / l1c, l3 / l1c], -1)], -1)
    hist = torch.stack([((length >= lo) & (length < lo + 0.375)).float().mean(-1)
                        for lo in np.arange(8) * 0.375], -1)
    f1 = torch.cat([length.std(-1, keepdim=True), hist], -1)
    # 2-simplices: neighbours ordered by angle in the tangent plane (first two principal axes)
    ring = _angular_ring(rel, evecs)
    nxt = ring.roll(-1, dims=2)
    cr = torch.linalg.cross(ring, nxt, dim=-1)                        # triangle (0, n_i, n_{i+1})
    area = 0.5 * cr.norm(dim=-1)
    unit = cr / cr.norm(dim=-1, keepdim=True).clamp_min(1e-12)
    disp = 1 - unit.mean(2).norm(dim=-1)
    f2 = torch.stack([area.mean(-1), area.std(-1), disp], -1)
    return torch.cat([f0, f1, f2], -1)


def simplex_features(points: torch.Tensor, centers: torch.Tensor, scales=(8, 16, 32)) -> torch.Tensor:
    """tau (B, G, 18 * len(scales)) for clouds points (B, N, 3) and group centres (B, G, 3)."""
    feats = []
    for k in scales:
        idx, _ = knn(points, centers, k + 1)                          # the centre is its own nearest point
        B = idx.shape[0]
        neigh = points[torch.arange(B)[:, None, None], idx[..., 1:]]
        feats.append(_scale_features(neigh - centers[:, :, None]))
    return torch.cat(feats, -1)
