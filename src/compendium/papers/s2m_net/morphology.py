"""MASL as inferred from the abstract: morphology descriptors, five losses, softmax weights with a floor.

Descriptors of a ground-truth mask (``descriptors``, scikit-image and numpy):

- compactness :math:`4\\pi A / P^2` (``skimage.measure.perimeter``; 1 for a disc),
- tubularity :math:`|\\mathrm{skel}(M)| / A` (``skimage.morphology.skeletonize``; 1 for a 1-px line),
- irregularity :math:`1 - A / A_{hull}` (``convex_hull_image``; 0 for a convex shape),
- scale :math:`A / (HW)`.

Losses, each per sample (shape (B,)): soft Dice, BCE, focal (gamma 2), the boundary loss of
Kervadec et al. written as :math:`\\mathrm{mean}((p - g)\\,\\phi_g) \\ge 0` with :math:`\\phi_g`
the signed distance (negative inside), and soft-clDice (Shit et al.) on the soft skeleton by
iterated min/max pooling.

Weights: :math:`w = w_{min} + (1 - 5 w_{min})\\,\\mathrm{softmax}(\\theta + \\Phi \\tilde m)`, with
:math:`\\tilde m` the descriptors standardised by training-set means and standard deviations,
:math:`\\theta = 0` and :math:`\\Phi` a morphology prior at initialisation (compactness -> Dice,
scale -> BCE, small scale -> focal, irregularity -> boundary, tubularity -> clDice), both trained
with the network. Each loss is divided by its running mean (detached), so the weights compare
losses of equal scale.
"""

from __future__ import annotations

import numpy as np
import scipy.ndimage as ndi
import torch
import torch.nn.functional as F
from skimage.measure import perimeter
from skimage.morphology import convex_hull_image, skeletonize
from torch import nn

__all__ = ["DESCRIPTORS", "LOSSES", "descriptors", "dice_loss", "bce_loss", "focal_loss", "boundary_loss",
           "soft_skeleton", "soft_cldice_loss", "loss_terms", "MASL", "morphology_prior", "dice_score",
           "cldice_score", "betti0_error", "boundary_pixels", "hd95",
           "multiclass_loss", "multiclass_dice_scores"]

DESCRIPTORS = ("compactness", "tubularity", "irregularity", "scale")
LOSSES = ("dice", "bce", "focal", "boundary", "cldice")


def descriptors(mask) -> np.ndarray:
    """(compactness, tubularity, irregularity, scale) of a 2-D mask; zeros for an empty mask."""
    m = np.asarray(mask, bool)
    if m.ndim != 2:
        raise ValueError(f"descriptors need a 2-D mask, got shape {m.shape}")
    area = float(m.sum())
    if area == 0:
        return np.zeros(4)
    per = float(perimeter(m, neighborhood=4))
    compactness = 4 * np.pi * area / per**2 if per > 0 else 1.0
    tubularity = float(skeletonize(m).sum()) / area
    irregularity = 1.0 - area / float(convex_hull_image(m).sum())
    return np.array([compactness, tubularity, irregularity, area / m.size])


# ------------------------------------------------------------------ losses, per sample (B,)
def _sum(t):
    return t.flatten(1).sum(1)


def dice_loss(logits, target, eps: float = 1.0):
    p = torch.sigmoid(logits)
    return 1 - (2 * _sum(p * target) + eps) / (_sum(p) + _sum(target) + eps)


def bce_loss(logits, target):
    return F.binary_cross_entropy_with_logits(logits, target, reduction="none").flatten(1).mean(1)


def focal_loss(logits, target, gamma: float = 2.0):
    bce = F.binary_cross_entropy_with_logits(logits, target, reduction="none")
    p_t = torch.exp(-bce)                                          # probability of the true class
    return ((1 - p_t) ** gamma * bce).flatten(1).mean(1)


def boundary_loss(logits, target, sdf):
    """``mean((p - g) * sdf)``: every term is >= 0 (sdf < 0 where g = 1), zero iff p = g off the boundary."""
    return ((torch.sigmoid(logits) - target) * sdf).flatten(1).mean(1)


def _soft_erode(x):
    return torch.minimum(-F.max_pool2d(-x, (3, 1), 1, (1, 0)), -F.max_pool2d(-x, (1, 3), 1, (0, 1)))


def _soft_dilate(x):
    return F.max_pool2d(x, 3, 1, 1)


def soft_skeleton(x, iterations: int = 5):
    """Soft morphological skeleton: accumulate ``relu(x - open(x))`` over ``iterations`` erosions."""
    skel = F.relu(x - _soft_dilate(_soft_erode(x)))
    for _ in range(iterations):
        x = _soft_erode(x)
        delta = F.relu(x - _soft_dilate(_soft_erode(x)))
        skel = skel + F.relu(delta - skel * delta)
    return skel


def soft_cldice_loss(logits, target, iterations: int = 5, eps: float = 1e-6):
    """``1 - 2 Tprec Tsens / (Tprec + Tsens)`` with soft skeletons of prediction and target."""
    p = torch.sigmoid(logits)
    sp, st = soft_skeleton(p, iterations), soft_skeleton(target, iterations)
    tprec = (_sum(sp * target) + eps) / (_sum(sp) + eps)
    tsens = (_sum(st * p) + eps) / (_sum(st) + eps)
    return 1 - 2 * tprec * tsens / (tprec + tsens)


def loss_terms(logits, target, sdf):
    """The five losses, stacked (B, 5) in :data:`LOSSES` order."""
    return torch.stack([dice_loss(logits, target), bce_loss(logits, target), focal_loss(logits, target),
                        boundary_loss(logits, target, sdf), soft_cldice_loss(logits, target)], 1)


def morphology_prior(strength: float = 1.0) -> torch.Tensor:
    """Phi at initialisation, (5 losses, 4 descriptors)."""
    phi = torch.zeros(len(LOSSES), len(DESCRIPTORS))
    phi[0, 0] = phi[1, 3] = phi[3, 2] = phi[4, 1] = strength
    phi[2, 3] = -strength
    return phi


class MASL(nn.Module):
    """Morphology-aware adaptive loss (inferred form, see the module docstring).

    Parameters
    ----------
    mean, std : array_like, shape (4,)
        Descriptor standardisation (training-set statistics).
    floor : float
        w_min, each weight's lower bound, at most 1/5 (1/5 gives the fixed equal-weight sum).
    prior_strength : float
        Scale of the initial Phi; 0 starts from uniform weights.
    momentum : float
        Of the running means that normalise each loss.
    """

    def __init__(self, mean, std, floor: float = 0.05, prior_strength: float = 1.0, momentum: float = 0.95):
        super().__init__()
        if not 0 <= floor <= 1 / len(LOSSES):
            raise ValueError(f"floor must lie in [0, {1 / len(LOSSES)}], got {floor}")
        self.floor, self.momentum = float(floor), float(momentum)
        self.theta = nn.Parameter(torch.zeros(len(LOSSES)))
        self.phi = nn.Parameter(morphology_prior(prior_strength))
        self.register_buffer("mean", torch.as_tensor(np.asarray(mean), dtype=torch.float32))
        self.register_buffer("std", torch.as_tensor(np.maximum(np.asarray(std), 1e-6), dtype=torch.float32))
        self.register_buffer("scale", torch.ones(len(LOSSES)))
        self.register_buffer("seen", torch.zeros((), dtype=torch.bool))

    def weights(self, m: torch.Tensor) -> torch.Tensor:
        """(B, 4) raw descriptors -> (B, 5) weights on the simplex, each >= floor."""
        z = (m - self.mean) / self.std
        soft = torch.softmax(self.theta + z @ self.phi.T, dim=-1)
        return self.floor + (1 - len(LOSSES) * self.floor) * soft

    def normalise(self, terms: torch.Tensor) -> torch.Tensor:
        """Divide each loss by its running mean (updated in training mode; detached)."""
        if self.training:
            batch = terms.detach().mean(0).clamp_min(1e-6)
            self.scale.copy_(torch.where(self.seen, self.momentum * self.scale + (1 - self.momentum) * batch, batch))
            self.seen.fill_(True)
        return terms / self.scale

    def forward(self, terms: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
        return (self.weights(m) * self.normalise(terms)).sum(1).mean()


# ------------------------------------------------------------------ metrics on hard masks (numpy)
def dice_score(pred, target) -> float:
    """Hard Dice; 1 when both masks are empty."""
    p, g = np.asarray(pred, bool), np.asarray(target, bool)
    s = p.sum() + g.sum()
    return 1.0 if s == 0 else float(2 * (p & g).sum() / s)


def cldice_score(pred, target) -> float:
    """Centreline Dice (Shit et al.): harmonic mean of topology precision and sensitivity on skeletons."""
    p, g = np.asarray(pred, bool), np.asarray(target, bool)
    sp, sg = skeletonize(p), skeletonize(g)
    if sp.sum() == 0 or sg.sum() == 0:
        return float(sp.sum() == sg.sum())
    tprec, tsens = (sp & g).sum() / sp.sum(), (sg & p).sum() / sg.sum()
    return 0.0 if tprec + tsens == 0 else float(2 * tprec * tsens / (tprec + tsens))


def betti0_error(pred, target) -> int:
    """|number of 8-connected components of pred - that of target|."""
    eight = np.ones((3, 3), int)
    return abs(int(ndi.label(np.asarray(pred, bool), eight)[1]) - int(ndi.label(np.asarray(target, bool), eight)[1]))


def boundary_pixels(mask) -> np.ndarray:
    """The mask's pixels with a 4-neighbour outside it (the image edge counts as outside)."""
    m = np.asarray(mask, bool)
    return m & ~ndi.binary_erosion(m, structure=ndi.generate_binary_structure(2, 1), border_value=0)


def hd95(pred, target) -> float:
    """95th-percentile symmetric Hausdorff distance (pixels) between the boundaries of two masks:
    the larger of the two directed 95th percentiles of boundary-to-boundary Euclidean distances
    (each from ``scipy.ndimage.distance_transform_edt``). 0 when both masks are empty; the image
    diagonal when exactly one is (the largest distance the image allows)."""
    p, g = np.asarray(pred, bool), np.asarray(target, bool)
    bp, bg = boundary_pixels(p), boundary_pixels(g)
    if not bp.any() and not bg.any():
        return 0.0
    if not bp.any() or not bg.any():
        return float(np.hypot(*p.shape))
    to_g = ndi.distance_transform_edt(~bg)[bp]      # distance of each pred boundary pixel to g's boundary
    to_p = ndi.distance_transform_edt(~bp)[bg]
    return float(max(np.percentile(to_g, 95), np.percentile(to_p, 95)))


def multiclass_loss(logits, labels, eps: float = 1.0, class_weight=None):
    """Per sample (B,): cross-entropy (weighted per class by ``class_weight`` (C,), if given) plus
    the mean soft Dice loss of the foreground classes (logits (B, C, H, W), labels (B, H, W))."""
    ce = F.cross_entropy(logits, labels, weight=class_weight, reduction="none").flatten(1).mean(1)
    p = torch.softmax(logits, 1)[:, 1:]
    onehot = F.one_hot(labels, logits.shape[1]).permute(0, 3, 1, 2)[:, 1:].to(p.dtype)
    inter, total = (p * onehot).flatten(2).sum(-1), (p + onehot).flatten(2).sum(-1)
    return ce + (1 - (2 * inter + eps) / (total + eps)).mean(1)


def multiclass_dice_scores(pred, labels, classes: int) -> np.ndarray:
    """Hard Dice of each foreground class 1..classes-1 (1 where a class is absent from both)."""
    p, g = np.asarray(pred), np.asarray(labels)
    return np.array([dice_score(p == c, g == c) for c in range(1, classes)])
