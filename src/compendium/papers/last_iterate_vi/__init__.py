r"""Last-iterate convergence of RG and ROG for stochastic monotone variational inequalities.

Paper card
----------
ICML 2026, seed file ``000_f69ae4f9f6fb29da.txt``, abstract 4 (authors per the poster page:
S. Ito, K. Abe, K. Ariu, T. Tsuchiya). Only the abstract was available. The update rules are the
standard ones the names denote (Tikhonov-regularized gradient; Popov's optimistic / past
extragradient step); schedules and rate heuristics are our own (research card ``last_iterate_vi``).

Equations implemented
---------------------
VI on a compact convex ``Z``: find ``z*`` with ``<F(z*), z - z*> >= 0`` for all ``z``; the oracle
returns ``F(z) + xi`` with ``E xi = 0``, ``E||xi||^2 = sigma^2`` (Gaussian here). Anchor ``z_ref``
(also the starting point), regularized operator ``G_t(z) = F(z) + mu_t (z - z_ref)``
(:mod:`.methods`)::

    g_t     = F(z_t) + xi_t + mu_t (z_t - z_ref)
    RG:   z_{t+1} = Proj_Z[z_t - eta_t g_t]
    ROG:  z_{t+1} = Proj_Z[z_t - eta_t (2 g_t - g_{t-1})]        (one oracle call per step)

Anytime schedules (no horizon), ``t0`` = ``offset``:

* fixed (RG, and ROG "fixed"): ``eta_t = min(eta_max, (t+t0)^-3/5)``, ``mu_t = (t+t0)^-1/5``;
* ROG sigma-tuned: ``eta_t = min(eta_max, sigma^-4/5 (t+t0)^-3/5)``,
  ``mu_t = max(sigma^2/5 (t+t0)^-1/5, (t+t0)^-1/2)``;
* ROG adaptive (sigma-agnostic): the sigma-tuned rule with ``sigma^2`` replaced by the AdaGrad-type
  estimate ``V_{t-1} / (2 (t+t0))``, ``V_t = sum_{s<=t} ||g_s - g_{s-1}||^2`` (its own operator
  differences; ``E||xi_s - xi_{s-1}||^2 = 2 sigma^2``);
* strongly monotone: ``eta_t = min(eta_max, 1/(lambda (t+t0)))``, ``mu_t = (t+t0)^-1``.

Baselines: SGDA and optimistic gradient (OG) without regularization, and stochastic extragradient
(SEG), all with the constant step ``eta_max``.

Gap function (:mod:`.problems`): ``Gap(z) = max_{z' in Z} <F(z), z - z'>`` (closed form on
balls and simplices); the restricted (Minty) gap ``max_{y in Z} <F(y), z - y>`` by a per-block
trust-region solver and, as reference, by cvxpy. On the bilinear game both equal
``R ||A^T x|| + R ||A y||``. The heuristic exponents (sympy) are in :mod:`.rates`.

Small-scale deviations
----------------------
- Only affine operators: a bilinear game on two balls (``||A|| = 1``, singular values in
  [0.5, 1]), the same game with its anchor 0.02 from the solution (so that noise, not the Tikhonov
  bias, sets the gap), a strongly monotone quadratic game at three values of ``lambda``, a monotone
  affine field with a low-rank PSD part on one ball, a cyclic zero-sum game on two simplices (noisy
  payoff vectors). Dimensions ``2n`` with ``n = 5`` by default. All ball problems advance in one
  vectorised loop (:func:`.methods.simulate_batch`) and share their noise draws.
- Schedule constants (``c_eta = c_mu = 1``, ``eta_max = 1/4``, ``t0 = 10``) are fixed by us; the
  sigma-tuned ROG schedule uses the known ``sigma``, the adaptive one estimates it from its own
  oracle answers (the paper may adapt differently).
- "Low noise" is fixed from the horizon: ``sigma <= T^(-3/4)`` (the crossover ``t ~ sigma^(-4/3)``
  lies beyond ``T``); the run adds ``0.1 T^(-3/4)`` and ``0.5 T^(-3/4)`` to the noise grid.
- The gap used for rates is ``max <F(z), z - z'>``; the paper's exact gap is unknown to us. For a
  strongly monotone ``F`` the restricted (Minty) gap is quadratic in the distance to ``z*`` and
  decays twice as fast; the chapter shows both.
- Horizons ``T = 5*10^4`` (smoke) and ``5*10^5`` (full); slopes on the window ``[T/100, T]``.
"""

from . import evaluation
from .experiment import (
    ADAPTIVE,
    LOW_NOISE_FACTORS,
    MAIN_METHODS,
    below_crossover_sigmas,
    extra_sigmas,
    low_noise_sigmas,
    CONTROL_SIGMA,
    EXTRA_SIGMAS,
    FIT_SIGMA_RANGE,
    HIGH_NOISE_SIGMA,
    LAMBDA_FACTORS,
    LAMBDA_SIGMA,
    LOW_NOISE_SIGMAS,
    OTHER_SIGMAS,
    REQUIRED_SIGMAS,
    RG_RATE_SIGMAS,
    ROG_NOISY_SIGMAS,
    STRONG_FIT_SIGMAS,
    STRONG_SLOPE_SIGMA,
    NOISE_CHECK_SIGMA,
    WARM_ANCHOR_NORM,
    WARM_METHODS,
    WARM_SIGMAS,
    Config,
    Result,
    cvxpy_gap_check,
    main_methods,
    run,
    slope_details,
)
from .methods import (
    AdaptiveSchedule,
    adaptive_schedule,
    Method,
    Schedule,
    base_schedule,
    checkpoint_times,
    constant_schedule,
    sigma_tuned_schedule,
    simulate,
    simulate_batch,
    simulate_extragradient,
    strongly_monotone_schedule,
)
from .problems import (
    AffineVI,
    affine_monotone,
    ball_trust_region,
    bilinear_closed_form_gap,
    bilinear_game,
    cyclic_game,
    project_ball,
    project_simplex,
    quadratic_game,
    restricted_gap_cvxpy,
)
from .rates import (
    crossover_times,
    derived_exponents_table,
    exponent_program,
    fit_loglog_slope,
    fit_power,
    fit_two_term_rate,
    sigma_scaling,
    strongly_monotone_constant,
)

__all__ = [name for name in dir() if not name.startswith("_")]
