r"""The Bayesian densified reward (our reading of the abstract) and the baselines' rewards.

Beta–Bernoulli reward (:func:`bayes_reward`), for trajectory :math:`i` with standardised total
proxy gain :math:`z_i` and labelled pool :math:`j` (training trajectories only) with kernel weights
:math:`w_{ij} = \exp(-\lVert f_i - f_j\rVert^2 / 2h^2)` on (start, final) image features, :math:`h` the
median pairwise distance in the pool (:math:`w_{ii} = 1` for a labelled :math:`i`):

.. math::  \alpha_i = \kappa\,\sigma(z_i) + \textstyle\sum_j w_{ij} y_j,\qquad
           \beta_i = \kappa\,(1 - \sigma(z_i)) + \sum_j w_{ij} (1 - y_j),\qquad
           r_i = \mathbb E[p_i] = \frac{\alpha_i}{\alpha_i + \beta_i},\quad
           \operatorname{Var}[p_i] = \frac{\alpha_i\beta_i}{(\alpha_i+\beta_i)^2(\alpha_i+\beta_i+1)}.

An unlabelled trajectory with no labelled neighbour gets :math:`\sigma(z_i)`; as
:math:`\kappa \to 0` the reward is the kernel-weighted label frequency.
"""

from __future__ import annotations

import numpy as np
import torch

from compendium.rl.grpo import group_advantages, masked_group_advantages

__all__ = ["beta_posterior", "median_bandwidth", "kernel_pooled_counts", "standardise", "bayes_reward",
           "label_sum_reward", "advantage_redraw_variance"]


def beta_posterior(prior_mean, strength, successes, trials):
    """Posterior mean and variance of :math:`p` under the prior
    :math:`\\mathrm{Beta}(\\kappa m, \\kappa(1-m))` after ``successes`` in ``trials`` (fractional counts allowed).

    Plain arithmetic, so it takes floats, numpy arrays, torch tensors or sympy symbols.

    Parameters
    ----------
    prior_mean : values in (0, 1)
    strength : :math:`\\kappa \\ge 0`
    successes, trials : ``0 <= successes <= trials``; ``strength + trials > 0``

    Returns
    -------
    mean, var : of the broadcast shape
    """
    total = strength + trials
    if isinstance(total, (int, float, np.ndarray, torch.Tensor)) and bool(np.any(np.asarray(
            total.detach() if isinstance(total, torch.Tensor) else total) <= 0)):
        raise ValueError("beta_posterior needs strength + trials > 0")
    mean = (strength * prior_mean + successes) / total
    var = mean * (1 - mean) / (total + 1)
    return mean, var


def median_bandwidth(pool_features: torch.Tensor, pool_valid: torch.Tensor) -> torch.Tensor:
    """Median pairwise distance among the valid pool entries of each model.

    Parameters
    ----------
    pool_features : tensor, shape (M, P, D)
    pool_valid : bool tensor, shape (M, P)

    Returns
    -------
    tensor, shape (M,): the (lower) median off-diagonal distance, 1.0 where fewer than two entries are valid.
    """
    dist = torch.cdist(pool_features, pool_features)                          # (M, P, P)
    P = pool_features.shape[1]
    pair = pool_valid[:, :, None] & pool_valid[:, None, :] & ~torch.eye(P, dtype=torch.bool)
    dist = torch.where(pair, dist, torch.full_like(dist, float("nan")))
    h = torch.nanmedian(dist.reshape(len(dist), -1), dim=1).values
    return torch.where(torch.isfinite(h) & (h > 0), h, torch.ones_like(h))


def kernel_pooled_counts(features, pool_features, pool_labels, pool_valid, bandwidth):
    """Kernel-weighted success and trial counts from the labelled pool.

    Parameters
    ----------
    features : tensor, shape (M, N, D): the trajectories to score
    pool_features : tensor, shape (M, P, D); pool_labels : tensor (M, P) of 0/1; pool_valid : bool (M, P)
    bandwidth : tensor, shape (M,)

    Returns
    -------
    successes, trials : tensors, shape (M, N)
    """
    d2 = torch.cdist(features, pool_features) ** 2                            # (M, N, P)
    w = torch.exp(-d2 / (2 * bandwidth[:, None, None] ** 2)) * pool_valid[:, None, :]
    return (w * pool_labels[:, None, :]).sum(-1), w.sum(-1)


def standardise(x: torch.Tensor, dim: int = -1, eps: float = 1e-6) -> torch.Tensor:
    """``(x - mean) / (std + eps)`` along ``dim`` (population std)."""
    return (x - x.mean(dim, keepdim=True)) / (x.std(dim, keepdim=True, unbiased=False) + eps)


def bayes_reward(proxy, features, pool_features, pool_labels, pool_valid, *, strength: float,
                 bandwidth_scale: float = 1.0):
    """B-Spar's densified reward :math:`r_i = E[p_i]` and its posterior variance, shape (M, N) each.

    ``proxy`` (M, N) is the total proxy gain of each trajectory, standardised over the model's batch
    for the prior; ``bandwidth_scale`` multiplies the median bandwidth (the variance control
    shrinks it to switch pooling off).
    """
    h = median_bandwidth(pool_features, pool_valid) * bandwidth_scale
    succ, trials = kernel_pooled_counts(features, pool_features, pool_labels, pool_valid, h)
    prior = torch.sigmoid(standardise(proxy))
    return beta_posterior(prior, strength, succ, trials)


def label_sum_reward(proxy, labels, labelled):
    """B3's reward: standardised proxy plus :math:`\\pm 1` for a labelled success / failure."""
    return standardise(proxy) + labelled * (2 * labels - 1)


def advantage_redraw_variance(rewards_per_draw: torch.Tensor, valid_per_draw: torch.Tensor | None = None,
                              group_size: int = 8) -> torch.Tensor:
    """Mean over trajectories of the variance, across label re-draws, of each trajectory's GRPO advantage.

    Parameters
    ----------
    rewards_per_draw : tensor, shape (R, N): the reward of each of N trajectories under R re-draws
        of which trajectories are labelled (N a multiple of ``group_size``, grouped consecutively)
    valid_per_draw : bool tensor, shape (R, N), optional: rewards that exist (dropped otherwise:
        advantage 0, as in B2)

    Returns
    -------
    scalar tensor
    """
    R, N = rewards_per_draw.shape
    r = rewards_per_draw.reshape(R, N // group_size, group_size)
    if valid_per_draw is None:
        adv = group_advantages(r)
    else:
        adv = masked_group_advantages(r, valid_per_draw.reshape(r.shape))
    return adv.reshape(R, N).var(0, unbiased=True).mean()
