"""Sparse gather decode attention: one query token attends to a selected subset of the KV cache.

For a decode step, query head ``h`` (in key/value group ``g = h // (H / H_kv)``) attends only to
the cached positions listed in ``indices[b, g]``:

.. math::  o_h = \\sum_{j \\in I_g} \\mathrm{softmax}_j(q_h \\cdot k_j / \\sqrt{d})\\, v_j .

``sparse_decode_reference`` is the PyTorch reference (gather, then a plain softmax);
``sparse_decode_triton`` is a Triton kernel in the flash-decoding style: the index list is cut
into ``num_splits`` chunks, each program (batch, query head, split) streams its chunk with an
online softmax and writes a partial (max, sum, accumulator); the partials are merged exactly in
PyTorch (log-sum-exp rescaling). Index entries equal to ``-1`` are padding and are ignored, so
index sets of different sizes fit one tensor. Triton is imported lazily.

Contract (both paths, tested under the interpreter):

* **Distinct indices.** An index set lists each position at most once per (batch, key/value
  head). A duplicate is a caller error that is not checked (a sort per step would cost more than
  the attention): the gather paths then count that key twice, while the masked definition
  (:func:`dense_masked_reference`) counts it once.
* **Empty sets.** A row whose indices are all padding has no key to attend to; both paths return
  NaN there (0/0), and callers always include at least the newest position.
* **Precision.** The kernel accumulates in float32 whatever the input dtype; with bfloat16 inputs
  it stays within about 1e-2 of the float32 reference (the bf16 rounding of the output), while the
  bf16 reference itself rounds every intermediate.

Design: one program per (batch, query head, split). Under GQA the ``GROUP`` query heads of a
key/value head each stream the same keys, so K/V is read ``GROUP`` times; at decode sizes (a few
hundred selected keys of 64-128 floats) those re-reads hit L2, and a program per group would need
a (BLOCK_N, GROUP) tile and ``tl.dot`` with GROUP padded to 16. We keep the simpler layout until a
GPU benchmark (``benchmarks/gpu_check.sh``) shows the re-reads matter.
"""

from __future__ import annotations

import functools
import math

import torch

__all__ = ["sparse_decode_reference", "dense_masked_reference", "sparse_decode_triton", "sparse_decode"]


def _check(q, keys, values, indices):
    if q.ndim != 3 or keys.ndim != 4 or values.shape != keys.shape or indices.ndim != 3:
        raise ValueError(
            "expected q (B, H, d), keys/values (B, H_kv, T, d), indices (B, H_kv, N); got "
            f"{tuple(q.shape)}, {tuple(keys.shape)}, {tuple(values.shape)}, {tuple(indices.shape)}"
        )
    batch, heads, dim = q.shape
    if keys.shape[0] != batch or keys.shape[3] != dim or indices.shape[:2] != keys.shape[:2]:
        raise ValueError("batch, head-group or feature sizes of q, keys and indices disagree")
    if heads % keys.shape[1]:
        raise ValueError(f"query heads ({heads}) must be a multiple of key/value heads ({keys.shape[1]})")
    if indices.numel() and (indices.max() >= keys.shape[2] or indices.min() < -1):
        raise ValueError("indices must lie in [0, T) (or be -1 for padding)")


def sparse_decode_reference(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                            indices: torch.Tensor) -> torch.Tensor:
    """Attention of ``q`` over the gathered keys/values (PyTorch reference).

    Parameters
    ----------
    q : Tensor (B, H, d)
    keys, values : Tensor (B, H_kv, T, d)
    indices : LongTensor (B, H_kv, N), positions into T; ``-1`` marks padding.

    Returns
    -------
    Tensor (B, H, d)
    """
    _check(q, keys, values, indices)
    batch, heads, dim = q.shape
    group = heads // keys.shape[1]
    kv_heads = keys.shape[1]
    valid = indices >= 0                                             # (B, Hkv, N)
    gather = indices.clamp_min(0).unsqueeze(-1).expand(-1, -1, -1, dim)
    k_sel = torch.gather(keys, 2, gather)                            # (B, Hkv, N, d)
    v_sel = torch.gather(values, 2, gather)
    qg = q.view(batch, kv_heads, group, dim)                         # query heads grouped by KV head
    scores = torch.einsum("bgqd,bgnd->bgqn", qg, k_sel) / math.sqrt(dim)
    scores = scores.masked_fill(~valid[:, :, None, :], float("-inf"))
    out = torch.einsum("bgqn,bgnd->bgqd", torch.softmax(scores, dim=-1), v_sel)
    return out.reshape(batch, heads, dim)


def dense_masked_reference(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                           indices: torch.Tensor) -> torch.Tensor:
    """Dense attention over all T keys with ``-inf`` added outside the index set (the definition)."""
    _check(q, keys, values, indices)
    batch, heads, dim = q.shape
    group = heads // keys.shape[1]
    seq = keys.shape[2]
    mask = torch.zeros(*keys.shape[:2], seq + 1, dtype=torch.bool, device=keys.device)
    mask.scatter_(2, torch.where(indices >= 0, indices, seq), True)   # padding lands in column T
    mask = mask[..., :seq]
    qg = q.view(batch, keys.shape[1], group, dim)
    scores = torch.einsum("bgqd,bgtd->bgqt", qg, keys) / math.sqrt(dim)
    scores = scores.masked_fill(~mask[:, :, None, :], float("-inf"))
    out = torch.einsum("bgqt,bgtd->bgqd", torch.softmax(scores, dim=-1), values)
    return out.reshape(batch, heads, dim)


@functools.cache  # compile once, on first use (Triton is imported only here)
def _build_kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def _split_kernel(q_ptr, k_ptr, v_ptr, idx_ptr, m_ptr, l_ptr, acc_ptr,
                      T, N, HEADS, GROUP, NUM_SPLITS, CHUNK, scale,
                      stride_qb, stride_qh, stride_kb, stride_kh, stride_kt,
                      stride_vb, stride_vh, stride_vt, stride_ib, stride_ih,
                      D: tl.constexpr, BLOCK_N: tl.constexpr):
        pid = tl.program_id(0)
        split = pid % NUM_SPLITS
        bh = pid // NUM_SPLITS
        h = bh % HEADS
        b = bh // HEADS
        g = h // GROUP
        offs_d = tl.arange(0, D)
        q = tl.load(q_ptr + b * stride_qb + h * stride_qh + offs_d).to(tl.float32)
        m_i = -float("inf")
        l_i = 0.0
        acc = tl.zeros([D], dtype=tl.float32)
        start = split * CHUNK
        for n0 in range(start, start + CHUNK, BLOCK_N):
            offs_n = n0 + tl.arange(0, BLOCK_N)
            in_range = (offs_n < N) & (offs_n < start + CHUNK)
            idx = tl.load(idx_ptr + b * stride_ib + g * stride_ih + offs_n, mask=in_range, other=-1)
            valid = idx >= 0
            safe = tl.where(valid, idx, 0)
            k = tl.load(k_ptr + b * stride_kb + g * stride_kh + safe[:, None] * stride_kt + offs_d[None, :],
                        mask=valid[:, None], other=0.0).to(tl.float32)          # (BLOCK_N, D)
            s = tl.sum(k * q[None, :], axis=1) * scale
            s = tl.where(valid, s, -float("inf"))
            m_new = tl.maximum(m_i, tl.max(s, axis=0))
            # guard the all-masked case: exp(-inf - -inf) would be NaN
            m_safe = tl.where(m_new == -float("inf"), 0.0, m_new)
            alpha = tl.exp(m_i - m_safe)
            p = tl.exp(s - m_safe)
            v = tl.load(v_ptr + b * stride_vb + g * stride_vh + safe[:, None] * stride_vt + offs_d[None, :],
                        mask=valid[:, None], other=0.0).to(tl.float32)
            l_i = l_i * alpha + tl.sum(p, axis=0)
            acc = acc * alpha + tl.sum(p[:, None] * v, axis=0)
            m_i = m_new
        out = pid
        tl.store(m_ptr + out, m_i)
        tl.store(l_ptr + out, l_i)
        tl.store(acc_ptr + out * D + offs_d, acc)

    return triton, _split_kernel


def sparse_decode_triton(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, indices: torch.Tensor,
                         *, num_splits: int = 4, block_n: int = 16) -> torch.Tensor:
    """Triton split-K version of :func:`sparse_decode_reference` (same arguments and result).

    Runs on CUDA tensors, or on CPU tensors under ``TRITON_INTERPRET=1``. The feature size ``d``
    must be a power of two (16 or more).
    """
    _check(q, keys, values, indices)
    batch, heads, dim = q.shape
    if dim < 16 or dim & (dim - 1):
        raise ValueError(f"the Triton kernel needs a power-of-two head size >= 16, got {dim}")
    if num_splits < 1 or block_n < 1 or block_n & (block_n - 1):
        raise ValueError("num_splits must be >= 1 and block_n a power of two")
    _, kernel = _build_kernel()
    group = heads // keys.shape[1]
    n_idx = indices.shape[2]
    chunk = max(1, math.ceil(n_idx / num_splits))
    idx = indices.to(torch.int32).contiguous()
    q32 = q.contiguous()
    k_c, v_c = keys.contiguous(), values.contiguous()
    programs = batch * heads * num_splits
    m = torch.empty(programs, dtype=torch.float32, device=q.device)
    s = torch.empty(programs, dtype=torch.float32, device=q.device)
    acc = torch.empty(programs, dim, dtype=torch.float32, device=q.device)
    kernel[(programs,)](q32, k_c, v_c, idx, m, s, acc,
                        keys.shape[2], n_idx, heads, group, num_splits, chunk, 1.0 / math.sqrt(dim),
                        q32.stride(0), q32.stride(1), k_c.stride(0), k_c.stride(1), k_c.stride(2),
                        v_c.stride(0), v_c.stride(1), v_c.stride(2), idx.stride(0), idx.stride(1),
                        D=dim, BLOCK_N=block_n)
    # merge the splits: o = sum_s e^{m_s - M} acc_s / sum_s e^{m_s - M} l_s
    m = m.view(batch, heads, num_splits)
    s = s.view(batch, heads, num_splits)
    acc = acc.view(batch, heads, num_splits, dim)
    top = m.max(dim=-1, keepdim=True).values
    weight = torch.exp(m - top).nan_to_num(0.0)                       # empty splits weigh 0
    out = (weight.unsqueeze(-1) * acc).sum(2) / (weight * s).sum(-1, keepdim=True)
    return out.to(q.dtype)


def sparse_decode(q, keys, values, indices, *, backend: str = "auto") -> torch.Tensor:
    """Dispatch: the Triton kernel on CUDA (``backend='auto'``), the reference elsewhere.

    On CUDA, ``auto`` falls back to the reference with a warning when Triton is missing or the head
    size is not a power of two >= 16 (see :func:`compendium.kernels.use_triton`)."""
    from . import use_triton

    dim = q.shape[-1]
    why = None if dim >= 16 and not dim & (dim - 1) else f"head size {dim} is not a power of two >= 16"
    if use_triton(backend, q, why_not=why, name="sparse_decode"):
        return sparse_decode_triton(q, keys, values, indices)
    return sparse_decode_reference(q, keys, values, indices)
