"""The chapter's experiment: ``Config``, ``run`` and the statistics its verdicts depend on."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np
import scipy.stats
import sympy
import torch
from torch import nn

from compendium.stats import Estimate, deciding_estimate, holm, mean_interval, paired_difference
from compendium.training import TrainSpec, fit, seeded_init
from compendium.validation import require_int, require_number

from . import graphs as g
from .models import ANISOTROPIC, ISOTROPIC, SiameseGNN, embed, similarity

__all__ = ["Config", "Result", "run", "regular_degree_gap", "each_estimate", "significant_pairs",
           "difficulty_margin", "BilinearProbe", "probe_balanced_accuracy", "evaluate_model",
           "relabel_pairs", "measurements", "minimum_detectable_effect", "spectral_embedding", "PAPER_GAP",
           "CONVERGENCE_TOLERANCE"]

PAPER_GAP = 0.164             # GAT 0.658 - GCN 0.494 at eta = 0.12 (the paper, 7 runs of the authors' code)
CONVERGENCE_TOLERANCE = 0.02  # most LAP accuracy a headline model may still gain over its last training half


@dataclass(frozen=True)
class Config:
    """Every knob of the chapter (the registry's parameters) plus ``seed``."""

    seed: int = 0
    etas: tuple = (0.02, 0.05, 0.1, 0.15, 0.2, 0.3)
    headline_eta: float = 0.1
    num_nodes: int = 50
    mean_degree: float = 6.0
    eval_pairs: int = 100
    generator_pairs: int = 500
    baseline_pairs: int = 30
    lp_matrices: int = 50
    lp_size: int = 8
    probe_graphs: int = 8
    probe_steps: int = 100

    def __post_init__(self):
        object.__setattr__(self, "etas", tuple(float(e) for e in self.etas))
        require_int("seed", self.seed, 0, 2**31 - 1)
        if len(self.etas) < 3 or list(self.etas) != sorted(set(self.etas)) or not 0 < self.etas[0] or self.etas[-1] >= 1:
            raise ValueError(f"etas must be at least 3 increasing values in (0, 1), got {self.etas}")
        if self.headline_eta not in self.etas:
            raise ValueError(f"headline_eta {self.headline_eta} must be one of etas {self.etas}")
        require_int("num_nodes", self.num_nodes, 10, 200)
        require_number("mean_degree", self.mean_degree, 1.0, 20.0)
        if self.mean_degree >= self.num_nodes - 1:
            raise ValueError(f"mean_degree must be below num_nodes - 1, got {self.mean_degree}")
        for name, high in (("eval_pairs", 2000), ("generator_pairs", 5000), ("baseline_pairs", 2000),
                           ("lp_matrices", 500), ("probe_steps", 5000)):
            require_int(name, getattr(self, name), 2, high)
        require_int("lp_size", self.lp_size, 2, 50)
        require_int("probe_graphs", self.probe_graphs, 2, 200)


# ------------------------------------------------------------------------------ checks on the spine
def regular_degree_gap():
    """sympy: E[degree after corruption] - d on a d-regular graph (simplifies to 0)."""
    n, d, eta = sympy.symbols("n d eta", positive=True)
    s = sympy.sqrt(d * d)                                           # s_ij = sqrt(d_i d_j) = d
    removed = eta * d                                               # each of d edges w.p. eta
    added = (n - 1 - d) * eta * s / (n - 1 - s)                     # each of n-1-d non-edges
    return sympy.simplify(d - removed + added - d)


def each_estimate(estimates: dict, threshold: float, side: str = "low") -> tuple[str, Estimate]:
    """The estimate that decides "every one exceeds ``threshold``" (``side="low"``) or "every one
    stays below it" (``side="high"``): :func:`compendium.stats.deciding_estimate`'s rule."""
    key = deciding_estimate(estimates, side=side, threshold=threshold)
    return key, estimates[key]


def minimum_detectable_effect(differences, alpha: float = 0.05, power: float = 0.8) -> float:
    """Smallest mean difference a one-sided paired t test at ``alpha`` detects with ``power``, given
    the spread of these paired differences: ``(t_{1-alpha} + t_{power}) sd / sqrt(K)``, df = K - 1."""
    d = np.asarray(differences, dtype=float)
    K = len(d)
    if K < 2:
        raise ValueError("need at least two paired differences")
    t = scipy.stats.t.ppf(1 - alpha, K - 1) + scipy.stats.t.ppf(power, K - 1)
    return float(t * d.std(ddof=1) / np.sqrt(K))


def spectral_embedding(A: np.ndarray, dim: int) -> np.ndarray:
    """``(G, n, dim)`` node embeddings that carry the edges: the eigenvectors of the ``dim // 2``
    largest and the ``dim - dim // 2`` most negative eigenvalues (in that order), scaled by
    sqrt|eigenvalue|, so that one bilinear form, ``diag(+1, ..., -1, ...)``, gives every graph's
    rank-``dim`` approximation of A. The edge probe's positive control."""
    out = np.zeros(A.shape[:2] + (dim,))          # zero columns where dim > n
    for i, a in enumerate(np.asarray(A, dtype=float)):
        w, v = np.linalg.eigh(a)                   # ascending
        n = len(w)
        pos = np.arange(n - 1, n - 1 - min(dim // 2, n), -1)
        neg = np.arange(0, min(dim - dim // 2, n - len(pos)))
        out[i, :, :len(pos)] = v[:, pos] * np.sqrt(np.abs(w[pos]))
        out[i, :, dim // 2: dim // 2 + len(neg)] = v[:, neg] * np.sqrt(np.abs(w[neg]))
    return out


def significant_pairs(per_seed: dict, alpha: float = 0.05) -> tuple[int, dict]:
    """Model pairs with different means: two-sided paired t over seeds, Holm at ``alpha``.

    ``per_seed`` maps a model name to its per-seed scores ``(K,)`` (seed k paired across models).
    Returns the count and ``{(a, b): adjusted p}``; a pair with identical scores has p = 1.
    """
    names = list(per_seed)
    pairs = list(itertools.combinations(names, 2))
    raw = []
    for a, b in pairs:
        d = np.asarray(per_seed[a]) - np.asarray(per_seed[b])
        p = 1.0 if np.allclose(d, d[0]) and abs(d[0]) < 1e-15 else scipy.stats.ttest_rel(per_seed[a], per_seed[b]).pvalue
        raw.append(1.0 if not np.isfinite(p) else float(p))
    adjusted = holm(raw)
    return int(np.sum(adjusted < alpha)), dict(zip(pairs, map(float, adjusted)))


def difficulty_margin(counts: list) -> int:
    """max over interior grid points of the count minus the larger of the two end counts."""
    if len(counts) < 3:
        raise ValueError("need at least three grid points")
    return int(max(counts[1:-1]) - max(counts[0], counts[-1]))


def relabel_pairs(A, Bp, perm, rng):
    """Relabel both graphs of every pair by one permutation tau; the target becomes tau o perm o tau^-1.

    Returns ``(A2, B2, perm2, tau)`` with ``X2[tau[i], tau[j]] = X[i, j]``.
    """
    tau = np.argsort(rng.random(A.shape[1]))
    inv = np.argsort(tau)
    A2, B2 = A[:, inv][:, :, inv], Bp[:, inv][:, :, inv]            # X2[tau[i], tau[j]] = X[i, j]
    perm2 = tau[perm[:, inv]]
    return A2, B2, perm2, tau


# ------------------------------------------------------------------------------ evaluation
def evaluate_model(model: SiameseGNN, A, Bp, perm) -> dict:
    """Per-pair LAP accuracy, row top-1, coverage top-1 and predicted edge overlap: arrays (G,)."""
    with torch.no_grad():
        S = similarity(model, A, Bp).double().numpy()
    out = {k: np.empty(len(A)) for k in ("lap", "top1", "coverage", "overlap")}
    for i, (s, a, b, p) in enumerate(zip(S, A, Bp, perm)):
        sigma = g.lap_assignment(s)
        out["lap"][i] = np.mean(sigma == p)
        out["top1"][i] = g.row_top1(s, p)
        out["coverage"][i] = g.coverage_top1(s)
        out["overlap"][i] = g.edge_overlap(a, b, sigma)
    return out


class BilinearProbe(nn.Module):
    """Edge probe on frozen node embeddings: ``logit_ij = h_i^T W h_j + b`` with W symmetrised."""

    def __init__(self, dim: int):
        super().__init__()
        self.W = nn.Parameter(torch.zeros(dim, dim))
        self.b = nn.Parameter(torch.zeros(()))

    def forward(self, H: torch.Tensor) -> torch.Tensor:              # (G, n, d) -> (G, n, n)
        W = (self.W + self.W.T) / 2
        return H @ W @ H.transpose(1, 2) + self.b


def probe_balanced_accuracy(H_train, A_train, H_test, A_test, steps: int, seed: int) -> float:
    """Fit the bilinear probe on the train graphs (class-balanced logistic loss), return the
    balanced accuracy (mean of true-positive and true-negative rates) on the test graphs' node pairs."""
    mu, sd = H_train.mean((0, 1)), H_train.std((0, 1)) + 1e-6
    Xtr, Xte = (H_train - mu) / sd, (H_test - mu) / sd
    n = A_train.shape[1]
    upper = torch.triu(torch.ones(n, n, dtype=torch.bool), 1)
    ytr = torch.as_tensor(A_train, dtype=torch.float32)[:, upper]
    pos_weight = (ytr.numel() - ytr.sum()) / ytr.sum().clamp(min=1)
    with seeded_init(seed):
        probe = BilinearProbe(Xtr.shape[-1])
    loss = nn.BCEWithLogitsLoss(pos_weight=pos_weight)
    fit(probe, lambda step: loss(probe(Xtr)[:, upper], ytr),
        TrainSpec(max_steps=steps, learning_rate=0.05, weight_decay=0.0, threads=1, log_every=steps))
    with torch.no_grad():
        pred = (probe(Xte)[:, upper] > 0).numpy()
    y = np.asarray(A_test)[:, upper.numpy()]
    return float((pred[y].mean() + (~pred[~y]).mean()) / 2)


@dataclass
class Result:
    """Everything the notebook shows; arrays indexed ``[architecture][seed, eta]``."""

    config: Config
    architectures: tuple
    lap: dict = field(default_factory=dict)          # arch -> (K, E) mean LAP accuracy
    top1: dict = field(default_factory=dict)
    coverage: dict = field(default_factory=dict)
    overlap: dict = field(default_factory=dict)
    unrelated_z: dict = field(default_factory=dict)  # arch -> (K,) (acc - 1/n) / SE over pairs
    unrelated_lap: dict = field(default_factory=dict)
    baselines: dict = field(default_factory=dict)    # name -> (E,) mean LAP accuracy
    generator: dict = field(default_factory=dict)
    probe: dict = field(default_factory=dict)        # arch -> {"trained", "random", "shuffled"}: (K,)
    curve_steps: tuple = ()                          # training steps of the snapshots (final last)
    curve: dict = field(default_factory=dict)        # arch -> (K, C) LAP accuracy at headline_eta per snapshot
    probe_spectral: float = float("nan")             # edge probe on spectral embeddings (positive control)
    equivariance_gap: float = float("nan")       # max |S(tau A, tau B)[tau i, tau j] - S(A, B)[i, j]|
    relabel_accuracy_gap: float = float("nan")   # max change of mean LAP accuracy (ties only)
    lp_gap: float = float("nan")
    identity_accuracy: float = float("nan")
    example: dict = field(default_factory=dict)


def run(config: Config, models: dict, checkpoints: dict | None = None) -> Result:
    """Run every measurement of the chapter on the trained ``models`` (``{arch: [model per seed]}``);
    ``checkpoints`` (``{arch: {step: [model per seed]}}``, :func:`models.load_checkpoints`) adds the
    headline accuracy along training."""
    rng = np.random.default_rng([config.seed, 42])
    n, d = config.num_nodes, config.mean_degree
    res = Result(config=config, architectures=tuple(models))
    E = len(config.etas)

    # generator statistics (500 pairs per eta), unpermuted overlap and edge ratio
    for eta in config.etas:
        A, Bp, perm = g.make_pairs(config.generator_pairs, n, d, eta, rng)
        ratio = Bp.sum((1, 2)) / np.maximum(A.sum((1, 2)), 1)
        ov = g.true_overlap(A, Bp, perm)
        se = ov.std(ddof=1) / np.sqrt(len(ov))
        res.generator[eta] = {"ratio": mean_interval(ratio, unit="graph pairs"),
                              "overlap": float(ov.mean()), "overlap_se": float(se),
                              "overlap_z": float((ov.mean() - (1 - eta)) / se)}

    # identity and LP checks
    p = np.argsort(rng.random(n))
    res.identity_accuracy = g.lap_accuracy(np.eye(n)[p], p)       # S[i, p[i]] = 1: the true alignment
    gaps = []
    for _ in range(config.lp_matrices):
        S = rng.normal(size=(config.lp_size, config.lp_size))
        sigma = g.lap_assignment(S)
        gaps.append(abs(S[np.arange(config.lp_size), sigma].sum() - g.assignment_lp_value(S)))
    res.lp_gap = float(max(gaps))

    # shared evaluation pairs (paired across models and seeds)
    pairs = {eta: g.make_pairs(config.eval_pairs, n, d, eta, rng) for eta in config.etas}
    unrelated = g.unrelated_pairs(config.eval_pairs, n, d, rng)
    for arch, seeds in models.items():
        K = len(seeds)
        for key in ("lap", "top1", "coverage", "overlap"):
            getattr(res, key)[arch] = np.empty((K, E))
        res.unrelated_z[arch], res.unrelated_lap[arch] = np.empty(K), np.empty(K)
        for k, model in enumerate(seeds):
            for e, eta in enumerate(config.etas):
                out = evaluate_model(model, *pairs[eta])
                for key in ("lap", "top1", "coverage", "overlap"):
                    getattr(res, key)[arch][k, e] = out[key].mean()
            lap = evaluate_model(model, *unrelated)["lap"]
            res.unrelated_lap[arch][k] = lap.mean()
            res.unrelated_z[arch][k] = (lap.mean() - 1 / n) / (lap.std(ddof=1) / np.sqrt(len(lap)))

    # the headline accuracy along training (snapshots of the same runs, same evaluation pairs)
    e0 = config.etas.index(config.headline_eta)
    if checkpoints:
        steps = sorted(set.intersection(*(set(v) for v in checkpoints.values())))
        res.curve_steps = tuple(int(s) for s in steps)
        for arch, by_step in checkpoints.items():
            if arch not in models:
                continue
            res.curve[arch] = np.empty((len(models[arch]), len(steps)))
            for c, step in enumerate(steps):
                for k, model in enumerate(by_step[step]):
                    if step == steps[-1]:
                        res.curve[arch][k, c] = res.lap[arch][k, e0]      # the final models, already scored
                    else:
                        res.curve[arch][k, c] = evaluate_model(model, *pairs[config.headline_eta])["lap"].mean()

    # exact equivariance: relabel both graphs by one permutation (float64 copies, first seed)
    A, Bp, perm = (x[:20] for x in pairs[config.headline_eta])
    A2, B2, perm2, tau = relabel_pairs(A, Bp, perm, rng)
    sim_gap, acc_gap = 0.0, 0.0
    for arch, seeds in models.items():
        m64 = _double(seeds[0])
        with torch.no_grad():
            S, S2 = similarity(m64, A, Bp).numpy(), similarity(m64, A2, B2).numpy()
        sim_gap = max(sim_gap, float(np.abs(S2[:, tau][:, :, tau] - S).max()))   # S2[tau i, tau j] = S[i, j]
        acc_gap = max(acc_gap, abs(evaluate_model(m64, A, Bp, perm)["lap"].mean() - evaluate_model(m64, A2, B2, perm2)["lap"].mean()))
    res.equivariance_gap, res.relabel_accuracy_gap = sim_gap, float(acc_gap)

    # non-learned baselines (degree and spectral on the evaluation pairs, FAQ on a subset)
    res.baselines = {"degree": np.empty(E), "spectral": np.empty(E), "FAQ": np.empty(E)}
    for e, eta in enumerate(config.etas):
        A, Bp, perm = pairs[eta]
        res.baselines["degree"][e] = np.mean([g.lap_accuracy(g.degree_similarity(a, b), q) for a, b, q in zip(A, Bp, perm)])
        res.baselines["spectral"][e] = np.mean([g.lap_accuracy(g.spectral_similarity(a, b), q) for a, b, q in zip(A, Bp, perm)])
        m = config.baseline_pairs
        res.baselines["FAQ"][e] = np.mean([np.mean(g.faq_assignment(a, b, rng) == q) for a, b, q in zip(A[:m], Bp[:m], perm[:m])])

    # pretraining: edge probe on frozen embeddings of held-out (uncorrupted) graphs
    probe_A = g.erdos_renyi(2 * config.probe_graphs, n, d, rng)
    tr, te = probe_A[: config.probe_graphs], probe_A[config.probe_graphs:]
    for arch, seeds in models.items():
        res.probe[arch] = {"trained": [], "random": [], "shuffled": []}
        for k, model in enumerate(seeds):
            with seeded_init(int(model.train_seed)):
                fresh = SiameseGNN(arch, model.width, model.out_dim).eval()
            for name, net in (("trained", model), ("random", fresh)):
                with torch.no_grad():
                    Htr, Hte = embed(net, tr), embed(net, te)
                res.probe[arch][name].append(probe_balanced_accuracy(Htr, tr, Hte, te, config.probe_steps, k))
                if name == "trained":     # control: node embeddings shuffled within each graph
                    shuffle = torch.from_numpy(np.argsort(rng.random(Hte.shape[:2]), axis=1))
                    Hsh = torch.gather(Hte, 1, shuffle[..., None].expand_as(Hte))
                    res.probe[arch]["shuffled"].append(probe_balanced_accuracy(Htr, tr, Hsh, te, config.probe_steps, k))
        res.probe[arch] = {key: np.array(v) for key, v in res.probe[arch].items()}
    # positive control: the same probe on embeddings that carry the edges (spectral, same dimension)
    dim = next(iter(models.values()))[0].out_dim
    Str, Ste = (torch.as_tensor(spectral_embedding(x, dim), dtype=torch.float32) for x in (tr, te))
    res.probe_spectral = probe_balanced_accuracy(Str, tr, Ste, te, config.probe_steps, 0)

    # one aligned pair to draw
    A, Bp, perm = (x[:1] for x in pairs[config.headline_eta])
    best = max(models, key=lambda a: res.lap[a][:, config.etas.index(config.headline_eta)].mean())
    with torch.no_grad():
        S = similarity(models[best][0], A, Bp)[0].double().numpy()
    res.example = {"A": A[0], "B": Bp[0], "perm": perm[0], "sigma": g.lap_assignment(S), "architecture": best}
    return res


def _double(model: SiameseGNN) -> SiameseGNN:
    import copy

    return copy.deepcopy(model).double()


def measurements(res: Result) -> dict:
    """Every number a ledger verdict depends on, computed from ``run``'s result.

    Units of replication: trained models (training seeds, paired across architectures by seed)
    for every model comparison; graph pairs only for the generator statistics and for one
    model's accuracy on unrelated pairs.
    """
    cfg = res.config
    e0 = cfg.etas.index(cfg.headline_eta)
    out: dict = {}
    # generator: the eta whose edge-ratio interval reaches farthest from 1, the worst overlap z
    ratios = {eta: v["ratio"] for eta, v in res.generator.items()}
    worst = max(ratios, key=lambda eta: max(abs(ratios[eta].low - 1), abs(ratios[eta].high - 1)))
    out["edge_ratio_eta"], out["edge_ratio"] = worst, ratios[worst]
    out["overlap_max_abs_z"] = float(max(abs(v["overlap_z"]) for v in res.generator.values()))
    # LAP >= per-row top-1: per trained model, mean over the grid of (LAP - top-1)
    gaps = np.concatenate([(res.lap[a] - res.top1[a]).mean(1) for a in res.architectures])
    out["lap_minus_top1"] = mean_interval(gaps, unit="trained models")
    # headline: each anisotropic minus each isotropic model at headline_eta, paired over seeds;
    # a 90 % two-sided t interval with lower end > 0 is the one-sided paired t test at p < 0.05
    diffs = {f"{a}-{b}": paired_difference(res.lap[a][:, e0], res.lap[b][:, e0], level=0.90, unit="training seeds")
             for a in ANISOTROPIC for b in ISOTROPIC if a in res.lap and b in res.lap}
    out["headline_pairs"] = diffs
    out["headline_key"], out["headline"] = each_estimate(diffs, 0.0)
    # power: the smallest effect five seeds detect (one-sided paired t, 0.05, power 0.8), worst pair
    mde = {f"{a}-{b}": minimum_detectable_effect(res.lap[a][:, e0] - res.lap[b][:, e0])
           for a in ANISOTROPIC for b in ISOTROPIC if a in res.lap and b in res.lap}
    out["mde_pairs"] = mde
    out["mde_key"] = max(mde, key=mde.get)
    out["mde"] = mde[out["mde_key"]]
    # along training: each headline pair's gap per snapshot, and each model's gain over the last half
    if res.curve:
        out["curve_steps"] = res.curve_steps
        out["gap_curve"] = {f"{a}-{b}": [paired_difference(res.curve[a][:, c], res.curve[b][:, c], level=0.90, unit="training seeds")
                                         for c in range(len(res.curve_steps))]
                            for a in ANISOTROPIC for b in ISOTROPIC if a in res.curve and b in res.curve}
        gains = {a: paired_difference(res.curve[a][:, -1], res.curve[a][:, -2], unit="training seeds")
                 for a in ANISOTROPIC + ISOTROPIC if a in res.curve}
        out["convergence_pairs"] = gains
        out["convergence_key"], out["convergence"] = each_estimate(gains, CONVERGENCE_TOLERANCE, side="high")
    best = max(res.architectures, key=lambda a: res.lap[a][:, e0].mean())
    out["headroom_model"], out["headroom"] = best, mean_interval(res.lap[best][:, e0], unit="training seeds")
    # optimal difficulty: significant pairs per eta
    counts, adjusted = [], {}
    for e, eta in enumerate(cfg.etas):
        c, adj = significant_pairs({a: res.lap[a][:, e] for a in res.architectures})
        counts.append(c)
        adjusted[eta] = adj
    out["significant_counts"], out["significant_p"] = counts, adjusted
    out["difficulty_margin"] = difficulty_margin(counts)
    out["unrelated_significant"] = significant_pairs({a: res.unrelated_lap[a] for a in res.architectures})[0]
    out["unrelated_max_abs_z"] = float(max(np.abs(z).max() for z in res.unrelated_z.values()))
    # pretraining: trained minus random-init edge-probe balanced accuracy, paired over seeds
    probe = {a: paired_difference(v["trained"], v["random"], unit="training seeds") for a, v in res.probe.items()}
    out["probe_pairs"] = probe
    out["probe_key"], out["probe"] = each_estimate(probe, 0.10)
    out["probe_spectral"] = res.probe_spectral
    shuffled = np.concatenate([v["shuffled"] for v in res.probe.values()])
    out["probe_shuffled"] = mean_interval(shuffled, unit="trained models")
    return out
