"""Heuristic rate exponents with sympy, and the fits that measure rates from runs.

These derivations are our own bias/variance/regularization balance, not the paper's proofs (we
only have its abstract). With ``eta_t ~ t^-a`` and ``mu_t ~ t^-b``, the squared gap of the last
iterate is bounded, up to constants, by the sum of

* variance  ``sigma^2 eta / mu``            ~ t^-(a - b)       (noise around the Tikhonov point)
* tracking  ``(1 / (t eta mu))^2``          ~ t^-2(1 - a - b)  (the point ``z*_mu_t`` moves ~ 1/t per step)
* bias      ``mu^2``                        ~ t^-2b            (the Tikhonov point vs the solution)

and RG, without optimism, is stable on rotational (merely monotone) fields only if
``eta <~ mu / L^2`` (``a >= b``); ROG only needs ``eta <~ 1/L`` (``a >= 0``).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import sympy as sp
from scipy.optimize import least_squares
from sympy.solvers.simplex import lpmax


@lru_cache(maxsize=None)  # pure and exact: computed once per process
def exponent_program(noisy: bool, optimistic: bool) -> dict:
    """Best rate exponent ``r`` (Gap^2 ~ t^-r) and the schedule exponents ``(a, b)`` that attain it.

    Solves exactly, with sympy's simplex method: maximise ``r`` subject to
    ``r <= 2(1-a-b)``, ``r <= 2b``, ``a, b >= 0``, plus ``r <= a - b`` when ``noisy`` and
    ``a >= b`` when not ``optimistic``.

    Returns
    -------
    dict with sympy Rationals ``a``, ``b``, ``rate``.
    """
    a, b, r = sp.symbols("a b r", real=True)
    constraints = [r <= 2 * (1 - a - b), r <= 2 * b, a >= 0, b >= 0]
    if noisy:
        constraints.append(r <= a - b)
    if not optimistic:
        constraints.append(a >= b)
    rate, point = lpmax(r, constraints)
    return {"a": point[a], "b": point[b], "rate": rate}


@lru_cache(maxsize=None)  # pure and exact: computed once per process
def sigma_scaling() -> dict:
    """How ROG's constants should scale with ``sigma`` and what rate that buys.

    With ``eta = c_eta t^-3/5`` and ``mu = c_mu t^-1/5`` all three terms are ``t^-2/5`` times
    ``f = sigma^2 c_eta / c_mu + (c_eta c_mu)^-2 + c_mu^2``. Trying ``c_eta = alpha sigma^u``,
    ``c_mu = beta sigma^v`` and equating the three powers of sigma gives ``u, v`` and the power
    ``p`` of ``sigma`` in the rate. ``homogeneity`` is ``f / sigma^p`` after the substitution; it
    must be free of ``sigma`` (so the minimum over ``alpha, beta`` scales exactly as ``sigma^p``).
    """
    u, v = sp.symbols("u v", real=True)
    sigma, alpha, beta = sp.symbols("sigma alpha beta", positive=True)
    sol = sp.solve([sp.Eq(2 + u - v, -2 * (u + v)), sp.Eq(-2 * (u + v), 2 * v)], [u, v], dict=True)[0]
    p = sp.simplify(2 * sol[v])
    c_eta, c_mu = alpha * sigma ** sol[u], beta * sigma ** sol[v]
    f = sigma**2 * c_eta / c_mu + (c_eta * c_mu) ** -2 + c_mu**2
    homogeneity = sp.simplify(sp.powsimp(sp.expand(f / sigma**p), force=True))
    return {"step_power": sol[u], "reg_power": sol[v], "sigma_power": p, "homogeneity": homogeneity,
            "depends_on_sigma": homogeneity.has(sigma)}


@lru_cache(maxsize=None)  # pure and exact: computed once per process
def crossover_times() -> dict:
    """Times where the sigma-tuned schedule and rate change regime; all equal ``sigma^(-4/3)``.

    ``sigma^(-4/5) t^(-3/5) = 1`` (step leaves its cap), ``sigma^(2/5) t^(-1/5) = t^(-1/2)``
    (regularization leaves its deterministic floor), ``sigma^(4/5) t^(-2/5) = t^(-1)`` (the two rate
    terms meet).
    """
    t, sigma = sp.symbols("t sigma", positive=True)
    eqs = {
        "step": sp.Eq(sigma ** sp.Rational(-4, 5) * t ** sp.Rational(-3, 5), 1),
        "regularization": sp.Eq(sigma ** sp.Rational(2, 5) * t ** sp.Rational(-1, 5), t ** sp.Rational(-1, 2)),
        "rate": sp.Eq(sigma ** sp.Rational(4, 5) * t ** sp.Rational(-2, 5), 1 / t),
    }
    # on logarithms (t, sigma > 0) each equation is linear in log t: one real root, found fast
    return {k: sp.simplify(sp.solve(sp.log(e.lhs) - sp.log(e.rhs), t)[0]) for k, e in eqs.items()}


@lru_cache(maxsize=None)  # pure and exact: computed once per process
def strongly_monotone_constant() -> sp.Expr:
    """``lim_t t E||z_t - z*||^2`` for ``e_{t+1} = (1 - 2 lambda eta_t) e_t + eta_t^2 sigma^2``, ``eta_t = kappa/(lambda t)``.

    Plugging ``e_t = C / t`` into the recursion and matching the ``t^-2`` terms gives
    ``C = kappa^2 sigma^2 / ((2 kappa - 1) lambda^2)`` (for ``kappa > 1/2``): the ``sigma^2/(lambda^2 t)`` term.
    """
    t, C, sigma, lam = sp.symbols("t C sigma lambda", positive=True)
    kappa = sp.Symbol("kappa", positive=True)
    eta = kappa / (lam * t)
    residual = C / (t + 1) - (1 - 2 * lam * eta) * C / t - eta**2 * sigma**2
    leading = sp.limit(sp.simplify(residual * t**2), t, sp.oo)
    return sp.simplify(sp.solve(sp.Eq(leading, 0), C)[0])


def derived_exponents_table() -> list:
    """Rows (regime, a, b, rate exponent r, sigma power) of the heuristic derivation."""
    s = sigma_scaling()
    rows = []
    for label, noisy, optimistic in [("RG, sigma > 0", True, False), ("RG, sigma = 0", False, False),
                                     ("ROG, sigma > 0", True, True), ("ROG, sigma = 0", False, True)]:
        e = exponent_program(noisy, optimistic)
        # RG keeps fixed constants: no sigma power (its constraint eta <~ mu / L^2 forbids the tuning)
        power = s["sigma_power"] if (noisy and optimistic) else (sp.Integer(0) if not noisy else None)
        rows.append({"regime": label, "a": e["a"], "b": e["b"], "rate": e["rate"], "sigma_power": power})
    return rows


def exponents_display_rows() -> list:
    """The derived-exponents table as the chapter shows it: one dict per regime (strings), the
    strongly monotone row included (its ``t E||z - z*||^2`` limit from
    :func:`strongly_monotone_constant`)."""
    rows = [{"regime": row["regime"], "step a": str(row["a"]), "regularization b": str(row["b"]),
             "rate r": str(row["rate"]),
             "power of sigma": "none (fixed constants)" if row["sigma_power"] is None else str(row["sigma_power"])}
            for row in derived_exponents_table()]
    rows.append({"regime": "ROG, strongly monotone", "step a": "1", "regularization b": "1", "rate r": "1",
                 "power of sigma": "2: t E|z - z*|^2 -> " + str(strongly_monotone_constant())})
    return rows


# ------------------------------------------------------------------ measuring rates
def fit_loglog_slope(times, values, window) -> float:
    """OLS slope of ``log values`` on ``log times`` over ``window[0] <= t <= window[1]``.

    Parameters
    ----------
    times : array (K,)
    values : array (K, ...)
        Non-negative; extra axes are fitted independently (the slope has their shape). A series
        that reaches 0 in the window (exact convergence, e.g. OG without noise) gets slope ``-inf``.
    window : (float, float)
    """
    times, values = np.asarray(times, dtype=float), np.asarray(values, dtype=float)
    keep = (times >= window[0]) & (times <= window[1])
    if keep.sum() < 3:
        raise ValueError(f"the window {window} holds fewer than 3 checkpoints")
    if np.any(values[keep] < 0) or np.any(~np.isfinite(values[keep])):
        raise ValueError("fit_loglog_slope needs finite, non-negative values")
    x = np.log(times[keep])
    x = x - x.mean()
    hits_zero = np.any(values[keep] == 0, axis=0)
    y = np.log(np.where(values[keep] > 0, values[keep], 1.0))
    slope = np.where(hits_zero, -np.inf, np.tensordot(x, y - y.mean(axis=0), axes=(0, 0)) / np.dot(x, x))
    return float(slope) if np.ndim(slope) == 0 else slope


def fit_power(xs, values) -> float:
    """OLS slope of ``log values`` on ``log xs`` (the exponent ``p`` in ``values ~ xs^p``)."""
    x, y = np.log(np.asarray(xs, dtype=float)), np.log(np.asarray(values, dtype=float))
    return float(np.polyfit(x, y, 1)[0])


def fit_two_term_rate(sigmas, values, horizon: int) -> dict:
    """Fit ``Gap^2_T(sigma) = a sigma^p T^(-2/5) + b T^(-1)`` with ``a > 0, b >= 0, p`` free.

    Least squares on the logarithms (each sigma weighs the same), deterministic start.

    Returns
    -------
    dict with ``p``, ``a``, ``b`` and ``rms`` (root mean square of the log residuals).
    """
    s, v = np.asarray(sigmas, dtype=float), np.asarray(values, dtype=float)
    if s.size < 3 or np.any(s <= 0) or np.any(v <= 0):
        raise ValueError("fit_two_term_rate needs at least 3 positive sigmas and positive values")
    T = float(horizon)

    def model(theta):
        log_a, p, b = theta
        return np.exp(log_a) * s**p * T**-0.4 + b / T

    def residual(theta):
        return np.log(model(theta)) - np.log(v)

    start = np.array([np.log(np.median(v) * T**0.4), 1.0, 0.0])
    fit = least_squares(residual, start, bounds=([-50.0, -5.0, 0.0], [50.0, 5.0, np.inf]), x_scale="jac",
                        xtol=1e-14, ftol=1e-14, gtol=1e-14)
    log_a, p, b = fit.x
    return {"p": float(p), "a": float(np.exp(log_a)), "b": float(b), "rms": float(np.sqrt(np.mean(fit.fun**2)))}
