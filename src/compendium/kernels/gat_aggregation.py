"""Masked-softmax neighbour aggregation, the hot op of a dense GAT layer (graph alignment chapter).

For a batch of graphs with attention logits ``e`` (B, n, n), an adjacency mask ``M`` (B, n, n)
and node values ``V`` (B, n, d)::

    alpha_ij = exp(e_ij) / sum_{k : M_ik} exp(e_ik)     for M_ij (0 elsewhere)
    out_i    = sum_j alpha_ij V_j                         (out_i = 0 when row i has no neighbour)

GATConv computes exactly this on a sparse edge list (with ``e_ij = LeakyReLU(a_dst . W h_i +
a_src . W h_j)`` and self-loops in ``M``); on the chapter's small dense batches (n = 50) one fused
pass per row avoids materialising ``alpha``. ``masked_softmax_aggregate_reference`` is the PyTorch
reference and defines the result; ``masked_softmax_aggregate_triton`` is a one-program-per-row
Triton kernel (the row's logits in registers, a max-subtracted softmax, then the weighted sum over
``d`` in blocks). Triton is imported lazily: this module imports without it. The chapter's models
use torch_geometric's ``GATConv``; the kernel is checked against the reference (Triton's
interpreter on the CPU) and the reference against ``GATConv``, and it would join
``benchmarks/gpu_check.sh`` only if it beat the library on a GPU (not measured: no GPU here).
"""

from __future__ import annotations

import functools

import torch

__all__ = ["masked_softmax_aggregate_reference", "masked_softmax_aggregate_triton", "masked_softmax_aggregate"]


def _check(scores, mask, values):
    if scores.ndim != 3 or scores.shape[1] != scores.shape[2]:
        raise ValueError(f"scores must have shape (B, n, n), got {tuple(scores.shape)}")
    if mask.shape != scores.shape:
        raise ValueError(f"mask must have the scores' shape {tuple(scores.shape)}, got {tuple(mask.shape)}")
    if mask.dtype != torch.bool:
        raise ValueError(f"mask must be boolean, got {mask.dtype}")
    if values.ndim != 3 or values.shape[:2] != scores.shape[:2]:
        raise ValueError(f"values must have shape (B, n, d) with B, n = {tuple(scores.shape[:2])}, got {tuple(values.shape)}")
    if not scores.is_floating_point() or not values.is_floating_point():
        raise ValueError("scores and values must be floating point")


def masked_softmax_aggregate_reference(scores: torch.Tensor, mask: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """``softmax_j(scores[b, i, j] over mask[b, i, :]) @ values[b]``: (B, n, d); empty rows give 0."""
    _check(scores, mask, values)
    masked = scores.float().masked_fill(~mask, float("-inf"))
    alpha = torch.softmax(masked, dim=-1).nan_to_num(0.0)                  # an empty row is all -inf
    return (alpha @ values.float()).to(values.dtype)


@functools.cache  # compile once, on first use (Triton is imported only here)
def _build_kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def _aggregate_kernel(e_ptr, m_ptr, v_ptr, o_ptr, n, d,
                          stride_eb, stride_ei, stride_vb, stride_vn, stride_ob, stride_on,
                          BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
        b = tl.program_id(0)
        i = tl.program_id(1)
        offs_n = tl.arange(0, BLOCK_N)
        valid = offs_n < n
        row = b * stride_eb + i * stride_ei + offs_n
        keep = valid & (tl.load(m_ptr + row, mask=valid, other=0) != 0)
        e = tl.load(e_ptr + row, mask=keep, other=-float("inf")).to(tl.float32)
        e_max = tl.max(e, axis=0)
        e_max = tl.where(e_max == -float("inf"), 0.0, e_max)               # empty row: avoid inf - inf
        p = tl.where(keep, tl.exp(e - e_max), 0.0)
        denom = tl.sum(p, axis=0)
        alpha = p / tl.where(denom > 0, denom, 1.0)                        # (BLOCK_N,)
        for d0 in range(0, d, BLOCK_D):
            offs_d = d0 + tl.arange(0, BLOCK_D)
            v = tl.load(v_ptr + b * stride_vb + offs_n[:, None] * stride_vn + offs_d[None, :],
                        mask=valid[:, None] & (offs_d[None, :] < d), other=0.0).to(tl.float32)
            acc = tl.sum(alpha[:, None] * v, axis=0)                       # (BLOCK_D,)
            tl.store(o_ptr + b * stride_ob + i * stride_on + offs_d, acc, mask=offs_d < d)

    return triton, _aggregate_kernel


def masked_softmax_aggregate_triton(scores: torch.Tensor, mask: torch.Tensor, values: torch.Tensor,
                                    block_d: int = 32) -> torch.Tensor:
    """Triton version of :func:`masked_softmax_aggregate_reference` (float32 accumulation).

    Runs on CUDA tensors, or on CPU tensors under ``TRITON_INTERPRET=1`` (set before Triton is
    imported).
    """
    _check(scores, mask, values)
    triton, kernel = _build_kernel()
    B, n, _ = scores.shape
    d = values.shape[-1]
    e = scores.contiguous()
    m = mask.contiguous().to(torch.int8)
    v = values.contiguous()
    out = torch.empty(B, n, d, dtype=torch.float32, device=values.device)
    if B and n and d:
        kernel[(B, n)](e, m, v, out, n, d, e.stride(0), e.stride(1), v.stride(0), v.stride(1),
                       out.stride(0), out.stride(1), BLOCK_N=triton.next_power_of_2(n),
                       BLOCK_D=min(triton.next_power_of_2(d), triton.next_power_of_2(block_d)))
    return out.to(values.dtype)


def masked_softmax_aggregate(scores, mask, values, *, backend: str = "auto"):
    """Dispatch: the Triton kernel on CUDA (``backend='auto'``), the reference elsewhere."""
    from . import use_triton

    if use_triton(backend, scores, name="masked_softmax_aggregate"):
        return masked_softmax_aggregate_triton(scores, mask, values)
    return masked_softmax_aggregate_reference(scores, mask, values)
