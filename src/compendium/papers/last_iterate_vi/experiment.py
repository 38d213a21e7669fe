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
LOW_NOISE_SIGMAS = (0.0, 0.01, 0.03)  # the "sigma <= 0.03"
# "low noise" fixed from the horizon before any run: ROG's rate terms sigma^(4/5) t^(-2/5) and t^-1
# meet at t ~ sigma^(-4/3), so the noiseless regime lasts up to T when sigma <= T^(-3/4). The run adds
# these multiples of T^(-3/4) to the grid (crossover at about 21.5 T and 2.5 T).
LOW_NOISE_FACTORS = (0.1, 0.5)
HIGH_NOISE_SIGMA = 1.0
FIT_SIGMA_RANGE = (0.1, 3.0)  # variance-adaptivity fit
STRONG_FIT_SIGMAS = (0.1, 0.3, 1.0)
STRONG_SLOPE_SIGMA = 1.0
CONTROL_SIGMA = 1.0
OTHER_SIGMAS = (0.1, 1.0)  # the two extra problems
NUM_CVXPY_POINTS = 5
MAIN_METHODS = ("RG", "ROG (sigma-tuned)", "ROG (fixed)", "SGDA", "OG", "ROG (adaptive)")
ADAPTIVE = "ROG (adaptive)"  # the sigma-agnostic ROG that decides variance adaptivity


def low_noise_sigmas(horizon: int) -> tuple:
    """The nonzero noise levels below the crossover at the horizon: ``LOW_NOISE_FACTORS * T^(-3/4)``."""
    return tuple(float(f * horizon ** -0.75) for f in LOW_NOISE_FACTORS)


def below_crossover_sigmas(horizon: int) -> tuple:
    """``sigma = 0`` and :func:`low_noise_sigmas`: where the optimism claim is decided."""
    return (0.0, *low_noise_sigmas(horizon))


def extra_sigmas(horizon: int) -> dict:
    """Noise levels of the comparison methods (run only where their checks read them: time budget):
    RG on its own sigma = 0 schedule at every low-noise level of either definition, RG on the
    sigma-tuned schedule below the crossover, OG with a decaying step at ``CONTROL_SIGMA``."""
    return {"RG (low-noise)": tuple(sorted(set(LOW_NOISE_SIGMAS) | set(below_crossover_sigmas(horizon)))),
            "RG (sigma-tuned)": below_crossover_sigmas(horizon),
            "OG (decaying)": (CONTROL_SIGMA,)}


EXTRA_SIGMAS = extra_sigmas(50000)  # at the smoke horizon (the run computes its own)
# the instance where noise matters: the bilinear game with its anchor (and start) 0.02 from the
# solution instead of 0.5, so the Tikhonov bias mu^2 D^2 is (0.02 / 0.5)^2 = 1/625 of the first
# game's while the variance sigma^2 eta / mu is unchanged (fixed before any run)
WARM_ANCHOR_NORM = 0.02
WARM_METHODS = ("RG", "ROG (sigma-tuned)")
WARM_SIGMAS = REQUIRED_SIGMAS
NOISE_CHECK_SIGMA = 0.1  # noise-matters ratio Gap^2_T(0.1) / Gap^2_T(0) and the warm rate rows
# the lambda sweep for the 1/lambda^2 factor: lambda * (1/4, 1/2, 1) on the same game, ROG at sigma = 1
LAMBDA_FACTORS = (0.25, 0.5, 1.0)
LAMBDA_SIGMA = 1.0


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
    def grid(self) -> tuple:
        """The noise levels the run uses: ``sigmas`` and :func:`low_noise_sigmas` of the horizon."""
        return tuple(sorted(set(self.sigmas) | set(low_noise_sigmas(self.horizon))))

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
    comparison methods of :data:`EXTRA_SIGMAS`; ``warm`` holds ``methods``, ``sigmas`` and
    ``gap_sq`` (K, M, S, R) on the warm-anchor bilinear game; ``lambda_sweep`` holds ``lambdas``,
    ``gap_sq`` (K, L, R) and ``dist_sq`` (L, R) (``||z_T - z*||^2``) of ROG at ``LAMBDA_SIGMA``;
    ``sigma_hat`` (S, R) is the adaptive ROG's noise estimate at the horizon on the bilinear game.
    ``metrics`` holds every number the ledger reads.
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
    warm: dict
    lambda_sweep: dict
    sigma_hat: np.ndarray
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

    def warm_curves(self, method: str, sigma: float) -> np.ndarray:
        """``Gap^2`` on the warm-anchor bilinear game per seed, shape (K, R)."""
        w = self.warm
        return w["gap_sq"][:, w["methods"].index(method), _index(w["sigmas"], sigma)]

    def mean(self, method: str, sigma: float) -> np.ndarray:
        """Mean over seeds of ``Gap^2`` on the bilinear game, shape (K,)."""
        return self.curves(method, sigma).mean(axis=-1)


def _index(values, x) -> int:
    hits = np.flatnonzero(np.isclose(values, x, rtol=0, atol=1e-12))
    if hits.size != 1:
        raise ValueError(f"{x} is not among {list(values)}")
    return int(hits[0])


def main_methods(sigmas, step_max: float, offset: float) -> list:
    """RG, ROG (sigma-tuned), ROG (fixed), the unregularized baselines SGDA, OG, and the
    sigma-agnostic ROG (adaptive)."""
    base = me.base_schedule(step_max, offset)
    const = me.constant_schedule(step_max)
    adaptive = me.adaptive_schedule(step_max, offset)
    return [
        me.Method("RG", False, tuple(base for _ in sigmas)),
        me.Method("ROG (sigma-tuned)", True, tuple(me.sigma_tuned_schedule(s, step_max, offset) for s in sigmas)),
        me.Method("ROG (fixed)", True, tuple(base for _ in sigmas)),
        me.Method("SGDA", False, tuple(const for _ in sigmas)),
        me.Method("OG", True, tuple(const for _ in sigmas)),
        me.Method(ADAPTIVE, True, tuple(adaptive for _ in sigmas)),
    ]


def extra_methods(step_max: float, offset: float, horizon: int) -> dict:
    """``name -> Method`` for the comparison methods of :func:`extra_sigmas`: RG on its own
    sigma = 0 schedule (same sigma information as the sigma-tuned ROG), RG on the sigma-tuned
    schedule (the schedule without optimism) and OG with RG's decaying step but no regularization."""
    sig = extra_sigmas(horizon)
    low = me.rg_low_noise_schedule(step_max, offset)
    decaying = me.decaying_step_schedule(step_max, offset)
    return {"RG (low-noise)": me.Method("RG (low-noise)", False, tuple(low for _ in sig["RG (low-noise)"])),
            "RG (sigma-tuned)": me.Method("RG (sigma-tuned)", False,
                                          tuple(me.sigma_tuned_schedule(s, step_max, offset) for s in sig["RG (sigma-tuned)"])),
            "OG (decaying)": me.Method("OG (decaying)", True, tuple(decaying for _ in sig["OG (decaying)"]))}


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
    sigmas = np.array(c.grid)
    ckpt = me.checkpoint_times(T, c.checkpoints_per_decade)
    bilinear = pb.bilinear_game(n, make_rng(c.seed, 0))
    quad = pb.quadratic_game(n, c.strong_monotonicity, make_rng(c.seed, 1))
    affine = pb.affine_monotone(2 * n, make_rng(c.seed, 2))
    cyclic = pb.cyclic_game(n if n % 2 else n + 1, make_rng(c.seed, 3))

    warm = pb.bilinear_game(n, make_rng(c.seed, 0), anchor_norm=WARM_ANCHOR_NORM)  # same A and direction
    lambdas = tuple(f * c.strong_monotonicity for f in LAMBDA_FACTORS)
    sweep_games = [quad if f == 1.0 else pb.quadratic_game(n, lam, make_rng(c.seed, 1))  # same A, z*, anchor
                   for f, lam in zip(LAMBDA_FACTORS, lambdas)]

    # every ball problem advances in one vectorised loop (common random numbers across problems)
    methods = main_methods(sigmas, cap, t0)
    extras = extra_methods(cap, t0, T)
    extra_sig = extra_sigmas(T)
    arms_bilinear = [(m.optimistic, sch, float(s)) for m in methods for sch, s in zip(m.schedules, sigmas)]
    for name, method in extras.items():
        arms_bilinear += [(method.optimistic, sch, float(s)) for sch, s in zip(method.schedules, extra_sig[name])]
    warm_methods = [m for m in main_methods(WARM_SIGMAS, cap, t0) if m.name in WARM_METHODS]
    arms_warm = [(m.optimistic, sch, float(s)) for m in warm_methods for sch, s in zip(m.schedules, WARM_SIGMAS)]
    strong_sigmas = np.array([s for s in c.sigmas if s <= 1.0 + 1e-12])  # the registry grid only
    strong_sched = me.strongly_monotone_schedule(c.strong_monotonicity, cap, t0)
    strong_methods = [me.Method("ROG", True, tuple(strong_sched for _ in strong_sigmas)),
                      me.Method("RG", False, tuple(strong_sched for _ in strong_sigmas))]
    arms_strong = [(m.optimistic, sch, float(s)) for m in strong_methods for sch, s in zip(m.schedules, strong_sigmas)]
    sweep_idx = [k for k, f in enumerate(LAMBDA_FACTORS) if f != 1.0]
    arms_sweep = [[(True, me.strongly_monotone_schedule(lambdas[k], cap, t0), LAMBDA_SIGMA)] for k in sweep_idx]
    other_methods = main_methods(OTHER_SIGMAS, cap, t0)[:2]
    arms_other = [(m.optimistic, sch, float(s)) for m in other_methods for sch, s in zip(m.schedules, OTHER_SIGMAS)]
    batch_problems = [bilinear, warm, quad, *[sweep_games[k] for k in sweep_idx], affine]
    batch_arms = [arms_bilinear, arms_warm, arms_strong, *arms_sweep, arms_other]
    cyclic_joins = cyclic.dim == bilinear.dim  # n odd: the simplex game rides in the same loop
    if cyclic_joins:
        batch_problems.append(cyclic)
        batch_arms.append(arms_other)
    batch = me.simulate_batch(batch_problems, batch_arms, c.num_seeds, T, ckpt, make_rng(c.seed, 10), restricted=(2,))
    K, R = ckpt.size, c.num_seeds
    n_main = len(methods) * sigmas.size
    main_gap = batch[0]["gap_sq"][:, :n_main].reshape(K, len(methods), sigmas.size, R)
    sigma_hat = batch[0]["sigma_hat"][:n_main].reshape(len(methods), sigmas.size, R)[[m.name for m in methods].index(ADAPTIVE)]
    extra, pos = {}, n_main
    for name in extras:
        k = len(extra_sig[name])
        extra[name] = {"sigmas": np.array(extra_sig[name]), "gap_sq": batch[0]["gap_sq"][:, pos:pos + k]}  # (K, S, R)
        pos += k
    warm_out = {"methods": WARM_METHODS, "sigmas": np.array(WARM_SIGMAS),
                "gap_sq": batch[1]["gap_sq"].reshape(K, len(WARM_METHODS), len(WARM_SIGMAS), R)}
    strong_gap = batch[2]["gap_sq"].reshape(K, 2, strong_sigmas.size, R)
    strong_res = batch[2]["restricted_sq"].reshape(K, 2, strong_sigmas.size, R)
    # the lambda sweep: ROG at LAMBDA_SIGMA, the lambda = strong_monotonicity member read from the strong run
    j_sig = _index(strong_sigmas, LAMBDA_SIGMA)
    sweep_gap, sweep_dist = [], []
    for k, (f, game) in enumerate(zip(LAMBDA_FACTORS, sweep_games)):
        if f == 1.0:
            gap_k, final_k = strong_gap[:, 0, j_sig], batch[2]["final"][j_sig]  # ROG arms come first
        else:
            out = batch[3 + sweep_idx.index(k)]
            gap_k, final_k = out["gap_sq"][:, 0], out["final"][0]
        sweep_gap.append(gap_k)
        sweep_dist.append(np.sum((final_k - game.solution) ** 2, axis=-1))
    lambda_sweep = {"lambdas": np.array(lambdas), "gap_sq": np.stack(sweep_gap, axis=1), "dist_sq": np.array(sweep_dist)}
    other = {affine.name: {"methods": tuple(m.name for m in other_methods), "sigmas": np.array(OTHER_SIGMAS),
                           "gap_sq": batch[3 + len(sweep_idx)]["gap_sq"].reshape(K, 2, len(OTHER_SIGMAS), R)}}
    if cyclic_joins:
        cyclic_gap = batch[-1]["gap_sq"].reshape(K, 2, len(OTHER_SIGMAS), R)
    else:  # a simplex game of another dimension has a loop of its own
        cyclic_gap = me.simulate(cyclic, other_methods, OTHER_SIGMAS, c.num_seeds, T, ckpt, make_rng(c.seed, 14))["gap_sq"]
    other[cyclic.name] = {"methods": tuple(m.name for m in other_methods), "sigmas": np.array(OTHER_SIGMAS),
                          "gap_sq": cyclic_gap}
    # SEG makes two oracle calls per step: a loop of its own
    seg = me.simulate_extragradient(bilinear, cap, sigmas, c.num_seeds, T, ckpt, make_rng(c.seed, 11))

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
        gap_sq=main_gap, seg_gap_sq=seg, strong_sigmas=strong_sigmas,
        strong_methods=tuple(m.name for m in strong_methods), strong_gap_sq=strong_gap,
        strong_restricted_sq=strong_res, other=other, extra=extra, warm=warm_out, lambda_sweep=lambda_sweep,
        sigma_hat=sigma_hat,
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
            for m in ("ROG (sigma-tuned)", "ROG (fixed)", "RG", ADAPTIVE)}
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
    warm = {(m, float(s)): rates.fit_loglog_slope(t, r.warm_curves(m, s).mean(axis=-1), win)
            for m in r.warm["methods"] for s in r.warm["sigmas"]}
    warm_final = {(m, float(s)): float(r.warm_curves(m, s)[-1].mean()) for m in r.warm["methods"] for s in r.warm["sigmas"]}
    sweep = r.lambda_sweep
    lam_final = sweep["gap_sq"][-1].mean(axis=-1)
    cvx = r.metrics["cvxpy"]
    bil = next(v for k, v in cvx.items() if k.startswith("bilinear"))
    return {
        "slope": slope, "seed_slopes": seed_slopes, "final": final, "seg_slope": seg_slope, "fits": fits,
        "ratio": ratio, "strong": strong, "other_slopes": other,
        "warm_slope": warm, "warm_final": warm_final,
        "lambda": {"final": {float(x): float(v) for x, v in zip(sweep["lambdas"], lam_final)},
                   "power": rates.fit_power(sweep["lambdas"], lam_final),
                   "dist_power": rates.fit_power(sweep["lambdas"], sweep["dist_sq"].mean(axis=-1))},
        "cvxpy_vs_closed_form": float(np.max(np.abs(bil["cvxpy"] - bil["closed_form"]))),
        "cvxpy_vs_fast": float(max(np.max(np.abs(v["cvxpy"] - v["fast"])) for v in cvx.values())),
        "low_noise_ratio": max(ratio[s] for s in LOW_NOISE_SIGMAS),
        "high_noise_ratio": ratio[HIGH_NOISE_SIGMA],
    }
