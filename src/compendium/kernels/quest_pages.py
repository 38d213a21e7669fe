"""Quest page scoring fused with a block-local top-k.

Quest keeps, for every page of ``P`` consecutive cached keys, the elementwise minimum ``m`` and
maximum ``M`` of its keys. For a query ``q`` the page score

.. math::  U(q, \\text{page}) = \\sum_i \\max(q_i m_i,\\; q_i M_i)

is an upper bound on ``q . k`` for every key ``k`` of the page (each coordinate product
``q_i k_i`` is linear in ``k_i`` in ``[m_i, M_i]``, so it is largest at an endpoint). With grouped
query attention the scores of the query heads that share a key/value head are summed.

``quest_topk_reference`` computes the scores of all pages and calls ``torch.topk``;
``quest_topk_triton`` scores a block of pages per program and keeps that block's top-k (``k``
rounds of arg-max), and the block winners are merged with one ``torch.topk``. Pages marked
invalid (``page_valid`` False) never win. Triton is imported lazily.
"""

from __future__ import annotations

import functools
import math

import torch

__all__ = ["page_metadata", "quest_scores_reference", "quest_topk", "quest_topk_reference", "quest_topk_triton"]


def page_metadata(keys: torch.Tensor, page_size: int, length: torch.Tensor | int | None = None):
    """Per-page elementwise min and max of the keys.

    Parameters
    ----------
    keys : Tensor (B, H_kv, T, d)
    page_size : int
    length : optional int or LongTensor (B,), number of valid positions (default T); keys at or
        past it are ignored; a page with no valid key is invalid.

    Returns
    -------
    kmin, kmax : Tensor (B, H_kv, P, d) with P = ceil(T / page_size)
    page_valid : BoolTensor (B, P)
    """
    if page_size < 1:
        raise ValueError(f"page_size must be >= 1, got {page_size}")
    batch, kv_heads, seq, dim = keys.shape
    pages = math.ceil(seq / page_size)
    pad = pages * page_size - seq
    if length is None:
        length = seq
    length = torch.as_tensor(length, device=keys.device).expand(batch)
    pos = torch.arange(pages * page_size, device=keys.device)
    valid = pos[None, :] < length[:, None]                            # (B, P*page)
    k = torch.nn.functional.pad(keys, (0, 0, 0, pad))
    v4 = valid[:, None, :, None]
    kmin = k.masked_fill(~v4, float("inf")).view(batch, kv_heads, pages, page_size, dim).amin(3)
    kmax = k.masked_fill(~v4, float("-inf")).view(batch, kv_heads, pages, page_size, dim).amax(3)
    page_valid = valid.view(batch, pages, page_size).any(-1)
    kmin = kmin.masked_fill(~page_valid[:, None, :, None], 0.0)
    kmax = kmax.masked_fill(~page_valid[:, None, :, None], 0.0)
    return kmin, kmax, page_valid


def quest_scores_reference(q: torch.Tensor, kmin: torch.Tensor, kmax: torch.Tensor) -> torch.Tensor:
    """Upper-bound page scores summed over each key/value group: q (B, H, d) -> (B, H_kv, P)."""
    batch, heads, dim = q.shape
    kv_heads = kmin.shape[1]
    if heads % kv_heads:
        raise ValueError(f"query heads ({heads}) must be a multiple of key/value heads ({kv_heads})")
    qg = q.view(batch, kv_heads, heads // kv_heads, 1, dim)
    u = torch.maximum(qg * kmin.unsqueeze(2), qg * kmax.unsqueeze(2)).sum(-1)   # (B, Hkv, G, P)
    return u.sum(2)


def _mark_invalid(values: torch.Tensor, indices: torch.Tensor):
    """Slots past the valid pages (score -inf) get index -1, so no invalid page is ever selected
    and no page appears twice (with ``k`` above the number of valid pages, top-k would otherwise
    return arbitrary invalid pages, and the block merge could return one twice)."""
    return values, torch.where(torch.isfinite(values), indices, torch.full_like(indices, -1))


def quest_topk_reference(q, kmin, kmax, page_valid, k: int):
    """Top-``k`` pages by the Quest bound: (values, indices), each (B, H_kv, k).

    When fewer than ``k`` pages are valid, the extra slots hold value ``-inf`` and index ``-1``."""
    scores = quest_scores_reference(q, kmin, kmax)
    if not 1 <= k <= scores.shape[-1]:
        raise ValueError(f"k must be in [1, {scores.shape[-1]}], got {k}")
    scores = scores.masked_fill(~page_valid[:, None, :], float("-inf"))
    return _mark_invalid(*torch.topk(scores, k, dim=-1))


@functools.cache  # compile once, on first use (Triton is imported only here)
def _build_kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def _block_topk_kernel(q_ptr, min_ptr, max_ptr, valid_ptr, out_v_ptr, out_i_ptr,
                           P, KV_HEADS, GROUP, NUM_BLOCKS,
                           stride_qb, stride_qh, stride_mb, stride_mh, stride_mp, stride_vb,
                           K: tl.constexpr, D: tl.constexpr, BLOCK_P: tl.constexpr):
        pid = tl.program_id(0)
        blk = pid % NUM_BLOCKS
        bg = pid // NUM_BLOCKS
        g = bg % KV_HEADS
        b = bg // KV_HEADS
        offs_p = blk * BLOCK_P + tl.arange(0, BLOCK_P)
        offs_d = tl.arange(0, D)
        in_range = offs_p < P
        base = b * stride_mb + g * stride_mh + offs_p[:, None] * stride_mp + offs_d[None, :]
        kmin = tl.load(min_ptr + base, mask=in_range[:, None], other=0.0).to(tl.float32)   # (BLOCK_P, D)
        kmax = tl.load(max_ptr + base, mask=in_range[:, None], other=0.0).to(tl.float32)
        score = tl.zeros([BLOCK_P], dtype=tl.float32)
        for j in range(GROUP):
            q = tl.load(q_ptr + b * stride_qb + (g * GROUP + j) * stride_qh + offs_d).to(tl.float32)
            score += tl.sum(tl.maximum(q[None, :] * kmin, q[None, :] * kmax), axis=1)
        ok = tl.load(valid_ptr + b * stride_vb + offs_p, mask=in_range, other=0) != 0
        score = tl.where(ok & in_range, score, -float("inf"))
        out = pid * K
        for r in tl.static_range(K):
            best = tl.max(score, axis=0)
            arg = tl.argmax(score, axis=0)
            tl.store(out_v_ptr + out + r, best)
            tl.store(out_i_ptr + out + r, blk * BLOCK_P + arg)
            score = tl.where(tl.arange(0, BLOCK_P) == arg, -float("inf"), score)

    return triton, _block_topk_kernel


def quest_topk_triton(q, kmin, kmax, page_valid, k: int, *, block_pages: int = 32):
    """Triton version of :func:`quest_topk_reference` (scores fused with a block-local top-k).

    Returns (values, indices), each (B, H_kv, k), sorted by decreasing score; slots past the valid
    pages hold ``-inf`` and ``-1`` as in the reference. ``d`` must be a power of two; runs on CUDA,
    or on CPU under ``TRITON_INTERPRET=1``.

    Design: each program scores ``block_pages`` pages and keeps its top ``min(k, block_pages)``
    with that many masked arg-max rounds (unrolled). Keep ``block_pages * d`` small: a 256 x 64
    float32 tile is 64 KB per operand and ``k = 128`` rounds spill registers, which is why the
    benchmark's defaults are block_pages = 32 and k <= 32 per block (the block winners are merged
    by one ``torch.topk``).
    """
    batch, heads, dim = q.shape
    kv_heads, pages = kmin.shape[1], kmin.shape[2]
    if heads % kv_heads:
        raise ValueError(f"query heads ({heads}) must be a multiple of key/value heads ({kv_heads})")
    if not 1 <= k <= pages:
        raise ValueError(f"k must be in [1, {pages}], got {k}")
    if dim & (dim - 1) or block_pages & (block_pages - 1):
        raise ValueError("the head size and block_pages must be powers of two")
    _, kernel = _build_kernel()
    num_blocks = math.ceil(pages / block_pages)
    k_local = min(k, block_pages)
    q_c, mn, mx = q.contiguous(), kmin.contiguous(), kmax.contiguous()
    valid = page_valid.to(torch.int8).contiguous()
    programs = batch * kv_heads * num_blocks
    vals = torch.empty(programs * k_local, dtype=torch.float32, device=q.device)
    idx = torch.empty(programs * k_local, dtype=torch.int32, device=q.device)
    kernel[(programs,)](q_c, mn, mx, valid, vals, idx, pages, kv_heads, heads // kv_heads, num_blocks,
                        q_c.stride(0), q_c.stride(1), mn.stride(0), mn.stride(1), mn.stride(2), valid.stride(0),
                        K=k_local, D=dim, BLOCK_P=block_pages)
    vals = vals.view(batch, kv_heads, num_blocks * k_local)
    idx = idx.view(batch, kv_heads, num_blocks * k_local).long()
    best_v, where = torch.topk(vals, k, dim=-1)                        # merge the block winners
    return _mark_invalid(best_v, torch.gather(idx, -1, where))


def quest_topk(q, kmin, kmax, page_valid, k: int, *, backend: str = "auto"):
    """Dispatch: the Triton kernel on CUDA (``backend='auto'``), the reference elsewhere; on CUDA,
    ``auto`` falls back to the reference with a warning when Triton is missing or ``d`` is not a
    power of two."""
    from . import use_triton

    dim = q.shape[-1]
    why = None if not dim & (dim - 1) else f"head size {dim} is not a power of two"
    if use_triton(backend, q, why_not=why, name="quest_topk"):
        return quest_topk_triton(q, kmin, kmax, page_valid, k)
    return quest_topk_reference(q, kmin, kmax, page_valid, k)
