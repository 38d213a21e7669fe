"""Sympy proofs behind the ledger's symbolic checks. Each residual simplifies to 0 when the
identity holds; the generic checks use matrices of free symbols."""

from __future__ import annotations

from itertools import combinations

import sympy

from .complexes import boundary_matrices, make_complex, vertex_triangle_incidence


def _sum_squares(matrix) -> sympy.Expr:
    # every entry is a rational function of the symbols: cancel() decides whether it is zero
    return sympy.Add(*[sympy.cancel(sympy.together(e)) ** 2 for e in matrix])


def _generic(name: str, rows: int, cols: int, symmetric: bool = False) -> sympy.Matrix:
    if symmetric:
        return sympy.Matrix(rows, cols, lambda i, j: sympy.Symbol(f"{name}{min(i, j)}{max(i, j)}", real=True))
    return sympy.Matrix(rows, cols, lambda i, j: sympy.Symbol(f"{name}{i}{j}", real=True))


def full_simplex_complex(num_vertices: int):
    """The 2-skeleton of the full simplex: every edge and every triangle on ``num_vertices`` vertices."""
    v = range(num_vertices)
    return make_complex(num_vertices, list(combinations(v, 2)), list(combinations(v, 3)))


def boundary_composition_residual(num_vertices: int = 6) -> sympy.Expr:
    """Sum of squares of ``B1 B2`` in exact integers on the full 2-skeleton (every triangle type)."""
    B1, B2 = boundary_matrices(full_simplex_complex(num_vertices))
    prod = sympy.Matrix(B1.toarray().astype(int)) * sympy.Matrix(B2.toarray().astype(int))
    return _sum_squares(prod)


def _blocks(size: int = 2):
    A = _generic("a", size, size, symmetric=True)
    B = _generic("b", size, size)
    C = _generic("c", size, size, symmetric=True)
    return A, B, C


def block_factorisation_residual(size: int = 2) -> sympy.Expr:
    """``M - U diag(S, C) U^T`` with ``U = [[I, B C^-1], [0, I]]``, ``S = A - B C^-1 B^T``."""
    A, B, C = _blocks(size)
    Ci = C.inv()
    S = A - B * Ci * B.T
    I, Z = sympy.eye(size), sympy.zeros(size)
    U = sympy.BlockMatrix([[I, B * Ci], [Z, I]]).as_explicit()
    D = sympy.BlockMatrix([[S, Z], [Z, C]]).as_explicit()
    M = sympy.BlockMatrix([[A, B], [B.T, C]]).as_explicit()
    return _sum_squares(M - U * D * U.T)


def completion_of_square_residual(size: int = 2) -> sympy.Expr:
    """``z^T M z - (x^T S x + (y + C^-1 B^T x)^T C (y + C^-1 B^T x))`` for ``z = [x; y]``.

    With ``C > 0`` this gives the variational form ``x^T S x = min_y z^T M z`` (minimiser
    ``y = -C^-1 B^T x``).
    """
    A, B, C = _blocks(size)
    Ci = C.inv()
    x, y = _generic("x", size, 1), _generic("y", size, 1)
    S = A - B * Ci * B.T
    z = x.col_join(y)
    M = sympy.BlockMatrix([[A, B], [B.T, C]]).as_explicit()
    r = y + Ci * B.T * x
    return sympy.cancel(sympy.together(((z.T * M * z) - (x.T * S * x) - (r.T * C * r))[0, 0]))


def schur_psd_witness_residual(size: int = 2, witness_sign: int = -1) -> sympy.Expr:
    """The two witnesses of ``0 <= S <= A`` for ``M >= 0``, ``C > 0``.

    ``witness_sign=+1`` gives a deliberately wrong witness ``w = [x; +C^-1 B^T x]`` whose
    residual does not vanish (the negative control of the symbolic check).

    ``x^T S x = w^T M w`` with ``w = [x; -C^-1 B^T x]`` (so ``S >= 0`` when ``M >= 0``) and
    ``x^T (A - S) x = v^T C v`` with ``v = C^-1 B^T x`` (so ``S <= A`` when ``C > 0``).
    """
    A, B, C = _blocks(size)
    Ci = C.inv()
    x = _generic("x", size, 1)
    S = A - B * Ci * B.T
    M = sympy.BlockMatrix([[A, B], [B.T, C]]).as_explicit()
    if witness_sign not in (-1, 1):
        raise ValueError(f"witness_sign must be -1 or +1, got {witness_sign!r}")
    w = x.col_join(witness_sign * Ci * B.T * x)
    v = Ci * B.T * x
    first = (x.T * S * x - w.T * M * w)[0, 0]
    second = (x.T * (A - S) * x - v.T * C * v)[0, 0]
    return sympy.cancel(sympy.together(first)) ** 2 + sympy.cancel(sympy.together(second)) ** 2


def scalar_schur_is_nonnegative() -> bool:
    """Sympy's assumption system on the scalar case: ``c > 0`` and ``det = ac - b^2 >= 0`` give ``a - b^2/c >= 0``."""
    b = sympy.Symbol("b", real=True)
    c = sympy.Symbol("c", positive=True)
    det = sympy.Symbol("d", nonnegative=True)
    a = (det + b**2) / c  # every PSD 2x2 matrix with c > 0 has this form
    schur = sympy.simplify(a - b**2 / c)
    return bool(schur.is_nonnegative)


def woodbury_residual() -> sympy.Expr:
    """``G0 G0^T - G0 Gh^T (Gh Gh^T + c I)^-1 Gh G0^T - G0 (I + Gh^T Gh / c)^-1 G0^T``.

    Generic ``G0`` (2 x 2), ``Gh`` (2 x 2), plus the chapter's instantiation ``Gh = -H^T B1`` on a
    filled triangle with a pendant edge, both with a free ``c > 0``.
    """
    c = sympy.Symbol("c", positive=True)
    G0, Gh = _generic("g", 2, 2), _generic("h", 2, 2)

    def gap(g0, gh):
        h, f = gh.shape[0], g0.shape[1]
        schur = g0 * g0.T - g0 * gh.T * (gh * gh.T + c * sympy.eye(h)).inv() * gh * g0.T
        woodbury = g0 * (sympy.eye(f) + gh.T * gh / c).inv() * g0.T
        return _sum_squares(schur - woodbury)

    cx = make_complex(4, [(0, 1), (0, 2), (1, 2), (2, 3)], [(0, 1, 2)])
    B1, _ = boundary_matrices(cx)
    b1 = sympy.Matrix(B1.toarray().astype(int))
    H = sympy.Matrix(vertex_triangle_incidence(cx).toarray().astype(int))
    return gap(G0, Gh) + gap(b1, -H.T * b1)
