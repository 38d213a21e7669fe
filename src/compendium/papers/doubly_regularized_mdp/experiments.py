"""The chapter's experiments: dual identities, certificate, robustness, continuous actions.

Each function takes its own ``numpy.random.Generator`` and returns plain arrays and numbers.
"""

from __future__ import annotations

import numpy as np

from .environments import TabularMDP, random_mdp
from .operators import (
    cvxpy_dynamics_dual,
    cvxpy_kl_ball,
    cvxpy_kl_ball_values,
    cvxpy_policy_dual,
    dr_backward,
    gaussian_soft_policy,
    gaussian_soft_value,
    kl_ball_expectation,
    kl_divergence,
    kl_robust_expectation,
    quadrature_soft_value,
    soft_policy,
    soft_value,
    tabular_continuation,
    tv_worst_expectation,
    worst_case_kernel,
)


def dual_identity_errors(num_instances: int, rng: np.random.Generator) -> dict:
    """cvxpy on the simplex against the closed forms, on random instances.

    Returns arrays (num_instances,): ``dynamics_value``, ``dynamics_minimiser`` (max-abs),
    ``policy_value``, ``policy_minimiser``, ``duality`` (|regularised - constrained - beta rho|) and
    ``kl_ball_dual`` (the 1-D dual solver against cvxpy on the same KL ball).
    """
    keys = ("dynamics_value", "dynamics_minimiser", "policy_value", "policy_minimiser", "duality", "kl_ball_dual")
    out = {k: np.empty(num_instances) for k in keys}
    radii = np.empty(num_instances)
    for i in range(num_instances):
        n = int(rng.integers(3, 9))
        p = rng.dirichlet(np.ones(n))
        v = rng.uniform(0.0, 5.0, n)
        beta = float(np.exp(rng.uniform(np.log(0.2), np.log(5.0))))
        closed = float(kl_robust_expectation(p, v, beta))
        q_star = worst_case_kernel(p, v, beta)
        value, q = cvxpy_dynamics_dual(p, v, beta)
        out["dynamics_value"][i] = abs(value - closed)
        out["dynamics_minimiser"][i] = np.abs(q - q_star).max()
        # constrained twin: the KL ball whose radius is the KL of the regularised minimiser
        rho = float(kl_divergence(q_star, p))
        constrained, _ = cvxpy_kl_ball(p, v, rho)
        out["duality"][i] = abs(closed - constrained - beta * rho)
        out["kl_ball_dual"][i] = abs(float(kl_ball_expectation(p, v, rho)) - constrained)
        radii[i] = rho
        m = int(rng.integers(2, 7))
        ref = rng.dirichlet(np.ones(m))
        Q = rng.uniform(0.0, 5.0, m)
        lam = float(np.exp(rng.uniform(np.log(0.05), np.log(2.0))))
        value, pi = cvxpy_policy_dual(ref, Q, lam)
        out["policy_value"][i] = abs(value - float(soft_value(Q, ref, lam)))
        out["policy_minimiser"][i] = np.abs(pi - soft_policy(Q, ref, lam)).max()
    out["radii"] = radii
    return out


KERNEL_KINDS = ("random", "nominal mixture", "random tilt", "value tilt", "value tilt + nominal",
                "value tilt + random")
"""The six kinds of the certificate's kernel family, used in turn (kernel ``j`` is of kind ``j % 6``)."""


def certificate_kernels(nominal: np.ndarray, values: np.ndarray, beta: float, count: int,
                        rng: np.random.Generator) -> list:
    r"""``count`` time-varying kernels ``(H, S, A, S)`` for the Monte Carlo certificate, six kinds in turn.

    Three kinds are blind to the values: fresh Dirichlet(1) rows; mixtures
    :math:`(1-w)P^0 + wD` with a Dirichlet(0.5) kernel :math:`D`; random exponential tilts
    :math:`P^0 e^{\sigma Z}`. Three aim at low values, as an adversary that knows the policy would:
    the value tilt :math:`T_h \propto P^0 e^{-V_{h+1}/\beta'}` with :math:`\beta'` log-uniform in
    :math:`[\beta/10, 10\beta]` (:math:`\beta'=\beta` is the exact worst case), and its mixtures
    :math:`(1-w)T + wP^0` and :math:`(1-w)T + wD`. Weights :math:`w` are uniform on [0, 1].

    Parameters
    ----------
    nominal : array (S, A, S)
    values : array (H, S)
        ``values[h]`` is the next-step value :math:`V_{h+1}` the tilts aim at.
    """
    S, A = nominal.shape[0], nominal.shape[1]
    horizon = values.shape[0]
    kernels = []
    for j in range(count):
        kind = j % len(KERNEL_KINDS)
        if kind == 0:
            P = rng.dirichlet(np.ones(S), size=(horizon, S, A))
        elif kind == 1:
            weight = rng.uniform(0.0, 1.0, size=(horizon, S, A, 1))
            P = (1 - weight) * nominal + weight * rng.dirichlet(np.full(S, 0.5), size=(horizon, S, A))
        elif kind == 2:
            P = nominal * np.exp(rng.uniform(0.0, 3.0) * rng.standard_normal((horizon, S, A, S)))
        else:
            tilt_beta = beta * float(np.exp(rng.uniform(np.log(0.1), np.log(10.0))))
            P = np.stack([worst_case_kernel(nominal, values[h][None, None, :], tilt_beta) for h in range(horizon)])
            if kind == 4:
                weight = rng.uniform(0.0, 1.0)
                P = (1 - weight) * P + weight * nominal
            elif kind == 5:
                weight = rng.uniform(0.0, 1.0)
                P = (1 - weight) * P + weight * rng.dirichlet(np.ones(S), size=(horizon, S, A))
        P = np.maximum(P, 1e-300)
        kernels.append(P / P.sum(-1, keepdims=True))
    return kernels


def certificate(mdp: TabularMDP, beta: float, temperature: float, num_kernels: int, rng: np.random.Generator,
                control_weight: float = 0.25) -> dict:
    r"""Monte Carlo test of :math:`V^\pi(P) + \beta E_{P,\pi}\sum_h KL(P_h\|P^0) \ge V^\pi_{reg}`.

    ``mdp`` holds one nominal MDP (batch of 1). Two policies are certified: the doubly regularised
    optimum and the reference (uniform) policy. Each gets ``num_kernels`` kernels from
    :func:`certificate_kernels`, whose value tilts aim at that policy's regularised values. Returns
    the slacks (2, num_kernels), the same slacks with the penalty weight ``control_weight * beta``
    (negative control), the kind of each kernel (num_kernels,), and the slack at the worst-case
    kernel (2,).
    """
    P0, r, H = mdp.kernel[0], mdp.reward[0], mdp.horizon
    S, A = r.shape
    pi_ref = np.full((S, A), 1.0 / A)
    optimal, _ = dr_backward(tabular_continuation(P0, beta), r, H, pi_ref, temperature)
    policies = [optimal, np.broadcast_to(pi_ref, (H, S, A))]
    slack = np.empty((2, num_kernels))
    control = np.empty((2, num_kernels))
    tight = np.empty(2)
    for i, pi in enumerate(policies):
        _, reg = dr_backward(tabular_continuation(P0, beta), r, H, pi_ref, temperature, policies=pi)
        v_reg = reg[0][0]
        for j, P in enumerate(certificate_kernels(P0, reg[1:], beta, num_kernels, rng)):
            kl = kl_divergence(P, P0[None])  # (H, S, A)
            for weight, store in ((beta, slack), (control_weight * beta, control)):
                rewards = [r + weight * kl[h] for h in range(H)]
                _, v = dr_backward(tabular_continuation(list(P), np.inf), rewards, H, pi_ref, temperature, policies=pi)
                store[i, j] = v[0][0] - v_reg
        worst = [worst_case_kernel(P0, reg[h + 1][None, None, :], beta) for h in range(H)]
        rewards = [r + beta * kl_divergence(worst[h], P0) for h in range(H)]
        _, v = dr_backward(tabular_continuation(worst, np.inf), rewards, H, pi_ref, temperature, policies=pi)
        tight[i] = v[0][0] - v_reg
    kind = np.arange(num_kernels) % len(KERNEL_KINDS)
    return dict(slack=slack, control=control, tight=tight, kind=kind)


ADVERSARIES = ("tv", "kl", "contamination")  # declared before the robustness runs (issue 21)


def adversary_expectation(P, V, radius: float, adversary: str = "tv") -> np.ndarray:
    r"""Worst next-state expectation of ``V`` for one adversary of size ``radius`` (shape (...)).

    ``'tv'``: the total-variation ball :math:`\tfrac12\|q-P\|_1\le\varepsilon`;
    ``'kl'``: the KL ball :math:`KL(q\|P)\le 2\varepsilon^2` (the radius at which Pinsker's
    inequality puts it inside the TV ball of radius :math:`\varepsilon`);
    ``'contamination'``: :math:`q=(1-\varepsilon)P+\varepsilon\,\delta_{s'}` with the worst state
    :math:`s'`, i.e. :math:`(1-\varepsilon)E_P V+\varepsilon\min V`.
    """
    if adversary == "tv":
        return tv_worst_expectation(P, V, radius)
    P, V = np.broadcast_arrays(np.asarray(P, float), np.asarray(V, float))
    if radius == 0:
        return np.sum(P * V, axis=-1)
    if adversary == "kl":
        return kl_ball_expectation(P, V, 2.0 * radius**2)
    if adversary == "contamination":
        if not 0 <= radius <= 1:
            raise ValueError(f"radius must lie in [0, 1], got {radius}")
        return (1.0 - radius) * np.sum(P * V, axis=-1) + radius * V.min(axis=-1)
    raise ValueError(f"adversary must be one of {ADVERSARIES}, got {adversary!r}")


def worst_case_returns(mdp: TabularMDP, policies: np.ndarray, radii, temperature: float,
                       adversary: str = "tv") -> np.ndarray:
    """Soft return from state 0 under the worst kernel of ``adversary`` at each radius.

    ``policies (H, R, S, A)``; returns (len(radii), R). The adversary is (s, a)-rectangular and
    adapts to the policy by dynamic programming (:func:`adversary_expectation`).
    """
    pi_ref = np.full(mdp.kernel.shape[:-1], 1.0 / mdp.num_actions)
    out = []
    for eps in radii:
        cont = lambda V, h, eps=eps: adversary_expectation(mdp.kernel, V[..., None, None, :], eps, adversary)  # noqa: E731
        _, v = dr_backward(cont, mdp.reward, mdp.horizon, pi_ref, temperature, policies=policies)
        out.append(v[0][:, 0])
    return np.array(out)


def planned_policy(mdp: TabularMDP, temperature: float, beta=None, kl_radius=None, adversary=None,
                   radius: float = 0.0) -> np.ndarray:
    """Soft-optimal policy on the nominal kernel: doubly regularised (``beta``), non-robust
    (``beta=np.inf``), KL-ball constrained (``kl_radius``, 1-D dual solver) or robust to one
    adversary of :data:`ADVERSARIES` at ``radius`` (``adversary``; the rectangular robust soft
    recursion, whose policy maximises the worst-case soft return against that adversary). Shape
    (H, R, S, A)."""
    pi_ref = np.full(mdp.kernel.shape[:-1], 1.0 / mdp.num_actions)
    if adversary is not None:
        cont = lambda V, h: adversary_expectation(mdp.kernel, V[..., None, None, :], radius, adversary)  # noqa: E731
    elif kl_radius is not None:
        cont = lambda V, h: kl_ball_expectation(mdp.kernel, V[..., None, None, :], kl_radius)  # noqa: E731
    else:
        cont = tabular_continuation(mdp.kernel, beta)
    return dr_backward(cont, mdp.reward, mdp.horizon, pi_ref, temperature)[0]


def robustness(num_seeds: int, num_states: int, num_actions: int, horizon: int, beta: float, temperature: float,
               radii, kl_radius: float, betas, rng: np.random.Generator, checked_radius: float | None = None) -> dict:
    """Worst-case soft returns of the doubly regularised, non-robust and KL-ball policies.

    Returns ``returns`` {method: (len(radii), num_seeds)} and ``sweep`` (len(betas), len(radii),
    num_seeds) against the TV adversary; ``by_adversary`` {adversary: {'returns': {method:
    (num_seeds,)}, 'sweep': (len(betas), num_seeds), 'loss': (num_seeds,)}} for every adversary of
    :data:`ADVERSARIES` at ``checked_radius`` (default: the largest radius), where the methods
    include ``'adversary-robust'`` (the policy planned against that adversary at that radius, the
    best worst-case return any policy can reach) and ``loss`` is what the adversary takes from the
    non-robust policy (its nominal minus its worst-case return); ``nominal`` {method: (num_seeds,)};
    and ``cvxpy_agreement``: the largest gap between the 1-D dual and cvxpy on every KL-ball step of
    the first instance's constrained value iteration.
    """
    mdp = random_mdp(num_seeds, num_states, num_actions, horizon, rng)
    policies = {
        "doubly regularised": planned_policy(mdp, temperature, beta=beta),
        "non-robust soft": planned_policy(mdp, temperature, beta=np.inf),
        "KL-ball robust": planned_policy(mdp, temperature, kl_radius=kl_radius),
    }
    returns = {name: worst_case_returns(mdp, pi, radii, temperature) for name, pi in policies.items()}
    sweep_policies = [planned_policy(mdp, temperature, beta=b) for b in betas]
    sweep = np.array([worst_case_returns(mdp, pi, radii, temperature) for pi in sweep_policies])
    eps = float(max(radii) if checked_radius is None else checked_radius)
    # every policy against every adversary in one batched dynamic programme per adversary
    # (the instances are tiled once per policy along the run axis)
    robust_to = [planned_policy(mdp, temperature, adversary=a, radius=eps) for a in ADVERSARIES]
    stacked = list(policies.values()) + robust_to + sweep_policies
    copies, first_sweep = len(stacked), len(policies) + len(ADVERSARIES)
    baseline = list(policies).index("non-robust soft")
    tiled = TabularMDP(np.concatenate([mdp.kernel] * copies), np.concatenate([mdp.reward] * copies), mdp.horizon)
    all_pi = np.concatenate(stacked, axis=1)  # (H, copies * R, S, A)
    nominal = worst_case_returns(tiled, all_pi, [0.0], temperature)[0].reshape(copies, num_seeds)
    by_adversary = {}
    for k, adversary in enumerate(ADVERSARIES):
        values = worst_case_returns(tiled, all_pi, [eps], temperature, adversary)[0].reshape(copies, num_seeds)
        chosen = dict(zip(policies, values[: len(policies)]))
        chosen["adversary-robust"] = values[len(policies) + k]
        by_adversary[adversary] = {"returns": chosen, "sweep": values[first_sweep:],
                                   "loss": nominal[baseline] - values[baseline]}
    # cvxpy reference for the constrained baseline on the first instance
    pi_ref = np.full((num_states, num_actions), 1.0 / num_actions)
    P0, r0 = mdp.kernel[0], mdp.reward[0]
    gaps = []

    def cvxpy_step(V, h):
        reference = cvxpy_kl_ball_values(P0, V[None, None, :], kl_radius)
        gaps.append(np.abs(reference - kl_ball_expectation(P0, V[None, None, :], kl_radius)).max())
        return reference

    dr_backward(cvxpy_step, r0, horizon, pi_ref, temperature)
    return dict(returns=returns, sweep=sweep, by_adversary=by_adversary, checked_radius=eps,
                nominal=dict(zip(policies, nominal[: len(policies)])), cvxpy_agreement=float(max(gaps)))


def continuous_action_errors(num_instances: int, rng: np.random.Generator) -> dict:
    """Gaussian reference policy, quadratic Q: closed form against adaptive quadrature.

    Returns arrays (num_instances,) ``value`` and ``policy_mean`` (absolute errors).
    """
    value_err, mean_err = np.empty(num_instances), np.empty(num_instances)
    for i in range(num_instances):
        ref_mean, peak = rng.uniform(-2.0, 2.0, 2)
        ref_std = float(np.exp(rng.uniform(np.log(0.2), np.log(3.0))))
        curvature = float(np.exp(rng.uniform(np.log(0.05), np.log(5.0))))
        top = float(rng.uniform(-1.0, 1.0))
        lam = float(np.exp(rng.uniform(np.log(0.05), np.log(2.0))))
        closed = gaussian_soft_value(ref_mean, ref_std, curvature, peak, top, lam)
        quad_value, quad_mean = quadrature_soft_value(ref_mean, ref_std, curvature, peak, top, lam)
        value_err[i] = abs(closed - quad_value)
        mean_err[i] = abs(gaussian_soft_policy(ref_mean, ref_std, curvature, peak, lam)[0] - quad_mean)
    return dict(value=value_err, policy_mean=mean_err)
