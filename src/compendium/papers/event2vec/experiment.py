"""The chapter's experiment: ``Config``, ``run`` on the trained models, and every statistic a
verdict depends on (intervals over training seeds, from ``compendium.stats``)."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

import numpy as np
import torch

import dataclasses

from compendium.stats import Estimate, deciding_estimate, mean_interval, paired_difference
from compendium.training import seeded_init
from compendium.validation import require_int

from . import events as ev
from .asset import AssetSettings, logits, make_model, transform
from .models import Event2Vec, ForgettingAttention, parameter_count

__all__ = ["Config", "Result", "run", "measurements", "draw_sets", "draw_logits", "accuracies", "pair_accuracies", "worst_case",
           "invariance_gaps", "lookup_bijection", "gather_gap", "fused_gap", "softmax_limit_gap"]

CURVE_FAMILIES = ("e2v", "cnn", "pointnet", "cnn_blind")
UNTRAINED_INITS = 10                                  # initialisations behind the untrained control


@dataclass(frozen=True)
class Config:
    """Every knob of the chapter (the registry's parameters) plus ``seed``."""

    seed: int = 0
    test_per_class: int = 100
    resamples: int = 10
    curve_resamples: int = 2
    headline_events: int = 64
    event_counts: tuple = (32, 64, 128, 256)
    check_recordings: int = 8

    def __post_init__(self):
        object.__setattr__(self, "event_counts", tuple(int(n) for n in self.event_counts))
        require_int("seed", self.seed, 0, 2**31 - 1)
        require_int("test_per_class", self.test_per_class, 4, 2000)
        require_int("resamples", self.resamples, 1, 100)
        require_int("curve_resamples", self.curve_resamples, 1, 100)
        require_int("headline_events", self.headline_events, 1, 1024)
        require_int("check_recordings", self.check_recordings, 2, 64)
        if len(self.event_counts) < 2 or list(self.event_counts) != sorted(set(self.event_counts)):
            raise ValueError(f"event_counts must be at least 2 increasing values, got {self.event_counts}")
        if self.headline_events not in self.event_counts:
            raise ValueError(f"headline_events {self.headline_events} must be one of event_counts {self.event_counts}")


def draw_sets(data: ev.EventSet, n: int, resamples: int, rng, *, shuffle: bool = False) -> list:
    """``resamples`` draws of ``n`` events per recording (shared by every model evaluated on them).

    ``shuffle``: the events' timestamps are then shuffled among them (their order destroyed).
    """
    draws = []
    for _ in range(resamples):
        sampled = ev.sample_events(data, n, rng)
        draws.append(ev.shuffle_timestamps(sampled, rng) if shuffle else sampled)
    return draws


def draw_logits(model, draws: list, chunk: int = 400) -> np.ndarray:
    """Logits of ``model`` on every draw: (R, S, classes)."""
    with torch.no_grad():
        return np.stack([torch.cat([logits(model, d.subset(slice(s, s + chunk))) for s in range(0, len(d), chunk)]).numpy()
                         for d in draws])


def accuracies(model, draws: list) -> float:
    """Accuracy averaged over the draws (the paper's mean over re-samplings)."""
    out = draw_logits(model, draws)
    return float((out.argmax(-1) == draws[0].label).mean())


def pair_accuracies(out: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Two-way accuracy within each time-reversed pair: (len(PAIRS),). ``out`` (R, S, classes)
    logits; a recording of class a in pair (a, b) is right when logit a > logit b."""
    res = []
    for a, b in ev.PAIRS:
        rows = np.isin(labels, (a, b))
        pick = np.where(out[:, rows, a] > out[:, rows, b], a, b)
        res.append(float((pick == labels[rows]).mean()))
    return np.array(res)


def worst_case(estimates: dict, low: float | None = None, high: float | None = None) -> tuple[str, Estimate]:
    """The estimate that decides "every one clears ``low``" or "every one lies in [low, high]"
    (:func:`compendium.stats.deciding_estimate`; a band is judged as an equivalence band around its
    centre, so the interval reaching farthest from the centre decides)."""
    if low is not None and high is not None:
        c = (low + high) / 2
        centred = {k: dataclasses.replace(e, point=e.point - c, low=e.low - c, high=e.high - c) for k, e in estimates.items()}
        key = deciding_estimate(centred, side="abs")
    elif low is not None:
        key = deciding_estimate(estimates, side="low", threshold=low)
    elif high is not None:
        key = deciding_estimate(estimates, side="high", threshold=high)
    else:
        raise ValueError("worst_case needs low, high or both")
    return key, estimates[key]


# ------------------------------------------------------------------------------ exact checks
def _batch(data: ev.EventSet, dtype=torch.float64):
    return (torch.from_numpy(data.x.astype(np.int64)), torch.from_numpy(data.y.astype(np.int64)),
            torch.from_numpy(data.p.astype(np.int64)), torch.from_numpy(data.t).to(dtype), torch.from_numpy(data.valid))


def invariance_gaps(model: Event2Vec, data: ev.EventSet, n: int, rng, pad: int = 7) -> dict:
    """Max |logit change| (float64 copy of ``model``) when ``pad`` masked pad events (random
    coordinates and times) are appended, when ``t -> t + c`` and when ``t -> a t``."""
    m64 = copy.deepcopy(model).double().eval()
    sampled = ev.sample_events(data, n, rng)
    x, y, p, t, mask = _batch(sampled)
    B = x.shape[0]
    with torch.no_grad():
        base = m64(x, y, p, t, mask)
        junk = lambda hi: torch.from_numpy(rng.integers(0, hi, (B, pad)))
        xp, yp, pp = (torch.cat([a, junk(hi)], 1) for a, hi in ((x, data.width), (y, data.height), (p, 2)))
        tp = torch.cat([t, torch.from_numpy(rng.uniform(-1e3, 1e3, (B, pad)))], 1)
        mp = torch.cat([mask, torch.zeros(B, pad, dtype=torch.bool)], 1)
        padded = m64(xp, yp, pp, tp, mp)
        shifted = m64(x, y, p, t + 1234.5, mask)
        scaled = m64(x, y, p, t * 3.7, mask)
    return {"pad": float((padded - base).abs().max()), "shift": float((shifted - base).abs().max()),
            "scale": float((scaled - base).abs().max())}


def lookup_bijection(height: int, width: int, polarities: int = 2) -> bool:
    """``p H W + y W + x + 1`` maps the P x H x W events one-to-one onto rows 1..P H W."""
    p, y, x = np.meshgrid(np.arange(polarities), np.arange(height), np.arange(width), indexing="ij")
    rows = ev.lookup_index(x.ravel(), y.ravel(), p.ravel(), height, width)
    return bool(np.array_equal(np.sort(rows), np.arange(1, polarities * height * width + 1)))


def gather_gap(model: Event2Vec, data: ev.EventSet) -> float:
    """Max |table[index] - MLP(x, y, p)| over every valid event (float64)."""
    m64 = copy.deepcopy(model).double()
    x, y, p, _, mask = _batch(data)
    with torch.no_grad():
        table = m64.spatial.embedding_matrix()
        rows = ev.lookup_index(x, y, p, data.height, data.width)
        return float((table[rows][mask] - m64.spatial(x, y, p)[mask]).abs().max())


def fused_gap(model: Event2Vec, data: ev.EventSet, n: int, rng) -> float:
    """Max |fused tokens (table gather + last conv + LN + add, the kernel's reference) - the
    model's own tokens| (float32, the dtype the kernel runs in)."""
    x, y, p, t, mask = _batch(ev.sample_events(data, n, rng), torch.float32)
    with torch.no_grad():
        return float((model.tokens(x, y, p, t, mask, fused=True, backend="reference")
                      - model.tokens(x, y, p, t, mask)).abs().max())


def softmax_limit_gap(dim: int = 16, heads: int = 2, n: int = 20, seed: int = 0) -> float:
    """With every forget gate at 1 (log f = 0), forgetting attention equals torch's
    ``scaled_dot_product_attention`` on the same q-k-normed projections: max |difference|."""
    with seeded_init(seed):
        att = ForgettingAttention(dim, heads).double()
    torch.nn.init.zeros_(att.gate.weight)
    torch.nn.init.constant_(att.gate.bias, 1e4)                   # sigmoid -> 1 to float64 precision
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(3, n, dim, generator=g, dtype=torch.float64)
    mask = torch.ones(3, n, dtype=torch.bool)
    mask[1, n // 2:] = False
    with torch.no_grad():
        got = att(h, mask)
        q, k, v = att.qkv(h).view(3, n, 3, heads, dim // heads).permute(2, 0, 3, 1, 4)
        q, k = torch.nn.functional.layer_norm(q, (dim // heads,)), torch.nn.functional.layer_norm(k, (dim // heads,))
        ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask[:, None, None, :])
        ref = att.out(ref.transpose(1, 2).reshape(3, n, dim))
    return float((got - ref)[mask].abs().max())


# ------------------------------------------------------------------------------ the run
@dataclass
class Result:
    config: Config
    settings: AssetSettings
    sensor: dict
    test_counts: np.ndarray = None                     # events per test recording (before sampling)
    curve: dict = field(default_factory=dict)          # family -> (K, len(event_counts)) accuracy
    headline: dict = field(default_factory=dict)       # family -> (K,) accuracy at headline_events, `resamples` draws
    untrained: np.ndarray = None                       # (UNTRAINED_INITS,)
    resolution: dict = field(default_factory=dict)     # grid size -> (K,) event2vec accuracy at headline_events
    even: dict = field(default_factory=dict)           # "mlp_odd", "lookup_odd", "lookup_even": (K,)
    pairs: dict = field(default_factory=dict)          # name -> (K, 4) pair accuracies on the merged copy
    card_pairs: dict = field(default_factory=dict)     # polarity data: "e2v", "e2v_shuffled": (K, 4)
    card_shuffled_acc: np.ndarray = None               # (K,) 8-class accuracy, polarity data, shuffled times
    merged_acc: dict = field(default_factory=dict)     # name -> (K,) 8-class accuracy on the merged copy
    parameters: dict = field(default_factory=dict)
    exact: dict = field(default_factory=dict)
    example: ev.EventSet = None


def run(config: Config, models: dict, meta: dict) -> Result:
    """Every measurement of the chapter on the trained ``models`` (``{family: [model per seed]}``)."""
    st = AssetSettings(**{k: tuple(v) if isinstance(v, list) else v for k, v in meta["settings"].items()})
    sensor = ev.SensorSettings(**{k: tuple(v) if isinstance(v, list) else v for k, v in meta["sensor"].items()})
    rng = np.random.default_rng([config.seed, 2])
    classes = len(ev.CLASSES)
    test = ev.simulate(np.repeat(np.arange(classes), config.test_per_class), rng, sensor)
    res = Result(config=config, settings=st, sensor=meta["sensor"], test_counts=test.counts)
    res.example = test.subset([k * config.test_per_class for k in range(classes)])
    N0, R = config.headline_events, config.resamples
    draws = {n: draw_sets(test, n, R if n == N0 else config.curve_resamples, rng) for n in config.event_counts}

    head_logits = {}
    for fam in CURVE_FAMILIES:
        rows = []
        for k, model in enumerate(models[fam]):
            row = []
            for n in config.event_counts:
                out = draw_logits(model, draws[n])
                row.append(float((out.argmax(-1) == test.label).mean()))
                if n == N0:
                    head_logits[fam, k] = out
            rows.append(row)
        res.curve[fam] = np.array(rows)
        res.headline[fam] = res.curve[fam][:, config.event_counts.index(N0)]
        res.parameters[fam] = parameter_count(models[fam][0])
    res.parameters["lookup"] = parameter_count(models["lookup_even"][0])

    # untrained control: event2vec at its initial weights (fresh seeds), same evaluation; untrained
    # models cost no training, so UNTRAINED_INITS of them (more than the trained seeds)
    dim = meta["chosen"]["e2v"]
    res.untrained = np.empty(UNTRAINED_INITS)
    for k in range(UNTRAINED_INITS):
        with seeded_init(90_000 + k):
            fresh = make_model("e2v", dim, st).eval()
        res.untrained[k] = accuracies(fresh, draws[N0])

    # resolution: 32 x 32 is the headline model; the others are trained on quantised recordings
    # (quantising the headline draws keeps the same events: the comparison is paired by draw too)
    res.resolution[test.height] = res.headline["e2v"]
    for size in st.resolutions:
        qd = [transform(d, f"res{size}") for d in draws[N0]]
        res.resolution[size] = np.array([accuracies(m, qd) for m in models[f"e2v_res{size}"]])

    # even x at training, odd x at test
    odd = draw_sets(transform(test, "even", test=True), N0, R, rng)
    even_in = draw_sets(transform(test, "even_in"), N0, R, rng)
    res.even["mlp_odd"] = np.array([accuracies(m, odd) for m in models["e2v_even"]])
    res.even["lookup_odd"] = np.array([accuracies(m, odd) for m in models["lookup_even"]])
    res.even["lookup_even"] = np.array([accuracies(m, even_in) for m in models["lookup_even"]])

    # time is used: the polarity-merged copy, four time-reversed pairs
    merged = [transform(d, "merged") for d in draws[N0]]
    merged_sh = [ev.shuffle_timestamps(d, rng) for d in merged]
    pa = lambda model, ds: pair_accuracies(draw_logits(model, ds), ds[0].label)
    res.pairs["e2v"] = np.stack([pa(m, merged) for m in models["e2v_merged"]])
    res.pairs["e2v_shuffled"] = np.stack([pa(m, merged_sh) for m in models["e2v_merged"]])
    blind = [draw_logits(m, merged) for m in models["cnn_blind_merged"]]
    res.pairs["cnn_blind"] = np.stack([pair_accuracies(o, merged[0].label) for o in blind])
    res.merged_acc["cnn_blind"] = np.array([float((o.argmax(-1) == merged[0].label).mean()) for o in blind])
    res.pairs["softmax"] = np.stack([pa(m, merged) for m in models["softmax_merged"]])
    res.pairs["lookup"] = np.stack([pa(m, merged) for m in models["lookup_merged"]])
    # the card's version, with polarity: shuffled timestamps on the polarity model
    shuffled = [ev.shuffle_timestamps(d, rng) for d in draws[N0]]
    K = len(models["e2v"])
    res.card_pairs["e2v"] = np.stack([pair_accuracies(head_logits["e2v", k], test.label) for k in range(K)])
    sh_logits = [draw_logits(m, shuffled) for m in models["e2v"]]
    res.card_pairs["e2v_shuffled"] = np.stack([pair_accuracies(o, test.label) for o in sh_logits])
    res.card_shuffled_acc = np.array([float((o.argmax(-1) == test.label).mean()) for o in sh_logits])

    # exact checks on the first trained models
    few = test.subset(np.arange(0, len(test), max(1, len(test) // config.check_recordings))[: config.check_recordings])
    e2v, lookup = models["e2v"][0], models["lookup_even"][0]
    res.exact["mlp"] = invariance_gaps(e2v, few, N0, rng)
    res.exact["lookup"] = invariance_gaps(lookup, few, N0, rng)
    res.exact["bijection"] = lookup_bijection(test.height, test.width)
    res.exact["gather"] = gather_gap(e2v, few)
    res.exact["fused_mlp"] = fused_gap(e2v, few, N0, rng)
    res.exact["fused_lookup"] = fused_gap(lookup, few, N0, rng)
    res.exact["softmax_limit"] = softmax_limit_gap()
    frames = ev.events_to_frames(ev.sample_events(few, N0, rng), st.bins)
    res.exact["frame_total"] = float(np.abs(frames.sum((1, 2, 3)) - np.minimum(few.counts, N0)).max())
    return res


def measurements(res: Result) -> dict:
    """Every number a ledger verdict depends on. Unit of replication: trained models (training
    seeds), paired across families by seed; the test recordings and re-samplings are shared."""
    unit = "training seeds"
    out: dict = {}
    h = res.headline
    out["e2v_acc"] = mean_interval(h["e2v"], unit=unit)
    out["cnn_acc"] = mean_interval(h["cnn"], unit=unit)
    out["blind_acc"] = mean_interval(h["cnn_blind"], unit=unit)
    out["blind_merged_acc"] = mean_interval(res.merged_acc["cnn_blind"], unit=unit)
    out["e2v_minus_cnn"] = paired_difference(h["e2v"], h["cnn"], unit=unit)
    out["untrained"] = mean_interval(res.untrained, unit="initialisations")
    full = res.resolution[max(res.resolution)]
    low = min(s for s in res.resolution if s > 1)
    out["low_res"] = low
    out["res_drop"] = paired_difference(full, res.resolution[low], unit=unit)
    out["res_drop_none"] = paired_difference(full, res.resolution[1], unit=unit)
    out["param_ratio"] = res.parameters["e2v"] / res.parameters["cnn"]
    out["even_mlp"] = mean_interval(res.even["mlp_odd"], unit=unit)
    out["even_gap"] = paired_difference(res.even["mlp_odd"], res.even["lookup_odd"], unit=unit)
    out["even_lookup_in"] = mean_interval(res.even["lookup_even"], unit=unit)
    names = [f"{ev.CLASSES[a]} / {ev.CLASSES[b]}" for a, b in ev.PAIRS]
    pair_est = lambda arr: {n: mean_interval(arr[:, i], unit=unit) for i, n in enumerate(names)}
    out["pairs"] = {k: pair_est(v) for k, v in res.pairs.items()}
    out["time_e2v_key"], out["time_e2v"] = worst_case(out["pairs"]["e2v"], low=0.80)
    out["time_lookup_key"], out["time_lookup"] = worst_case(out["pairs"]["lookup"], low=0.80)
    for name in ("e2v_shuffled", "cnn_blind", "softmax"):
        out[f"time_{name}_key"], out[f"time_{name}"] = worst_case(out["pairs"][name], low=0.40, high=0.60)
    out["card_pairs"] = {k: pair_est(v) for k, v in res.card_pairs.items()}
    return out
