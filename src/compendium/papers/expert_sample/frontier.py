"""Shared-prefill decoding, exact pass@k from teacher forcing, and the statistics behind the verdicts.

**Shared prefill.** A served system encodes the prompt once and shares that prefill among the
``n`` samples of a problem; Expert-Sample's routing noise then acts on the generated tokens only.
:func:`prefill` runs the prompt once per problem with standard routing and keeps each layer's keys
and values; :func:`suffix_logits` runs answer tokens on top of that cache with any routing policy
(noise per sample, layer and answer position). The two together equal a full forward pass whose
routing noise is zero at the prompt positions (tested), at a fraction of the cost.

**Exact pass@k.** With standard routing a sample is correct with probability
``p = prod_t softmax(l_t / T)[target_t]`` along the teacher-forced target (greedy: the product of
``argmax = target`` indicators), so ``pass@k = 1 - (1 - p)^k`` exactly, for every token temperature
from one forward pass. With routing noise, ``p_r`` is that product under noise draw ``r`` and
samples are independent, so ``pass@k = 1 - (1 - E p_r)^k``; :func:`pass_at_k_draws` estimates it
without bias from ``R >= k`` draws (a U-statistic over ``k``-subsets of draws).

**Statistics.** Problems are crossed with trained models, so intervals come from a two-way
bootstrap that resamples both (:func:`compendium.stats.crossed_bootstrap`); frontier gaps compare a point with the
straight line between the two *neighbouring sampled* points of a reference curve that bracket its
pass@1 (:func:`bracket`, :func:`frontier_gap_estimates`), never across an unsampled stretch.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from ...stats import Estimate, crossed_bootstrap
from .model import ANSWER_LEN, EQUALS, PROMPT_LEN, TinyMoELM, answer_code
from .sampling import RoutingPolicy, make_router

CROSSED_UNIT = "trained models (crossed with test problems)"


def _attention(block, x, cache_kv, group):
    """Attention of suffix rows ``x`` (P * group, s, d) over their prompt's cached keys/values and
    their own suffix (row ``i`` belongs to prompt ``i // group``; no copy of the cache per row)."""
    b, s, d = x.shape
    nh, hs = block.heads, d // block.heads
    q, k, v = block.qkv(block.ln1(x)).view(b, s, 3, nh, hs).permute(2, 0, 3, 1, 4)   # (B, nh, s, hs)
    pk, pv = cache_kv                                                                # (P, nh, t, hs)
    P, t = pk.shape[0], pk.shape[2]
    scale = 1.0 / math.sqrt(hs)
    qg = q.reshape(P, group, nh, s, hs)
    prompt_scores = torch.einsum("pghsd,phtd->pghst", qg, pk).reshape(b, nh, s, t)
    own = q @ k.transpose(-1, -2)                                                    # (B, nh, s, s)
    own = own.masked_fill(~torch.ones(s, s, dtype=torch.bool).tril(), float("-inf"))
    att = torch.softmax(torch.cat([prompt_scores, own], -1) * scale, -1)
    out = torch.einsum("pghst,phtd->pghsd", att[..., :t].reshape(P, group, nh, s, t), pv).reshape(b, nh, s, hs)
    out = out + att[..., t:] @ v
    return x + block.proj(out.transpose(1, 2).reshape(b, s, d))


@torch.no_grad()
def prefill(model: TinyMoELM, prompts: np.ndarray):
    """Run the prompts once with standard routing.

    Returns ``(logits (P, V) at the last prompt position, cache)`` where ``cache`` holds each
    layer's keys and values of the prompt positions, (P, heads, PROMPT_LEN, head size) each.
    """
    tokens = torch.as_tensor(np.asarray(prompts)[:, :PROMPT_LEN])
    route = make_router(RoutingPolicy.top_k(model.config.experts_per_token, model.config.num_experts), None)
    x = model.embeddings(tokens)
    cache = []
    for layer, block in enumerate(model.blocks):
        b, s, d = x.shape
        q, k, v = block.qkv(block.ln1(x)).view(b, s, 3, block.heads, d // block.heads).permute(2, 0, 3, 1, 4)
        cache.append((k, v))
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + block.proj(att.transpose(1, 2).reshape(b, s, d))
        y, _ = block.moe(block.ln2(x), route, layer)
        x = x + y
    return model.head(model.ln(x))[:, -1], cache


@torch.no_grad()
def suffix_logits(model: TinyMoELM, cache, group: int, suffix: torch.Tensor, policy: RoutingPolicy,
                  noise: torch.Tensor | None):
    """Next-token logits at the answer positions fed with ``suffix`` on top of the prompt cache.

    Row ``i`` of suffix (P * group, s) continues prompt ``i // group`` of :func:`prefill`, with its answer tokens at positions
    ``PROMPT_LEN .. PROMPT_LEN + s - 1``; noise (L, B, >= s, E) routing noise of those positions.
    Returns (B, s, V).
    """
    s = suffix.shape[1]
    x = model.embed(suffix) + model.pos[PROMPT_LEN:PROMPT_LEN + s]
    route = make_router(policy, noise)
    for layer, block in enumerate(model.blocks):
        x = _attention(block, x, cache[layer], group)
        y, _ = block.moe(block.ln2(x), route, layer)
        x = x + y
    return model.head(model.ln(x))


def _noise(model: TinyMoELM, batch: int, policy: RoutingPolicy, generator: torch.Generator):
    if not policy.stochastic:
        return None
    from ...kernels.routing import gumbel_noise

    cfg = model.config
    return gumbel_noise((cfg.num_layers, batch, ANSWER_LEN - 1, cfg.num_experts), generator)


@torch.no_grad()
def sample_answers_shared(model: TinyMoELM, prompts: np.ndarray, n: int, policy: RoutingPolicy,
                          token_temperature: float, generator: torch.Generator, prefilled=None) -> np.ndarray:
    """``n`` answers per prompt with a shared prefill; (P, n) answer codes (greedy when T = 0).

    ``prefilled``: the output of :func:`prefill` for these prompts, when the caller already has it
    (the prefill uses standard routing, so one serves every policy)."""
    if token_temperature < 0:
        raise ValueError(f"token_temperature must be >= 0, got {token_temperature}")
    first, cache = prefilled if prefilled is not None else prefill(model, prompts)
    P = len(first)
    rows = torch.arange(P).repeat_interleave(n)
    noise = _noise(model, P * n, policy, generator)

    def draw(logits):
        logits = logits[:, :EQUALS]
        if token_temperature == 0:
            return logits.argmax(-1)
        return torch.multinomial(torch.softmax(logits / token_temperature, -1), 1, generator=generator)[:, 0]

    digits = [draw(first[rows])]
    for j in range(1, ANSWER_LEN):
        out = suffix_logits(model, cache, n, torch.stack(digits, 1), policy, noise)
        digits.append(draw(out[:, -1]))
    return answer_code(torch.stack(digits, 1).numpy()).reshape(P, n)


@torch.no_grad()
def target_logits(model: TinyMoELM, seq: np.ndarray, policy: RoutingPolicy, draws: int,
                  generator: torch.Generator, prefilled=None) -> torch.Tensor:
    """Teacher-forced answer-digit logits (draws, P, ANSWER_LEN, 10) along the correct answers.

    Deterministic policies give one draw whatever ``draws`` is; ``prefilled`` as in
    :func:`sample_answers_shared`.
    """
    seq = np.asarray(seq)
    first, cache = prefilled if prefilled is not None else prefill(model, seq)
    P = len(seq)
    R = draws if policy.stochastic else 1
    rows = torch.arange(P).repeat_interleave(R)                               # row p * R + r: problem p, draw r
    suffix = torch.as_tensor(seq[:, PROMPT_LEN:PROMPT_LEN + ANSWER_LEN - 1]).repeat_interleave(R, 0)
    out = suffix_logits(model, cache, R, suffix, policy, _noise(model, P * R, policy, generator))
    logits = torch.cat([first[rows][:, None], out], 1)[..., :EQUALS]          # (P R, 3, 10)
    return logits.view(P, R, ANSWER_LEN, EQUALS).transpose(0, 1)


@torch.no_grad()
def target_logits_unshared(model: TinyMoELM, seq: np.ndarray, policy: RoutingPolicy, draws: int,
                           generator: torch.Generator, chunk: int = 4096) -> torch.Tensor:
    """Teacher-forced answer-digit logits (draws, P, ANSWER_LEN, 10) with routing noise at *every*
    position, prompt included: each draw encodes its prompt with its own routing (no shared
    prefill), so the noise reaches all ``ANSWER_LEN`` answer digits, the first one too.

    The headline's positive control: the same policy as :func:`target_logits`, but with the noise
    that the shared prefill keeps away from the prompt. Deterministic policies give one draw.
    """
    seq = np.asarray(seq)
    P, cfg = len(seq), model.config
    R = draws if policy.stochastic else 1
    S = PROMPT_LEN + ANSWER_LEN - 1
    x = torch.as_tensor(seq[:, :S]).repeat_interleave(R, 0)                      # row p * R + r
    noise = None
    if policy.stochastic:
        from ...kernels.routing import gumbel_noise

        noise = gumbel_noise((cfg.num_layers, P * R, S, cfg.num_experts), generator)
    out = []
    for lo in range(0, P * R, chunk):
        logits, _ = model(x[lo:lo + chunk], make_router(policy, None if noise is None else noise[:, lo:lo + chunk]))
        out.append(logits[:, PROMPT_LEN - 1:, :EQUALS])
    return torch.cat(out).view(P, R, ANSWER_LEN, EQUALS).transpose(0, 1)


@torch.no_grad()
def answer_loglik_shared(model: TinyMoELM, prompts: np.ndarray, answers: np.ndarray, prefilled=None) -> np.ndarray:
    """Log-likelihood (P, n) of sampled answers under standard routing, with one prefill per problem
    (the same numbers as :func:`.sampling.answer_loglik`, computed without re-running the prompt);
    ``prefilled`` as in :func:`sample_answers_shared`."""
    P, n = answers.shape
    first, cache = prefilled if prefilled is not None else prefill(model, prompts)
    rows = torch.arange(P).repeat_interleave(n)
    codes = answers.reshape(-1)
    digits = torch.as_tensor(np.stack([codes % 10, (codes // 10) % 10, codes // 100], axis=-1))
    topk = RoutingPolicy.top_k(model.config.experts_per_token, model.config.num_experts)
    out = suffix_logits(model, cache, n, digits[:, :ANSWER_LEN - 1], topk, None)
    logits = torch.cat([first[rows][:, None], out], 1)                       # (P n, 3, V)
    logp = torch.log_softmax(logits, -1).gather(-1, digits[..., None])[..., 0].sum(-1)
    return logp.numpy().reshape(P, n)


def correct_probability(logits: torch.Tensor, seq: np.ndarray, temperature: float) -> np.ndarray:
    """Probability (draws, P) that a sample at token temperature ``temperature`` is the correct answer."""
    target = torch.as_tensor(np.asarray(seq)[:, PROMPT_LEN:PROMPT_LEN + ANSWER_LEN])   # (P, 3)
    if temperature == 0:
        hit = logits.argmax(-1) == target                                        # first max on ties
        return hit.all(-1).double().numpy()
    logp = torch.log_softmax(logits.double() / temperature, -1)
    return logp.gather(-1, target.expand(logits.shape[0], -1, -1)[..., None])[..., 0].sum(-1).exp().numpy()


def pass_at_k_draws(p: np.ndarray, k: int) -> np.ndarray:
    """Unbiased ``1 - (1 - E p)^k`` per problem from draws p (R, P) of the success probability.

    With one draw (a deterministic policy) this is exact. With ``R >= k`` independent draws it is
    ``1 - e_k(1 - p_1, ..., 1 - p_R) / C(R, k)``, the U-statistic of ``prod_{j<=k} (1 - p_{r_j})``
    over ``k``-subsets of distinct draws, whose mean is ``(1 - E p)^k``.
    """
    p = np.atleast_2d(np.asarray(p, dtype=float))
    R = p.shape[0]
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if R == 1:
        return 1.0 - (1.0 - p[0]) ** k
    if R < k:
        raise ValueError(f"need at least k = {k} routing draws for an unbiased pass@{k}, got {R}")
    q = 1.0 - p
    e = np.zeros((k + 1, p.shape[1]))
    e[0] = 1.0
    for r in range(R):  # elementary symmetric polynomials, e_j += q_r e_{j-1}
        e[1:] = e[1:] + q[r] * e[:-1]
    return 1.0 - e[k] / math.comb(R, k)


def bracket(x: float, curve_x) -> tuple[int, int] | None:
    """Indices (i, j) of two neighbouring points of a curve whose x values bracket ``x``.

    The curve is given in its sampling order (e.g. increasing temperature); the pair is adjacent in
    that order, so a comparison never spans an unsampled stretch. None when ``x`` is outside.
    """
    xs = list(curve_x)
    for i in range(len(xs) - 1):
        lo, hi = min(xs[i], xs[i + 1]), max(xs[i], xs[i + 1])
        if lo <= x <= hi:
            return i, i + 1
    return None


def neighbour_gap(y: float, a: tuple[float, float], b: tuple[float, float]) -> float:
    """``y - max(y_a, y_b)``: how far a point rises above *both* sampled neighbours that bracket its
    x. A positive value puts it above the straight line between them whatever the line's slope, so
    the comparison needs no interpolation across an unsampled stretch."""
    return y - np.maximum(a[1], b[1])


def frontier_gap_estimates(points: dict, curve: list, per_problem: dict, *, rng, resamples: int = 2000,
                           level: float = 0.95, x: str = "pass1", y: str = "pass4") -> dict:
    """Gap in ``y`` between each point and the two neighbouring curve points that bracket its ``x``.

    The bracketing pair is chosen on the point estimates and held fixed in the bootstrap; the gap
    is :func:`neighbour_gap` (above both neighbours).

    Parameters
    ----------
    points : dict name -> (x, y) means, the candidates (Expert-Sample settings).
    curve : list of names, the reference curve in sampling order (top-k by temperature).
    per_problem : dict name -> {x: (M, P), y: (M, P)} for every point and curve name (points).
    Returns {name: (Estimate, (left, right))} for the points whose x the curve brackets; each
    interval has level ``1 - (1 - level) / len(points)`` (Bonferroni over all candidate points).
    """
    each = 1 - (1 - level) / max(1, len(points))
    curve_x = [float(np.mean(per_problem[c][x])) for c in curve]
    out = {}
    for j, (name, (px, _)) in enumerate(points.items()):
        pair = bracket(px, curve_x)
        if pair is None:
            continue
        left, right = curve[pair[0]], curve[pair[1]]
        arrays = {"x": per_problem[name][x], "y": per_problem[name][y], "lx": per_problem[left][x],
                  "ly": per_problem[left][y], "rx": per_problem[right][x], "ry": per_problem[right][y]}
        est = crossed_bootstrap(arrays, lambda m: neighbour_gap(m["y"], (m["lx"], m["ly"]), (m["rx"], m["ry"])),
                                unit=CROSSED_UNIT, rng=np.random.default_rng([int(rng), j]), resamples=resamples,
                                level=each)
        out[name] = (est, (left, right))
    return out


def largest_estimate(estimates: list[Estimate], level: float) -> Estimate | None:
    """Interval for ``max_i theta_i`` from simultaneous intervals: ``[max l_i, max h_i]``."""
    if not estimates:
        return None
    first = estimates[0]
    return Estimate(max(e.point for e in estimates), max(e.low for e in estimates), max(e.high for e in estimates),
                    level, first.unit, first.n, f"largest of {len(estimates)} Bonferroni intervals; {first.method}")
