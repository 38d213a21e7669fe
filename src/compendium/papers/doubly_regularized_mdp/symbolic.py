r"""Sympy residuals behind the symbolic checks (each simplifies to 0 when the claim holds)."""

from __future__ import annotations

import sympy as sp


def gibbs_residual(num_points: int = 3):
    r"""Dynamics side, for every ``q`` on the simplex of ``num_points`` states:

    :math:`E_q v + \beta KL(q\|p) = -\beta\log Z + \beta KL(q\|q^\star)`, :math:`Z=\sum_i p_i e^{-v_i/\beta}`,
    :math:`q^\star_i = p_i e^{-v_i/\beta}/Z`. As :math:`KL(q\|q^\star)\ge 0` with equality only at
    :math:`q=q^\star`, this proves both the value and the minimiser. Returns left minus right side,
    with :math:`q_n = 1-\sum_{i<n} q_i`.
    """
    if num_points < 2:
        raise ValueError(f"num_points must be at least 2, got {num_points}")
    beta = sp.Symbol("beta", positive=True)
    p = sp.symbols(f"p0:{num_points}", positive=True)
    v = sp.symbols(f"v0:{num_points}", real=True)
    q_free = sp.symbols(f"q0:{num_points - 1}", positive=True)
    q = list(q_free) + [1 - sum(q_free)]
    Z = sum(pi * sp.exp(-vi / beta) for pi, vi in zip(p, v))
    q_star = [pi * sp.exp(-vi / beta) / Z for pi, vi in zip(p, v)]
    lhs = sum(qi * vi for qi, vi in zip(q, v)) + beta * sum(qi * sp.log(qi / pi) for qi, pi in zip(q, p))
    rhs = -beta * sp.log(Z) + beta * sum(qi * sp.log(qi / qs) for qi, qs in zip(q, q_star))
    return sp.simplify(sp.expand(sp.expand_log(lhs - rhs, force=True)))


def policy_gibbs_residual(num_actions: int = 3):
    r"""Policy side: :math:`\langle\pi,Q\rangle - \lambda KL(\pi\|\pi_{ref}) = \lambda\log\sum_a\pi_{ref}e^{Q/\lambda}
    - \lambda KL(\pi\|\pi^\star)` with :math:`\pi^\star\propto\pi_{ref}e^{Q/\lambda}`; left minus right."""
    if num_actions < 2:
        raise ValueError(f"num_actions must be at least 2, got {num_actions}")
    lam = sp.Symbol("lambda", positive=True)
    ref = sp.symbols(f"r0:{num_actions}", positive=True)
    Q = sp.symbols(f"Q0:{num_actions}", real=True)
    pi_free = sp.symbols(f"pi0:{num_actions - 1}", positive=True)
    pi = list(pi_free) + [1 - sum(pi_free)]
    Z = sum(ri * sp.exp(qi / lam) for ri, qi in zip(ref, Q))
    pi_star = [ri * sp.exp(qi / lam) / Z for ri, qi in zip(ref, Q)]
    lhs = sum(a * qi for a, qi in zip(pi, Q)) - lam * sum(a * sp.log(a / ri) for a, ri in zip(pi, ref))
    rhs = lam * sp.log(Z) - lam * sum(a * sp.log(a / s) for a, s in zip(pi, pi_star))
    return sp.simplify(sp.expand(sp.expand_log(lhs - rhs, force=True)))


def two_point_stationarity():
    r"""First-order condition on two points. With weights :math:`p, \bar p` on the two states,
    :math:`f(t) = t v_1 + (1-t) v_2 + \beta[t\log(t/p) + (1-t)\log((1-t)/\bar p)]` (the KL term up
    to a constant when :math:`\bar p = 1-p`). Returns :math:`f'(t^\star)` at
    :math:`t^\star = pe^{-v_1/\beta}/(pe^{-v_1/\beta}+\bar pe^{-v_2/\beta})` and :math:`f''(t)`."""
    t, p, p_bar = sp.symbols("t p p_bar", positive=True)
    v1, v2 = sp.symbols("v1 v2", real=True)
    beta = sp.Symbol("beta", positive=True)
    f = t * v1 + (1 - t) * v2 + beta * (t * sp.log(t / p) + (1 - t) * sp.log((1 - t) / p_bar))
    a, b = p * sp.exp(-v1 / beta), p_bar * sp.exp(-v2 / beta)
    first = sp.diff(f, t).subs(t, a / (a + b))
    first = sp.simplify(sp.expand_log(sp.simplify(first), force=True))
    return first, sp.simplify(sp.diff(f, t, 2))


def regret_bound():
    r"""The bound form we take from the card (the paper's constants are unknown):

    :math:`B(K) = F(\beta,H)\,H\sqrt{S^2 A K\,\iota}`, :math:`\iota=\log(SAHK/\delta)`,
    :math:`F(\beta,H) = \beta(e^{H/\beta}-1)`. Returns ``(B, F, symbols)``.
    """
    K, S, A, H, beta, delta = sp.symbols("K S A H beta delta", positive=True)
    F = beta * (sp.exp(H / beta) - 1)
    B = F * H * sp.sqrt(S**2 * A * K * sp.log(S * A * H * K / delta))
    return B, F, dict(K=K, S=S, A=A, H=H, beta=beta, delta=delta)


def regret_rate_exponent():
    """``lim_{K->oo} log B(K) / log K`` (1/2 means the bound is O(sqrt K) up to logs)."""
    B, _, s = regret_bound()
    return sp.limit(sp.log(B) / sp.log(s["K"]), s["K"], sp.oo)


def beta_factor_limits():
    """``(lim_{beta->oo} F - H, lim_{beta->0+} F)``: the non-robust limit and the robust blow-up."""
    _, F, s = regret_bound()
    return sp.simplify(sp.limit(F, s["beta"], sp.oo) - s["H"]), sp.limit(F, s["beta"], 0, "+")


def beta_factor_value(beta: float, horizon: int) -> float:
    """``F(beta, H)`` evaluated (``np.inf`` beta gives the limit H)."""
    _, F, s = regret_bound()
    if beta == float("inf"):
        return float(horizon)
    return float(F.subs({s["beta"]: beta, s["H"]: horizon}))
