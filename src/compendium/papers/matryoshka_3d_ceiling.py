"""The ceiling controls of the matryoshka_3d chapter: what this recipe reaches at one small size.

Two models start from the stage-0 asset and train exactly as the stage-1 variants do (same steps,
rate, schedule and batch stream at each training seed, :func:`train_ceiling` mirrors
``model.train_variant``) but with all their loss on one small size: ``width8_only`` (the MRL loss
with the single width 8, weight 1, at the last layer) and ``layer2_only`` (the full-width loss at
exit layer 2 only, through the final norm). Their R@1 gain over the plain model at the claim's cell
says whether the bars of ``mrl-width-8`` (+15) and ``mll-layer-2`` (+20) are reachable at all by
this budget. They live in their own module and asset (``matryoshka_3d_ceiling``) so that the
stage-0 and stage-1 assets, whose inputs are the ``matryoshka_3d`` package, stay as they are.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from compendium.training import TrainSpec, fit, seeded_init, torch_threads

from .matryoshka_3d import data as D
from .matryoshka_3d.experiment import HEADLINE_EFFECTS, cube_recall, paired_gain
from .matryoshka_3d.model import (STAGE0_ASSET, AssetSettings, Encoder, EncoderSettings, Variant, _load_encoder, _rng,
                                  _settings_from, mll_layers, mrl_dims, task_for, train_seed_of, variant_loss)

CEILING_ASSET = "matryoshka_3d_ceiling"
CEILINGS = ("width8_only", "layer2_only")
LABELS = {"width8_only": "width-8 only", "layer2_only": "layer-2 only"}

__all__ = ["CEILING_ASSET", "CEILINGS", "LABELS", "ceiling_spec", "train_ceiling", "build_ceiling", "load_ceilings",
           "evaluate_ceilings", "ceiling_measurements", "ceiling_reading"]


def ceiling_spec(name: str, settings: EncoderSettings) -> Variant:
    """``width8_only``: widths ``(8,)`` with weight 1 at the last layer; ``layer2_only``: full width at exit 2."""
    d, L = settings.hidden_size, settings.num_layers
    exits = mll_layers(L)
    small_exit = 2 if 2 in exits else exits[0]
    table = {"width8_only": ((mrl_dims(d)[0],), (1.0,), (L,), False, None),
             "layer2_only": ((d,), (1.0,), (small_exit,), False, None)}
    if name not in table:
        raise ValueError(f"ceiling must be one of {CEILINGS}, got {name!r}")
    return Variant(name, *table[name])


def train_ceiling(stage0: Encoder, name: str, settings: AssetSettings, pool: D.TrainingPool, train_seed: int):
    """Stage 1 for a ceiling model: ``model.train_variant`` with the ceiling's loss (the same start,
    optimiser, schedule, steps and batch stream ``_rng(train_seed, 2)`` as every variant)."""
    spec_t = pool.task.spec
    spec_v = ceiling_spec(name, settings.encoder)
    with seeded_init(0):                        # the random init is overwritten: keep the global stream unmoved
        model = Encoder(settings.encoder, spec_t.vocab_size, spec_t.max_length)
    model.load_state_dict(stage0.state_dict())
    batch_rng = _rng(train_seed, 2)

    def loss_fn(step):
        return variant_loss(model, spec_v, pool.batch(settings.batch_size, batch_rng, settings.balanced_languages))

    opt = torch.optim.AdamW(model.parameters(), lr=settings.stage1_learning_rate, weight_decay=0.01)
    spec = TrainSpec(max_steps=settings.stage1_steps, learning_rate=settings.stage1_learning_rate, weight_decay=0.01,
                     grad_clip=1.0, schedule="cosine", threads=1, log_every=max(1, settings.stage1_steps // 4))
    return model, fit(model, loss_fn, spec, optimizer=opt).to_dict()


def build_ceiling(out_dir: Path, scale: str, seed: int, stage0_dir: Path | None = None) -> dict:
    """The ``matryoshka_3d_ceiling`` asset: ``<ceiling>_<k>.pt`` for both ceilings at each training
    seed and ``metadata.json``; settings and training pool as the stage-1 variant assets take them."""
    from compendium.assets import asset_dir

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    stage0_dir = Path(stage0_dir) if stage0_dir is not None else asset_dir(STAGE0_ASSET, scale)
    stage0_meta = json.loads((stage0_dir / "metadata.json").read_text())
    if int(stage0_meta["seed"]) != int(seed):
        raise ValueError(f"the stage-0 asset was built at seed {stage0_meta['seed']}, the ceilings at {seed}")
    settings = _settings_from(stage0_meta)
    task = task_for(settings, seed)
    meta = {"name": CEILING_ASSET, "scale": scale, "seed": int(seed), "models": {}}
    with torch_threads(1):
        pool = D.TrainingPool.make(task, settings.pairs_high, settings.pairs_low, _rng(seed, 4))
        stage0 = _load_encoder(settings, stage0_dir / "stage0.pt")
        for name in CEILINGS:
            for k in range(settings.num_seeds):
                model, log = train_ceiling(stage0, name, settings, pool, train_seed_of(seed, k))
                torch.save(model.state_dict(), out_dir / f"{name}_{k}.pt")
                meta["models"][f"{name}_{k}"] = {"variant": name, "train_seed": train_seed_of(seed, k), "log": log}
                print(f"{name} seed {k}: loss {log['final_loss']:.3f}")
    (out_dir / "metadata.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    return {k: v["log"]["final_loss"] for k, v in meta["models"].items()}


def load_ceilings(ceiling_dir: str | Path, settings: AssetSettings, asset_seed: int) -> tuple[dict, dict]:
    """``({ceiling: [model per training seed]}, {key: training record})``; refuses another asset seed."""
    path = Path(ceiling_dir)
    meta = json.loads((path / "metadata.json").read_text())
    if int(meta["seed"]) != int(asset_seed):
        raise ValueError(f"{path}: built at seed {meta['seed']}, the stage-0 asset at {asset_seed}")
    models: dict = {name: [] for name in CEILINGS}
    for key, info in sorted(meta["models"].items(), key=lambda kv: (kv[1]["variant"], kv[1]["train_seed"])):
        models[info["variant"]].append(_load_encoder(settings, path / f"{key}.pt"))
    return models, meta["models"]


def evaluate_ceilings(result, models: dict, settings: AssetSettings, meta: dict) -> dict:
    """``{ceiling: (K, 1, E, M) R@1}`` on the evaluation set the chapter's ``run`` drew (same seed, same draw)."""
    task = task_for(settings, meta["seed"])
    evalset = D.make_retrieval_set(task, result.config.eval_docs, _rng(result.config.seed, 42))   # as ``run`` draws it
    with torch.no_grad():
        return {name: np.stack([cube_recall(m, evalset, result.exits, result.dims, [None])["recall"] for m in models[name]])
                for name in CEILINGS}


def ceiling_measurements(result, ceilings: dict) -> dict:
    """Each ceiling's paired gain over the plain model at its claim's cell (width 8 at the last layer;
    exit 2 at full width), the bar it is judged against, and how far MRL / MLL sit below it."""
    c = result.cubes
    L, M = len(result.exits) - 1, len(result.dims) - 1
    e2 = result.exits.index(2) if 2 in result.exits else 0
    m8 = result.dims.index(8) if 8 in result.dims else 0
    cells = {"ceiling_w8": (ceilings["width8_only"][:, 0, L, m8], c["plain"][:, 0, L, m8], c["mrl"][:, 0, L, m8],
                            HEADLINE_EFFECTS["mrl"], "mrl"),
             "ceiling_l2": (ceilings["layer2_only"][:, 0, e2, M], c["plain"][:, 0, e2, M], c["mll"][:, 0, e2, M],
                            HEADLINE_EFFECTS["mll"], "mll")}
    out = {}
    for key, (ceiling, plain, nested, bar, claim) in cells.items():
        out[f"{key}_gain"] = paired_gain(ceiling, plain)
        out[f"{key}_per_seed"] = ceiling - plain
        out[f"{key}_each_agrees"] = bool(np.all(ceiling - plain >= bar))
        out[f"{claim}_below_ceiling"] = paired_gain(ceiling, nested)
    return out


def ceiling_reading(ceiling: str, claim: str, label: str, calibrated: bool = True) -> str:
    """The sentence that says what a claim's own verdict means given its ceiling control's verdict
    (``calibrated``: whether the stage-0 precondition passed; without it neither row says anything)."""
    if not calibrated:
        return ("stage 0 is not calibrated in this run (its precondition did not pass), so neither the ceiling "
                f"nor {label} says anything about the method")
    if ceiling != "pass" and claim == "pass":
        return (f"{label} clears the bar while its ceiling control does not ({ceiling}), so the pass is not backed "
                "by the control (unsupported)")
    if ceiling == "pass":
        return {"pass": f"the bar is reachable at this scale and {label} reaches it",
                "fail": f"the bar is reachable at this scale and {label} falls short of it",
                }.get(claim, f"the bar is reachable at this scale; whether {label} reaches it is not decided")
    if ceiling == "fail":
        return (f"even the model trained only at that size does not clear the bar with this budget, so the bar is "
                f"out of reach at this scale and {label}'s own verdict says nothing about the method (unsupported)")
    return (f"whether the bar is reachable at this scale is not decided, so {label}'s own verdict is not "
            f"informative (unsupported)")
