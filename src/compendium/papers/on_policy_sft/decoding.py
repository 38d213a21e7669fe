r"""Sampling from the LM with explicit uniforms, and Hinted Decoding.

Every sampler here draws token ``t`` of row ``b`` from one pre-drawn uniform ``u[b, t]`` by
inverse-CDF sampling over the (temperature-scaled, nucleus-truncated) distribution, so two samplers
handed the same uniforms and the same distributions emit the same tokens; this is what the
limit checks of Hinted Decoding compare.

Hinted Decoding (as released): two streams of one model, the *hinted* stream ``p`` (the prompt
carries the answer) and the *plain* stream ``q`` (the bare question), fed the same generated
tokens. At each step::

    lambda = clamp(beta * H(p) / log|V|, 0, 1),   logits = (1 - lambda) log p + lambda log q

The first token comes from ``p`` (lambda = 0) and after the answer marker only ``q`` decodes
(lambda = 1). ``beta = 0`` is hinted-only sampling before the marker.
"""

from __future__ import annotations

import math

import numpy as np
import torch


def _forward(model, ids: torch.Tensor, cache=None):
    out = model(input_ids=ids, cache=cache, use_cache=True)  # transformers 5: the KV cache is ``cache``
    return out.logits[:, -1].double(), out.cache


def sample_token(logprobs: torch.Tensor, uniforms: torch.Tensor, temperature: float = 1.0, top_p: float = 1.0) -> torch.Tensor:
    """Inverse-CDF draw from ``softmax(logprobs / T)`` truncated to its top-p nucleus.

    Parameters
    ----------
    logprobs : tensor (B, V), float64 log-probabilities (or logits)
    uniforms : tensor (B,), in [0, 1)
    temperature : float; 0 means greedy (argmax, ``uniforms`` unused)
    top_p : float in (0, 1]
    """
    if temperature < 0 or not 0 < top_p <= 1:
        raise ValueError("need temperature >= 0 and top_p in (0, 1]")
    if temperature == 0:
        return logprobs.argmax(-1)
    probs = torch.softmax(logprobs / temperature, -1)
    sorted_p, order = torch.sort(probs, stable=True, dim=-1, descending=True)
    keep = (torch.cumsum(sorted_p, -1) - sorted_p) < top_p       # the smallest prefix reaching top_p
    sorted_p = sorted_p * keep
    cdf = torch.cumsum(sorted_p, -1)
    pick = torch.searchsorted(cdf, (uniforms.to(cdf.dtype) * cdf[:, -1])[:, None], right=True)[:, 0]
    pick = torch.minimum(pick, keep.sum(-1) - 1)
    return order.gather(-1, pick[:, None])[:, 0]


@torch.no_grad()
def generate(model, prompts: np.ndarray, steps: int, *, uniforms: np.ndarray | None = None,
             temperature: float = 1.0, top_p: float = 1.0) -> np.ndarray:
    """Sample ``steps`` tokens after each prompt row (one prompt length per call); ``(B, steps)``.

    ``uniforms (B, steps)`` drive the draws (ignored when ``temperature == 0``: greedy).
    """
    model.eval()
    ids = torch.as_tensor(prompts)
    B = ids.shape[0]
    u = torch.zeros(B, steps, dtype=torch.float64) if uniforms is None else torch.as_tensor(uniforms, dtype=torch.float64)
    logits, cache = _forward(model, ids)
    out = []
    for t in range(steps):
        tok = sample_token(torch.log_softmax(logits, -1), u[:, t], temperature, top_p)
        out.append(tok)
        if t + 1 < steps:
            logits, cache = _forward(model, tok[:, None], cache)
    return torch.stack(out, 1).numpy()


def hinted_lambda(logp: torch.Tensor, beta: float) -> torch.Tensor:
    """``clamp(beta * H(p) / log V, 0, 1)`` per row of log-probabilities ``logp (B, V)``."""
    ent = -(logp.exp() * logp).sum(-1)
    return torch.clamp(beta * ent / math.log(logp.shape[-1]), 0.0, 1.0)


def hinted_mix(logp: torch.Tensor, logq: torch.Tensor, lam: torch.Tensor) -> torch.Tensor:
    """``(1 - lambda) log p + lambda log q``, ``lam (B,)``."""
    lam = lam[:, None]
    return (1.0 - lam) * logp + lam * logq


@torch.no_grad()
def hinted_generate(model, hinted_prompts: np.ndarray, plain_prompts: np.ndarray, steps: int, *, beta: float,
                    marker: int, uniforms: np.ndarray, temperature: float = 0.3, top_p: float = 0.95,
                    force_lambda: float | None = None, switch_at_marker: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Hinted Decoding: ``(tokens (B, steps), lambdas (B, steps))``.

    ``force_lambda`` replaces every lambda (1: plain sampling); ``switch_at_marker=False`` turns off
    the "only q after the marker" rule (for the beta = 0 limit check).
    """
    if beta < 0:
        raise ValueError("beta must be >= 0")
    if len(hinted_prompts) != len(plain_prompts):
        raise ValueError("need one hinted and one plain prompt per row")
    model.eval()
    B = len(plain_prompts)
    u = torch.as_tensor(uniforms, dtype=torch.float64)
    p_logits, p_cache = _forward(model, torch.as_tensor(hinted_prompts))
    q_logits, q_cache = _forward(model, torch.as_tensor(plain_prompts))
    after = torch.zeros(B, dtype=torch.bool)
    toks, lams = [], []
    for t in range(steps):
        logp, logq = torch.log_softmax(p_logits, -1), torch.log_softmax(q_logits, -1)
        lam = torch.zeros(B, dtype=torch.float64) if t == 0 else hinted_lambda(logp, beta)
        if force_lambda is not None:
            lam = torch.full((B,), float(force_lambda), dtype=torch.float64)
        if switch_at_marker:
            lam = torch.where(after, torch.ones_like(lam), lam)
        tok = sample_token(hinted_mix(logp, logq, lam), u[:, t], temperature, top_p)
        after |= tok == marker
        toks.append(tok)
        lams.append(lam)
        if t + 1 < steps:
            p_logits, p_cache = _forward(model, tok[:, None], p_cache)
            q_logits, q_cache = _forward(model, tok[:, None], q_cache)
    return torch.stack(toks, 1).numpy(), torch.stack(lams, 1).numpy()
