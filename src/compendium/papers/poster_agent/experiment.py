"""The chapter's experiment: greedy evaluation of every trained arm on held-out prompts, the
compute-matched best-of-(K + 1) baseline, the oracle refiner (headroom), every estimate a verdict
depends on, and the implementation checks.

The unit of replication of every interval is the training seed: each arm's six models are
trained from their own initialisation on their own prompt stream, each is summarised by its mean
over the held-out prompts, and intervals are Student-t over those per-model means (paired by
training seed where two arms are compared: seed ``i`` of every arm shares its initialisation seed
and its training-prompt stream). The prompt-level intervals inside each model are kept as details.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from compendium.rl import group_advantages
from compendium.stats import Estimate, mean_interval, paired_difference
from compendium.validation import require_int, require_number

from .env import NUM_BINS, SLOTS, LayoutEnv, Prompts, reward
from .policy import LayoutPolicy
from .training import ARMS, Settings, arm_loss, best_of_drafts, collect, evaluate, oracle_refine

__all__ = ["Config", "Result", "run", "measurements", "per_seed", "weakest", "telescoping_gap", "advantage_checks",
           "component_range", "determinism_gap", "k0_gradient_gap", "UNIT", "PROMPT_UNIT", "FLOOR_MARGIN",
           "DEGENERATE_MAX"]

UNIT = "training seeds"
PROMPT_UNIT = "held-out prompts"
#: Non-degeneracy: at most this share of SARL's greedy edits may change nothing (dR = 0, no-ops included).
DEGENERATE_MAX = 0.5
#: The learned-model floor: a trained arm's final R must beat uniformly random layouts by this much.
FLOOR_MARGIN = 0.05
RANDOM_LAYOUTS = 16          # random layouts per held-out prompt for the floor's chance reward


@dataclass(frozen=True)
class Config:
    """Evaluation settings and the criteria's margins (fixed before any run).

    Parameters
    ----------
    seed : int
        Draws the held-out prompts and the sampled drafts of the best-of baseline (the trained
        policies are the asset's).
    test_prompts : int
        Held-out prompts (the issue: 500), averaged within each trained model.
    reward_margin : float
        Smallest effect of interest on R (in [0, 1]) for the headline and the one-shot claim, and
        the least gain the oracle refiner must find over the stronger baseline (headroom).
    """

    seed: int = 0
    test_prompts: int = 500
    reward_margin: float = 0.01

    def __post_init__(self):
        require_int("seed", self.seed, 0, 2**31 - 1)
        require_int("test_prompts", self.test_prompts, 20, 20000)
        require_number("reward_margin", self.reward_margin, 0.0, 0.5)


@dataclass
class Result:
    """Greedy episodes per arm (``R`` (M, N, K + 1), ``dR`` (M, N, K), ``layouts``), the best-of
    baseline (``best_of`` (M, N)), the held-out prompts, the asset's settings and curves, and the
    oracle refiner's rewards from each baseline's final layouts (``oracle`` {name: (M, N, K + 1)})."""

    episodes: dict
    best_of: np.ndarray
    prompts: object
    settings: Settings
    curves: dict
    samples_per_update: dict
    components: dict
    random_layout: np.ndarray | None = None    # (N,) mean R of uniformly random layouts per prompt
    oracle: dict | None = None


def run(config: Config, policies: dict, meta: dict) -> Result:
    """Evaluate every arm on fresh held-out prompts (a stream disjoint from the training seeds')."""
    st = meta["settings_obj"]
    prompts = LayoutEnv(st.min_elements, st.max_elements, seed=[config.seed, 4242]).sample(config.test_prompts)
    episodes = {arm: evaluate(policies[arm], prompts, st.refine_steps) for arm in ARMS}
    gen = torch.Generator().manual_seed(int(config.seed) * 7 + 3)
    best = best_of_drafts(policies["one_shot"], prompts, st.refine_steps + 1, gen)
    comps = {}
    m = st.num_seeds
    pm = Prompts(*(np.broadcast_to(a, (m,) + a.shape)[:, :, None] for a in (prompts.present, prompts.value, prompts.kappa)))
    for arm in ARMS:
        _, parts = reward(pm, episodes[arm]["layouts"], components=True)       # (M, N, K + 1) each
        comps[arm] = parts
    # chance: uniformly random layouts (every box bin drawn uniformly), the same for every model
    lay = np.random.default_rng([config.seed, 4243]).integers(0, NUM_BINS, size=(len(prompts), RANDOM_LAYOUTS, len(SLOTS), 4))
    random_layout = reward(prompts.expand(1), lay).mean(-1)                     # (N,)
    # headroom: K oracle edits (the best true dR of all edits) from each baseline's final layouts
    oracle = {"trajectory GRPO": oracle_refine(prompts, episodes["trajectory"]["layouts"][:, :, -1], st.refine_steps),
              "best of K+1 one-shot drafts": oracle_refine(prompts, best["layouts"], st.refine_steps)}
    return Result(episodes, best["best"], prompts, st, {a: meta["arms"][a]["curve"] for a in ARMS},
                  {a: meta["arms"][a]["samples_per_update"] for a in ARMS}, comps, random_layout, oracle)


def per_seed(fn, *arrays) -> list[Estimate]:
    """``fn`` applied to each training seed's slice of the (M, N) arrays (prompt-level details)."""
    return [fn(*(a[i] for a in arrays)) for i in range(arrays[0].shape[0])]


def weakest(estimates: list[Estimate]) -> tuple[Estimate, int]:
    """The estimate with the lowest interval end, and its seed index."""
    i = int(np.argmin([e.low for e in estimates]))
    return estimates[i], i


def measurements(res: Result) -> dict:
    """Every estimate the ledger needs: 95 % t intervals over training seeds of per-model means
    over the held-out prompts (``<key>``), and each model's own interval over prompts
    (``<key>_by_seed``, details only)."""
    ep = res.episodes
    final = {a: ep[a]["R"][:, :, 0 if a == "one_shot" else -1] for a in ARMS}     # the one-shot arm does not refine
    step_mean = {a: ep[a]["dR"].mean(-1) for a in ARMS if ep[a]["dR"].shape[-1]}           # (M, N)
    neg_frac = {a: (ep[a]["dR"] < 0).mean(-1) for a in ARMS if ep[a]["dR"].shape[-1]}
    zero_frac = {a: (ep[a]["dR"] == 0).mean(-1) for a in ARMS if ep[a]["dR"].shape[-1]}    # edits that changed nothing
    pdiff = lambda a, b: paired_difference(a.mean(-1), b.mean(-1), level=0.95, unit=UNIT)  # noqa: E731
    mint = lambda a: mean_interval(a.mean(-1), level=0.95, unit=UNIT)                       # noqa: E731
    pdiff_p = lambda a, b: paired_difference(a, b, level=0.95, unit=PROMPT_UNIT)           # noqa: E731
    mint_p = lambda a: mean_interval(a, level=0.95, unit=PROMPT_UNIT)                       # noqa: E731
    pairs = {
        "sarl_vs_traj": (final["sarl"], final["trajectory"]),
        "traj_more_negative": (neg_frac["trajectory"], neg_frac["sarl"]),
        "sarl_vs_best_of": (final["sarl"], res.best_of),
        "permuted_vs_traj": (final["sarl_permuted"], final["trajectory"]),
        "no_norm_vs_sarl": (final["sarl_no_norm"], final["sarl"]),
    }
    singles = {"sarl_step_dR": step_mean["sarl"], "permuted_step_dR": step_mean["sarl_permuted"],
               "traj_step_dR": step_mean["trajectory"], "sarl_zero_share": zero_frac["sarl"]}
    out = {}
    for key, (a, b) in pairs.items():
        out[key], out[f"{key}_by_seed"] = pdiff(a, b), per_seed(pdiff_p, a, b)
    for key, a in singles.items():
        out[key], out[f"{key}_by_seed"] = mint(a), per_seed(mint_p, a)
    if res.random_layout is not None:     # the learned-model floor: SARL and trajectory GRPO against random layouts
        chance = np.broadcast_to(res.random_layout, final["sarl"].shape)
        out["floor"] = {a: pdiff(final[a], chance) for a in ("sarl", "trajectory")}
    baselines = {"trajectory GRPO": final["trajectory"].mean(1), "best of K+1 one-shot drafts": res.best_of.mean(1)}
    best = max(baselines, key=lambda k: baselines[k].mean())
    out["headroom_method"] = best
    if res.oracle is not None:            # what K oracle edits add to the stronger baseline's final layouts
        o = res.oracle[best]
        out["oracle_gain"] = mean_interval((o[..., -1] - o[..., 0]).mean(-1), level=0.95, unit=UNIT)
        out["oracle_final"] = {k: v[..., -1].mean(1) for k, v in res.oracle.items()}
    out["final_means"] = {a: final[a].mean(1) for a in ARMS} | {"best_of": res.best_of.mean(1)}
    out["draft_means"] = {a: ep[a]["R"][:, :, 0].mean(1) for a in ARMS}
    out["step_means"] = {a: ep[a]["dR"].mean(1) for a in ARMS}                         # (M, K)
    out["neg_frac"] = {a: neg_frac[a].mean(1) for a in neg_frac}
    out["noop_frac"] = {a: (ep[a]["actions"] == len(SLOTS) * 8).mean((1, 2)) for a in ARMS if ep[a]["dR"].shape[-1]}
    out["zero_frac"] = {a: zero_frac[a].mean(1) for a in zero_frac}
    return out


# ------------------------------------------------------------------------- implementation checks
def telescoping_gap(res: Result) -> float:
    """Max over every logged greedy episode of |sum_k dR_k - (R(L_K) - R(L_0))|, with dR as the
    environment returned it for each edit and R recomputed from the layouts."""
    gaps = [np.abs(ep["dR"].sum(-1) - (ep["R"][..., -1] - ep["R"][..., 0])).max() for ep in res.episodes.values()]
    return float(max(gaps))


def advantage_checks(st: Settings, seed: int = 0) -> dict:
    """On one SARL batch of a fresh policy: the draft groups (R(L_0), the shared
    ``group_advantages``) and the refine groups (dR, ``refine_advantages``), logged.

    Returns the largest |group mean| and |group std - s / (s + 1e-4)| of the draft advantages
    (zero mean, unit std up to trl's eps), the largest |refine advantage - dR / (s + 1e-4)| and the
    largest |advantage| of an edit that changed nothing (dR = 0 -> exactly 0), the largest
    |advantage| in tied groups of either kind (a tied group of each kind is appended), and counts."""
    from .training import _refine_step, refine_advantages
    policy = LayoutPolicy(1, st.hidden, [seed])
    prompts = LayoutEnv(st.min_elements, st.max_elements, seed=[seed, 3]).sample((1, 16))
    gen, rng = torch.Generator().manual_seed(seed), np.random.default_rng(seed)
    b = collect("sarl", policy, prompts, st, gen, rng)
    draft = np.concatenate([b["r0"].reshape(-1, st.group_size), np.full((1, st.group_size), 0.5)])
    refine = []
    state = b["draft"][0][:, :, 0]
    pg = prompts.expand(1)
    for k in range(st.refine_steps):
        tiled = np.broadcast_to(state[:, :, None], state.shape[:2] + (st.group_size,) + state.shape[2:])
        step = _refine_step(policy, pg, tiled, k / st.refine_steps, gen)
        refine.append(step["delta"].reshape(-1, st.group_size))
        state = step["new"][:, :, 0]
    refine = np.concatenate(refine + [np.zeros((1, st.group_size))])
    adv = group_advantages(torch.as_tensor(draft, dtype=torch.float64)).numpy()
    radv = refine_advantages(refine).numpy()
    s, rs = draft.std(-1, ddof=1), refine.std(-1, ddof=1)
    tied, rtied = np.ptp(draft, axis=-1) == 0, np.ptp(refine, axis=-1) == 0
    zero = (refine == 0) & ~rtied[:, None]
    return {"max_abs_mean": float(np.abs(adv[~tied].mean(-1)).max()),
            "max_std_gap": float(np.abs(adv[~tied].std(-1, ddof=1) - s[~tied] / (s[~tied] + 1e-4)).max()),
            "max_refine_gap": float(np.abs(radv[~rtied] - refine[~rtied] / (rs[~rtied, None] + 1e-4)).max()),
            "max_zero_edit_adv": float(np.abs(radv[zero]).max()) if zero.any() else 0.0, "zero_edits": int(zero.sum()),
            "max_tied_adv": float(max(np.abs(adv[tied]).max(), np.abs(radv[rtied]).max())),
            "tied_groups": int(tied.sum() + rtied.sum()), "groups": int(len(draft)), "refine_groups": int(len(refine))}


def component_range(res: Result) -> tuple[float, float]:
    """Smallest and largest reward component over every evaluated layout of every arm."""
    vals = np.concatenate([np.ravel(v) for c in res.components.values() for v in c.values()])
    return float(vals.min()), float(vals.max())


def determinism_gap(min_elements: int, max_elements: int, seed: int = 0) -> float:
    """Two environments with the same seed: max |gap| of prompts, hidden kappa and the rewards of
    the same random layouts (0 when deterministic); a different seed must differ (checked in tests)."""
    out = []
    for _ in range(2):
        env = LayoutEnv(min_elements, max_elements, seed=seed)
        p = env.sample(64)
        lay = np.random.default_rng(seed).integers(0, NUM_BINS, size=(64, len(SLOTS), 4))
        out.append(np.concatenate([p.present.ravel(), p.value.ravel(), p.kappa, reward(p, lay)]))
    return float(np.abs(out[0] - out[1]).max())


def k0_gradient_gap(st: Settings, seed: int = 0) -> float:
    """With K = 0 refinements, max |gradient gap| between the trajectory-GRPO and SARL losses on the
    same sampled drafts (float64)."""
    grads = []
    for arm in ("trajectory", "sarl"):
        policy = LayoutPolicy(2, st.hidden, [seed, seed + 1]).double()
        prompts = LayoutEnv(st.min_elements, st.max_elements, seed=[seed, 8]).sample((2, 4))
        gen, rng = torch.Generator().manual_seed(seed), np.random.default_rng(seed)
        batch = collect(arm, policy, prompts, st, gen, rng, refine_steps=0, dtype=torch.float64)
        loss = arm_loss(policy, batch, prompts, st, dtype=torch.float64)
        grads.append(torch.cat([g.reshape(-1) for g in torch.autograd.grad(loss, list(policy.drafter.parameters()))]))
    return float((grads[0] - grads[1]).abs().max())

