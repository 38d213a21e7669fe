r"""Doubly regularized MDPs: robust soft RL with regret guarantees.

Paper card
----------
ICML 2026, seed file ``000_f69ae4f9f6fb29da.txt``, abstract 13. Only the abstract was available.
The paper regularises both the policy (KL to a reference policy) and the dynamics (KL to the
nominal kernel), which makes the policy robust, gives an optimistic online algorithm with
finite-sample regret bounds in tabular and linear MDPs, and handles continuous actions. The exact
algorithm and bound below are our reconstruction (research card ``doubly_regularized_mdp``), in the
line of twice-regularised MDPs (Derman et al., 2021) and KL-regularised robust MDPs.

Equations implemented
---------------------
Dynamics side (:func:`kl_robust_expectation`, :func:`worst_case_kernel`), for a kernel row ``p``::

    min_q  E_q[V] + beta KL(q || p)  =  -beta log sum_s' p(s') exp(-V(s')/beta),   q* ~ p exp(-V/beta)

Policy side (:func:`soft_value`, :func:`soft_policy`)::

    max_pi <pi, Q> - lambda KL(pi || pi_ref)  =  lambda log sum_a pi_ref(a) exp(Q(a)/lambda),   pi* ~ pi_ref exp(Q/lambda)

Doubly regularised Bellman recursion, horizon H (:func:`dr_backward`)::

    Q_h(s,a) = r(s,a) + [-beta log E_{P0(.|s,a)} exp(-V_{h+1}/beta)],    V_h(s) = lambda log E_{pi_ref} exp(Q_h(s,.)/lambda)

Duality with the KL-constrained robust MDP (:func:`kl_ball_expectation`, :func:`cvxpy_kl_ball`): with
``rho = KL(q*||p)``, ``min_{KL(q||p)<=rho} E_q V = regularised value - beta rho``.

Certificate: for every kernel ``P`` and policy ``pi``,
``V^pi(P) + beta E_{P,pi} sum_h KL(P_h || P0) >= V^pi_reg`` (by definition of the inf).

Online learning (:func:`tabular_regret`): optimistic value iteration on the empirical kernel with
bonus ``c H sqrt(iota_k / max(1, N))``, ``iota_k = log(S A H k / delta)``; ``c = 0`` is the greedy
plug-in baseline and planning with ``beta = inf`` the non-robust soft baseline. Linear
(:func:`linear_regret`): d-rectangular ``P(s'|s,a) = sum_i phi_i(s,a) mu_i(s')``, ridge estimates of
``E_{mu_i} exp(-V/beta)`` and the elliptical bonus ``c H sqrt(d iota_k) ||phi||_{Lambda^-1}``.

Continuous actions (:func:`gaussian_soft_value`): with ``pi_ref = N(m0, s0^2)`` and
``Q(a) = c - k (a - a*)^2``, ``lambda log E exp(Q/lambda) = c - (lambda/2) log(1 + 2 k s0^2/lambda)
- k (m0 - a*)^2 / (1 + 2 k s0^2/lambda)`` and ``pi*`` is Gaussian.

Small-scale deviations
----------------------
- The regret bound's form ``F(beta, H) H sqrt(S^2 A K iota)`` with ``F = beta (exp(H/beta) - 1)`` is
  inferred, not read from the paper; only its rate in ``K`` and its ``beta`` limits are checked.
- Robustness is measured against three rectangular adversaries of radius ``eps`` declared in
  advance (total-variation ball, KL ball of radius ``2 eps^2``, contamination), as the share of the
  non-robust policy's worst-case loss that a policy takes back; the KL ball is the regulariser's own
  geometry, so only the TV and contamination rows carry the claim. The policy planned against each
  adversary gives the largest share any policy can reach (the claims' control).
- cvxpy values are the objective at the solver's point projected onto the simplex (cvxpy's own
  ``problem.value`` can be ``inf`` when a coordinate comes back as -1e-13).
- Toy sizes: S = 6, A = 3, H = 5 random MDPs; a 16-step lock with 2 actions; a linear MDP with
  S = 20, A = 5, d = 4. K = 3000 episodes at smoke scale, 16000 at full scale.
- Regret is the exact pseudo-regret (policy values computed on the true model), not sampled returns.
- Rewards are learned in the tabular case and known in the linear case.
- The bonus constant ``c = 0.05`` and ``delta = 0.05`` were fixed before any regret run (card value).
- Regret slopes are judged one-sided (at most 0.75): the paper's regret result is an upper bound.
- Sample sizes: 50 instances per regret run and 100 MDPs in the robustness comparison, chosen by the
  power analysis of :mod:`.power` after 5 and 10 gave seed-dependent verdicts.
- The Monte Carlo certificate uses, per policy, random kernels and kernels tilted towards that
  policy's low values (:func:`~.experiments.certificate_kernels`), so its negative control can fail.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ...runtime import make_rng
from . import power, symbolic
from . import evaluation
from .agents import CONFIDENCE, linear_regret, optimal_start_value, tabular_regret, uniform_regret
from .environments import LinearMDP, TabularMDP, combination_lock, linear_mdp, random_mdp
from .experiments import (
    ADVERSARIES,
    adversary_expectation,
    KERNEL_KINDS,
    certificate,
    certificate_kernels,
    continuous_action_errors,
    dual_identity_errors,
    planned_policy,
    robustness,
    worst_case_returns,
)
from .operators import (
    cvxpy_dynamics_dual,
    cvxpy_kl_ball,
    cvxpy_policy_dual,
    dr_backward,
    gaussian_soft_policy,
    gaussian_soft_value,
    kl_ball_expectation,
    kl_divergence,
    kl_robust_expectation,
    quadrature_soft_value,
    rectangular_continuation,
    regularised_action_value,
    soft_policy,
    soft_value,
    tabular_continuation,
    tv_worst_expectation,
    worst_case_kernel,
)

PERTURBATIONS = (0.0, 0.1, 0.2, 0.3)  # radii of the worst-case-return curve (the checked one is added)
BETA_SWEEP = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, np.inf)
NUM_CHECKPOINTS = 5  # regret read at K/16, K/8, K/4, K/2, K
CONTINUOUS_INSTANCES = 20


@dataclass(frozen=True)
class Config:
    """Parameters of one run (names match the notebook's parameters cell); see the registry for help."""

    beta: float = 1.0
    temperature: float = 0.1
    lock_temperature: float = 0.02
    bonus_scale: float = 0.05
    num_states: int = 6
    num_actions: int = 3
    horizon: int = 5
    lock_length: int = 16
    num_episodes: int = 3000
    num_seeds: int = 50
    robust_seeds: int = 100
    perturbation: float = 0.3
    num_kernels: int = 200
    num_instances: int = 50
    linear_states: int = 20
    linear_actions: int = 5
    linear_features: int = 4
    constrained_radius: float = 0.1
    seed: int = 0

    def __post_init__(self) -> None:
        positive = dict(beta=(self.beta, 100), temperature=(self.temperature, 10),
                        lock_temperature=(self.lock_temperature, 1), constrained_radius=(self.constrained_radius, 5))
        for name, (value, high) in positive.items():
            if not 0 < value <= high:
                raise ValueError(f"{name} must lie in (0, {high}], got {value!r}")
        if not 0 <= self.bonus_scale <= 10:
            raise ValueError(f"bonus_scale must lie in [0, 10], got {self.bonus_scale!r}")
        if not 0 <= self.perturbation <= 1:
            raise ValueError(f"perturbation must lie in [0, 1], got {self.perturbation!r}")
        integers = dict(num_states=(2, 50), num_actions=(2, 10), horizon=(2, 20), lock_length=(2, 30),
                        num_episodes=(64, 100000), num_seeds=(2, 200), robust_seeds=(3, 1000), num_kernels=(10, 5000),
                        num_instances=(5, 500), linear_states=(4, 200), linear_actions=(2, 10),
                        linear_features=(2, 16), seed=(0, 2**32 - 1))
        for name, (low, high) in integers.items():
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not low <= value <= high:
                raise ValueError(f"{name} must be an integer in [{low}, {high}], got {value!r}")


@dataclass(frozen=True)
class Result:
    """What :func:`run` returns: data and metrics, never plots.

    ``regret[instance][method]`` is the per-episode regret, shape (num_seeds, num_episodes);
    ``checkpoints`` the episode counts where cumulative regret is read; the other fields hold the
    outputs of the experiments of :mod:`.experiments` and the sympy residuals.
    """

    symbolic: dict
    duals: dict
    certificate: dict
    regret: dict
    checkpoints: tuple
    slopes: dict
    robustness: dict
    perturbations: tuple
    continuous: dict
    bound: dict = field(default_factory=dict)


def _tile(mdp, copies: int):
    """Repeat a batch of environments ``copies`` times along the run axis (methods share instances)."""
    cls = type(mdp)
    fields = {k: np.concatenate([v] * copies) if isinstance(v, np.ndarray) else v for k, v in vars(mdp).items()}
    return cls(**fields)


def _split(regret: np.ndarray, names, num_seeds: int) -> dict:
    return {name: regret[i * num_seeds:(i + 1) * num_seeds] for i, name in enumerate(names)}


def run(config: Config) -> Result:
    """Run every experiment of the chapter for ``config``."""
    c, n = config, config.num_seeds
    K = c.num_episodes
    checkpoints = tuple(int(K // 2**j) for j in reversed(range(NUM_CHECKPOINTS)))

    sym = dict(
        dynamics=symbolic.gibbs_residual(3),
        policy=symbolic.policy_gibbs_residual(3),
        stationarity=symbolic.two_point_stationarity()[0],
        rate=symbolic.regret_rate_exponent(),
        beta_limits=symbolic.beta_factor_limits(),
    )
    bound = dict(factor=symbolic.beta_factor_value(c.beta, c.horizon),
                 factor_sweep={b: symbolic.beta_factor_value(b, c.horizon) for b in BETA_SWEEP})

    duals = dual_identity_errors(c.num_instances, make_rng(c.seed, 1))
    cert_mdp = random_mdp(1, c.num_states, c.num_actions, c.horizon, make_rng(c.seed, 2))
    cert = certificate(cert_mdp, c.beta, c.temperature, c.num_kernels, make_rng(c.seed, 3))

    # regret: the methods of one instance share its environments (paired comparison)
    regret = {}
    rand = random_mdp(n, c.num_states, c.num_actions, c.horizon, make_rng(c.seed, 4))
    names = ("optimistic", "greedy", "non-robust optimistic")
    per_run = tabular_regret(
        _tile(rand, 3), K,
        bonus_scale=np.repeat([c.bonus_scale, 0.0, c.bonus_scale], n),
        plan_beta=np.repeat([c.beta, c.beta, np.inf], n), eval_beta=c.beta,
        temperature=c.temperature, rng=make_rng(c.seed, 5))
    regret["random"] = _split(per_run, names, n)
    regret["random"]["uniform"] = uniform_regret(rand, K, c.beta, c.temperature)  # the slope-1 control
    lock = combination_lock(n, c.lock_length, make_rng(c.seed, 6))
    per_run = tabular_regret(_tile(lock, 2), K, bonus_scale=np.repeat([c.bonus_scale, 0.0], n),
                             plan_beta=c.beta, eval_beta=c.beta, temperature=c.lock_temperature,
                             rng=make_rng(c.seed, 7))
    regret["lock"] = _split(per_run, ("optimistic", "greedy"), n)
    lin = linear_mdp(n, c.linear_states, c.linear_actions, c.linear_features, c.horizon, make_rng(c.seed, 8))
    per_run = linear_regret(_tile(lin, 2), K, bonus_scale=np.repeat([c.bonus_scale, 0.0], n), beta=c.beta,
                            temperature=c.temperature, rng=make_rng(c.seed, 9))
    regret["linear"] = _split(per_run, ("optimistic", "greedy"), n)

    slopes = {(instance, method): evaluation.mean_curve_slope(checkpoints, r)
              for instance, methods in regret.items() for method, r in methods.items()}

    perturbations = tuple(sorted(set(PERTURBATIONS) | {float(c.perturbation)}))
    robust = robustness(c.robust_seeds, c.num_states, c.num_actions, c.horizon, c.beta, c.temperature,
                        perturbations, c.constrained_radius, BETA_SWEEP, make_rng(c.seed, 10),
                        checked_radius=float(c.perturbation))
    continuous = continuous_action_errors(CONTINUOUS_INSTANCES, make_rng(c.seed, 11))
    return Result(symbolic=sym, duals=duals, certificate=cert, regret=regret, checkpoints=checkpoints,
                  slopes=slopes, robustness=robust, perturbations=perturbations, continuous=continuous, bound=bound)


__all__ = [
    "Config", "Result", "run", "symbolic", "power", "PERTURBATIONS", "BETA_SWEEP", "CONFIDENCE",
    "KERNEL_KINDS", "certificate_kernels",
    "TabularMDP", "LinearMDP", "random_mdp", "combination_lock", "linear_mdp",
    "kl_robust_expectation", "worst_case_kernel", "kl_divergence", "tv_worst_expectation", "kl_ball_expectation",
    "soft_value", "soft_policy", "regularised_action_value", "tabular_continuation", "rectangular_continuation",
    "dr_backward", "cvxpy_dynamics_dual", "cvxpy_policy_dual", "cvxpy_kl_ball",
    "gaussian_soft_value", "gaussian_soft_policy", "quadrature_soft_value",
    "tabular_regret", "linear_regret", "optimal_start_value", "uniform_regret",
    "dual_identity_errors", "certificate", "robustness", "worst_case_returns", "planned_policy",
    "ADVERSARIES", "adversary_expectation", "evaluation",
    "continuous_action_errors",
]
