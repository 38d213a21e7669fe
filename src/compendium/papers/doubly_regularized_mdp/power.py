r"""Power analysis behind the chapter's sample sizes (``num_seeds``, ``robust_seeds``).

The first version of the chapter used 5 regret seeds and 10 robustness MDPs, and two verdicts
changed with the chapter seed. This module measures, on a large pool of independent instances
drawn from a seed stream that no chapter run uses, how far each seeded statistic sits from its
threshold and how much it moves from one draw of ``n`` instances to the next. With the one-instance
spread :math:`\sigma_1` (jackknife) and the distance :math:`m` of the pool value to the threshold,
the normal approximation gives the chance that a chapter run with ``n`` instances lands on the other
side: :math:`\Phi(-m\sqrt n/\sigma_1)`. The chapter takes, for each experiment, a sample size where
this chance is at most 0.5 % for every check. It is a run of about two minutes on two cores, so the
notebook does not call it; ``python -m compendium.papers.doubly_regularized_mdp.power`` prints it.
"""

from __future__ import annotations

import numpy as np
import scipy.stats

from ...runtime import make_rng
from ...stats import jackknife_se
from .agents import linear_regret, tabular_regret
from .environments import combination_lock, linear_mdp, random_mdp
from .evaluation import mean_curve_slope
from .experiments import planned_policy, worst_case_returns

POOL_SEED = 1000  # seed stream of the pools; chapter runs use their own seed


def flip_probability(margin: float, sigma1: float, n: int) -> float:
    """Normal approximation of the chance that a mean over ``n`` draws lands across the threshold."""
    return float(scipy.stats.norm.cdf(-abs(margin) * np.sqrt(n) / sigma1))


def _regret_pools(config, pool: int, instances) -> dict:
    """Per-episode regret (pool, K) of the optimistic learner per instance (and of the non-robust one)."""
    c, K, out = config, config.num_episodes, {}
    if "random" in instances:
        rand = random_mdp(pool, c.num_states, c.num_actions, c.horizon, make_rng(POOL_SEED, 4))
        both = type(rand)(kernel=np.concatenate([rand.kernel] * 2), reward=np.concatenate([rand.reward] * 2),
                          horizon=rand.horizon)
        runs = tabular_regret(both, K, bonus_scale=c.bonus_scale, plan_beta=np.repeat([c.beta, np.inf], pool),
                              eval_beta=c.beta, temperature=c.temperature, rng=make_rng(POOL_SEED, 5))
        out["random"], out["random non-robust"] = runs[:pool], runs[pool:]
    if "lock" in instances:
        lock = combination_lock(pool, c.lock_length, make_rng(POOL_SEED, 6))
        out["lock"] = tabular_regret(lock, K, bonus_scale=c.bonus_scale, plan_beta=c.beta, eval_beta=c.beta,
                                     temperature=c.lock_temperature, rng=make_rng(POOL_SEED, 7))
    if "linear" in instances:
        lin = linear_mdp(pool, c.linear_states, c.linear_actions, c.linear_features, c.horizon,
                         make_rng(POOL_SEED, 8))
        out["linear"] = linear_regret(lin, K, bonus_scale=c.bonus_scale, beta=c.beta, temperature=c.temperature,
                                      rng=make_rng(POOL_SEED, 9))
    return out


def power_analysis(config, regret_pool: int = 200, robust_pool: int = 1000, sizes=(5, 10, 20, 50, 100),
                   instances=("random", "lock", "linear")) -> dict:
    """Pool values, one-draw spreads and flip probabilities of the seeded checks.

    Returns ``{check: dict(value, threshold, sigma1, flip={n: probability})}`` for the slopes of the
    optimistic learner (band edge nearest to the pool value), the non-robust control (mean paired
    excess in the last quarter) and the robustness gain at ``config.perturbation`` (whose check is
    the lower end of a 95 % t-interval, so its flip chance uses :math:`t_{0.975}` as an offset).
    """
    K = config.num_episodes
    checkpoints = np.array([K // 2**j for j in reversed(range(5))])
    pools = _regret_pools(config, regret_pool, instances)
    out = {}
    for name in instances:
        runs = pools[name]
        value = mean_curve_slope(checkpoints, runs)
        edge = 0.3 if abs(value - 0.3) < abs(value - 0.75) else 0.75
        sigma1 = jackknife_se(runs, lambda x: mean_curve_slope(checkpoints, x)) * np.sqrt(len(runs))
        out[f"regret-slope-{name}"] = dict(value=value, threshold=edge, sigma1=sigma1,
                                           flip={n: flip_probability(value - edge, sigma1, n) for n in sizes})
    if "random" in instances:
        tail = slice(3 * K // 4, K)
        excess = pools["random non-robust"][:, tail].mean(1) - pools["random"][:, tail].mean(1)
        sigma1 = float(excess.std(ddof=1))
        out["nonrobust-control"] = dict(value=float(excess.mean()), threshold=0.0, sigma1=sigma1,
                                        flip={n: flip_probability(excess.mean(), sigma1, n) for n in sizes})
    mdp = random_mdp(robust_pool, config.num_states, config.num_actions, config.horizon, make_rng(POOL_SEED, 10))
    radii = (float(config.perturbation),)
    gain = (worst_case_returns(mdp, planned_policy(mdp, config.temperature, beta=config.beta), radii,
                               config.temperature)
            - worst_case_returns(mdp, planned_policy(mdp, config.temperature, beta=np.inf), radii,
                                 config.temperature))[0]
    sigma1 = float(gain.std(ddof=1))
    flip = {n: float(scipy.stats.norm.cdf(scipy.stats.t.ppf(0.975, n - 1) - gain.mean() * np.sqrt(n) / sigma1))
            for n in sizes}
    out["robust-worst-case"] = dict(value=float(gain.mean()), threshold=0.0, sigma1=sigma1, flip=flip)
    return out


if __name__ == "__main__":  # pragma: no cover - a two-minute run, see the module docstring
    import sys

    from . import Config

    episodes = int(sys.argv[1]) if len(sys.argv) > 1 else Config().num_episodes
    chosen = tuple(sys.argv[2].split(",")) if len(sys.argv) > 2 else ("random", "lock", "linear")
    for check, row in power_analysis(Config(num_episodes=episodes), instances=chosen).items():
        flips = "  ".join(f"n={n}: {p:.4f}" for n, p in row["flip"].items())
        print(f"{check:22s} value {row['value']:.4g}  threshold {row['threshold']:g}  sigma1 {row['sigma1']:.3g}  "
              f"flip {flips}")
