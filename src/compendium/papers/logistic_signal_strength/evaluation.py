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


# ------------------------------------------------------------------ power analysis
# The full scale's repetitions per cell are set from a pilot (the recorded full-scale run): for each
# check, the per-repetition spread implied by each cell's interval and the gap between the cell's
# point and the nearest bound of the criterion give the repetitions at which the interval would
# clear that bound with the power below. Fixed before the plan was computed.
PLAN_LEVEL = 0.95  # the level of the ledger's intervals
PLAN_POWER = 0.80
MAX_REPS = 200  # the registry's ceiling on num_reps


def unit_spread(estimate: Estimate, *, log: bool = False) -> float:
    """Per-unit standard deviation implied by an interval: ``half-width / quantile * sqrt(n)``.

    The quantile is Student's t with ``n - 1`` degrees of freedom for a t interval and normal
    otherwise (percentile bootstrap); with ``log=True`` the interval is read on the log scale
    (ratios). The bootstrap intervals of this chapter are asymmetric, so the half-width is the mean
    of the two sides."""
    from scipy import stats as st

    low, high, n = float(estimate.low), float(estimate.high), int(estimate.n)
    if n < 2:
        raise ValueError("unit_spread needs an interval over at least 2 units")
    if log:
        if low <= 0:
            raise ValueError("log=True needs a positive interval")
        low, high = np.log(low), np.log(high)
    q = 1 - (1 - float(estimate.level)) / 2
    quantile = st.t.ppf(q, n - 1) if estimate.method.startswith(("t interval", "paired t")) else st.norm.ppf(q)
    return float((high - low) / 2 / quantile * np.sqrt(n))


def repetitions_needed(spread: float, gap: float, *, level: float = PLAN_LEVEL, power: float = PLAN_POWER) -> float:
    """Units at which a two-sided ``level`` interval clears a bound ``gap`` away from the true value
    with probability ``power``: ``((z_{1-a/2} + z_power) spread / gap)^2``, rounded up; ``inf``
    when ``gap`` is 0 (the value sits on the bound: no number of units decides it)."""
    from scipy import stats as st

    if spread < 0 or gap < 0:
        raise ValueError("spread and gap must be non-negative")
    if gap == 0:
        return float("inf")
    z = st.norm.ppf(1 - (1 - level) / 2) + st.norm.ppf(power)
    return float(np.ceil((z * spread / gap) ** 2))


def plan_check(estimates: dict, lower: float = -np.inf, upper: float = np.inf, *, log: bool = False,
               level: float = PLAN_LEVEL, power: float = PLAN_POWER) -> dict:
    """Repetitions per cell at which an "in every cell" check ``lower <= value <= upper`` decides.

    Each cell's pilot point is taken as its true value. If some cell's point violates the
    criterion, the check is planned to *fail*, and the repetitions are those of the violating cell
    that decides soonest; otherwise it is planned to *pass*, and every cell must clear its nearest
    bound, so the repetitions are the largest over cells (cf. :func:`decisive_cell`).

    Returns a dict: ``planned`` ('pass' / 'fail'), ``cell`` (the deciding cell), ``reps`` (float,
    ``inf`` when a point sits on a bound), ``point``, ``gap`` and ``spread`` of that cell.
    """
    if not estimates:
        raise ValueError("plan_check needs at least one cell")
    tr = np.log if log else (lambda v: v)
    lo = tr(lower) if np.isfinite(lower) else -np.inf
    hi = tr(upper) if np.isfinite(upper) else np.inf
    rows = {}
    for cell, e in estimates.items():
        point = float(tr(e.point))
        spread = unit_spread(e, log=log)
        gap = float(min(abs(point - lo), abs(point - hi)))
        rows[cell] = {"point": float(e.point), "gap": gap, "spread": spread, "violates": not lo <= point <= hi,
                      "reps": repetitions_needed(spread, gap, level=level, power=power)}
    violating = {c: r for c, r in rows.items() if r["violates"]}
    if violating:
        cell = min(violating, key=lambda c: violating[c]["reps"])
        planned = "fail"
    else:
        cell = max(rows, key=lambda c: rows[c]["reps"])
        planned = "pass"
    r = rows[cell]
    return {"planned": planned, "cell": cell, "reps": r["reps"], "point": r["point"], "gap": r["gap"], "spread": r["spread"]}


_CELL_TEXT = r"^(?P<point>\S+) \[(?P<low>\S+), (?P<high>\S+)\] \((?P<level>[\d.]+) %, (?P<n>\d+) (?P<unit>[^)]+)\)$"


def recorded_estimates(claim: dict) -> dict:
    """``cell -> Estimate`` of one ledger row of a record (``claims.json`` / ``record.json``):
    from its per-cell details (``cell_<c>``, as written by ``Estimate.text``) where it has them,
    else ``{None: measured}``. The method is the row's (it sets the quantile of :func:`unit_spread`)."""
    import re

    measured = claim["measured"]
    method = measured.get("method", "") if isinstance(measured, dict) else ""
    out = {}
    for key, text in (claim.get("details") or {}).items():
        m = re.match(_CELL_TEXT, str(text)) if key.startswith("cell_") else None
        if m:
            out[int(key[5:])] = Estimate(float(m["point"]), float(m["low"]), float(m["high"]), float(m["level"]) / 100,
                                         m["unit"], int(m["n"]), method)
    if not out and isinstance(measured, dict):
        out[None] = Estimate.from_dict(measured)
    return out


def plan_from_record(claims: list, checks: dict, *, level: float = PLAN_LEVEL, power: float = PLAN_POWER) -> pd.DataFrame:
    """The plan of each check from a recorded ledger.

    Parameters
    ----------
    claims : list of ledger rows (dicts with ``id``, ``measured``, ``details``).
    checks : ``id -> (lower, upper, log, pooled)``: the criterion's bounds (``-inf`` / ``inf`` for
        a one-sided one), whether the interval is read on the log scale, and how many units of the
        interval one repetition per cell adds (1 for a per-cell interval; the number of pooled
        cells, or of sample sizes of the rate, for a pooled one).

    Returns
    -------
    DataFrame, one row per check found in ``claims``: ``check``, ``unit``, ``pilot_n`` (units of
    the deciding interval in the pilot), the fields of :func:`plan_check` (``reps`` in units of
    the interval) and ``reps_per_cell`` (``reps / pooled``, rounded up).
    """
    by_id = {c["id"]: c for c in claims}
    rows = []
    for cid, (lower, upper, log, pooled) in checks.items():
        if cid not in by_id or not isinstance(by_id[cid].get("measured"), dict):
            continue
        estimates = recorded_estimates(by_id[cid])
        plan = plan_check(estimates, lower, upper, log=log, level=level, power=power)
        rows.append({"check": cid, "unit": estimates[plan["cell"]].unit, "pilot_n": int(estimates[plan["cell"]].n),
                     **plan, "reps_per_cell": float(np.ceil(plan["reps"] / pooled))})
    return pd.DataFrame(rows)


def planned_repetitions(plan: pd.DataFrame, unit: str = REPS, ceiling: int = MAX_REPS, step: int = 10) -> int:
    """Repetitions per cell for the full scale: the largest planned need over the checks counted in
    ``unit`` that the ``ceiling`` affords, rounded up to a multiple of ``step`` (the checks whose
    need exceeds the ceiling stay undecided by design: knife-edges at this scale)."""
    sub = plan[(plan["unit"] == unit) & (plan["reps_per_cell"] <= ceiling)]
    if sub.empty:
        return int(ceiling)
    return int(min(ceiling, step * np.ceil(sub["reps_per_cell"].max() / step)))
