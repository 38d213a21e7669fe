"""Numpy renderer of box-union objects and the insertion triplets (appearance, geometry, context).

Orthographic ray casting (exact slab intersection per box, vectorised over images, boxes and
pixels) stands in for a z-buffer: the nearest hit over the boxes is the z-buffer's answer.
"""

from __future__ import annotations

import numpy as np

SIZE = 32
HALF_WIDTH = 1.3  # the image plane spans [-1.3, 1.3]^2
BOX_LO, BOX_HI = 2, 30  # the fixed context box (pixels [2, 30) in both axes): it carries no pose
GREY = 0.5


def rotation(pose) -> np.ndarray:
    """Rotation matrix ``Rz(roll) @ Rx(pitch) @ Ry(yaw)`` for ``pose = (yaw, pitch, roll)`` in degrees.

    ``pose`` may be shape (3,) or (N, 3); the result is (3, 3) or (N, 3, 3).
    """
    p = np.deg2rad(np.asarray(pose, dtype=float))
    y, x, z = p[..., 0], p[..., 1], p[..., 2]
    c, s = np.cos, np.sin
    one, zero = np.ones_like(y), np.zeros_like(y)
    ry = np.stack([np.stack([c(y), zero, s(y)], -1), np.stack([zero, one, zero], -1), np.stack([-s(y), zero, c(y)], -1)], -2)
    rx = np.stack([np.stack([one, zero, zero], -1), np.stack([zero, c(x), -s(x)], -1), np.stack([zero, s(x), c(x)], -1)], -2)
    rz = np.stack([np.stack([c(z), -s(z), zero], -1), np.stack([s(z), c(z), zero], -1), np.stack([zero, zero, one], -1)], -2)
    return rz @ rx @ ry


BASE_LONG = (0.65, 0.85)  # half-length of the base box along its long (object x) axis
BASE_THIN = (0.15, 0.25)  # half-widths along the other two axes


def random_shapes(rng: np.random.Generator, n: int, max_boxes: int = 3):
    """``n`` objects of 2..max_boxes axis-aligned boxes (an elongated base box and attached parts)
    with six per-face colours each. The base box is long along the object's x axis
    (``BASE_LONG``) and thin along y and z (``BASE_THIN``), so that a yaw turn changes the
    silhouette: a compact object looks alike from every side, and copying the reference view would
    then be a strong answer at any pose. Returns ``(lo, hi, valid, colours)`` of shapes
    (n, K, 3), (n, K, 3), (n, K) and (n, 6, 3)."""
    lo = np.zeros((n, max_boxes, 3))
    hi = np.zeros((n, max_boxes, 3))
    base = np.stack([rng.uniform(*BASE_LONG, n), rng.uniform(*BASE_THIN, n), rng.uniform(*BASE_THIN, n)], -1)
    lo[:, 0], hi[:, 0] = -base, base
    valid = np.zeros((n, max_boxes), bool)
    valid[:, 0] = True
    nb = rng.integers(2, max_boxes + 1, n)
    for k in range(1, max_boxes):
        axis = rng.integers(0, 3, n)
        side = rng.choice([-1.0, 1.0], n)
        half = rng.uniform(0.1, 0.25, (n, 3))
        centre = rng.uniform(-0.2, 0.2, (n, 3))
        idx = np.arange(n)
        centre[idx, axis] = side * (base[idx, axis] + half[idx, axis])
        lo[:, k], hi[:, k] = centre - half, centre + half
        valid[:, k] = k < nb
    colours = rng.uniform(0.15, 0.95, (n, 6, 3))
    return lo, hi, valid, colours


def proxy_boxes(lo, hi, dilate: float, grid: float):
    """The imperfect proxy: every box dilated by ``dilate`` and snapped outwards to a grid of step
    ``grid`` (0: no snapping). ``dilate = grid = 0`` is the exact shape (the oracle)."""
    lo2, hi2 = lo - dilate, hi + dilate
    if grid > 0:
        lo2 = np.floor(lo2 / grid + 1e-9) * grid
        hi2 = np.ceil(hi2 / grid - 1e-9) * grid
    return lo2, hi2


def render(lo, hi, valid, pose, size: int = SIZE):
    """Render objects at poses by orthographic ray casting along +z.

    Parameters
    ----------
    lo, hi : array, shape (N, K, 3)
        Box corners in object coordinates.
    valid : bool array, shape (N, K)
    pose : array, shape (N, 3)
        (yaw, pitch, roll) in degrees; a world point is ``R(pose) @ p_object``.

    Returns
    -------
    dict with ``mask`` (N, S, S) bool, ``depth`` (N, S, S) (0 off the object), ``normal``
    (N, S, S, 3) world normals, ``face`` (N, S, S) int face id 0..5 (axis * 2 + positive side;
    -1 off the object) and ``coords`` (N, S, S, 3) object coordinates of the hit.
    """
    lo, hi, valid = np.asarray(lo, float), np.asarray(hi, float), np.asarray(valid, bool)
    n = lo.shape[0]
    r = rotation(np.asarray(pose, float).reshape(n, 3))  # (N, 3, 3)
    g = (np.arange(size) + 0.5) / size * 2 * HALF_WIDTH - HALF_WIDTH
    yy, xx = np.meshgrid(-g, g, indexing="ij")  # row 0 at the top
    origin = np.stack([xx.ravel(), yy.ravel(), np.full(size * size, -3.0)], -1)  # (P, 3)
    o = np.einsum("nji,pj->npi", r, origin)  # R^T o, (N, P, 3)
    d = np.broadcast_to(r[:, 2, :][:, None, :], o.shape)  # R^T e_z
    d = np.where(np.abs(d) < 1e-12, 1e-12, d)
    t1 = (lo[:, :, None, :] - o[:, None]) / d[:, None]
    t2 = (hi[:, :, None, :] - o[:, None]) / d[:, None]  # (N, K, P, 3)
    tnear = np.minimum(t1, t2)
    tmin = tnear.max(-1)
    tmax = np.maximum(t1, t2).min(-1)
    hit = (tmax >= tmin) & valid[:, :, None]
    tmin = np.where(hit, tmin, np.inf)
    best = tmin.argmin(1)  # (N, P)
    depth = np.take_along_axis(tmin, best[:, None], 1)[:, 0]
    mask = np.isfinite(depth)
    axis = np.take_along_axis(tnear.argmax(-1), best[:, None], 1)[:, 0]  # (N, P)
    dax = np.take_along_axis(d, axis[..., None], -1)[..., 0]
    positive = dax < 0  # the ray enters through the face whose outward normal opposes it
    n_obj = np.zeros(o.shape)
    np.put_along_axis(n_obj, axis[..., None], np.where(positive, 1.0, -1.0)[..., None], -1)
    normal = np.einsum("nij,npj->npi", r, n_obj)
    coords = o + np.where(mask, depth, 0.0)[..., None] * d
    face = np.where(mask, axis * 2 + positive, -1)
    shp = (n, size, size)
    z = lambda a: np.where(mask[..., None], a, 0.0).reshape(*shp, 3)  # noqa: E731
    return {"mask": mask.reshape(shp), "depth": np.where(mask, depth, 0.0).reshape(shp),
            "normal": z(normal), "face": face.reshape(shp), "coords": z(coords)}


def shade(rend, colours):
    """Albedo of the hit face times ``0.6 + 0.4 |n_z|`` (a fixed head-on light); 0 off the object."""
    face = np.clip(rend["face"], 0, 5)
    albedo = np.take_along_axis(colours[:, None, None, :, :], face[..., None, None], 3)[..., 0, :]
    light = 0.6 + 0.4 * np.abs(rend["normal"][..., 2:3])
    return np.where(rend["mask"][..., None], albedo * light, 0.0)


def backgrounds(rng: np.random.Generator, n: int, size: int = SIZE):
    """Smooth colour gradients, shape (n, S, S, 3), before the scene tint."""
    c0 = rng.uniform(0.2, 0.8, (n, 1, 1, 3))
    gx, gy = rng.uniform(-0.25, 0.25, (2, n, 1, 1, 3))
    t = np.linspace(-1, 1, size)
    return np.clip(c0 + gx * t[None, None, :, None] + gy * t[None, :, None, None], 0, 1)


def box_mask(size: int = SIZE):
    m = np.zeros((size, size))
    m[BOX_LO:BOX_HI, BOX_LO:BOX_HI] = 1.0
    return m


def make_triplets(rng: np.random.Generator, n: int, *, gap_range=(0.0, 90.0), proxy_levels=((0.08, 0.2),),
                  chunk: int = 128):
    """Insertion triplets.

    Pose A is uniform in [-60, 60]^3 degrees; pose B adds a yaw gap uniform in ``gap_range`` with a
    random sign (pitch and roll shared). Each triplet's proxy uses one (dilate, grid) level drawn
    from ``proxy_levels``. Returns float32 arrays: ``appearance`` (n, S, S, 3) the object at A on
    grey, unlit by the scene; ``geometry`` (n, S, S, 4) the proxy's normals and depth at B
    (untextured); ``context`` (n, S, S, 4) the tinted background with the box zeroed plus the box
    mask; ``target`` (n, S, S, 4) the tinted object at B composited on the background, plus the
    silhouette; and ``background``, ``face``, ``albedo_shaded``, ``tint``, ``gap``,
    ``proxy_error`` (1 - IoU of proxy and true silhouettes at B), ``level``; for the coordinate
    probe also ``coords`` (n, S, S, 3) the object coordinates at B, ``colours`` (n, 6, 3) the face
    albedos and ``appearance_mask`` (n, S, S) the silhouette at A.
    """
    lo, hi, valid, colours = random_shapes(rng, n)
    pose_a = rng.uniform(-60, 60, (n, 3))
    gap = rng.uniform(*gap_range, n)
    pose_b = pose_a.copy()
    pose_b[:, 0] += gap * rng.choice([-1.0, 1.0], n)
    levels = np.asarray(proxy_levels, float)
    level = rng.integers(0, len(levels), n)
    plo, phi = proxy_boxes(lo, hi, 0.0, 0.0)
    for j, (dil, grid) in enumerate(levels):
        a, b = proxy_boxes(lo, hi, dil, grid)
        sel = level == j
        plo[sel], phi[sel] = a[sel], b[sel]
    tint = rng.uniform(0.6, 1.0, (n, 3))
    bg = backgrounds(rng, n) * tint[:, None, None, :]
    out = {k: [] for k in ("appearance", "geometry", "target", "face", "albedo_shaded", "proxy_mask", "coords",
                           "appearance_mask")}
    for s in range(0, n, chunk):
        sl = slice(s, s + chunk)
        ra = render(lo[sl], hi[sl], valid[sl], pose_a[sl])
        rb = render(lo[sl], hi[sl], valid[sl], pose_b[sl])
        rp = render(plo[sl], phi[sl], valid[sl], pose_b[sl])
        app = np.where(ra["mask"][..., None], shade(ra, colours[sl]), GREY)
        depth = np.where(rp["mask"], 3.5 - rp["depth"], 0.0)[..., None]  # nearer is larger, 0 off the proxy
        sb = shade(rb, colours[sl])
        tgt = np.where(rb["mask"][..., None], sb * tint[sl, None, None, :], bg[sl])
        out["appearance"].append(app)
        out["geometry"].append(np.concatenate([rp["normal"], depth], -1))
        out["target"].append(np.concatenate([tgt, rb["mask"][..., None]], -1))
        out["face"].append(rb["face"])
        out["albedo_shaded"].append(sb)
        out["proxy_mask"].append(rp["mask"])
        out["coords"].append(rb["coords"])
        out["appearance_mask"].append(ra["mask"])
    res = {k: np.concatenate(v) for k, v in out.items()}
    bm = box_mask()[None, :, :, None]
    res["context"] = np.concatenate([bg * (1 - bm), np.broadcast_to(bm, bg.shape[:3] + (1,))], -1)
    res["background"] = bg
    true = res["target"][..., 3] > 0.5
    pm = res.pop("proxy_mask")
    inter = (true & pm).sum((1, 2))
    union = (true | pm).sum((1, 2))
    res["proxy_error"] = 1 - inter / np.maximum(union, 1)
    res.update(tint=tint, gap=gap, level=level, colours=colours)
    return {k: (v.astype(np.float32) if v.dtype.kind == "f" else v) for k, v in res.items()}
