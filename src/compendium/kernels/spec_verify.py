"""Batched speculative verification (the OnlineSPEC chapter): accept prefix and residual draw.

For ``B`` sequences with ``gamma`` drafts each, target rows ``p`` (B, gamma+1, V), draft rows
``q`` (B, gamma, V), drafts ``d`` (B, gamma), acceptance uniforms ``u`` (B, gamma) and one row of
standard exponentials ``e`` (B, V) per sequence::

    accept_j  <=>  u_j < p_j(d_j) / q_j(d_j)                 (left to right, up to the first rejection m)
    r         =  max(p_m - q_m, 0)  (q_gamma = 0: the bonus row; r = p_m if r is all zero)
    next      =  argmin_v e_v / r_v   over r_v > 0            (the exponential race: a draw from norm(r))

This is :func:`compendium.speculative.spec_verify`, the book's one definition of the rule.
``spec_verify_reference`` is its PyTorch transcription (any device, float32 or float64);
``spec_verify_triton`` is a one-program-per-sequence Triton kernel: the ``gamma`` acceptance
tests walk the draft row in registers, then the residual row is formed, raced and reduced in one
pass over the vocabulary. With the same uniforms and exponentials, kernel, reference and the NumPy
function agree token for token (the comparisons and divisions are correctly rounded in each;
the kernel divides with ``div_rn``). Triton is imported lazily: this module imports without it.
"""

from __future__ import annotations

import functools

import torch

__all__ = ["spec_verify_reference", "spec_verify_triton", "spec_verify"]


def _check(p, q, drafts, uniforms, exponentials):
    if p.ndim != 3 or q.ndim != 3 or p.shape[0] != q.shape[0] or p.shape[1] != q.shape[1] + 1 or p.shape[2] != q.shape[2]:
        raise ValueError(f"need p (B, gamma+1, V) and q (B, gamma, V), got {tuple(p.shape)} and {tuple(q.shape)}")
    B, gamma, V = q.shape
    if gamma < 1:
        raise ValueError("need at least one draft per sequence (gamma >= 1)")
    if tuple(drafts.shape) != (B, gamma) or tuple(uniforms.shape) != (B, gamma) or tuple(exponentials.shape) != (B, V):
        raise ValueError(f"need drafts and uniforms (B, gamma) = {(B, gamma)} and exponentials (B, V) = {(B, V)}, got "
                         f"{tuple(drafts.shape)}, {tuple(uniforms.shape)}, {tuple(exponentials.shape)}")
    if drafts.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"drafts must be int32 or int64, got {drafts.dtype}")
    if drafts.numel() and (int(drafts.min()) < 0 or int(drafts.max()) >= V):
        raise ValueError(f"draft tokens must lie in [0, {V})")
    for name, t in (("p", p), ("q", q), ("uniforms", uniforms), ("exponentials", exponentials)):
        if not t.is_floating_point():
            raise ValueError(f"{name} must be floating point, got {t.dtype}")
    return B, gamma, V


def spec_verify_reference(p, q, drafts, uniforms, exponentials):
    """PyTorch transcription of :func:`compendium.speculative.spec_verify`: ``(n_accepted, next_token)``."""
    B, gamma, V = _check(p, q, drafts, uniforms, exponentials)
    dtype = torch.promote_types(torch.promote_types(p.dtype, q.dtype), torch.float32)
    d = drafts.long()
    pd = p[:, :gamma].gather(-1, d[..., None])[..., 0].to(dtype)
    qd = q.gather(-1, d[..., None])[..., 0].to(dtype)
    ratio = torch.where(qd > 0, pd / torch.where(qd > 0, qd, torch.ones_like(qd)), torch.ones_like(qd))
    accept = uniforms.to(dtype) < ratio                                       # (B, gamma)
    n_acc = torch.where(accept.all(1), torch.full((B,), gamma, device=p.device),
                        (~accept).to(torch.int8).argmax(1))                    # first rejection m
    rows = torch.arange(B, device=p.device)
    p_m = p[rows, n_acc].to(dtype)
    q_m = q[rows, n_acc.clamp(max=gamma - 1)].to(dtype) * (n_acc < gamma)[:, None]  # q_gamma = 0: the bonus row
    r = torch.clamp(p_m - q_m, min=0)
    r = torch.where((r > 0).any(-1, keepdim=True), r, p_m)
    race = torch.where(r > 0, exponentials.to(dtype) / torch.where(r > 0, r, torch.ones_like(r)),
                       torch.full_like(r, float("inf")))
    return n_acc.long(), race.argmin(-1).long()


@functools.cache  # compile once, on first use (Triton is imported only here)
def _build_kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def _verify_kernel(p_ptr, q_ptr, d_ptr, u_ptr, e_ptr, n_ptr, t_ptr, gamma, V,
                       stride_pb, stride_pj, stride_qb, stride_qj, stride_db, stride_ub, stride_eb,
                       BLOCK_V: tl.constexpr):
        b = tl.program_id(0)
        # acceptance tests, left to right: m = first rejection (gamma if none)
        m = gamma
        for j in range(0, gamma):
            tok = tl.load(d_ptr + b * stride_db + j).to(tl.int64)
            pd = tl.load(p_ptr + b * stride_pb + j * stride_pj + tok).to(tl.float32)
            qd = tl.load(q_ptr + b * stride_qb + j * stride_qj + tok).to(tl.float32)
            u = tl.load(u_ptr + b * stride_ub + j).to(tl.float32)
            ratio = tl.where(qd > 0, tl.math.div_rn(pd, tl.where(qd > 0, qd, 1.0)), 1.0)
            m = tl.where((m == gamma) & (u >= ratio), j, m)
        # residual row r = max(p_m - q_m, 0), q_gamma = 0; the exponential race picks the token
        offs = tl.arange(0, BLOCK_V)
        valid = offs < V
        p_m = tl.load(p_ptr + b * stride_pb + m * stride_pj + offs, mask=valid, other=0.0).to(tl.float32)
        has_q = valid & ((offs * 0 + m) < gamma)                          # row gamma (the bonus) has no q
        q_m = tl.load(q_ptr + b * stride_qb + m * stride_qj + offs, mask=has_q, other=0.0).to(tl.float32)
        r = tl.maximum(p_m - q_m, 0.0)
        any_r = tl.max(tl.where(r > 0, 1, 0), axis=0)
        r = tl.where(any_r > 0, r, p_m)
        e = tl.load(e_ptr + b * stride_eb + offs, mask=valid, other=1.0).to(tl.float32)
        race = tl.where(valid & (r > 0), tl.math.div_rn(e, tl.where(r > 0, r, 1.0)), float("inf"))
        tl.store(n_ptr + b, m)
        tl.store(t_ptr + b, tl.argmin(race, axis=0))

    return triton, _verify_kernel


def spec_verify_triton(p, q, drafts, uniforms, exponentials):
    """Triton version of :func:`spec_verify_reference` (float32 arithmetic, ``V <= 16384``).

    Runs on CUDA tensors, or on CPU tensors under ``TRITON_INTERPRET=1`` (set before Triton is
    imported).
    """
    B, gamma, V = _check(p, q, drafts, uniforms, exponentials)
    if V > 16384:
        raise ValueError(f"the kernel keeps one vocabulary row in registers: V <= 16384, got {V}")
    triton, kernel = _build_kernel()
    p32, q32 = p.float().contiguous(), q.float().contiguous()
    d, u, e = drafts.contiguous(), uniforms.float().contiguous(), exponentials.float().contiguous()
    n_acc = torch.empty(B, dtype=torch.int32, device=p.device)
    nxt = torch.empty(B, dtype=torch.int32, device=p.device)
    if B:
        kernel[(B,)](p32, q32, d, u, e, n_acc, nxt, gamma, V, p32.stride(0), p32.stride(1), q32.stride(0),
                     q32.stride(1), d.stride(0), u.stride(0), e.stride(0), BLOCK_V=triton.next_power_of_2(V))
    return n_acc.long(), nxt.long()


def spec_verify(p, q, drafts, uniforms, exponentials, *, backend: str = "auto"):
    """Dispatch: the Triton kernel on CUDA (``backend='auto'``), the reference elsewhere."""
    from . import use_triton

    if use_triton(backend, p, name="spec_verify"):
        return spec_verify_triton(p, q, drafts, uniforms, exponentials)
    return spec_verify_reference(p, q, drafts, uniforms, exponentials)
