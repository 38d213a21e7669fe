"""The chapter's experiments: losslessness, the coupling identity, speed on Markov chains and
on the digits transformer. :func:`run` returns data and metrics and never plots."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import scipy.stats

from ...runtime import make_rng
from ...stats import Estimate, holm, mean_interval, paired_difference
from ...speculative import categorical, maximal_coupling, total_variation
from .decoding import NoiseTable, decode, gumbel_agreement, gumbel_coupling
from ...ngram import (all_sequences, homogeneity_test, pooled_chisquare, random_ngram, sequence_index,
                      sequence_probabilities)

# lossless check: an order-2 chain over 3 tokens, 5 tokens long (243 sequences), window 3
LOSSLESS_VOCAB, LOSSLESS_ORDER, LOSSLESS_LENGTH, LOSSLESS_WINDOW, LOSSLESS_ALPHA = 3, 2, 5, 3, 1.0
LOSSLESS_SAMPLERS = ("ar", "sjd", "scd_maximal", "scd_gumbel", "scd_stale")
# coupling identity: (Dirichlet alpha, mixing weight lam) with q = (1 - lam) p + lam r, V = 8
COUPLING_VOCAB = 8
COUPLING_PAIRS = ((0.5, 0.1), (0.5, 0.3), (0.5, 0.6), (0.5, 1.0), (2.0, 1.0), (0.2, 1.0))
# speed on first-order Markov chains: (vocabulary, Dirichlet alpha)
MARKOV_SETTINGS = ((16, 1.0), (16, 0.1), (64, 0.3))
SPEED_METHODS = ("sjd", "scd_maximal", "scd_gumbel", "scd_redrawn")  # scd_redrawn: the speed control
# speed control: SCD-maximal with its drafts redrawn from their stored law before every pass has
# SJD's law, so its tokens per pass must match SJD's: ratio within 1 +- PLACEBO_RATIO_MARGIN on the
# chains, paired difference within +- PLACEBO_DIGITS_MARGIN tokens per pass on the transformer
PLACEBO_RATIO_MARGIN, PLACEBO_DIGITS_MARGIN = 0.10, 0.15
# digits transformer: prompt = class token + the first pixel row
PROMPT_PIXELS = 8
LM_METHODS = ("ar", "sjd", "scd_maximal", "scd_gumbel", "scd_redrawn")
# samplers scored by the whole-sequence likelihood test on the transformer (stale-q: the control)
REPLAY_ROWS = 64  # sequences re-decoded for the Gumbel determinism check on the transformer
LM_TESTED = ("ar", "sjd", "scd_maximal", "scd_gumbel", "scd_stale")
# exact joint test on the transformer: JOINT_PROMPTS held-out prefixes, JOINT_LENGTH tokens
# generated (16**3 = 4096 sequences, each with its exact probability), window JOINT_LENGTH
JOINT_PROMPTS, JOINT_LENGTH = 4, 3
# ar_tempered: draws from the exact law of AR sampling at temperature JOINT_TEMPERATURE, a
# deliberately biased sampler of known law (the power control of the joint test)
JOINT_TEMPERATURE, JOINT_LEVEL = 1.2, 0.01
# (SJD is left out for cost: its transformer law is checked by the score test, and on the chain)
JOINT_SAMPLERS = ("ar", "scd_maximal", "scd_gumbel", "ar_tempered")
_JOINT_STREAMS = ("ar", "sjd", "scd_maximal", "scd_gumbel", "ar_tempered")  # rng stream per sampler

_RANGES = {
    "lossless_samples": (1000, 1_000_000), "lossless_seeds": (1, 20), "coupling_draws": (1000, 10_000_000),
    "markov_sequences": (10, 10_000), "markov_seeds": (2, 50), "markov_length": (8, 512), "window": (1, 64),
    "prompts": (10, 297), "samples_per_prompt": (1, 50), "timing_prompts": (1, 297),
    "joint_samples": (1000, 1_000_000),
}


@dataclass(frozen=True)
class Config:
    """Parameters of one run (names match the notebook's parameters cell and the registry).

    Parameters
    ----------
    lossless_samples, lossless_seeds : int
        Sequences per sampler and seed, and seeds, for the full-sequence chi-square tests.
    coupling_draws : int
        Draws per (p, q) pair for the coupling identity.
    markov_sequences, markov_seeds, markov_length : int
        Sequences per seed, seeds (a fresh chain each) and sequence length for the speed check.
    window : int
        Jacobi window ``L`` for the Markov speed check and the transformer.
    prompts, samples_per_prompt, timing_prompts : int
        Held-out digit prompts, completions per prompt, prompts timed one at a time.
    joint_samples : int
        Sequences per sampler and prefix for the exact joint test on the transformer.
    seed : int
    """

    lossless_samples: int = 40000
    lossless_seeds: int = 3
    coupling_draws: int = 100000
    markov_sequences: int = 200
    markov_seeds: int = 5
    markov_length: int = 64
    window: int = 16
    prompts: int = 200
    samples_per_prompt: int = 1
    timing_prompts: int = 5
    joint_samples: int = 10000
    seed: int = 0

    def __post_init__(self) -> None:
        for name, (lo, hi) in _RANGES.items():
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not lo <= value <= hi:
                raise ValueError(f"{name} must be an integer in [{lo}, {hi}], got {value!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, (int, np.integer)) or not 0 <= self.seed < 2**32:
            raise ValueError(f"seed must be an integer in [0, 2**32), got {self.seed!r}")
        if self.window > self.markov_length:
            raise ValueError(f"window ({self.window}) must not exceed markov_length ({self.markov_length})")


@dataclass(frozen=True)
class LMResult:
    """Transformer results (see :func:`run_transformer`)."""

    tokens_per_forward: np.ndarray  # (prompts, methods): mean over completions of T / NFE
    paired_p: float  # one-sided paired t-test, SCD-maximal > SJD
    marginal_p: dict  # method -> Holm-adjusted p per generated position vs AR, (T,)
    sequence_test: dict  # method (LM_TESTED) -> whole-sequence likelihood score test (sequence_score_test)
    acceptance: dict  # method -> mean tokens committed at Jacobi iteration i, (iterations,)
    samples: dict  # method -> generated pixels (prompts * samples_per_prompt, T)
    prompts: np.ndarray  # (prompts, 65) the held-out digits the prompts come from
    gumbel_replay_mismatches: int  # differing tokens + NFEs when SCD-Gumbel is rerun on its noise table
    model_metrics: dict
    joint: dict  # exact joint test on short continuations (see run_joint)
    timing: dict = field(compare=False, default_factory=dict)  # wall clock: prose only


@dataclass(frozen=True)
class Result:
    """What :func:`run` returns: data and metrics, never plots."""

    lossless: dict  # sampler -> {'statistic', 'dof', 'p_value', 'p_per_seed'}
    lossless_exact: np.ndarray  # (243,) exact sequence probabilities
    lossless_frequencies: dict  # sampler -> (243,) pooled empirical frequencies
    lossless_gumbel_replay_mismatches: int
    coupling: dict  # arrays over pairs: tv, same_maximal, same_gumbel, z; marginal test
    markov_tokens_per_forward: np.ndarray  # (settings, seeds, methods) per-seed mean T / NFE
    markov_ratio: np.ndarray  # (settings,) mean SCD-maximal / mean SJD
    markov_welch_p: np.ndarray  # (settings,) one-sided Welch test over seeds (details only)
    markov_acceptance: dict  # method -> mean tokens committed per iteration (first setting, seed 0)
    lm: LMResult | None = None


def run_lossless(config: Config) -> dict:
    """Full-sequence histograms of every sampler against the exact probabilities."""
    V, T = LOSSLESS_VOCAB, LOSSLESS_LENGTH
    model = random_ngram(V, LOSSLESS_ORDER, LOSSLESS_ALPHA, make_rng(config.seed, 1, 0))
    exact = sequence_probabilities(model, V, T)
    stats, freqs, replay = {}, {}, 0
    for m, method in enumerate(LOSSLESS_SAMPLERS):
        pooled, p_seeds = np.zeros(exact.size), []
        for s in range(config.lossless_seeds):
            rng = make_rng(config.seed, 1, 1 + m, s)
            noise = NoiseTable.draw(config.lossless_samples, T, V, rng) if method == "scd_gumbel" else None
            out = decode(model, method, T, V, LOSSLESS_WINDOW, rng, batch=config.lossless_samples, noise=noise)
            counts = np.bincount(sequence_index(out.tokens, V), minlength=exact.size)
            p_seeds.append(pooled_chisquare(counts, exact)[2])
            pooled += counts
            if method == "scd_gumbel" and s == 0:  # same noise table, another rng: same output?
                again = decode(model, method, T, V, LOSSLESS_WINDOW, make_rng(config.seed, 1, 99), noise=noise,
                               batch=config.lossless_samples)
                replay = int((again.tokens != out.tokens).sum() + (again.nfe != out.nfe).sum())
        stat, dof, p = pooled_chisquare(pooled, exact)
        stats[method] = {"statistic": stat, "dof": dof, "p_value": p, "p_per_seed": tuple(p_seeds)}
        freqs[method] = pooled / pooled.sum()
    return {"lossless": stats, "lossless_exact": exact, "lossless_frequencies": freqs,
            "lossless_gumbel_replay_mismatches": replay}


def run_coupling(config: Config) -> dict:
    """Empirical P(d' = d) of the maximal and Gumbel couplings, and the marginal of d'."""
    rng = make_rng(config.seed, 2)
    N, V = config.coupling_draws, COUPLING_VOCAB
    tv, same_max, same_gum, gum_exact, z = [], [], [], [], []
    stat_total, dof_total = 0.0, 0
    for alpha, lam in COUPLING_PAIRS:
        p = rng.dirichlet(np.full(V, alpha))
        q = (1 - lam) * p + lam * rng.dirichlet(np.full(V, alpha))
        d = categorical(np.broadcast_to(q, (N, V)), rng)
        d2 = maximal_coupling(d, np.broadcast_to(q, (N, V)), np.broadcast_to(p, (N, V)), rng)
        g1, g2 = gumbel_coupling(q, p, rng.gumbel(size=(N, V)))
        t = float(total_variation(p, q))
        s = float(np.mean(d2 == d))
        tv.append(t)
        same_max.append(s)
        same_gum.append(float(np.mean(g1 == g2)))
        gum_exact.append(gumbel_agreement(p, q))
        sigma = np.sqrt((1 - t) * t / N) if 0 < t < 1 else 1.0 / N
        z.append((s - (1 - t)) / sigma)
        stat, dof, _ = pooled_chisquare(np.bincount(d2, minlength=V), p)
        stat_total += stat
        dof_total += dof
    return {"tv": np.array(tv), "same_maximal": np.array(same_max), "same_gumbel": np.array(same_gum),
            "gumbel_exact": np.array(gum_exact), "z": np.array(z), "marginal_statistic": stat_total,
            "marginal_dof": dof_total, "marginal_p": float(scipy.stats.chi2.sf(stat_total, dof_total))}


def mean_acceptance(accepted: np.ndarray, nfe: np.ndarray, min_fraction: float = 0.1) -> np.ndarray:
    """Mean tokens committed at iteration ``i`` over the sequences still running.

    The curve stops at the first iteration where fewer than ``min_fraction`` of the sequences are
    still running (a mean over a handful of stragglers says little). Shape ``(iterations,)``.
    """
    running = np.arange(accepted.shape[1])[None, :] < nfe[:, None]
    count = running.sum(0)
    enough = count >= max(1.0, min_fraction * len(nfe))  # non-increasing in i
    keep = enough.size if enough.all() else int(np.argmin(enough))
    return (accepted * running).sum(0)[:keep] / count[:keep]


def run_markov_speed(config: Config) -> dict:
    """Tokens per forward pass of SJD and SCD on first-order Markov chains."""
    S, K = len(MARKOV_SETTINGS), config.markov_seeds
    tpf = np.zeros((S, K, len(SPEED_METHODS)))
    acceptance = {}
    for i, (vocab, alpha) in enumerate(MARKOV_SETTINGS):
        for s in range(K):
            chain = random_ngram(vocab, 1, alpha, make_rng(config.seed, 3, i, s, 0))
            for j, method in enumerate(SPEED_METHODS):
                out = decode(chain, method, config.markov_length, vocab, config.window,
                             make_rng(config.seed, 3, i, s, 1 + j), batch=config.markov_sequences)
                tpf[i, s, j] = out.tokens_per_forward.mean()
                if i == 0 and s == 0:
                    acceptance[method] = mean_acceptance(out.accepted, out.nfe)
    sjd, scd = tpf[..., 0], tpf[..., 1]
    ratio = scd.mean(axis=1) / sjd.mean(axis=1)
    welch = np.array([scipy.stats.ttest_ind(scd[i], sjd[i], equal_var=False, alternative="greater").pvalue
                      for i in range(S)])
    return {"markov_tokens_per_forward": tpf, "markov_ratio": ratio, "markov_welch_p": welch,
            "markov_acceptance": acceptance}


def ratio_estimates(tokens_per_forward: np.ndarray, *, num: int = 1, den: int = 0,
                    level: float = 0.95) -> list[Estimate]:
    """Per-setting t intervals of the per-chain ratio ``tpf[..., num] / tpf[..., den]``.

    ``tokens_per_forward`` is (settings, seeds, methods); a seed is one random chain on which both
    samplers ran, so the ratio is paired within a seed and the unit of replication is the chain.
    Each interval has level ``1 - (1 - level) / settings`` (Bonferroni), so that all of them cover
    at once with probability at least ``level`` (see :func:`smallest_estimate`).
    """
    tpf = np.asarray(tokens_per_forward, dtype=float)
    if tpf.ndim != 3 or tpf.shape[1] < 2:
        raise ValueError(f"need (settings, seeds >= 2, methods), got shape {tpf.shape}")
    each = 1 - (1 - level) / tpf.shape[0]
    return [mean_interval(tpf[i, :, num] / tpf[i, :, den], level=each, unit="Markov chains (seeds)")
            for i in range(tpf.shape[0])]


def smallest_estimate(estimates: list[Estimate], level: float) -> Estimate:
    """An interval for ``min_i theta_i`` from simultaneous intervals of each ``theta_i``.

    If every interval ``[l_i, h_i]`` covers its ``theta_i``, then ``min_i theta_i`` lies in
    ``[min_i l_i, min_i h_i]``: with Bonferroni-level intervals this covers with probability at
    least ``level``. The point is the smallest point estimate.
    """
    if not estimates:
        raise ValueError("need at least one estimate")
    first = estimates[0]
    return Estimate(min(e.point for e in estimates), min(e.low for e in estimates), min(e.high for e in estimates),
                    level, first.unit, min(e.n for e in estimates),
                    f"smallest of {len(estimates)} Bonferroni t intervals")


def envelope_estimate(estimates: list[Estimate], level: float) -> Estimate:
    """One interval that holds every ``theta_i`` from simultaneous intervals of each ``theta_i``.

    If every ``[l_i, h_i]`` covers its ``theta_i``, all of them lie in ``[min_i l_i, max_i h_i]``;
    with Bonferroni-level intervals this covers with probability at least ``level``. The point is
    the point estimate farthest from 0 (for an equivalence check of differences from 0).
    """
    if not estimates:
        raise ValueError("need at least one estimate")
    far = max(estimates, key=lambda e: abs(e.point))
    return Estimate(far.point, min(e.low for e in estimates), max(e.high for e in estimates), level, far.unit,
                    min(e.n for e in estimates), f"envelope of {len(estimates)} Bonferroni t intervals")


def placebo_estimates(tokens_per_forward: np.ndarray, *, num: int, den: int = 0,
                      level: float = 0.90) -> list[Estimate]:
    """Per-setting t intervals of ``tpf[..., num] / tpf[..., den] - 1`` (paired per chain), each at
    level ``1 - (1 - level) / settings`` so that they hold jointly with probability ``level``."""
    tpf = np.asarray(tokens_per_forward, dtype=float)
    if tpf.ndim != 3 or tpf.shape[1] < 2:
        raise ValueError(f"need (settings, seeds >= 2, methods), got shape {tpf.shape}")
    each = 1 - (1 - level) / tpf.shape[0]
    return [mean_interval(tpf[i, :, num] / tpf[i, :, den] - 1.0, level=each, unit="Markov chains (seeds)")
            for i in range(tpf.shape[0])]


def sequence_score_test(lm, prefix: np.ndarray, tokens: np.ndarray) -> dict:
    """Whole-sequence likelihood test that ``tokens`` were sampled from ``lm`` given ``prefix``.

    For each generated token ``x_t`` with model conditional ``p_t`` (given the prompt and the
    tokens before it), the score ``s_t = log p_t(x_t)`` has conditional mean
    ``mu_t = sum_v p_t(v) log p_t(v)`` and variance ``sum_v p_t(v) log^2 p_t(v) - mu_t^2`` when the
    sequence really comes from the model. ``S = sum (s_t - mu_t)`` over all tokens of all sequences
    is then a martingale with known variance, and ``z = S / sqrt(sum var_t)`` is standard normal
    (martingale CLT). Unlike a per-position histogram, it uses each token's own conditional, so it
    sees any sampler whose tokens are too likely or too unlikely under the model.

    Parameters
    ----------
    lm : callable
        ``lm(tokens (R, S), positions (R, W)) -> (R, W, V)`` (a :class:`DigitsLM` or an n-gram model).
    prefix : ndarray of int, shape (N, P)
    tokens : ndarray of int, shape (N, T)

    Returns
    -------
    dict
        ``z``, two-sided ``p_value``, ``mean_score_gap`` (mean of ``s_t - mu_t`` in nats per token)
        and ``tokens`` (N * T).
    """
    prefix, tokens = np.asarray(prefix, dtype=np.int64), np.asarray(tokens, dtype=np.int64)
    if prefix.ndim != 2 or tokens.ndim != 2 or prefix.shape[0] != tokens.shape[0]:
        raise ValueError(f"need prefix (N, P) and tokens (N, T), got {prefix.shape} and {tokens.shape}")
    N, P = prefix.shape
    T = tokens.shape[1]
    full = np.concatenate([prefix, tokens], axis=1)
    positions = np.broadcast_to(P + np.arange(T), (N, T))
    probs = np.asarray(lm(full, positions), dtype=float)  # (N, T, V)
    logp = np.log(np.clip(probs, 1e-300, None))
    score = np.take_along_axis(logp, tokens[..., None], axis=-1)[..., 0]
    mu = (probs * logp).sum(-1)
    var = np.clip((probs * logp**2).sum(-1) - mu**2, 0.0, None)
    total_var = float(var.sum())
    z = float((score - mu).sum() / np.sqrt(total_var)) if total_var > 0 else 0.0
    return {"z": z, "p_value": float(2 * scipy.stats.norm.sf(abs(z))),
            "mean_score_gap": float((score - mu).mean()), "tokens": int(N * T)}


def _positionwise_p(reference: np.ndarray, other: np.ndarray, vocab: int) -> np.ndarray:
    """Holm-adjusted homogeneity p-values, one per position, of two token samples ``(N, T)``."""
    raw = [homogeneity_test(np.bincount(reference[:, t], minlength=vocab), np.bincount(other[:, t], minlength=vocab))
           for t in range(reference.shape[1])]
    return holm(np.array(raw))


def run_transformer(config: Config, lm) -> LMResult:
    """AR, SJD and SCD on the digits LM: speed per prompt, marginals vs AR, determinism, wall clock."""
    prompts, full = lm.prompts(config.prompts, PROMPT_PIXELS)
    T, V, k = full.shape[1] - prompts.shape[1], lm.vocab, config.samples_per_prompt
    batch = np.repeat(prompts, k, axis=0)
    outs, noise = {}, None
    for j, method in enumerate(LM_METHODS):
        rng = make_rng(config.seed, 4, j if j < 4 else 10 + j)  # 4 is the stale control's stream
        if method == "scd_gumbel":
            noise = NoiseTable.draw(len(batch), T, V, rng)
        if method == "ar":  # with a KV cache: the same law, NFE = T, a fraction of the compute
            outs[method] = lm.sample_autoregressive(batch, T, rng)
        else:
            outs[method] = decode(lm, method, T, V, config.window, rng, prefix=batch, noise=noise)
    stale = decode(lm, "scd_stale", T, V, config.window, make_rng(config.seed, 4, 4), prefix=batch)
    # replay SCD-Gumbel on its noise table with another generator (the first REPLAY_ROWS rows suffice)
    sub = slice(0, min(REPLAY_ROWS, len(batch)))
    sub_noise = NoiseTable(noise.draft_gumbel[sub], noise.residual_gumbel[sub], noise.accept_uniform[sub])
    again = decode(lm, "scd_gumbel", T, V, config.window, make_rng(config.seed, 4, 99), prefix=batch[sub],
                   noise=sub_noise)
    tokens_of = {**{m: o.tokens for m, o in outs.items()}, "scd_stale": stale.tokens}
    sequence = {m: sequence_score_test(lm, batch, tokens_of[m]) for m in LM_TESTED}
    replay = int((again.tokens != outs["scd_gumbel"].tokens[sub]).sum() + (again.nfe != outs["scd_gumbel"].nfe[sub]).sum())
    tpf = np.stack([outs[m].tokens_per_forward.reshape(-1, k).mean(axis=1) for m in LM_METHODS], axis=1)
    paired = scipy.stats.ttest_rel(tpf[:, LM_METHODS.index("scd_maximal")], tpf[:, LM_METHODS.index("sjd")],
                                   alternative="greater").pvalue
    marginal = {m: _positionwise_p(outs["ar"].tokens, outs[m].tokens, V) for m in LM_METHODS[1:]}
    acceptance = {m: mean_acceptance(outs[m].accepted, outs[m].nfe) for m in LM_METHODS[1:]}
    return LMResult(tokens_per_forward=tpf, paired_p=float(paired), marginal_p=marginal, sequence_test=sequence,
                    acceptance=acceptance,
                    samples={m: o.tokens for m, o in outs.items()}, prompts=full,
                    gumbel_replay_mismatches=replay, model_metrics=dict(lm.metadata.get("metrics", {})),
                    joint=run_joint(config, lm),
                    timing=time_decoders(lm, prompts[: config.timing_prompts], T, config.window, config.seed))


def joint_prefixes(lm, count: int, candidates: int, length: int = JOINT_LENGTH) -> np.ndarray:
    """Held-out prefixes whose next ``length`` pixels are the most uncertain under the model.

    For each of the first ``candidates`` held-out digits, one forward pass gives the model's
    distribution at every pixel; the cut ``c`` (after the first pixel row, with ``length``
    pixels left) maximises the summed entropy at ``c .. c + length - 1``. The ``count`` digits
    with the largest such sum are kept: prefixes ``full[i, :c]``, returned as a list of arrays
    of shape ``(c,)`` (the lengths differ). Deterministic given the model.
    """
    _, full = lm.prompts(candidates, PROMPT_PIXELS)
    S = full.shape[1]
    positions = np.broadcast_to(np.arange(1, S), (len(full), S - 1))
    probs = lm(full, positions)  # (N, S - 1, V): position t at index t - 1
    entropy = -(probs * np.log(np.clip(probs, 1e-300, None))).sum(-1)
    cuts = np.arange(1 + PROMPT_PIXELS, S - length + 1)  # first generated position
    window_h = np.stack([entropy[:, c - 1:c - 1 + length].sum(1) for c in cuts], axis=1)  # (N, cuts)
    best = window_h.argmax(1)
    order = np.argsort(-window_h[np.arange(len(full)), best], kind="stable")[:count]
    return [full[i, :cuts[best[i]]] for i in order]


def exact_continuations(lm, prefix: np.ndarray, length: int, temperatures=(1.0,)):
    """Exact probabilities of all ``V**length`` continuations of ``prefix`` under ``lm``.

    Every continuation is scored in one forward pass: ``P(x) = prod_t p_t(x_t | prefix, x_<t)``.
    Rows are in :func:`~compendium.ngram.sequence_index` order, shape ``(V**length,)``. With
    several ``temperatures``, a list with the law of AR sampling at each temperature (the
    conditionals ``p_t ** (1 / temperature)``, renormalised), from the same forward pass; with
    the default, the one array.
    """
    V = lm.vocab
    prefix = np.asarray(prefix, dtype=np.int64)
    seqs = all_sequences(V, length)
    full = np.concatenate([np.broadcast_to(prefix, (len(seqs), prefix.size)), seqs], axis=1)
    positions = np.broadcast_to(prefix.size + np.arange(length), (len(seqs), length))
    probs = np.asarray(lm(full, positions), dtype=float)  # (V**length, length, V)
    laws = []
    for temperature in temperatures:
        cond = probs ** (1.0 / temperature)
        cond /= cond.sum(-1, keepdims=True)
        law = np.take_along_axis(cond, seqs[..., None], axis=-1)[..., 0].prod(axis=1)
        laws.append(law / law.sum())
    return laws[0] if tuple(temperatures) == (1.0,) else laws


class Tempered:
    """``lm`` at a temperature: ``p_T(v) ∝ p(v) ** (1 / temperature)`` (same calling convention)."""

    def __init__(self, lm, temperature: float):
        if not temperature > 0:
            raise ValueError(f"temperature must be > 0, got {temperature!r}")
        self.lm, self.temperature, self.vocab = lm, float(temperature), lm.vocab

    def __call__(self, tokens: np.ndarray, positions: np.ndarray) -> np.ndarray:
        p = np.asarray(self.lm(tokens, positions), dtype=float) ** (1.0 / self.temperature)
        return p / p.sum(-1, keepdims=True)


def joint_test(samples: list, exact: list, vocab: int) -> dict:
    """Pearson test of sampled continuations against their exact joint law, pooled over prefixes.

    ``samples[i]`` (N_i, T) are continuations of prefix ``i`` and ``exact[i]`` (V**T,) their exact
    law. Each prefix gets :func:`~compendium.ngram.pooled_chisquare` (cells expected below 5 pooled);
    the statistics and degrees of freedom are summed (independent samples).
    """
    stat, dof = 0.0, 0
    for tokens, probs in zip(samples, exact):
        counts = np.bincount(sequence_index(np.asarray(tokens), vocab), minlength=probs.size)
        s, d, _ = pooled_chisquare(counts, probs)
        stat, dof = stat + s, dof + d
    p_value = float(scipy.stats.chi2.sf(stat, dof)) if dof > 0 else 1.0  # no cell big enough: no test
    return {"statistic": float(stat), "dof": int(dof), "p_value": p_value}


def simulated_power(exact: list, alternative: list, samples: int, rng: np.random.Generator, *,
                    level: float = JOINT_LEVEL, replicates: int = 200) -> float:
    """Monte Carlo power of :func:`joint_test` at ``level`` against an alternative law.

    Each replicate draws ``samples`` continuations per prefix from ``alternative[i]`` and runs the
    test against ``exact[i]``; the power is the fraction rejected. (A noncentral chi-square
    approximation overstates it badly for tables this sparse.)
    """
    hits = 0
    for _ in range(replicates):
        stat, dof = 0.0, 0
        for a, p in zip(alternative, exact):
            s, d, _ = pooled_chisquare(rng.multinomial(samples, a / a.sum()).astype(float), p)
            stat, dof = stat + s, dof + d
        hits += dof > 0 and scipy.stats.chi2.sf(stat, dof) < level
    return hits / replicates


def run_joint(config: Config, lm) -> dict:
    """Exact joint test on the transformer: every sampler of :data:`JOINT_SAMPLERS` draws
    ``config.joint_samples`` continuations of ``JOINT_LENGTH`` pixels (window ``JOINT_LENGTH``)
    after each of :data:`JOINT_PROMPTS` prefixes, compared with the exact law of all continuations.
    The model runs through :class:`~.digits_lm.SharedPrefixLM` (the prefix encoded once per batch)."""
    prefixes = joint_prefixes(lm, JOINT_PROMPTS, config.prompts)
    from .digits_lm import SharedPrefixLM  # (a local import keeps the asset's fingerprint)

    lm = SharedPrefixLM(lm)  # every row of a batch below continues one prefix: encode it once
    V, N, T = lm.vocab, config.joint_samples, JOINT_LENGTH
    exact, tempered = zip(*(exact_continuations(lm, pre, T, (1.0, JOINT_TEMPERATURE)) for pre in prefixes))
    seqs = all_sequences(V, T)
    tests = {}
    for method in JOINT_SAMPLERS:
        samples = []
        for i, pre in enumerate(prefixes):
            rng = make_rng(config.seed, 7, _JOINT_STREAMS.index(method), i)
            batch = np.broadcast_to(pre, (N, pre.size)).copy()
            if method == "ar":
                samples.append(lm.sample_autoregressive(batch, T, rng).tokens)
            elif method == "ar_tempered":  # the exact law of tempered AR sampling, drawn directly
                samples.append(seqs[rng.choice(len(seqs), size=N, p=tempered[i])])
            else:
                samples.append(decode(lm, method, T, V, T, rng, prefix=batch).tokens)
        tests[method] = joint_test(samples, exact, V)
    return {"tests": tests, "prefix_lengths": [int(p.size) for p in prefixes],
            "tempered_power": simulated_power(exact, tempered, N, make_rng(config.seed, 7, 99)),
            "tempered_tv": float(np.mean([0.5 * np.abs(a - b).sum() for a, b in zip(tempered, exact)])),
            "entropy_nats": [float(-(e * np.log(np.clip(e, 1e-300, None))).sum()) for e in exact]}


def time_decoders(lm, prompts: np.ndarray, length: int, window: int, seed: int) -> dict:
    """Wall clock of AR (with a KV cache) and SCD-maximal (without one), one prompt at a time."""
    seconds = {}
    for method in ("ar", "scd_maximal"):
        rng = make_rng(seed, 6)
        start = time.perf_counter()
        for row in prompts:
            if method == "ar":
                lm.sample_autoregressive(row[None], length, rng)
            else:
                decode(lm, method, length, lm.vocab, window, rng, prefix=row[None])
        seconds[method] = time.perf_counter() - start
    return {"ar_seconds": seconds["ar"], "scd_seconds": seconds["scd_maximal"],
            "speedup": seconds["ar"] / seconds["scd_maximal"], "prompts": len(prompts)}


def run(config: Config, lm=None) -> Result:
    """Every experiment of the chapter; the transformer part only when a model ``lm`` is given.

    Parameters
    ----------
    config : Config
    lm : DigitsLM, optional
        The trained digits model (asset ``digits_tokens_lm``).
    """
    return Result(**run_lossless(config), coupling=run_coupling(config), **run_markov_speed(config),
                  lm=run_transformer(config, lm) if lm is not None else None)
