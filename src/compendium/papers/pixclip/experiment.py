"""The asset builder (every variant x training seed) and ``run``: metrics and ledger statistics."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch

from compendium.stats import mean_interval, paired_difference
from compendium.training import torch_threads
from compendium.validation import require_int

from . import model as M
from . import scenes as S

ASSET_NAME = "pixclip_encoders"
TRAIN_SEEDS = 3
# training seeds per variant: (a) and (b) pass their only check (late-difference at chance) by
# construction (their 8-token input is the same for the true and the foil text), so one seed each;
# PixCLIP is trained in both L3 forms at all three seeds: the dev split chooses between them
VARIANT_SEEDS = {"a_clip_short": 1, "b_mask_short": 1, "c_long_nomask": 3, "d_pixclip": 3, "d_pixclip_other": 3,
                 "d_minus_l2": 3, "d_minus_l3": 3, "mask_only": 3, "global_clip": 3}
# smoke: the CPU budget's encoders (ViT patch 8, d = 32); full: the (ViT patch 4, d = 64)
SETTINGS = {"smoke": M.TrainSettings(steps=80, batch_scenes=8, train_scenes=400),
            "full": M.TrainSettings(steps=200, batch_scenes=16, train_scenes=2000, dim=64, patch=4)}
DEV_SCENES = {"smoke": 120, "full": 400}


def choose_l3_form(models: dict, dev: S.Scenes, seed: int) -> dict:
    """Dev-split choice of the L3 form (rule fixed before any test scene is drawn): the higher mean
    over training seeds of the dev region R@1 (box masks, held-out pairs) of the PixCLIP models
    ``{form: [model per training seed]}``; a tie goes to "distill"."""
    with torch_threads(1):
        per = {form: [M.evaluate(m, "d_pixclip", dev, np.random.default_rng([seed, 6]))["region_r1_box"] for m in ms]
               for form, ms in models.items()}
    r1 = {form: float(np.mean(v)) for form, v in per.items()}
    chosen = max(M.L3_FORMS, key=lambda f: (r1[f], f == "distill"))
    return {"dev_region_r1": r1, "dev_region_r1_per_seed": per, "chosen": chosen, "dev_scenes": len(dev.images),
            "rule": "higher mean dev region R@1 over the training seeds; tie -> distill"}


def _save(out_dir: Path, variant: str, k: int, model, log: dict, meta: dict) -> float:
    where = out_dir / variant / f"seed_{k}"
    where.mkdir(parents=True, exist_ok=True)
    torch.save(model.state_dict(), where / "model.pt")
    (where / "log.json").write_text(json.dumps({"variant": variant, **meta, "log": log}) + "\n")
    print(f"{ASSET_NAME} {variant} seed {k}: final loss {log['final_loss']:.3f}")
    return float(log["final_loss"])


def build_asset(out_dir: Path, scale: str, seed: int) -> dict:
    """Train the variants of :data:`model.VARIANTS` into ``out_dir/<variant>/seed_<k>/`` (``model.pt``,
    ``log.json``; :data:`VARIANT_SEEDS` training seeds each, one scene pool per training seed).

    First the L3 form is chosen on a dev split (scenes from their own stream, never the test
    scenes): PixCLIP is trained at every training seed in both forms and the form with the higher
    mean dev region R@1 becomes ``d_pixclip`` (and the form of ``d_minus_l2`` and ``mask_only``);
    the other is kept as ``d_pixclip_other``. The choice is written to ``out_dir/l3_choice.json``. Returns
    the training metrics (the choice and every model's final loss) for the asset's ``metrics.json``.
    """
    if scale not in SETTINGS:
        raise ValueError(f"scale must be one of {sorted(SETTINGS)}, got {scale!r}")
    settings = SETTINGS[scale]
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tseeds = [1000 * int(seed) + k for k in range(TRAIN_SEEDS)]
    pools = [M.make_batches(S.make_scenes(settings.train_scenes, np.random.default_rng([t, 1]))) for t in tseeds]
    meta = lambda k, form: {"train_seed": tseeds[k], "scale": scale, "settings": asdict(settings), "l3_form": form}
    both = {form: [M.train_variant("d_pixclip", settings, tseeds[k], pool=pools[k], l3_form=form)
                   for k in range(VARIANT_SEEDS["d_pixclip"])] for form in M.L3_FORMS}
    dev = S.make_scenes(DEV_SCENES[scale], np.random.default_rng([int(seed), 5]), split="test")
    choice = choose_l3_form({f: [m for m, _ in ms] for f, ms in both.items()}, dev, int(seed))
    (out_dir / "l3_choice.json").write_text(json.dumps(choice, indent=1) + "\n")
    chosen = choice["chosen"]
    other = M.L3_FORMS[1 - M.L3_FORMS.index(chosen)]
    print(f"{ASSET_NAME} L3 form chosen on the dev split: {chosen} (dev region R@1 {choice['dev_region_r1']})")
    final = {}
    for variant, form in (("d_pixclip", chosen), ("d_pixclip_other", other)):
        for k, (model, log) in enumerate(both[form]):
            final[f"{variant}/seed_{k}"] = _save(out_dir, variant, k, model, log, meta(k, form))
    for variant, n_seeds in VARIANT_SEEDS.items():
        if variant in ("d_pixclip", "d_pixclip_other"):
            continue
        for k in range(n_seeds):
            model, log = M.train_variant(variant, settings, tseeds[k], pool=pools[k], l3_form=chosen)
            final[f"{variant}/seed_{k}"] = _save(out_dir, variant, k, model, log, meta(k, M.resolve_form(variant, chosen)))
    return {"l3_choice": choice, "final_loss": final}


def load_choice(path: str | Path) -> dict:
    """The dev-split L3 choice written by :func:`build_asset`."""
    return json.loads((Path(path) / "l3_choice.json").read_text())


def load_models(path: str | Path) -> dict[str, list]:
    """``{variant: [model, ...]}`` (one per training seed, eval mode) from :func:`build_asset`'s folder."""
    path = Path(path)
    out = {}
    for variant in M.VARIANTS:
        models = []
        for where in sorted((path / variant).glob("seed_*")):
            st = json.loads((where / "log.json").read_text())["settings"]
            m = M.DualEncoder(st["dim"], st.get("patch", 4), st.get("vit_depth", 2))
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
        # learned-model floors: worst seed's recall above chance
        "d_over_chance_min": float(np.min(d - g("d_pixclip", "region_chance"))),
        "global_clip_over_chance_min": float(np.min(g("global_clip", "global_r1") - g("global_clip", "global_chance"))),
    }
    for variant, name in (("d_minus_l2", "L2"), ("d_minus_l3", "L3")):
        out[f"branch_{name}_min"] = float(np.min(d - g(variant, "region_r1_box")))
        out[f"branch_{name}"] = paired_difference(d, g(variant, "region_r1_box"), unit=unit)
    out["l3_other_gap"] = paired_difference(d, g("d_pixclip_other", "region_r1_box"), unit=unit)
    return out


def run(config: Config, models: dict[str, list]) -> Result:
    """Evaluate every trained model on ``config.test_scenes`` test scenes drawn from ``config.seed``."""
    sc = S.make_scenes(config.test_scenes, np.random.default_rng([config.seed, 7]), split="test")
    tokens = M.eval_tokens(sc, np.random.default_rng([config.seed, 8]))
    metrics = {}
    with torch.no_grad(), torch_threads(1):
        for variant, ms in models.items():
            rows = [M.evaluate(m, variant, sc, None, group=config.global_group, tokens=tokens) for m in ms]
            metrics[variant] = {k: [r[k] for r in rows] for k in rows[0]}
    return Result(metrics=metrics, scenes=sc, stats=summarise(metrics))


