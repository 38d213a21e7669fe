"""Statistics the ledger decides with; the unit of replication is an MDP instance.

Every method runs on the same instances, so comparisons are paired by instance (t intervals of
the paired differences, :func:`compendium.stats.paired_difference`). The regret slope is a
statistic of the mean curve over instances; its interval is the slope plus or minus
``z * jackknife SE`` over instances.
"""

from __future__ import annotations

import numpy as np
import scipy.stats

from ...stats import Estimate, jackknife_se, paired_difference
from .agents import loglog_slope
from .experiments import ADVERSARIES

INSTANCES = "MDP instances"


def mean_curve_slope(checkpoints, per_episode) -> float:
    """Log-log slope of the mean cumulative regret at ``checkpoints``; ``per_episode`` (runs, K)."""
    cps = np.asarray(checkpoints)
    return loglog_slope(cps, np.cumsum(per_episode, axis=1).mean(axis=0)[cps - 1])


def regret_slope_estimate(checkpoints, per_episode, level: float = 0.95) -> Estimate:
    """Slope of the mean cumulative regret with a normal interval from the jackknife SE over
    instances (rows of ``per_episode``)."""
    per_episode = np.asarray(per_episode, dtype=float)
    point = mean_curve_slope(checkpoints, per_episode)
    se = jackknife_se(per_episode, lambda x: mean_curve_slope(checkpoints, x))
    z = float(scipy.stats.norm.ppf((1 + level) / 2))
    return Estimate(point, point - z * se, point + z * se, level, INSTANCES, per_episode.shape[0],
                    "slope of the mean curve, jackknife SE over instances, normal interval")


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
