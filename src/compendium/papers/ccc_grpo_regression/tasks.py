r"""Long-tailed regression tasks, the value grid, DIR shot regions and the metrics.

Tasks: the toy (y long-tailed, ``x = A [l, tanh l, sin 2l] + noise`` in R^16 with
``l = (log y - log 10) / 0.8``, test set balanced over the range as in DIR benchmarks), sklearn's diabetes table with the upper tail of the
training split down-sampled, and statsmodels' RAND health-insurance table (``randhie``: yearly
doctor visits, a count with a long tail). Real tables are loaded through ``compendium.data``.

Shot regions follow Yang et al. (2021): a value bin is *many*-shot with more than 100 training
samples, *medium* with 20 to 100, *few* with fewer than 20; a test sample takes its bin's region.
A test sample is *supported* when its bin holds at least ``SUPPORT_MIN`` = 5 training samples (a
rule on the training counts alone, fixed before any run that used it): the supported few-shot
bins are those with 5 to 19 training samples, where a policy over bins has seen its target at all;
the rest of the few-shot region (0 to 4 samples) is extrapolation.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Task", "value_grid", "to_bins", "shot_regions", "longtail_task", "diabetes_task",
           "randhie_task", "gm_error", "rtm_slope", "regression_metrics", "per_bin_bias", "supported_bins",
           "REGIONS", "SUPPORT_MIN"]

REGIONS = ("many", "medium", "few")
MANY, FEW = 100, 20
#: a value bin with at least this many training samples is *supported* (a quarter of FEW)
SUPPORT_MIN = 5


@dataclass(frozen=True)
class Task:
    """One regression problem on a value grid.

    Attributes
    ----------
    name : str
    x_train, y_train, x_test, y_test : numpy.ndarray
        Standardised features (n, d) and targets (n,).
    edges : numpy.ndarray, shape (K + 1,)
        Bin edges of the value grid; ``centers`` (K,) are the policy's outputs.
    test_region : numpy.ndarray of str, shape (n_test,)
        The region of each test sample ('many' / 'medium' / 'few', or 'head' / 'tail').
    regions : tuple of str
        The regions reported for this task, in order.
    test_supported : numpy.ndarray of bool, shape (n_test,), optional
        Whether the test sample's value bin holds at least ``SUPPORT_MIN`` training samples
        (:func:`supported_bins`; None: not computed for this task).
    """

    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    edges: np.ndarray
    test_region: np.ndarray
    regions: tuple
    test_supported: np.ndarray | None = None

    @property
    def centers(self) -> np.ndarray:
        return (self.edges[:-1] + self.edges[1:]) / 2

    @property
    def bin_width(self) -> float:
        return float(self.edges[1] - self.edges[0])

    @property
    def num_bins(self) -> int:
        return len(self.edges) - 1


def value_grid(low: float, high: float, num_bins: int) -> np.ndarray:
    """``num_bins + 1`` equally spaced edges from ``low`` to ``high``."""
    if not high > low or num_bins < 2:
        raise ValueError(f"need high > low and num_bins >= 2, got {low}, {high}, {num_bins}")
    return np.linspace(low, high, num_bins + 1)


def to_bins(y, edges) -> np.ndarray:
    """Bin index of each value (values outside the grid go to the first / last bin)."""
    k = np.searchsorted(np.asarray(edges), np.asarray(y, float), side="right") - 1
    return np.clip(k, 0, len(edges) - 2)


def shot_regions(train_bins, num_bins: int, many: int = MANY, few: int = FEW) -> np.ndarray:
    """Region of every bin from its training count: > many 'many', < few 'few', else 'medium'."""
    counts = np.bincount(np.asarray(train_bins), minlength=num_bins)
    return np.where(counts > many, "many", np.where(counts < few, "few", "medium"))


def supported_bins(train_bins, num_bins: int, minimum: int = SUPPORT_MIN) -> np.ndarray:
    """Whether each bin holds at least ``minimum`` training samples (from the training split alone)."""
    return np.bincount(np.asarray(train_bins), minlength=num_bins) >= minimum


def _standardise(x_train, x_test):
    mu, sd = x_train.mean(0), x_train.std(0) + 1e-12
    return (x_train - mu) / sd, (x_test - mu) / sd


def _features(y, a, noise, rng):
    # information about y enters through its standardised log l (bounded transforms of l beside it),
    # so the features pin y down equally well in log space everywhere: the prior then shrinks rare
    # values towards the dense ones, the regression to the mean the paper targets
    ell = (np.log(y) - np.log(10.0)) / 0.8
    phi = np.stack([ell, np.tanh(ell), np.sin(2 * ell)], axis=1)
    return phi @ a.T + noise * rng.standard_normal((len(y), a.shape[0]))


def longtail_task(train_size: int, test_size: int, *, distribution: str = "lognormal", noise: float = 1.5,
                  num_bins: int = 100, dim: int = 16, rng: np.random.Generator) -> Task:
    """The toy: long-tailed y on [0, 80), features from a fixed random map plus noise.

    Parameters
    ----------
    train_size, test_size : int
    distribution : {'lognormal', 'pareto_mixture'}
        ``exp(log 10 + 0.8 z)``, or 85 % log-normal (median 8, sigma 0.5) and 15 % ``8 (1 + Pareto(2))``.
    noise : float
        Feature noise standard deviation.
    num_bins, dim : int
    rng : numpy.random.Generator
        Draws the map A, the training labels and all noise.

    Returns
    -------
    Task
        Training labels from the long-tailed law (clipped into the grid), test labels uniform
        over [0.4, 79.6] (balanced), shot regions from the training counts.
    """
    if distribution not in ("lognormal", "pareto_mixture"):
        raise ValueError(f"distribution must be 'lognormal' or 'pareto_mixture', got {distribution!r}")
    edges = value_grid(0.0, 80.0, num_bins)
    a = rng.standard_normal((dim, 3)) / np.sqrt(3)
    if distribution == "lognormal":
        y = np.exp(np.log(10.0) + 0.8 * rng.standard_normal(train_size))
    else:
        tail = rng.random(train_size) < 0.15
        y = np.where(tail, 8.0 * (1 + rng.pareto(2.0, train_size)), np.exp(np.log(8.0) + 0.5 * rng.standard_normal(train_size)))
    y_train = np.clip(y, 0.2, 79.9)
    y_test = rng.uniform(0.4, 79.6, test_size)
    x_train, x_test = _standardise(_features(y_train, a, noise, rng), _features(y_test, a, noise, rng))
    train_bins, test_bins = to_bins(y_train, edges), to_bins(y_test, edges)
    region = shot_regions(train_bins, num_bins)[test_bins]
    supported = supported_bins(train_bins, num_bins)[test_bins]
    return Task("toy", x_train, y_train, x_test, y_test, edges, region, REGIONS, supported)


def diabetes_task(data, target, *, num_bins: int = 100, tail_quantile: float = 0.7, keep_tail: float = 0.2,
                  test_fraction: float = 0.3, rng: np.random.Generator) -> Task:
    """sklearn's diabetes: a random split; training samples above the 70 % quantile kept w.p. 0.2.

    The test split is left as drawn; its regions are 'head' (y at most the quantile) and 'tail'.
    """
    y = np.asarray(target, float)
    threshold = float(np.quantile(y, tail_quantile))
    order = rng.permutation(len(y))
    n_test = int(round(test_fraction * len(y)))
    test, train = order[:n_test], order[n_test:]
    keep = (y[train] <= threshold) | (rng.random(len(train)) < keep_tail)
    train = train[keep]
    edges = value_grid(float(y.min()) - 1.0, float(y.max()) + 1.0, num_bins)
    x_train, x_test = _standardise(np.asarray(data, float)[train], np.asarray(data, float)[test])
    region = np.where(y[test] > threshold, "tail", "head")
    return Task("diabetes", x_train, y[train], x_test, y[test], edges, region, ("head", "tail"))


def randhie_task(data, target, *, train_cap: int, num_bins: int = 100, test_size: int = 4000,
                 rng: np.random.Generator) -> Task:
    """statsmodels' randhie (doctor visits per year, 0 to 77): unit bins centred on 0, 1, ..., K - 1."""
    y = np.asarray(target, float)
    order = rng.permutation(len(y))
    test, train = order[:test_size], order[test_size:test_size + train_cap]
    edges = value_grid(-0.5, num_bins - 0.5, num_bins)
    x_train, x_test = _standardise(np.asarray(data, float)[train], np.asarray(data, float)[test])
    train_bins, test_bins = to_bins(y[train], edges), to_bins(y[test], edges)
    region = shot_regions(train_bins, num_bins)[test_bins]
    supported = supported_bins(train_bins, num_bins)[test_bins]
    return Task("randhie", x_train, y[train], x_test, y[test], edges, region, REGIONS, supported)


# ------------------------------------------------------------------------------------- metrics
def gm_error(y, yhat, floor: float = 1e-3) -> float:
    """Geometric mean of the absolute errors (each floored at ``floor`` so a zero error is finite)."""
    e = np.maximum(np.abs(np.asarray(yhat, float) - np.asarray(y, float)), floor)
    return float(np.exp(np.log(e).mean()))


def rtm_slope(y, yhat) -> float:
    """OLS slope of the prediction on the truth: 1 for calibrated, < 1 under regression to the mean."""
    y, yhat = np.asarray(y, float), np.asarray(yhat, float)
    yc = y - y.mean()
    return float((yc * (yhat - yhat.mean())).sum() / (yc * yc).sum())


def regression_metrics(task: Task, yhat) -> dict:
    """MAE overall and per region, GM, slope and CCC of predictions on the test split."""
    y, yhat = task.y_test, np.asarray(yhat, float)
    from .reward import ccc

    out = {"mae": float(np.abs(yhat - y).mean()), "gm": gm_error(y, yhat), "slope": rtm_slope(y, yhat),
           "ccc": float(ccc(yhat, y))}
    for region in task.regions:
        sel = task.test_region == region
        out[f"mae_{region}"] = float(np.abs(yhat[sel] - y[sel]).mean()) if sel.any() else float("nan")
        out[f"n_{region}"] = int(sel.sum())
    if task.test_supported is not None and "few" in task.regions:
        sel = (task.test_region == "few") & task.test_supported
        out["mae_few_supported"] = float(np.abs(yhat[sel] - y[sel]).mean()) if sel.any() else float("nan")
        out["n_few_supported"] = int(sel.sum())
    return out


def per_bin_bias(task: Task, yhat, num_groups: int = 10) -> np.ndarray:
    """Mean signed error in ``num_groups`` equal slices of the value range (NaN where empty)."""
    y, yhat = task.y_test, np.asarray(yhat, float)
    cuts = np.linspace(task.edges[0], task.edges[-1], num_groups + 1)
    g = np.clip(np.searchsorted(cuts, y, side="right") - 1, 0, num_groups - 1)
    return np.array([(yhat[g == k] - y[g == k]).mean() if (g == k).any() else np.nan for k in range(num_groups)])


def randhie_visits():
    """statsmodels' RAND health-insurance table: 9 plan and health variables, target ``mdvis``.

    The manifest's loader for ``statsmodels_randhie_visits`` (20190 person-years; the number of
    doctor visits in the year, 0 to 77, as float64). Returns an object with ``data`` and ``target``.
    """
    from types import SimpleNamespace

    from statsmodels.datasets import randhie

    frame = randhie.load_pandas().data
    return SimpleNamespace(data=frame.drop(columns="mdvis").to_numpy(dtype=np.float64),
                           target=frame["mdvis"].to_numpy(dtype=np.float64),
                           feature_names=[c for c in frame.columns if c != "mdvis"])
