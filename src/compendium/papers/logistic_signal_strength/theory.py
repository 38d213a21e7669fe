r"""Asymptotic theory of logistic M-estimators in the proportional regime ``p/n -> kappa``.

Model: rows ``x_i ~ N(0, Sigma)``, labels ``y_i in {0, 1}`` with ``P(y = 1 | x) = rho'(x^T beta)``,
``rho(t) = log(1 + e^t)`` and signal strength ``gamma^2 = beta^T Sigma beta``. Everything here is
stated in whitened coordinates, so it does not depend on ``Sigma``.

A row-wise M-estimator ``argmin_b sum_i L_i(x_i^T b)`` has, in the limit, the *leave-one-out
predictor* ``Q2 = alpha gamma Z1 + sigma Z2`` next to the true predictor ``Q1 = gamma Z1``
(``Z1, Z2`` iid ``N(0, 1)``), and the fitted value ``t = prox_{lambda L}(Q2)``. The triple
``(alpha, lambda, sigma)`` solves (:func:`system_residuals`)::

    (E1)  E[(Q2 - t)^2]  = kappa sigma^2
    (E2)  E[Z2 t]        = sigma (1 - kappa)          (Stein: E[dt/dQ2] = 1 - kappa)
    (E3)  E[Z1 t]        = alpha gamma                (gradient orthogonal to the signal)

with the expectation over a *mixture of rows*: a fraction ``pi`` are logistic rows
(``L(t) = rho(t) - y t``, so ``t = prox_{lambda rho}(Q2 + lambda y)``) and ``1 - pi`` are
quadratic rows ``L(t) = mu t^2 / 2`` (``t = Q2 / (1 + lambda mu)``). ``pi = 1`` is the MLE system
of Sur and Candès (2019); ``pi = n1/n``, ``mu = lambda_0 n1/n2`` is the data-splitting estimator
whose penalty ``(lambda_0/2) b^T Sigma_2 b`` is a sum of squares over the rows of the second half.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import scipy.optimize
import scipy.stats
from scipy.interpolate import PchipInterpolator
from scipy.special import expit

FRONTIER_NODES = 200  # 1-D Gauss-Hermite nodes of the frontier integral (smooth integrand)


def prox_logistic(lam, x, max_iter: int = 200) -> np.ndarray:
    """``prox_{lam rho}(x)``: the root ``t`` of ``t + lam rho'(t) = x`` (vectorised).

    Safeguarded Newton: the root lies in ``[x - lam, x]``; a Newton step that leaves the bracket
    or fails to halve the previous step is replaced by bisection, so it converges for every
    ``lam > 0``.

    Parameters
    ----------
    lam : float or array_like, broadcastable to ``x``; positive.
    x : array_like, shape (...)

    Returns
    -------
    ndarray, shape of ``x``; ``|t + lam rho'(t) - x| <= 4e-16 (1 + |x| + 2 lam)``.
    """
    x = np.asarray(x, dtype=float)
    lam = np.broadcast_to(np.asarray(lam, dtype=float), x.shape)
    if np.any(lam <= 0) or not np.all(np.isfinite(lam)):
        raise ValueError("prox_logistic needs a finite lam > 0")
    lo, hi = x - lam, x.copy()
    t = np.clip(x - lam * expit(x), lo, hi)
    last_step = hi - lo
    tol = 4e-16 * (1.0 + np.abs(x) + 2.0 * lam)
    for _ in range(max_iter):
        s = expit(t)
        f = t + lam * s - x
        done = np.abs(f) <= tol
        if done.all():
            break
        lo = np.where(f <= 0, t, lo)
        hi = np.where(f >= 0, t, hi)
        step = f / (1.0 + lam * s * (1.0 - s))
        new = t - step
        bisect = (new <= lo) | (new >= hi) | (np.abs(step) > 0.5 * last_step)
        new = np.where(bisect, 0.5 * (lo + hi), new)
        new = np.where(done, t, new)
        last_step = np.abs(new - t)
        t = new
    return t


@lru_cache(maxsize=8)
def gauss_hermite_grid(nodes: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Tensor Gauss-Hermite rule for ``E f(Z1, Z2)``, ``Z1, Z2`` iid ``N(0, 1)``.

    Returns ``(z1, z2, weights)``, each of shape ``(nodes**2,)``; the weights sum to one and the
    rule is symmetric: reversing the arrays maps each node to its mirror ``(-z1, -z2)``.
    """
    if isinstance(nodes, bool) or not isinstance(nodes, (int, np.integer)) or nodes < 2:
        raise ValueError(f"nodes must be an integer >= 2, got {nodes!r}")
    z, w = np.polynomial.hermite_e.hermegauss(int(nodes))
    w = w / w.sum()
    z1, z2 = np.meshgrid(z, z, indexing="ij")
    out = (z1.ravel(), z2.ravel(), np.outer(w, w).ravel())
    for a in out:
        a.setflags(write=False)
    return out


@dataclass(frozen=True)
class Mixture:
    """Rows of the M-estimator: a fraction ``logistic_fraction`` of logistic rows, the rest
    quadratic rows ``quadratic_weight * t^2 / 2`` (the split penalty). ``Mixture()`` is the MLE."""

    logistic_fraction: float = 1.0
    quadratic_weight: float = 0.0

    def __post_init__(self) -> None:
        if not 0 < self.logistic_fraction <= 1:
            raise ValueError(f"logistic_fraction must lie in (0, 1], got {self.logistic_fraction!r}")
        if self.quadratic_weight < 0 or (self.logistic_fraction < 1 and self.quadratic_weight == 0):
            raise ValueError("quadratic rows need a positive quadratic_weight")


def split_mixture(ridge_strength: float, split_fraction: float = 0.5) -> Mixture:
    """The rows of the split estimator: ``n1 = split_fraction * n`` logistic rows and the penalty
    ``(ridge_strength / 2) b^T (X2^T X2 / n2) b`` scaled to the sum form (``mu = lambda_0 n1/n2``)."""
    if not 0 < split_fraction < 1:
        raise ValueError(f"split_fraction must lie in (0, 1), got {split_fraction!r}")
    if ridge_strength <= 0:
        raise ValueError(f"ridge_strength must be positive, got {ridge_strength!r}")
    return Mixture(split_fraction, ridge_strength * split_fraction / (1.0 - split_fraction))


def system_residuals(alpha: float, lam: float, sigma: float, kappa: float, gamma: float,
                     mixture: Mixture = Mixture(), nodes: int = 64) -> np.ndarray:
    """Residuals of (E1)-(E3), shape (3,), normalised: ``E1/sigma^2 - kappa``,
    ``E2/sigma - (1 - kappa)``, ``E3/gamma - alpha``. Zero at the solution."""
    if lam <= 0 or sigma <= 0 or gamma <= 0:
        raise ValueError("lam, sigma and gamma must be positive")
    z1, z2, w = gauss_hermite_grid(nodes)
    q1 = gamma * z1
    q2 = alpha * gamma * z1 + sigma * z2
    p1 = expit(q1)  # P(y = 1 | Q1)
    t0 = prox_logistic(lam, q2)  # y = 0: prox(Q2)
    t1 = -t0[::-1]  # y = 1: prox(Q2 + lam) = -prox(-Q2), read at the mirrored node
    e1 = w @ (p1 * (q2 - t1) ** 2 + (1 - p1) * (q2 - t0) ** 2)
    t_mean = p1 * t1 + (1 - p1) * t0
    e2, e3 = w @ (z2 * t_mean), w @ (z1 * t_mean)
    pi, mu = mixture.logistic_fraction, mixture.quadratic_weight
    if pi < 1:  # quadratic rows: t = Q2 / (1 + lam mu), closed-form moments
        c = 1.0 / (1.0 + lam * mu)
        e1 = pi * e1 + (1 - pi) * (lam * mu * c) ** 2 * (alpha**2 * gamma**2 + sigma**2)
        e2 = pi * e2 + (1 - pi) * c * sigma
        e3 = pi * e3 + (1 - pi) * c * alpha * gamma
    return np.array([e1 / sigma**2 - kappa, e2 / sigma - (1 - kappa), e3 / gamma - alpha])


@dataclass(frozen=True)
class SystemSolution:
    """``(alpha, lam, sigma)`` at ``(kappa, gamma)`` and the max abs residual of (E1)-(E3)."""

    alpha: float
    lam: float
    sigma: float
    residual: float


def solve_system(kappa: float, gamma: float, mixture: Mixture = Mixture(), nodes: int = 64,
                 init: tuple[float, float, float] | None = None, tol: float = 1e-10) -> SystemSolution:
    """Solve (E1)-(E3) for ``(alpha, lam, sigma)`` (Powell hybrid in ``(alpha, log lam, log sigma)``).

    Raises ``RuntimeError`` when no root with residual ``<= tol`` is found (for the MLE this
    happens beyond the frontier ``kappa >= kappa_h(gamma)``, where no solution exists).
    """
    if not 0 < kappa < 1:
        raise ValueError(f"kappa must lie in (0, 1), got {kappa!r}")
    if gamma <= 0:
        raise ValueError(f"gamma must be positive, got {gamma!r}")
    starts = [init] if init is not None else []
    starts += [(1.0 + kappa, kappa / (1 - kappa) * 4.0, np.sqrt(kappa) * (1 + gamma)), (1.0, 1.0, 1.0), (0.5, 2.0, 0.5)]
    best = None
    for a0, l0, s0 in starts:
        x0 = np.array([a0, np.log(l0), np.log(s0)])

        def f(x):
            return system_residuals(x[0], np.exp(x[1]), np.exp(x[2]), kappa, gamma, mixture, nodes)

        with np.errstate(over="ignore", invalid="ignore"):
            sol = scipy.optimize.root(f, x0, method="hybr", options={"xtol": 1e-13})
        if not np.all(np.isfinite(sol.x)):
            continue
        res = float(np.max(np.abs(f(sol.x))))
        if best is None or res < best.residual:
            best = SystemSolution(float(sol.x[0]), float(np.exp(sol.x[1])), float(np.exp(sol.x[2])), res)
        if res <= tol:
            return best
    raise RuntimeError(f"no solution of the system at kappa={kappa}, gamma={gamma} "
                       f"(best residual {None if best is None else best.residual})")


# ------------------------------------------------------------------ the MLE frontier
def _positive_part_moment(a: np.ndarray) -> np.ndarray:
    """``E[(Z - a)_+^2]`` for ``Z ~ N(0, 1)``: ``(1 + a^2) Phi(-a) - a phi(a)``."""
    return (1 + a * a) * scipy.stats.norm.cdf(-a) - a * scipy.stats.norm.pdf(a)


def mle_frontier_kappa(gamma: float) -> float:
    """``kappa_h(gamma) = min_t 2 E[rho'(gamma V) (Z - t V)_+^2]`` (Candès and Sur, 2020).

    The MLE exists (with probability tending to one) iff ``kappa < kappa_h(gamma)``. The inner
    expectation over ``Z`` is in closed form, which leaves a smooth 1-D Gauss-Hermite integral.
    """
    if gamma < 0:
        raise ValueError(f"gamma must be non-negative, got {gamma!r}")
    v, w = np.polynomial.hermite_e.hermegauss(FRONTIER_NODES)
    w = w / w.sum()
    weight = 2.0 * w * expit(gamma * v)
    res = scipy.optimize.minimize_scalar(lambda t: weight @ _positive_part_moment(t * v),
                                         bounds=(-5.0, 30.0), method="bounded", options={"xatol": 1e-12})
    return float(res.fun)


def mle_frontier_gamma(kappa: float) -> float:
    """Inverse of the frontier: the ``gamma`` with ``kappa_h(gamma) = kappa``, for ``kappa in (0, 1/2)``."""
    if not 0 < kappa < 0.5:
        raise ValueError(f"kappa must lie in (0, 0.5), got {kappa!r}")
    return float(scipy.optimize.brentq(lambda g: mle_frontier_kappa(g) - kappa, 1e-6, 200.0, xtol=1e-12))


# ------------------------------------------------------------------ curves in gamma
def link_slope(alpha: float, sigma: float, gamma: float, nodes: int = 64) -> float:
    """Limit ``b`` of the 1-D logistic fit (no intercept) of ``y`` on the leave-one-out predictor.

    ``b`` solves ``E[(rho'(b Q2) - rho'(Q1)) Q2] = 0``. It is 0 at ``gamma = 0`` and grows with
    ``gamma`` even where ``eta^2`` saturates, because the held-out labels keep getting cleaner.
    """
    z1, z2, w = gauss_hermite_grid(nodes)
    q1, q2 = gamma * z1, alpha * gamma * z1 + sigma * z2
    target = w @ (expit(q1) * q2)
    return float(scipy.optimize.brentq(lambda b: w @ (expit(b * q2) * q2) - target, 0.0, 1e3, xtol=1e-14))


STATISTICS = ("eta_sq", "link_slope")


@dataclass(frozen=True, eq=False)
class TheoryCurve:
    """The solution ``(alpha, lam, sigma)`` of (E1)-(E3) along a grid of ``gamma^2`` at fixed ``kappa``.

    Two observable statistics are functions of ``gamma`` through it: ``eta_sq`` (variance of the
    leave-one-out predictor, ``alpha^2 gamma^2 + sigma^2``; SLOE measures it) and ``link_slope``
    (:func:`link_slope`; the split estimator measures it). :meth:`invert` maps a measured statistic
    back to ``gamma^2``; :meth:`parameters` reads ``(alpha, lam, sigma)`` at any ``gamma^2``.
    Arrays have shape ``(G,)``; ``zero_limit`` holds each statistic's value at ``gamma = 0``.
    """

    kappa: float
    mixture: Mixture
    gamma_sq: np.ndarray
    alpha: np.ndarray
    lam: np.ndarray
    sigma: np.ndarray
    link_slope: np.ndarray
    zero_limit: dict

    @property
    def eta_sq(self) -> np.ndarray:
        return self.alpha**2 * self.gamma_sq + self.sigma**2

    def statistic(self, name: str) -> np.ndarray:
        if name not in STATISTICS:
            raise ValueError(f"statistic must be one of {STATISTICS}, got {name!r}")
        return getattr(self, name)

    def invert(self, name: str, values) -> tuple[np.ndarray, np.ndarray]:
        """``(gamma_sq_hat, clipped)`` for measured ``values`` of statistic ``name`` (shape kept).

        Monotone (PCHIP) interpolation of ``gamma^2`` against the statistic, from the ``gamma = 0``
        limit to the grid's top. Values below the range give 0, values above give the top
        ``gamma^2``; both are flagged in ``clipped``. NaN stays NaN."""
        x = np.concatenate([[self.zero_limit[name]], self.statistic(name)])
        g = np.concatenate([[0.0], self.gamma_sq])
        v = np.asarray(values, dtype=float)
        f = PchipInterpolator(x, g)
        out = np.where(v < x[0], 0.0, np.where(v > x[-1], g[-1], f(np.clip(v, x[0], x[-1]))))
        clipped = np.isfinite(v) & ((v < x[0]) | (v > x[-1]))
        return np.where(np.isfinite(v), out, np.nan), clipped

    def parameters(self, gamma_sq) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(alpha, lam, sigma)`` at ``gamma_sq`` (clipped to the grid) by PCHIP interpolation."""
        g = np.clip(np.asarray(gamma_sq, dtype=float), self.gamma_sq[0], self.gamma_sq[-1])
        return tuple(PchipInterpolator(self.gamma_sq, v)(g) for v in (self.alpha, self.lam, self.sigma))


def theory_curve(kappa: float, mixture: Mixture = Mixture(), gamma_sq_max: float = 60.0,
                 num_points: int = 30, nodes: int = 64) -> TheoryCurve:
    """Solve the system along ``gamma`` (uniform grid in ``gamma``, warm starts) and return the curve.

    For the MLE the grid stops at ``0.99 gamma_h(kappa)``, inside the frontier, or earlier
    where the quadrature can no longer resolve the root (past half the grid). Raises
    ``RuntimeError`` if the system has no solution at a grid point.
    """
    top = float(gamma_sq_max)
    if mixture.logistic_fraction == 1.0:
        if kappa >= 0.5:
            raise ValueError("the MLE does not exist for kappa >= 1/2 at any signal strength")
        top = min(top, (0.99 * mle_frontier_gamma(kappa)) ** 2)
    gammas = np.linspace(np.sqrt(top) / num_points, np.sqrt(top), num_points)
    rows, init = [], None
    for g in gammas:
        try:
            sol = solve_system(kappa, float(g), mixture, nodes, init=init)
        except RuntimeError:
            # close to the MLE frontier sigma blows up and coarse quadrature loses the root:
            # keep the grid solved so far if it covers most of the range
            if mixture.logistic_fraction == 1.0 and len(rows) >= num_points // 2:
                break
            raise
        init = (sol.alpha, sol.lam, sol.sigma)
        rows.append(init + (link_slope(sol.alpha, sol.sigma, float(g), nodes),))
    gammas = gammas[: len(rows)]
    a, lam, s, b = (np.array(v) for v in zip(*rows))
    # gamma -> 0: labels carry no signal, b -> 0 and eta^2 -> sigma(0)^2 (extrapolated from the grid)
    s0 = float(max(s[0] - (s[1] - s[0]) * gammas[0] ** 2 / (gammas[1] ** 2 - gammas[0] ** 2), 0.0))
    curve = TheoryCurve(kappa, mixture, gammas**2, a, lam, s, b, {"eta_sq": min(s0**2, s[0] ** 2), "link_slope": 0.0})
    return curve
