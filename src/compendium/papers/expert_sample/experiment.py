"""The chapter's experiment: ``Config``, ``run`` and the exact checks."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np
import torch

from compendium.kernels.routing import expert_sample_route_reference, gumbel_noise

from ...stats import crossed_bootstrap, mean_interval
from .frontier import (CROSSED_UNIT, answer_loglik_shared, correct_probability, frontier_gap_estimates, largest_estimate,
                       pass_at_k_draws, prefill, sample_answers_shared, target_logits, target_logits_unshared)
from .model import ANSWER_LEN, EQUALS, PROMPT_LEN, TinyMoELM, answer_code, splits
from .sampling import (RoutingPolicy, best_of_n, distinct_rate, majority_vote, pass_at_k,
                       pass_at_k_brute_force, router_profile)

PASS_K = 4  # the headline pass@k: pass@16 of top-k is saturated on this task (issue 23)
GUESS = 100 / 199  # a uniform guess over the 199 possible sums 0..198, in points


@dataclass(frozen=True)
class Config:
    """Registry parameters of the chapter plus ``seed`` (see workflow/config/chapters.yaml)."""

    samples_per_problem: int = 16
    test_problems: int = 1000
    token_temperature: float = 0.7
    head_experts: int = 4
    tail_pool: int = 8
    routing_temperature: float = 1.0
    head_sizes: tuple = (2, 4, 6)
    tail_pools: tuple = (8, 24)
    routing_temperatures: tuple = (0.5, 1.0, 2.0)
    token_temperatures: tuple = (0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.7, 1.0)
    routing_draws: int = 4
    bootstrap_resamples: int = 1000
    perturbation_scale: float = 0.1
    chi2_draws: int = 40000
    seed: int = 0

    def __post_init__(self):
        for name in ("head_sizes", "tail_pools"):
            object.__setattr__(self, name, tuple(int(t) for t in getattr(self, name)))
        for name in ("routing_temperatures", "token_temperatures"):
            object.__setattr__(self, name, tuple(float(t) for t in getattr(self, name)))
        if self.samples_per_problem < 16:
            raise ValueError(f"samples_per_problem must be >= 16 (pass@16), got {self.samples_per_problem}")
        if not 10 <= self.test_problems <= 1000:
            raise ValueError("test_problems must lie in [10, 1000]")
        if not 0 < self.token_temperature <= 2:
            raise ValueError(f"token_temperature must lie in (0, 2], got {self.token_temperature}")
        if self.head_experts < 1 or self.tail_pool < 1 or not self.routing_temperature > 0:
            raise ValueError("head_experts and tail_pool must be >= 1 and routing_temperature > 0")
        if not self.routing_temperatures or min(self.routing_temperatures) <= 0:
            raise ValueError("routing_temperatures must be a non-empty list of positive numbers")
        temps = self.token_temperatures
        if len(temps) < 2 or min(temps) <= 0 or list(temps) != sorted(temps):
            raise ValueError("token_temperatures must be at least two increasing positive numbers")
        if not self.head_sizes or not self.tail_pools:
            raise ValueError("head_sizes and tail_pools must be non-empty")
        if self.routing_draws < PASS_K:
            raise ValueError(f"routing_draws must be >= {PASS_K} (unbiased pass@{PASS_K}), got {self.routing_draws}")
        if self.bootstrap_resamples < 200:
            raise ValueError("bootstrap_resamples must be >= 200")
        if not 0 < self.perturbation_scale <= 1:
            raise ValueError(f"perturbation_scale must lie in (0, 1], got {self.perturbation_scale}")
        if self.chi2_draws < 1000:
            raise ValueError(f"chi2_draws must be >= 1000, got {self.chi2_draws}")


@dataclass
class Result:
    """Per-method metrics (mean over models) and per-problem arrays (models x problems)."""

    methods: dict = field(default_factory=dict)      # name -> {"pass1", "pass4", "pass16"} (means, points)
    per_problem: dict = field(default_factory=dict)  # name -> {"pass1", "pass4", "pass16", "curve"}: (M, P)
    curves: dict = field(default_factory=dict)       # "profile" (E,), "temperature" (names), ...
    metrics: dict = field(default_factory=dict)
    estimates: dict = field(default_factory=dict)    # ledger statistics (compendium.stats.Estimate)


def _check_models(config: Config, models: list[TinyMoELM]):
    if len(models) < 2:
        raise ValueError("run needs at least two trained models (intervals are over models and problems)")
    cfg = models[0].config
    k, e = cfg.experts_per_token, cfg.num_experts
    for h, m in [(config.head_experts, config.tail_pool)] + _grid(config):
        if not 1 <= h < k:
            raise ValueError(f"head sizes must lie in [1, k-1] = [1, {k - 1}], got {h}")
        if not k - h <= m <= e - h:
            raise ValueError(f"tail pool for head {h} must lie in [{k - h}, {e - h}], got {m}")
    return k, e


def _grid(config: Config) -> list[tuple[int, int]]:
    """The Expert-Sample settings (h, m) of the frontier: every head size with the default pool, and
    every pool with the default head (the routing temperature is fixed: tau is saturated here)."""
    pts = [(h, config.tail_pool) for h in config.head_sizes] + [(config.head_experts, m) for m in config.tail_pools]
    return list(dict.fromkeys(pts))


def es_name(h: int, m: int) -> str:
    return f"es_h{h}_m{m}"


def run(config: Config, models: list[TinyMoELM]) -> Result:
    """Every routing policy on the test split of every model (shared prefill: routing noise acts on
    the generated tokens only).

    pass@1 / pass@4 / pass@16 come from teacher-forced success probabilities (:mod:`.frontier`):
    exact for standard routing at every token temperature, unbiased over ``routing_draws`` noise
    draws for stochastic routing. Methods: ``greedy`` and ``head_greedy`` (T = 0),
    ``topk@1``/``head@1`` (T = 1), ``topk@T``/``es@T`` (the headline pair at the chapter's token
    temperature, Expert-Sample at ``head_experts``, ``tail_pool``, ``routing_temperature``),
    ``es_unshared@T`` (the positive control: the headline Expert-Sample setting with routing noise at
    the prompt positions too, so it reaches every answer digit), ``temp_<T>`` (the temperature curve, greedy first), ``es_h<h>_m<m>`` (Expert-Sample, T = 0) and
    ``noise_<tau>`` (noise on all experts, T = 0). Best-of-N (the model's own likelihood under
    standard routing) and majority vote use ``samples_per_problem`` sampled answers of
    ``topk@T`` and ``es@T``.
    """
    k, e = _check_models(config, models)
    h, m, n, T = config.head_experts, config.tail_pool, config.samples_per_problem, config.token_temperature
    test = splits()["test"][: config.test_problems]
    topk = RoutingPolicy.top_k(k, e)
    head_only = RoutingPolicy(h, h, e - h, 0.0)
    es_main = RoutingPolicy.expert_sample(k, h, m, config.routing_temperature)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one thread: much faster than two on a shared 2-core machine
    result = Result()
    try:
        def gen(i, stream):
            return torch.Generator().manual_seed(config.seed * 1_000_003 + i * 10_007 + stream)

        def pass_j(p, j):  # unbiased when exact or with >= j draws; else the plug-in (figures and table only)
            return pass_at_k_draws(p, j) if p.shape[0] == 1 or p.shape[0] >= j else 1 - (1 - p.mean(0)) ** j

        def record(name, probs):  # probs: list over models of (R, P) success probabilities
            per = {f"pass{j}": np.stack([pass_j(p, j) for p in probs]) for j in (1, PASS_K, 16)}
            per["curve"] = np.stack([np.stack([pass_j(p, j) for j in range(1, n + 1)]) for p in probs])
            result.per_problem[name] = per
            result.methods[name] = {q: 100 * float(per[q].mean()) for q in ("pass1", f"pass{PASS_K}", "pass16")}

        plan = {"topk": topk, "head": head_only}
        for hh, mm in _grid(config):
            plan[es_name(hh, mm)] = RoutingPolicy.expert_sample(k, hh, mm, config.routing_temperature)
        main = es_name(h, m)
        if main not in plan:
            plan[main] = es_main
        for tau in config.routing_temperatures:
            plan[f"noise_{tau:g}"] = RoutingPolicy.all_experts_noise(k, e, tau)
        prefilled = [prefill(model, test) for model in models]  # standard routing: one prefill serves every policy
        logits = {name: [target_logits(model, test, pol, config.routing_draws, gen(i, 1000 + s), prefilled[i])
                         for i, model in enumerate(models)] for s, (name, pol) in enumerate(plan.items())}
        prob = lambda name, temp: [correct_probability(x, test, temp) for x in logits[name]]  # noqa: E731
        record("greedy", prob("topk", 0.0))
        record("head_greedy", prob("head", 0.0))
        record("topk@1", prob("topk", 1.0))
        record("head@1", prob("head", 1.0))
        record("topk@T", prob("topk", T))
        record("es@T", prob(main, T))  # the same routing draws as the T = 0 point of this setting
        # positive control: the same policy with routing noise at the prompt too (no shared prefill)
        unshared = [target_logits_unshared(model, test, es_main, config.routing_draws, gen(i, 6000))
                    for i, model in enumerate(models)]
        record("es_unshared@T", [correct_probability(x, test, T) for x in unshared])
        result.curves["temperature"] = ["greedy"]
        for t in config.token_temperatures:
            record(f"temp_{t:g}", prob("topk", t))
            result.curves["temperature"].append(f"temp_{t:g}")
        for hh, mm in _grid(config):
            record(es_name(hh, mm), prob(es_name(hh, mm), 0.0))
        result.curves["noise"] = []
        for tau in config.routing_temperatures:
            record(f"noise_{tau:g}", prob(f"noise_{tau:g}", 0.0))
            result.curves["noise"].append(f"noise_{tau:g}")
        result.curves["es"] = [es_name(hh, mm) for hh, mm in _grid(config)]

        # Best-of-N and majority vote: sampled answers (shared prefill), paired per problem and model
        targets = answer_code(test[:, PROMPT_LEN:])
        bon = {key: {"likelihood": [], "majority": [], "distinct": []} for key in ("es", "topk")}
        for key, pol in (("topk", topk), ("es", es_main)):
            for i, model in enumerate(models):
                answers = sample_answers_shared(model, test, n, pol, T, gen(i, 5000 + (key == "es")), prefilled[i])
                loglik = answer_loglik_shared(model, test, answers, prefilled[i])
                bon[key]["likelihood"].append((best_of_n(answers, loglik) == targets).astype(float))
                bon[key]["majority"].append((majority_vote(answers) == targets).astype(float))
                bon[key]["distinct"].append(distinct_rate(answers))
        result.per_problem["bon"] = {key: {v: np.stack(d[v]) for v in ("likelihood", "majority")} for key, d in bon.items()}
        result.metrics["best_of_n"] = {key: {v: 100 * float(np.mean(d[v])) for v in ("likelihood", "majority")}
                                       for key, d in bon.items()}
        result.metrics["distinct"] = {key: float(np.mean(d["distinct"])) for key, d in bon.items()}

        # router shape, per model
        probes = [router_profile(model, test, h, config.perturbation_scale,
                                 torch.Generator().manual_seed(config.seed * 7919 + i)) for i, model in enumerate(models)]
        result.curves["profile"] = np.mean([p["profile"] for p in probes], axis=0)
        result.metrics["head_jaccard"] = float(np.mean([p["head_jaccard"] for p in probes]))
        result.metrics["tail_jaccard"] = float(np.mean([p["tail_jaccard"] for p in probes]))
        result.metrics["jaccard_ratio_per_model"] = [p["head_jaccard"] / p["tail_jaccard"] for p in probes]
        result.metrics["prefill_error"] = prefill_equivalence_error(models[0], test[:64], es_main, config.seed)
    finally:
        torch.set_num_threads(threads)
    result.estimates = ledger_estimates(config, result)
    return result


def ledger_estimates(config: Config, result: Result) -> dict:
    """Every interval a verdict depends on, from the per-problem arrays (models x problems).

    Differences are in points (100 x probability). Intervals: two-way bootstrap over models and
    problems (:func:`compendium.stats.crossed_bootstrap`); the Jaccard ratio: t interval over models.
    ``greedy_floor`` is greedy top-k accuracy minus :data:`GUESS`, a uniform guess over the sums.
    """
    PP, R = result.per_problem, config.bootstrap_resamples
    kk = f"pass{PASS_K}"

    def diff(a, b, seed_offset):
        return crossed_bootstrap({"a": 100 * a, "b": 100 * b}, lambda x: x["a"] - x["b"], unit=CROSSED_UNIT,
                                 rng=config.seed * 101 + seed_offset, resamples=R)

    est = {
        "greedy_drop": diff(PP["greedy"]["pass1"], PP["head_greedy"]["pass1"], 1),
        "pass16_excess_drop": crossed_bootstrap(
            {"t1": 100 * PP["topk@1"]["pass16"], "h1": 100 * PP["head@1"]["pass16"],
             "g": 100 * PP["greedy"]["pass1"], "hg": 100 * PP["head_greedy"]["pass1"]},
            lambda x: (x["t1"] - x["h1"]) - (x["g"] - x["hg"]), unit=CROSSED_UNIT, rng=config.seed * 101 + 2,
            resamples=R),
        "es_passk_gain": diff(PP["es@T"][kk], PP["topk@T"][kk], 3),
        "es_pass1_change": diff(PP["es@T"]["pass1"], PP["topk@T"]["pass1"], 4),
        "unshared_passk_gain": diff(PP["es_unshared@T"][kk], PP["topk@T"][kk], 11),
        "unshared_pass1_change": diff(PP["es_unshared@T"]["pass1"], PP["topk@T"]["pass1"], 12),
        "topk_passk": crossed_bootstrap({"a": 100 * PP["topk@T"][kk]}, lambda x: x["a"], unit=CROSSED_UNIT,
                                        rng=config.seed * 101 + 5, resamples=R),
        "greedy_floor": crossed_bootstrap({"g": 100 * PP["greedy"]["pass1"]}, lambda x: x["g"] - GUESS, unit=CROSSED_UNIT,
                                          rng=config.seed * 101 + 10, resamples=R),
        "bon_likelihood": diff(PP["bon"]["es"]["likelihood"], PP["bon"]["topk"]["likelihood"], 6),
        "bon_majority": diff(PP["bon"]["es"]["majority"], PP["bon"]["topk"]["majority"], 7),
        "jaccard_ratio": mean_interval(result.metrics["jaccard_ratio_per_model"], unit="trained models"),
    }
    points = {name: (result.methods[name]["pass1"], result.methods[name][kk]) for name in result.curves["es"]}
    scaled = {name: {q: 100 * PP[name][q] for q in ("pass1", kk)} for name in
              result.curves["es"] + result.curves["temperature"] + result.curves["noise"]}
    frontier = frontier_gap_estimates(points, result.curves["temperature"], scaled, rng=config.seed * 101 + 8,
                                      resamples=R, x="pass1", y=kk)
    ablation = frontier_gap_estimates(points, ["greedy"] + result.curves["noise"], scaled,
                                      rng=config.seed * 101 + 9, resamples=R, x="pass1", y=kk)
    est["frontier"] = largest_estimate([v[0] for v in frontier.values()], 0.95)
    est["ablation"] = largest_estimate([v[0] for v in ablation.values()], 0.95)
    est["frontier_pairs"] = {name: {"gap": v[0].point, "low": v[0].low, "high": v[0].high, "between": list(v[1])}
                             for name, v in frontier.items()}
    est["ablation_pairs"] = {name: {"gap": v[0].point, "low": v[0].low, "high": v[0].high, "between": list(v[1])}
                             for name, v in ablation.items()}
    return est


def prefill_equivalence_error(model: TinyMoELM, seq: np.ndarray, policy: RoutingPolicy, seed: int) -> float:
    """Max |shared-prefill logits - full forward with zero routing noise at the prompt| (3 draws)."""
    from .sampling import make_router

    g = torch.Generator().manual_seed(seed)
    fast = target_logits(model, seq, policy, 3, g)
    g = torch.Generator().manual_seed(seed)
    cfg = model.config
    noise = gumbel_noise((cfg.num_layers, 3 * len(seq), ANSWER_LEN - 1, cfg.num_experts), g)
    full_noise = torch.zeros(cfg.num_layers, 3 * len(seq), PROMPT_LEN + ANSWER_LEN, cfg.num_experts)
    full_noise[:, :, PROMPT_LEN:PROMPT_LEN + ANSWER_LEN - 1] = noise
    x = torch.as_tensor(seq).repeat_interleave(3, 0)                       # row p * 3 + r, as target_logits
    with torch.no_grad():
        logits, _ = model(x[:, :PROMPT_LEN + ANSWER_LEN - 1], make_router(policy, full_noise))
    ref = logits[:, PROMPT_LEN - 1:, :EQUALS].reshape(len(seq), 3, ANSWER_LEN, EQUALS).transpose(0, 1)
    return float((ref - fast).abs().max())


# ---- exact checks ---------------------------------------------------------------------------------

def plackett_luce_check(draws: int, seed: int, logits=(1.2, 0.4, 0.0, -0.5, -1.1), picks: int = 3,
                        tau: float = 1.0) -> dict:
    """Gumbel-top-k through the routing routine vs the Plackett-Luce law of ordered draws (chi-square)."""
    from scipy.stats import chisquare

    z = torch.tensor(logits, dtype=torch.float64)
    m = len(logits)
    gen = torch.Generator().manual_seed(seed)
    zz = z.expand(draws, m)
    idx, _ = expert_sample_route_reference(zz, gumbel_noise((draws, m), gen).double(), picks, 0, m, tau)
    w = np.exp(np.array(logits) / tau)
    cells = list(itertools.permutations(range(m), picks))
    expected = []
    for cell in cells:
        prob, left = 1.0, w.sum()
        for i in cell:
            prob *= w[i] / left
            left -= w[i]
        expected.append(prob * draws)
    lookup = {c: j for j, c in enumerate(cells)}
    observed = np.zeros(len(cells))
    for row in map(tuple, idx.numpy()):
        observed[lookup[row]] += 1
    return {"p_value": float(chisquare(observed, np.array(expected)).pvalue), "cells": len(cells)}


def pass_at_k_error(max_n: int = 8) -> float:
    """Largest |estimator - brute force over k-subsets| for every n <= max_n, c, k."""
    worst = 0.0
    for n in range(1, max_n + 1):
        for c in range(n + 1):
            for k in range(1, n + 1):
                exact = pass_at_k_brute_force([True] * c + [False] * (n - c), k)
                worst = max(worst, abs(pass_at_k(n, c, k) - float(exact)))
    return worst


def routing_invariants(seed: int, rows: int = 4096, experts: int = 32, k: int = 8, head: int = 4,
                       pool: int = 8) -> dict:
    """tau -> 0 gives top-k (mismatching rows at tau = 1e-9, float64); head kept, k distinct, weights sum to 1."""
    gen = torch.Generator().manual_seed(seed)
    z = torch.randn(rows, experts, generator=gen, dtype=torch.float64)
    g = gumbel_noise((rows, experts), gen).double()
    idx_small, _ = expert_sample_route_reference(z, g, k, head, pool, 1e-9)
    top = z.topk(k, dim=-1).indices
    mismatch = int((idx_small.sort(-1).values != top.sort(-1).values).any(-1).sum())
    idx, w = expert_sample_route_reference(z.float(), g.float(), k, head, pool, 2.0)
    head_set = z.float().topk(head, dim=-1).indices.sort(-1).values
    head_kept = bool((idx[:, :head].sort(-1).values == head_set).all())
    distinct = bool((idx.sort(-1).values.diff(dim=-1) > 0).all())
    sums = bool(torch.allclose(w.sum(-1), torch.ones(rows), atol=1e-5))
    return {"tau0_mismatch": mismatch, "head_kept": head_kept, "distinct": distinct, "weights_sum_to_one": sums,
            "tail_varies": bool((idx != top).any())}


_KERNEL_SCRIPT = r"""
import json, sys, torch
from compendium.kernels.routing import expert_sample_route_reference, expert_sample_route_triton, gumbel_noise
device = sys.argv[1]
gen = torch.Generator().manual_seed(int(sys.argv[2]))
worst, same = 0.0, True
for rows, E, k, h, m, tau in [(64, 32, 8, 4, 8, 1.0), (48, 16, 4, 0, 16, 2.0), (32, 32, 8, 8, 24, 0.0)]:
    z = torch.randn(rows, E, generator=gen)
    g = gumbel_noise((rows, E), gen)
    i_ref, w_ref = expert_sample_route_reference(z, g, k, h, m, tau)
    i_k, w_k = expert_sample_route_triton(z.to(device), g.to(device), k, h, m, tau)
    same = same and bool((i_k.cpu() == i_ref).all())
    worst = max(worst, float((w_k.cpu() - w_ref).abs().max()))
print(json.dumps({"indices_equal": same, "max_weight_error": worst}))
"""


def kernel_check(device: str = "cpu", seed: int = 0, timeout: float = 120) -> dict:
    """Triton kernel vs reference on small shapes: natively on CUDA, in Triton's interpreter on the CPU
    (a subprocess, since ``TRITON_INTERPRET`` must be set before Triton is imported)."""
    env = dict(os.environ)
    if device != "cuda":
        env["TRITON_INTERPRET"] = "1"
    out = subprocess.run([sys.executable, "-c", _KERNEL_SCRIPT, "cuda" if device == "cuda" else "cpu", str(seed)],
                         env=env, capture_output=True, text=True, timeout=timeout, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])
