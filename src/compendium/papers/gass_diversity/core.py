"""The GASS pieces shared by both settings: the decomposition, the targets, Adam on x̂_0, metrics."""

from __future__ import annotations

import numpy as np
import torch


# ----------------------------------------------------------------------------------------------
# GASS pieces
# ----------------------------------------------------------------------------------------------
def decompose_on_axis(E: np.ndarray, e_t: np.ndarray):
    """a_i = <e_i, e_t>, r_i = e_i - a_i e_t (r_i ⟂ e_t)."""
    a = E @ e_t
    return a, E - a[:, None] * e_t[None]


def orthogonal_candidates(e_t: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """n random unit vectors orthogonal to e_t and to each other (QR of [e_t, random])."""
    m = np.concatenate([e_t[:, None], rng.standard_normal((e_t.size, n))], axis=1)
    q, _ = np.linalg.qr(m)
    return q[:, 1:n + 1].T.copy()


def select_u_ind(R: np.ndarray, candidates: np.ndarray) -> np.ndarray:
    """The candidate with the largest mean |<r_i, b>| (best of the random directions, not PCA)."""
    return candidates[int(np.argmax(np.abs(R @ candidates.T).mean(axis=0)))]


def build_e_target(E, e_t, w1, w2, r1, r2, rng, u_ind=None, num_candidates: int = 10):
    """GASS targets on the sphere; returns (targets, u_ind). w1 = w2 = 0 returns E exactly."""
    a, R = decompose_on_axis(E, e_t)
    if u_ind is None:
        u_ind = select_u_ind(R, orthogonal_candidates(e_t, num_candidates, rng))
    n = len(E)
    u1, u2 = rng.uniform(-r1, r1, n), rng.uniform(-r2, r2, n)
    if w1 == 0 and w2 == 0:
        return E.copy(), u_ind
    a2 = np.clip(a + w1 * u1, -1.0, 1.0)
    t = a2[:, None] * e_t[None] + R + (w2 * u2)[:, None] * u_ind[None]
    return t / np.linalg.norm(t, axis=1, keepdims=True), u_ind


def adam_ascent(x0, score_fn, lr=8e-3, max_steps=60, tol=5e-5, patience=4):
    """Adam on a copy of ``x0`` raising ``score_fn(x)`` (a scalar tensor): at most ``max_steps``
    steps, stopping after ``patience`` steps in a row that gain less than ``tol`` over the best
    score so far (the released script's rule). Returns (x', steps taken)."""
    x = x0.detach().clone().requires_grad_(True)
    opt = torch.optim.Adam([x], lr=lr)
    best, stall, steps = -np.inf, 0, 0
    for _ in range(max_steps):
        score = score_fn(x)
        opt.zero_grad()
        (-score).backward()
        opt.step()
        steps += 1
        s = float(score.detach())
        if s - best < tol:
            stall += 1
            if stall >= patience:
                break
        else:
            stall = 0
        best = max(best, s)
    return x.detach(), steps


def optimise_x0_to_target(x0, target, encoder, lr=8e-3, max_steps=60, tol=5e-5, patience=4):
    """Adam on x̂_0 maximising mean cos(φ(x̂_0), target); returns (x̂_0', steps taken)."""
    tgt = torch.as_tensor(target, dtype=x0.dtype)
    return adam_ascent(x0, lambda x: (encoder(x) * tgt).sum(-1).mean(), lr, max_steps, tol, patience)


def rf_velocity_from_x0(x_t, x0, sigma):
    """v' = (x_σ - x̂_0') / σ (the rectified-flow velocity that predicts x̂_0')."""
    return (x_t - x0) / sigma


# ----------------------------------------------------------------------------------------------
# metrics
# ----------------------------------------------------------------------------------------------
def vendi_score(E: np.ndarray) -> float:
    """exp(entropy of the eigenvalues of K/n), K the cosine kernel."""
    En = E / np.linalg.norm(E, axis=1, keepdims=True)
    lam = np.linalg.eigvalsh(En @ En.T / len(En))
    lam = lam[lam > 1e-12]
    return float(np.exp(-(lam * np.log(lam)).sum()))


def projection_spread(E: np.ndarray, axis: np.ndarray) -> float:
    return float(np.std(E @ axis, ddof=1))


def density_coverage(real: np.ndarray, fake: np.ndarray, k: int = 5):
    """Density and coverage of Naeem et al. (2020) with k-NN balls around the real points."""
    drr = np.linalg.norm(real[:, None] - real[None], axis=-1)
    radius = np.sort(drr, axis=1)[:, k]  # k-th neighbour (index 0 is the point itself)
    drf = np.linalg.norm(real[:, None] - fake[None], axis=-1)  # (n_real, n_fake)
    inside = drf <= radius[:, None]
    density = float(inside.sum() / (k * fake.shape[0]))
    coverage = float((drf.min(axis=1) <= radius).mean())
    return density, coverage




def vendi2_loss(E: torch.Tensor, groups: int) -> torch.Tensor:
    """Mean over ``groups`` equal consecutive batches of log ||K||_F^2 (K the cosine kernel).

    The order-2 Vendi score of a batch of n unit embeddings is n^2 / ||K||_F^2, so minimising this
    loss raises it: a smooth pairwise repulsion (sum of squared cosines) with no eigen-decomposition.
    """
    E = E.reshape(groups, -1, E.shape[-1])
    K = E @ E.transpose(1, 2)
    return torch.log((K ** 2).sum(dim=(1, 2))).mean()


def optimise_x0_repulsion(x0, encoder, groups: int, lr=8e-3, max_steps=60, tol=5e-5, patience=4):
    """Adam on x̂_0 raising each batch's order-2 Vendi score (the repulsion baseline; same stopping rule)."""
    return adam_ascent(x0, lambda x: -vendi2_loss(encoder(x), groups), lr, max_steps, tol, patience)


def top_pc(R: np.ndarray) -> np.ndarray:
    """The first principal direction of the rows of R (centred)."""
    _, _, vt = np.linalg.svd(R - R.mean(0), full_matrices=False)
    return vt[0]
