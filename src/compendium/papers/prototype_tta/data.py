"""Digit canvases, number prompts and the shifted target domains.

A canvas holds three 8x8 digit slots side by side, ``(8, 24)``, values in ``[0, 1]``. A class is a
right-aligned number written as three tokens (``0``-``9`` or :data:`BLANK`): one-digit classes
``__d`` (10), two-digit ``_ab`` (100) and three-digit ``abc`` (1000), 1110 prompts in all. The
clean source domain draws each slot from sklearn's handwritten digits; the target domains corrupt
the canvas or change how digits are rendered (seven-segment digits drawn here).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from scipy import ndimage

SLOT = 8
NUM_SLOTS = 3
BLANK = 10
VOCAB = 11
TARGET_DOMAINS = ("noise", "blur", "contrast", "invert", "rotate", "segments")
VALIDATION_DOMAIN = "translate"
DOMAINS = ("clean", VALIDATION_DOMAIN) + TARGET_DOMAINS

# Severities, fixed before any adaptation method was run.
NOISE_STD = 0.3
BLUR_SIGMA = 0.9
CONTRAST_FACTOR = 0.3
ROTATION_DEGREES = (15.0, 30.0)

# Which of the seven segments (a top, b upper right, c lower right, d bottom, e lower left,
# f upper left, g middle) each digit lights.
SEGMENTS = {0: "abcdef", 1: "bc", 2: "abged", 3: "abgcd", 4: "fgbc", 5: "afgcd", 6: "afgedc",
            7: "abc", 8: "abcdefg", 9: "abcdfg"}


@lru_cache(maxsize=1)
def load_digit_images() -> tuple[np.ndarray, np.ndarray]:
    """sklearn's 1797 handwritten digits as ``(images (n, 8, 8) in [0, 1], labels (n,))``.

    Loaded through :func:`compendium.data.load`, which checks them against ``data/manifest.yaml``
    (and reads sklearn's CSV directly: importing sklearn takes seconds).
    """
    from compendium.data import load as load_dataset

    digits = load_dataset("digits")
    pixels, target = digits.data, digits.target
    if pixels.shape != (1797, 64):
        raise ValueError(f"unexpected digits table of shape {pixels.shape}")
    return (pixels.reshape(-1, 8, 8) / 16.0).astype(np.float64), target.astype(np.int64)


def split_indices(labels: np.ndarray, rng: np.random.Generator, val_per_class: int = 20,
                  test_per_class: int = 50) -> dict[str, np.ndarray]:
    """A stratified train/validation/test split of digit indices (sorted within each part)."""
    parts = {"train": [], "val": [], "test": []}
    for digit in range(10):
        idx = rng.permutation(np.flatnonzero(labels == digit))
        if idx.size <= val_per_class + test_per_class:
            raise ValueError(f"digit {digit} has only {idx.size} images")
        parts["val"].append(idx[:val_per_class])
        parts["test"].append(idx[val_per_class:val_per_class + test_per_class])
        parts["train"].append(idx[val_per_class + test_per_class:])
    return {k: np.sort(np.concatenate(v)) for k, v in parts.items()}


def all_prompts() -> np.ndarray:
    """The 1110 class prompts as tokens ``(1110, 3)``: 10 one-digit, 100 two-digit, 1000 three-digit."""
    rows = [(BLANK, BLANK, d) for d in range(10)]
    rows += [(BLANK, a, b) for a in range(10) for b in range(10)]
    rows += [(a, b, c) for a in range(10) for b in range(10) for c in range(10)]
    return np.array(rows, dtype=np.int64)


def single_digit_prompts() -> np.ndarray:
    """Tokens ``(10, 3)`` of the one-digit classes ``__0`` ... ``__9``."""
    return all_prompts()[:10]


def three_digit_prompts(numbers) -> np.ndarray:
    """Tokens ``(len(numbers), 3)`` of three-digit classes, e.g. ``[7, 342] -> [[0,0,7],[3,4,2]]``."""
    numbers = np.asarray(numbers, dtype=np.int64)
    if numbers.ndim != 1 or numbers.min(initial=0) < 0 or numbers.max(initial=0) > 999:
        raise ValueError("three-digit classes are integers in [0, 999]")
    return np.stack([numbers // 100, numbers // 10 % 10, numbers % 10], axis=1)


def compose_canvases(tokens: np.ndarray, images: np.ndarray, labels: np.ndarray,
                     rng: np.random.Generator) -> np.ndarray:
    """Canvases ``(n, 8, 24)`` for prompt tokens ``(n, 3)``, each digit slot drawn from ``images``."""
    tokens = np.asarray(tokens)
    by_digit = [np.flatnonzero(labels == d) for d in range(10)]
    canvas = np.zeros((tokens.shape[0], SLOT, SLOT * NUM_SLOTS))
    for slot in range(NUM_SLOTS):
        for digit in range(10):
            rows = np.flatnonzero(tokens[:, slot] == digit)
            if rows.size:
                pick = by_digit[digit][rng.integers(0, by_digit[digit].size, rows.size)]
                canvas[rows, :, slot * SLOT:(slot + 1) * SLOT] = images[pick]
    return canvas


def single_digit_canvases(images: np.ndarray) -> np.ndarray:
    """Right-aligned one-digit canvases ``(n, 8, 24)`` from digit images ``(n, 8, 8)``."""
    canvas = np.zeros((images.shape[0], SLOT, SLOT * NUM_SLOTS))
    canvas[:, :, -SLOT:] = images
    return canvas


def segment_digit(digit: int, rng: np.random.Generator) -> np.ndarray:
    """A seven-segment digit drawn on a 32x32 bitmap and 4x4 block-counted to ``(8, 8)`` in [0, 1].

    This is how sklearn's digits were made from handwriting, so only the rendering style changes.
    Box, stroke width and slant are jittered per call.
    """
    left, right = rng.integers(6, 10), rng.integers(22, 27)
    top, bottom = rng.integers(2, 6), rng.integers(27, 31)
    width = int(rng.integers(3, 6))
    slant = rng.uniform(0.0, 0.15)
    mid = (top + bottom) // 2
    bitmap = np.zeros((32, 32), dtype=bool)
    half = width // 2
    spans = {  # (row0, row1, col0, col1), before slant
        "a": (top, top + width, left, right), "g": (mid - half, mid - half + width, left, right),
        "d": (bottom - width, bottom, left, right),
        "f": (top, mid + half, left, left + width), "b": (top, mid + half, right - width, right),
        "e": (mid - half, bottom, left, left + width), "c": (mid - half, bottom, right - width, right),
    }
    for seg in SEGMENTS[int(digit)]:
        r0, r1, c0, c1 = spans[seg]
        for r in range(max(r0, 0), min(r1, 32)):
            shift = int(round(slant * (mid - r)))
            bitmap[r, max(c0 + shift, 0):min(c1 + shift, 32)] = True
    return bitmap.reshape(8, 4, 8, 4).sum(axis=(1, 3)) / 16.0


def segment_canvases(tokens: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Canvases ``(n, 8, 24)`` whose digits are seven-segment renderings (the held-out style)."""
    tokens = np.asarray(tokens)
    canvas = np.zeros((tokens.shape[0], SLOT, SLOT * NUM_SLOTS))
    for i, row in enumerate(tokens):
        for slot, tok in enumerate(row):
            if tok != BLANK:
                canvas[i, :, slot * SLOT:(slot + 1) * SLOT] = segment_digit(int(tok), rng)
    return canvas


def _per_slot(canvas: np.ndarray, tokens: np.ndarray, fn) -> np.ndarray:
    out = canvas.copy()
    for i in range(canvas.shape[0]):
        for slot in range(NUM_SLOTS):
            if tokens[i, slot] != BLANK:
                cols = slice(slot * SLOT, (slot + 1) * SLOT)
                out[i, :, cols] = fn(canvas[i, :, cols])
    return out


def corrupt(canvas: np.ndarray, tokens: np.ndarray, domain: str, rng: np.random.Generator) -> np.ndarray:
    """Apply the corruption of ``domain`` to canvases ``(n, 8, 24)``; returns a new array in [0, 1].

    ``segments`` is a rendering style, not a corruption: build those canvases with
    :func:`segment_canvases` (this function returns them unchanged).
    """
    if domain not in DOMAINS:
        raise ValueError(f"unknown domain {domain!r}; allowed: {', '.join(DOMAINS)}")
    x = np.asarray(canvas, dtype=np.float64)
    if domain in ("clean", "segments"):
        return x.copy()
    if domain == "noise":
        return np.clip(x + NOISE_STD * rng.standard_normal(x.shape), 0.0, 1.0)
    if domain == "blur":
        return np.clip(ndimage.gaussian_filter(x, sigma=(0, BLUR_SIGMA, BLUR_SIGMA), mode="constant"), 0.0, 1.0)
    if domain == "contrast":
        mean = x.mean(axis=(1, 2), keepdims=True)
        return mean + CONTRAST_FACTOR * (x - mean)
    if domain == "invert":
        return 1.0 - x
    if domain == "rotate":
        def rotate(slot):
            angle = rng.uniform(*ROTATION_DEGREES) * rng.choice((-1.0, 1.0))
            return np.clip(ndimage.rotate(slot, angle, reshape=False, order=1, mode="constant"), 0.0, 1.0)
        return _per_slot(x, tokens, rotate)
    # translate (the validation domain): each digit moves one pixel in a random direction
    moves = [(dy, dx) for dy in (-1, 0, 1) for dx in (-1, 0, 1) if (dy, dx) != (0, 0)]

    def translate(slot):
        dy, dx = moves[rng.integers(len(moves))]
        return ndimage.shift(slot, (dy, dx), order=0, mode="constant")
    return _per_slot(x, tokens, translate)


def domain_canvases(domain: str, tokens: np.ndarray, images: np.ndarray, labels: np.ndarray,
                    rng: np.random.Generator) -> np.ndarray:
    """Canvases of ``domain`` for class tokens ``(n, 3)``, digits drawn from ``images``/``labels``."""
    if domain == "segments":
        return segment_canvases(tokens, rng)
    return corrupt(compose_canvases(tokens, images, labels, rng), tokens, domain, rng)
