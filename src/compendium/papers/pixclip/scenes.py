"""ShapesCaptions: 32x32 scenes of 2-4 objects, exact and box region masks, templated region texts.

Everything here is ours (no package ships region-annotated scenes). Objects sit one per quadrant
(random quadrant set, jittered centre) so that their exact masks never overlap. Each object has a
shape (circle, square, triangle, cross), a colour (6), a size (2) and a texture (solid, striped).

Region text of object r (token ids over :data:`VOCAB`):

- *early* form (default): ``a region : <size> <texture> <colour> <shape> at <quadrant> ;``
  followed, for every other object, by its relation to the region and its description,
  ``<left|right|above|below|across> <size> <colour> <shape> ;`` (15, 20 or 25 tokens for 2, 3 or 4
  objects);
- *late* form (a controlled subset, ``late_fraction`` of the scenes): a scene prefix that is the
  same for every region of the scene (``scene of <n> objects : <shapes of all objects> .`` padded
  with ``.`` to 9 tokens), then ``a region :``, the region's own descriptor and the same relation
  list (24, 29 or 34 tokens): the region's colour and texture are tokens 15 and 14 (1-based),
  after token 8, and the first 9 tokens are shared by every region of the scene.

Every region text therefore has 15-34 tokens (the issue asks 12-40).

The global caption is the concatenation of the objects' descriptors
(``<size> <texture> <colour> <shape> at <quadrant> ;`` each, 14-28 tokens) after a ``scene :`` prefix.
Colour x shape combinations listed in :data:`HELD_OUT` never occur in training scenes and make up
every test object's (colour, shape) with probability 1/2 (see :func:`make_scenes`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SHAPES = ("circle", "square", "triangle", "cross")
COLOURS = ("red", "green", "blue", "yellow", "magenta", "cyan")
RGB = np.array([[1, 0, 0], [0, 1, 0], [0, 0.3, 1], [1, 1, 0], [1, 0, 1], [0, 1, 1]], dtype=np.float32)
SIZES = ("small", "large")
TEXTURES = ("solid", "striped")
QUADRANTS = ("topleft", "topright", "bottomleft", "bottomright")
WORDS = ("[pad]", "a", "region", ":", "at", ";", "scene", "of", "objects", ".", "two", "three", "four",
         "left", "right", "above", "below", "across")
VOCAB = WORDS + SHAPES + COLOURS + SIZES + TEXTURES + QUADRANTS
TOKEN = {w: i for i, w in enumerate(VOCAB)}
PAD = 0
SIDE = 32
MAX_REGION_TOKENS = 34
MAX_GLOBAL_TOKENS = 30
SHORT_TOKENS = 8                        # the "77-token limit" analogue of models (a) and (b)
# held-out colour x shape pairs: one per shape, so every shape and colour is still seen in training
HELD_OUT = ((0, 0), (1, 1), (2, 2), (3, 3))


@dataclass
class Scenes:
    """A batch of scenes. ``N`` scenes, ``R = N * 4`` region slots (``valid`` marks the used ones).

    images (N, 3, 32, 32) float32; exact / box (N, 4, 32, 32) bool; attrs (N, 4, 5) int
    (shape, colour, size, texture, quadrant; -1 where unused); valid (N, 4) bool; late (N,) bool.
    """

    images: np.ndarray
    exact: np.ndarray
    box: np.ndarray
    attrs: np.ndarray
    valid: np.ndarray
    late: np.ndarray


def object_mask(shape: int, size: int, cy: int, cx: int) -> np.ndarray:
    """Exact 32x32 boolean mask of one object centred at (cy, cx); radius 3 (small) or 5 (large)."""
    r = 3 if size == 0 else 5
    yy, xx = np.mgrid[:SIDE, :SIDE]
    dy, dx = yy - cy, xx - cx
    if shape == 0:
        m = dy ** 2 + dx ** 2 <= r ** 2 + 1
    elif shape == 1:
        m = (np.abs(dy) <= r - 1) & (np.abs(dx) <= r - 1)
    elif shape == 2:
        m = (dy >= -r) & (dy <= r) & (np.abs(dx) <= (dy + r) / 2)
    elif shape == 3:
        m = ((np.abs(dy) <= 1) & (np.abs(dx) <= r)) | ((np.abs(dx) <= 1) & (np.abs(dy) <= r))
    else:
        raise ValueError(f"shape index must be in 0..3, got {shape}")
    return m


def mask_to_bbox(mask: np.ndarray) -> tuple[int, int, int, int]:
    """``(y0, x0, y1, x1)`` of a non-empty 2-D mask, half-open (``mask[y0:y1, x0:x1]`` holds it all)."""
    mask = np.asarray(mask, bool)
    if mask.ndim != 2 or not mask.any():
        raise ValueError("mask_to_bbox needs a non-empty 2-D mask")
    ys, xs = np.nonzero(mask)
    return int(ys.min()), int(xs.min()), int(ys.max()) + 1, int(xs.max()) + 1


def box_mask(mask: np.ndarray) -> np.ndarray:
    """The filled bounding box of ``mask`` (same shape, bool)."""
    y0, x0, y1, x1 = mask_to_bbox(mask)
    out = np.zeros_like(mask, dtype=bool)
    out[y0:y1, x0:x1] = True
    return out


def make_scenes(n: int, rng: np.random.Generator, *, split: str = "train", late_fraction: float = 0.5) -> Scenes:
    """``n`` random scenes. ``split="train"`` never uses a :data:`HELD_OUT` (colour, shape) pair;
    ``split="test"`` draws each object's pair from the held-out set with probability 1/2."""
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    held = set(HELD_OUT)
    seen = [(c, s) for s in range(4) for c in range(6) if (c, s) not in held]
    images = np.zeros((n, 3, SIDE, SIDE), np.float32)
    exact = np.zeros((n, 4, SIDE, SIDE), bool)
    box = np.zeros_like(exact)
    attrs = np.full((n, 4, 5), -1, np.int64)
    valid = np.zeros((n, 4), bool)
    stripes = (np.arange(SIDE)[:, None] % 2 == 0) & np.ones((1, SIDE), bool)
    for i in range(n):
        k = int(rng.integers(2, 5))
        quads = np.sort(rng.choice(4, size=k, replace=False))
        for j, q in enumerate(quads):
            if split == "test" and rng.random() < 0.5:
                colour, shape = HELD_OUT[int(rng.integers(len(HELD_OUT)))]
            else:
                colour, shape = seen[int(rng.integers(len(seen)))]
            size, texture = int(rng.integers(2)), int(rng.integers(2))
            cy = 8 + 16 * (q // 2) + int(rng.integers(-2, 3))
            cx = 8 + 16 * (q % 2) + int(rng.integers(-2, 3))
            m = object_mask(shape, size, cy, cx)
            paint = m & stripes if texture == 1 else m
            images[i, :, paint] = RGB[colour]
            exact[i, j], box[i, j] = m, box_mask(m)
            attrs[i, j] = (shape, colour, size, texture, q)
            valid[i, j] = True
    late = rng.random(n) < late_fraction
    return Scenes(images, exact, box, attrs, valid, late)


def _descriptor(a) -> list[str]:
    shape, colour, size, texture, quad = (int(v) for v in a)
    return [SIZES[size], TEXTURES[texture], COLOURS[colour], SHAPES[shape], "at", QUADRANTS[quad], ";"]


def relation(q_region: int, q_other: int) -> str:
    """Where quadrant ``q_other`` lies seen from quadrant ``q_region`` (quadrant = 2 * row + column)."""
    (ry, rx), (oy, ox) = divmod(int(q_region), 2), divmod(int(q_other), 2)
    if ry == oy:
        return "right" if ox > rx else "left"
    if rx == ox:
        return "below" if oy > ry else "above"
    return "across"


def region_words(attrs: np.ndarray, valid: np.ndarray, r: int, late: bool) -> list[str]:
    """Words of the text of region ``r`` of one scene (``attrs (4, 5)``, ``valid (4,)``)."""
    words = ["a", "region", ":"] + _descriptor(attrs[r])
    for j in np.nonzero(valid)[0]:
        if j != r:
            words += [relation(attrs[r, 4], attrs[j, 4]), SIZES[attrs[j, 2]], COLOURS[attrs[j, 1]], SHAPES[attrs[j, 0]], ";"]
    if not late:
        return words
    k = int(valid.sum())
    prefix = ["scene", "of", ("two", "three", "four")[k - 2], "objects", ":"] + [SHAPES[attrs[j, 0]] for j in np.nonzero(valid)[0]]
    prefix += ["."] * (9 - len(prefix))
    return prefix + words


def global_words(attrs: np.ndarray, valid: np.ndarray) -> list[str]:
    words = ["scene", ":"]
    for j in np.nonzero(valid)[0]:
        words += _descriptor(attrs[j])
    return words


def encode(words: list[str], length: int) -> np.ndarray:
    ids = np.full(length, PAD, np.int64)
    toks = [TOKEN[w] for w in words][:length]
    ids[:len(toks)] = toks
    return ids


def region_tokens(s: Scenes, foil: str | None = None, rng: np.random.Generator | None = None) -> np.ndarray:
    """Token ids ``(N, 4, MAX_REGION_TOKENS)`` of every region slot (zeros where unused).

    ``foil="colour"`` / ``"texture"`` replace the region's own colour (by one that no object of the
    scene has) or texture (by the other one): the text then differs from the true one in one token.
    """
    if foil not in (None, "colour", "texture"):
        raise ValueError(f"foil must be None, 'colour' or 'texture', got {foil!r}")
    N = len(s.images)
    out = np.zeros((N, 4, MAX_REGION_TOKENS), np.int64)
    for i in range(N):
        for r in np.nonzero(s.valid[i])[0]:
            a = s.attrs[i].copy()
            if foil == "colour":
                absent = sorted(set(range(6)) - set(a[s.valid[i], 1].tolist()))
                a[r, 1] = absent[int(rng.integers(len(absent)))]
            elif foil == "texture":
                a[r, 3] = 1 - a[r, 3]
            out[i, r] = encode(region_words(a, s.valid[i], int(r), bool(s.late[i])), MAX_REGION_TOKENS)
    return out


def global_tokens(s: Scenes) -> np.ndarray:
    return np.stack([encode(global_words(s.attrs[i], s.valid[i]), MAX_GLOBAL_TOKENS) for i in range(len(s.images))])


def text_spec_violations(s: Scenes, rng: np.random.Generator) -> dict:
    """Counts of regions that break the issue's text specification (every count should be 0).

    ``length``: region texts outside 12-40 tokens; ``late``: in the controlled (late) subset, a
    colour or texture foil that differs from the true text before token 9 (index < 8) or in other
    than one token; ``global``: a region whose own descriptor (the words its text is about) is
    missing from the scene's global caption.
    """
    idx = np.nonzero(s.valid)
    true = region_tokens(s)[idx]
    lengths = (true != PAD).sum(1)
    late = s.late[idx[0]]
    bad_late = 0
    for foil in ("colour", "texture"):
        diff = region_tokens(s, foil, rng)[idx] != true
        first = np.where(diff.any(1), diff.argmax(1), -1)
        bad_late += int(((diff.sum(1) != 1) | (first < 8))[late].sum())
    bad_global = 0
    for i, r in zip(*idx):
        g, d = global_words(s.attrs[i], s.valid[i]), _descriptor(s.attrs[i, r])
        bad_global += not any(g[j:j + len(d)] == d for j in range(len(g) - len(d) + 1))
    return {"length": int(((lengths < 12) | (lengths > 40)).sum()), "late": bad_late, "global": bad_global,
            "regions": len(idx[0]), "late_regions": int(late.sum()), "min_len": int(lengths.min()),
            "max_len": int(lengths.max())}
