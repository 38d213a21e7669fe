"""``LayoutEnv``: a poster canvas, its prompts, drafts, refinement edits, rendering and the reward.

Everything is numpy and vectorised over any leading batch axes (models, prompts, group members):
a layout is an integer array ``(..., S, 4)`` of bins ``(x, y, w, h)`` in ``[0, NUM_BINS)`` over the
``S = 6`` element slots (title, image, text1, text2, text3, logo); a prompt fixes which slots are
present, a visible value per slot (text length for title and text blocks, aspect ratio for the
image) and one *hidden* number per prompt, the typeface factor ``kappa``. A text block's rendered
height is ``kappa * c_slot * length / width``: the drafter does not see ``kappa``, the refiner sees
the rendered heights (``render``), so refinement has something to fix.

The episode structure follows the paper's abstract (a draft, then refinements); the canvas, the
hidden text height, the edits and every reward component are this chapter's reconstruction.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["SLOTS", "NUM_BINS", "CANVAS_HEIGHT", "NUM_OPS", "COMPONENTS", "WEIGHTS", "Prompts", "LayoutEnv",
           "boxes", "render", "reward", "apply_edit", "draft_features", "refine_features", "num_refine_actions"]

SLOTS = ("title", "image", "text1", "text2", "text3", "logo")
NUM_BINS = 16
CANVAS_HEIGHT = 1.4
NUM_OPS = 8                                   # (x, y, w, h) x (-1, +1) bin
TEXT_COEF = np.array([0.08, 0.0, 0.18, 0.18, 0.18, 0.0])      # rendered height = kappa * coef * length / w
IS_TEXT = TEXT_COEF > 0
READING_ORDER = (0, 1, 2, 3, 4)               # title, image, text1..3 top to bottom (the logo is free)
OPTIONAL = (3, 4, 5)                          # text2, text3, logo; title, image and text1 are always there
COMPONENTS = ("overlap", "bounds", "overflow", "alignment", "hierarchy", "whitespace")
WEIGHTS = np.array([0.25, 0.15, 0.25, 0.10, 0.15, 0.10])
ALIGN_TOL = 0.1
TARGET_COVER = 0.6
KAPPA_RANGE = (0.6, 1.6)


@dataclass(frozen=True)
class Prompts:
    """A batch of prompts, arrays with leading shape ``B`` (any shape).

    Attributes
    ----------
    present : bool array (*B, S)
    value : float array (*B, S)
        Text length in [0.3, 1] (title, text), aspect ratio w/h in [0.6, 1.6] (image), 0 (logo).
    kappa : float array (*B,)
        The hidden typeface factor (never an input of the drafter).
    """

    present: np.ndarray
    value: np.ndarray
    kappa: np.ndarray

    def __len__(self):
        return int(self.kappa.shape[0])

    def take(self, index) -> "Prompts":
        return Prompts(self.present[index], self.value[index], self.kappa[index])

    def expand(self, ndim: int) -> "Prompts":
        """Insert axes after the prompt axes so the arrays broadcast against layouts with ``ndim``
        extra leading axes (e.g. a group axis)."""
        p, v, k = self.present, self.value, self.kappa
        for _ in range(ndim):
            p, v, k = p[..., None, :], v[..., None, :], k[..., None]
        return Prompts(p, v, k)


class LayoutEnv:
    """Procedural prompts with a fixed seed (deterministic), and the environment's functions.

    Parameters
    ----------
    min_elements, max_elements : int
        Element count per prompt, drawn uniformly in ``[min_elements, max_elements]`` (3..6).
    seed : int
        Seed of the prompt stream.
    """

    def __init__(self, min_elements: int = 3, max_elements: int = 3, seed: int = 0):
        if not 3 <= min_elements <= max_elements <= len(SLOTS):
            raise ValueError(f"need 3 <= min_elements <= max_elements <= 6, got {min_elements}, {max_elements}")
        self.min_elements, self.max_elements = int(min_elements), int(max_elements)
        self.rng = np.random.default_rng(seed)

    def sample(self, shape) -> Prompts:
        """Prompts with leading shape ``shape`` (an int or a tuple)."""
        shape = (shape,) if np.isscalar(shape) else tuple(shape)
        rng = self.rng
        n = rng.integers(self.min_elements, self.max_elements + 1, size=shape)
        present = np.zeros(shape + (len(SLOTS),), dtype=bool)
        present[..., :3] = True
        order = np.argsort(rng.random(shape + (len(OPTIONAL),)), axis=-1)    # a random subset of optionals
        for j, slot in enumerate(OPTIONAL):
            present[..., slot] = np.argmax(order == j, axis=-1) < (n - 3)
        value = rng.uniform(0.3, 1.0, size=shape + (len(SLOTS),))
        value[..., 1] = rng.uniform(0.6, 1.6, size=shape)
        value[..., 5] = 0.0
        value = np.where(present, value, 0.0)
        kappa = rng.uniform(*KAPPA_RANGE, size=shape)
        return Prompts(present, value, kappa)

    # the interface: thin wrappers of the module functions
    draft = staticmethod(lambda action: np.asarray(action, dtype=np.int64))
    render = staticmethod(lambda prompts, layout: render(prompts, layout))
    refine = staticmethod(lambda prompts, layout, action: apply_edit(prompts, layout, action))
    reward = staticmethod(lambda prompts, layout, components=False: reward(prompts, layout, components=components))


def boxes(layout) -> np.ndarray:
    """Bins ``(..., S, 4)`` -> boxes ``(x, y, w, h)`` on the 1 x 1.4 canvas (y downwards)."""
    b = np.asarray(layout)
    if b.shape[-2:] != (len(SLOTS), 4):
        raise ValueError(f"a layout has shape (..., {len(SLOTS)}, 4), got {b.shape}")
    x = b[..., 0] / NUM_BINS
    y = b[..., 1] / NUM_BINS * CANVAS_HEIGHT
    w = (b[..., 2] + 1) / NUM_BINS
    h = (b[..., 3] + 1) / NUM_BINS * CANVAS_HEIGHT
    return np.stack([x, y, w, h], axis=-1)


def render(prompts: Prompts, layout) -> dict:
    """What the renderer shows: each element's occupied box (text grows below its box when it
    overflows) and the rendered text heights (the only place ``kappa`` enters).

    Returns
    -------
    dict with ``box`` (..., S, 4), ``need`` (..., S) rendered text height (0 for image and logo),
    ``occupied`` (..., S, 4) the box with height ``max(h, need)``.
    """
    box = boxes(layout)
    need = prompts.kappa[..., None] * TEXT_COEF * prompts.value / box[..., 2]
    need = np.where(prompts.present & IS_TEXT, need, 0.0)
    occupied = box.copy()
    occupied[..., 3] = np.maximum(box[..., 3], need)
    return {"box": box, "need": need, "occupied": occupied}


def reward(prompts: Prompts, layout, components: bool = False):
    """The layout's quality ``R`` in [0, 1]: a weighted sum of six components, each in [0, 1].

    overlap     1 - mean over present pairs of intersection / smaller area (occupied boxes)
    bounds      mean share of each occupied box inside the canvas
    overflow    mean over text elements of min(h, need) / max(h, need): 1 when the box fits the
                rendered text exactly; overflowing and half-empty boxes both lose
    alignment   mean over elements of max(0, 1 - d / 0.1), d the distance to the nearest other
                element's left edge or centre
    hierarchy   share of consecutive reading-order pairs (title, image, text1..3) whose tops are in order
    whitespace  1 - |covered share - 0.6| / 0.6, clipped at 0 (sum of in-canvas occupied areas)

    Returns
    -------
    R : array (...,), and with ``components=True`` also a dict of the components (each (...,)).
    """
    r = render(prompts, layout)
    occ, need, box = r["occupied"], r["need"], r["box"]
    present = prompts.present
    x0, y0, w, hh = occ[..., 0], occ[..., 1], occ[..., 2], occ[..., 3]
    x1, y1 = x0 + w, y0 + hh
    area = w * hh
    # overlap over pairs i < j
    iw = np.clip(np.minimum(x1[..., :, None], x1[..., None, :]) - np.maximum(x0[..., :, None], x0[..., None, :]), 0, None)
    ih = np.clip(np.minimum(y1[..., :, None], y1[..., None, :]) - np.maximum(y0[..., :, None], y0[..., None, :]), 0, None)
    smaller = np.minimum(area[..., :, None], area[..., None, :])
    s = len(SLOTS)
    upper = np.triu(np.ones((s, s), dtype=bool), 1)
    pairs = present[..., :, None] & present[..., None, :] & upper
    frac = np.minimum(iw * ih / smaller, 1.0)
    overlap = 1.0 - _masked_mean(frac, pairs, axes=(-2, -1))
    inside = np.clip(np.minimum(x1, 1.0) - x0, 0, None) * np.clip(np.minimum(y1, CANVAS_HEIGHT) - y0, 0, None)
    bounds = _masked_mean(np.minimum(inside / area, 1.0), present, axes=(-1,))
    h = box[..., 3]
    fit = np.minimum(h, need) / np.maximum(np.maximum(h, need), 1e-12)
    overflow = _masked_mean(fit, present & IS_TEXT, axes=(-1,))
    cx = x0 + w / 2
    d = np.minimum(np.abs(x0[..., :, None] - x0[..., None, :]), np.abs(cx[..., :, None] - cx[..., None, :]))
    others = present[..., :, None] & present[..., None, :] & ~np.eye(s, dtype=bool)
    d = np.where(others, d, np.inf).min(axis=-1)
    alignment = _masked_mean(np.clip(1.0 - d / ALIGN_TOL, 0.0, 1.0), present, axes=(-1,))
    lead = np.broadcast_shapes(present.shape[:-1], y0.shape[:-1])
    order_ok, order_n = np.zeros(lead), np.zeros(lead)
    # consecutive present elements in reading order: compare each with the previous present one
    prev_top = np.full(lead, np.nan)
    for slot in READING_ORDER:
        here = present[..., slot]
        has_prev = here & ~np.isnan(prev_top)
        order_ok += has_prev & (y0[..., slot] > np.nan_to_num(prev_top, nan=np.inf))
        order_n += has_prev
        prev_top = np.where(here, y0[..., slot], prev_top)
    hierarchy = np.where(order_n > 0, order_ok / np.maximum(order_n, 1), 1.0)
    cover = (np.where(present, inside, 0.0)).sum(axis=-1) / CANVAS_HEIGHT
    whitespace = np.clip(1.0 - np.abs(cover - TARGET_COVER) / TARGET_COVER, 0.0, 1.0)
    parts = dict(overlap=overlap, bounds=bounds, overflow=overflow, alignment=alignment,
                 hierarchy=hierarchy, whitespace=whitespace)
    total = sum(wt * parts[name] for wt, name in zip(WEIGHTS, COMPONENTS))
    return (total, parts) if components else total


def _masked_mean(values, mask, axes):
    n = mask.sum(axis=axes)
    total = np.where(mask, values, 0.0).sum(axis=axes)
    return np.where(n > 0, total / np.maximum(n, 1), 1.0)


def num_refine_actions() -> int:
    """Refinement actions: (element, op) for 6 slots x 8 ops, plus one no-op (the last index)."""
    return len(SLOTS) * NUM_OPS + 1


def apply_edit(prompts: Prompts, layout, action):
    """One refinement edit: ``action = element * 8 + op`` moves or resizes one coordinate of one
    element by one bin (op = 2 * coordinate + (0: -1, 1: +1)), clipped to the bins; the last index
    and edits of absent elements are no-ops.

    Parameters
    ----------
    layout : int array (..., S, 4)
    action : int array (...)

    Returns
    -------
    new layout (..., S, 4) and ``delta`` = R(new) - R(old) (...).
    """
    layout = np.asarray(layout)
    a = np.asarray(action)
    noop = a >= len(SLOTS) * NUM_OPS
    elem = np.where(noop, 0, a // NUM_OPS)
    op = np.where(noop, 0, a % NUM_OPS)
    coord, sign = op // 2, np.where(op % 2 == 0, -1, 1)
    live = ~noop & np.take_along_axis(np.broadcast_to(prompts.present, layout.shape[:-1]), elem[..., None], -1)[..., 0]
    onehot = (np.arange(len(SLOTS)) == elem[..., None])[..., None] & (np.arange(4) == coord[..., None])[..., None, :]
    step = np.where(onehot & live[..., None, None], sign[..., None, None], 0)
    new = np.clip(layout + step, 0, NUM_BINS - 1)
    return new, reward(prompts, new) - reward(prompts, layout)


def draft_features(prompts: Prompts) -> np.ndarray:
    """The drafter's input (..., 2 S): presence and visible value of each slot (no kappa)."""
    return np.concatenate([prompts.present.astype(float), prompts.value], axis=-1)


def refine_features(prompts: Prompts, layout, step_fraction) -> np.ndarray:
    """The refiner's input (..., 8 S + 1): the drafter's input, the layout's bins (scaled to
    [0, 1]), the rendered text heights and their overflow beyond the box, and ``k / K``."""
    r = render(prompts, layout)
    pres = prompts.present.astype(float)
    bins = np.asarray(layout) / (NUM_BINS - 1) * pres[..., None]
    need = r["need"] / CANVAS_HEIGHT
    over = (r["need"] - r["box"][..., 3]) / CANVAS_HEIGHT * (prompts.present & IS_TEXT)
    lead = bins.shape[:-2]
    frac = np.broadcast_to(np.asarray(step_fraction, dtype=float), lead)[..., None]
    parts = [np.broadcast_to(pres, lead + pres.shape[-1:]), np.broadcast_to(prompts.value, lead + pres.shape[-1:]),
             bins.reshape(lead + (-1,)), need, over, frac]
    return np.concatenate(parts, axis=-1)
