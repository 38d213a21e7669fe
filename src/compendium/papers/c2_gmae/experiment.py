"""The chapter's experiment: ``Config``, ``run``, the implementation checks and the statistics the
verdicts depend on."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np
import torch

from compendium.stats import Estimate, bootstrap_interval, mantel_spearman, mean_interval, paired_difference
from compendium.training import seeded_init, torch_threads
from compendium.validation import require_int, require_number

from . import graphs as g
from . import model as m

__all__ = ["Config", "Result", "run", "make_datasets", "calibrate_noise", "mask_count_checks",
           "coverage_histograms", "hea_weight_violations", "laplacian_pe_error", "reference_graphmae_losses",
           "bit_for_bit_gap", "measurements", "rwse_error", "coverage_by_density", "segment_conv",
           "kernel_training_gap", "kernel_equals_reference", "VARIANTS", "dev_graphs", "dev_feature_probe", "DEV_SEED", "levels_passing", "deciding_level", "select_beta_mu", "LEVEL_CI", "dev_baseline", "noise_floor_fraction", "HEADLINE_HALF_WIDTH", "FEATURE_FLOOR"]

LEVEL_CI = 0.90          # two-sided 90% t interval: lower end > 0  <=>  one-sided paired t p < 0.05
SCE_CLOSE = 0.02         # the motivating observation: final SCE within 2% (relative)
ACC_APART = 0.02         # ... and probe accuracy more than 2 points apart
DIGITS = "digits"
HEADLINE_HALF_WIDTH = 0.03   # power control: the deciding level's 90% interval must resolve a 3-point gain
FEATURE_FLOOR = -0.05        # precondition at the lowest h: GraphMAE at most 5 points below the raw-feature probe
VARIANTS = ("c2_rwse", "c2_js", "c2_kcore", "c2_clustering")   # C2-full with one part swapped (``variants``)


@dataclass(frozen=True)
class Config:
    """Every knob of the chapter (the registry's parameters) plus ``seed``."""

    seed: int = 0
    homophily_levels: tuple = (0.2, 0.5, 0.8)
    num_nodes: int = 300
    mean_degree: float = 4.0
    feature_dim: int = 32
    feature_noise: float = 3.66
    digits_nodes: int = 300
    digits_k: int = 10
    digits_rewire: float = 0.5
    digits_noise: float = 1.71
    num_seeds: int = 3
    epochs: int = 20
    mask_rate: float = 0.5
    replace_rate: float = 0.05
    sce_alpha: float = 3.0
    pe_dim: int = 8
    hea_beta: float = 1.0
    consistency_weight: float = 1.0
    consistency_weight_js: float = 100.0
    coverage_tau: float = 1.0
    learning_rate: float = 0.005
    self_path: bool = True
    ablations: bool = False
    variants: bool = False
    check_graphs: int = 100
    check_epochs: int = 50

    def __post_init__(self):
        object.__setattr__(self, "homophily_levels", tuple(float(h) for h in self.homophily_levels))
        require_int("seed", self.seed, 0, 2**31 - 1)
        hs = self.homophily_levels
        if len(hs) != 3 or list(hs) != sorted(set(hs)) or not 0 < hs[0] or hs[-1] >= 1:
            raise ValueError(f"homophily_levels must be 3 increasing values in (0, 1), got {hs}")
        require_int("num_nodes", self.num_nodes, 40, 3000)
        require_number("mean_degree", self.mean_degree, 1.0, 50.0)
        require_int("feature_dim", self.feature_dim, 2, 512)
        require_number("feature_noise", self.feature_noise, 0.0, 100.0)
        require_int("digits_nodes", self.digits_nodes, 40, 1797)
        require_int("digits_k", self.digits_k, 1, 19)
        require_number("digits_rewire", self.digits_rewire, 0.0, 1.0)
        require_number("digits_noise", self.digits_noise, 0.0, 100.0)
        require_int("num_seeds", self.num_seeds, 2, 100)
        require_int("epochs", self.epochs, 1, 5000)
        require_number("mask_rate", self.mask_rate, 0.0, 1.0, low_open=True, high_open=True)
        require_number("replace_rate", self.replace_rate, 0.0, 1.0, high_open=True)
        require_number("sce_alpha", self.sce_alpha, 1.0, 10.0)
        require_int("pe_dim", self.pe_dim, 1, 64)
        require_number("hea_beta", self.hea_beta, 0.0, 100.0, low_open=True)
        require_number("consistency_weight", self.consistency_weight, 0.0, 100.0, low_open=True)
        require_number("consistency_weight_js", self.consistency_weight_js, 0.0, 1000.0, low_open=True)
        require_number("coverage_tau", self.coverage_tau, 0.0, 1e6)
        require_number("learning_rate", self.learning_rate, 0.0, 1.0, low_open=True)
        require_int("check_graphs", self.check_graphs, 1, 1000)
        require_int("check_epochs", self.check_epochs, 1, 1000)

    def settings(self) -> m.TrainSettings:
        return m.TrainSettings(epochs=self.epochs, mask_rate=self.mask_rate, replace_rate=self.replace_rate,
                               sce_alpha=self.sce_alpha, learning_rate=self.learning_rate,
                               coverage_tau=self.coverage_tau, self_path=bool(self.self_path))

    def dataset_names(self) -> tuple:
        return tuple(f"h={h:g}" for h in self.homophily_levels) + (DIGITS,)


@dataclass
class Result:
    """Per dataset and arm: arrays over training seeds."""

    config: Config
    accuracy: dict = field(default_factory=dict)        # [dataset][arm] -> (S,)
    quartile_accuracy: dict = field(default_factory=dict)  # [dataset][arm] -> (S, 4)
    correct: dict = field(default_factory=dict)          # [dataset][arm] -> (S, test nodes) per-node correctness
    sce: dict = field(default_factory=dict)             # [dataset][arm] -> (S,)
    js: dict = field(default_factory=dict)              # [dataset][arm] -> (S,)
    loss_curves: dict = field(default_factory=dict)     # [dataset][arm] -> (S, epochs)
    info: dict = field(default_factory=dict)            # [dataset] -> homophily, feature probe, sizes
    checks: dict = field(default_factory=dict)          # implementation checks


# ------------------------------------------------------------------------------------------ data
def _digits():
    from compendium.data import load

    ds = load("digits")
    return ds.data, ds.target


def make_datasets(config: Config, seed: int | None = None) -> dict:
    """``{name: Graph}``: the three CSBM levels and digits-kNN, all drawn from ``seed``."""
    seed = config.seed if seed is None else seed
    out = {}
    for i, h in enumerate(config.homophily_levels):
        rng = np.random.default_rng([seed, 11, i])
        out[f"h={h:g}"] = g.csbm_dc(config.num_nodes, 4, h, config.mean_degree, config.feature_dim,
                                    config.feature_noise, rng)
    X, y = _digits()
    out[DIGITS] = g.digits_knn(X, y, config.digits_nodes, config.digits_k, config.digits_rewire,
                               config.digits_noise, np.random.default_rng([seed, 12]))
    return out


def calibrate_noise(make_graph, target: float = 0.6, low: float = 0.05, high: float = 40.0, steps: int = 16) -> float:
    """Bisection on the feature noise so that the raw-feature probe's *validation* accuracy on
    ``make_graph(noise)`` (one dev graph, split from its own seed) is ``target``; returns the noise."""
    for _ in range(steps):
        mid = float(np.sqrt(low * high))
        graph = make_graph(mid)
        split = g.split_nodes(graph.y, np.random.default_rng(12345))
        acc = g.feature_probe_accuracy(graph, split, "val")
        low, high = (mid, high) if acc > target else (low, mid)
    return float(np.sqrt(low * high))


DEV_SEED = 9999


DEV_CSBM_NODES = 2000    # the calibration graph is larger than any test graph, so its probe accuracy is precise


def dev_graphs(config: Config, feature_noise: float | None = None, digits_noise: float | None = None,
               num_nodes: int | None = None) -> dict:
    """The dev graphs the noise levels (and, at ``num_nodes``, beta and mu) are set on: a CSBM
    with h = 0.5 of ``DEV_CSBM_NODES`` nodes and the full digits-kNN graph (1797 nodes), both from
    ``DEV_SEED`` (the test graphs are drawn from the chapter seed)."""
    fn = config.feature_noise if feature_noise is None else feature_noise
    dn = config.digits_noise if digits_noise is None else digits_noise
    X, y = _digits()
    return {"csbm": g.csbm_dc(num_nodes or DEV_CSBM_NODES, 4, 0.5, config.mean_degree, config.feature_dim, fn,
                              np.random.default_rng([DEV_SEED, 11, 1])),
            "digits": g.digits_knn(X, y, len(y), config.digits_k, config.digits_rewire, dn,
                                   np.random.default_rng([DEV_SEED, 12]))}


def dev_feature_probe(config: Config) -> dict:
    """Validation accuracy of the raw-feature probe on each dev graph with the frozen noise levels."""
    from threadpoolctl import threadpool_limits

    with torch_threads(1), threadpool_limits(1):
        return _dev_feature_probe(config)


def _dev_feature_probe(config: Config) -> dict:
    out = {}
    for name, graph in dev_graphs(config).items():
        split = g.split_nodes(graph.y, np.random.default_rng(12345))
        out[name] = g.feature_probe_accuracy(graph, split, "val")
    return out


# ------------------------------------------------------------------------- implementation checks
def mask_count_checks(config: Config, num_graphs: int, epochs: int, rng: np.random.Generator) -> dict:
    """On ``num_graphs`` random CSBM graphs (n drawn in [50, 400]) over ``epochs`` epochs: the
    largest |bin count - round(rho |P_q|)| of density-partitioned masking (tau as configured) and
    of GraphMAE's random mask, and the largest within-bin max - min of per-node mask counts under
    the coverage memory with tau = inf."""
    dpm_dev = rand_dev = spread_inf = 0
    for k in range(num_graphs):
        n = int(rng.integers(50, 401))
        graph = g.csbm_dc(n, 4, float(rng.uniform(0.2, 0.8)), 6.0, 4, 1.0, rng)
        bins = g.degree_quartiles(graph.degree(), rng)
        target = np.array([round(config.mask_rate * np.sum(bins == q)) for q in range(4)])
        gen = torch.Generator().manual_seed(int(rng.integers(2**31)))
        mem = m.CoverageMemory(bins, config.coverage_tau)
        mem_inf = m.CoverageMemory(bins, float("inf"))
        for _ in range(epochs):
            dpm = m.density_partition_mask(mem, config.mask_rate, gen).numpy()
            dpm_dev = max(dpm_dev, int(np.abs(np.bincount(bins[dpm], minlength=4) - target).max()))
            rnd = m.random_mask(n, config.mask_rate, gen).numpy()
            rand_dev = max(rand_dev, int(np.abs(np.bincount(bins[rnd], minlength=4) - target).max()))
            m.density_partition_mask(mem_inf, config.mask_rate, gen)
            counts = mem_inf.counts.numpy()
            spread_inf = max(spread_inf, max(int(np.ptp(counts[bins == q])) for q in range(4)))
    return {"dpm_max_deviation": dpm_dev, "random_max_deviation": rand_dev, "tau_inf_max_spread": spread_inf}


def coverage_histograms(graph: g.Graph, config: Config, epochs: int, seed: int) -> dict:
    """Per-node mask counts after ``epochs`` epochs: random masks, DPM (configured tau), DPM tau = inf."""
    rng = np.random.default_rng(seed)
    bins = g.degree_quartiles(graph.degree(), rng)
    gen = torch.Generator().manual_seed(seed)
    n = graph.num_nodes
    rand = np.zeros(n)
    mem, mem_inf = m.CoverageMemory(bins, config.coverage_tau), m.CoverageMemory(bins, float("inf"))
    for _ in range(epochs):
        rand[m.random_mask(n, config.mask_rate, gen).numpy()] += 1
        m.density_partition_mask(mem, config.mask_rate, gen)
        m.density_partition_mask(mem_inf, config.mask_rate, gen)
    return {"random": rand, "dpm": mem.counts.numpy().copy(), "dpm_tau_inf": mem_inf.counts.numpy().copy(), "bins": bins}


def hea_weight_violations(graph: g.Graph, beta: float) -> dict:
    """Counts of violations of: w symmetric on the two directions of every edge, w >= 1, and w
    monotone (non-decreasing) in the dissimilarity (1 - cos)/2 along sorted edges."""
    ei = graph.edge_index
    w = g.hetero_edge_weights(graph.x, ei, beta).double()
    key = {(int(a), int(b)): float(v) for a, b, v in zip(ei[0], ei[1], w)}
    asym = sum(abs(v - key[(b, a)]) > 1e-6 for (a, b), v in key.items())
    below = int((w < 1.0).sum())
    dis = (1 - torch.nn.functional.cosine_similarity(graph.x[ei[0]].double(), graph.x[ei[1]].double(), dim=-1)) / 2
    order = torch.argsort(dis)
    nonmono = int((torch.diff(w[order]) < -1e-6).sum())
    return {"asymmetric": int(asym), "below_one": below, "non_monotone": nonmono}


def laplacian_pe_error(graph: g.Graph, k: int) -> float:
    """max(||L P - P Lambda||_max, ||P^T P - I||_max) of :func:`graphs.laplacian_pe` (float64)."""
    A = graph.adjacency()
    P, lam = g.laplacian_pe(A, k)
    deg = A.sum(1)
    dinv = 1 / np.sqrt(np.where(deg > 0, deg, 1.0))
    L = np.eye(len(A)) - dinv[:, None] * A * dinv[None, :]
    return float(max(np.abs(L @ P - P * lam).max(), np.abs(P.T @ P - np.eye(k)).max()))


def rwse_error(graph: g.Graph, k: int) -> float:
    """max |rwse - rwse_spectral| (matrix powers against the eigendecomposition of D^-1/2 A D^-1/2)."""
    A = graph.adjacency()
    return float(np.abs(g.rwse(A, k) - g.rwse_spectral(A, k)).max())


def coverage_by_density(graph: g.Graph, config: Config, epochs: int, seed: int) -> dict:
    """Per density measure (and random masks): over ``epochs`` epochs of masking, the largest
    deviation of the mask rate within a *degree* quartile from ``mask_rate`` (mean over epochs),
    the standard deviation of the per-node mask counts, and for each measure how many distinct
    values it takes and the fraction of nodes sharing its most common value (ties are broken at
    random when binning)."""
    rng = np.random.default_rng([seed, 19])
    deg_q = g.degree_quartiles(graph.degree(), rng)
    out = {}
    for kind in ("random",) + g.DENSITIES:
        gen = torch.Generator().manual_seed(seed)
        counts = np.zeros(graph.num_nodes)
        dev = np.zeros(4)
        mem = None if kind == "random" else m.CoverageMemory(
            deg_q if kind == "degree" else g.degree_quartiles(g.node_density(graph, kind), rng), config.coverage_tau)
        for _ in range(epochs):
            mask = (m.random_mask(graph.num_nodes, config.mask_rate, gen) if mem is None
                    else m.density_partition_mask(mem, config.mask_rate, gen)).numpy()
            counts[mask] += 1
            dev += np.abs(np.bincount(deg_q[mask], minlength=4) / np.bincount(deg_q, minlength=4) - config.mask_rate)
        out[kind] = {"degree_quartile_rate_error": float((dev / epochs).max()), "count_sd": float(counts.std())}
        if kind != "random":
            values = g.node_density(graph, kind)
            out[kind]["distinct_values"] = int(np.unique(values).size)
            out[kind]["largest_tie_fraction"] = float(np.unique(values, return_counts=True)[1].max() / values.size)
    return out


def segment_conv(backend: str = "auto"):
    """``SegmentGATConv`` with a fixed kernel ``backend`` (a subclass, since ``train_gmae`` takes a class)."""
    return type(f"SegmentGATConv_{backend}", (m.SegmentGATConv,), {"backend": backend})


def kernel_training_gap(graph: g.Graph, settings: m.TrainSettings, seed: int, arm: m.ArmSpec, pe_dim: int,
                        backend: str = "auto") -> dict:
    """Train ``arm`` twice from the same seed, once on ``BiasedGATConv`` (torch_geometric's softmax
    and propagate) and once on ``SegmentGATConv`` (the segment-softmax kernel module, ``backend``):
    largest loss difference over the epochs and largest difference of the trained models'
    embeddings (each through its own layer), and which backend ran."""
    from compendium.kernels import use_triton

    pe, _ = g.laplacian_pe(graph.adjacency(), pe_dim)
    bins = g.degree_quartiles(graph.degree(), np.random.default_rng(seed))
    with torch_threads(1):
        ref, ref_loss = m.train_gmae(graph.x, graph.edge_index, pe, bins, arm, settings, seed)
        ker, ker_loss = m.train_gmae(graph.x, graph.edge_index, pe, bins, arm, settings, seed, conv=segment_conv(backend))
        gap = float(np.abs(m.embed(ref, graph.x) - m.embed(ker, graph.x)).max())
    ran = "triton" if use_triton(backend, graph.x) else "reference"
    return {"loss_gap": float(np.abs(ref_loss - ker_loss).max()), "embed_gap": gap, "backend": ran,
            "epochs": settings.epochs}


_KERNEL_SCRIPT = r"""
import json, sys, torch
from compendium.kernels.segment_softmax import (csr_from_edge_index, segment_softmax_aggregate_reference,
                                                segment_softmax_aggregate_triton)
device, seed = sys.argv[1], int(sys.argv[2])
gen = torch.Generator().manual_seed(seed)
worst, cases = 0.0, 0
for n, H, C, p in ((20, 2, 5, 0.2), (18, 1, 3, 1.0), (6, 2, 4, 0.0)):   # sparse; segments of 18 > block 16; no edges
    A = torch.rand(n, n, generator=gen) < p
    rowptr, src, order = csr_from_edge_index(A.nonzero().T.flip(0), n)
    e = 4 * torch.randn(src.numel(), H, generator=gen)
    v = torch.randn(n, H, C, generator=gen)
    ref = segment_softmax_aggregate_reference(e, rowptr, src, v)
    ker = segment_softmax_aggregate_triton(*[t.to(device) for t in (e, rowptr, src, v)]).cpu()
    worst, cases = max(worst, float((ker - ref).abs().max())), cases + 1
print(json.dumps({"max_error": worst, "cases": cases}))
"""


def kernel_equals_reference(device: str = "cpu", seed: int = 0, timeout: float = 300) -> dict:
    """The Triton segment-softmax kernel against its reference on three small shapes (a sparse
    graph, segments longer than a block, no edges): compiled on CUDA, in Triton's interpreter on
    the CPU (a subprocess: ``TRITON_INTERPRET`` must be set before Triton is imported)."""
    import json
    import os
    import subprocess
    import sys

    env = dict(os.environ)
    if device == "cuda":
        env.pop("TRITON_INTERPRET", None)
    else:
        env["TRITON_INTERPRET"] = "1"
    out = subprocess.run([sys.executable, "-c", _KERNEL_SCRIPT, "cuda" if device == "cuda" else "cpu", str(seed)],
                         env=env, capture_output=True, text=True, timeout=timeout, check=True)
    return {**json.loads(out.stdout.strip().splitlines()[-1]), "mode": "compiled" if device == "cuda" else "interpreter"}


def reference_graphmae_losses(x: torch.Tensor, edge_index: torch.Tensor, settings: m.TrainSettings, seed: int) -> np.ndarray:
    """A plain GraphMAE training loop (torch_geometric ``GATConv``, ``torch.optim.Adam``, no C2
    code path: no bias, no PE, one view, random masks; the self path, if ``settings`` has it, written
    out here), seeded as :func:`model.train_gmae` is.
    Its loss curve must equal ``train_gmae`` with every C2 part off, bit for bit."""
    from torch_geometric.nn import GATConv

    n = x.shape[0]
    with seeded_init(seed):
        net = m.GraphMAE(x.shape[1], 0, settings, conv=GATConv)
    gen = torch.Generator().manual_seed(seed + 1)
    edge_index = m.with_self_loops(edge_index, n)
    opt = torch.optim.Adam(net.parameters(), lr=settings.learning_rate, weight_decay=settings.weight_decay, foreach=True)
    losses = []
    with torch.random.fork_rng(devices=[]), torch_threads(1):
        torch.manual_seed(seed + 2)
        net.train()
        for _ in range(settings.epochs):
            mask_nodes = torch.randperm(n, generator=gen)[: int(settings.mask_rate * n)]
            k = mask_nodes.numel()
            perm = torch.randperm(k, generator=gen)
            num_noise = int(settings.replace_rate * k)
            token = mask_nodes[perm[: int((1 - settings.replace_rate) * k)]]
            noise = mask_nodes[perm[k - num_noise:]] if num_noise else mask_nodes[:0]
            src = torch.randperm(n, generator=gen)[:num_noise]
            xin = x.clone()
            xin[token] = 0.0
            xin[noise] = x[src]
            xin[token] = xin[token] + net.enc_mask_token
            a = torch.nn.functional.dropout(xin, settings.in_drop, True)
            h = net.enc1(a, edge_index) + (net.skip1(a) if settings.self_path else 0.0)
            a = torch.nn.functional.dropout(net.act1(h), settings.in_drop, True)
            h = net.act2(net.enc2(a, edge_index) + (net.skip2(a) if settings.self_path else 0.0))
            r = net.encoder_to_decoder(h).index_fill(0, mask_nodes, 0.0)
            z = net.dec(r, edge_index)
            loss = m.sce_loss(x[mask_nodes], z[mask_nodes], settings.sce_alpha)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(float(loss.detach()))
    return np.array(losses)


def bit_for_bit_gap(graph: g.Graph, settings: m.TrainSettings, seed: int) -> float:
    """max |loss_C2-all-off - loss_reference| over the epochs (0.0 means bit for bit)."""
    _, ours = m.train_gmae(graph.x, graph.edge_index, None, np.zeros(graph.num_nodes, int), m.ArmSpec(), settings, seed)
    ref = reference_graphmae_losses(graph.x, graph.edge_index, settings, seed)
    return float(np.abs(ours - ref).max())


# ----------------------------------------------------------------------------------------- run
def _train_seed(seed: int, dataset_index: int, s: int) -> int:
    return 100_000 * seed + 1_000 * dataset_index + 10 * s


def run(config: Config, progress=None, kernel_backend: str = "auto") -> Result:
    """Train every arm on every dataset for ``num_seeds`` training seeds and probe it (one torch
    thread and one BLAS thread throughout: faster for these sizes on a shared machine).
    ``kernel_backend`` is the segment-softmax backend of the kernel training check."""
    from threadpoolctl import threadpool_limits

    with torch_threads(1), threadpool_limits(1):
        return _run(config, progress, kernel_backend)


def _run(config: Config, progress=None, kernel_backend: str = "auto") -> Result:
    res = Result(config)
    settings = config.settings()
    trained = m.arms(config.hea_beta, config.consistency_weight, config.consistency_weight_js)
    keep = (["graphmae", "graphmae_pe", "c2", "c2_no_dpm", "c2_no_hea"] + (["c2_no_pe", "c2_no_cons"] if config.ablations else [])
            + (list(VARIANTS) if config.variants else []))
    datasets = make_datasets(config)
    for di, (name, graph) in enumerate(datasets.items()):
        rng = np.random.default_rng([config.seed, 13, di])
        split = g.split_nodes(graph.y, rng)
        bins = g.degree_quartiles(graph.degree(), rng)
        test_q = bins[split["test"]]
        pe, _ = g.laplacian_pe(graph.adjacency(), config.pe_dim)
        pes = {"laplacian": pe}
        density_bins = {"degree": bins}
        if config.variants and name != DIGITS:
            pes["rwse"] = g.rwse(graph.adjacency(), config.pe_dim)
            drng = np.random.default_rng([config.seed, 18, di])
            for kind in g.DENSITIES[1:]:
                density_bins[kind] = g.degree_quartiles(g.node_density(graph, kind), drng)
        arm_names = keep if name != DIGITS else ["graphmae", "c2"]
        arm_names = arm_names + (["graphmae_b"] if name != DIGITS else [])
        probes = ["random_init", "pe_only"] + (["rwse_only"] if "rwse" in pes else [])
        acc = {a: [] for a in arm_names + probes}
        quart = {a: [] for a in acc}
        corr = {a: [] for a in acc}
        sce, js, curves = {a: [] for a in arm_names}, {a: [] for a in arm_names}, {a: [] for a in arm_names}

        def record(arm, Z):
            correct = g.probe_accuracy(Z, graph.y, split)
            acc[arm].append(correct.mean())
            corr[arm].append(correct)
            quart[arm].append([correct[test_q == q].mean() for q in range(4)])

        for s in range(config.num_seeds):
            seed_s = _train_seed(config.seed, di, s)
            for arm in arm_names:
                spec = trained["graphmae"] if arm == "graphmae_b" else trained[arm]
                ts = seed_s + 5 if arm == "graphmae_b" else seed_s
                model, losses = m.train_gmae(graph.x, graph.edge_index, pes[spec.pe_kind], density_bins[spec.density],
                                             spec, settings, ts)
                record(arm, m.embed(model, graph.x))
                eval_seed = seed_s + 7                          # the same evaluation masks for every arm
                sce[arm].append(m.final_sce(model, graph.x, settings, eval_seed))
                js[arm].append(m.attention_js(model, graph.x, settings, eval_seed))
                curves[arm].append(losses)
            with seeded_init(seed_s):
                rand_model = m.attach(m.GraphMAE(graph.x.shape[1], 0, settings), graph.edge_index, graph.num_nodes)
            record("random_init", m.embed(rand_model, graph.x))
            record("pe_only", pe)
            if "rwse" in pes:
                record("rwse_only", pes["rwse"])
            if progress:
                progress(name, s)
        res.accuracy[name] = {a: np.array(v) for a, v in acc.items()}
        res.quartile_accuracy[name] = {a: np.array(v) for a, v in quart.items()}
        res.correct[name] = {a: np.array(v) for a, v in corr.items()}
        res.sce[name] = {a: np.array(v) for a, v in sce.items()}
        res.js[name] = {a: np.array(v) for a, v in js.items()}
        res.loss_curves[name] = {a: np.array(v) for a, v in curves.items()}
        res.info[name] = {"homophily": g.edge_homophily(graph), "feature_probe": g.feature_probe_accuracy(graph, split),
                          "nodes": graph.num_nodes, "edges": int(graph.edge_index.shape[1] // 2),
                          "mean_degree": float(graph.degree().mean())}
    # implementation checks
    crng = np.random.default_rng([config.seed, 14])
    res.checks["masks"] = mask_count_checks(config, config.check_graphs, config.check_epochs, crng)
    first = datasets[config.dataset_names()[0]]
    res.checks["coverage"] = coverage_histograms(first, config, config.check_epochs, config.seed)
    res.checks["hea"] = hea_weight_violations(first, config.hea_beta)
    res.checks["pe_error"] = max(laplacian_pe_error(d, config.pe_dim) for d in datasets.values())
    res.checks["rwse_error"] = max(rwse_error(d, config.pe_dim) for d in datasets.values())
    res.checks["density_coverage"] = coverage_by_density(first, config, config.check_epochs, config.seed)
    small = g.csbm_dc(120, 4, 0.5, 6.0, 16, 1.0, np.random.default_rng([config.seed, 15]))
    small_settings = m.TrainSettings(epochs=20, mask_rate=config.mask_rate, replace_rate=config.replace_rate,
                                     self_path=settings.self_path)
    res.checks["bit_for_bit"] = bit_for_bit_gap(small, small_settings, config.seed)
    res.checks["kernel_training"] = kernel_training_gap(small, small_settings, config.seed, trained["c2"], config.pe_dim,
                                                        backend=kernel_backend)
    return res


# ------------------------------------------------------------------------------------ statistics
def _diff(res: Result, name: str, a: str, b: str) -> Estimate:
    return paired_difference(res.accuracy[name][a], res.accuracy[name][b], level=LEVEL_CI, unit="training seeds")


def levels_passing(estimates: dict) -> int:
    """How many levels' intervals lie wholly above zero (one-sided paired t, p < 0.05)."""
    return sum(e.low > 0 for e in estimates.values())


def deciding_level(estimates: dict) -> tuple[str, Estimate]:
    """For "> 0 on at least 2 of 3 levels": the level with the second-highest lower end. Its
    interval lies above 0 iff at least two do; if it lies at or below 0 at most one can pass."""
    key = sorted(estimates, key=lambda k: estimates[k].low, reverse=True)[1]
    return key, estimates[key]


def _pairs_fraction(acc_runs: list, sce_runs: list, idx: np.ndarray) -> float:
    """Among pairs of distinct runs (by index in ``idx``) whose final SCE is within 2% (relative),
    the fraction whose probe accuracies differ by more than 2 points, pooled over levels (0 when no
    pair is that close: a conservative value for the "at least 25%" criterion)."""
    close = apart = 0
    for acc, sce in zip(acc_runs, sce_runs):
        a, s = acc[idx], sce[idx]
        for i, j in itertools.combinations(range(len(idx)), 2):
            if idx[i] == idx[j]:
                continue
            if abs(s[i] - s[j]) / (0.5 * (s[i] + s[j])) < SCE_CLOSE:
                close += 1
                apart += abs(a[i] - a[j]) > ACC_APART
    return apart / close if close else 0.0


def noise_floor_fraction(correct_runs: list, sce_runs: list) -> float:
    r"""The fraction :func:`_pairs_fraction` would give from test-sampling noise alone: for each
    pair of runs whose final SCE is within 2% (relative), with ``D`` test nodes on which exactly
    one of the two is right, the chance under the null (each such node's sign a fair coin: both
    runs equally good) that their accuracies differ by more than 2 points,
    :math:`P(|2B - D| > 0.02\, n_{\rm test})`, :math:`B \sim \mathrm{Bin}(D, 1/2)`; averaged
    over the close pairs, pooled over levels (0 when no pair is close)."""
    from scipy.stats import binom

    probs = []
    for corr, sce in zip(correct_runs, sce_runs):
        n_test = corr.shape[1]
        for i, j in itertools.combinations(range(len(sce)), 2):
            if abs(sce[i] - sce[j]) / (0.5 * (sce[i] + sce[j])) >= SCE_CLOSE:
                continue
            D = int(np.sum(corr[i] != corr[j]))
            b = np.arange(D + 1)
            probs.append(float(binom.pmf(b, D, 0.5)[np.abs(2 * b - D) > ACC_APART * n_test].sum()))
    return float(np.mean(probs)) if probs else 0.0


def measurements(res: Result) -> dict:
    """Every estimate the ledger decides on (see the chapter's Verification section)."""
    c = res.config
    levels = c.dataset_names()[:3]
    out = {}
    head = {k: _diff(res, k, "c2", "graphmae") for k in levels}
    out["headline_levels"], (out["headline_key"], out["headline"]) = head, deciding_level(head)
    beyond = {k: _diff(res, k, "c2", "graphmae_pe") for k in levels}
    out["beyond_pe_levels"], (out["beyond_pe_key"], out["beyond_pe"]) = beyond, deciding_level(beyond)
    out["null_levels"] = {k: _diff(res, k, "graphmae_b", "graphmae") for k in levels}
    out["null_passing"] = levels_passing(out["null_levels"])
    out["random_levels"] = {k: _diff(res, k, "graphmae", "random_init") for k in levels}
    out["random_passing"] = levels_passing(out["random_levels"])
    out["pe_only_levels"] = {k: _diff(res, k, "c2", "pe_only") for k in levels}
    out["pe_only_passing"] = levels_passing(out["pe_only_levels"])
    gm = {k: mean_interval(res.accuracy[k]["graphmae"], level=0.95, unit="training seeds") for k in levels}
    out["headline_half_width"] = float(out["headline"].high - out["headline"].point)
    lo_level = levels[0]
    out["feature_floor"] = mean_interval(res.accuracy[lo_level]["graphmae"] - res.info[lo_level]["feature_probe"], level=LEVEL_CI,
                                         unit="training seeds")
    out["headroom_key"] = max(gm, key=lambda k: gm[k].point)
    out["headroom"] = gm[out["headroom_key"]]
    out["digits"] = _diff(res, DIGITS, "c2", "graphmae")
    lo, hi = levels[0], levels[-1]
    A = res.accuracy

    def trend(a, b):
        d = (A[lo][a] - A[lo][b]) - (A[hi][a] - A[hi][b])
        return mean_interval(d, level=LEVEL_CI, unit="training seeds")

    out["gain_trend"] = trend("c2", "graphmae")
    out["hea_trend"] = trend("c2", "c2_no_hea")
    out["null_trend"] = trend("graphmae_b", "graphmae")
    Q = res.quartile_accuracy

    def quartile_contrast(a, b):
        d = np.mean([(Q[k][a][:, 0] - Q[k][b][:, 0]) - (Q[k][a][:, 3] - Q[k][b][:, 3]) for k in levels], 0)
        return mean_interval(d, level=LEVEL_CI, unit="training seeds")

    out["dpm_quartile"] = quartile_contrast("c2", "c2_no_dpm")
    out["null_quartile"] = quartile_contrast("graphmae_b", "graphmae")
    out["dpm_gain_by_quartile"] = np.mean([Q[k]["c2"] - Q[k]["c2_no_dpm"] for k in levels], 0)   # (S, 4)
    J = res.js
    out["js_drop"] = mean_interval(np.mean([J[k]["c2"] - J[k]["graphmae"] for k in levels], 0), level=LEVEL_CI, unit="training seeds")
    out["null_js"] = mean_interval(np.mean([J[k]["graphmae_b"] - J[k]["graphmae"] for k in levels], 0), level=LEVEL_CI, unit="training seeds")
    # motivating observation: 2S GraphMAE runs per level (graphmae and graphmae_b), one graph per level
    acc_runs = [np.concatenate([A[k]["graphmae"], A[k]["graphmae_b"]]) for k in levels]
    sce_runs = [np.concatenate([res.sce[k]["graphmae"], res.sce[k]["graphmae_b"]]) for k in levels]
    js_runs = [np.concatenate([J[k]["graphmae"], J[k]["graphmae_b"]]) for k in levels]
    R = len(acc_runs[0])
    idx = np.arange(R)
    out["similar_sce_fraction"] = bootstrap_interval(idx, lambda i: _pairs_fraction(acc_runs, sce_runs, np.sort(i).astype(int)),
                                                     level=0.95, unit="GraphMAE runs", rng=np.random.default_rng([c.seed, 16]),
                                                     resamples=500)
    corr_runs = [np.concatenate([res.correct[k]["graphmae"], res.correct[k]["graphmae_b"]]) for k in levels]
    out["similar_sce_noise_floor"] = noise_floor_fraction(corr_runs, sce_runs)
    out["similar_sce_pairs"] = sum(int(abs(s[i] - s[j]) / (0.5 * (s[i] + s[j])) < SCE_CLOSE)
                                   for s in sce_runs for i, j in itertools.combinations(range(R), 2))
    gaps_acc = [np.abs(a[:, None] - a[None, :]) for a in acc_runs]
    gaps_js = [np.abs(j[:, None] - j[None, :]) for j in js_runs]
    out["gap_rho"], out["gap_p"] = mantel_spearman(gaps_acc, gaps_js, rng=np.random.default_rng([c.seed, 17]), permutations=2000)
    if c.variants:
        out["variants"] = {}
        for v in VARIANTS:
            lv = {k: _diff(res, k, v, "graphmae") for k in levels}
            key, est = deciding_level(lv)
            vs_c2 = mean_interval(np.mean([A[k][v] - A[k]["c2"] for k in levels], 0), level=LEVEL_CI, unit="training seeds")
            out["variants"][v] = {"levels": lv, "key": key, "headline": est, "passing": levels_passing(lv), "vs_c2": vs_c2}
        out["js_loss_js"] = mean_interval(np.mean([J[k]["c2_js"] - J[k]["c2"] for k in levels], 0), level=LEVEL_CI,
                                          unit="training seeds")
    return out


def dev_baseline(config: Config, seeds: int = 2, self_paths=(False, True)) -> dict:
    """The baseline check on dev graphs: CSBMs at the chapter's three homophily levels (``DEV_SEED``,
    ``num_nodes`` nodes), GraphMAE with and without the self path against its own random
    initialisation and the raw-feature probe, *validation* accuracy, mean over ``seeds`` training
    seeds. Returns ``{self_path: {level: {"graphmae", "random_init", "features"}}}``."""
    from dataclasses import replace

    from threadpoolctl import threadpool_limits

    out = {}
    with torch_threads(1), threadpool_limits(1):
        for sp in self_paths:
            settings = replace(config.settings(), self_path=sp)
            out[sp] = {}
            for i, h in enumerate(config.homophily_levels):
                graph = g.csbm_dc(config.num_nodes, 4, h, config.mean_degree, config.feature_dim, config.feature_noise,
                                  np.random.default_rng([DEV_SEED, 11, i]))
                split = g.split_nodes(graph.y, np.random.default_rng([DEV_SEED, 13, i]))
                gm, rnd = [], []
                for s in range(seeds):
                    seed_s = DEV_SEED * 10 + s
                    model, _ = m.train_gmae(graph.x, graph.edge_index, None, np.zeros(graph.num_nodes, int),
                                            m.ArmSpec(), settings, seed_s)
                    gm.append(g.probe_accuracy(m.embed(model, graph.x), graph.y, split, "val").mean())
                    with seeded_init(seed_s):
                        rm = m.attach(m.GraphMAE(graph.x.shape[1], 0, settings), graph.edge_index, graph.num_nodes)
                    rnd.append(g.probe_accuracy(m.embed(rm, graph.x), graph.y, split, "val").mean())
                out[sp][f"h={h:g}"] = {"graphmae": float(np.mean(gm)), "random_init": float(np.mean(rnd)),
                                       "features": g.feature_probe_accuracy(graph, split, "val")}
    return out


def select_beta_mu(config: Config, betas=(0.5, 1.0, 2.0), mus=(0.1, 1.0), seeds: int = 2, consistency: str = "cosine") -> dict:
    """Dev selection of (beta, mu): C2-full on the CSBM dev graph (h = 0.5, ``DEV_SEED``), mean
    *validation* probe accuracy over ``seeds`` training seeds; returns every cell and the best.
    The JS variant's weight is chosen the same way with ``consistency='js'``, ``betas=(1.0,)``
    (the frozen beta) and ``mus=(0.1, 1, 10, 100)``."""
    graph = dev_graphs(config, num_nodes=config.num_nodes)["csbm"]
    dev_seed = DEV_SEED
    rng = np.random.default_rng([dev_seed, 13])
    split = g.split_nodes(graph.y, rng)
    bins = g.degree_quartiles(graph.degree(), rng)
    pe, _ = g.laplacian_pe(graph.adjacency(), config.pe_dim)
    table = {}
    for beta, mu in itertools.product(betas, mus):
        arm = m.ArmSpec(use_pe=True, consistency_weight=mu, use_dpm=True, hea_beta=beta, consistency=consistency)
        accs = []
        for s in range(seeds):
            model, _ = m.train_gmae(graph.x, graph.edge_index, pe, bins, arm, config.settings(), dev_seed * 10 + s)
            accs.append(g.probe_accuracy(m.embed(model, graph.x), graph.y, split, "val").mean())
        table[(beta, mu)] = float(np.mean(accs))
    best = max(table, key=table.get)
    return {"table": table, "best": best}
