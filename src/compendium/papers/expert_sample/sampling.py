"""Routing policies, sampling with a routing hook, pass@k, Best-of-N and the router-shape probes."""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from itertools import combinations

import numpy as np
import torch

from compendium.kernels.routing import expert_sample_route, gumbel_noise

from .model import ANSWER_LEN, EQUALS, PROMPT_LEN, TinyMoELM, answer_code


@dataclass(frozen=True)
class RoutingPolicy:
    """Keep the top ``head`` experts, draw ``k - head`` from the next ``pool`` ranks at temperature ``tau``.

    Standard top-k: ``head = k`` (or ``tau = 0``); reduced-k: ``k = head``; noise on all experts:
    ``head = 0``, ``pool = E``.
    """

    k: int
    head: int
    pool: int
    tau: float

    @classmethod
    def top_k(cls, k: int, num_experts: int) -> "RoutingPolicy":
        return cls(k, k, num_experts - k, 0.0)

    @classmethod
    def expert_sample(cls, k: int, head: int, pool: int, tau: float) -> "RoutingPolicy":
        return cls(k, head, pool, tau)

    @classmethod
    def all_experts_noise(cls, k: int, num_experts: int, tau: float) -> "RoutingPolicy":
        return cls(k, 0, num_experts, tau)

    @property
    def stochastic(self) -> bool:
        return self.tau > 0 and self.head < self.k


def make_router(policy: RoutingPolicy, noise: torch.Tensor | None):
    """A routing hook for :class:`TinyMoELM`; ``noise`` (L, B, S_max, E) is fixed per position.

    Noise drawn once per (layer, sequence, position) makes re-running the prefix give the same
    routing, exactly as decoding with a KV cache would.
    """
    def route(logits, layer):
        s = logits.shape[1]
        g = noise[layer, :, :s] if noise is not None else torch.zeros_like(logits)
        return expert_sample_route(logits, g, policy.k, policy.head, policy.pool, policy.tau)
    return route


@torch.no_grad()
def sample_answers(model: TinyMoELM, prompts: np.ndarray, n: int, policy: RoutingPolicy,
                   token_temperature: float, generator: torch.Generator) -> np.ndarray:
    """Draw ``n`` answers per prompt. prompts (P, 5) -> answer codes (P, n).

    ``token_temperature = 0`` is greedy decoding; routing randomness comes from ``policy``.
    """
    if token_temperature < 0:
        raise ValueError(f"token_temperature must be >= 0, got {token_temperature}")
    tokens = torch.as_tensor(prompts).repeat_interleave(n, dim=0)                  # (P n, 5)
    cfg = model.config
    noise = None
    if policy.stochastic:
        noise = gumbel_noise((cfg.num_layers, len(tokens), PROMPT_LEN + ANSWER_LEN, cfg.num_experts), generator)
    route = make_router(policy, noise)
    for _ in range(ANSWER_LEN):
        logits, _ = model(tokens, route)
        last = logits[:, -1, :EQUALS]                                              # answers are digits only
        if token_temperature == 0:
            nxt = last.argmax(-1, keepdim=True)
        else:
            nxt = torch.multinomial(torch.softmax(last / token_temperature, -1), 1, generator=generator)
        tokens = torch.cat([tokens, nxt], dim=1)
    return answer_code(tokens[:, PROMPT_LEN:].numpy()).reshape(len(prompts), n)


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from ``c`` correct of ``n`` samples: ``1 - C(n-c, k) / C(n, k)`` (product form)."""
    if not (0 <= c <= n and 1 <= k <= n):
        raise ValueError(f"need 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - float(np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


def pass_at_k_brute_force(correct: list[bool], k: int) -> Fraction:
    """The same quantity by enumeration: the fraction of k-subsets holding a correct sample."""
    subsets = list(combinations(range(len(correct)), k))
    return Fraction(sum(any(correct[i] for i in s) for s in subsets), len(subsets))


def distinct_rate(answers: np.ndarray) -> float:
    """Mean number of distinct answers per problem divided by ``n``."""
    return float(np.mean([len(np.unique(row)) for row in answers]) / answers.shape[1])


@torch.no_grad()
def answer_loglik(model: TinyMoELM, prompts: np.ndarray, answers: np.ndarray) -> np.ndarray:
    """Verifier score: log-likelihood of each answer under standard routing. (P, n) -> (P, n)."""
    p, n = answers.shape
    digits = np.stack([answers % 10, (answers // 10) % 10, answers // 100], axis=-1).reshape(p * n, ANSWER_LEN)
    seq = torch.as_tensor(np.concatenate([np.repeat(prompts, n, axis=0), digits], axis=1))
    logits, _ = model(seq[:, :-1])
    logp = torch.log_softmax(logits[:, PROMPT_LEN - 1:], -1).gather(-1, seq[:, PROMPT_LEN:, None])
    return logp.sum((1, 2)).numpy().reshape(p, n)


def best_of_n(answers: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """The highest-scoring answer per problem (first on ties). (P, n) -> (P,)."""
    return answers[np.arange(len(answers)), scores.argmax(1)]


def majority_vote(answers: np.ndarray) -> np.ndarray:
    """The most frequent answer per problem (smallest answer on ties). (P, n) -> (P,)."""
    out = np.empty(len(answers), dtype=answers.dtype)
    for i, row in enumerate(answers):
        values, counts = np.unique(row, return_counts=True)
        out[i] = values[counts.argmax()]
    return out


@torch.no_grad()
def router_profile(model: TinyMoELM, seq: np.ndarray, head: int, perturbation_scale: float,
                   generator: torch.Generator) -> dict:
    """Router shape: mean sorted probabilities and head/tail set stability under input noise.

    Returns ``profile`` (E,) (mean over tokens and layers of the sorted router probabilities),
    ``head_jaccard`` and ``tail_jaccard`` (mean Jaccard index between clean and perturbed top-``head``
    sets and between the rank ``head+1..k`` sets). The noise is Gaussian with standard deviation
    ``perturbation_scale`` times the RMS of the input embeddings.
    """
    tokens = torch.as_tensor(seq[:, :-1])
    clean, noisy = [], []
    model(tokens, capture=clean)
    emb = model.embeddings(tokens)
    noise = torch.randn(emb.shape, generator=generator) * perturbation_scale * emb.pow(2).mean().sqrt()
    model(tokens, embed_noise=noise, capture=noisy)
    k = model.config.experts_per_token
    probs = torch.softmax(torch.stack(clean), -1)                                 # (L, B, S, E)
    profile = probs.sort(-1, descending=True).values.mean((0, 1, 2)).numpy()

    def sets(logits, lo, hi):
        idx = torch.sort(logits, dim=-1, descending=True, stable=True).indices[..., lo:hi]
        return torch.zeros_like(logits, dtype=torch.bool).scatter(-1, idx, True)

    def jaccard(a, b):
        return float(((a & b).sum(-1).float() / (a | b).sum(-1).float()).mean())

    c, z = torch.stack(clean), torch.stack(noisy)
    return {"profile": profile,
            "head_jaccard": jaccard(sets(c, 0, head), sets(z, 0, head)),
            "tail_jaccard": jaccard(sets(c, head, k), sets(z, head, k))}
