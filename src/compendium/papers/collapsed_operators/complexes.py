"""Simplicial complexes up to dimension 2: clique, Vietoris-Rips and triangle-planted complexes,
signed boundary matrices and Hodge Laplacians."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp


@dataclass(frozen=True, eq=False)
class SimplicialComplex:
    """A 2-dimensional simplicial complex on the vertices ``0 .. num_vertices - 1``.

    Build one with :func:`make_complex` (which sorts and checks); simplices are oriented by
    increasing vertex index.

    Attributes
    ----------
    num_vertices : int
    edges : (E, 2) int array, rows ``(i, j)`` with ``i < j``, sorted lexicographically.
    triangles : (T, 3) int array, rows ``(i, j, k)`` with ``i < j < k``, sorted; every
        triangle's three edges are in ``edges``.
    """

    num_vertices: int
    edges: np.ndarray
    triangles: np.ndarray

    @property
    def num_edges(self) -> int:
        return int(self.edges.shape[0])

    @property
    def num_triangles(self) -> int:
        return int(self.triangles.shape[0])


def _sorted_rows(rows, width: int, what: str, num_vertices: int) -> np.ndarray:
    arr = np.asarray(rows, dtype=np.int64).reshape(-1, width)
    if arr.size and (arr.min() < 0 or arr.max() >= num_vertices):
        raise ValueError(f"{what} must use vertices in [0, {num_vertices}), got values in [{arr.min()}, {arr.max()}]")
    arr = np.sort(arr, axis=1)
    if arr.size and np.any(np.diff(arr, axis=1) == 0):
        raise ValueError(f"{what} must have distinct vertices")
    return np.unique(arr, axis=0) if arr.size else arr


def _edge_codes(edges: np.ndarray, num_vertices: int) -> np.ndarray:
    return edges[:, 0] * num_vertices + edges[:, 1]


def make_complex(num_vertices: int, edges, triangles=()) -> SimplicialComplex:
    """Sort, deduplicate and check the simplices of a 2-complex.

    Raises
    ------
    ValueError
        A vertex out of range, a degenerate simplex, or a triangle whose edges are missing.
    """
    if isinstance(num_vertices, bool) or not isinstance(num_vertices, (int, np.integer)) or num_vertices < 1:
        raise ValueError(f"num_vertices must be a positive integer, got {num_vertices!r}")
    n = int(num_vertices)
    e = _sorted_rows(edges, 2, "edges", n)
    t = _sorted_rows(triangles, 3, "triangles", n)
    if t.size:
        codes = _edge_codes(e, n)
        faces = np.concatenate([t[:, [0, 1]], t[:, [0, 2]], t[:, [1, 2]]])
        if not np.all(np.isin(_edge_codes(faces, n), codes)):
            raise ValueError("every edge of a triangle must be an edge of the complex")
    return SimplicialComplex(n, e, t)


def triangles_of_graph(num_vertices: int, edges) -> np.ndarray:
    """All 3-cliques ``(i < j < k)`` of a graph, shape (T, 3), sorted."""
    n = int(num_vertices)
    adj = np.zeros((n, n), dtype=bool)
    e = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
    adj[e[:, 0], e[:, 1]] = adj[e[:, 1], e[:, 0]] = True
    found = []
    for i in range(n):
        up = np.flatnonzero(adj[i, i + 1:]) + i + 1  # neighbours above i
        if up.size < 2:
            continue
        a, b = np.nonzero(np.triu(adj[np.ix_(up, up)], k=1))
        found.append(np.column_stack([np.full(a.size, i), up[a], up[b]]))
    return np.concatenate(found) if found else np.zeros((0, 3), dtype=np.int64)


def clique_complex(num_vertices: int, edges) -> SimplicialComplex:
    """The clique complex (flag complex) of a graph, truncated at dimension 2."""
    return make_complex(num_vertices, edges, triangles_of_graph(num_vertices, edges))


def random_clique_complex(num_vertices: int, edge_prob: float, rng: np.random.Generator) -> SimplicialComplex:
    """Clique complex of an Erdos-Renyi graph G(n, p)."""
    if not 0.0 <= edge_prob <= 1.0:
        raise ValueError(f"edge_prob must lie in [0, 1], got {edge_prob!r}")
    i, j = np.triu_indices(num_vertices, k=1)
    keep = rng.random(i.size) < edge_prob
    return clique_complex(num_vertices, np.column_stack([i[keep], j[keep]]))


def vietoris_rips_complex(points, radius: float) -> SimplicialComplex:
    """Vietoris-Rips complex of a point cloud: an edge where two points are within ``radius``.

    Parameters
    ----------
    points : (n, d) array
    radius : float, > 0
    """
    x = np.asarray(points, dtype=float)
    if x.ndim != 2 or x.shape[0] < 1:
        raise ValueError(f"points must be an (n, d) array, got shape {x.shape}")
    if not radius > 0:
        raise ValueError(f"radius must be positive, got {radius!r}")
    dist = np.sqrt(((x[:, None, :] - x[None, :, :]) ** 2).sum(-1))
    i, j = np.triu_indices(x.shape[0], k=1)
    keep = dist[i, j] <= radius
    return clique_complex(x.shape[0], np.column_stack([i[keep], j[keep]]))


def triangle_planted_complex(num_communities: int, community_size: int, triangles_per_community: int,
                             noise_edge_prob: float, rng: np.random.Generator, *, aligned: bool = True,
                             within_edge_prob: float | None = None) -> tuple[SimplicialComplex, np.ndarray]:
    """A complex whose communities are marked by filled triangles, on a noisy 1-skeleton.

    Vertices ``c * community_size .. (c + 1) * community_size - 1`` form community ``c``. Each
    community receives ``triangles_per_community`` random triples of its own vertices (duplicates
    dropped) as filled triangles, with their edges. Then every pair of vertices gets a noise edge
    with probability ``noise_edge_prob`` (``within_edge_prob`` for pairs inside a community, when
    given). Noise edges may close 3-cycles; those stay hollow: only planted triangles are filled.

    ``aligned=False`` is the negative control: the same number of triangles, drawn from all
    vertices regardless of the communities.

    Returns
    -------
    complex : SimplicialComplex
    labels : (num_communities * community_size,) int array, the planted communities.
    """
    if num_communities < 1 or community_size < 3 or triangles_per_community < 0:
        raise ValueError("need num_communities >= 1, community_size >= 3 and triangles_per_community >= 0")
    for name, p in (("noise_edge_prob", noise_edge_prob), ("within_edge_prob", within_edge_prob)):
        if p is not None and not 0.0 <= p <= 1.0:
            raise ValueError(f"{name} must lie in [0, 1], got {p!r}")
    n = num_communities * community_size
    labels = np.repeat(np.arange(num_communities), community_size)
    m = num_communities * triangles_per_community
    if aligned:  # triples inside each community: first 3 of a random permutation of its vertices
        local = np.argsort(rng.random((m, community_size)), axis=1)[:, :3]
        tri = local + community_size * np.repeat(np.arange(num_communities), triangles_per_community)[:, None]
    else:
        tri = np.argsort(rng.random((m, n)), axis=1)[:, :3]
    tri = np.unique(np.sort(tri, axis=1), axis=0) if m else np.zeros((0, 3), dtype=np.int64)
    i, j = np.triu_indices(n, k=1)
    p = np.full(i.size, float(noise_edge_prob))
    if within_edge_prob is not None:
        p[labels[i] == labels[j]] = within_edge_prob
    noise = rng.random(i.size) < p
    edges = np.concatenate([np.column_stack([i[noise], j[noise]]), tri[:, [0, 1]], tri[:, [0, 2]], tri[:, [1, 2]]])
    return make_complex(n, edges, tri), labels


def boundary_matrices(cx: SimplicialComplex) -> tuple[sp.csr_matrix, sp.csr_matrix]:
    """Signed boundary matrices ``B1`` (V, E) and ``B2`` (E, T).

    ``B1[:, (i, j)] = e_j - e_i``; ``B2[:, (i, j, k)] = [j, k] - [i, k] + [i, j]``, so that
    ``B1 @ B2 = 0``.
    """
    n, e, t = cx.num_vertices, cx.edges, cx.triangles
    cols = np.arange(cx.num_edges)
    B1 = sp.csr_matrix((np.r_[-np.ones(cx.num_edges), np.ones(cx.num_edges)], (np.r_[e[:, 0], e[:, 1]], np.r_[cols, cols])),
                       shape=(n, cx.num_edges))
    codes = _edge_codes(e, n)
    tcols = np.arange(cx.num_triangles)
    rows, vals = [], []
    for (a, b), sign in (((1, 2), 1.0), ((0, 2), -1.0), ((0, 1), 1.0)):
        rows.append(np.searchsorted(codes, t[:, a] * n + t[:, b]))
        vals.append(np.full(cx.num_triangles, sign))
    B2 = sp.csr_matrix((np.concatenate(vals), (np.concatenate(rows), np.tile(tcols, 3))), shape=(cx.num_edges, cx.num_triangles))
    return B1, B2


def vertex_triangle_incidence(cx: SimplicialComplex) -> sp.csr_matrix:
    """Unsigned incidence ``H`` (V, T): ``H[v, t] = 1`` when vertex ``v`` lies in triangle ``t``."""
    t = cx.triangles
    return sp.csr_matrix((np.ones(t.size), (t.ravel(), np.repeat(np.arange(cx.num_triangles), 3))),
                         shape=(cx.num_vertices, cx.num_triangles))


def hodge_laplacians(B1, B2) -> tuple[sp.csr_matrix, sp.csr_matrix]:
    """``L0 = B1 B1^T`` (V, V) and ``L1 = B1^T B1 + B2 B2^T`` (E, E)."""
    return sp.csr_matrix(B1 @ B1.T), sp.csr_matrix(B1.T @ B1 + B2 @ B2.T)
