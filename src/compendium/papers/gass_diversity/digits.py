"""GASS on the digits setting: a diffusers UNet sampled by DDIM, the tiny CLIP's image tower as φ."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from ..prototype_tta import data as digit_data
from ..prototype_tta import model as clip_model
from .core import (build_e_target, decompose_on_axis, density_coverage, optimise_x0_repulsion,
                   optimise_x0_to_target, orthogonal_candidates, projection_spread, select_u_ind,
                   top_pc, vendi_score)
from .generator import NULL_LABEL, make_scheduler, to_model_space


def make_sampler(spacing: str = "trailing"):
    """The sampling scheduler: the training schedule's ``DDIMScheduler`` with x̂_0 clipped to [-1, 1]
    (pixel-space practice; without it CFG overshoots) and trailing timesteps (the first step at t = 999)."""
    from diffusers import DDIMScheduler

    return DDIMScheduler.from_config(make_scheduler().config, clip_sample=True, timestep_spacing=spacing)


class DigitPhi(nn.Module):
    """φ: a generated digit (B, 1, 8, 8) in [-1, 1] -> the tiny CLIP's unit image embedding.

    The digit is mapped to [0, 1] and right-aligned on the encoder's 8x24 canvas (as
    ``single_digit_canvases`` does), differentiably, so that Adam on x̂_0 can use its gradient.
    """

    def __init__(self, clip):
        super().__init__()
        self.image = clip.image
        for p in self.image.parameters():
            p.requires_grad_(False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.image(F.pad((x + 1) / 2, (2 * digit_data.SLOT, 0)))


@dataclass(frozen=True)
class DigitArm:
    """One sampling arm. ``hook``: 'none', 'gass' (targets; u_ind 'fixed' or 'pca') or 'repel'."""

    name: str
    cfg: float
    hook: str = "none"
    w1: float = 0.0
    w2: float = 0.0
    r: float = 0.02
    u_mode: str = "fixed"
    lr: float = 8e-3
    guided: int | None = None  # guided steps of this arm; None: the run's ``guided_steps``


def ddim_sample(unet, phi, labels, noise, arm: DigitArm, e_t, u_axes, group_size: int, steps: int,
                guided_steps: int, hook_seed: int):
    """CFG DDIM (eta = 0, diffusers' ``DDIMScheduler``) with the GASS hook at the first ``guided_steps``.

    ``labels`` (n,), ``noise`` (n, 1, 8, 8); rows come in consecutive groups of ``group_size`` of one
    class (a "batch" of the paper); ``e_t`` and ``u_axes`` map a class to its axes. At a guided step
    the predicted clean digits x̂_0 = (x_t - √(1-ᾱ_t) ε̂)/√ᾱ_t are moved by Adam (toward the GASS
    targets, or up the batch's order-2 Vendi score for 'repel'), and ε̂ is rewritten to
    (x_t - √ᾱ_t x̂_0')/√(1-ᾱ_t), so that the scheduler's step uses x̂_0'. Returns (x_0, mean move).
    """
    sched = make_sampler()
    sched.set_timesteps(steps)
    x = noise.clone()
    n = len(labels)
    lab = torch.cat([torch.as_tensor(labels), torch.full((n,), NULL_LABEL)])
    rng = np.random.default_rng(hook_seed)
    moved = []
    guided_steps = guided_steps if arm.guided is None else arm.guided
    for i, t in enumerate(sched.timesteps):
        with torch.no_grad():
            out = unet(torch.cat([x, x]), t, class_labels=lab).sample
        eps_c, eps_u = out[:n], out[n:]
        eps = eps_u + arm.cfg * (eps_c - eps_u)
        if arm.hook != "none" and i < guided_steps:
            abar = sched.alphas_cumprod[int(t)]
            x0 = ((x - (1 - abar).sqrt() * eps) / abar.sqrt()).clamp(-1, 1)  # as the scheduler clips it
            if arm.hook == "repel":
                x0n, _ = optimise_x0_repulsion(x0, phi, n // group_size, lr=arm.lr)
            else:
                with torch.no_grad():
                    E = phi(x0).double().numpy()
                T = np.empty_like(E)
                for g in range(0, n, group_size):
                    k = int(labels[g])
                    T[g:g + group_size], _ = build_e_target(E[g:g + group_size], e_t[k], arm.w1, arm.w2,
                                                            arm.r, arm.r, rng, u_ind=u_axes[arm.u_mode][k])
                x0n, _ = optimise_x0_to_target(x0, T.astype(np.float32), phi, lr=arm.lr)
            moved.append(float((x0n - x0).flatten(1).norm(dim=-1).mean()))
            eps = (x - abar.sqrt() * x0n) / (1 - abar).sqrt()
        x = sched.step(eps, t, x, eta=0.0, use_clipped_model_output=True).prev_sample
    return x, (float(np.mean(moved)) if moved else 0.0)


@dataclass(frozen=True)
class DigitsConfig:
    """Parameters of the digits run (names match the notebook's parameters cell)."""

    seed: int = 0
    num_models: int = 3
    num_classes: int = 2
    num_batches: int = 3
    batch_size: int = 10
    sampler_steps: int = 20
    guided_steps: int = 5
    cfg: float = 5.0
    low_cfg_grid: tuple = (1.5, 2.5, 3.5)
    repel_grid: tuple = (2e-3, 8e-3, 3.2e-2)
    r: float = 0.02
    dose_grid: tuple = (0.01, 0.02, 0.05, 0.1)
    guided_grid: tuple = (5, 10, 15)

    def __post_init__(self) -> None:
        object.__setattr__(self, "guided_grid", tuple(int(v) for v in self.guided_grid))
        for name in ("low_cfg_grid", "repel_grid", "dose_grid"):
            object.__setattr__(self, name, tuple(float(v) for v in getattr(self, name)))
        if self.num_models < 2 or self.num_batches < 2 or self.batch_size < 4:
            raise ValueError("num_models >= 2, num_batches >= 2 and batch_size >= 4 needed")
        if not 0 <= self.guided_steps <= self.sampler_steps:
            raise ValueError("0 <= guided_steps <= sampler_steps")
        if not 1 <= self.num_classes <= 10:
            raise ValueError("1 <= num_classes <= 10")
        if self.r not in self.dose_grid:
            raise ValueError("r must be one of dose_grid (the headline arm is the dose arm at r)")
        if self.guided_steps not in self.guided_grid or list(self.guided_grid) != sorted(set(self.guided_grid)):
            raise ValueError("guided_grid must be increasing and hold guided_steps (the headline arm)")
        if not all(1 <= g <= self.sampler_steps for g in self.guided_grid):
            raise ValueError("every guided_grid entry must be in [1, sampler_steps]")


def digit_arms(config: DigitsConfig) -> list[DigitArm]:
    w, r = config.cfg, config.r
    arms = [DigitArm("vanilla", w), DigitArm("gass", w, "gass", 1, 1, r), DigitArm("dep_only", w, "gass", 1, 0, r),
            DigitArm("ind_only", w, "gass", 0, 1, r), DigitArm("as_released", w, "gass", 0, 0, r),
            DigitArm("gass_pca", w, "gass", 1, 1, r, "pca")]
    arms += [DigitArm(f"repel_{s:g}", w, "repel", lr=s) for s in config.repel_grid]
    arms += [DigitArm(f"cfg_{c:g}", c) for c in config.low_cfg_grid]
    arms += [DigitArm(f"gass_r{d:g}", w, "gass", 1, 1, d) for d in config.dose_grid if d != r]
    arms += [DigitArm(f"gass_g{g}", w, "gass", 1, 1, r, guided=g) for g in config.guided_grid
             if g != config.guided_steps]
    return arms


def dose_arm(config: DigitsConfig, d: float) -> str:
    """The arm of GASS at radius ``d`` (the headline arm at ``config.r``)."""
    return "gass" if d == config.r else f"gass_r{d:g}"


def guided_arm(config: DigitsConfig, g: int) -> str:
    """The arm of GASS guided at the first ``g`` DDIM steps (the headline arm at ``config.guided_steps``)."""
    return "gass" if g == config.guided_steps else f"gass_g{g}"


@dataclass(frozen=True)
class DigitsResult:
    """``arms[name][metric]``: arrays (num_models, num_classes * num_batches); plus reference stats."""

    arms: dict
    metrics: dict = field(default_factory=dict)
    planes: dict = field(default_factory=dict)
    images: dict = field(default_factory=dict)


def class_axes(clip, images, labels, train_idx, num_classes: int, seed: int):
    """Per class: e_t (the prompt's text embedding), u_ind (best of 10 random ⟂ directions on real
    training residuals, the axis measured and pushed along) and the top residual PC (the PCA arm)."""
    E_text = clip_model.text_features(clip, digit_data.single_digit_prompts())
    feats = clip_model.image_features(clip, digit_data.single_digit_canvases(images[train_idx]))
    e_t, u_fixed, u_pca, share = {}, {}, {}, {}
    for k in range(num_classes):
        e_t[k] = E_text[k]
        _, R = decompose_on_axis(feats[labels[train_idx] == k], e_t[k])
        u_fixed[k] = select_u_ind(R, orthogonal_candidates(e_t[k], 10, np.random.default_rng(4242 + 97 * seed + k)))
        u_pca[k] = top_pc(R)
        Rc = R - R.mean(0)
        share[k] = float(np.var(Rc @ u_fixed[k]) / np.var(Rc @ u_pca[k]))
    return e_t, {"fixed": u_fixed, "pca": u_pca}, share


def run_digits(config: DigitsConfig, generators, clip, split) -> DigitsResult:
    """Sample every arm from every generator in paired batches (same noise per arm), and measure."""
    images, labels = digit_data.load_digit_images()
    train_idx, test_idx = np.asarray(split["train"]), np.asarray(split["test"])
    K, nb, bs = config.num_classes, config.num_batches, config.batch_size
    e_t, u_axes, share = class_axes(clip, images, labels, train_idx, K, config.seed)
    u = u_axes["fixed"]
    phi = DigitPhi(clip).eval()
    real = {k: clip_model.image_features(clip, digit_data.single_digit_canvases(images[test_idx[labels[test_idx] == k]]))
            for k in range(K)}
    arms = digit_arms(config)
    keys = ("dep", "ind", "vendi", "align", "density", "coverage")
    out = {a.name: {m: np.zeros((config.num_models, K * nb)) for m in keys} for a in arms}
    moved = {a.name: [] for a in arms}
    planes, grid = {}, {}
    lab = np.repeat(np.arange(K), nb * bs)
    for j in range(config.num_models):
        unet = generators[j]
        g = torch.Generator().manual_seed(7_919 * (config.seed + 1) + 1_009 * j)
        noise = torch.randn(K * nb * bs, 1, 8, 8, generator=g)  # shared by every arm: paired batches
        for arm in arms:
            x, mv = ddim_sample(unet, phi, lab, noise, arm, e_t, u_axes, bs, config.sampler_steps,
                                config.guided_steps, hook_seed=31 * (config.seed + 1) + j)
            moved[arm.name].append(mv)
            with torch.no_grad():
                E = phi(x).double().numpy()
            E = E / np.linalg.norm(E, axis=1, keepdims=True)
            o = out[arm.name]
            for col in range(K * nb):
                k, rows = col // nb, slice(col * bs, (col + 1) * bs)
                Eb = E[rows]
                o["dep"][j, col] = projection_spread(Eb, e_t[k])
                o["ind"][j, col] = projection_spread(Eb, u[k])
                o["vendi"][j, col] = vendi_score(Eb)
                o["align"][j, col] = float((Eb @ e_t[k]).mean())
                o["density"][j, col], o["coverage"][j, col] = density_coverage(real[k], Eb, k=5)
            if j == 0 and arm.name in ("vanilla", "gass"):
                planes[arm.name] = np.stack([E[:bs] @ e_t[0], E[:bs] @ u[0]], 1)
                grid[arm.name] = x.reshape(K, nb * bs, 8, 8)[:, :bs].numpy()
    planes["real"] = np.stack([real[0] @ e_t[0], real[0] @ u[0]], 1)
    rng = np.random.default_rng(99)
    real_dep = [projection_spread(real[k][rng.choice(len(real[k]), bs, replace=False)], e_t[k])
                for k in range(K) for _ in range(50)]
    real_vendi = [vendi_score(real[k][rng.choice(len(real[k]), bs, replace=False)]) for k in range(K) for _ in range(50)]
    metrics = {"real_dep_spread": float(np.mean(real_dep)), "real_vendi": float(np.mean(real_vendi)),
               "real_align": float(np.mean([(real[k] @ e_t[k]).mean() for k in range(K)])),
               "u_share": float(np.mean(list(share.values()))),
               "moved": {a: float(np.mean(v)) for a, v in moved.items()}}
    return DigitsResult(arms=out, metrics=metrics, planes=planes, images=grid)


def real_digit_grid(split, num_classes: int, per_class: int) -> np.ndarray:
    """Real test digits (num_classes, per_class, 8, 8) in [-1, 1], for the figure."""
    images, labels = digit_data.load_digit_images()
    test = np.asarray(split["test"])
    return np.stack([to_model_space(images[test[labels[test] == k][:per_class]])[:, 0].numpy()
                     for k in range(num_classes)])
