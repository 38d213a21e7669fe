"""Point-mass tasks (write, wipe, trace), the PD plant, expert demonstrations and the metrics.

Every path is a closed 2-D curve traced once in ``EPISODE_STEPS`` steps at 60 Hz, in one of two
directions (the two valid stroke orders, a bimodal choice the observation does not reveal at the
start), with a slow constant-speed *contact* segment; the wipe task scrubs at 6 Hz while in
contact. Commands are absolute positions; the plant tracks them with a second-order PD loop.
"""

from __future__ import annotations

import numpy as np

__all__ = ["TASKS", "HZ", "EPISODE_STEPS", "HORIZON", "PERIOD", "GOAL_DIM", "OBS_DIM", "Episodes",
           "sample_episodes", "expert_commands", "timing_law", "simulate_plant", "plant_step",
           "observe", "chunk_targets", "jerk", "boundary_gap", "stall_count", "path_deviation"]

TASKS = ("write", "wipe", "trace")
HZ = 60                      # control rate (Hz)
EPISODE_STEPS = 240          # 4 s per episode
HORIZON = 48                 # chunk length (steps)
PERIOD = 24                  # a new inference every PERIOD steps
GOAL_DIM = 4                 # (cx, cy, a, b)
OBS_DIM = 2 + 2 + 3 + GOAL_DIM + len(TASKS)
PLANT_HZ, PLANT_DAMPING = 4.0, 0.8     # PD bandwidth and damping ratio
SCRUB_HZ, SCRUB_AMPLITUDE = 6.0, 0.03  # the wipe task's contact scrub
STALL_SPEED = 0.02                     # |v| below this (units/s) counts as a stall


class Episodes:
    """A batch of episodes: task index, true goal, stroke direction, commands and expert states.

    Attributes
    ----------
    task : (E,) int, goal : (E, 4), direction : (E,) in {+1, -1}
    commands : (E, T, 2) expert commanded positions; states : (E, T, 2) plant positions under them;
    velocities : (E, T, 2); alt_states : (E, T, 2) the expert plant positions of the *other*
    direction (deviation is measured to the nearer of the two valid expert paths).
    """

    def __init__(self, task, goal, direction):
        self.task, self.goal, self.direction = np.asarray(task), np.asarray(goal), np.asarray(direction)
        self.commands = expert_commands(self.task, self.goal, self.direction)
        self.states, self.velocities = simulate_plant(self.commands)
        alt = expert_commands(self.task, self.goal, -self.direction)
        self.alt_commands = alt
        self.alt_states, _ = simulate_plant(alt)

    def __len__(self) -> int:
        return len(self.task)


def sample_episodes(n: int, rng: np.random.Generator, tasks=TASKS) -> Episodes:
    """``n`` episodes, tasks cycled in order, goals and directions drawn from ``rng``."""
    task = np.array([TASKS.index(tasks[i % len(tasks)]) for i in range(n)])
    goal = np.column_stack([rng.uniform(-0.3, 0.3, n), rng.uniform(-0.3, 0.3, n),
                            rng.uniform(0.35, 0.6, n), rng.uniform(0.35, 0.6, n)])
    direction = rng.choice([-1.0, 1.0], n)
    return Episodes(task, goal, direction)


def timing_law(steps: int = EPISODE_STEPS) -> tuple[np.ndarray, np.ndarray]:
    """Progress ``s`` in [0, 1] per step and the contact weight (1 inside the contact segment).

    The speed ramps up over the first 10 %, halves (smoothly) for the contact segment
    ``u in [0.45, 0.7]`` and ramps down to zero over the last 10 %.
    """
    u = (np.arange(steps) + 0.5) / steps

    def smooth(x):
        x = np.clip(x, 0.0, 1.0)
        return x * x * (3 - 2 * x)

    contact = smooth((u - 0.42) / 0.06) * (1 - smooth((u - 0.67) / 0.06))
    speed = smooth(u / 0.1) * smooth((1 - u) / 0.1) * (1 - 0.5 * contact)
    s = np.concatenate([[0.0], np.cumsum(speed)[:-1]])
    return s / s[-1], contact


def _curve(task, goal, theta):
    """Points of each task's curve at angles ``theta`` (E, T) -> (E, T, 2)."""
    cx, cy, a, b = (goal[:, i:i + 1] for i in range(4))
    x = cx + a * np.cos(theta)
    y = cy + b * np.sin(theta)
    write = task[:, None] == 0
    wipe = task[:, None] == 1
    # write: a cursive loop with five curls; wipe: a 1:3 Lissajous sweep; trace: the ellipse
    r = 0.07
    x = np.where(write, cx + (a - r) * np.cos(theta) + r * np.cos(5 * theta), x)
    y = np.where(write, cy + (b - r) * np.sin(theta) + r * np.sin(5 * theta), y)
    y = np.where(wipe, cy + b * np.sin(3 * theta) / 1.5, y)
    return np.stack([x, y], -1)


def expert_commands(task, goal, direction, steps: int = EPISODE_STEPS) -> np.ndarray:
    """The expert's commanded positions, (E, T, 2): the curve traced in ``direction``."""
    s, contact = timing_law(steps)
    theta = np.asarray(direction, float)[:, None] * 2 * np.pi * s[None]
    p = _curve(np.asarray(task), np.asarray(goal), theta)
    scrub = SCRUB_AMPLITUDE * contact * np.sin(2 * np.pi * SCRUB_HZ * np.arange(steps) / HZ)
    p[..., 1] += (np.asarray(task) == 1)[:, None] * scrub[None]
    return p


def plant_step(x, v, command):
    """One 60 Hz step of the PD plant (semi-implicit Euler): returns the new (x, v)."""
    w = 2 * np.pi * PLANT_HZ
    acc = w * w * (command - x) - 2 * PLANT_DAMPING * w * v
    v = v + acc / HZ
    return x + v / HZ, v


def simulate_plant(commands: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Positions and velocities (..., T, 2) of the plant started at rest on the first command.

    ``states[t]`` is the position *before* command ``t`` is applied (what the policy observes).
    """
    x, v = commands[..., 0, :].copy(), np.zeros_like(commands[..., 0, :])
    xs, vs = np.empty_like(commands), np.empty_like(commands)
    for t in range(commands.shape[-2]):
        xs[..., t, :], vs[..., t, :] = x, v
        x, v = plant_step(x, v, commands[..., t, :])
    return xs, vs


def observe(x, v, t: int, task, goal_noisy) -> np.ndarray:
    """Observation (..., OBS_DIM): position, velocity / 2, phase features, noisy goal, task one-hot."""
    u = t / EPISODE_STEPS
    shape = x.shape[:-1]
    phase = np.broadcast_to(np.array([u, np.sin(2 * np.pi * u), np.cos(2 * np.pi * u)]), shape + (3,))
    onehot = np.broadcast_to(np.eye(len(TASKS))[task], shape + (len(TASKS),))
    goal = np.broadcast_to(goal_noisy, shape + (np.shape(goal_noisy)[-1],))
    return np.concatenate([x, v / 2.0, phase, goal, onehot], -1).astype(np.float32)


def chunk_targets(commands: np.ndarray, starts: np.ndarray, horizon: int = HORIZON, extra: int = 0) -> np.ndarray:
    """Expert chunks ``commands[e, t0 : t0 + horizon + extra]`` (last command held past the end).

    commands (E, T, 2), starts (E, N) -> (E, N, horizon + extra, 2).
    """
    T = commands.shape[1]
    idx = np.minimum(starts[..., None] + np.arange(horizon + extra), T - 1)      # (E, N, L)
    return commands[np.arange(len(commands))[:, None, None], idx]


def jerk(actions: np.ndarray, hz: int = HZ) -> np.ndarray:
    """Mean jerk magnitude ``mean_t ||Delta^3 a_t|| * hz^3`` over the time axis (-2)."""
    d3 = np.diff(actions, n=3, axis=-2)
    return np.linalg.norm(d3, axis=-1).mean(-1) * hz ** 3


def boundary_gap(actions: np.ndarray, cycles: list) -> np.ndarray:
    """Mean over chunk cycles of the largest ``||a_t - a_{t-1}||`` at that cycle's boundary steps.

    ``cycles`` is a list of lists of steps (a switch, and for RTR also its splice point): taking
    the largest per cycle keeps a method with two boundary points per chunk from halving its gap
    by averaging a seamless switch with a seam.
    """
    gaps = np.linalg.norm(np.diff(actions, axis=-2), axis=-1)       # gaps[..., t - 1] = ||a_t - a_{t-1}||
    per_cycle = [gaps[..., [t - 1 for t in steps]].max(-1) for steps in cycles if steps]
    return np.mean(per_cycle, axis=0)


def stall_count(velocities: np.ndarray) -> np.ndarray:
    """Steps whose plant speed is below ``STALL_SPEED`` (after the first and before the last 10 %)."""
    T = velocities.shape[-2]
    inner = slice(T // 10, T - T // 10)
    return (np.linalg.norm(velocities[..., inner, :], axis=-1) < STALL_SPEED).sum(-1)


def path_deviation(states: np.ndarray, episodes: Episodes) -> np.ndarray:
    """RMSE to the nearer of the two valid expert plant paths, per episode (..., E)."""
    a = np.sqrt(((states - episodes.states) ** 2).sum(-1).mean(-1))
    b = np.sqrt(((states - episodes.alt_states) ** 2).sum(-1).mean(-1))
    return np.minimum(a, b)
