"""Fused log-softmax + entropy + gather (the On-Policy SFT chapter's DDT statistic).

For rows of logits ``z`` (N, V) and targets ``y`` (N,)::

    lse   = log sum_v exp(z_v)
    logp  = z_y - lse                               (log-probability of the target)
    H     = lse - sum_v softmax(z)_v z_v            (entropy; = -sum_v p_v log p_v)
    phi   = logp + H                                (DDT's centred log-likelihood)

``centered_loglik_reference`` is plain PyTorch (it builds the full softmax). The Triton kernel,
one program per row, streams the row in blocks of ``BLOCK_V`` with an online log-sum-exp: a
running maximum ``m``, ``s = sum exp(z - m)`` and the centred ``t = sum exp(z - m) (z - m)``,
both re-scaled (and ``t`` re-centred) whenever the maximum grows; then ``lse = m + log s`` and
``H = log s - t / s``, which avoids the cancellation of ``lse - E_p[z]`` on peaked rows. It never holds more
than one block of the row, so a 152k vocabulary costs the same registers as a 1k one. No gradient:
the statistic is used detached (IDFT stops the gradient through phi). Triton is imported lazily.
"""

from __future__ import annotations

import functools

import torch

__all__ = ["centered_loglik_reference", "centered_loglik_triton", "centered_loglik"]


def _check(logits, targets):
    if logits.ndim != 2 or targets.ndim != 1 or logits.shape[0] != targets.shape[0]:
        raise ValueError(f"need logits (N, V) and targets (N,), got {tuple(logits.shape)} and {tuple(targets.shape)}")
    if not logits.is_floating_point():
        raise ValueError(f"logits must be floating point, got {logits.dtype}")
    if targets.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"targets must be int32 or int64, got {targets.dtype}")
    N, V = logits.shape
    if V < 1:
        raise ValueError("need a vocabulary of at least one token")
    if targets.numel() and (int(targets.min()) < 0 or int(targets.max()) >= V):
        raise ValueError(f"targets must lie in [0, {V})")
    return N, V


def centered_loglik_reference(logits: torch.Tensor, targets: torch.Tensor):
    """``(logp_y, entropy)`` per row, in the logits' precision (at least float32); ``phi = logp + entropy``."""
    _check(logits, targets)
    z = logits.to(torch.promote_types(logits.dtype, torch.float32))
    logp_all = torch.log_softmax(z, -1)
    ent = -(logp_all.exp() * logp_all).sum(-1)
    return logp_all.gather(-1, targets.long()[:, None])[:, 0], ent


@functools.cache  # compile once, on first use (Triton is imported only here)
def _build_kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def _cll_kernel(z_ptr, y_ptr, logp_ptr, ent_ptr, V, stride_z, BLOCK_V: tl.constexpr):
        row = tl.program_id(0)
        base = z_ptr + row * stride_z
        offs = tl.arange(0, BLOCK_V)
        m = tl.full((), -float("inf"), tl.float32)
        s = tl.zeros((), tl.float32)
        t = tl.zeros((), tl.float32)                           # sum exp(z - m) (z - m): centred, no cancellation
        for start in range(0, V, BLOCK_V):
            idx = start + offs
            valid = idx < V
            z = tl.load(base + idx, mask=valid, other=-float("inf")).to(tl.float32)
            m_new = tl.maximum(m, tl.max(z, axis=0))
            scale = tl.exp(m - m_new)                           # 0 on the first block (m = -inf)
            shift = tl.where(s > 0, m - m_new, 0.0)             # re-centre the old terms on m_new
            e = tl.where(valid, tl.exp(z - m_new), 0.0)
            t = scale * (t + shift * s) + tl.sum(tl.where(valid, e * (z - m_new), 0.0), axis=0)
            s = s * scale + tl.sum(e, axis=0)
            m = m_new
        y = tl.load(y_ptr + row).to(tl.int64)
        zy = tl.load(base + y).to(tl.float32)
        tl.store(logp_ptr + row, zy - m - tl.log(s))
        tl.store(ent_ptr + row, tl.log(s) - t / s)

    return triton, _cll_kernel


def centered_loglik_triton(logits: torch.Tensor, targets: torch.Tensor, *, block_v: int = 1024):
    """Triton version of :func:`centered_loglik_reference` (float32 accumulation, any V).

    Runs on CUDA tensors, or on CPU tensors under ``TRITON_INTERPRET=1`` (set before Triton is
    imported). Rows may be strided (the last dimension must be contiguous).
    """
    N, V = _check(logits, targets)
    if block_v < 16 or block_v & (block_v - 1):
        raise ValueError(f"block_v must be a power of two >= 16, got {block_v}")
    triton, kernel = _build_kernel()
    z = logits if logits.stride(-1) == 1 else logits.contiguous()
    y = targets.contiguous()
    logp = torch.empty(N, dtype=torch.float32, device=logits.device)
    ent = torch.empty(N, dtype=torch.float32, device=logits.device)
    if N:
        kernel[(N,)](z, y, logp, ent, V, z.stride(0), BLOCK_V=min(block_v, triton.next_power_of_2(V)))
    return logp, ent


def centered_loglik(logits: torch.Tensor, targets: torch.Tensor, *, backend: str = "auto"):
    """Dispatch: the Triton kernel on CUDA (``backend='auto'``), the reference elsewhere."""
    from . import use_triton

    if use_triton(backend, logits, name="centered_loglik"):
        return centered_loglik_triton(logits, targets)
    return centered_loglik_reference(logits, targets)
