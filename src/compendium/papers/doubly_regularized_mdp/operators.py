r"""Doubly regularised Bellman operators and the reference solvers they are checked against.

Shapes: a *kernel row* ``P`` has the next state on its last axis, ``(..., S)``; a *value* ``V`` is
``(..., S)`` and broadcasts against it. Action values ``Q`` have the action on their last axis.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
import scipy.special

# ---------------------------------------------------------------------------- dynamics side


def _check_beta(beta) -> np.ndarray:
    beta = np.asarray(beta, dtype=float)
    if beta.ndim == 0:
        if not beta > 0:  # also rejects NaN
            raise ValueError(f"beta must be positive (np.inf for no dynamics regularisation), got {beta}")
    elif np.any(np.isnan(beta)) or np.any(beta <= 0):
        raise ValueError(f"beta must be positive (np.inf for no dynamics regularisation), got {beta}")
    return beta


def _support_shifted(P, V, b):
    """Slow path of :func:`kl_robust_expectation`: shift by the minimum over the support of ``P``."""
    P, V = np.broadcast_arrays(P, V)
    support = P > 0
    shift = np.min(np.where(support, V, np.inf), axis=-1, keepdims=True)
    tilt = np.exp(-(np.where(support, V, shift) - shift) / b[..., None])
    return shift[..., 0] - b * np.log(np.sum(P * tilt, axis=-1))


def kl_robust_expectation(P, V, beta) -> np.ndarray:
    r"""Regularised worst-case expectation :math:`\min_q E_q[V] + \beta\,KL(q\|P)`.

    Closed form (Donsker-Varadhan): :math:`-\beta \log \sum_{s'} P(s') e^{-V(s')/\beta}`. The
    exponent is shifted by the minimum of ``V`` so nothing overflows; rows whose sum underflows
    (the support of ``P`` far above that minimum) are recomputed with the minimum over the support.

    Parameters
    ----------
    P : array (..., S)
        Nominal next-state distributions (rows sum to one; zeros allowed).
    V : array broadcastable to (..., S)
        Next-state values.
    beta : float or array broadcastable to (...)
        Regularisation strength; ``np.inf`` gives the plain expectation ``P @ V``.

    Returns
    -------
    array (...)
    """
    P, V = np.asarray(P, float), np.asarray(V, float)
    beta = _check_beta(beta)
    if beta.ndim == 0:  # fast path (the common case inside value iteration)
        if np.isinf(beta):
            return np.einsum("...i,...i->...", P, V)
        shift = V.min(axis=-1, keepdims=True)
        mass = np.einsum("...i,...i->...", P, np.exp((shift - V) / beta))
        if np.all(mass >= 1e-280):
            return shift[..., 0] - beta * np.log(mass)
    finite = np.isfinite(beta)
    if not np.any(finite):
        return np.sum(P * V, axis=-1)
    b = np.where(finite, beta, 1.0)
    shift = V.min(axis=-1, keepdims=True)
    tilt = np.exp(-(V - shift) / b[..., None])  # computed on V's own (small) shape
    mass = np.einsum("...i,...i->...", P, tilt)
    b = np.broadcast_to(b, mass.shape)
    with np.errstate(divide="ignore"):
        out = np.broadcast_to(shift[..., 0], mass.shape) - b * np.log(mass)
    low = mass < 1e-280
    if np.any(low):
        out = np.where(low, _support_shifted(P, V, b), out)
    if not np.all(finite):
        out = np.where(finite, out, np.sum(P * V, axis=-1))
    return out


def worst_case_kernel(P, V, beta) -> np.ndarray:
    r"""Minimiser of :math:`E_q[V] + \beta KL(q\|P)`: :math:`q^\star \propto P\,e^{-V/\beta}`, shape (..., S)."""
    P, V = np.broadcast_arrays(np.asarray(P, float), np.asarray(V, float))
    beta = float(_check_beta(beta))
    if np.isinf(beta):
        return P.copy()
    support = P > 0
    shift = np.min(np.where(support, V, np.inf), axis=-1, keepdims=True)
    q = P * np.exp(-(np.where(support, V, shift) - shift) / beta)
    return q / q.sum(axis=-1, keepdims=True)


def kl_divergence(q, p) -> np.ndarray:
    """KL(q || p) along the last axis (0 log 0 = 0; ``inf`` where q puts mass outside p's support)."""
    q, p = np.broadcast_arrays(np.asarray(q, float), np.asarray(p, float))
    terms = scipy.special.rel_entr(q, p)  # q log(q / p), 0 where q = 0, inf where q > 0 = p: one ufunc pass
    return terms @ np.ones(terms.shape[-1])  # the sum over the last axis (faster than .sum on short axes)


def tv_worst_expectation(P, V, radius: float) -> np.ndarray:
    r"""Worst case :math:`\min\{E_q V : \tfrac12\|q-P\|_1 \le \varepsilon\}`, shape (...).

    The adversary moves up to ``radius`` of probability mass from the highest-value states to the
    lowest-value state (any state, in or out of the support of ``P``).
    """
    if not 0 <= radius <= 1:
        raise ValueError(f"radius must lie in [0, 1], got {radius}")
    P, V = np.broadcast_arrays(np.asarray(P, float), np.asarray(V, float))
    order = np.argsort(-V, axis=-1, kind="stable")
    p_sorted = np.take_along_axis(P, order, axis=-1)
    v_sorted = np.take_along_axis(V, order, axis=-1)
    before = np.cumsum(p_sorted, axis=-1) - p_sorted
    moved = np.clip(radius - before, 0.0, p_sorted)
    v_min = V.min(axis=-1, keepdims=True)
    return np.sum(P * V, axis=-1) - np.sum(moved * (v_sorted - v_min), axis=-1)


def kl_ball_expectation(P, V, radius: float, iterations: int = 90) -> np.ndarray:
    r"""KL-constrained worst case :math:`\min\{E_q V : KL(q\|P)\le\rho\}` by its 1-D dual.

    :math:`\sup_{\eta>0}\, -\eta\log E_P e^{-V/\eta} - \eta\rho`, concave in :math:`\eta`; a
    golden-section search on :math:`\log\eta` runs for every row at once, one new evaluation per
    iteration (the other interior point is kept); 90 iterations shrink the initial bracket of width
    ``log 10^12`` by ``0.618^90 ~ 1e-19``, below double precision. Shape (...).
    """
    if radius <= 0:
        raise ValueError(f"radius must be positive, got {radius}")
    P, V = np.broadcast_arrays(np.asarray(P, float), np.asarray(V, float))
    spread = np.ptp(V, axis=-1) + 1e-12
    lo = np.log(spread * 1e-6)
    hi = np.log(spread * 1e6)

    def dual(log_eta):
        eta = np.exp(log_eta)
        return kl_robust_expectation(P, V, eta) - eta * radius

    g = (np.sqrt(5.0) - 1.0) / 2.0
    a, b = lo, hi
    c, d = b - g * (b - a), a + g * (b - a)
    fc, fd = dual(c), dual(d)
    for _ in range(iterations):
        left = fc > fd  # the maximum lies in [a, d]: d becomes the new right point, c the new d
        a, b = np.where(left, a, c), np.where(left, d, b)
        keep, f_keep = np.where(left, c, d), np.where(left, fc, fd)  # the interior point that stays
        new = np.where(left, b - g * (b - a), a + g * (b - a))
        f_new = dual(new)
        c, d = np.where(left, new, keep), np.where(left, keep, new)
        fc, fd = np.where(left, f_new, f_keep), np.where(left, f_keep, f_new)
    # the limit eta -> 0 of the dual is the minimum over the support (attained when the ball holds a point mass)
    support_min = np.min(np.where(P > 0, V, np.inf), axis=-1)
    return np.maximum(np.maximum(fc, fd), support_min)


# ---------------------------------------------------------------------------- policy side


def _soft_max(Q, pi_ref, temperature: float):
    """Soft policy and soft value from one shifted exponential: returns ``(pi (..., A), V (...))``."""
    if not temperature > 0:
        raise ValueError(f"temperature must be positive, got {temperature}")
    Q = np.asarray(Q, float)
    A = Q.shape[-1]
    if A <= 8:  # a reduction over a short last axis is slow in NumPy: pairwise maxima instead
        top = Q[..., :1]
        for a in range(1, A):
            top = np.maximum(top, Q[..., a:a + 1])
    else:
        top = Q.max(axis=-1, keepdims=True)
    w = np.subtract(Q, top)
    w /= temperature
    np.exp(w, out=w)
    w *= pi_ref  # broadcasts (pi_ref has Q's shape or fewer leading axes)
    mass = (w @ np.ones(A))[..., None]  # a matrix-vector product sums a short axis faster than .sum
    return w / mass, top[..., 0] + temperature * np.log(mass[..., 0])


def soft_value(Q, pi_ref, temperature: float) -> np.ndarray:
    r"""Policy-regularised value :math:`\lambda\log\sum_a \pi_{ref}(a)e^{Q(a)/\lambda}`, shape (...)."""
    return _soft_max(Q, pi_ref, temperature)[1]


def soft_policy(Q, pi_ref, temperature: float) -> np.ndarray:
    r"""Maximiser :math:`\pi^\star \propto \pi_{ref}\, e^{Q/\lambda}` of the policy side, shape (..., A)."""
    return _soft_max(Q, pi_ref, temperature)[0]


def regularised_action_value(pi, Q, pi_ref, temperature: float) -> np.ndarray:
    r""":math:`\sum_a \pi(a)\,Q(a) - \lambda KL(\pi\|\pi_{ref})` for a fixed policy, shape (...)."""
    return np.sum(np.asarray(pi) * np.asarray(Q), axis=-1) - temperature * kl_divergence(pi, pi_ref)


# ---------------------------------------------------------------------------- Bellman recursion

Continuation = Callable[[np.ndarray, int], np.ndarray]


def tabular_continuation(P, beta) -> Continuation:
    """``V (..., S), h -> (..., S, A)``: the regularised next value under kernel ``P (..., S, A, S)``.

    ``P`` may carry a leading horizon axis ``(H, ..., S, A, S)`` when ``time_varying`` kernels are
    passed as a list.
    """
    if isinstance(P, (list, tuple)):
        return lambda V, h: kl_robust_expectation(P[h], V[..., None, None, :], beta)
    beta = _check_beta(beta)
    P = np.asarray(P, float)
    if P.ndim != 4 or (beta.ndim and beta.shape != P.shape[:1]):  # general shapes: the generic operator
        b = beta[..., None, None] if beta.ndim else beta
        return lambda V, h: kl_robust_expectation(P, V[..., None, None, :], b)
    # a batch of runs, P (R, S, A, S), V (R, S): one batched matrix-vector product per step
    R, S, A, _ = P.shape
    rows = P.reshape(R, S * A, S)
    finite = np.isfinite(beta) if beta.ndim else None
    scale = (np.where(finite, beta, 1.0) if beta.ndim else beta)

    def expect(w):  # (R, S) -> (R, S, A): sum_s' P(s'|s, a) w(s')
        return np.matmul(rows, w[:, :, None]).reshape(R, S, A)

    def continuation(V, h):
        if beta.ndim == 0 and np.isinf(beta):
            return expect(V)
        shift = V.min(axis=-1, keepdims=True)  # (R, 1)
        b = scale[:, None] if beta.ndim else scale
        mass = expect(np.exp((shift - V) / b))
        if not mass.min() >= 1e-280:  # rare: the exact slow path of kl_robust_expectation
            return kl_robust_expectation(P, V[..., None, None, :], beta[:, None, None] if beta.ndim else beta)
        out = shift[:, :, None] - (b[:, :, None] if beta.ndim else b) * np.log(mass)
        if finite is not None and not finite.all():
            out = np.where(finite[:, None, None], out, expect(V))
        return out

    return continuation


def rectangular_continuation(features, factors, beta) -> Continuation:
    r"""d-rectangular operator :math:`\sum_i \phi_i(s,a)\,(-\beta\log E_{\mu_i} e^{-V/\beta})`.

    ``features`` (..., S, A, d) rows on the simplex, ``factors`` (..., d, S) distributions.
    """
    features, factors = np.asarray(features, float), np.asarray(factors, float)
    if features.ndim == 4 and factors.ndim == 3 and np.ndim(beta) == 0:  # a batch of runs: matrix products
        R, S, A, d = features.shape
        rows = features.reshape(R, S * A, d)
        return lambda V, h: np.matmul(rows, kl_robust_expectation(factors, V[:, None, :], beta)[:, :, None]).reshape(R, S, A)
    return lambda V, h: np.einsum(
        "...sad,...d->...sa", features, kl_robust_expectation(factors, V[..., None, :], beta)
    )


def dr_backward(
    continuation: Continuation,
    reward,
    horizon: int,
    pi_ref,
    temperature: float,
    *,
    bonus=None,
    caps: Sequence[float] | None = None,
    policies=None,
):
    r"""Finite-horizon doubly regularised backward induction.

    :math:`Q_h = r + b + \mathcal C(V_{h+1})` (clipped at ``caps[h]``),
    :math:`V_h = \lambda\log\sum_a\pi_{ref}e^{Q_h/\lambda}` and :math:`\pi_h\propto\pi_{ref}e^{Q_h/\lambda}`,
    or, for given ``policies``, the evaluation :math:`V_h = \sum_a\pi_h Q_h - \lambda KL(\pi_h\|\pi_{ref})`.

    Parameters
    ----------
    continuation : callable ``(V (..., S), h) -> (..., S, A)``
        The dynamics side (:func:`tabular_continuation`, :func:`rectangular_continuation`, ...).
    reward : array (..., S, A), or a list of ``horizon`` such arrays
    pi_ref : array (..., S, A)
    bonus : array (..., S, A), optional
    caps : sequence of ``horizon`` floats, optional
        Upper clip of ``Q_h`` (the largest achievable value from step ``h``).
    policies : array (H, ..., S, A), optional
        Evaluate these policies instead of optimising.

    Returns
    -------
    policies : array (H, ..., S, A)
    values : array (H + 1, ..., S); ``values[H] = 0``.
    """
    if horizon < 1:
        raise ValueError(f"horizon must be at least 1, got {horizon}")
    rewards = list(reward) if isinstance(reward, (list, tuple)) else [reward] * horizon
    if len(rewards) != horizon:
        raise ValueError(f"need {horizon} reward arrays, got {len(rewards)}")
    if bonus is not None:  # r + b once, not at every step
        rewards = [r + bonus for r in rewards] if isinstance(reward, (list, tuple)) else [reward + bonus] * horizon
    V = np.zeros(np.shape(rewards[-1])[:-1])
    values, pis = [V], []
    if policies is not None:  # the KL term of a fixed policy does not depend on Q: all steps at once
        policy_kl = temperature * kl_divergence(policies, pi_ref)
    for h in reversed(range(horizon)):
        Q = rewards[h] + continuation(V, h)  # a fresh array (the continuation's result is not modified)
        if caps is not None:
            np.minimum(Q, caps[h], out=Q)
        if policies is None:
            pi, V = _soft_max(Q, pi_ref, temperature)
        else:
            pi = policies[h]
            V = np.einsum("...a,...a->...", pi, Q) - policy_kl[h]  # regularised_action_value
        values.append(V)
        pis.append(pi)
    return np.stack(pis[::-1]), np.stack(values[::-1])


# ---------------------------------------------------------------------------- reference solvers

# Interior-point tolerances: 1e-10 for the regularised problems (checked to 1e-8), 1e-9 for the KL
# ball (checked to 1e-7; at 1e-10 Clarabel sometimes stops "inaccurate" on it).
_CLARABEL_TIGHT = dict(tol_gap_abs=1e-10, tol_gap_rel=1e-10, tol_feas=1e-10)
_CLARABEL_BALL = dict(tol_gap_abs=1e-9, tol_gap_rel=1e-9, tol_feas=1e-9)


def _on_simplex(x) -> np.ndarray:
    """Project an interior-point solution onto the simplex (it may sit 1e-12 outside it)."""
    x = np.clip(np.asarray(x, float), 0.0, None)
    return x / x.sum()


def cvxpy_dynamics_dual(p, v, beta: float):
    r"""Solve :math:`\min_{q\in\Delta} v^\top q + \beta KL(q\|p)` with cvxpy (Clarabel); returns (value, q).

    The value is the objective at the solver's ``q`` projected onto the simplex: cvxpy's own
    ``problem.value`` is ``inf`` when a coordinate of ``q`` comes back as -1e-13.
    """
    import cvxpy as cp

    p, v = np.asarray(p, float), np.asarray(v, float)
    q = cp.Variable(len(p))
    problem = cp.Problem(cp.Minimize(v @ q + beta * cp.sum(cp.rel_entr(q, p))), [cp.sum(q) == 1])
    problem.solve(solver=cp.CLARABEL, **_CLARABEL_TIGHT)
    q_hat = _on_simplex(q.value)
    return float(v @ q_hat + beta * kl_divergence(q_hat, p)), q_hat


def cvxpy_policy_dual(pi_ref, Q, temperature: float):
    r"""Solve :math:`\max_{\pi\in\Delta} Q^\top\pi - \lambda KL(\pi\|\pi_{ref})` with cvxpy; returns (value, pi)."""
    import cvxpy as cp

    pi_ref, Q = np.asarray(pi_ref, float), np.asarray(Q, float)
    pi = cp.Variable(len(pi_ref))
    objective = cp.Maximize(Q @ pi - temperature * cp.sum(cp.rel_entr(pi, pi_ref)))
    problem = cp.Problem(objective, [cp.sum(pi) == 1])
    problem.solve(solver=cp.CLARABEL, **_CLARABEL_TIGHT)
    pi_hat = _on_simplex(pi.value)
    return float(Q @ pi_hat - temperature * kl_divergence(pi_hat, pi_ref)), pi_hat


def cvxpy_kl_ball(p, v, radius: float):
    r"""Solve the constrained robust step :math:`\min\{v^\top q: q\in\Delta, KL(q\|p)\le\rho\}`; returns (value, q)."""
    import cvxpy as cp

    p, v = np.asarray(p, float), np.asarray(v, float)
    q = cp.Variable(len(p))
    problem = cp.Problem(cp.Minimize(v @ q), [cp.sum(q) == 1, cp.sum(cp.rel_entr(q, p)) <= radius])
    problem.solve(solver=cp.CLARABEL, **_CLARABEL_BALL)
    q_hat = _on_simplex(q.value)
    return float(v @ q_hat), q_hat


def cvxpy_kl_ball_values(P, V, radius: float) -> np.ndarray:
    """:func:`cvxpy_kl_ball` for every row of ``P (..., S)`` against ``V (..., S)`` (a slow reference)."""
    P, V = np.broadcast_arrays(np.asarray(P, float), np.asarray(V, float))
    flat_p, flat_v = P.reshape(-1, P.shape[-1]), V.reshape(-1, V.shape[-1])
    out = np.array([cvxpy_kl_ball(p, v, radius)[0] for p, v in zip(flat_p, flat_v)])
    return out.reshape(P.shape[:-1])


# ---------------------------------------------------------------------------- continuous actions


def gaussian_soft_value(ref_mean, ref_std, curvature, peak, top, temperature):
    r"""Closed form of :math:`\lambda\log E_{a\sim N(m_0,s_0^2)}\exp(Q(a)/\lambda)` for
    :math:`Q(a) = c - k(a-a^\star)^2`:

    :math:`c - \tfrac\lambda2\log(1+2ks_0^2/\lambda) - k(m_0-a^\star)^2/(1+2ks_0^2/\lambda)`.
    """
    if np.any(np.asarray(ref_std) <= 0) or np.any(np.asarray(temperature) <= 0) or np.any(np.asarray(curvature) < 0):
        raise ValueError("ref_std and temperature must be positive and curvature non-negative")
    ratio = 1.0 + 2.0 * curvature * ref_std**2 / temperature
    return top - 0.5 * temperature * np.log(ratio) - curvature * (ref_mean - peak) ** 2 / ratio


def gaussian_soft_policy(ref_mean, ref_std, curvature, peak, temperature):
    r"""The optimal policy :math:`\propto N(m_0,s_0^2)e^{Q/\lambda}` is Gaussian: returns (mean, std)."""
    precision = 1.0 / ref_std**2 + 2.0 * curvature / temperature
    mean = (ref_mean / ref_std**2 + 2.0 * curvature * peak / temperature) / precision
    return mean, 1.0 / np.sqrt(precision)


def quadrature_soft_value(ref_mean, ref_std, curvature, peak, top, temperature):
    """The same quantity by adaptive 1-D quadrature (scipy.integrate.quad); returns (value, mean of pi*)."""
    from scipy import integrate

    def log_weight(a):
        return -0.5 * ((a - ref_mean) / ref_std) ** 2 - curvature * (a - peak) ** 2 / temperature

    lo, hi = ref_mean - 40.0 * ref_std, ref_mean + 40.0 * ref_std
    pts = [x for x in (peak, ref_mean) if lo < x < hi]
    opts = dict(points=pts, epsabs=1e-15, epsrel=1e-12, limit=500)
    mass = integrate.quad(lambda a: np.exp(log_weight(a)), lo, hi, **opts)[0]
    first = integrate.quad(lambda a: a * np.exp(log_weight(a)), lo, hi, **opts)[0]
    log_mass = np.log(mass) - np.log(ref_std * np.sqrt(2.0 * np.pi))
    return top + temperature * log_mass, first / mass
