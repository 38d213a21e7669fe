"""The experiment: SFT, LDS and the GRPO arms on the toy and two real tables, over training seeds."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from compendium import data as cdata
from compendium import stats
from compendium.rl import group_advantages
from compendium.validation import require_int, require_number

from .policy import ARMS, EnsembleMLP, grpo_train, lds_weights, predict, sft_train
from .reward import ccc_loo_rewards, ccc_loo_rewards_bruteforce, reward_argmax, reward_curve
from .tasks import diabetes_task, longtail_task, per_bin_bias, randhie_task, regression_metrics, to_bins

__all__ = ["Config", "Result", "run", "train_task", "measurements", "reward_checks", "UNIT"]

UNIT = "training seeds (data draw, SFT and GRPO runs)"
METHODS = ("sft", "lds") + ARMS


@dataclass(frozen=True)
class Config:
    """Parameters of one run (names match the notebook's parameters cell and the registry)."""

    num_seeds: int = 5
    train_size: int = 4000
    test_size: int = 2000
    distribution: str = "lognormal"
    feature_noise: float = 1.5
    num_bins: int = 100
    hidden_size: int = 32
    sft_steps: int = 500
    grpo_steps: int = 300
    inner_updates: int = 2
    group_size: int = 8
    batch_size: int = 64
    batch_sizes: tuple = (16, 64, 128)
    learning_rate: float = 1e-4
    clip_eps: float = 0.2
    kl_coef: float = 0.01
    real_train_cap: int = 6000
    pareto_toy: bool = True
    seed: int = 0

    def __post_init__(self):
        object.__setattr__(self, "batch_sizes", tuple(int(b) for b in self.batch_sizes))
        require_int("num_seeds", self.num_seeds, 2, 20)
        for name in ("train_size", "test_size", "sft_steps", "grpo_steps", "real_train_cap"):
            require_int(name, getattr(self, name), 1, 100_000)
        require_int("num_bins", self.num_bins, 10, 400)
        require_int("hidden_size", self.hidden_size, 8, 512)
        require_int("inner_updates", self.inner_updates, 1, 8)
        require_int("group_size", self.group_size, 2, 64)
        require_int("batch_size", self.batch_size, 4, 1024)
        require_int("seed", self.seed, 0, 2**31 - 1)
        require_number("feature_noise", self.feature_noise, 0.0, 10.0)
        require_number("learning_rate", self.learning_rate, 0.0, 0.1, low_open=True)
        require_number("clip_eps", self.clip_eps, 0.0, 1.0, low_open=True)
        require_number("kl_coef", self.kl_coef, 0.0, 1.0)
        if self.distribution not in ("lognormal", "pareto_mixture"):
            raise ValueError(f"distribution must be 'lognormal' or 'pareto_mixture', got {self.distribution!r}")
        if not isinstance(self.pareto_toy, bool):
            raise ValueError(f"pareto_toy must be true or false, got {self.pareto_toy!r}")
        if any(b < 4 for b in self.batch_sizes):
            raise ValueError(f"batch_sizes must all be >= 4, got {self.batch_sizes}")

    @property
    def training_seeds(self) -> list[int]:
        return [1000 * self.seed + k for k in range(self.num_seeds)]


@dataclass
class Result:
    """Per task: ``metrics[task][method][metric]`` arrays over training seeds, plus diagnostics."""

    config: Config
    metrics: dict
    sweep: dict
    bias: dict
    example: dict
    training: dict
    regions: dict
    checks: dict = field(default_factory=dict)


def _metric_table(tasks, preds_by_method):
    out = {}
    for method, preds in preds_by_method.items():
        rows = [regression_metrics(t, p) for t, p in zip(tasks, preds)]
        out[method] = {k: np.array([r[k] for r in rows]) for k in rows[0]}
    return out


def train_task(tasks: dict, config: Config, *, arms: dict, batch_sizes=(), lds=None) -> dict:
    """SFT and LDS, then every GRPO arm from the same SFT model, for several tasks over seeds.

    All policies of all tasks train in one ensemble (features zero-padded to the widest task).

    Parameters
    ----------
    tasks : dict name -> list of Task, one per training seed (``config.training_seeds``)
    config : Config
    arms : dict name -> GRPO arms for that task (all at identical steps, G, B, KL and learning rate)
    batch_sizes : extra B values for the CCC arm of the first task (the batch-size sweep)
    lds : names of the tasks that also train the LDS baseline (default: every task)

    Returns
    -------
    dict with ``preds[name][method]`` (lists over seeds of test predictions), ``sweep[B]`` (the
    first task's CCC arm at each B) and ``training[name]`` (SFT log, mean reward per arm and
    rollout batch, clip fraction, KL).
    """
    seeds = config.training_seeds
    names = list(tasks)
    width = max(t.x_train.shape[1] for ts in tasks.values() for t in ts)
    k = tasks[names[0]][0].num_bins
    # SFT members: (task, seed, plain | lds); the LDS twin shares the plain model's init and batches
    lds = names if lds is None else list(lds)
    sft_keys = [(n, j, w) for n in names for j in range(len(seeds)) for w in (("sft", "lds") if n in lds else ("sft",))]
    task_of = {key: tasks[key[0]][key[1]] for key in sft_keys}
    bins = {key: to_bins(task_of[key].y_train, task_of[key].edges) for key in sft_keys}
    sft = EnsembleMLP([seeds[j] for _, j, _ in sft_keys], width, config.hidden_size, k)
    sft_log = sft_train(sft, [task_of[key].x_train for key in sft_keys], [bins[key] for key in sft_keys],
                        [np.ones(len(bins[key])) if key[2] == "sft" else lds_weights(bins[key], k) for key in sft_keys],
                        steps=config.sft_steps, rngs=[np.random.default_rng(seeds[j]) for _, j, _ in sft_keys])
    test_x, test_c = [task_of[key].x_test for key in sft_keys], [task_of[key].centers for key in sft_keys]
    preds = {n: {"sft": [], "lds": []} if n in lds else {"sft": []} for n in names}
    greedy = {n: {"sft": [], "lds": []} if n in lds else {"sft": []} for n in names}
    for key, p, q in zip(sft_keys, predict(sft, test_x, test_c), predict(sft, test_x, test_c, "greedy")):
        preds[key[0]][key[2]].append(p)
        greedy[key[0]][key[2]].append(q)
    position = {key: m for m, key in enumerate(sft_keys)}

    def grpo(keys, batch):
        """keys: (task, seed, arm) members, each started from (task, seed)'s plain SFT model."""
        start = [position[(n, j, "sft")] for n, j, _ in keys]
        model, reference = sft.select(start), sft.select(start)
        ts = [tasks[n][j] for n, j, _ in keys]
        info = grpo_train(model, reference, [a for _, _, a in keys], [t.x_train for t in ts], [t.y_train for t in ts],
                          [t.centers for t in ts], steps=config.grpo_steps, batch_size=batch,
                          group_size=config.group_size, learning_rate=config.learning_rate,
                          clip_eps=config.clip_eps, kl_coef=config.kl_coef, inner_updates=config.inner_updates,
                          reward_scale=[float(t.y_train.std()) for t in ts],
                          batch_rngs=[np.random.default_rng(seeds[j] + 1) for _, j, _ in keys],
                          generator=torch.Generator().manual_seed(seeds[0] + 2 + batch))
        xt, ct = [t.x_test for t in ts], [t.centers for t in ts]
        return predict(model, xt, ct), info, predict(model, xt, ct, "greedy")

    keys = [(n, j, a) for n in names for j in range(len(seeds)) for a in arms[n]]
    out, info, out_greedy = grpo(keys, config.batch_size)
    for n in names:
        for a in arms[n]:
            preds[n][a] = [p for key, p in zip(keys, out) if key[0] == n and key[2] == a]
            greedy[n][a] = [p for key, p in zip(keys, out_greedy) if key[0] == n and key[2] == a]
    training = {}
    for n in names:
        sel = {a: [m for m, key in enumerate(keys) if key[0] == n and key[2] == a] for a in arms[n]}
        training[n] = {"sft": sft_log, "arms": list(arms[n]),
                       "reward": np.stack([info["reward"][:, sel[a]].mean(1) for a in arms[n]], axis=1)}
    training["clip_fraction"], training["mean_kl"] = info["clip_fraction"], info["mean_kl"]
    sweep = {}
    first = names[0]
    for b in batch_sizes:
        if b == config.batch_size:
            sweep[b] = preds[first]["ccc"]
        else:
            sweep[b] = grpo([(first, j, "ccc") for j in range(len(seeds))], b)[0]
    return {"preds": preds, "greedy": greedy, "sweep": sweep, "training": training}


def reward_checks(config: Config, rng: np.random.Generator) -> dict:
    """Implementation checks of the reward and the advantages on hand-made inputs."""
    b, g = config.batch_size, config.group_size
    preds = rng.normal(20, 8, (b, g))
    y = np.exp(np.log(10) + 0.8 * rng.standard_normal(b))
    fast = ccc_loo_rewards(torch.as_tensor(preds), torch.as_tensor(y)).numpy()
    brute = ccc_loo_rewards_bruteforce(preds, y)
    adv = group_advantages(torch.as_tensor(fast))
    equal = group_advantages(torch.full((b, g), 0.1))
    # the reward's preferred prediction for the largest target, others at calibrated / compressed anchors
    grid = np.linspace(0, 80, config.num_bins + 1)
    centers = (grid[:-1] + grid[1:]) / 2
    y_grid = np.clip(np.exp(np.log(10) + 0.8 * np.random.default_rng(7).standard_normal(64)), 0.5, 79)
    top = int(np.argmax(y_grid))
    compressed = y_grid.mean() + 0.5 * (y_grid - y_grid.mean())
    return {
        "bruteforce_gap": float(np.abs(fast - brute).max()),
        "adv_group_mean": float(adv.mean(-1).abs().max()),
        "equal_adv_max": float(equal.abs().max()), "equal_adv_nan": bool(torch.isnan(equal).any()),
        "grid_step": float(centers[1] - centers[0]), "y_top": float(y_grid[top]),
        "argmax_calibrated": reward_argmax(y_grid, y_grid, top, centers),
        "argmax_compressed": reward_argmax(y_grid, compressed, top, centers),
        "curve_centers": centers, "curve_calibrated": reward_curve(y_grid, y_grid, top, centers),
        "curve_compressed": reward_curve(y_grid, compressed, top, centers),
    }


def run(config: Config) -> Result:
    """Train and evaluate every method on the toy, diabetes and randhie over ``num_seeds`` seeds."""
    seeds = config.training_seeds
    diabetes = cdata.load("diabetes")
    randhie = cdata.load("statsmodels_randhie_visits")
    tasks = {
        "toy": [longtail_task(config.train_size, config.test_size, distribution=config.distribution,
                              noise=config.feature_noise, num_bins=config.num_bins, rng=np.random.default_rng(sd))
                for sd in seeds],
        "diabetes": [diabetes_task(diabetes.data, diabetes.target, num_bins=config.num_bins,
                                   rng=np.random.default_rng(sd + 11)) for sd in seeds],
        "randhie": [randhie_task(randhie.data, randhie.target, train_cap=config.real_train_cap,
                                 num_bins=config.num_bins, rng=np.random.default_rng(sd + 13)) for sd in seeds],
    }
    arms = {"toy": ARMS, "diabetes": ("pointwise", "ccc"), "randhie": ("pointwise", "ccc")}
    out = train_task(tasks, config, arms=arms, batch_sizes=config.batch_sizes, lds=("toy",))
    if config.pareto_toy:
        # the second long-tailed law as a second toy: SFT, LDS, pointwise and CCC GRPO at the
        # same steps, G, B, KL and learning rate, on its own draws (seed + 17) and in its own ensemble,
        # so the runs above are bitwise the same with or without it
        other = "pareto_mixture" if config.distribution == "lognormal" else "lognormal"
        pareto = {"pareto": [longtail_task(config.train_size, config.test_size, distribution=other,
                                           noise=config.feature_noise, num_bins=config.num_bins,
                                           rng=np.random.default_rng(sd + 17)) for sd in seeds]}
        extra = train_task(pareto, config, arms={"pareto": ("pointwise", "ccc")}, lds=("pareto",))
        tasks.update(pareto)
        out["preds"].update(extra["preds"])
        out["training"]["pareto"] = extra["training"]["pareto"]
    metrics = {n: _metric_table(tasks[n], out["preds"][n]) for n in tasks}
    metrics["toy_greedy"] = _metric_table(tasks["toy"], out["greedy"]["toy"])
    toy = tasks["toy"]
    sweep = {b: _metric_table(toy, {"ccc": p})["ccc"] for b, p in out["sweep"].items()}
    bias = {m: np.array([per_bin_bias(t, p) for t, p in zip(toy, preds)]) for m, preds in out["preds"]["toy"].items()}
    example = {"y": toy[0].y_test, "region": toy[0].test_region, "train_y": toy[0].y_train,
               "preds": {m: p[0] for m, p in out["preds"]["toy"].items()}}
    regions = {n: {r: int((ts[0].test_region == r).sum()) for r in ts[0].regions} for n, ts in tasks.items()}
    regions["train_sizes"] = {n: int(np.mean([len(t.y_train) for t in ts])) for n, ts in tasks.items()}
    checks = reward_checks(config, np.random.default_rng(config.seed + 5))
    return Result(config, metrics, sweep, bias, example, out["training"], regions, checks)


def _paired_gain(metrics, baseline, method, key):
    """Interval of baseline - method (positive: the method's error is lower), paired by seed."""
    a, b = metrics[baseline][key], metrics[method][key]
    return stats.paired_difference(a, b, unit=UNIT), int((a - b > 0).sum())


def measurements(result: Result) -> dict:
    """Every number a verdict depends on (estimates over training seeds), from :func:`run`'s result."""
    toy = result.metrics["toy"]
    m = {}
    # the few-shot rows read the supported few-shot bins (5 to 19 training samples, tasks.SUPPORT_MIN);
    # the whole few-shot region, extrapolation into bins with 0 to 4 samples included, is reported
    # beside them as few_all_*
    for region, key in (("few", "mae_few_supported"), ("medium", "mae_medium"), ("few_all", "mae_few")):
        for base in ("sft", "pointwise", "lds"):
            m[f"{region}_vs_{base}"], m[f"{region}_vs_{base}_wins"] = _paired_gain(toy, base, "ccc", key)
        for base in ("sft", "pointwise"):
            m[f"{region}_pw_vs_{base}"], _ = _paired_gain(toy, base, "ccc_pointwise", key)
    # power control: the same metric and seeds detect a known remedy for imbalance (LDS over SFT)
    m["lds_vs_sft"], m["lds_vs_sft_wins"] = _paired_gain(toy, "sft", "lds", "mae_few_supported")
    m["few_wins"] = min(m["few_vs_sft_wins"], m["few_vs_pointwise_wins"])
    m["medium_wins"] = min(m["medium_vs_sft_wins"], m["medium_vs_pointwise_wins"])
    m["many_relative"] = stats.mean_interval(toy["ccc"]["mae_many"] / toy["sft"]["mae_many"] - 1.0, unit=UNIT)
    closer = np.abs(toy["ccc"]["slope"] - 1) < np.abs(toy["sft"]["slope"] - 1)
    m["slope_closer"] = int(closer.sum())
    m["sft_slope"] = stats.mean_interval(toy["sft"]["slope"], unit=UNIT)
    m["ccc_slope"] = stats.mean_interval(toy["ccc"]["slope"], unit=UNIT)
    m["permuted_vs_sft"], m["permuted_wins"] = _paired_gain(toy, "sft", "ccc_permuted", "mae_few_supported")
    m["pointwise_vs_sft"], _ = _paired_gain(toy, "sft", "pointwise", "mae_few_supported")
    m["sweep"] = {b: stats.paired_difference(toy["sft"]["mae_few_supported"], v["mae_few_supported"], unit=UNIT)
                  for b, v in result.sweep.items()}
    m["diabetes_tail"], m["diabetes_wins"] = _paired_gain(result.metrics["diabetes"], "sft", "ccc", "mae_tail")
    m["randhie_few"], m["randhie_wins"] = _paired_gain(result.metrics["randhie"], "sft", "ccc", "mae_few_supported")
    m["randhie_few_all"], _ = _paired_gain(result.metrics["randhie"], "sft", "ccc", "mae_few")
    m["diabetes_all"], _ = _paired_gain(result.metrics["diabetes"], "sft", "ccc", "mae")
    m["randhie_all"], _ = _paired_gain(result.metrics["randhie"], "sft", "ccc", "mae")
    if "pareto" in result.metrics:
        pareto = result.metrics["pareto"]
        for base in ("sft", "pointwise", "lds"):
            m[f"pareto_few_vs_{base}"], m[f"pareto_few_vs_{base}_wins"] = _paired_gain(pareto, base, "ccc", "mae_few_supported")
            m[f"pareto_few_all_vs_{base}"], _ = _paired_gain(pareto, base, "ccc", "mae_few")
        m["pareto_lds_vs_sft"], _ = _paired_gain(pareto, "sft", "lds", "mae_few_supported")
        m["pareto_sft_slope"] = stats.mean_interval(pareto["sft"]["slope"], unit=UNIT)
    return m
