"""The small Point-MAE-style backbone of top_adapter and its masked-group pretraining (ours, inferred).

- ``superquadric(n, rng)``: the pretraining distribution (unlabelled, unlike TopoShapes): points on a
  random superquadric |x/a|^(2/e2) ... with exponents e1, e2 in [0.3, 2], random axes and rotation.
- ``PointBackbone(d, depth, heads)``: mini-PointNet group tokenizer (per point 3 -> 32 -> 64, max,
  concat with the per-point features, 128 -> d, max), a positional MLP of the group centre, a class
  token and ``depth`` pre-LN transformer blocks (``Block``: attention through one ``qkv`` Linear, so
  peft's LoRA can target it). ``encode`` takes optional per-layer hooks so every PEFT method runs
  through the same code: ``add[l]`` (B, G, D) added to the group tokens before block l (ToTransfer),
  ``prompts[l]`` (P, D) prompt tokens replaced before block l (VPT-deep), ``adapters[l]`` a module
  applied residually after block l (bottleneck adapter), ``dynamic = (l, module)`` prompt tokens
  (B, P, D) that ``module`` generates from the group tokens entering block l, inserted before it
  (IDPT-like). The feature is [cls; max over groups] (2D).
- Pretraining (``pretrain``): 60 % of the groups are masked; the encoder sees the visible ones, a
  one-block decoder gets mask tokens + centre positions and predicts each masked group's k centred
  points, loss Chamfer-L2 (``chamfer_l2``). Trained with ``compendium.training.fit``.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from compendium.training import TrainSpec, fit, seeded_init

from .points import group, random_se3


def superquadric(n: int, rng: np.random.Generator, noise: float = 0.01) -> np.ndarray:
    """``n`` points (float32, (n, 3)) on a random superquadric, randomly rotated and noised."""
    e1, e2 = rng.uniform(0.3, 2.0, size=2)
    axes = rng.uniform(0.4, 1.2, size=3)
    eta = rng.uniform(-np.pi / 2, np.pi / 2, n)
    om = rng.uniform(-np.pi, np.pi, n)

    def f(w, e):
        return np.sign(np.cos(w)) * np.abs(np.cos(w)) ** e, np.sign(np.sin(w)) * np.abs(np.sin(w)) ** e

    ce, se = f(eta, e1)
    co, so = f(om, e2)
    pts = np.stack([axes[0] * ce * co, axes[1] * ce * so, axes[2] * se], -1)
    rot, _ = random_se3(rng)
    pts = (pts - pts.mean(0)) @ rot.T
    return (pts + rng.normal(scale=noise, size=pts.shape)).astype(np.float32)


def chamfer_l2(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Symmetric Chamfer-L2 between point sets a (..., n, 3) and b (..., m, 3), mean over the batch."""
    d = torch.cdist(a, b).pow(2)
    return d.min(-1).values.mean() + d.min(-2).values.mean()


class Block(nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, D = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(B, T, 3, self.heads, D // self.heads).permute(2, 0, 3, 1, 4)
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v)
        x = x + self.proj(a.transpose(1, 2).reshape(B, T, D))
        return x + self.fc2(torch.nn.functional.gelu(self.fc1(self.norm2(x))))


class PointBackbone(nn.Module):
    def __init__(self, d: int = 96, depth: int = 4, heads: int = 4):
        super().__init__()
        self.d, self.depth = d, depth
        self.point1 = nn.Sequential(nn.Linear(3, 32), nn.GELU(), nn.Linear(32, 64))
        self.point2 = nn.Sequential(nn.Linear(128, 128), nn.GELU(), nn.Linear(128, d))
        self.pos = nn.Sequential(nn.Linear(3, 64), nn.GELU(), nn.Linear(64, d))
        self.cls = nn.Parameter(torch.zeros(1, 1, d))
        self.cls_pos = nn.Parameter(torch.zeros(1, 1, d))
        nn.init.normal_(self.cls, std=0.02)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(depth))
        self.norm = nn.LayerNorm(d)

    def tokenize(self, neigh: torch.Tensor) -> torch.Tensor:
        """neigh (B, G, k, 3) centred groups -> tokens (B, G, D)."""
        f = self.point1(neigh)
        f = torch.cat([f, f.max(2, keepdim=True).values.expand_as(f)], -1)
        return self.point2(f).max(2).values

    def encode(self, tokens: torch.Tensor, centers: torch.Tensor, add=None, prompts=None, adapters=None,
               pooled: bool = True, dynamic=None) -> torch.Tensor:
        """tokens (B, G, D), centers (B, G, 3) -> feature (B, 2D) (or all tokens (B, 1+G, D))."""
        B, G, _ = tokens.shape
        x = torch.cat([self.cls.expand(B, -1, -1), tokens], 1)
        pos = torch.cat([self.cls_pos.expand(B, -1, -1), self.pos(centers)], 1)
        n_p = 0
        for layer, block in enumerate(self.blocks):
            if add is not None:
                x = torch.cat([x[:, :1 + n_p], x[:, 1 + n_p:] + add[layer]], 1)
            if prompts is not None:
                p = prompts[layer].expand(B, -1, -1)
                x = torch.cat([x[:, :1], p, x[:, 1 + n_p:]], 1)
                pos = torch.cat([pos[:, :1], torch.zeros_like(p), pos[:, 1 + n_p:]], 1)
                n_p = p.shape[1]
            if dynamic is not None and layer == dynamic[0]:
                p = dynamic[1](x[:, 1 + n_p:])
                x = torch.cat([x[:, :1], p, x[:, 1 + n_p:]], 1)
                pos = torch.cat([pos[:, :1], torch.zeros_like(p), pos[:, 1 + n_p:]], 1)
                n_p = p.shape[1]
            x = block(x + pos)
            if adapters is not None:
                x = x + adapters[layer](x)
        x = self.norm(x)
        if not pooled:
            return x
        return torch.cat([x[:, 0], x[:, 1 + n_p:].max(1).values], -1)

    def forward(self, neigh: torch.Tensor, centers: torch.Tensor) -> torch.Tensor:
        return self.encode(self.tokenize(neigh), centers)


class MaskedDecoder(nn.Module):
    def __init__(self, d: int, k: int, heads: int = 4):
        super().__init__()
        self.k = k
        self.mask_token = nn.Parameter(torch.zeros(1, 1, d))
        self.pos = nn.Sequential(nn.Linear(3, 64), nn.GELU(), nn.Linear(64, d))
        self.block = Block(d, heads)
        self.norm = nn.LayerNorm(d)
        self.out = nn.Linear(d, 3 * k)

    def forward(self, visible: torch.Tensor, vis_centers: torch.Tensor, mask_centers: torch.Tensor) -> torch.Tensor:
        B, M, _ = mask_centers.shape
        x = torch.cat([visible, self.mask_token.expand(B, M, -1)], 1)
        x = x + torch.cat([self.pos(vis_centers), self.pos(mask_centers)], 1)
        x = self.norm(self.block(x))[:, -M:]
        return self.out(x).view(B, M, self.k, 3)


def grouped_clouds(clouds: np.ndarray, n_groups: int, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(C, N, 3) clouds -> centred groups (C, G, k, 3) and centres (C, G, 3), in float32."""
    pts = torch.as_tensor(clouds, dtype=torch.float32)
    return group(pts, n_groups, k)


def pretrain(n_clouds: int, n_points: int, n_groups: int, k: int, d: int, depth: int, steps: int,
             batch: int, seed: int, mask_ratio: float = 0.6, lr: float = 1e-3) -> tuple[PointBackbone, dict]:
    """Masked-group Chamfer pretraining on ``n_clouds`` superquadrics; returns (backbone, log dict)."""
    rng = np.random.default_rng(seed)
    clouds = np.stack([superquadric(n_points, rng) for _ in range(n_clouds)])
    neigh, centers = grouped_clouds(clouds, n_groups, k)
    with seeded_init(seed):
        enc, dec = PointBackbone(d, depth), MaskedDecoder(d, k)
    model = nn.ModuleDict({"enc": enc, "dec": dec})
    n_mask = int(round(mask_ratio * n_groups))
    gen = torch.Generator().manual_seed(seed)

    def loss_fn(step: int) -> torch.Tensor:
        idx = torch.randint(n_clouds, (batch,), generator=gen)
        order = torch.rand(batch, n_groups, generator=gen).argsort(1)
        mask, vis = order[:, :n_mask], order[:, n_mask:]
        nb, cb = neigh[idx], centers[idx]
        take = lambda t, i: t.gather(1, i.view(*i.shape, *([1] * (t.ndim - 2))).expand(-1, -1, *t.shape[2:]))
        tok = enc.tokenize(take(nb, vis))
        h = enc.encode(tok, take(cb, vis), pooled=False)[:, 1:]
        pred = dec(h, take(cb, vis), take(cb, mask))
        return chamfer_l2(pred.reshape(-1, k, 3), take(nb, mask).reshape(-1, k, 3))

    spec = TrainSpec(max_steps=steps, learning_rate=lr, warmup_steps=max(1, steps // 10), schedule="cosine",
                     grad_clip=1.0, log_every=max(1, steps // 10))
    log = fit(model, loss_fn, spec)
    enc.eval()
    return enc, {"train": log.to_dict(), "final_loss": float(log.final_loss), "mask_ratio": mask_ratio,
                 "first_logged_loss": float(log.losses[0][1]) if log.losses else math.nan}
