"""Statistics the ledger decides with; the unit of replication is an MDP instance.

Every method runs on the same instances, so comparisons are paired by instance (t intervals of
the paired differences, :func:`compendium.stats.paired_difference`). The regret slope and the
share of the adversary's loss taken back are statistics of means over instances; their interval
is the statistic plus or minus ``z * jackknife SE`` over instances
(:func:`compendium.stats.jackknife_se`).
"""

from __future__ import annotations

import numpy as np
import scipy.stats

from ...stats import Estimate, jackknife_se, loglog_slope, paired_difference
from .experiments import ADVERSARIES

INSTANCES = "MDP instances"
LOSS_SHARE = 0.1
"""Smallest robustness effect of interest, fixed before the share was computed: the robust policy
must take back at least this share of what the adversary takes from the non-robust policy."""


def mean_curve_slope(checkpoints, per_episode) -> float:
    """Log-log slope of the mean cumulative regret at ``checkpoints``; ``per_episode`` (runs, K)."""
    cps = np.asarray(checkpoints)
    return loglog_slope(cps, np.cumsum(per_episode, axis=1).mean(axis=0)[cps - 1]).point


def _jackknife_estimate(values, statistic, level: float, method: str) -> Estimate:
    """``statistic(values)`` with a normal interval from the jackknife SE over the rows of ``values``."""
    values = np.asarray(values, dtype=float)
    point = float(statistic(values))
    se = jackknife_se(values, statistic)
    z = float(scipy.stats.norm.ppf((1 + level) / 2))
    return Estimate(point, point - z * se, point + z * se, level, INSTANCES, values.shape[0], method)


def regret_slope_estimate(checkpoints, per_episode, level: float = 0.95) -> Estimate:
    """Slope of the mean cumulative regret with a normal interval from the jackknife SE over
    instances (rows of ``per_episode``)."""
    cps = np.asarray(checkpoints)
    cumulative = np.cumsum(np.asarray(per_episode, dtype=float), axis=1)[:, cps - 1]  # (instances, checkpoints)
    return _jackknife_estimate(cumulative, lambda c: loglog_slope(cps, c.mean(axis=0)).point, level,
                               "slope of the mean curve, jackknife SE over instances, normal interval")


def loss_share(robustness: dict, adversary: str, policy: str = "doubly regularised",
               baseline: str = "non-robust soft", level: float = 0.95) -> Estimate:
    r"""Share of the adversary's loss that ``policy`` takes back, with a jackknife interval.

    .. math:: \text{share} = \frac{\overline{W(\pi) - W(\pi_0)}}{\overline{N(\pi_0) - W(\pi_0)}}

    where :math:`W` is the worst-case soft return against ``adversary`` at the checked radius,
    :math:`N` the nominal one and :math:`\pi_0` the ``baseline`` (non-robust) policy; bars are
    means over instances (a ratio of means, so an instance the adversary barely hurts does not
    blow up). 1 means the attack is fully undone, 0 no better than the baseline. The interval is
    the ratio plus or minus ``z`` jackknife SE over instances.
    """
    block = robustness["by_adversary"][adversary]
    returns = block["returns"]
    pairs = np.column_stack([returns[policy] - returns[baseline], block["loss"]])  # (instances, 2)
    return _jackknife_estimate(pairs, lambda x: x[:, 0].mean() / x[:, 1].mean(), level,
                               "ratio of means over instances, jackknife SE, normal interval")


def window_checkpoints(end: int, count: int = 5) -> tuple:
    """``end/2^(count-1), ..., end/2, end``: the checkpoints of a slope window ending at ``end``."""
    return tuple(int(end // 2**j) for j in reversed(range(count)))


def slope_by_window(per_episode, num_checkpoints: int = 5, smallest_start: int = 50) -> list:
    """The regret slope over ``[K'/16, K']`` for ``K' = K, K/2, K/4, ...`` (while ``K'/16`` is at
    least ``smallest_start``), each with its jackknife interval over instances: how the fitted
    slope moves with the horizon inside one run. Rows ``{'end', 'start', 'estimate'}``."""
    per_episode = np.asarray(per_episode, dtype=float)
    end, rows = per_episode.shape[1], []
    while end // 2 ** (num_checkpoints - 1) >= smallest_start:
        cps = window_checkpoints(end, num_checkpoints)
        rows.append({"end": end, "start": cps[0], "estimate": regret_slope_estimate(cps, per_episode[:, :end])})
        end //= 2
    return rows


def tail_excess(regret: dict, worse: str, better: str, start: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-instance mean per-episode regret over episodes ``start..K`` of two learners, ``(worse,
    better)``, each shape (instances,): the inputs of a paired comparison."""
    return regret[worse][:, start:].mean(axis=1), regret[better][:, start:].mean(axis=1)


def robust_gain(robustness: dict, adversary: str, policy: str = "doubly regularised",
                baseline: str = "non-robust soft") -> Estimate:
    """Paired difference of worst-case returns, ``policy`` minus ``baseline``, against one
    adversary at the checked radius (t interval over instances)."""
    r = robustness["by_adversary"][adversary]["returns"]
    return paired_difference(r[policy], r[baseline], unit=INSTANCES)


def beta_sweep_table(robustness: dict, betas) -> list:
    """One row per (adversary, finite beta): the paired gain of the beta-policy over beta = inf
    against that adversary at the checked radius, with its t interval over instances."""
    betas = list(betas)
    reference = betas.index(np.inf)
    rows = []
    for adversary in ADVERSARIES:
        sweep = robustness["by_adversary"][adversary]["sweep"]
        for k, b in enumerate(betas):
            if not np.isfinite(b):
                continue
            est = paired_difference(sweep[k], sweep[reference], unit=INSTANCES)
            rows.append({"adversary": adversary, "beta": float(b), "gain": est.point, "low": est.low,
                         "high": est.high, "wins": int(np.sum(sweep[k] > sweep[reference])),
                         "instances": int(sweep.shape[1]),
                         "holds": "yes" if est.low > 0 else ("no" if est.high < 0 else "undecided")})
    return rows
