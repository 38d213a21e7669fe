"""The chapter's ledger statistics, kept out of the notebook so that they are tested.

Every function takes the ``arms`` mapping of a run (``arms[name][metric]``: an array of shape
(trained models, batches)) and returns numbers or :class:`compendium.stats.Estimate` objects. The
unit of replication is said in each estimate: *trained generators* (one seed mean per trained
model) for the rows that compare arms across models, *paired batches* for the per-model
intervals of the "every trained model" rows, where the model that decides the claim is picked by
:func:`compendium.stats.deciding_estimate`.
"""

from __future__ import annotations

import numpy as np

from ... import stats

SPREADS = ("dep", "ind")


def seed_means(arms: dict, arm: str, metric: str) -> np.ndarray:
    """One value per trained model: the mean of ``metric`` over its batches."""
    return np.asarray(arms[arm][metric], dtype=float).mean(axis=1)


def per_model(arms: dict, arm: str, metric: str, base: str = "vanilla") -> list:
    """Per trained model, the paired difference ``arm - base`` over its batches (same noise)."""
    a, b = np.asarray(arms[arm][metric], dtype=float), np.asarray(arms[base][metric], dtype=float)
    return [stats.paired_difference(a[j], b[j], unit="paired batches") for j in range(len(b))]


def raises_every_model(arms: dict, arm: str, metrics=SPREADS, base: str = "vanilla") -> dict:
    """``{"metric/model": Estimate}`` of ``arm - base`` for each metric and trained model: the
    replicates of an "every model, every axis" raise."""
    return {f"{m}/{j}": e for m in metrics for j, e in enumerate(per_model(arms, arm, m, base))}


def deciding(estimates: dict, threshold: float = 0.0):
    """``(key, Estimate)`` that decides "every interval lies above ``threshold``"."""
    key = stats.deciding_estimate(estimates, side="low", threshold=threshold)
    return key, estimates[key]


def across_models(arms: dict, arm: str, metric: str, base: str = "vanilla"):
    """Paired difference of seed means ``arm - base``, the interval over trained models."""
    return stats.paired_difference(seed_means(arms, arm, metric), seed_means(arms, base, metric),
                                   unit="trained generators")


def relative_drop(arms: dict, arm: str, metric: str, base: str = "vanilla"):
    """``1 - arm / base`` of the seed means, the interval over trained models."""
    return stats.mean_interval(1 - seed_means(arms, arm, metric) / seed_means(arms, base, metric),
                               unit="trained generators")


def shift_in_sds(arms: dict, arm: str, metrics=SPREADS, base: str = "vanilla") -> float:
    """Largest ``|mean(arm) - mean(base)| / SD(base)`` over ``metrics``, with the SD of ``base``'s
    seed means across trained models (the as-released null control's z-score)."""
    z = []
    for m in metrics:
        b = seed_means(arms, base, m)
        sd = max(float(b.std(ddof=1)), 1e-12)
        z.append(abs(float(seed_means(arms, arm, m).mean() - b.mean())) / sd)
    return float(max(z))


def match_arm(arms: dict, prefix: str, target: str = "gass", dev: int = 0, metric: str = "vendi") -> str:
    """The arm named ``prefix...`` whose mean ``metric`` on model ``dev`` is closest to
    ``target``'s there (ties: the first in the mapping's order). Only ``dev`` is used to pick."""
    cands = [n for n in arms if n.startswith(prefix)]
    if not cands:
        raise ValueError(f"no arm starts with {prefix!r}")
    goal = float(np.mean(arms[target][metric][dev]))
    return min(cands, key=lambda n: abs(float(np.mean(arms[n][metric][dev])) - goal))


def matched_difference(arms: dict, target: str, match: str, metric: str, dev: int = 0):
    """``target - match`` paired over the batches of every model except ``dev`` (held out from the pick)."""
    keep = [j for j in range(len(arms[target][metric])) if j != dev]
    a = np.asarray(arms[target][metric], dtype=float)[keep].ravel()
    b = np.asarray(arms[match][metric], dtype=float)[keep].ravel()
    return stats.paired_difference(a, b, unit="paired batches (test generators)")


def dose_steps(arms: dict, names, metrics=SPREADS) -> dict:
    """``{"metric: a -> b": Estimate}``: the rise of each metric between consecutive arms of a dose
    (``names`` in dose order), paired over trained models."""
    names = list(names)
    return {f"{m}: {a} -> {b}": across_models(arms, b, m, a)
            for m in metrics for a, b in zip(names[:-1], names[1:])}
