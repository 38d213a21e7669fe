"""The asset builder (every variant x training seed) and ``run``: metrics and ledger statistics."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch

from compendium.stats import mean_interval, paired_difference
from compendium.validation import require_int

from . import model as M
from . import scenes as S

ASSET_NAME = "pixclip_encoders"
TRAIN_SEEDS = 3
SETTINGS = {"smoke": M.TrainSettings(steps=30, batch_scenes=8, train_scenes=300),
            "full": M.TrainSettings(steps=150, batch_scenes=16, train_scenes=2000)}


def build_asset(out_dir: Path, scale: str, seed: int) -> None:
    """Train every variant of :data:`model.VARIANTS` at ``TRAIN_SEEDS`` training seeds into
    ``out_dir/<variant>/seed_<k>/`` (``model.pt``, ``log.json``); one scene pool per training seed."""
    if scale not in SETTINGS:
        raise ValueError(f"scale must be one of {sorted(SETTINGS)}, got {scale!r}")
    settings = SETTINGS[scale]
    out_dir = Path(out_dir)
    for k in range(TRAIN_SEEDS):
        tseed = 1000 * int(seed) + k
        pool = M.make_batches(S.make_scenes(settings.train_scenes, np.random.default_rng([tseed, 1])))
        for variant in M.VARIANTS:
            model, log = M.train_variant(variant, settings, tseed, pool=pool)
            where = out_dir / variant / f"seed_{k}"
            where.mkdir(parents=True, exist_ok=True)
            torch.save(model.state_dict(), where / "model.pt")
            (where / "log.json").write_text(json.dumps({"variant": variant, "train_seed": tseed, "scale": scale,
                                                        "settings": asdict(settings), "log": log}) + "\n")
            print(f"{ASSET_NAME} {variant} seed {k}: final loss {log['final_loss']:.3f}")


def load_models(path: str | Path) -> dict[str, list]:
    """``{variant: [model, ...]}`` (one per training seed, eval mode) from :func:`build_asset`'s folder."""
    path = Path(path)
    out = {}
    for variant in M.VARIANTS:
        models = []
        for where in sorted((path / variant).glob("seed_*")):
            dim = json.loads((where / "log.json").read_text())["settings"]["dim"]
            m = M.DualEncoder(dim)
            m.load_state_dict(torch.load(where / "model.pt", map_location="cpu", weights_only=True))
            models.append(m.eval())
        if not models:
            raise FileNotFoundError(f"no trained {variant} under {path}")
        out[variant] = models
    return out


@dataclass(frozen=True)
class Config:
    """Parameters of one run (names match the registry and the notebook's parameters cell)."""

    test_scenes: int = 300
    global_group: int = 32
    seed: int = 0

    def __post_init__(self):
        require_int("test_scenes", self.test_scenes, 64, 5000)
        require_int("global_group", self.global_group, 2, 256)
        if self.global_group > self.test_scenes:
            raise ValueError("global_group must not exceed test_scenes")


@dataclass
class Result:
    metrics: dict                 # variant -> metric -> list over training seeds (percent)
    scenes: S.Scenes
    stats: dict = field(default_factory=dict)


def per_seed(metrics, variant, key):
    return np.asarray(metrics[variant][key], float)


def summarise(metrics: dict) -> dict:
    """Every number a ledger verdict reads (percentage points; unit = training seed)."""
    g = lambda v, k: per_seed(metrics, v, k)
    unit = "training seeds"
    d, c = g("d_pixclip", "region_r1_box"), g("c_long_nomask", "region_r1_box")
    chance_late = 50.0
    out = {
        "mask_gain_min": float(np.min(d - c)),
        "mask_gain": paired_difference(d, c, unit=unit),
        "c_chance_gap_max": float(np.max(np.abs(c - g("c_long_nomask", "region_chance")))),
        "mask_only_chance_gap_max": float(np.max(np.abs(g("mask_only", "attribute_choice") - 50.0))),
        "d_vs_mask_only_min": float(np.min(g("d_pixclip", "attribute_choice") - g("mask_only", "attribute_choice"))),
        "short_late_gap_max": float(max(np.max(np.abs(g(v, "late_choice") - chance_late)) for v in ("a_clip_short", "b_mask_short"))),
        "long_late_min": float(min(np.min(g(v, "late_choice")) for v in ("c_long_nomask", "d_pixclip"))),
        "global_retention": paired_difference(g("d_pixclip", "global_r1"), g("global_clip", "global_r1"), unit=unit),
        "global_clip_r1": mean_interval(g("global_clip", "global_r1"), unit=unit),
        "shape_transfer_min": float(np.min(g("d_pixclip", "region_r1_exact") / np.maximum(d, 1e-9))),
    }
    for variant, name in (("d_minus_l2", "L2"), ("d_minus_l3", "L3")):
        out[f"branch_{name}_min"] = float(np.min(d - g(variant, "region_r1_box")))
        out[f"branch_{name}"] = paired_difference(d, g(variant, "region_r1_box"), unit=unit)
    out["l3_forms"] = paired_difference(d, g("d_pixclip_l3global", "region_r1_box"), unit=unit)
    return out


def run(config: Config, models: dict[str, list]) -> Result:
    """Evaluate every trained model on ``config.test_scenes`` test scenes drawn from ``config.seed``."""
    sc = S.make_scenes(config.test_scenes, np.random.default_rng([config.seed, 7]), split="test")
    metrics = {}
    with torch.no_grad():
        for variant, ms in models.items():
            rows = [M.evaluate(m, variant, sc, np.random.default_rng([config.seed, 8]), group=config.global_group) for m in ms]
            metrics[variant] = {k: [r[k] for r in rows] for k in rows[0]}
    return Result(metrics=metrics, scenes=sc, stats=summarise(metrics))
