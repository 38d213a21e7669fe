r"""Nested-prefix cosine similarities: every Matryoshka (MRL) logit matrix in one pass.

For queries ``Q (B, d)``, candidates ``C (N, d)`` and nested prefix widths
``m_1 < m_2 < ... < m_D <= d`` (the MRL dims, e.g. 8, 16, 32, 64)::

    S[k, i, j] = <Q[i, :m_k], C[j, :m_k]> / (max(|Q[i, :m_k]|, eps) max(|C[j, :m_k]|, eps))

The naive way (:func:`nested_prefix_similarity_naive`) normalises and multiplies once per width,
``O(B N sum_k m_k)``. Because the prefixes are nested, the Gram matrix of prefix ``k`` is the Gram
matrix of prefix ``k - 1`` plus that of the chunk ``[m_{k-1}, m_k)``, and the squared norms grow the
same way; so one pass over the ``d`` coordinates gives all ``D`` matrices, ``O(B N d)``:

    G_k = G_{k-1} + Q[:, m_{k-1}:m_k] C[:, m_{k-1}:m_k]^T,     q_k = q_{k-1} + |Q[:, m_{k-1}:m_k]|^2

:func:`nested_prefix_similarity_reference` is that recurrence in plain PyTorch (chunk Grams and a
cumulative sum; differentiable, any device): it defines the result. The Triton kernel
(:func:`nested_prefix_similarity_triton`, one program per ``(BLOCK_M, BLOCK_N)`` tile) carries the
tile's Gram accumulator and both norm accumulators through the chunks and writes the tile of every
``S[k]`` when it crosses ``m_k``; fp32 dot products (``input_precision="ieee"``, no TF32). It has no
backward: training uses the reference, the kernel serves evaluation on a GPU. Triton is imported
lazily. ``eps = 1e-12`` as in ``torch.nn.functional.normalize``. Used by the matryoshka_3d chapter
(its MRL losses and its evaluation cube); timed by ``benchmarks/matryoshka_3d_kernels.py``.
"""

from __future__ import annotations

import functools

import torch

__all__ = ["nested_prefix_similarity_naive", "nested_prefix_similarity_reference",
           "nested_prefix_similarity_triton", "nested_prefix_similarity"]

EPS = 1e-12  # torch.nn.functional.normalize's default


def _check(query, candidates, dims) -> list[int]:
    if query.ndim != 2 or candidates.ndim != 2 or query.shape[1] != candidates.shape[1]:
        raise ValueError(f"need query (B, d) and candidates (N, d) with one d, got {tuple(query.shape)} and "
                         f"{tuple(candidates.shape)}")
    if not query.is_floating_point() or not candidates.is_floating_point():
        raise ValueError("query and candidates must be floating point")
    if query.device != candidates.device:
        raise ValueError(f"query and candidates must be on one device, got {query.device} and {candidates.device}")
    d = query.shape[1]
    dims = [int(m) for m in dims]
    if not dims or any(not 1 <= m <= d for m in dims) or any(b <= a for a, b in zip(dims, dims[1:])):
        raise ValueError(f"dims must be strictly increasing widths in [1, {d}], got {dims}")
    return dims


def nested_prefix_similarity_naive(query: torch.Tensor, candidates: torch.Tensor, dims) -> torch.Tensor:
    """One normalise-and-multiply per width: ``(D, B, N)``. The slow definition the others must equal."""
    dims = _check(query, candidates, dims)
    eps = EPS
    out = []
    for m in dims:
        q = torch.nn.functional.normalize(query[:, :m], dim=-1, eps=eps)
        c = torch.nn.functional.normalize(candidates[:, :m], dim=-1, eps=eps)
        out.append(q @ c.T)
    return torch.stack(out)


def nested_prefix_similarity_reference(query: torch.Tensor, candidates: torch.Tensor, dims) -> torch.Tensor:
    """Prefix-summed chunk Gram matrices and norms (plain PyTorch, differentiable): ``(D, B, N)``."""
    dims = _check(query, candidates, dims)
    bounds = [0, *dims]
    grams = torch.stack([query[:, a:b] @ candidates[:, a:b].T for a, b in zip(bounds, bounds[1:])])   # (D, B, N)
    q_sq = torch.stack([query[:, a:b].pow(2).sum(-1) for a, b in zip(bounds, bounds[1:])])             # (D, B)
    c_sq = torch.stack([candidates[:, a:b].pow(2).sum(-1) for a, b in zip(bounds, bounds[1:])])        # (D, N)
    G = grams.cumsum(0)
    q_norm = q_sq.cumsum(0).sqrt().clamp(min=EPS)
    c_norm = c_sq.cumsum(0).sqrt().clamp(min=EPS)
    return G / (q_norm[:, :, None] * c_norm[:, None, :])


@functools.cache  # compile once, on first use (Triton is imported only here)
def _build_kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def _nested_kernel(q_ptr, c_ptr, bounds_ptr, o_ptr, B, N, D, eps,
                       stride_qb, stride_qd, stride_cn, stride_cd, stride_ok, stride_ob, stride_on,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
        pid_m = tl.program_id(0)
        pid_n = tl.program_id(1)
        offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        mmask = offs_m < B
        nmask = offs_n < N
        acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
        q_sq = tl.zeros((BLOCK_M,), tl.float32)
        c_sq = tl.zeros((BLOCK_N,), tl.float32)
        for k in range(D):
            lo = tl.load(bounds_ptr + k)
            hi = tl.load(bounds_ptr + k + 1)
            for k0 in range(lo, hi, BLOCK_K):                    # the chunk [m_{k-1}, m_k), BLOCK_K at a time
                offs_k = k0 + tl.arange(0, BLOCK_K)
                kmask = offs_k < hi
                q = tl.load(q_ptr + offs_m[:, None] * stride_qb + offs_k[None, :] * stride_qd,
                            mask=mmask[:, None] & kmask[None, :], other=0.0).to(tl.float32)
                c = tl.load(c_ptr + offs_n[:, None] * stride_cn + offs_k[None, :] * stride_cd,
                            mask=nmask[:, None] & kmask[None, :], other=0.0).to(tl.float32)
                acc += tl.dot(q, tl.trans(c), input_precision="ieee")
                q_sq += tl.sum(q * q, axis=1)
                c_sq += tl.sum(c * c, axis=1)
            q_norm = tl.maximum(tl.sqrt(q_sq), eps)
            c_norm = tl.maximum(tl.sqrt(c_sq), eps)
            out = acc / (q_norm[:, None] * c_norm[None, :])
            tl.store(o_ptr + k * stride_ok + offs_m[:, None] * stride_ob + offs_n[None, :] * stride_on, out,
                     mask=mmask[:, None] & nmask[None, :])

    return triton, _nested_kernel


def nested_prefix_similarity_triton(query: torch.Tensor, candidates: torch.Tensor, dims, *,
                                    block_m: int = 32, block_n: int = 32, block_k: int = 16) -> torch.Tensor:
    """Triton version of :func:`nested_prefix_similarity_reference` (float32 out; no backward).

    Runs on CUDA tensors, or on CPU tensors under ``TRITON_INTERPRET=1`` (set before Triton is
    imported). Inputs may be strided. Block sizes are powers of two, at least 16 (``tl.dot``).
    """
    dims = _check(query, candidates, dims)
    for name, value in (("block_m", block_m), ("block_n", block_n), ("block_k", block_k)):
        if value < 16 or value & (value - 1):
            raise ValueError(f"{name} must be a power of two >= 16, got {value}")
    triton, kernel = _build_kernel()
    B, N, D = query.shape[0], candidates.shape[0], len(dims)
    bounds = torch.tensor([0, *dims], dtype=torch.int32, device=query.device)
    out = torch.empty(D, B, N, dtype=torch.float32, device=query.device)
    if B and N:
        grid = (triton.cdiv(B, block_m), triton.cdiv(N, block_n))
        kernel[grid](query, candidates, bounds, out, B, N, D, EPS,
                     query.stride(0), query.stride(1), candidates.stride(0), candidates.stride(1),
                     out.stride(0), out.stride(1), out.stride(2), BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k)
    return out


def nested_prefix_similarity(query: torch.Tensor, candidates: torch.Tensor, dims, *,
                             backend: str = "auto") -> torch.Tensor:
    """Dispatch: the Triton kernel on CUDA tensors without gradients (``backend='auto'``), the
    reference elsewhere (and whenever a gradient is needed: the kernel has no backward)."""
    from . import use_triton

    needs_grad = torch.is_grad_enabled() and (query.requires_grad or candidates.requires_grad)
    if backend == "triton" and needs_grad:
        raise ValueError("backend='triton' has no backward; call it under torch.no_grad() or use the reference")
    if backend == "auto" and needs_grad:                          # training: the differentiable reference
        return nested_prefix_similarity_reference(query, candidates, dims)
    if use_triton(backend, query, name="nested_prefix_similarity"):
        return nested_prefix_similarity_triton(query, candidates, dims)
    return nested_prefix_similarity_reference(query, candidates, dims)
