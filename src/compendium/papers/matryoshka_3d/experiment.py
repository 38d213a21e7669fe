"""The chapter's experiment: ``Config``, ``run`` (the evaluation cube) and the statistics of its verdicts."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import scipy.stats
import torch

from compendium.kernels import triton_available
from compendium.kernels.nested_prefix import nested_prefix_similarity, nested_prefix_similarity_naive
from compendium.losses import hard_negative_loss, info_nce
from compendium.stats import Estimate, mean_interval, tost
from compendium.validation import require_int

from . import data as D
from .model import (VARIANTS, Encoder, FactorizedEmbedding, _rng, contrastive_terms, encode, mel_ranks, mll_layers, pad_batch,
                    mrl_dims, mrl_weights, rank_probabilities, recall_at_1, sample_rank, task_for, variant)

__all__ = ["Config", "Result", "run", "cube_recall", "svd_init_gap", "rank_frequency_test", "monotonicity_violations",
           "paired_gain", "equivalence", "measurements", "PAPER_WEIGHTS_1024", "HEADLINE_EFFECTS", "EQUIVALENCE_MARGIN"]

# The criteria fixed by the issue before any run (R@1 as a fraction).
HEADLINE_EFFECTS = {"mrl": 0.15, "mll": 0.20, "mel": 0.10}
EQUIVALENCE_MARGIN = 0.02
MONOTONE_TOLERANCE = 0.01
PAPER_WEIGHTS_1024 = (1.0, 0.354, 0.167, 0.088, 0.050, 0.029, 0.018, 0.011)   # the card's d = 1024 weights


@dataclass(frozen=True)
class Config:
    """Every knob of the chapter (the registry's parameters) plus ``seed``."""

    seed: int = 0
    eval_docs: int = 400
    rank_draws: int = 10000
    kernel_rows: int = 64

    def __post_init__(self):
        require_int("seed", self.seed, 0, 2**31 - 1)
        require_int("eval_docs", self.eval_docs, 20, 20000)
        require_int("rank_draws", self.rank_draws, 100, 1_000_000)
        require_int("kernel_rows", self.kernel_rows, 2, 4096)


# ------------------------------------------------------------------------------------ checks
def svd_init_gap(weight: torch.Tensor, rank: int) -> dict:
    """Eckart-Young: ``|E - U'W|_F`` of the SVD factorisation against ``sqrt(sum_{i > r} s_i^2)`` (float64)."""
    E = weight.detach().double()
    emb = FactorizedEmbedding.from_svd(E, rank)
    error = float(torch.linalg.norm(E - emb.matrix().detach()))
    s = torch.linalg.svdvals(E)
    bound = float(s[rank:].pow(2).sum().sqrt())
    return {"error": error, "bound": bound, "relative_gap": abs(error - bound) / bound}


def rank_frequency_test(ranks, draws: int, rng: np.random.Generator) -> dict:
    """``draws`` calls of :func:`sample_rank`; chi-square goodness of fit against ``p(r) = r / sum``."""
    seen = np.array([sample_rank(ranks, rng) for _ in range(draws)])
    counts = np.array([(seen == r).sum() for r in ranks])
    expected = draws * rank_probabilities(ranks)
    test = scipy.stats.chisquare(counts, expected)
    return {"counts": counts.tolist(), "expected": expected.round(1).tolist(), "p_value": float(test.pvalue)}


def cube_recall(model: Encoder, evalset: D.RetrievalSet, exits, dims, ranks) -> dict:
    """R@1 over ``ranks x exits x dims``: ``{"recall": (R, E, M), "hits": (R, E, M, n) booleans}``.

    ``ranks`` is ``[None]`` for a model without a factorised embedding. One forward pass per rank
    gives every exit; one nested-prefix pass per exit gives every width.
    """
    hits = []
    for rank in ranks:
        q = encode(model, evalset.query_ids, evalset.query_lengths, exits, rank=rank)
        d = encode(model, evalset.doc_ids, evalset.doc_lengths, exits, rank=rank)
        hits.append(torch.stack([recall_at_1(nested_prefix_similarity(q[e], d[e], dims)) for e in exits]))
    hits = torch.stack(hits).numpy()                       # (R, E, M, n)
    return {"recall": hits.mean(-1), "hits": hits}


def monotonicity_violations(cube: np.ndarray, ranks, exits, dims, tolerance: float = MONOTONE_TOLERANCE) -> list:
    """Every drop larger than ``tolerance`` between neighbours along an axis of ``cube (R, E, M)``."""
    out = []
    names = (("rank", ranks), ("layer", exits), ("dim", dims))
    for axis, (name, values) in enumerate(names):
        diffs = np.diff(cube, axis=axis)
        for idx in zip(*np.nonzero(diffs < -tolerance)):
            where = {n: v[i] for (n, v), i in zip(names, idx)}
            where[name] = f"{values[idx[axis]]}->{values[idx[axis] + 1]}"
            out.append({"axis": name, "at": where, "drop": float(-diffs[idx])})
    return out


def paired_gain(a, b) -> Estimate:
    """``mean(a - b)`` over training seeds with a 95 % t interval (``a[k]``, ``b[k]`` share seed k's batches)."""
    return mean_interval(np.asarray(a) - np.asarray(b), unit="training seeds (paired)")


def equivalence(a, b, margin: float = EQUIVALENCE_MARGIN):
    """TOST that ``mean(a - b)`` lies within ``+-margin`` (paired by seed): the 90 % interval decides."""
    return tost(np.asarray(a) - np.asarray(b), margin=margin, unit="training seeds (paired)")


# ------------------------------------------------------------------------------------ run
@dataclass
class Result:
    """Everything the notebook shows."""

    config: Config
    exits: list
    dims: list
    ranks: list
    cubes: dict = field(default_factory=dict)          # variant -> (K, R, E, M) R@1 (R = 1 unless factorised)
    per_language: dict = field(default_factory=dict)   # variant -> (K, num_languages) full-size R@1
    languages: np.ndarray | None = None
    high_resource: int = 0
    svd: list = field(default_factory=list)
    weights_1024: list = field(default_factory=list)
    weights_d: list = field(default_factory=list)
    embedding_parameters: dict = field(default_factory=dict)
    one_dim_gap: float = float("nan")
    kernel_gap: float = float("nan")
    kernel_backend: str = ""
    rank_test: dict = field(default_factory=dict)
    stage0_dev: float = float("nan")
    sentence_transformers: dict = field(default_factory=dict)


def run(config: Config, models: dict, stage0: Encoder, settings, meta: dict, device: str = "cpu") -> Result:
    """Evaluate every trained model on the cube and run the implementation checks."""
    enc = settings.encoder
    task = task_for(settings, meta["seed"])
    rng = _rng(config.seed, 42)
    evalset = D.make_retrieval_set(task, config.eval_docs, rng)
    exits, dims, ranks = mll_layers(enc.num_layers), mrl_dims(enc.hidden_size), mel_ranks(enc.rank)
    res = Result(config=config, exits=exits, dims=dims, ranks=ranks, languages=evalset.doc_languages,
                 high_resource=task.spec.high_resource)
    L, M = len(exits) - 1, len(dims) - 1
    with torch.no_grad():
        for name in VARIANTS:
            spec = variant(name, enc)
            cubes, langs = [], []
            for model in models[name]:
                out = cube_recall(model, evalset, exits, dims, ranks if spec.factorized else [None])
                cubes.append(out["recall"])
                full = out["hits"][-1, L, M]                                 # full rank, last layer, full dim
                langs.append([full[evalset.doc_languages == g].mean() if (evalset.doc_languages == g).any() else np.nan
                              for g in range(task.spec.num_languages)])
            res.cubes[name] = np.stack(cubes)
            res.per_language[name] = np.array(langs)
            res.embedding_parameters[name] = models[name][0].embedding_parameters()

        # implementation checks
        res.svd = [svd_init_gap(stage0.backbone.embed_tokens.weight, enc.rank)]
        res.weights_1024 = mrl_weights(sorted(mrl_dims(1024), reverse=True), 1024)
        res.weights_d = mrl_weights(dims, enc.hidden_size)
        pool = D.TrainingPool.make(task, 40, 10, _rng(config.seed, 43))
        batch = pool.batch(8, _rng(config.seed, 44))
        (qi, ql), (pi, pl), (ni, nl) = batch["q"], batch["p"], batch["n"]
        plain = models["plain"][0]
        q = plain(*pad_batch(qi, ql))[enc.num_layers]
        p = plain(*pad_batch(pi, pl))[enc.num_layers]
        n = plain(*pad_batch(ni, nl))[enc.num_layers].reshape(len(ql), -1, enc.hidden_size)
        q, p, n = q.double(), p.double(), n.double()                 # float64: the identity, not float32 rounding
        ours = contrastive_terms(q, p, n, [enc.hidden_size])[0]
        direct = info_nce(q, p, temperature=0.05) + hard_negative_loss(q, p, n, temperature=0.05)
        res.one_dim_gap = float((ours - direct).abs())
        res.stage0_dev = float(meta["stage0"]["dev_recall"])

        # kernel against the per-width loop, on the evaluation embeddings of the 3D-ML model
        k = config.kernel_rows
        qe = encode(models["ml3d"][0], evalset.query_ids[:k], evalset.query_lengths[:k], [enc.num_layers])[enc.num_layers]
        de = encode(models["ml3d"][0], evalset.doc_ids, evalset.doc_lengths, [enc.num_layers])[enc.num_layers]
        qe, de = qe.to(device), de.to(device)
        fast = nested_prefix_similarity(qe, de, dims)
        res.kernel_backend = "triton" if qe.is_cuda and triton_available() else "reference"
        res.kernel_gap = float((fast.double().cpu() - nested_prefix_similarity_naive(qe.double(), de.double(), dims).cpu()).abs().max())
    res.rank_test = rank_frequency_test(ranks, config.rank_draws, _rng(config.seed, 45))
    try:
        from .st_reference import compare

        out = compare(models["mrl"][0], batch, dims, res.weights_d)
        res.sentence_transformers = {"ok": True, **{k: list(v) if isinstance(v, tuple) else v for k, v in out.items()}}
    except Exception as exc:  # noqa: BLE001 - the chapter reports why the comparison could not run
        res.sentence_transformers = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    return res


# ------------------------------------------------------------------------------------ measurements
def measurements(res: Result) -> dict:
    """Every number a verdict depends on (R@1 as fractions; gains in R@1 points / 100)."""
    c = res.cubes
    L, M = len(res.exits) - 1, len(res.dims) - 1
    e2 = res.exits.index(2) if 2 in res.exits else 0
    m8 = res.dims.index(8) if 8 in res.dims else 0
    r4 = res.ranks.index(res.ranks[-1] // 4) if res.ranks[-1] // 4 in res.ranks else 0
    full = {name: cube[:, -1, L, M] for name, cube in c.items()}      # (K,) full rank, last layer, full dim
    pairs = {"mrl": (c["mrl"][:, 0, L, m8], c["plain"][:, 0, L, m8]),     # width 8, last layer
             "mll": (c["mll"][:, 0, e2, M], c["plain"][:, 0, e2, M]),     # exit layer 2, full width
             "mel": (c["mel"][:, r4, L, M], c["fixed_rank"][:, r4, L, M])}  # rank r/4, full width, last layer
    comparator = {"mrl": "plain", "mll": "plain", "mel": "fixed_rank"}
    out = {"plain_full": mean_interval(full["plain"], unit="training seeds")}
    for key, (a, b) in pairs.items():
        out[f"{key}_gain"] = paired_gain(a, b)
        out[f"{key}_per_seed"] = a - b
        out[f"{key}_each_agrees"] = bool(np.all(a - b >= HEADLINE_EFFECTS[key]))
        out[f"{key}_full"] = equivalence(full[key], full[comparator[key]])
    mean_cube = c["ml3d"].mean(0)                                          # (R, E, M) over training seeds
    out["violations"] = monotonicity_violations(mean_cube, res.ranks, res.exits, res.dims)
    diffs = [np.diff(mean_cube, axis=a) for a in range(3)]
    out["largest_drop"] = float(max(0.0, max(float(-d.min()) for d in diffs)))
    langs = np.nanmean(res.per_language["plain"], 0)
    h = res.high_resource
    out["language_gap"] = float(langs[:h].mean() - langs[h:].mean())
    out["per_language_plain"] = langs
    return out
