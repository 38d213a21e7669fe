r"""EnerGS flatland experiment: scene, six training arms at equal Gaussian budgets, metrics, run().

Scene (a vertical x-y slice, metres): ground, a back wall, a box car and a facade. The facade's
upper part (y >= ``BLIND_Y``) lies above the LiDAR sensors' vertical field of view, so the ray
tracer leaves it UNK, while the cameras see it. Segments carry a striped colour texture along
their length; the ground-truth images are renders of dense, nearly opaque Gaussians laid on the
segments (same renderer as the trained models).

Arms (all with clone/split densification up to the same budget ``n_gaussians``):
``vanilla`` (photometric loss moves the means), ``vanilla_prune`` (vanilla + FREE pruning),
``hard_prior`` (init on LiDAR OCC points + chamfer-to-OCC loss on every mean, its weight tuned per
setting on a dev split of views and training seeds: ``tune_hard_prior``), ``lidar_init`` (the hard
prior's initialisation on LiDAR OCC points without its chamfer loss: vanilla otherwise, so that
hard prior - lidar_init is the constraint alone), ``energs`` (photometric xyz gradient zeroed;
means move by clipped relax steps on the energy and by densification; FREE pruning),
``energs_nobarrier`` (the same, FREE pruning included, with lam = 0: it differs from ``energs`` in
the barrier only).

Small-scale deviations (ours, not the repo's): L1 photometric loss only (no D-SSIM, no depth);
the photometric gate and coverage modulation are off (gate = 1); the relax schedule and FREE
pruning are rescaled to the short runs; Adam state is reset after each densification; pruning
removes Gaussians in FREE with d_trust >= delta; EnerGS keeps the code's defaults (untuned)
while the hard prior's weight is tuned, which favours the baseline; the loop is hand-written because the parameter
set changes size under densification, which ``compendium.training.fit`` does not support.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
import torch

from . import (EnergyParams, distance_fields, energy_grad_at, field_lookup,
               region_grid_from_rays, relax_step, render_flatland)

EXTENT = (0.0, 16.0, 0.0, 10.0)
BLIND_Y = 5.0
BACKGROUND = 0.1
ARMS = ("vanilla", "vanilla_prune", "hard_prior", "lidar_init", "energs", "energs_nobarrier")
#: arms initialised on the LiDAR OCC points (the others start uniform in the scene box)
LIDAR_INIT_ARMS = ("hard_prior", "lidar_init")
#: arms with FREE pruning
PRUNE_ARMS = ("vanilla_prune", "energs", "energs_nobarrier")
SETTINGS = ("sparse", "monocular")

# name: (x0, y0, x1, y1, base colour, stripe period)
SEGMENTS = {
    "ground": (0.5, 0.5, 15.5, 0.5, (0.35, 0.35, 0.3), 1.0),
    "back_wall": (0.5, 0.5, 0.5, 4.0, (0.3, 0.5, 0.3), 0.7),
    "car_left": (6.0, 0.5, 6.0, 2.0, (0.8, 0.2, 0.2), 0.5),
    "car_top": (6.0, 2.0, 8.5, 2.0, (0.8, 0.3, 0.2), 0.6),
    "car_right": (8.5, 2.0, 8.5, 0.5, (0.8, 0.2, 0.3), 0.5),
    "facade_low": (14.0, 0.5, 14.0, BLIND_Y, (0.3, 0.4, 0.8), 0.8),
    "facade_high": (14.0, BLIND_Y, 14.0, 9.0, (0.6, 0.6, 0.9), 0.6),
}
SENSORS = ((2.5, 1.7), (4.5, 1.7), (10.5, 1.7))
LIDAR_VFOV = math.radians(12.0)  # half-angle about the horizontal, both directions


def scene_segments() -> np.ndarray:
    """(S, 4) segment endpoints in SEGMENTS order."""
    return np.array([v[:4] for v in SEGMENTS.values()], float)


def lidar_angles(n_per_side=120):
    """Beam angles: +-LIDAR_VFOV around the forward (+x) and backward (-x) horizontals."""
    a = np.linspace(-LIDAR_VFOV, LIDAR_VFOV, n_per_side)
    return np.concatenate([a, np.pi + a])


def lidar_labels(voxel=0.25):
    return region_grid_from_rays(SENSORS, scene_segments(), EXTENT, voxel=voxel, angles=lidar_angles())


def gt_gaussians(spacing=0.05, dtype=torch.float64):
    """Dense, nearly opaque Gaussians along every segment: (mu, log_scale, angle, colour, logit, is_blind)."""
    mus, cols, angs, blind = [], [], [], []
    for name, (x0, y0, x1, y1, base, period) in SEGMENTS.items():
        L = math.hypot(x1 - x0, y1 - y0)
        s = np.arange(spacing / 2, L, spacing)
        t = s / L
        mus.append(np.stack([x0 + t * (x1 - x0), y0 + t * (y1 - y0)], 1))
        stripe = 0.25 * np.sin(2 * np.pi * s / period)
        cols.append(np.clip(np.asarray(base)[None] + stripe[:, None] * np.array([1.0, -0.5, 0.5]), 0, 1))
        angs.append(np.full(len(s), math.atan2(y1 - y0, x1 - x0)))
        blind.append(np.full(len(s), name == "facade_high"))
    mu = torch.tensor(np.vstack(mus), dtype=dtype)
    n = mu.shape[0]
    ls = torch.log(torch.tensor([[spacing * 0.8, 0.02]], dtype=dtype)).expand(n, 2).clone()
    return (mu, ls, torch.tensor(np.concatenate(angs), dtype=dtype), torch.tensor(np.vstack(cols), dtype=dtype),
            torch.full((n,), 4.0, dtype=dtype), np.concatenate(blind))


def _look(pos, target):
    return (tuple(pos), math.atan2(target[1] - pos[1], target[0] - pos[0]))


def cameras(setting, rng):
    """Train cameras [(pos, angle)] of a setting: 6 spread views (sparse) or a forward track of 10."""
    if setting == "sparse":
        pos = [(2.0, 1.5), (3.0, 6.0), (4.0, 3.0), (2.5, 8.0), (5.0, 1.2), (3.5, 4.5)]
        tgt = [(14.0, 3.0), (14.0, 6.0), (8.0, 1.5), (14.0, 8.0), (14.0, 2.0), (11.0, 4.0)]
        cams = [_look(p, t) for p, t in zip(pos, tgt)]
    elif setting == "monocular":
        cams = [((x, 1.6), math.radians(8.0)) for x in np.linspace(1.5, 5.0, 10)]
    else:
        raise ValueError(f"unknown setting {setting!r}")
    jitter = rng.normal(0, 0.05, (len(cams), 2))
    return [((p[0] + j[0], p[1] + j[1]), a) for (p, a), j in zip(cams, jitter)]


def test_cameras(n, rng):
    pos = np.stack([rng.uniform(1.5, 5.5, n), rng.uniform(1.0, 8.0, n)], 1)
    tgt = np.stack([rng.uniform(8.0, 14.0, n), rng.uniform(1.0, 8.5, n)], 1)
    return [_look(p, t) for p, t in zip(pos, tgt)]


def blind_pixel_mask(cam, n_px=64, fov=math.radians(60)):
    """Pixels whose ray first hits the LiDAR-blind upper facade (ray cast on the segments)."""
    (cx, cy), a = cam
    f = (n_px / 2) / math.tan(fov / 2)
    fwd, right = np.array([math.cos(a), math.sin(a)]), np.array([math.sin(a), -math.cos(a)])
    x = (np.arange(n_px) + 0.5 - n_px / 2) / f
    r = fwd[None] + x[:, None] * right[None]
    seg = scene_segments()
    p, q = seg[:, :2], seg[:, 2:] - seg[:, :2]
    den = r[:, None, 0] * (-q[None, :, 1]) - r[:, None, 1] * (-q[None, :, 0])
    d = p[None] - np.array([cx, cy])
    with np.errstate(divide="ignore", invalid="ignore"):
        t = (d[..., 0] * (-q[None, :, 1]) - d[..., 1] * (-q[None, :, 0])) / den
        u = (r[:, None, 0] * d[..., 1] - r[:, None, 1] * d[..., 0]) / den
    ok = (np.abs(den) > 1e-12) & (t > 0) & (u >= 0) & (u <= 1)
    t = np.where(ok, t, np.inf)
    first = t.argmin(1)
    hit = np.isfinite(t.min(1))
    return hit & (first == list(SEGMENTS).index("facade_high"))


@dataclass(frozen=True)
class TrainParams:
    n_gaussians: int = 300
    iterations: int = 500
    lr_mu: float = 0.01
    densify_every: int = 50
    relax_every: int = 50
    relax_len: int = 10
    relax_lr: float = 0.005
    prune_every: int = 100
    chamfer_weight: float = 1.0
    voxel: float = 0.25
    prune_dtrust: float = 0.5  # prune means in FREE with d_trust >= this (delta; s0 = 1.6 m is wider than the LiDAR wedge)


class Model:
    """A set of 2D Gaussians as leaf tensors (float32)."""

    def __init__(self, mu, log_scale, angle, color_logit, opacity_logit):
        self.t = {k: v.detach().clone().float().requires_grad_(True) for k, v in
                  dict(mu=mu, log_scale=log_scale, angle=angle, color=color_logit,
                       opacity=opacity_logit).items()}

    def __len__(self):
        return self.t["mu"].shape[0]

    def render(self, cam, n_px=64):
        (pos, a) = cam
        t = self.t
        return render_flatland(t["mu"], t["log_scale"], t["angle"], torch.sigmoid(t["color"]),
                               t["opacity"], pos, a, n_px=n_px, background=BACKGROUND)

    def select(self, keep):
        keep = torch.as_tensor(keep)
        for k in self.t:
            self.t[k] = self.t[k].detach()[keep].clone().requires_grad_(True)

    def append(self, **new):
        for k in self.t:
            self.t[k] = torch.cat([self.t[k].detach(), new[k].float()]).requires_grad_(True)


def init_model(n, rng, points=None):
    g = torch.Generator().manual_seed(int(rng.integers(2**31)))
    if points is None:
        lo = torch.tensor([EXTENT[0] + 0.5, EXTENT[2] + 0.5])
        hi = torch.tensor([EXTENT[1] - 0.5, EXTENT[3] - 0.5])
        mu = lo + (hi - lo) * torch.rand(n, 2, generator=g)
    else:
        idx = torch.as_tensor(rng.choice(len(points), n, replace=len(points) < n))
        mu = torch.as_tensor(points, dtype=torch.float32)[idx] + 0.02 * torch.randn(n, 2, generator=g)
    return Model(mu, torch.full((n, 2), math.log(0.15)), math.pi * torch.rand(n, generator=g),
                 torch.zeros(n, 3), torch.full((n,), -1.0))


def densify(model, grad_acc, budget, gen, split_scale=0.2):
    """Clone (small) or split (large) the Gaussians with the largest accumulated mean-gradient, up
    to ``budget``; drop near-transparent ones first. Returns the number added."""
    op = torch.sigmoid(model.t["opacity"].detach())
    keep = op > 0.02
    model.select(keep)
    grad_acc = grad_acc[keep]
    room = budget - len(model)
    if room <= 0:
        return 0
    k = min(room, len(model))
    top = torch.argsort(grad_acc, descending=True)[:k]
    t = {name: v.detach()[top] for name, v in model.t.items()}
    big = torch.exp(t["log_scale"]).max(1).values > split_scale
    c, s = torch.cos(t["angle"]), torch.sin(t["angle"])
    sc = torch.exp(t["log_scale"])
    z = torch.randn(k, 2, generator=gen)
    off = torch.stack([c * sc[:, 0] * z[:, 0] - s * sc[:, 1] * z[:, 1],
                       s * sc[:, 0] * z[:, 0] + c * sc[:, 1] * z[:, 1]], 1)
    new_mu = torch.where(big[:, None], t["mu"] + off, t["mu"])
    new_ls = torch.where(big[:, None], t["log_scale"] - math.log(1.6), t["log_scale"])
    with torch.no_grad():  # the split parent shrinks too, as in 3DGS
        model.t["log_scale"][top[big]] -= math.log(1.6)
    model.append(mu=new_mu, log_scale=new_ls, angle=t["angle"], color=t["color"], opacity=t["opacity"])
    return k


def train_arm(arm, setting_cams, gt_images, fields, occ_points, tp: TrainParams, ep: EnergyParams, seed):
    """Train one arm; returns the model and a log of (iteration, mean-energy, deep-FREE count)."""
    if arm not in ARMS:
        raise ValueError(f"unknown arm {arm!r}")
    rng = np.random.default_rng(seed)
    gen = torch.Generator().manual_seed(seed)
    pts = occ_points if arm in LIDAR_INIT_ARMS else None
    model = init_model(tp.n_gaussians // 2, rng, pts)
    energy = arm in ("energs", "energs_nobarrier")
    prune = arm in PRUNE_ARMS
    ep_arm = EnergyParams(**{**asdict(ep), "lam": 0.0}) if arm == "energs_nobarrier" else ep
    occ_t = torch.as_tensor(occ_points, dtype=torch.float32)

    def make_opt():
        return torch.optim.Adam([{"params": [model.t["mu"]], "lr": tp.lr_mu},
                                 {"params": [model.t["log_scale"], model.t["angle"]], "lr": 0.01},
                                 {"params": [model.t["color"]], "lr": 0.05},
                                 {"params": [model.t["opacity"]], "lr": 0.05}])

    opt = make_opt()
    grad_acc = torch.zeros(len(model))
    densify_until = int(0.7 * tp.iterations)
    for it in range(tp.iterations):
        v = int(rng.integers(len(setting_cams)))
        loss = (model.render(setting_cams[v]) - gt_images[v]).abs().mean()
        if arm == "hard_prior":
            d2 = torch.cdist(model.t["mu"], occ_t).min(1).values ** 2
            loss = loss + tp.chamfer_weight * d2.mean()
        opt.zero_grad()
        loss.backward()
        grad_acc += model.t["mu"].grad.norm(dim=1)
        if energy:
            model.t["mu"].grad.zero_()  # decoupled update: photometric xyz gradient zeroed
        opt.step()
        if energy and it % tp.relax_every < tp.relax_len:
            with torch.no_grad():
                x = model.t["mu"].detach().numpy().astype(float)
                g = energy_grad_at(x, fields, EXTENT, tp.voxel, ep_arm)
                model.t["mu"].copy_(torch.as_tensor(relax_step(x, g, tp.relax_lr, 0.5 * tp.voxel)))
        changed = False
        if prune and it > 0 and it % tp.prune_every == 0:
            f = field_lookup(model.t["mu"].detach().numpy().astype(float), fields, EXTENT, tp.voxel)
            keep = ~(f["free"] & (f["d_trust"] >= tp.prune_dtrust))
            if keep.sum() >= 1 and not keep.all():
                model.select(torch.as_tensor(keep))
                grad_acc = grad_acc[torch.as_tensor(keep)]
                changed = True
        if it > 0 and it % tp.densify_every == 0 and it <= densify_until:
            densify(model, grad_acc, tp.n_gaussians, gen)
            changed = True
        if changed:
            grad_acc = torch.zeros(len(model))
            opt = make_opt()
    return model


def view_psnr(model, cams, imgs, masks=None):
    """Mean over views of the PSNR (dB) of ``model`` against ``imgs``; with ``masks``, only the
    masked pixels of each view (views without any are skipped; NaN if none is left)."""
    out = []
    with torch.no_grad():
        for i, (c, img) in enumerate(zip(cams, imgs)):
            err = (model.render(c).double() - img) ** 2
            if masks is not None:
                if not masks[i].any():
                    continue
                err = err[torch.as_tensor(masks[i])]
            out.append(-10 * math.log10(max(float(err.mean()), 1e-12)))
    return float(np.mean(out)) if out else float("nan")


class FlatImage:
    """The trivial baseline: every view rendered as one constant colour (``value``, the mean of the
    training images), the floor that a fitted model must beat."""

    def __init__(self, value):
        self.value = value

    def render(self, cam):
        return self.value


def flat_metrics(train_imgs, test_cams, test_imgs, blind_masks) -> dict:
    """Test PSNR and blind-pixel PSNR of :class:`FlatImage` at the training images' mean colour."""
    flat = FlatImage(torch.stack([torch.as_tensor(i) for i in train_imgs]).double().mean(dim=(0, 1)))
    return {"test_psnr": view_psnr(flat, test_cams, test_imgs),
            "blind_psnr": view_psnr(flat, test_cams, test_imgs, blind_masks)}


def model_metrics(model, train_cams, train_imgs, test_cams, test_imgs, blind_masks, fields,
                  blind_pts, voxel=0.25, blind_band=1.0):
    """Test/train PSNR, gap, Leak, blind-region chamfer and blind-pixel PSNR of one model."""
    mu = model.t["mu"].detach().numpy().astype(float)
    op = torch.sigmoid(model.t["opacity"]).detach().numpy().astype(float)
    f = field_lookup(mu, fields, EXTENT, voxel)
    leak = float((op * f["free"]).sum() / max(op.sum(), 1e-12))
    lo = blind_pts.min(0) - blind_band
    hi = blind_pts.max(0) + blind_band
    near = np.all((mu >= lo) & (mu <= hi), 1) & (op > 0.3)
    if near.any():
        d = np.linalg.norm(blind_pts[:, None] - mu[None, near], axis=-1)
        chamfer = float(d.min(1).mean() + d.min(0).mean())
    else:
        chamfer = float(np.linalg.norm(hi - lo))
    te, tr = view_psnr(model, test_cams, test_imgs), view_psnr(model, train_cams, train_imgs)
    return {"test_psnr": te, "train_psnr": tr, "gap": tr - te, "leak": leak,
            "blind_chamfer": chamfer, "blind_psnr": view_psnr(model, test_cams, test_imgs, blind_masks),
            "n_final": len(model)}


# ----------------------------------------------------------------------------- Config / run
#: The hard prior's chamfer weights tried on the dev split (log-spaced; every one is a constraint).
CHAMFER_GRID = (0.001, 0.003, 0.01, 0.03)
DEV_VIEWS = 10  # dev cameras: the test views' distribution, their own random stream
DEV_SEEDS = 2  # training seeds per grid point, offset 500 (never an evaluation training seed)


@dataclass(frozen=True)
class Config:
    """Registry parameters of the chapter plus ``seed``."""

    seed: int = 0
    n_seeds: int = 2
    n_gaussians: int = 120
    iterations: int = 200
    n_test_views: int = 20
    relax_lr: float = 0.005
    chamfer_grid: tuple = CHAMFER_GRID
    settings: tuple = SETTINGS

    def __post_init__(self):
        from compendium.validation import require_int, require_number
        require_int("seed", self.seed, 0, 2**31 - 1)
        require_int("n_seeds", self.n_seeds, 2, 50)
        require_int("n_gaussians", self.n_gaussians, 8, 10_000)
        require_int("iterations", self.iterations, 10, 100_000)
        require_int("n_test_views", self.n_test_views, 1, 200)
        require_number("relax_lr", self.relax_lr, 0.0, 10.0)
        object.__setattr__(self, "chamfer_grid", tuple(float(w) for w in self.chamfer_grid))
        if not self.chamfer_grid:
            raise ValueError("chamfer_grid must hold at least one weight")
        for w in self.chamfer_grid:
            require_number("chamfer_grid item", w, 0.0, 100.0)
        object.__setattr__(self, "settings", tuple(self.settings))
        if not self.settings or any(s not in SETTINGS for s in self.settings):
            raise ValueError(f"settings must be a non-empty subset of {SETTINGS}, got {self.settings!r}")


@dataclass
class Trained:
    """The trained models of every arm, setting and training seed, and the hard prior's tuning."""

    config: Config
    labels: np.ndarray
    fields: dict
    models: dict  # models[setting][arm] -> [Model per training seed]
    tuning: dict  # tuning[setting] -> {"grid", "dev_psnr", "chosen"}


@dataclass
class Result:
    config: Config
    labels: np.ndarray
    fields: dict
    metrics: dict  # metrics[setting][arm][metric] -> list over seeds
    models: dict  # models[setting][arm] -> [Model per training seed]
    tuning: dict


def scene_setup(n_test_views, rng):
    """Labels, fields, OCC points, GT Gaussians, test cameras/images and blind masks."""
    labels = lidar_labels()
    return labels, distance_fields(labels), occ_points(labels), gt_gaussians(), test_cameras(n_test_views, rng)


def occ_points(labels, voxel=0.25):
    ix, iy = np.nonzero(labels == 0)
    return np.stack([EXTENT[0] + (ix + 0.5) * voxel, EXTENT[2] + (iy + 0.5) * voxel], 1)


def render_gt(gt, cams):
    mu, ls, ang, col, op, _ = gt
    with torch.no_grad():
        return [render_flatland(mu, ls, ang, col, op, c[0], c[1], background=BACKGROUND) for c in cams]


def train_params(config: Config, chamfer_weight: float) -> TrainParams:
    """The schedule of every arm at ``config``'s size (relax, densify and prune rescaled to the run)."""
    it = config.iterations
    return TrainParams(n_gaussians=config.n_gaussians, iterations=it, relax_lr=config.relax_lr,
                       chamfer_weight=float(chamfer_weight), densify_every=max(it // 10, 1),
                       relax_every=max(it // 10, 1), relax_len=max(it // 50, 1), prune_every=max(it // 5, 1))


def training_seed(config: Config, k: int) -> int:
    return 1000 * config.seed + k


def dev_cameras(n, seed):
    """Dev views for tuning: drawn like the test views, from a stream of their own (never a test draw)."""
    return test_cameras(n, np.random.default_rng([int(seed), 0xDE5]))


def tune_hard_prior(config: Config, fields, occ_pts, gt):
    """Pick the hard prior's chamfer weight per setting on a dev split, before any test view is seen.

    For each weight of ``config.chamfer_grid``: train the hard prior at ``DEV_SEEDS`` training seeds
    (1000 seed + 500 + j: never an evaluation seed) and score the mean PSNR on ``DEV_VIEWS`` dev
    views (``dev_cameras``: not the test views). The weight with the highest mean dev PSNR is used."""
    dev_cams = dev_cameras(DEV_VIEWS, config.seed)
    dev_imgs = render_gt(gt, dev_cams)
    out = {}
    for setting in config.settings:
        scores = []
        for w in config.chamfer_grid:
            tp = train_params(config, w)
            vals = []
            for j in range(DEV_SEEDS):
                seed = 1000 * config.seed + 500 + j
                cams = cameras(setting, np.random.default_rng(seed))
                m = train_arm("hard_prior", cams, render_gt(gt, cams), fields, occ_pts, tp, EnergyParams(), seed)
                vals.append(view_psnr(m, dev_cams, dev_imgs))
            scores.append(float(np.mean(vals)))
        out[setting] = {"grid": list(config.chamfer_grid), "dev_psnr": scores,
                        "chosen": float(config.chamfer_grid[int(np.argmax(scores))])}
    return out


def train_models(config: Config) -> Trained:
    """Tune the hard prior on the dev split, then train the six arms in each setting at ``n_seeds``
    training seeds (the hard prior with its tuned weight, the others with the code's defaults)."""
    labels = lidar_labels()
    fields = distance_fields(labels)
    occ = occ_points(labels)
    gt = gt_gaussians()
    tuning = tune_hard_prior(config, fields, occ, gt)
    ep = EnergyParams()
    models = {}
    for setting in config.settings:
        models[setting] = {a: [] for a in ARMS}
        tp = train_params(config, tuning[setting]["chosen"])
        for k in range(config.n_seeds):
            seed = training_seed(config, k)
            cams = cameras(setting, np.random.default_rng(seed))
            imgs = render_gt(gt, cams)
            for arm in ARMS:
                models[setting][arm].append(train_arm(arm, cams, imgs, fields, occ, tp, ep, seed))
    return Trained(config, labels, fields, models, tuning)


def evaluate(trained: Trained, test_seed: int, n_test_views: int) -> dict:
    """metrics[setting][arm][metric] -> list over training seeds, on ``n_test_views`` test views
    drawn from ``test_seed`` (the chapter's seed: a seed sweep redraws the test views)."""
    gt = gt_gaussians()
    test_cams = test_cameras(n_test_views, np.random.default_rng(test_seed))
    test_imgs = render_gt(gt, test_cams)
    masks = [blind_pixel_mask(c) for c in test_cams]
    blind_pts = gt[0].numpy()[gt[5]]
    metrics = {}
    for setting, arms in trained.models.items():
        metrics[setting] = {a: {} for a in arms}
        for k in range(len(arms[ARMS[0]])):
            cams = cameras(setting, np.random.default_rng(training_seed(trained.config, k)))
            imgs = render_gt(gt, cams)
            for arm, ms in arms.items():
                for key, val in model_metrics(ms[k], cams, imgs, test_cams, test_imgs, masks,
                                              trained.fields, blind_pts).items():
                    metrics[setting][arm].setdefault(key, []).append(val)
            for key, val in flat_metrics(imgs, test_cams, test_imgs, masks).items():  # the floor
                metrics[setting].setdefault("flat", {}).setdefault(key, []).append(val)
    return metrics


def run(config: Config) -> Result:
    """Tune, train and score (test views from ``config.seed``)."""
    t = train_models(config)
    return Result(config, t.labels, t.fields, evaluate(t, config.seed, config.n_test_views), t.models, t.tuning)


def paired(metrics, setting, arm_a, arm_b, key, scale_b=1.0, level=0.95):
    """t interval of mean over training seeds of ``a - scale_b * b`` for metric ``key`` (paired by seed)."""
    from compendium.stats import paired_difference
    a = np.asarray(metrics[setting][arm_a][key], float)
    b = scale_b * np.asarray(metrics[setting][arm_b][key], float)
    return paired_difference(a, b, level=level, unit=f"training seeds ({setting})")


# ----------------------------------------------------------------------------- asset
ASSET_NAME = "energs_splats"
SCALES = {"smoke": dict(n_seeds=5, n_gaussians=100, iterations=150, n_test_views=20),
          "full": dict(n_seeds=5, n_gaussians=300, iterations=1000, n_test_views=20)}


def asset_config(scale: str, seed: int) -> Config:
    if scale not in SCALES:
        raise ValueError(f"scale must be one of {sorted(SCALES)}, got {scale!r}")
    return Config(seed=int(seed), **SCALES[scale])


def build_asset(out_dir, scale: str, seed: int) -> None:
    """Tune the hard prior and train every arm x setting x training seed (``train_models``); save the
    configuration, the tuning record, the labels and every model's Gaussians into ``out_dir``."""
    import json
    from pathlib import Path
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)
    t = train_models(asset_config(scale, seed))
    cfg = asdict(t.config)
    cfg["settings"] = list(cfg["settings"])
    cfg["chamfer_grid"] = list(cfg["chamfer_grid"])
    (out / "metrics.json").write_text(json.dumps({"config": cfg, "tuning": t.tuning}, indent=1, sort_keys=True) + "\n")
    torch.save(torch.from_numpy(np.ascontiguousarray(t.labels)), out / "labels.pt")  # a trained asset, not a dataset
    torch.save({s: {a: [{k: v.detach() for k, v in m.t.items()} for m in ms] for a, ms in d.items()}
                for s, d in t.models.items()}, out / "models.pt")


def load_asset(path) -> Trained:
    """The ``Trained`` set saved by ``build_asset`` (fields recomputed from the saved labels)."""
    import json
    from pathlib import Path
    path = Path(path)
    meta = json.loads((path / "metrics.json").read_text())
    labels = torch.load(path / "labels.pt", weights_only=True).numpy()
    raw = torch.load(path / "models.pt", weights_only=True)
    models = {s: {a: [Model(t["mu"], t["log_scale"], t["angle"], t["color"], t["opacity"]) for t in ts]
                  for a, ts in d.items()} for s, d in raw.items()}
    return Trained(Config(**meta["config"]), labels, distance_fields(labels), models, meta["tuning"])


def headline(metrics, settings=SETTINGS):
    """Every paired Estimate the ledger needs, per setting (unit: training seeds)."""
    out = {}
    for s in settings:
        out[s] = {
            "leak_excess": paired(metrics, s, "energs", "vanilla", "leak", 0.5),
            "psnr_diff": paired(metrics, s, "energs", "vanilla", "test_psnr"),
            "gap_diff": paired(metrics, s, "energs", "vanilla", "gap"),
            "blind_chamfer_diff": paired(metrics, s, "energs", "hard_prior", "blind_chamfer"),
            "blind_psnr_diff": paired(metrics, s, "energs", "hard_prior", "blind_psnr"),
            "leak_vs_prune": paired(metrics, s, "energs", "vanilla_prune", "leak"),
            "psnr_vs_prune": paired(metrics, s, "energs", "vanilla_prune", "test_psnr"),
            "nobarrier_leak_excess": paired(metrics, s, "energs_nobarrier", "vanilla", "leak", 0.5),
            "vanilla_gap": _mean(metrics[s]["vanilla"]["gap"], s),
            "vanilla_psnr": _mean(metrics[s]["vanilla"]["test_psnr"], s),
            # learned-model floors: test PSNR over a flat image of the training images' mean colour
            "vanilla_over_flat": paired(metrics, s, "vanilla", "flat", "test_psnr"),
            "energs_over_flat": paired(metrics, s, "energs", "flat", "test_psnr"),
            "hard_over_flat_blind": paired(metrics, s, "hard_prior", "flat", "blind_psnr"),
            "init_over_flat_blind": paired(metrics, s, "lidar_init", "flat", "blind_psnr"),
            # the constraint alone (same LiDAR initialisation, same seeds, with and without the loss)
            "constraint_chamfer": paired(metrics, s, "hard_prior", "lidar_init", "blind_chamfer"),
            "constraint_blind_psnr": paired(metrics, s, "lidar_init", "hard_prior", "blind_psnr"),
        }
    return out


def _mean(values, setting):
    from compendium.stats import mean_interval
    return mean_interval(np.asarray(values, float), unit=f"training seeds ({setting})")
