r"""Graphs, structural encodings and edge weights of the chapter.

- :func:`csbm_dc`: a degree-corrected contextual SBM with Pareto degree propensities and a set
  edge homophily ``h``.
- :func:`digits_knn`: a kNN graph on (clean) sklearn digits, a fraction of its edges rewired to
  other-class nodes, node features with added noise (the graph then carries what the features
  lack, as in a citation graph).
- :func:`laplacian_pe` (eigenvectors of :math:`L = I - D^{-1/2} A D^{-1/2}`), :func:`rwse`
  (:math:`\mathrm{diag}((D^{-1}A)^r)`, r = 1..k), :func:`hetero_edge_weights`
  (:math:`w_{ij} = 1 + \beta (1 - \cos(x_i, x_j)) / 2`), degree quartiles and splits.
- :func:`node_density`: the density a node is binned by in density-partitioned masking: degree,
  k-core number or local clustering coefficient (the last two from ``networkx``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

__all__ = ["Graph", "csbm_dc", "digits_knn", "laplacian_pe", "rwse", "hetero_edge_weights",
           "degree_quartiles", "node_density", "DENSITIES", "rwse_spectral", "split_nodes", "edge_homophily", "feature_probe_accuracy", "probe_accuracy"]


@dataclass(frozen=True)
class Graph:
    """An undirected graph: ``x (n, d)`` float32, ``y (n,)``, ``edge_index (2, E)`` both directions."""

    x: torch.Tensor
    y: np.ndarray
    edge_index: torch.Tensor
    name: str

    @property
    def num_nodes(self) -> int:
        return int(self.x.shape[0])

    def degree(self) -> np.ndarray:
        return np.bincount(self.edge_index[0].numpy(), minlength=self.num_nodes)

    def adjacency(self) -> np.ndarray:
        A = np.zeros((self.num_nodes, self.num_nodes))
        A[self.edge_index[0].numpy(), self.edge_index[1].numpy()] = 1.0
        return A


def _edge_index_from_upper(i: np.ndarray, j: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.stack([np.concatenate([i, j]), np.concatenate([j, i])])).long()


def csbm_dc(num_nodes: int, num_classes: int, homophily: float, mean_degree: float, feature_dim: int,
            feature_noise: float, rng: np.random.Generator, degree_exponent: float = 2.5) -> Graph:
    r"""Degree-corrected contextual SBM.

    Each node gets a class (balanced), a propensity :math:`\theta_i \sim \mathrm{Pareto}(a)` (scale 1,
    ``a = degree_exponent``) and features :math:`x_i = \mu_{y_i} + \sigma \varepsilon_i` with class
    means :math:`\mu_c \sim N(0, I_d / d)` scaled to unit norm. Edge ``(i, j)`` appears with
    probability :math:`\min(1, \kappa \theta_i \theta_j b_{y_i y_j})`, :math:`b = a_{\rm in}` within a
    class and :math:`a_{\rm out}` across, with :math:`a_{\rm in} / a_{\rm out} = h (C-1)/(1-h)` so that the
    expected fraction of within-class edges is ``h``; :math:`\kappa` sets the expected mean degree.

    Returns
    -------
    Graph
        ``x (n, feature_dim)``, ``y (n,)``, ``edge_index (2, 2m)``.
    """
    if not 0.0 < homophily < 1.0:
        raise ValueError(f"homophily must be in (0, 1), got {homophily}")
    n, C = int(num_nodes), int(num_classes)
    y = rng.permutation(np.arange(n) % C)
    theta = rng.pareto(degree_exponent, n) + 1.0
    ratio = homophily * (C - 1) / (1.0 - homophily)           # a_in / a_out
    B = np.where(y[:, None] == y[None, :], ratio, 1.0)
    W = theta[:, None] * theta[None, :] * B
    np.fill_diagonal(W, 0.0)
    kappa = mean_degree * n / W.sum()
    P = np.minimum(1.0, kappa * W)
    iu, ju = np.triu_indices(n, 1)
    keep = rng.random(iu.size) < P[iu, ju]
    mu = rng.standard_normal((C, feature_dim))
    mu /= np.linalg.norm(mu, axis=1, keepdims=True)
    x = mu[y] + feature_noise * rng.standard_normal((n, feature_dim)) / np.sqrt(feature_dim)
    return Graph(torch.tensor(x, dtype=torch.float32), y, _edge_index_from_upper(iu[keep], ju[keep]),
                 f"csbm h={homophily:g}")


def digits_knn(X: np.ndarray, y: np.ndarray, num_nodes: int, k: int, rewire_fraction: float,
               feature_noise: float, rng: np.random.Generator) -> Graph:
    """kNN graph (``k`` nearest by Euclidean distance of the clean, standardised pixels, via
    ``torch.cdist``; symmetrised) on a stratified subsample of ``num_nodes`` digits; each edge is
    rewired with probability ``rewire_fraction`` to a random node of another class; the node
    features are the standardised pixels plus ``feature_noise`` times standard normal noise."""
    if not 0.0 <= rewire_fraction <= 1.0:
        raise ValueError(f"rewire_fraction must be in [0, 1], got {rewire_fraction}")
    n_all = len(y)
    if not 2 * k < num_nodes <= n_all:
        raise ValueError(f"num_nodes must be in ({2 * k}, {n_all}], got {num_nodes}")
    idx = np.sort(rng.permutation(n_all)[:num_nodes])
    Z = (X[idx] - X.mean(0)) / (X.std(0) + 1e-8)
    labels = np.asarray(y)[idx]
    D = torch.cdist(torch.tensor(Z), torch.tensor(Z))
    D.fill_diagonal_(float("inf"))
    nbr = torch.topk(D, k, largest=False).indices.numpy()
    i = np.repeat(np.arange(num_nodes), k)
    j = nbr.reshape(-1)
    rewire = rng.random(i.size) < rewire_fraction
    for e in np.nonzero(rewire)[0]:
        others = np.nonzero(labels != labels[i[e]])[0]
        j[e] = others[rng.integers(others.size)]
    a, b = np.minimum(i, j), np.maximum(i, j)
    pairs = np.unique(np.stack([a, b], 1)[a != b], axis=0)
    x = Z + feature_noise * rng.standard_normal(Z.shape)
    return Graph(torch.tensor(x, dtype=torch.float32), labels, _edge_index_from_upper(pairs[:, 0], pairs[:, 1]),
                 "digits-kNN")


def edge_homophily(graph: Graph) -> float:
    """Fraction of edges whose ends share a class."""
    s, t = graph.edge_index.numpy()
    return float(np.mean(graph.y[s] == graph.y[t]))


def laplacian_pe(A: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    r"""First ``k`` non-trivial eigenvectors of :math:`L = I - D^{-1/2} A D^{-1/2}` (float64).

    Isolated nodes get degree 1 in :math:`D^{-1/2}` (their row of ``L`` is the identity's).
    Returns ``(P (n, k), eigenvalues (k,))`` with :math:`L P = P \Lambda`, :math:`P^\top P = I`;
    the trivial eigenvector (smallest eigenvalue) is dropped.
    """
    A = np.asarray(A, dtype=float)
    deg = A.sum(1)
    dinv = 1.0 / np.sqrt(np.where(deg > 0, deg, 1.0))
    L = np.eye(len(A)) - dinv[:, None] * A * dinv[None, :]
    vals, vecs = np.linalg.eigh(L)
    return vecs[:, 1:k + 1], vals[1:k + 1]


def rwse(A: np.ndarray, k: int) -> np.ndarray:
    r"""Random-walk structural encoding: :math:`[\mathrm{diag}(M^r)]_{r=1..k}`, :math:`M = D^{-1} A`."""
    A = np.asarray(A, dtype=float)
    deg = A.sum(1)
    M = A / np.where(deg > 0, deg, 1.0)[:, None]
    out, Mr = [], np.eye(len(A))
    for _ in range(k):
        Mr = Mr @ M
        out.append(np.diag(Mr).copy())
    return np.stack(out, 1)


def rwse_spectral(A: np.ndarray, k: int) -> np.ndarray:
    r""":func:`rwse` another way, for its check: with :math:`S = D^{-1/2} A D^{-1/2} = U \Lambda U^\top`,
    :math:`M^r = D^{-1/2} S^r D^{1/2}`, so :math:`\mathrm{diag}(M^r)_i = \sum_j U_{ij}^2 \lambda_j^r`."""
    A = np.asarray(A, dtype=float)
    deg = A.sum(1)
    dinv = 1.0 / np.sqrt(np.where(deg > 0, deg, 1.0))
    lam, U = np.linalg.eigh(dinv[:, None] * A * dinv[None, :])
    return np.stack([(U**2) @ lam**r for r in range(1, k + 1)], 1)


DENSITIES = ("degree", "kcore", "clustering")


def node_density(graph: "Graph", kind: str) -> np.ndarray:
    """Per-node density for density-partitioned masking: ``degree``; ``kcore`` (the largest k of a
    k-core holding the node, ``networkx.core_number``); ``clustering`` (the local clustering
    coefficient, ``networkx.clustering``: triangles through the node over degree choose 2)."""
    if kind == "degree":
        return graph.degree().astype(float)
    if kind not in DENSITIES:
        raise ValueError(f"density must be one of {DENSITIES}, got {kind!r}")
    import networkx as nx

    G = nx.Graph()
    G.add_nodes_from(range(graph.num_nodes))
    G.add_edges_from(graph.edge_index.T.tolist())
    values = nx.core_number(G) if kind == "kcore" else nx.clustering(G)
    return np.array([values[i] for i in range(graph.num_nodes)], dtype=float)


def hetero_edge_weights(x: torch.Tensor, edge_index: torch.Tensor, beta: float) -> torch.Tensor:
    r""":math:`w_{ij} = 1 + \beta (1 - \cos(x_i, x_j)) / 2` per edge, shape ``(E,)``; ``beta >= 0``."""
    if beta < 0:
        raise ValueError(f"beta must be >= 0, got {beta}")
    cos = torch.nn.functional.cosine_similarity(x[edge_index[0]], x[edge_index[1]], dim=-1)
    return 1.0 + beta * (1.0 - cos) / 2.0


def degree_quartiles(degree: np.ndarray, rng: np.random.Generator, bins: int = 4) -> np.ndarray:
    """Bin index (0 = lowest) of every node: rank by ``degree`` (or any density), ties broken at
    random, then ``bins`` equal-count groups (sizes differ by at most one)."""
    n = len(degree)
    order = np.lexsort((rng.random(n), degree))
    q = np.empty(n, dtype=int)
    q[order] = np.arange(n) * bins // n
    return q


def split_nodes(y: np.ndarray, rng: np.random.Generator, fractions=(0.6, 0.2, 0.2)) -> dict:
    """Stratified train/val/test index arrays (60/20/20 by default)."""
    out = {"train": [], "val": [], "test": []}
    for c in np.unique(y):
        idx = rng.permutation(np.nonzero(y == c)[0])
        a = int(round(fractions[0] * idx.size))
        b = a + int(round(fractions[1] * idx.size))
        out["train"].append(idx[:a]); out["val"].append(idx[a:b]); out["test"].append(idx[b:])
    return {k: np.sort(np.concatenate(v)) for k, v in out.items()}


def probe_accuracy(Z: np.ndarray, y: np.ndarray, split: dict, part: str = "test") -> np.ndarray:
    """Linear probe: standardise ``Z`` on the training nodes, fit a multinomial logistic
    regression (sklearn, lbfgs, C = 1) on them; return per-node correctness on ``part``."""
    from sklearn.linear_model import LogisticRegression

    Z = np.asarray(Z, dtype=float)
    tr = split["train"]
    mu, sd = Z[tr].mean(0), Z[tr].std(0) + 1e-8
    Zs = (Z - mu) / sd
    clf = LogisticRegression(C=1.0, max_iter=500).fit(Zs[tr], y[tr])
    idx = split[part]
    return clf.predict(Zs[idx]) == y[idx]


def feature_probe_accuracy(graph: Graph, split: dict, part: str = "test") -> float:
    """Accuracy of the linear probe on the raw node features alone."""
    return float(probe_accuracy(graph.x.numpy(), graph.y, split, part).mean())
