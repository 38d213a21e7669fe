"""GroundedShapesVQA: 24x24 scenes of six coloured shapes on a 3x3 grid, with a tinted background.

Each scene places six objects in six of the nine 8x8 cells. The six shapes and the six colours are
each used once (two random permutations), so "what colour is the <shape>?" has one answer and no
colour repeats. Every shape covers exactly 16 pixels, so the objects add the same amount of every
colour to the image whatever the assignment: the global colour mean carries the background tint and
nothing else. The tint equals the answer with probability ``cue`` (0.85 in training, 1/6 at test,
where it is independent of the answer) and is otherwise one of the five other colours.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["CELL", "GRID", "SIDE", "NUM_CELLS", "NUM_SHAPES", "NUM_COLOURS", "SHAPE_NAMES", "COLOUR_NAMES",
           "PALETTE", "SHAPE_MASKS", "Scenes", "make_scenes", "render", "cell_crops", "mask_cells", "cell_box",
           "box_iou", "TEST_CUE"]

CELL, GRID = 8, 3
SIDE = CELL * GRID                      # 24
NUM_CELLS = GRID * GRID                 # 9
NUM_SHAPES = NUM_COLOURS = 6
TEST_CUE = 1.0 / NUM_COLOURS
SHAPE_NAMES = ("square", "ring", "cross", "diagonal", "T", "L")
COLOUR_NAMES = ("red", "green", "blue", "yellow", "magenta", "cyan")
PALETTE = np.array([[1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 1, 0], [1, 0, 1], [0, 1, 1]], dtype=np.float32)
TINT = 0.3                              # background intensity of the tint colour
NOISE = 0.05                            # pixel noise standard deviation


def _shape_masks() -> np.ndarray:
    """Six 8x8 masks of exactly 16 pixels each (a 6x6 glyph at offset 1), plus an empty 7th."""
    g = np.zeros((NUM_SHAPES + 1, 6, 6), dtype=bool)
    g[0, 1:5, 1:5] = True                                            # square 4x4
    g[1, 0:5, 0:5] = True
    g[1, 1:4, 1:4] = False                                           # ring: 5x5 border
    g[2, :, 2:4] = True
    g[2, 2:4, 1] = g[2, 2:4, 4] = True                               # cross
    i = np.arange(6)
    g[3, i, i] = True
    g[3, i[:-1], i[:-1] + 1] = g[3, i[:-1] + 1, i[:-1]] = True       # thick diagonal
    g[4, 0:2, :] = True
    g[4, 2:4, 2:4] = True                                            # T
    g[5, :, 0:2] = True
    g[5, 4:6, 2:4] = True                                            # L
    out = np.zeros((NUM_SHAPES + 1, CELL, CELL), dtype=bool)
    out[:, 1:7, 1:7] = g
    return out


SHAPE_MASKS = _shape_masks()


@dataclass(frozen=True)
class Scenes:
    """A batch of questions about scenes.

    Attributes
    ----------
    cell_shape, cell_colour : numpy.ndarray, shape (n, 9), int
        Shape and colour of the object in each cell, -1 where the cell is empty.
    question : numpy.ndarray, shape (n,)
        The asked shape.
    answer : numpy.ndarray, shape (n,)
        Its colour (the target label y*).
    target : numpy.ndarray, shape (n,)
        The cell that holds the asked shape (the ground-truth evidence).
    tint : numpy.ndarray, shape (n,)
        The background colour.
    images : numpy.ndarray, shape (n, 3, 24, 24), float32
    """

    cell_shape: np.ndarray
    cell_colour: np.ndarray
    question: np.ndarray
    answer: np.ndarray
    target: np.ndarray
    tint: np.ndarray
    images: np.ndarray

    def __len__(self) -> int:
        return len(self.question)


def _layouts(n: int, rng: np.random.Generator):
    cells = rng.permuted(np.tile(np.arange(NUM_CELLS), (n, 1)), axis=1)[:, :NUM_SHAPES]   # occupied cells
    shapes = rng.permuted(np.tile(np.arange(NUM_SHAPES), (n, 1)), axis=1)
    colours = rng.permuted(np.tile(np.arange(NUM_COLOURS), (n, 1)), axis=1)
    cell_shape = np.full((n, NUM_CELLS), -1)
    cell_colour = np.full((n, NUM_CELLS), -1)
    rows = np.arange(n)[:, None]
    cell_shape[rows, cells] = shapes
    cell_colour[rows, cells] = colours
    question = rng.integers(0, NUM_SHAPES, n)
    target = np.argmax(cell_shape == question[:, None], axis=1)
    answer = cell_colour[np.arange(n), target]
    return cell_shape, cell_colour, question, answer, target


def draw_tints(answer: np.ndarray, cue: float, rng: np.random.Generator) -> np.ndarray:
    """The tint equals the answer with probability ``cue``, else one of the other five uniformly."""
    if not 0.0 <= cue <= 1.0:
        raise ValueError(f"cue must lie in [0, 1], got {cue!r}")
    same = rng.random(len(answer)) < cue
    other = (answer + rng.integers(1, NUM_COLOURS, len(answer))) % NUM_COLOURS
    return np.where(same, answer, other)


def render(cell_shape: np.ndarray, cell_colour: np.ndarray, tint: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Images (n, 3, 24, 24): tint at intensity 0.3 behind full-intensity objects, plus pixel noise."""
    n = len(tint)
    masks = SHAPE_MASKS[np.where(cell_shape < 0, NUM_SHAPES, cell_shape)]            # (n, 9, 8, 8)
    colour = PALETTE[np.where(cell_colour < 0, 0, cell_colour)]                       # (n, 9, 3)
    back = (TINT * PALETTE[tint])[:, None, :, None, None]                             # (n, 1, 3, 1, 1)
    cells = np.where(masks[:, :, None], colour[:, :, :, None, None], back)            # (n, 9, 3, 8, 8)
    img = cells.reshape(n, GRID, GRID, 3, CELL, CELL).transpose(0, 3, 1, 4, 2, 5).reshape(n, 3, SIDE, SIDE)
    img = img + NOISE * rng.standard_normal(img.shape)
    return img.astype(np.float32)


def make_scenes(n: int, cue: float, rng: np.random.Generator, *, cues: tuple = ()) -> Scenes | tuple:
    """``n`` questions with tint cue ``cue``; with ``cues`` also the same layouts at each further cue.

    The layouts, questions and pixel noise are drawn once, so scenes at two cue levels differ only
    in the tint (paired data for the no-cue control).
    """
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"n must be a positive integer, got {n!r}")
    cell_shape, cell_colour, question, answer, target = _layouts(int(n), rng)
    out = []
    for c in (cue, *cues):
        tint = draw_tints(answer, c, rng)
        noise_rng = np.random.default_rng(rng.integers(2**63))
        out.append(Scenes(cell_shape, cell_colour, question, answer, target, tint,
                          render(cell_shape, cell_colour, tint, noise_rng)))
    return out[0] if not cues else tuple(out)


def cell_crops(images) -> "np.ndarray":
    """The nine 8x8 cells of each image: (..., 3, 24, 24) -> (..., 9, 3, 8, 8) (numpy or torch)."""
    lead = images.shape[:-3]
    x = images.reshape(*lead, 3, GRID, CELL, GRID, CELL)
    k = len(lead)
    x = x.permute(*range(k), k + 1, k + 3, k, k + 2, k + 4) if hasattr(x, "permute") else \
        x.transpose(*range(k), k + 1, k + 3, k, k + 2, k + 4)
    return x.reshape(*lead, NUM_CELLS, 3, CELL, CELL)


def mask_cells(images: np.ndarray, cells: np.ndarray) -> np.ndarray:
    """A copy of ``images`` (n, 3, 24, 24) with cell ``cells[i]`` of image ``i`` set to zero."""
    out = images.copy()
    r, c = (np.asarray(cells) // GRID) * CELL, (np.asarray(cells) % GRID) * CELL
    for i in range(len(out)):
        out[i, :, r[i]:r[i] + CELL, c[i]:c[i] + CELL] = 0.0
    return out


def cell_box(cell) -> np.ndarray:
    """Box (row0, col0, row1, col1) of cell(s) ``cell`` in pixels, half-open: shape (..., 4)."""
    cell = np.asarray(cell)
    if np.any((cell < 0) | (cell >= NUM_CELLS)):
        raise ValueError(f"cells must lie in [0, {NUM_CELLS}), got {cell!r}")
    r, c = (cell // GRID) * CELL, (cell % GRID) * CELL
    return np.stack([r, c, r + CELL, c + CELL], axis=-1)


def box_iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Intersection over union of boxes (..., 4) given as (row0, col0, row1, col1), half-open."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    h = np.clip(np.minimum(a[..., 2], b[..., 2]) - np.maximum(a[..., 0], b[..., 0]), 0, None)
    w = np.clip(np.minimum(a[..., 3], b[..., 3]) - np.maximum(a[..., 1], b[..., 1]), 0, None)
    inter = h * w
    area = lambda x: (x[..., 2] - x[..., 0]) * (x[..., 3] - x[..., 1])
    return inter / (area(a) + area(b) - inter)
