"""The chapter's experiment: accuracy under shift, contamination, order, and cost versus classes."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import torch

from ...runtime import make_rng
from ...stats import mean_interval
from . import data
from .methods import (PTA, TDA, ZeroShot, pta_logits, pta_prototypes, pta_trace, pta_weights, run_stream, softmax,
                      step_cost, tda_logits, tda_trace)
from .model import DualEncoder, encoder_macs, image_features, text_features

METHODS = ("zero-shot", "PTA", "TDA")
CONFIDENT = 0.9          # a "confidently wrong" sample: wrong zero-shot class with probability >= 0.9
SCALING_DOMAIN = "noise"
DRIFT_POINTS = 25
# TDA's published positive-cache setting (its ImageNet configuration), fixed in advance for both
# methods: they share the affinity read-out alpha exp(-beta (1 - cos)).
PUBLISHED_ALPHA, PUBLISHED_BETA = 2.0, 5.0
HYPERPARAMETER_RULES = ("fixed", "validated")
# A wider grid evaluated on the target domains after the fact (exploratory; never used to choose).
EXPLORATORY_ALPHAS = (0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0)
EXPLORATORY_BETAS = (1.0, 3.0, 5.0, 8.0, 16.0)


@dataclass(frozen=True)
class Config:
    """Parameters of one run (names match the registry and the notebook's parameters cell)."""

    num_orders: int = 5
    class_counts: tuple = (10, 30, 100, 300, 1000)
    samples_per_class: int = 2
    timing_samples: int = 40
    contamination: float = 0.2
    pta_mode: str = "soft"
    alpha_grid: tuple = (0.5, 1.0, 2.0, 4.0, 8.0)
    beta_grid: tuple = (1.0, 3.0, 5.0, 8.0)
    validation_streams: int = 5
    hyperparameters: str = "fixed"
    alpha: float = PUBLISHED_ALPHA
    beta: float = PUBLISHED_BETA
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("class_counts", "alpha_grid", "beta_grid"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        if not isinstance(self.num_orders, int) or self.num_orders < 2:
            raise ValueError(f"num_orders must be an integer >= 2, got {self.num_orders!r}")
        if len(self.class_counts) < 2 or any(not 10 <= int(c) <= 1000 for c in self.class_counts):
            raise ValueError(f"class_counts needs at least two values in [10, 1000], got {self.class_counts}")
        if list(self.class_counts) != sorted(set(self.class_counts)):
            raise ValueError(f"class_counts must be strictly increasing, got {self.class_counts}")
        if self.samples_per_class < 1 or self.timing_samples < 1:
            raise ValueError("samples_per_class and timing_samples must be positive")
        if not 0 <= self.contamination < 1:
            raise ValueError(f"contamination must lie in [0, 1), got {self.contamination}")
        if self.pta_mode not in ("soft", "hard"):
            raise ValueError(f"pta_mode must be 'soft' or 'hard', got {self.pta_mode!r}")
        if not self.alpha_grid or not self.beta_grid or min(self.alpha_grid + self.beta_grid) <= 0:
            raise ValueError("alpha_grid and beta_grid must be non-empty lists of positive numbers")
        if not isinstance(self.validation_streams, int) or not 1 <= self.validation_streams <= 50:
            raise ValueError(f"validation_streams must be an integer in [1, 50], got {self.validation_streams!r}")
        if self.hyperparameters not in HYPERPARAMETER_RULES:
            raise ValueError(f"hyperparameters must be one of {', '.join(HYPERPARAMETER_RULES)}, got {self.hyperparameters!r}")
        if not (self.alpha > 0 and self.beta > 0):
            raise ValueError(f"alpha and beta must be positive, got ({self.alpha}, {self.beta})")
        if not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"seed must be a non-negative integer, got {self.seed!r}")


@dataclass
class Result:
    """What :func:`run` returns. Accuracies are in percent; costs in operations per sample.

    ``latency_ns`` and ``measured_throughput`` are timings (CPU time of the calling thread): they
    change from run to run and are kept out of the ledger.
    """

    domains: tuple
    hyper: dict                   # method -> (alpha, beta) used (fixed in advance, or validated)
    validation: dict              # method -> (len(alpha_grid), len(beta_grid)) accuracy on the validation shift
    validated: dict               # method -> (alpha, beta) the validation grid picks (used only if validated)
    accuracy: dict                # method -> (num_orders, domains) online accuracy; also "oracle"
                                  # (PTA read-out, label prototypes) and "centroid" (offline, labels)
    contaminated: dict            # method -> (num_orders, domains) accuracy on the genuine samples
    intruders: np.ndarray         # (num_orders, domains) confidently wrong samples inserted
    order_invariance: float       # max relative gap between PTA prototypes of two stream orders
    closed_form_gap: float        # max relative gap between online PTA prototypes and W^T F
    weight_zero_gap: float        # max |PTA(update weight 0) - zero-shot| over all logits
    order_sensitivity: dict       # method -> (domains,) std of accuracy over stream orders
    drift: dict                   # "fraction" (T,), "clean" (domains, T), "contaminated" (domains, T)
    target_grid: dict             # method -> exploratory (alpha, beta) grid on the targets, repetition 0
    class_counts: tuple
    scaling_accuracy: dict        # method -> (len(class_counts),)
    cost: dict                    # method -> (len(class_counts),) operations per sample, encoder included
    occupancy: dict               # "pos", "neg" -> (len(class_counts),) mean cache entries read
    slopes: dict                  # method -> log-log slope of cost versus classes
    latency_ns: dict = field(default_factory=dict)            # method -> (len(class_counts),) median
    measured_throughput: dict = field(default_factory=dict)  # method -> relative to zero-shot
    encoder_macs: int = 0


def _stream_accuracy(adapted: np.ndarray, labels: np.ndarray, keep: np.ndarray | None = None) -> float:
    hit = adapted.argmax(1) == labels
    if keep is not None:
        hit = hit[keep]
    return 100.0 * float(hit.mean())


def _run_methods(features, logits, labels, hyper, mode, keep=None) -> dict:
    C, d = logits.shape[1], features.shape[1]
    out = {"zero-shot": _stream_accuracy(logits, labels, keep)}
    out["PTA"] = _stream_accuracy(run_stream(PTA(C, d, *hyper["PTA"], mode=mode), features, logits), labels, keep)
    # control: the same read-out with every sample weighted 1 on its predicted class (no confidence)
    out["PTA-uniform"] = _stream_accuracy(run_stream(PTA(C, d, *hyper["PTA"], mode="uniform"), features, logits), labels, keep)
    out["TDA"] = _stream_accuracy(run_stream(TDA(C, d, *hyper["TDA"]), features, logits), labels, keep)
    return out


def _oracle_accuracy(features, logits, labels, alpha, beta) -> float:
    """PTA's read-out with prototypes built from the true labels (an upper bound, not a method)."""
    C, d = logits.shape[1], features.shape[1]
    oracle = PTA(C, d, alpha, beta)
    onehot = np.eye(C)
    adapted = np.stack([oracle.step(features[i], logits[i], onehot[labels[i]]) for i in range(len(labels))])
    return _stream_accuracy(adapted, labels)


def _centroid_accuracy(features, labels, num_classes) -> float:
    """Nearest true-class centroid of the whole stream (labels, offline): what one prototype per
    class can separate at best in this feature space."""
    centroid = np.stack([features[labels == c].mean(0) for c in range(num_classes)])
    centroid /= np.linalg.norm(centroid, axis=1, keepdims=True)
    return _stream_accuracy(features @ centroid.T, labels)


class _Encoder:
    """The frozen dual encoder seen as 'canvases -> (features, zero-shot logits)'."""

    def __init__(self, model: DualEncoder):
        self.model = model
        self.scale = float(model.logit_scale().detach())

    def __call__(self, canvases: np.ndarray, prompt_features: np.ndarray):
        feats = image_features(self.model, canvases)
        return feats, self.scale * feats @ prompt_features.T


def _domain_stream(domain, images, labels, order, rng):
    """One-digit canvases of ``domain`` for the digits ``images[order]``."""
    y = labels[order]
    tokens = data.single_digit_prompts()[y]
    if domain == "segments":
        return data.segment_canvases(tokens, rng), y
    return data.corrupt(data.single_digit_canvases(images[order]), tokens, domain, rng), y


def grid_accuracy(features, logits, labels, alphas, betas, mode: str) -> dict:
    """Online accuracy ``(len(alphas), len(betas))`` of PTA and TDA for every ``(alpha, beta)``."""
    cos, live = pta_trace(features, logits, mode)
    pos, neg = tda_trace(features, logits, betas)
    grids = {"PTA": np.zeros((len(alphas), len(betas))), "TDA": np.zeros((len(alphas), len(betas)))}
    for i, a in enumerate(alphas):
        for j, b in enumerate(betas):
            grids["PTA"][i, j] = _stream_accuracy(pta_logits(logits, cos, live, a, b), labels)
            grids["TDA"][i, j] = _stream_accuracy(tda_logits(logits, pos[j], neg, a), labels)
    return grids


def select_hyperparameters(streams, config: Config, mode: str):
    """Grid search of (alpha, beta) on the validation streams, separately for PTA and TDA.

    ``streams`` is a list of ``(features, logits, labels)``: independent draws (order and shift)
    of the validation domain. The grid is their mean accuracy, so one sample no longer decides it.

    Returns ``(chosen, grids)``: the first best pair in grid order per method, and the accuracies.
    """
    if not streams:
        raise ValueError("need at least one validation stream")
    grids = None
    for f, s, y in streams:
        g = grid_accuracy(f, s, y, config.alpha_grid, config.beta_grid, mode)
        grids = g if grids is None else {k: grids[k] + g[k] for k in g}
    grids = {k: v / len(streams) for k, v in grids.items()}
    chosen = {}
    for name, acc in grids.items():
        i, j = np.unravel_index(int(np.argmax(acc)), acc.shape)
        chosen[name] = (float(config.alpha_grid[i]), float(config.beta_grid[j]))
    return chosen, grids


def _prototype_drift(features, logits, labels, genuine, mode):
    """Mean over classes of cos(P_c(t), mu_c) at :data:`DRIFT_POINTS` evenly spaced stream positions.

    ``mu_c`` is the centroid of the genuine class-c features of the stream (known only to us).
    """
    C = logits.shape[1]
    positions = np.linspace(1, len(labels), DRIFT_POINTS).round().astype(int)
    w = pta_weights(logits, mode)                                      # (n, C)
    running = np.cumsum(w[:, :, None] * features[:, None, :], axis=0)  # (n, C, d)
    centroid = np.stack([features[genuine & (labels == c)].mean(0) for c in range(C)])
    centroid /= np.linalg.norm(centroid, axis=1, keepdims=True)
    p = running[positions - 1]                                         # (T, C, d)
    cos = np.einsum("tcd,cd->tc", p, centroid) / np.maximum(np.linalg.norm(p, axis=2), 1e-300)
    return cos.mean(1)


def _time_methods(model, encoder, canvases, feats, logits, prompt_feats, hyper, mode, timed):
    """Median time per sample (encoder, head and method) for each method, in one run.

    Each method gets its own pass over the stream: samples before the first timed one only update
    its state (warm-up), the timed ones, consecutive at the end of the stream, each go through the
    image encoder (batch of one), the zero-shot head and the method's step, as in deployment.
    Passes are separate so that no method pays for the cache misses another one causes (the
    read-out of TDA as released allocates megabytes per sample). The clock is the CPU clock of the
    calling thread, so other processes on the machine add little noise.
    """
    C, d = logits.shape[1], feats.shape[1]
    factories = {"zero-shot": lambda: ZeroShot(C, d), "PTA": lambda: PTA(C, d, *hyper["PTA"], mode=mode),
                 "TDA-released": lambda: TDA(C, d, *hyper["TDA"], retrieval="released"),
                 "TDA-vectorised": lambda: TDA(C, d, *hyper["TDA"], retrieval="vectorised")}
    timed = set(int(i) for i in timed)
    text = prompt_feats.T.copy()
    medians = {}
    with torch.no_grad():
        for name, factory in factories.items():
            method, times = factory(), []
            for i in range(feats.shape[0]):
                if i not in timed:
                    method.observe(feats[i], logits[i])
                    continue
                x = torch.from_numpy(np.ascontiguousarray(canvases[i:i + 1], dtype=np.float32))[:, None]
                t0 = time.thread_time_ns()
                f = model.image(x)[0].double().numpy()
                f = f / np.sqrt(f @ f)
                method.step(f, encoder.scale * (f @ text))
                times.append(time.thread_time_ns() - t0)
            medians[name] = float(np.median(times))
    return medians


def adaptation(config: Config, model: DualEncoder, split: dict, validation_grid: bool = False) -> dict:
    """Steps 1-3 for one trained encoder: hyper-parameters, target streams, contamination.

    With ``config.hyperparameters == "fixed"`` both methods use ``(config.alpha, config.beta)``
    (TDA's published setting unless changed) and the validation grid is computed only when
    ``validation_grid`` is true (to show where a validated choice would land); with ``"validated"``
    each method takes the best cell of the grid on the validation shift.

    Returns a dict with ``hyper`` (used), ``validated`` (the grid's pick, or None), ``grids``
    (validation, or None), ``accuracy`` and ``contaminated`` (method -> (num_orders, domains)),
    ``intruders`` and the repetition streams (``streams``).
    """
    model = model.eval()
    encoder = _Encoder(model)
    images, labels = data.load_digit_images()
    val_idx, test_idx = np.asarray(split["val"]), np.asarray(split["test"])
    single_text = text_features(model, data.single_digit_prompts())
    mode = config.pta_mode
    domains = data.TARGET_DOMAINS
    R, D = config.num_orders, len(domains)
    # 1. hyper-parameters: fixed in advance, or chosen on the validation domain (never a target domain)
    validated, grids = None, None
    if config.hyperparameters == "validated" or validation_grid:
        val_streams = []
        for v in range(config.validation_streams):  # independent draws of the validation shift
            rng = make_rng(config.seed, 0) if v == 0 else make_rng(config.seed, 0, v)
            canv, y_val = _domain_stream(data.VALIDATION_DOMAIN, images[val_idx], labels[val_idx],
                                         rng.permutation(val_idx.size), rng)
            val_streams.append((*encoder(canv, single_text), y_val))
        validated, grids = select_hyperparameters(val_streams, config, mode)
    fixed = (float(config.alpha), float(config.beta))
    hyper = validated if config.hyperparameters == "validated" else {"PTA": fixed, "TDA": fixed}

    # 2. target domains, paired over repetitions (order and corruption draw); 3. contamination
    accuracy = {k: np.zeros((R, D)) for k in METHODS + ("PTA-uniform", "oracle", "centroid")}
    contaminated = {k: np.zeros((R, D)) for k in METHODS + ("PTA-uniform",)}
    intruders = np.zeros((R, D), dtype=np.int64)
    streams = {}
    for r in range(R):
        rep = []
        for j, dom in enumerate(domains):
            rng = make_rng(config.seed, 1, r, j)
            canv, y = _domain_stream(dom, images[test_idx], labels[test_idx], rng.permutation(test_idx.size), rng)
            f, s = encoder(canv, single_text)
            rep.append((f, s, y))
            for k, v in _run_methods(f, s, y, hyper, mode).items():
                accuracy[k][r, j] = v
            accuracy["oracle"][r, j] = _oracle_accuracy(f, s, y, *hyper["PTA"])
            accuracy["centroid"][r, j] = _centroid_accuracy(f, y, s.shape[1])
        streams[r] = rep
        for j in range(D):
            f, s, y = rep[j]
            rng = make_rng(config.seed, 2, r, j)
            wrong = (s.argmax(1) != y) & (softmax(s).max(1) >= CONFIDENT)
            pool = [(f[wrong], s[wrong], y[wrong])]
            if not wrong.any():  # no confident mistakes in this domain: take them from all domains
                pool = [(ff[m], ss[m], yy[m]) for ff, ss, yy in rep
                        for m in [(ss.argmax(1) != yy) & (softmax(ss).max(1) >= CONFIDENT)]]
            pf, ps, py = (np.concatenate(a) for a in zip(*pool))
            n_bad = int(round(config.contamination / (1 - config.contamination) * len(y))) if len(py) else 0
            pick = rng.integers(0, len(py), n_bad) if n_bad else np.zeros(0, dtype=np.int64)
            order = rng.permutation(len(y) + n_bad)
            ff, ss = np.concatenate([f, pf[pick]])[order], np.concatenate([s, ps[pick]])[order]
            yy = np.concatenate([y, py[pick]])[order]
            genuine = order < len(y)
            intruders[r, j] = n_bad
            for k, v in _run_methods(ff, ss, yy, hyper, mode, keep=genuine).items():
                contaminated[k][r, j] = v
            if r == 0:
                streams[("mixed", j)] = (ff, ss, yy, genuine)

    return {"hyper": hyper, "validated": validated, "grids": grids, "accuracy": accuracy, "contaminated": contaminated,
            "intruders": intruders, "streams": streams}


def run(config: Config, model: DualEncoder, split: dict, timing: bool = True) -> Result:
    """Run every experiment of the chapter with the trained dual encoder ``model``.

    ``split`` holds the asset's digit indices (``"val"``, ``"test"``); ``timing=False`` skips the
    stopwatch (tests).
    """
    model = model.eval()
    encoder = _Encoder(model)
    images, labels = data.load_digit_images()
    test_idx = np.asarray(split["test"])
    single_text = text_features(model, data.single_digit_prompts())
    d = single_text.shape[1]
    mode = config.pta_mode
    domains = data.TARGET_DOMAINS
    R, D = config.num_orders, len(domains)

    adapted = adaptation(config, model, split, validation_grid=True)
    hyper, grids, streams = adapted["hyper"], adapted["grids"], adapted["streams"]
    accuracy, contaminated, intruders = adapted["accuracy"], adapted["contaminated"], adapted["intruders"]

    # 4. exact properties and order sensitivity (repetition 0)
    inv, closed, zero_gap = 0.0, 0.0, 0.0
    sensitivity = {"PTA": np.zeros(D), "TDA": np.zeros(D)}
    target_grid = {k: np.zeros((len(EXPLORATORY_ALPHAS), len(EXPLORATORY_BETAS))) for k in ("PTA", "TDA")}
    drift = {"fraction": np.linspace(1, test_idx.size, DRIFT_POINTS).round() / test_idx.size,
             "clean": np.zeros((D, DRIFT_POINTS)), "contaminated": np.zeros((D, DRIFT_POINTS))}
    for j in range(D):
        f, s, y = streams[0][j]
        C = s.shape[1]
        forward, backward = PTA(C, d, *hyper["PTA"], mode=mode), PTA(C, d, *hyper["PTA"], mode=mode)
        run_stream(forward, f, s)
        run_stream(backward, f[::-1], s[::-1])
        scale = np.abs(forward.prototypes).max()
        inv = max(inv, float(np.abs(forward.prototypes - backward.prototypes).max() / scale))
        closed = max(closed, float(np.abs(forward.prototypes - pta_prototypes(f, s, mode)).max() / scale))
        frozen = run_stream(PTA(C, d, *hyper["PTA"], mode=mode, update_weight=0.0), f, s)
        zero_gap = max(zero_gap, float(np.abs(frozen - s).max()))
        rng = make_rng(config.seed, 3, j)
        accs = {"PTA": [], "TDA": []}
        for _ in range(R):
            perm = rng.permutation(len(y))
            res = _run_methods(f[perm], s[perm], y[perm], hyper, mode)
            accs["PTA"].append(res["PTA"])
            accs["TDA"].append(res["TDA"])
        for k in accs:
            sensitivity[k][j] = float(np.std(accs[k]))
        drift["clean"][j] = _prototype_drift(f, s, y, np.ones(len(y), bool), mode)
        for k, v in grid_accuracy(f, s, y, EXPLORATORY_ALPHAS, EXPLORATORY_BETAS, mode).items():
            target_grid[k] += v / D
        ff, ss, yy, genuine = streams[("mixed", j)]
        drift["contaminated"][j] = _prototype_drift(ff, ss, yy, genuine, mode)

    # 5. many classes: accuracy, operation counts, measured time
    E = encoder_macs(model.cfg)
    counts = tuple(int(c) for c in config.class_counts)
    n_counts = len(counts)
    scaling_accuracy = {k: np.zeros(n_counts) for k in METHODS}
    cost_names = ("zero-shot", "PTA", "TDA-released", "TDA-vectorised")
    cost = {k: np.zeros(n_counts) for k in cost_names}
    occupancy = {"pos": np.zeros(n_counts), "neg": np.zeros(n_counts)}
    latency = {k: np.zeros(n_counts) for k in cost_names}
    for i, C in enumerate(counts):
        rng = make_rng(config.seed, 4, C)
        numbers = np.sort(rng.choice(1000, C, replace=False))
        y = rng.permutation(np.repeat(np.arange(C), config.samples_per_class))
        canv = data.domain_canvases(SCALING_DOMAIN, data.three_digit_prompts(numbers[y]),
                                    images[test_idx], labels[test_idx], rng)
        prompt_feats = text_features(model, data.three_digit_prompts(numbers))
        f, s = encoder(canv, prompt_feats)
        tda = TDA(C, d, *hyper["TDA"])
        scaling_accuracy["zero-shot"][i] = _stream_accuracy(s, y)
        scaling_accuracy["PTA"][i] = _stream_accuracy(run_stream(PTA(C, d, *hyper["PTA"], mode=mode), f, s), y)
        scaling_accuracy["TDA"][i] = _stream_accuracy(run_stream(tda, f, s), y)
        occ = np.array(tda.occupancy)
        occupancy["pos"][i], occupancy["neg"][i] = occ.mean(0)
        cost["zero-shot"][i] = E + step_cost("zero-shot", C, d)
        cost["PTA"][i] = E + step_cost("PTA-" + mode, C, d)
        for variant in ("released", "vectorised"):
            cost["TDA-" + variant][i] = E + np.mean([step_cost("TDA-" + variant, C, d, a, b) for a, b in occ])
        if timing:
            timed = np.arange(max(len(y) - config.timing_samples, 0), len(y))
            for k, v in _time_methods(model, encoder, canv, f, s, prompt_feats, hyper, mode, timed).items():
                latency[k][i] = v
    logc = np.log(np.asarray(counts, dtype=float))
    slopes = {k: float(np.polyfit(logc, np.log(v), 1)[0]) for k, v in cost.items()}
    measured = {k: latency["zero-shot"] / v for k, v in latency.items()} if timing else {}
    return Result(
        domains=domains, hyper=hyper, validation=grids, validated=adapted["validated"], accuracy=accuracy, contaminated=contaminated,
        intruders=intruders, order_invariance=inv, closed_form_gap=closed, weight_zero_gap=zero_gap,
        order_sensitivity=sensitivity, drift=drift, target_grid=target_grid, class_counts=counts, scaling_accuracy=scaling_accuracy,
        cost=cost, occupancy=occupancy, slopes=slopes, latency_ns=latency if timing else {},
        measured_throughput=measured, encoder_macs=E,
    )


# ---------------------------------------------------------------------------- across trained encoders
#: The shifted streams are scikit-learn's ten digit classes: zero-shot chance is 100 / 10 points.
DIGIT_CLASSES = 10


def encoder_gains(adapted: dict) -> dict:
    """One trained encoder's paired gains in points, each the mean over domains and repetitions.

    ``zero_shot_over_chance`` is the zero-shot accuracy minus chance (the learned-model floor).
    ``pta_vs_zero_shot``, ``pta_vs_tda``, ``pta_vs_uniform`` (confidence weighting against weight 1
    on the predicted class), ``uniform_vs_zero_shot``, ``oracle_vs_zero_shot`` (PTA's read-out on
    prototypes built from the true labels: the power control), ``pta_contaminated`` (PTA - zero-shot on the
    genuine samples of contaminated streams), ``tda_contaminated`` and the premise checks
    ``tda_hurt`` / ``pta_hurt`` (clean-stream gain minus contaminated-stream gain over zero-shot).
    """
    a, c = adapted["accuracy"], adapted["contaminated"]
    m = lambda table, k: float(np.mean(table[k]))  # noqa: E731
    zs = m(a, "zero-shot")
    return {
        "zero_shot_over_chance": zs - 100.0 / DIGIT_CLASSES,
        "pta_vs_zero_shot": m(a, "PTA") - zs,
        "pta_vs_tda": m(a, "PTA") - m(a, "TDA"),
        "pta_vs_uniform": m(a, "PTA") - m(a, "PTA-uniform"),
        "uniform_vs_zero_shot": m(a, "PTA-uniform") - zs,
        "tda_vs_zero_shot": m(a, "TDA") - zs,
        "oracle_vs_zero_shot": m(a, "oracle") - zs,
        "pta_contaminated": m(c, "PTA") - m(c, "zero-shot"),
        "tda_contaminated": m(c, "TDA") - m(c, "zero-shot"),
        "tda_hurt": (m(a, "TDA") - zs) - (m(c, "TDA") - m(c, "zero-shot")),
        "pta_hurt": (m(a, "PTA") - zs) - (m(c, "PTA") - m(c, "zero-shot")),
    }


def encoder_estimates(per_encoder: list[dict], level: float = 0.95) -> dict:
    """t intervals over trained encoders (the unit of replication) of every key of :func:`encoder_gains`."""
    if len(per_encoder) < 2:
        raise ValueError("intervals over encoders need at least two trained encoders")
    return {k: mean_interval([g[k] for g in per_encoder], level=level, unit="trained encoders")
            for k in per_encoder[0]}


def break_even_encoder_macs(zero_shot_head: float, method_head: float, keep: float = 0.9) -> float:
    """Encoder cost ``E`` above which ``(E + zero_shot_head) / (E + method_head) >= keep``.

    ``E >= (keep * method_head - zero_shot_head) / (1 - keep)``; 0 when the method is already as cheap.
    """
    if not 0 < keep < 1:
        raise ValueError(f"keep must lie in (0, 1), got {keep}")
    return max(0.0, (keep * method_head - zero_shot_head) / (1.0 - keep))


def gains_over_encoders(config: Config, encoders, first: Result) -> list[dict]:
    """:func:`encoder_gains` of every trained encoder; the first reuses ``first`` (its full run)."""
    out = [encoder_gains({"accuracy": first.accuracy, "contaminated": first.contaminated})]
    for model, meta in encoders[1:]:
        out.append(encoder_gains(adaptation(config, model, meta["split"])))
    return out
