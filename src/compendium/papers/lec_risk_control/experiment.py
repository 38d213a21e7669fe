"""The chapter's experiment: many calibration draws per (source, n, alpha), exact test risk."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats

from ...runtime import make_rng
from . import sources as src
from . import thresholds as th
from .validity import swap_sum_direct, swap_sum_identity
from ...validation import require_int as _require_int

METHODS = ("LEC", "plug-in", "CP-UCB", "CP-Bonferroni", "LTT-FS")
PAC_METHODS = ("CP-Bonferroni", "LTT-FS")  # valid PAC by construction
DATASETS = ("digits", "breast_cancer", "wine")
UNIT_INSTANCES = 300  # random calibration sets for the rule's unit checks
SWAP_INSTANCES = 200  # random sets of n + 1 points for the swap identity
MIN_ACCEPTING = 10  # a cell whose rule accepts in fewer draws has no usable delta-method SE: not scored


@dataclass(frozen=True)
class Config:
    """Parameters of one run (names match the notebook's parameters cell).

    Parameters
    ----------
    num_splits : int
        Calibration draws per (source, n, alpha) cell, in [100, 20000].
    cal_sizes : tuple of int
        Calibration set sizes n, each in [10, 5000].
    alphas : tuple of float
        Target levels for P(error | accepted), each in (0, 0.5).
    separations : tuple of float
        Synthetic sources: shift of the uncertainty of wrong answers, each in (0, 10].
    base_error_rate : float
        Synthetic sources: error rate before selection, in (0, 1).
    delta : float
        Failure probability of the PAC baselines, in (0, 1).
    grid_size : int
        Points of the fixed threshold grid of the grid-based PAC baselines, in [2, 200].
    routing_grid_size : int
        Candidate first-model thresholds searched by routing, in [2, 200].
    seed : int
        Seeds model cross-fitting and every calibration draw.
    """

    num_splits: int = 2000
    cal_sizes: tuple = (50, 100, 200, 500, 1000)
    alphas: tuple = (0.05, 0.1, 0.2)
    separations: tuple = (1.5, 2.0, 3.0)
    base_error_rate: float = 0.35
    delta: float = 0.1
    grid_size: int = 20
    routing_grid_size: int = 20
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("cal_sizes", "alphas", "separations"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        _require_int("num_splits", self.num_splits, 100, 20000)
        _require_int("grid_size", self.grid_size, 2, 200)
        _require_int("routing_grid_size", self.routing_grid_size, 2, 200)
        _require_int("seed", self.seed, 0, 2**32 - 1)
        for name, values, low, high in (("cal_sizes", self.cal_sizes, 10, 5000),):
            if not values:
                raise ValueError(f"{name} must not be empty")
            for v in values:
                _require_int(f"every entry of {name}", v, low, high)
        _require_numbers("alphas", self.alphas, 0, 0.5, closed_high=False)
        _require_numbers("separations", self.separations, 0, 10, closed_high=True)
        _require_numbers("base_error_rate", (self.base_error_rate,), 0, 1, closed_high=False)
        _require_numbers("delta", (self.delta,), 0, 1, closed_high=False)
        for name in ("cal_sizes", "alphas", "separations"):
            values = getattr(self, name)
            if len(set(values)) != len(values):
                raise ValueError(f"{name} must not repeat values, got {values!r}")




def _require_numbers(name: str, values, low: float, high: float, closed_high: bool) -> None:
    if not values:
        raise ValueError(f"{name} must not be empty")
    for v in values:
        ok = not isinstance(v, bool) and isinstance(v, (int, float, np.floating)) and low < v
        ok = ok and (v <= high if closed_high else v < high)
        if not ok:
            bracket = "]" if closed_high else ")"
            raise ValueError(f"every entry of {name} must be a number in ({low}, {high}{bracket}, got {v!r}")


@dataclass(frozen=True, eq=False)
class Result:
    """What :func:`run` returns: tables and arrays, never plots.

    Attributes
    ----------
    sources : DataFrame, one row per (source, alpha): error rate, oracle retention.
    cells : DataFrame, one row per (source, n, alpha, method): pooled risk, its SE, the excess
        ``pooled - alpha - 3 SE``, mean retention, PAC fraction (splits with risk <= alpha), share of
        splits that accept nothing.
    power : DataFrame, one row per (source, n, alpha): LEC vs CP-UCB paired retention, sign test,
        and the paired per-draw retention gain of LEC over LTT-FS (``gain_ltt``, its SE ``gain_ltt_se``);
        the population retention of the symmetric threshold ``lambda*`` (``retention_star``, valid for
        the same pooled target), LEC minus it per draw (``gain_star``, ``gain_star_se``, its largest
        draw ``max_gain_star``) and LTT-FS minus it (``ltt_star``, ``ltt_star_se``).
    oracle : DataFrame, one row per (source, n, alpha): the symmetric threshold computed with the
        test point (a valid rule by exchangeability), scored on that realised test point: pooled
        risk, SE, excess ``pooled - alpha - 3 SE``.
    routing : DataFrame, one row per (n, alpha): system pooled risk, SE, excess, retentions of the
        system and of each model alone (LEC), share of inputs answered by model 1, and the per-draw
        paired gain of the system over the better single model (``retention_gain``, ``gain_se``),
        and of the worse single model over the better (``worse_gain``, ``worse_gain_se``).
    routing_thresholds : dict ``(n, alpha) -> (lambda1, lambda2)``, each (num_splits,).
    unit_checks : dict of booleans (the exact checks of the rule).
    """

    sources: pd.DataFrame
    cells: pd.DataFrame
    power: pd.DataFrame
    oracle: pd.DataFrame
    routing: pd.DataFrame
    routing_thresholds: dict
    unit_checks: dict


# ---------------------------------------------------------------------------- statistics
def pooled_risk(accepted_error, accepted) -> tuple[float, float]:
    """Pooled ratio ``sum_s a_s / sum_s b_s`` over splits and its delta-method standard error.

    Parameters
    ----------
    accepted_error : (S,) ``P(S = 1, E = 1 | calibration s)``; accepted : (S,) ``P(S = 1 | s)``.

    Returns
    -------
    (ratio, se); ``(0.0, 0.0)`` when no split accepts anything.
    """
    a, b = np.asarray(accepted_error, float), np.asarray(accepted, float)
    if a.shape != b.shape or a.ndim != 1 or a.size < 2:
        raise ValueError("accepted_error and accepted must be 1-D arrays of one length >= 2")
    total = b.sum()
    if total <= 0:
        return 0.0, 0.0
    ratio = a.sum() / total
    return float(ratio), float(np.sqrt(np.sum((a - ratio * b) ** 2) * a.size / (a.size - 1)) / total)


def sign_test(first, second) -> tuple[int, int, int, float]:
    """One-sided paired sign test of ``first > second``: (wins, losses, ties, p-value).

    Ties are dropped; the p-value is ``P(Binomial(wins + losses, 1/2) >= wins)`` (1 without
    untied pairs).
    """
    d = np.asarray(first, float) - np.asarray(second, float)
    wins, losses = int(np.sum(d > 1e-12)), int(np.sum(d < -1e-12))
    ties = d.size - wins - losses
    p = float(stats.binom.sf(wins - 1, wins + losses, 0.5)) if wins + losses else 1.0
    return wins, losses, ties, p


def scored(ratio: float, se: float, accepting: int, alpha: float) -> tuple[float, float, float]:
    """``(pooled_risk, risk_se, excess)`` of a cell; SE and excess are NaN (not scored) when fewer than
    :data:`MIN_ACCEPTING` draws accept anything: the pooled ratio is then the risk of a handful of
    draws and its delta-method SE is meaningless (0 with a single accepting draw)."""
    if accepting < MIN_ACCEPTING:
        return ratio, float("nan"), float("nan")
    return ratio, se, ratio - alpha - 3 * se


def failing_cells(frame: pd.DataFrame) -> list[str]:
    """One line per row with ``excess > 0``: its n, alpha, pooled risk, overshoot and SE."""
    return [f"n={r.n}, alpha={r.alpha:g}: risk {r.pooled_risk:.4f} (alpha + {r.pooled_risk - r.alpha:.4f}, SE {r.risk_se:.4f})"
            for r in frame[frame.excess > 0].itertuples()]


def _risk_per_split(source, lam) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(accepted_error, accepted, conditional risk with 0 where nothing is accepted)."""
    acc = np.asarray(source.accept_probability(lam), float)
    err = np.asarray(source.accepted_error_probability(lam), float)
    risk = np.divide(err, acc, out=np.zeros_like(acc), where=acc > 0)
    return err, acc, risk


def _thresholds(cal, method: str, alpha: float, config: Config, grid, counts) -> np.ndarray:
    if method == "LEC":
        return th.lec_thresholds(cal, alpha)
    if method == "plug-in":
        return th.plugin_thresholds(cal, alpha)
    if method == "CP-UCB":
        return th.cp_ucb_thresholds(cal, alpha, config.delta)
    if method == "CP-Bonferroni":
        return th.cp_bonferroni_thresholds(cal, alpha, config.delta, grid, counts)
    if method == "LTT-FS":
        return th.ltt_fixed_sequence_thresholds(cal, alpha, config.delta, grid, counts)
    raise ValueError(f"unknown method {method!r}; choose from {METHODS}")


def _grid(source, size: int) -> np.ndarray:
    """Fixed grid: population quantiles at levels j / size (chosen before any calibration draw)."""
    return np.unique(source.quantile(np.arange(1, size + 1) / size))


# ---------------------------------------------------------------------------- unit checks
def unit_checks(alphas, seed: int) -> dict:
    """The exact properties of the LEC rule, checked on constructed and random calibration sets."""
    rng = make_rng(seed, 900)
    out = {}
    ok_correct, ok_error = True, True
    for alpha in alphas:
        need = int(np.ceil((1 - alpha) / alpha - 1e-9))  # n >= (1 - alpha)/alpha accepts all
        for n in (max(need - 1, 1), need, need + 7, 1000):
            u = rng.standard_normal(n)
            lam = th.lec_threshold(u, np.zeros(n, int), alpha)
            ok_correct &= (lam == u.max()) if n >= need else (lam == th.NO_THRESHOLD)
            ok_error &= th.lec_threshold(u, np.ones(n, int), alpha) == th.NO_THRESHOLD
    out["all_correct_accepts_all"] = bool(ok_correct)
    out["all_error_accepts_none"] = bool(ok_error)

    # ties: a tie group straddling the boundary must be taken whole or not at all
    u = np.array([0.0] * 9 + [1.0] * 4)
    e = np.array([0] * 9 + [0, 1, 1, 1])
    lam = th.lec_threshold(u, e, 0.2)  # 10 correct points would qualify alone; the tied group does not
    ties_ok = lam == 0.0 and lam == th.lec_threshold_reference(u, e, 0.2)
    ref_ok, inv_ok = True, True
    for i in range(UNIT_INSTANCES):
        n = int(rng.integers(1, 80))
        alpha = float(alphas[i % len(alphas)])
        err = (rng.random(n) < rng.uniform(0, 0.5)).astype(int)
        raw = rng.integers(0, 6, n).astype(float) if i % 2 else rng.standard_normal(n) + 2 * err
        lam = th.lec_threshold(raw, err, alpha)
        ref_ok &= lam == th.lec_threshold_reference(raw, err, alpha)
        if i % 2:
            ties_ok &= lam == th.lec_threshold_reference(raw, err, alpha)
        chosen = raw <= lam
        for g in (lambda x: 3 * x + 1, np.exp, lambda x: x**3 + x):
            inv_ok &= np.array_equal(chosen, g(raw) <= th.lec_threshold(g(raw), err, alpha))
    out["ties_whole_groups"] = bool(ties_ok)
    out["monotone_invariance"] = bool(inv_ok)
    out["matches_reference"] = bool(ref_ok)

    # the exact swap identity of the excess (validity.py) against the brute-force leave-one-out sum
    swap_ok = True
    for i in range(SWAP_INSTANCES):
        n = int(rng.integers(2, 30))
        alpha = float(alphas[i % len(alphas)])
        err = (rng.random(n) < rng.uniform(0, 0.5)).astype(int)
        raw = rng.standard_normal(n) + 1.5 * err
        swap_ok &= abs(swap_sum_direct(raw, err, alpha) - swap_sum_identity(raw, err, alpha)) <= 1e-9
    out["swap_identity"] = bool(swap_ok)
    return out


# ---------------------------------------------------------------------------- the experiment
def score_sources(config: Config):
    """(list of single-model sources, the routing source), synthetic ones first."""
    routing = src.routing_source(config.seed)
    singles = [src.GaussianSource(float(s), float(config.base_error_rate)) for s in config.separations]
    singles += [routing.first if name == "digits" else src.dataset_source(name, config.seed) for name in DATASETS]
    return singles, routing


def run(config: Config) -> Result:
    """Calibrate every method on ``num_splits`` draws per (source, n, alpha); exact test risk."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1):  # the chapter asks for one thread; tiny BLAS calls only lose by more
        singles, routing = score_sources(config)
    # digits under its own name (the routing weak model is the digits source)
    singles = [src.PoolSource("digits", s.scores, s.errors) if s is routing.first else s for s in singles]
    source_rows, cell_rows, power_rows, oracle_rows = [], [], [], []
    for si, source in enumerate(singles):
        kind = "synthetic" if isinstance(source, src.GaussianSource) else "sklearn"
        for alpha in config.alphas:
            source_rows.append(dict(source=source.name, kind=kind, alpha=alpha, error_rate=source.error_rate,
                                    oracle_retention=src.oracle_retention(source, alpha)))
        grid = _grid(source, config.grid_size)
        for ni, n in enumerate(config.cal_sizes):
            u, e = source.sample(make_rng(config.seed, si, ni), config.num_splits, n)
            cal = th.sort_calibration(u, e)
            counts = th.counts_on_grid(cal, grid)  # shared by every alpha and both grid methods
            # positive control: one test point per draw, the symmetric threshold computed with it
            u_test, e_test = source.sample(make_rng(config.seed, 200 + si, ni), config.num_splits, 1)
            cal_all = th.sort_calibration(np.concatenate([u, u_test], 1), np.concatenate([e, e_test], 1))
            star_retention = {}  # population acceptance of the symmetric threshold, per draw (paired with the rules)
            for alpha in config.alphas:
                lam_star = th.lec_thresholds(cal_all, alpha, slack=0.0)
                star_retention[alpha] = np.asarray(source.accept_probability(lam_star), float)
                accepted = (u_test[:, 0] <= lam_star).astype(float)
                ratio, se, excess = scored(*pooled_risk(accepted * e_test[:, 0], accepted), int(accepted.sum()), alpha)
                oracle_rows.append(dict(source=source.name, n=n, alpha=alpha, pooled_risk=ratio, risk_se=se,
                                        excess=excess, retention=float(accepted.mean()), accepting=int(accepted.sum())))
            for alpha in config.alphas:
                retention = {}
                for method in METHODS:
                    err, acc, risk = _risk_per_split(source, _thresholds(cal, method, alpha, config, grid, counts))
                    ratio, se, excess = scored(*pooled_risk(err, acc), int(np.sum(acc > 0)), alpha)
                    retention[method] = acc
                    cell_rows.append(dict(
                        source=source.name, kind=kind, n=n, alpha=alpha, method=method,
                        pooled_risk=ratio, risk_se=se, excess=excess, accepting=int(np.sum(acc > 0)),
                        retention=float(acc.mean()), pac_fraction=float(np.mean(risk <= alpha + 1e-12)),
                        none_accepted=float(np.mean(acc == 0))))
                wins, losses, ties, p = sign_test(retention["LEC"], retention["CP-UCB"])
                d_ltt = retention["LEC"] - retention["LTT-FS"]
                d_star = retention["LEC"] - star_retention[alpha]  # <= 0 in every draw: LEC's threshold <= lambda*
                d_ltt_star = retention["LTT-FS"] - star_retention[alpha]
                power_rows.append(dict(source=source.name, n=n, alpha=alpha, wins=wins, losses=losses, ties=ties,
                                       p_value=p, retention_lec=float(retention["LEC"].mean()),
                                       retention_cp=float(retention["CP-UCB"].mean()),
                                       retention_ltt=float(retention["LTT-FS"].mean()), gain_ltt=float(d_ltt.mean()),
                                       gain_ltt_se=float(d_ltt.std(ddof=1) / np.sqrt(d_ltt.size)),
                                       retention_star=float(star_retention[alpha].mean()), gain_star=float(d_star.mean()),
                                       gain_star_se=float(d_star.std(ddof=1) / np.sqrt(d_star.size)),
                                       max_gain_star=float(d_star.max()), ltt_star=float(d_ltt_star.mean()),
                                       ltt_star_se=float(d_ltt_star.std(ddof=1) / np.sqrt(d_ltt_star.size))))

    routing_rows, routing_lams = [], {}
    for ni, n in enumerate(config.cal_sizes):
        u1, e1, u2, e2 = routing.sample(make_rng(config.seed, 100, ni), config.num_splits, n)
        cal1, cal2 = th.sort_calibration(u1, e1), th.sort_calibration(u2, e2)
        for alpha in config.alphas:
            lam1, lam2 = th.route_thresholds(u1, e1, u2, e2, alpha, config.routing_grid_size)
            acc, err = routing.system_probabilities(lam1, lam2)
            ratio, se, excess = scored(*pooled_risk(err, acc), int(np.sum(acc > 0)), alpha)
            ret1 = routing.first.accept_probability(th.lec_thresholds(cal1, alpha))
            ret2 = routing.second.accept_probability(th.lec_thresholds(cal2, alpha))
            routing_lams[(n, alpha)] = (lam1, lam2)
            better, worse = (ret1, ret2) if ret1.mean() >= ret2.mean() else (ret2, ret1)
            d_best = acc - better  # paired per draw
            d_worse = worse - better  # the retention test's negative control
            routing_rows.append(dict(
                n=n, alpha=alpha, pooled_risk=ratio, risk_se=se, excess=excess, accepting=int(np.sum(acc > 0)),
                retention_system=float(acc.mean()), retention_first=float(ret1.mean()),
                retention_second=float(ret2.mean()),
                retention_gain=float(acc.mean() - max(ret1.mean(), ret2.mean())),
                gain_se=float(d_best.std(ddof=1) / np.sqrt(d_best.size)),
                worse_gain=float(d_worse.mean()), worse_gain_se=float(d_worse.std(ddof=1) / np.sqrt(d_worse.size)),
                answered_by_first=float(routing.first.accept_probability(lam1).mean())))

    return Result(
        sources=pd.DataFrame(source_rows),
        cells=pd.DataFrame(cell_rows),
        power=pd.DataFrame(power_rows),
        oracle=pd.DataFrame(oracle_rows),
        routing=pd.DataFrame(routing_rows),
        routing_thresholds=routing_lams,
        unit_checks=unit_checks(config.alphas, config.seed),
    )
