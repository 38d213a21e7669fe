"""The chapter's asset: every model trained here, over several training seeds.

Each model family sees the same simulated training recordings (one set per asset seed), a fresh
uniform sample of N events per recording and step, with N drawn per batch from the training
grid, so one model is evaluated at every N. The event2vec width and the frame CNN's width are
picked by one dev procedure: train seed 0 at every grid value, measure dev accuracy at the
headline N (per recording, mean of two re-samplings) and keep the smallest width within one
standard error of the best (:func:`compendium.stats.one_se_pick`), then train the other seeds at it.
Every other event2vec variant uses the width picked for event2vec.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from torch.nn import functional as F

from compendium.stacking import StackedAdamW, StackedModules
from compendium.stats import one_se_pick
from compendium.training import TrainSpec, fit, seeded_init

from . import events as ev
from .models import Event2Vec, FrameCNN, PointNet, parameter_count

__all__ = ["ASSET_NAME", "AssetSettings", "settings_for", "FAMILIES", "make_model", "transform", "batch_tensors",
           "logits", "train_stack", "dev_learning_rates", "calibrate_noise", "build_asset", "load_models"]

ASSET_NAME = "event2vec_models"


@dataclass(frozen=True)
class AssetSettings:
    train_per_class: int
    dev_per_class: int
    steps: int
    train_events: tuple
    resolutions: tuple                       # low resolutions trained besides 32 x 32 (1: no position, the control)
    num_seeds: int = 3
    batch_events: int = 1024                 # events per training step: batch_events // N recordings of N events
    # AdamW peak rate per architecture, picked by dev_learning_rates("smoke") from {3e-3, 1e-2, 3e-2}
    # (seed 0, 100 steps, dev accuracy at N = 64; run once before these settings were fixed)
    learning_rates: tuple = (("e2v", 1e-2), ("lookup", 3e-2), ("softmax", 1e-2), ("cnn", 3e-2), ("pointnet", 1e-2),
                             ("pointnet_blind", 3e-3))
    headline_events: int = 64
    # mean background events per recording: the task's difficulty, picked per scale by calibrate_noise
    # (the frame CNN, c = 16, at that scale's budget closest to 0.8 on dev; grid 300, 600, 1200, 2400, 4800;
    # run once each). Full: 0.9975, 0.9912, 0.925, 0.6525, 0.125 -> 1200. Smoke: 0.8125, 0.895, 0.6325,
    # 0.5425, 0.125 -> 300. (It was 150 at both scales before.)
    noise_events: float = 1200.0
    e2v_dims: tuple = (16, 32)               # the dev grid of event2vec's width d
    cnn_channels: tuple = (8, 16, 32)        # the dev grid of the frame CNN's base width c
    heads: int = 2
    layers: int = 2
    bins: int = 8
    pointnet_width: int = 64


def settings_for(scale: str) -> AssetSettings:
    if scale == "smoke":
        return AssetSettings(train_per_class=200, dev_per_class=25, steps=100, train_events=(32, 64, 128), resolutions=(8, 1),
                             noise_events=300.0)
    if scale == "full":
        return AssetSettings(train_per_class=400, dev_per_class=50, steps=400, train_events=(32, 64, 128),
                             resolutions=(16, 8, 1), num_seeds=5)
    raise ValueError(f"scale must be 'smoke' or 'full', got {scale!r}")


# family -> (architecture, data variant); data variants: polarity, merged, even, res<k>
FAMILIES = {
    "e2v": ("e2v", "polarity"), "cnn": ("cnn", "polarity"),
    "pointnet": ("pointnet", "polarity"), "cnn_blind": ("cnn_blind", "polarity"),
    "e2v_merged": ("e2v", "merged"), "softmax_merged": ("softmax", "merged"),
    "cnn_blind_merged": ("cnn_blind", "merged"),
    "lookup_merged": ("lookup", "merged"),
    "e2v_even": ("e2v", "even"), "lookup_even": ("lookup", "even"),
}


def transform(data: ev.EventSet, variant: str, *, test: bool = False) -> ev.EventSet:
    """The data a family sees: ``polarity`` (as recorded), ``merged`` (p = 0), ``even`` (events at
    even x; at test the odd-x events), ``res<k>`` (coordinates on a k x k grid)."""
    if variant == "polarity":
        return data
    if variant == "merged":
        return ev.merge_polarity(data)
    if variant == "even":
        return ev.select_events(data, (data.x % 2) == (1 if test else 0))
    if variant == "even_in":                           # the even-x events at test (in-distribution control)
        return ev.select_events(data, (data.x % 2) == 0)
    if variant.startswith("res"):
        return ev.quantise(data, int(variant[3:]))
    raise ValueError(f"unknown data variant {variant!r}")


def make_model(arch: str, size: int, settings: AssetSettings, height: int = 32):
    """A fresh model: ``size`` is d for event2vec variants, c for the CNN (ignored for PointNet)."""
    common = dict(height=height, width=height)
    if arch in ("e2v", "lookup", "softmax"):
        return Event2Vec(**common, dim=size, heads=settings.heads, layers=settings.layers,
                         embedding="lookup" if arch == "lookup" else "mlp",
                         attention="softmax" if arch == "softmax" else "forgetting")
    if arch in ("cnn", "cnn_blind"):                  # cnn_blind: one time bin, a count image per polarity
        return FrameCNN(**common, bins=settings.bins if arch == "cnn" else 1, channels=size)
    if arch in ("pointnet", "pointnet_blind"):
        return PointNet(**common, use_time=arch == "pointnet", width_hidden=settings.pointnet_width)
    raise ValueError(f"unknown architecture {arch!r}")


def batch_tensors(data: ev.EventSet) -> dict:
    """Torch tensors of a (sampled) event set: x, y, p (long), t (float), mask (bool), label."""
    dtype = torch.get_default_dtype()
    return {"x": torch.from_numpy(data.x.astype(np.int64)), "y": torch.from_numpy(data.y.astype(np.int64)),
            "p": torch.from_numpy(data.p.astype(np.int64)), "t": torch.from_numpy(data.t).to(dtype),
            "mask": torch.from_numpy(data.valid), "label": torch.from_numpy(data.label)}


def logits(model, sampled: ev.EventSet, bins: int | None = None) -> torch.Tensor:
    """Class logits of ``model`` for a sampled event set (frames built here for the CNN, with the
    model's own number of time bins)."""
    if isinstance(model, FrameCNN):
        n = max(int(sampled.valid.sum(1).max()), 1)
        frames = torch.from_numpy(ev.events_to_frames(sampled, model.bins)) * (64.0 / n)   # counts scaled to N = 64
        return model(frames.to(torch.get_default_dtype()))
    b = batch_tensors(sampled)
    return model(b["x"], b["y"], b["p"], b["t"], b["mask"])


def _correct(model, data, n, resamples, rng, bins) -> np.ndarray:
    """Per-recording accuracy (S,) of ``model`` on ``data``: mean over ``resamples`` uniform draws of N events."""
    hits = np.zeros(len(data.label))
    with torch.no_grad():
        for _ in range(resamples):
            out = logits(model, ev.sample_events(data, n, rng), bins)
            hits += out.argmax(1).numpy() == data.label
    return hits / resamples


def _accuracy(model, data, n, resamples, rng, bins):
    return float(_correct(model, data, n, resamples, rng, bins).mean())


def _stack_inputs(arch: str, sampled: list, bins: int):
    """The stacked model inputs of one step: one sampled event set per copy (equal N)."""
    if arch in ("cnn", "cnn_blind"):
        bins = bins if arch == "cnn" else 1
        frames = []
        for d in sampled:
            n = max(int(d.valid.sum(1).max()), 1)
            frames.append(torch.from_numpy(ev.events_to_frames(d, bins)) * (64.0 / n))    # as in logits()
        return (torch.stack(frames).to(torch.get_default_dtype()),)
    bs = [batch_tensors(d) for d in sampled]
    return tuple(torch.stack([b[k] for b in bs]) for k in ("x", "y", "p", "t", "mask"))


def train_stack(arch: str, size: int, members: list, settings: AssetSettings, learning_rate: float):
    """Train one model per member ``(data, seed)`` of one architecture at once (a vmapped stack,
    :mod:`compendium.stacking`): copy ``s`` is initialised by ``seeded_init(seed_s)`` and draws its
    recordings and events from ``default_rng([seed_s, 11])``; N is drawn per step for the whole
    stack. Each copy is trained as it would be alone (its own loss, per-copy gradient clipping,
    element-wise AdamW). Returns ``[(model, log)]``, ``log['final_loss']`` the copy's own loss."""
    height = members[0][0].height
    if any(d.height != height for d, _ in members):
        raise ValueError("a stack's members must share the sensor size")
    nets = []
    for _, seed in members:
        with seeded_init(seed):
            nets.append(make_model(arch, size, settings, height))
    stack = StackedModules(nets)
    rngs = [np.random.default_rng([seed, 11]) for _, seed in members]         # batches and event samples
    n_rng = np.random.default_rng([members[0][1], 12])                          # N per step
    own = np.zeros(len(members))
    trace = []

    def loss_fn(step: int) -> torch.Tensor:
        n = int(n_rng.choice(settings.train_events))
        rows = max(1, settings.batch_events // n)                                 # equal events per step
        sampled = [ev.sample_events(d.subset(r.integers(0, len(d), rows)), n, r)
                   for (d, _), r in zip(members, rngs)]
        out = stack(*_stack_inputs(arch, sampled, settings.bins))                 # (S, B, classes)
        labels = torch.from_numpy(np.stack([d.label for d in sampled]))
        per = F.cross_entropy(out.reshape(-1, out.shape[-1]), labels.reshape(-1), reduction="none")
        per = per.reshape(len(members), -1).mean(1)
        own[:] = per.detach().numpy()
        if (step + 1) % 25 == 0 or step + 1 == settings.steps:
            trace.append((step + 1, own.round(4).tolist()))
        return per.sum()

    opt = StackedAdamW(stack, lr=learning_rate, weight_decay=0.0, max_norm=1.0)
    spec = TrainSpec(max_steps=settings.steps, learning_rate=learning_rate, weight_decay=0.0, grad_clip=None,
                     warmup_steps=max(1, settings.steps // 10), schedule="cosine", threads=1, log_every=25)
    log = fit(stack, loss_fn, spec, optimizer=opt).to_dict()
    models = stack.unstack(nets)
    out = []
    for s, model in enumerate(models):
        one = {"steps": log["steps"], "stopped_early": log["stopped_early"], "final_loss": float(own[s]),
               "losses": [(step, losses[s]) for step, losses in trace], "stack": len(members)}
        out.append((model, one))
    return out


def dev_learning_rates(scale: str, grid=(3e-3, 1e-2, 3e-2), seed: int = 0, archs=None) -> dict:
    """The learning-rate dev check, one procedure for every architecture: train seed ``seed * 100``
    on the recordings as recorded (the asset's training set at ``scale``) at each rate of ``grid``
    and return ``{arch: {rate: dev accuracy at the headline N}}`` (mean of two re-samplings of the
    dev recordings). Run once, before the asset's settings were fixed; its result is recorded in
    :class:`AssetSettings` and the chapter (it is not rerun by the asset)."""
    st = settings_for(scale)
    rng = np.random.default_rng([seed, 1])
    classes = len(ev.CLASSES)
    sensor = ev.SensorSettings(noise_events=st.noise_events)
    train = ev.simulate(np.repeat(np.arange(classes), st.train_per_class), rng, sensor)
    dev = ev.simulate(np.repeat(np.arange(classes), st.dev_per_class), rng, sensor)
    sizes = {"e2v": max(st.e2v_dims), "lookup": max(st.e2v_dims), "softmax": max(st.e2v_dims),
             "cnn": st.cnn_channels[len(st.cnn_channels) // 2], "pointnet": st.pointnet_width, "pointnet_blind": st.pointnet_width}
    out: dict = {}
    for arch in archs or sizes:
        out[arch] = {}
        for rate in grid:
            model, _ = train_stack(arch, sizes[arch], [(train, seed * 100)], st, rate)[0]
            out[arch][rate] = _accuracy(model, dev, st.headline_events, 2, np.random.default_rng([seed, 5]), st.bins)
            print(arch, rate, round(out[arch][rate], 4), flush=True)
    return out


def calibrate_noise(grid=(300.0, 600.0, 1200.0, 2400.0, 4800.0), target: float = 0.80, seed: int = 0,
                    channels: int = 16, scale: str = "full") -> dict:
    """The simulator's difficulty, set on dev before any test: for each background rate of ``grid``
    (mean noise events per recording), simulate the training and dev recordings of ``scale``, train
    the frame CNN (width ``channels``, its learning rate, the steps of ``scale``, training seed
    ``seed * 100``) and measure its dev accuracy at the headline N (mean of two re-samplings).
    The rate whose dev accuracy is closest to ``target`` is the one kept. Run once; its result is
    recorded per scale in :class:`AssetSettings` ``noise_events`` (not rerun by the asset).
    Returns ``{"dev_accuracy": {rate: accuracy}, "chosen": rate}``."""
    st = settings_for(scale)
    lr = dict(st.learning_rates)["cnn"]
    acc = {}
    for rate in grid:
        sensor = ev.SensorSettings(noise_events=float(rate))
        rng = np.random.default_rng([seed, 1])
        train = ev.simulate(np.repeat(np.arange(len(ev.CLASSES)), st.train_per_class), rng, sensor)
        dev = ev.simulate(np.repeat(np.arange(len(ev.CLASSES)), st.dev_per_class), rng, sensor)
        model, _ = train_stack("cnn", channels, [(train, seed * 100)], st, lr)[0]
        acc[float(rate)] = _accuracy(model, dev, st.headline_events, 2, np.random.default_rng([seed, 5]), st.bins)
        print(f"noise {rate}: CNN dev accuracy {acc[float(rate)]:.4f}", flush=True)
    chosen = min(acc, key=lambda r: (abs(acc[r] - target), r))
    return {"dev_accuracy": acc, "chosen": chosen}


def build_asset(out_dir: Path, scale: str, seed: int) -> None:
    """Simulate the training and dev recordings, run the dev procedure, train every family over
    ``num_seeds`` training seeds (``seed * 100 + k``), the copies of one architecture and sensor
    size as one stacked program; save ``<family>_<k>.pt`` and ``metadata.json``."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    st = settings_for(scale)
    sensor = ev.SensorSettings(noise_events=st.noise_events)
    rng = np.random.default_rng([seed, 1])
    classes = len(ev.CLASSES)
    train = ev.simulate(np.repeat(np.arange(classes), st.train_per_class), rng, sensor)
    dev = ev.simulate(np.repeat(np.arange(classes), st.dev_per_class), rng, sensor)
    meta = {"name": ASSET_NAME, "scale": scale, "seed": int(seed), "settings": asdict(st), "sensor": asdict(sensor),
            "train_events_per_recording": float(train.counts.mean()), "dev": {}, "models": {}}
    families = dict(FAMILIES)
    families.update({f"e2v_res{r}": ("e2v", f"res{r}") for r in st.resolutions})
    lr = dict(st.learning_rates)
    lr["cnn_blind"] = lr["cnn"]                       # the time-blind CNN is the frame CNN with one bin: its rate

    def save(family, k, model, log, size):
        arch, variant = families[family]
        torch.save(model.state_dict(), out_dir / f"{family}_{k}.pt")
        meta["models"][f"{family}_{k}"] = {"family": family, "arch": arch, "variant": variant, "size": size,
                                          "height": model.height if hasattr(model, "height") else 32,
                                          "train_seed": seed * 100 + k, "learning_rate": lr[arch],
                                          "parameters": parameter_count(model), "log": log}
        print(f"{family} seed {k}: size {size}, loss {log['final_loss']:.3f}", flush=True)

    # dev procedure: event2vec's d and the frame CNN's c, seed 0 at every grid value
    chosen = {}
    for family, grid in (("e2v", st.e2v_dims), ("cnn", st.cnn_channels)):
        arch, variant = FAMILIES[family]
        per_recording, first = {}, {}
        for size in grid:
            model, log = train_stack(arch, size, [(train, seed * 100)], st, lr[arch])[0]
            per_recording[size] = _correct(model, dev, st.headline_events, 2, np.random.default_rng([seed, 5]), st.bins)
            first[size] = (model, log)
        pick = one_se_pick([per_recording[s] for s in sorted(grid)], unit="dev recordings")
        best = sorted(grid)[pick.index]                           # the smallest width within one SE of the best
        chosen[family] = best
        meta["dev"][family] = {"grid": list(grid), "dev_accuracy": {str(s): float(per_recording[s].mean()) for s in grid},
                               "chosen": best, "standard_error": pick.standard_error, "threshold": pick.threshold,
                               "highest": sorted(grid)[pick.best]}
        save(family, 0, *first[best], best)

    # every other model: one stack per architecture and sensor size
    groups: dict = {}
    for family, (arch, variant) in families.items():
        data = transform(train, variant)
        for k in range(1 if family in chosen else 0, st.num_seeds):
            groups.setdefault((arch, data.height), []).append((family, k, data))
    for (arch, _), members in groups.items():
        size = (chosen["e2v"] if arch in ("e2v", "lookup", "softmax") else chosen["cnn"] if arch in ("cnn", "cnn_blind")
                else st.pointnet_width)
        start = time.process_time()
        trained = train_stack(arch, size, [(data, seed * 100 + k) for _, k, data in members], st, lr[arch])
        print(f"stack {arch} ({len(members)} models): {time.process_time() - start:.1f} s CPU", flush=True)
        for (family, k, _), (model, log) in zip(members, trained):
            save(family, k, model, log, size)
    meta["chosen"] = chosen
    (out_dir / "metadata.json").write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")


def load_models(path: str | Path) -> tuple[dict, dict]:
    """``({family: [model per seed]}, metadata)`` from an asset folder (models in eval mode)."""
    path = Path(path)
    meta = json.loads((path / "metadata.json").read_text())
    st = AssetSettings(**{k: tuple(v) if isinstance(v, list) else v for k, v in meta["settings"].items()})
    models: dict[str, list] = {}
    for key in sorted(meta["models"], key=lambda k: (meta["models"][k]["family"], meta["models"][k]["train_seed"])):
        info = meta["models"][key]
        model = make_model(info["arch"], info["size"], st, info["height"])
        model.load_state_dict(torch.load(path / f"{key}.pt", map_location="cpu", weights_only=True))
        models.setdefault(info["family"], []).append(model.eval())
    return models, meta
