r"""Graded operators on vertices (+) higher-order cells and their Schur-complement collapse.

Every graded operator here has the factored form ``M = G G^T + diag(0, c I_h)`` with
``G = [G0; Gh]`` (``G0``: V x F, ``Gh``: h x F), so ``M`` is positive semi-definite by
construction, ``M00 = G0 G0^T`` and ``Mhh = Gh Gh^T + c I``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.linalg
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from .complexes import SimplicialComplex, boundary_matrices, vertex_triangle_incidence

SCHEMES = ("triangle_shift", "signed_triangle", "signed_edge", "unsigned_triangle")


@dataclass(frozen=True, eq=False)
class GradedOperator:
    """``M = G G^T + diag(0, c I)`` on ``C^0 (+) C^h``, kept in factored form.

    Attributes
    ----------
    vertex_factor : (V, F) sparse, ``G0`` (``B1`` or ``[B1, 0]``, so ``M00 = L0``).
    higher_factor : (h, F) sparse, ``Gh``.
    coupling_cost : float, ``c >= 0``.
    scheme : str, how ``Gh`` was built (see :func:`graded_operator`).
    """

    vertex_factor: sp.csr_matrix
    higher_factor: sp.csr_matrix
    coupling_cost: float
    scheme: str

    @property
    def num_vertices(self) -> int:
        return int(self.vertex_factor.shape[0])

    @property
    def num_higher(self) -> int:
        return int(self.higher_factor.shape[0])

    def blocks(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Dense ``(M00, M0h, Mhh)`` with shapes (V, V), (V, h), (h, h)."""
        g0, gh = self.vertex_factor, self.higher_factor
        m00 = (g0 @ g0.T).toarray()
        m0h = (g0 @ gh.T).toarray()
        mhh = (gh @ gh.T).toarray() + self.coupling_cost * np.eye(self.num_higher)
        return m00, m0h, mhh

    def matrix(self) -> np.ndarray:
        """The dense graded operator ``M``, shape (V + h, V + h)."""
        m00, m0h, mhh = self.blocks()
        return np.block([[m00, m0h], [m0h.T, mhh]])


def graded_operator(cx: SimplicialComplex, scheme: str = "triangle_shift", coupling_cost: float = 1.0) -> GradedOperator:
    """Build a graded operator with ``M00 = L0`` on a 2-complex.

    Schemes (``B1``, ``B2`` signed boundaries, ``H`` the unsigned vertex-triangle incidence):

    - ``"triangle_shift"`` (used in the chapter): ``Gh = -H^T B1``. A triangle's degree of freedom
      shifts the potential of its three vertices together; ``M0h = -L0 H``,
      ``Mhh = H^T L0 H + c I`` and ``x^T S x = min_y ||B1^T (x - H y)||^2 + c ||y||^2``.
    - ``"signed_triangle"``: ``Gh = B2^T``; ``M0h = B1 B2 = 0``, so ``S = L0`` (trivial).
    - ``"signed_edge"``: higher cells are the edges, ``G0 = [B1, 0]``, ``Gh = [I, B2]``, i.e.
      ``M = [[L0, B1], [B1^T, I + B2 B2^T + c I]]``; collapses to ``S = (c/(1 + c)) L0`` (trivial).
    - ``"unsigned_triangle"``: ``Gh = |B2|^T``. Not trivial, but depends on the arbitrary edge
      orientation (relabelling the vertices changes the spectrum of ``S``).
    """
    if scheme not in SCHEMES:
        raise ValueError(f"scheme must be one of {SCHEMES}, got {scheme!r}")
    if isinstance(coupling_cost, bool) or not np.isfinite(coupling_cost) or coupling_cost < 0:
        raise ValueError(f"coupling_cost must be a finite number >= 0, got {coupling_cost!r}")
    B1, B2 = boundary_matrices(cx)
    if scheme == "triangle_shift":
        g0, gh = B1, -(vertex_triangle_incidence(cx).T @ B1)
    elif scheme == "signed_triangle":
        g0, gh = B1, B2.T
    elif scheme == "unsigned_triangle":
        g0, gh = B1, abs(B2).T
    else:  # signed_edge: factor space C^1 (+) C^2
        g0 = sp.hstack([B1, sp.csr_matrix((cx.num_vertices, cx.num_triangles))])
        gh = sp.hstack([sp.identity(cx.num_edges), B2])
    return GradedOperator(sp.csr_matrix(g0, dtype=float), sp.csr_matrix(gh, dtype=float), float(coupling_cost), scheme)


def _check_eps(op: GradedOperator, eps) -> float:
    eps = float(eps)
    if not np.isfinite(eps) or eps < 0:
        raise ValueError(f"eps must be a finite number >= 0, got {eps!r}")
    if op.num_higher and op.coupling_cost + eps <= 0:
        raise ValueError("coupling_cost + eps must be positive (otherwise Mhh + eps I may be singular)")
    return eps


def collapsed_operator(op: GradedOperator, eps: float = 0.0) -> np.ndarray:
    """Dense Schur complement ``S = M00 - M0h (Mhh + eps I)^{-1} Mh0``, shape (V, V)."""
    eps = _check_eps(op, eps)
    m00, m0h, mhh = op.blocks()
    if op.num_higher == 0:
        return m00
    solved = scipy.linalg.solve(mhh + eps * np.eye(op.num_higher), m0h.T, assume_a="pos")
    s = m00 - m0h @ solved
    return 0.5 * (s + s.T)


def collapsed_family(op: GradedOperator, eps_values) -> np.ndarray:
    """``S_eps`` for several ``eps`` from one eigendecomposition of ``Mhh``, shape (len(eps), V, V)."""
    eps_values = [_check_eps(op, e) for e in np.atleast_1d(eps_values)]
    m00, m0h, mhh = op.blocks()
    if op.num_higher == 0:
        return np.repeat(m00[None], len(eps_values), axis=0)
    lam, q = np.linalg.eigh(mhh)
    w = m0h @ q  # (V, h)
    out = np.empty((len(eps_values),) + m00.shape)
    for k, eps in enumerate(eps_values):
        s = m00 - (w / (lam + eps)) @ w.T
        out[k] = 0.5 * (s + s.T)
    return out


def collapsed_operator_factor_form(op: GradedOperator, eps: float = 0.0) -> np.ndarray:
    """Woodbury form ``S = G0 (I + Gh^T Gh / (c + eps))^{-1} G0^T``: an (F, F) solve instead of (h, h)."""
    eps = _check_eps(op, eps)
    g0 = op.vertex_factor.toarray()
    if op.num_higher == 0:
        return g0 @ g0.T
    gh = op.higher_factor.toarray()
    inner = np.eye(g0.shape[1]) + gh.T @ gh / (op.coupling_cost + eps)
    s = g0 @ scipy.linalg.solve(inner, g0.T, assume_a="pos")
    return 0.5 * (s + s.T)


def collapsed_matvec(op: GradedOperator, x, eps: float = 0.0, rtol: float = 1e-12) -> np.ndarray:
    """Implicit ``S x`` without forming ``S`` or ``Mhh``: conjugate gradient on ``(Mhh + eps I) z = Mh0 x``.

    Every product goes through the sparse factors, so the cost per CG step is ``O(nnz(G))``.

    Parameters
    ----------
    x : (V,) array
    """
    eps = _check_eps(op, eps)
    x = np.asarray(x, dtype=float)
    if x.shape != (op.num_vertices,):
        raise ValueError(f"x must have shape ({op.num_vertices},), got {x.shape}")
    g0, gh = op.vertex_factor, op.higher_factor
    m00x = g0 @ (g0.T @ x)
    if op.num_higher == 0:
        return m00x
    shift = op.coupling_cost + eps
    mhh = spla.LinearOperator((op.num_higher,) * 2, matvec=lambda v: gh @ (gh.T @ v) + shift * v, dtype=float)
    rhs = gh @ (g0.T @ x)  # Mh0 x
    z, info = spla.cg(mhh, rhs, rtol=rtol, atol=0.0, maxiter=10 * op.num_higher + 100)
    if info != 0:
        raise RuntimeError(f"conjugate gradient did not converge (info={info})")
    return m00x - g0 @ (gh.T @ z)


def collapsed_linear_operator(op: GradedOperator, eps: float = 0.0, rtol: float = 1e-12) -> spla.LinearOperator:
    """``S`` as a symmetric ``scipy.sparse.linalg.LinearOperator`` (for ``eigsh`` / ``lobpcg``)."""
    n = op.num_vertices
    return spla.LinearOperator((n, n), matvec=lambda v: collapsed_matvec(op, np.ravel(v), eps, rtol), dtype=float)


def higher_order_minimum(op: GradedOperator, x, eps: float = 0.0) -> np.ndarray:
    """``min_y [x; y]^T (M + diag(0, eps I)) [x; y]`` by a regularised least-squares solve.

    Uses the factor: the objective is ``||G0^T x + Gh^T y||^2 + (c + eps) ||y||^2``, minimised with
    ``numpy.linalg.lstsq``, independently of the Schur formula.

    Parameters
    ----------
    x : (V,) or (V, m) array

    Returns
    -------
    (m,) array of minima (a scalar array for a single ``x``).
    """
    eps = _check_eps(op, eps)
    x = np.asarray(x, dtype=float)
    single = x.ndim == 1
    X = x[:, None] if single else x
    if X.shape[0] != op.num_vertices:
        raise ValueError(f"x must have {op.num_vertices} rows, got {X.shape[0]}")
    r0 = op.vertex_factor.T @ X  # (F, m)
    h = op.num_higher
    if h == 0:
        out = (r0**2).sum(0)
    else:
        ght = op.higher_factor.T.toarray()  # (F, h)
        root = np.sqrt(op.coupling_cost + eps)
        A = np.vstack([ght, root * np.eye(h)])
        b = np.vstack([-r0, np.zeros((h, X.shape[1]))])
        y = np.linalg.lstsq(A, b, rcond=None)[0]
        out = ((r0 + ght @ y) ** 2).sum(0) + ((root * y) ** 2).sum(0)
    return out[0] if single else out


def normalized_laplacian(laplacian) -> np.ndarray:
    """``D^{-1/2} L D^{-1/2}`` with ``D = diag(L)`` (isolated vertices get a zero row)."""
    lap = np.asarray(laplacian.toarray() if sp.issparse(laplacian) else laplacian, dtype=float)
    d = np.diag(lap).copy()
    inv = np.where(d > 0, 1.0 / np.sqrt(np.where(d > 0, d, 1.0)), 0.0)
    return inv[:, None] * lap * inv[None, :]


def triangle_expansion_laplacian(cx: SimplicialComplex) -> np.ndarray:
    """Laplacian of the weighted graph ``W_uv = #triangles containing u and v`` (u != v), (V, V).

    Adding it to ``L0`` is the usual ad-hoc fusion; it equals, up to the factor 3/w, the Kron
    reduction of the star expansion (one hub per triangle), and it raises the energy (``>= L0``).
    """
    H = vertex_triangle_incidence(cx)
    w = (H @ H.T).toarray()
    np.fill_diagonal(w, 0.0)
    return np.diag(w.sum(1)) - w
