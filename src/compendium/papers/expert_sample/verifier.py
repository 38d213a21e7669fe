"""A verifier trained here: a small MLP over the problem and candidate-answer tokens.

Training data are answers sampled from an MoE on problems of the *train* split, labelled correct
or incorrect by exact checking (``candidate == a + b``). The verifier never sees the MoE's
internals or likelihoods: it reads the 4 operand digits and the 3 answer digits, one-hot
(7 x 10 = 70 inputs), and outputs a logit for "correct". Training is full-batch AdamW from an
explicit generator, so it is deterministic on one thread and touches no global RNG state.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from scipy.stats import rankdata

INPUT_DIGITS = 7  # a1 a0 b1 b0 s0 s1 s2


@dataclass(frozen=True)
class VerifierSettings:
    """Sizes and optimisation of :class:`Verifier` (sized for the smoke time budget)."""

    hidden: int = 64
    steps: int = 200
    learning_rate: float = 3e-3
    weight_decay: float = 1e-3


def verifier_features(prompts: np.ndarray, answers: np.ndarray) -> torch.Tensor:
    """One-hot tokens of (problem, candidate) pairs. prompts (P, >=4), answers (P, n) -> (P n, 70)."""
    prompts, answers = np.asarray(prompts), np.asarray(answers)
    if answers.ndim != 2 or prompts.shape[0] != answers.shape[0] or prompts.shape[1] < 4:
        raise ValueError(f"need prompts (P, >=4) and answers (P, n), got {prompts.shape} and {answers.shape}")
    p, n = answers.shape
    digits = np.stack([answers % 10, (answers // 10) % 10, answers // 100], axis=-1).reshape(p * n, 3)
    tokens = np.concatenate([np.repeat(prompts[:, :4], n, axis=0), digits], axis=1)   # (P n, 7)
    return F.one_hot(torch.as_tensor(tokens, dtype=torch.long), 10).reshape(p * n, INPUT_DIGITS * 10).float()


class Verifier(nn.Module):
    """Two-hidden-layer MLP: one-hot (problem, candidate) (N, 70) -> logit of "correct" (N,)."""

    def __init__(self, hidden: int, generator: torch.Generator):
        super().__init__()
        d = INPUT_DIGITS * 10
        self.w1 = nn.Parameter(torch.randn(d, hidden, generator=generator) / np.sqrt(d))
        self.b1 = nn.Parameter(torch.zeros(hidden))
        self.w2 = nn.Parameter(torch.randn(hidden, hidden, generator=generator) / np.sqrt(hidden))
        self.b2 = nn.Parameter(torch.zeros(hidden))
        self.w3 = nn.Parameter(torch.randn(hidden, generator=generator) / np.sqrt(hidden))
        self.b3 = nn.Parameter(torch.zeros(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.relu(x @ self.w1 + self.b1)
        h = F.relu(h @ self.w2 + self.b2)
        return h @ self.w3 + self.b3


def train_verifier(features: torch.Tensor, labels: np.ndarray, seed: int,
                   settings: VerifierSettings = VerifierSettings()) -> Verifier:
    """Fit a :class:`Verifier` by full-batch AdamW on logistic loss. features (N, 70), labels (N,) in {0, 1}."""
    labels = torch.as_tensor(np.asarray(labels), dtype=torch.float32)
    if features.ndim != 2 or len(features) != len(labels) or len(labels) == 0:
        raise ValueError(f"need features (N, 70) and labels (N,), got {tuple(features.shape)} and {tuple(labels.shape)}")
    # identical (candidate, label) rows are merged with their counts as weights: the same loss, fewer rows
    rows, counts = torch.unique(torch.cat([features, labels[:, None]], 1), dim=0, return_counts=True)
    x, y, w = rows[:, :-1], rows[:, -1], counts.float() / len(labels)
    model = Verifier(settings.hidden, torch.Generator().manual_seed(seed))
    opt = torch.optim.AdamW(model.parameters(), lr=settings.learning_rate, weight_decay=settings.weight_decay)
    for _ in range(settings.steps):
        loss = (w * F.binary_cross_entropy_with_logits(model(x), y, reduction="none")).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model.eval()


@torch.no_grad()
def verifier_scores(model: Verifier, prompts: np.ndarray, answers: np.ndarray) -> np.ndarray:
    """Logits of "correct" for each candidate. prompts (P, >=4), answers (P, n) -> (P, n)."""
    return model(verifier_features(prompts, answers)).numpy().reshape(answers.shape)


def auc(scores: np.ndarray, labels: np.ndarray) -> float:
    """Area under the ROC curve (Mann-Whitney, ties counted 1/2); NaN when one class is absent."""
    scores, labels = np.ravel(scores), np.ravel(labels).astype(bool)
    pos, neg = int(labels.sum()), int((~labels).sum())
    if pos == 0 or neg == 0:
        return float("nan")
    ranks = rankdata(scores)
    return float((ranks[labels].sum() - pos * (pos + 1) / 2) / (pos * neg))


def auc_bootstrap(scores: list[np.ndarray], labels: list[np.ndarray], seed: int, resamples: int = 500,
                  level: float = 0.95) -> tuple[float, float, float]:
    """Mean over models of the per-model AUC, with a bootstrap interval over *problems*.

    scores, labels: one (P, n) array per model, the same P problems in the same order (problems are
    resampled jointly across models, candidates of a problem stay together).
    """
    rng = np.random.default_rng(seed)
    p = scores[0].shape[0]
    point = float(np.mean([auc(s, y) for s, y in zip(scores, labels)]))
    boots = []
    with warnings.catch_warnings():  # a resample (or a model) with one class only gives NaN, not a warning
        warnings.simplefilter("ignore", RuntimeWarning)
        for _ in range(resamples):
            rows = rng.integers(0, p, p)
            boots.append(np.nanmean([auc(s[rows], y[rows]) for s, y in zip(scores, labels)]))
        lo, hi = np.nanquantile(boots, [(1 - level) / 2, (1 + level) / 2])
    return point, float(lo), float(hi)
