"""The chapter's experiment: ``Config``, ``run`` (every arm on every target, batched) and the
statistics its verdicts depend on (``measurements``)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

from compendium.stats import clopper_pearson, mean_interval, paired_difference, tost
from compendium.training import TrainSpec, fit, learning_rate_at, seeded_init
from compendium.validation import require_int, require_number

from .lora import (MODULES, ParameterBank, accuracy_and_loss, activate, average_merge, dense_cosine, init_lora,
                   load_pool_tensors, lora_cosine, lora_cosines, lora_delta, lorahub_search, merged_delta,
                   mlp_forward, peft_forward, peft_merge_delta, peft_pool, random_like_lora, sample_task,
                   ties_hand_example, ties_merge, unit)

__all__ = ["Config", "Result", "run", "measurements", "train_merge", "train_lora", "dev_choice", "REGIMES",
           "ARMS", "EQUIVALENCE_MARGIN", "LIMITED_BENEFIT_MARGIN", "TRANSFER_MARGIN", "BEATS_BASE_SHARE",
           "NEAR_DUPLICATE_SHARE", "BASE_ACCURACY_MAX", "LORA_ACCURACY_MIN", "LORAHUB_BOUNDS",
           "LORAHUB_SIGMA0"]

REGIMES = ("R1", "R2", "R3")
ARMS = ("base", "target_lora", "target_lora_r4", "target_lora_r1", "ours", "ours_random_pool",
        "ours_random_selection", "ours_closeness_selection", "adamerging", "lorahub", "average", "ties")
# criteria fixed by the issue before any run (points of accuracy as fractions)
EQUIVALENCE_MARGIN = 0.015       # headline TOST margin and the selection comparison
LIMITED_BENEFIT_MARGIN = 0.02    # Ours - target LoRA at most +2 points
TRANSFER_MARGIN = 0.03           # R3: Ours(real) - Ours(random) at least +3 points
BEATS_BASE_SHARE = 0.8           # Ours > base on at least 80 % of targets
NEAR_DUPLICATE_SHARE = 0.7       # R3: the near-duplicate's coefficient is the largest in >= 70 % of modules
LORAHUB_BOUNDS = (-1.5, 1.5)     # LoraHub's coefficient bounds
LORAHUB_SIGMA0 = 0.5             # CMA-ES initial step size (a third of the half-width of the bounds)
BASE_ACCURACY_MAX = 0.60         # target guards (on a check set, never the test set)
LORA_ACCURACY_MIN = 0.85


@dataclass(frozen=True)
class Config:
    """Every knob of the chapter (the registry's parameters) plus ``seed``."""

    seed: int = 0
    num_targets: int = 8
    candidates_per_regime: int = 12
    num_seeds: int = 1
    num_selected: int = 10
    train_examples: int = 80
    dev_examples: int = 20
    test_examples: int = 2000
    check_examples: int = 1000
    merge_steps: int = 100
    merge_learning_rate: float = 0.05
    lora_steps: int = 400
    lora_learning_rate: float = 3e-4
    lora_rank: int = 4
    matched_rank: int = 1
    lora_alpha: float = 16.0
    warmup_fraction: float = 0.1
    learning_rate_factors: tuple = (1.0, 3.0, 10.0)
    ties_density: float = 0.4
    near_duplicate_cosine: float = 0.95
    lorahub_budget: int = 100
    lorahub_l1: float = 0.05

    def __post_init__(self):
        object.__setattr__(self, "learning_rate_factors", tuple(float(f) for f in self.learning_rate_factors))
        require_int("seed", self.seed, 0, 2**31 - 1)
        require_int("num_targets", self.num_targets, 2, 100)
        require_int("candidates_per_regime", self.candidates_per_regime, self.num_targets, 400)
        require_int("num_seeds", self.num_seeds, 1, 10)
        require_int("num_selected", self.num_selected, 2, 30)
        for name, low, high in (("train_examples", 8, 10000), ("dev_examples", 4, 10000), ("test_examples", 100, 100000),
                                ("check_examples", 100, 100000), ("merge_steps", 1, 10000), ("lora_steps", 1, 10000)):
            require_int(name, getattr(self, name), low, high)
        require_int("lora_rank", self.lora_rank, 1, 32)
        require_int("matched_rank", self.matched_rank, 1, self.lora_rank)
        require_number("merge_learning_rate", self.merge_learning_rate, 0.0, 10.0, low_open=True)
        require_number("lora_learning_rate", self.lora_learning_rate, 0.0, 1.0, low_open=True)
        require_number("lora_alpha", self.lora_alpha, 0.0, 1024.0, low_open=True)
        require_number("warmup_fraction", self.warmup_fraction, 0.0, 0.5)
        require_number("ties_density", self.ties_density, 0.0, 1.0, low_open=True)
        require_number("near_duplicate_cosine", self.near_duplicate_cosine, 0.9, 1.0)
        require_int("lorahub_budget", self.lorahub_budget, 2, 100000)
        require_number("lorahub_l1", self.lorahub_l1, 0.0, 10.0)
        if not self.learning_rate_factors or any(f <= 0 for f in self.learning_rate_factors):
            raise ValueError(f"learning_rate_factors must be positive numbers, got {self.learning_rate_factors}")


# ------------------------------------------------------------------------------ batched trainings
def _schedule(steps: int, warmup: int, schedule: str):
    spec = TrainSpec(max_steps=steps, learning_rate=1.0, warmup_steps=warmup, schedule=schedule)
    return lambda k: learning_rate_at(spec, min(k, steps - 1))


def _fit_grid(tensors, lrs, loss_fn, steps, warmup=0, schedule="constant"):
    """AdamW (no weight decay) with one parameter group per learning rate, through ``fit``."""
    bank = ParameterBank(tensors)
    opt = torch.optim.AdamW([{"params": [p], "lr": lr} for p, lr in zip(bank.items, lrs)], weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, _schedule(steps, warmup, schedule))
    log = fit(bank, lambda step: loss_fn(bank), TrainSpec(max_steps=steps, learning_rate=max(lrs), weight_decay=0.0,
                                                         threads=1, log_every=steps), optimizer=opt, scheduler=sched)
    return [p.detach() for p in bank.items], log


def _bce(logits, y):
    return F.binary_cross_entropy_with_logits(logits, y.expand_as(logits), reduction="none").mean(-1).sum()


def train_merge(weights, components: dict, activation: str, init: float, x, y, lrs, steps):
    """Train merging coefficients ``c (P, L, M, K)`` (one per module and LoRA) for every problem and
    learning rate, LoRAs frozen: ``components[m] (P, K, out, in)``, ``x (P, n, d)``, ``y (P, n)``."""
    P, K = next(iter(components.values())).shape[:2]
    start = [torch.full((P, len(MODULES), K), float(init)) for _ in lrs]

    def deltas(c):                                                   # c (P, L, M, K)
        return {m: merged_delta(c[:, :, i], components[m], activation) for i, m in enumerate(MODULES)}

    def loss(bank):
        return _bce(mlp_forward(weights, x[:, None], deltas(torch.stack(list(bank.items), 1))), y[:, None])

    params, _ = _fit_grid(start, lrs, loss, steps)
    c = torch.stack(params, 1)
    return c, deltas(c)


def train_lora(weights, x, y, ranks, alpha: float, lrs, steps: int, warmup: int, generator, return_factors: bool = False):
    """Fresh LoRAs on every module for every problem and learning rate, peft's start (A uniform, B 0),
    cosine schedule with warm-up. ``ranks (P,)`` are padded to their maximum (padding stays zero).
    Returns ``{m: ΔW (P, L, out, in)}``, and with ``return_factors`` also ``{m: (A (P, L, r, in),
    B (P, L, out, r), s (P, 1))}``."""
    P, r_max = len(ranks), int(max(ranks))
    live = (torch.arange(r_max) < torch.as_tensor(ranks)[:, None]).float()      # (P, r_max)
    scale = torch.as_tensor(alpha / np.asarray(ranks, float), dtype=torch.float32)
    tensors, shapes = [], []
    for _ in lrs:
        for m in MODULES:
            W = weights[m][0]
            A, B = init_lora((P, r_max, W.shape[1]), (P, W.shape[0], r_max), generator)
            tensors += [A * live[:, :, None], B]
    nm = 2 * len(MODULES)

    def stacked(items, j):                                           # -> (P, L, ...)
        return torch.stack([items[l * nm + j] for l in range(len(lrs))], 1)

    def factors(items):
        return {m: (stacked(items, 2 * i), stacked(items, 2 * i + 1), scale[:, None]) for i, m in enumerate(MODULES)}

    def deltas(items):                                               # -> {m: (P, L, out, in)}
        return {m: lora_delta(a, b, s) for m, (a, b, s) in factors(items).items()}

    def loss(bank):
        return _bce(mlp_forward(weights, x[:, None], factors=factors(list(bank.items))), y[:, None])

    params, _ = _fit_grid(tensors, [lr for lr in lrs for _ in range(nm)], loss, steps, warmup, "cosine")
    if return_factors:
        return deltas(params), factors(params)
    return deltas(params)


def dev_choice(acc: torch.Tensor, loss: torch.Tensor) -> torch.Tensor:
    """Per problem, the option (last axis) with the best dev accuracy, ties to the lowest dev loss,
    then to the first option."""
    score = acc - 1e-6 * loss
    return score.argmax(-1)


def _pick(deltas: dict, choice: torch.Tensor) -> dict:
    idx = torch.arange(len(choice))
    return {m: d[idx, choice] for m, d in deltas.items()}


# ------------------------------------------------------------------------------ the experiment
@dataclass
class Result:
    """Per candidate target ``(T,)`` arrays (means over seeds), guards, coefficients, implementation gaps."""

    config: Config
    regime: np.ndarray = None             # (T,) regime label of each candidate target
    kept: np.ndarray = None               # (T,) passes the guards and is among the first num_targets
    accuracy: dict = field(default_factory=dict)      # arm -> (T,) test accuracy, mean over seeds
    base_check: np.ndarray = None
    lora_check: np.ndarray = None
    near_duplicate: np.ndarray = None     # (T,) pool index of the near-duplicate (-1 outside R3)
    duplicate_selected: np.ndarray = None  # (T,) share of seeds whose evaluation selection holds it
    duplicate_selected_closeness: np.ndarray = None  # (T,) the same for the closeness selection
    lorahub_moved: np.ndarray = None      # (T,) share of seeds whose LoraHub search ended below its start
    lorahub_evaluations: int = 0          # objective evaluations per LoraHub search (start included)
    duplicate_largest: np.ndarray = None  # (T,) share of (seed, module) where its coefficient is the largest
    duplicate_largest_contribution: np.ndarray = None  # (T,) the same for its contribution's norm
    coefficients: dict = field(default_factory=dict)  # target index -> (M, K) act(c) of seed 0, and positions
    chosen_factor: dict = field(default_factory=dict)  # arm -> (P,) chosen learning-rate factor
    trainable: dict = field(default_factory=dict)
    gaps: dict = field(default_factory=dict)          # implementation checks


def _targets(cfg: Config, asset: dict, rng: np.random.Generator):
    basis, teachers = asset["basis"], asset["teachers"]
    span, half, N = basis.shape[0], basis.shape[0] // 2, len(teachers)
    clean = np.flatnonzero(asset["kind"] != "undertrained")
    U, regime, masks, dup = [], [], [], []
    for name in REGIMES:
        for _ in range(cfg.candidates_per_regime):
            coeff = rng.normal(size=span)
            j = -1
            if name == "R1":                    # teacher in H_b, pool restricted to the H_a LoRAs
                coeff[:half] = 0.0
                u, mask = unit(coeff @ basis), asset["group"] == "a"
            elif name == "R2":                  # teacher anywhere in the span, the whole pool
                u, mask = unit(coeff @ basis), np.ones(N, bool)
            else:                               # a near-duplicate of one fully trained pool task
                j = int(rng.choice(clean))
                v = coeff @ basis
                v = unit(v - (v @ teachers[j]) * teachers[j])
                cos = cfg.near_duplicate_cosine
                u, mask = unit(cos * teachers[j] + np.sqrt(1 - cos ** 2) * v), np.ones(N, bool)
            U.append(u)
            regime.append(name)
            masks.append(mask)
            dup.append(j)
    return np.array(U), np.array(regime), np.array(masks), np.array(dup)


@dataclass
class _Problems:
    """What every stage of ``run`` shares: the base weights, the pool, the problems' data (problem
    ``p`` = target ``p // S``, seed ``p % S``), the two random streams and the learning-rate grids."""

    cfg: Config
    asset: dict
    rng: np.random.Generator
    gen: torch.Generator
    W: dict
    A: dict
    B: dict
    scales: torch.Tensor
    D: dict                                   # pool ΔW per module (N, out, in)
    T: int
    S: int
    K: int
    P: int
    pmask: np.ndarray                         # (P, N) the regime's candidate pool
    pdup: np.ndarray                          # (P,) the near-duplicate's pool index (-1 outside R3)
    data: dict                                # split -> (x (P, n, d), y (P, n))
    lrs_merge: list
    lrs_lora: list

    def test_acc(self, deltas=None, split="test"):
        x, y = self.data[split]
        with torch.no_grad():
            return accuracy_and_loss(mlp_forward(self.W, x, deltas), y)[0].numpy()

    def dev_eval(self, deltas):               # deltas (P, L, out, in) -> acc, loss (P, L)
        x, y = self.data["dev"]
        with torch.no_grad():
            return accuracy_and_loss(mlp_forward(self.W, x[:, None], deltas), y[:, None])

    def factors(self, choice):
        return np.asarray(self.cfg.learning_rate_factors)[choice.numpy()]


def _setup(cfg: Config, asset: dict, res: Result) -> _Problems:
    rng = np.random.default_rng([cfg.seed, 27])
    gen = torch.Generator().manual_seed(cfg.seed * 7919 + 27)
    N, K, S = len(asset["teachers"]), cfg.num_selected, cfg.num_seeds
    U, regime, masks, dup = _targets(cfg, asset, rng)
    if K > masks.sum(1).min():
        raise ValueError(f"num_selected {K} exceeds the smallest candidate pool ({masks.sum(1).min()} LoRAs)")
    T = len(U)
    teach = np.repeat(U, S, 0)
    data = {split: sample_task(teach, n, rng) for split, n in (("train", cfg.train_examples), ("dev", cfg.dev_examples),
                                                                 ("test", cfg.test_examples), ("check", cfg.check_examples))}
    res.regime, res.near_duplicate = regime, dup
    D = {m: lora_delta(asset["A"][m], asset["B"][m], asset["scales"]) for m in MODULES}
    return _Problems(cfg=cfg, asset=asset, rng=rng, gen=gen, W=asset["weights"], A=asset["A"], B=asset["B"],
                     scales=asset["scales"], D=D, T=T, S=S, K=K, P=T * S, pmask=np.repeat(masks, S, 0),
                     pdup=np.repeat(dup, S), data=data,
                     lrs_merge=[cfg.merge_learning_rate * f for f in cfg.learning_rate_factors],
                     lrs_lora=[cfg.lora_learning_rate * f for f in cfg.learning_rate_factors])


def _select(pr: _Problems):
    """Evaluation selection (each pool LoRA alone, scored on the 80 training examples; top K),
    random selection, and the std-matched random replacements of the evaluation-selected LoRAs.
    Returns ``sel_eval (P, K)``, ``sel_rand (P, K)`` and ``comp[m] (3P, K, out, in)`` (real, random
    pool, random selection)."""
    xtr, ytr = pr.data["train"]
    score = torch.empty(pr.P, len(pr.scales))
    with torch.no_grad():
        for lo in range(0, pr.P, 32):
            a, l_ = accuracy_and_loss(mlp_forward(pr.W, xtr[lo:lo + 32, None], {m: pr.D[m][None] for m in MODULES}),
                                      ytr[lo:lo + 32, None])
            score[lo:lo + 32] = a - 1e-6 * l_
    score[~torch.as_tensor(pr.pmask)] = -np.inf
    sel_eval = score.topk(pr.K, dim=1).indices
    sel_rand = torch.as_tensor(np.stack([pr.rng.choice(np.flatnonzero(mk), pr.K, replace=False) for mk in pr.pmask]))
    ranks = torch.as_tensor(pr.asset["ranks"])
    Ar, Br = {}, {}
    for m in MODULES:
        Ar[m], Br[m] = random_like_lora(pr.A[m][sel_eval], pr.B[m][sel_eval], ranks[sel_eval], pr.gen)
    comp = {m: torch.cat([pr.D[m][sel_eval], lora_delta(Ar[m], Br[m], pr.scales[sel_eval]), pr.D[m][sel_rand]])
            for m in MODULES}
    return sel_eval, sel_rand, comp


def _adaptive_merges(pr: _Problems, comp: dict, acc_p: dict, res: Result):
    """Ours (LeakyReLU, c = 0) on real / random / randomly selected LoRAs and AdaMerging (linear,
    1/sqrt K), each at its dev-picked learning rate. Returns Ours' chosen ``act(c) (P, M, K)``."""
    P, (xtr, ytr) = pr.P, pr.data["train"]
    c_ours, d_ours = train_merge(pr.W, comp, "leaky_relu", 0.0, xtr.repeat(3, 1, 1), ytr.repeat(3, 1), pr.lrs_merge,
                                 pr.cfg.merge_steps)
    c_ada, d_ada = train_merge(pr.W, {m: comp[m][:P] for m in MODULES}, "linear", 1 / np.sqrt(pr.K), xtr, ytr,
                               pr.lrs_merge, pr.cfg.merge_steps)
    for arm, k in (("ours", 0), ("ours_random_pool", 1), ("ours_random_selection", 2)):
        deltas = {m: d[k * P:(k + 1) * P] for m, d in d_ours.items()}
        choice = dev_choice(*pr.dev_eval(deltas))
        acc_p[arm] = pr.test_acc(_pick(deltas, choice))
        res.chosen_factor[arm] = pr.factors(choice)
        if arm == "ours":
            c_chosen = activate(c_ours[:P][torch.arange(P), choice], "leaky_relu")
    choice = dev_choice(*pr.dev_eval(d_ada))
    acc_p["adamerging"] = pr.test_acc(_pick(d_ada, choice))
    res.chosen_factor["adamerging"] = pr.factors(choice)
    return c_chosen


def _target_loras(pr: _Problems, acc_p: dict, res: Result):
    """Fresh target LoRAs at ranks lora_rank and matched_rank, every learning rate, batched; the
    dev picks the rank and learning rate of ``target_lora``. Returns its check-set accuracy and
    the picked LoRA's factors (for the closeness selection)."""
    cfg, P, L = pr.cfg, pr.P, len(pr.cfg.learning_rate_factors)
    xtr, ytr = pr.data["train"]
    r = np.r_[np.full(P, cfg.lora_rank), np.full(P, cfg.matched_rank)]
    d_lora, f_lora = train_lora(pr.W, xtr.repeat(2, 1, 1), ytr.repeat(2, 1), r, cfg.lora_alpha, pr.lrs_lora,
                                cfg.lora_steps, int(round(cfg.warmup_fraction * cfg.lora_steps)), pr.gen,
                                return_factors=True)

    def options(t):                      # (2P, L, ...) -> (P, 2L, ...): per problem, rank-major options
        return t.reshape(2, P, L, *t.shape[2:]).transpose(0, 1).reshape(P, 2 * L, *t.shape[2:])

    both = {m: options(d) for m, d in d_lora.items()}
    acc_dv, loss_dv = pr.dev_eval(both)
    for arm, sl in (("target_lora", slice(0, 2 * L)), ("target_lora_r4", slice(0, L)), ("target_lora_r1", slice(L, 2 * L))):
        choice = dev_choice(acc_dv[:, sl], loss_dv[:, sl]) + sl.start
        picked = _pick(both, choice)
        acc_p[arm] = pr.test_acc(picked)
        res.chosen_factor[arm] = np.asarray(cfg.learning_rate_factors * 2)[choice.numpy()]
        if arm == "target_lora":
            lora_check, target_choice = pr.test_acc(picked, "check"), choice
    idx = torch.arange(P)
    picked_f = {m: (options(a)[idx, target_choice], options(b)[idx, target_choice],
                    sc.reshape(2, P).T[idx, target_choice // L]) for m, (a, b, sc) in f_lora.items()}
    return lora_check, picked_f


def _peft_merges(pr: _Problems, sel_eval, acc_p: dict, res: Result):
    """Average and TIES of the evaluation-selected LoRAs through peft's add_weighted_adapter, each
    checked against ours. Returns the peft model (for the implementation checks)."""
    names, K, D = pr.asset["names"], pr.K, pr.D
    with seeded_init(0):                 # peft draws its (overwritten) initial A from torch's generator
        model = peft_pool(pr.asset["base"], pr.asset["ranks"], pr.asset["alphas"], names)
    load_pool_tensors(model, names, pr.A, pr.B)
    cache, gaps_avg, gaps_ties = {}, [], []
    avg_d = {m: torch.empty(pr.P, *D[m].shape[1:]) for m in MODULES}
    ties_d = {m: torch.empty(pr.P, *D[m].shape[1:]) for m in MODULES}
    for p in range(pr.P):
        key = tuple(sorted(sel_eval[p].tolist()))
        if key not in cache:
            chosen = [names[i] for i in key]
            pa = peft_merge_delta(model, chosen, [1.0 / K] * K, "cat")
            pt = peft_merge_delta(model, chosen, [1.0] * K, "ties_svd", density=pr.cfg.ties_density)
            for m in MODULES:
                gaps_avg.append(float((pa[m] - average_merge(D[m][list(key)])).abs().max()))
                gaps_ties.append(float((pt[m] - ties_merge(D[m][list(key)], pr.cfg.ties_density)).abs().max()))
            cache[key] = (pa, pt)
        for m in MODULES:
            avg_d[m][p], ties_d[m][p] = cache[key][0][m], cache[key][1][m]
    acc_p["average"], acc_p["ties"] = pr.test_acc(avg_d), pr.test_acc(ties_d)
    res.gaps["peft_average"], res.gaps["peft_ties"] = max(gaps_avg), max(gaps_ties)
    return model


def _lorahub(pr: _Problems, real: dict, acc_p: dict, res: Result):
    """LoraHub: gradient-free CMA-ES over one linear coefficient per selected LoRA (shared by the
    modules), c = 0 at the start, L1 penalty, on the same 80 training examples as every arm."""
    cfg, (xtr, ytr) = pr.cfg, pr.data["train"]

    def hub_loss(c):                                                 # (P, n, K) -> (P, n) training loss
        ct = torch.as_tensor(c, dtype=torch.float32)
        with torch.no_grad():
            logits = mlp_forward(pr.W, xtr[:, None], {m: merged_delta(ct, real[m], "linear") for m in MODULES})
            return accuracy_and_loss(logits, ytr[:, None])[1].double().numpy()

    c_hub, hub_value, hub_start, res.lorahub_evaluations = lorahub_search(
        hub_loss, pr.P, pr.K, cfg.lorahub_budget, l1=cfg.lorahub_l1, bounds=LORAHUB_BOUNDS, sigma0=LORAHUB_SIGMA0,
        seed=cfg.seed * 7919 + 271)
    ch = torch.as_tensor(c_hub, dtype=torch.float32)[:, None]
    acc_p["lorahub"] = pr.test_acc({m: merged_delta(ch, real[m], "linear")[:, 0] for m in MODULES})
    res.lorahub_moved = (hub_value < hub_start).reshape(pr.T, pr.S).mean(1)   # the search beat its start
    # bookkeeping of the lockstep search: each problem's returned c scores the value recorded for it
    res.gaps["lorahub_value"] = float(np.abs(hub_loss(c_hub[:, None])[:, 0] + cfg.lorahub_l1 * np.abs(c_hub).mean(-1)
                                             - hub_value).max())


def _closeness(pr: _Problems, picked_f: dict, acc_p: dict, res: Result):
    """Closeness selection: the K pool LoRAs whose whole update is closest (cosine, by the trace
    identity) to the dev-picked target LoRA's, then Ours on them; its cosine against the dense one."""
    pool_f = {m: (pr.A[m], pr.B[m], pr.scales) for m in MODULES}
    closeness = lora_cosines(pool_f, picked_f)                       # (P, N)
    closeness[~torch.as_tensor(pr.pmask)] = -np.inf
    sel_close = closeness.topk(pr.K, dim=1).indices
    (xtr, ytr) = pr.data["train"]
    _, d_close = train_merge(pr.W, {m: pr.D[m][sel_close] for m in MODULES}, "leaky_relu", 0.0, xtr, ytr,
                             pr.lrs_merge, pr.cfg.merge_steps)
    choice = dev_choice(*pr.dev_eval(d_close))
    acc_p["ours_closeness_selection"] = pr.test_acc(_pick(d_close, choice))
    res.chosen_factor["ours_closeness_selection"] = pr.factors(choice)
    res.duplicate_selected_closeness = (sel_close.numpy() == pr.pdup[:, None]).any(1).reshape(pr.T, pr.S).mean(1)
    # float64, first problem, every pool LoRA
    p0 = {m: tuple(t[:1].double() for t in picked_f[m]) for m in MODULES}
    dense_t = torch.cat([lora_delta(*p0[m]).flatten() for m in MODULES])
    dense_p = torch.cat([lora_delta(pr.A[m].double(), pr.B[m].double(), pr.scales.double()).flatten(1) for m in MODULES], 1)
    trace = lora_cosines({m: tuple(t.double() for t in pool_f[m]) for m in MODULES}, p0)[0]
    res.gaps["closeness_cosine"] = float(max(abs(float(trace[i]) - dense_cosine(dense_p[i], dense_t))
                                             for i in range(len(pr.scales))))


def _implementation_gaps(pr: _Problems, model, sel_eval, comp: dict, res: Result):
    """Float64 checks of the peft model, the base and the pool against our batched code."""
    names, K, N, W, gen = pr.asset["names"], pr.K, len(pr.scales), pr.W, pr.gen
    model.double()
    W64 = {m: (w.double(), b.double()) for m, (w, b) in W.items()}
    D64 = {m: lora_delta(pr.A[m].double(), pr.B[m].double(), pr.scales.double()) for m in MODULES}
    xg = torch.randn(64, W["fc1"][0].shape[1], generator=gen, dtype=torch.float64)
    res.gaps["peft_forward"] = max(float((peft_forward(model, names[i], xg) - mlp_forward(W64, xg, {m: D64[m][i] for m in MODULES})).abs().max())
                                   for i in range(N))
    key = sel_eval[0].tolist()
    w = torch.randn(K, generator=gen, dtype=torch.float64)
    peft_merge_delta(model, [names[i] for i in key], w.tolist(), "cat", keep="_cat_check")
    ours_c = {m: merged_delta(w[None], D64[m][key], "linear")[0] for m in MODULES}
    res.gaps["peft_cat_forward"] = float((peft_forward(model, "_cat_check", xg) - mlp_forward(W64, xg, ours_c)).abs().max())
    model.delete_adapter("_cat_check")
    zero = {m: merged_delta(torch.zeros(1, 1, K), comp[m][:1], "leaky_relu")[:, 0] for m in MODULES}
    x0 = pr.data["test"][0][0]
    res.gaps["zero_coefficients"] = float((mlp_forward(W, x0, zero) - mlp_forward(W, x0)).abs().max())
    cos_gap = 0.0
    for m in MODULES:
        A64, B64 = pr.A[m].double(), pr.B[m].double()
        for i in range(min(N, 12)):
            for j in range(i + 1, min(N, 12)):
                dense = dense_cosine(D64[m][i], D64[m][j])
                cos_gap = max(cos_gap, abs(lora_cosine(A64[i], B64[i], A64[j], B64[j]) - dense))
    res.gaps["trace_cosine"] = cos_gap
    # the random pool Ours merged for the first problem: K std-matched LoRAs, independent directions
    res.gaps["random_stack_rank"] = min(int(torch.linalg.matrix_rank(comp[m][pr.P].double().reshape(K, -1))) for m in MODULES)
    res.gaps["random_stack_size"] = K
    c0 = torch.zeros(3, dtype=torch.float64, requires_grad=True)
    activate(c0, "leaky_relu").sum().backward()
    res.gaps["leaky_grad_at_zero"] = float(c0.grad.max())
    T3, expected = ties_hand_example()
    from peft.utils.merge_utils import ties as peft_ties
    res.gaps["ties_hand"] = float((ties_merge(T3, 0.4) - expected).abs().max())
    res.gaps["ties_hand_peft"] = float((peft_ties(list(T3), torch.ones(3, dtype=T3.dtype), 0.4) - expected).abs().max())


def _near_duplicate(pr: _Problems, sel_eval, c_chosen, comp: dict, res: Result):
    """R3: whether the near-duplicate was selected and where its coefficient (and its contribution
    ``||act(c_i) s_i B_i A_i||_F``, since scalings differ) ranks among the K."""
    P, T, S = pr.P, pr.T, pr.S
    pos = np.array([int(np.flatnonzero(sel_eval[p].numpy() == pr.pdup[p])[0]) if pr.pdup[p] in sel_eval[p].tolist() else -1
                    for p in range(P)])
    largest = c_chosen.argmax(-1).numpy() == pos[:, None]            # (P, M)
    largest[pos < 0] = False
    norms = torch.stack([(c_chosen[:, i, :, None, None] * comp[m][:P]).flatten(-2).norm(dim=-1)
                         for i, m in enumerate(MODULES)], 1)         # (P, M, K)
    largest_c = norms.argmax(-1).numpy() == pos[:, None]
    largest_c[pos < 0] = False
    res.duplicate_largest_contribution = largest_c.reshape(T, S * len(MODULES)).mean(1)
    res.duplicate_selected = (pos >= 0).reshape(T, S).mean(1)
    res.duplicate_largest = largest.reshape(T, S * len(MODULES)).mean(1)
    for t in np.flatnonzero(res.regime == "R3"):
        res.coefficients[int(t)] = {"act_c": c_chosen[t * S].numpy(), "position": int(pos[t * S]),
                                    "selected": sel_eval[t * S].numpy(), "near_duplicate": int(res.near_duplicate[t])}


def run(config: Config, asset: dict) -> Result:
    """Every arm on every candidate target and seed (one batched program per kind of training),
    then the guards and the fixed keep rule. The stages share one ``_Problems`` and draw from its
    two random streams in this order."""
    cfg = config
    res = Result(config=cfg)
    pr = _setup(cfg, asset, res)
    acc_p = {"base": pr.test_acc()}
    base_check = pr.test_acc(None, "check")
    sel_eval, _, comp = _select(pr)
    c_chosen = _adaptive_merges(pr, comp, acc_p, res)
    lora_check, picked_f = _target_loras(pr, acc_p, res)
    model = _peft_merges(pr, sel_eval, acc_p, res)
    _lorahub(pr, {m: comp[m][:pr.P] for m in MODULES}, acc_p, res)
    _closeness(pr, picked_f, acc_p, res)
    _implementation_gaps(pr, model, sel_eval, comp, res)
    _near_duplicate(pr, sel_eval, c_chosen, comp, res)

    # per target means over seeds, guards and the fixed keep rule
    T, S = pr.T, pr.S
    res.accuracy = {arm: v.reshape(T, S).mean(1) for arm, v in acc_p.items()}
    res.base_check, res.lora_check = base_check.reshape(T, S).mean(1), lora_check.reshape(T, S).mean(1)
    ok = (res.base_check <= BASE_ACCURACY_MAX) & (res.lora_check >= LORA_ACCURACY_MIN)
    res.kept = np.zeros(T, bool)
    for name in REGIMES:
        res.kept[np.flatnonzero((res.regime == name) & ok)[: cfg.num_targets]] = True
    d_in = [pr.W[m][0].shape[1] for m in MODULES]
    d_out = [pr.W[m][0].shape[0] for m in MODULES]
    res.trainable = {"ours": len(MODULES) * pr.K,
                     **{f"lora_r{q}": q * (sum(d_in) + sum(d_out)) for q in (cfg.lora_rank, cfg.matched_rank)}}
    return res


def measurements(res: Result) -> dict:
    """Every number a ledger verdict depends on. Unit of replication: a target task (its teacher,
    data and fresh trainings; seeds are averaged within it), paired across arms."""
    a, k = res.accuracy, res.kept
    r12 = k & np.isin(res.regime, ["R1", "R2"])
    r3 = k & (res.regime == "R3")
    out: dict = {"n_r12": int(r12.sum()), "n_r3": int(r3.sum()),
                 "kept_per_regime": {g: int((k & (res.regime == g)).sum()) for g in REGIMES}}
    wins = int((a["ours"][k] > a["base"][k]).sum())
    out["beats_base"] = clopper_pearson(wins, int(k.sum()), unit="target tasks")
    out["beats_base_wins"] = wins
    out["ours_minus_lora"] = paired_difference(a["ours"][r12], a["target_lora"][r12], unit="target tasks")
    out["headline"] = tost(a["ours"][r12] - a["ours_random_pool"][r12], margin=EQUIVALENCE_MARGIN, unit="target tasks")
    out["selection"] = tost(a["ours"][r12] - a["ours_random_selection"][r12], margin=EQUIVALENCE_MARGIN, unit="target tasks")
    out["by_regime"] = {g: paired_difference(a["ours"][k & (res.regime == g)], a["ours_random_pool"][k & (res.regime == g)],
                                             unit="target tasks") for g in ("R1", "R2")}
    # the headline per regime (R1 unrelated pool, R2 generic pool): the same TOST, one per regime
    out["headline_by_regime"] = {g: tost(a["ours"][k & (res.regime == g)] - a["ours_random_pool"][k & (res.regime == g)],
                                         margin=EQUIVALENCE_MARGIN, unit="target tasks") for g in ("R1", "R2")}
    out["selection_by_regime"] = {g: paired_difference(a["ours"][k & (res.regime == g)],
                                                       a["ours_random_selection"][k & (res.regime == g)], unit="target tasks")
                                  for g in ("R1", "R2")}
    out["r3_transfer"] = paired_difference(a["ours"][r3], a["ours_random_pool"][r3], unit="target tasks")
    out["r3_tost"] = tost(a["ours"][r3] - a["ours_random_pool"][r3], margin=EQUIVALENCE_MARGIN, unit="target tasks")
    out["r3_largest"] = mean_interval(res.duplicate_largest[r3], unit="target tasks")
    out["r3_largest_contribution"] = float(res.duplicate_largest_contribution[r3].mean())
    out["r3_selection"] = paired_difference(a["ours"][r3], a["ours_random_selection"][r3], unit="target tasks")
    out["headroom"] = mean_interval(a["target_lora"][r12], unit="target tasks")
    out["lorahub_minus_lora"] = paired_difference(a["lorahub"][r12], a["target_lora"][r12], unit="target tasks")
    out["ours_minus_lorahub"] = paired_difference(a["ours"][r12], a["lorahub"][r12], unit="target tasks")
    out["closeness"] = tost(a["ours"][r12] - a["ours_closeness_selection"][r12], margin=EQUIVALENCE_MARGIN, unit="target tasks")
    out["r3_closeness_selection"] = paired_difference(a["ours_closeness_selection"][r3], a["ours_random_selection"][r3],
                                                      unit="target tasks")
    out["r3_duplicate_selected_closeness"] = float(res.duplicate_selected_closeness[r3].mean())
    out["lorahub_moved"] = float(res.lorahub_moved[k].mean())
    out["table"] = {g: {arm: float(v[k & (res.regime == g)].mean()) for arm, v in a.items()} for g in REGIMES}
    return out
