"""The 16-D class-conditional rectified-flow toy: exact geometry and the ground-truth factors z_dep, z_ind."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from .core import (build_e_target, decompose_on_axis, density_coverage, optimise_x0_to_target, rf_velocity_from_x0,
                   orthogonal_candidates, projection_spread, select_u_ind, vendi_score)

DIM = 16
EMB = 32


# ----------------------------------------------------------------------------------------------
# data, "CLIP", flow model
# ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Toy:
    """The generative geometry: class directions, the off-class direction, factor scales."""

    classes: np.ndarray  # (K, DIM) orthonormal
    d_ind: np.ndarray  # (DIM,) orthogonal to every class direction
    s_dep: float = 0.8
    s_ind: float = 0.8
    s_noise: float = 0.3


def make_toy(num_classes: int, rng: np.random.Generator) -> Toy:
    q, _ = np.linalg.qr(rng.standard_normal((DIM, num_classes + 1)))
    return Toy(classes=q[:, :num_classes].T.copy(), d_ind=q[:, num_classes].copy())


def sample_data(toy: Toy, labels: np.ndarray, rng: np.random.Generator):
    """Return (x, z_dep, z_ind) for the given labels."""
    n = len(labels)
    z_dep, z_ind = rng.standard_normal(n), rng.standard_normal(n)
    c = toy.classes[labels]
    x = (3.0 + toy.s_dep * z_dep)[:, None] * c + toy.s_ind * z_ind[:, None] * toy.d_ind[None]
    x = x + toy.s_noise * rng.standard_normal((n, DIM))
    return x.astype(np.float32), z_dep, z_ind


class Encoder(nn.Module):
    """Fixed random 'CLIP' φ: R^16 -> S^31 (two tanh layers, then normalise). Not CLIP."""

    def __init__(self, seed: int):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.w1 = nn.Parameter(torch.randn(DIM, 64, generator=g) / DIM ** 0.5, requires_grad=False)
        self.w2 = nn.Parameter(torch.randn(64, EMB, generator=g) / 8.0, requires_grad=False)

    def forward(self, x):
        h = torch.tanh(torch.tanh(x @ self.w1) @ self.w2 * 2.0)
        return h / h.norm(dim=-1, keepdim=True)


class FlowMLP(nn.Module):
    """Velocity net v(x_σ, σ, class); class index K is the null label for CFG."""

    def __init__(self, num_classes: int, hidden: int = 128):
        super().__init__()
        self.emb = nn.Embedding(num_classes + 1, 32)
        self.net = nn.Sequential(nn.Linear(DIM + 1 + 32, hidden), nn.SiLU(), nn.Linear(hidden, hidden),
                                 nn.SiLU(), nn.Linear(hidden, DIM))
        self.num_classes = num_classes

    def forward(self, x, sigma, label):
        return self.net(torch.cat([x, sigma[:, None], self.emb(label)], dim=-1))


def train_flow(toy: Toy, num_classes: int, steps: int, seed: int, batch: int = 256) -> FlowMLP:
    """Rectified-flow regression with 10 % label dropout (for CFG)."""
    rng = np.random.default_rng(seed)
    torch.manual_seed(seed)
    model = FlowMLP(num_classes)
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    for _ in range(steps):
        labels = rng.integers(0, num_classes, batch)
        x0 = torch.from_numpy(sample_data(toy, labels, rng)[0])
        lab = torch.from_numpy(np.where(rng.random(batch) < 0.1, num_classes, labels))
        sigma = torch.rand(batch)
        eps = torch.randn(batch, DIM)
        xs = (1 - sigma[:, None]) * x0 + sigma[:, None] * eps
        loss = ((model(xs, sigma, lab) - (eps - x0)) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    return model


@dataclass(frozen=True)
class Arm:
    name: str
    cfg: float = 5.0
    w1: float = 0.0
    w2: float = 0.0
    r: float = 0.02
    guided: bool = False


def sample(model, encoder, e_t, label, n, arm: Arm, rng, steps=20, guided_steps=5, u_ind=None):
    """CFG Euler sampler; with ``arm.guided`` the GASS hook rewrites v at the first steps."""
    g = torch.Generator().manual_seed(int(rng.integers(2 ** 31)))
    x = torch.randn(n, DIM, generator=g)
    sig = torch.linspace(1.0, 0.0, steps + 1)
    lab_c = torch.full((n,), label)
    lab_u = torch.full((n,), model.num_classes)
    hook_rng = np.random.default_rng(int(rng.integers(2 ** 31)))
    moved = []
    for i in range(steps):
        s = sig[i].expand(n)
        with torch.no_grad():
            vc, vu = model(x, s, lab_c), model(x, s, lab_u)
            v = vu + arm.cfg * (vc - vu)
        if arm.guided and i < guided_steps:
            x0 = x - sig[i] * v
            with torch.no_grad():
                E = encoder(x0).double().numpy()
            tgt, u_ind = build_e_target(E, e_t, arm.w1, arm.w2, arm.r, arm.r,
                                        np.random.default_rng(hook_rng.integers(2 ** 31)), u_ind=u_ind)
            x0n, _ = optimise_x0_to_target(x0, tgt.astype(np.float32), encoder)
            moved.append(float((x0n - x0).norm(dim=-1).mean()))
            v = rf_velocity_from_x0(x, x0n, sig[i])
        x = x + (sig[i + 1] - sig[i]) * v
    return x.numpy(), moved


# ----------------------------------------------------------------------------------------------
# experiment
# ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Config:
    """Parameters of one run (names match the notebook's parameters cell)."""

    seed: int = 0
    num_models: int = 3
    num_classes: int = 2
    train_steps: int = 1000
    batch_size: int = 16
    num_batches: int = 4
    sampler_steps: int = 20
    guided_steps: int = 5
    cfg: float = 5.0
    low_cfg_grid: tuple = (1.0, 2.0, 3.0)
    r: float = 0.02
    real_per_class: int = 500
    arm_names: tuple | None = None  # None: every arm; else the subset to sample (in this order)
    planted: float = 0.1  # the power control: vanilla's samples with both factor spreads raised by this fraction

    def __post_init__(self) -> None:
        object.__setattr__(self, "low_cfg_grid", tuple(float(v) for v in self.low_cfg_grid))  # lists from the registry
        if self.arm_names is not None:
            object.__setattr__(self, "arm_names", tuple(self.arm_names))
        if self.num_models < 2:
            raise ValueError("num_models must be >= 2 (the unit of the seed-SD)")
        if self.num_batches < 2 or self.batch_size < 4:
            raise ValueError("num_batches >= 2 and batch_size >= 4 needed")
        if not 0 < self.guided_steps <= self.sampler_steps:
            raise ValueError("0 < guided_steps <= sampler_steps")


@dataclass(frozen=True)
class Result:
    """Per arm, per model, per batch metrics (arrays of shape (num_models, num_batches*K))."""

    metrics: dict
    arms: dict = field(default_factory=dict)
    planes: dict = field(default_factory=dict)


def _arms(config: Config) -> list[Arm]:
    w, r = config.cfg, config.r
    arms = [Arm("vanilla", w), Arm("gass", w, 1, 1, r, True), Arm("dep_only", w, 1, 0, r, True),
            Arm("ind_only", w, 0, 1, r, True), Arm("as_released", w, 0, 0, r, True)]
    arms += [Arm(f"cfg_{c:g}", c) for c in config.low_cfg_grid]
    if config.arm_names is not None:
        by_name = {a.name: a for a in arms}
        arms = [by_name[n] for n in config.arm_names]
    return arms


def plant_spread(x: np.ndarray, axes, fraction: float) -> np.ndarray:
    """``x`` with its spread along each of the orthonormal ``axes`` raised by ``fraction`` (about the
    batch mean): a known raise of both factor spreads, which the raise rows' test must detect."""
    x = np.array(x, dtype=np.float32, copy=True)
    centred = x - x.mean(0)
    for axis in axes:
        axis = np.asarray(axis, dtype=np.float32)
        x += fraction * np.outer(centred @ axis, axis)
    return x


def run(config: Config) -> Result:
    """Train ``num_models`` flows, sample every arm in paired batches, measure."""
    toy = make_toy(config.num_classes, np.random.default_rng(1000 + config.seed))
    encoder = Encoder(2000 + config.seed)
    data_rng = np.random.default_rng(3000 + config.seed)
    real, e_t, u_fixed = {}, {}, {}
    for k in range(config.num_classes):
        x, _, _ = sample_data(toy, np.full(config.real_per_class, k), data_rng)
        real[k] = x
        with torch.no_grad():
            m = encoder(torch.from_numpy(x)).double().numpy().mean(0)
        e_t[k] = m / np.linalg.norm(m)
        # u_ind of the metrics: selected once per class from real residuals (fixed axis to measure on)
        _, R = decompose_on_axis(encoder(torch.from_numpy(x)).detach().double().numpy(), e_t[k])
        u_fixed[k] = select_u_ind(R, orthogonal_candidates(e_t[k], 10, np.random.default_rng(42 + k)))
    arms = _arms(config)
    keys = ("dep", "ind", "vendi", "align", "density", "coverage", "zdep", "zind")
    names = [a.name for a in arms] + (["planted"] if config.planted > 0 and "vanilla" in [a.name for a in arms] else [])
    out = {n: {m: np.zeros((config.num_models, config.num_batches * config.num_classes)) for m in keys}
           for n in names}
    moved = {a.name: [] for a in arms}
    real_stats = {}
    planes = {}
    for j in range(config.num_models):
        model = train_flow(toy, config.num_classes, config.train_steps, seed=10_000 * (config.seed + 1) + j)
        for k in range(config.num_classes):
            for b in range(config.num_batches):
                col = k * config.num_batches + b
                seed_b = 7_919 * (config.seed + 1) + 1_009 * j + 101 * k + b
                for arm in arms:
                    rng = np.random.default_rng(seed_b)  # same noise for every arm: paired batches
                    x, mv = sample(model, encoder, e_t[k], k, config.batch_size, arm, rng,
                                   config.sampler_steps, config.guided_steps, u_ind=u_fixed[k])
                    moved[arm.name] += mv
                    batches = [(arm.name, x)]
                    if arm.name == "vanilla" and "planted" in out:
                        batches.append(("planted", plant_spread(x, (toy.classes[k], toy.d_ind), config.planted)))
                    for name, xb in batches:
                        with torch.no_grad():
                            E = encoder(torch.from_numpy(xb)).double().numpy()
                        o = out[name]
                        o["dep"][j, col] = projection_spread(E, e_t[k])
                        o["ind"][j, col] = projection_spread(E, u_fixed[k])
                        o["vendi"][j, col] = vendi_score(E)
                        o["align"][j, col] = float((E @ e_t[k]).mean())
                        o["density"][j, col], o["coverage"][j, col] = density_coverage(real[k], xb)
                        o["zdep"][j, col] = float(np.std(xb @ toy.classes[k], ddof=1))
                        o["zind"][j, col] = float(np.std(xb @ toy.d_ind, ddof=1))
                    if j == 0 and k == 0 and b == 0 and arm.name in ("vanilla", "gass"):
                        planes[arm.name] = np.stack([E @ e_t[k], E @ u_fixed[k]], 1)
    for k in range(config.num_classes):
        E = encoder(torch.from_numpy(real[k][: config.batch_size * 8])).detach().double().numpy()
        real_stats.setdefault("dep", []).append(projection_spread(E, e_t[k]))
        real_stats.setdefault("align", []).append(float((E @ e_t[k]).mean()))
    with torch.no_grad():
        Er = encoder(torch.from_numpy(real[0][:200])).double().numpy()
    planes["real"] = np.stack([Er @ e_t[0], Er @ u_fixed[0]], 1)
    metrics = {"real_dep_spread": float(np.mean(real_stats["dep"])),
               "real_align": float(np.mean(real_stats["align"])),
               "moved": {a: (float(np.mean(v)) if v else 0.0) for a, v in moved.items()},
               "planted": config.planted}
    return Result(metrics=metrics, arms=out, planes=planes)
