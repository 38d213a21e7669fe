"""Monotone affine variational inequalities on products of balls or simplices, and their gaps.

A problem is ``F(z) = M z + q`` on ``Z = Z_1 x ... x Z_k`` (one block per player). ``M``'s
symmetric part is positive semidefinite (monotone) or ``>= lambda I`` (strongly monotone).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

DOMAINS = ("ball", "simplex")


@dataclass(frozen=True)
class AffineVI:
    """A monotone affine VI ``<F(z*), z - z*> >= 0`` for all ``z`` in a product set.

    Parameters
    ----------
    name : str
        Short label used in tables and figures.
    matrix : ndarray, shape (d, d)
        ``M``; its symmetric part must be positive semidefinite.
    shift : ndarray, shape (d,)
        ``q``.
    blocks : tuple of (int, int)
        ``[start, stop)`` index ranges of the players' blocks; they tile ``0..d`` in order.
    domain : {'ball', 'simplex'}
        Each block is a centred Euclidean ball of radius ``radius`` or a probability simplex.
    radius : float
        Radius of every ball (ignored for simplices).
    solution : ndarray, shape (d,)
        The equilibrium ``z*`` (known by construction).
    anchor : ndarray, shape (d,)
        The regularization centre ``z_ref`` and the starting point of every method.
    """

    name: str
    matrix: np.ndarray
    shift: np.ndarray
    blocks: tuple
    domain: str
    radius: float
    solution: np.ndarray
    anchor: np.ndarray

    def __post_init__(self) -> None:
        d = self.matrix.shape[0]
        if self.matrix.shape != (d, d) or self.shift.shape != (d,):
            raise ValueError(f"matrix must be (d, d) and shift (d,), got {self.matrix.shape} and {self.shift.shape}")
        if self.domain not in DOMAINS:
            raise ValueError(f"domain must be one of {DOMAINS}, got {self.domain!r}")
        ends = [0] + [b for _, b in self.blocks]
        if any(a != e or b <= a for (a, b), e in zip(self.blocks, ends)) or ends[-1] != d:
            raise ValueError(f"blocks {self.blocks} must tile 0..{d} in order")
        if np.linalg.eigvalsh(self.sym_part).min() < -1e-12:
            raise ValueError("the symmetric part of the matrix must be positive semidefinite (monotone F)")

    @property
    def dim(self) -> int:
        return self.matrix.shape[0]

    @property
    def sym_part(self) -> np.ndarray:
        """``S = (M + M^T) / 2``."""
        return 0.5 * (self.matrix + self.matrix.T)

    @property
    def lipschitz(self) -> float:
        """``L = ||M||_2``."""
        return float(np.linalg.norm(self.matrix, 2))

    def operator(self, z: np.ndarray) -> np.ndarray:
        """``F(z) = M z + q`` for ``z`` of shape (..., d)."""
        flat = z.reshape(-1, self.dim) @ self.matrix.T  # one 2-D matmul is faster than a batched one
        return flat.reshape(z.shape) + self.shift

    def project(self, z: np.ndarray) -> np.ndarray:
        """Euclidean projection onto ``Z``, block by block; shape (..., d) kept."""
        sizes = {b - a for a, b in self.blocks}
        if self.domain == "ball" and len(sizes) == 1:  # equal blocks: one reshaped projection (hot loop)
            parts = z.reshape(z.shape[:-1] + (len(self.blocks), sizes.pop()))
            sq = np.einsum("...i,...i->...", parts, parts)[..., None]
            shrink = np.where(sq > self.radius**2, self.radius / np.sqrt(np.maximum(sq, 1e-300)), 1.0)
            return (parts * shrink).reshape(z.shape)
        if self.domain == "simplex" and len(sizes) == 1:  # equal simplices: one sort for all blocks
            parts = z.reshape(z.shape[:-1] + (len(self.blocks), sizes.pop()))
            return project_simplex(parts).reshape(z.shape)
        out = np.empty_like(z)
        for a, b in self.blocks:
            part = z[..., a:b]
            out[..., a:b] = project_ball(part, self.radius) if self.domain == "ball" else project_simplex(part)
        return out

    def gap(self, z: np.ndarray) -> np.ndarray:
        """Gap function ``max_{z' in Z} <F(z), z - z'>`` (closed form), shape (...,).

        On a product set the maximum splits over the blocks: ``-R ||F_b||`` is the minimum of a
        linear function over a centred ball, ``min_i F_{b,i}`` over a simplex.
        """
        f = self.operator(z)
        total = np.sum(f * z, axis=-1)
        for a, b in self.blocks:
            fb = f[..., a:b]
            total = total + (self.radius * np.linalg.norm(fb, axis=-1) if self.domain == "ball" else -fb.min(axis=-1))
        return total

    def restricted_gap(self, z: np.ndarray) -> np.ndarray:
        """Restricted (Minty) gap ``max_{y in Z} <F(y), z - y>`` on products of balls, shape (...,).

        The objective ``-y^T S y + y^T (M^T z - q) + q^T z`` is concave; when ``S`` is block
        diagonal over the balls the maximum splits into one trust-region problem per block, each
        solved by bisection on its multiplier (:func:`ball_trust_region`). Use
        :func:`restricted_gap_cvxpy` for other cases.
        """
        if self.domain != "ball":
            raise ValueError("restricted_gap has a fast path for balls only; use restricted_gap_cvxpy")
        S = self.sym_part
        mask = np.zeros_like(S, dtype=bool)
        for a, b in self.blocks:
            mask[a:b, a:b] = True
        if np.abs(S[~mask]).max(initial=0.0) > 1e-12:
            raise ValueError("restricted_gap needs a block-diagonal symmetric part; use restricted_gap_cvxpy")
        c = z @ self.matrix - self.shift  # (..., d): M^T z - q
        total = z @ self.shift
        for a, b in self.blocks:
            total = total + ball_trust_region(S[a:b, a:b], c[..., a:b], self.radius)
        return total


def project_ball(z: np.ndarray, radius: float) -> np.ndarray:
    """Projection onto ``{||z|| <= radius}`` along the last axis."""
    norm = np.linalg.norm(z, axis=-1, keepdims=True)
    return z * np.minimum(1.0, radius / np.maximum(norm, 1e-300))


def project_simplex(z: np.ndarray) -> np.ndarray:
    """Projection onto the probability simplex along the last axis (sort and threshold)."""
    n = z.shape[-1]
    u = -np.sort(-z, axis=-1)  # descending
    css = np.cumsum(u, axis=-1) - 1.0
    # the threshold theta solves sum_i max(z_i - theta, 0) = 1; every k gives
    # (u_1 + ... + u_k - 1) / k <= theta, with equality at the number of positive entries
    theta = np.max(css / np.arange(1, n + 1), axis=-1, keepdims=True)
    return np.maximum(z - theta, 0.0)


def ball_trust_region(S: np.ndarray, c: np.ndarray, radius: float, iterations: int = 100) -> np.ndarray:
    """``max_{||y|| <= R} -y^T S y + c^T y`` for PSD ``S`` (m, m) and ``c`` (..., m); shape (...,).

    The maximiser is ``y(nu) = (2S + 2 nu I)^{-1} c`` with the smallest ``nu >= 0`` such that
    ``||y(nu)|| <= R``; ``||y(nu)||`` decreases in ``nu``, so bisection finds it.
    """
    s, Q = np.linalg.eigh(S)
    s = np.maximum(s, 0.0)
    ct = c @ Q  # (..., m) coordinates in the eigenbasis

    def norm_at(nu):
        denom = 2.0 * (s + nu[..., None])
        with np.errstate(divide="ignore", invalid="ignore"):
            y = np.where(denom > 0, ct / np.where(denom > 0, denom, 1.0), np.where(ct == 0, 0.0, np.inf))
        return np.linalg.norm(y, axis=-1)

    zero = np.zeros(ct.shape[:-1])
    inside = norm_at(zero) <= radius
    lo = zero.copy()
    hi = np.linalg.norm(ct, axis=-1) / (2.0 * radius) + 1e-300  # ||y(hi)|| <= R there
    for _ in range(iterations):
        mid = 0.5 * (lo + hi)
        too_long = norm_at(mid) > radius
        lo = np.where(too_long, mid, lo)
        hi = np.where(too_long, hi, mid)
    nu = np.where(inside, 0.0, hi)
    denom = 2.0 * (s + nu[..., None])
    y = np.where(denom > 0, ct / np.where(denom > 0, denom, 1.0), 0.0)
    return np.sum(ct * y, axis=-1) - np.sum(s * y * y, axis=-1)


def restricted_gap_cvxpy(problem: AffineVI, z: np.ndarray) -> float:
    """Reference: ``max_{y in Z} <F(y), z - y>`` for one point ``z`` (d,), solved with cvxpy.

    The objective is concave because ``y^T M y = y^T S y`` with ``S`` PSD; it is written as
    ``-||S^{1/2} y||^2 + (M^T z - q)^T y + q^T z`` so that cvxpy accepts it (DCP).
    """
    import cvxpy as cp

    z = np.asarray(z, dtype=float)
    if z.shape != (problem.dim,):
        raise ValueError(f"z must have shape ({problem.dim},), got {z.shape}")
    s, Q = np.linalg.eigh(problem.sym_part)
    root = (Q * np.sqrt(np.maximum(s, 0.0))) @ Q.T  # S^{1/2}
    y = cp.Variable(problem.dim)
    cons = []
    for a, b in problem.blocks:
        if problem.domain == "ball":
            cons.append(cp.norm(y[a:b], 2) <= problem.radius)
        else:
            cons += [y[a:b] >= 0, cp.sum(y[a:b]) == 1]
    c = problem.matrix.T @ z - problem.shift
    objective = cp.Maximize(-cp.sum_squares(root @ y) + c @ y + problem.shift @ z)
    value = cp.Problem(objective, cons).solve(solver=cp.CLARABEL)
    return float(value)


def bilinear_closed_form_gap(problem: AffineVI, z: np.ndarray) -> np.ndarray:
    """``R ||A^T x|| + R ||A y||`` for the bilinear game on balls (both gaps equal it); shape (...,)."""
    n = problem.dim // 2
    A = problem.matrix[:n, n:]
    x, y = z[..., :n], z[..., n:]
    return problem.radius * (np.linalg.norm(x @ A, axis=-1) + np.linalg.norm(y @ A.T, axis=-1))


# ------------------------------------------------------------------ problem instances
def _orthogonal(n: int, rng: np.random.Generator) -> np.ndarray:
    q, r = np.linalg.qr(rng.standard_normal((n, n)))
    return q * np.sign(np.diag(r))


def _unit(d: int, rng: np.random.Generator) -> np.ndarray:
    v = rng.standard_normal(d)
    return v / np.linalg.norm(v)


def payoff_matrix(n: int, rng: np.random.Generator) -> np.ndarray:
    """``A = U diag(s) V^T`` with singular values evenly spaced in [0.5, 1] (so ``||A||_2 = 1``)."""
    return _orthogonal(n, rng) @ np.diag(np.linspace(1.0, 0.5, n)) @ _orthogonal(n, rng).T


def bilinear_game(n: int, rng: np.random.Generator, radius: float = 1.0, anchor_norm: float = 0.5) -> AffineVI:
    """``min_x max_y x^T A y`` over two balls: ``F(x, y) = (A y, -A^T x)``, ``z* = 0``."""
    if n < 1:
        raise ValueError(f"n must be positive, got {n}")
    A = payoff_matrix(n, rng)
    M = np.block([[np.zeros((n, n)), A], [-A.T, np.zeros((n, n))]])
    return AffineVI("bilinear (balls)", M, np.zeros(2 * n), ((0, n), (n, 2 * n)), "ball", radius,
                    np.zeros(2 * n), anchor_norm * _unit(2 * n, rng))


def quadratic_game(n: int, strong_monotonicity: float, rng: np.random.Generator, radius: float = 1.0,
                   solution_norm: float = 0.3, anchor_norm: float = 0.5) -> AffineVI:
    """Strongly monotone quadratic game ``lambda/2 ||x||^2 + x^T A y - lambda/2 ||y||^2`` plus linear terms.

    ``F(z) = (lambda I + J) (z - z*)`` with ``J`` the bilinear operator, so ``S = lambda I`` and
    ``z*`` (norm ``solution_norm``) is interior.
    """
    if not strong_monotonicity > 0:
        raise ValueError(f"strong_monotonicity must be positive, got {strong_monotonicity}")
    base = bilinear_game(n, rng, radius)
    M = base.matrix + strong_monotonicity * np.eye(2 * n)
    z_star = solution_norm * _unit(2 * n, rng)
    return AffineVI("strongly monotone quadratic game", M, -M @ z_star, base.blocks, "ball", radius, z_star,
                    z_star + anchor_norm * _unit(2 * n, rng))


def affine_monotone(d: int, rng: np.random.Generator, psd_scale: float = 0.2, rank: int = 2, radius: float = 1.0,
                    solution_norm: float = 0.3, anchor_norm: float = 0.5) -> AffineVI:
    """``F(z) = (P + K)(z - z*)`` on one ball: ``P`` PSD of low rank, ``K`` skew with ``||K|| = 1``."""
    if d < 2 or d % 2:
        raise ValueError(f"d must be an even integer >= 2, got {d}")
    B = rng.standard_normal((d, rank))
    P = psd_scale * B @ B.T / np.linalg.norm(B, 2) ** 2
    G = rng.standard_normal((d, d))
    K = (G - G.T) / np.linalg.norm(G - G.T, 2)
    M = P + K
    z_star = solution_norm * _unit(d, rng)
    return AffineVI("monotone affine (ball)", M, -M @ z_star, ((0, d),), "ball", radius, z_star,
                    z_star + anchor_norm * _unit(d, rng))


def cyclic_game(n: int, rng: np.random.Generator) -> AffineVI:
    """Zero-sum rock-paper-scissors-like game on two simplices; noisy payoff vectors are the oracle.

    ``A[i, j] = +1`` if ``(j - i) mod n`` lies in ``1..(n-1)/2``, ``-1`` otherwise (off the diagonal),
    then divided by ``||A||_2``: skew-symmetric, every row sums to 0, the uniform pair is the equilibrium. The anchor is a random
    interior point, away from the equilibrium.
    """
    if n < 3 or n % 2 == 0:
        raise ValueError(f"n must be an odd integer >= 3, got {n}")
    k = (np.arange(n)[None, :] - np.arange(n)[:, None]) % n
    A = np.where(k == 0, 0.0, np.where(k <= (n - 1) // 2, 1.0, -1.0))
    A = A / np.linalg.norm(A, 2)  # L = 1 like the other problems, so the same step cap applies
    M = np.block([[np.zeros((n, n)), A], [-A.T, np.zeros((n, n))]])
    anchor = np.concatenate([rng.dirichlet(np.ones(n)), rng.dirichlet(np.ones(n))])
    return AffineVI("cyclic zero-sum game (simplices)", M, np.zeros(2 * n), ((0, n), (n, 2 * n)), "simplex", 1.0,
                    np.full(2 * n, 1.0 / n), anchor)
