r"""EnerGS in flatland: partial LiDAR as a soft energy field for 2D Gaussian splatting.

Paper card
----------
ICML 2026, seed file ``000_f69ae4f9f6fb29da.txt``, abstract 15 (EnerGS, code ucla-mobility/EnerGS).
The paper text was **not read**: every formula here is the one the research card reports from the
authors' code (``energs/geometric_energy.py``, "Paper Eq. 13-27"), and the toy scene is the card's.

What is ours and why
--------------------
The flatland renderer (2D anisotropic Gaussians seen by 1D pinhole cameras, front-to-back alpha
compositing) is ours, in vectorised torch: no CPU rasterizer library serves a 2D scene, and the
CUDA 3DGS rasterizer is out of scope. ``render_flatland_reference`` is a slow per-pixel,
per-Gaussian loop that the vectorised renderer is tested against.

Equations implemented (card section 2)
--------------------------------------
E_occ = -w_occ exp(-d_occ^2 / 2 s_occ^2) 1[d_occ <= r_occ_max],
E_unk = -w_unk exp(-d_unk^2 / 2 s_unk^2) 1[d_occ <= band_occ_max],
E_free = softplus((d_trust - delta) / tau) 1[x in FREE],  E = E_occ + E_unk + lam E_free;
grad E_occ = (w / s^2) d exp(-d^2 / 2 s^2) grad d, grad E_free = sigmoid((d_trust - delta)/tau)/tau grad d_trust.
Relax step: mu <- mu - eta grad E, clipped to ||dmu|| <= 0.5 voxel.
Claim 2 constants: s0 = delta + tau log((1-eps)/eps), m0 = (1-eps)/tau,
B_j = (w_j / s_j^2) sbar exp(-sbar^2 / 2 s_j^2), sbar = max(s0, s_j).

Small-scale deviations
----------------------
A 2D street slice with 1D cameras instead of 3D driving scenes; L1 photometric loss only (no
D-SSIM, no depth); the photometric gate and coverage modulation off; relax and pruning schedules
rescaled to short runs; pruning of FREE Gaussians with d_trust >= delta; the hard prior's chamfer
weight tuned on a dev split, EnerGS untuned (details in ``experiment``).

On the voxel grid, Claim 2 holds on every deep-FREE voxel whose central-difference grad d_trust is a
unit vector; it is void (not violated) on the few medial-axis voxels where that difference
vanishes (tested).

The scene, the six training arms, the hard prior's dev-split tuning, the metrics, ``Config`` /
``run`` and the asset builder live in ``compendium.papers.energs.experiment``; the ledger's theory
checks in ``.theory``; the headline rows' criteria, the training-seed sweep and the cross-scale
comparison in ``.criteria``. The chapter is ``notebooks/vision/energs.md``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

OCC, FREE, UNK = 0, 1, 2


@dataclass(frozen=True)
class EnergyParams:
    w_occ: float = 1.0
    sigma_occ: float = 1.0
    r_occ_max: float = 3.0
    w_unk: float = 0.25
    sigma_unk: float = 2.0
    band_occ_max: float = 8.0
    lam: float = 2.0
    delta: float = 0.5
    tau: float = 0.5


def deep_free_constants(delta=0.5, tau=0.5, eps=0.1, w=(1.0, 0.25), sigma=(1.0, 2.0), lam=2.0):
    """Claim 2 constants (s0, m0, B, margin = lam*m0 - B) in closed form."""
    s0 = delta + tau * math.log((1 - eps) / eps)
    m0 = (1 - eps) / tau
    B = 0.0
    for wj, sj in zip(w, sigma):
        sbar = max(s0, sj)
        B += wj / sj**2 * sbar * math.exp(-sbar**2 / (2 * sj**2))
    return s0, m0, B, lam * m0 - B


def region_grid_from_rays(sensors, segments, extent, voxel=0.25, max_range=30.0, n_rays=720, angles=None):
    """Label a 2D grid OCC/FREE/UNK by marching LiDAR rays from ``sensors`` to line ``segments``.

    ``segments``: (S, 4) array of x0, y0, x1, y1; ``extent``: (xmin, xmax, ymin, ymax).
    Cells a ray passes before its hit are FREE, the hit cell is OCC, the rest UNK. ``angles``
    (radians) overrides the ``n_rays`` uniform beams (a limited field of view)."""
    xmin, xmax, ymin, ymax = extent
    nx, ny = int(round((xmax - xmin) / voxel)), int(round((ymax - ymin) / voxel))
    labels = np.full((nx, ny), UNK, dtype=np.int8)
    seg = np.asarray(segments, float)
    p, q = seg[:, :2], seg[:, 2:] - seg[:, :2]
    ang = np.linspace(0, 2 * np.pi, n_rays, endpoint=False) if angles is None else np.asarray(angles, float)
    n_rays = len(ang)
    for s in np.asarray(sensors, float):
        r = np.stack([np.cos(ang), np.sin(ang)], 1)  # (R, 2)
        # ray s + t r hits segment p + u q: solve [r, -q] [t, u] = p - s
        den = r[:, None, 0] * (-q[None, :, 1]) - r[:, None, 1] * (-q[None, :, 0])
        d = p[None] - s
        with np.errstate(divide="ignore", invalid="ignore"):
            t = (d[..., 0] * (-q[None, :, 1]) - d[..., 1] * (-q[None, :, 0])) / den
            u = (r[:, None, 0] * d[..., 1] - r[:, None, 1] * d[..., 0]) / den
        ok = (np.abs(den) > 1e-12) & (t > 0) & (u >= 0) & (u <= 1)
        t = np.where(ok, t, np.inf).min(1)
        free_marks, occ_marks = [], []
        for k in range(n_rays):
            if not np.isfinite(t[k]) or t[k] > max_range:
                continue
            ts = np.arange(0, t[k] - voxel * 0.5, voxel * 0.5)
            free_marks.append(s + ts[:, None] * r[k])
            occ_marks.append(s + t[k] * r[k])
        for pts, lab in ((free_marks, FREE), (occ_marks, OCC)):
            if not pts:
                continue
            pts = np.vstack([np.atleast_2d(a) for a in pts])
            ix = np.floor((pts[:, 0] - xmin) / voxel).astype(int)
            iy = np.floor((pts[:, 1] - ymin) / voxel).astype(int)
            m = (ix >= 0) & (ix < nx) & (iy >= 0) & (iy < ny)
            if lab == FREE:
                sel = labels[ix[m], iy[m]] != OCC
                labels[ix[m][sel], iy[m][sel]] = FREE
            else:
                labels[ix[m], iy[m]] = OCC
    return labels


def distance_fields(labels, voxel=0.25):
    """d_occ, d_unk, d_trust (metres) by Euclidean distance transform, with unit central-difference
    gradients (zero where the difference vanishes)."""
    from scipy.ndimage import distance_transform_edt

    def edt(mask):
        if not mask.any():
            return np.full(labels.shape, 1e6)
        return distance_transform_edt(~mask) * voxel

    fields = {"d_occ": edt(labels == OCC), "d_unk": edt(labels == UNK),
              "d_trust": edt((labels == OCC) | (labels == UNK))}
    for k in list(fields):
        gx, gy = np.gradient(fields[k], voxel)
        n = np.hypot(gx, gy)
        n = np.where(n > 1e-12, n, 1.0)
        fields["g_" + k] = np.stack([gx / n, gy / n], -1)
    fields["free"] = labels == FREE
    return fields


def energy_terms(d_occ, d_unk, d_trust, in_free, p: EnergyParams = EnergyParams()):
    """Energy from distance values (torch or numpy broadcastable arrays)."""
    xp = torch if isinstance(d_occ, torch.Tensor) else np
    e_occ = -p.w_occ * xp.exp(-d_occ**2 / (2 * p.sigma_occ**2)) * (d_occ <= p.r_occ_max)
    e_unk = -p.w_unk * xp.exp(-d_unk**2 / (2 * p.sigma_unk**2)) * (d_occ <= p.band_occ_max)
    z = (d_trust - p.delta) / p.tau
    sp = xp.logaddexp(0 * z, z) if xp is np else torch.nn.functional.softplus(z)
    e_free = sp * in_free
    return e_occ + e_unk + p.lam * e_free


def energy_grad_terms(d_occ, d_unk, d_trust, in_free, g_occ, g_unk, g_trust, p=EnergyParams()):
    """Analytic gradient (..., 2) given the distance values and their gradients (..., 2)."""
    a = p.w_occ / p.sigma_occ**2 * d_occ * np.exp(-d_occ**2 / (2 * p.sigma_occ**2)) * (d_occ <= p.r_occ_max)
    b = p.w_unk / p.sigma_unk**2 * d_unk * np.exp(-d_unk**2 / (2 * p.sigma_unk**2)) * (d_occ <= p.band_occ_max)
    c = p.lam / p.tau / (1 + np.exp(-(d_trust - p.delta) / p.tau)) * in_free
    return a[..., None] * g_occ + b[..., None] * g_unk + c[..., None] * g_trust


def relax_step(mu, grad, lr, max_step, gate=None):
    """mu - lr * gate * grad, each step clipped to norm <= max_step (torch or numpy)."""
    step = lr * grad * (1.0 if gate is None else gate[..., None])
    xp = torch if isinstance(step, torch.Tensor) else np
    n = xp.sqrt((step**2).sum(-1, keepdims=True) if xp is np else (step**2).sum(-1, keepdim=True))
    scale = xp.minimum(xp.ones_like(n), max_step / xp.maximum(n, xp.full_like(n, 1e-12)))
    return mu - step * scale


# ----------------------------------------------------------------------------- renderer
def _cov(log_scale, angle):
    c, s = torch.cos(angle), torch.sin(angle)
    R = torch.stack([torch.stack([c, -s], -1), torch.stack([s, c], -1)], -2)  # (N,2,2)
    S2 = torch.diag_embed(torch.exp(2 * log_scale))
    return R @ S2 @ R.transpose(-1, -2)


def render_flatland(mu, log_scale, angle, color, opacity_logit, cam_pos, cam_angle,
                    n_px=64, fov=math.radians(60), near=0.1, background=0.0):
    """Vectorised 1D image (n_px, C) of 2D Gaussians from a pinhole camera.

    EWA-style: each Gaussian is projected to a 1D Gaussian on the image line (u = f x_c / z_c,
    variance J Sigma J^T), alpha = sigmoid(opacity) exp(-(p-u)^2 / 2 var), composited front to
    back by depth. Gaussians behind ``near`` are dropped."""
    f = (n_px / 2) / math.tan(fov / 2)
    ca, sa = math.cos(cam_angle), math.sin(cam_angle)
    fwd = torch.tensor([ca, sa], dtype=mu.dtype)
    right = torch.tensor([sa, -ca], dtype=mu.dtype)
    rel = mu - torch.as_tensor(cam_pos, dtype=mu.dtype)
    z = rel @ fwd
    x = rel @ right
    keep = z > near
    zc = torch.where(keep, z, torch.ones_like(z))
    u = f * x / zc + n_px / 2
    # d u / d rel = f (right / z - x fwd / z^2)
    J = f * (right[None] / zc[:, None] - (x / zc**2)[:, None] * fwd[None])
    Sig = _cov(log_scale, angle)
    var = torch.einsum("ni,nij,nj->n", J, Sig, J) + 0.3  # low-pass filter, as in 3DGS
    px = torch.arange(n_px, dtype=mu.dtype) + 0.5
    order = torch.argsort(z.detach())
    u, var, keep = u[order], var[order], keep[order]
    op = torch.sigmoid(opacity_logit[order]) * keep
    alpha = (op[None] * torch.exp(-0.5 * (px[:, None] - u[None]) ** 2 / var[None])).clamp(max=0.99)
    T = torch.cumprod(torch.cat([torch.ones_like(alpha[:, :1]), 1 - alpha[:, :-1]], 1), 1)
    w = T * alpha  # (P, N)
    img = w @ color[order]
    T_end = T[:, -1] * (1 - alpha[:, -1])
    return img + T_end[:, None] * background


def render_flatland_reference(mu, log_scale, angle, color, opacity_logit, cam_pos, cam_angle,
                              n_px=64, fov=math.radians(60), near=0.1, background=0.0):
    """Slow reference: explicit loops over pixels and depth-sorted Gaussians."""
    f = (n_px / 2) / math.tan(fov / 2)
    ca, sa = math.cos(cam_angle), math.sin(cam_angle)
    fwd, right = (ca, sa), (sa, -ca)
    N = mu.shape[0]
    recs = []
    for i in range(N):
        rx, ry = float(mu[i, 0]) - cam_pos[0], float(mu[i, 1]) - cam_pos[1]
        z = rx * fwd[0] + ry * fwd[1]
        if z <= near:
            continue
        x = rx * right[0] + ry * right[1]
        u = f * x / z + n_px / 2
        J = [f * (right[k] / z - x * fwd[k] / z**2) for k in range(2)]
        c, s = math.cos(float(angle[i])), math.sin(float(angle[i]))
        s1, s2 = math.exp(2 * float(log_scale[i, 0])), math.exp(2 * float(log_scale[i, 1]))
        S = [[c * c * s1 + s * s * s2, c * s * (s1 - s2)], [c * s * (s1 - s2), s * s * s1 + c * c * s2]]
        var = sum(J[a] * S[a][b] * J[b] for a in range(2) for b in range(2)) + 0.3
        op = 1 / (1 + math.exp(-float(opacity_logit[i])))
        recs.append((z, u, var, op, [float(v) for v in color[i]]))
    recs.sort(key=lambda r: r[0])
    C = color.shape[1]
    out = np.zeros((n_px, C))
    for p in range(n_px):
        T, acc = 1.0, np.zeros(C)
        for z, u, var, op, col in recs:
            a = min(op * math.exp(-0.5 * (p + 0.5 - u) ** 2 / var), 0.99)
            acc += T * a * np.asarray(col)
            T *= 1 - a
        out[p] = acc + T * background
    return out


def field_lookup(x, fields, extent, voxel=0.25):
    """Nearest-voxel values of the fields at points ``x`` (N, 2); points off the grid clip to it."""
    xmin, _, ymin, _ = extent
    nx, ny = fields["d_occ"].shape
    ix = np.clip(np.floor((x[:, 0] - xmin) / voxel).astype(int), 0, nx - 1)
    iy = np.clip(np.floor((x[:, 1] - ymin) / voxel).astype(int), 0, ny - 1)
    return {k: v[ix, iy] for k, v in fields.items()}


def energy_grad_at(x, fields, extent, voxel=0.25, p: EnergyParams = EnergyParams()):
    """Analytic grad E at points ``x`` from nearest-voxel field values."""
    f = field_lookup(x, fields, extent, voxel)
    return energy_grad_terms(f["d_occ"], f["d_unk"], f["d_trust"], f["free"], f["g_d_occ"],
                             f["g_d_unk"], f["g_d_trust"], p)


# Config / run / the asset live in .experiment, which imports the pieces above (hence at the end)
from .experiment import Config, Result, build_asset, load_asset, run  # noqa: E402,F401
