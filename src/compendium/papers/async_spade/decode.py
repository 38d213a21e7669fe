"""A step-by-step decode loop with a KV cache, run three ways for the TPOT measurement.

* ``full``: each step attends to the whole cache;
* ``sync``: each step first selects its key set (ridge-predicted query, token top-B), then runs;
* ``quest``: each step first scores Quest pages with its true query, then runs (synchronous, as
  Quest is);
* ``async``: while step ``t`` runs, a worker thread selects the set of step ``t+1`` for each layer
  as soon as that layer's query ``q_t`` exists (the "cache rank" of the paper as a thread; torch
  ops release the GIL, so the two can overlap on two cores). On CUDA the worker issues its work on
  its own stream, which first waits for an event recorded on the main stream after ``q_t`` and the
  keys were written (:func:`run_on_side_stream`), so it never reads them early; the tensors are
  marked as used by the side stream so the caching allocator does not reuse them too soon. The
  ordering logic is tested on the CPU with a fake stream; the CUDA path itself runs only on a GPU
  (``benchmarks/gpu_check.sh``).

Attention over the selected set uses ``compendium.kernels.sparse_decode`` (the Triton kernel on
CUDA, the PyTorch reference elsewhere). Timings are wall-clock and vary from run to run.
"""

from __future__ import annotations

import math
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch

from ...kernels.sparse_decode import sparse_decode
from .sparse import predict_queries


def select_indices(q_hist: torch.Tensor, keys: torch.Tensor, budget: int, sinks: int, local: int,
                   window: int, ridge_lambda: float, ar_order: int) -> torch.Tensor:
    """Key set of the *next* step from the queries so far.

    q_hist (1, H, t, d), keys (1, H_kv, t, d) -> LongTensor (1, H_kv, N) (sinks, top-B of the
    candidates scored by the ridge-predicted query, and the local window, which holds the newest
    ``local`` positions including the next one)."""
    _, h, t, d = q_hist.shape
    hkv = keys.shape[1]
    nxt = t                                                              # position of the next token
    tail = q_hist[..., -(window + 2):, :]
    qhat = predict_queries(torch.cat([tail, tail[..., -1:, :]], -2), "ridge", window, ridge_lambda, ar_order)
    qhat = qhat[..., -1, :] if tail.shape[2] > window else q_hist[..., -1, :]    # (1, H, d)
    lo, hi = sinks, nxt - local + 1                                      # candidates [lo, hi)
    fixed = list(range(min(sinks, nxt + 1))) + list(range(max(hi, sinks), nxt + 1))
    fixed_t = torch.tensor(fixed, dtype=torch.long, device=keys.device).view(1, 1, -1).expand(1, hkv, -1)
    if hi - lo <= 0:
        return fixed_t
    cand = keys[:, :, lo:hi]
    scores = torch.einsum("bhd,bhjd->bhj", qhat, cand.repeat_interleave(h // hkv, 1)) / math.sqrt(d)
    group = scores.softmax(-1).view(1, hkv, h // hkv, -1).sum(2)
    top = torch.topk(group, min(budget, hi - lo), dim=-1).indices + lo
    return torch.cat([top, fixed_t], -1)


def select_quest(q: torch.Tensor, keys: torch.Tensor, budget: int, sinks: int, local: int, page_size: int) -> torch.Tensor:
    """Quest's key set for the current step from its true query (synchronous by nature).

    q (1, H, d) the current queries, keys (1, H_kv, t+1, d) including the current position ->
    LongTensor (1, H_kv, N): sinks, the top ``budget // page_size`` candidate pages by the summed
    (over the group's heads) upper bound ``U(q, page)``, and the local window."""
    from ...kernels.quest_pages import page_metadata, quest_scores_reference

    _, h, d = q.shape
    hkv, t1 = keys.shape[1], keys.shape[2]
    nxt = t1 - 1
    lo, hi = sinks, nxt - local + 1
    fixed = list(range(min(sinks, nxt + 1))) + list(range(max(hi, sinks), nxt + 1))
    fixed_t = torch.tensor(fixed, dtype=torch.long, device=keys.device).view(1, 1, -1).expand(1, hkv, -1)
    if hi - lo <= 0:
        return fixed_t
    cand = keys[:, :, lo:hi]
    kmin, kmax, valid = page_metadata(cand, page_size)
    g = h // hkv
    scores = quest_scores_reference(q, kmin.repeat_interleave(g, 1), kmax.repeat_interleave(g, 1))
    scores = scores.view(1, hkv, g, -1).sum(2).masked_fill(~valid.view(1, 1, -1).expand(1, hkv, -1), float("-inf"))
    pages = torch.topk(scores, min(max(1, budget // page_size), scores.shape[-1]), dim=-1).indices
    idx = (pages[..., None] * page_size + torch.arange(page_size, device=keys.device)).flatten(-2)
    idx = torch.where(idx < hi - lo, idx + lo, torch.full_like(idx, -1))    # -1: padding past the last key
    return torch.cat([idx, fixed_t], -1)


def run_on_side_stream(fn, args, side, ready, cuda=torch.cuda):
    """Run ``fn(*args)`` on stream ``side`` once the main stream has produced ``args``.

    ``ready`` is an event recorded on the main stream right after the inputs were written; the side
    stream waits for it before any kernel is queued, each input tensor is marked as used by the side
    stream (``record_stream``), and the call returns only after the side stream has finished. With
    ``side=None`` (the CPU) it just calls ``fn``. ``cuda`` is injectable so the ordering can be
    tested without a GPU.
    """
    if side is None:
        return fn(*args)
    side.wait_event(ready)
    for a in args:
        if isinstance(a, torch.Tensor):
            a.record_stream(side)
    with cuda.stream(side):
        out = fn(*args)
    side.synchronize()
    return out


def timed_decode(model, tokens: torch.Tensor, prefix: int, steps: int, mode: str, *, budget: int,
                 sinks: int, local: int, window: int, ridge_lambda: float, ar_order: int, page_size: int = 16,
                 logits: list | None = None):
    """Teacher-forced decode of ``tokens[prefix:prefix+steps]`` (tokens (T,)) after a prefill.

    Returns (per-step seconds (steps,), per-step selection seconds on the critical path (steps,),
    events: list of (lane, start, end) relative to the first step). When ``logits`` is a list, the
    next-token logits of every step (V,) are appended to it (to compare with the model's forward)."""
    if mode not in ("full", "sync", "quest", "async"):
        raise ValueError(f"mode must be 'full', 'sync', 'quest' or 'async', got {mode!r}")
    if prefix + steps > tokens.shape[0] or prefix < 1:
        raise ValueError("prefix + steps must fit in the sequence")
    kw = dict(budget=budget, sinks=sinks, local=local, window=window, ridge_lambda=ridge_lambda, ar_order=ar_order)
    cap = []
    with torch.no_grad():
        model(tokens[None, :prefix], capture=cap)
    qs = [c[0] for c in cap]
    ks = [c[1] for c in cap]
    vs = [c[2] for c in cap]
    pool = ThreadPoolExecutor(max_workers=1) if mode == "async" else None
    cuda = tokens.is_cuda
    side = torch.cuda.Stream() if cuda and pool else None             # the selector's own CUDA stream
    events, times, sel_times = [], [], []
    t_origin = time.perf_counter()

    def job(q_hist, keys, ready):
        s = time.perf_counter()
        out = run_on_side_stream(lambda a, b: select_indices(a, b, **kw), (q_hist, keys), side, ready)
        events.append(("select", s - t_origin, time.perf_counter() - t_origin))
        return out

    def submit(i):
        ready = None
        if side is not None:
            ready = torch.cuda.Event()
            ready.record()                                                 # on the main stream
        return pool.submit(job, qs[i], ks[i], ready)

    pending = [submit(i) if pool else None for i in range(len(model.blocks))]
    with torch.no_grad():
        for step in range(steps):
            pos = prefix + step
            start = time.perf_counter()
            sel_crit = 0.0
            x = model.embed(tokens[pos:pos + 1]) + model.pos(torch.tensor([pos], device=tokens.device))
            x = x.view(1, 1, -1)
            for i, block in enumerate(model.blocks):
                att = block.attn
                hn = block.ln1(x)
                q = att.q(hn).view(1, 1, att.h, att.dh).transpose(1, 2)
                k, v = att.kv(hn).view(1, 1, 2, att.hkv, att.dh).permute(2, 0, 3, 1, 4)
                if mode == "sync":
                    s = time.perf_counter()
                    idx = select_indices(qs[i], ks[i], **kw)             # from queries < pos
                    sel_crit += time.perf_counter() - s
                elif mode == "quest":
                    s = time.perf_counter()
                    idx = select_quest(q[:, :, 0], torch.cat([ks[i], k], 2), budget, sinks, local, page_size)
                    sel_crit += time.perf_counter() - s
                elif mode == "async":
                    s = time.perf_counter()
                    idx = pending[i].result()                              # computed during the last step
                    sel_crit += time.perf_counter() - s
                qs[i] = torch.cat([qs[i], q], 2)
                ks[i] = torch.cat([ks[i], k], 2)
                vs[i] = torch.cat([vs[i], v], 2)
                if mode == "async":
                    pending[i] = submit(i)                                 # next step's set, overlapped
                if mode == "full":
                    idx = torch.arange(pos + 1, device=tokens.device).view(1, 1, -1).expand(1, att.hkv, -1)
                o = sparse_decode(q[:, :, 0], ks[i], vs[i], idx)          # (1, H, dh)
                x = x + att.o(o.reshape(1, 1, -1))
                x = x + block.mlp(block.ln2(x))
            out_logits = model.head(model.ln(x))
            if logits is not None:
                logits.append(out_logits[0, 0])
            if cuda:
                torch.cuda.synchronize()
            end = time.perf_counter()
            events.append(("forward", start - t_origin, end - t_origin))
            times.append(end - start)
            sel_times.append(sel_crit)
    if pool:
        pool.shutdown(wait=True)
    return np.array(times), np.array(sel_times), events
