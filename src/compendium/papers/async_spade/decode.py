"""A step-by-step decode loop with a KV cache, run three ways for the TPOT measurement.

* ``full``: each step attends to the whole cache;
* ``sync``: each step first selects its key set (ridge-predicted query, token top-B), then runs;
* ``async``: while step ``t`` runs, a worker thread selects the set of step ``t+1`` for each layer
  as soon as that layer's query ``q_t`` exists (the "cache rank" of the paper as a thread; torch
  ops release the GIL, so the two can overlap on two cores; on CUDA the worker issues its work on
  its own stream; that path is untested here, for want of a GPU).

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


def timed_decode(model, tokens: torch.Tensor, prefix: int, steps: int, mode: str, *, budget: int,
                 sinks: int, local: int, window: int, ridge_lambda: float, ar_order: int):
    """Teacher-forced decode of ``tokens[prefix:prefix+steps]`` (tokens (T,)) after a prefill.

    Returns (per-step seconds (steps,), per-step selection seconds on the critical path (steps,),
    events: list of (lane, start, end) relative to the first step)."""
    if mode not in ("full", "sync", "async"):
        raise ValueError(f"mode must be 'full', 'sync' or 'async', got {mode!r}")
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

    def job(q_hist, keys):
        s = time.perf_counter()
        if side is not None:
            with torch.cuda.stream(side):
                out = select_indices(q_hist, keys, **kw)
            side.synchronize()
        else:
            out = select_indices(q_hist, keys, **kw)
        events.append(("select", s - t_origin, time.perf_counter() - t_origin))
        return out

    pending = [pool.submit(job, qs[i], ks[i]) if pool else None for i in range(len(model.blocks))]
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
                elif mode == "async":
                    s = time.perf_counter()
                    idx = pending[i].result()                              # computed during the last step
                    sel_crit += time.perf_counter() - s
                qs[i] = torch.cat([qs[i], q], 2)
                ks[i] = torch.cat([ks[i], k], 2)
                vs[i] = torch.cat([vs[i], v], 2)
                if mode == "async":
                    pending[i] = pool.submit(job, qs[i], ks[i])            # next step's set, overlapped
                if mode == "full":
                    idx = torch.arange(pos + 1, device=tokens.device).view(1, 1, -1).expand(1, att.hkv, -1)
                o = sparse_decode(q[:, :, 0], ks[i], vs[i], idx)          # (1, H, dh)
                x = x + att.o(o.reshape(1, 1, -1))
                x = x + block.mlp(block.ln2(x))
            model.head(model.ln(x))
            if cuda:
                torch.cuda.synchronize()
            end = time.perf_counter()
            events.append(("forward", start - t_origin, end - t_origin))
            times.append(end - start)
            sel_times.append(sel_crit)
    if pool:
        pool.shutdown(wait=True)
    return np.array(times), np.array(sel_times), events
