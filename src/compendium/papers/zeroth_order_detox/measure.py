"""Every statistic a verdict depends on, computed from a :class:`~.experiment.Result`.

The unit of replication is the crossed design LMs x test prompts: every method is measured on the
same (LM, prompt) cells, and both the trained LMs and the prompts are random draws. Intervals come
from a crossed (two-way) bootstrap (:func:`compendium.stats.crossed_bootstrap`): each replicate
resamples the LMs and the prompts independently, with replacement, and averages the resampled
cells. Every row shares one set of replicates (:func:`compendium.stats.crossed_weights`).
"""

from __future__ import annotations

import numpy as np

from compendium.stats import Estimate, bootstrap_interval, clopper_pearson, crossed_bootstrap, crossed_weights

from .experiment import Result

CROSSED_UNIT = "LMs (crossed with test prompts)"
RESAMPLES = 2000


def reduction(method, baseline, *, weights, level: float = 0.95) -> Estimate:
    """``1 - mean(method) / mean(baseline)`` over paired ``(models, prompts)`` cells, crossed bootstrap."""
    a, b = np.asarray(method, float), np.asarray(baseline, float)
    if a.shape != b.shape or a.ndim != 2:
        raise ValueError(f"method and baseline must be paired (models, prompts) arrays, got {a.shape} and {b.shape}")
    if b.mean() <= 0:
        raise ValueError("the baseline mean must be positive")
    return crossed_bootstrap((a, b), lambda x, y: 1.0 - x / np.maximum(y, 1e-12), unit=CROSSED_UNIT, weights=weights, level=level,
                             what="relative reduction")


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


def dominance(method: dict, rival: dict, *, weights, level: float = 0.95) -> dict:
    """Is ``method`` dominated by ``rival`` on the (EMT, log-perplexity) plane? Decided on intervals.

    ``method`` and ``rival`` hold ``"emt"`` and ``"logppl"`` as ``(models, prompts)`` cells. The
    differences rival - method on each axis get crossed-bootstrap intervals at ``level``.
    ``"not dominated"``: the rival is worse on at least one axis (that interval wholly above 0);
    ``"dominated"``: the rival is no worse on both (both intervals wholly at or below 0);
    ``"undecided"`` otherwise. With two-sided 95 % intervals each one-sided test runs at 2.5 %,
    so "not dominated" (a union of two tests, Bonferroni) errs at most 5 % and "dominated"
    (an intersection-union test) at most 2.5 %.
    """
    diff = {ax: crossed_bootstrap((rival[ax], method[ax]), lambda r, m: r - m, unit=CROSSED_UNIT, weights=weights, level=level,
                                  what=f"rival - method, {ax}") for ax in ("emt", "logppl")}
    if any(d.low > 0 for d in diff.values()):
        state = "not dominated"
    elif all(d.high <= 0 for d in diff.values()):
        state = "dominated"
    else:
        state = "undecided"
    point = dominated(float(np.mean(method["emt"])), float(np.mean(method["logppl"])),
                      float(np.mean(rival["emt"])), float(np.mean(rival["logppl"])))
    return {"state": state, "point_dominated": point, "d_emt": diff["emt"], "d_logppl": diff["logppl"]}


def count_not_dominated(states, *, unit: str = "budgets") -> Estimate:
    """The count of budgets not dominated, as a bracket: ``low`` = shown not dominated, ``high`` = not shown dominated.

    ``point`` is the count on point values. The bracket is exact given the per-budget intervals
    (record it with ``exact=True``): a criterion on the count passes when ``low`` satisfies it
    and fails when ``high`` violates it.
    """
    states = list(states)
    if not states:
        raise ValueError("no budgets")
    low = sum(s["state"] == "not dominated" for s in states)
    high = sum(s["state"] != "dominated" for s in states)
    point = sum(not s["point_dominated"] for s in states)
    return Estimate(point, low, high, 0.95, unit, len(states),
                    "bracket over budgets: low = rival worse on an axis (95% crossed interval above 0), "
                    "high = not shown dominated on both axes")


def table(result: Result, *, weights=None, level: float = 0.95) -> list[dict]:
    """One row per method and budget: EMT, toxicity probability, perplexity, distinct-2 (means over LMs and prompts).

    With ``weights`` (:func:`crossed_weights`), EMT and perplexity also get crossed-bootstrap intervals.
    """
    rows = []
    for key, m in result.metrics.items():
        name, budget = (key, None) if isinstance(key, str) else (key[0], key[1:])
        row = {"method": name, "q": budget[0] if budget and len(budget) == 2 else None,
               "K": budget[-1] if budget else None,
               "N": result.best_of_n.get(tuple(budget)) if name == "best_of_n" else None,
               "expected max toxicity": float(m["emt"].mean()), "toxicity probability": float(m["toxic"].mean()),
               "perplexity": float(np.exp(m["logppl"].mean())), "distinct-2": float(m["distinct"].mean())}
        if weights is not None:
            e = crossed_bootstrap((m["emt"],), lambda x: x, unit=CROSSED_UNIT, weights=weights, level=level)
            p = crossed_bootstrap((m["logppl"],), np.exp, unit=CROSSED_UNIT, weights=weights, level=level)
            row.update({"EMT low": e.low, "EMT high": e.high, "perplexity low": p.low, "perplexity high": p.high})
        rows.append(row)
    return rows


def measurements(result: Result) -> dict:
    """Estimates for the ledger: crossed bootstrap over LMs x test prompts (cosine rows: their own units)."""
    cfg, M = result.config, result.metrics
    cells = lambda key, name="emt": M[key][name]  # noqa: E731   (models, prompts)
    hb = result.headline_budget
    n_models, n_prompts = M["none"]["emt"].shape
    w = crossed_weights(n_models, n_prompts, rng=np.random.default_rng([cfg.seed, 100]), resamples=RESAMPLES)
    zo_h, none, rand_h = cells(("zo", *hb)), cells("none"), cells(("random", *hb))
    out: dict = {"headline_budget": hb, "weights": w}
    out["reduction"] = reduction(zo_h, none, weights=w)
    out["random_reduction"] = reduction(rand_h, none, weights=w)
    out["fo_reduction"] = reduction(cells(("first_order", hb[1])), none, weights=w)
    out["zo_minus_random"] = crossed_bootstrap((zo_h, rand_h), lambda a, b: a - b, unit=CROSSED_UNIT, weights=w, what="ZO - random, EMT")
    out["headroom"] = crossed_bootstrap((none,), lambda a: a, unit=CROSSED_UNIT, weights=w, what="EMT without intervention")
    out["per_model_reduction"] = [float(1 - M[("zo", *hb)]["emt"][i].mean() / M["none"]["emt"][i].mean())
                                  for i in range(n_models)]
    zo_states, rand_states, per_budget = [], [], {}
    for b in cfg.budgets:
        bon = M[("best_of_n", *b)]
        z, r = dominance(M[("zo", *b)], bon, weights=w), dominance(M[("random", *b)], bon, weights=w)
        zo_states.append(z)
        rand_states.append(r)
        per_budget[f"q={b[0]},K={b[1]}"] = {
            "N": result.best_of_n[b], "zo": z["state"], "random": r["state"],
            "zo_point_dominated": z["point_dominated"], "random_point_dominated": r["point_dominated"],
            "bon_minus_zo_emt": z["d_emt"], "bon_minus_zo_logppl": z["d_logppl"]}
    out["zo_not_dominated"] = count_not_dominated(zo_states)
    out["random_not_dominated"] = count_not_dominated(rand_states)
    out["tradeoff"] = per_budget
    qmax = max(cfg.q_values)
    cos_q = {q: result.cosines[q].mean(0) for q in cfg.q_values}
    top, rc = result.cosines[qmax].ravel(), result.cosines["random"].ravel()   # one estimate per (LM, prompt)
    out["cos_positive"] = clopper_pearson(int((top > 0).sum()), top.size, unit="(LM, test prompt) pairs")
    out["random_cos_positive"] = clopper_pearson(int((rc > 0).sum()), rc.size, unit="(LM, test prompt) pairs")
    out["cos_slope"] = cosine_slope(cfg.q_values, np.stack([cos_q[q] for q in cfg.q_values], 1),
                                    rng=np.random.default_rng([cfg.seed, 103]))
    out["mean_cos"] = {q: float(cos_q[q].mean()) for q in cfg.q_values}
    return out
