"""Fused MoE routing: keep the certain head, sample the uncertain tail (Expert-Sample).

For one token with router logits ``z`` (E experts), ``k`` active experts, a head of ``h`` experts,
a tail candidate pool of ``m`` experts and a routing temperature ``tau``:

1. rank the experts by ``z``; the head ``H`` is the top ``h`` (kept deterministically);
2. the pool ``C`` is ranks ``h+1 .. h+m``;
3. the tail ``T`` is the top ``k-h`` of ``z_C + tau * g_C`` with ``g`` i.i.d. standard Gumbel
   (Gumbel-top-k, i.e. ``k-h`` draws without replacement from the Plackett-Luce law with
   probabilities proportional to ``exp(z / tau)``; ranking ``z + tau g`` is ranking ``z/tau + g``,
   and ``tau = 0`` is plain top-k);
4. the weights are the *original* softmax probabilities renormalised over ``S = H u T``:
   ``w_i = exp(z_i) / sum_{j in S} exp(z_j)``.

The same routine covers the other policies of the chapter: standard top-k (``tau = 0``),
reduced-k (``k = h``, ``tau = 0``) and noise on all experts (``h = 0``, ``m = E``).

``expert_sample_route_reference`` is the PyTorch reference (stable sorts, used on the CPU);
``expert_sample_route_triton`` is a one-program-per-token Triton kernel that does the ranking by
``k + m`` masked arg-max passes in registers (``k, m <= E`` are small in fine-grained MoE). The
Gumbel noise is an input, so kernel and reference see the same randomness and must agree exactly.
Ties break towards the lower expert index in both. Triton is imported lazily: this module imports
without it.
"""

from __future__ import annotations

import functools

import torch

__all__ = [
    "gumbel_noise",
    "expert_sample_route_reference",
    "expert_sample_route_triton",
    "expert_sample_route",
]


def _check(logits, gumbel, k, head, pool):
    if logits.ndim < 1 or gumbel.shape != logits.shape:
        raise ValueError(f"logits and gumbel noise must share a shape (..., E); got {tuple(logits.shape)}, "
                         f"{tuple(gumbel.shape)}")
    experts = logits.shape[-1]
    if not 1 <= k <= experts:
        raise ValueError(f"k must lie in [1, E={experts}], got {k}")
    if not 0 <= head <= k:
        raise ValueError(f"head must lie in [0, k={k}], got {head}")
    if not k - head <= pool <= experts - head:
        raise ValueError(f"pool must lie in [k-head={k - head}, E-head={experts - head}], got {pool}")


def gumbel_noise(shape, generator: torch.Generator | None = None, device="cpu") -> torch.Tensor:
    """Standard Gumbel noise ``-log(-log U)``, ``U`` uniform on (0, 1) (clamped away from 0 and 1)."""
    u = torch.rand(shape, generator=generator, device=device).clamp_(1e-10, 1.0 - 1e-7)
    return -torch.log(-torch.log(u))


def expert_sample_route_reference(logits: torch.Tensor, gumbel: torch.Tensor, k: int, head: int, pool: int,
                                  tau: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Head keep + tail sampling (PyTorch reference).

    Parameters
    ----------
    logits : Tensor (..., E), router logits.
    gumbel : Tensor (..., E), standard Gumbel noise (ignored when ``tau == 0``).
    k, head, pool : active experts, deterministic head size, tail candidate pool size.
    tau : routing temperature (>= 0).

    Returns
    -------
    idx : LongTensor (..., k), head experts by rank, then tail experts by perturbed score.
    weights : Tensor (..., k), original probabilities renormalised over the selected set.
    """
    _check(logits, gumbel, k, head, pool)
    if tau < 0:
        raise ValueError(f"tau must be >= 0, got {tau}")
    order = torch.sort(logits, dim=-1, descending=True, stable=True).indices        # (..., E) ranks
    head_idx = order[..., :head]
    cand = order[..., head:head + pool]                                             # (..., m)
    score = logits.gather(-1, cand) + tau * gumbel.gather(-1, cand)                 # z_C + tau g_C
    # stable sort on (score, expert index): ties go to the lower expert index, as in the kernel
    cand_sorted, perm_c = torch.sort(cand, dim=-1, stable=True)
    score_sorted = score.gather(-1, perm_c)
    pick = torch.sort(score_sorted, dim=-1, descending=True, stable=True).indices[..., :k - head]
    tail_idx = cand_sorted.gather(-1, pick)
    idx = torch.cat([head_idx, tail_idx], dim=-1)                                   # (..., k)
    chosen = logits.gather(-1, idx)
    weights = torch.softmax(chosen.float(), dim=-1).to(logits.dtype)                # exp(z_i)/sum_S exp(z_j)
    return idx, weights


@functools.cache  # compile once, on first use (Triton is imported only here)
def _build_kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def _route_kernel(z_ptr, g_ptr, idx_ptr, w_ptr, E, tau,
                      K: tl.constexpr, HEAD: tl.constexpr, POOL: tl.constexpr,
                      BLOCK_E: tl.constexpr, BLOCK_K: tl.constexpr):
        row = tl.program_id(0)
        offs = tl.arange(0, BLOCK_E)
        valid = offs < E
        z = tl.load(z_ptr + row * E + offs, mask=valid, other=-float("inf")).to(tl.float32)
        g = tl.load(g_ptr + row * E + offs, mask=valid, other=0.0).to(tl.float32)
        z_max = tl.max(z, axis=0)
        koffs = tl.arange(0, BLOCK_K)
        idx_vec = tl.zeros([BLOCK_K], dtype=tl.int32)
        e_vec = tl.zeros([BLOCK_K], dtype=tl.float32)
        remaining = z
        # 1) the head: HEAD arg-max passes over the logits
        for j in tl.static_range(HEAD):
            i = tl.argmax(remaining, axis=0)
            zi = tl.max(remaining, axis=0)
            idx_vec = tl.where(koffs == j, i, idx_vec)
            e_vec = tl.where(koffs == j, tl.exp(zi - z_max), e_vec)
            remaining = tl.where(offs == i, -float("inf"), remaining)
        # 2) the candidate pool: the next POOL ranks
        in_pool = offs < 0
        for j in tl.static_range(POOL):
            i = tl.argmax(remaining, axis=0)
            in_pool = in_pool | (offs == i)
            remaining = tl.where(offs == i, -float("inf"), remaining)
        # 3) the tail: Gumbel-top-(K-HEAD) of z + tau * g inside the pool
        score = tl.where(in_pool, z + tau * g, -float("inf"))
        for j in tl.static_range(K - HEAD):
            i = tl.argmax(score, axis=0)
            zi = tl.sum(tl.where(offs == i, z, 0.0), axis=0)
            idx_vec = tl.where(koffs == HEAD + j, i, idx_vec)
            e_vec = tl.where(koffs == HEAD + j, tl.exp(zi - z_max), e_vec)
            score = tl.where(offs == i, -float("inf"), score)
        # 4) original probabilities renormalised over the selected set
        w_vec = e_vec / tl.sum(e_vec, axis=0)
        kmask = koffs < K
        tl.store(idx_ptr + row * K + koffs, idx_vec, mask=kmask)
        tl.store(w_ptr + row * K + koffs, w_vec, mask=kmask)

    return triton, _route_kernel


def expert_sample_route_triton(logits: torch.Tensor, gumbel: torch.Tensor, k: int, head: int, pool: int,
                               tau: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Triton version of :func:`expert_sample_route_reference` (same arguments and results).

    Runs on CUDA tensors, or on CPU tensors under ``TRITON_INTERPRET=1`` (set before Triton is
    imported). Weights come back in float32 (cast to the logits' dtype).
    """
    _check(logits, gumbel, k, head, pool)
    if tau < 0:
        raise ValueError(f"tau must be >= 0, got {tau}")
    triton, kernel = _build_kernel()
    experts = logits.shape[-1]
    lead = logits.shape[:-1]
    z = logits.reshape(-1, experts).contiguous()
    g = gumbel.reshape(-1, experts).contiguous()
    rows = z.shape[0]
    idx = torch.empty(rows, k, dtype=torch.int32, device=logits.device)
    w = torch.empty(rows, k, dtype=torch.float32, device=logits.device)
    if rows:
        kernel[(rows,)](z, g, idx, w, experts, float(tau), K=k, HEAD=head, POOL=pool,
                        BLOCK_E=triton.next_power_of_2(experts), BLOCK_K=triton.next_power_of_2(k))
    return idx.long().reshape(*lead, k), w.to(logits.dtype).reshape(*lead, k)


def expert_sample_route(logits, gumbel, k, head, pool, tau, *, backend: str = "auto"):
    """Dispatch: the Triton kernel on CUDA (``backend='auto'``), the reference elsewhere; on CUDA,
    ``auto`` falls back to the reference with a warning when Triton is missing."""
    from . import use_triton

    if use_triton(backend, logits, name="expert_sample_route"):
        return expert_sample_route_triton(logits, gumbel, k, head, pool, tau)
    return expert_sample_route_reference(logits, gumbel, k, head, pool, tau)
