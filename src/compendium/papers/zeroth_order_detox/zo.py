r"""Zeroth-order gradient estimators, the descent on input embeddings, and their exact checks.

Random-direction estimators of :math:`\nabla f(x)`, batched over rows ``x`` of shape ``(B, D)``::

    symmetric:  g = 1/q sum_j [f(x + delta u_j) - f(x - delta u_j)] / (2 delta) u_j     (2q calls)
    forward:    g = 1/q sum_j [f(x + delta u_j) - f(x)] / delta u_j                      (q + 1 calls)

with ``u_j`` Gaussian, Rademacher, or uniform on the sphere of radius ``sqrt(D)`` (all three have
``E[u u^T] = I``). For a stochastic ``f`` use :func:`common_random_numbers`, which evaluates
every point of one estimate with the same random numbers. :func:`descent` takes ``K`` normalised
steps ``x <- x - eta ||x_0|| g / ||g||`` and optionally projects onto ``||x - x_0|| <= rho ||x_0||``.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import sympy as sp
import torch

DISTRIBUTIONS = ("gaussian", "rademacher", "sphere")


def directions(rows: int, q: int, dim: int, dist: str, generator: torch.Generator,
               dtype=torch.float32) -> torch.Tensor:
    """Random directions ``(rows, q, dim)`` with ``E[u u^T] = I``."""
    if dist not in DISTRIBUTIONS:
        raise ValueError(f"dist must be one of {DISTRIBUTIONS}, got {dist!r}")
    u = torch.randn(rows, q, dim, generator=generator, dtype=dtype)
    if dist == "rademacher":
        u = torch.sign(u) + (u == 0)
    elif dist == "sphere":
        u = u / u.norm(dim=-1, keepdim=True) * dim ** 0.5
    return u


def zo_gradient(f: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, q: int, delta: float, *,
                dist: str = "gaussian", symmetric: bool = True, generator: torch.Generator) -> tuple[torch.Tensor, int]:
    """Zeroth-order estimate of the gradient of ``f`` at each row of ``x``.

    Parameters
    ----------
    f : callable
        ``f(X) -> values``, ``(N, D) -> (N,)``, forward evaluations only.
    x : torch.Tensor, shape (B, D)
    q : int
        Directions per row.
    delta : float or torch.Tensor of shape (B,)
        Smoothing radius (> 0), one for all rows or one per row.
    dist, symmetric : see the module docstring.
    generator : torch.Generator

    Returns
    -------
    (g, calls) : the estimate ``(B, D)`` and the number of ``f`` evaluations per row.
    """
    B, D = x.shape
    delta = torch.as_tensor(delta, dtype=x.dtype).reshape(-1)
    if q < 1 or not bool((delta > 0).all()) or delta.numel() not in (1, B):
        raise ValueError(f"need q >= 1 and delta > 0 (a scalar or one per row), got q={q}, delta={delta}")
    u = directions(B, q, D, dist, generator, x.dtype)                       # (B, q, D)
    d = delta.reshape(-1, 1)                                                # (B or 1, 1)
    plus = f((x[:, None] + d[..., None] * u).reshape(B * q, D)).reshape(B, q)
    if symmetric:
        minus = f((x[:, None] - d[..., None] * u).reshape(B * q, D)).reshape(B, q)
        coef, calls = (plus - minus) / (2 * d), 2 * q
    else:
        coef, calls = (plus - f(x)[:, None]) / d, q + 1
    return torch.einsum("bq,bqd->bd", coef, u) / q, calls


def common_random_numbers(f_noisy: Callable[[torch.Tensor, torch.Generator], torch.Tensor], seed: int):
    """``f(X)`` that calls ``f_noisy(X, generator)`` with a freshly seeded generator each time.

    Every evaluation of one estimate then shares its random numbers (samples, dropout), so noise
    common to ``f(x + delta u)`` and ``f(x - delta u)`` cancels in their difference.
    """
    def f(X: torch.Tensor) -> torch.Tensor:
        return f_noisy(X, torch.Generator().manual_seed(int(seed)))
    return f


def project_ball(x: torch.Tensor, x0: torch.Tensor, radius: torch.Tensor | float) -> torch.Tensor:
    """Rows of ``x`` projected onto ``||x - x0|| <= radius`` (radius per row or scalar)."""
    step = x - x0
    norm = step.norm(dim=-1, keepdim=True)
    r = torch.as_tensor(radius, dtype=x.dtype).reshape(-1, 1) if torch.is_tensor(radius) else radius
    return x0 + step * torch.clamp(r / norm.clamp_min(1e-30), max=1.0)


def descent(gradient: Callable[[torch.Tensor], torch.Tensor], x0: torch.Tensor, steps: int, eta: float, *,
            radius: float | None = None, trace: Callable[[torch.Tensor], torch.Tensor] | None = None):
    """``steps`` normalised descent steps from rows ``x0`` ``(B, D)``.

    ``x <- x - eta ||x0|| g / ||g||`` with ``g = gradient(x)`` (a ZO estimate or autograd), then
    the projection onto ``||x - x0|| <= radius ||x0||`` when ``radius`` is given. ``trace(x)``
    (e.g. the exact surrogate) is recorded before the first and after every step.

    Returns
    -------
    (x_K, values) : final rows ``(B, D)`` and ``(steps + 1, B)`` trace values (or None).
    """
    scale = x0.norm(dim=-1, keepdim=True)
    x = x0.clone()
    values = [trace(x)] if trace is not None else None
    for _ in range(int(steps)):
        g = gradient(x)
        x = x - eta * scale * g / g.norm(dim=-1, keepdim=True).clamp_min(1e-30)
        if radius is not None:
            x = project_ball(x, x0, radius * scale[:, 0])
        if trace is not None:
            values.append(trace(x))
    return x, (torch.stack(values) if values is not None else None)


def random_of_norm(x0: torch.Tensor, x_ref: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """``x0`` plus a random Gaussian direction scaled to ``||x_ref - x0||`` per row (the ablation)."""
    xi = torch.randn(x0.shape, generator=generator, dtype=x0.dtype)
    return x0 + xi / xi.norm(dim=-1, keepdim=True) * (x_ref - x0).norm(dim=-1, keepdim=True)


def cosine(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Row-wise cosine ``(B,)``."""
    return (a * b).sum(-1) / (a.norm(dim=-1) * b.norm(dim=-1)).clamp_min(1e-30)


def expected_sq_norm_factor(dim: int, q: int) -> float:
    r"""Gaussian directions, linear ``f``: :math:`E\|\hat g\|^2 / \|\nabla f\|^2 = 1 + (D + 1)/q`."""
    return 1.0 + (dim + 1) / q


def cosine_law(dim: int, q) -> np.ndarray:
    r"""Large-sample cosine :math:`1/\sqrt{1 + (D+1)/q}` (about :math:`\sqrt{q/D}` for q << D)."""
    return 1.0 / np.sqrt(1.0 + (dim + 1) / np.asarray(q, dtype=float))


# ------------------------------------------------------------------------------ symbolic checks
def _gaussian_expectation(expr: sp.Expr, u: list[sp.Symbol]) -> sp.Expr:
    """E over independent standard normal ``u`` of a polynomial: E[u^k] = (k-1)!! for even k, else 0."""
    poly = sp.Poly(sp.expand(expr), *u)
    total = sp.Integer(0)
    for powers, coeff in poly.terms():
        m = sp.Integer(1)
        for k in powers:
            m *= 0 if k % 2 else sp.factorial2(k - 1)
        total += coeff * m
    return sp.simplify(total)


def symbolic_norm_law(max_dim: int = 5) -> sp.Expr:
    r"""Sum over D = 1..max_dim of :math:`E\|\hat g\|^2 - (1 + (D+1)/q)\|g\|^2` (symbolic q, g); 0 if the law holds.

    For linear ``f`` the symmetric estimate is ``1/q sum_j u_j u_j^T g``; with independent
    directions :math:`E\|\hat g\|^2 = \frac1q E[(g^\top u)^2\|u\|^2] + \frac{q-1}{q}\|g\|^2`.
    """
    q = sp.Symbol("q", positive=True)
    total = sp.Integer(0)
    for D in range(1, max_dim + 1):
        g = sp.symbols(f"g0:{D}", real=True)
        u = list(sp.symbols(f"u0:{D}", real=True))
        gu = sum(gi * ui for gi, ui in zip(g, u))
        uu = sum(ui**2 for ui in u)
        gg = sum(gi**2 for gi in g)
        fourth = _gaussian_expectation(gu**2 * uu, u)
        expected = (fourth + (q - 1) * gg) / q
        total += sp.simplify(expected - (1 + sp.Integer(D + 1) / q) * gg)
    return sp.simplify(total)


def symbolic_forward_bias(dim: int = 3) -> sp.Expr:
    r"""Forward difference on a quadratic: bias :math:`\tfrac{\delta}{2}E[(u^\top Q u)u]`, summed over coordinates (0)."""
    delta = sp.Symbol("delta", positive=True)
    u = list(sp.symbols(f"u0:{dim}", real=True))
    Q = sp.Matrix(dim, dim, lambda i, j: sp.Symbol(f"Q{min(i, j)}{max(i, j)}"))
    uv = sp.Matrix(u)
    quad = (uv.T * Q * uv)[0]
    return sp.simplify(sum(sp.Abs(_gaussian_expectation(delta / 2 * quad * ui, u)) for ui in u))


def symbolic_symmetric_unbiased(dim: int = 3) -> sp.Expr:
    r"""Symmetric difference on :math:`f = \tfrac12 x^\top Q x + b^\top x`: :math:`\sum_i |E\hat g_i - (Qx + b)_i|` (0 for every delta)."""
    delta = sp.Symbol("delta", positive=True)
    u = list(sp.symbols(f"u0:{dim}", real=True))
    x = sp.Matrix(sp.symbols(f"x0:{dim}", real=True))
    b = sp.Matrix(sp.symbols(f"b0:{dim}", real=True))
    Q = sp.Matrix(dim, dim, lambda i, j: sp.Symbol(f"Q{min(i, j)}{max(i, j)}"))
    uv = sp.Matrix(u)
    f = lambda z: ((z.T * Q * z)[0] / 2 + (b.T * z)[0])  # noqa: E731
    coef = sp.expand((f(x + delta * uv) - f(x - delta * uv)) / (2 * delta))
    grad = Q * x + b
    return sp.simplify(sum(sp.Abs(_gaussian_expectation(coef * u[i], u) - grad[i]) for i in range(dim)))


# ---------------------------------------------------------------------------- compute accounting
def zo_positions(q: int, steps: int, prompt_length: int, *, symmetric: bool = True) -> int:
    """Token positions the ZO search runs through the LM per prompt (each surrogate call: one prompt pass)."""
    calls = 2 * q if symmetric else q + 1
    return int(steps) * calls * int(prompt_length)


def generation_positions(samples: int, prompt_length: int, length: int) -> int:
    """Token positions to sample ``samples`` continuations of ``length``: one prompt pass, then a KV cache.

    The prompt's ``prompt_length`` positions run once and its cache is shared by the samples; each
    sample then runs ``length - 1`` single-token steps (the last token is never fed back).
    """
    return int(prompt_length) + int(samples) * (int(length) - 1)


def matched_best_of_n(q: int, steps: int, samples: int, prompt_length: int, length: int,
                      *, symmetric: bool = True) -> int:
    """The largest ``N`` whose best-of-``N`` generation costs no more token positions than ZO + generation.

    ZO: ``zo_positions + generation_positions(samples)``; best-of-N: ``generation_positions(samples N)``.
    """
    zo_total = zo_positions(q, steps, prompt_length, symmetric=symmetric) + generation_positions(samples, prompt_length, length)
    per_sample = int(samples) * (int(length) - 1)
    return max(1, (zo_total - int(prompt_length)) // per_sample)
