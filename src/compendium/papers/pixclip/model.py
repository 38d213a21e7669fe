"""PixCLIP-toy encoders, the three inferred branch losses, training and the retrieval metrics.

Ours: the tiny ViT with its zero-initialised alpha (mask) patch embedding (as in the released
EVA02 code, ``x = patch_embed(I) + alpha_patch_embed(M)``), the box crop by ``grid_sample``, the
branch losses (inferred from summaries, see the package docstring). From libraries: the text
encoder is ``transformers.BertModel`` built from a ``BertConfig`` (random init, mean pooling), the
contrastive loss is :func:`compendium.losses.info_nce` (symmetric), training is
:func:`compendium.training.fit`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F
from transformers import BertConfig, BertModel

from compendium.losses import info_nce
from compendium.training import TrainSpec, fit, seeded_init

from . import scenes as S

MASK_MEAN, MASK_STD = 0.5, 0.26       # the released inference snippet's mask normalisation


class AlphaViT(nn.Module):
    """Tiny ViT (patch 4, width d) whose input is ``patch_embed(I) + alpha_embed(M)``.

    ``forward(images (B, 3, 32, 32), masks (B, 1, 32, 32) in {0, 1}) -> (B, embed)``.
    """

    def __init__(self, dim: int = 64, depth: int = 2, heads: int = 4, embed: int = 64, patch: int = 4):
        super().__init__()
        self.patch_embed = nn.Conv2d(3, dim, patch, patch)
        self.alpha_embed = nn.Conv2d(1, dim, patch, patch, bias=False)
        nn.init.zeros_(self.alpha_embed.weight)
        n = (S.SIDE // patch) ** 2
        self.cls = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos = nn.Parameter(0.02 * torch.randn(1, n + 1, dim))
        layer = nn.TransformerEncoderLayer(dim, heads, 2 * dim, dropout=0.0, batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(dim)
        self.proj = nn.Linear(dim, embed)

    def tokens(self, images, masks):
        return self.patch_embed(images) + self.alpha_embed((masks - MASK_MEAN) / MASK_STD)

    def fused_tokens(self, images, masks):
        """The same patch tokens from one 4-channel convolution (the fused form)."""
        w = torch.cat([self.patch_embed.weight, self.alpha_embed.weight / MASK_STD], 1)
        b = self.patch_embed.bias - self.alpha_embed.weight.sum((1, 2, 3)) * MASK_MEAN / MASK_STD
        return F.conv2d(torch.cat([images, masks], 1), w, b, stride=self.patch_embed.stride)

    def forward(self, images, masks):
        x = self.tokens(images, masks).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(len(x), -1, -1), x], 1) + self.pos
        return self.proj(self.norm(self.blocks(x)[:, 0]))


class TextEncoder(nn.Module):
    """``transformers.BertModel`` from a config (random init), mean pooling over real tokens, projection."""

    def __init__(self, dim: int = 64, depth: int = 2, heads: int = 4, embed: int = 64):
        super().__init__()
        cfg = BertConfig(vocab_size=len(S.VOCAB), hidden_size=dim, num_hidden_layers=depth, num_attention_heads=heads,
                         intermediate_size=2 * dim, max_position_embeddings=S.MAX_GLOBAL_TOKENS + 2,
                         hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, pad_token_id=S.PAD)
        self.bert = BertModel(cfg, add_pooling_layer=False)
        self.proj = nn.Linear(dim, embed)

    def forward(self, ids):
        keep = (ids != S.PAD).long()
        h = self.bert(input_ids=ids, attention_mask=keep).last_hidden_state
        w = keep.unsqueeze(-1).float()
        return self.proj((h * w).sum(1) / w.sum(1).clamp_min(1.0))


class DualEncoder(nn.Module):
    def __init__(self, dim: int = 64):
        super().__init__()
        self.vision, self.text = AlphaViT(dim, embed=dim), TextEncoder(dim, embed=dim)


def crop_resize(images: torch.Tensor, boxes: torch.Tensor, mode: str = "bilinear") -> torch.Tensor:
    """Crop ``boxes (R, 4)`` = half-open pixel ``(y0, x0, y1, x1)`` from ``images (R, C, H, W)`` and
    resize each crop to ``H x W`` (``grid_sample``, pixel centres, zero padding)."""
    R, _, H, W = images.shape
    b = boxes.to(images.dtype)
    theta = torch.zeros(R, 2, 3, dtype=images.dtype)
    theta[:, 0, 0] = (b[:, 3] - b[:, 1]) / W
    theta[:, 0, 2] = (b[:, 3] + b[:, 1]) / W - 1
    theta[:, 1, 1] = (b[:, 2] - b[:, 0]) / H
    theta[:, 1, 2] = (b[:, 2] + b[:, 0]) / H - 1
    grid = F.affine_grid(theta, (R, images.shape[1], H, W), align_corners=False)
    return F.grid_sample(images, grid, mode=mode, padding_mode="zeros", align_corners=False)


# name -> (uses mask, short text, image zeroed, weight L1, L2, L3, L3 form)
VARIANTS = {
    "a_clip_short": (False, True, False, 1.0, 0.0, 0.0, None),
    "b_mask_short": (True, True, False, 1.0, 0.0, 0.0, None),
    "c_long_nomask": (False, False, False, 1.0, 0.0, 0.0, None),
    "d_pixclip": (True, False, False, 1.0, 0.5, 0.5, "distill"),
    "d_pixclip_l3global": (True, False, False, 1.0, 0.5, 0.5, "global"),
    "d_minus_l2": (True, False, False, 1.0, 0.0, 0.5, "distill"),
    "d_minus_l3": (True, False, False, 1.0, 0.5, 0.0, None),
    "mask_only": (True, False, True, 1.0, 0.5, 0.5, "distill"),
    "global_clip": (False, False, False, 0.0, 0.0, 1.0, "global"),
}


@dataclass(frozen=True)
class TrainSettings:
    steps: int = 300
    batch_scenes: int = 16
    train_scenes: int = 2000
    lr: float = 2e-3
    temperature: float = 0.07
    dim: int = 64


def _tensors(sc: S.Scenes, which: str = "box"):
    """Flatten the valid regions: (scene index (R,), masks (R, 1, 32, 32), boxes (R, 4), texts (R, L))."""
    idx = np.nonzero(sc.valid)
    masks = (sc.box if which == "box" else sc.exact)[idx]
    boxes = np.array([S.mask_to_bbox(m) for m in sc.box[idx]])
    return idx, torch.from_numpy(masks[:, None].astype(np.float32)), torch.from_numpy(boxes)


def region_views(model, variant, images, masks):
    use_mask, _, zero, *_ = VARIANTS[variant]
    if zero:
        images = torch.zeros_like(images)
    if not use_mask:
        masks = torch.ones_like(masks)
    return model.vision(images, masks)


def text_view(model, variant, ids):
    if VARIANTS[variant][1]:
        ids = ids.clone()
        ids[:, S.SHORT_TOKENS:] = S.PAD
    return model.text(ids)


def branch_losses(model, variant, batch, temperature):
    """The weighted sum and the parts ``{"L1", "L2", "L3"}`` for one batch (dict of tensors).

    L1 = InfoNCE(f_v(I, M_r), f_t(T_r)) over every region of the batch (same-image regions are
    negatives); L2 = InfoNCE(f_v(crop(I), crop(M_r)), f_t(T_r)); L3 "distill" =
    1 - cos(f_v(I, M_r), sg[f_v(crop)]) + InfoNCE(f_v(I, 1), f_t(T_global)); L3 "global" = the
    global term only. All InfoNCE terms symmetric, from :func:`compendium.losses.info_nce`.
    """
    use_mask, _, zero, w1, w2, w3, form = VARIANTS[variant]
    img = batch["images"][batch["scene"]]
    parts, total = {}, 0.0
    t = text_view(model, variant, batch["texts"]) if (w1 or w2) else None
    v = region_views(model, variant, img, batch["masks"]) if (w1 or form == "distill") else None
    if w1:
        parts["L1"] = info_nce(v, t, temperature=temperature, symmetric=True)
        total = total + w1 * parts["L1"]
    vc = None
    if w2 or form == "distill":
        ci, cm = crop_resize(img, batch["boxes"]), crop_resize(batch["masks"], batch["boxes"], "nearest")
        vc = region_views(model, variant, ci, cm)
    if w2:
        parts["L2"] = info_nce(vc, t, temperature=temperature, symmetric=True)
        total = total + w2 * parts["L2"]
    if w3:
        gi = batch["images"] * (0.0 if zero else 1.0)
        g = model.vision(gi, torch.ones_like(gi[:, :1]))
        l3 = info_nce(g, model.text(batch["global"]), temperature=temperature, symmetric=True)
        if form == "distill":
            l3 = l3 + (1 - F.cosine_similarity(v, vc.detach(), dim=-1)).mean()
        parts["L3"] = l3
        total = total + w3 * l3
    return total, parts


def make_batches(sc: S.Scenes):
    """Training tensors of a scene pool (box masks)."""
    idx, masks, boxes = _tensors(sc, "box")
    texts = S.region_tokens(sc)[idx]
    return {"images": torch.from_numpy(sc.images), "scene": torch.from_numpy(idx[0]), "masks": masks,
            "boxes": boxes, "texts": torch.from_numpy(texts), "global": torch.from_numpy(S.global_tokens(sc))}


def train_variant(variant: str, settings: TrainSettings, seed: int, pool=None):
    """Train one variant; returns ``(model, log dict)``. ``seed`` fixes init, scene pool and batches."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; choose from {sorted(VARIANTS)}")
    if pool is None:
        pool = make_batches(S.make_scenes(settings.train_scenes, np.random.default_rng([seed, 1])))
    with seeded_init(seed):
        model = DualEncoder(settings.dim)
    rng = np.random.default_rng([seed, 2])
    scene_of = pool["scene"].numpy()
    n = len(pool["images"])

    def loss_fn(step):
        pick = np.sort(rng.choice(n, settings.batch_scenes, replace=False))
        rows = np.nonzero(np.isin(scene_of, pick))[0]
        remap = np.full(n, -1)
        remap[pick] = np.arange(len(pick))
        batch = {"images": pool["images"][pick], "global": pool["global"][pick],
                 "scene": torch.from_numpy(remap[scene_of[rows]]), "masks": pool["masks"][rows],
                 "boxes": pool["boxes"][rows], "texts": pool["texts"][rows]}
        return branch_losses(model, variant, batch, settings.temperature)[0]

    spec = TrainSpec(max_steps=settings.steps, learning_rate=settings.lr, warmup_steps=settings.steps // 10,
                     schedule="cosine", grad_clip=1.0, threads=1, log_every=max(1, settings.steps // 10))
    log = fit(model, loss_fn, spec)
    model.eval()
    return model, log.to_dict()


def _choice_accuracy(true_sim: np.ndarray, foil_sim: np.ndarray) -> np.ndarray:
    """Two-alternative choice per item: 1 if the true text scores higher, 0.5 on a tie, else 0."""
    return np.where(np.isclose(true_sim, foil_sim, rtol=0, atol=1e-6), 0.5, (true_sim > foil_sim).astype(float))


def recall_at_1(sim: np.ndarray, target: np.ndarray) -> float:
    """R@1 of rows of ``sim (Q, N)`` against ``target (Q,)``; ties share the credit (1 / #tied)."""
    sim = np.asarray(sim, float)
    best = sim.max(1, keepdims=True)
    tied = np.isclose(sim, best, rtol=0, atol=1e-6)
    hit = tied[np.arange(len(sim)), target]
    return float(np.mean(hit / tied.sum(1)))


@torch.no_grad()
def evaluate(model, variant: str, sc: S.Scenes, rng: np.random.Generator, group: int = 32) -> dict:
    """Metrics in percent on test scenes; region metrics on held-out (colour, shape) regions only."""
    images = torch.from_numpy(sc.images)
    idx, box_m, _ = _tensors(sc, "box")
    _, exact_m, _ = _tensors(sc, "exact")
    img = images[idx[0]]
    unit = lambda x: F.normalize(x, dim=-1).numpy()
    t_true = unit(text_view(model, variant, torch.from_numpy(S.region_tokens(sc)[idx])))
    foils = {k: unit(text_view(model, variant, torch.from_numpy(S.region_tokens(sc, k, rng)[idx])))
             for k in ("colour", "texture")}
    held = np.array([(int(c), int(s)) in set(S.HELD_OUT) for s, c in sc.attrs[idx][:, :2]])
    out = {}
    for which, m in (("box", box_m), ("exact", exact_m)):
        v = unit(region_views(model, variant, img, m))
        hits, chance = [], []
        for i in np.unique(idx[0]):
            rows = np.nonzero(idx[0] == i)[0]
            sim = v[rows] @ t_true[rows].T
            for q, r in enumerate(rows):
                if held[r]:
                    hits.append(recall_at_1(sim[q:q + 1], np.array([q])))
                    chance.append(1 / len(rows))
        out[f"region_r1_{which}"] = 100 * float(np.mean(hits))
        if which == "box":
            out["region_chance"] = 100 * float(np.mean(chance))
            true_s = (v * t_true).sum(1)
            acc = {k: _choice_accuracy(true_s, (v * f).sum(1)) for k, f in foils.items()}
            late = sc.late[idx[0]] & held
            out["late_choice"] = 100 * float(acc["colour"][late].mean())
            out["attribute_choice"] = 100 * float(np.concatenate([acc["colour"][held], acc["texture"][held]]).mean())
    g = unit(model.vision(images, torch.ones_like(images[:, :1])))
    tg = unit(model.text(torch.from_numpy(S.global_tokens(sc))))
    r1 = [recall_at_1(g[s:s + group] @ tg[s:s + group].T, np.arange(len(g[s:s + group])))
          for s in range(0, len(g) - group + 1, group)]
    out["global_r1"] = 100 * float(np.mean(r1))
    out["global_chance"] = 100.0 / group
    return out
