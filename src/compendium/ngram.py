"""Exact targets (n-gram Markov chains) and the statistics used to test losslessness.

Shared by the speculative-decoding chapters (speculative_coupled_decoding, online_spec): an
exact target makes the distribution of emitted tokens known, so a sampler's losslessness is a
goodness-of-fit test against it.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import scipy.stats

from .stats import holm as _stats_holm


@dataclass(frozen=True)
class NGramModel:
    """An order-``k`` Markov chain over ``V`` tokens with a begin-of-sequence state.

    ``table[c_1, ..., c_k]`` is the next-token distribution after the context ``c_1 .. c_k``
    (oldest first); index ``V`` stands for "before the start". Shape ``(V+1,)*k + (V,)``.
    """

    table: np.ndarray

    def __post_init__(self) -> None:
        t = np.asarray(self.table, dtype=float)
        if t.ndim < 2 or any(s != t.shape[-1] + 1 for s in t.shape[:-1]):
            raise ValueError(f"an n-gram table has shape (V+1,)*k + (V,), got {t.shape}")
        if np.any(t < 0) or not np.allclose(t.sum(-1), 1.0):
            raise ValueError("every row of the table must be a probability distribution")
        object.__setattr__(self, "table", t)

    @property
    def vocab(self) -> int:
        return self.table.shape[-1]

    @property
    def order(self) -> int:
        return self.table.ndim - 1

    def __call__(self, tokens: np.ndarray, positions: np.ndarray) -> np.ndarray:
        """Next-token distributions at ``positions`` (R, W) given ``tokens`` (R, S) -> (R, W, V)."""
        k, V = self.order, self.vocab
        padded = np.concatenate([np.full((tokens.shape[0], k), V), tokens], axis=1)
        rows = np.arange(tokens.shape[0])[:, None]
        flat = np.zeros(positions.shape, dtype=np.int64)
        for j in range(k):  # context token positions - k + j sits at padded index positions + j
            flat = flat * (V + 1) + padded[rows, positions + j]
        return self.table.reshape(-1, V)[flat]


def random_ngram(vocab: int, order: int, alpha: float, rng: np.random.Generator) -> NGramModel:
    """Transition rows drawn i.i.d. from ``Dirichlet(alpha, ..., alpha)``."""
    if vocab < 2 or order < 1 or alpha <= 0:
        raise ValueError(f"need vocab >= 2, order >= 1, alpha > 0; got {vocab}, {order}, {alpha}")
    rows = rng.dirichlet(np.full(vocab, float(alpha)), size=(vocab + 1) ** order)
    return NGramModel(rows.reshape((vocab + 1,) * order + (vocab,)))


def all_sequences(vocab: int, length: int) -> np.ndarray:
    """Every sequence in lexicographic order, shape ``(V**T, T)``; row ``i`` encodes ``i`` in base V."""
    if vocab**length > 2_000_000:
        raise ValueError(f"{vocab}**{length} sequences are too many to enumerate")
    return np.array(list(itertools.product(range(vocab), repeat=length)), dtype=np.int64).reshape(-1, length)


def sequence_probabilities(model, vocab: int, length: int) -> np.ndarray:
    """Exact probability of every sequence of :func:`all_sequences` under ``model``, ``(V**T,)``."""
    seqs = all_sequences(vocab, length)
    p = model(seqs, np.broadcast_to(np.arange(length), seqs.shape))  # (N, T, V)
    return np.take_along_axis(p, seqs[..., None], axis=-1)[..., 0].prod(axis=1)


def sequence_index(tokens: np.ndarray, vocab: int) -> np.ndarray:
    """Row index of each sequence in :func:`all_sequences` (base-V number), shape ``(B,)``."""
    weights = vocab ** np.arange(tokens.shape[1] - 1, -1, -1)
    return tokens @ weights


def pooled_chisquare(counts: np.ndarray, probs: np.ndarray, min_expected: float = 5.0) -> tuple[float, int, float]:
    """Pearson goodness-of-fit with cells of expectation ``< min_expected`` pooled into one.

    Returns
    -------
    statistic, degrees of freedom, p-value
    """
    counts = np.asarray(counts, dtype=float)
    probs = np.asarray(probs, dtype=float)
    if counts.shape != probs.shape or counts.ndim != 1:
        raise ValueError(f"counts and probs must be 1-D of one shape, got {counts.shape}, {probs.shape}")
    if not np.isclose(probs.sum(), 1.0):
        raise ValueError(f"probs must sum to 1, got {probs.sum()}")
    expected = counts.sum() * probs
    small = expected < min_expected
    obs, exp = list(counts[~small]), list(expected[~small])
    if small.any():
        pooled_o, pooled_e = counts[small].sum(), expected[small].sum()
        if pooled_e < min_expected and exp:  # still too small: add it to the smallest big cell
            i = int(np.argmin(exp))
            obs[i] += pooled_o
            exp[i] += pooled_e
        else:
            obs.append(pooled_o)
            exp.append(pooled_e)
    obs_a, exp_a = np.array(obs), np.array(exp)
    dof = obs_a.size - 1
    if dof < 1:
        return 0.0, 0, 1.0
    stat = float(((obs_a - exp_a) ** 2 / exp_a).sum())
    return stat, dof, float(scipy.stats.chi2.sf(stat, dof))


def homogeneity_test(counts_a: np.ndarray, counts_b: np.ndarray, min_expected: float = 5.0) -> float:
    """p-value of the chi-square test that two samples share one categorical distribution.

    Categories whose expected count is below ``min_expected`` in either sample are pooled.
    """
    a, b = np.asarray(counts_a, dtype=float), np.asarray(counts_b, dtype=float)
    col = a + b
    keep = col > 0
    a, b, col = a[keep], b[keep], col[keep]
    na, nb = a.sum(), b.sum()
    if na == 0 or nb == 0:
        raise ValueError("both samples need at least one observation")
    small = np.minimum(col * na, col * nb) / (na + nb) < min_expected
    ta, tb = list(a[~small]), list(b[~small])
    if small.any():
        sa, sb = a[small].sum(), b[small].sum()
        if (sa + sb) * min(na, nb) / (na + nb) < min_expected and ta:  # still too small: merge
            i = int(np.argmin(np.array(ta) + np.array(tb)))
            ta[i] += sa
            tb[i] += sb
        else:
            ta.append(sa)
            tb.append(sb)
    if len(ta) < 2:
        return 1.0
    table = np.array([ta, tb])
    return float(scipy.stats.chi2_contingency(table, correction=False)[1])


# Holm's step-down adjustment lives in compendium.stats (one copy for the book); re-exported here.
holm = _stats_holm
