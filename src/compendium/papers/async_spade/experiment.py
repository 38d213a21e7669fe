"""Config, the experiment (``run``) and the deterministic checks of the AsyncSpade chapter."""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field

import numpy as np
import torch

from ...kernels.quest_pages import page_metadata, quest_scores_reference
from ...kernels.sparse_decode import dense_masked_reference, sparse_decode_reference
from ...runtime import make_rng
from ...stats import Estimate, mean_interval
from .decode import timed_decode
from .lm import make_sequences, settings_for
from .sparse import (mask_from_scores, mass_at_steps, method_scores, prediction_cosine, predict_queries,
                     query_cosine_by_lag, recall_and_mass, select, true_attention)

SELECTORS = ("oracle", "ridge", "last", "mean", "quest", "ridge_shuffled")
ACCURACY_METHODS = ("full", "ridge", "last", "quest", "oracle", "random")  # random: the degraded control selector
DRIFT_METHODS = ("oracle", "ridge", "last")
#: The drift language of the positive control. Every query head follows a stationary AR(2),
#: q_t = a1 q_{t-1} + a2 q_{t-2} + noise, with (a1, a2) = DRIFT_AR: roots of modulus 0.9 at about
#: 26 degrees, a slow damped rotation with lag-1 correlation a1 / (1 - a2) = 0.895. The first choice
#: (rho = 0.98, phi = 0.9: lag-1 cosine 0.999) left the last query at the ceiling and the ridge's
#: shrinkage swamped the q_{t-1} - q_{t-2} direction; see the chapter's dated changes.
DRIFT_AR = (1.62, -0.81)
DRIFT_BURN_IN = 300
RANDOM_LOSS_POINTS = 1.0   # the accuracy criterion's own bound: the degraded selector must lose more than it


@dataclass(frozen=True)
class Config:
    """Parameters of the chapter (names as in the registry)."""

    model_seeds: int = 5
    eval_sequences: int = 8
    budgets: tuple = (64, 128)
    accuracy_budget: int = 64
    page_size: int = 16
    sink_tokens: int = 4
    local_tokens: int = 16
    window: int = 8
    ar_order: int = 2
    ridge_lambda: float = 1.0
    exactness_shapes: int = 200
    quest_bound_cases: int = 1000
    bootstrap_resamples: int = 2000
    timing_steps: int = 20
    seed: int = 0

    def __post_init__(self):
        object.__setattr__(self, "budgets", tuple(int(b) for b in self.budgets))
        ints = dict(model_seeds=2, eval_sequences=1, accuracy_budget=1, page_size=1, sink_tokens=0,
                    local_tokens=1, window=2, ar_order=1, exactness_shapes=1, quest_bound_cases=1,
                    bootstrap_resamples=100, timing_steps=1)
        for name, low in ints.items():
            value = getattr(self, name)
            if not isinstance(value, (int, np.integer)) or value < low:
                raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
        if not self.budgets or any(b < self.page_size or b % self.page_size for b in self.budgets):
            raise ValueError(f"budgets must be multiples of page_size ({self.page_size}), got {self.budgets}")
        if self.accuracy_budget % self.page_size:
            raise ValueError("accuracy_budget must be a multiple of page_size")
        if self.ar_order >= self.window:
            raise ValueError(f"ar_order ({self.ar_order}) must be smaller than window ({self.window})")
        if not self.ridge_lambda > 0:
            raise ValueError(f"ridge_lambda must be > 0, got {self.ridge_lambda}")

    def check_scale(self, scale: str) -> None:
        """What the models trained at ``scale`` allow (their number, their context); ``compendium
        validate`` (and every run) calls it before any notebook starts."""
        trained = settings_for(scale)
        if self.model_seeds > trained.num_models:
            raise ValueError(f"model_seeds {self.model_seeds}: the asset trains {trained.num_models} models at "
                             f"scale {scale!r}")
        if max(self.budgets + (self.accuracy_budget,)) + self.sink_tokens + self.local_tokens >= trained.context:
            raise ValueError(f"budgets plus sinks and local window must be below the context ({trained.context})")


@dataclass
class Result:
    """Everything the notebook plots and checks (timings in ``timing`` only)."""

    recall: dict            # (method, budget) -> (units,) per (model, sequence)
    mass: dict              # (method, budget) -> (units,)
    accuracy: dict          # method -> (models,) answer accuracy with that selection in the loop
    answer_mass: dict       # method -> (models,) attention mass kept at the steps that must answer
    cosine_lag: np.ndarray  # (lags,) cos(q_t, q_{t-lag}), mean over models/layers/heads
    prediction_cosine: dict  # predictor -> mean cos(q_hat_t, q_t)
    estimates: dict         # name -> Estimate over trained models (per-model mean differences)
    per_model: dict         # name -> (models,) per-model mean difference behind each estimate
    exactness_error: float  # max |sparse gather - dense masked| over the random shapes
    quest_min_slack: float  # min over cases of U(q, page) - max_k q.k
    cost_model: dict        # critical-path cache reads per step (deterministic proxy of TPOT)
    drift: dict = field(default_factory=dict)    # the drift-language positive control (lag-1 cosine, recalls)
    timing: dict = field(default_factory=dict)   # wall-clock (varies run to run)


def kernel_exactness(num_shapes: int, rng: np.random.Generator) -> float:
    """Max |gather sparse attention - dense attention with a -inf mask| over random shapes
    (T not a multiple of 16, GQA ratios 1/2/4, some index sets of size >= T with padding)."""
    worst = 0.0
    gen = torch.Generator().manual_seed(int(rng.integers(2**31)))
    for _ in range(num_shapes):
        hkv = int(rng.integers(1, 3))
        heads = hkv * int(rng.choice([1, 2, 4]))
        seq = int(rng.integers(1, 200))
        dim = int(rng.choice([16, 32, 64]))
        n = int(rng.integers(1, seq + 20))                               # n >= seq: all keys + padding
        q = torch.randn(2, heads, dim, generator=gen)
        k = torch.randn(2, hkv, seq, dim, generator=gen)
        v = torch.randn(2, hkv, seq, dim, generator=gen)
        idx = torch.argsort(torch.rand(2, hkv, seq, generator=gen), -1)[..., :n]
        if n > seq:
            idx = torch.cat([idx, torch.full((2, hkv, n - seq), -1)], -1)
        diff = (sparse_decode_reference(q, k, v, idx) - dense_masked_reference(q, k, v, idx)).abs().max()
        worst = max(worst, float(diff))
    return worst


def quest_bound_slack(num_cases: int, rng: np.random.Generator) -> float:
    """min over random (q, page) of U(q, page) - max_{k in page} q.k, in float64."""
    worst = math.inf
    for _ in range(num_cases):
        dim, size = int(rng.integers(1, 65)), int(rng.integers(1, 33))
        keys = torch.from_numpy(rng.standard_normal((1, 1, size, dim)) * rng.exponential(1.0))
        q = torch.from_numpy(rng.standard_normal((1, 1, dim)))
        kmin, kmax, _ = page_metadata(keys, page_size=size)
        bound = float(quest_scores_reference(q, kmin, kmax)[0, 0, 0])
        worst = min(worst, bound - float((keys[0, 0] @ q[0, 0]).max()))
    return worst


def cost_model(context: int, budget: int, page_size: int, window: int) -> dict:
    """Cache vectors read per decode step and key/value head on the critical path.

    full: all keys and values (2T); Quest: two metadata vectors per page, then the selected keys
    and values (2T/P + 2B); token selection done synchronously: every key scored, then 2B; done
    asynchronously: only the 2B (plus the W-query window shipped to the selector)."""
    return {"full": 2 * context, "quest": 2 * math.ceil(context / page_size) + 2 * budget,
            "token_sync": context + 2 * budget, "token_async": 2 * budget + window}


MIN_RECALL_EFFECT = 0.01  # smallest recall difference of interest (one point of recall), fixed in advance


def model_level_differences(recall: dict, accuracy: dict, config: Config) -> tuple[dict, dict]:
    """Per-model mean differences and their t intervals over the trained models.

    The (model, sequence) units of ``recall`` share their model, so the unit of replication is the
    model: each model's sequences are averaged first and the interval is a t interval over models
    (:func:`compendium.stats.mean_interval`; with five clusters a percentile bootstrap over models
    would undercover). Accuracy differences are in points.
    """
    k = config.model_seeds
    per_model = {}
    for b in config.budgets:
        for a, c in (("ridge", "quest"), ("ridge", "last"), ("ridge_shuffled", "last")):
            if (a, b) not in recall or (c, b) not in recall:
                continue
            d = (recall[(a, b)] - recall[(c, b)]).reshape(k, -1).mean(1)
            per_model[f"{a}_minus_{c}_{b}"] = d
    per_model["accuracy_ridge_minus_quest"] = 100 * (accuracy["ridge"] - accuracy["quest"])
    if "random" in accuracy:                      # the control: a selector that ignores every query
        per_model["accuracy_random_minus_quest"] = 100 * (accuracy["random"] - accuracy["quest"])
    if "oracle" in accuracy:                      # diagnostic: token selection from the true query
        per_model["accuracy_oracle_minus_quest"] = 100 * (accuracy["oracle"] - accuracy["quest"])
    estimates = {name: mean_interval(v, unit="trained models") for name, v in per_model.items()}
    return per_model, estimates


def models_for_resolution(per_model: np.ndarray, min_effect: float, level: float = 0.95, max_models: int = 1000) -> int:
    """Power analysis: the fewest models whose t interval half-width is at most ``min_effect / 2``,
    taking the spread between models from ``per_model`` (so a true effect of ``min_effect`` would
    be decided, not left inconclusive, in a typical run)."""
    import scipy.stats

    sd = float(np.std(per_model, ddof=1))
    for n in range(2, max_models + 1):
        if scipy.stats.t.ppf((1 + level) / 2, n - 1) * sd / math.sqrt(n) <= min_effect / 2:
            return n
    return max_models


def cost_model_curve(contexts, budget: int, page_size: int, window: int) -> dict:
    """The cost-model ratios as a function of the context T (closed-form arithmetic of T, B, P, W)."""
    rows = [cost_model(int(t), budget, page_size, window) for t in contexts]
    return {"context": np.array(contexts), "vs_quest": np.array([r["token_async"] / r["quest"] for r in rows]),
            "vs_full": np.array([r["token_async"] / r["full"] for r in rows])}


def crossover_context(ratio: float, budget: int, page_size: int, window: int) -> int:
    """Smallest context T (a multiple of the page) at which token_async / quest <= ``ratio``:
    (2B + W) <= ratio (2 T / P + 2B)  <=>  T >= P ((2B + W) / ratio - 2B) / 2."""
    t = page_size * ((2 * budget + window) / ratio - 2 * budget) / 2
    return int(math.ceil(t / page_size) * page_size)


def drift_language(num: int, heads: int, kv_heads: int, context: int, head_dim: int,
                   rng: np.random.Generator, ar: tuple = DRIFT_AR,
                   burn_in: int = DRIFT_BURN_IN) -> tuple[torch.Tensor, torch.Tensor]:
    """Synthetic queries and keys of one replicate of the drift language: (num, heads, T, d) queries
    whose every head drifts (``q_t = a1 q_{t-1} + a2 q_{t-2} + eps_t`` with ``(a1, a2) = ar``,
    started from a ``burn_in``-step run-in so the process is stationary; scaled to unit coordinate
    variance per sequence and head) and fixed standard-normal keys (num, kv_heads, T, d).

    The retrieval target (the top-B keys of ``q_t``) then moves slowly and smoothly, the premise of
    next-query prediction; a predictor that extrapolates the drift can beat reusing ``q_{t-1}``."""
    a1, a2 = ar
    if not (abs(a2) < 1 and a2 + a1 < 1 and a2 - a1 < 1):
        raise ValueError(f"AR(2) coefficients {ar} are not stationary")
    q = np.zeros((num, heads, head_dim))
    prev = np.zeros_like(q)
    out = np.empty((num, heads, context, head_dim))
    for step in range(burn_in + context):
        q, prev = a1 * q + a2 * prev + rng.standard_normal(q.shape), q
        if step >= burn_in:
            out[:, :, step - burn_in] = q
    out /= out.std(axis=(2, 3), keepdims=True)
    keys = rng.standard_normal((num, kv_heads, context, head_dim))
    return torch.from_numpy(out).float(), torch.from_numpy(keys).float()


def drift_control(config: Config, heads: int, kv_heads: int, context: int, head_dim: int) -> dict:
    """The ridge-vs-last comparison on the drift language: ``config.model_seeds`` independent
    replicates (as many as the trained models behind the claim, so the control has the claim's
    number of units), ``config.eval_sequences`` sequences each; recall against the oracle top-B at
    every budget, per-replicate means, and the lag-1 query cosine of the language."""
    kw = _selection_kwargs(config)
    recall = {(m, b): [] for m in DRIFT_METHODS for b in config.budgets}
    lag1, pcos = [], {p: [] for p in ("last", "ridge")}
    for i in range(config.model_seeds):
        Q, K = drift_language(config.eval_sequences, heads, kv_heads, context, head_dim, make_rng(config.seed, 50, i))
        scores = {m: method_scores(m, Q, K, **kw) for m in DRIFT_METHODS}
        probs = true_attention(Q, K)
        for b in config.budgets:
            oracle = mask_from_scores("oracle", scores["oracle"], b, **kw)
            for m in DRIFT_METHODS:
                r, _ = recall_and_mass(mask_from_scores(m, scores[m], b, **kw), oracle, probs, b,
                                       config.sink_tokens, config.local_tokens)
                recall[(m, b)].append(float(r.mean()))
        lag1.append(float(query_cosine_by_lag(Q, 1)[0]))
        for p in pcos:
            pcos[p].append(prediction_cosine(Q, predict_queries(Q, p, config.window, config.ridge_lambda,
                                                                config.ar_order), config.window + 1))
    recall = {k: np.array(v) for k, v in recall.items()}
    per_model = {f"drift_ridge_minus_last_{b}": recall[("ridge", b)] - recall[("last", b)] for b in config.budgets}
    return {"recall": recall, "per_model": per_model, "cos_lag1": float(np.mean(lag1)),
            "prediction_cosine": {p: float(np.mean(v)) for p, v in pcos.items()}}


def _selection_kwargs(config: Config) -> dict:
    return dict(sinks=config.sink_tokens, local=config.local_tokens, page_size=config.page_size,
                window=config.window, ridge_lambda=config.ridge_lambda, ar_order=config.ar_order)


def run(config: Config, models: list, *, with_timing: bool = True, device: str = "cpu") -> Result:
    """Selection recall, in-loop accuracy, query statistics and checks over ``models`` (on the CPU);
    the wall-clock decode timing runs on ``device``."""
    if len(models) < config.model_seeds:
        raise ValueError(f"need {config.model_seeds} models, got {len(models)}")
    models = models[:config.model_seeds]
    context = models[0].settings.context
    if max(config.budgets + (config.accuracy_budget,)) + config.sink_tokens + config.local_tokens >= context:
        raise ValueError(f"budgets plus sinks and local window must be below the context ({context})")
    kw = _selection_kwargs(config)
    recall = {(m, b): [] for m in SELECTORS for b in config.budgets}
    mass = {(m, b): [] for m in SELECTORS for b in config.budgets}
    accuracy = {m: [] for m in ACCURACY_METHODS}
    answer_mass = {m: [] for m in SELECTORS}
    lags, pcos = [], {p: [] for p in ("last", "mean", "ridge")}
    for i, model in enumerate(models):
        tokens, answer = make_sequences(config.eval_sequences, context, make_rng(config.seed, 10, i))
        x = torch.from_numpy(tokens)
        cap = []
        with torch.no_grad():
            model(x, capture=cap)                                       # dense teacher-forced pass
        rec = {key: 0.0 for key in recall}
        ms = {key: 0.0 for key in mass}
        asks = torch.from_numpy(np.roll(answer, -1, axis=1))   # the steps whose output must be an answer
        am = {m: 0.0 for m in SELECTORS}
        for Q, K, _ in cap:
            probs = true_attention(Q, K)
            scores = {m: method_scores(m, Q, K, **kw) for m in SELECTORS}
            for m in SELECTORS:
                sel = mask_from_scores(m, scores[m], config.accuracy_budget, **kw)
                am[m] += mass_at_steps(sel, probs, asks) / len(cap)
            for b in config.budgets:
                oracle = mask_from_scores("oracle", scores["oracle"], b, **kw)
                for m in SELECTORS:
                    r, a = recall_and_mass(mask_from_scores(m, scores[m], b, **kw), oracle, probs, b,
                                           config.sink_tokens, config.local_tokens)
                    rec[(m, b)] = rec[(m, b)] + r / len(cap)
                    ms[(m, b)] = ms[(m, b)] + a / len(cap)
        for m in SELECTORS:
            answer_mass[m].append(am[m])
        for key in recall:
            recall[key].append(rec[key])
            mass[key].append(ms[key])
        for Q, _, _ in cap:
            lags.append(query_cosine_by_lag(Q, 16))
            for p in pcos:
                pcos[p].append(prediction_cosine(Q, predict_queries(Q, p, config.window, config.ridge_lambda,
                                                                    config.ar_order), config.window + 1))
        for m in ACCURACY_METHODS:
            def mask_fn(layer, Q, K, m=m, i=i):
                return select(m, Q, K, config.accuracy_budget, random_seed=1000 * (config.seed + 1) + 10 * i + layer, **kw)
            with torch.no_grad():
                pred = model(x, mask_fn=mask_fn).argmax(-1)[:, :-1].numpy()
            accuracy[m].append(float((pred == tokens[:, 1:])[answer[:, 1:]].mean()))
    recall = {k: np.concatenate(v) for k, v in recall.items()}
    mass = {k: np.concatenate(v) for k, v in mass.items()}
    accuracy = {k: np.array(v) for k, v in accuracy.items()}
    answer_mass = {k: np.array(v) for k, v in answer_mass.items()}
    per_model, estimates = model_level_differences(recall, accuracy, config)
    st = models[0].settings
    drift = drift_control(config, st.num_heads, st.num_kv_heads, context, st.d_model // st.num_heads)
    per_model.update(drift["per_model"])
    estimates.update({name: mean_interval(v, unit="drift replicates") for name, v in drift["per_model"].items()})
    result = Result(
        recall=recall, mass=mass, accuracy=accuracy, answer_mass=answer_mass, cosine_lag=np.mean(lags, axis=0),
        prediction_cosine={p: float(np.mean(v)) for p, v in pcos.items()}, estimates=estimates, per_model=per_model,
        exactness_error=kernel_exactness(config.exactness_shapes, make_rng(config.seed, 30)),
        quest_min_slack=quest_bound_slack(config.quest_bound_cases, make_rng(config.seed, 31)),
        cost_model=cost_model(context, config.accuracy_budget, config.page_size, config.window), drift=drift,
    )
    if with_timing:
        result.timing = measure_tpot(config, models[0], context, device)
    return result


def measure_tpot(config: Config, model, context: int, device: str = "cpu") -> dict:
    """Median wall-clock step time of full / sync / async decoding on one sequence (varies by run)."""
    tokens, _ = make_sequences(1, context, make_rng(config.seed, 40))
    tokens = torch.from_numpy(tokens[0]).to(device)
    model = copy.deepcopy(model).to(device)
    steps = min(config.timing_steps, context // 4)
    prefix = context - steps
    kw = dict(budget=config.accuracy_budget, sinks=config.sink_tokens, local=config.local_tokens,
              window=config.window, ridge_lambda=config.ridge_lambda, ar_order=config.ar_order)
    timed_decode(model, tokens, prefix, min(3, steps), "sync", **kw)   # warm-up
    out = {}
    for mode in ("full", "sync", "quest", "async"):
        times, sel, events = timed_decode(model, tokens, prefix, steps, mode, page_size=config.page_size, **kw)
        out[mode] = float(np.median(times))
        if mode == "sync":
            out["t_sel"] = float(np.median(sel))
            out["t_fwd"] = float(np.median(times - sel))
        if mode == "quest":
            out["quest_sel"] = float(np.median(sel))
        if mode == "async":
            out["events"] = events
            out["async_wait"] = float(np.median(sel))
    out["overlap_ratio"] = out["async"] / max(out["t_fwd"], out["t_sel"])
    return out
