"""Synthetic segmentation data in three morphology families, and the low-frequency energy fraction.

Families: ``vessels`` (a branching tree of 1.4-3 px wide curves grown from one edge across the
image), ``ellipses`` (one to three filled ellipses) and ``stars`` (one or two star-shaped polygons,
``r(phi) = r0 (1 + a cos(k phi + phase))``). Images are a smooth random background plus the
blurred mask times a contrast, plus white noise. Everything takes an explicit generator.
"""

from __future__ import annotations

import numpy as np
import scipy.ndimage as ndi

__all__ = ["FAMILIES", "vessel_mask", "ellipse_mask", "star_mask", "family_mask", "render_image", "make_dataset",
           "low_frequency_energy_fraction", "parseval_gap", "signed_distance", "instrument_labels",
           "make_instrument_dataset", "INSTRUMENT_CLASSES"]

INSTRUMENT_CLASSES = ("background", "shaft", "tip")

FAMILIES = ("vessels", "ellipses", "stars")


def _grid(size: int):
    yy, xx = np.mgrid[0:size, 0:size].astype(float)
    return yy, xx


def _segments_mask(size: int, p0: np.ndarray, p1: np.ndarray, radius: np.ndarray, chunk: int = 8192) -> np.ndarray:
    """Pixels within ``radius[s]`` of segment ``p0[s] -> p1[s]`` for any s (vectorised over pixels x
    segments, in chunks of pixels so that memory stays at a few MB)."""
    yy, xx = _grid(size)
    pixels = np.stack([yy.ravel(), xx.ravel()], 1)
    d = (p1 - p0)[None]                                                 # (1, S, 2)
    dd = np.maximum((d * d).sum(-1), 1e-12)
    out = np.empty(len(pixels), bool)
    for i in range(0, len(pixels), chunk):
        p = pixels[i:i + chunk, None, :]                                # (n, 1, 2)
        t = np.clip(((p - p0[None]) * d).sum(-1) / dd, 0.0, 1.0)
        dist2 = ((p - p0[None] - t[..., None] * d) ** 2).sum(-1)        # (n, S)
        out[i:i + chunk] = (dist2 <= radius[None] ** 2).any(1)
    return out.reshape(size, size)


def vessel_mask(rng: np.random.Generator, size: int) -> np.ndarray:
    """A vessel tree: a trunk from a random point of the left edge grows rightwards across the
    image with a random-walk heading and spawns thinner branches (depth <= 3)."""
    step = size / 20.0
    branches = [(np.array([rng.uniform(0.2, 0.8) * size, 0.0]), rng.normal(0.0, 0.3), rng.uniform(1.2, 1.5), 0)]
    p0, p1, radius = [], [], []
    while branches and len(p0) < 400:
        pos, heading, r, depth = branches.pop()
        for _ in range(60):
            heading += rng.normal(0.0, 0.25)
            new = pos + step * np.array([np.sin(heading), np.cos(heading)])
            p0.append(pos), p1.append(new), radius.append(r)
            pos = new
            if not (-1 <= pos[0] <= size and -1 <= pos[1] <= size):
                break
            if depth < 3 and rng.random() < 0.12:
                side = rng.choice([-1.0, 1.0])
                branches.append((pos.copy(), heading + side * rng.uniform(0.5, 1.1), max(0.7, 0.75 * r), depth + 1))
    return _segments_mask(size, np.array(p0), np.array(p1), np.array(radius))


def ellipse_mask(rng: np.random.Generator, size: int) -> np.ndarray:
    """One to three filled ellipses, semi-axes size/12 .. size/5, random orientation."""
    yy, xx = _grid(size)
    mask = np.zeros((size, size), bool)
    for _ in range(rng.integers(1, 4)):
        cy, cx = rng.uniform(0.2, 0.8, 2) * size
        a, b = rng.uniform(size / 12, size / 5, 2)
        th = rng.uniform(0, np.pi)
        u = (yy - cy) * np.cos(th) + (xx - cx) * np.sin(th)
        v = -(yy - cy) * np.sin(th) + (xx - cx) * np.cos(th)
        mask |= (u / a) ** 2 + (v / b) ** 2 <= 1.0
    return mask


def star_mask(rng: np.random.Generator, size: int) -> np.ndarray:
    """One or two stars: ``r(phi) <= r0 (1 + a cos(k phi + phase))``, k in 4..7, a in 0.35..0.6."""
    yy, xx = _grid(size)
    mask = np.zeros((size, size), bool)
    for _ in range(rng.integers(1, 3)):
        cy, cx = rng.uniform(0.3, 0.7, 2) * size
        r0, a, k, ph = rng.uniform(size / 10, size / 5), rng.uniform(0.35, 0.6), rng.integers(4, 8), rng.uniform(0, 2 * np.pi)
        rr, phi = np.hypot(yy - cy, xx - cx), np.arctan2(yy - cy, xx - cx)
        mask |= rr <= r0 * (1 + a * np.cos(k * phi + ph))
    return mask


def family_mask(family: str, rng: np.random.Generator, size: int) -> np.ndarray:
    """A mask of ``family`` (one of :data:`FAMILIES`), shape (size, size), bool."""
    makers = {"vessels": vessel_mask, "ellipses": ellipse_mask, "stars": star_mask}
    if family not in makers:
        raise ValueError(f"family must be one of {FAMILIES}, got {family!r}")
    return makers[family](rng, size)


def render_image(rng: np.random.Generator, mask: np.ndarray, contrast: float = 1.0, noise: float = 0.5,
                 background: float = 0.8) -> np.ndarray:
    """``bg + contrast * blur(mask) + noise``: bg a sum of four random low-frequency cosines of
    amplitude ``background``; blur a Gaussian of sigma 0.6 px; white noise of std ``noise``."""
    size = mask.shape[0]
    yy, xx = _grid(size)
    bg = np.zeros_like(yy)
    for _ in range(4):
        f = rng.uniform(0.5, 3.0, 2) / size
        bg += np.cos(2 * np.pi * (f[0] * yy + f[1] * xx) + rng.uniform(0, 2 * np.pi))
    img = background * bg / 2.0 + contrast * ndi.gaussian_filter(mask.astype(float), 0.6)
    return (img + noise * rng.standard_normal(mask.shape)).astype(np.float32)


def signed_distance(mask: np.ndarray) -> np.ndarray:
    """Signed Euclidean distance to the boundary, negative inside, positive outside (scipy EDT)."""
    mask = np.asarray(mask, bool)
    if not mask.any() or mask.all():
        return np.zeros(mask.shape)
    return ndi.distance_transform_edt(~mask) - ndi.distance_transform_edt(mask)


def make_dataset(rng: np.random.Generator, count: int, size: int, families=FAMILIES, **render) -> dict:
    """``count`` images cycling through ``families``.

    Returns
    -------
    dict
        ``images`` (n, 1, size, size) float32, ``masks`` (n, 1, size, size) float32,
        ``family`` (n,) int index into ``families``, ``sdf`` (n, 1, size, size) float32 signed
        distance divided by ``size``.
    """
    fam = np.arange(count) % len(families)
    masks = np.stack([family_mask(families[f], rng, size) for f in fam])
    images = np.stack([render_image(rng, m, **render) for m in masks])
    sdf = np.stack([signed_distance(m) / size for m in masks])
    return {"images": images[:, None], "masks": masks[:, None].astype(np.float32), "family": fam,
            "sdf": sdf[:, None].astype(np.float32), "families": tuple(families)}


# ------------------------------------------------------------------ spectral concentration
def low_frequency_energy_fraction(image, modes: int, remove_mean: bool = True) -> np.ndarray:
    r"""Share of spectral energy in the centred ``K x K`` low-frequency block.

    The one definition used in this chapter: :math:`x \leftarrow x - \bar x` (unless
    ``remove_mean`` is False), :math:`P = |\mathrm{fftshift}(\mathrm{fft2}(x))|^2`, and the fraction
    is :math:`\sum_{k_y, k_x \in [-K/2, K/2)} P / \sum P`: ``K^2 / (HW)`` of the spectrum.

    Parameters
    ----------
    image : array_like, shape (..., H, W)
        Grey images (leading axes are a batch).
    modes : int
        K, even, at most min(H, W).

    Returns
    -------
    ndarray, shape (...)
    """
    x = np.asarray(image, dtype=float)
    H, W = x.shape[-2:]
    if modes < 2 or modes % 2 or modes > min(H, W):
        raise ValueError(f"modes must be even and in [2, {min(H, W)}], got {modes}")
    if remove_mean:
        x = x - x.mean(axis=(-2, -1), keepdims=True)
    P = np.abs(np.fft.fftshift(np.fft.fft2(x), axes=(-2, -1))) ** 2
    total = P.sum(axis=(-2, -1))
    if np.any(total == 0):
        raise ValueError("an image has no energy left (constant image with the mean removed)")
    h, cy, cx = modes // 2, H // 2, W // 2
    return P[..., cy - h:cy + h, cx - h:cx + h].sum(axis=(-2, -1)) / total


def parseval_gap(image) -> float:
    r"""Relative gap :math:`|\sum|X|^2/(HW) - \sum x^2| / \sum x^2` of numpy's fft2 (Parseval)."""
    x = np.asarray(image, dtype=float)
    X = np.fft.fft2(x)
    lhs = (np.abs(X) ** 2).sum() / (x.shape[-2] * x.shape[-1])
    rhs = (x**2).sum()
    return float(abs(lhs - rhs) / rhs)


# ------------------------------------------------------------------ the 3-class instrument variant
def instrument_labels(rng: np.random.Generator, size: int) -> np.ndarray:
    """An instrument-like object as a label map (0 background, 1 shaft, 2 tip): a straight shaft of
    half-width size/16 .. size/11 enters from beyond the image edge and ends at a point near the
    centre; the tip is an ellipse (semi-axes size/9 along the shaft, size/14 across) centred just
    past that end. The tip overwrites the shaft where they overlap."""
    yy, xx = _grid(size)
    angle = rng.uniform(0, 2 * np.pi)
    u = np.array([np.sin(angle), np.cos(angle)])
    end = size * (0.5 + rng.uniform(-0.15, 0.15, 2))
    start = end - 1.5 * size * u
    shaft = _segments_mask(size, start[None], end[None], np.array([rng.uniform(size / 16, size / 11)]))
    a, b = size / 9, size / 14
    c = end + 0.6 * a * u
    along = (yy - c[0]) * u[0] + (xx - c[1]) * u[1]
    across = -(yy - c[0]) * u[1] + (xx - c[1]) * u[0]
    tip = (along / a) ** 2 + (across / b) ** 2 <= 1.0
    labels = shaft.astype(np.int64)
    labels[tip] = 2
    return labels


def make_instrument_dataset(rng: np.random.Generator, count: int, size: int, **render) -> dict:
    """``count`` instrument images: the shaft drawn at intensity 0.6 and the tip at 1.2 (times the
    contrast) on :func:`render_image`'s background and noise. Returns ``images`` (n, 1, s, s)
    float32 and ``labels`` (n, s, s) int64."""
    labels = np.stack([instrument_labels(rng, size) for _ in range(count)])
    images = np.stack([render_image(rng, np.choose(lab, [0.0, 0.6, 1.2]), **render) for lab in labels])
    return {"images": images[:, None], "labels": labels}
