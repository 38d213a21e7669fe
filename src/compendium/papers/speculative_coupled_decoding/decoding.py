r"""Samplers: autoregressive, Speculative Jacobi Decoding and its coupled variants.

Every sampler works on a batch of ``B`` sequences at once and calls a *target model*
``probs_fn(tokens, positions) -> probs`` that, like one forward pass of a causal LM, returns
``p(tokens[b, positions[b, j]] = v | tokens[b, :positions[b, j]])`` for every requested position,
shape ``(R, W, V)``. One call is one forward pass (one NFE) for every row it is given.

Jacobi iteration with speculative verification, window ``L``, committed length ``n``:

1. one forward pass gives ``p_j`` for the window positions ``j = n .. n+L-1``;
2. draft ``d_j`` (drawn from ``q_j``) is accepted when ``u_j < min(1, p_j(d_j) / q_j(d_j))``;
   at the first rejection ``m`` the token ``x_m ~ norm(max(0, p_m - q_m))`` is committed;
3. the window positions after ``m`` get new drafts, and here the samplers differ:

   - ``sjd``: a fresh independent draw ``d'_k ~ p_k`` (Speculative Jacobi Decoding);
   - ``scd_maximal``: the *maximal coupling* of ``q_k`` and ``p_k``: keep ``d_k`` when
     ``u_k < min(1, p_k(d_k)/q_k(d_k))``, else draw from the residual. This is step 2 applied
     to every window position, i.e. SJD without its ``break``;
   - ``scd_gumbel``: shared-noise coupling ``d'_k = argmax_v(log p_k(v) + G_k(v))`` with a
     Gumbel row ``G_k`` fixed per absolute position for the whole decode;
   - ``scd_stale``: ``scd_maximal`` that stores the old ``q_k`` for a kept draft instead of
     ``p_k`` (a deliberate bug, the negative control);
   - ``scd_redrawn``: ``scd_maximal`` whose window drafts are redrawn independently from their
     stored ``q_k`` before every pass (the speed control: the coupled draft keeps its law but
     loses its memory of the previous draft, so the sampler has SJD's law and must not be faster);

   the stored draft distribution becomes ``q_k := p_k``;
4. positions that enter the window for the first time get a uniform random token with a
   one-hot ``q`` (for ``scd_gumbel``: ``argmax_v G_k(v)``, also uniform).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from ...speculative import (acceptance_ratio, categorical, maximal_coupling, residual_distribution,
                            total_variation)

ProbsFn = Callable[[np.ndarray, np.ndarray], np.ndarray]

METHODS = ("sjd", "scd_maximal", "scd_gumbel", "scd_stale", "scd_redrawn")


# ---------------------------------------------------------------------------- primitives
# categorical, acceptance_ratio, residual_distribution, total_variation and maximal_coupling
# are the shared speculative-sampling rule of compendium.speculative (one copy for the book).
def gumbel_argmax(probs: np.ndarray, gumbel: np.ndarray) -> np.ndarray:
    """``argmax_v(log probs[..., v] + gumbel[..., v])``: a draw from ``probs`` given the noise."""
    with np.errstate(divide="ignore"):
        return np.argmax(np.log(probs) + gumbel, axis=-1)


def gumbel_coupling(q: np.ndarray, p: np.ndarray, gumbel: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The shared-noise coupling: ``(argmax(log q + G), argmax(log p + G))`` with one Gumbel ``G``."""
    return gumbel_argmax(q, gumbel), gumbel_argmax(p, gumbel)


def gumbel_agreement(p: np.ndarray, q: np.ndarray) -> float:
    r"""Exact ``P(argmax(log p + G) = argmax(log q + G))`` for one Gumbel vector ``G``.

    ``sum_v 1 / sum_w max(p_w / p_v, q_w / q_v)`` over tokens with ``p_v, q_v > 0``; it lies between
    ``(1 - TV) / (1 + TV)`` and the maximal coupling's ``1 - TV``.
    """
    p, q = np.asarray(p, dtype=float), np.asarray(q, dtype=float)
    both = (p > 0) & (q > 0)
    pv, qv = p[both], q[both]
    return float((1.0 / np.maximum(p[None, :] / pv[:, None], q[None, :] / qv[:, None]).sum(axis=1)).sum())


@dataclass(frozen=True)
class NoiseTable:
    """All the randomness of a ``scd_gumbel`` decode, indexed by sequence and absolute position.

    Attributes
    ----------
    draft_gumbel : ndarray, shape ``(B, T, V)``
        Gumbel rows for drafts (shared across Jacobi iterations: this is the coupling).
    residual_gumbel : ndarray, shape ``(B, T, V)``
        Gumbel rows for the residual draw at a rejection (each position is verified once).
    accept_uniform : ndarray, shape ``(B, T)``
        Uniforms for the acceptance test of each position.
    """

    draft_gumbel: np.ndarray
    residual_gumbel: np.ndarray
    accept_uniform: np.ndarray

    @classmethod
    def draw(cls, batch: int, length: int, vocab: int, rng: np.random.Generator) -> "NoiseTable":
        return cls(rng.gumbel(size=(batch, length, vocab)), rng.gumbel(size=(batch, length, vocab)),
                   rng.random((batch, length)))


@dataclass(frozen=True)
class Decoded:
    """Output of a sampler.

    Attributes
    ----------
    tokens : ndarray of int, shape ``(B, T)``
        The generated tokens (prefix excluded).
    nfe : ndarray of int, shape ``(B,)``
        Forward passes spent on each sequence.
    accepted : ndarray of int, shape ``(B, max_iterations)``
        Tokens committed by each iteration (0 after a sequence finished).
    """

    tokens: np.ndarray
    nfe: np.ndarray
    accepted: np.ndarray

    @property
    def tokens_per_forward(self) -> np.ndarray:
        """``T / NFE`` per sequence, shape ``(B,)``."""
        return self.tokens.shape[1] / self.nfe


def _check_prefix(prefix, batch) -> np.ndarray:
    if prefix is None:
        return np.zeros((batch, 0), dtype=np.int64)
    prefix = np.asarray(prefix, dtype=np.int64)
    if prefix.ndim != 2:
        raise ValueError(f"prefix must have shape (B, P), got {prefix.shape}")
    return prefix


def autoregressive_decode(probs_fn: ProbsFn, length: int, rng: np.random.Generator, *,
                          batch: int | None = None, prefix: np.ndarray | None = None) -> Decoded:
    """Plain ancestral sampling: one forward pass per token (NFE = ``length``)."""
    if length < 1:
        raise ValueError(f"length must be >= 1, got {length}")
    prefix = _check_prefix(prefix, batch or 1)
    B, P = prefix.shape
    tokens = np.zeros((B, P + length), dtype=np.int64)
    tokens[:, :P] = prefix
    for t in range(length):
        p = probs_fn(tokens, np.full((B, 1), P + t))[:, 0]  # (B, V)
        tokens[:, P + t] = categorical(p, rng)
    return Decoded(tokens[:, P:], np.full(B, length), np.ones((B, length), dtype=np.int64))


def jacobi_decode(probs_fn: ProbsFn, length: int, vocab: int, window: int, method: str,
                  rng: np.random.Generator, *, batch: int | None = None,
                  prefix: np.ndarray | None = None, noise: NoiseTable | None = None) -> Decoded:
    """Speculative Jacobi decoding of ``length`` tokens with the draft update ``method``.

    Parameters
    ----------
    probs_fn : callable
        ``(tokens (R, P+T), positions (R, W)) -> (R, W, V)`` next-token distributions.
    length, vocab, window : int
        Tokens to generate ``T``, vocabulary ``V``, Jacobi window ``L``.
    method : {'sjd', 'scd_maximal', 'scd_gumbel', 'scd_stale', 'scd_redrawn'}
    rng : numpy.random.Generator
        Randomness of every method except ``scd_gumbel``, which takes all of it from ``noise``.
    batch : int, optional
        Number of sequences when there is no ``prefix``.
    prefix : ndarray of int, shape ``(B, P)``, optional
        Prompt tokens kept in front of every sequence.
    noise : NoiseTable, optional
        For ``scd_gumbel``; drawn from ``rng`` when not given.
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if length < 1 or window < 1 or vocab < 2:
        raise ValueError(f"need length >= 1, window >= 1, vocab >= 2; got {length}, {window}, {vocab}")
    prefix = _check_prefix(prefix, batch or 1)
    B, P = prefix.shape
    T, L, V = length, window, vocab
    if method == "scd_gumbel":
        noise = noise if noise is not None else NoiseTable.draw(B, T, V, rng)
        if noise.draft_gumbel.shape != (B, T, V):
            raise ValueError(f"noise table has shape {noise.draft_gumbel.shape}, expected {(B, T, V)}")
    eye = np.eye(V)
    rel = np.arange(L)
    tokens = np.zeros((B, P + T), dtype=np.int64)
    tokens[:, :P] = prefix
    q = np.zeros((B, T, V))  # draft distribution of every drafted position
    n = np.zeros(B, dtype=np.int64)  # committed tokens
    nfe = np.zeros(B, dtype=np.int64)
    history: list[np.ndarray] = []

    def initialise(rows, lo):
        """Random drafts with one-hot ``q`` at the window positions ``>= lo`` not drafted yet."""
        pos = n[rows, None] + rel  # (R, L)
        mask = (pos >= lo[:, None]) & (pos < T)
        r, k = np.broadcast_to(rows[:, None], pos.shape)[mask], pos[mask]
        if method == "scd_gumbel":
            tok = np.argmax(noise.draft_gumbel[r, k], axis=-1)
        else:
            tok = rng.integers(0, V, size=pos.shape)[mask]
        tokens[r, P + k] = tok
        q[r, k] = eye[tok]

    initialise(np.arange(B), np.zeros(B, dtype=np.int64))
    while (active := np.flatnonzero(n < T)).size:
        pos = n[active, None] + rel  # (R, L) window positions
        valid = pos < T
        pos_c = np.minimum(pos, T - 1)
        if method == "scd_redrawn":  # forget the previous draft: a fresh draw from its stored law
            r_rows = np.broadcast_to(active[:, None], pos.shape)[valid]
            tokens[r_rows, P + pos[valid]] = categorical(q[r_rows, pos[valid]], rng)
        p = probs_fn(tokens[active], P + pos_c)  # (R, L, V): one forward pass per active row
        d = tokens[active[:, None], P + pos_c]  # current drafts
        qw = q[active[:, None], pos_c]
        u = noise.accept_uniform[active[:, None], pos_c] if method == "scd_gumbel" else rng.random(pos.shape)
        accept = u < acceptance_ratio(d, qw, p)  # u_j < min(1, p_j(d_j) / q_j(d_j))
        reject = valid & ~accept
        width = valid.sum(axis=1)
        first = np.where(reject.any(axis=1), np.argmax(reject, axis=1), width)  # first rejection m
        committed = np.minimum(first + 1, width)
        at_first = reject & (rel == first[:, None])
        later = valid & (rel > first[:, None])  # drafts made stale by the rejection: redraft
        # positions that take a residual draw: the first rejection, and for the maximal coupling
        # (SJD without its break) every later position whose draft fails the same test
        coupled = method in ("scd_maximal", "scd_stale", "scd_redrawn")
        need = at_first | (later & ~accept) if coupled else at_first
        new_tok = d.copy()
        if need.any():
            residual = residual_distribution(p[need], qw[need])  # norm(max(0, p_k - q_k))
            if method == "scd_gumbel":
                r_rows = np.broadcast_to(active[:, None], pos.shape)[need]
                new_tok[need] = gumbel_argmax(residual, noise.residual_gumbel[r_rows, pos_c[need]])
            else:
                new_tok[need] = categorical(residual, rng)
        if later.any():
            if method == "sjd":
                new_tok[later] = categorical(p[later], rng)
            elif method == "scd_gumbel":
                r_rows = np.broadcast_to(active[:, None], pos.shape)[later]
                new_tok[later] = gumbel_argmax(p[later], noise.draft_gumbel[r_rows, pos_c[later]])
            # the new draft distribution is p_k (the stale control keeps q_k for a kept draft)
            keep_old_q = later & accept if method == "scd_stale" else np.zeros_like(later)
            fresh = later & ~keep_old_q
            q[np.broadcast_to(active[:, None], pos.shape)[fresh], pos[fresh]] = p[fresh]
        changed = at_first | later
        tokens[np.broadcast_to(active[:, None], pos.shape)[changed], P + pos[changed]] = new_tok[changed]
        old_end = n[active] + width
        n[active] += committed
        nfe[active] += 1
        step = np.zeros(B, dtype=np.int64)
        step[active] = committed
        history.append(step)
        initialise(active, old_end)
    return Decoded(tokens[:, P:], nfe, np.stack(history, axis=1))


def decode(probs_fn: ProbsFn, method: str, length: int, vocab: int, window: int,
           rng: np.random.Generator, **kwargs) -> Decoded:
    """``'ar'`` or one of :data:`METHODS`, with one signature."""
    if method == "ar":
        kwargs.pop("noise", None)
        return autoregressive_decode(probs_fn, length, rng, **kwargs)
    return jacobi_decode(probs_fn, length, vocab, window, method, rng, **kwargs)
