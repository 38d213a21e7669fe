r"""Why the finite-sample rule can overshoot, exactly, and the interval estimates the ledger uses.

**Swap identity.** Take ``n + 1`` exchangeable points sorted by score (no ties) and the walk
``W(k) = sum_{j <= k} (E_(j) - alpha)`` over all of them, ``W(0) = 0``. Let ``K0`` be the last
``k`` with ``W(k) <= 0`` (the symmetric threshold ``lambda*`` accepts positions ``1..K0``) and
``K1`` the last ``k`` with ``W(k) <= -1``. Leaving point ``t`` out, the rule with slack
``1 - alpha`` accepts it iff some later ``k`` has ``W(k) - (E_t - alpha) <= -(1 - alpha)``: an
error is accepted iff ``t < K0``, a correct point iff ``t < K1``. Summing over which point is the
test point (exchangeability),

.. math::
    (n+1)\,\mathbb E[L_{n+1}(\hat\lambda)]
    = \mathbb E\big[W(K_0)\big] + \alpha\,\mathbb E[C] - (1-\alpha)\,P(E_{(K_0)} = 1),

with ``C`` the number of correct points at positions ``K1..K0``. ``W(K0) <= 0`` is the symmetric
threshold's own (valid) sum; the excess is ``alpha`` times the correct points the rule drops
between the walk's last visits to ``-1`` and ``0``, less an error it may drop at ``K0``. Nothing
bounds ``E[C]`` without assumptions on the score distribution.
"""

from __future__ import annotations

import numpy as np

from ...stats import Estimate
from . import thresholds as th

Z_CELL = 3.0  # the ±3 SE band of every cell (fixed with the first build's criteria)
LEVEL_CELL = 0.9973  # its nominal two-sided coverage under normality


def walk_positions(errors_sorted, alpha: float) -> tuple[np.ndarray, int, int]:
    """The walk ``W(0..m)`` of sorted error indicators and ``(K0, K1)`` (last visits to <= 0 and <= -1)."""
    e = np.asarray(errors_sorted, dtype=float)
    if e.ndim != 1:
        raise ValueError("errors_sorted must be 1-D")
    walk = np.concatenate([[0.0], np.cumsum(e - alpha)])
    tol = th.TOLERANCE
    k0 = int(np.flatnonzero(walk <= tol)[-1])
    below = np.flatnonzero(walk <= -1 + tol)
    k1 = int(below[-1]) if below.size else 0
    return walk, k0, k1


def swap_sum_direct(scores, errors, alpha: float) -> float:
    """``sum_t L_t(lambda_hat^(-t))``: each point scored by the rule calibrated on the others (brute force)."""
    u, e = np.asarray(scores, float), np.asarray(errors, int)
    total = 0.0
    for t in range(u.size):
        keep = np.arange(u.size) != t
        lam = th.lec_threshold(u[keep], e[keep], alpha)
        total += float(u[t] <= lam) * (e[t] - alpha)
    return total


def swap_sum_identity(scores, errors, alpha: float) -> float:
    """The same sum from the walk: ``W(K0) + alpha C - (1 - alpha) 1{E_(K0) = 1}`` (distinct scores)."""
    u, e = np.asarray(scores, float), np.asarray(errors, int)
    if np.unique(u).size != u.size:
        raise ValueError("the identity is stated for distinct scores")
    es = e[np.argsort(u, kind="stable")]
    walk, k0, k1 = walk_positions(es, alpha)
    positions = np.arange(1, es.size + 1)
    correct_between = int(np.sum((es == 0) & (positions >= max(k1, 1)) & (positions <= k0)))
    error_at_k0 = bool(k0 >= 1 and es[k0 - 1] == 1)
    return float(walk[k0] + alpha * correct_between - (1 - alpha) * error_at_k0)


def oracle_thresholds(u_all, e_all, alpha: float) -> np.ndarray:
    """The symmetric threshold on all ``n + 1`` points (test point included): slack 0, (S,)."""
    return th.lec_thresholds(th.sort_calibration(u_all, e_all), alpha, slack=0.0)


def _pick(points, ses, labels, bad_side: str):
    points, ses = np.asarray(points, float), np.asarray(ses, float)
    if points.size == 0:
        raise ValueError("no cells to pick from")
    low, high = points - Z_CELL * ses, points + Z_CELL * ses
    if bad_side == "high":  # the claim is 'at most 0': a cell whose whole band is above 0 decides a fail
        i = int(np.argmax(low)) if np.max(low) > 0 else int(np.argmax(high))
    elif bad_side == "low":  # the claim is 'at least / above 0'
        i = int(np.argmin(high)) if np.min(high) < 0 else int(np.argmin(low))
    else:
        raise ValueError(f"bad_side must be 'high' or 'low', got {bad_side!r}")
    return i, float(points[i]), float(low[i]), float(high[i]), labels[i]


def worst_cell(points, ses, labels, *, bad_side: str, num_draws: int, what: str) -> tuple[Estimate, str]:
    """The cell that decides an 'every cell' criterion, as an estimate with its ±3 SE band.

    For ``bad_side='high'`` (a claim that every cell's value is at most 0): the cell whose whole
    band lies furthest above 0 if any does (the claim fails there), else the cell with the
    highest upper end (the claim passes only if that one is below 0). Mirror image for ``'low'``.

    Returns
    -------
    (Estimate over ``num_draws`` calibration draws, the cell's label)
    """
    _, point, low, high, label = _pick(points, ses, labels, bad_side)
    method = f"{what}, ±{Z_CELL:g} SE (deciding cell of {len(labels)}: {label})"
    return Estimate(point, low, high, LEVEL_CELL, "calibration draws", int(num_draws), method), str(label)


def cell_labels(frame) -> list[str]:
    """``'source, n=..., alpha=...'`` for each row (source optional)."""
    out = []
    for r in frame.itertuples():
        head = f"{r.source}, " if hasattr(r, "source") else ""
        out.append(f"{head}n={r.n}, alpha={r.alpha:g}")
    return out


def _scored(frame):
    """The cells with a usable SE (cells where almost no draw accepts are not scored: NaN SE)."""
    return frame[np.isfinite(frame.risk_se.to_numpy(dtype=float))]


def risk_estimate(frame, num_draws: int) -> tuple[Estimate, str]:
    """Pooled risk minus alpha over the scored cells of ``frame`` (deciding cell for 'risk <= alpha everywhere')."""
    frame = _scored(frame)
    return worst_cell(frame.pooled_risk - frame.alpha, frame.risk_se, cell_labels(frame), bad_side="high",
                      num_draws=num_draws, what="pooled risk - alpha, delta-method SE")


def flagged_on_every_source(frame, num_draws: int) -> tuple[Estimate, str]:
    """For a rule that should be flagged: per source its most clearly exceeding cell, then the least clear source."""
    best = []
    for name, g in _scored(frame).groupby("source", sort=False):
        i = int(np.argmax((g.pooled_risk - g.alpha - Z_CELL * g.risk_se).to_numpy()))
        best.append(g.iloc[i])
    import pandas as pd

    picks = pd.DataFrame(best)
    return worst_cell(picks.pooled_risk - picks.alpha, picks.risk_se, cell_labels(picks), bad_side="low",
                      num_draws=num_draws, what="pooled risk - alpha of each source's most exceeding cell")


def gain_estimate(frame, gain: str, se: str, num_draws: int, what: str) -> tuple[Estimate, str]:
    """A paired per-draw difference that must be >= 0 in every cell (deciding cell)."""
    return worst_cell(frame[gain], frame[se], cell_labels(frame), bad_side="low", num_draws=num_draws, what=what)


__all__ = ["LEVEL_CELL", "Z_CELL", "cell_labels", "flagged_on_every_source", "gain_estimate", "oracle_thresholds",
           "risk_estimate", "swap_sum_direct", "swap_sum_identity", "walk_positions", "worst_cell"]
