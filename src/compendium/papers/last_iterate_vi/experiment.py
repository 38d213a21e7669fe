"""The chapter's experiment: ``Config`` (the registry parameters), ``run`` and its ``Result``."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ...runtime import make_rng
from . import methods as me
from . import problems as pb
from . import rates
from ...validation import require_int as _require_int, require_number as _require_number

REQUIRED_SIGMAS = (0.0, 0.01, 0.03, 0.1, 0.3, 1.0)  # the noise levels the ledger reads
RG_RATE_SIGMAS = (0.1, 1.0)
ROG_NOISY_SIGMAS = (0.3, 1.0)
LOW_NOISE_SIGMAS = (0.0, 0.01, 0.03)  # "sigma <= 0.03"
HIGH_NOISE_SIGMA = 1.0
FIT_SIGMA_RANGE = (0.1, 3.0)  # variance-adaptivity fit
STRONG_FIT_SIGMAS = (0.1, 0.3, 1.0)
STRONG_SLOPE_SIGMA = 1.0
CONTROL_SIGMA = 1.0
OTHER_SIGMAS = (0.1, 1.0)  # the two extra problems
NUM_CVXPY_POINTS = 5
MAIN_METHODS = ("RG", "ROG (sigma-tuned)", "ROG (fixed)", "SGDA", "OG")
# comparison methods run only at the noise levels their checks read (time budget)
EXTRA_SIGMAS = {"RG (low-noise)": LOW_NOISE_SIGMAS, "OG (decaying)": (CONTROL_SIGMA,)}


@dataclass(frozen=True)
class Config:
    """Parameters of one run (names match the notebook's parameters cell and the registry).

    Parameters
    ----------
    horizon : int
        Iterations ``T`` of every run, in [1000, 10^7].
    num_seeds : int
        Noise sequences per (method, sigma), in [2, 64]; the ledger asks for at least 8.
    sigmas : tuple of float
        Increasing noise levels in [0, 10] (``E||noise||^2 = sigma^2``); must contain
        ``REQUIRED_SIGMAS`` and at least three values in [0.1, 3].
    dimension : int
        Strategy dimension ``n`` of each player, in [2, 20].
    offset : float
        Offset ``t0`` of every schedule, in [1, 1000].
    window_decades : float
        Slopes are fitted on ``[T / 10^w, T]``, ``w`` in [1, 3].
    checkpoints_per_decade : int
        Log-spaced gap records per decade, in [4, 50].
    step_max : float
        Step cap of the schedules and the constant step of the baselines, in (0, 0.5].
    strong_monotonicity : float
        ``lambda`` of the strongly monotone game, in (0, 1].
    seed : int
    """

    horizon: int = 50000
    num_seeds: int = 8
    sigmas: tuple = (0.0, 0.01, 0.03, 0.1, 0.2, 0.3, 0.5, 1.0, 2.0, 3.0)
    dimension: int = 5
    offset: float = 10.0
    window_decades: float = 2.0
    checkpoints_per_decade: int = 20
    step_max: float = 0.25
    strong_monotonicity: float = 0.25
    seed: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "sigmas", tuple(float(s) for s in self.sigmas))
        _require_int("horizon", self.horizon, 1000, 10**7)
        _require_int("num_seeds", self.num_seeds, 2, 64)
        _require_int("dimension", self.dimension, 2, 20)
        _require_int("checkpoints_per_decade", self.checkpoints_per_decade, 4, 50)
        _require_int("seed", self.seed, 0, 2**32 - 1)
        _require_number("offset", self.offset, 1, 1000)
        _require_number("window_decades", self.window_decades, 1, 3)
        _require_number("step_max", self.step_max, 0, 0.5, low_open=True)
        _require_number("strong_monotonicity", self.strong_monotonicity, 0, 1, low_open=True)
        s = np.array(self.sigmas)
        if s.size < 3 or np.any(s < 0) or np.any(s > 10) or np.any(np.diff(s) <= 0):
            raise ValueError(f"sigmas must be at least 3 increasing values in [0, 10], got {self.sigmas}")
        missing = [x for x in REQUIRED_SIGMAS if not np.any(np.isclose(s, x, rtol=0, atol=1e-12))]
        if missing:
            raise ValueError(f"sigmas must contain {REQUIRED_SIGMAS} (the ledger reads them); missing {missing}")
        if np.sum((s >= FIT_SIGMA_RANGE[0]) & (s <= FIT_SIGMA_RANGE[1])) < 3:
            raise ValueError(f"sigmas needs at least 3 values in {list(FIT_SIGMA_RANGE)} for the variance fit")
        if self.horizon < 10 ** self.window_decades * 10:
            raise ValueError(f"horizon {self.horizon} is too short for a window of {self.window_decades} decades")

    @property
    def window(self) -> tuple:
        """The fixed slope window ``[T / 10^w, T]``."""
        return (self.horizon / 10**self.window_decades, float(self.horizon))






@dataclass(frozen=True)
class Result:
    """What :func:`run` returns: data and metrics, never plots.

    ``gap_sq[k, m, s, r]`` is ``Gap(z_t)^2`` at ``t = checkpoints[k]`` for method ``methods[m]``,
    noise ``sigmas[s]`` and seed ``r`` on the bilinear game; ``strong_*`` and ``other`` hold the
    same for the other problems; ``extra[name]`` holds ``sigmas`` and ``gap_sq`` (K, S, R) of the
    comparison methods of :data:`EXTRA_SIGMAS`. ``metrics`` holds every number the ledger reads.
    """

    config: Config
    checkpoints: np.ndarray
    sigmas: np.ndarray
    methods: tuple
    gap_sq: np.ndarray
    seg_gap_sq: np.ndarray
    strong_sigmas: np.ndarray
    strong_methods: tuple
    strong_gap_sq: np.ndarray
    strong_restricted_sq: np.ndarray
    other: dict
    extra: dict
    schedules: dict
    symbolic: dict
    exponents_table: list
    metrics: dict = field(default_factory=dict)

    def curves(self, method: str, sigma: float) -> np.ndarray:
        """``Gap^2`` on the bilinear game per seed, shape (K, R), main or comparison method."""
        if method in self.extra:
            e = self.extra[method]
            return e["gap_sq"][:, _index(e["sigmas"], sigma)]
        return self.gap_sq[:, self.methods.index(method), _index(self.sigmas, sigma)]

    def mean(self, method: str, sigma: float) -> np.ndarray:
        """Mean over seeds of ``Gap^2`` on the bilinear game, shape (K,)."""
        return self.curves(method, sigma).mean(axis=-1)


def _index(values, x) -> int:
    hits = np.flatnonzero(np.isclose(values, x, rtol=0, atol=1e-12))
    if hits.size != 1:
        raise ValueError(f"{x} is not among {list(values)}")
    return int(hits[0])


def main_methods(sigmas, step_max: float, offset: float) -> list:
    """RG, ROG (sigma-tuned), ROG (fixed) and the unregularized baselines SGDA, OG."""
    base = me.base_schedule(step_max, offset)
    const = me.constant_schedule(step_max)
    return [
        me.Method("RG", False, tuple(base for _ in sigmas)),
        me.Method("ROG (sigma-tuned)", True, tuple(me.sigma_tuned_schedule(s, step_max, offset) for s in sigmas)),
        me.Method("ROG (fixed)", True, tuple(base for _ in sigmas)),
        me.Method("SGDA", False, tuple(const for _ in sigmas)),
        me.Method("OG", True, tuple(const for _ in sigmas)),
    ]


def extra_methods(step_max: float, offset: float) -> dict:
    """``name -> Method`` for the comparison methods of :data:`EXTRA_SIGMAS`: RG on its own
    sigma = 0 schedule (same sigma information as the sigma-tuned ROG) and OG with RG's decaying
    step but no regularization."""
    low = me.rg_low_noise_schedule(step_max, offset)
    decaying = me.decaying_step_schedule(step_max, offset)
    return {"RG (low-noise)": me.Method("RG (low-noise)", False, tuple(low for _ in EXTRA_SIGMAS["RG (low-noise)"])),
            "OG (decaying)": me.Method("OG (decaying)", True, tuple(decaying for _ in EXTRA_SIGMAS["OG (decaying)"]))}


def cvxpy_gap_check(problem: pb.AffineVI, rng: np.random.Generator, num_points: int = NUM_CVXPY_POINTS) -> dict:
    """cvxpy's restricted gap vs the fast solver (and the bilinear closed form) at random points."""
    raw = rng.standard_normal((num_points, problem.dim))
    points = problem.project(raw * rng.uniform(0.2, 1.0, (num_points, 1)))
    ref = np.array([pb.restricted_gap_cvxpy(problem, z) for z in points])
    out = {"cvxpy": ref, "fast": problem.restricted_gap(points), "gap": problem.gap(points)}
    if problem.name.startswith("bilinear"):
        out["closed_form"] = pb.bilinear_closed_form_gap(problem, points)
    return out


def run(config: Config) -> Result:
    """Run every experiment of the chapter for ``config``; deterministic given ``config.seed``."""
    c = config
    n, T, t0, cap = c.dimension, c.horizon, c.offset, c.step_max
    sigmas = np.array(c.sigmas)
    ckpt = me.checkpoint_times(T, c.checkpoints_per_decade)
    bilinear = pb.bilinear_game(n, make_rng(c.seed, 0))
    quad = pb.quadratic_game(n, c.strong_monotonicity, make_rng(c.seed, 1))
    affine = pb.affine_monotone(2 * n, make_rng(c.seed, 2))
    cyclic = pb.cyclic_game(n if n % 2 else n + 1, make_rng(c.seed, 3))

    # 1. the bilinear game: RG, ROG (two schedules) and the baselines, every sigma
    methods = main_methods(sigmas, cap, t0)
    main = me.simulate(bilinear, methods, sigmas, c.num_seeds, T, ckpt, make_rng(c.seed, 10))
    seg = me.simulate_extragradient(bilinear, cap, sigmas, c.num_seeds, T, ckpt, make_rng(c.seed, 11))
    extra = {}
    for k, (name, method) in enumerate(extra_methods(cap, t0).items()):
        # the same seed stream as the main run, so the noise draws of each seed match (common random numbers)
        sim = me.simulate(bilinear, [method], np.array(EXTRA_SIGMAS[name]), c.num_seeds, T, ckpt, make_rng(c.seed, 10))
        extra[name] = {"sigmas": np.array(EXTRA_SIGMAS[name]), "gap_sq": sim["gap_sq"][:, 0]}  # (K, S, R)

    # 2. the strongly monotone game: ROG and RG with eta_t = 1/(lambda t), mu_t = 1/t
    strong_sigmas = sigmas[sigmas <= 1.0 + 1e-12]
    strong_sched = me.strongly_monotone_schedule(c.strong_monotonicity, cap, t0)
    strong_methods = [me.Method("ROG", True, tuple(strong_sched for _ in strong_sigmas)),
                      me.Method("RG", False, tuple(strong_sched for _ in strong_sigmas))]
    strong = me.simulate(quad, strong_methods, strong_sigmas, c.num_seeds, T, ckpt, make_rng(c.seed, 12),
                         restricted=True)

    # 3. two more monotone problems, shown without criteria
    other = {}
    for k, prob in enumerate((affine, cyclic)):
        ms = main_methods(OTHER_SIGMAS, cap, t0)[:2]
        sim = me.simulate(prob, ms, OTHER_SIGMAS, c.num_seeds, T, ckpt, make_rng(c.seed, 13 + k))
        other[prob.name] = {"methods": tuple(m.name for m in ms), "sigmas": np.array(OTHER_SIGMAS),
                            "gap_sq": sim["gap_sq"]}

    # 4. gap computations: cvxpy against closed forms and the fast solver
    cvx = {p.name: cvxpy_gap_check(p, make_rng(c.seed, 20 + k)) for k, p in enumerate((bilinear, quad, affine))}

    symbolic = {
        "rg": rates.exponent_program(noisy=True, optimistic=False),
        "rg_deterministic": rates.exponent_program(noisy=False, optimistic=False),
        "rog_deterministic": rates.exponent_program(noisy=False, optimistic=True),
        "rog_noisy": rates.exponent_program(noisy=True, optimistic=True),
        "sigma_scaling": rates.sigma_scaling(),
        "crossover": rates.crossover_times(),
        "strong_constant": rates.strongly_monotone_constant(),
    }
    result = Result(
        config=c, checkpoints=ckpt, sigmas=sigmas, methods=tuple(m.name for m in methods),
        gap_sq=main["gap_sq"], seg_gap_sq=seg, strong_sigmas=strong_sigmas,
        strong_methods=tuple(m.name for m in strong_methods), strong_gap_sq=strong["gap_sq"],
        strong_restricted_sq=strong["restricted_sq"], other=other, extra=extra,
        schedules={"base": me.base_schedule(cap, t0), "strong": strong_sched,
                   "tuned": {float(s): me.sigma_tuned_schedule(float(s), cap, t0) for s in sigmas}},
        symbolic=symbolic, exponents_table=rates.derived_exponents_table(), metrics={"cvxpy": cvx},
    )
    result.metrics.update(_metrics(result))
    return result


def slope_details(result: Result, method: str, sigma: float) -> dict:
    """Per-seed slope range, seed count and window for a ledger row's ``details``."""
    v = rates.fit_loglog_slope(result.checkpoints, result.curves(method, sigma), result.config.window)
    return {"seed_slope_min": float(np.min(v)), "seed_slope_max": float(np.max(v)),
            "num_seeds": result.config.num_seeds, "window": list(result.config.window)}


def _metrics(r: Result) -> dict:
    """Every number the ledger reads, from the recorded gaps."""
    c, t, win = r.config, r.checkpoints, r.config.window
    slope = {(m, float(s)): rates.fit_loglog_slope(t, r.mean(m, s), win) for m in r.methods for s in r.sigmas}
    seed_slopes = {(m, float(s)): rates.fit_loglog_slope(t, r.gap_sq[:, r.methods.index(m), _index(r.sigmas, s)], win)
                   for m in r.methods for s in r.sigmas}
    final = {(m, float(s)): float(r.mean(m, s)[-1]) for m in r.methods for s in r.sigmas}
    final.update({(m, float(s)): float(r.mean(m, s)[-1]) for m, e in r.extra.items() for s in e["sigmas"]})
    seg_mean = r.seg_gap_sq.mean(axis=-1)
    seg_slope = {float(s): rates.fit_loglog_slope(t, seg_mean[:, i], win) for i, s in enumerate(r.sigmas)}
    in_fit = (r.sigmas >= FIT_SIGMA_RANGE[0]) & (r.sigmas <= FIT_SIGMA_RANGE[1])
    fits = {m: rates.fit_two_term_rate(r.sigmas[in_fit], [final[(m, float(s))] for s in r.sigmas[in_fit]], c.horizon)
            for m in ("ROG (sigma-tuned)", "ROG (fixed)", "RG")}
    ratio = {float(s): final[("ROG (sigma-tuned)", float(s))] / final[("RG", float(s))] for s in r.sigmas}
    strong_mean = r.strong_gap_sq.mean(axis=-1)  # (K, methods, sigmas)
    strong_res_mean = r.strong_restricted_sq.mean(axis=-1)
    j = [_index(r.strong_sigmas, s) for s in STRONG_FIT_SIGMAS]
    strong = {
        "slope": {float(s): rates.fit_loglog_slope(t, strong_mean[:, 0, i], win) for i, s in enumerate(r.strong_sigmas)},
        "seed_slopes": rates.fit_loglog_slope(t, r.strong_gap_sq[:, 0, _index(r.strong_sigmas, STRONG_SLOPE_SIGMA)], win),
        "restricted_slope": {float(s): rates.fit_loglog_slope(t, strong_res_mean[:, 0, i], win)
                             for i, s in enumerate(r.strong_sigmas) if s > 0},
        "sigma_power": rates.fit_power(STRONG_FIT_SIGMAS, strong_mean[-1, 0, j]),
        "restricted_sigma_power": rates.fit_power(STRONG_FIT_SIGMAS, strong_res_mean[-1, 0, j]),
        "final": {float(s): float(strong_mean[-1, 0, i]) for i, s in enumerate(r.strong_sigmas)},
        "rg_slope": {float(s): rates.fit_loglog_slope(t, strong_mean[:, 1, i], win) for i, s in enumerate(r.strong_sigmas)},
    }
    other = {name: {(m, float(s)): rates.fit_loglog_slope(t, o["gap_sq"][:, i, k].mean(axis=-1), win)
                    for i, m in enumerate(o["methods"]) for k, s in enumerate(o["sigmas"])}
             for name, o in r.other.items()}
    cvx = r.metrics["cvxpy"]
    bil = next(v for k, v in cvx.items() if k.startswith("bilinear"))
    return {
        "slope": slope, "seed_slopes": seed_slopes, "final": final, "seg_slope": seg_slope, "fits": fits,
        "ratio": ratio, "strong": strong, "other_slopes": other,
        "cvxpy_vs_closed_form": float(np.max(np.abs(bil["cvxpy"] - bil["closed_form"]))),
        "cvxpy_vs_fast": float(max(np.max(np.abs(v["cvxpy"] - v["fast"])) for v in cvx.values())),
        "low_noise_ratio": max(ratio[s] for s in LOW_NOISE_SIGMAS),
        "high_noise_ratio": ratio[HIGH_NOISE_SIGMA],
    }
