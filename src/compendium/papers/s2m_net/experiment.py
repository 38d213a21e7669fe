"""The chapter's experiment: the trained-model asset, ``Config``, ``run`` and the statistics of its verdicts."""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import sympy
import torch
from torch import nn

from compendium import data as cdata
from compendium.stacking import StackedModules
from compendium.stats import Estimate, deciding_estimate, loglog_slope, mean_interval, paired_difference
from compendium.training import TrainSpec, fit, seeded_init, torch_threads
from compendium.validation import require_int

from . import layers as L
from . import morphology as M
from . import shapes as S
from .real import grey

__all__ = ["ASSET_NAME", "ARMS", "MIXER_ARMS", "LOSS_ARMS", "INSTRUMENT_ARMS", "evaluate_instruments", "LABELS", "AssetSettings", "settings_for", "width_for",
           "training_set", "train_arm", "build_asset", "load_models", "Config", "Result", "run", "predict",
           "evaluate", "decide", "CLDICE_HEAVY_WEIGHTS", "time_layer", "real_images", "measurements"]

ASSET_NAME = "s2m_net_unets"
MIXER_ARMS = ("unet", "attention", "fno", "s2m")
LOSS_ARMS = ("s2m_masl", "s2m_masl_permuted", "s2m_fixed5", "s2m_masl_frozen", "s2m_cldice_heavy")
#: the power control's fixed weights on the normalised (Dice, BCE, focal, boundary, clDice) terms
CLDICE_HEAVY_WEIGHTS = (0.15, 0.15, 0.05, 0.05, 0.6)
INSTRUMENT_ARMS = ("unet_3class", "s2m_3class")     # the 3-class (background, shaft, tip) variant
ARMS = {"unet": ("none", "dicebce"), "attention": ("attention", "dicebce"), "fno": ("fno", "dicebce"),
        "s2m": ("sstm", "dicebce"), "s2m_masl": ("sstm", "masl"), "s2m_masl_permuted": ("sstm", "masl_permuted"),
        "s2m_fixed5": ("sstm", "fixed5"), "s2m_masl_frozen": ("sstm", "masl_frozen"),
        "s2m_cldice_heavy": ("sstm", "cldice_heavy"), "unet_3class": ("none", "multiclass"), "s2m_3class": ("sstm", "multiclass")}
LABELS = {"unet": "U-Net", "attention": "U-Net + attention", "fno": "U-Net + FNO (ungated)", "s2m": "S2M-toy (SSTM)",
          "s2m_masl": "S2M-toy + MASL", "s2m_masl_permuted": "S2M-toy + MASL, permuted descriptors",
          "s2m_fixed5": "S2M-toy + fixed 5-loss sum", "s2m_masl_frozen": "S2M-toy + MASL, theta and Phi frozen at the prior",
          "s2m_cldice_heavy": "S2M-toy + clDice-heavy fixed weights", "unet_3class": "U-Net, 3 classes", "s2m_3class": "S2M-toy, 3 classes"}


# ------------------------------------------------------------------ asset: the trained U-Nets
@dataclass(frozen=True)
class AssetSettings:
    """Training settings of one scale (chosen in :func:`settings_for`, not registry parameters)."""

    sizes: tuple              # image sides; every arm trains at sizes[0], U-Net and S2M-toy at the others
    train_images: int
    steps: int
    batch_size: int
    learning_rate: float
    base_width: int           # S2M-toy's first-level width; every other arm is matched to its parameters
    modes: int                # K of the spectral mixers
    gate_dim: int             # d of the SSTM gate
    floor: float              # MASL's weight floor
    prior_strength: float
    num_seeds: int
    instrument_images: int = 48   # training images of the 3-class variant
    stack_seeds: bool = True      # train an arm's seeds as one vmapped stack (fast on small maps only)
    other_mixers: bool = True     # also train the attention and ungated-FNO arms (reported, decide no claim)
    contrast: float = 1.0
    noise: float = 0.6
    background: float = 0.8


def settings_for(scale: str) -> AssetSettings:
    if scale == "smoke":
        return AssetSettings(sizes=(32,), train_images=96, steps=100, batch_size=4, learning_rate=2e-2,
                             base_width=6, modes=4, gate_dim=16, floor=0.05, prior_strength=1.0, num_seeds=3, noise=0.3,
                             other_mixers=False)
    if scale == "full":
        return AssetSettings(sizes=(96, 128), train_images=144, steps=100, batch_size=4, learning_rate=2e-2,
                             base_width=6, modes=8, gate_dim=16, floor=0.05, prior_strength=1.0, num_seeds=3, noise=0.3,
                             stack_seeds=False)
    raise ValueError(f"scale must be 'smoke' or 'full', got {scale!r}")


def width_for(mixer: str, target: int, modes: int, gate_dim: int) -> int:
    """The first-level width whose TinyUNet with ``mixer`` has the parameter count closest to ``target``."""
    counts = {w: L.parameter_count(L.TinyUNet(w, mixer, modes, gate_dim)) for w in range(4, 33)}
    return min(counts, key=lambda w: (abs(counts[w] - target), w))


def training_set(rng: np.random.Generator, count: int, size: int, settings: AssetSettings) -> dict:
    """Synthetic images of the three families with their descriptors (raw, (n, 4))."""
    d = S.make_dataset(rng, count, size, contrast=settings.contrast, noise=settings.noise, background=settings.background)
    d["descriptors"] = np.stack([M.descriptors(m[0] > 0.5) for m in d["masks"]])
    return d


def train_arm(arm: str, width: int, train: dict, settings: AssetSettings, train_seeds) -> list:
    """Train one arm at every seed of ``train_seeds`` at once (a :class:`compendium.stacking.StackedModules` of the
    nets, MASL modules per seed); seed ``k`` sees the batches of ``default_rng(10_000 + k)`` in
    every arm. Returns ``[(container, log)]`` per seed (the log is of the loss summed over seeds)."""
    train_seeds = [int(k) for k in np.atleast_1d(train_seeds)]
    mixer, loss_kind = ARMS[arm]
    classes = len(S.INSTRUMENT_CLASSES) if loss_kind == "multiclass" else 1
    if loss_kind == "multiclass":   # the instrument images: integer labels, no descriptors
        X, Y = torch.from_numpy(train["images"]), torch.from_numpy(train["labels"])
        freq = np.bincount(train["labels"].ravel(), minlength=classes) / train["labels"].size
        inv = 1.0 / np.maximum(freq, 1e-6)   # inverse class frequency, scaled to sum to the class count
        class_weight = torch.tensor(classes * inv / inv.sum(), dtype=torch.float32)
    else:
        X, Y, SD = (torch.from_numpy(train[k]) for k in ("images", "masks", "sdf"))
        D = torch.from_numpy(train["descriptors"]).float()
        mean, std = train["descriptors"].mean(0), train["descriptors"].std(0)
    nets, masls = [], []
    for k in train_seeds:
        with seeded_init(k):
            nets.append(L.TinyUNet(width, mixer, settings.modes, settings.gate_dim, classes=classes))
        if loss_kind not in ("dicebce", "multiclass"):   # the fixed sum is MASL with floor 1/5: every weight 1/5
            floor = 1.0 / len(M.LOSSES) if loss_kind == "fixed5" else settings.floor
            if loss_kind == "cldice_heavy":   # fixed weights (floor 0, Phi 0, theta = log w), never trained
                masl = M.MASL(mean, std, floor=0.0, prior_strength=0.0)
                with torch.no_grad():
                    masl.theta.copy_(torch.log(torch.tensor(CLDICE_HEAVY_WEIGHTS)))
            else:
                masl = M.MASL(mean, std, floor=floor, prior_strength=settings.prior_strength)
            if loss_kind in ("masl_frozen", "cldice_heavy"):   # theta and Phi stay where they start
                masl.theta.requires_grad_(False)
                masl.phi.requires_grad_(False)
            masls.append(masl)
    stack = StackedModules(nets)
    container = nn.ModuleDict({"stack": stack, **({"masl": nn.ModuleList(masls)} if masls else {})})
    batches = [np.random.default_rng(10_000 + k) for k in train_seeds]
    shuffles = [np.random.default_rng(20_000 + k) for k in train_seeds]
    n, B, S_ = X.shape[0], settings.batch_size, len(train_seeds)
    shape = X.shape[1:]

    def loss_fn(step):
        idx = torch.from_numpy(np.stack([g.integers(0, n, B) for g in batches]))          # (S, B)
        if loss_kind == "multiclass":
            logits = stack(X[idx]).reshape(S_ * B, classes, *shape[1:])
            return M.multiclass_loss(logits, Y[idx].reshape(S_ * B, *shape[1:]),
                                     class_weight=class_weight).reshape(S_, B).mean(1).sum()
        logits = stack(X[idx]).reshape(S_ * B, *shape)
        y, sd = Y[idx].reshape(S_ * B, *shape), SD[idx].reshape(S_ * B, *shape)
        if loss_kind == "dicebce":
            return (M.dice_loss(logits, y) + M.bce_loss(logits, y)).reshape(S_, B).mean(1).sum()
        terms = M.loss_terms(logits, y, sd).reshape(S_, B, -1)
        total = 0.0
        for s in range(S_):
            m = D[idx[s]]
            if loss_kind == "masl_permuted":
                m = m[torch.from_numpy(shuffles[s].permutation(B))]
            total = total + masls[s](terms[s], m)
        return total

    spec = TrainSpec(max_steps=settings.steps, learning_rate=settings.learning_rate, grad_clip=float(np.sqrt(S_)),
                     warmup_steps=max(1, settings.steps // 10), schedule="cosine", threads=1,
                     log_every=max(1, settings.steps // 4))
    log = fit(container, loss_fn, spec).to_dict()
    nets = stack.unstack(nets)
    out = []
    for s in range(S_):
        parts = {"net": nets[s], **({"masl": masls[s]} if masls else {})}
        out.append((nn.ModuleDict(parts).eval(), log))
    return out


def build_asset(out_dir: Path, scale: str, seed: int) -> dict:
    """Train every arm at every size and training seed (``seed * 100 + k``); write the weights and
    ``metadata.json`` (widths, parameters, FLOPs, logs, MASL weights per family)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    st = settings_for(scale)
    target = L.parameter_count(L.TinyUNet(st.base_width, "sstm", st.modes, st.gate_dim))
    widths = {mixer: width_for(mixer, target, st.modes, st.gate_dim) for mixer in L.MIXERS}
    widths["sstm"] = st.base_width
    meta = {"name": ASSET_NAME, "scale": scale, "seed": int(seed), "settings": asdict(st), "widths": widths, "models": {}}
    start = time.process_time()
    for i, size in enumerate(st.sizes):
        train = training_set(np.random.default_rng(seed * 1000 + size), st.train_images, size, st)
        mixers = MIXER_ARMS if st.other_mixers else ("unet", "s2m")
        arms = mixers + LOSS_ARMS + INSTRUMENT_ARMS if i == 0 else ("unet", "s2m")
        if i == 0:
            instruments = S.make_instrument_dataset(np.random.default_rng(seed * 1000 + size + 1), st.instrument_images, size,
                                                    contrast=st.contrast, noise=st.noise, background=st.background)
        for arm in arms:
            mixer = ARMS[arm][0]
            data = instruments if arm in INSTRUMENT_ARMS else train
            seeds = [seed * 100 + k for k in range(st.num_seeds)]
            if st.stack_seeds:
                trained = train_arm(arm, widths[mixer], data, st, seeds)
            else:   # on larger maps grouped convolutions are slower on CPU than one network at a time
                trained = [pair for k in seeds for pair in train_arm(arm, widths[mixer], data, st, [k])]
            for k, (model, log) in enumerate(trained):
                key = f"{size}_{arm}_{k}"
                torch.save(model.state_dict(), out_dir / f"{key}.pt")
                info = {"size": size, "arm": arm, "mixer": mixer, "loss": ARMS[arm][1], "width": widths[mixer],
                        "classes": int(model["net"].head.out_channels),
                        "train_seed": seed * 100 + k, "parameters": L.parameter_count(model["net"]),
                        "flops": L.count_flops(model["net"], size, size), "log": log}
                if "masl" in model:
                    with torch.no_grad():
                        w = model["masl"].weights(torch.from_numpy(train["descriptors"]).float()).numpy()
                    info["weights_by_family"] = {f: w[train["family"] == j].mean(0).round(4).tolist()
                                                 for j, f in enumerate(train["families"])}
                meta["models"][key] = info
                print(f"{key}: width {widths[mixer]}, loss {log['final_loss']:.3f}")
    meta["cpu_seconds"] = round(time.process_time() - start, 1)
    (out_dir / "metadata.json").write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")
    return {"models": len(meta["models"]), "widths": widths}


def load_models(path: str | Path) -> tuple[dict, dict]:
    """``({(size, arm): [container per seed]}, metadata)`` from an asset folder (eval mode)."""
    path = Path(path)
    meta = json.loads((path / "metadata.json").read_text())
    st = meta["settings"]
    models: dict = {}
    for key, info in sorted(meta["models"].items(), key=lambda kv: (kv[1]["size"], kv[1]["arm"], kv[1]["train_seed"])):
        parts = {"net": L.TinyUNet(info["width"], info["mixer"], st["modes"], st["gate_dim"], classes=info.get("classes", 1))}
        if info["loss"] not in ("dicebce", "multiclass"):
            parts["masl"] = M.MASL(np.zeros(4), np.ones(4), floor=0.0)
        container = nn.ModuleDict(parts)
        container.load_state_dict(torch.load(path / f"{key}.pt", map_location="cpu", weights_only=True))
        models.setdefault((info["size"], info["arm"]), []).append(container.eval())
    return models, meta


# ------------------------------------------------------------------ the chapter's run
@dataclass(frozen=True)
class Config:
    """Every knob of the chapter (the registry's parameters) plus ``seed``."""

    seed: int = 0
    test_per_family: int = 24
    energy_size: int = 352
    energy_modes: tuple = (4, 8, 16, 32, 64, 128)
    headline_modes: int = 32
    energy_synthetic: int = 4
    attention_sizes: tuple = (24, 32, 48, 64)
    sstm_sizes: tuple = (64, 96, 128, 192, 256)
    timing_channels: int = 32
    timing_repeats: int = 5

    def __post_init__(self):
        for name in ("energy_modes", "attention_sizes", "sstm_sizes"):
            object.__setattr__(self, name, tuple(int(v) for v in getattr(self, name)))
        require_int("seed", self.seed, 0, 2**31 - 1)
        require_int("test_per_family", self.test_per_family, 2, 1000)
        require_int("energy_size", self.energy_size, 32, 427)
        require_int("energy_synthetic", self.energy_synthetic, 1, 64)
        require_int("timing_channels", self.timing_channels, 2, 256)
        require_int("timing_repeats", self.timing_repeats, 1, 50)
        if any(k % 2 or k < 2 or k > self.energy_size for k in self.energy_modes) or self.headline_modes not in self.energy_modes:
            raise ValueError(f"energy_modes must be even values in [2, energy_size] containing headline_modes, "
                             f"got {self.energy_modes} and {self.headline_modes}")
        for name in ("attention_sizes", "sstm_sizes"):
            v = getattr(self, name)
            if len(v) < 3 or list(v) != sorted(set(v)) or v[0] < 8:
                raise ValueError(f"{name} must be at least 3 increasing sides >= 8, got {v}")
        if self.sstm_sizes[0] < 32:
            raise ValueError(f"sstm_sizes must start at 32 or more (K = 32 modes), got {self.sstm_sizes}")


@dataclass
class Result:
    config: Config
    settings: dict
    metrics: dict = field(default_factory=dict)      # (size, arm) -> {metric: (seeds, n_test) array}
    families: dict = field(default_factory=dict)     # size -> (n_test,) family index
    tests: dict = field(default_factory=dict)        # size -> test set (images, masks, family)
    params: dict = field(default_factory=dict)       # (size, arm) -> parameters
    flops: dict = field(default_factory=dict)        # (size, arm) -> FLOPs per image
    masl_weights: dict = field(default_factory=dict)
    energy: dict = field(default_factory=dict)       # name -> fractions over energy_modes (DC removed)
    energy_dc: dict = field(default_factory=dict)    # name -> fraction at headline K with the mean kept
    timing: dict = field(default_factory=dict)       # 'attention' / 'sstm' -> (sizes, median seconds)
    checks: dict = field(default_factory=dict)       # implementation checks' numbers
    symbolic: dict = field(default_factory=dict)
    instrument: dict = field(default_factory=dict)   # arm -> (seeds, n_test, 2) Dice of shaft, tip (points)


def predict(container: nn.Module, images: np.ndarray, batch: int = 32) -> np.ndarray:
    """Hard masks (logit > 0), (n, H, W) bool."""
    out = []
    with torch.no_grad():
        for i in range(0, len(images), batch):
            out.append(container["net"](torch.from_numpy(images[i:i + batch]))[:, 0].numpy() > 0)
    return np.concatenate(out)


def evaluate(container: nn.Module, test: dict) -> dict:
    """Per test image: Dice, clDice (points, x100), Betti-0 error and HD95 (pixels)."""
    pred, gt = predict(container, test["images"]), test["masks"][:, 0] > 0.5
    return {"dice": 100 * np.array([M.dice_score(p, g) for p, g in zip(pred, gt)]),
            "cldice": 100 * np.array([M.cldice_score(p, g) for p, g in zip(pred, gt)]),
            "betti0": np.array([M.betti0_error(p, g) for p, g in zip(pred, gt)], float),
            "hd95": np.array([M.hd95(p, g) for p, g in zip(pred, gt)])}


def evaluate_instruments(container: nn.Module, test: dict) -> np.ndarray:
    """Per test image, hard Dice (points) of the shaft and of the tip (argmax of the 3 logits), (n, 2)."""
    with torch.no_grad():
        pred = container["net"](torch.from_numpy(test["images"])).argmax(1).numpy()
    k = len(S.INSTRUMENT_CLASSES)
    return 100 * np.stack([M.multiclass_dice_scores(p, g, k) for p, g in zip(pred, test["labels"])])


def decide(estimates: dict, threshold: float) -> tuple:
    """``(key, estimate)`` of the seed deciding "every seed's interval lies above ``threshold``"
    (:func:`compendium.stats.deciding_estimate`: a seed whose whole interval is at or below it if
    any, else the seed with the lowest lower end)."""
    key = deciding_estimate(estimates, side="low", threshold=threshold)
    return key, estimates[key]


def time_layer(kind: str, side: int, channels: int, repeats: int, modes: int = 32) -> float:
    """Median wall seconds of one forward pass (no grad, one thread) of a single mixer on a
    ``side x side`` map: attention on one image, SSTM on a batch of four (so that arithmetic, not
    call overhead, dominates at the smallest side)."""
    with seeded_init(0):
        layer = L.SelfAttention2d(channels, heads=1) if kind == "attention" else L.SSTMBlock(channels, modes, 16)
    batch = 1 if kind == "attention" else 4
    x = torch.randn(batch, channels, side, side, generator=torch.Generator().manual_seed(side))
    times = []
    with torch.no_grad(), torch_threads(1):
        layer(x)
        for _ in range(repeats):
            t0 = time.perf_counter()
            layer(x)
            times.append(time.perf_counter() - t0)
    return float(np.median(times))


def real_images(side: int) -> dict:
    """Grey real images at ``side x side``: centre crops of the photographs and the cameraman, the
    retina resized (anti-aliased) from 1411 px. All loaded through ``compendium.data``."""
    from skimage.transform import resize

    def crop(x):
        h, w = x.shape
        return x[(h - side) // 2:(h - side) // 2 + side, (w - side) // 2:(w - side) // 2 + side]

    photos = cdata.load("sklearn_sample_photos").data
    out = {name: crop(grey(im)) for name, im in zip(("photo: china", "photo: flower"), photos)}
    out["retina (skimage)"] = resize(grey(cdata.load("skimage_retina").data[0]), (side, side), anti_aliasing=True)
    out["camera (skimage)"] = crop(grey(cdata.load("skimage_camera").data[0]))
    return out


def run(config: Config, models: dict, asset_meta: dict) -> Result:
    """Evaluate the trained arms, measure spectra, timing and the implementation checks."""
    st = asset_meta["settings"]
    result = Result(config, st)
    render = {k: st[k] for k in ("contrast", "noise", "background")}
    # -- trained models on fresh test images (drawn from the chapter seed)
    for size in st["sizes"]:
        test = S.make_dataset(np.random.default_rng([config.seed, size]), 3 * config.test_per_family, size, **render)
        result.tests[size], result.families[size] = test, test["family"]
        for (s, arm), containers in models.items():
            if s != size or arm in INSTRUMENT_ARMS:
                continue
            per = [evaluate(c, test) for c in containers]
            result.metrics[(size, arm)] = {k: np.stack([p[k] for p in per]) for k in per[0]}
            info = next(v for v in asset_meta["models"].values() if v["size"] == size and v["arm"] == arm)
            result.params[(size, arm)], result.flops[(size, arm)] = info["parameters"], info["flops"]
            if "weights_by_family" in info:
                result.masl_weights[arm] = [v["weights_by_family"] for v in asset_meta["models"].values()
                                            if v["size"] == size and v["arm"] == arm]
    # -- the 3-class instrument variant (first size only)
    size0 = st["sizes"][0]
    itest = S.make_instrument_dataset(np.random.default_rng([config.seed, size0, 3]), config.test_per_family, size0, **render)
    result.tests["instruments"] = itest
    for arm in INSTRUMENT_ARMS:
        if (size0, arm) in models:
            result.instrument[arm] = np.stack([evaluate_instruments(c, itest) for c in models[(size0, arm)]])
            info = next(v for v in asset_meta["models"].values() if v["size"] == size0 and v["arm"] == arm)
            result.params[(size0, arm)], result.flops[(size0, arm)] = info["parameters"], info["flops"]
    # -- spectral concentration
    side, modes = config.energy_size, config.energy_modes
    images = real_images(side)
    rng = np.random.default_rng([config.seed, 7])
    for fam in S.FAMILIES:
        images[f"synthetic: {fam}"] = np.stack([S.render_image(rng, S.family_mask(fam, rng, side), **render)
                                                for _ in range(config.energy_synthetic)])
    images["white noise (control)"] = rng.standard_normal((side, side))
    for name, x in images.items():
        result.energy[name] = np.array([np.mean(S.low_frequency_energy_fraction(x, k)) for k in modes])
        result.energy_dc[name] = float(np.mean(S.low_frequency_energy_fraction(x, config.headline_modes, remove_mean=False)))
    result.checks["parseval_gap"] = max(S.parseval_gap(images[n]) for n in ("photo: china", "photo: flower"))
    # -- timing (volatile) and the FLOP proxies
    for kind, sizes in (("attention", config.attention_sizes), ("sstm", config.sstm_sizes)):
        result.timing[kind] = (np.array(sizes), np.array([time_layer(kind, s, config.timing_channels, config.timing_repeats)
                                                          for s in sizes]))
    # -- implementation checks
    g = torch.Generator().manual_seed(config.seed)
    with seeded_init(config.seed):
        mixer = L.SpectralMixer(3, 16).set_identity()
        blocks = {"sstm": L.SSTMBlock(4, 8, 16), "fno": L.FNOBlock(4, 8), "attention": L.SelfAttention2d(4),
                  "conv3x3 x4": nn.Sequential(*[m for _ in range(4) for m in (nn.Conv2d(4, 4, 3, padding=1), nn.GELU())])}
        masl = M.MASL(np.zeros(4), np.ones(4), floor=st["floor"])
        with torch.no_grad():
            masl.theta.normal_(0, 2.0, generator=g)
            masl.phi.normal_(0, 2.0, generator=g)
    x = torch.randn(2, 3, 16, 16, generator=g)
    with torch.no_grad():
        result.checks["identity_gap"] = float((mixer(x) - x).abs().max())
        w = masl.weights(torch.randn(200, 4, generator=g) * 3)
    result.checks["simplex_gap"] = float((w.sum(1) - 1).abs().max())
    result.checks["floor_gap"] = float(st["floor"] - w.min())
    result.checks["corner_gradient"] = {k: L.corner_gradient(b, 4) for k, b in blocks.items()}
    one = L.SSTMBlock(16, 8, 16)
    result.checks["flop_formula_gap"] = max(abs(L.count_flops(one, s, s, 16) - L.flops_sstm(s * s, 16, 8)) /
                                            L.flops_sstm(s * s, 16, 8) for s in (16, 32)) + \
        max(abs(L.count_flops(L.SelfAttention2d(16), s, s, 16) - L.flops_attention(s * s, 16)) / L.flops_attention(s * s, 16)
            for s in (8, 16))
    yy, xx = np.mgrid[0:64, 0:64]
    disc = (yy - 31.5) ** 2 + (xx - 31.5) ** 2 <= 24**2
    square = np.zeros((64, 64), bool)
    square[10:40, 20:50] = True
    line = np.zeros((64, 64), bool)
    line[32, 8:56] = True
    drng = np.random.default_rng([config.seed, 11])
    others = {"disc": disc, "square": square, **{f: S.family_mask(f, drng, 64) for f in S.FAMILIES}}
    result.checks["disc_compactness"] = float(M.descriptors(disc)[0])
    result.checks["square_solidity"] = float(1 - M.descriptors(square)[2])
    result.checks["line_tubularity"] = float(M.descriptors(line)[1])
    result.checks["tubularity_others"] = {k: float(M.descriptors(v)[1]) for k, v in others.items()}
    # -- sympy
    result.symbolic["spectrum_share"] = sympy.Rational(32**2, 352**2)
    result.symbolic["spectrum_gap"] = sympy.Rational(32**2, 352**2) - sympy.Rational(1, 121)
    ratio, limit = L.flop_ratio_symbolic(352, 64, 32, 16)
    result.symbolic["flop_ratio_352"], result.symbolic["flop_ratio_limit"] = ratio, limit
    result.symbolic["limit_is_infinite"] = bool(limit == sympy.oo)
    return result


def measurements(result: Result) -> dict:
    """Every number the ledger decides on (estimates over the stated units)."""
    cfg, st = result.config, result.settings
    out: dict = {"sizes": list(st["sizes"])}
    fam_index = {f: i for i, f in enumerate(S.FAMILIES)}

    def per_seed(size, a, b, metric, family):
        sel = result.families[size] == fam_index[family]
        A, B = result.metrics[(size, a)][metric], result.metrics[(size, b)][metric]
        return {f"seed {k}": paired_difference(A[k, sel], B[k, sel], unit="test images") for k in range(A.shape[0])}

    for size in st["sizes"]:
        est = per_seed(size, "s2m", "unet", "dice", "vessels")
        out[f"s2m_vs_unet_{size}"] = decide(est, -0.5)
        out[f"s2m_vs_unet_{size}_all"] = est
        vessel_dice = result.metrics[(size, "unet")]["dice"][:, result.families[size] == 0] / 100   # (seeds, n)
        unet = vessel_dice.mean(1)
        out[f"unet_headroom_{size}"] = mean_interval(unet, unit="trained models") if len(unet) > 1 else None
        learned = {f"seed {k}": mean_interval(d, unit="test images") for k, d in enumerate(vessel_dice)}
        out[f"unet_learned_{size}"], out[f"unet_learned_{size}_all"] = decide(learned, 0.3), learned
        out[f"flop_ratio_{size}"] = result.flops[(size, "s2m")] / result.flops[(size, "unet")]
    size0 = st["sizes"][0]
    if all(a in result.instrument for a in INSTRUMENT_ARMS):
        s2m_i, unet_i = (result.instrument[a].mean(2) for a in ("s2m_3class", "unet_3class"))   # (seeds, n)
        est = {f"seed {k}": paired_difference(s2m_i[k], unet_i[k], unit="test images") for k in range(len(s2m_i))}
        out["instrument_s2m_vs_unet"], out["instrument_s2m_vs_unet_all"] = decide(est, -0.5), est
        out["instrument_headroom"] = mean_interval(unet_i.mean(1) / 100, unit="trained models")
        learned = {f"seed {k}": mean_interval(d / 100, unit="test images") for k, d in enumerate(unet_i)}
        out["instrument_learned"], out["instrument_learned_all"] = decide(learned, 0.3), learned
        out["instrument_table"] = [{"arm": LABELS[a], "parameters": result.params[(size0, a)],
                                    "MFLOPs": result.flops[(size0, a)] / 1e6,
                                    **{f"dice {c}": float(result.instrument[a][:, :, j].mean())
                                       for j, c in enumerate(S.INSTRUMENT_CLASSES[1:])},
                                    "dice mean": float(result.instrument[a].mean())} for a in INSTRUMENT_ARMS]
    out["masl_vs_dicebce"] = decide(per_seed(size0, "s2m_masl", "s2m", "cldice", "vessels"), 0.0)
    out["masl_vs_permuted"] = decide(per_seed(size0, "s2m_masl", "s2m_masl_permuted", "cldice", "vessels"), 0.0)
    out["masl_vs_fixed5"] = decide(per_seed(size0, "s2m_masl", "s2m_fixed5", "cldice", "vessels"), 0.0)
    out["masl_ellipse_dice"] = decide(per_seed(size0, "s2m_masl", "s2m", "dice", "ellipses"), -1.0)
    if all((size0, a) in result.metrics for a in ("s2m_masl_frozen", "s2m_cldice_heavy")):
        out["cldice_heavy_vs_dicebce"] = decide(per_seed(size0, "s2m_cldice_heavy", "s2m", "cldice", "vessels"), 0.0)
        out["frozen_vs_dicebce"] = decide(per_seed(size0, "s2m_masl_frozen", "s2m", "cldice", "vessels"), 0.0)
        out["frozen_vs_learned"] = decide(per_seed(size0, "s2m_masl_frozen", "s2m_masl", "cldice", "vessels"), 0.0)
    # MASL's weights on the vessel training images (mean over seeds), learned and at the prior
    out["vessel_weights"] = {arm: dict(zip(M.LOSSES, np.mean([w["vessels"] for w in ws], axis=0).round(4).tolist()))
                             for arm, ws in result.masl_weights.items()}
    base = result.metrics[(size0, "s2m")]["cldice"][:, result.families[size0] == 0].mean(1)
    out["masl_headroom"] = mean_interval(base / 100, unit="trained models")
    params = {arm: p for (s, arm), p in result.params.items() if s == size0 and arm not in INSTRUMENT_ARMS}
    out["param_spread"] = max(abs(p / params["s2m"] - 1) for p in params.values())
    k = cfg.energy_modes.index(cfg.headline_modes)
    out["energy_photos"] = min(result.energy[n][k] for n in ("photo: china", "photo: flower"))
    out["energy_retina"] = float(result.energy["retina (skimage)"][k])
    out["energy_noise"] = float(result.energy["white noise (control)"][k])
    for kind in ("attention", "sstm"):
        sides, secs = result.timing[kind]
        out[f"time_slope_{kind}"] = loglog_slope(sides.astype(float) ** 2, secs, unit="image sizes")
    a_sides = np.array(cfg.attention_sizes, float) ** 2
    s_sides = np.array(cfg.sstm_sizes, float) ** 2
    out["flop_slope_attention"] = loglog_slope(a_sides, L.flops_attention(a_sides, cfg.timing_channels), unit="image sizes").point
    out["flop_slope_sstm"] = loglog_slope(s_sides, L.flops_sstm(s_sides, cfg.timing_channels, 32, 16, log2=np.log2), unit="image sizes").point
    # summary table of every trained arm: mean over seeds of the per-image means, by family
    rows = []
    for (size, arm), mets in sorted(result.metrics.items(), key=lambda kv: (kv[0][0], list(ARMS).index(kv[0][1]))):
        for fam, j in fam_index.items():
            sel = result.families[size] == j
            rows.append({"size": size, "arm": LABELS[arm], "family": fam, "parameters": result.params[(size, arm)],
                         "MFLOPs": result.flops[(size, arm)] / 1e6,
                         **{m: float(v[:, sel].mean()) for m, v in mets.items()}})
    out["table"] = rows
    return out
