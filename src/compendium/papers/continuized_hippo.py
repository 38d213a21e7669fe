"""Continuized-HiPPO operator.

Paper card
----------
ICML 2026, seed file ``000_f69ae4f9f6fb29da.txt``, abstract 14.

Equations implemented
---------------------
(list them, with the symbols used below)

Small-scale deviations
----------------------
(what differs from the paper at this scale, and why)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Config:
    """Parameters of one run (names match the notebook's parameters cell)."""

    symbolic_order: int = 5  # largest state size N for the exact sympy proofs
    orders: tuple = (64, 128, 256, 512)  # state sizes N for the asymptotics and the convergence order (doubling grid)
    num_modes: int = 4  # number of skew-part eigenvalues compared with the asymptotic law
    tau_max: float = 8.0  # largest continuum time for the impulse-response comparison
    seed: int = 0

    def __post_init__(self) -> None:
        # check ranges here with ValueError (the registry checks them before a run, too)
        pass


@dataclass(frozen=True)
class Result:
    """What :func:`run` returns: data and metrics, never plots."""

    metrics: dict


def run(config: Config) -> Result:
    """Run the chapter's experiment for ``config``."""
    rng = np.random.default_rng(config.seed)  # noqa: F841 - explicit generator, passed down
    raise NotImplementedError("continuized_hippo: implement the method")
