r"""Online learners for doubly regularised MDPs, vectorised over a batch of independent runs.

Each episode ``k`` a learner plans on its estimates with the doubly regularised recursion of
:func:`~.operators.dr_backward`, acts with the resulting soft policy, and updates its statistics.
Regret is the *pseudo-regret* under the doubly regularised criterion on the true kernel::

    Regret(K) = sum_k V*_1(s_1) - V^{pi_k}_1(s_1)

with both values computed exactly (no sampling noise in the evaluation).
"""

from __future__ import annotations

import numpy as np

from .environments import LinearMDP, TabularMDP
from .operators import dr_backward, rectangular_continuation, tabular_continuation

CONFIDENCE = 0.05  # delta in iota_k = log(S A H k / delta), fixed with the bonus constant


def _sample(probabilities: np.ndarray, uniforms: np.ndarray) -> np.ndarray:
    """Inverse-CDF draw per row: ``probabilities (R, n)``, ``uniforms (R,)`` -> indices (R,)."""
    index = (uniforms[:, None] > np.cumsum(probabilities, axis=-1)).sum(axis=-1)
    return np.minimum(index, probabilities.shape[-1] - 1)


def _rollout(kernel, pis, rng, start_state: int = 0, kernel_cdf=None):
    """One episode per run; returns visited ``(states, actions, next_states)`` each (H, R).

    Inverse-CDF draws as :func:`_sample`; ``kernel_cdf`` (the cumulative sums of ``kernel`` along
    the next state) may be passed precomputed, since the true kernel does not change."""
    H, R = pis.shape[0], kernel.shape[0]
    runs = np.arange(R)
    s = np.full(R, start_state)
    u = rng.random((H, 2, R))
    out = np.empty((3, H, R), dtype=np.int64)
    kernel_cdf = np.cumsum(kernel, axis=-1) if kernel_cdf is None else kernel_cdf
    A, S = pis.shape[-1], kernel.shape[-1]
    for h in range(H):
        cdf = np.cumsum(pis[h][runs, s], axis=-1)  # (R, A): only the visited states' rows
        a = (u[h, 0] > cdf[:, 0]).astype(np.int64)  # count of cdf entries below u, last one excluded
        for j in range(1, A - 1):
            a += u[h, 0] > cdf[:, j]
        s_next = np.minimum(np.count_nonzero(u[h, 1][:, None] > kernel_cdf[runs, s, a], axis=-1), S - 1)
        out[:, h] = s, a, s_next
        s = s_next
    return out


def optimal_start_value(mdp: TabularMDP, beta, temperature: float) -> np.ndarray:
    """``V*_1(s_1)`` per run under the doubly regularised criterion on the true kernel, shape (R,)."""
    pi_ref = np.full(mdp.kernel.shape[:-1], 1.0 / mdp.num_actions)
    _, values = dr_backward(tabular_continuation(mdp.kernel, beta), mdp.reward, mdp.horizon, pi_ref, temperature)
    return values[0][:, 0]


def uniform_regret(mdp: TabularMDP, num_episodes: int, eval_beta: float, temperature: float) -> np.ndarray:
    """Per-episode regret of the uniform reference policy, which never learns: the constant
    ``V*_1(s_1) - V^{pi_ref}_1(s_1)`` in every episode, shape (R, num_episodes). Its cumulative
    regret is linear in ``K``: the control for the regret-slope checks (slope 1)."""
    if num_episodes < 1:
        raise ValueError(f"num_episodes must be positive, got {num_episodes}")
    R, S, A = mdp.kernel.shape[:3]
    pi_ref = np.full((R, S, A), 1.0 / A)
    uniform = np.broadcast_to(pi_ref, (mdp.horizon, R, S, A))
    _, v = dr_backward(tabular_continuation(mdp.kernel, eval_beta), mdp.reward, mdp.horizon, pi_ref, temperature,
                       policies=uniform)
    gap = optimal_start_value(mdp, eval_beta, temperature) - v[0][:, 0]
    return np.repeat(gap[:, None], num_episodes, axis=1)


def tabular_regret(mdp: TabularMDP, num_episodes: int, bonus_scale, plan_beta, eval_beta: float,
                   temperature: float, rng: np.random.Generator) -> np.ndarray:
    r"""Optimistic doubly regularised value iteration (greedy plug-in when the bonus scale is 0).

    The learner estimates ``P`` (uniform for unvisited pairs) and the mean reward (0 when
    unvisited), adds the bonus :math:`b_k(s,a) = c\,H\sqrt{\iota_k/\max(1,N_k(s,a))}` with
    :math:`\iota_k = \log(SAHk/\delta)`, and clips :math:`Q_h` at :math:`H-h`.

    Parameters
    ----------
    mdp : TabularMDP
        ``R`` true environments (one per run).
    bonus_scale : float or array (R,)
        The constant ``c`` per run (0: greedy plug-in).
    plan_beta : float or array (R,)
        ``beta`` used for planning (``np.inf``: non-robust soft value iteration).
    eval_beta : float
        ``beta`` of the criterion the regret is measured in.

    Returns
    -------
    array (R, num_episodes): per-episode regret.
    """
    if num_episodes < 1:
        raise ValueError(f"num_episodes must be positive, got {num_episodes}")
    P, r, H = mdp.kernel, mdp.reward, mdp.horizon
    R, S, A, _ = P.shape
    runs = np.arange(R)
    scale = np.broadcast_to(np.asarray(bonus_scale, float), (R,))[:, None, None]
    pi_ref = np.full((R, S, A), 1.0 / A)
    caps = [float(H - h) for h in range(H)]
    true_continuation = tabular_continuation(P, eval_beta)
    v_star = optimal_start_value(mdp, eval_beta, temperature)
    counts = np.zeros((R, S, A))
    transitions = np.zeros((R, S, A, S))
    kernel_cdf = np.cumsum(P, axis=-1)
    reward_sum = np.zeros((R, S, A))
    regret = np.empty((R, num_episodes))
    for k in range(num_episodes):
        n = np.maximum(counts, 1.0)
        P_hat = np.where(counts[..., None] > 0, transitions / n[..., None], 1.0 / S)
        iota = np.log(S * A * H * (k + 1) / CONFIDENCE)
        bonus = scale * H * np.sqrt(iota / n)
        pis, _ = dr_backward(tabular_continuation(P_hat, plan_beta), reward_sum / n, H, pi_ref, temperature,
                             bonus=bonus, caps=caps)
        _, v_pi = dr_backward(true_continuation, r, H, pi_ref, temperature, policies=pis)
        regret[:, k] = v_star - v_pi[0][:, 0]
        s, a, s_next = _rollout(P, pis, rng, kernel_cdf=kernel_cdf)
        every = np.broadcast_to(runs, s.shape)
        pair = ((every * S + s) * A + a).ravel()  # flat (run, s, a) index of every visit
        counts += np.bincount(pair, minlength=R * S * A).reshape(R, S, A)
        transitions += np.bincount(pair * S + s_next.ravel(), minlength=R * S * A * S).reshape(R, S, A, S)
        reward_sum += np.bincount(pair, weights=r[every, s, a].ravel(), minlength=R * S * A).reshape(R, S, A)
    return regret


def linear_regret(mdp: LinearMDP, num_episodes: int, bonus_scale, beta: float, temperature: float,
                  rng: np.random.Generator, ridge: float = 1.0) -> np.ndarray:
    r"""Optimistic least-squares doubly regularised value iteration on a d-rectangular linear MDP.

    For the factor expectations :math:`z_i = E_{\mu_i}[e^{-(V-m)/\beta}]` the learner ridge-regresses
    the targets :math:`e^{-(V(s')-m)/\beta}` on :math:`\phi(s,a)`:
    :math:`\hat z = \Lambda^{-1}\sum_t \phi_t\, e^{-(V(s'_t)-m)/\beta}`, clipped to the range of the
    targets, and plans with :math:`Q = r + \sum_i\phi_i(m-\beta\log\hat z_i) + b`, where
    :math:`b = c\,H\sqrt{d\,\iota_k}\,\|\phi\|_{\Lambda^{-1}}` and :math:`\iota_k = \log(dHk/\delta)`.
    The regression statistics are kept as a (d, S) matrix so a replan costs O(d S), not O(k).

    Returns
    -------
    array (R, num_episodes): per-episode regret under the d-rectangular criterion.
    """
    if num_episodes < 1:
        raise ValueError(f"num_episodes must be positive, got {num_episodes}")
    phi, mu, r, H = mdp.features, mdp.factors, mdp.reward, mdp.horizon
    R, S, A, d = phi.shape
    runs = np.arange(R)
    scale = np.broadcast_to(np.asarray(bonus_scale, float), (R,))[:, None, None]
    pi_ref = np.full((R, S, A), 1.0 / A)
    caps = [float(H - h) for h in range(H)]
    true_continuation = rectangular_continuation(phi, mu, beta)
    _, v_opt = dr_backward(true_continuation, r, H, pi_ref, temperature)
    v_star = v_opt[0][:, 0]
    gram = np.broadcast_to(ridge * np.eye(d), (R, d, d)).copy()
    targets = np.zeros((R, d, S))  # sum_t phi_t e_{s'_t}^T
    kernel = mdp.kernel
    kernel_cdf = np.cumsum(kernel, axis=-1)
    rows = phi.reshape(R, S * A, d)  # batched matrix products instead of einsum (hot loop)
    regret = np.empty((R, num_episodes))
    for k in range(num_episodes):
        gram_inv = np.linalg.inv(gram)
        width = np.sqrt(np.einsum("rni,rni->rn", np.matmul(rows, gram_inv), rows)).reshape(R, S, A)  # ||phi||_{Lambda^-1}
        bonus = scale * H * np.sqrt(d * np.log(d * H * (k + 1) / CONFIDENCE)) * width
        weights = np.matmul(gram_inv, targets)  # (R, d, S): z_hat = weights @ y

        def estimated(V, h):
            shift = V.min(axis=-1, keepdims=True)
            y = np.exp(-(V - shift) / beta)  # (R, S) in (0, 1]
            z = np.matmul(weights, y[:, :, None])[:, :, 0]
            z = np.clip(z, y.min(axis=-1, keepdims=True), 1.0)
            return np.matmul(rows, (shift - beta * np.log(z))[:, :, None]).reshape(R, S, A)

        pis, _ = dr_backward(estimated, r, H, pi_ref, temperature, bonus=bonus, caps=caps)
        _, v_pi = dr_backward(true_continuation, r, H, pi_ref, temperature, policies=pis)
        regret[:, k] = v_star - v_pi[0][:, 0]
        s, a, s_next = _rollout(kernel, pis, rng, kernel_cdf=kernel_cdf)
        for h in range(H):
            f = phi[runs, s[h], a[h]]  # (R, d)
            gram += f[:, :, None] * f[:, None, :]
            targets[runs, :, s_next[h]] += f
    return regret


__all__ = ["CONFIDENCE", "optimal_start_value", "uniform_regret", "tabular_regret", "linear_regret"]
