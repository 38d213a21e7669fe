"""The TimesX-mini experiment: replicates, variants, the p_relevant sweep, and the ledger's statistics."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import scipy.stats

from compendium import stats
from compendium.validation import require_int, require_number

from . import forecasters as fc
from . import metrics
from .generator import (CLEAN, CUTOFF, DEV_ORIGIN, DOMAINS, HORIZON, INPUT, PERIODS, Knobs, draw_events,
                        leakage_audit, make_contexts, make_series, real_series, scheduled_future_items, templates)

QUANTILE_LEVELS = np.arange(1, 10) / 10
UNIMODAL = ("seasonal naive", "Holt-Winters", "global MLP")
MEMORISER_RECALL = 0.25  # share of the leaked windows the memorising twin stores (the positive leak control)
METHODS = UNIMODAL + ("unimodal (dev-selected)", "context-adjusted", "oracle parser", "mean ensemble",
                      "median ensemble")


@dataclass(frozen=True)
class Config:
    """TimesX-mini at one scale (registry parameters plus ``seed``)."""

    seed: int = 0
    num_series: int = 40
    num_pretrain_series: int = 60
    num_context_series: int = 300
    num_replicates: int = 5
    p_relevant_levels: tuple = (0.2, 0.4, 0.6, 0.8, 1.0)
    realistic_p_relevant: float = 0.5
    realistic_p_misleading: float = 0.2
    realistic_date_noise: float = 0.3
    realistic_heldout_share: float = 0.5
    mlp_hidden: int = 64
    mlp_steps: int = 200
    bootstrap_resamples: int = 2000

    def __post_init__(self):
        object.__setattr__(self, "p_relevant_levels", tuple(float(p) for p in self.p_relevant_levels))
        require_int("seed", self.seed, 0, 2**31 - 1)
        require_int("num_series", self.num_series, 10, 5000)
        require_int("num_pretrain_series", self.num_pretrain_series, 5, 5000)
        require_int("num_context_series", self.num_context_series, 30, 20000)
        require_int("num_replicates", self.num_replicates, 2, 50)
        require_int("mlp_hidden", self.mlp_hidden, 4, 1024)
        require_int("mlp_steps", self.mlp_steps, 1, 100000)
        require_int("bootstrap_resamples", self.bootstrap_resamples, 100, 100000)
        for name in ("realistic_p_relevant", "realistic_p_misleading", "realistic_date_noise",
                     "realistic_heldout_share"):
            require_number(name, getattr(self, name), 0.0, 1.0)
        if not self.p_relevant_levels or any(not 0.0 <= p <= 1.0 for p in self.p_relevant_levels):
            raise ValueError(f"p_relevant_levels must be values in [0, 1], got {self.p_relevant_levels}")

    @property
    def realistic(self) -> Knobs:
        return Knobs(self.realistic_p_relevant, self.realistic_p_misleading, self.realistic_date_noise,
                     self.realistic_heldout_share)

    def sweep_knobs(self, p_relevant: float) -> Knobs:
        """The realistic variant with ``p_relevant`` replaced (misleading share capped at 1 - p)."""
        return Knobs(p_relevant, min(self.realistic_p_misleading, 1.0 - p_relevant), self.realistic_date_noise,
                     self.realistic_heldout_share)


@dataclass(frozen=True, eq=False)
class Result:
    config: Config
    scores: pd.DataFrame        # one row per (replicate, variant, series, method): mase, crps
    cells: pd.DataFrame         # one row per (replicate, variant): error correlation, gains, audit counts
    leakage: pd.DataFrame       # one row per replicate: MLP test MASE with clean / leaky / control training
    base_choice: list           # dev-selected unimodal per replicate
    checks: dict = field(default_factory=dict)


def _series_panel(n: int, rng: np.random.Generator, real: list) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    domains = np.array([DOMAINS[i % len(DOMAINS)] for i in range(n)])
    return domains, np.array([PERIODS[d] for d in domains]), make_series(domains, rng, real)


def _train_origins() -> list[int]:
    return list(range(INPUT, CUTOFF - HORIZON + 1, 4))


def run_replicate(config: Config, replicate: int, tpl: dict, real: list) -> dict:
    """One replicate: fresh series, corpora, trained models, and every variant scored."""
    rng = np.random.default_rng([config.seed, replicate])
    model_seed = 1000 * config.seed + replicate
    domains, periods, series = _series_panel(config.num_series, rng, real)
    _, _, pretrain = _series_panel(config.num_pretrain_series, rng, real)
    ctx_domains, _, ctx_series = _series_panel(config.num_context_series, rng, real)
    draws = draw_events(config.num_series, rng)
    ctx_draws = draw_events(config.num_context_series, rng)

    # --- the global MLP: pretrained before the cutoff; a leaky and a control twin -----------------
    X, Y, _, ends = fc.windows_from(pretrain, _train_origins())
    clean_truth = series[:, CUTOFF:] * np.exp(make_contexts(domains, draws, CLEAN, tpl).true_log_multiplier)
    eval_series = np.concatenate([series[:, :CUTOFF], clean_truth], axis=1)
    Xl, Yl, _, ends_l = fc.windows_from(eval_series, [CUTOFF])
    Xc, Yc, _, ends_c = fc.windows_from(series, [DEV_ORIGIN])
    kw = dict(hidden=config.mlp_hidden, steps=config.mlp_steps, seed=model_seed)
    mlp = fc.train_global_mlp(X, Y, **kw)
    leaky = fc.train_global_mlp(np.concatenate([X, Xl]), np.concatenate([Y, Yl]), **kw)
    control = fc.train_global_mlp(np.concatenate([X, Xc]), np.concatenate([Y, Yc]), **kw)
    # positive control: the same leaked windows repeated until they are as many as the clean corpus,
    # a leak the check must detect (if it does not, a 'no effect' from the real leak means nothing)
    repeat = max(1, len(X) // max(1, len(Xl)))
    planted = fc.train_global_mlp(np.concatenate([X, np.repeat(Xl, repeat, axis=0)]),
                                  np.concatenate([Y, np.repeat(Yl, repeat, axis=0)]), **kw)
    # positive control: a memorising twin, the clean MLP plus an exact-lookup memory of a random quarter of
    # the leaked windows; the check must see it (if not, a 'no effect' from the real leak means nothing)
    recalled = np.random.default_rng([config.seed, replicate, 31]).random(len(Xl)) < MEMORISER_RECALL
    training_audit = {"clean_windows_past_cutoff": int(np.sum(ends > CUTOFF)),
                      "leaky_windows_past_cutoff": int(np.sum(np.concatenate([ends, ends_l]) > CUTOFF)),
                      "control_windows_past_cutoff": int(np.sum(np.concatenate([ends, ends_c]) > CUTOFF)),
                      "leaked_windows": len(Xl)}
    history = series[:, :CUTOFF]
    scale = metrics.mase_scale(history, periods)
    leak = {"replicate": replicate,
            **{f"mase_{name}": float(metrics.mase(clean_truth, fc.mlp_forecast(m, history), scale).mean())
               for name, m in (("clean", mlp), ("leaky", leaky), ("control", control), ("planted", planted))},
            "mase_memoriser": float(metrics.mase(clean_truth, fc.memorising_forecast(mlp, Xl[recalled], Yl[recalled], history),
                                                 scale).mean()),
            "planted_repeat": repeat, "memorised_windows": int(recalled.sum())}

    # --- context model: trained on clean contexts before the cutoff ---------------------------------
    ctx = make_contexts(ctx_domains, ctx_draws, CLEAN, tpl, origin=DEV_ORIGIN)
    window = slice(DEV_ORIGIN, CUTOFF)
    ctx_series[:, window] *= np.exp(ctx.true_log_multiplier)
    ctx_base = fc.mlp_forecast(mlp, ctx_series[:, :DEV_ORIGIN])
    log_ratio = np.log(ctx_series[:, window] / np.maximum(ctx_base, 1e-9))
    stated = ctx.stated_log_multiplier != 0
    target = np.array([r[s].mean() - r[~s].mean() if s.any() else 0.0 for r, s in zip(log_ratio, stated)])
    context_model = fc.ContextModel().fit(ctx.texts, target)

    # --- unimodal forecasts (the same in every variant) and the dev selection ----------------------
    dev_truth = series[:, DEV_ORIGIN:CUTOFF]
    dev_hist = series[:, :DEV_ORIGIN]
    dev_scale = metrics.mase_scale(dev_hist, periods)
    hw_dev, fail_dev = fc.holt_winters(dev_hist, periods)
    dev = {"seasonal naive": fc.seasonal_naive(dev_hist, periods), "Holt-Winters": hw_dev,
           "global MLP": fc.mlp_forecast(mlp, dev_hist)}
    dev_mase = {k: float(metrics.mase(dev_truth, v, dev_scale).mean()) for k, v in dev.items()}
    base_name = min(dev_mase, key=dev_mase.get)
    hw, fail_eval = fc.holt_winters(history, periods)
    unimodal = {"seasonal naive": fc.seasonal_naive(history, periods), "Holt-Winters": hw,
                "global MLP": fc.mlp_forecast(mlp, history)}
    base = unimodal[base_name]
    # the learned-model floor: each unimodal forecaster on the post-cutoff horizon without events
    event_free = {k: float(metrics.mase(series[:, CUTOFF:], v, scale).mean()) for k, v in unimodal.items()}
    sigma = 1.2533 * np.mean(np.abs(dev[base_name] - dev_truth), axis=1)  # Gaussian sigma from dev MAE

    variants = {"clean": (CLEAN, None), "realistic": (config.realistic, None),
                "shuffled": (CLEAN, rng.permutation(config.num_series))}
    for p in config.p_relevant_levels:
        variants[f"sweep {p:g}"] = (config.sweep_knobs(p), None)
    rows, cells = [], []
    for variant, (knobs, permutation) in variants.items():
        c = make_contexts(domains, draws, knobs, tpl, permutation=permutation)
        truth = series[:, CUTOFF:] * np.exp(c.true_log_multiplier)
        adjusted = fc.context_adjusted(base, context_model.log_multipliers(c.texts))
        forecasts = dict(unimodal)
        forecasts.update({"unimodal (dev-selected)": base, "context-adjusted": adjusted,
                          "oracle parser": fc.context_adjusted(base, c.stated_log_multiplier),
                          "mean ensemble": fc.mean_ensemble(base, adjusted),
                          "median ensemble": fc.median_ensemble(hw, unimodal["global MLP"], adjusted)})
        mase = {k: metrics.mase(truth, v, scale) for k, v in forecasts.items()}
        for k, v in forecasts.items():
            q = metrics.gaussian_quantiles(v, sigma[:, None], QUANTILE_LEVELS)
            crps = metrics.crps_from_quantiles(truth, q, QUANTILE_LEVELS).mean(axis=1) / scale
            rows.append(pd.DataFrame({"replicate": replicate, "variant": variant, "series": np.arange(len(scale)),
                                      "domain": domains, "kind": c.kind, "method": k, "mase": mase[k], "crps": crps}))
        e_base, e_ctx = ((truth - base) / scale[:, None]).ravel(), ((truth - adjusted) / scale[:, None]).ravel()
        m_base, m_ctx, m_ens = (float(mase[k].mean()) for k in ("unimodal (dev-selected)", "context-adjusted",
                                                                  "mean ensemble"))
        jensen = mase["mean ensemble"] - (mase["unimodal (dev-selected)"] + mase["context-adjusted"]) / 2
        problems = leakage_audit(c.windows)
        cells.append({"replicate": replicate, "variant": variant, "p_relevant": knobs.p_relevant,
                      "error_correlation": float(np.corrcoef(e_base, e_ctx)[0, 1]),
                      "mase_unimodal": m_base, "mase_context": m_ctx, "mase_ensemble": m_ens,
                      "gain_over_best": min(m_base, m_ctx) - m_ens, "jensen_max": float(jensen.max()),
                      "audit_problems": len(problems), "scheduled_flagged": scheduled_future_items(c.windows),
                      "windows": len(c.windows)})
    return {"scores": pd.concat(rows, ignore_index=True), "cells": cells, "leak": leak, "base": base_name,
            "dev_mase": dev_mase, "event_free_mase": event_free, "hw_failures": fail_dev + fail_eval, "training_audit": training_audit,
            "context_fit_r2": float(np.corrcoef(context_model.effect(ctx.texts), target)[0, 1] ** 2)}


def run(config: Config) -> Result:
    """Every replicate; returns scores, per-cell summaries and the leakage experiment."""
    tpl, real = templates(), real_series()
    out = [run_replicate(config, r, tpl, real) for r in range(config.num_replicates)]
    checks = {"hw_failures": sum(o["hw_failures"] for o in out),
              "training_audit": [o["training_audit"] for o in out],
              "dev_mase": [o["dev_mase"] for o in out],
              "event_free_mase": [o["event_free_mase"] for o in out],
              "context_fit_r2": [o["context_fit_r2"] for o in out]}
    return Result(config, pd.concat([o["scores"] for o in out], ignore_index=True),
                  pd.DataFrame([c for o in out for c in o["cells"]]), pd.DataFrame([o["leak"] for o in out]),
                  [o["base"] for o in out], checks)


# ------------------------------------------------------------------------------------------------
# Statistics the ledger uses
# ------------------------------------------------------------------------------------------------


def paired(scores: pd.DataFrame, variant: str, worse: str, better: str, replicate: int | None = None) -> np.ndarray:
    """Per-series ``MASE(worse) - MASE(better)`` (positive: ``better`` wins)."""
    s = scores[scores.variant == variant]
    if replicate is not None:
        s = s[s.replicate == replicate]
    a = s[s.method == worse].set_index(["replicate", "series"]).mase
    b = s[s.method == better].set_index(["replicate", "series"]).mase
    return (a - b.loc[a.index]).to_numpy()


def shuffled_context_gap(result: Result) -> stats.Estimate:
    """Negative control: series-bootstrap interval of ``MASE(unimodal) - MASE(context-adjusted)`` with
    contexts shuffled across series (pooled over replicates; positive: context still helps)."""
    d = paired(result.scores, "shuffled", "unimodal (dev-selected)", "context-adjusted")
    return stats.bootstrap_interval(d, unit="series", rng=np.random.default_rng([result.config.seed, 11]),
                                    resamples=result.config.bootstrap_resamples)


def crps_mase_rank_correlation(table: pd.DataFrame) -> float:
    """Spearman correlation of mean MASE and mean CRPS over (method, variant) cells of ``table``."""
    return float(scipy.stats.spearmanr(table["mase"].to_numpy().ravel(), table["crps"].to_numpy().ravel())[0])


def seeds_excluding_zero(result: Result, variant: str, worse: str, better: str) -> tuple[int, list]:
    """How many replicates have a series-bootstrap 95 % CI of ``MASE(worse) - MASE(better)`` above 0."""
    estimates = []
    for r in range(result.config.num_replicates):
        d = paired(result.scores, variant, worse, better, r)
        estimates.append(stats.bootstrap_interval(d, unit="series", rng=np.random.default_rng([result.config.seed, r, 7]),
                                                  resamples=result.config.bootstrap_resamples))
    return sum(e.low > 0 for e in estimates), estimates


def replicate_mean(result: Result, variant: str, worse: str, better: str) -> stats.Estimate:
    """t interval over replicates of the mean paired difference (unit: replicate benchmarks)."""
    means = [paired(result.scores, variant, worse, better, r).mean() for r in range(result.config.num_replicates)]
    return stats.mean_interval(means, unit="replicate benchmarks")


def leak_reduction(result: Result, arm: str) -> stats.Estimate:
    """Relative reduction of the MLP's post-cutoff test MASE, ``1 - MASE(arm) / MASE(clean)``, over replicates."""
    r = 1 - result.leakage[f"mase_{arm}"] / result.leakage.mase_clean
    return stats.mean_interval(r.to_numpy(), unit="replicates (benchmark + trained MLPs)")


def floor_reduction(result: Result, model: str = "global MLP", baseline: str = "seasonal naive") -> stats.Estimate:
    """Learned-model floor: relative reduction ``1 - MASE(model) / MASE(baseline)`` on the post-cutoff
    horizon without events (the forecasters see only histories), t interval over replicates."""
    m = result.checks["event_free_mase"]
    r = np.array([1 - row[model] / row[baseline] for row in m])
    return stats.mean_interval(r, unit="replicates (benchmark + trained MLP)")


def headroom(result: Result, method: str = "oracle parser") -> stats.Estimate:
    """Relative MASE gap ``1 - MASE(method) / MASE(unimodal)`` on clean, over replicates (the oracle
    parser: headroom; the context-adjusted forecast: the context model's floor, its trivial baseline
    being no adjustment, i.e. a predicted effect of 0)."""
    c = result.scores[result.scores.variant == "clean"].groupby(["replicate", "method"]).mase.mean().unstack()
    return stats.mean_interval((1 - c[method] / c["unimodal (dev-selected)"]).to_numpy(),
                               unit="replicate benchmarks")


def sweep_cells(result: Result) -> pd.DataFrame:
    return result.cells[result.cells.variant.str.startswith("sweep")].reset_index(drop=True)


def gain_correlation(result: Result, permute: bool = False) -> tuple[float, float]:
    """Spearman rho (and one-sided p for rho < 0) of the ensemble's gain over its better component
    against the components' error correlation, over the sweep's (level, replicate) cells, pooled
    (confounded with p_relevant, which moves both; shown, not tested). With ``permute`` the gains
    are shuffled first."""
    cells = sweep_cells(result)
    gain = cells.gain_over_best.to_numpy()
    if permute:
        gain = np.random.default_rng([result.config.seed, 99]).permutation(gain)
    rho, p = scipy.stats.spearmanr(cells.error_correlation, gain, alternative="less")
    return float(rho), float(p)


def _within_level_rank_residuals(values: np.ndarray, levels: np.ndarray) -> np.ndarray:
    ranks = scipy.stats.rankdata(values)
    out = ranks.astype(float).copy()
    for lv in np.unique(levels):
        out[levels == lv] -= ranks[levels == lv].mean()
    return out


def partial_gain_correlation(result: Result, permute: bool = False, permutations: int = 4999) -> tuple[float, float]:
    """The gain-correlation test with p_relevant held fixed: the Pearson correlation of the two
    variables' ranks after removing each level's mean rank (a partial Spearman rho given the
    level), and a one-sided p for rho < 0 from permuting the gains *within* each level
    (``permutations`` draws, fixed seed). With ``permute`` the gains are first shuffled within
    levels (the negative control)."""
    cells = sweep_cells(result)
    levels = cells.p_relevant.to_numpy()
    gain, corr = cells.gain_over_best.to_numpy(), cells.error_correlation.to_numpy()
    rng = np.random.default_rng([result.config.seed, 101])

    def shuffle(v):
        v = v.copy()
        for lv in np.unique(levels):
            idx = np.flatnonzero(levels == lv)
            v[idx] = v[rng.permutation(idx)]
        return v

    if permute:
        gain = shuffle(gain)

    def stat(g):
        a, b = _within_level_rank_residuals(corr, levels), _within_level_rank_residuals(g, levels)
        return float(np.corrcoef(a, b)[0, 1])

    rho = stat(gain)
    null = np.array([stat(shuffle(gain)) for _ in range(permutations)])
    return rho, float((1 + np.sum(null <= rho)) / (1 + permutations))


def crossover(result: Result) -> str:
    """The bracket of run p_relevant levels where the mean ensemble stops beating context-adjusted."""
    g = sweep_cells(result).groupby("p_relevant")[["mase_context", "mase_ensemble"]].mean()
    ahead = (g.mase_ensemble < g.mase_context).to_numpy()
    levels = g.index.to_numpy()
    for i in range(1, len(levels)):
        if ahead[i - 1] != ahead[i]:
            return f"between p_relevant = {levels[i - 1]:g} and {levels[i]:g}"
    return "no crossover inside the run levels (" + ("ensemble ahead" if ahead.all() else
                                                       "context-adjusted ahead" if not ahead.any() else "mixed") + ")"
