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
    """Tiny ViT (patch ``patch``, width d) whose input is ``patch_embed(I) + alpha_embed(M)``.

    ``forward(images (B, 3, 32, 32), masks (B, 1, 32, 32) in {0, 1}) -> (B, embed)``.
    """

    def __init__(self, dim: int = 64, depth: int = 2, heads: int = 4, embed: int = 64, patch: int = 8):
        super().__init__()
        if S.SIDE % patch:
            raise ValueError(f"patch must divide {S.SIDE}, got {patch}")
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
                         intermediate_size=2 * dim,
                         max_position_embeddings=max(S.MAX_REGION_TOKENS, S.MAX_GLOBAL_TOKENS) + 2,
                         hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, pad_token_id=S.PAD)
        self.bert = BertModel(cfg, add_pooling_layer=False)
        self.proj = nn.Linear(dim, embed)

    def forward(self, ids):
        keep = (ids != S.PAD).long()
        h = self.bert(input_ids=ids, attention_mask=keep).last_hidden_state
        w = keep.unsqueeze(-1).float()
        return self.proj((h * w).sum(1) / w.sum(1).clamp_min(1.0))


class DualEncoder(nn.Module):
    def __init__(self, dim: int = 32, patch: int = 8, vit_depth: int = 1):
        super().__init__()
        self.vision, self.text = AlphaViT(dim, vit_depth, embed=dim, patch=patch), TextEncoder(dim, embed=dim)


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


# name -> (uses mask, short text, image zeroed, weight L1, L2, L3, L3 form); "chosen" = the form picked
# on the dev split (see experiment.build_asset), "other" = the form not picked (trained for that choice)
VARIANTS = {
    "a_clip_short": (False, True, False, 1.0, 0.0, 0.0, None),
    "b_mask_short": (True, True, False, 1.0, 0.0, 0.0, None),
    "c_long_nomask": (False, False, False, 1.0, 0.0, 0.0, None),
    "d_pixclip": (True, False, False, 1.0, 0.5, 0.5, "chosen"),
    "d_pixclip_other": (True, False, False, 1.0, 0.5, 0.5, "other"),
    "d_minus_l2": (True, False, False, 1.0, 0.0, 0.5, "chosen"),
    "d_minus_l3": (True, False, False, 1.0, 0.5, 0.0, None),
    "mask_only": (True, False, True, 1.0, 0.5, 0.5, "chosen"),
    "global_clip": (False, False, False, 0.0, 0.0, 1.0, "global"),
}
L3_FORMS = ("distill", "global")


@dataclass(frozen=True)
class TrainSettings:
    steps: int = 300
    batch_scenes: int = 16
    train_scenes: int = 2000
    lr: float = 3e-3
    temperature: float = 0.07
    dim: int = 32
    patch: int = 8
    vit_depth: int = 1


def resolve_form(variant: str, l3_form: str) -> str | None:
    """The L3 form a variant trains with, given the dev-chosen form ``l3_form``."""
    if l3_form not in L3_FORMS:
        raise ValueError(f"l3_form must be one of {L3_FORMS}, got {l3_form!r}")
    form = VARIANTS[variant][6]
    if form == "chosen":
        return l3_form
    if form == "other":
        return L3_FORMS[1 - L3_FORMS.index(l3_form)]
    return form


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


def _pad_to(ids: torch.Tensor, length: int) -> torch.Tensor:
    return F.pad(ids, (0, length - ids.shape[1]), value=S.PAD) if ids.shape[1] < length else ids


def branch_losses(model, variant, batch, temperature, l3_form: str = "distill"):
    """The weighted sum and the parts ``{"L1", "L2", "L3"}`` for one batch (dict of tensors).

    L1 = InfoNCE(f_v(I, M_r), f_t(T_r)) over every region of the batch (same-image regions are
    negatives); L2 = InfoNCE(f_v(crop(I), crop(M_r)), f_t(T_r)); L3 "distill" =
    1 - cos(f_v(I, M_r), sg[f_v(crop)]) + InfoNCE(f_v(I, 1), f_t(T_global)); L3 "global" = the
    global term only. All InfoNCE terms symmetric, from :func:`compendium.losses.info_nce`.
    Every view the variant needs goes through the vision encoder in one call and every text
    through the text encoder in one call (padding is masked, so this equals separate calls).
    """
    use_mask, short, zero, w1, w2, w3, _ = VARIANTS[variant]
    form = resolve_form(variant, l3_form)
    need_region, need_crop = bool(w1) or (w3 and form == "distill"), bool(w2) or (w3 and form == "distill")
    views, names = [], []
    if need_region:
        views.append((batch["images"][batch["scene"]], batch["masks"]))
        names.append("region")
    if need_crop:
        views.append((batch["crop_images"], batch["crop_masks"]))
        names.append("crop")
    if w3:
        views.append((batch["images"], torch.ones_like(batch["images"][:, :1])))
        names.append("global")
    feats = region_views(model, variant, torch.cat([v[0] for v in views]), torch.cat([v[1] for v in views]))
    feat = dict(zip(names, torch.split(feats, [len(v[0]) for v in views])))
    texts = []
    if w1 or w2:
        ids = batch["texts"].clone()
        if short:
            ids[:, S.SHORT_TOKENS:] = S.PAD
        texts.append(ids)
    if w3:
        texts.append(batch["global"])
    ids = torch.cat([_pad_to(t, max(t.shape[1] for t in texts)) for t in texts])
    ids = ids[:, :max(1, int((ids != S.PAD).sum(1).max()))]          # drop all-padding columns (masked anyway)
    tf = torch.split(model.text(ids), [len(t) for t in texts])
    t_region = tf[0] if (w1 or w2) else None
    parts, total = {}, 0.0
    if w1:
        parts["L1"] = info_nce(feat["region"], t_region, temperature=temperature, symmetric=True)
        total = total + w1 * parts["L1"]
    if w2:
        parts["L2"] = info_nce(feat["crop"], t_region, temperature=temperature, symmetric=True)
        total = total + w2 * parts["L2"]
    if w3:
        l3 = info_nce(feat["global"], tf[-1], temperature=temperature, symmetric=True)
        if form == "distill":
            l3 = l3 + (1 - F.cosine_similarity(feat["region"], feat["crop"].detach(), dim=-1)).mean()
        parts["L3"] = l3
        total = total + w3 * l3
    return total, parts


def make_batches(sc: S.Scenes):
    """Training tensors of a scene pool (box masks; the box crops of image and mask precomputed)."""
    idx = np.nonzero(sc.valid)
    masks = torch.from_numpy(sc.box[idx][:, None].astype(np.float32))
    boxes = torch.from_numpy(np.array([S.mask_to_bbox(m) for m in sc.box[idx]]))
    images = torch.from_numpy(sc.images)
    return {"images": images, "scene": torch.from_numpy(idx[0]), "masks": masks, "boxes": boxes,
            "crop_images": crop_resize(images[idx[0]], boxes), "crop_masks": crop_resize(masks, boxes, "nearest"),
            "texts": torch.from_numpy(S.region_tokens(sc)[idx]), "global": torch.from_numpy(S.global_tokens(sc))}


def train_variant(variant: str, settings: TrainSettings, seed: int, pool=None, l3_form: str = "distill"):
    """Train one variant; returns ``(model, log dict)``. ``seed`` fixes init, scene pool and batches."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; choose from {sorted(VARIANTS)}")
    resolve_form(variant, l3_form)
    if pool is None:
        pool = make_batches(S.make_scenes(settings.train_scenes, np.random.default_rng([seed, 1])))
    with seeded_init(seed):
        model = DualEncoder(settings.dim, settings.patch, settings.vit_depth)
    rng = np.random.default_rng([seed, 2])
    scene_of = pool["scene"].numpy()
    n = len(pool["images"])
    per_row = ("masks", "boxes", "crop_images", "crop_masks", "texts")

    def loss_fn(step):
        pick = np.sort(rng.choice(n, settings.batch_scenes, replace=False))
        rows = torch.from_numpy(np.nonzero(np.isin(scene_of, pick))[0])
        remap = np.full(n, -1)
        remap[pick] = np.arange(len(pick))
        batch = {"images": pool["images"][pick], "global": pool["global"][pick],
                 "scene": torch.from_numpy(remap[scene_of[rows.numpy()]])}
        batch.update({k: pool[k][rows] for k in per_row})
        return branch_losses(model, variant, batch, settings.temperature, l3_form)[0]

    spec = TrainSpec(max_steps=settings.steps, learning_rate=settings.lr, warmup_steps=settings.steps // 10,
                     schedule="cosine", grad_clip=1.0, threads=1, log_every=max(1, settings.steps // 10))
    # fused AdamW (same update as fit's default AdamW, one kernel instead of a loop over 60 tensors)
    opt = torch.optim.AdamW(model.parameters(), lr=spec.learning_rate, weight_decay=spec.weight_decay,
                            betas=spec.betas, fused=True)
    log = fit(model, loss_fn, spec, optimizer=opt)
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


def scene_recall(v: np.ndarray, t: np.ndarray, idx, valid: np.ndarray) -> np.ndarray:
    """Per region, R@1 of its feature ``v`` among the texts ``t`` of its own scene's regions.

    ``v, t (R, e)`` for the regions ``idx = np.nonzero(valid)`` of ``valid (N, 4)``; ties share the
    credit, as in :func:`recall_at_1` applied to each scene's (k, k) similarity (vectorised).
    """
    N, K = valid.shape
    V, T = np.zeros((N, K, v.shape[1])), np.zeros((N, K, t.shape[1]))
    V[idx], T[idx] = v, t
    sim = np.einsum("nie,nje->nij", V, T)
    sim = np.where(valid[:, None, :], sim, -np.inf)
    tied = np.isclose(sim, sim.max(2, keepdims=True), rtol=0, atol=1e-6) & valid[:, None, :]
    diag = tied[:, np.arange(K), np.arange(K)]
    return (diag / tied.sum(2))[idx]


def eval_tokens(sc: S.Scenes, rng: np.random.Generator) -> dict:
    """Token ids an evaluation reads: true region texts, colour and texture foils (drawn from
    ``rng``) of the valid regions, and the global captions."""
    idx = np.nonzero(sc.valid)
    return {"true": S.region_tokens(sc)[idx], "colour": S.region_tokens(sc, "colour", rng)[idx],
            "texture": S.region_tokens(sc, "texture", rng)[idx], "global": S.global_tokens(sc)}


@torch.no_grad()
def evaluate(model, variant: str, sc: S.Scenes, rng: np.random.Generator, group: int = 32,
             tokens: dict | None = None) -> dict:
    """Metrics in percent on test scenes; region metrics on held-out (colour, shape) regions only.

    ``tokens`` (from :func:`eval_tokens` with the same ``rng``) saves re-rendering the texts when
    several models are evaluated on one scene set."""
    tokens = eval_tokens(sc, rng) if tokens is None else tokens
    images = torch.from_numpy(sc.images)
    idx = np.nonzero(sc.valid)
    img = images[idx[0]]
    unit = lambda x: F.normalize(x, dim=-1).numpy()
    t_true = unit(text_view(model, variant, torch.from_numpy(tokens["true"])))
    foils = {k: unit(text_view(model, variant, torch.from_numpy(tokens[k]))) for k in ("colour", "texture")}
    held = np.array([(int(c), int(s)) in set(S.HELD_OUT) for s, c in sc.attrs[idx][:, :2]])
    k = sc.valid.sum(1)[idx[0]]
    out = {}
    for which in ("box", "exact"):
        m = torch.from_numpy(getattr(sc, which)[idx][:, None].astype(np.float32))
        v = unit(region_views(model, variant, img, m))
        out[f"region_r1_{which}"] = 100 * float(scene_recall(v, t_true, idx, sc.valid)[held].mean())
        if which == "box":
            out["region_chance"] = 100 * float(np.mean(1 / k[held]))
            true_s = (v * t_true).sum(1)
            acc = {key: _choice_accuracy(true_s, (v * f).sum(1)) for key, f in foils.items()}
            late = sc.late[idx[0]] & held
            out["late_choice"] = 100 * float(acc["colour"][late].mean())
            out["attribute_choice"] = 100 * float(np.concatenate([acc["colour"][held], acc["texture"][held]]).mean())
    g = unit(model.vision(images, torch.ones_like(images[:, :1])))
    tg = unit(model.text(torch.from_numpy(tokens["global"])))
    r1 = [recall_at_1(g[s:s + group] @ tg[s:s + group].T, np.arange(len(g[s:s + group])))
          for s in range(0, len(g) - group + 1, group)]
    out["global_r1"] = 100 * float(np.mean(r1))
    out["global_chance"] = 100.0 / group
    return out
