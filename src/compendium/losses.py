r"""Contrastive losses shared by the chapters that train encoders (one implementation, tested once).

InfoNCE over cosine similarities with a temperature :math:`\tau` (van den Oord et al. 2018; the
CLIP and dense-retrieval form). For queries :math:`q_i` (B, d) and candidates :math:`c_j` (N, d),
with :math:`\hat x = x / \max(\lVert x\rVert, \epsilon)` and target index :math:`t_i`::

    s_ij  = <q_i^, c_j^> / tau                                    (cosine logits)
    L     = -(1/B) sum_i log softmax_j(s_ij)_{j = t_i}             (InfoNCE, mean over queries)

The default target of query ``i`` is candidate ``i``: the in-batch form, where the candidates are
the batch's positives followed by any extra negatives (hard negatives of every query are then
negatives of every other query as well). ``symmetric=True`` averages the query->candidate loss with
the candidate->query loss over the first B candidates (CLIP's image-text form; needs the first B
candidates to be the positives). :func:`hard_negative_loss` is the per-query form: query ``i``
against its own positive and its own K hard negatives only (target 0).
:func:`info_nce_from_logits` takes logits the caller has already scaled (a learned CLIP logit
scale, a prompt bank), so every chapter's contrastive cross-entropy goes through one function.

Users: matryoshka_3d (retrieval encoders, MRL / layer / rank-nested losses) and prototype_tta (its
dual encoder's cross-entropy over the 1110-prompt bank, ``info_nce_from_logits``) and pixclip (its
symmetric region-text, crop-text and global image-caption InfoNCE terms, ``info_nce``).
"""

from __future__ import annotations

import torch
from torch.nn import functional as F

__all__ = ["cosine_logits", "info_nce", "info_nce_from_logits", "hard_negative_loss", "nested_prefix_loss"]


def _check_temperature(temperature) -> float:
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not temperature > 0:
        raise ValueError(f"temperature must be a positive number, got {temperature!r}")
    return float(temperature)


def cosine_logits(query: torch.Tensor, candidates: torch.Tensor, temperature: float = 0.05) -> torch.Tensor:
    """``cos(q_i, c_j) / temperature``: ``(B, d), (N, d) -> (B, N)`` (rows L2-normalised first)."""
    temperature = _check_temperature(temperature)
    if query.ndim != 2 or candidates.ndim != 2 or query.shape[1] != candidates.shape[1]:
        raise ValueError(f"need query (B, d) and candidates (N, d) with one d, got {tuple(query.shape)} and "
                         f"{tuple(candidates.shape)}")
    return F.normalize(query, dim=-1) @ F.normalize(candidates, dim=-1).T / temperature


def info_nce_from_logits(logits: torch.Tensor, targets: torch.Tensor | None = None, *,
                         symmetric: bool = False) -> torch.Tensor:
    """Mean cross-entropy of already-scaled logits ``(B, N)`` against ``targets`` (default ``arange(B)``).

    ``symmetric=True`` averages it with the column direction ``logits[:, :B].T`` (targets ``arange(B)``),
    which needs the default targets and ``N >= B``.
    """
    if logits.ndim != 2:
        raise ValueError(f"logits must have shape (B, N), got {tuple(logits.shape)}")
    B, N = logits.shape
    if targets is None:
        if N < B:
            raise ValueError(f"the default targets arange(B) need N >= B candidates, got B = {B}, N = {N}")
        targets = torch.arange(B, device=logits.device)
    elif symmetric:
        raise ValueError("symmetric=True uses the in-batch targets arange(B); do not pass targets")
    else:
        if targets.shape != (B,) or targets.dtype not in (torch.int32, torch.int64):
            raise ValueError(f"targets must be integer indices of shape ({B},), got {tuple(targets.shape)} {targets.dtype}")
        if B and (int(targets.min()) < 0 or int(targets.max()) >= N):
            raise ValueError(f"targets must lie in [0, {N})")
    loss = F.cross_entropy(logits, targets.long())
    if symmetric:
        loss = (loss + F.cross_entropy(logits[:, :B].T, torch.arange(B, device=logits.device))) / 2
    return loss


def info_nce(query: torch.Tensor, candidates: torch.Tensor, *, temperature: float = 0.05,
             targets: torch.Tensor | None = None, symmetric: bool = False) -> torch.Tensor:
    """InfoNCE over cosine similarities (see the module docstring).

    Parameters
    ----------
    query : torch.Tensor, shape (B, d)
    candidates : torch.Tensor, shape (N, d)
        The positives first (candidate ``i`` is query ``i``'s, unless ``targets`` says otherwise),
        then any negatives.
    temperature : float
        ``tau`` > 0 (0.05 is ML-Embed's; sentence-transformers' ``scale = 1 / tau = 20``).
    targets : torch.Tensor of int, shape (B,), optional
    symmetric : bool
        Average with the candidate->query direction over the first B candidates.

    Returns
    -------
    torch.Tensor
        A scalar.
    """
    return info_nce_from_logits(cosine_logits(query, candidates, temperature), targets, symmetric=symmetric)


def hard_negative_loss(query: torch.Tensor, positive: torch.Tensor, negatives: torch.Tensor, *,
                       temperature: float = 0.05) -> torch.Tensor:
    """Query ``i`` against ``[positive_i, negatives_i1..iK]`` only: cross-entropy with target 0.

    Shapes: ``query (B, d)``, ``positive (B, d)``, ``negatives (B, K, d)``; returns a scalar.
    """
    temperature = _check_temperature(temperature)
    if query.ndim != 2 or positive.shape != query.shape or negatives.ndim != 3 \
            or negatives.shape[0] != query.shape[0] or negatives.shape[2] != query.shape[1]:
        raise ValueError(f"need query (B, d), positive (B, d) and negatives (B, K, d), got {tuple(query.shape)}, "
                         f"{tuple(positive.shape)} and {tuple(negatives.shape)}")
    q = F.normalize(query, dim=-1)
    cands = F.normalize(torch.cat([positive[:, None], negatives], 1), dim=-1)     # (B, 1 + K, d)
    logits = torch.einsum("bd,bkd->bk", q, cands) / temperature
    return F.cross_entropy(logits, torch.zeros(query.shape[0], dtype=torch.long, device=query.device))


def nested_prefix_loss(loss_fn, tensors, dims, weights) -> torch.Tensor:
    r"""Matryoshka (MRL) sum :math:`\sum_k w_k\, \mathcal L(x_{:, :m_k})`: ``loss_fn`` on the first
    ``m_k`` coordinates of every tensor in ``tensors`` (the last axis is the embedding), weighted.

    ``loss_fn(*truncated) -> scalar`` normalises what it is given (every loss here does), so the
    prefix is re-normalised as MRL prescribes. ``dims`` and ``weights`` have one entry per prefix.
    """
    dims, weights = list(dims), list(weights)
    if not dims or len(dims) != len(weights):
        raise ValueError(f"need one weight per dim, got {len(dims)} dims and {len(weights)} weights")
    width = tensors[0].shape[-1]
    if any(isinstance(m, bool) or not 1 <= int(m) <= width for m in dims):
        raise ValueError(f"dims must lie in [1, {width}], got {dims}")
    total = 0.0
    for m, w in zip(dims, weights):
        total = total + float(w) * loss_fn(*[t[..., :int(m)] for t in tensors])
    return total
