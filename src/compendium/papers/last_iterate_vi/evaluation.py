"""Interval estimates the ledger decides with; the unit of replication is a noise seed.

Every (method, sigma) pair of a run shares ``num_seeds`` independent noise sequences, so each
statistic below is computed per seed (a slope, a fitted power) and summarised with a t interval
over seeds, or, for statistics of the seed-mean curve (a ratio of mean gaps, the two-term fit),
with a percentile bootstrap that resamples seeds.
"""

from __future__ import annotations

import numpy as np

from ...stats import Estimate, loglog_slope_by_replicate, mean_interval
from . import rates

SEEDS = "seeds"


def _window(result) -> np.ndarray:
    t = result.checkpoints
    lo, hi = result.config.window
    return (t >= lo) & (t <= hi)


def curves_slope_estimate(result, curves: np.ndarray, label: str = "curve") -> Estimate:
    """Mean over seeds of the log-log slope of per-seed curves ``(K, R)`` in the run's window."""
    keep = _window(result)
    curves = np.asarray(curves)[keep]  # (K_w, R)
    if np.any(curves <= 0):
        raise ValueError(f"{label} reaches Gap^2 = 0 in the window: no slope")
    return loglog_slope_by_replicate(result.checkpoints[keep], curves.T, unit=SEEDS)


def slope_estimate(result, method: str, sigma: float) -> Estimate:
    """Mean over seeds of the log-log slope of ``Gap^2`` in the window (t interval over seeds)."""
    return curves_slope_estimate(result, result.curves(method, sigma), f"{method} at sigma = {sigma}")


def warm_slope_estimate(result, method: str, sigma: float) -> Estimate:
    """As :func:`slope_estimate` on the warm-anchor bilinear game."""
    return curves_slope_estimate(result, result.warm_curves(method, sigma), f"{method} (warm) at sigma = {sigma}")


def power_over_seeds(xs, final: np.ndarray) -> Estimate:
    """Exponent ``p`` of ``final ~ xs^p``: OLS per seed (column of ``final``, shape (len(xs), R)),
    t interval over seeds."""
    final = np.asarray(final)
    powers = [rates.fit_power(xs, final[:, r]) for r in range(final.shape[1])]
    return mean_interval(powers, unit=SEEDS)


def lambda_power_estimate(result, which: str = "gap_sq") -> Estimate:
    """Power of ``lambda`` in ROG's ``Gap^2_T`` (``which='gap_sq'``) or ``||z_T - z*||^2``
    (``'dist_sq'``) over the lambda sweep, per seed, t interval over seeds."""
    sweep = result.lambda_sweep
    final = sweep["gap_sq"][-1] if which == "gap_sq" else sweep["dist_sq"]  # (L, R)
    return power_over_seeds(sweep["lambdas"], final)


def final_ratio_estimate(numerator: np.ndarray, denominator: np.ndarray, rng, resamples: int = 2000,
                         level: float = 0.95) -> Estimate:
    """``mean(numerator) / mean(denominator)`` over seeds (shape (R,) each, paired by seed: the same
    noise draws), with a percentile bootstrap that resamples seeds."""
    num, den = np.asarray(numerator, dtype=float), np.asarray(denominator, dtype=float)
    if num.shape != den.shape or num.ndim != 1:
        raise ValueError("numerator and denominator must be paired 1-D arrays over seeds")

    def ratio(seeds):
        return float(num[seeds].mean() / den[seeds].mean())

    point = ratio(np.arange(num.size))
    low, high = _bootstrap_seeds(ratio, num.size, rng, resamples, level)
    return Estimate(point, float(low), float(high), level, SEEDS, int(num.size),
                    f"percentile bootstrap over seeds, {resamples} resamples")


def noise_ratio_estimate(curves_noisy: np.ndarray, curves_clean: np.ndarray, rng, resamples: int = 2000) -> Estimate:
    """How much noise raises the final squared gap: ``mean Gap^2_T(sigma) / mean Gap^2_T(0)``
    from per-seed curves (K, R)."""
    return final_ratio_estimate(np.asarray(curves_noisy)[-1], np.asarray(curves_clean)[-1], rng, resamples)


def strong_slope_estimate(result, sigma: float, method_index: int = 0) -> Estimate:
    """As :func:`slope_estimate` on the strongly monotone game (``method_index`` 0 = ROG, 1 = RG)."""
    from .experiment import _index

    keep = _window(result)
    curves = result.strong_gap_sq[keep, method_index, _index(result.strong_sigmas, sigma)]
    return loglog_slope_by_replicate(result.checkpoints[keep], curves.T, unit=SEEDS)


def strong_power_estimate(result, sigmas) -> Estimate:
    """Power ``p`` of ``Gap^2_T ~ sigma^p`` on the strongly monotone game: fitted per seed over
    ``sigmas`` (the same seed index at every sigma), t interval over seeds."""
    from .experiment import _index

    j = [_index(result.strong_sigmas, s) for s in sigmas]
    return power_over_seeds(sigmas, result.strong_gap_sq[-1, 0][j])  # (len(sigmas), R)


def _bootstrap_seeds(statistic, num_seeds: int, rng, resamples: int, level: float):
    rng = np.random.default_rng(rng)
    draws = np.array([statistic(rng.integers(0, num_seeds, num_seeds)) for _ in range(resamples)])
    alpha = (1 - level) / 2
    return np.quantile(draws, [alpha, 1 - alpha])


def variance_power_estimate(result, method: str, sigma_range, rng, resamples: int = 200,
                            level: float = 0.95) -> Estimate:
    """Power ``p`` of the two-term fit ``a sigma^p T^-2/5 + b T^-1`` to the seed-mean final gaps
    over ``sigma_range``, with a percentile bootstrap over seeds (resample seeds, refit)."""
    s = result.sigmas
    cols = np.flatnonzero((s >= sigma_range[0]) & (s <= sigma_range[1]))
    final = result.gap_sq[-1, result.methods.index(method)][cols]  # (S, R)
    T = result.config.horizon

    def power(seeds):
        return rates.fit_two_term_rate(s[cols], final[:, seeds].mean(axis=1), T)["p"]

    point = power(np.arange(final.shape[1]))
    low, high = _bootstrap_seeds(power, final.shape[1], rng, resamples, level)
    return Estimate(point, float(low), float(high), level, SEEDS, int(final.shape[1]),
                    f"percentile bootstrap over seeds, {resamples} resamples")


def ratio_estimate(result, numerator: str, denominator: str, sigmas, rng, resamples: int = 2000,
                   level: float = 0.95) -> Estimate:
    """Largest over ``sigmas`` of ``mean Gap^2_T(numerator) / mean Gap^2_T(denominator)``, with a
    percentile bootstrap over seeds (the same resampled seeds for both methods: they share noise draws)."""
    num = np.array([result.curves(numerator, x)[-1] for x in sigmas])  # (S, R)
    den = np.array([result.curves(denominator, x)[-1] for x in sigmas])

    def worst(seeds):
        return float(np.max(num[:, seeds].mean(axis=1) / den[:, seeds].mean(axis=1)))

    point = worst(np.arange(num.shape[1]))
    low, high = _bootstrap_seeds(worst, num.shape[1], rng, resamples, level)
    return Estimate(point, float(low), float(high), level, SEEDS, int(num.shape[1]),
                    f"percentile bootstrap over seeds, {resamples} resamples")
