"""A tiny CLIP-style dual encoder for digit canvases and number prompts (the shared asset).

Image tower: two 3x3 convolutions and two linear layers, ``(B, 1, 8, 24) -> (B, d)``. Text tower:
token and slot embeddings of the three prompt tokens, concatenated, then a two-layer MLP,
``(P, 3) -> (P, d)``. Both outputs are L2-normalised; the zero-shot logits are
``s = exp(t) * f T^T`` with a learned temperature ``t`` clamped at ``log 100`` as in CLIP. Training
is contrastive (InfoNCE) with every one of the 1110 prompts as a candidate for every canvas.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from ...losses import info_nce_from_logits
from ...training import TrainSpec, fit, seeded_init, torch_threads
from . import data

ASSET_NAME = "tiny_clip_digits"
TRAIN_THREADS = 1


@dataclass(frozen=True)
class EncoderConfig:
    """Sizes of the dual encoder (all layers are built from these, randomly initialised)."""

    conv1_channels: int = 32
    conv2_channels: int = 64
    hidden: int = 256
    text_embedding: int = 32
    text_hidden: int = 128
    embed_dim: int = 64

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"EncoderConfig.{name} must be a positive integer, got {value!r}")


@dataclass(frozen=True)
class TrainSettings:
    """How the asset is trained (scale-dependent; see :func:`settings_for`)."""

    steps: int = 400
    batch_size: int = 128
    learning_rate: float = 2e-3
    encoder: EncoderConfig = EncoderConfig()

    def __post_init__(self) -> None:
        if self.steps < 1 or self.batch_size < 2 or not self.learning_rate > 0:
            raise ValueError("TrainSettings needs steps >= 1, batch_size >= 2 and a positive learning_rate")


def settings_for(scale: str) -> TrainSettings:
    """Training settings per scale.

    Smoke trains 3 encoders for 400 steps each, full 5 encoders for 600 steps each (about 0.035 s
    a step on one idle core: 15 s and 21 s an encoder). Full once trained 1500 steps an encoder;
    on a shared, loaded machine its five encoders took over 30 minutes, so the steps were cut and
    the number of encoders, the unit of the accuracy intervals, was kept.
    """
    if scale == "smoke":
        return TrainSettings(steps=400)
    if scale == "full":
        return TrainSettings(steps=600)
    raise ValueError(f"scale must be 'smoke' or 'full', got {scale!r}")


class ImageEncoder(nn.Module):
    """Canvas ``(B, 1, 8, 24)`` -> unit feature ``(B, d)``."""

    def __init__(self, cfg: EncoderConfig):
        super().__init__()
        self.conv1 = nn.Conv2d(1, cfg.conv1_channels, 3, padding=1)                         # (B, c1, 8, 24)
        self.conv2 = nn.Conv2d(cfg.conv1_channels, cfg.conv2_channels, 3, stride=2, padding=1)  # (B, c2, 4, 12)
        self.fc1 = nn.Linear(cfg.conv2_channels * 4 * 12, cfg.hidden)
        self.fc2 = nn.Linear(cfg.hidden, cfg.embed_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.relu(self.conv1(x))
        h = F.relu(self.conv2(h))
        h = F.relu(self.fc1(h.flatten(1)))
        return F.normalize(self.fc2(h), dim=-1)


class TextEncoder(nn.Module):
    """Prompt tokens ``(P, 3)`` -> unit embedding ``(P, d)``."""

    def __init__(self, cfg: EncoderConfig):
        super().__init__()
        self.token = nn.Embedding(data.VOCAB, cfg.text_embedding)
        self.slot = nn.Parameter(torch.zeros(data.NUM_SLOTS, cfg.text_embedding))
        self.fc1 = nn.Linear(data.NUM_SLOTS * cfg.text_embedding, cfg.text_hidden)
        self.fc2 = nn.Linear(cfg.text_hidden, cfg.embed_dim)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = (self.token(tokens) + self.slot).flatten(1)  # (P, 3 * e): the slot says which digit is where
        return F.normalize(self.fc2(F.relu(self.fc1(h))), dim=-1)


class DualEncoder(nn.Module):
    """Image and text towers plus CLIP's learned temperature."""

    def __init__(self, cfg: EncoderConfig):
        super().__init__()
        self.cfg = cfg
        self.image = ImageEncoder(cfg)
        self.text = TextEncoder(cfg)
        self.log_scale = nn.Parameter(torch.tensor(math.log(1 / 0.07)))

    def logit_scale(self) -> torch.Tensor:
        return self.log_scale.clamp(max=math.log(100.0)).exp()

    def forward(self, canvases: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        """Zero-shot logits ``(B, P)`` of canvases ``(B, 1, 8, 24)`` against prompts ``(P, 3)``."""
        return self.logit_scale() * self.image(canvases) @ self.text(tokens).T


def build_model(cfg: EncoderConfig, seed: int) -> DualEncoder:
    """A randomly initialised dual encoder (deterministic for ``seed``; global RNG untouched)."""
    with seeded_init(int(seed)):
        return DualEncoder(cfg)


def encoder_macs(cfg: EncoderConfig) -> int:
    """Multiply-adds of one image-tower forward pass (convolutions and linear layers, biases included)."""
    c1, c2 = cfg.conv1_channels, cfg.conv2_channels
    conv1 = 8 * 24 * c1 * (9 * 1 + 1)
    conv2 = 4 * 12 * c2 * (9 * c1 + 1)
    fc1 = cfg.hidden * (c2 * 48 + 1)
    fc2 = cfg.embed_dim * (cfg.hidden + 1)
    normalise = 3 * cfg.embed_dim
    relus = 8 * 24 * c1 + 48 * c2 + cfg.hidden
    return conv1 + conv2 + fc1 + fc2 + normalise + relus


def _to_tensor(canvases: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(canvases, dtype=np.float32))[:, None]


def train(settings: TrainSettings, seed: int, log=print, split: dict | None = None) -> tuple[DualEncoder, dict]:
    """Train the dual encoder on clean canvases of sklearn's training digits; return ``(model, metrics)``.

    Each step draws ``batch_size`` prompts uniformly over the three number lengths and composes a
    canvas for each; the loss is cross-entropy of the canvas against all 1110 prompts. Adam with
    a one-cycle schedule (torch's ``OneCycleLR``, which also cycles Adam's beta1), run by
    :func:`compendium.training.fit` on ``TRAIN_THREADS`` threads; the clean evaluation runs on them too.
    """
    images, labels = data.load_digit_images()
    split = split_indices_for(seed) if split is None else split
    train_images, train_labels = images[split["train"]], labels[split["train"]]
    prompt_tokens = data.all_prompts()
    all_prompts_tensor = torch.from_numpy(prompt_tokens)
    rng = np.random.default_rng(np.random.SeedSequence(int(seed), spawn_key=(1,)))
    model = build_model(settings.encoder, seed)
    opt = torch.optim.Adam(model.parameters(), lr=settings.learning_rate)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=settings.learning_rate,
                                                total_steps=settings.steps, pct_start=0.1)
    spec = TrainSpec(max_steps=settings.steps, learning_rate=settings.learning_rate, threads=TRAIN_THREADS,
                     log_every=300)
    starts = np.array([0, 10, 110, 1110])

    def loss_fn(step):
        length = rng.integers(0, 3, settings.batch_size)             # 1, 2 or 3 digits
        target = starts[length] + (rng.random(settings.batch_size) * (starts[length + 1] - starts[length])).astype(np.int64)
        canvases = data.compose_canvases(prompt_tokens[target], train_images, train_labels, rng)
        logits = model(_to_tensor(canvases), all_prompts_tensor)    # (B, 1110)
        loss = info_nce_from_logits(logits, torch.from_numpy(target))  # the library's one contrastive loss
        if step % 300 == 0 or step == settings.steps - 1:  # the scale shown is the one before this step
            log(f"step {step:5d}  loss {loss.item():.4f}  scale {model.logit_scale().item():.1f}")
        return loss

    with torch_threads(TRAIN_THREADS):
        fit(model, loss_fn, spec, optimizer=opt, scheduler=sched)
        metrics = evaluate(model, split, seed)
    metrics["parameters"] = int(sum(p.numel() for p in model.parameters()))
    metrics["encoder_macs"] = encoder_macs(settings.encoder)
    return model, metrics


def split_indices_for(seed: int) -> dict[str, np.ndarray]:
    """The asset's train/validation/test split of sklearn's digits (stratified; fixed by ``seed``)."""
    _, labels = data.load_digit_images()
    return data.split_indices(labels, np.random.default_rng(np.random.SeedSequence(int(seed), spawn_key=(0,))))


@torch.no_grad()
def evaluate(model: DualEncoder, split: dict, seed: int) -> dict:
    """Clean zero-shot accuracy: one-digit test canvases (10 classes) and three-digit ones (1000)."""
    images, labels = data.load_digit_images()
    test = split["test"]
    single = image_features(model, data.single_digit_canvases(images[test]))
    acc10 = float(np.mean(zero_shot_logits(model, single, data.single_digit_prompts()).argmax(1) == labels[test]))
    rng = np.random.default_rng(np.random.SeedSequence(int(seed), spawn_key=(2,)))
    numbers = rng.integers(0, 1000, 1000)
    tokens = data.three_digit_prompts(numbers)
    triple = image_features(model, data.compose_canvases(tokens, images[test], labels[test], rng))
    acc1000 = float(np.mean(zero_shot_logits(model, triple, data.three_digit_prompts(np.arange(1000))).argmax(1) == numbers))
    return {"clean_accuracy_10": acc10, "clean_accuracy_1000": acc1000,
            "logit_scale": float(model.logit_scale().detach())}


@torch.no_grad()
def image_features(model: DualEncoder, canvases: np.ndarray, batch_size: int = 2048) -> np.ndarray:
    """Unit image features ``(n, d)`` in float64 (renormalised after the cast).

    Runs on one thread, so that the features (and every number built on them) do not depend on
    the machine's core count, and tiny convolutions do not wait on busy cores.
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        out = [model.image(_to_tensor(canvases[i:i + batch_size])).double().numpy()
               for i in range(0, canvases.shape[0], batch_size)]
    finally:
        torch.set_num_threads(threads)
    feats = np.concatenate(out) if out else np.zeros((0, model.cfg.embed_dim))
    return feats / np.linalg.norm(feats, axis=1, keepdims=True)


@torch.no_grad()
def text_features(model: DualEncoder, tokens: np.ndarray) -> np.ndarray:
    """Unit prompt embeddings ``(P, d)`` in float64."""
    feats = model.text(torch.from_numpy(np.asarray(tokens, dtype=np.int64))).double().numpy()
    return feats / np.linalg.norm(feats, axis=1, keepdims=True)


def zero_shot_logits(model: DualEncoder, features: np.ndarray, tokens: np.ndarray) -> np.ndarray:
    """``s = scale * f T^T``: ``(n, d)`` features against the prompts ``(P, 3)`` -> ``(n, P)``."""
    return float(model.logit_scale().detach()) * features @ text_features(model, tokens).T


ENCODERS = {"smoke": 3, "full": 5}  # trained encoders per scale (the unit of replication of the gains)


def encoder_seed(seed: int, index: int) -> int:
    """Training seed of encoder ``index`` (index 0 is the asset's own seed)."""
    return int(seed) if index == 0 else int(seed) + 1000 * int(index)


def build_asset(out_dir: Path, scale: str, seed: int, settings: TrainSettings | None = None,
                num_encoders: int | None = None) -> None:
    """The workflow builder: train ``ENCODERS[scale]`` encoders; the first in ``out_dir``, the others
    in ``out_dir/encoder_<k>``, each with ``model.pt`` and ``metadata.json``. All share one data split."""
    out_dir = Path(out_dir)
    settings = settings or settings_for(scale)
    count = ENCODERS[scale] if num_encoders is None else int(num_encoders)
    if count < 1:
        raise ValueError(f"num_encoders must be >= 1, got {count}")
    split = split_indices_for(seed)
    for k in range(count):
        where = out_dir if k == 0 else out_dir / f"encoder_{k}"
        where.mkdir(parents=True, exist_ok=True)
        model, metrics = train(settings, encoder_seed(seed, k), split=split)
        torch.save(model.state_dict(), where / "model.pt")
        meta = {"name": ASSET_NAME, "scale": scale, "seed": int(seed), "encoder_seed": encoder_seed(seed, k),
                "num_encoders": count, "settings": asdict(settings),
                "metrics": metrics, "split": {key: v.tolist() for key, v in split.items()}}
        (where / "metadata.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
        print(f"{ASSET_NAME} encoder {k}: {metrics}")


def load_encoders(path: str | Path) -> list[tuple["DualEncoder", dict]]:
    """Every encoder of the asset: ``[(model, metadata), ...]``, the asset's own first."""
    path = Path(path)
    out = [load_asset(path)]
    k = 1
    while (path / f"encoder_{k}" / "model.pt").is_file():
        out.append(load_asset(path / f"encoder_{k}"))
        k += 1
    return out


def load_asset(path: str | Path) -> tuple[DualEncoder, dict]:
    """Load a model saved by :func:`build_asset`: ``(model in eval mode, metadata)``."""
    path = Path(path)
    meta = json.loads((path / "metadata.json").read_text())
    cfg = EncoderConfig(**meta["settings"]["encoder"])
    model = DualEncoder(cfg)
    model.load_state_dict(torch.load(path / "model.pt", map_location="cpu", weights_only=True))
    return model.eval(), meta
