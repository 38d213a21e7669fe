"""The chapter's experiment: read-outs per trained model, and the statistics the verdicts use."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import torch

from compendium import stats
from compendium.training import torch_threads
from compendium.validation import require_int, require_number

from . import attribution as attr
from .models import select, stack_accuracy

__all__ = ["Config", "Result", "run", "evaluate_task", "implementation_checks", "accuracy_matched",
           "chain_correlations", "rank_test", "attack_sanity", "penalty_control", "headroom",
           "smoothing_power", "partial_spearman", "SMOOTH_ALPHA", "measurements", "direction", "METHODS", "CHAIN"]

METHODS = ("grad", "gxi", "smoothgrad", "ig")
BOXES = {"digits": (0.0, 1.0), "gauss256": None, "digits_cnn": (0.0, 1.0)}
THREADS = 1
SMOOTH_ALPHA = 0.5  # the power control's twin: hidden activations half-way from GELU to their linearisation
RAW_PROBES = 4      # the untempered input-Hessian norm is only reported (an exercise), not tested


@dataclass(frozen=True)
class Config:
    """Parameters of one run (names match the notebook's parameters cell)."""

    test_points: int = 100
    method_points: int = 20
    epsilons: tuple = (0.05, 0.1, 0.2)
    headline_epsilon: float = 0.1
    top_k: int = 8
    attack_steps: int = 20
    hutchinson_probes: int = 16
    power_iterations: int = 10
    curvature_points: int = 128
    accuracy_margin: float = 0.02
    ig_steps: int = 20
    smoothgrad_samples: int = 16
    smoothgrad_noise: float = 0.15
    check_points: int = 20
    attention_points: int = 100
    attention_top_k: int = 3
    seed: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilons", tuple(float(e) for e in self.epsilons))
        require_int("test_points", self.test_points, 10, 600)
        require_int("method_points", self.method_points, 5, 600)
        require_int("top_k", self.top_k, 1, 64)
        require_int("attack_steps", self.attack_steps, 1, 200)
        require_int("hutchinson_probes", self.hutchinson_probes, 2, 256)
        require_int("power_iterations", self.power_iterations, 1, 500)
        require_int("curvature_points", self.curvature_points, 16, 1000)
        require_int("ig_steps", self.ig_steps, 2, 200)
        require_int("smoothgrad_samples", self.smoothgrad_samples, 1, 200)
        require_int("check_points", self.check_points, 2, 200)
        require_int("attention_points", self.attention_points, 10, 500)
        require_int("attention_top_k", self.attention_top_k, 1, 16)
        require_number("accuracy_margin", self.accuracy_margin, 0.0, 1.0)
        require_number("smoothgrad_noise", self.smoothgrad_noise, 0.0, 1.0)
        if not self.epsilons or any(e <= 0 for e in self.epsilons):
            raise ValueError(f"epsilons must be positive, got {self.epsilons}")
        if self.headline_epsilon not in self.epsilons:
            raise ValueError(f"headline_epsilon {self.headline_epsilon} must be one of epsilons {self.epsilons}")


@dataclass
class Result:
    """Per-model read-outs (one ``pandas.DataFrame`` per task) and the implementation checks."""

    tables: dict
    checks: dict
    example: dict = field(default_factory=dict)


def _masked_mean(values: torch.Tensor, mask: torch.Tensor) -> np.ndarray:
    m = mask.float()
    return ((values * m).sum(-1) / m.sum(-1).clamp_min(1)).numpy()


def evaluate_task(task: str, blob: dict, config: Config, generator: torch.Generator, rng: np.random.Generator) -> tuple:
    """Every read-out for every model of one task: a table with one row per trained model."""
    params, data = blob["params"], blob["data"]
    table = pd.DataFrame(blob["models"])
    M = len(table)
    finite = torch.stack([torch.isfinite(p).flatten(1).all(1) for p in params]).all(0).numpy()
    table["finite"] = finite
    table["eta_over_b"] = table["eta"] / table["batch_size"]
    table["val_accuracy"] = stack_accuracy(params, data["x_val"], data["y_val"])
    table["test_accuracy"] = stack_accuracy(params, data["x_test"], data["y_test"])
    idx = rng.choice(len(data["y_test"]), size=min(config.test_points, len(data["y_test"])), replace=False)
    x1, y1 = torch.from_numpy(data["x_test"][idx]), torch.from_numpy(data["y_test"][idx])
    X, Y = x1.expand(M, *x1.shape).contiguous(), y1.expand(M, len(y1)).contiguous()
    with torch.no_grad():
        correct = (attr.stack_forward(params, X).argmax(-1) == Y) & torch.from_numpy(finite)[:, None]
    table["attacked_points"] = correct.sum(1).numpy()
    box = BOXES[task]
    # temperature (validation NLL) and the input-Hessian norm of the scaled loss
    T = attr.fit_temperature(params, data["x_val"], data["y_val"])
    table["temperature"] = T
    _, fro = attr.hutchinson(lambda v: attr.input_hvp(params, X, Y, v, torch.from_numpy(T)), X.shape,
                             config.hutchinson_probes, generator)
    table["input_hessian"] = _masked_mean(fro.mean(0).clamp_min(0).sqrt(), correct)
    _, fro1 = attr.hutchinson(lambda v: attr.input_hvp(params, X, Y, v), X.shape, RAW_PROBES, generator)
    table["input_hessian_raw"] = _masked_mean(fro1.mean(0).clamp_min(0).sqrt(), correct)
    # the models each read-out is read for: every model at the headline radius (attack sanity over
    # all plain-SGD configs, the penalty control, the references table); the accuracy-matched
    # plain-SGD models at the other radii (the per-radius correlations); the curvature for the
    # matched models and those at the references' (eta, B). Each model's read-outs depend only on
    # its own weights, so computing them on a sub-stack changes no value that is read.
    ids = set(map(tuple, accuracy_matched(table, config.accuracy_margin)[["eta", "batch_size", "seed"]].values))
    in_matched = np.array([(r.family == "sgd") and (r.eta, r.batch_size, r.seed) in ids for r in table.itertuples()])
    ref_cfg = set(map(tuple, table.loc[table["family"] != "sgd", ["eta", "batch_size"]].values))
    at_ref = np.array([(r.eta, r.batch_size) in ref_cfg for r in table.itertuples()])
    # parameter-space curvature of the training loss
    cidx = rng.choice(len(data["y_train"]), size=min(config.curvature_points, len(data["y_train"])), replace=False)
    xc, yc = torch.from_numpy(data["x_train"][cidx]), torch.from_numpy(data["y_train"][cidx])
    read = np.flatnonzero(in_matched | at_ref)
    curv = attr.parameter_curvature(select(params, read), xc.expand(len(read), *xc.shape), yc.expand(len(read), len(yc)),
                                    num_probes=config.hutchinson_probes, power_iterations=config.power_iterations,
                                    generator=generator)
    for key, col in (("top_eigenvalue", "top_eigenvalue"), ("trace", "parameter_trace")):
        values = np.full(M, np.nan)
        values[read] = curv[key]
        table[col] = values
    # the attack at every epsilon, and a same-budget random perturbation at each (every model)
    clean_map = attr.gradient_map(params, X, Y)
    attacked = {}
    for eps in config.epsilons:
        sub = np.arange(M) if eps == config.headline_epsilon or not in_matched.any() else np.flatnonzero(in_matched)
        out = attr.attribution_attack(select(params, sub), X[sub], Y[sub], k=config.top_k, eps=eps,
                                      steps=config.attack_steps, box=box)
        attacked[eps] = out
        pgd, rank = np.full(M, np.nan), np.full(M, np.nan)
        pgd[sub] = _masked_mean(out["intersection"], correct[sub])
        rank[sub] = _masked_mean(attr.rank_correlation(out["clean_map"], out["attacked_map"]), correct[sub])
        table[f"pgd_{eps:g}"], table[f"pgd_rank_{eps:g}"] = pgd, rank
        xr = X + attr.random_perturbation(X, eps, generator, box)
        with torch.no_grad():
            held = attr.stack_forward(params, xr).argmax(-1) == Y
        a_r = attr.gradient_map(params, xr, Y)
        table[f"random_{eps:g}"] = _masked_mean(attr.topk_intersection(clean_map, a_r, config.top_k), correct & held)
    # chance-normalised robustness: the attacked intersection over the random-perturbation one
    # (the chance level of a random top-k, k/d, is one constant per task: report.chance)
    for e in config.epsilons:
        table[f"pgd_over_random_{e:g}"] = table[f"pgd_{e:g}"] / table[f"random_{e:g}"]
    table["chance"] = config.top_k / X.shape[-1]
    # power control: each matched MLP against its smoother twin (same weights, activations blended
    # towards their linearisation), both attacked at the headline radius on the points both classify
    eps = config.headline_epsilon
    sub = np.flatnonzero(in_matched)
    smooth, base = np.full(M, np.nan), np.full(M, np.nan)
    if sub.size and params[0].dim() == 3:
        tw = attr.blended_attack(select(params, sub), X[sub], Y[sub], SMOOTH_ALPHA, k=config.top_k, eps=eps,
                                 steps=config.attack_steps, box=box)
        both = correct[sub] & tw["correct"]
        smooth[sub] = _masked_mean(tw["intersection"], both)
        base[sub] = _masked_mean(attacked[eps]["intersection"][sub], both)
    table[f"smooth_pgd_{eps:g}"], table[f"base_pgd_{eps:g}"] = smooth, base
    # the other attribution methods (captum), measured at the points the gradient attack found
    xa = X + attacked[eps]["delta"]
    n_m = min(config.method_points, X.shape[1])
    noise = config.smoothgrad_noise * float(data["x_train"].max() - data["x_train"].min())
    per_method = {m: np.full(M, np.nan) for m in METHODS}
    for m in range(M):              # only the models the reported statistics read: accuracy-matched plain SGD
        if not in_matched[m] or correct[m, :n_m].sum() == 0:
            continue
        keep = correct[m, :n_m]
        clean = attr.captum_maps(params, m, X[m, :n_m], Y[m, :n_m], METHODS, ig_steps=config.ig_steps,
                                 smoothgrad_samples=config.smoothgrad_samples, smoothgrad_std=noise, seed=config.seed)
        adv = attr.captum_maps(params, m, xa[m, :n_m], Y[m, :n_m], METHODS, ig_steps=config.ig_steps,
                               smoothgrad_samples=config.smoothgrad_samples, smoothgrad_std=noise, seed=config.seed + 1)
        for method in METHODS:
            per_method[method][m] = float(attr.topk_intersection(clean[method], adv[method], config.top_k)[keep].mean())
    for method in METHODS:
        table[f"method_{method}"] = per_method[method]
    # Kendall's tau of the clean and attacked gradient maps (headline radius, matched models, the
    # same first points as the captum methods): a second rank measure beside the maps' Spearman
    kendall = np.full(M, np.nan)
    sub = np.flatnonzero(in_matched)
    if sub.size:
        tau = attr.kendall_tau(attacked[eps]["clean_map"][sub, :n_m], attacked[eps]["attacked_map"][sub, :n_m])
        kendall[sub] = _masked_mean(tau.float(), correct[sub, :n_m])
    table[f"kendall_{eps:g}"] = kendall
    example = {"x": X[0, 0].numpy(), "clean": attacked[eps]["clean_map"], "attacked": attacked[eps]["attacked_map"],
               "delta": attacked[eps]["delta"], "correct": correct, "points": X.shape[1]}
    return table, example


def implementation_checks(blob: dict, config: Config, generator: torch.Generator) -> dict:
    """Our code against references: captum, finite differences, exact traces, the softmax Jacobian."""
    params, data = blob["params"], blob["data"]
    out = {}
    one = select(params, [0])
    x = torch.from_numpy(data["x_test"][: config.check_points])[None]
    y = torch.from_numpy(data["y_test"][: config.check_points])[None]
    maps = attr.captum_maps(params, 0, x[0], y[0], ("grad", "gxi", "ig"), ig_steps=config.ig_steps)
    g = attr.gradient_map(one, x, y)[0]
    ig = attr.integrated_gradients_ours(one, x, y, config.ig_steps)[0]
    n = config.ig_steps
    out["captum_gap"] = {"grad": float((maps["grad"] - g).abs().max()), "gxi": float((maps["gxi"] - x[0] * g).abs().max()),
                         "ig": float((maps["ig"] * n / (n - 1) - ig).abs().max())}
    out["ig_scale"] = float((maps["ig"].sum() / ig.sum()))
    # input Hessian-vector products against central finite differences (float64)
    p64 = [p.double() for p in one]
    x64, v = x.double(), torch.randn(x.shape, generator=generator, dtype=torch.float64)
    hv = attr.input_hvp(p64, x64, y, v)

    def grad_at(z):
        z = z.requires_grad_()
        logits = attr.stack_forward(p64, z)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1), reduction="sum")
        return torch.autograd.grad(loss, z)[0]

    h = 1e-4
    fd = (grad_at(x64 + h * v) - grad_at(x64 - h * v)) / (2 * h)
    out["hvp_rel_error"] = float(((hv - fd).norm(dim=-1) / hv.norm(dim=-1).clamp_min(1e-30)).max())
    # Hutchinson against the exact input Hessian of the same net (float64), summed over the points
    d = x.shape[-1]
    eye = torch.eye(d, dtype=torch.float64)
    H = torch.stack([attr.input_hvp(p64, x64, y, eye[i].expand_as(x64)) for i in range(d)], -1)   # (1, N, d, d)
    exact_tr, exact_fro = float(torch.diagonal(H, dim1=-2, dim2=-1).sum()), float((H ** 2).sum())
    probes = 4 * config.hutchinson_probes
    tr, fro = attr.hutchinson(lambda u: attr.input_hvp(p64, x64, y, u), x64.shape, probes, generator, torch.float64)
    tr_s, fro_s = tr.sum(-1).flatten(), fro.sum(-1).flatten()
    out["hutchinson_z"] = {
        "input_trace": float((tr_s.mean() - exact_tr) / (tr_s.std() / np.sqrt(probes))),
        "input_frobenius_sq": float((fro_s.mean() - exact_fro) / (fro_s.std() / np.sqrt(probes)))}
    # parameter Hessian of a tiny net (64 -> 6 -> 6 -> 10 on 32 points): exact trace and top eigenvalue
    tiny = [p.double() for p in attr_tiny_stack(data)]
    xt = torch.from_numpy(data["x_train"][:32]).double()[None]
    yt = torch.from_numpy(data["y_train"][:32])[None]
    sizes = [p.shape for p in tiny]
    total = sum(int(np.prod(s)) for s in sizes)
    cols = []
    for i in range(total):
        e = torch.zeros(total, dtype=torch.float64)
        e[i] = 1
        vs, start = [], 0
        for s in sizes:
            k = int(np.prod(s))
            vs.append(e[start:start + k].view(s))
            start += k
        cols.append(torch.cat([h_.flatten() for h_ in attr.parameter_hvp(tiny, xt, yt, vs)]))
    Hp = torch.stack(cols, 1)
    ev = torch.linalg.eigvalsh((Hp + Hp.T) / 2)
    g64 = torch.Generator().manual_seed(config.seed + 17)
    curv = attr.parameter_curvature(tiny, xt, yt, num_probes=probes, power_iterations=200, generator=g64)
    trs = []
    for _ in range(probes):
        r = [(torch.randint(0, 2, s, generator=g64) * 2 - 1).double() for s in sizes]
        trs.append(float(sum((a * b).sum() for a, b in zip(r, attr.parameter_hvp(tiny, xt, yt, r)))))
    trs = np.array(trs)
    out["hutchinson_z"]["parameter_trace"] = float((trs.mean() - float(torch.trace(Hp))) / (trs.std(ddof=1) / np.sqrt(probes)))
    out["top_eig_rel_error"] = float(abs(curv["top_eigenvalue"][0] - ev[-1]) / abs(ev[-1]))
    out["tiny_parameters"] = total
    # the softmax Jacobian
    out["softmax_symbolic"] = attr.softmax_jacobian_symbolic()
    out["softmax_numeric"] = attr.softmax_jacobian_numeric((2, 3, 8, 16, 32, 64), 20, np.random.default_rng(config.seed))
    return out


def attr_tiny_stack(data: dict) -> list[torch.Tensor]:
    """A tiny net (input -> 6 -> 6 -> classes) trained 300 full-batch steps, for the exact-Hessian checks."""
    from .models import train_stack

    x, y = data["x_train"][:256], data["y_train"][:256]
    params, _ = train_stack(x, y, [0.5], [123], batch_size=len(y), epochs=300, hidden=6)
    return params


def run(config: Config, asset: dict) -> Result:
    """All read-outs for every task of the asset, and the implementation checks."""
    generator = torch.Generator().manual_seed(config.seed)
    rng = np.random.default_rng([config.seed, 3])
    tables, example = {}, {}
    with torch_threads(THREADS):
        for task in ("digits", "gauss256", "digits_cnn"):
            if task in asset:                   # digits_cnn: full scale only
                tables[task], example[task] = evaluate_task(task, asset[task], config, generator, rng)
                # SGD steps taken: fixed epochs, so n_train // B steps an epoch (the eta/B confound)
                epochs = asset.get("_meta", {}).get("settings", {}).get("epochs", 1)
                tables[task]["steps"] = epochs * (len(asset[task]["data"]["y_train"]) // tables[task]["batch_size"])
        checks = implementation_checks(asset["digits"], config, generator)
    return Result(tables=tables, checks=checks, example=example)


def run_attention(config: Config, asset: dict) -> pd.DataFrame:
    """The attention part's per-model table (``attention.evaluate_attention``) at the headline radius,
    its test sequences and random perturbations drawn from the chapter seed."""
    from .attention import evaluate_attention

    return evaluate_attention(asset, test_points=config.attention_points, epsilons=[config.headline_epsilon],
                              top_k=config.attention_top_k, attack_steps=config.attack_steps,
                              generator=torch.Generator().manual_seed(config.seed + 101))


# ---------------------------------------------------------------------------- statistics of verdicts
def accuracy_matched(table: pd.DataFrame, margin: float) -> pd.DataFrame:
    """Plain-SGD models of the configs whose mean validation accuracy (over seeds) is within
    ``margin`` of the best config's."""
    sgd = table[(table["family"] == "sgd") & table["finite"]]
    by = sgd.groupby(["eta", "batch_size"])["val_accuracy"].mean()
    keep = by[by >= by.max() - margin].index
    return sgd.set_index(["eta", "batch_size"]).loc[keep].reset_index()


CHAIN = (("eta_over_b", "top_eigenvalue"), ("eta_over_b", "parameter_trace"), ("parameter_trace", "input_hessian"),
         ("eta_over_b", "input_hessian"), ("input_hessian", "pgd"), ("eta_over_b", "pgd"))


def chain_correlations(matched: pd.DataFrame, eps: float) -> dict:
    """Spearman estimates (90 % Fisher-z interval, unit trained models) and two-sided p-values for
    each link of the chain eta/B -> parameter curvature -> input curvature -> robustness."""
    out = {}
    for a, b in CHAIN:
        cols = [c if c != "pgd" else f"pgd_{eps:g}" for c in (a, b)]
        out[f"{a} ~ {b}"] = rank_test(matched[cols[0]], matched[cols[1]], "two-sided")
    return out


def attack_sanity(table: pd.DataFrame, eps: float) -> tuple[stats.Estimate, str, dict]:
    """Per plain-SGD config, random minus PGD top-k intersection paired over seeds (98 % t interval:
    its lower end above zero is the one-sided paired t test at p < 0.01). Returns the deciding
    config's estimate (lowest lower end), its name and every config's estimate."""
    sgd = table[(table["family"] == "sgd") & table["finite"]]
    per = {}
    for (eta, B), g in sgd.groupby(["eta", "batch_size"]):
        g = g.sort_values("seed")
        per[f"eta={eta:g}, B={B}"] = stats.paired_difference(g[f"random_{eps:g}"], g[f"pgd_{eps:g}"], level=0.98,
                                                             unit="trained models (paired by seed)")
    key = min(per, key=lambda k: per[k].low)
    return per[key], key, per


def penalty_control(table: pd.DataFrame, eps: float) -> tuple[stats.Estimate, float]:
    """Spearman(penalty strength, attacked intersection) over the penalty references and the
    plain-SGD models of the same (eta, B), strength 0 (one-sided p, alternative 'greater')."""
    ref = table[table["family"] == "penalty"]
    eta, B = ref["eta"].iloc[0], ref["batch_size"].iloc[0]
    base = table[(table["family"] == "sgd") & (table["eta"] == eta) & (table["batch_size"] == B)]
    both = pd.concat([base, ref])
    both = both[both["finite"]]
    return rank_test(both["penalty"], both[f"pgd_{eps:g}"], "greater")


def smoothing_power(matched: pd.DataFrame, eps: float) -> stats.Estimate:
    """Power control: attacked top-k intersection of each matched model's smoother twin
    (``SMOOTH_ALPHA``) minus the model's own, on the points both classify correctly, paired over
    the trained models (95 % t interval)."""
    sub = matched[np.isfinite(matched[f"smooth_pgd_{eps:g}"]) & np.isfinite(matched[f"base_pgd_{eps:g}"])]
    return stats.paired_difference(sub[f"smooth_pgd_{eps:g}"], sub[f"base_pgd_{eps:g}"], level=0.95,
                                   unit="trained models (model vs its smoother twin)")


def partial_spearman(x, y, z, *, level: float = 0.90, alternative: str = "greater") -> tuple[stats.Estimate, float]:
    """Partial Spearman correlation of ``x`` and ``y`` given covariates ``z`` (columns): the Pearson
    correlation of the residuals of rank(x) and rank(y) after a least-squares fit on rank(z) and a
    constant; Fisher-z interval with ``se^2 = 1.06 / (n - 3 - q)`` (``stats.spearman``'s, with q
    covariates) and the t-test p-value on ``n - 2 - q`` degrees of freedom. Undefined (void
    estimate, p = 1) under 5 + q units or a constant variable."""
    import scipy.stats

    x, y = np.asarray(x, float), np.asarray(y, float)
    z = np.asarray(z, float).reshape(len(x), -1)
    n, q = len(x), z.shape[1]
    if n < 5 + q or np.ptp(x) == 0 or np.ptp(y) == 0:
        return stats.Estimate(0.0, -1.0, 1.0, level, "trained models", n, "undefined (too few units or a constant variable)"), 1.0
    R = np.column_stack([np.ones(n)] + [scipy.stats.rankdata(c) for c in z.T])
    rx, ry = scipy.stats.rankdata(x), scipy.stats.rankdata(y)
    ex = rx - R @ np.linalg.lstsq(R, rx, rcond=None)[0]
    ey = ry - R @ np.linalg.lstsq(R, ry, rcond=None)[0]
    if np.ptp(ex) < 1e-12 or np.ptp(ey) < 1e-12:
        return stats.Estimate(0.0, -1.0, 1.0, level, "trained models", n, "undefined (a covariate determines a variable)"), 1.0
    r = float(np.clip(np.corrcoef(ex, ey)[0, 1], -1 + 1e-12, 1 - 1e-12))
    zq = scipy.stats.norm.ppf(0.5 + level / 2) * np.sqrt(1.06 / (n - 3 - q))
    est = stats.Estimate(r, float(np.tanh(np.arctanh(r) - zq)), float(np.tanh(np.arctanh(r) + zq)), level,
                         "trained models", n, f"partial Spearman rho given {q} covariate(s), Fisher-z interval (se^2 = 1.06 / (n - 3 - q))")
    df = n - 2 - q
    t = r * np.sqrt(df / (1 - r * r))
    p = {"greater": scipy.stats.t.sf(t, df), "less": scipy.stats.t.cdf(t, df), "two-sided": 2 * scipy.stats.t.sf(abs(t), df)}[alternative]
    return est, float(p)


def headroom(matched: pd.DataFrame, eps: float) -> stats.Estimate:
    """Mean attacked top-k intersection over the accuracy-matched models (t interval)."""
    return stats.mean_interval(matched[f"pgd_{eps:g}"], unit="trained models")


def rank_test(x, y, alternative: str) -> tuple[stats.Estimate, float]:
    """``stats.spearman`` over trained models; where fewer than 5 models or a constant variable make
    it undefined (one config matched), the void estimate ``0 [-1, 1]`` (inconclusive) and p = 1."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    if len(x) < 5 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return stats.Estimate(0.0, -1.0, 1.0, 0.90, "trained models", len(x), "undefined (fewer than 2 distinct values)"), 1.0
    return stats.spearman(x, y, unit="trained models", alternative=alternative)


def measurements(result: Result, config: Config) -> dict:
    """Everything the ledger and the prose read, per task: the accuracy-matched models, the
    headline and curvature correlations, the chain, the attack sanity check, the headroom."""
    eps = config.headline_epsilon
    out = {}
    for task, table in result.tables.items():
        matched = accuracy_matched(table, config.accuracy_margin)
        m = {"matched": matched, "configs": int(matched.groupby(["eta", "batch_size"]).ngroups),
             "models": int(len(matched)), "dropped_nonfinite": int((~table["finite"]).sum())}
        m["robustness"] = rank_test(matched["eta_over_b"], matched[f"pgd_{eps:g}"], "greater")
        m["input_curvature"] = rank_test(matched["eta_over_b"], matched["input_hessian"], "less")
        m["curvature_link"] = rank_test(matched["parameter_trace"], matched["input_hessian"], "greater")
        m["chain"] = chain_correlations(matched, eps)
        m["by_epsilon"] = {e: rank_test(matched["eta_over_b"], matched[f"pgd_{e:g}"], "greater") for e in config.epsilons}
        m["by_method"] = {}
        for method in METHODS:
            sub = matched[np.isfinite(matched[f"method_{method}"])]
            m["by_method"][method] = rank_test(sub["eta_over_b"], sub[f"method_{method}"], "greater")
        m["by_rank_measure"] = {
            "Spearman of the maps": rank_test(matched["eta_over_b"], matched[f"pgd_rank_{eps:g}"], "greater"),
            "Kendall tau of the maps": rank_test(matched["eta_over_b"], matched[f"kendall_{eps:g}"], "greater")}
        m["by_normalisation"] = {
            "attacked / random intersection": rank_test(matched["eta_over_b"], matched[f"pgd_over_random_{eps:g}"], "greater"),
            "random-perturbation intersection": rank_test(matched["eta_over_b"], matched[f"random_{eps:g}"], "greater")}
        steps = np.log(matched["steps"]) if "steps" in matched else None
        m["partial"] = {
            "final training loss": partial_spearman(matched["eta_over_b"], matched[f"pgd_{eps:g}"], matched["final_loss"]),
            "log training steps": (partial_spearman(matched["eta_over_b"], matched[f"pgd_{eps:g}"], steps)
                                   if steps is not None else (stats.Estimate(0.0, -1.0, 1.0, 0.9, "trained models", 0, "undefined"), 1.0))}
        m["chance"] = float(table["chance"].iloc[0])
        m["normalised"] = stats.mean_interval(matched[f"pgd_over_random_{eps:g}"], unit="trained models")
        if np.isfinite(matched[f"smooth_pgd_{eps:g}"]).sum() >= 2:
            m["smoothing"] = smoothing_power(matched, eps)
        m["sanity"] = attack_sanity(table, eps)
        m["headroom"] = headroom(matched, eps)
        m["best_accuracy"] = float(table[table["family"] == "sgd"].groupby(["eta", "batch_size"])["test_accuracy"].mean().max())
        if (table["family"] == "penalty").any():
            m["penalty"] = penalty_control(table, eps)
        out[task] = m
    return out


def direction(estimate: stats.Estimate) -> str:
    """The sign an interval supports, for prose: 'positive', 'negative' or 'not distinguishable from zero'."""
    if estimate.low > 0:
        return "positive"
    if estimate.high < 0:
        return "negative"
    return "not distinguishable from zero"
