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

from .model import PROMPT_LEN, TinyMoELM, answer_code, splits
from .sampling import (RoutingPolicy, answer_loglik, best_of_n, distinct_rate, majority_vote,
                       pass_at_k, pass_at_k_brute_force, pass_at_k_per_problem, router_profile,
                       sample_answers)
from .verifier import auc, auc_bootstrap, train_verifier, verifier_features, verifier_scores

VERIFIER_TRAIN_PROBLEMS = 400  # train-split problems whose sampled answers train the verifier (both scales)


@dataclass(frozen=True)
class Config:
    """Registry parameters of the chapter plus ``seed`` (see workflow/config/chapters.yaml)."""

    samples_per_problem: int = 16
    test_problems: int = 200
    dev_problems: int = 100
    token_temperature: float = 0.7
    head_experts: int = 4
    tail_pool: int = 8
    routing_temperatures: tuple = (0.5, 1.0, 2.0, 4.0)
    token_temperatures: tuple = (0.3, 0.5, 0.7, 1.0, 1.3)
    perturbation_scale: float = 0.1
    chi2_draws: int = 40000
    seed: int = 0

    def __post_init__(self):
        object.__setattr__(self, "routing_temperatures", tuple(float(t) for t in self.routing_temperatures))
        object.__setattr__(self, "token_temperatures", tuple(float(t) for t in self.token_temperatures))
        if self.samples_per_problem < 16:
            raise ValueError(f"samples_per_problem must be >= 16 (pass@16), got {self.samples_per_problem}")
        if not 10 <= self.test_problems <= 1000 or not 10 <= self.dev_problems <= 500:
            raise ValueError("test_problems must lie in [10, 1000] and dev_problems in [10, 500]")
        if not 0 < self.token_temperature <= 2:
            raise ValueError(f"token_temperature must lie in (0, 2], got {self.token_temperature}")
        if self.head_experts < 1 or self.tail_pool < 1:
            raise ValueError("head_experts and tail_pool must be >= 1")
        if not self.routing_temperatures or min(self.routing_temperatures) <= 0:
            raise ValueError("routing_temperatures must be a non-empty list of positive numbers")
        if not self.token_temperatures or min(self.token_temperatures) <= 0:
            raise ValueError("token_temperatures must be a non-empty list of positive numbers")
        if not 0 < self.perturbation_scale <= 1:
            raise ValueError(f"perturbation_scale must lie in (0, 1], got {self.perturbation_scale}")
        if self.chi2_draws < 1000:
            raise ValueError(f"chi2_draws must be >= 1000, got {self.chi2_draws}")


@dataclass
class Result:
    """Per-method metrics (mean over models) and per-problem arrays (models x problems)."""

    methods: dict = field(default_factory=dict)      # name -> {"pass1", "pass16", "distinct"} (means, points)
    per_problem: dict = field(default_factory=dict)  # name -> {"pass1": (M, P), "pass16": (M, P)}
    curves: dict = field(default_factory=dict)       # name -> array (E,) or list of points
    chosen_tau: float = float("nan")
    dev: dict = field(default_factory=dict)
    metrics: dict = field(default_factory=dict)


def _check_models(config: Config, models: list[TinyMoELM]):
    if not models:
        raise ValueError("run needs at least one trained model")
    cfg = models[0].config
    k, e = cfg.experts_per_token, cfg.num_experts
    if not 1 <= config.head_experts < k:
        raise ValueError(f"head_experts must lie in [1, k-1] = [1, {k - 1}], got {config.head_experts}")
    if not k - config.head_experts <= config.tail_pool <= e - config.head_experts:
        raise ValueError(f"tail_pool must lie in [{k - config.head_experts}, {e - config.head_experts}], "
                         f"got {config.tail_pool}")
    return k, e


def run(config: Config, models: list[TinyMoELM]) -> Result:
    """Every routing policy on the test split of every model; ES's tau chosen on the dev split.

    Methods (token temperature after '@'): ``greedy`` (top-k, T=0), ``head_greedy`` (top-h only,
    T=0), ``topk@1``/``head@1`` (T=1), ``topk@T``, ``es@T`` (the dev-chosen tau), ``temp_<T>``
    (top-k at each token temperature), ``es_<tau>`` and ``noise_<tau>`` (T=0, routing noise on the
    tail / on all experts).

    Best-of-N uses a verifier trained here per model (:mod:`.verifier`): an MLP over the problem
    and candidate tokens, fit to ``n`` answers per problem sampled with ``topk@T`` and ``es@T`` on
    the first ``VERIFIER_TRAIN_PROBLEMS`` train-split problems, labelled by exact checking. A second
    verifier per model, trained on the same candidates with shuffled labels, is the negative control.
    """
    k, e = _check_models(config, models)
    h, m, n, T = config.head_experts, config.tail_pool, config.samples_per_problem, config.token_temperature
    data = splits()
    test, dev = data["test"][: config.test_problems], data["dev"][: config.dev_problems]
    topk = RoutingPolicy.top_k(k, e)
    es = lambda tau: RoutingPolicy.expert_sample(k, h, m, tau)  # noqa: E731
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one thread: much faster than two on a shared 2-core machine
    try:
        def evaluate(seq, policy, temp, model_index, stream, keep=False):
            gen = torch.Generator().manual_seed(config.seed * 1_000_003 + model_index * 10_007 + stream)
            greedy = temp == 0 and not policy.stochastic
            answers = sample_answers(models[model_index], seq[:, :PROMPT_LEN], 1 if greedy else n, policy, temp, gen)
            if greedy:
                answers = np.repeat(answers, n, axis=1)
            targets = answer_code(seq[:, PROMPT_LEN:])
            correct = (answers == targets[:, None]).sum(1)
            out = {"curve": [float(np.mean([pass_at_k(n, int(c), j) for c in correct])) for j in range(1, n + 1)],
                   "pass1": pass_at_k_per_problem(answers, targets, 1),
                   "pass16": pass_at_k_per_problem(answers, targets, 16), "distinct": distinct_rate(answers)}
            if keep:
                out["answers"] = answers
            return out

        # 1) dev split: choose ES's routing temperature at the chapter's token temperature
        dev_rows = {"topk": [evaluate(dev, topk, T, i, 1) for i in range(len(models))]}
        for j, tau in enumerate(config.routing_temperatures):
            dev_rows[f"es_{tau:g}"] = [evaluate(dev, es(tau), T, i, 100 + j) for i in range(len(models))]
        dev_summary = {name: {q: 100 * float(np.mean([r[q].mean() for r in rows])) for q in ("pass1", "pass16")}
                       for name, rows in dev_rows.items()}
        floor = dev_summary["topk"]["pass1"] - 2.0
        allowed = [t for t in config.routing_temperatures if dev_summary[f"es_{t:g}"]["pass1"] >= floor]
        chosen = (max(allowed, key=lambda t: dev_summary[f"es_{t:g}"]["pass16"]) if allowed
                  else min(config.routing_temperatures))

        # 2) verifiers: trained on candidates sampled on the train split (never the test split)
        train_seq = data["train"][:VERIFIER_TRAIN_PROBLEMS]
        train_targets = answer_code(train_seq[:, PROMPT_LEN:])
        verifiers, shuffled, train_info = [], [], []
        for i, model in enumerate(models):
            gen = torch.Generator().manual_seed(config.seed * 1_000_003 + i * 10_007 + 500)
            cands = np.concatenate([sample_answers(model, train_seq[:, :PROMPT_LEN], n, pol, T, gen)
                                    for pol in (topk, es(chosen))], axis=1)                 # (P, 2n)
            labels = (cands == train_targets[:, None]).reshape(-1).astype(np.float32)
            feats = verifier_features(train_seq, cands)
            vseed = config.seed * 7_919 + i * 101 + 17
            verifiers.append(train_verifier(feats, labels, vseed))
            perm = np.random.default_rng(vseed).permutation(len(labels))
            shuffled.append(train_verifier(feats, labels[perm], vseed + 1))
            fit = verifier_scores(verifiers[-1], train_seq, cands).reshape(-1) > 0
            train_info.append({"positive_rate": float(labels.mean()), "train_accuracy": float((fit == labels).mean())})

        # 3) test split
        plan = {"greedy": (topk, 0.0), "head_greedy": (RoutingPolicy(h, h, e - h, 0.0), 0.0),
                "topk@1": (topk, 1.0), "head@1": (RoutingPolicy(h, h, e - h, 0.0), 1.0),
                "topk@T": (topk, T), "es@T": (es(chosen), T)}
        for t in config.token_temperatures:
            plan[f"temp_{t:g}"] = (topk, t)
        for tau in config.routing_temperatures:
            plan[f"es_{tau:g}"] = (es(tau), 0.0)
            plan[f"noise_{tau:g}"] = (RoutingPolicy.all_experts_noise(k, e, tau), 0.0)
        result = Result(chosen_tau=chosen, dev=dev_summary)
        bon = {key: {"verifier": [], "likelihood": [], "majority": []} for key in ("es", "topk")}
        held = {"scores": [[] for _ in models], "shuffled": [[] for _ in models], "labels": [[] for _ in models]}
        targets = answer_code(test[:, PROMPT_LEN:])
        for s, (name, (policy, temp)) in enumerate(plan.items()):
            rows = [evaluate(test, policy, temp, i, 1000 + s, keep=name in ("topk@T", "es@T"))
                    for i in range(len(models))]
            result.per_problem[name] = {q: np.stack([r[q] for r in rows]) for q in ("pass1", "pass16")}
            result.methods[name] = {"pass1": 100 * float(result.per_problem[name]["pass1"].mean()),
                                    "pass16": 100 * float(result.per_problem[name]["pass16"].mean()),
                                    "distinct": float(np.mean([r["distinct"] for r in rows])),
                                    "curve": list(100 * np.mean([r["curve"] for r in rows], axis=0))}
            if name in ("topk@T", "es@T"):
                key = "topk" if name == "topk@T" else "es"
                for i, r in enumerate(rows):
                    scores = verifier_scores(verifiers[i], test, r["answers"])
                    held["scores"][i].append(scores)
                    held["shuffled"][i].append(verifier_scores(shuffled[i], test, r["answers"]))
                    held["labels"][i].append(r["answers"] == targets[:, None])
                    bon[key]["verifier"].append(100 * float((best_of_n(r["answers"], scores) == targets).mean()))
                    loglik = answer_loglik(models[i], test[:, :PROMPT_LEN], r["answers"])
                    bon[key]["likelihood"].append(100 * float((best_of_n(r["answers"], loglik) == targets).mean()))
                    bon[key]["majority"].append(100 * float((majority_vote(r["answers"]) == targets).mean()))
        result.metrics["best_of_n"] = {m_: {v: float(np.mean(x)) for v, x in d.items()} for m_, d in bon.items()}
        # held-out candidates: test-split answers of topk@T and es@T, (P, 2n) per model
        sc, sh, lab = ([np.concatenate(x, axis=1) for x in held[q]] for q in ("scores", "shuffled", "labels"))
        a, a_lo, a_hi = auc_bootstrap(sc, lab, config.seed * 31 + 1)
        s_, s_lo, s_hi = auc_bootstrap(sh, lab, config.seed * 31 + 2)
        result.metrics["verifier"] = {
            "auc": a, "auc_ci": (a_lo, a_hi), "shuffled_auc": s_, "shuffled_auc_ci": (s_lo, s_hi),
            "accuracy": float(np.mean([((s > 0) == y).mean() for s, y in zip(sc, lab)])),
            "majority_class_accuracy": float(np.mean([max(y.mean(), 1 - y.mean()) for y in lab])),
            "per_model_auc": [auc(s, y) for s, y in zip(sc, lab)],
            "train_problems": len(train_seq), "train_candidates": 2 * n * len(train_seq),
            "train_positive_rate": float(np.mean([t["positive_rate"] for t in train_info])),
            "train_accuracy": float(np.mean([t["train_accuracy"] for t in train_info]))}

        # 4) router shape
        probes = [router_profile(model, test, h, config.perturbation_scale,
                                 torch.Generator().manual_seed(config.seed * 7919 + i)) for i, model in enumerate(models)]
        result.curves["profile"] = np.mean([p["profile"] for p in probes], axis=0)
        result.metrics["head_jaccard"] = float(np.mean([p["head_jaccard"] for p in probes]))
        result.metrics["tail_jaccard"] = float(np.mean([p["tail_jaccard"] for p in probes]))
    finally:
        torch.set_num_threads(threads)
    return result


def paired_difference(a: np.ndarray, b: np.ndarray) -> tuple[float, float, float]:
    """Mean of ``a - b`` in points with a normal 95% interval, paired over problems.

    a, b: (models, problems) in [0, 1]; models are averaged first, so the unit is the problem.
    """
    d = 100 * (a.mean(0) - b.mean(0))
    half = 1.96 * d.std(ddof=1) / np.sqrt(len(d))
    return float(d.mean()), float(d.mean() - half), float(d.mean() + half)


def frontier_gap(points: list[tuple[float, float]], reference: list[tuple[float, float]]) -> list[float]:
    """For each (x, y) in ``points`` whose x lies in the range of ``reference``, y minus the
    piecewise-linear interpolation of the reference curve at x (reference sorted by x)."""
    ref = sorted(reference)
    xs, ys = np.array([p[0] for p in ref]), np.array([p[1] for p in ref])
    return [float(y - np.interp(x, xs, ys)) for x, y in points if xs[0] <= x <= xs[-1]]


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
