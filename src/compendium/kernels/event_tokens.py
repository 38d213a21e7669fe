"""event2vec token assembly: table gather + last temporal conv + LayerNorm + add + mask, fused.

For a batch of event sequences with lookup rows ``index`` (B, N) (0 = pad), the spatial table
``E`` (V, d) (the lookup table itself, or the spatial MLP evaluated at every (p, y, x)), the input
of the last temporal conv layer ``h`` (B, N, C) with ``d = m C`` (grouped conv, ``groups = C``:
output channel ``o`` reads input channel ``o // m``), its weights ``w`` (d, 1, 3) and bias ``b``
(d,), and the LayerNorm's ``gamma, beta`` (d,)::

    u[n, o]     = b[o] + sum_{k=0..2} w[o, 0, k] * h[n + k - 1, o // m]       (zero outside 0..N-1
                                                                               and at padding)
    v_t[n]      = gamma * (u[n] - mean(u[n])) / sqrt(var(u[n]) + eps) + beta
    token[n]    = (E[index[n]] + v_t[n]) * mask[n]

which is ``(v_s + v_t) * mask`` of the event2vec model, one pass per event, without materialising
the gathered rows or the conv output. ``event_tokens_reference`` is the PyTorch reference and
defines the result; ``event_tokens_triton`` is a one-program-per-event Triton kernel (the d
channels of one event in registers). Triton is imported lazily: this module imports without it.
Not compiled on CUDA in this project yet (no GPU here): checked under Triton's interpreter only.
"""

from __future__ import annotations

import functools

import torch
from torch.nn import functional as F

__all__ = ["event_tokens_reference", "event_tokens_triton", "event_tokens"]


def _check(table, index, hidden, weight, bias, ln_weight, ln_bias, mask):
    if table.ndim != 2:
        raise ValueError(f"table must have shape (V, d), got {tuple(table.shape)}")
    V, d = table.shape
    if index.ndim != 2 or index.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"index must be an integer tensor (B, N), got {tuple(index.shape)} {index.dtype}")
    if mask.shape != index.shape or mask.dtype != torch.bool:
        raise ValueError(f"mask must be boolean with the index's shape {tuple(index.shape)}")
    if hidden.ndim != 3 or hidden.shape[:2] != index.shape:
        raise ValueError(f"hidden must have shape (B, N, C) with B, N = {tuple(index.shape)}, got {tuple(hidden.shape)}")
    C = hidden.shape[2]
    if C == 0 or d % C:
        raise ValueError(f"d = {d} must be a multiple of the hidden width C = {C}")
    if weight.shape != (d, 1, 3):
        raise ValueError(f"weight must have shape ({d}, 1, 3), got {tuple(weight.shape)}")
    for name, v in (("bias", bias), ("ln_weight", ln_weight), ("ln_bias", ln_bias)):
        if v.shape != (d,):
            raise ValueError(f"{name} must have shape ({d},), got {tuple(v.shape)}")
    if index.numel() and (int(index.min()) < 0 or int(index.max()) >= V):
        raise ValueError(f"index values must lie in [0, {V}), got [{int(index.min())}, {int(index.max())}]")


def event_tokens_reference(table, index, hidden, weight, bias, ln_weight, ln_bias, mask, eps: float = 1e-5):
    """``(table[index] + LN(conv3(hidden * mask))) * mask``: (B, N, d) in the table's dtype."""
    _check(table, index, hidden, weight, bias, ln_weight, ln_bias, mask)
    d, C = table.shape[1], hidden.shape[2]
    m = mask[..., None].to(hidden.dtype)
    u = F.conv1d((hidden * m).transpose(1, 2), weight.to(hidden.dtype), bias.to(hidden.dtype), padding=1, groups=C)
    v_t = F.layer_norm(u.transpose(1, 2), (d,), ln_weight.to(hidden.dtype), ln_bias.to(hidden.dtype), eps)
    return ((table[index].to(hidden.dtype) + v_t) * m).to(table.dtype)


@functools.cache  # compile once, on first use (Triton is imported only here)
def _build_kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def _tokens_kernel(e_ptr, idx_ptr, h_ptr, w_ptr, b_ptr, g_ptr, be_ptr, m_ptr, o_ptr, N, d, C, groups_out, eps,
                       stride_e, stride_hb, stride_hn, stride_ob, stride_on, BLOCK_D: tl.constexpr):
        b = tl.program_id(0)
        n = tl.program_id(1)
        offs = tl.arange(0, BLOCK_D)
        ok = offs < d
        zero = offs * 0                                            # scalars broadcast over the channels
        valid = tl.load(m_ptr + b * N + n + zero) != 0
        cin = offs // groups_out                                   # the input channel of output o
        acc = tl.load(b_ptr + offs, mask=ok, other=0.0).to(tl.float32)
        for k in tl.static_range(3):
            pos = n + k - 1 + zero
            inside = (pos >= 0) & (pos < N)
            pos_c = tl.where(inside, pos, 0)
            keep = (tl.load(m_ptr + b * N + pos_c) != 0) & inside & ok
            h = tl.load(h_ptr + b * stride_hb + pos_c * stride_hn + cin, mask=keep, other=0.0).to(tl.float32)
            w = tl.load(w_ptr + offs * 3 + k, mask=ok, other=0.0).to(tl.float32)
            acc += w * h
        mean = tl.sum(tl.where(ok, acc, 0.0), axis=0) / d
        diff = tl.where(ok, acc - mean, 0.0)
        var = tl.sum(diff * diff, axis=0) / d
        gamma = tl.load(g_ptr + offs, mask=ok, other=0.0).to(tl.float32)
        beta = tl.load(be_ptr + offs, mask=ok, other=0.0).to(tl.float32)
        v_t = diff / tl.sqrt(var + eps) * gamma + beta
        row = tl.load(idx_ptr + b * N + n + zero)
        v_s = tl.load(e_ptr + row * stride_e + offs, mask=ok, other=0.0).to(tl.float32)
        out = tl.where(valid, v_s + v_t, 0.0)
        tl.store(o_ptr + b * stride_ob + n * stride_on + offs, out, mask=ok)

    return triton, _tokens_kernel


def event_tokens_triton(table, index, hidden, weight, bias, ln_weight, ln_bias, mask, eps: float = 1e-5):
    """Triton version of :func:`event_tokens_reference` (float32 accumulation).

    Runs on CUDA tensors, or on CPU tensors under ``TRITON_INTERPRET=1`` (set before Triton is
    imported).
    """
    _check(table, index, hidden, weight, bias, ln_weight, ln_bias, mask)
    triton, kernel = _build_kernel()
    B, N = index.shape
    V, d = table.shape
    C = hidden.shape[2]
    e = table.contiguous()
    h = hidden.contiguous()
    idx = index.contiguous().to(torch.int64)
    m = mask.contiguous().to(torch.int8)
    w = weight.contiguous().reshape(d, 3)
    out = torch.empty(B, N, d, dtype=torch.float32, device=table.device)
    if B and N and d:
        kernel[(B, N)](e, idx, h, w, bias.contiguous(), ln_weight.contiguous(), ln_bias.contiguous(), m, out,
                       N, d, C, d // C, float(eps), e.stride(0), h.stride(0), h.stride(1), out.stride(0), out.stride(1),
                       BLOCK_D=triton.next_power_of_2(d))
    return out.to(table.dtype)


def event_tokens(table, index, hidden, weight, bias, ln_weight, ln_bias, mask, *, eps: float = 1e-5,
                 backend: str = "auto"):
    """Dispatch: the Triton kernel on CUDA (``backend='auto'``), the reference elsewhere."""
    from . import use_triton

    if use_triton(backend, table, name="event_tokens"):
        return event_tokens_triton(table, index, hidden, weight, bias, ln_weight, ln_bias, mask, eps=eps)
    return event_tokens_reference(table, index, hidden, weight, bias, ln_weight, ln_bias, mask, eps=eps)
