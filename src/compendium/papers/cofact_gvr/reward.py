r"""The counterfactual reward gap, the selective bonus and Q-PAS (our reading of the abstract).

Neither the paper's text nor its code was available: every formula here is the research card's
inferred reading of the abstract, written down before any run.

.. math::  \Delta = R_f - \tfrac1M \textstyle\sum_{m} R_{cf}^{(m)},\qquad
           R_f = \pi(y^\ast \mid I, q, e),\quad R_{cf}^{(m)} = \pi(y^\ast \mid I, q, e'_m),

with :math:`e'_m` a matched counterfactual of the evidence cell :math:`e` (the same-size cell moved
to another, non-overlapping place, or its content masked), the image and question unchanged. The
bonus is :math:`b = \lambda \max(\Delta, 0)\,\mathbb 1[y = y^\ast]` (selective: correct factual
rollouts only) or :math:`\lambda \max(\Delta, 0)` (to all). Q-PAS drops the :math:`\lfloor qN\rfloor`
rollouts of smallest :math:`|A|` and samples the update minibatch with probabilities
:math:`p_i \propto |A_i|^\alpha` over the rest (importance weights :math:`(N p_i)^{-\beta}`,
normalised to mean 1; :math:`\beta = 0` here).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from .scenes import NUM_CELLS

__all__ = ["counterfactual_cells", "mediator_gap", "selective_bonus", "shaped_reward", "q_pas_probabilities",
           "q_pas_select", "chi_square_frequencies", "REWARDS", "MASKED"]

MASKED = -1                              # a counterfactual "cell" that means: the factual cell, masked
REWARDS = ("answer", "iou", "selective", "all")


def counterfactual_cells(cells: torch.Tensor, modes: tuple, generator: torch.Generator) -> torch.Tensor:
    """Matched counterfactuals of evidence cells: shape (..., M), one per entry of ``modes``.

    ``"shift"`` moves the cell to one of the other eight cells of the grid, uniformly (same size, in
    bounds, IoU 0 with the factual cell); ``"mask"`` keeps the place and masks its content, coded
    as ``MASKED``.
    """
    out = []
    for mode in modes:
        if mode == "shift":
            step = torch.randint(1, NUM_CELLS, cells.shape, generator=generator)
            out.append((cells + step) % NUM_CELLS)
        elif mode == "mask":
            out.append(torch.full_like(cells, MASKED))
        else:
            raise ValueError(f"counterfactual mode must be 'shift' or 'mask', got {mode!r}")
    return torch.stack(out, -1)


def mediator_gap(p_factual: torch.Tensor, p_counterfactual: torch.Tensor) -> torch.Tensor:
    """Delta = p(y* | factual evidence) - mean over the last axis of p(y* | counterfactual evidence).

    Parameters
    ----------
    p_factual : torch.Tensor, shape (...)
    p_counterfactual : torch.Tensor, shape (..., M)
    """
    if p_counterfactual.shape[:-1] != p_factual.shape:
        raise ValueError(f"p_counterfactual {tuple(p_counterfactual.shape)} must be p_factual's shape "
                         f"{tuple(p_factual.shape)} plus a last axis of counterfactuals")
    return p_factual - p_counterfactual.mean(-1)


def selective_bonus(correct: torch.Tensor, gap: torch.Tensor, *, scale: float, selective: bool = True) -> torch.Tensor:
    """lambda * max(Delta, 0), times 1[y = y*] when ``selective``."""
    if not (scale >= 0 and math.isfinite(scale)):
        raise ValueError(f"scale (lambda) must be a non-negative number, got {scale!r}")
    bonus = scale * gap.clamp(min=0.0)
    return bonus * correct.to(bonus.dtype) if selective else bonus


def shaped_reward(kind: str, correct: torch.Tensor, gap: torch.Tensor, on_target: torch.Tensor, *,
                  scale: float) -> torch.Tensor:
    """The reward of each arm: answer only, + lambda * 1[e = target] (privileged GT-IoU, cells tile
    the image so IoU is 0 or 1), + the selective bonus, or + the bonus to every rollout."""
    r = correct.float()
    if kind == "answer":
        return r
    if kind == "iou":
        return r + scale * on_target.float()
    if kind == "selective":
        return r + selective_bonus(correct, gap, scale=scale, selective=True)
    if kind == "all":
        return r + selective_bonus(correct, gap, scale=scale, selective=False)
    raise ValueError(f"reward kind must be one of {REWARDS}, got {kind!r}")


def q_pas_probabilities(advantages: torch.Tensor, *, quantile: float, alpha: float) -> torch.Tensor:
    """Selection probabilities (..., N): 0 for the floor(q N) smallest |A| (ties by position), and
    proportional to |A|^alpha over the rest (uniform over the rest where all of them are 0)."""
    if not 0.0 <= quantile < 1.0:
        raise ValueError(f"quantile must lie in [0, 1), got {quantile!r}")
    if not (alpha >= 0 and math.isfinite(alpha)):
        raise ValueError(f"alpha must be a non-negative number, got {alpha!r}")
    mag = advantages.detach().abs().double()
    n = mag.shape[-1]
    drop = int(math.floor(quantile * n))
    order = torch.argsort(mag, dim=-1, stable=True)
    keep = torch.ones_like(mag, dtype=torch.bool)
    keep.scatter_(-1, order[..., :drop], False)
    weight = torch.where(keep, mag.pow(alpha) if alpha > 0 else torch.ones_like(mag), torch.zeros_like(mag))
    total = weight.sum(-1, keepdim=True)
    flat = total <= 0
    weight = torch.where(flat, keep.double(), weight)                   # nothing to prefer: uniform on the kept
    return weight / weight.sum(-1, keepdim=True)


def q_pas_select(advantages: torch.Tensor, *, quantile: float, alpha: float, size: int,
                 generator: torch.Generator, beta: float = 0.0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Draw ``size`` rollouts per row (with replacement) by Q-PAS.

    Parameters
    ----------
    advantages : torch.Tensor, shape (R, N)
        One row per buffer (a model's rollouts of one update).
    quantile, alpha : float
        Drop the floor(quantile * N) smallest |A|; sample proportionally to |A|^alpha.
    size : int
        Minibatch size per row.
    beta : float
        Importance-weight exponent: weights (N p_i)^(-beta), normalised to mean 1 per row.

    Returns
    -------
    (index, weights, probabilities) : (R, size) long, (R, size) float, (R, N) float64
    """
    if advantages.dim() != 2:
        raise ValueError(f"advantages must have shape (R, N), got {tuple(advantages.shape)}")
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ValueError(f"size must be a positive integer, got {size!r}")
    probs = q_pas_probabilities(advantages, quantile=quantile, alpha=alpha)
    index = torch.multinomial(probs.float(), size, replacement=True, generator=generator)
    weights = (probs.shape[-1] * probs.gather(-1, index)).pow(-beta) if beta else torch.ones(index.shape, dtype=torch.float64)
    weights = weights / weights.mean(-1, keepdim=True)
    return index, weights.float(), probs


def chi_square_frequencies(probabilities: np.ndarray, draws: np.ndarray) -> float:
    """p-value of Pearson's chi-square test of ``draws`` (indices) against ``probabilities`` (cells
    with probability 0 must never be drawn; if one is, the p-value is 0)."""
    from scipy import stats

    p = np.asarray(probabilities, float)
    counts = np.bincount(np.asarray(draws), minlength=len(p))
    if np.any(counts[p == 0] > 0):
        return 0.0
    keep = p > 0
    return float(stats.chisquare(counts[keep], len(draws) * p[keep] / p[keep].sum()).pvalue)
