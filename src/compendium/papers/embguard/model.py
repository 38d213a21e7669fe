"""The EMBGuard-toy network, the training arms, and the asset that trains them all.

Every trained model (arm x training seed) is one slice of :class:`StackedGuardNet`: each weight
has a leading model axis and the 3 x 3 convolutions run as one grouped convolution. The loss is
the sum of the slices' losses and AdamW is elementwise, so the slices train exactly as separate
models would (``tests/papers/test_embguard.py`` compares them); stacking only makes 30 tiny CNNs
cheap on a CPU.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from compendium.training import TrainSpec, fit

from .gridhazard import CONDITIONS, Samples, Spec, generate_pools, generator_checks, load_spec

__all__ = ["ARMS", "ARM_LABELS", "ASSET_NAME", "DOSE_ARMS", "AssetSettings", "StackedGuardNet", "arm_counts",
           "batch_tensors", "build_asset", "guard_loss", "load_asset", "settings_for", "train_stacked"]

ASSET_NAME = "embguard_guards"

#: arm -> (decoupled-benign fraction of the training set, uses the action, includes selective risky)
ARMS = {
    "scene_only": (0.25, False, True),      # (a) the same data as (d), no action input
    "no_decoupled": (0.0, True, True),      # (b) trained without decoupled-benign pairs
    "decoupled_10": (0.10, True, True),     # dose-response level
    "embguard": (0.25, True, True),         # (d) the full EMBGuard-toy
    "decoupled_50": (0.50, True, True),     # dose-response level
    "no_selective": (0.25, True, False),    # (d) without the hazard-augmented (multi-hazard) pairs
}
ARM_LABELS = {"scene_only": "(a) scene only", "no_decoupled": "(b) no decoupled benign", "decoupled_10": "10 % decoupled",
              "embguard": "(d) EMBGuard-toy", "decoupled_50": "50 % decoupled", "no_selective": "(d) without selective"}
DOSE_ARMS = ("no_decoupled", "decoupled_10", "embguard", "decoupled_50")


def arm_counts(arm: str, train_pairs: int, base: dict) -> dict:
    """How many training pairs of each condition an arm gets (``train_pairs`` in all, for every arm)."""
    fraction, _, selective = ARMS[arm]
    n_dec = round(fraction * train_pairs)
    shares = {c: base[c] for c in ("causal_risky", "absent_benign", "selective_risky") if selective or c != "selective_risky"}
    total = sum(shares.values())
    rest = train_pairs - n_dec
    out = {c: round(rest * w / total) for c, w in shares.items()}
    last = list(out)[-1]
    out[last] = rest - sum(v for c, v in out.items() if c != last)
    out["decoupled_benign"] = n_dec
    return {c: out.get(c, 0) for c in CONDITIONS}


class StackedGuardNet(nn.Module):
    """``num_models`` guard CNNs side by side.

    Per model: a stride-3 patch embedding (a 3 x 3 x 3 glyph -> ``width`` channels per grid cell)
    plus a learned vector at the action's target cell; the verb's embedding produces FiLM
    parameters :math:`h \\leftarrow \\mathrm{ReLU}(h (1 + \\gamma(v)) + \\beta(v))` before each of
    ``layers`` residual 3 x 3 convolutions on the 8 x 8 grid; then a hazard pointer over cells
    (1 x 1 conv) and, from the max-pooled features, a risk logit and 8 risk-type logits (7 + none).
    A model with ``uses_action`` False sees the null verb and no target (the scene-only arm).
    """

    def __init__(self, init_seeds, uses_action, *, width: int = 24, embed: int = 16, layers: int = 2,
                 num_verbs: int = 10, grid_size: int = 8, patch_dim: int = 27, num_classes: int = 8):
        super().__init__()
        M, C = len(init_seeds), width
        if len(uses_action) != M:
            raise ValueError("uses_action needs one flag per model")
        self.num_models, self.width, self.layers, self.grid_size, self.num_verbs = M, C, layers, grid_size, num_verbs
        self.register_buffer("uses_action", torch.tensor([bool(u) for u in uses_action]))

        def uniform(shape, fan_in, gens):          # torch's default init, one generator per model
            bound = 1 / math.sqrt(fan_in)
            return torch.stack([(torch.rand(shape, generator=g) * 2 - 1) * bound for g in gens])

        gens = [torch.Generator().manual_seed(int(s)) for s in init_seeds]
        self.patch = nn.Parameter(uniform((patch_dim, C), patch_dim, gens))
        self.patch_bias = nn.Parameter(uniform((C,), patch_dim, gens))
        self.target_vec = nn.Parameter(uniform((C,), 1, gens))
        self.verb = nn.Parameter(torch.stack([torch.randn(num_verbs + 1, embed, generator=g) for g in gens]))
        self.film = nn.Parameter(torch.zeros(M, layers, embed, 2 * C))          # zero: FiLM starts as identity
        self.film_bias = nn.Parameter(torch.zeros(M, layers, 2 * C))
        self.conv = nn.Parameter(uniform((layers, C, C, 3, 3), 9 * C, gens))    # (M, L, C_out, C_in, 3, 3)
        self.conv_bias = nn.Parameter(uniform((layers, C), 9 * C, gens))
        self.pointer = nn.Parameter(uniform((C,), C, gens))
        self.head = nn.Parameter(uniform((C, 1 + num_classes), C, gens))
        self.head_bias = nn.Parameter(uniform((1 + num_classes,), C, gens))

    def forward(self, patches, target, verb):
        """patches (M, B, G*G, 27), target (M, B) flat cells, verb (M, B) ->
        risk logits (M, B), type logits (M, B, 8), pointer logits (M, B, G*G)."""
        M, B, P, _ = patches.shape
        G, C = self.grid_size, self.width
        act = self.uses_action[:, None]
        mask = F.one_hot(target, P).float() * act[..., None]                      # (M, B, P)
        verb = torch.where(act, verb, torch.full_like(verb, self.num_verbs))
        h = torch.einsum("mbpk,mkc->mbpc", patches, self.patch) + self.patch_bias[:, None, None]
        h = h + mask[..., None] * self.target_vec[:, None, None]
        e = self.verb[torch.arange(M)[:, None], verb]                              # (M, B, E)
        for layer in range(self.layers):
            gb = torch.einsum("mbe,mef->mbf", e, self.film[:, layer]) + self.film_bias[:, layer, None]
            gamma, beta = gb[..., :C], gb[..., C:]
            z = torch.relu(h * (1 + gamma[:, :, None]) + beta[:, :, None])         # (M, B, P, C)
            x = z.permute(1, 0, 3, 2).reshape(B, M * C, G, G)
            y = F.conv2d(x, self.conv[:, layer].reshape(M * C, C, 3, 3), self.conv_bias[:, layer].reshape(-1),
                         padding=1, groups=M)
            h = h + y.reshape(B, M, C, P).permute(1, 0, 3, 2)
        z = torch.relu(h)
        pointer = torch.einsum("mbpc,mc->mbp", z, self.pointer)
        out = torch.einsum("mbc,mco->mbo", z.amax(2), self.head) + self.head_bias[:, None]
        return out[..., 0], out[..., 1:], pointer


def guard_loss(net: StackedGuardNet, batch: dict) -> torch.Tensor:
    """Sum over models of (risk BCE + risk-type CE + hazard-pointer CE on unsafe pairs)."""
    risk, kind, pointer = net(batch["patches"], batch["target"], batch["verb"])
    M, B = risk.shape
    bce = F.binary_cross_entropy_with_logits(risk, batch["label"].float(), reduction="none").mean(1)
    ce = F.cross_entropy(kind.reshape(M * B, -1), batch["risk_type"].reshape(-1), reduction="none").view(M, B).mean(1)
    unsafe = batch["label"]
    logp = torch.log_softmax(pointer, -1).gather(2, batch["hazard_cell"].clamp(min=0)[..., None])[..., 0]
    ptr = -(logp * unsafe).sum(1) / unsafe.sum(1).clamp(min=1)
    return (bce + ce + ptr).sum()


def batch_tensors(spec: Spec, samples: Samples, idx: np.ndarray, noise: float, generator: torch.Generator | None) -> dict:
    """Tensors of the pairs ``samples[idx]`` for index array ``idx`` (M, B); glyph noise from ``generator``."""
    flat = torch.from_numpy(spec.glyphs.reshape(len(spec.glyphs), -1))
    grid = torch.from_numpy(samples.grid.reshape(len(samples), -1)[idx].astype(np.int64))          # (M, B, P)
    patches = flat[torch.where(grid < 0, len(spec.glyphs) - 1, grid)]                # (M, B, P, 27)
    if noise > 0:
        patches = (patches + noise * torch.randn(patches.shape, generator=generator)).clamp(0, 1)
    t = torch.from_numpy
    return {"patches": patches, "target": t(samples.target[idx]), "verb": t(samples.verb[idx]),
            "label": t(samples.label[idx]), "risk_type": t(samples.risk_type[idx]),
            "hazard_cell": t(samples.hazard_cell[idx])}


@dataclass(frozen=True)
class AssetSettings:
    num_seeds: int
    train_pairs: int
    steps: int
    batch_size: int = 64
    width: int = 16
    embed: int = 16
    layers: int = 2
    learning_rate: float = 3e-3
    arms: tuple = tuple(ARMS)


def settings_for(scale: str) -> AssetSettings:
    """Smoke: 2,000 training pairs per model, 350 steps of 32; full: 15,000 (EMBHazard has 15.1k), 1,500 steps of 64."""
    if scale == "smoke":
        return AssetSettings(num_seeds=5, train_pairs=2000, steps=350, batch_size=32)
    if scale == "full":
        return AssetSettings(num_seeds=5, train_pairs=15000, steps=1500, batch_size=64)
    raise ValueError(f"scale must be 'smoke' or 'full', got {scale!r}")


def train_stacked(spec: Spec, datasets: list, settings: AssetSettings, init_seeds, uses_action, seed: int):
    """Train one stacked net: model ``m`` on the pairs ``datasets[m]`` (a :class:`Samples`)."""
    net = StackedGuardNet(init_seeds, uses_action, width=settings.width, embed=settings.embed, layers=settings.layers,
                          num_verbs=len(spec.verbs), grid_size=spec.grid_size)
    pool = Samples.concat(datasets)
    offsets = np.cumsum([0] + [len(d) for d in datasets])
    rng = np.random.default_rng([seed, 5])
    gen = torch.Generator().manual_seed(seed)

    def loss_fn(step: int) -> torch.Tensor:
        idx = np.stack([offsets[m] + rng.integers(len(d), size=settings.batch_size) for m, d in enumerate(datasets)])
        return guard_loss(net, batch_tensors(spec, pool, idx, spec.pixel_noise, gen))

    spec_t = TrainSpec(max_steps=settings.steps, learning_rate=settings.learning_rate, weight_decay=0.0,
                       warmup_steps=max(1, settings.steps // 20), schedule="cosine", threads=1,
                       log_every=max(1, settings.steps // 10))
    log = fit(net, loss_fn, spec_t)
    return net.eval(), log.to_dict()


def build_asset(out_dir: Path, scale: str, seed: int) -> None:
    """Generate each training seed's pools, draw every arm's training set from them, train all
    arms x seeds as one stacked net; save ``model.pt`` and ``metadata.json`` (settings, the models'
    order, the counts per condition, the generator checks over every training pool, the log)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    settings, spec = settings_for(scale), load_spec()
    N = settings.train_pairs
    datasets, models, checks = [], [], None
    for k in range(settings.num_seeds):
        rng = np.random.default_rng([seed, k, 11])
        pools = generate_pools(spec, math.ceil(0.5 * N), math.ceil(0.3 * N), rng)
        c = generator_checks(spec, pools)
        checks = c if checks is None else {key: checks[key] + c[key] for key in c}
        for arm in settings.arms:
            counts = arm_counts(arm, N, spec.base_composition)
            parts = [pools[cond].subset(rng.permutation(len(pools[cond]))[:n]) for cond, n in counts.items() if n]
            datasets.append(Samples.concat(parts))
            models.append({"arm": arm, "seed": k, "init_seed": 1000 * seed + k, "counts": counts})
    net, log = train_stacked(spec, datasets, settings, [m["init_seed"] for m in models],
                             [ARMS[m["arm"]][1] for m in models], seed)
    torch.save(net.state_dict(), out_dir / "model.pt")
    meta = {"name": ASSET_NAME, "scale": scale, "seed": int(seed), "settings": asdict(settings), "models": models,
            "generator_checks": checks, "log": log}
    (out_dir / "metadata.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    print(f"{len(models)} models, final summed loss {log['final_loss']:.3f}")


def load_asset(path) -> tuple[StackedGuardNet, dict]:
    """The stacked net (eval mode) and the metadata of an asset folder."""
    path = Path(path)
    meta = json.loads((path / "metadata.json").read_text())
    s = meta["settings"]
    net = StackedGuardNet([m["init_seed"] for m in meta["models"]], [ARMS[m["arm"]][1] for m in meta["models"]],
                          width=s["width"], embed=s["embed"], layers=s["layers"])
    net.load_state_dict(torch.load(path / "model.pt", map_location="cpu", weights_only=True))
    return net.eval(), meta
