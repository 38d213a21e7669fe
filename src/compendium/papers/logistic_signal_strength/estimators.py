r"""Data, fits and estimators of the signal strength ``gamma^2 = beta^T Sigma beta``.

Fits (all minimise convex objectives; Newton is the work-horse, cvxpy and L-BFGS cross-check it):

* MLE: ``min_b sum_i rho(x_i^T b) - y_i x_i^T b``; it exists iff the data are not separable
  (:func:`is_separable`, a linear program).
* Split fit on halves ``D1, D2``::

      min_b (1/n1) sum_{D1} [rho(x_i^T b) - y_i x_i^T b] + (lambda_0 / 2) b^T Sigma_2 b,
      Sigma_2 = X2^T X2 / n2,

  strictly convex whenever ``n2 > p``, so it exists on separable data too.

Leave-one-out predictors (Sherman-Morrison on the Hessian ``H`` of the sum-form objective)::

    Q2_i = t_i + lambda_i L_i'(t_i),   lambda_i = h_i / (1 - L_i'' h_i),   h_i = x_i^T H^{-1} x_i

with ``L' = rho'(t) - y, L'' = rho''(t)`` on logistic rows and ``L' = mu t, L'' = mu`` on the
penalty rows (``mu = lambda_0 n1/n2``).
"""

from __future__ import annotations

import numpy as np
import scipy.linalg
import scipy.optimize
from scipy.special import expit

from .theory import mle_frontier_gamma

# Clarabel's default gap/feasibility tolerances (1e-8) leave ~1e-5 relative error in the
# exponential-cone solution; 1e-10 brings it to ~1e-6, below the cross-check's tolerance.
CLARABEL_TOLERANCES = {"tol_gap_abs": 1e-10, "tol_gap_rel": 1e-10, "tol_feas": 1e-10}
# What cvxpy tries, in order, until one attempt reports 'optimal' (a status other than 'optimal'
# is an outcome, not an error): Clarabel (interior point) at the tight tolerances, then SCS
# (first-order splitting) at a tight tolerance. Clarabel stops at 'optimal_inaccurate' on some
# samples of the cross-check; SCS then usually reaches 'optimal'.
CVXPY_ATTEMPTS = (("CLARABEL", CLARABEL_TOLERANCES),
                  ("SCS", {"eps": 1e-9, "max_iters": 100_000}))


# ------------------------------------------------------------------ data
def ar1_covariance(p: int, correlation: float) -> np.ndarray:
    """``Sigma[i, j] = correlation^|i - j|``, shape (p, p)."""
    if not 0 <= correlation < 1:
        raise ValueError(f"correlation must lie in [0, 1), got {correlation!r}")
    idx = np.arange(p)
    return correlation ** np.abs(idx[:, None] - idx[None, :])


def sample_covariates(n: int, p: int, correlation: float, rng: np.random.Generator) -> np.ndarray:
    """Rows iid ``N(0, Sigma)`` with AR(1) ``Sigma`` (unit variances), shape (n, p)."""
    if not 0 <= correlation < 1:
        raise ValueError(f"correlation must lie in [0, 1), got {correlation!r}")
    e = rng.standard_normal((n, p))
    X = np.empty_like(e)
    X[:, 0] = e[:, 0]
    c = np.sqrt(1.0 - correlation**2)
    for j in range(1, p):  # x_j = r x_{j-1} + sqrt(1 - r^2) e_j
        X[:, j] = correlation * X[:, j - 1] + c * e[:, j]
    return X


def make_coefficients(p: int, gamma_sq: float, correlation: float, rng: np.random.Generator) -> np.ndarray:
    """``beta``, shape (p,): a random half of the entries are zero (the nulls), the rest ``+-c``,
    with ``c`` set so that ``beta^T Sigma beta = gamma_sq``."""
    if p < 2 or gamma_sq <= 0:
        raise ValueError("need p >= 2 and gamma_sq > 0")
    beta = np.zeros(p)
    support = rng.permutation(p)[: p - p // 2]
    beta[support] = rng.choice([-1.0, 1.0], size=support.size)
    return beta * np.sqrt(gamma_sq / (beta @ ar1_covariance(p, correlation) @ beta))


def simulate(n: int, p: int, gamma_sq: float, correlation: float, rng: np.random.Generator):
    """One data set: ``X`` (n, p), labels ``y`` (n,) in {0, 1}, ``beta`` (p,)."""
    if n < 2 or p < 2:
        raise ValueError(f"need n, p >= 2, got n={n}, p={p}")
    beta = make_coefficients(p, gamma_sq, correlation, rng)
    X = sample_covariates(n, p, correlation, rng)
    y = (rng.random(n) < expit(X @ beta)).astype(float)
    return X, y, beta


# ------------------------------------------------------------------ separability
def is_separable(X: np.ndarray, y: np.ndarray) -> bool:
    """Whether some ``b != 0`` has ``(2 y_i - 1) x_i^T b > 0`` for all ``i`` (then no MLE exists).

    Linear program ``max t`` subject to ``(2 y_i - 1) x_i^T b >= t``, ``|b_j| <= 1``, ``t <= 1``
    (HiGHS). It is always feasible and bounded; the data are separable iff ``t* > 1e-9``.
    """
    n, p = X.shape
    A = np.hstack([-(2.0 * y - 1.0)[:, None] * X, np.ones((n, 1))])
    cost = np.zeros(p + 1)
    cost[-1] = -1.0
    res = scipy.optimize.linprog(cost, A_ub=A, b_ub=np.zeros(n), bounds=[(-1, 1)] * p + [(None, 1)], method="highs")
    if res.status != 0:
        raise RuntimeError(f"separability LP failed: {res.message}")
    return bool(res.x[-1] > 1e-9)


# ------------------------------------------------------------------ Newton fits
def _logistic_loss(z: np.ndarray, y: np.ndarray) -> float:
    return float(np.sum(np.logaddexp(0.0, z) - y * z))


def fit_logistic(X1: np.ndarray, y1: np.ndarray, X2: np.ndarray | None = None, mu: float = 0.0,
                 tol: float = 1e-9, max_iter: int = 100, max_norm: float = 1e4):
    """Damped Newton for ``sum_{D1} [rho(x^T b) - y x^T b] + (mu/2) ||X2 b||^2``.

    Returns ``(b, converged)``: ``b`` shape (p,); ``converged`` is True once the gradient falls
    below ``tol * n1`` or the Newton decrement ``g^T H^-1 g`` below ``1e-20 n1`` (round-off level),
    and False after ``max_iter`` steps or when ``||b||`` passes ``max_norm``. Without penalty, on
    separable data, the iterates run off to infinity while the gradient vanishes, so "converged"
    does not prove that the MLE exists: :func:`existence_certificate` does.
    """
    n1, p = X1.shape
    G2 = None if X2 is None or mu == 0 else mu * (X2.T @ X2)
    b = np.zeros(p)

    def objective(v):
        f = _logistic_loss(X1 @ v, y1)
        return f if G2 is None else f + 0.5 * v @ G2 @ v

    f = objective(b)
    for _ in range(max_iter):
        s = expit(X1 @ b)
        g = X1.T @ (s - y1)
        H = X1.T @ (X1 * (s * (1 - s))[:, None])
        if G2 is not None:
            g += G2 @ b
            H += G2
        if np.max(np.abs(g)) <= tol * n1:
            return b, True
        d = scipy.linalg.cho_solve(scipy.linalg.cho_factor(H + 1e-12 * np.eye(p)), g)
        if g @ d <= 1e-20 * n1:  # Newton decrement at round-off level: nothing left to gain
            return b, True
        step = 1.0
        while step > 1e-12:  # Armijo backtracking
            f_new = objective(b - step * d)
            if f_new <= f - 1e-4 * step * (g @ d):
                break
            step *= 0.5
        b, f = b - step * d, f_new
        if np.linalg.norm(b) > max_norm:
            return b, False
    return b, False


def loo_predictors(X1, y1, b, X2=None, mu: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """Leave-one-out predictors ``Q2`` and leverages ``lambda_i`` for every row (D1 rows first).

    Returns two arrays of shape ``(n1 + n2,)`` (``n2 = 0`` without penalty rows)."""
    t1 = X1 @ b
    s = expit(t1)
    w = s * (1 - s)
    H = X1.T @ (X1 * w[:, None])
    rows = [X1]
    if X2 is not None and mu > 0:
        H += mu * (X2.T @ X2)
        rows.append(X2)
    chol = scipy.linalg.cho_factor(H)
    X = np.vstack(rows)
    h = np.einsum("ij,ij->i", X, scipy.linalg.cho_solve(chol, X.T).T)  # x_i^T H^{-1} x_i
    curvature = np.concatenate([w, np.full(X.shape[0] - X1.shape[0], mu)])
    slope = np.concatenate([s - y1, mu * (X[X1.shape[0]:] @ b)])
    lam = h / (1.0 - curvature * h)
    return X @ b + lam * slope, lam


def fit_link_slope(q: np.ndarray, y: np.ndarray, tol: float = 1e-12, max_iter: int = 100) -> float:
    """1-D logistic MLE without intercept of ``y`` on ``q`` (Newton on a concave likelihood);
    NaN if it does not converge (separable 1-D data)."""
    b = 0.0
    for _ in range(max_iter):
        s = expit(b * q)
        g = q @ (y - s)
        H = (q * q) @ (s * (1 - s))
        if H <= 0 or not np.isfinite(H):
            return float("nan")
        b_new = b + g / H
        if abs(b_new - b) <= tol * (1 + abs(b)):
            return float(b_new)
        b = b_new
        if abs(b) > 1e6:
            return float("nan")
    return float("nan")


# ------------------------------------------------------------------ the split estimator
def split_halves(X: np.ndarray, y: np.ndarray, split_fraction: float = 0.5):
    """``(X1, y1, X2, y2)``: the first ``round(split_fraction n)`` rows and the rest (rows are iid)."""
    n1 = int(round(split_fraction * X.shape[0]))
    if not 0 < n1 < X.shape[0]:
        raise ValueError("both halves must be non-empty")
    return X[:n1], y[:n1], X[n1:], y[n1:]


def split_objective(b, X1, y1, X2, ridge_strength: float) -> tuple[float, np.ndarray]:
    """The split objective in mean form and its gradient (for L-BFGS)."""
    z, u = X1 @ b, X2 @ b
    n1, n2 = X1.shape[0], X2.shape[0]
    f = _logistic_loss(z, y1) / n1 + 0.5 * ridge_strength * (u @ u) / n2
    g = X1.T @ (expit(z) - y1) / n1 + ridge_strength * (X2.T @ u) / n2
    return f, g


def fit_split(X1, y1, X2, ridge_strength: float, backend: str = "newton") -> np.ndarray:
    """Minimiser of the split objective, shape (p,), by ``'newton'``, ``'lbfgs'`` or ``'cvxpy'``
    (exponential cone, Clarabel). Raises ``RuntimeError`` if the solver does not finish."""
    if backend == "newton":
        mu = ridge_strength * X1.shape[0] / X2.shape[0]
        b, ok = fit_logistic(X1, y1, X2, mu, tol=1e-12)
        if not ok:
            # the 1e-12 gradient target can sit below round-off (it depends on the BLAS path):
            # accept a point whose mean-form gradient is at 1e-9, far below any statistical effect
            _, g = split_objective(b, X1, y1, X2, ridge_strength)
            ok = bool(np.all(np.isfinite(b)) and np.max(np.abs(g)) <= 1e-9)
        if not ok:
            raise RuntimeError("Newton did not converge on the split objective")
        return b
    if backend == "lbfgs":
        res = scipy.optimize.minimize(split_objective, np.zeros(X1.shape[1]), args=(X1, y1, X2, ridge_strength),
                                      jac=True, method="L-BFGS-B", options={"maxiter": 20000, "ftol": 0.0, "gtol": 1e-12})
        if not np.max(np.abs(res.jac)) <= 1e-8:
            raise RuntimeError(f"L-BFGS did not converge: {res.message}")
        return res.x
    if backend == "cvxpy":
        b, attempts = solve_cvxpy_retrying(X1, y1, X2, ridge_strength)
        if attempts[-1][1] != "optimal":
            raise RuntimeError(f"cvxpy left the split problem unsolved: {attempts}")
        return b
    raise ValueError(f"backend must be 'newton', 'lbfgs' or 'cvxpy', got {backend!r}")


def solve_cvxpy(X1, y1, X2=None, ridge_strength: float = 0.0, solver: str = "CLARABEL",
                options: dict | None = None) -> tuple[np.ndarray | None, str]:
    """The split problem (or, with ``X2=None``, the unpenalised MLE) in cvxpy.

    ``solver`` and ``options`` default to Clarabel at :data:`CLARABEL_TOLERANCES`. Returns
    ``(b or None, status)`` with cvxpy's status string ('optimal', 'optimal_inaccurate',
    'unbounded', ...); a solver error is returned as the status ``'solver_error: ...'``."""
    import cvxpy as cp

    n1, p = X1.shape
    b = cp.Variable(p)
    z = X1 @ b
    objective = cp.sum(cp.logistic(z) - cp.multiply(y1, z)) / n1
    if X2 is not None and ridge_strength > 0:
        objective = objective + 0.5 * ridge_strength * cp.sum_squares(X2 @ b) / X2.shape[0]
    problem = cp.Problem(cp.Minimize(objective))
    try:
        problem.solve(solver=solver, **(CLARABEL_TOLERANCES if options is None else options))
    except cp.error.SolverError as err:  # pragma: no cover - reported, not raised
        return None, f"solver_error: {err}"
    return (None if b.value is None else np.asarray(b.value)), str(problem.status)


def solve_cvxpy_retrying(X1, y1, X2=None, ridge_strength: float = 0.0,
                         attempts=CVXPY_ATTEMPTS) -> tuple[np.ndarray | None, list]:
    """:func:`solve_cvxpy` through ``attempts`` (``(solver, options)`` pairs) until one reports
    'optimal'.

    Returns ``(b, tried)``: ``tried`` lists ``(solver, status)`` of every attempt made, so the
    last status says whether the problem was solved; ``b`` is the solution of the attempt that
    reported 'optimal', or ``None`` when none did (the problem is then *unsolved*: the caller
    records and counts it, it is not an error)."""
    import warnings

    tried = []
    for solver, options in attempts:
        with warnings.catch_warnings():  # cvxpy warns on an inaccurate status; the status is recorded
            warnings.simplefilter("ignore", UserWarning)
            b, status = solve_cvxpy(X1, y1, X2, ridge_strength, solver=solver, options=options)
        tried.append((solver, status))
        if status == "optimal":
            return b, tried
    return None, tried


def split_statistics(X, y, ridge_strength: float, backend: str = "newton", split_fraction: float = 0.5,
                     penalty: str = "covariance", rng: np.random.Generator | None = None) -> dict:
    """Fit the split estimator and measure its statistics.

    Returns a dict with ``beta_hat`` (p,), ``eta_sq`` (variance of the leave-one-out predictors of
    all rows) and ``link_slope`` (1-D logistic slope of every label on its own row's prediction,
    which did not use that label: held out for ``D2``, leave-one-out for ``D1``).

    ``penalty='isotropic'`` is the ablation that does not adapt to the covariance: the penalty rows
    are an independent isotropic Gaussian matrix ``Z2`` (shape of ``X2``, scaled so that
    ``tr(Z2^T Z2) = tr(X2^T X2)``, drawn from ``rng``) instead of ``X2``, so the penalty is a
    ridge ``~ ||b||^2`` up to Marchenko-Pastur noise, and ``D2``'s predictions are plainly held
    out. For ``Sigma = I`` it has the same asymptotics as the split estimator (the same mixture
    system inverts it); for any other ``Sigma`` that inversion is wrong. The ``eta_sq`` it
    returns is that of the ``D1`` rows and the held-out ``D2`` rows.

    ``penalty='ridge'`` is plain ridge, ``(ridge_strength/2) s ||b||^2`` with ``s`` the mean
    squared entry of ``X2`` (so its scale matches the split penalty's when ``Sigma = I``), and
    ``D2``'s predictions held out. Its link slope is inverted with :class:`RidgeCalibration`, the
    map it has under the isotropic design it implicitly assumes.
    """
    X1, y1, X2, y2 = split_halves(X, y, split_fraction)
    labels = np.concatenate([y1, y2])
    mu = ridge_strength * X1.shape[0] / X2.shape[0]
    if penalty == "covariance":
        b = fit_split(X1, y1, X2, ridge_strength, backend)
        q, _ = loo_predictors(X1, y1, b, X2, mu)
    elif penalty == "ridge":
        # plain ridge (ridge_strength / 2) s ||b||^2, s = mean squared entry of X2 (1 under the model):
        # written as p penalty rows sqrt(s p) I so that fit_split's mean form gives exactly that
        p = X1.shape[1]
        scale = np.sum(X2**2) / (X2.shape[0] * p)
        rows = np.sqrt(scale * p) * np.eye(p)
        b = fit_split(X1, y1, rows, ridge_strength, backend)
        q1, _ = loo_predictors(X1, y1, b, rows, ridge_strength * X1.shape[0] / p)
        q = np.concatenate([q1[: X1.shape[0]], X2 @ b])
    elif penalty == "isotropic":
        if rng is None:
            raise ValueError("penalty='isotropic' needs rng for the isotropic penalty rows")
        Z2 = rng.standard_normal(X2.shape)
        Z2 *= np.sqrt(np.sum(X2**2) / np.sum(Z2**2))
        b = fit_split(X1, y1, Z2, ridge_strength, backend)
        q1, _ = loo_predictors(X1, y1, b, Z2, mu)
        q = np.concatenate([q1[: X1.shape[0]], X2 @ b])
    else:
        raise ValueError(f"penalty must be 'covariance', 'isotropic' or 'ridge', got {penalty!r}")
    return {"beta_hat": b, "eta_sq": float(np.var(q)), "link_slope": fit_link_slope(q, labels)}


def decide_separable(X, y) -> tuple[bool, np.ndarray, bool]:
    """Whether ``(X, y)`` is separable, deciding by certificates first and by LP only if needed.

    Damped Newton on the likelihood; then (1) if :func:`existence_certificate` holds at the
    iterate, the MLE exists and the data are not separable; (2) if the iterate separates every
    row, the data are separable; otherwise (3) the LP of :func:`is_separable` decides. (1) and (2)
    are proofs, so the answer is always the LP's; they only skip most LPs.

    Returns ``(separable, b, certified)``: the Newton iterate ``b`` (p,) and whether (1) held.
    """
    b, ok = fit_logistic(X, y, max_iter=60, max_norm=1e3)
    if ok:
        s = expit(X @ b)
        if existence_certificate(X, X.T @ (s - y), X.T @ (X * (s * (1 - s))[:, None])):
            return False, b, True
    if np.all((2 * y - 1) * (X @ b) > 0):
        return True, b, False
    return is_separable(X, y), b, False


def mle_statistics(X, y) -> dict:
    """MLE and SLOE's statistic, or ``exists=False`` (then the data are separable: no MLE, no SLOE).

    Returns a dict: ``exists``, ``separable`` (see :func:`decide_separable`),
    ``beta_hat`` (p,) or None, ``eta_sq`` (variance of the leave-one-out predictors) or NaN,
    ``cov_inv_diag`` diag of ``(X^T X)^{-1}``, ``fisher_var`` diag of the inverse Fisher information."""
    separable, b, certified = decide_separable(X, y)
    out = {"exists": not separable, "separable": separable, "beta_hat": None, "eta_sq": float("nan"),
           "cov_inv_diag": None, "fisher_var": None}
    if separable:
        return out
    if not certified:  # not separable, but Newton stopped early: run it to convergence
        b, ok = fit_logistic(X, y, max_iter=400, max_norm=1e8)
        if not ok:
            raise RuntimeError("the data are not separable but Newton did not find the MLE")
    s = expit(X @ b)
    fisher = X.T @ (X * (s * (1 - s))[:, None])
    q, _ = loo_predictors(X, y, b)
    out.update(beta_hat=b, eta_sq=float(np.var(q)),
               cov_inv_diag=np.diag(scipy.linalg.inv(X.T @ X)), fisher_var=np.diag(scipy.linalg.inv(fisher)))
    return out


def existence_certificate(X: np.ndarray, gradient: np.ndarray, hessian: np.ndarray) -> bool:
    """A sufficient condition for the MLE to exist, checked at a Newton iterate ``b``.

    ``rho''(t + d) >= rho''(t) e^{-|d|}``, so on the ball of radius ``r = 1 / max_i ||x_i||``
    around ``b`` the loss is ``m``-strongly convex with ``m >= lambda_min(H(b)) / e``. If
    ``||grad|| < m r`` the minimiser over the ball is interior, hence (convexity) a global
    minimiser: the MLE exists. On separable data the Hessian degenerates and the test fails.
    """
    r = 1.0 / np.max(np.linalg.norm(X, axis=1))
    lam_min = scipy.linalg.eigvalsh(hessian, subset_by_index=[0, 0])[0]
    return bool(np.linalg.norm(gradient) < lam_min / np.e * r)


# ------------------------------------------------------------------ ProbeFrontier
def probe_frontier(X, y, rng: np.random.Generator, grid_points: int = 6, draws: int = 8) -> float:
    """ProbeFrontier: subsample ``m`` rows so that ``p/m`` runs from ``p/n`` to 0.49, record how
    often the subsample is separable, find the ``p/m`` where that frequency crosses 1/2 and invert
    the frontier. Returns ``gamma_hat^2`` (0 if it never crosses, NaN if the full data are already
    past the crossing, so the frontier cannot be located)."""
    n, p = X.shape
    kappas = np.linspace(p / n, 0.49, grid_points)
    freq = np.zeros(grid_points)
    for k, kap in enumerate(kappas):
        m = min(n, int(round(p / kap)))
        hits = 0
        for _ in range(draws):
            rows = rng.choice(n, m, replace=False)
            hits += is_separable(X[rows], y[rows])
        freq[k] = hits / draws
    freq = np.maximum.accumulate(freq)  # separability is monotone in p/m
    if freq[0] >= 0.5:
        return float("nan")
    if freq[-1] < 0.5:
        return 0.0
    k = int(np.argmax(freq >= 0.5))
    kap = kappas[k - 1] + (0.5 - freq[k - 1]) * (kappas[k] - kappas[k - 1]) / (freq[k] - freq[k - 1])
    return mle_frontier_gamma(float(kap)) ** 2


# ------------------------------------------------------------------ inference for null coefficients
def debiased_null_cover(beta_hat, cov_inv_diag, sigma: float, n: int, z: float) -> np.ndarray:
    """Whether ``0`` lies in the debiased interval of each coefficient, shape (p,).

    ``beta_hat_j - alpha beta_j ~ N(0, sigma^2 (Sigma^-1)_jj / p)`` with ``(Sigma^-1)_jj`` estimated
    by ``(n - p - 1) [(X^T X)^-1]_jj``; for ``beta_j = 0`` the interval covers iff ``|beta_hat_j| <= z sd``."""
    p = beta_hat.size
    sd = sigma * np.sqrt((n - p - 1) * cov_inv_diag / p)
    return np.abs(beta_hat) <= z * sd


def classical_null_cover(beta_hat, fisher_var, z: float) -> np.ndarray:
    """Whether 0 lies in the textbook Wald interval ``beta_hat_j +- z sqrt(I^-1_jj)``, shape (p,)."""
    return np.abs(beta_hat) <= z * np.sqrt(fisher_var)


class RidgeCalibration:
    """The map ``gamma^2 -> link slope`` of the plain-ridge ablation under an *isotropic* design,
    estimated by simulation, and its inverse.

    Plain ridge has no covariance-free asymptotic system here (the mixture system of
    :mod:`.theory` covers penalties that are sums over Gaussian rows), so its map is calibrated by
    Monte Carlo at the cell's ``(n, p)`` with ``Sigma = I``: ``reps`` data sets at each of the
    log-spaced ``gamma_grid`` values, and a quadratic fit of ``log slope`` on ``log gamma^2``
    through all of them (it smooths the Monte Carlo noise). On an AR(1) design this map is the
    wrong one, which is what the ablation is meant to show.
    """

    def __init__(self, n: int, p: int, ridge_strength: float, gamma_grid, reps: int, rng: np.random.Generator):
        grid = np.asarray(gamma_grid, dtype=float)
        if grid.size < 3 or np.any(grid <= 0) or np.any(np.diff(grid) <= 0):
            raise ValueError("gamma_grid needs at least 3 increasing positive values")
        xs, ys = [], []
        for g2 in grid:
            for _ in range(reps):
                X, y, _ = simulate(n, p, g2, 0.0, rng)
                try:
                    slope = split_statistics(X, y, ridge_strength, penalty="ridge")["link_slope"]
                except RuntimeError:
                    continue
                if np.isfinite(slope) and slope > 0:
                    xs.append(np.log(g2))
                    ys.append(np.log(slope))
        self.points = (np.exp(np.array(xs)), np.exp(np.array(ys)))
        self.coef = np.polyfit(xs, ys, 2)
        fine = np.linspace(np.log(grid[0]), np.log(grid[-1]), 400)
        values = np.polyval(self.coef, fine)
        self.monotone = bool(np.all(np.diff(values) > 0) or np.all(np.diff(values) < 0))
        order = np.argsort(values)
        self._log_slope, self._log_gamma = values[order], fine[order]

    def link_slope(self, gamma_sq) -> np.ndarray:
        """Calibrated link slope at ``gamma_sq`` (array)."""
        return np.exp(np.polyval(self.coef, np.log(np.asarray(gamma_sq, dtype=float))))

    def invert(self, link_slope) -> np.ndarray:
        """``gamma^2`` whose calibrated slope is ``link_slope``; NaN outside the calibrated range or
        where the calibrated map is not monotone."""
        v = np.log(np.atleast_1d(np.asarray(link_slope, dtype=float)))
        out = np.exp(np.interp(v, self._log_slope, self._log_gamma))
        outside = ~np.isfinite(v) | (v < self._log_slope[0]) | (v > self._log_slope[-1])
        out[outside | (not self.monotone)] = np.nan
        return out
