r"""Metrics: MASE, quantile loss and CRPS from quantiles, the Gaussian CRPS in closed form (sympy).

.. math::
    \mathrm{MASE} = \frac{\frac1H\sum_h |y_h-\hat y_h|}{\frac{1}{n-m}\sum_{t>m}|y_t-y_{t-m}|},\qquad
    \mathrm{CRPS}(F,y)\approx 2\sum_{k=1}^K w_k\,\rho_{\tau_k}\big(y-q_{\tau_k}\big),\qquad
    \mathrm{CRPS}(\mathcal N(\mu,\sigma^2),y)=\sigma\Big[z(2\Phi(z)-1)+2\varphi(z)-\tfrac{1}{\sqrt\pi}\Big]
"""

from __future__ import annotations

import numpy as np
import scipy.stats


def mase_scale(history: np.ndarray, periods: np.ndarray) -> np.ndarray:
    """In-sample mean absolute seasonal difference per series (N,); history (N, o)."""
    out = np.empty(history.shape[0])
    for i, (y, m) in enumerate(zip(history, periods)):
        out[i] = np.mean(np.abs(y[m:] - y[:-m]))
    if np.any(out <= 0):
        raise ValueError("a series has a zero MASE scale (constant history)")
    return out


def mase(y: np.ndarray, yhat: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """MASE per window: y, yhat (N, H), scale (N,) -> (N,)."""
    return np.mean(np.abs(y - yhat), axis=-1) / scale


def quantile_loss(y: np.ndarray, q_preds: np.ndarray, levels: np.ndarray) -> np.ndarray:
    """Pinball loss per level: y (...), q_preds (..., K), levels (K,) -> (..., K)."""
    diff = y[..., None] - q_preds
    return np.maximum(levels * diff, (levels - 1) * diff)


def quantile_weights(levels: np.ndarray) -> np.ndarray:
    """Quadrature weights of the levels on [0, 1]: ``w_k = (tau_{k+1} - tau_{k-1}) / 2`` with
    ``tau_0 = 0`` and ``tau_{K+1} = 1`` (for equally spaced ``k / (K + 1)`` every weight is
    ``1 / (K + 1)``). The common shortcut ``1 / K`` overstates the CRPS by ``(K + 1) / K``
    (1.0101 at 99 levels)."""
    levels = np.asarray(levels, dtype=float)
    if levels.ndim != 1 or np.any(np.diff(levels) <= 0) or levels[0] <= 0 or levels[-1] >= 1:
        raise ValueError("levels must be strictly increasing inside (0, 1)")
    edges = np.concatenate([[0.0], levels, [1.0]])
    return (edges[2:] - edges[:-2]) / 2


def crps_from_quantiles(y: np.ndarray, q_preds: np.ndarray, levels: np.ndarray) -> np.ndarray:
    """CRPS as twice the pinball loss integrated over the levels: ``2 sum_k w_k rho_k``."""
    return 2.0 * quantile_loss(y, q_preds, levels) @ quantile_weights(levels)


def gaussian_crps(y, mu, sigma):
    """Closed-form CRPS of N(mu, sigma^2) at y (numpy, broadcasts)."""
    z = (np.asarray(y) - mu) / sigma
    return sigma * (z * (2 * scipy.stats.norm.cdf(z) - 1) + 2 * scipy.stats.norm.pdf(z) - 1 / np.sqrt(np.pi))


def gaussian_quantiles(mu, sigma, levels: np.ndarray) -> np.ndarray:
    """Quantiles of N(mu, sigma^2) at ``levels``: shape (..., K)."""
    return np.asarray(mu)[..., None] + np.asarray(sigma)[..., None] * scipy.stats.norm.ppf(levels)


def derive_gaussian_crps():
    """Sympy: CRPS = E|X - y| - E|X - X'|/2 for X, X' ~ N(mu, sigma^2), minus the closed form.

    Returns the simplified difference (0 when the closed form is right) and the derived expression.
    Uses ``E|sigma Z + mu - y| = sigma E|Z - z|`` and ``E|X - X'| = 2 sigma / sqrt(pi)``, both
    integrated here.
    """
    import sympy as sp

    t, z = sp.symbols("t z", real=True)
    sigma = sp.symbols("sigma", positive=True)
    phi = sp.exp(-t**2 / 2) / sp.sqrt(2 * sp.pi)
    e_abs = sp.integrate((z - t) * phi, (t, -sp.oo, z)) + sp.integrate((t - z) * phi, (t, z, sp.oo))
    # X - X' ~ N(0, 2 sigma^2): E|X - X'| = 2 * integral_0^oo s phi_{sqrt2 sigma}(s) ds
    s = sp.symbols("s", positive=True)
    e_pair = 2 * sp.integrate(s * sp.exp(-s**2 / (4 * sigma**2)) / (sp.sqrt(2 * sp.pi) * sp.sqrt(2) * sigma),
                              (s, 0, sp.oo))
    derived = sigma * e_abs - e_pair / 2
    Phi = (1 + sp.erf(z / sp.sqrt(2))) / 2
    closed = sigma * (z * (2 * Phi - 1) + 2 * phi.subs(t, z) - 1 / sp.sqrt(sp.pi))
    return sp.simplify((derived - closed).rewrite(sp.erf)), derived


def quantile_crps_max_error(num_levels: int = 99, z_grid: np.ndarray | None = None) -> float:
    """Largest relative error of the quantile CRPS of N(0, 1) at ``num_levels`` equally spaced levels
    against the closed form, over ``z_grid`` (default 13 points in [-3, 3])."""
    levels = np.arange(1, num_levels + 1) / (num_levels + 1)
    z = np.linspace(-3, 3, 13) if z_grid is None else np.asarray(z_grid, dtype=float)
    q = gaussian_quantiles(np.zeros_like(z), np.ones_like(z), levels)
    return float(np.max(np.abs(crps_from_quantiles(z, q, levels) / gaussian_crps(z, 0.0, 1.0) - 1)))


def mase_scale_invariance(rng: np.random.Generator, trials: int = 200) -> float:
    """Largest relative change of MASE when y, forecast and history are multiplied by one c > 0."""
    worst = 0.0
    for _ in range(trials):
        m = int(rng.integers(1, 13))
        hist, y, yhat = rng.normal(size=(1, 60)).cumsum(1), rng.normal(size=(1, 12)), rng.normal(size=(1, 12))
        c = float(np.exp(rng.uniform(-8, 8)))
        a = mase(y, yhat, mase_scale(hist, np.array([m])))
        b = mase(c * y, c * yhat, mase_scale(c * hist, np.array([m])))
        worst = max(worst, float(np.max(np.abs(b / a - 1))))
    return worst
