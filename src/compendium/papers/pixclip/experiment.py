"""The asset builder (every variant x training seed) and ``run``: metrics and ledger statistics."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch

from scipy import stats as scipy_stats

from compendium.stats import Estimate, cluster_bootstrap, deciding_estimate, mean_interval, paired_difference
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
    items: dict = field(default_factory=dict)   # variant -> [per-region arrays, one dict per training seed]


def per_seed(metrics, variant, key):
    return np.asarray(metrics[variant][key], float)


@torch.no_grad()
def region_items(model, variant: str, sc: S.Scenes, tokens: dict) -> dict:
    """Per valid test region (``np.nonzero(sc.valid)`` order) of one trained model, 0/1 or 0.5 values.

    ``hit_box`` / ``hit_exact``: R@1 among the same scene's region texts with the box / exact mask
    (ties share the credit); ``hit_permuted``: the same with every region given the box mask of the
    next region of its scene (cyclically), scored against its own text; ``colour`` / ``texture``:
    the two-alternative choice of the true text over the colour / texture foil (box mask);
    ``scene``, ``held`` (held-out colour x shape pair), ``late`` (late-difference scene) and
    ``chance`` (1 / regions in the scene) describe the region. :func:`model.evaluate` (the dev
    rule the asset was built with) gives the same means on the held-out regions.
    """
    images = torch.from_numpy(sc.images)
    idx = np.nonzero(sc.valid)
    img = images[idx[0]]
    unit = lambda x: torch.nn.functional.normalize(x, dim=-1).numpy()
    t_true = unit(M.text_view(model, variant, torch.from_numpy(tokens["true"])))
    foils = {k: unit(M.text_view(model, variant, torch.from_numpy(tokens[k]))) for k in ("colour", "texture")}
    k = sc.valid.sum(1)[idx[0]]
    start = np.concatenate([[0], np.cumsum(sc.valid.sum(1))[:-1]])[idx[0]]
    nxt = start + (np.arange(len(idx[0])) - start + 1) % k            # the next region of the same scene
    box = torch.from_numpy(sc.box[idx][:, None].astype(np.float32))
    exact = torch.from_numpy(sc.exact[idx][:, None].astype(np.float32))
    v_box, v_exact, v_perm = (unit(M.region_views(model, variant, img, m)) for m in (box, exact, box[nxt]))
    true_s = (v_box * t_true).sum(1)
    return {"scene": idx[0], "held": np.array([(int(c), int(s)) in set(S.HELD_OUT) for s, c in sc.attrs[idx][:, :2]]),
            "late": sc.late[idx[0]], "chance": 1.0 / k,
            "hit_box": M.scene_recall(v_box, t_true, idx, sc.valid),
            "hit_exact": M.scene_recall(v_exact, t_true, idx, sc.valid),
            "hit_permuted": M.scene_recall(v_perm, t_true, idx, sc.valid),
            **{key: M._choice_accuracy(true_s, (v_box * f).sum(1)) for key, f in foils.items()}}


@torch.no_grad()
def global_recall(model, sc: S.Scenes, tokens: dict, group: int) -> float:
    """Global R@1 (percent) of image vs caption in consecutive groups of ``group`` scenes."""
    images = torch.from_numpy(sc.images)
    unit = lambda x: torch.nn.functional.normalize(x, dim=-1).numpy()
    g = unit(model.vision(images, torch.ones_like(images[:, :1])))
    tg = unit(model.text(torch.from_numpy(tokens["global"])))
    r1 = [M.recall_at_1(g[s:s + group] @ tg[s:s + group].T, np.arange(group)) for s in range(0, len(g) - group + 1, group)]
    return 100 * float(np.mean(r1))


def item_means(items: dict) -> dict:
    """The per-model means (percent) the figures and prose read: region metrics on held-out pairs,
    texture foils on every test region."""
    h = items["held"]
    late = h & items["late"]
    return {"region_r1_box": 100 * float(items["hit_box"][h].mean()),
            "region_r1_exact": 100 * float(items["hit_exact"][h].mean()),
            "region_r1_permuted": 100 * float(items["hit_permuted"][h].mean()),
            "region_chance": 100 * float(items["chance"][h].mean()),
            "late_choice": 100 * float(items["colour"][late].mean()),
            "early_choice": 100 * float(items["colour"][h & ~items["late"]].mean()),
            "colour_choice": 100 * float(items["colour"][h].mean()),
            "texture_choice": 100 * float(items["texture"].mean())}


def quadrant_rule_recall(sc: S.Scenes) -> float:
    """Same-scene R@1 (percent, held-out regions) of a hand-coded rule that ranks the region texts by
    whether their quadrant word names the quadrant of the box's centre: position alone, no content."""
    idx = np.nonzero(sc.valid)
    texts = S.region_tokens(sc)[idx]
    at = np.argmax(texts == S.TOKEN["at"], axis=1)                    # the region's own "at <quadrant>"
    q_text = texts[np.arange(len(texts)), at + 1] - S.TOKEN[S.QUADRANTS[0]]
    centre = np.array([[(y0 + y1) / 2, (x0 + x1) / 2] for y0, x0, y1, x1 in map(S.mask_to_bbox, sc.box[idx])])
    q_box = 2 * (centre[:, 0] >= S.SIDE / 2) + (centre[:, 1] >= S.SIDE / 2)
    hits = M.scene_recall(np.eye(4)[q_box], np.eye(4)[q_text], idx, sc.valid)
    held = np.array([(int(c), int(s)) in set(S.HELD_OUT) for s, c in sc.attrs[idx][:, :2]])
    return 100 * float(hits[held].mean())


def seed_estimates(values: list, clusters: list, seed: int, tag: int) -> list[Estimate]:
    """One cluster-bootstrap interval (test scenes as clusters) per trained model."""
    return [cluster_bootstrap(v, c, unit="test scenes (one trained model)", rng=np.random.default_rng([seed, tag, k]))
            for k, (v, c) in enumerate(zip(values, clusters))]


def deciding(estimates: list[Estimate], threshold: float) -> dict:
    """The trained model that decides "every model clears ``threshold``" and every model's interval."""
    k = deciding_estimate(estimates, side="low", threshold=threshold)
    return {"estimate": estimates[k], "model": int(k), "per_model": estimates}


def seeds_to_resolve(differences, margin: float, level: float = 0.95, most: int = 500) -> int:
    """Smallest number of paired training seeds whose t interval has half-width below ``margin`` at
    the spread of ``differences`` (``most`` + 1 when none up to ``most`` does)."""
    sd = float(np.std(differences, ddof=1))
    for n in range(2, most + 1):
        if scipy_stats.t.ppf(0.5 + level / 2, n - 1) * sd / np.sqrt(n) < margin:
            return n
    return most + 1


def summarise(metrics: dict, items: dict, seed: int = 0) -> dict:
    """Every number a ledger verdict reads (percentage points).

    "In each training seed" rows: one interval per trained model over its test scenes (cluster
    bootstrap, scenes as clusters) and the model that decides the conjunction
    (:func:`compendium.stats.deciding_estimate`). Controls and descriptions: per-seed means.
    """
    g = lambda v, k: per_seed(metrics, v, k)
    unit = "training seeds"
    d, c = g("d_pixclip", "region_r1_box"), g("c_long_nomask", "region_r1_box")
    it = lambda v: items[v]
    held = lambda v, f: [100 * f(x)[x["held"]] for x in it(v)]
    scenes_held = lambda v: [x["scene"][x["held"]] for x in it(v)]
    out = {
        "mask_gain": paired_difference(d, c, unit=unit),
        "c_chance_gap_max": float(np.max(np.abs(c - g("c_long_nomask", "region_chance")))),
        "permuted_over_chance_max": float(np.max(g("d_pixclip", "region_r1_permuted") - g("d_pixclip", "region_chance"))),
        "mask_only_chance_gap_max": float(np.max(np.abs(g("mask_only", "texture_choice") - 50.0))),
        "long_early_min": float(min(np.min(g(v, "early_choice")) for v in ("c_long_nomask", "d_pixclip"))),
        "short_late_gap_max": float(max(np.max(np.abs(g(v, "late_choice") - 50.0)) for v in ("a_clip_short", "b_mask_short"))),
        "global_difference": paired_difference(g("d_pixclip", "global_r1"), g("global_clip", "global_r1"), unit=unit),
        "global_clip_r1": mean_interval(g("global_clip", "global_r1"), unit=unit),
        "shape_transfer": g("d_pixclip", "region_r1_exact") / np.maximum(d, 1e-9),
    }
    out["global_seeds_needed"] = seeds_to_resolve(g("d_pixclip", "global_r1") - g("global_clip", "global_r1"), 5.0)
    out["learned"] = deciding(seed_estimates(held("d_pixclip", lambda x: x["hit_box"] - x["chance"]),
                                             scenes_held("d_pixclip"), seed, 1), 10.0)
    out["masks_used"] = deciding(seed_estimates([a - b for a, b in zip(held("d_pixclip", lambda x: x["hit_box"]),
                                                                         held("c_long_nomask", lambda x: x["hit_box"]))],
                                                scenes_held("d_pixclip"), seed, 2), 20.0)
    out["box_to_shape"] = deciding(seed_estimates(held("d_pixclip", lambda x: x["hit_exact"] - 0.9 * x["hit_box"]),
                                                  scenes_held("d_pixclip"), seed, 3), 0.0)
    out["beats_mask_only"] = deciding(seed_estimates([100 * (a["texture"] - b["texture"]) for a, b in zip(it("d_pixclip"), it("mask_only"))],
                                                     [x["scene"] for x in it("d_pixclip")], seed, 4), 20.0)
    late = [(v, x) for v in ("c_long_nomask", "d_pixclip") for x in it(v)]
    out["long_text"] = deciding(seed_estimates([100 * x["colour"][x["held"] & x["late"]] for _, x in late],
                                               [x["scene"][x["held"] & x["late"]] for _, x in late], seed, 5), 90.0)
    out["long_text"]["models"] = [f"{v} seed {k % TRAIN_SEEDS}" for k, (v, _) in enumerate(late)]
    for tag, (variant, name) in enumerate((("d_minus_l2", "L2"), ("d_minus_l3", "L3")), start=6):
        diff = [a - b for a, b in zip(held("d_pixclip", lambda x: x["hit_box"]), held(variant, lambda x: x["hit_box"]))]
        out[f"branch_{name}"] = deciding(seed_estimates(diff, scenes_held("d_pixclip"), seed, tag), 2.0)
        out[f"branch_{name}_seeds"] = paired_difference(d, g(variant, "region_r1_box"), unit=unit)
    out["l3_other_gap"] = paired_difference(d, g("d_pixclip_other", "region_r1_box"), unit=unit)
    return out


def run(config: Config, models: dict[str, list]) -> Result:
    """Evaluate every trained model on ``config.test_scenes`` test scenes drawn from ``config.seed``."""
    sc = S.make_scenes(config.test_scenes, np.random.default_rng([config.seed, 7]), split="test")
    tokens = M.eval_tokens(sc, np.random.default_rng([config.seed, 8]))
    metrics, items = {}, {}
    with torch.no_grad(), torch_threads(1):
        for variant, ms in models.items():
            items[variant] = [region_items(m, variant, sc, tokens) for m in ms]
            rows = [{**item_means(x), "global_r1": global_recall(m, sc, tokens, config.global_group),
                     "global_chance": 100.0 / config.global_group} for m, x in zip(ms, items[variant])]
            metrics[variant] = {k: [r[k] for r in rows] for k in rows[0]}
    return Result(metrics=metrics, scenes=sc, stats=summarise(metrics, items, config.seed), items=items)
