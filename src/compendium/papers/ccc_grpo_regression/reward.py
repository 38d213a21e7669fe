r"""The concordance correlation coefficient (CCC) and the batch CCC reward with leave-one-out anchors.

Our reconstruction (the paper's formulas were read from a summary, not the paper):

.. math::  \mathrm{CCC}(x, y) = \frac{2\,\mathrm{cov}(x, y)}{\sigma_x^2 + \sigma_y^2 + (\mu_x - \mu_y)^2}
           = \rho \cdot \frac{2}{v + 1/v + u^2},\quad v = \frac{\sigma_x}{\sigma_y},\
           u = \frac{\mu_x - \mu_y}{\sqrt{\sigma_x \sigma_y}}

(population moments, 1/B). For a batch of B inputs with G rollouts each, predictions
:math:`\hat y_{j,g}`, the anchor of input j is :math:`m_j = \frac1G\sum_g \hat y_{j,g}`; rollout
(i, g) is scored together with the *other* inputs' anchors,

.. math::  r_{i,g} = \mathrm{CCC}\big(z^{(i,g)}, y\big),\qquad z^{(i,g)}_j = m_j\ (j \ne i),\quad
           z^{(i,g)}_i = \hat y_{i,g}.

Every rollout outputs a valid bin here, so the paper's format reward is constant and left out.
"""

from __future__ import annotations

import numpy as np
import sympy as sp
import torch

__all__ = ["ccc", "pearson", "ccc_loo_rewards", "ccc_loo_rewards_bruteforce", "pointwise_rewards",
           "reward_curve", "reward_argmax", "ccc_identity_gap", "ccc_bound_gaps", "ccc_shift_scale"]


def _moments(x: np.ndarray, y: np.ndarray):
    mx, my = x.mean(-1), y.mean(-1)
    vx, vy = x.var(-1), y.var(-1)
    cov = (x * y).mean(-1) - mx * my
    return mx, my, vx, vy, cov


def ccc(x, y) -> np.ndarray:
    """Lin's concordance correlation along the last axis (population moments).

    Parameters
    ----------
    x, y : array_like, shape (..., n)

    Returns
    -------
    numpy.ndarray, shape (...)
        In [-1, 1]; 1 exactly when x = y.
    """
    x, y = np.asarray(x, float), np.asarray(y, float)
    if x.shape != y.shape or x.shape[-1] < 2:
        raise ValueError(f"x and y need one shape (..., n >= 2), got {x.shape} and {y.shape}")
    mx, my, vx, vy, cov = _moments(x, y)
    return 2 * cov / (vx + vy + (mx - my) ** 2)


def pearson(x, y) -> np.ndarray:
    """Pearson's correlation along the last axis."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    _, _, vx, vy, cov = _moments(x, y)
    return cov / np.sqrt(vx * vy)


def ccc_loo_rewards(preds: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Batch CCC rewards with leave-one-out anchors, vectorised.

    Parameters
    ----------
    preds : torch.Tensor, shape (..., B, G)
        Sampled predictions (G rollouts for each of B inputs).
    y : torch.Tensor, shape (..., B)
        Targets of the batch.

    Returns
    -------
    torch.Tensor, shape (..., B, G), float64
        ``r[i, g] = CCC(z, y)`` with ``z_j`` the mean prediction of input ``j != i`` and
        ``z_i = preds[i, g]``; computed from running sums, O(B G).
    """
    p, y = torch.as_tensor(preds, dtype=torch.float64), torch.as_tensor(y, dtype=torch.float64)
    if p.dim() < 2 or p.shape[:-1] != y.shape or p.shape[-2] < 2:
        raise ValueError(f"preds (..., B, G) and y (..., B) must agree with B >= 2, got {tuple(p.shape)}, {tuple(y.shape)}")
    b = p.shape[-2]
    m = p.mean(-1)                                                   # (..., B) anchors
    s_m, s_mm, s_my = m.sum(-1), (m * m).sum(-1), (m * y).sum(-1)    # (...)
    mu_y = y.mean(-1)
    var_y = y.var(-1, unbiased=False)
    # swap input i's anchor for the rollout: sums without m_i, plus preds[i, g]
    s_z = (s_m[..., None] - m)[..., None] + p                        # (..., B, G)
    s_zz = (s_mm[..., None] - m * m)[..., None] + p * p
    s_zy = (s_my[..., None] - m * y)[..., None] + p * y[..., None]
    mu_z = s_z / b
    var_z = s_zz / b - mu_z ** 2
    cov = s_zy / b - mu_z * mu_y[..., None, None]
    return 2 * cov / (var_z + var_y[..., None, None] + (mu_z - mu_y[..., None, None]) ** 2)


def ccc_loo_rewards_bruteforce(preds, y) -> np.ndarray:
    """The same rewards by an explicit loop over (i, g) (reference for tests; shape (B, G))."""
    p, y = np.asarray(preds, float), np.asarray(y, float)
    b, g = p.shape
    m = p.mean(1)
    out = np.empty((b, g))
    for i in range(b):
        for k in range(g):
            z = m.copy()
            z[i] = p[i, k]
            out[i, k] = ccc(z, y)
    return out


def pointwise_rewards(preds: torch.Tensor, y: torch.Tensor, scale) -> torch.Tensor:
    """``-|preds - y| / scale`` for preds (..., B, G), y (..., B) and scale a float or (...) (float64)."""
    p, y = torch.as_tensor(preds, dtype=torch.float64), torch.as_tensor(y, dtype=torch.float64)
    s = torch.as_tensor(scale, dtype=torch.float64)
    if not bool((s > 0).all()):
        raise ValueError(f"scale must be positive, got {scale!r}")
    return -(p - y[..., None]).abs() / s.reshape(s.shape + (1, 1))


def reward_curve(y, anchors, index: int, candidates) -> np.ndarray:
    """The CCC reward of input ``index`` as a function of its prediction, the others at ``anchors``.

    Parameters
    ----------
    y, anchors : array_like, shape (B,)
        Targets and the anchors ``m_j`` (``anchors[index]`` is ignored).
    index : int
    candidates : array_like, shape (C,)
        Values of the prediction for input ``index`` (e.g. the bin centres).

    Returns
    -------
    numpy.ndarray, shape (C,)
    """
    y, m = np.asarray(y, float), np.asarray(anchors, float)
    c = np.asarray(candidates, float)
    z = np.repeat(m[None, :], len(c), axis=0)
    z[:, index] = c
    return ccc(z, np.broadcast_to(y, z.shape))


def reward_argmax(y, anchors, index: int, candidates) -> float:
    """The candidate that maximises :func:`reward_curve` (the reward's preferred prediction)."""
    c = np.asarray(candidates, float)
    return float(c[int(np.argmax(reward_curve(y, anchors, index, c)))])


# ------------------------------------------------------------------------------ sympy identities
def ccc_identity_gap() -> sp.Expr:
    """``CCC - rho * 2 / (v + 1/v + u^2)`` in terms of the moments (sympy; simplifies to 0)."""
    sx, sy = sp.symbols("sigma_x sigma_y", positive=True)
    mx, my, rho = sp.symbols("mu_x mu_y rho", real=True)
    ccc_expr = 2 * rho * sx * sy / (sx**2 + sy**2 + (mx - my) ** 2)
    v, u = sx / sy, (mx - my) / sp.sqrt(sx * sy)
    return sp.simplify(ccc_expr - rho * 2 / (v + 1 / v + u**2))


def ccc_bound_gaps() -> tuple[sp.Expr, sp.Expr]:
    """Sum-of-squares forms of ``1 - CCC`` and ``1 + CCC`` (each difference simplifies to 0).

    ``(1 - CCC) D = (sx - sy)^2 + (mx - my)^2 + 2 sx sy (1 - rho)`` and
    ``(1 + CCC) D = (sx + rho sy)^2 + sy^2 (1 - rho^2) + (mx - my)^2`` with
    ``D = sx^2 + sy^2 + (mx - my)^2 > 0``: both right-hand sides are >= 0 for |rho| <= 1, so
    CCC lies in [-1, 1], and 1 - CCC = 0 needs sx = sy, mx = my and rho = 1 (then x = y).
    """
    sx, sy = sp.symbols("sigma_x sigma_y", positive=True)
    mx, my, rho = sp.symbols("mu_x mu_y rho", real=True)
    d = sx**2 + sy**2 + (mx - my) ** 2
    c = 2 * rho * sx * sy / d
    upper = sp.simplify((1 - c) * d - ((sx - sy) ** 2 + (mx - my) ** 2 + 2 * sx * sy * (1 - rho)))
    lower = sp.simplify((1 + c) * d - ((sx + rho * sy) ** 2 + sy**2 * (1 - rho**2) + (mx - my) ** 2))
    return upper, lower


def ccc_shift_scale() -> tuple[sp.Expr, sp.Expr]:
    """CCC and Pearson of ``(a x + b, x)`` for a sample x with mean mu and sd s, a > 0 (sympy).

    Returns two expressions that simplify to 0: ``(1 - CCC) - ((a - 1)^2 s^2 + (b + (a - 1) mu)^2) / D``
    (so ``1 - CCC`` is a sum of squares over ``D > 0``, zero only for a = 1 and b = 0: any shift or
    rescaling lowers CCC) and ``1 - rho`` (Pearson stays 1 for every a > 0 and b).
    """
    a, s = sp.symbols("a s", positive=True)
    b, mu = sp.symbols("b mu", real=True)
    # moments of x' = a x + b against x: mean a mu + b, sd a s, covariance a s^2, rho = 1
    d = a**2 * s**2 + s**2 + (a * mu + b - mu) ** 2
    c = 2 * a * s**2 / d
    rho = a * s**2 / (a * s * s)
    sos = ((a - 1) ** 2 * s**2 + (b + (a - 1) * mu) ** 2) / d
    return sp.simplify(1 - c - sos), sp.simplify(1 - rho)
