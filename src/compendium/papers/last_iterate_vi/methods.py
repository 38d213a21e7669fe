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
    n_m, n_s, d = len(methods), sigmas.size, problem.dim
    if any(len(m.schedules) != n_s for m in methods):
        raise ValueError("every method needs one schedule per sigma")
    checkpoints = np.asarray(checkpoints)
    if checkpoints.min() < 1 or checkpoints.max() > horizon:
        raise ValueError(f"checkpoints must lie in [1, {horizon}]")
    omega = np.array([1.0 if m.optimistic else 0.0 for m in methods])[:, None, None, None]
    scale = _noise_scale(sigmas, d)[None, :, None, None]
    z = np.broadcast_to(problem.anchor, (n_m, n_s, num_seeds, d)).copy()  # (methods, sigmas, seeds, d)
    g_prev = None
    gap_sq = np.empty((checkpoints.size, n_m, n_s, num_seeds))
    res_sq = np.empty_like(gap_sq) if restricted else None
    record = {int(t): k for k, t in enumerate(checkpoints)}
    for start in range(0, horizon, chunk):
        ts = np.arange(start, min(start + chunk, horizon))
        eta = np.array([[s.step(ts) for s in m.schedules] for m in methods])  # (methods, sigmas, chunk)
        mu = np.array([[s.regularization(ts) for s in m.schedules] for m in methods])
        eta, mu = np.moveaxis(eta, -1, 0), np.moveaxis(mu, -1, 0)  # (chunk, methods, sigmas)
        xi = rng.standard_normal((ts.size, num_seeds, d))  # shared by methods and sigmas
        for i, t in enumerate(ts):
            g = problem.operator(z) + scale * xi[i] + mu[i][:, :, None, None] * (z - problem.anchor)
            if g_prev is None:
                g_prev = g
            z = problem.project(z - eta[i][:, :, None, None] * (g + omega * (g - g_prev)))
            g_prev = g
            k = record.get(int(t) + 1)
            if k is not None:
                gap_sq[k] = problem.gap(z) ** 2
                if restricted:
                    res_sq[k] = problem.restricted_gap(z) ** 2
    return {"gap_sq": gap_sq, "restricted_sq": res_sq, "final": z}


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
