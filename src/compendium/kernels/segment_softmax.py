"""Segment softmax + weighted scatter-add over an edge list: the hot op of a sparse GAT layer
(the C2-GMAE chapter, whose HEA adds a per-edge log-weight to the logits).

Edges sorted by target node in CSR form (``rowptr (n + 1,)``, ``src (E,)``), per-edge, per-head
logits ``e (E, H)`` and source values ``V (n_src, H, C)``::

    alpha_eh = exp(e_eh) / sum_{e' in seg(i)} exp(e'_h)        for e in seg(i) = rowptr[i]:rowptr[i+1]
    out_ih   = sum_{e in seg(i)} alpha_eh V[src_e, h]           (0 for an empty segment)

torch_geometric's ``GATConv`` computes this with ``softmax`` (scatter max, exp, scatter sum) and a
``propagate`` (gather, multiply, scatter add), materialising ``alpha`` and the (E, H, C) messages.
``segment_softmax_aggregate_triton`` does it in one pass per (node, head) with an online softmax
over chunks of the segment (running max ``m``, normaliser ``l`` and accumulator, rescaled by
``exp(m_old - m_new)`` when the max grows), so neither is materialised. The reference defines the
result; Triton is imported lazily. The dispatcher is differentiable: the reference through
autograd, the kernel through :class:`_TritonAggregate` (forward by the kernel, backward by
recomputing the reference), so a sparse GAT layer can train through it (the C2-GMAE chapter's
``SegmentGATConv``). The chapter's arms use ``GATConv``; its ledger trains through this module
(the reference on the CPU) and compares loss curves; the tests compare the kernel with the
reference in Triton's interpreter, including a short training run. Timed against ``GATConv`` by
``benchmarks/c2_gmae_kernels.py`` on a GPU only.
"""

from __future__ import annotations

import functools

import torch

__all__ = ["csr_from_edge_index", "segment_softmax_aggregate_reference", "segment_softmax_aggregate_triton",
           "segment_softmax_aggregate"]


def csr_from_edge_index(edge_index: torch.Tensor, num_nodes: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(rowptr (n + 1,), src (E,), order (E,))``: edges sorted by target (stable), ``order`` the
    permutation that sorts per-edge arrays the same way."""
    if edge_index.ndim != 2 or edge_index.shape[0] != 2:
        raise ValueError(f"edge_index must have shape (2, E), got {tuple(edge_index.shape)}")
    dst = edge_index[1]
    order = torch.sort(dst, stable=True).indices
    counts = torch.bincount(dst, minlength=num_nodes)
    rowptr = torch.zeros(num_nodes + 1, dtype=torch.long, device=dst.device)
    rowptr[1:] = torch.cumsum(counts, 0)
    return rowptr, edge_index[0][order], order


def _check(logits, rowptr, src, values):
    if logits.ndim != 2:
        raise ValueError(f"logits must have shape (E, H), got {tuple(logits.shape)}")
    if values.ndim != 3 or values.shape[1] != logits.shape[1]:
        raise ValueError(f"values must have shape (n_src, H, C) with H = {logits.shape[1]}, got {tuple(values.shape)}")
    if rowptr.ndim != 1 or rowptr.numel() < 1 or src.ndim != 1 or src.numel() != logits.shape[0]:
        raise ValueError("rowptr must be (n + 1,) and src (E,) with E the number of logit rows")
    if int(rowptr[0]) != 0 or int(rowptr[-1]) != src.numel() or bool((rowptr[1:] < rowptr[:-1]).any()):
        raise ValueError("rowptr must start at 0, be non-decreasing and end at E")
    if src.numel() and (int(src.min()) < 0 or int(src.max()) >= values.shape[0]):
        raise ValueError(f"src indices must lie in [0, {values.shape[0]})")
    if not logits.is_floating_point() or not values.is_floating_point():
        raise ValueError("logits and values must be floating point")


def segment_softmax_aggregate_reference(logits: torch.Tensor, rowptr: torch.Tensor, src: torch.Tensor,
                                        values: torch.Tensor) -> torch.Tensor:
    """Plain PyTorch: scatter max, exp, scatter sum, then a weighted index-add; ``(n, H, C)``."""
    _check(logits, rowptr, src, values)
    n = rowptr.numel() - 1
    E, H = logits.shape
    target = torch.repeat_interleave(torch.arange(n, device=logits.device), rowptr[1:] - rowptr[:-1])
    e = logits.float()
    seg_max = torch.full((n, H), float("-inf"), device=e.device).scatter_reduce(0, target[:, None].expand(E, H), e, "amax")
    p = torch.exp(e - seg_max.detach()[target])                  # any shift gives the same softmax
    denom = torch.zeros(n, H, device=e.device).index_add_(0, target, p)
    alpha = p / denom[target]
    out = torch.zeros(n, H, values.shape[2], device=e.device).index_add_(0, target, alpha[:, :, None] * values.float()[src])
    return out.to(values.dtype)


@functools.cache  # compile once, on first use (Triton is imported only here)
def _build_kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def _segment_kernel(e_ptr, rowptr_ptr, src_ptr, v_ptr, o_ptr, H, C,
                        stride_ee, stride_vn, stride_vh, stride_on, stride_oh,
                        BLOCK_E: tl.constexpr, BLOCK_C: tl.constexpr):
        i = tl.program_id(0)
        h = tl.program_id(1)
        start = tl.load(rowptr_ptr + i)
        end = tl.load(rowptr_ptr + i + 1)
        offs_c = tl.arange(0, BLOCK_C)
        cmask = offs_c < C
        m = tl.full((), -float("inf"), tl.float32)
        l = tl.zeros((), tl.float32)
        acc = tl.zeros((BLOCK_C,), tl.float32)
        for e0 in range(start, end, BLOCK_E):
            offs_e = e0 + tl.arange(0, BLOCK_E)
            emask = offs_e < end
            e = tl.load(e_ptr + offs_e * stride_ee + h, mask=emask, other=-float("inf")).to(tl.float32)
            m_new = tl.maximum(m, tl.max(e, axis=0))
            scale = tl.exp(m - m_new)                                  # 0 on the first chunk (m = -inf)
            p = tl.where(emask, tl.exp(e - m_new), 0.0)
            s = tl.load(src_ptr + offs_e, mask=emask, other=0)
            v = tl.load(v_ptr + s[:, None] * stride_vn + h * stride_vh + offs_c[None, :],
                        mask=emask[:, None] & cmask[None, :], other=0.0).to(tl.float32)
            acc = acc * scale + tl.sum(p[:, None] * v, axis=0)
            l = l * scale + tl.sum(p, axis=0)
            m = m_new
        out = acc / tl.where(l > 0, l, 1.0)                              # empty segment: acc = 0
        tl.store(o_ptr + i * stride_on + h * stride_oh + offs_c, out, mask=cmask)

    return triton, _segment_kernel


def segment_softmax_aggregate_triton(logits: torch.Tensor, rowptr: torch.Tensor, src: torch.Tensor,
                                     values: torch.Tensor, block_e: int = 16) -> torch.Tensor:
    """Triton version of :func:`segment_softmax_aggregate_reference` (float32 accumulation).

    One program per (target node, head); the segment is read in chunks of ``block_e`` edges. Runs
    on CUDA tensors, or on CPU tensors under ``TRITON_INTERPRET=1`` (set before Triton is imported).
    """
    _check(logits, rowptr, src, values)
    triton, kernel = _build_kernel()
    n = rowptr.numel() - 1
    H, C = values.shape[1], values.shape[2]
    e = logits.contiguous()
    v = values.contiguous()
    out = torch.empty(n, H, C, dtype=torch.float32, device=values.device)
    if n and H and C:
        kernel[(n, H)](e, rowptr.contiguous(), src.contiguous(), v, out, H, C, e.stride(0), v.stride(0), v.stride(1),
                       out.stride(0), out.stride(1), BLOCK_E=triton.next_power_of_2(block_e),
                       BLOCK_C=triton.next_power_of_2(C))
    return out.to(values.dtype)


class _TritonAggregate(torch.autograd.Function):
    """The kernel forward; the backward recomputes the reference and differentiates it (the kernel
    has no backward of its own), so gradients are the reference's."""

    @staticmethod
    def forward(ctx, logits, values, rowptr, src):
        ctx.save_for_backward(logits, values, rowptr, src)
        return segment_softmax_aggregate_triton(logits, rowptr, src, values)

    @staticmethod
    def backward(ctx, grad_out):
        logits, values, rowptr, src = ctx.saved_tensors
        with torch.enable_grad():
            e = logits.detach().requires_grad_(ctx.needs_input_grad[0])
            v = values.detach().requires_grad_(ctx.needs_input_grad[1])
            out = segment_softmax_aggregate_reference(e, rowptr, src, v)
            wrt = [t for t in (e, v) if t.requires_grad]
            grads = iter(torch.autograd.grad(out, wrt, grad_out)) if wrt else iter(())
        return (next(grads) if ctx.needs_input_grad[0] else None, next(grads) if ctx.needs_input_grad[1] else None,
                None, None)


def segment_softmax_aggregate(logits, rowptr, src, values, *, backend: str = "auto"):
    """Dispatch: the Triton kernel on CUDA (``backend='auto'``), the reference elsewhere; both
    differentiable in ``logits`` and ``values``."""
    from . import use_triton

    why_not = f"C = {values.shape[-1]} exceeds the kernel's 1024" if values.shape[-1] > 1024 else None
    if use_triton(backend, logits, why_not=why_not, name="segment_softmax_aggregate"):
        if torch.is_grad_enabled() and (logits.requires_grad or values.requires_grad):
            return _TritonAggregate.apply(logits, values, rowptr, src)
        return segment_softmax_aggregate_triton(logits, rowptr, src, values)
    return segment_softmax_aggregate_reference(logits, rowptr, src, values)
