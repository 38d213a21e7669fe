"""The chapter's experiment: ``Config`` (the registry parameters), ``run(config) -> Result``."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ...runtime import make_rng
from . import estimators as est
from . import theory
from ...validation import require_int as _require_int, require_number as _require_number

PUBLISHED_POINT = {"kappa": 0.2, "gamma_sq": 5.0}  # reference point of Sur & Candes (2019), used by SLOE
PUBLISHED_VALUES = {"alpha": 1.499, "lam": 3.027, "sigma": 2.121}  # Sur & Candes (2019), not this paper
FRONTIER_MARGIN = 0.05  # cells this far inside / beyond kappa_h(gamma) are 'inside' / 'beyond'
SEPARABILITY_GAMMA_SQ = 5.0
CROSSCHECK_SEPARABLE = (200, 60)  # (n, p) of the separable sample: p/n1 = 0.6 > 1/2 >= kappa_h
CI_LEVEL = 0.90
Z_CI = 1.6448536269514722  # standard normal 95% quantile (two-sided 90% interval)
ESTIMATORS = ("oracle", "naive", "sloe", "split", "split_isotropic", "ridge", "split_eta", "probe")
# plain-ridge ablation: its link-slope map is calibrated by simulation under Sigma = I (fixed before any run)
RIDGE_CALIBRATION_GRID = tuple(np.geomspace(0.5, 40.0, 8))
RIDGE_CALIBRATION_REPS = 8


@dataclass(frozen=True)
class Config:
    """Parameters of one run (names match the notebook's parameters cell and the registry).

    Parameters
    ----------
    cells : tuple of (kappa, gamma_sq)
        Cells of the estimator comparison, ``kappa = p/n`` in (0, 0.45] (the split penalty needs
        ``p < n/2``), ``gamma_sq`` in (0, 40]. The first cell must lie inside the MLE frontier by
        ``FRONTIER_MARGIN``: it also hosts the rate and ProbeFrontier runs.
    num_samples, num_reps : int
        ``n`` and repetitions per cell of the comparison.
    ridge_strength : float
        ``lambda_0`` of the split penalty ``(lambda_0/2) b^T Sigma_2 b``.
    ar1_correlation : float
        Lag-one correlation of the AR(1) covariates, in [0, 0.95].
    quadrature_nodes : int
        Gauss-Hermite nodes per axis of the asymptotic systems.
    separability_samples, separability_reps : int
        ``n`` and repetitions per side of the frontier in the separability experiment.
    simulation_samples, simulation_seeds : int
        ``n`` and seeds of the simulation-versus-theory runs at ``kappa = 0.2, gamma^2 = 5``.
    rate_sizes : tuple of int
        Increasing sample sizes of the RMSE-versus-n experiment (first cell, ``num_reps`` each).
    probe_reps : int
        Repetitions of ProbeFrontier in the first cell (0 skips it).
    crosscheck_samples : int
        ``n`` of the cvxpy / L-BFGS / Newton cross-check of the split fit.
    seed : int
    """

    cells: tuple = ((0.2, 5.0), (0.1, 10.0), (0.3, 15.0), (0.4, 5.0))
    num_samples: int = 500
    num_reps: int = 20
    ridge_strength: float = 0.03
    ar1_correlation: float = 0.5
    quadrature_nodes: int = 64
    separability_samples: int = 300
    separability_reps: int = 100
    simulation_samples: int = 2000
    simulation_seeds: int = 10
    rate_sizes: tuple = (200, 400, 800)
    probe_reps: int = 0
    crosscheck_samples: int = 400
    seed: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "cells", tuple(tuple(float(v) for v in c) for c in self.cells))
        object.__setattr__(self, "rate_sizes", tuple(self.rate_sizes))
        if not self.cells or any(len(c) != 2 for c in self.cells):
            raise ValueError(f"cells must be a non-empty list of (kappa, gamma_sq) pairs, got {self.cells!r}")
        for kappa, g2 in self.cells:
            if not 0 < kappa <= 0.45 or not 0 < g2 <= 40:
                raise ValueError(f"each cell needs kappa in (0, 0.45] and gamma_sq in (0, 40], got {(kappa, g2)!r}")
        k0, g0 = self.cells[0]
        if k0 > theory.mle_frontier_kappa(np.sqrt(g0)) - FRONTIER_MARGIN:
            raise ValueError(f"the first cell {self.cells[0]} must lie inside the MLE frontier by {FRONTIER_MARGIN}")
        _require_int("num_samples", self.num_samples, 100, 10000)
        _require_int("num_reps", self.num_reps, 2, 200)
        _require_int("quadrature_nodes", self.quadrature_nodes, 16, 200)
        _require_int("separability_samples", self.separability_samples, 50, 4000)
        _require_int("separability_reps", self.separability_reps, 5, 500)
        _require_int("simulation_samples", self.simulation_samples, 200, 20000)
        _require_int("simulation_seeds", self.simulation_seeds, 2, 100)
        _require_int("probe_reps", self.probe_reps, 0, 200)
        _require_int("crosscheck_samples", self.crosscheck_samples, 100, 4000)
        _require_int("seed", self.seed, 0, 2**32 - 1)
        if len(self.rate_sizes) < 3 or any(b <= a for a, b in zip(self.rate_sizes, self.rate_sizes[1:])):
            raise ValueError(f"rate_sizes needs at least 3 increasing sizes, got {self.rate_sizes!r}")
        for n in self.rate_sizes:
            _require_int("every entry of rate_sizes", n, 100, 20000)
        _require_number("ridge_strength", self.ridge_strength, 0, 10, low_open=True)
        _require_number("ar1_correlation", self.ar1_correlation, 0, 0.95)






@dataclass(frozen=True, eq=False)
class Result:
    """What :func:`run` returns: tables and numbers, never plots.

    Attributes
    ----------
    published : dict  solution at the published point (alpha, lam, sigma, residual).
    frontier_gamma_at_0_2 : float  ``kappa_h^{-1}(0.2)``.
    frontier : DataFrame  ``gamma``, ``kappa_h`` on a grid (phase diagram).
    separability : DataFrame  one row per side: kappa, p, frequency of separable samples.
    simulation : DataFrame  one row per (estimator, seed): alpha_hat, norm_sq, theory values.
    reps : DataFrame  one row per (cell, rep): estimates of every estimator and coverage counts.
    summary : DataFrame  one row per (cell, estimator): bias, relative bias, RMSE, defined fraction.
    rate : DataFrame  one row per n: RMSE of the split estimator; ``rate_slope`` its log-log slope;
        ``rate_errors`` the errors, shape (len(rate_sizes), num_reps).
    crosscheck : dict  cvxpy / L-BFGS / Newton agreement (with cvxpy's attempts, the solver that
        solved and ``cvxpy_unsolved``, 1 if no attempt reported 'optimal') and statuses on a
        separable sample.
    curves : dict  ``kappa -> {'mle': TheoryCurve or None, 'split': TheoryCurve}``, with only the
        curves the run needed (the MLE curve of a beyond-frontier ``kappa`` may be absent).
    """

    published: dict
    frontier_gamma_at_0_2: float
    frontier: pd.DataFrame
    separability: pd.DataFrame
    simulation: pd.DataFrame
    reps: pd.DataFrame
    summary: pd.DataFrame
    rate: pd.DataFrame
    rate_slope: float
    rate_errors: np.ndarray
    crosscheck: dict
    curves: dict


def cell_region(kappa: float, gamma_sq: float) -> str:
    """'inside' / 'beyond' the MLE frontier by at least ``FRONTIER_MARGIN``, else 'near'."""
    kh = theory.mle_frontier_kappa(np.sqrt(gamma_sq))
    if kappa <= kh - FRONTIER_MARGIN:
        return "inside"
    return "beyond" if kappa >= kh + FRONTIER_MARGIN else "near"


def plan_checks(cells, rate_sizes) -> dict:
    """The checks the power analysis plans, as ``id -> (lower, upper, log, pooled)`` for
    :func:`evaluation.plan_from_record`: each criterion's bounds as the ledger states them, and how
    many units one more repetition per cell adds to the check's interval (per-cell checks 1; pooled
    checks the number of pooled cells; the rate one per sample size). The simulation checks are
    planned too (their unit is a seed); the separability shares are not (see the chapter's Limits)."""
    regions = [cell_region(k, g) for k, g in cells]
    inside, beyond = max(1, regions.count("inside")), max(1, regions.count("beyond"))
    return {"split-bias-inside": (-0.10, 0.10, False, 1), "split-bias-beyond": (-0.10, 0.10, False, 1),
            "split-vs-sloe-rmse": (-np.inf, 1.2, True, 1), "debiased-coverage": (0.87, 0.93, False, inside),
            "covariance-adaptation": (0.0, np.inf, False, beyond),
            "covariance-adaptation-ridge": (0.0, np.inf, False, beyond),
            "rate-slope": (-0.7, -0.3, False, len(rate_sizes)),
            "mle-alpha-simulation": (-0.03, 0.03, False, 1), "mle-norm-simulation": (-0.05, 0.05, False, 1),
            "split-alpha-simulation": (-0.03, 0.03, False, 1), "split-norm-simulation": (-0.05, 0.05, False, 1)}


def separability_experiment(gamma_sq, n, reps, correlation, seed) -> pd.DataFrame:
    """Frequency of separable samples at ``kappa_h(gamma) -+ FRONTIER_MARGIN`` (``reps`` each);
    each sample is decided by a certificate or, failing both, by the LP (:func:`decide_separable`)."""
    kh = theory.mle_frontier_kappa(np.sqrt(gamma_sq))
    rows = []
    for side, kappa in (("inside", kh - FRONTIER_MARGIN), ("outside", kh + FRONTIER_MARGIN)):
        p = int(round(kappa * n))
        rng = make_rng(seed, 1, int(side == "outside"))
        sep = [est.decide_separable(*est.simulate(n, p, gamma_sq, correlation, rng)[:2])[0] for _ in range(reps)]
        rows.append({"side": side, "kappa": p / n, "p": p, "n": n, "frequency": float(np.mean(sep)), "reps": reps})
    return pd.DataFrame(rows)


def simulation_vs_theory(config: Config, curve_split: theory.TheoryCurve) -> pd.DataFrame:
    """MLE and split fits at the published point: ``alpha_hat = b^T Sigma beta / gamma^2`` and
    ``norm_sq = b^T Sigma b`` per seed, with the theory's ``alpha`` and ``alpha^2 gamma^2 + sigma^2``."""
    g2, kappa, n = PUBLISHED_POINT["gamma_sq"], PUBLISHED_POINT["kappa"], config.simulation_samples
    p = int(round(kappa * n))
    Sigma = est.ar1_covariance(p, config.ar1_correlation)
    mle = theory.solve_system(kappa, np.sqrt(g2), nodes=config.quadrature_nodes)
    a_s, _, s_s = curve_split.parameters(g2)
    theory_values = {"mle": (mle.alpha, mle.alpha**2 * g2 + mle.sigma**2),
                     "split": (float(a_s), float(a_s**2 * g2 + s_s**2))}
    rows = []
    for k in range(config.simulation_seeds):
        X, y, beta = est.simulate(n, p, g2, config.ar1_correlation, make_rng(config.seed, 2, k))
        fits = {"mle": est.fit_logistic(X, y)[0],
                "split": est.fit_split(*est.split_halves(X, y)[:3], config.ridge_strength)}
        for name, b in fits.items():
            rows.append({"estimator": name, "seed": k, "alpha_hat": b @ Sigma @ beta / g2, "norm_sq": b @ Sigma @ b,
                         "alpha_theory": theory_values[name][0], "norm_sq_theory": theory_values[name][1]})
    return pd.DataFrame(rows)


def _one_rep(X, y, beta, curves, config, rng, probe: bool, ablation: bool = False) -> dict:
    """All estimates of ``gamma^2`` on one data set, plus null-coverage counts."""
    n = X.shape[0]
    row = {"oracle": float(np.mean((X @ beta) ** 2))}
    mle = est.mle_statistics(X, y)
    row.update(mle_exists=mle["exists"], separable=mle["separable"])
    row["split"] = row["split_eta"] = float("nan")
    try:
        split = est.split_statistics(X, y, config.ridge_strength)
    except RuntimeError:  # the fit did not converge: an outcome, recorded as unsolved and counted
        split = None
    row["split_unsolved"] = int(split is None)
    if split is not None:
        row["split"] = float(curves["split"].invert("link_slope", split["link_slope"])[0])
        try:  # eta^2 of the split fit is not monotone in gamma^2 at every kappa (0.4): then undefined
            row["split_eta"] = float(curves["split"].invert("eta_sq", split["eta_sq"])[0])
        except ValueError:
            pass
    row["split_isotropic"] = row["ridge"] = float("nan")
    if ablation:  # the isotropic-penalty ablation, run where the ledger uses it (beyond the frontier)
        try:
            iso = est.split_statistics(X, y, config.ridge_strength, penalty="isotropic", rng=rng)
            row["split_isotropic"] = float(curves["split"].invert("link_slope", iso["link_slope"])[0])
        except RuntimeError:  # Newton did not converge: recorded as undefined, counted in 'defined'
            pass
        # the plain-ridge ablation, inverted with its own map under the isotropic design it assumes
        try:
            ridge = est.split_statistics(X, y, config.ridge_strength, penalty="ridge")
            row["ridge"] = float(curves["ridge"].invert(ridge["link_slope"])[0])
        except RuntimeError:
            pass
    row.update(naive=float("nan"), sloe=float("nan"), cover_debiased=0, cover_classical=0, num_nulls=0)
    if mle["exists"]:
        b = mle["beta_hat"]
        row["naive"] = float(np.mean((X @ b) ** 2))
        if curves["mle"] is not None:
            row["sloe"] = float(curves["mle"].invert("eta_sq", mle["eta_sq"])[0])
            if np.isfinite(row["split"]):
                sigma = float(curves["mle"].parameters(row["split"])[2])
                nulls = beta == 0
                row["cover_debiased"] = int(est.debiased_null_cover(b, mle["cov_inv_diag"], sigma, n, Z_CI)[nulls].sum())
                row["cover_classical"] = int(est.classical_null_cover(b, mle["fisher_var"], Z_CI)[nulls].sum())
                row["num_nulls"] = int(nulls.sum())
    row["probe"] = est.probe_frontier(X, y, rng) if probe else float("nan")
    return row


class _Curves(dict):
    """``{'mle': ..., 'split': ..., 'ridge': ...}`` at one ``kappa``, each solved on first use (the MLE curve of a
    cell beyond the frontier is needed only if some repetition there still has an MLE)."""

    def __init__(self, kappa: float, config: Config):
        super().__init__()
        self.kappa, self.config = kappa, config

    def __missing__(self, kind: str):
        nodes = self.config.quadrature_nodes
        if kind == "mle":
            curve = theory.theory_curve(self.kappa, nodes=nodes) if self.kappa < 0.5 else None
        elif kind == "split":
            curve = theory.theory_curve(self.kappa, theory.split_mixture(self.config.ridge_strength), nodes=nodes)
        elif kind == "ridge":  # Monte Carlo map of the plain-ridge ablation at this cell's (n, p), Sigma = I
            n = self.config.num_samples
            curve = est.RidgeCalibration(n, int(round(self.kappa * n)), self.config.ridge_strength,
                                         RIDGE_CALIBRATION_GRID, RIDGE_CALIBRATION_REPS,
                                         make_rng(self.config.seed, 7, int(round(self.kappa * 10**4))))
        else:
            raise KeyError(kind)
        self[kind] = curve
        return curve


def summarize(reps: pd.DataFrame) -> pd.DataFrame:
    """Bias, relative bias, RMSE and defined fraction per (cell, estimator), over finite estimates."""
    rows = []
    for (cell, kappa, g2, region), grp in reps.groupby(["cell", "kappa", "gamma_sq", "region"], sort=True):
        for name in ESTIMATORS:
            v = grp[name].to_numpy(float)
            ok = np.isfinite(v)
            err = v[ok] - g2
            rows.append({"cell": cell, "kappa": kappa, "gamma_sq": g2, "region": region, "estimator": name,
                         "defined": float(ok.mean()), "count": int(ok.sum()),
                         "bias": float(err.mean()) if ok.any() else np.nan,
                         "relative_bias": float(err.mean() / g2) if ok.any() else np.nan,
                         "rmse": float(np.sqrt(np.mean(err**2))) if ok.any() else np.nan})
    return pd.DataFrame(rows)


def rate_experiment(config: Config, curves: dict) -> tuple[pd.DataFrame, float, np.ndarray]:
    """RMSE of the split estimator against ``n`` in the first cell; log-log slope by least squares;
    the errors themselves, shape (len(rate_sizes), num_reps)."""
    kappa, g2 = config.cells[0]
    rows, all_errs = [], []
    for j, n in enumerate(config.rate_sizes):
        p = int(round(kappa * n))
        errs = []
        for r in range(config.num_reps):
            X, y, _ = est.simulate(n, p, g2, config.ar1_correlation, make_rng(config.seed, 4, j, r))
            try:
                b = est.split_statistics(X, y, config.ridge_strength)["link_slope"]
            except RuntimeError:  # unsolved: NaN, dropped by the slope's bootstrap and counted in 'defined'
                errs.append(float("nan"))
                continue
            errs.append(float(curves["split"].invert("link_slope", b)[0]) - g2)
        errs = np.array(errs)
        all_errs.append(errs)
        rows.append({"n": n, "p": p, "rmse": float(np.sqrt(np.nanmean(errs**2))), "defined": float(np.isfinite(errs).mean())})
    df = pd.DataFrame(rows)
    slope = float(np.polyfit(np.log(df["n"]), np.log(df["rmse"]), 1)[0])
    return df, slope, np.array(all_errs)


def solver_crosscheck(config: Config) -> dict:
    """cvxpy (Clarabel) vs L-BFGS vs Newton on one split problem of the first cell's ``kappa``;
    cvxpy on a separable sample without and with the penalty."""
    kappa, g2 = config.cells[0]
    n = config.crosscheck_samples
    X, y, _ = est.simulate(n, int(round(kappa * n)), g2, config.ar1_correlation, make_rng(config.seed, 5))
    X1, y1, X2, _ = est.split_halves(X, y)
    fits = {k: est.fit_split(X1, y1, X2, config.ridge_strength, backend=k) for k in ("lbfgs", "newton")}
    # cvxpy's status is an outcome: retried with another solver, and if no attempt reports
    # 'optimal' the problem is recorded as unsolved (differences NaN, so the agreement row fails)
    fits["cvxpy"], attempts = est.solve_cvxpy_retrying(X1, y1, X2, config.ridge_strength)
    nan = np.full(X1.shape[1], np.nan)
    cvx = nan if fits["cvxpy"] is None else fits["cvxpy"]
    scale = np.linalg.norm(fits["newton"])
    out = {"n": n, "p": X.shape[1],
           "cvxpy_vs_lbfgs": float(np.linalg.norm(cvx - fits["lbfgs"]) / scale),
           "cvxpy_vs_newton": float(np.linalg.norm(cvx - fits["newton"]) / scale),
           "lbfgs_vs_newton": float(np.linalg.norm(fits["lbfgs"] - fits["newton"]) / scale),
           "cvxpy_attempts": "; ".join(f"{solver}: {status}" for solver, status in attempts),
           "cvxpy_solver": attempts[-1][0] if fits["cvxpy"] is not None else "none",
           "cvxpy_unsolved": int(fits["cvxpy"] is None)}
    n_s, p_s = CROSSCHECK_SEPARABLE
    Xs, ys, _ = est.simulate(n_s, p_s, g2, config.ar1_correlation, make_rng(config.seed, 6))
    X1, y1, X2, _ = est.split_halves(Xs, ys)
    b_unreg, status_unreg = est.solve_cvxpy(X1, y1)
    b_reg, status_reg = est.solve_cvxpy(X1, y1, X2, config.ridge_strength)
    out.update(separable_n1=X1.shape[0], separable_p=p_s, separable=est.is_separable(X1, y1),
               unregularized_status=status_unreg, regularized_status=status_reg,
               unregularized_norm=float(np.linalg.norm(b_unreg)) if b_unreg is not None else float("nan"),
               regularized_norm=float(np.linalg.norm(b_reg)) if b_reg is not None else float("nan"))
    return out


def run(config: Config) -> Result:
    """Run every experiment of the chapter (BLAS pinned to one thread: small matrices, shared cores)."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1):
        return _run(config)


def _run(config: Config) -> Result:
    published = theory.solve_system(PUBLISHED_POINT["kappa"], np.sqrt(PUBLISHED_POINT["gamma_sq"]), nodes=config.quadrature_nodes)
    gammas = np.linspace(0.0, 6.0, 31)
    frontier = pd.DataFrame({"gamma": gammas, "kappa_h": [theory.mle_frontier_kappa(g) for g in gammas]})
    kappas = sorted({c[0] for c in config.cells} | {PUBLISHED_POINT["kappa"]})
    curves = {k: _Curves(k, config) for k in kappas}

    rows = []
    for c, (kappa, g2) in enumerate(config.cells):
        n, region = config.num_samples, cell_region(kappa, g2)
        p = int(round(kappa * n))
        for r in range(config.num_reps):
            rng = make_rng(config.seed, 3, c, r)
            X, y, beta = est.simulate(n, p, g2, config.ar1_correlation, rng)
            row = _one_rep(X, y, beta, curves[kappa], config, rng, probe=(c == 0 and r < config.probe_reps),
                           ablation=(region == "beyond"))
            rows.append({"cell": c, "kappa": kappa, "gamma_sq": g2, "region": region, "rep": r, "n": n, "p": p, **row})
    reps = pd.DataFrame(rows)
    rate, slope, rate_errors = rate_experiment(config, curves[config.cells[0][0]])
    return Result(
        published={"alpha": published.alpha, "lam": published.lam, "sigma": published.sigma, "residual": published.residual},
        frontier_gamma_at_0_2=theory.mle_frontier_gamma(0.2),
        frontier=frontier,
        separability=separability_experiment(SEPARABILITY_GAMMA_SQ, config.separability_samples, config.separability_reps,
                                             config.ar1_correlation, config.seed),
        simulation=simulation_vs_theory(config, curves[PUBLISHED_POINT["kappa"]]["split"]),
        reps=reps,
        summary=summarize(reps),
        rate=rate,
        rate_slope=slope,
        rate_errors=rate_errors,
        crosscheck=solver_crosscheck(config),
        curves={k: dict(v) for k, v in curves.items()},
    )
