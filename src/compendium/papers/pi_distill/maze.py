"""The multi-turn maze: walls, start, goal, the BFS expert and privileged information (PI).

A maze is an ``n x n`` grid of free and wall cells with a start and a goal (cells are flat indices
``r * n + c``). Actions are U, D, L, R and STOP; a move into a wall or off the grid leaves the agent
where it is, STOP ends the episode, and the episode succeeds when the agent stands on the goal
within ``horizon`` moves. The expert is breadth-first search from the goal: at every cell it takes
the first move (in the order U, D, L, R) to a neighbour one step closer. PI is an action trace of
length ``horizon`` (``PAD`` after its end) in one of four kinds: the expert's ``full`` trace, its
first ``half``, a ``noisy`` copy with each action replaced by another move with probability 0.3,
and a ``random`` trace of the same length (the uninformative control).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

__all__ = ["ACTIONS", "MOVES", "STOP", "PAD", "PI_KINDS", "Mazes", "bfs_distance", "expert_action",
           "generate_mazes", "make_pi", "step_positions", "maze_keys"]

ACTIONS = ("U", "D", "L", "R", "STOP")
MOVES = np.array([[-1, 0], [1, 0], [0, -1], [0, 1], [0, 0]])
STOP = 4
PAD = 5                      # PI token after the trace's end
PI_KINDS = ("full", "half", "noisy", "random")


@dataclass(frozen=True)
class Mazes:
    """A batch of mazes with their BFS solution.

    Attributes
    ----------
    walls : bool array, shape (N, n, n)
    start, goal : int arrays, shape (N,)
        Flat cell indices.
    distance : int array, shape (N, n * n)
        BFS distance of every cell to the goal (-1 for walls and unreachable cells).
    trace : int array, shape (N, horizon)
        The expert's actions from the start (``PAD`` after the goal is reached).
    length : int array, shape (N,)
        Shortest-path length, ``distance[start]``.
    """

    walls: np.ndarray
    start: np.ndarray
    goal: np.ndarray
    distance: np.ndarray
    trace: np.ndarray
    length: np.ndarray

    @property
    def size(self) -> int:
        return int(self.walls.shape[1])

    @property
    def horizon(self) -> int:
        return int(self.trace.shape[1])

    def __len__(self) -> int:
        return int(self.walls.shape[0])

    def take(self, index) -> "Mazes":
        index = np.asarray(index)
        return Mazes(*(getattr(self, f)[index] for f in ("walls", "start", "goal", "distance", "trace", "length")))


def bfs_distance(walls: np.ndarray, goal: int) -> np.ndarray:
    """Breadth-first distances of every cell to ``goal`` on the 4-neighbour grid, -1 where unreachable."""
    n = walls.shape[0]
    dist = np.full(n * n, -1, dtype=np.int64)
    dist[goal] = 0
    queue = deque([goal])
    while queue:
        cell = queue.popleft()
        r, c = divmod(cell, n)
        for dr, dc in MOVES[:4]:
            rr, cc = r + dr, c + dc
            if 0 <= rr < n and 0 <= cc < n and not walls[rr, cc] and dist[rr * n + cc] < 0:
                dist[rr * n + cc] = dist[cell] + 1
                queue.append(rr * n + cc)
    return dist


def expert_action(walls: np.ndarray, dist: np.ndarray, cell: int) -> int:
    """The BFS expert's move at ``cell``: the first of U, D, L, R to a neighbour one step closer."""
    n = walls.shape[0]
    r, c = divmod(int(cell), n)
    for a, (dr, dc) in enumerate(MOVES[:4]):
        rr, cc = r + dr, c + dc
        if 0 <= rr < n and 0 <= cc < n and not walls[rr, cc] and dist[rr * n + cc] == dist[cell] - 1:
            return a
    raise ValueError(f"cell {cell} has no neighbour closer to the goal (distance {dist[cell]})")


def maze_keys(mazes: Mazes) -> set:
    """Hashable identities of the mazes (walls, start, goal), for disjoint splits."""
    return {(m.tobytes(), int(s), int(g)) for m, s, g in zip(mazes.walls, mazes.start, mazes.goal)}


def generate_mazes(count: int, size: int, horizon: int, wall_density: float, rng: np.random.Generator,
                   *, min_length: int = 3, exclude: set | None = None) -> Mazes:
    """Draw ``count`` distinct solvable mazes, none of them in ``exclude``.

    Walls are i.i.d. cells with probability ``wall_density``; start and goal are distinct free
    cells with a shortest path of ``min_length`` to ``horizon`` moves.
    """
    if not (2 <= size <= 12) or not (1 <= horizon <= 64) or not (0 <= wall_density < 0.8):
        raise ValueError(f"bad maze settings: size {size}, horizon {horizon}, wall_density {wall_density}")
    exclude = set() if exclude is None else exclude
    seen: set = set()
    out = {k: [] for k in ("walls", "start", "goal", "distance", "trace", "length")}
    tries = 0
    while len(out["start"]) < count:
        tries += 1
        if tries > 200 * count + 1000:
            raise ValueError("could not draw enough distinct mazes: relax min_length, horizon or wall_density")
        walls = rng.random((size, size)) < wall_density
        free = np.flatnonzero(~walls.ravel())
        if free.size < 2:
            continue
        start, goal = (int(x) for x in rng.choice(free, 2, replace=False))
        dist = bfs_distance(walls, goal)
        if not (min_length <= dist[start] <= horizon):
            continue
        key = (walls.tobytes(), start, goal)
        if key in exclude or key in seen:
            continue
        seen.add(key)
        trace = np.full(horizon, PAD, dtype=np.int64)
        cell = start
        for t in range(dist[start]):
            a = expert_action(walls, dist, cell)
            trace[t] = a
            cell = cell + MOVES[a][0] * size + MOVES[a][1]
        for k, v in zip(out, (walls, start, goal, dist, trace, dist[start])):
            out[k].append(v)
    return Mazes(*(np.asarray(out[k]) for k in out))


def make_pi(mazes: Mazes, kind: str, rng: np.random.Generator, *, noise: float = 0.3) -> np.ndarray:
    """PI tokens of one ``kind`` for every maze, shape (N, horizon), ``PAD`` after the trace.

    ``full``: the expert trace; ``half``: its first ceil(length / 2) actions; ``noisy``: each
    action replaced, with probability ``noise``, by one of the three other moves; ``random``: a
    uniform move trace of the expert's length.
    """
    trace = mazes.trace.copy()
    live = trace != PAD
    if kind == "full":
        return trace
    if kind == "half":
        keep = np.arange(trace.shape[1])[None, :] < np.ceil(mazes.length / 2)[:, None]
        return np.where(keep, trace, PAD)
    if kind == "noisy":
        flip = (rng.random(trace.shape) < noise) & live
        other = (trace + rng.integers(1, 4, size=trace.shape)) % 4        # a different move, uniformly
        return np.where(flip, other, trace)
    if kind == "random":
        return np.where(live, rng.integers(0, 4, size=trace.shape), PAD)
    raise ValueError(f"PI kind must be one of {PI_KINDS}, got {kind!r}")


def step_positions(walls_flat, pos, action, size: int):
    """Move every agent: ``walls_flat`` (..., n * n) bool, ``pos`` and ``action`` (...) integer
    tensors or arrays. Walls, the border and STOP leave the agent in place."""
    import torch

    moves = torch.as_tensor(MOVES, device=pos.device)
    dr, dc = moves[action, 0], moves[action, 1]
    r, c = pos // size + dr, pos % size + dc
    inside = (r >= 0) & (r < size) & (c >= 0) & (c < size)
    target = torch.where(inside, r * size + c, pos)
    blocked = walls_flat.gather(-1, target.unsqueeze(-1)).squeeze(-1)
    return torch.where(inside & ~blocked, target, pos)
