"""Single-call methods RG and ROG with anytime schedules, the baselines, and a batched simulator.

Every single-call method here is one update with a switch for optimism::

    g_t     = F(z_t) + xi_t + mu_t (z_t - z_ref)                    (one noisy oracle call)
    z_{t+1} = Proj_Z[ z_t - eta_t (g_t + omega (g_t - g_{t-1})) ]    omega = 0: RG, omega = 1: ROG

SGDA is RG with ``mu = 0``, optimistic gradient (OG) is ROG with ``mu = 0``. Stochastic
extragradient (SEG) makes two oracle calls per step and has its own loop.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .problems import AffineVI

# Anytime schedule constants, fixed before any run (see the notebook's Method section).
STEP_EXPONENT = 3 / 5  # a
REG_EXPONENT = 1 / 5  # b
DETERMINISTIC_REG_EXPONENT = 1 / 2  # b at sigma = 0 (ROG)
STEP_COEF = 1.0  # c_eta
REG_COEF = 1.0  # c_mu
STRONG_STEP_KAPPA = 1.0  # eta_t = kappa / (lambda (t + t0)) on strongly monotone problems
STRONG_REG_EXPONENT = 1.0  # mu_t = (t + t0)^(-c/2), c = 2
_TINY = 1e-300  # V = 0 gives eta = cap without a division by zero


@dataclass(frozen=True)
class Schedule:
    """Horizon-free schedules ``eta_t = min(cap, c_eta (t+t0)^-a)`` and
    ``mu_t = max(c_mu (t+t0)^-b, c_mu0 (t+t0)^-b0)``, for ``t = 0, 1, 2, ...``.

    There is no horizon argument: the value at ``t`` depends on ``t`` only.
    """

    step_cap: float
    step_coef: float
    step_exponent: float
    reg_coef: float = 0.0
    reg_exponent: float = 0.0
    reg_floor_coef: float = 0.0
    reg_floor_exponent: float = 0.0
    offset: float = 10.0

    def __post_init__(self) -> None:
        if not self.step_cap > 0 or self.step_coef < 0 or self.offset < 1:
            raise ValueError(f"a schedule needs step_cap > 0, step_coef >= 0, offset >= 1; got {self}")

    def step(self, t: np.ndarray) -> np.ndarray:
        """``eta_t`` for integer times ``t`` (any shape)."""
        tt = np.asarray(t, dtype=float) + self.offset
        if self.step_coef == 0 or np.isinf(self.step_coef):
            return np.full_like(tt, self.step_cap)
        return np.minimum(self.step_cap, self.step_coef * tt ** (-self.step_exponent))

    def regularization(self, t: np.ndarray) -> np.ndarray:
        """``mu_t`` for integer times ``t`` (any shape)."""
        tt = np.asarray(t, dtype=float) + self.offset
        return np.maximum(self.reg_coef * tt ** (-self.reg_exponent),
                          self.reg_floor_coef * tt ** (-self.reg_floor_exponent))


def base_schedule(step_cap: float, offset: float) -> Schedule:
    """The fixed schedule ``eta_t = (t+t0)^-3/5``, ``mu_t = (t+t0)^-1/5``: RG, and ROG 'fixed'."""
    return Schedule(step_cap, STEP_COEF, STEP_EXPONENT, REG_COEF, REG_EXPONENT, offset=offset)


def sigma_tuned_schedule(sigma: float, step_cap: float, offset: float) -> Schedule:
    """ROG's noise-aware anytime schedule.

    ``eta_t = min(cap, c_eta sigma^(-4/5) (t+t0)^(-3/5))`` and
    ``mu_t = max(c_mu sigma^(2/5) (t+t0)^(-1/5), (t+t0)^(-1/2))``. Both switch from the
    deterministic regime (constant step, ``mu ~ t^-1/2``, rate ``t^-1``) to the noisy one
    (rate ``sigma^(4/5) t^(-2/5)``) near ``t ~ sigma^(-4/3)``. At ``sigma = 0`` only the first applies.
    """
    if sigma < 0:
        raise ValueError(f"sigma must be >= 0, got {sigma}")
    coef = np.inf if sigma == 0 else STEP_COEF * sigma ** (-4 / 5)
    return Schedule(step_cap, coef, STEP_EXPONENT, REG_COEF * sigma ** (2 / 5), REG_EXPONENT,
                    1.0, DETERMINISTIC_REG_EXPONENT, offset=offset)


@dataclass(frozen=True)
class AdaptiveSchedule:
    """ROG's sigma-agnostic anytime schedule: the sigma-tuned rule with ``sigma`` replaced by an
    AdaGrad-type estimate from the method's own oracle answers.

    The arm accumulates ``V_t = sum_{s<=t} ||g_s - g_{s-1}||^2`` over its regularized operator
    estimates (the same differences the optimistic correction uses). Under noise
    ``E||xi_s - xi_{s-1}||^2 = 2 sigma^2``, so ``sigma_hat_t^2 = V_{t-1} / (2 (t + t0))`` estimates
    ``sigma^2`` without knowing it, and::

        eta_t = min(cap, c_eta sigma_hat_t^(-4/5) (t+t0)^(-3/5))
        mu_t  = max(c_mu sigma_hat_t^(2/5) (t+t0)^(-1/5), (t+t0)^(-1/2))

    Without noise ``V`` stays bounded (only the drift of ``F(z_t)`` adds to it), ``sigma_hat``
    falls like ``t^-1/2`` and the schedule stays near the deterministic one. No horizon, no sigma.
    """

    step_cap: float
    offset: float = 10.0

    def __post_init__(self) -> None:
        if not self.step_cap > 0 or self.offset < 1:
            raise ValueError(f"an adaptive schedule needs step_cap > 0 and offset >= 1; got {self}")

    def noise_estimate(self, t, variation) -> np.ndarray:
        """``sigma_hat_t`` from the accumulated variation ``V_{t-1}`` (any shape)."""
        return np.sqrt(np.asarray(variation, dtype=float) / (2.0 * (t + self.offset)))

    # With sigma_hat^2 = V / (2 tt): sigma_hat^(-4/5) tt^(-3/5) = (V/2)^(-2/5) tt^(-1/5) and
    # sigma_hat^(2/5) tt^(-1/5) = (V/2)^(1/5) tt^(-2/5); the forms below take a few operations per step.
    def step(self, t, variation, out=None) -> np.ndarray:
        """``eta_t`` at integer time ``t`` given ``V_{t-1}`` (``V = 0``: the cap)."""
        tt = float(t) + self.offset
        half = np.maximum(np.asarray(variation, dtype=float) * 0.5, _TINY)
        value = half ** (-0.4)
        value *= STEP_COEF * tt ** (-0.2)
        return np.minimum(value, self.step_cap, out=out)

    def regularization(self, t, variation, out=None) -> np.ndarray:
        """``mu_t`` at integer time ``t`` given ``V_{t-1}``."""
        tt = float(t) + self.offset
        value = (np.asarray(variation, dtype=float) * 0.5) ** 0.2
        value *= REG_COEF * tt ** (-0.4)
        return np.maximum(value, tt ** (-DETERMINISTIC_REG_EXPONENT), out=out)


def adaptive_schedule(step_cap: float, offset: float) -> AdaptiveSchedule:
    """ROG's sigma-agnostic schedule (:class:`AdaptiveSchedule`)."""
    return AdaptiveSchedule(step_cap, offset)


def rg_low_noise_schedule(step_cap: float, offset: float) -> Schedule:
    """RG's own schedule for sigma = 0: ``eta_t = mu_t = (t+t0)^-1/3`` (the exponent program
    without noise and with ``a >= b`` gives ``a = b = 1/3``, rate ``t^-2/3``). Given to RG at low
    noise so that RG and the sigma-tuned ROG use the same information about sigma."""
    return Schedule(step_cap, STEP_COEF, 1 / 3, REG_COEF, 1 / 3, offset=offset)


def decaying_step_schedule(step_cap: float, offset: float) -> Schedule:
    """RG's decaying step ``(t+t0)^-3/5`` without regularization (``mu = 0``): OG on it isolates
    what the regularization does."""
    return Schedule(step_cap, STEP_COEF, STEP_EXPONENT, offset=offset)


def strongly_monotone_schedule(strong_monotonicity: float, step_cap: float, offset: float) -> Schedule:
    """``eta_t = min(cap, kappa / (lambda (t+t0)))`` and ``mu_t = (t+t0)^-1`` (bias ``t^-2``)."""
    return Schedule(step_cap, STRONG_STEP_KAPPA / strong_monotonicity, 1.0, 1.0, STRONG_REG_EXPONENT, offset=offset)


def constant_schedule(step: float) -> Schedule:
    """Constant step, no regularization: the baselines SGDA, OG and SEG."""
    return Schedule(step, 0.0, 0.0)


@dataclass(frozen=True)
class Method:
    """A single-call method: ``optimistic`` switches RG -> ROG; one schedule per noise level."""

    name: str
    optimistic: bool
    schedules: tuple  # one Schedule per sigma


def checkpoint_times(horizon: int, per_decade: int) -> np.ndarray:
    """Log-spaced iteration counts in ``[1, horizon]`` (always ending at ``horizon``), unique ints."""
    if horizon < 1 or per_decade < 1:
        raise ValueError(f"horizon and per_decade must be positive, got {horizon}, {per_decade}")
    num = int(np.ceil(np.log10(horizon) * per_decade)) + 1
    times = np.unique(np.round(np.logspace(0, np.log10(horizon), num)).astype(int))
    return times


def _noise_scale(sigmas: np.ndarray, dim: int) -> np.ndarray:
    # noise = sigma / sqrt(d) * standard normal, so that E||noise||^2 = sigma^2
    return np.asarray(sigmas, dtype=float) / np.sqrt(dim)


def simulate(problem: AffineVI, methods: list, sigmas, num_seeds: int, horizon: int, checkpoints: np.ndarray,
             rng: np.random.Generator, chunk: int = 500, restricted: bool = False) -> dict:
    """Run single-call methods for every (method, sigma, seed) at once; record squared gaps.

    All methods and noise levels share the same standard-normal draws per seed (common random
    numbers), scaled by ``sigma / sqrt(d)``, so differences between methods are not sampling noise.
    A thin wrapper around :func:`simulate_batch` with one problem and the arms ``methods x sigmas``.

    Parameters
    ----------
    problem : AffineVI
    methods : list of Method
        ``len(m.schedules) == len(sigmas)`` for each method.
    sigmas : sequence of float, length P
    num_seeds : int
    horizon : int
        Number of iterations ``T``.
    checkpoints : ndarray of int, shape (K,)
        Iteration counts at which ``Gap(z_t)^2`` is recorded (``1 <= t <= T``).
    rng : numpy.random.Generator
    restricted : bool
        Also record the restricted (Minty) gap (balls only).

    Returns
    -------
    dict with ``gap_sq`` of shape (K, len(methods), P, num_seeds), ``restricted_sq`` (same shape,
    or None), ``final`` (the last iterates, shape (len(methods), P, num_seeds, d)) and ``sigma_hat``
    (the adaptive arms' noise estimate at the horizon, NaN elsewhere; (len(methods), P, num_seeds)).
    """
    sigmas = np.asarray(sigmas, dtype=float)
    n_m, n_s = len(methods), sigmas.size
    if any(len(m.schedules) != n_s for m in methods):
        raise ValueError("every method needs one schedule per sigma")
    arms = [(m.optimistic, m.schedules[j], float(sigmas[j])) for m in methods for j in range(n_s)]
    out = simulate_batch([problem], [arms], num_seeds, horizon, checkpoints, rng, chunk=chunk,
                         restricted=(0,) if restricted else ())[0]
    K = np.asarray(checkpoints).size
    res = out["restricted_sq"]
    return {"gap_sq": out["gap_sq"].reshape(K, n_m, n_s, num_seeds),
            "restricted_sq": None if res is None else res.reshape(K, n_m, n_s, num_seeds),
            "final": out["final"].reshape(n_m, n_s, num_seeds, problem.dim),
            "sigma_hat": out["sigma_hat"].reshape(n_m, n_s, num_seeds)}


def _ball_layout(problems: list) -> tuple:
    """Block size ``b`` shared by every ball problem of a batch, and which problems form one ball of
    the full dimension instead (``whole``); raises if the batch cannot be projected together."""
    d = problems[0].dim
    sizes = []
    for p in problems:
        s = {b - a for a, b in p.blocks}
        if p.domain != "ball" or len(s) != 1 or p.radius != problems[0].radius:
            raise ValueError("simulate_batch projects several problems together only for balls of equal blocks and radius")
        sizes.append(s.pop())
    base = min(sizes)
    if any(s not in (base, d) for s in sizes):
        raise ValueError(f"block sizes {sizes} must all equal {base} or the full dimension {d}")
    return base, np.array([s == d and base < d for s in sizes])


def _check_batch(problems: list, arms: list, horizon: int, checkpoints: np.ndarray) -> None:
    if len(problems) != len(arms) or not problems or any(len(a) == 0 for a in arms):
        raise ValueError("simulate_batch needs one non-empty list of arms per problem")
    if any(p.dim != problems[0].dim for p in problems):
        raise ValueError("every problem of a batch must have the same dimension")
    if checkpoints.min() < 1 or checkpoints.max() > horizon:
        raise ValueError(f"checkpoints must lie in [1, {horizon}]")
    if any(s < 0 for a in arms for *_, s in a):
        raise ValueError("sigma must be >= 0")


class _Projector:
    """Projects the stacked state (A, S, d) of a batch in place: the problems on equal-block balls
    (which must come first) together, any other problem (simplices) on its own slice."""

    def __init__(self, problems: list, counts: list, slices: list, num_seeds: int):
        joint = [p.domain == "ball" and len({b - a for a, b in p.blocks}) == 1 for p in problems]
        self.num_joint = joint.index(False) if False in joint else len(problems)
        if any(joint[self.num_joint:]):
            raise ValueError("simulate_batch needs the problems on equal-block balls before the others")
        self.separate = [(slices[k], problems[k]) for k in range(self.num_joint, len(problems))]
        self.whole_rows = None
        if self.num_joint:
            self.base, whole = _ball_layout(problems[:self.num_joint])
            self.radius = problems[0].radius
            self.rows = int(sum(counts[:self.num_joint]))
            if whole.any():
                self.whole_rows = np.concatenate([np.full((c, 1, 1), w) for w, c in zip(whole, counts[:self.num_joint])])
        self.shape = (num_seeds, problems[0].dim)

    def __call__(self, z: np.ndarray) -> None:
        for sl, p in self.separate:
            z[sl] = p.project(z[sl])
        if not self.num_joint:
            return
        S, d = self.shape
        parts = z[:self.rows].reshape(self.rows, S, d // self.base, self.base)  # a view: projected in place
        sq = np.einsum("...i,...i->...", parts, parts)  # (A, S, blocks)
        if self.whole_rows is not None:
            sq = np.where(self.whole_rows, sq.sum(axis=-1, keepdims=True), sq)
        np.maximum(sq, self.radius**2, out=sq)
        np.sqrt(sq, out=sq)
        np.divide(self.radius, sq, out=sq)  # min(1, R / ||z_b||)
        parts *= sq[..., None]


class _Schedules:
    """``eta_t`` and ``mu_t`` of every arm: precomputed per chunk for the fixed schedules (the
    adaptive rows read 1 there), and per step, from the accumulated variation ``V`` (one value per
    arm and seed), for the adaptive arms, which must be contiguous and share one rule."""

    def __init__(self, flat: list, num_seeds: int):
        scheds = [s for _, s, _ in flat]
        is_adaptive = [isinstance(s, AdaptiveSchedule) for s in scheds]
        self.uniq = list(dict.fromkeys(s for s, a in zip(scheds, is_adaptive) if not a))
        self.which = np.array([0 if a else self.uniq.index(s) for s, a in zip(scheds, is_adaptive)])
        self.fixed = ~np.array(is_adaptive)[:, None]
        rows = np.flatnonzero(is_adaptive)
        rules = {scheds[r] for r in rows}
        if len(rules) > 1:
            raise ValueError("simulate_batch takes one AdaptiveSchedule per batch")
        if rows.size and not np.all(np.diff(rows) == 1):
            raise ValueError("the adaptive arms of a batch must be contiguous")
        self.rule = rules.pop() if rules else None
        self.rows = slice(int(rows[0]), int(rows[-1]) + 1) if rows.size else None
        self.variation = np.zeros((rows.size, num_seeds))

    def chunk(self, ts: np.ndarray) -> tuple:
        """(eta, mu) of the fixed schedules for the times ``ts``, each of shape (chunk, A, 1, 1)."""
        if not self.uniq:
            ones = np.ones((ts.size, self.which.size, 1, 1))
            return ones, ones
        eta = np.where(self.fixed, np.array([s.step(ts) for s in self.uniq])[self.which], 1.0)
        mu = np.where(self.fixed, np.array([s.regularization(ts) for s in self.uniq])[self.which], 1.0)
        return eta.T[:, :, None, None], mu.T[:, :, None, None]

    def adaptive(self, t: int) -> tuple:
        """(eta_t, mu_t) of the adaptive arms, each (n_adaptive, S, 1), from ``V_{t-1}``; None if none."""
        if self.rule is None:
            return None
        return self.rule.step(t, self.variation)[..., None], self.rule.regularization(t, self.variation)[..., None]

    def observe(self, g: np.ndarray, g_prev: np.ndarray) -> None:
        """``V_t = V_{t-1} + ||g_t - g_{t-1}||^2`` for the adaptive arms."""
        if self.rule is not None:
            diff = g[self.rows] - g_prev[self.rows]
            self.variation += np.einsum("asd,asd->as", diff, diff)

    def noise_estimates(self, t: int) -> np.ndarray:
        """``sigma_hat_t`` per arm and seed (NaN for the fixed schedules)."""
        out = np.full((self.which.size, self.variation.shape[1]), np.nan)
        if self.rule is not None:
            out[self.rows] = self.rule.noise_estimate(t, self.variation)
        return out


def _stack(problems: list, counts: list, attr: str, d: int) -> np.ndarray:
    return np.concatenate([np.broadcast_to(getattr(p, attr), (c, 1, d)) for p, c in zip(problems, counts)])


def _record_gaps(k: int, z: np.ndarray, problems: list, slices: list, gap_sq: list, res_sq: list) -> None:
    """Write ``Gap^2`` (and the restricted gap where asked) of every problem's arms at checkpoint ``k``."""
    for j, (sl, p) in enumerate(zip(slices, problems)):
        gap_sq[j][k] = p.gap(z[sl]) ** 2
        if res_sq[j] is not None:
            res_sq[j][k] = p.restricted_gap(z[sl]) ** 2


def simulate_batch(problems: list, arms: list, num_seeds: int, horizon: int, checkpoints: np.ndarray,
                   rng: np.random.Generator, chunk: int = 500, restricted=()) -> list:
    """Advance several problems, each with its own list of arms, in one vectorised loop over ``t``.

    An *arm* is ``(optimistic, schedule, sigma)``: RG (``optimistic=False``) or ROG on ``schedule``
    (a :class:`Schedule` or a sigma-agnostic :class:`AdaptiveSchedule`) at noise ``sigma``. Every
    arm of every problem sees the same standard-normal draws per seed (common random numbers),
    scaled by ``sigma / sqrt(d)``. The state of all arms is one array of shape (A, num_seeds, d)
    with ``A = sum of len(arms[p])``; each step does one matrix product per problem and the rest
    (noise, regularization, optimistic correction, projection) once for all arms, so the cost per
    step is a few dozen array operations whatever the number of problems.

    Parameters
    ----------
    problems : list of AffineVI
        Same dimension ``d``. The problems on products of balls of one radius whose blocks have one
        size ``b`` (or that are one ball of dimension ``d``) come first and are projected together;
        the others (simplices) follow and are projected each on its own slice.
    arms : list (one per problem) of lists of (bool, Schedule or AdaptiveSchedule, float)
    num_seeds, horizon, checkpoints, rng, chunk
        As in :func:`simulate`.
    restricted : sequence of int
        Indices of the problems whose restricted (Minty) gap is also recorded (balls only).

    Returns
    -------
    list (one per problem) of dicts with ``gap_sq`` (K, A_p, num_seeds), ``restricted_sq`` (same
    shape, or None), ``final`` (A_p, num_seeds, d) and ``sigma_hat`` (A_p, num_seeds): the adaptive
    arms' noise estimate at the horizon, NaN for the other arms.
    """
    checkpoints = np.asarray(checkpoints)
    _check_batch(problems, arms, horizon, checkpoints)
    d, S, K = problems[0].dim, num_seeds, checkpoints.size
    counts = [len(a) for a in arms]
    bounds = np.concatenate([[0], np.cumsum(counts)])
    slices = [slice(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:])]
    flat = [arm for a in arms for arm in a]
    project = _Projector(problems, counts, slices, S)
    schedules = _Schedules(flat, S)
    omega = np.array([1.0 if o else 0.0 for o, _, _ in flat])[:, None, None]
    scale = (np.array([s for *_, s in flat]) / np.sqrt(d))[:, None, None]  # E||noise||^2 = sigma^2
    anchor, shift = _stack(problems, counts, "anchor", d), _stack(problems, counts, "shift", d)
    mat_t = [np.ascontiguousarray(p.matrix.T) for p in problems]

    z = np.broadcast_to(anchor, (len(flat), S, d)).copy()
    g, g_prev, tmp = np.empty_like(z), None, np.empty_like(z)
    gap_sq = [np.empty((K, c, S)) for c in counts]
    res_sq = [np.empty((K, c, S)) if k in restricted else None for k, c in enumerate(counts)]
    record = {int(t): k for k, t in enumerate(checkpoints)}
    for start in range(0, horizon, chunk):
        ts = np.arange(start, min(start + chunk, horizon))
        eta_chunk, mu_chunk = schedules.chunk(ts)
        const = scale * rng.standard_normal((ts.size, S, d))[:, None] + shift  # q + xi_t, shared draws
        for i, t in enumerate(ts):
            adaptive = schedules.adaptive(int(t))
            for sl, mt in zip(slices, mat_t):
                np.matmul(z[sl], mt, out=g[sl])  # M z
            g += const[i]
            np.subtract(z, anchor, out=tmp)
            tmp *= mu_chunk[i]
            if adaptive is not None:
                tmp[schedules.rows] *= adaptive[1]
            g += tmp  # g_t = F(z_t) + xi_t + mu_t (z_t - z_ref)
            if g_prev is None:
                g_prev = g.copy()
            schedules.observe(g, g_prev)
            np.subtract(g, g_prev, out=tmp)
            tmp *= omega
            tmp += g  # g_t + omega (g_t - g_{t-1})
            tmp *= eta_chunk[i]
            if adaptive is not None:
                tmp[schedules.rows] *= adaptive[0]
            z -= tmp
            project(z)
            g, g_prev = g_prev, g
            k = record.get(int(t) + 1)
            if k is not None:
                _record_gaps(k, z, problems, slices, gap_sq, res_sq)
    sigma_hat = schedules.noise_estimates(horizon)
    return [{"gap_sq": gap_sq[j], "restricted_sq": res_sq[j], "final": z[sl].copy(), "sigma_hat": sigma_hat[sl]}
            for j, sl in enumerate(slices)]


def simulate_extragradient(problem: AffineVI, step: float, sigmas, num_seeds: int, horizon: int,
                           checkpoints: np.ndarray, rng: np.random.Generator, chunk: int = 500) -> np.ndarray:
    """Stochastic extragradient with a constant step and two noisy calls per iteration::

        w_t = Proj[z_t - eta (F(z_t) + xi_t)],   z_{t+1} = Proj[z_t - eta (F(w_t) + xi_t')]

    Returns ``Gap(z_t)^2`` at the checkpoints, shape (K, P, num_seeds).
    """
    sigmas = np.asarray(sigmas, dtype=float)
    d = problem.dim
    scale = _noise_scale(sigmas, d)[:, None, None]
    z = np.broadcast_to(problem.anchor, (sigmas.size, num_seeds, d)).copy()
    checkpoints = np.asarray(checkpoints)
    gap_sq = np.empty((checkpoints.size, sigmas.size, num_seeds))
    record = {int(t): k for k, t in enumerate(checkpoints)}
    for start in range(0, horizon, chunk):
        ts = np.arange(start, min(start + chunk, horizon))
        xi = rng.standard_normal((ts.size, 2, num_seeds, d))
        for i, t in enumerate(ts):
            w = problem.project(z - step * (problem.operator(z) + scale * xi[i, 0]))
            z = problem.project(z - step * (problem.operator(w) + scale * xi[i, 1]))
            k = record.get(int(t) + 1)
            if k is not None:
                gap_sq[k] = problem.gap(z) ** 2
    return gap_sq
