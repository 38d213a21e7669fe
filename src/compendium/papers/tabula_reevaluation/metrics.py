"""Evaluation arithmetic: majority baselines, lift, recovery ratio, gap closure, bootstrap, enrichment.

Everything here is plain NumPy/SciPy on accuracies; nothing knows about models or tables.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence

import numpy as np
import scipy.stats

from ...stats import Estimate, bootstrap_interval


def majority_baseline(y_test: Sequence[str]) -> tuple[str, float]:
    """The majority class of the test split and its accuracy there.

    The paper computes the majority baseline on the evaluation split, which makes it the best
    constant answer for that split: a model without skill cannot beat it on average. Ties
    between equally frequent classes go to the smallest label in sorted order, so the baseline
    never depends on row order.

    Parameters
    ----------
    y_test : sequence of str, shape (n_test,)

    Returns
    -------
    label : str
    accuracy : float, fraction of ``y_test`` equal to ``label``.
    """
    if len(y_test) == 0:
        raise ValueError("majority_baseline needs non-empty test labels")
    counts = Counter(str(y) for y in y_test)
    top = max(counts.values())
    label = min(k for k, c in counts.items() if c == top)
    return label, top / len(y_test)


def held_out_majority_accuracy(y_train: Sequence[str], y_test: Sequence[str]) -> float:
    """Test accuracy of the *train* split's majority class (ties to the smallest label).

    The test-split majority of :func:`majority_baseline` is the best constant chosen after seeing
    the test labels, so on a small split it sits above the accuracy of any constant fixed in
    advance (:func:`expected_majority_accuracy`: 0.58 for 24 balanced binary rows). The train
    split's majority is chosen without the test labels; a model with no skill beyond the class
    prior has, on average, no lift over it. On large splits the two baselines coincide.

    Parameters
    ----------
    y_train : sequence of str, shape (n_train,)
    y_test : sequence of str, shape (n_test,)
    """
    if len(y_test) == 0:
        raise ValueError("held_out_majority_accuracy needs non-empty test labels")
    label, _ = majority_baseline(y_train)
    return float(np.mean(np.asarray(y_test, dtype=str) == label))


def lift(accuracy_model, accuracy_majority):
    """Lift over the majority class: ``acc_model - acc_majority`` (elementwise, in accuracy units)."""
    a = np.asarray(accuracy_model, dtype=float)
    b = np.asarray(accuracy_majority, dtype=float)
    if a.shape != b.shape:
        raise ValueError(f"accuracies must have one shape, got {a.shape} and {b.shape}")
    if np.any((a < 0) | (a > 1) | (b < 0) | (b > 1)):
        raise ValueError("accuracies must lie in [0, 1]")
    out = a - b
    return float(out) if out.ndim == 0 else out


def median_lift_by_type(lifts: Sequence[float], task_types: Sequence[str]) -> dict[str, float]:
    """Median lift per task type (``{'binary': ..., 'categorical': ..., 'quartile': ...}``)."""
    lifts = np.asarray(lifts, dtype=float)
    task_types = np.asarray(task_types, dtype=str)
    if lifts.shape != task_types.shape:
        raise ValueError("lifts and task_types must have the same length")
    return {t: float(np.median(lifts[task_types == t])) for t in sorted(set(task_types.tolist()))}


def recovery_ratio(accuracy_without: float, accuracy_with: float) -> float:
    """Share of performance recovered without tabular pretraining: ``acc_without / acc_with``."""
    if accuracy_with <= 0:
        raise ValueError(f"the reference accuracy must be positive, got {accuracy_with}")
    return float(accuracy_without) / float(accuracy_with)


def gap_closure(base: float, augmented: float, target: float) -> float:
    """Fraction of the gap ``target - base`` that ``augmented`` closes: ``(aug - base)/(target - base)``."""
    if target == base:
        raise ValueError("gap_closure is undefined when target equals base (no gap)")
    return (float(augmented) - float(base)) / (float(target) - float(base))


def bootstrap_ci(
    values: Sequence[float],
    rng: np.random.Generator,
    *,
    statistic: Callable[[np.ndarray], np.ndarray] = np.median,
    resamples: int = 2000,
    level: float = 0.95,
) -> tuple[float, float]:
    """Percentile bootstrap confidence interval of ``statistic`` (resampling the values).

    Parameters
    ----------
    values : (n,) floats, n >= 2
    rng : numpy Generator (explicit, so the interval is reproducible)
    statistic : function applied along ``axis=1`` of a (resamples, n) array
    resamples : int >= 100
    level : float in (0, 1)
    """
    values = np.asarray(values, dtype=float)
    if values.ndim != 1 or values.size < 2:
        raise ValueError("bootstrap_ci needs a 1-D array of at least two values")
    if resamples < 100 or not 0 < level < 1:
        raise ValueError("bootstrap_ci needs resamples >= 100 and level in (0, 1)")
    idx = rng.integers(0, values.size, size=(resamples, values.size))
    stats = statistic(values[idx], axis=1)  # (resamples,)
    alpha = (1 - level) / 2
    lo, hi = np.quantile(stats, [alpha, 1 - alpha])
    return float(lo), float(hi)


def median_difference_ci(
    values_a: Sequence[float],
    values_b: Sequence[float],
    rng: np.random.Generator,
    *,
    resamples: int = 2000,
    level: float = 0.95,
) -> dict:
    """``median(a) - median(b)`` with a two-sample percentile bootstrap interval.

    The two groups are independent (different tasks), so each is resampled with replacement
    within itself, ``resamples`` times, and the difference of medians is taken per resample.

    Parameters
    ----------
    values_a : (n_a,) floats, n_a >= 2
    values_b : (n_b,) floats, n_b >= 2
    rng : numpy Generator (explicit, so the interval is reproducible)
    resamples : int >= 100
    level : float in (0, 1)

    Returns
    -------
    dict with ``difference`` (on the data), ``ci`` (low, high), ``median_a``, ``median_b``.
    """
    a = np.asarray(values_a, dtype=float)
    b = np.asarray(values_b, dtype=float)
    if a.ndim != 1 or b.ndim != 1 or a.size < 2 or b.size < 2:
        raise ValueError("median_difference_ci needs two 1-D arrays of at least two values each")
    if resamples < 100 or not 0 < level < 1:
        raise ValueError("median_difference_ci needs resamples >= 100 and level in (0, 1)")
    med_a = np.median(a[rng.integers(0, a.size, size=(resamples, a.size))], axis=1)  # (resamples,)
    med_b = np.median(b[rng.integers(0, b.size, size=(resamples, b.size))], axis=1)  # (resamples,)
    alpha = (1 - level) / 2
    lo, hi = np.quantile(med_a - med_b, [alpha, 1 - alpha])
    return {"difference": float(np.median(a) - np.median(b)), "ci": (float(lo), float(hi)),
            "median_a": float(np.median(a)), "median_b": float(np.median(b))}


def lift_share(lifts: Sequence[float], members: Sequence[bool]) -> float:
    """Share of the summed lift that comes from ``members``: ``sum(lift[members]) / sum(lift)``.

    Only meaningful when the total lift is positive; NaN when it is not (a share of a zero or
    negative total says nothing about where the strength comes from).
    """
    lifts = np.asarray(lifts, dtype=float)
    members = np.asarray(members, dtype=bool)
    if lifts.shape != members.shape or lifts.ndim != 1:
        raise ValueError("lifts and members must be 1-D and of one length")
    total = lifts.sum()
    return float(lifts[members].sum() / total) if total > 0 else float("nan")


def top_fraction_enrichment(scores: Sequence[float], flagged: Sequence[bool], fraction: float = 0.1) -> dict:
    """How over-represented ``flagged`` items are among the top ``fraction`` by score.

    Ties are broken by position (a stable sort), so the result is deterministic. The p-value is the
    one-sided hypergeometric tail ``P(X >= hits)`` for a draw of ``n_top`` items without
    replacement from the whole list.

    Returns
    -------
    dict with ``n_top``, ``hits``, ``share`` (hits/n_top), ``base_rate`` and ``p_value``.
    """
    scores = np.asarray(scores, dtype=float)
    flagged = np.asarray(flagged, dtype=bool)
    if scores.shape != flagged.shape or scores.ndim != 1 or scores.size == 0:
        raise ValueError("scores and flagged must be 1-D and of one length")
    if not 0 < fraction <= 1:
        raise ValueError("fraction must lie in (0, 1]")
    n = scores.size
    n_top = int(np.ceil(fraction * n - 1e-9))
    order = np.argsort(-scores, kind="stable")[:n_top]
    hits = int(flagged[order].sum())
    p = float(scipy.stats.hypergeom.sf(hits - 1, n, int(flagged.sum()), n_top))
    return {"n_top": n_top, "hits": hits, "share": hits / n_top, "base_rate": float(flagged.mean()), "p_value": p}


# ------------------------------------------------------------------ interval estimates for the ledger
def median_interval(values: Sequence[float], rng: np.random.Generator, *, resamples: int = 2000,
                    unit: str = "tasks") -> Estimate:
    """Median over tasks with a percentile bootstrap interval (tasks resampled), as an Estimate."""
    return bootstrap_interval(np.asarray(values, float), np.median, unit=unit, rng=rng, resamples=resamples)


def task_bootstrap(statistic: Callable[..., float], columns: Sequence[Sequence[float]], rng: np.random.Generator, *,
                   resamples: int = 2000, unit: str = "tasks") -> Estimate:
    """Percentile bootstrap of ``statistic(*columns)`` resampling whole tasks (rows of every column together).

    Parameters
    ----------
    statistic : function of the columns, each (n,), returning a float (NaN resamples are dropped)
    columns : equal-length per-task arrays (for example base and TLM accuracies of the same tasks)
    """
    cols = [np.asarray(c, float) for c in columns]
    n = cols[0].size
    if n < 2 or any(c.shape != (n,) for c in cols):
        raise ValueError("task_bootstrap needs equal-length 1-D columns of at least two tasks")
    if resamples < 100:
        raise ValueError("task_bootstrap needs resamples >= 100")
    idx = rng.integers(0, n, size=(resamples, n))  # (resamples, n) whole tasks
    draws = np.array([statistic(*(c[i] for c in cols)) for i in idx], dtype=float)
    undefined = float(np.mean(~np.isfinite(draws)))
    # every resample undefined (no TLM lift anywhere): an unbounded interval; a NaN point fails any criterion
    low, high = np.nanquantile(np.where(np.isfinite(draws), draws, np.nan), [0.025, 0.975]) if undefined < 1 else (-np.inf, np.inf)
    method = f"percentile bootstrap over whole tasks, {resamples} resamples"
    if undefined:
        method += f" ({undefined:.1%} undefined resamples dropped)"
    return Estimate(float(statistic(*cols)), float(low), float(high), 0.95, unit, n, method)


def lift_recovery_contrast(acc_without, acc_with, majority, share: float = 0.5) -> float:
    """``mean lift(no tables) - share * mean lift(TLM)``, defined for every sample of tasks.

    Where the TLM's mean lift is positive this is above 0 exactly when the ratio of mean lifts,
    ``mean lift(no tables) / mean lift(TLM)``, exceeds ``share``; unlike the ratio it has no pole
    at a zero TLM lift, so its point value and every bootstrap resample are defined. Where the TLM has no lift the "share recovered" means nothing:
    the ledger gates the row on the TLM beating the majority class.
    """
    if not 0 < share <= 1:
        raise ValueError(f"share must lie in (0, 1], got {share}")
    majority = np.asarray(majority, float)
    base = np.mean(np.asarray(acc_without, float) - majority)
    tlm = np.mean(np.asarray(acc_with, float) - majority)
    return float(base - share * tlm)


def recovery_of_means(acc_without, acc_with) -> float:
    """:func:`recovery_ratio` of the mean accuracies (the statistic the bootstrap resamples); NaN if the TLM scores 0."""
    target = float(np.mean(acc_with))
    return recovery_ratio(float(np.mean(acc_without)), target) if target > 0 else float("nan")


def gap_closure_of_means(base, augmented, target) -> float:
    """:func:`gap_closure` of mean accuracies, NaN when the TLM does not beat the base."""
    b, a, t = float(np.mean(base)), float(np.mean(augmented)), float(np.mean(target))
    return gap_closure(b, a, t) if t > b else float("nan")


def median_difference_estimate(values_a, values_b, rng: np.random.Generator, *, resamples: int = 2000) -> Estimate:
    """:func:`median_difference_ci` as an Estimate (two independent groups of tasks)."""
    out = median_difference_ci(values_a, values_b, rng, resamples=resamples)
    return Estimate(out["difference"], out["ci"][0], out["ci"][1], 0.95, "tasks",
                    int(np.size(values_a) + np.size(values_b)), f"two-sample percentile bootstrap, {resamples} resamples")


def expected_majority_accuracy(n_rows: int, p: float = 0.5) -> float:
    """``E[max(K, n - K) / n]`` for ``K ~ Binomial(n, p)``: the test-split majority baseline of a binary task.

    With the majority taken on the test split itself, the baseline is above ``max(p, 1 - p)`` by
    construction (0.58 for 24 rows at ``p = 0.5``), so a model at chance has a negative lift.
    """
    if n_rows < 1 or not 0 <= p <= 1:
        raise ValueError("need n_rows >= 1 and p in [0, 1]")
    k = np.arange(n_rows + 1)
    return float(np.sum(scipy.stats.binom.pmf(k, n_rows, p) * np.maximum(k, n_rows - k)) / n_rows)
