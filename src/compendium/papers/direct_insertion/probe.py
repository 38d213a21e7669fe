"""The coordinate probe: our analogue of the paper's Matching Error.

A linear probe reads object coordinates off an image of the object at pose B. Per pixel its
features are a soft assignment of the pixel's chromaticity to the object's six tinted face
colours (chromaticity, ``rgb / sum(rgb)``, does not change with the shading) and that assignment
times the pixel's image-plane position: 6 x (1, x, y) = 18 features. Which face a pixel shows and
where it lies in the image fix much of its object coordinate, and both change with the pose, so
an image at the wrong pose reads off the wrong coordinates. The evaluator knows the face colours
and the tint, as the paper's matcher knows the reference object. The probe is a ridge regression
fitted once on ground-truth renders of training triplets (pixels inside the true silhouette);
its error on held-out ground truth is the floor a perfect generator would reach.

The coordinate error of an image is the mean, over the pixels of the true silhouette at B, of the
Euclidean distance between the probe's reading and the true object coordinate; where the image's
own silhouette leaves a pixel out, the probe reads the training mean (nothing drawn, nothing
known). Pixels drawn outside the true silhouette are IoU's business, not this error's.
"""

from __future__ import annotations

import numpy as np

from .render import HALF_WIDTH, SIZE

TAU = 1e-3  # softmax temperature on squared chromaticity distances
RIDGE = 1e-3  # ridge penalty per fitted pixel


def _chroma(c: np.ndarray) -> np.ndarray:
    c = np.clip(c, 1e-3, None)
    return c / c.sum(-1, keepdims=True)


def _grid(size: int = SIZE) -> tuple[np.ndarray, np.ndarray]:
    g = (np.arange(size) + 0.5) / size * 2 * HALF_WIDTH - HALF_WIDTH
    yy, xx = np.meshgrid(-g, g, indexing="ij")
    return xx, yy


def features(rgb, colours, tint) -> np.ndarray:
    """(n, S, S, 18): the soft face assignment ``w`` (6) and ``w * x``, ``w * y``."""
    rgb, colours, tint = (np.asarray(a, float) for a in (rgb, colours, tint))
    ref = _chroma(colours * tint[:, None, :])  # (n, 6, 3)
    d = ((_chroma(rgb)[:, :, :, None, :] - ref[:, None, None]) ** 2).sum(-1)  # (n, S, S, 6)
    z = -d / TAU
    w = np.exp(z - z.max(-1, keepdims=True))
    w /= w.sum(-1, keepdims=True)
    xx, yy = _grid(rgb.shape[1])
    return np.concatenate([w, w * xx[None, :, :, None], w * yy[None, :, :, None]], -1)


def fit(data: dict) -> dict:
    """Ridge probe on ground-truth renders: ``{'weights': (18, 3), 'mean': (3,)}``."""
    true = data["target"][..., 3] > 0.5
    x = features(data["target"][..., :3], data["colours"], data["tint"])[true]
    y = np.asarray(data["coords"], float)[true]
    w = np.linalg.solve(x.T @ x + RIDGE * len(x) * np.eye(x.shape[1]), x.T @ y)
    return {"weights": w, "mean": y.mean(0)}


def coordinate_error(probe: dict, rgb, mask, data: dict) -> np.ndarray:
    """Per image: mean over the true silhouette of |probe reading - true object coordinate|."""
    read = features(rgb, data["colours"], data["tint"]) @ np.asarray(probe["weights"])
    read = np.where(np.asarray(mask, bool)[..., None], read, np.asarray(probe["mean"]))
    true = data["target"][..., 3] > 0.5
    dist = np.linalg.norm(read - np.asarray(data["coords"], float), axis=-1)
    return (dist * true).sum((1, 2)) / np.maximum(true.sum((1, 2)), 1)


def pose_a_copy(data: dict) -> tuple[np.ndarray, np.ndarray]:
    """The probe's power control: the object at pose A (the appearance view), lit by the scene
    tint and composited on the background, with the silhouette at A: what a generator that copies
    the reference without turning it would draw."""
    m = np.asarray(data["appearance_mask"], bool)
    rgb = np.where(m[..., None], data["appearance"] * data["tint"][:, None, None, :], data["background"])
    return rgb, m
