"""Graph pairs, alignment metrics and the classical baselines (numpy / scipy).

Shapes: ``A`` is a boolean adjacency stack ``(G, n, n)``, symmetric with an empty diagonal; a
similarity ``S`` is ``(n, n)`` (row ``i``: node ``i`` of the first graph, column ``j``: node ``j``
of the second); ``perm`` is the target alignment, ``perm[i]`` = the node of the second graph that
node ``i`` of the first graph became.
"""

from __future__ import annotations

import numpy as np
import scipy.optimize

__all__ = [
    "erdos_renyi", "bernoulli_corruption", "random_permute", "make_pairs", "unrelated_pairs",
    "lap_assignment", "lap_accuracy", "row_top1", "coverage_top1", "edge_overlap",
    "true_overlap", "degree_similarity", "spectral_similarity", "faq_assignment",
    "assignment_lp_value",
]


def _check_stack(A: np.ndarray) -> np.ndarray:
    A = np.asarray(A)
    if A.ndim != 3 or A.shape[1] != A.shape[2]:
        raise ValueError(f"an adjacency stack has shape (G, n, n), got {A.shape}")
    return A.astype(bool)


def erdos_renyi(num_graphs: int, num_nodes: int, mean_degree: float, rng: np.random.Generator) -> np.ndarray:
    """``num_graphs`` Erdos-Renyi graphs G(n, p) with ``p = mean_degree / (n - 1)``: bool ``(G, n, n)``."""
    if num_nodes < 2 or not 0 < mean_degree < num_nodes - 1:
        raise ValueError(f"need n >= 2 and 0 < mean_degree < n - 1, got n={num_nodes}, d={mean_degree}")
    p = mean_degree / (num_nodes - 1)
    upper = np.triu(rng.random((num_graphs, num_nodes, num_nodes)) < p, 1)
    return upper | upper.transpose(0, 2, 1)


def bernoulli_corruption(A: np.ndarray, eta: float, rng: np.random.Generator) -> np.ndarray:
    r"""ngmb's node-normalised Bernoulli corruption of each graph in ``A``.

    Each edge is removed with probability :math:`\eta`; each non-edge :math:`(i, j)` is added with
    probability :math:`\eta\, s_{ij} / (n - 1 - s_{ij})`, :math:`s_{ij} = \sqrt{d_i d_j}` (clipped to
    [0, 1]), so that on a d-regular graph every expected degree stays d.
    """
    A = _check_stack(A)
    if not 0 <= eta <= 1:
        raise ValueError(f"eta must lie in [0, 1], got {eta}")
    G, n, _ = A.shape
    deg = A.sum(-1).astype(float)                                   # (G, n)
    s = np.sqrt(deg[:, :, None] * deg[:, None, :])                  # (G, n, n)
    p_add = np.clip(eta * s / np.maximum(n - 1 - s, 1e-12), 0.0, 1.0)
    u = rng.random((G, n, n))
    keep = A & (u >= eta)
    add = ~A & (u < p_add)
    B = np.triu(keep | add, 1)
    return B | B.transpose(0, 2, 1)


def random_permute(A: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Relabel each graph by a uniform permutation: ``B[perm[i], perm[j]] = A[i, j]``.

    Returns ``(B, perm)`` with ``perm`` of shape ``(G, n)``.
    """
    A = _check_stack(A)
    G, n, _ = A.shape
    perm = np.argsort(rng.random((G, n)), axis=1)
    inv = np.argsort(perm, axis=1)                                  # inv[perm[i]] = i
    rows = np.arange(G)[:, None, None]
    return A[rows, inv[:, :, None], inv[:, None, :]], perm


def make_pairs(num_pairs: int, num_nodes: int, mean_degree: float, eta, rng: np.random.Generator):
    """Aligned pairs: ``(A, B_perm, perm)``; B is A corrupted at ``eta`` (a number or one per pair),
    then always randomly permuted (identity alignment would leak the answer through tie-breaking)."""
    A = erdos_renyi(num_pairs, num_nodes, mean_degree, rng)
    etas = np.broadcast_to(np.asarray(eta, dtype=float), (num_pairs,))
    B = np.empty_like(A)
    for value in np.unique(etas):
        idx = np.flatnonzero(etas == value)
        B[idx] = bernoulli_corruption(A[idx], float(value), rng)
    Bp, perm = random_permute(B, rng)
    return A, Bp, perm


def unrelated_pairs(num_pairs: int, num_nodes: int, mean_degree: float, rng: np.random.Generator):
    """The negative control: B an independent ER graph, permuted; any "alignment" is chance, 1/n."""
    A = erdos_renyi(num_pairs, num_nodes, mean_degree, rng)
    Bp, perm = random_permute(erdos_renyi(num_pairs, num_nodes, mean_degree, rng), rng)
    return A, Bp, perm


# ------------------------------------------------------------------------------------ metrics
def lap_assignment(S: np.ndarray) -> np.ndarray:
    """Hungarian assignment maximising ``sum_i S[i, sigma(i)]``: ``sigma`` of shape ``(n,)``."""
    S = np.asarray(S, dtype=float)
    if S.ndim != 2 or S.shape[0] != S.shape[1]:
        raise ValueError(f"S must be square (n, n), got {S.shape}")
    _, cols = scipy.optimize.linear_sum_assignment(S, maximize=True)
    return cols


def lap_accuracy(S: np.ndarray, perm: np.ndarray) -> float:
    """Fraction of nodes that the Hungarian assignment of ``S`` maps to their true match."""
    return float(np.mean(lap_assignment(S) == np.asarray(perm)))


def row_top1(S: np.ndarray, perm: np.ndarray) -> float:
    """Per-row top-1: fraction of rows whose argmax is the true match (no one-to-one constraint)."""
    return float(np.mean(np.argmax(S, axis=1) == np.asarray(perm)))


def coverage_top1(S: np.ndarray) -> float:
    """ngmb's logged ``top_1``: fraction of columns that are some row's argmax (not an accuracy)."""
    return float(np.unique(np.argmax(S, axis=1)).size / S.shape[1])


def edge_overlap(A: np.ndarray, B: np.ndarray, sigma: np.ndarray) -> float:
    """Fraction of A's edges ``(i, j)`` with ``(sigma(i), sigma(j))`` an edge of B (2-D inputs)."""
    A, B = np.asarray(A, bool), np.asarray(B, bool)
    edges = A.sum()
    return float((A & B[np.ix_(sigma, sigma)]).sum() / edges) if edges else 1.0


def true_overlap(A: np.ndarray, Bp: np.ndarray, perm: np.ndarray) -> np.ndarray:
    """Edge overlap under the true alignment, one per pair ``(G,)`` (its expectation is 1 - eta)."""
    return np.array([edge_overlap(a, b, p) for a, b, p in zip(A, Bp, perm)])


# ---------------------------------------------------------------------------------- baselines
def _degree_features(A: np.ndarray) -> np.ndarray:
    deg = A.sum(-1).astype(float)
    mean_nb = (A @ deg) / np.maximum(deg, 1.0)
    return np.stack([deg, mean_nb], axis=-1)                        # (n, 2)


def degree_similarity(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """Non-learned baseline: minus the squared distance of (degree, mean neighbour degree)."""
    fa, fb = _degree_features(np.asarray(A, float)), _degree_features(np.asarray(B, float))
    return -((fa[:, None, :] - fb[None, :, :]) ** 2).sum(-1)


def spectral_similarity(A: np.ndarray, B: np.ndarray, k: int = 8) -> np.ndarray:
    """Spectral baseline: |leading k adjacency eigenvectors| (sign-invariant), minus squared distance."""
    def feats(M):
        _, vecs = np.linalg.eigh(np.asarray(M, float))
        return np.abs(vecs[:, ::-1][:, :k])
    fa, fb = feats(A), feats(B)
    return -((fa[:, None, :] - fb[None, :, :]) ** 2).sum(-1)


def faq_assignment(A: np.ndarray, B: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """scipy's FAQ (Vogelstein et al.) maximising edge overlap, from the barycentre: ``sigma (n,)``."""
    res = scipy.optimize.quadratic_assignment(np.asarray(A, float), np.asarray(B, float), method="faq",
                                              options={"maximize": True, "rng": rng})
    return res.col_ind


def assignment_lp_value(S: np.ndarray) -> float:
    """The assignment LP (cvxpy): max <S, X> over doubly stochastic X; equals the Hungarian value."""
    import cvxpy as cp

    n = S.shape[0]
    X = cp.Variable((n, n), nonneg=True)
    problem = cp.Problem(cp.Maximize(cp.sum(cp.multiply(S, X))), [cp.sum(X, 0) == 1, cp.sum(X, 1) == 1])
    problem.solve()
    return float(problem.value)
