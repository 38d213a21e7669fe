"""Batched k-nearest neighbours of query points among a point cloud (top_adapter's grouping).

For a batch of clouds ``points`` (B, N, C) and queries ``queries`` (B, M, C) the result is, per
query, the indices of the ``k`` points with the smallest Euclidean distance, nearest first, with
ties broken towards the lower point index, and those distances.

``knn_reference`` is the PyTorch reference: ``torch.cdist`` (the direct difference form, not the
matrix-product shortcut, so the distances are the same arithmetic the kernel does) followed by a
stable sort. ``knn_triton`` is a one-program-per-query Triton kernel: it loads the query's row of
squared distances into registers (``N`` up to 4096 points) and takes ``k`` masked arg-min passes
(``k`` is small in point-cloud grouping: 8-32). Triton is imported lazily: this module imports
without it. ``knn`` dispatches (``backend='auto'``: Triton on CUDA tensors, the reference elsewhere).
"""

from __future__ import annotations

import functools

import torch

__all__ = ["knn_reference", "knn_triton", "knn", "MAX_POINTS"]

MAX_POINTS = 4096  # the kernel keeps one query's distance row in registers


def _check(points: torch.Tensor, queries: torch.Tensor, k: int) -> None:
    if points.ndim != 3 or queries.ndim != 3:
        raise ValueError(f"points and queries must be (B, N, C) and (B, M, C); got {tuple(points.shape)}, "
                         f"{tuple(queries.shape)}")
    if points.shape[0] != queries.shape[0] or points.shape[2] != queries.shape[2]:
        raise ValueError(f"batch and coordinate sizes must agree; got {tuple(points.shape)}, {tuple(queries.shape)}")
    if not points.is_floating_point() or not queries.is_floating_point():
        raise ValueError("points and queries must be floating point")
    if not isinstance(k, int) or not 1 <= k <= points.shape[1]:
        raise ValueError(f"k must be an int in [1, N={points.shape[1]}], got {k!r}")


def knn_reference(points: torch.Tensor, queries: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """k nearest points of each query (PyTorch reference).

    Parameters
    ----------
    points : Tensor (B, N, C).
    queries : Tensor (B, M, C).
    k : number of neighbours, 1 <= k <= N.

    Returns
    -------
    idx : LongTensor (B, M, k), nearest first, ties to the lower index.
    dist : Tensor (B, M, k), Euclidean distances.
    """
    _check(points, queries, k)
    d = torch.cdist(queries, points, compute_mode="donot_use_mm_for_euclid_dist")   # (B, M, N)
    dist, idx = torch.sort(d, dim=-1, stable=True)
    return idx[..., :k], dist[..., :k]


@functools.cache  # compile once, on first use (Triton is imported only here)
def _build_kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def _knn_kernel(p_ptr, q_ptr, idx_ptr, d_ptr, N, M,
                    stride_pb, stride_pn, stride_qb, stride_qm,
                    C: tl.constexpr, K: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
        row = tl.program_id(0)            # one query: row = b * M + m
        b = row // M
        m = row % M
        offs = tl.arange(0, BLOCK_N)
        valid = offs < N
        d2 = tl.zeros([BLOCK_N], dtype=tl.float32)
        for c in tl.static_range(C):
            qc = tl.load(q_ptr + b * stride_qb + m * stride_qm + c).to(tl.float32)
            pc = tl.load(p_ptr + b * stride_pb + offs * stride_pn + c, mask=valid, other=0.0).to(tl.float32)
            diff = pc - qc
            d2 += diff * diff
        d2 = tl.where(valid, d2, float("inf"))
        koffs = tl.arange(0, BLOCK_K)
        idx_vec = tl.zeros([BLOCK_K], dtype=tl.int32)
        d_vec = tl.zeros([BLOCK_K], dtype=tl.float32)
        for j in tl.static_range(K):
            i = tl.argmin(d2, axis=0)     # first (lowest) index among equal minima
            di = tl.min(d2, axis=0)
            idx_vec = tl.where(koffs == j, i, idx_vec)
            d_vec = tl.where(koffs == j, tl.sqrt(di), d_vec)
            d2 = tl.where(offs == i, float("inf"), d2)
        kmask = koffs < K
        tl.store(idx_ptr + row * K + koffs, idx_vec, mask=kmask)
        tl.store(d_ptr + row * K + koffs, d_vec, mask=kmask)

    return triton, _knn_kernel


def knn_triton(points: torch.Tensor, queries: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Triton version of :func:`knn_reference` (same arguments and results; distances in float32,
    cast back to the points' dtype). Runs on CUDA tensors, or on CPU tensors under
    ``TRITON_INTERPRET=1`` (set before Triton is imported). ``N`` is at most ``MAX_POINTS``."""
    _check(points, queries, k)
    B, N, C = points.shape
    M = queries.shape[1]
    if N > MAX_POINTS:
        raise ValueError(f"the kernel handles N <= {MAX_POINTS} points, got {N}")
    triton, kernel = _build_kernel()
    p = points if points.stride(-1) == 1 else points.contiguous()
    q = queries if queries.stride(-1) == 1 else queries.contiguous()
    idx = torch.empty(B, M, k, dtype=torch.int32, device=points.device)
    dist = torch.empty(B, M, k, dtype=torch.float32, device=points.device)
    if B * M:
        kernel[(B * M,)](p, q, idx, dist, N, M, p.stride(0), p.stride(1), q.stride(0), q.stride(1),
                         C=C, K=k, BLOCK_N=triton.next_power_of_2(N), BLOCK_K=triton.next_power_of_2(k))
    return idx.long(), dist.to(points.dtype)


def knn(points: torch.Tensor, queries: torch.Tensor, k: int, *, backend: str = "auto"):
    """Dispatch: the Triton kernel on CUDA (``backend='auto'``), the reference elsewhere; on CUDA,
    ``auto`` falls back to the reference with a warning when Triton is missing or N is too large."""
    from . import use_triton

    why_not = f"N = {points.shape[1]} > {MAX_POINTS}" if points.ndim == 3 and points.shape[1] > MAX_POINTS else None
    if use_triton(backend, points, why_not=why_not, name="knn"):
        return knn_triton(points, queries, k)
    return knn_reference(points, queries, k)
