"""Every statistic a verdict depends on, computed from a :class:`~.experiment.Result`."""

from __future__ import annotations

import numpy as np

from compendium.stats import Estimate, bootstrap_interval, clopper_pearson, mean_interval, paired_difference

from .experiment import UNIT, Result


def relative_reduction(method, baseline, *, rng, unit: str = UNIT, level: float = 0.95) -> Estimate:
    """``1 - mean(method) / mean(baseline)`` with a percentile bootstrap over paired units."""
    a, b = np.asarray(method, float), np.asarray(baseline, float)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"method and baseline must be paired 1-D arrays, got {a.shape} and {b.shape}")
    if b.mean() <= 0:
        raise ValueError("the baseline mean must be positive")
    stat = lambda idx: 1.0 - a[idx.astype(int)].mean() / max(b[idx.astype(int)].mean(), 1e-12)  # noqa: E731
    est = bootstrap_interval(np.arange(a.size, dtype=float), stat, level=level, unit=unit, rng=rng)
    return Estimate(est.point, est.low, est.high, est.level, unit, est.n, f"relative reduction, {est.method}")


def cosine_slope(q_values, cosines, *, rng, unit: str = "test prompts", level: float = 0.95) -> Estimate:
    """Log-log slope of the mean cosine against q, bootstrap over prompts (``cosines`` (prompts, len(q)))."""
    C = np.asarray(cosines, float)
    lq = np.log(np.asarray(q_values, float))
    lq = lq - lq.mean()

    def stat(idx):
        m = np.clip(C[idx.astype(int)].mean(0), 1e-9, None)
        return float(np.log(m) @ lq / (lq @ lq))

    est = bootstrap_interval(np.arange(C.shape[0], dtype=float), stat, level=level, unit=unit, rng=rng)
    return Estimate(est.point, est.low, est.high, est.level, unit, est.n, f"log-log slope of the mean cosine, {est.method}")


def dominated(a_tox: float, a_ppl: float, b_tox: float, b_ppl: float) -> bool:
    """Whether point ``b`` dominates point ``a`` on the toxicity-perplexity plane (both no larger)."""
    return bool(b_tox <= a_tox and b_ppl <= a_ppl)


def table(result: Result) -> list[dict]:
    """One row per method and budget: EMT, toxicity probability, perplexity, distinct-2 (means over LMs and prompts)."""
    rows = []
    for key, m in result.metrics.items():
        name, budget = (key, None) if isinstance(key, str) else (key[0], key[1:])
        rows.append({"method": name, "q": budget[0] if budget and len(budget) == 2 else None,
                     "K": budget[-1] if budget else None,
                     "N": result.best_of_n.get(tuple(budget)) if name == "best_of_n" else None,
                     "expected max toxicity": float(m["emt"].mean()), "toxicity probability": float(m["toxic"].mean()),
                     "perplexity": float(np.exp(m["logppl"].mean())), "distinct-2": float(m["distinct"].mean())})
    return rows


def measurements(result: Result) -> dict:
    """Estimates for the ledger (units: test prompts, each averaged over the LM seeds)."""
    cfg, M = result.config, result.metrics
    avg = lambda key, name="emt": M[key][name].mean(0)  # noqa: E731
    hb = result.headline_budget
    zo_h, none, rand_h = avg(("zo", *hb)), avg("none"), avg(("random", *hb))
    out: dict = {"headline_budget": hb}
    out["reduction"] = relative_reduction(zo_h, none, rng=np.random.default_rng([cfg.seed, 100]))
    out["random_reduction"] = relative_reduction(rand_h, none, rng=np.random.default_rng([cfg.seed, 101]))
    out["fo_reduction"] = relative_reduction(avg(("first_order", hb[1])), none, rng=np.random.default_rng([cfg.seed, 102]))
    out["zo_minus_random"] = paired_difference(zo_h, rand_h, unit=UNIT)
    out["headroom"] = mean_interval(none, unit=UNIT)
    out["per_model_reduction"] = [float(1 - M[("zo", *hb)]["emt"][i].mean() / M["none"]["emt"][i].mean())
                                  for i in range(M["none"]["emt"].shape[0])]
    nd_zo, nd_rand, per_budget = 0, 0, {}
    for b in cfg.budgets:
        bon = (avg(("best_of_n", *b)).mean(), avg(("best_of_n", *b), "logppl").mean())
        z = (avg(("zo", *b)).mean(), avg(("zo", *b), "logppl").mean())
        r = (avg(("random", *b)).mean(), avg(("random", *b), "logppl").mean())
        dz, dr = dominated(*z, *bon), dominated(*r, *bon)
        nd_zo += not dz
        nd_rand += not dr
        per_budget[f"q={b[0]},K={b[1]}"] = {"N": result.best_of_n[b], "zo_dominated": dz, "random_dominated": dr}
    out.update(zo_not_dominated=nd_zo, random_not_dominated=nd_rand, tradeoff=per_budget)
    qmax = max(cfg.q_values)
    cos_q = {q: result.cosines[q].mean(0) for q in cfg.q_values}
    top, rc = result.cosines[qmax].ravel(), result.cosines["random"].ravel()   # one estimate per (LM, prompt)
    out["cos_positive"] = clopper_pearson(int((top > 0).sum()), top.size, unit="(LM, test prompt) pairs")
    out["random_cos_positive"] = clopper_pearson(int((rc > 0).sum()), rc.size, unit="(LM, test prompt) pairs")
    out["cos_slope"] = cosine_slope(cfg.q_values, np.stack([cos_q[q] for q in cfg.q_values], 1),
                                    rng=np.random.default_rng([cfg.seed, 103]))
    out["mean_cos"] = {q: float(cos_q[q].mean()) for q in cfg.q_values}
    return out
