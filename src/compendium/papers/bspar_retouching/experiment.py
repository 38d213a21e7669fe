"""The chapter's experiment: read the trained runs, re-draw labels for the variance check, and
compute every statistic a verdict depends on (paired over training seeds)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import sympy
import torch

from compendium import stats
from compendium.rl.grpo import group_advantages, grpo_loss, masked_group_advantages
from compendium.validation import require_int

from . import reward as rw
from . import train as tr
from . import world as wd

UNIT = "training seeds"
LEVEL = 0.90                 # one-sided p < 0.05 <=> the 90 % two-sided t interval clears the bound
AUC_ITERATIONS = 100         # the prior-sampling check integrates the first 100 iterations
ENTROPY_FRACTION = 0.25      # the anchor check reads entropy at 25 % of training
CONTROL_MARGIN = 0.03        # gamma = 0: B-Spar may lead B1 by at most 3 points
SMALLEST_EFFECT = 0.03       # the headline's smallest effect of interest: 3 points of success (the same
                             # margin as the gamma = 0 control and the anchor's non-inferiority)
FLOOR_MARGIN = 0.05          # precondition: trained B-Spar beats doing nothing (success 0.5) by 5 points
DO_NOTHING = 0.5             # success of stopping at once: sigma(0)
HEADLINE_COMPARATORS = ("no_bayes", "shuffled", "b2", "b3")
NONINFERIORITY = 0.03        # "final success not lower": at most 3 points lower
VARIANCE_CONTROL_BANDWIDTH = 1e-3


@dataclass(frozen=True)
class Config:
    """Parameters of the chapter run (names match the notebook's parameters cell).

    ``seed`` picks the block of five training seeds trained in the asset (smoke trains five
    blocks, so seeds 0..4; full trains one)."""

    seed: int = 0
    variance_redraws: int = 50
    variance_images: int = 8
    monotonicity_instances: int = 200

    def __post_init__(self):
        require_int("seed", self.seed, 0, 2**31 - 1)
        require_int("variance_redraws", self.variance_redraws, 2, 10_000)
        require_int("variance_images", self.variance_images, 1, 64)
        require_int("monotonicity_instances", self.monotonicity_instances, 1, 100_000)

    def check_scale(self, scale: str) -> None:
        """What the asset trained at ``scale`` allows: a seed below its number of seed blocks.
        ``compendium validate`` (and every run) calls it before any notebook starts."""
        settings = tr.settings_for(scale)
        if self.seed >= settings.seed_blocks:
            raise ValueError(f"seed {self.seed}: the asset trains {settings.seed_blocks} block(s) of "
                             f"{settings.seeds_per_block} training seeds at scale {scale!r}, so the chapter's "
                             f"seed must be below {settings.seed_blocks}")


@dataclass
class Result:
    """Per arm and metric, one value per training seed of the block (arrays of shape (5,)); curves
    of shape (5, evals); the variance re-draw ratios; the implementation checks."""

    settings: dict
    arms: list
    seeds: list
    final: dict
    curves: dict
    curve_iterations: np.ndarray
    labels_per_model: int
    variance: dict
    implementation: dict
    example: dict = field(default_factory=dict)
    oracle_success: float = float("nan")


# ------------------------------------------------------------------------------------------ checks of our code
def symbolic_checks() -> dict:
    """sympy: the posterior mean and variance against Beta moments from Gamma-function ratios,
    and the kappa -> 0 limit of the mean (label frequency)."""
    k, m, s, n = sympy.symbols("kappa m s n", positive=True)
    a, b = k * m + s, k * (1 - m) + (n - s)                      # Beta(kappa m + s, kappa (1 - m) + n - s)
    B = lambda x, y: sympy.gamma(x) * sympy.gamma(y) / sympy.gamma(x + y)  # noqa: E731
    true_mean = sympy.gammasimp(B(a + 1, b) / B(a, b))
    true_var = sympy.gammasimp(B(a + 2, b) / B(a, b)) - true_mean ** 2
    mean, var = rw.beta_posterior(m, k, s, n)
    return dict(mean_gap=sympy.simplify(mean - true_mean), var_gap=sympy.simplify(var - true_var),
                kappa_zero=sympy.simplify(sympy.limit(mean, k, 0) - s / n))


def numeric_checks(instances: int, rng: np.random.Generator) -> dict:
    """Our code on hand-made and random inputs (max gaps; each should be 0 up to rounding)."""
    g = torch.Generator().manual_seed(int(rng.integers(2**31)))
    out = {}
    # no labels: the reward is sigma(z)
    proxy = torch.randn(3, 16, generator=g, dtype=torch.float64)
    feats = torch.randn(3, 16, 4, generator=g, dtype=torch.float64)
    pool_f, pool_y = torch.randn(3, 5, 4, generator=g, dtype=torch.float64), torch.ones(3, 5, dtype=torch.float64)
    r0, _ = rw.bayes_reward(proxy, feats, pool_f, pool_y, torch.zeros(3, 5, dtype=torch.bool), strength=4.0)
    out["no_labels_gap"] = float((r0 - torch.sigmoid(rw.standardise(proxy))).abs().max())
    # monotone in each label: flipping any y_j from 0 to 1 never lowers any reward
    worst = math.inf
    for _ in range(instances):
        P = int(rng.integers(2, 8))
        pf = torch.randn(1, P, 4, generator=g, dtype=torch.float64)
        py = torch.bernoulli(torch.full((1, P), 0.5, dtype=torch.float64), generator=g)
        j = int(rng.integers(P))
        lo, hi = py.clone(), py.clone()
        lo[0, j], hi[0, j] = 0.0, 1.0
        valid = torch.ones(1, P, dtype=torch.bool)
        kappa = float(rng.uniform(0.1, 8.0))
        r_lo, _ = rw.bayes_reward(proxy[:1], feats[:1], pf, lo, valid, strength=kappa)
        r_hi, _ = rw.bayes_reward(proxy[:1], feats[:1], pf, hi, valid, strength=kappa)
        worst = min(worst, float((r_hi - r_lo).min()))
    out["monotone_min_change"] = worst
    # group advantages: each group sums to 0; a tied group gets exactly 0; the masked variant with
    # every reward present equals the shared one
    r = torch.randn(50, 8, generator=g, dtype=torch.float64)
    out["group_sum_max"] = float(group_advantages(r).sum(-1).abs().max())
    out["tied_group_max"] = float(group_advantages(torch.full((4, 8), 0.3, dtype=torch.float64)).abs().max())
    out["masked_full_gap"] = float((masked_group_advantages(r, torch.ones_like(r, dtype=torch.bool))
                                    - group_advantages(r)).abs().max())
    # the clipped loss has zero gradient where the ratio is outside the clip on the side of the advantage
    logp_old = torch.zeros(4, dtype=torch.float64)
    logp = torch.tensor([math.log(1.5), math.log(0.5), math.log(1.05), math.log(0.95)], dtype=torch.float64,
                        requires_grad=True)
    adv = torch.tensor([1.0, -1.0, 1.0, -1.0], dtype=torch.float64)
    grpo_loss(logp, logp_old, adv, clip_eps=0.2).loss.backward()
    out["clip_outside_grad"] = float(logp.grad[:2].abs().max())
    out["clip_inside_grad_min"] = float(logp.grad[2:].abs().min())
    # the closed-form image statistics equal the rendered pixels' statistics; decoding inverts them
    digits = np.clip(rng.normal(8, 5, (6, 64)), 0, 16)
    world = wd.make_world(digits, np.zeros(6, int), rng)
    looks = rng.uniform(-4, 4, (6, 4))
    pixels = wd.image_statistics_rendered(wd.render(world.luma, world.chroma, looks))
    out["statistics_gap"] = float(np.abs(pixels - wd.image_statistics(looks)).max())
    out["decode_gap"] = float(np.abs(wd.decode_look(wd.image_statistics(looks)) - looks).max())
    return out


# ------------------------------------------------------------------------------------------ a reachable level
def oracle_success(world: wd.World, horizon: int, slope: float = 1.0) -> np.ndarray:
    """Per image, the rater's :math:`P(y=1)` after a greedy oracle's edits: it sees the hidden target
    and at each of ``horizon`` steps takes the action that lowers the distance most, stopping when
    none lowers it. Not a bound (greedy), a level a policy on this world can reach."""
    delta, _ = wd.action_table()
    look, target = np.array(world.as_shot, float), np.array(world.target, float)
    d0 = np.linalg.norm(look - target, axis=-1)
    for _ in range(horizon):
        cand = np.linalg.norm(look[:, None, :] + delta[None] - target[:, None, :], axis=-1)   # (n, 17)
        best = cand.argmin(1)
        better = cand[np.arange(len(look)), best] < np.linalg.norm(look - target, axis=-1)
        look = look + delta[best] * better[:, None]
    return wd.human_probability(d0, np.linalg.norm(look - target, axis=-1), slope)


# ------------------------------------------------------------------------------------------ variance of the signal
def variance_redraws(settings: tr.Settings, asset_seed: int, train_seeds, redraws: int, images: int,
                     seed: int) -> dict:
    """Per training seed: the GRPO advantages' variance across ``redraws`` re-draws of which
    trajectories are labelled (labels fixed), for B-Spar's reward, for raw labels (unlabelled = 0;
    and, as a detail, unlabelled dropped), and for the control (constant prior, no pooling).

    The trajectories are one batch of ``images`` training images x G rollouts of the seed's
    initial policy (where training starts). Returns arrays of shape (seeds,)."""
    train_world, _ = tr.load_world(settings, asset_seed)
    G = settings.group_size
    N = images * G
    n_lab = max(1, round(settings.label_rate * N))
    out = {k: [] for k in ("bayes", "raw_zero", "raw_dropped", "control")}
    for k in train_seeds:
        rng = np.random.default_rng([seed, 4, k])
        policy = tr.BatchedPolicy([1000 * asset_seed + k])
        idx = np.repeat(rng.choice(len(train_world), images), G)
        start = torch.as_tensor(train_world.as_shot[idx], dtype=torch.float32)[None]
        target = torch.as_tensor(train_world.target[idx], dtype=torch.float32)[None]
        ro = tr.rollout(policy, start, target, settings.horizon, torch.Generator().manual_seed(int(rng.integers(2**31))))
        m = tr.trajectory_metrics(ro, torch.ones(1), settings.human_slope)
        y = (torch.as_tensor(rng.random(N), dtype=torch.float32) < m["success"][0]).to(torch.float64)
        rewards = {key: [] for key in out}
        valid = []
        for _ in range(redraws):
            lab = torch.zeros(N, dtype=torch.bool)
            lab[torch.as_tensor(rng.permutation(N)[:n_lab])] = True
            pool_f = m["features"][0][lab][None].to(torch.float64)
            pool_y = y[lab][None]
            pv = torch.ones(1, n_lab, dtype=torch.bool)
            feats, proxy = m["features"].to(torch.float64), m["proxy"].to(torch.float64)
            rewards["bayes"].append(rw.bayes_reward(proxy, feats, pool_f, pool_y, pv, strength=settings.kappa)[0][0])
            rewards["control"].append(rw.bayes_reward(torch.zeros_like(proxy), feats, pool_f, pool_y, pv,
                                                      strength=settings.kappa,
                                                      bandwidth_scale=VARIANCE_CONTROL_BANDWIDTH)[0][0])
            rewards["raw_zero"].append(y * lab)
            rewards["raw_dropped"].append(y * lab)
            valid.append(lab)
        for key in out:
            R = torch.stack(rewards[key])
            v = torch.stack(valid) if key == "raw_dropped" else None
            out[key].append(float(rw.advantage_redraw_variance(R, v, G)))
    out = {k: np.array(v) for k, v in out.items()}
    out["ratio"] = out["bayes"] / out["raw_zero"]
    with np.errstate(divide="ignore"):        # dropped labels can give exactly zero variance
        out["ratio_dropped"] = out["bayes"] / out["raw_dropped"]
    out["control_ratio"] = out["control"] / out["raw_zero"]
    return out


# ------------------------------------------------------------------------------------------ run
def run(config: Config, asset_path: str | Path) -> Result:
    """Read the asset's runs for the block ``config.seed``, run the variance re-draws and the checks."""
    record, _ = tr.load_runs(asset_path)
    settings = tr.Settings(**{**record["settings"], "arms": tuple(record["settings"]["arms"])})
    per = settings.seeds_per_block
    if config.seed >= settings.seed_blocks:
        raise ValueError(f"seed {config.seed}: the asset trained {settings.seed_blocks} block(s) of {per} training "
                         f"seeds at this scale, so the chapter's seed must be below {settings.seed_blocks}")
    block = list(range(config.seed * per, (config.seed + 1) * per))
    arms, model_arm, model_seed = record["arms"], record["model_arm"], record["model_seed"]
    final, curves = {}, {}
    for arm in arms:
        rows = [next(i for i, (a, s) in enumerate(zip(model_arm, model_seed)) if a == arm and s == k) for k in block]
        final[arm] = {key: np.array(v)[rows] for key, v in record["final"].items()}
        curves[arm] = {key: np.array(v)[rows] for key, v in record["curves"].items()}
    train_seeds = [record["train_seeds"][k] for k in block]
    variance = variance_redraws(settings, record["seed"], train_seeds, config.variance_redraws,
                                config.variance_images, config.seed)
    rng = np.random.default_rng([config.seed, 5])
    implementation = {**symbolic_checks(), **numeric_checks(config.monotonicity_instances, rng)}
    _, test_world = tr.load_world(settings, record["seed"])     # the images the final metrics are taken on
    oracle = float(oracle_success(test_world, settings.horizon, settings.human_slope).mean())
    return Result(settings=record["settings"], arms=arms, seeds=train_seeds, final=final, curves=curves,
                  curve_iterations=np.array(record["curve_iterations"]), labels_per_model=record["labels_per_model"],
                  variance=variance, implementation=implementation, oracle_success=oracle)


def example_edits(asset_path: str | Path, arms, block_seed: int, image: int = 0) -> dict:
    """One held-out image retouched by the first model of each arm in the block: rendered looks per step."""
    record, policies = tr.load_runs(asset_path)
    settings = tr.Settings(**{**record["settings"], "arms": tuple(record["settings"]["arms"])})
    _, test_world = tr.load_world(settings, record["seed"])
    k = block_seed * settings.seeds_per_block
    rows = [next(i for i, (a, s) in enumerate(zip(record["model_arm"], record["model_seed"])) if a == arm and s == k)
            for arm in arms]
    params = ([w[rows] for w in policies["weights"]], [b[rows] for b in policies["biases"]])
    policy = tr.BatchedPolicy([0] * len(rows))
    one = test_world.subset([image])
    start = torch.as_tensor(one.as_shot, dtype=torch.float32)[None].expand(len(rows), 1, 4).contiguous()
    target = torch.as_tensor(one.target, dtype=torch.float32)[None].expand(len(rows), 1, 4).contiguous()
    ro = tr.rollout(policy, start, target, settings.horizon, torch.Generator().manual_seed(7), params=params)
    m = tr.trajectory_metrics(ro, torch.ones(len(rows)), settings.human_slope)
    neutral = wd.render(one.luma, one.chroma, one.target)[0]
    return dict(arms=list(arms), start=wd.render(one.luma, one.chroma, one.as_shot)[0], target=neutral,
                final=[wd.render(one.luma, one.chroma, ro.final[i].numpy().astype(float))[0] for i in range(len(rows))],
                actions=ro.actions[:, 0].numpy(), alive=ro.alive[:, 0].numpy(), success=m["success"][:, 0].numpy(),
                micro=m["micro"][:, 0].numpy())


# ------------------------------------------------------------------------------------------ statistics
def auc(result: Result, arm: str, iterations: int = AUC_ITERATIONS) -> np.ndarray:
    """Mean success over the eval points in the first ``iterations`` iterations (trapezoid), per seed."""
    it = result.curve_iterations
    keep = it <= min(iterations, it.max())
    y = result.curves[arm]["success"][:, keep]
    x = it[keep]
    return np.trapezoid(y, x, axis=1) / (x[-1] - x[0])


def entropy_at(result: Result, arm: str, fraction: float = ENTROPY_FRACTION) -> np.ndarray:
    """Policy entropy at the eval point nearest ``fraction`` of training, per seed."""
    it = result.curve_iterations
    j = int(np.argmin(np.abs(it - fraction * it.max())))
    return result.curves[arm]["entropy"][:, j]


def measurements(result: Result) -> dict:
    """Every estimate and count a verdict depends on (paired over training seeds, 90 % t intervals
    for the one-sided p < 0.05 comparisons)."""
    F = result.final
    pd_ = lambda a, b: stats.paired_difference(a, b, unit=UNIT, level=LEVEL)   # noqa: E731
    out = {}
    out["premise_success"] = pd_(F["bspar"]["success"], F["b1"]["success"])
    out["premise_proxy"] = pd_(F["b1"]["proxy_gamma1"], F["bspar"]["proxy_gamma1"])
    out["premise_micro"] = pd_(F["b1"]["micro_fraction"], 2 * F["bspar"]["micro_fraction"])
    # the headline: the Bayesian reward against its ablation (raw labels, same prior sampling and
    # anchor) and against itself fed shuffled labels (does the labels' content matter?)
    out["headline_no_bayes"] = pd_(F["bspar"]["success"], F["no_bayes"]["success"])
    out["headline_shuffled"] = pd_(F["bspar"]["success"], F["shuffled"]["success"])
    out["floor"] = stats.mean_interval(F["bspar"]["success"] - DO_NOTHING, unit=UNIT, level=LEVEL)
    out["headline_b2"] = pd_(F["bspar"]["success"], F["b2"]["success"])
    out["headline_b3"] = pd_(F["bspar"]["success"], F["b3"]["success"])
    # a control that must not win: the lower end of the same 90 % interval must not clear 0
    # (equivalently, the one-sided paired t test at 0.05 does not reject)
    out["shuffled_vs_b3"] = pd_(F["shuffled"]["success"], F["b3"]["success"])
    out["gamma0_gap"] = pd_(F["bspar_g0"]["success"], F["b1_g0"]["success"])
    # headroom: the greedy oracle's success above the best comparator of the headline rows, per seed
    best = max(HEADLINE_COMPARATORS, key=lambda a: F[a]["success"].mean())
    out["headroom_arm"] = best
    out["headroom"] = stats.mean_interval(result.oracle_success - F[best]["success"], unit=UNIT, level=LEVEL)
    v = result.variance
    out["variance_ratio"] = stats.mean_interval(v["ratio"], unit=UNIT, level=LEVEL)
    out["variance_control"] = stats.mean_interval(v["control_ratio"], unit=UNIT, level=LEVEL)
    h_none = entropy_at(result, "no_anchor")
    out["collapsed_seeds"] = int((h_none < tr.COLLAPSE_ENTROPY).sum())
    for reading, arm in (("nll", "bspar"), ("ema", "bspar_ema")):
        out[f"anchor_{reading}_entropy"] = stats.mean_interval(entropy_at(result, arm) / h_none, unit=UNIT, level=LEVEL)
        out[f"anchor_{reading}_success"] = pd_(F[arm]["success"], F["no_anchor"]["success"])
    out["prior_auc"] = pd_(auc(result, "bspar"), auc(result, "no_prior"))
    out["uniform_prior_auc"] = pd_(auc(result, "uniform_prior"), auc(result, "no_prior"))
    return out
