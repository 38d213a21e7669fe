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
    or None) and ``final`` (the last iterates, shape (len(methods), P, num_seeds, d)).
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
            "final": out["final"].reshape(n_m, n_s, num_seeds, problem.dim)}


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


def simulate_batch(problems: list, arms: list, num_seeds: int, horizon: int, checkpoints: np.ndarray,
                   rng: np.random.Generator, chunk: int = 500, restricted=()) -> list:
    """Advance several problems, each with its own list of arms, in one vectorised loop over ``t``.

    An *arm* is ``(optimistic, schedule, sigma)``: RG (``optimistic=False``) or ROG on ``schedule``
    at noise ``sigma``. Every arm of every problem sees the same standard-normal draws per seed
    (common random numbers), scaled by ``sigma / sqrt(d)``. The state of all arms is one array of
    shape (A, num_seeds, d) with ``A = sum of len(arms[p])``; each step does one matrix product per
    problem and the rest (noise, regularization, optimistic correction, projection) once for all
    arms, in preallocated buffers, so the cost per step is a few dozen array operations whatever the
    number of problems.

    Parameters
    ----------
    problems : list of AffineVI
        Same dimension ``d``. The problems on products of balls of one radius whose blocks have one
        size ``b`` (or that are one ball of dimension ``d``) come first and are projected together;
        the others (simplices) follow and are projected each on its own slice.
    arms : list (one per problem) of lists of (bool, Schedule, float)
    num_seeds, horizon, checkpoints, rng, chunk
        As in :func:`simulate`.
    restricted : sequence of int
        Indices of the problems whose restricted (Minty) gap is also recorded (balls only).

    Returns
    -------
    list (one per problem) of dicts with ``gap_sq`` (K, A_p, num_seeds), ``restricted_sq`` (same
    shape, or None) and ``final`` (A_p, num_seeds, d).
    """
    if len(problems) != len(arms) or not problems or any(len(a) == 0 for a in arms):
        raise ValueError("simulate_batch needs one non-empty list of arms per problem")
    d, S = problems[0].dim, num_seeds
    if any(p.dim != d for p in problems):
        raise ValueError("every problem of a batch must have the same dimension")
    checkpoints = np.asarray(checkpoints)
    if checkpoints.min() < 1 or checkpoints.max() > horizon:
        raise ValueError(f"checkpoints must lie in [1, {horizon}]")
    if any(s < 0 for a in arms for *_, s in a):
        raise ValueError("sigma must be >= 0")
    counts = [len(a) for a in arms]
    bounds = np.concatenate([[0], np.cumsum(counts)])
    slices = [slice(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:])]
    # problems on equal-block balls are projected together (they must come first); any other
    # problem (simplices, unequal blocks) is projected on its own slice of the state
    joint = [p.domain == "ball" and len({b - a for a, b in p.blocks}) == 1 for p in problems]
    num_joint = joint.index(False) if False in joint else len(problems)
    if any(joint[num_joint:]):
        raise ValueError("simulate_batch needs the problems on equal-block balls before the others")
    if num_joint:
        base, whole = _ball_layout(problems[:num_joint])
        radius = problems[0].radius
        a_joint = int(bounds[num_joint])
    separate = [(slices[k], problems[k]) for k in range(num_joint, len(problems))]
    flat = [arm for a in arms for arm in a]
    A = len(flat)
    uniq = list(dict.fromkeys(s for _, s, _ in flat))  # distinct schedules, evaluated once per chunk
    which = np.array([uniq.index(s) for _, s, _ in flat])
    omega = np.array([1.0 if o else 0.0 for o, _, _ in flat])[:, None, None]
    any_optimistic = bool(omega.any())
    scale = (np.array([s for *_, s in flat]) / np.sqrt(d))[:, None, None]  # E||noise||^2 = sigma^2
    anchor = np.concatenate([np.broadcast_to(p.anchor, (c, 1, d)) for p, c in zip(problems, counts)])
    shift = np.concatenate([np.broadcast_to(p.shift, (c, 1, d)) for p, c in zip(problems, counts)])
    whole_rows = None
    if num_joint and whole.any():
        whole_rows = np.concatenate([np.full((c, 1, 1), w) for w, c in zip(whole, counts[:num_joint])])
    mat_t = [np.ascontiguousarray(p.matrix.T) for p in problems]

    z = np.broadcast_to(anchor, (A, S, d)).copy()
    g, g_prev, tmp = np.empty_like(z), None, np.empty_like(z)
    K = checkpoints.size
    gap_sq = [np.empty((K, c, S)) for c in counts]
    res_sq = [np.empty((K, c, S)) if k in restricted else None for k, c in enumerate(counts)]
    record = {int(t): k for k, t in enumerate(checkpoints)}
    for start in range(0, horizon, chunk):
        ts = np.arange(start, min(start + chunk, horizon))
        eta = np.array([s.step(ts) for s in uniq])[which].T[:, :, None, None]  # (chunk, A, 1, 1)
        mu = np.array([s.regularization(ts) for s in uniq])[which].T[:, :, None, None]
        xi = rng.standard_normal((ts.size, S, d))  # shared by every arm and problem
        # everything in g_t that does not depend on z_t, for the whole chunk: q + xi_t - mu_t z_ref
        const = scale * xi[:, None] + (shift - mu * anchor)  # (chunk, A, S, d)
        for i, t in enumerate(ts):
            for sl, mt in zip(slices, mat_t):
                np.matmul(z[sl], mt, out=g[sl])  # M z
            g += const[i]
            np.multiply(z, mu[i], out=tmp)
            g += tmp  # g_t = F(z_t) + xi_t + mu_t (z_t - z_ref)
            if g_prev is None:
                g_prev = g.copy()
            if any_optimistic:
                np.subtract(g, g_prev, out=tmp)
                tmp *= omega
                tmp += g  # g_t + omega (g_t - g_{t-1})
            else:
                np.copyto(tmp, g)
            tmp *= eta[i]
            z -= tmp
            for sl, p in separate:
                z[sl] = p.project(z[sl])
            if num_joint:
                parts = z[:a_joint].reshape(a_joint, S, d // base, base)  # a view: projected in place
                sq = np.einsum("...i,...i->...", parts, parts)  # (A, S, blocks)
                if whole_rows is not None:
                    sq = np.where(whole_rows, sq.sum(axis=-1, keepdims=True), sq)
                np.maximum(sq, radius**2, out=sq)
                np.sqrt(sq, out=sq)
                np.divide(radius, sq, out=sq)  # min(1, R / ||z_b||)
                parts *= sq[..., None]
            g, g_prev = g_prev, g
            k = record.get(int(t) + 1)
            if k is not None:
                for j, (sl, p) in enumerate(zip(slices, problems)):
                    gap_sq[j][k] = p.gap(z[sl]) ** 2
                    if res_sq[j] is not None:
                        res_sq[j][k] = p.restricted_gap(z[sl]) ** 2
    return [{"gap_sq": gap_sq[j], "restricted_sq": res_sq[j], "final": z[sl].copy()} for j, sl in enumerate(slices)]


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
