"""The ledger's theory checks of EnerGS (Claim 2 on a voxel grid, the clipped relax count, Prop. 1
on a smooth field, the renderer against its reference), on a room scene that has deep FREE."""
from __future__ import annotations

import math

import numpy as np
import torch

from . import (EnergyParams, distance_fields, energy_grad_at, field_lookup, region_grid_from_rays,
               relax_step, render_flatland)

ROOM_SEGMENTS = np.array([[1, 1, 15, 1], [15, 1, 15, 15], [15, 15, 1, 15], [1, 15, 1, 1], [10, 6, 10, 10]], float)
ROOM_EXTENT = (0.0, 16.0, 0.0, 16.0)


def room_labels():
    """A closed room with a wall inside, seen by one 360-degree LiDAR: a scene with deep FREE
    (the chapter's street scene has max d_trust 0.75 m in FREE, below s0 = 1.6 m)."""
    return region_grid_from_rays([[5, 8]], ROOM_SEGMENTS, ROOM_EXTENT, voxel=0.25, n_rays=720)


def claim2_check(labels, p: EnergyParams = EnergyParams(), tol=0.05):
    """Fraction of deep-FREE unit-gradient voxels with <grad E, grad d_trust> >= lam m0 - B - tol,
    the count of such voxels, the void (zero-gradient) fraction, and the margin."""
    from . import deep_free_constants, energy_grad_terms
    f = distance_fields(labels)
    s0, m0, B, margin = deep_free_constants(delta=p.delta, tau=p.tau, lam=p.lam,
                                            w=(p.w_occ, p.w_unk), sigma=(p.sigma_occ, p.sigma_unk))
    g = energy_grad_terms(f["d_occ"], f["d_unk"], f["d_trust"], f["free"], f["g_d_occ"], f["g_d_unk"], f["g_d_trust"], p)
    deep = f["free"] & (f["d_trust"] >= s0)
    unit = np.abs(np.linalg.norm(f["g_d_trust"], axis=-1) - 1) < 1e-9
    proj = (g * f["g_d_trust"]).sum(-1)
    ok = deep & unit
    # the criterion is that of the default barrier (margin of lam = 2), whatever p.lam is
    margin_default = deep_free_constants()[3]
    frac = float((proj[ok] >= margin_default - tol).mean()) if ok.any() else float("nan")
    return {"fraction": frac, "voxels": int(ok.sum()), "void_fraction": float((deep & ~unit).sum() / max(deep.sum(), 1)),
            "margin": margin_default}


def relax_trace(labels, n_points=400, lr=1e3, seed=0, p: EnergyParams = EnergyParams()):
    """Clipped relax (0.5 voxel) of uniform points in the room: deep-FREE counts and mean energy per step,
    run for ceil(max d_trust / 0.5 voxel) + 5 steps; also the number of steps where E rose."""
    from . import deep_free_constants, energy_terms
    vox = 0.25
    f = distance_fields(labels)
    s0 = deep_free_constants()[0]
    x = np.random.default_rng(seed).uniform(1.2, 14.8, (n_points, 2))
    steps = int(np.ceil(f["d_trust"][f["free"]].max() / (0.5 * vox))) + 5
    counts, energy = [], []
    for k in range(steps + 1):
        v = field_lookup(x, f, ROOM_EXTENT, vox)
        counts.append(int((v["free"] & (v["d_trust"] >= s0)).sum()))
        energy.append(float(energy_terms(v["d_occ"], v["d_unk"], v["d_trust"], v["free"], p).mean()))
        if k < steps:
            x = relax_step(x, energy_grad_at(x, f, ROOM_EXTENT, vox, p), lr, 0.5 * vox)
    return {"counts": counts, "energy": energy, "steps": steps,
            "non_increasing": all(b <= a for a, b in zip(counts, counts[1:])),
            "energy_rises": int(sum(b > a + 1e-12 for a, b in zip(energy, energy[1:])))}


def prop1_smooth(eta_factor=1.0, clouds=50, steps=60, seed=1, p: EnergyParams = EnergyParams()):
    """Largest per-point E_{k+1} - E_k of gradient steps eta = eta_factor / L on the smooth field
    E(x) = h(3 - |x|) (OCC circle of radius 3, FREE indicator smoothed to 1), L a numeric bound on
    the Hessian (max of |h''| and |h'|/r_min, x1.05)."""
    from . import energy_grad_terms, energy_terms
    h = lambda d: energy_terms(d, np.full_like(d, 1e3), d, np.ones_like(d), p)
    dd = np.linspace(-4, 2.8, 200001)
    hp = np.gradient(h(dd), dd)
    hpp = np.gradient(hp, dd)
    r_min = 0.2
    L = 1.05 * max(np.abs(hpp).max(), np.abs(hp).max() / r_min)
    eta = eta_factor / L
    rng = np.random.default_rng(seed)
    worst = -np.inf
    for _ in range(clouds):
        r, th = rng.uniform(r_min, 2.8, 30), rng.uniform(0, 2 * np.pi, 30)
        x = np.stack([r * np.cos(th), r * np.sin(th)], -1)
        E = h(3 - np.linalg.norm(x, axis=-1))
        for _ in range(steps):
            n = np.linalg.norm(x, axis=-1)
            d = 3 - n
            g = energy_grad_terms(d, np.full_like(d, 1e3), d, np.ones_like(d), -x / n[:, None],
                                  np.zeros_like(x), -x / n[:, None], p)
            x = x - eta * g
            E_new = h(3 - np.linalg.norm(x, axis=-1))
            worst = max(worst, float((E_new - E).max()))
            E = E_new
    return {"worst_rise": worst, "L": float(L), "eta": float(eta)}


def renderer_checks(seed=1):
    """Max |fast - reference| of the renderer (25 Gaussians, 32 px) and gradcheck's verdict (4 Gaussians)."""
    from . import render_flatland_reference
    g = torch.Generator().manual_seed(seed)
    dt = torch.float64

    def gauss(n):
        return (torch.rand(n, 2, generator=g, dtype=dt) * 4 + torch.tensor([1.0, -2.0], dtype=dt),
                torch.rand(n, 2, generator=g, dtype=dt) * 1.5 - 2.5, torch.rand(n, generator=g, dtype=dt) * math.pi,
                torch.rand(n, 3, generator=g, dtype=dt), torch.randn(n, generator=g, dtype=dt))
    a = gauss(25)
    fast = render_flatland(*a, cam_pos=(0.0, 0.0), cam_angle=0.1, n_px=32, background=0.2)
    ref = render_flatland_reference(*a, cam_pos=(0.0, 0.0), cam_angle=0.1, n_px=32, background=0.2)
    b = [t.requires_grad_(True) for t in gauss(4)]
    ok = torch.autograd.gradcheck(lambda *z: render_flatland(*z, cam_pos=(0.0, 0.0), cam_angle=0.0, n_px=8),
                                  tuple(b), eps=1e-6, atol=1e-5, raise_exception=False)
    return {"max_abs_diff": float(np.abs(fast.numpy() - ref).max()), "gradcheck": bool(ok)}
