"""Statistics the chapter's ledger decides with: one interval per check, over the right units.

The unit of replication is a *repetition* (an independent data set of one cell) everywhere except
the simulation-versus-theory checks (a *seed*: one large data set) and the separability
experiment (one sample). Checks over several cells ("the worst cell") are decided by
:func:`decisive_cell`: a check that must hold in every cell fails when one cell's interval
violates it, is inconclusive when none violates but one straddles, and passes only when every
cell's interval satisfies it.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ...claims import Criterion
from ...stats import Estimate, bootstrap_interval, clopper_pearson, mean_interval, paired_difference

REPS = "repetitions"
_PRIORITY = {"fail": 0, "inconclusive": 1, "pass": 2}


def decisive_cell(estimates: dict, criterion: Criterion):
    """The cell whose estimate decides an "in every cell" check, and that estimate.

    Parameters
    ----------
    estimates : dict ``cell -> Estimate`` (at least one).
    criterion : the check's criterion.

    Returns
    -------
    (cell, Estimate) : the first cell by the order fail, inconclusive, pass; ties broken by the
        largest ``|point|`` (the worst cell). The ledger's verdict on that estimate is then the
        verdict of the whole check.
    """
    if not estimates:
        raise ValueError("decisive_cell needs at least one cell")
    return min(estimates.items(), key=lambda kv: (_PRIORITY[criterion.decide(kv[1])], -abs(kv[1].point)))


def _cells(reps: pd.DataFrame, region: str) -> dict:
    return {c: grp for c, grp in reps[reps["region"] == region].groupby("cell", sort=True)}


def relative_bias_estimates(reps: pd.DataFrame, estimator: str, region: str) -> dict:
    """``cell -> Estimate`` of the relative bias ``E[(hat g - g)/g]`` (t interval over repetitions
    where the estimator is defined; cells with fewer than 2 such repetitions are left out)."""
    out = {}
    for cell, grp in _cells(reps, region).items():
        rel = (grp[estimator].to_numpy(float) - grp["gamma_sq"].to_numpy(float)) / grp["gamma_sq"].to_numpy(float)
        rel = rel[np.isfinite(rel)]
        if rel.size >= 2:
            out[cell] = mean_interval(rel, unit=REPS)
    return out


def rmse_ratio_estimates(reps: pd.DataFrame, numerator: str, denominator: str, region: str, rng,
                         resamples: int = 2000) -> dict:
    """``cell -> Estimate`` of ``RMSE(numerator) / RMSE(denominator)``, a paired percentile
    bootstrap over the repetitions where both are defined."""
    out = {}
    for cell, grp in _cells(reps, region).items():
        g2 = grp["gamma_sq"].to_numpy(float)
        a, b = grp[numerator].to_numpy(float) - g2, grp[denominator].to_numpy(float) - g2
        ok = np.isfinite(a) & np.isfinite(b)
        a, b = a[ok], b[ok]
        if a.size < 2:
            continue

        def ratio(index, axis=-1, a=a, b=b):  # vectorised over resamples (rows of index)
            i = index.astype(int)
            return np.sqrt(np.mean(a[i] ** 2, axis=axis) / np.mean(b[i] ** 2, axis=axis))

        est = bootstrap_interval(np.arange(a.size, dtype=float), ratio, unit=REPS, rng=rng, resamples=resamples)
        out[cell] = est
    return out


def pooled_coverage(reps: pd.DataFrame, column: str, region: str, rng, resamples: int = 2000) -> Estimate:
    """Coverage ``sum(covered) / sum(nulls)`` pooled over the cells of ``region``, with a
    percentile bootstrap over repetitions (the null coefficients of one data set share it)."""
    sub = reps[(reps["region"] == region) & (reps["num_nulls"] > 0)]
    covered, nulls = sub[column].to_numpy(float), sub["num_nulls"].to_numpy(float)
    if covered.size < 2:
        raise ValueError("pooled_coverage needs at least 2 repetitions with null coefficients")

    def share(index, axis=-1):  # vectorised over resamples (rows of index)
        i = index.astype(int)
        return covered[i].sum(axis=axis) / nulls[i].sum(axis=axis)

    return bootstrap_interval(np.arange(covered.size, dtype=float), share, unit=REPS, rng=rng, resamples=resamples)


def defined_share(reps: pd.DataFrame, estimator: str, region: str) -> Estimate:
    """Share of repetitions of ``region`` (pooled over its cells) where ``estimator`` is finite,
    with the Clopper-Pearson interval."""
    v = reps.loc[reps["region"] == region, estimator].to_numpy(float)
    return clopper_pearson(int(np.isfinite(v).sum()), int(v.size), unit=REPS)


def separability_share(row) -> Estimate:
    """Clopper-Pearson interval of the share of separable samples on one side of the frontier
    (a row of ``Result.separability``)."""
    reps = int(row["reps"])
    return clopper_pearson(int(round(float(row["frequency"]) * reps)), reps, unit="samples")


def relative_error_of_mean(values, theory_value: float, *, unit: str = "seeds") -> Estimate:
    """Interval of ``mean(values) / theory_value - 1`` (the t interval of the mean, rescaled)."""
    if not np.isfinite(theory_value) or theory_value == 0:
        raise ValueError(f"theory_value must be finite and non-zero, got {theory_value!r}")
    m = mean_interval(np.asarray(values, dtype=float), unit=unit)
    ends = sorted((m.low / theory_value - 1, m.high / theory_value - 1))
    return Estimate(m.point / theory_value - 1, ends[0], ends[1], m.level, unit, m.n, "t interval of the mean, relative")


def adaptation_gain(reps: pd.DataFrame, region: str, ablation: str = "split_isotropic") -> Estimate:
    """Paired difference of squared relative errors, an ablation (``'split_isotropic'`` or the
    plain ``'ridge'``) minus the split estimator, pooled over the repetitions of ``region`` where
    both are defined (t interval). Positive: adapting the penalty to the covariance lowers the error."""
    sub = reps[reps["region"] == region]
    g2 = sub["gamma_sq"].to_numpy(float)
    iso = ((sub[ablation].to_numpy(float) - g2) / g2) ** 2
    split = ((sub["split"].to_numpy(float) - g2) / g2) ** 2
    ok = np.isfinite(iso) & np.isfinite(split)
    return paired_difference(iso[ok], split[ok], unit=REPS)


def rate_slope_estimate(sizes, errors, rng, resamples: int = 2000, level: float = 0.95) -> Estimate:
    """Log-log slope of RMSE against ``n`` with a bootstrap interval over repetitions.

    Parameters
    ----------
    sizes : (S,) sample sizes; errors : (S, R) estimation errors, independent across sizes and
        repetitions (NaN where undefined; dropped). Each resample draws the repetitions of every
        size with replacement and refits the slope.
    """
    sizes = np.asarray(sizes, dtype=float)
    errors = np.asarray(errors, dtype=float)
    if errors.ndim != 2 or errors.shape[0] != sizes.size or sizes.size < 2:
        raise ValueError("errors must have shape (len(sizes), reps) with at least 2 sizes")
    rng = np.random.default_rng(rng)
    cols = [e[np.isfinite(e)] for e in errors]
    if any(c.size < 2 for c in cols):
        raise ValueError("every size needs at least 2 defined errors")
    lx = np.log(sizes)

    def slope(rmse):
        return float(np.polyfit(lx, np.log(rmse), 1)[0])

    point = slope(np.array([np.sqrt(np.mean(c**2)) for c in cols]))
    boot = [c[rng.integers(0, c.size, (resamples, c.size))] for c in cols]  # (B, R_s) per size
    rmse = np.stack([np.sqrt(np.mean(b**2, axis=1)) for b in boot], axis=1)  # (B, S)
    centred = lx - lx.mean()
    ly = np.log(rmse)
    draws = (ly - ly.mean(axis=1, keepdims=True)) @ centred / np.sum(centred**2)
    alpha = (1 - level) / 2
    low, high = np.quantile(draws, [alpha, 1 - alpha])
    return Estimate(point, float(low), float(high), level, REPS, int(sum(c.size for c in cols)),
                    f"percentile bootstrap over repetitions within each n, {resamples} resamples")
