r"""Threshold rules: LEC, the naive plug-in, Clopper-Pearson and Learn-then-Test, two-model routing.

Every rule accepts a prediction when its uncertainty ``u`` is at most a threshold ``lambda``
(``S(lambda) = 1{u <= lambda}``) and returns ``-inf`` when it accepts nothing. Rules that search
the calibration scores only stop at the *end of a tie group*, so a threshold always accepts every
calibration point tied with it.

Batch versions work on ``(num_splits, n)`` arrays, one calibration set per row, after one sort
(:func:`sort_calibration`); the one-set functions wrap them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats

TOLERANCE = 1e-9  # slack for comparisons of integer counts with alpha * count (round-off only)
NO_THRESHOLD = -np.inf  # the threshold of a rule that accepts nothing


@dataclass(frozen=True, eq=False)
class SortedCalibration:
    """Calibration sets sorted by uncertainty, with the running counts every rule needs.

    Attributes
    ----------
    scores : (S, n) float, each row sorted ascending.
    cum_errors : (S, n) int, errors among the ``k + 1`` smallest scores of the row.
    group_end : (S, n) bool, True where ``scores[s, k] < scores[s, k + 1]`` (or ``k = n - 1``):
        the only places where a threshold may stop.
    """

    scores: np.ndarray
    cum_errors: np.ndarray
    group_end: np.ndarray

    @property
    def accepted(self) -> np.ndarray:
        """(n,) number of calibration points accepted at position k: ``k + 1``."""
        return np.arange(1, self.scores.shape[1] + 1)


def _as_batch(scores, errors) -> tuple[np.ndarray, np.ndarray]:
    u = np.asarray(scores, dtype=float)
    e = np.asarray(errors)
    if u.ndim == 1:
        u, e = u[None, :], e[None, :]
    if u.ndim != 2 or u.shape != e.shape or u.shape[1] == 0:
        raise ValueError(f"scores and errors must be (n,) or (S, n) arrays of one shape with n >= 1, got {u.shape} and {e.shape}")
    if not np.all(np.isfinite(u)):
        raise ValueError("scores must be finite")
    if not np.all((e == 0) | (e == 1)):
        raise ValueError("errors must be 0/1 indicators")
    return u, e.astype(np.int64)


def _check_level(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating)) or not 0 < value < 1:
        raise ValueError(f"{name} must be a number in (0, 1), got {value!r}")
    return float(value)


def sort_calibration(scores, errors) -> SortedCalibration:
    """Sort each calibration set by score and precompute cumulative error counts.

    Parameters
    ----------
    scores : (n,) or (S, n) array of finite uncertainties.
    errors : same shape, 0/1 error indicators.
    """
    u, e = _as_batch(scores, errors)
    order = np.argsort(u, axis=1)  # order inside a tie group is irrelevant: rules stop at group ends
    us = np.take_along_axis(u, order, axis=1)
    cum = np.cumsum(np.take_along_axis(e, order, axis=1), axis=1)
    group_end = np.ones(us.shape, dtype=bool)
    group_end[:, :-1] = us[:, 1:] != us[:, :-1]
    return SortedCalibration(us, cum, group_end)


def _largest_feasible(cal: SortedCalibration, feasible: np.ndarray) -> np.ndarray:
    """(S,) score at the largest feasible tie-group end of each row, ``-inf`` where none is."""
    ok = feasible & cal.group_end
    idx = np.where(ok, np.arange(ok.shape[1]), -1).max(axis=1)
    rows = np.arange(ok.shape[0])
    return np.where(idx >= 0, cal.scores[rows, np.maximum(idx, 0)], NO_THRESHOLD)


# ---------------------------------------------------------------------------- LEC and plug-in
def lec_slack(alpha: float) -> float:
    """Worst-case contribution of the unseen test point to ``sum S (E - alpha)``: ``1 - alpha``."""
    return 1.0 - alpha


def lec_thresholds(cal: SortedCalibration, alpha: float, slack: float | None = None) -> np.ndarray:
    r"""LEC: the largest threshold meeting the finite-sample condition, per calibration set.

    ``lambda_hat = max{lambda in {u_i}: sum_i S_i(lambda) (E_i - alpha) + slack <= 0}`` with
    ``slack = 1 - alpha`` by default, i.e. ``(errors + 1) / (accepted + 1) <= alpha``.

    Returns
    -------
    (S,) thresholds, ``-inf`` where no threshold qualifies.
    """
    alpha = _check_level("alpha", alpha)
    b = lec_slack(alpha) if slack is None else float(slack)
    if not np.isfinite(b) or b < 0:
        raise ValueError(f"slack must be a finite number >= 0, got {slack!r}")
    feasible = cal.cum_errors + b - alpha * cal.accepted <= TOLERANCE
    return _largest_feasible(cal, feasible)


def plugin_thresholds(cal: SortedCalibration, alpha: float) -> np.ndarray:
    """Naive plug-in: the largest threshold whose empirical accepted-error ratio is at most alpha."""
    alpha = _check_level("alpha", alpha)
    return _largest_feasible(cal, cal.cum_errors - alpha * cal.accepted <= TOLERANCE)


def lec_threshold(scores, errors, alpha: float, slack: float | None = None) -> float:
    """LEC threshold of one calibration set (see :func:`lec_thresholds`).

    Parameters
    ----------
    scores : (n,) uncertainties; errors : (n,) 0/1 error indicators; alpha : target risk level.
    slack : the worst-case test-point term, ``1 - alpha`` by default.
    """
    if np.ndim(scores) != 1:
        raise ValueError("lec_threshold takes one calibration set: 1-D scores and errors")
    return float(lec_thresholds(sort_calibration(scores, errors), alpha, slack)[0])


def lec_threshold_reference(scores, errors, alpha: float, slack: float | None = None) -> float:
    """Slow reference for :func:`lec_threshold`: evaluate the condition at every distinct score."""
    u, e = _as_batch(scores, errors)
    u, e = u[0], e[0]
    b = lec_slack(alpha) if slack is None else slack
    best = NO_THRESHOLD
    for lam in np.unique(u):
        accepted = u <= lam
        if np.sum(accepted * (e - alpha)) + b <= TOLERANCE:
            best = max(best, float(lam))
    return best


# ---------------------------------------------------------------------------- Clopper-Pearson
def max_allowed_errors(max_accepted: int, alpha: float, delta: float) -> np.ndarray:
    r"""``e_max[k]``: the most errors among ``k`` accepted points with a 1-delta CP bound <= alpha.

    The Clopper-Pearson upper bound ``U(e, k)`` at level ``1 - delta`` satisfies
    ``U(e, k) <= alpha  <=>  P(Binomial(k, alpha) <= e) <= delta``; ``e_max[k] = -1`` when even
    zero errors do not qualify.

    Returns
    -------
    (max_accepted + 1,) int array indexed by ``k``.
    """
    alpha, delta = _check_level("alpha", alpha), _check_level("delta", delta)
    k = np.arange(max_accepted + 1)
    e = stats.binom.ppf(delta, k, alpha)  # smallest e with CDF >= delta
    e = np.nan_to_num(e, nan=0.0).astype(np.int64)
    return e - (stats.binom.cdf(e, k, alpha) > delta)


def cp_ucb_thresholds(cal: SortedCalibration, alpha: float, delta: float) -> np.ndarray:
    """Clopper-Pearson UCB without multiplicity correction (the paper's baseline).

    The largest calibration threshold whose 1-delta upper bound on P(error | accepted) is <= alpha.
    Each threshold alone is a valid 1-delta bound; picking the largest of many is not corrected.
    """
    e_max = max_allowed_errors(cal.scores.shape[1], alpha, delta)
    return _largest_feasible(cal, cal.cum_errors <= e_max[cal.accepted])


def counts_on_grid(cal: SortedCalibration, grid) -> tuple[np.ndarray, np.ndarray]:
    """Accepted and erroneous counts of every calibration set at every fixed threshold.

    Returns
    -------
    accepted, errors : (S, G) int arrays.
    """
    grid = np.asarray(grid, dtype=float)
    S, n = cal.scores.shape
    G = grid.size
    first = np.searchsorted(grid, cal.scores, side="left")  # (S, n): u <= grid_j  <=>  j >= first
    slot = (np.arange(S)[:, None] * (G + 1) + first).ravel()
    errors = np.diff(cal.cum_errors, axis=1, prepend=0).ravel()
    per_bin = np.bincount(slot, minlength=S * (G + 1)).reshape(S, G + 1)[:, :G]
    err_bin = np.bincount(slot, weights=errors, minlength=S * (G + 1)).reshape(S, G + 1)[:, :G]
    return np.cumsum(per_bin, axis=1), np.rint(np.cumsum(err_bin, axis=1)).astype(np.int64)


def _grid_rejections(cal, alpha: float, level: float, grid, counts=None) -> np.ndarray:
    """(S, G) bool: the binomial p-value of ``H_j: risk(grid_j) > alpha`` is <= level.

    ``p_j = P(Binomial(k_j, alpha) <= e_j) <= level  <=>  e_j <= e_max[k_j]`` (no p-value is
    computed; nothing accepted means p = 1).
    """
    accepted, errors = counts_on_grid(cal, grid) if counts is None else counts
    return errors <= max_allowed_errors(cal.scores.shape[1], alpha, level)[accepted]


def _check_grid(grid) -> np.ndarray:
    grid = np.asarray(grid, dtype=float)
    if grid.ndim != 1 or grid.size == 0 or np.any(np.diff(grid) <= 0) or np.isnan(grid).any():
        raise ValueError("grid must be a non-empty, strictly increasing 1-D array of thresholds")
    return grid


def cp_bonferroni_thresholds(cal: SortedCalibration, alpha: float, delta: float, grid, counts=None) -> np.ndarray:
    """Clopper-Pearson on a fixed grid with a Bonferroni correction (valid PAC, level 1 - delta).

    Rejects ``H_j: P(error | u <= grid_j) > alpha`` when its binomial p-value is <= delta / G and
    returns the largest rejected grid threshold. ``counts``: :func:`counts_on_grid` of ``cal``, if
    already computed.
    """
    alpha, delta, grid = _check_level("alpha", alpha), _check_level("delta", delta), _check_grid(grid)
    reject = _grid_rejections(cal, alpha, delta / grid.size, grid, counts)
    idx = np.where(reject, np.arange(grid.size), -1).max(axis=1)
    return np.where(idx >= 0, grid[np.maximum(idx, 0)], NO_THRESHOLD)


def ltt_fixed_sequence_thresholds(cal: SortedCalibration, alpha: float, delta: float, grid, counts=None) -> np.ndarray:
    """Learn-then-Test with fixed-sequence testing from the smallest grid threshold upwards.

    Tests ``H_j`` in grid order at level delta with binomial p-values and stops at the first
    non-rejection; returns the last rejected threshold. Family-wise error <= delta. ``counts`` as
    in :func:`cp_bonferroni_thresholds`.
    """
    alpha, delta, grid = _check_level("alpha", alpha), _check_level("delta", delta), _check_grid(grid)
    reject = _grid_rejections(cal, alpha, delta, grid, counts)
    num_rejected = np.cumprod(reject, axis=1).sum(axis=1)  # length of the leading run of rejections
    return np.where(num_rejected > 0, grid[np.maximum(num_rejected - 1, 0)], NO_THRESHOLD)


# ---------------------------------------------------------------------------- two-model routing
def route_thresholds(u1, e1, u2, e2, alpha: float, grid_size: int, tie_break: str = "smallest",
                     chunk: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    r"""LEC for a two-model system: model 1 answers when ``u1 <= lambda1``, otherwise model 2
    answers when ``u2 <= lambda2``, otherwise the system abstains.

    System selection and error (per input)::

        S = S1 + (1 - S1) S2,    E_sys = S1 E1 + (1 - S1) S2 E2

    The pair maximizes the number of accepted calibration points subject to the LEC condition on
    the system, ``sum S (E_sys - alpha) + (1 - alpha) <= 0``. Candidates for ``lambda1``: ``-inf``
    (everything goes to model 2), model 1's own LEC threshold and the ``j / grid_size`` quantiles of
    the calibration ``u1``; every tie-group end of ``u2`` (and ``-inf``) for ``lambda2``. Ties are
    broken by fewer accepted errors, then by candidate order of ``lambda1``; among values of
    ``lambda2`` that accept the same calibration points, ``tie_break`` picks the smallest (default,
    the chapter's pre-registered rule) or the largest.

    Parameters
    ----------
    u1, e1, u2, e2 : (S, n) arrays (or (n,)): both models' uncertainties and errors on the same inputs.
    tie_break : {'smallest', 'largest'}
    chunk : rows per block (default: about 8000 / n, which keeps blocks in cache).

    Returns
    -------
    lambda1, lambda2 : (S,) arrays (``-inf`` = accept nothing at that stage).
    """
    alpha = _check_level("alpha", alpha)
    if tie_break not in ("smallest", "largest"):
        raise ValueError(f"tie_break must be 'smallest' or 'largest', got {tie_break!r}")
    if isinstance(grid_size, bool) or not isinstance(grid_size, (int, np.integer)) or grid_size < 1:
        raise ValueError(f"grid_size must be a positive integer, got {grid_size!r}")
    U1, E1 = _as_batch(u1, e1)
    U2, E2 = _as_batch(u2, e2)
    if U1.shape != U2.shape:
        raise ValueError(f"both models need scores on the same inputs, got {U1.shape} and {U2.shape}")
    S, n = U1.shape
    out1, out2 = np.empty(S), np.empty(S)
    b = lec_slack(alpha)
    levels = np.ceil(np.arange(1, grid_size + 1) * n / grid_size).astype(int) - 1
    chunk = max(8, 8000 // n) if chunk is None else int(chunk)  # small blocks stay in cache
    for lo in range(0, S, chunk):
        a1, f1, a2, f2 = (x[lo:lo + chunk] for x in (U1, E1, U2, E2))
        m = a1.shape[0]
        single = lec_thresholds(sort_calibration(a1, f1), alpha)
        cand = np.concatenate([np.full((m, 1), NO_THRESHOLD), single[:, None], np.sort(a1, axis=1)[:, levels]], axis=1)
        order = np.argsort(a2, axis=1)  # work in the order of u2; ties in u2 only matter at group ends
        u2s, e2s = np.take_along_axis(a2, order, axis=1), np.take_along_axis(f2, order, axis=1) == 1
        a1s, e1s = np.take_along_axis(a1, order, axis=1), np.take_along_axis(f1, order, axis=1) == 1
        s1 = a1s[:, None, :] <= cand[:, :, None]  # (m, C, n): model 1 answers
        routed = ~s1
        acc = np.zeros(s1.shape[:2] + (n + 1,), np.int32)  # position j: lambda2 = j-th smallest u2 (0: -inf)
        err = np.zeros_like(acc)
        np.cumsum(routed, axis=-1, dtype=np.int32, out=acc[..., 1:])
        np.cumsum(routed & e2s[:, None, :], axis=-1, dtype=np.int32, out=err[..., 1:])
        acc += s1.sum(-1, dtype=np.int32)[..., None]
        err += (s1 & e1s[:, None, :]).sum(-1, dtype=np.int32)[..., None]
        end = np.ones((m, n + 1), dtype=bool)  # lambda2 may only stop at the end of a tie group of u2
        end[:, 1:n] = u2s[:, 1:] != u2s[:, :-1]
        feasible = (err + b - alpha * acc <= TOLERANCE) & end[:, None, :]
        key = np.where(feasible, acc * (n + 1) + (n - err), -1)  # (m, C, n + 1)
        if tie_break == "largest":  # first maximum over candidates, last over lambda2
            c, j = np.divmod(key[:, :, ::-1].reshape(m, -1).argmax(axis=1), n + 1)
            j = n - j
        else:  # first maximum: candidate order, then the smallest lambda2
            c, j = np.divmod(key.reshape(m, -1).argmax(axis=1), n + 1)
        rows = np.arange(m)
        none = key[rows, c, j] < 0
        lam1 = np.where(none, NO_THRESHOLD, cand[rows, c])
        lam2 = np.where(none | (j == 0), NO_THRESHOLD, u2s[rows, np.maximum(j - 1, 0)])
        out1[lo:lo + m], out2[lo:lo + m] = lam1, lam2
    return out1, out2


def route_reference(u1, e1, u2, e2, alpha: float, candidates1, tie_break: str = "smallest") -> tuple[float, float]:
    """Slow reference for one calibration set: brute force over ``candidates1`` x every ``u2`` value."""
    u1, e1, u2, e2 = (np.asarray(x, dtype=float) for x in (u1, e1, u2, e2))
    best, best_key, best_c = (NO_THRESHOLD, NO_THRESHOLD), None, -1
    for c, lam1 in enumerate(candidates1):
        for lam2 in np.concatenate([[NO_THRESHOLD], np.unique(u2)]):
            s1 = u1 <= lam1
            s = s1 | (~s1 & (u2 <= lam2))
            err = np.where(s1, e1, np.where(s, e2, 0))
            if np.sum(s * (err - alpha)) + 1 - alpha <= TOLERANCE:
                key = (int(s.sum()), -int(err.sum()))
                later_same = tie_break == "largest" and key == best_key and c == best_c
                if best_key is None or key > best_key or later_same:
                    best, best_key, best_c = (float(lam1), float(lam2)), key, c
    return best
