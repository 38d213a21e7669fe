"""Toy MDPs: random tabular MDPs, the combination lock and d-rectangular linear MDPs.

Every instance is time-homogeneous, starts in state 0 and has rewards in [0, 1]; a batch of ``R``
instances is stacked on a leading axis.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class TabularMDP:
    """A batch of tabular MDPs: ``kernel (R, S, A, S)``, ``reward (R, S, A)``, horizon ``H``."""

    kernel: np.ndarray
    reward: np.ndarray
    horizon: int

    @property
    def num_states(self) -> int:
        return self.kernel.shape[-1]

    @property
    def num_actions(self) -> int:
        return self.kernel.shape[-2]


@dataclass(frozen=True)
class LinearMDP:
    """A batch of d-rectangular linear MDPs: ``P(s'|s,a) = sum_i features[s,a,i] factors[i,s']``.

    ``features (R, S, A, d)`` (rows on the simplex), ``factors (R, d, S)`` (distributions),
    ``reward (R, S, A)`` (known to the learner).
    """

    features: np.ndarray
    factors: np.ndarray
    reward: np.ndarray
    horizon: int

    @property
    def kernel(self) -> np.ndarray:
        return np.einsum("rsad,rdt->rsat", self.features, self.factors)


def _check_sizes(**sizes) -> None:
    for name, (value, low) in sizes.items():
        if int(value) != value or value < low:
            raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")


def random_mdp(num_runs: int, num_states: int, num_actions: int, horizon: int, rng: np.random.Generator,
               concentration: float = 0.5) -> TabularMDP:
    """Random MDPs: rows of ``P`` from Dirichlet(``concentration``), rewards ``U^3`` (sparse-ish)."""
    _check_sizes(num_runs=(num_runs, 1), num_states=(num_states, 2), num_actions=(num_actions, 2), horizon=(horizon, 1))
    kernel = rng.dirichlet(np.full(num_states, concentration), size=(num_runs, num_states, num_actions))
    kernel = np.maximum(kernel, 1e-300)  # no exact zeros: every row keeps full support
    kernel /= kernel.sum(-1, keepdims=True)
    reward = rng.random((num_runs, num_states, num_actions)) ** 3
    return TabularMDP(kernel=kernel, reward=reward, horizon=horizon)


def combination_lock(num_runs: int, length: int, rng: np.random.Generator, num_actions: int = 2) -> TabularMDP:
    """Combination locks of ``length`` steps (horizon = length).

    States ``0..length-1`` are the lock positions and ``length`` is an absorbing dead state. In
    position ``i`` one secret action (drawn per run) moves to ``i+1``; every other action falls into
    the dead state. The only reward, 1, is for the secret action in the last position. Under a
    uniform policy the reward is found with probability ``num_actions ** -length`` per episode.
    """
    _check_sizes(num_runs=(num_runs, 1), length=(length, 2), num_actions=(num_actions, 2))
    S = length + 1
    secret = rng.integers(num_actions, size=(num_runs, length))
    kernel = np.zeros((num_runs, S, num_actions, S))
    kernel[:, :, :, length] = 1.0  # default: fall into the dead state
    runs, pos = np.meshgrid(np.arange(num_runs), np.arange(length - 1), indexing="ij")
    kernel[runs, pos, secret[:, :-1], length] = 0.0
    kernel[runs, pos, secret[:, :-1], pos + 1] = 1.0
    reward = np.zeros((num_runs, S, num_actions))
    reward[np.arange(num_runs), length - 1, secret[:, -1]] = 1.0
    return TabularMDP(kernel=kernel, reward=reward, horizon=length)


def linear_mdp(num_runs: int, num_states: int, num_actions: int, num_features: int, horizon: int,
               rng: np.random.Generator) -> LinearMDP:
    """Random d-rectangular linear MDPs with sparse-ish simplex features (Dirichlet(0.3))."""
    _check_sizes(num_runs=(num_runs, 1), num_states=(num_states, 2), num_actions=(num_actions, 2),
                 num_features=(num_features, 2), horizon=(horizon, 1))
    features = rng.dirichlet(np.full(num_features, 0.3), size=(num_runs, num_states, num_actions))
    features = np.maximum(features, 1e-12)
    features /= features.sum(-1, keepdims=True)
    factors = rng.dirichlet(np.full(num_states, 0.3), size=(num_runs, num_features))
    factors = np.maximum(factors, 1e-300)
    factors /= factors.sum(-1, keepdims=True)
    reward = rng.random((num_runs, num_states, num_actions)) ** 3
    return LinearMDP(features=features, factors=factors, reward=reward, horizon=horizon)
