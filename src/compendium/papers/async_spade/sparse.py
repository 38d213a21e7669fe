"""Query prediction, KV selection (token-level and Quest pages) and their metrics, for all decode
steps of a teacher-forced sequence at once.

Shapes: ``Q`` (B, H, T, d) queries and ``K`` (B, H_kv, T, d) keys of one layer; a *selection* is a
boolean mask (B, H_kv, T, T) whose row ``t`` lists the cached positions that decode step ``t``
attends to. Every method keeps the same fixed part (``sinks`` first positions and the ``local``
most recent ones, ``t-local+1..t``) and chooses ``budget`` more positions among the *candidates*
``sinks <= j <= t-local``. Running the model with such masks, layer by layer, is exactly the
sparse decode loop run teacher-forced (causality makes the two agree).

Predictors of the query of step ``t`` from the window ``q_{t-W}..q_{t-1}`` (one step stale, as in
the asynchronous pipeline, where selection for step ``t`` runs during step ``t-1``):

* ``last``: ``q_{t-1}``;   ``mean``: the window mean;
* ``ridge`` (the temporal-regressive module, our reading): scalar AR(p) coefficients fitted on the
  window's own transitions, shrunk towards "copy the last query" and shared by all heads of a
  layer ("unified"):  ``min_w sum_j ||q_{j+1} - sum_a w_a q_{j-a}||^2 + lam * s * ||w - e_0||^2``
  with ``s`` the mean squared query norm in the window, then ``q_hat_t = sum_a w_a q_{t-1-a}``;
* ``oracle``: the true ``q_t`` (the synchronous ideal);
* ``ridge_shuffled`` (a control): the same ridge fit with the window's targets ``q_{j+1}`` cyclically
  shifted by half the number of transitions (every regressor paired with another step's target),
  so the weights see no temporal order; a predictor with no temporal signal, against which the
  ridge-vs-last check must come out ``fail`` when it has power.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ...kernels.quest_pages import quest_scores_reference

PREDICTORS = ("last", "mean", "ridge", "ridge_shuffled", "oracle")


def predict_queries(Q: torch.Tensor, predictor: str, window: int = 8, ridge_lambda: float = 1.0,
                    ar_order: int = 2) -> torch.Tensor:
    """Predicted query of every step: (B, H, T, d) -> (B, H, T, d); row t uses rows < t only
    (``oracle`` returns ``Q``). Rows with too short a history fall back to ``last`` (row 0 to 0)."""
    if predictor not in PREDICTORS:
        raise ValueError(f"predictor must be one of {PREDICTORS}, got {predictor!r}")
    if not 1 <= ar_order < window:
        raise ValueError(f"need 1 <= ar_order < window, got ar_order={ar_order}, window={window}")
    if predictor == "oracle":
        return Q
    last = torch.cat([torch.zeros_like(Q[..., :1, :]), Q[..., :-1, :]], dim=-2)      # q_{t-1}
    if predictor == "last":
        return last
    b, h, t, d = Q.shape
    padded = torch.cat([Q[..., :1, :].expand(b, h, window, d), Q], dim=-2)           # repeat q_0 leftwards
    win = padded.unfold(-2, window, 1)[..., :t, :, :].transpose(-1, -2)              # (B,H,T,W,d): q_{t-W..t-1}
    if predictor == "mean":
        out = win.mean(-2)
    else:
        gram = torch.einsum("bhtwd,bhtvd->btwv", win, win)                            # shared over heads
        p = ar_order
        rows = torch.arange(p - 1, window - 1)                                       # regressor ends j
        lags = torch.arange(p)
        ja = rows[:, None] - lags[None, :]                                           # (J, p): j - a
        A = gram[..., ja[:, :, None], ja[:, None, :]].sum(2)                         # (B,T,p,p)
        targets = rows + 1
        if predictor == "ridge_shuffled":                                            # a derangement of the targets
            targets = torch.roll(targets, len(rows) // 2) if len(rows) > 1 else targets
        c = gram[..., targets[:, None], ja].sum(2)                                   # (B,T,p)
        scale = gram.diagonal(dim1=-2, dim2=-1).mean(-1).clamp_min(1e-8)             # (B,T)
        lam = ridge_lambda * scale[..., None, None]
        e0 = torch.zeros(p, dtype=Q.dtype)
        e0[0] = 1.0
        w = torch.linalg.solve(A + lam * torch.eye(p, dtype=Q.dtype), c + lam[..., 0] * e0)   # (B,T,p)
        recent = win[..., window - 1 - lags, :]                                      # (B,H,T,p,d)
        out = torch.einsum("btp,bhtpd->bhtd", w, recent)
    enough = torch.arange(t) > window                                                # full history only
    return torch.where(enough[:, None], out, last)


def _regions(t: int, sinks: int, local: int):
    step = torch.arange(t)[:, None]
    pos = torch.arange(t)[None, :]
    fixed = ((pos < sinks) | (pos > step - local)) & (pos <= step)
    candidate = (pos >= sinks) & (pos <= step - local)
    return fixed, candidate                                                          # (T, T) each


def token_scores(Qhat: torch.Tensor, K: torch.Tensor, sinks: int, local: int) -> torch.Tensor:
    """Group-summed ``softmax(q_hat . k / sqrt(d))`` over the candidates of every step:
    (B, H, T, d), (B, H_kv, T, d) -> (B, H_kv, T, T), -1 outside the candidates."""
    b, h, t, d = Qhat.shape
    hkv = K.shape[1]
    _, cand = _regions(t, sinks, local)
    qg = Qhat.view(b, hkv, h // hkv, t, d)
    scores = torch.einsum("bgqtd,bgjd->bgqtj", qg, K) / math.sqrt(d)
    probs = scores.masked_fill(~cand, float("-inf")).softmax(-1).nan_to_num(0.0)
    return probs.sum(2).masked_fill(~cand, -1.0)


def topb_mask(scores: torch.Tensor, budget: int, sinks: int, local: int) -> torch.Tensor:
    """Selection mask (B, H_kv, T, T): the fixed part plus the ``budget`` best-scored candidates."""
    t = scores.shape[-1]
    fixed, cand = _regions(t, sinks, local)
    top = torch.topk(scores, min(budget, t), dim=-1).indices
    chosen = torch.zeros_like(scores, dtype=torch.bool).scatter_(-1, top, True)
    return (chosen & cand) | fixed


def token_selection(Qhat: torch.Tensor, K: torch.Tensor, budget: int, sinks: int, local: int) -> torch.Tensor:
    """Token-level top-``budget`` selection by the group's summed softmax scores of ``Qhat``.

    Returns the selection mask (B, H_kv, T, T) (fixed part included)."""
    return topb_mask(token_scores(Qhat, K, sinks, local), budget, sinks, local)


def quest_page_scores(Q: torch.Tensor, K: torch.Tensor, sinks: int, local: int, page_size: int) -> torch.Tensor:
    """Quest upper-bound score of every page for every step, from the min/max of the page's
    *candidate* keys (partial pages included), with the true queries: (B, H_kv, T, P), -inf for
    pages without candidates."""
    b, h, t, d = Q.shape
    hkv = K.shape[1]
    pages = math.ceil(t / page_size)
    pad = pages * page_size - t
    pos = torch.arange(pages * page_size)
    kp = torch.nn.functional.pad(K, (0, 0, 0, pad)).view(b, hkv, pages, page_size, d)
    ok = (pos >= sinks).view(1, 1, pages, page_size, 1)
    kmin = kp.masked_fill(~ok, float("inf")).cummin(3).values                       # running min within a page
    kmax = kp.masked_fill(~ok, float("-inf")).cummax(3).values
    full_min, full_max = kmin[..., -1, :], kmax[..., -1, :]                          # (B,Hkv,P,d)
    end = (torch.arange(t) - local).clamp_min(-1)                                    # last candidate per step
    endc = end.clamp_min(0)
    page_of_end = endc // page_size
    bmin = kmin.reshape(b, hkv, -1, d)[:, :, endc]                                   # (B,Hkv,T,d) partial page
    bmax = kmax.reshape(b, hkv, -1, d)[:, :, endc]
    qg = Q.view(b, hkv, h // hkv, t, d)
    fm, fM = full_min.nan_to_num(0.0, 0.0, 0.0), full_max.nan_to_num(0.0, 0.0, 0.0)
    # sum_i max(q_i m_i, q_i M_i) = sum_i (q_i^+ M_i - q_i^- m_i), so two matmuls give every page
    qpos, qneg = qg.clamp_min(0), (-qg).clamp_min(0)
    scores = (torch.einsum("bgqtd,bgpd->bgtp", qpos, fM) - torch.einsum("bgqtd,bgpd->bgtp", qneg, fm))
    partial = torch.maximum(qg * bmin[:, :, None], qg * bmax[:, :, None]).sum(-1).sum(2)   # (B,Hkv,T)
    scores = scores.scatter(-1, page_of_end.view(1, 1, t, 1).expand(b, hkv, t, 1), partial[..., None])
    page_idx = torch.arange(pages)
    live = (page_idx[None, :] <= page_of_end[:, None]) & (end[:, None] >= sinks)    # (T, P)
    live &= page_idx[None, :] * page_size + page_size > sinks
    return scores.nan_to_num(0.0).masked_fill(~live, float("-inf"))


def pages_mask(scores: torch.Tensor, budget: int, sinks: int, local: int, page_size: int) -> torch.Tensor:
    """Selection mask (B, H_kv, T, T) from page scores: the best ``budget // page_size`` pages."""
    n_pages = budget // page_size
    if n_pages < 1:
        raise ValueError(f"budget ({budget}) must be at least one page ({page_size})")
    t, pages = scores.shape[-2], scores.shape[-1]
    fixed, cand = _regions(t, sinks, local)
    top = torch.topk(scores, min(n_pages, pages), dim=-1).indices
    chosen_pages = torch.zeros_like(scores, dtype=torch.bool).scatter_(-1, top, True) & (scores > float("-inf"))
    chosen = chosen_pages[..., torch.arange(t) // page_size]                         # (B,Hkv,T,T)
    return (chosen & cand) | fixed


def quest_selection(Q: torch.Tensor, K: torch.Tensor, budget: int, sinks: int, local: int,
                    page_size: int) -> torch.Tensor:
    """Quest page selection with the true queries: ``budget // page_size`` pages per step.

    Returns the selection mask (B, H_kv, T, T) (fixed part included)."""
    return pages_mask(quest_page_scores(Q, K, sinks, local, page_size), budget, sinks, local, page_size)


def random_scores(K: torch.Tensor, t: int, sinks: int, local: int, seed: int = 0) -> torch.Tensor:
    """Scores of the deliberately degraded ``random`` selector: independent uniform scores on the
    candidates of every step (a fixed ``seed``), -1 elsewhere, so its top-B is B candidates drawn
    at random without looking at any query: (B, H_kv, T, T)."""
    _, cand = _regions(t, sinks, local)
    gen = torch.Generator().manual_seed(int(seed))
    u = torch.rand(K.shape[0], K.shape[1], t, t, generator=gen, dtype=torch.float64).to(K.dtype)
    return u.masked_fill(~cand, -1.0)


def method_scores(method: str, Q: torch.Tensor, K: torch.Tensor, *, sinks: int, local: int, page_size: int,
                  window: int, ridge_lambda: float, ar_order: int, random_seed: int = 0) -> torch.Tensor:
    """Scores a method ranks by (token scores, or page scores for ``quest``), reusable across budgets;
    ``random`` (a degraded control selector) ignores the queries."""
    if method == "quest":
        return quest_page_scores(Q, K, sinks, local, page_size)
    if method == "random":
        return random_scores(K, Q.shape[2], sinks, local, random_seed)
    return token_scores(predict_queries(Q, method, window, ridge_lambda, ar_order), K, sinks, local)


def mask_from_scores(method: str, scores: torch.Tensor, budget: int, *, sinks: int, local: int,
                     page_size: int, **_) -> torch.Tensor:
    if method == "quest":
        return pages_mask(scores, budget, sinks, local, page_size)
    return topb_mask(scores, budget, sinks, local)


def select(method: str, Q: torch.Tensor, K: torch.Tensor, budget: int, *, sinks: int, local: int,
           page_size: int, window: int, ridge_lambda: float, ar_order: int, random_seed: int = 0) -> torch.Tensor:
    """Selection mask of one method: ``full``, ``quest``, ``random`` or a token-level predictor name."""
    t = Q.shape[2]
    if method == "full":
        return torch.ones(K.shape[0], K.shape[1], t, t, dtype=torch.bool).tril()
    kw = dict(sinks=sinks, local=local, page_size=page_size)
    scores = method_scores(method, Q, K, window=window, ridge_lambda=ridge_lambda, ar_order=ar_order,
                           random_seed=random_seed, **kw)
    return mask_from_scores(method, scores, budget, **kw)


def true_attention(Q: torch.Tensor, K: torch.Tensor) -> torch.Tensor:
    """Causal attention probabilities of the true queries, (B, H, T, T)."""
    b, h, t, d = Q.shape
    hkv = K.shape[1]
    scores = torch.einsum("bgqtd,bgjd->bgqtj", Q.view(b, hkv, h // hkv, t, d), K) / math.sqrt(d)
    causal = torch.ones(t, t, dtype=torch.bool).tril()
    return scores.masked_fill(~causal, float("-inf")).softmax(-1).reshape(b, h, t, t)


def recall_and_mass(mask: torch.Tensor, oracle: torch.Tensor, probs: torch.Tensor, budget: int,
                    sinks: int, local: int):
    """Per-sequence top-B recall vs the oracle set, and attention mass of the true queries that the
    selection keeps, averaged over key/value heads and the steps with more than ``budget``
    candidates; ``probs`` is :func:`true_attention`. Returns two arrays (B,)."""
    b, h, t, _ = probs.shape
    hkv = mask.shape[1]
    _, cand = _regions(t, sinks, local)
    steps = cand.sum(1) > budget                                                     # (T,)
    hit = (mask & oracle & cand).sum(-1).float() / budget                            # (B,Hkv,T)
    mass = kept_mass(mask, probs)
    return hit[..., steps].mean((1, 2)).numpy(), mass[..., steps].mean((1, 2)).numpy()


def kept_mass(mask: torch.Tensor, probs: torch.Tensor) -> torch.Tensor:
    """Share of each query head's true attention ``probs`` (B, H, T, T) that the key/value-head
    selection ``mask`` (B, H_kv, T, T) keeps: (B, H, T)."""
    b, h, t, _ = probs.shape
    hkv = mask.shape[1]
    return (probs.view(b, hkv, h // hkv, t, t) * mask[:, :, None]).sum(-1).reshape(b, h, t)


def mass_at_steps(mask: torch.Tensor, probs: torch.Tensor, rows: torch.Tensor) -> float:
    """:func:`kept_mass` averaged over the heads and over the (sequence, step) pairs where
    ``rows`` (B, T) is True."""
    return float(kept_mass(mask, probs).mean(1)[rows].mean())


def query_cosine_by_lag(Q: torch.Tensor, max_lag: int) -> np.ndarray:
    """Mean cosine similarity between ``q_t`` and ``q_{t-lag}`` for lag = 1..max_lag."""
    qn = torch.nn.functional.normalize(Q, dim=-1)
    return np.array([float((qn[..., lag:, :] * qn[..., :-lag, :]).sum(-1).mean()) for lag in range(1, max_lag + 1)])


def prediction_cosine(Q: torch.Tensor, Qhat: torch.Tensor, start: int) -> float:
    """Mean cosine similarity between predicted and true queries over steps >= start."""
    return float(torch.nn.functional.cosine_similarity(Qhat[..., start:, :], Q[..., start:, :], dim=-1).mean())
