"""Score sources: populations of (uncertainty, error) pairs with exact population risk.

A source draws calibration sets and gives the *population* acceptance and accepted-error
probabilities of any threshold, so the risk of a calibrated threshold is evaluated exactly (an
infinite test set) instead of on a finite test split.

- :class:`GaussianSource`: ``E ~ Bernoulli(base_error_rate)``, ``u | E ~ N(separation * E, 1)``.
- :class:`PoolSource`: the empirical distribution of out-of-fold (u, E) pairs of a small model
  trained here on a bundled sklearn data set; calibration sets are drawn from it with
  replacement, so calibration and test points are i.i.d. (hence exchangeable) by construction.
- :class:`PairedPoolSource`: the same for two models scored on the same inputs (routing).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import optimize, special

CV_FOLDS = 5


def _std_normal_cdf(x):
    return special.ndtr(x)


@dataclass(frozen=True)
class GaussianSource:
    """Synthetic scores: wrong answers have uncertainty shifted up by ``separation``."""

    separation: float
    base_error_rate: float

    @property
    def name(self) -> str:
        return f"gauss-{self.separation:g}"

    @property
    def error_rate(self) -> float:
        return self.base_error_rate

    def sample(self, rng: np.random.Generator, num_splits: int, size: int) -> tuple[np.ndarray, np.ndarray]:
        """``num_splits`` calibration sets of ``size`` points: (u, e), each (num_splits, size)."""
        e = (rng.random((num_splits, size)) < self.base_error_rate).astype(np.int64)
        u = rng.standard_normal((num_splits, size)) + self.separation * e
        return u, e

    def accept_probability(self, lam) -> np.ndarray:
        """``P(u <= lambda)`` (0 at ``-inf``)."""
        lam = np.asarray(lam, dtype=float)
        p = self.base_error_rate
        return (1 - p) * _std_normal_cdf(lam) + p * _std_normal_cdf(lam - self.separation)

    def accepted_error_probability(self, lam) -> np.ndarray:
        """``P(u <= lambda, E = 1)``."""
        lam = np.asarray(lam, dtype=float)
        return self.base_error_rate * _std_normal_cdf(lam - self.separation)

    def quantile(self, levels) -> np.ndarray:
        """Thresholds with ``P(u <= lambda) = level`` (``+inf`` at level 1)."""
        out = []
        for q in np.atleast_1d(levels):
            if q >= 1:
                out.append(np.inf)
            else:
                out.append(optimize.brentq(lambda x: float(self.accept_probability(x)) - q, -40, 40, xtol=1e-12))
        return np.array(out)


@dataclass(frozen=True, eq=False)
class PoolSource:
    """A finite population: every pair (scores[i], errors[i]) has probability 1/N."""

    name: str
    scores: np.ndarray
    errors: np.ndarray

    def __post_init__(self) -> None:
        order = np.argsort(self.scores, kind="stable")
        object.__setattr__(self, "_sorted", self.scores[order])
        object.__setattr__(self, "_cum_err", np.concatenate([[0], np.cumsum(self.errors[order])]))

    @property
    def error_rate(self) -> float:
        return float(self.errors.mean())

    def sample(self, rng: np.random.Generator, num_splits: int, size: int) -> tuple[np.ndarray, np.ndarray]:
        idx = rng.integers(0, self.scores.size, size=(num_splits, size))
        return self.scores[idx], self.errors[idx].astype(np.int64)

    def _count(self, lam) -> np.ndarray:
        return np.searchsorted(self._sorted, np.asarray(lam, dtype=float), side="right")

    def accept_probability(self, lam) -> np.ndarray:
        return self._count(lam) / self.scores.size

    def accepted_error_probability(self, lam) -> np.ndarray:
        return self._cum_err[self._count(lam)] / self.scores.size

    def quantile(self, levels) -> np.ndarray:
        """Smallest pool score with ``P(u <= lambda) >= level``."""
        k = np.ceil(np.atleast_1d(levels) * self.scores.size - 1e-9).astype(int)
        return self._sorted[np.clip(k, 1, self.scores.size) - 1]


@dataclass(frozen=True, eq=False)
class PairedPoolSource:
    """Two models' out-of-fold (u, E) on the same N inputs; rows drawn with replacement."""

    name: str
    first: PoolSource
    second: PoolSource

    def sample(self, rng: np.random.Generator, num_splits: int, size: int):
        """(u1, e1, u2, e2), each (num_splits, size), for the same drawn inputs."""
        idx = rng.integers(0, self.first.scores.size, size=(num_splits, size))
        return (self.first.scores[idx], self.first.errors[idx].astype(np.int64),
                self.second.scores[idx], self.second.errors[idx].astype(np.int64))

    def system_probabilities(self, lam1, lam2) -> tuple[np.ndarray, np.ndarray]:
        """Population ``P(S_sys = 1)`` and ``P(S_sys = 1, E_sys = 1)`` for threshold pairs (S,)."""
        lam1 = np.asarray(lam1, dtype=float)[:, None]
        lam2 = np.asarray(lam2, dtype=float)[:, None]
        s1 = self.first.scores[None, :] <= lam1
        s2 = ~s1 & (self.second.scores[None, :] <= lam2)
        accept = (s1 | s2).mean(axis=1)
        err = (s1 & (self.first.errors[None, :] == 1)) | (s2 & (self.second.errors[None, :] == 1))
        return accept, err.mean(axis=1)


def oracle_retention(source, alpha: float, grid_points: int = 20001) -> float:
    """Largest population acceptance ``P(u <= lambda)`` with ``P(E = 1 | u <= lambda) <= alpha``."""
    if isinstance(source, PoolSource):
        lam = source._sorted
    else:
        lam = np.linspace(-12, 12 + source.separation, grid_points)
    acc = source.accept_probability(lam)
    err = source.accepted_error_probability(lam)
    ok = (acc > 0) & (err <= alpha * acc + 1e-15)
    return float(acc[ok].max()) if ok.any() else 0.0


# ---------------------------------------------------------------------------- sklearn models
def _cross_fitted_scores(model, X, y, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Out-of-fold ``u = 1 - max softmax`` and ``E = 1{argmax != y}`` for every row of X."""
    from sklearn.base import clone
    from sklearn.model_selection import StratifiedKFold

    proba = np.zeros((len(y), np.unique(y).size))
    for train, test in StratifiedKFold(CV_FOLDS, shuffle=True, random_state=seed).split(X, y):
        proba[test] = clone(model).fit(X[train], y[train]).predict_proba(X[test])
    u = np.round(1.0 - proba.max(axis=1), 12)  # rounding makes near-equal scores exact ties across BLAS builds
    return u, (proba.argmax(axis=1) != y).astype(np.int64)


def _logistic(num_components: int | None = None):
    from sklearn.decomposition import PCA
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    steps = [StandardScaler()]
    if num_components is not None:
        steps.append(PCA(num_components, svd_solver="covariance_eigh"))
    return make_pipeline(*steps, LogisticRegression(solver="newton-cholesky", max_iter=100))


# Deliberately weak classifiers: their error rates exceed every alpha, so the constraint binds.
DATASET_MODELS = {
    "digits": dict(dataset="digits", features=None, components=3),
    "breast_cancer": dict(dataset="breast_cancer", features=("mean texture", "mean symmetry"), components=None),
    "wine": dict(dataset="wine", features=("alcohol",), components=None),
}
ROUTING_COMPONENTS = (3, 8)  # digits: weak model on 3 PCA components, strong model on 8


def _load(name: str):
    from compendium import data

    spec = DATASET_MODELS[name]
    bunch = data.load(spec["dataset"])  # checked against data/manifest.yaml
    X, y = bunch.data, bunch.target
    if spec["features"] is not None:
        names = list(bunch.feature_names)
        X = X[:, [names.index(f) for f in spec["features"]]]
    return X, y, spec


def dataset_source(name: str, seed: int) -> PoolSource:
    """Out-of-fold scores of the weak classifier for ``name`` in :data:`DATASET_MODELS`."""
    if name not in DATASET_MODELS:
        raise ValueError(f"unknown data set {name!r}; choose from {sorted(DATASET_MODELS)}")
    X, y, spec = _load(name)
    u, e = _cross_fitted_scores(_logistic(spec["components"]), X, y, seed)
    return PoolSource(name, u, e)


def majority_share(name: str) -> float:
    """Accuracy of always answering the most frequent class of the data set behind ``name``."""
    if name not in DATASET_MODELS:
        raise ValueError(f"unknown data set {name!r}; choose from {sorted(DATASET_MODELS)}")
    _, y, _ = _load(name)
    return float(np.bincount(np.asarray(y, dtype=np.int64)).max() / len(y))


def accuracy_over_baseline(source: PoolSource, baseline: float, *, level: float = 0.95):
    """Out-of-fold accuracy of a pool's model minus a trivial baseline's accuracy (a constant).

    The interval is the Clopper-Pearson interval of the accuracy over the pool's inputs, shifted
    by ``baseline`` (the majority-class share of the same pool, known exactly).
    """
    from compendium import stats

    errors = np.asarray(source.errors, dtype=np.int64)
    acc = stats.clopper_pearson(int((errors == 0).sum()), errors.size, level=level, unit="inputs")
    return stats.Estimate(acc.point - baseline, acc.low - baseline, acc.high - baseline, acc.level, acc.unit, acc.n,
                          f"{acc.method}, minus the {baseline:.4f} baseline")


def routing_source(seed: int) -> PairedPoolSource:
    """Digits scored by a weak (3 PCA components) and a stronger (8 components) logistic model."""
    X, y, _ = _load("digits")
    weak, strong = (PoolSource(f"digits-pca{k}", *_cross_fitted_scores(_logistic(k), X, y, seed))
                    for k in ROUTING_COMPONENTS)
    return PairedPoolSource("digits-routing", weak, strong)
