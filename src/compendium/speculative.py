r"""Speculative sampling: one implementation for every chapter that verifies drafts.

A draft token ``d`` drawn from a draft distribution ``q`` is checked against the target ``p``
(Leviathan et al., 2023; Chen et al., 2023)::

    accept d  with probability  min(1, p(d) / q(d));   otherwise draw from  norm(max(0, p - q))

The emitted token is distributed as ``p`` whatever ``q`` is, and a draft is accepted with
probability (:func:`acceptance_rate`)::

    alpha = sum_v min(p(v), q(v)) = 1 - TV(p, q),      TV(p, q) = sum_v max(0, p(v) - q(v)).

With ``gamma`` drafts per target call and a constant acceptance ``alpha``, one call commits the
accepted prefix plus one token (the residual draw, or a bonus draw from the last ``p`` when all
``gamma`` drafts pass), so (:func:`expected_tokens`)::

    E[tokens per target call] = sum_{k=0..gamma} alpha^k = (1 - alpha^(gamma+1)) / (1 - alpha),

and with a draft call costing ``c`` target calls, the modeled speed-up over plain decoding is
``E[tokens] / (gamma c + 1)`` (:func:`modeled_speedup`).

Two chapters use this module: ``speculative_coupled_decoding`` (the per-position rule inside
Jacobi decoding: :func:`acceptance_ratio`, :func:`residual_distribution`,
:func:`maximal_coupling`, :func:`categorical`) and ``online_spec`` (the batched verify step
:func:`spec_verify` of draft-then-verify decoding, and the acceptance formulas). The Triton
batched verify kernel (:mod:`compendium.kernels.spec_verify`) is tested against
:func:`spec_verify`.

Noise conventions
-----------------
:func:`categorical` inverts the CDF with one uniform per row. :func:`spec_verify` takes all of
its randomness as arguments: one uniform per draft for the acceptance tests and one row of
standard exponentials per sequence for the final draw, made by the *exponential race*
``argmin_v E_v / r_v``, which is a draw from ``norm(r)`` for any non-negative ``r`` and needs
neither a normalisation nor a cumulative sum (so a kernel can reproduce it exactly).
"""

from __future__ import annotations

import numpy as np

__all__ = ["categorical", "residual_distribution", "total_variation", "acceptance_rate", "acceptance_ratio",
           "maximal_coupling", "expected_tokens", "modeled_speedup", "exponential_race", "spec_verify"]


def categorical(probs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One draw from each row of ``probs`` (shape ``(..., V)``, rows sum to 1) -> ``(...)``."""
    probs = np.asarray(probs, dtype=float)
    u = rng.random(probs.shape[:-1])
    cdf = np.cumsum(probs, axis=-1)
    idx = (cdf < u[..., None] * cdf[..., -1:]).sum(axis=-1)  # scale by the total: round-off safe
    return np.minimum(idx, probs.shape[-1] - 1)


def residual_distribution(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    r"""``norm(max(0, p - q))`` along the last axis; ``p`` itself where ``p == q`` (no mass left).

    Parameters
    ----------
    p, q : ndarray, shape ``(..., V)``
        Target and draft distributions.
    """
    r = np.maximum(np.asarray(p, dtype=float) - q, 0.0)
    total = r.sum(axis=-1, keepdims=True)
    return np.where(total > 0, r / np.where(total > 0, total, 1.0), p)


def total_variation(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """``TV(p, q) = sum_v max(0, p(v) - q(v))`` along the last axis."""
    return np.maximum(np.asarray(p, dtype=float) - q, 0.0).sum(axis=-1)


def acceptance_rate(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """``alpha = sum_v min(p(v), q(v)) = 1 - TV(p, q)``: the chance a draft from ``q`` is accepted."""
    return np.minimum(np.asarray(p, dtype=float), q).sum(axis=-1)


def acceptance_ratio(draft: np.ndarray, q: np.ndarray, p: np.ndarray) -> np.ndarray:
    """``min(1, p(d) / q(d))`` for drafts ``d`` (shape ``(...)``) drawn from ``q`` (``(..., V)``)."""
    d = np.asarray(draft)[..., None]
    qd = np.take_along_axis(q, d, axis=-1)[..., 0]
    pd = np.take_along_axis(p, d, axis=-1)[..., 0]
    return np.minimum(1.0, pd / np.where(qd > 0, qd, 1.0))


def maximal_coupling(draft: np.ndarray, q: np.ndarray, p: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    r"""Draw ``d' ~ p`` given ``d ~ q`` with ``P(d' = d) = 1 - TV(p, q)`` (the largest possible).

    Keep ``d`` with probability ``min(1, p(d)/q(d))``, else draw from ``norm(max(0, p - q))``.

    Parameters
    ----------
    draft : ndarray of int, shape ``(...)``
        Draws from ``q``.
    q, p : ndarray, shape ``(..., V)``
    rng : numpy.random.Generator

    Returns
    -------
    ndarray of int, shape ``(...)``
    """
    draft = np.asarray(draft)
    keep = rng.random(draft.shape) < acceptance_ratio(draft, q, p)
    return np.where(keep, draft, categorical(residual_distribution(p, q), rng))


def _check_alpha_gamma(alpha, gamma) -> tuple[np.ndarray, int]:
    alpha = np.asarray(alpha, dtype=float)
    if np.any(~np.isfinite(alpha)) or np.any(alpha < 0) or np.any(alpha > 1):
        raise ValueError(f"alpha must lie in [0, 1], got {alpha}")
    if isinstance(gamma, bool) or not isinstance(gamma, (int, np.integer)) or gamma < 1:
        raise ValueError(f"gamma (drafts per target call) must be an integer >= 1, got {gamma!r}")
    return alpha, int(gamma)


def expected_tokens(alpha, gamma: int):
    r"""``E[tokens per target call] = (1 - alpha^(gamma+1)) / (1 - alpha)`` (``gamma + 1`` at ``alpha = 1``).

    Parameters
    ----------
    alpha : float or ndarray
        Per-draft acceptance probability, in ``[0, 1]``.
    gamma : int
        Draft tokens per target call.
    """
    alpha, gamma = _check_alpha_gamma(alpha, gamma)
    powers = alpha[..., None] ** np.arange(gamma + 1)  # sum_{k <= gamma} alpha^k: exact at alpha = 1
    out = powers.sum(axis=-1)
    return float(out) if out.ndim == 0 else out


def modeled_speedup(alpha, gamma: int, cost_ratio: float = 0.1):
    """``expected_tokens(alpha, gamma) / (gamma * cost_ratio + 1)``: speed-up over one token per call.

    ``cost_ratio`` is the cost of one draft call in units of one target call.
    """
    if not np.isfinite(cost_ratio) or cost_ratio < 0:
        raise ValueError(f"cost_ratio must be a non-negative number, got {cost_ratio!r}")
    return expected_tokens(alpha, gamma) / (gamma * cost_ratio + 1.0)


def exponential_race(weights: np.ndarray, exponentials: np.ndarray) -> np.ndarray:
    """``argmin_v E_v / w_v`` along the last axis: a draw from ``norm(w)`` for ``E_v ~ Exp(1)``.

    Entries with ``w_v = 0`` never win. Shapes ``(..., V)`` -> ``(...)``.
    """
    w = np.asarray(weights)
    e = np.asarray(exponentials)
    with np.errstate(divide="ignore", invalid="ignore"):
        race = np.where(w > 0, e / np.where(w > 0, w, 1), np.inf)
    return np.argmin(race, axis=-1)


def spec_verify(p_probs: np.ndarray, q_probs: np.ndarray, draft_tokens: np.ndarray, accept_uniform: np.ndarray,
                exponentials: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    r"""One batched verify step of draft-then-verify decoding.

    Draft ``j`` of row ``b`` is accepted when ``u[b, j] < p_j(d_j) / q_j(d_j)``, left to right
    until the first rejection ``m``; the row then emits ``d_0 .. d_{m-1}`` and one more token,
    drawn from ``norm(max(0, p_m - q_m))`` (from ``p_gamma`` when every draft passed), by the
    exponential race on ``exponentials[b]``. Arithmetic runs in the inputs' floating dtype.

    Parameters
    ----------
    p_probs : ndarray, shape ``(B, gamma + 1, V)``
        Target distributions at the ``gamma`` draft positions and the one after them.
    q_probs : ndarray, shape ``(B, gamma, V)``
        Draft distributions the drafts were drawn from.
    draft_tokens : ndarray of int, shape ``(B, gamma)``
    accept_uniform : ndarray, shape ``(B, gamma)``
        Uniforms in ``[0, 1)`` for the acceptance tests.
    exponentials : ndarray, shape ``(B, V)``
        Standard exponentials for the final draw.

    Returns
    -------
    n_accepted : ndarray of int, shape ``(B,)``
        Accepted drafts ``m`` (``gamma`` when none was rejected).
    next_token : ndarray of int, shape ``(B,)``
        The token emitted after them.
    """
    p, q = np.asarray(p_probs), np.asarray(q_probs)
    d = np.asarray(draft_tokens)
    u, e = np.asarray(accept_uniform), np.asarray(exponentials)
    if p.ndim != 3 or q.ndim != 3 or p.shape[0] != q.shape[0] or p.shape[1] != q.shape[1] + 1 or p.shape[2] != q.shape[2]:
        raise ValueError(f"need p (B, gamma+1, V) and q (B, gamma, V), got {p.shape} and {q.shape}")
    B, gamma, V = q.shape
    if d.shape != (B, gamma) or u.shape != (B, gamma) or e.shape != (B, V):
        raise ValueError(f"need drafts and uniforms (B, gamma) = {(B, gamma)} and exponentials (B, V) = {(B, V)}, "
                         f"got {d.shape}, {u.shape}, {e.shape}")
    if d.size and (d.min() < 0 or d.max() >= V):
        raise ValueError(f"draft tokens must lie in [0, {V}), got range [{d.min()}, {d.max()}]")
    dtype = np.result_type(p.dtype, q.dtype, np.float32)
    rows = np.arange(B)[:, None]
    cols = np.arange(gamma)[None, :]
    pd = p[rows, cols, d].astype(dtype)
    qd = q[rows, cols, d].astype(dtype)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(qd > 0, pd / np.where(qd > 0, qd, 1), 1)  # q(d) = 0 cannot happen for a draw
    accept = u.astype(dtype) < ratio
    n_acc = np.where(accept.all(axis=1), gamma, np.argmin(accept, axis=1))  # first rejection m
    p_m = p[np.arange(B), n_acc].astype(dtype)  # (B, V)
    q_pad = np.concatenate([q, np.zeros((B, 1, V), dtype=q.dtype)], axis=1)  # q_gamma = 0: the bonus draw
    q_m = q_pad[np.arange(B), n_acc].astype(dtype)
    residual = np.maximum(p_m - q_m, 0)
    residual = np.where(residual.sum(-1, keepdims=True) > 0, residual, p_m)  # p_m == q_m: draw from p_m
    return n_acc.astype(np.int64), exponential_race(residual, e.astype(dtype)).astype(np.int64)
