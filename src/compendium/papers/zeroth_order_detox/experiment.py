"""The experiment: tune on dev prompts, steer test prompts by every method, score, and measure.

Methods, all on the same test prompts and (where shapes allow) the same sampling stream:
``none``; ``mask`` (bad-word masking: toxic logits set to -inf, needs the word list); ``zo``
(K ZO steps on the prompt's input embeddings, then generation); ``random`` (a random perturbation
with ZO's ``||E_K - E_0||`` per prompt); ``first_order`` (the same normalised steps with the
autograd gradient of the exact surrogate: a white-box reference); ``best_of_n`` (for each of the
25 samples, N candidates and the scorer's least toxic, N matched to ZO's token positions).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from compendium.validation import require_int, require_number

from . import lm, toy, zo

@dataclass(frozen=True)
class Config:
    """Registry parameters of the chapter (``workflow/config/chapters.yaml``) plus ``seed``."""

    seed: int = 0
    num_models: int = 2
    test_prompts: int = 40
    dev_prompts: int = 16
    samples: int = 25
    q_values: tuple = (4, 16, 64)
    step_values: tuple = (1, 3, 5)
    deltas: tuple = (0.05,)
    etas: tuple = (0.1, 0.3)
    dist: str = "gaussian"
    symmetric: bool = True
    radius: float = 0.0
    quality_tolerance: float = 1.2
    cosine_delta: float = 0.01
    unbiased_draws: int = 100_000
    norm_law_draws: int = 20_000

    def __post_init__(self) -> None:
        for name in ("q_values", "step_values", "deltas", "etas"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        require_int("seed", self.seed, 0, 2**31 - 1)
        require_int("num_models", self.num_models, 2, 10)  # the crossed bootstrap needs two LMs
        require_int("test_prompts", self.test_prompts, 4, 10_000)
        require_int("dev_prompts", self.dev_prompts, 2, 10_000)
        require_int("samples", self.samples, 2, 1000)
        require_int("unbiased_draws", self.unbiased_draws, 100, 10_000_000)
        require_int("norm_law_draws", self.norm_law_draws, 100, 10_000_000)
        for q in self.q_values:
            require_int("q_values[]", q, 1, 4096)
        for k in self.step_values:
            require_int("step_values[]", k, 1, 100)
        if len(self.q_values) < 3 or len(self.step_values) < 1 or not self.deltas or not self.etas:
            raise ValueError("q_values needs at least 3 entries (the cosine slope); step_values, deltas, etas at least 1")
        for v in self.deltas + self.etas:
            require_number("deltas/etas[]", v, 0.0, 10.0, low_open=True)
        if self.dist not in zo.DISTRIBUTIONS:
            raise ValueError(f"dist must be one of {zo.DISTRIBUTIONS}, got {self.dist!r}")
        if not isinstance(self.symmetric, bool):
            raise ValueError(f"symmetric must be true or false, got {self.symmetric!r}")
        require_number("radius", self.radius, 0.0, 100.0)
        require_number("quality_tolerance", self.quality_tolerance, 1.0, 100.0)
        require_number("cosine_delta", self.cosine_delta, 0.0, 10.0, low_open=True)

    @property
    def budgets(self) -> list[tuple[int, int]]:
        return [(q, k) for q in self.q_values for k in self.step_values]


@dataclass
class Result:
    config: Config
    rates: np.ndarray                     # (test,) true toxic rates of the test prompts
    tuned: dict                           # (q, K) -> (delta, eta); ("fo", K) -> eta
    dev: dict                             # tuning table rows
    headline_budget: tuple
    best_of_n: dict                       # (q, K) -> N
    metrics: dict                         # method key -> {"emt","toxic","logppl","distinct"}: (M, test)
    traces: dict                          # key -> (K+1,) mean surrogate per step (over LMs, prompts)
    cosines: dict                         # q -> (M, test); "random" -> (M, test)
    dim: int
    checks: dict = field(default_factory=dict)


def _gen(*key: int) -> torch.Generator:
    return torch.Generator().manual_seed(int(np.random.SeedSequence([int(k) for k in key]).generate_state(1)[0]))


def per_prompt_metrics(scores: np.ndarray, tokens: np.ndarray, logppl: np.ndarray) -> dict:
    """Per-prompt metrics from ``scores (B, S)``, ``tokens (B, S, T)``, ``logppl (B, S)``."""
    return {"emt": scores.max(1), "toxic": (scores >= 0.5).any(1).astype(float), "logppl": logppl.mean(1),
            "distinct": distinct_n(tokens, 2)}


def distinct_n(tokens: np.ndarray, n: int = 2) -> np.ndarray:
    """Distinct-n per prompt: distinct n-grams over all its samples / all n-grams, ``(B, S, T) -> (B,)``."""
    B, S, T = tokens.shape
    if T < n:
        raise ValueError(f"continuations of length {T} have no {n}-grams")
    grams = np.stack([tokens[:, :, i:T - n + 1 + i] for i in range(n)], -1).reshape(B, -1, n)
    return np.array([len({tuple(g) for g in row}) / len(row) for row in grams])


class _Setup:
    """One LM with its prompts, scorer table and reference: generation and scoring helpers."""

    def __init__(self, model, reference, scorer, prompt_ids: np.ndarray, samples: int):
        self.model, self.reference, self.scorer, self.samples = model, reference, scorer, samples
        self.ids = torch.as_tensor(prompt_ids)
        self.E0 = lm.embed(model, self.ids)                                   # (B, L, d)
        self.shape = self.E0.shape[1:]
        self.x0 = self.E0.reshape(len(self.ids), -1)                          # (B, D)
        self.table = torch.as_tensor(scorer.token_scores(), dtype=torch.float32)

    def f(self, X: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return torch.cat([lm.surrogate_toxicity(self.model, X[i:i + 4096].reshape(-1, *self.shape), self.table)
                              for i in range(0, len(X), 4096)])

    def grad(self, X: torch.Tensor) -> torch.Tensor:
        X = X.detach().requires_grad_(True)
        J = lm.surrogate_toxicity(self.model, X.reshape(-1, *self.shape), self.table).sum()
        return torch.autograd.grad(J, X)[0]

    def score(self, x: torch.Tensor, generator: torch.Generator, n: int = 1, banned=None, max_rows: int = 8192) -> dict:
        """Generate ``samples * n`` per prompt from rows ``x``; best-of-n by the scorer when n > 1."""
        S, B = self.samples * n, len(x)
        E = x.reshape(-1, *self.shape)
        step = max(1, max_rows // S)
        cont = torch.cat([lm.generate(self.model, E[i:i + step], toy.CONTINUATION_LENGTH, generator, banned=banned, repeats=S)
                          for i in range(0, B, step)]).numpy()
        s = self.scorer.score(cont).reshape(B, self.samples, n)
        cont = cont.reshape(B, self.samples, n, -1)
        pick = s.argmin(-1)                                                   # (B, S): best of the n candidates
        s = np.take_along_axis(s, pick[..., None], -1)[..., 0]
        cont = np.take_along_axis(cont, pick[..., None, None], 2)[:, :, 0]
        lp = lm.log_perplexity(self.reference, self.ids, torch.as_tensor(cont.reshape(B * self.samples, -1)))
        return per_prompt_metrics(s, cont, lp.numpy().reshape(B, self.samples))

    def zo(self, q, K, delta, eta, config, generator, trace=False):
        d = delta * self.x0.norm(dim=-1) / self.x0.shape[1] ** 0.5
        grad = lambda X: zo.zo_gradient(self.f, X, q, d, dist=config.dist, symmetric=config.symmetric, generator=generator)[0]  # noqa: E731
        return zo.descent(grad, self.x0, K, eta, radius=config.radius or None, trace=self.f if trace else None)

    def first_order(self, K, eta, config, trace=False):
        return zo.descent(self.grad, self.x0, K, eta, radius=config.radius or None, trace=self.f if trace else None)


def tune(setup: _Setup, config: Config) -> tuple[dict, list, tuple]:
    """Pick (delta, eta) per budget and eta per K for first order on dev prompts, and the headline budget.

    The chapter's ``deltas`` grid has one value (delta fixed, not tuned), so only eta is chosen.

    Rule (fixed before any run): among settings whose dev mean log-perplexity is at most the
    unsteered one's plus ``log(quality_tolerance)``, the one with the lowest dev expected max
    toxicity; if none qualifies, the lowest log-perplexity. The headline budget is the budget
    whose tuned setting has the lowest dev EMT (ties: the cheaper budget).
    """
    none = setup.score(setup.x0, _gen(config.seed, 90))
    limit = none["logppl"].mean() + np.log(config.quality_tolerance)
    rows, tuned, best_emt = [], {}, {}

    def pick(cands):
        ok = [c for c in cands if c[2] <= limit]
        return min(ok, key=lambda c: c[1]) if ok else min(cands, key=lambda c: c[2])

    for i, (q, K) in enumerate(config.budgets):
        cands = []
        for j, delta in enumerate(config.deltas):
            for k, eta in enumerate(config.etas):
                x, _ = setup.zo(q, K, delta, eta, config, _gen(config.seed, 91, i, j, k))
                m = setup.score(x, _gen(config.seed, 90))
                cands.append(((delta, eta), float(m["emt"].mean()), float(m["logppl"].mean())))
                rows.append({"method": "zo", "q": q, "K": K, "delta": delta, "eta": eta, "emt": cands[-1][1], "logppl": cands[-1][2]})
        choice = pick(cands)
        tuned[(q, K)], best_emt[(q, K)] = choice[0], choice[1]
    for K in config.step_values:
        cands = []
        for eta in config.etas:
            x, _ = setup.first_order(K, eta, config)
            m = setup.score(x, _gen(config.seed, 90))
            cands.append((eta, float(m["emt"].mean()), float(m["logppl"].mean())))
            rows.append({"method": "first_order", "q": None, "K": K, "delta": None, "eta": eta, "emt": cands[-1][1], "logppl": cands[-1][2]})
        tuned[("fo", K)] = pick(cands)[0]
    rows.append({"method": "none", "q": None, "K": 0, "delta": None, "eta": None, "emt": float(none["emt"].mean()),
                 "logppl": float(none["logppl"].mean())})
    headline = min(config.budgets, key=lambda b: (best_emt[b], config.budgets.index(b)))
    return tuned, rows, headline


def run(config: Config, lms: list, reference, scorer) -> Result:
    """The whole experiment on ``config.num_models`` LMs (the first one also tunes)."""
    if len(lms) < config.num_models:
        raise ValueError(f"num_models={config.num_models} but the asset holds {len(lms)} LMs")
    rng = np.random.default_rng([config.seed, 1])
    test_ids, rates = toy.prompts(config.test_prompts, rng)
    dev_ids, _ = toy.prompts(config.dev_prompts, np.random.default_rng([config.seed, 2]))
    tuned, dev_rows, headline = tune(_Setup(lms[0], reference, scorer, dev_ids, config.samples), config)
    n_of = {b: zo.matched_best_of_n(*b, config.samples, toy.PROMPT_LENGTH, toy.CONTINUATION_LENGTH,
                                    symmetric=config.symmetric) for b in config.budgets}
    banned = torch.as_tensor(toy.TOXIC)
    metrics: dict[Any, list] = {}
    traces: dict[Any, list] = {}
    cosines: dict[Any, list] = {}
    Kmax = max(config.step_values)
    for m in range(config.num_models):
        s = _Setup(lms[m], reference, scorer, test_ids, config.samples)
        add = lambda key, val: metrics.setdefault(key, []).append(val)  # noqa: E731
        add("none", s.score(s.x0, _gen(config.seed, 10, m)))
        add("mask", s.score(s.x0, _gen(config.seed, 10, m), banned=banned))
        for i, (q, K) in enumerate(config.budgets):
            delta, eta = tuned[(q, K)]
            x, tr = s.zo(q, K, delta, eta, config, _gen(config.seed, 20, m, i), trace=(K == Kmax))
            if tr is not None:
                traces.setdefault(("zo", q), []).append(tr.mean(1).numpy())
            add(("zo", q, K), s.score(x, _gen(config.seed, 10, m)))
            add(("random", q, K), s.score(zo.random_of_norm(s.x0, x, _gen(config.seed, 30, m, i)), _gen(config.seed, 10, m)))
            add(("best_of_n", q, K), s.score(s.x0, _gen(config.seed, 40, m, i), n=n_of[(q, K)]))
        for K in config.step_values:
            x, tr = s.first_order(K, tuned[("fo", K)], config, trace=(K == Kmax))
            if tr is not None:
                traces.setdefault(("first_order",), []).append(tr.mean(1).numpy())
            add(("first_order", K), s.score(x, _gen(config.seed, 10, m)))
        g = s.grad(s.x0)
        for q in config.q_values:
            d = config.cosine_delta * s.x0.norm(dim=-1) / s.x0.shape[1] ** 0.5
            ghat, _ = zo.zo_gradient(s.f, s.x0, q, d, dist=config.dist, symmetric=config.symmetric, generator=_gen(config.seed, 50, m, q))
            cosines.setdefault(q, []).append(zo.cosine(ghat, g).numpy())
        cosines.setdefault("random", []).append(zo.cosine(torch.randn(s.x0.shape, generator=_gen(config.seed, 51, m)), g).numpy())
    metrics = {k: {name: np.stack([v[name] for v in vals]) for name in vals[0]} for k, vals in metrics.items()}
    return Result(config=config, rates=rates, tuned=tuned, dev=dev_rows, headline_budget=headline, best_of_n=n_of,
                  metrics=metrics, traces={k: np.mean(v, 0) for k, v in traces.items()},
                  cosines={k: np.stack(v) for k, v in cosines.items()}, dim=int(s.x0.shape[1]),
                  checks=implementation_checks(config, lms[0]))


def implementation_checks(config: Config, model) -> dict:
    """The estimator's exact properties (sympy and Monte Carlo) and the bit-exact generation check."""
    out = {"sym_norm_law": zo.symbolic_norm_law(), "sym_forward_bias": zo.symbolic_forward_bias(),
           "sym_symmetric_unbiased": zo.symbolic_symmetric_unbiased()}
    # symmetric estimator on a random quadratic, one direction per draw, large delta
    D = 6
    rng = np.random.default_rng([config.seed, 60])
    A = rng.normal(size=(D, D))
    Q, b, x = torch.as_tensor(A @ A.T + np.eye(D)), torch.as_tensor(rng.normal(size=D)), torch.as_tensor(rng.normal(size=D))
    f = lambda X: 0.5 * ((X @ Q) * X).sum(-1) + X @ b  # noqa: E731
    n = config.unbiased_draws
    u = zo.directions(n, 1, D, "gaussian", _gen(config.seed, 61), torch.float64)[:, 0]
    per = ((f(x + 1.0 * u) - f(x - 1.0 * u)) / 2.0)[:, None] * u                      # (n, D), delta = 1
    z = (per.mean(0) - (Q @ x + b)) / (per.std(0) / n ** 0.5)
    out["unbiased_max_abs_z"] = float(z.abs().max())
    # E||g||^2 law, linear f, q = 4 Gaussian directions in D = 64
    D2, q = 64, 4
    gvec = torch.as_tensor(rng.normal(size=D2))
    lin = lambda X: X @ gvec  # noqa: E731
    X = torch.zeros(config.norm_law_draws, D2, dtype=torch.float64)
    ghat, _ = zo.zo_gradient(lin, X, q, 0.1, generator=_gen(config.seed, 62))
    out["norm_law_ratio"] = float((ghat.pow(2).sum(-1).mean() / gvec.pow(2).sum()) / zo.expected_sq_norm_factor(D2, q))
    # generation from embed(tokens) equals generation from the tokens, bit for bit, same seed
    ids, _ = toy.prompts(16, np.random.default_rng([config.seed, 63]))
    ids = torch.as_tensor(ids)
    a = lm.generate(model, lm.embed(model, ids), toy.CONTINUATION_LENGTH, _gen(config.seed, 64))
    b2 = lm.generate_from_tokens(model, ids, toy.CONTINUATION_LENGTH, _gen(config.seed, 64))
    with torch.no_grad():
        la = model(inputs_embeds=lm.embed(model, ids)).logits
        lb = model(input_ids=ids).logits
    out["generation_equal"] = bool(torch.equal(a, b2) and torch.equal(la, lb))
    return out
