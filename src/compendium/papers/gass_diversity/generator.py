"""The class-conditional digits generator of the chapter (the asset ``gass_digits_unet``).

A ``diffusers`` ``UNet2DModel`` (two resolutions, 16 and 32 channels, class embeddings for the
ten digits plus a null label 10 for classifier-free guidance) trained with the epsilon loss of
DDPM on sklearn's 8x8 digits scaled to [-1, 1], 10 % label dropout, the noise schedule of a
``DDIMScheduler`` (1000 steps, cosine schedule). Only the digits of the ``tiny_clip_digits`` asset's
training split are used, so its test split is unseen by both the encoder and the generator.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from ...training import TrainSpec, fit, seeded_init, torch_threads
from ..prototype_tta import data as digit_data
from ..prototype_tta.model import split_indices_for

ASSET_NAME = "gass_digits_unet"
NULL_LABEL = 10
TRAIN_THREADS = 1
MODELS = 3  # training seeds per scale (the unit of replication of the chapter's per-seed checks)


@dataclass(frozen=True)
class GeneratorSettings:
    """How each generator is trained (scale-dependent; see :func:`settings_for`)."""

    steps: int = 1000
    batch_size: int = 64
    learning_rate: float = 2e-3
    label_dropout: float = 0.1
    channels: tuple = (16, 32)

    def __post_init__(self) -> None:
        object.__setattr__(self, "channels", tuple(int(c) for c in self.channels))
        if self.steps < 1 or self.batch_size < 2 or not self.learning_rate > 0 or not 0 <= self.label_dropout < 1:
            raise ValueError("GeneratorSettings needs steps >= 1, batch_size >= 2, lr > 0, 0 <= dropout < 1")


def settings_for(scale: str) -> GeneratorSettings:
    """Smoke: 1500 Adam steps of 64 digits per model; full: 2500 (about 0.04 s a step on one core)."""
    if scale == "smoke":
        return GeneratorSettings(steps=1500)
    if scale == "full":
        return GeneratorSettings(steps=2500)
    raise ValueError(f"scale must be 'smoke' or 'full', got {scale!r}")


def build_unet(settings: GeneratorSettings, seed: int):
    """A randomly initialised class-conditional ``UNet2DModel`` for (B, 1, 8, 8) images."""
    from diffusers import UNet2DModel

    with seeded_init(int(seed)):
        return UNet2DModel(sample_size=8, in_channels=1, out_channels=1, layers_per_block=1,
                           block_out_channels=settings.channels,
                           down_block_types=("DownBlock2D",) * len(settings.channels),
                           up_block_types=("UpBlock2D",) * len(settings.channels),
                           num_class_embeds=NULL_LABEL + 1, norm_num_groups=8, time_embedding_dim=64)


def make_scheduler():
    """The DDIM scheduler used for training noise levels and for sampling (eta = 0)."""
    from diffusers import DDIMScheduler

    return DDIMScheduler(num_train_timesteps=1000, beta_schedule="squaredcos_cap_v2", clip_sample=False,
                         set_alpha_to_one=True)


def to_model_space(images01: np.ndarray) -> torch.Tensor:
    """Digits (n, 8, 8) in [0, 1] -> (n, 1, 8, 8) in [-1, 1]."""
    return torch.from_numpy(np.ascontiguousarray(images01, dtype=np.float32))[:, None] * 2 - 1


def train(settings: GeneratorSettings, seed: int, train_idx: np.ndarray, log=print):
    """Epsilon-prediction DDPM loss with label dropout; returns ``(unet, metrics)``."""
    images, labels = digit_data.load_digit_images()
    x_all, y_all = to_model_space(images[train_idx]), torch.from_numpy(labels[train_idx])
    sched = make_scheduler()
    rng = np.random.default_rng(np.random.SeedSequence(int(seed), spawn_key=(7,)))
    gen = torch.Generator().manual_seed(int(seed) + 1)
    unet = build_unet(settings, seed)
    spec = TrainSpec(max_steps=settings.steps, learning_rate=settings.learning_rate, weight_decay=0.0,
                     schedule="cosine", warmup_steps=50, threads=TRAIN_THREADS,
                     log_every=500)
    losses = []

    def loss_fn(step):
        pick = torch.from_numpy(rng.integers(0, len(x_all), settings.batch_size))
        x0, y = x_all[pick], y_all[pick].clone()
        y[torch.from_numpy(rng.random(settings.batch_size) < settings.label_dropout)] = NULL_LABEL
        t = torch.randint(0, 1000, (settings.batch_size,), generator=gen)
        eps = torch.randn(x0.shape, generator=gen)
        loss = ((unet(sched.add_noise(x0, eps, t), t, class_labels=y).sample - eps) ** 2).mean()
        losses.append(float(loss.detach()))
        if step % 500 == 0 or step == settings.steps - 1:
            log(f"step {step:5d}  loss {loss.item():.4f}")
        return loss

    with torch_threads(TRAIN_THREADS):
        fit(unet, loss_fn, spec)
    unet.eval()
    return unet, {"final_loss_mean_100": float(np.mean(losses[-100:])),
                  "parameters": int(sum(p.numel() for p in unet.parameters()))}


def model_seed(seed: int, index: int) -> int:
    return int(seed) + 101 * int(index)


def build_asset(out_dir: Path, scale: str, seed: int, settings: GeneratorSettings | None = None,
                num_models: int | None = None) -> dict:
    """The workflow builder: ``MODELS`` generators in ``out_dir/model_<k>`` (``unet.pt``, ``metadata.json``)."""
    out_dir = Path(out_dir)
    settings = settings or settings_for(scale)
    count = MODELS if num_models is None else int(num_models)
    split = split_indices_for(seed)  # the tiny_clip_digits asset's split for the same seed
    metrics = {}
    for k in range(count):
        where = out_dir / f"model_{k}"
        where.mkdir(parents=True, exist_ok=True)
        unet, m = train(settings, model_seed(seed, k), split["train"])
        torch.save(unet.state_dict(), where / "unet.pt")
        meta = {"name": ASSET_NAME, "scale": scale, "seed": int(seed), "model_seed": model_seed(seed, k),
                "settings": asdict(settings), "metrics": m, "test_split": split["test"].tolist()}
        (where / "metadata.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
        metrics[f"model_{k}"] = m
        print(f"{ASSET_NAME} model {k}: {m}")
    return metrics


def load_generators(path: str | Path) -> list:
    """Every generator of the asset: ``[(unet in eval mode, metadata), ...]``."""
    path, out, k = Path(path), [], 0
    while (path / f"model_{k}" / "unet.pt").is_file():
        meta = json.loads((path / f"model_{k}" / "metadata.json").read_text())
        unet = build_unet(GeneratorSettings(**meta["settings"]), 0)
        unet.load_state_dict(torch.load(path / f"model_{k}" / "unet.pt", map_location="cpu", weights_only=True))
        out.append((unet.eval(), meta))
        k += 1
    return out
