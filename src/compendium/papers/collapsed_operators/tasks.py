"""Downstream uses of a vertex operator: spectral clustering and Tikhonov smoothing."""

from __future__ import annotations

import numpy as np
import scipy.optimize
import scipy.stats


def _symmetric(a) -> np.ndarray:
    a = np.asarray(a, dtype=float)
    if a.ndim != 2 or a.shape[0] != a.shape[1]:
        raise ValueError(f"expected a square matrix, got shape {a.shape}")
    return a


def spectral_embedding(operator, num_vectors: int) -> np.ndarray:
    """Rows of the ``num_vectors`` lowest eigenvectors, each row scaled to unit length, (V, k).

    The row normalisation is the one of Ng, Jordan and Weiss (2002); it is applied to every
    operator alike.
    """
    a = _symmetric(operator)
    if not 1 <= num_vectors <= a.shape[0]:
        raise ValueError(f"num_vectors must lie in [1, {a.shape[0]}], got {num_vectors}")
    _, vecs = np.linalg.eigh(a)
    emb = vecs[:, :num_vectors]
    norms = np.linalg.norm(emb, axis=1, keepdims=True)
    return emb / np.where(norms > 0, norms, 1.0)


def spectral_clustering(operator, num_clusters: int, random_state: int) -> np.ndarray:
    """k-means (10 restarts, seeded) on :func:`spectral_embedding`; labels of shape (V,)."""
    from sklearn.cluster import KMeans
    from threadpoolctl import threadpool_limits

    emb = spectral_embedding(operator, num_clusters)
    km = KMeans(n_clusters=num_clusters, n_init=10, random_state=int(random_state))
    with threadpool_limits(limits=1):  # a few dozen points: threads only add overhead
        return km.fit_predict(emb)


def effective_dof(eigenvalues, tau: float) -> float:
    """``tr((I + tau A)^{-1}) = sum_i 1 / (1 + tau lambda_i)``: the smoother's degrees of freedom."""
    lam = np.clip(np.asarray(eigenvalues, dtype=float), 0.0, None)
    return float(np.sum(1.0 / (1.0 + tau * lam)))


def tau_for_dof(eigenvalues, dof: float) -> float:
    """The ``tau`` at which :func:`effective_dof` equals ``dof`` (equal effective bandwidth).

    Raises
    ------
    ValueError
        ``dof`` outside ``(number of zero eigenvalues, number of eigenvalues)``.
    """
    lam = np.clip(np.asarray(eigenvalues, dtype=float), 0.0, None)
    zeros = int(np.sum(lam <= 1e-10 * max(lam.max(initial=0.0), 1.0)))
    if not zeros < dof < lam.size:
        raise ValueError(f"dof must lie in ({zeros}, {lam.size}) for this operator, got {dof}")
    f = lambda log_tau: effective_dof(lam, np.exp(log_tau)) - dof  # noqa: E731 - decreasing in log tau
    lo, hi = -40.0, 40.0
    return float(np.exp(scipy.optimize.brentq(f, lo, hi, xtol=1e-12, rtol=1e-12)))


def tikhonov_smooth(operator, signal, tau: float) -> np.ndarray:
    """``(I + tau A)^{-1} y``, the minimiser of ``||f - y||^2 + tau f^T A f``; shape of ``signal``."""
    a = _symmetric(operator)
    if tau < 0:
        raise ValueError(f"tau must be >= 0, got {tau}")
    return np.linalg.solve(np.eye(a.shape[0]) + tau * a, np.asarray(signal, dtype=float))


def sign_test(differences) -> dict:
    """One-sided sign test that paired differences are positive; ties (exact zeros) are dropped.

    Returns
    -------
    dict with ``wins``, ``losses``, ``ties`` and ``p_value`` (``P(Bin(wins + losses, 1/2) >= wins)``,
    1.0 when every pair is tied).
    """
    d = np.asarray(differences, dtype=float)
    wins, losses = int(np.sum(d > 0)), int(np.sum(d < 0))
    ties = int(d.size - wins - losses)
    p = 1.0 if wins + losses == 0 else float(scipy.stats.binomtest(wins, wins + losses, 0.5, alternative="greater").pvalue)
    return {"wins": wins, "losses": losses, "ties": ties, "p_value": p}
