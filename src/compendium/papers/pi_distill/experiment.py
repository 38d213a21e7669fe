"""The chapter's experiment: evaluate the trained policies, pick the grid point on validation mazes,
and compute every number a verdict depends on (intervals over training seeds, ``compendium.stats``)."""

from __future__ import annotations

from dataclasses import dataclass, field

import networkx as nx
import numpy as np
import torch

from compendium.rl import grpo_loss
from compendium.stats import Estimate, mean_interval, paired_difference, spearman
from compendium.validation import require_int, require_number

from . import losses
from .maze import PI_KINDS, generate_mazes, make_pi, maze_keys, step_positions
from .policy import PISlotPolicy
from .training import AssetSettings, evaluate, maze_tensors, rollout, teacher_student_kl, train_pool

__all__ = ["Config", "Result", "run", "measurements", "select_grid_point", "select_init", "seed_values", "curve_runs",
           "degeneracy_gaps", "shared_parameter_check", "kl_checks", "bfs_expert_gap", "kv_cache_gap"]

UNIT = "training seeds"


@dataclass(frozen=True)
class Config:
    """Evaluation settings and the criteria's margins (fixed by the issue before any run).

    Parameters
    ----------
    seed : int
        Draws the validation and test mazes and their PI (the trained policies are the asset's).
    val_mazes, test_mazes : int
        Held-out mazes for the grid selection and for every reported success rate.
    bc_margin, grpo_margin : float
        Smallest gains of the headline over BC and over student-only GRPO (success, 0-1 scale).
    noninferiority_margin : float
        How much worse than "SFT w/ CoT + RL" still counts as matching.
    control_margin : float
        The random-PI control's band around student-only GRPO.
    headroom_max : float
        The strongest baseline's success must stay below this (the task is not saturated).
    w1_margin : float
        Smallest gain of the w = 1 student over the clipped-weight student (the declared hypothesis).
    """

    seed: int = 0
    val_mazes: int = 100
    test_mazes: int = 200
    bc_margin: float = 0.05
    grpo_margin: float = 0.10
    noninferiority_margin: float = 0.02
    control_margin: float = 0.03
    headroom_max: float = 0.9
    w1_margin: float = 0.05

    def __post_init__(self):
        require_int("seed", self.seed, 0, 2**31 - 1)
        require_int("val_mazes", self.val_mazes, 10, 5000)
        require_int("test_mazes", self.test_mazes, 10, 5000)
        for name in ("bc_margin", "grpo_margin", "noninferiority_margin", "control_margin", "headroom_max", "w1_margin"):
            require_number(name, getattr(self, name), 0.0, 1.0)


@dataclass
class Result:
    """Per trained model (rows in ``recipes`` order): success on every held-out maze and the KL."""

    recipes: list
    val: np.ndarray                  # (R, val_mazes) student success, greedy, PI masked
    test: np.ndarray                 # (R, test_mazes)
    teacher_test: np.ndarray         # (R, test_mazes) the same network with the PI shown
    kl: np.ndarray                   # (R,) mean per-turn KL(teacher || student) on teacher rollouts, val mazes
    curves: dict                     # recipe name -> {"step", "student_success", "kl"} from training
    settings: AssetSettings
    selected: dict = field(default_factory=dict)   # PI kind -> (alpha, beta) picked on validation
    selected_init: dict = field(default_factory=dict)  # (baseline, PI kind) -> 'base' or 'scratch'
    held_out: dict = field(default_factory=dict)   # the test mazes and their PI ('test', 'test_pis'), for re-trained arms


def run(config: Config, chunks: list, meta: dict) -> Result:
    """Evaluate every trained policy on fresh validation and test mazes (disjoint from training)."""
    st = meta["settings_obj"]
    pool, _ = train_pool(st, meta["seed"])
    rng = np.random.default_rng([config.seed, 29, 7])
    val = generate_mazes(config.val_mazes, st.size, st.horizon, st.wall_density, rng, exclude=maze_keys(pool))
    test = generate_mazes(config.test_mazes, st.size, st.horizon, st.wall_density, rng,
                          exclude=maze_keys(pool) | maze_keys(val))
    val_pis = {k: make_pi(val, k, rng) for k in PI_KINDS}
    test_pis = {k: make_pi(test, k, rng) for k in PI_KINDS}
    gen = torch.Generator().manual_seed(int(config.seed))
    recipes, parts, curves = [], {"val": [], "test": [], "teacher": [], "kl": []}, {}
    for (policy, chunk), info in zip(chunks, meta["chunks"]):
        recipes += chunk
        parts["val"].append(evaluate(policy, val, val_pis, chunk, show_pi=False))
        parts["test"].append(evaluate(policy, test, test_pis, chunk, show_pi=False))
        parts["teacher"].append(evaluate(policy, test, test_pis, chunk, show_pi=True))
        parts["kl"].append(teacher_student_kl(policy, val, val_pis, chunk, generator=gen))
        c = info["log"]["curves"]
        for j, r in enumerate(chunk):
            curves[r.name] = {"step": c["step"], "student_success": [v[j] for v in c["student_success"]],
                              "kl": [v[j] for v in c["kl"]]}
    res = Result(recipes, *(np.concatenate(parts[k]) for k in ("val", "test", "teacher", "kl")), curves, st)
    res.held_out = {"test": test, "test_pis": test_pis}
    res.selected = {pi: select_grid_point(res, pi) for pi in st.pi_kinds}
    res.selected_init = {(r.method, r.pi): select_init(res, r.method, r.pi) for r in recipes if r.method != "pi_distill"}
    return res


def _rows(res: Result, method: str, pi: str = "", alpha=None, beta=None, init=None) -> list[int]:
    if init is None:
        init = res.selected_init.get((method, pi), "base")
    rows = [i for i, r in enumerate(res.recipes) if r.method == method and r.pi == pi and r.init == init
            and (alpha is None or r.alpha == alpha) and (beta is None or r.beta == beta)]
    return sorted(rows, key=lambda i: res.recipes[i].seed)


def seed_values(res: Result, method: str, pi: str = "", alpha=None, beta=None, *, split: str = "test",
                init=None) -> np.ndarray:
    """Mean success over the split's mazes, one value per training seed (seed order); a baseline at
    the start picked on validation unless ``init`` names one."""
    table = {"test": res.test, "val": res.val, "teacher": res.teacher_test}[split]
    return np.array([table[i].mean() for i in _rows(res, method, pi, alpha, beta, init)])


def select_init(res: Result, method: str, pi: str) -> str:
    """The start ('base' or 'scratch') of a baseline with the better mean validation success."""
    scores = {init: seed_values(res, method, pi, split="val", init=init) for init in ("base", "scratch")}
    scores = {k: v.mean() for k, v in scores.items() if v.size}
    return max(scores, key=lambda k: (scores[k], k == "base"))


def curve_runs(res: Result, method: str, pi: str = "", alpha=None, beta=None) -> list[dict]:
    """The training curves of a method's selected variant, one per training seed."""
    return [res.curves[res.recipes[i].name] for i in _rows(res, method, pi, alpha, beta)]


def select_grid_point(res: Result, pi: str) -> tuple[float, float]:
    """The (alpha, beta) of pi_distill with the best mean validation success over seeds (grid order breaks ties)."""
    grid = [(a, b) for a in res.settings.alphas for b in res.settings.betas]
    scores = [seed_values(res, "pi_distill", pi, a, b, split="val").mean() for a, b in grid]
    return grid[int(np.argmax(scores))]


def measurements(res: Result, config: Config) -> dict:
    """Every estimate the ledger needs (paired over training seeds)."""
    def pd(pi, split="test"):
        a, b = res.selected[pi]
        return seed_values(res, "pi_distill", pi, a, b, split=split)

    grpo, cot = seed_values(res, "grpo"), seed_values(res, "cot_rl")
    bc_noisy = seed_values(res, "bc", "noisy")
    out = {
        "vs_bc": paired_difference(pd("noisy"), bc_noisy, level=0.90, unit=UNIT),
        "vs_grpo": paired_difference(pd("noisy"), grpo, level=0.90, unit=UNIT),
        "vs_cot": paired_difference(pd("full"), cot, level=0.90, unit=UNIT),
        "random_vs_grpo": paired_difference(pd("random"), grpo, level=0.95, unit=UNIT),
        "random_vs_grpo_90": paired_difference(pd("random"), grpo, level=0.90, unit=UNIT),
    }
    baselines = {"bc (noisy PI)": bc_noisy, "student-only GRPO": grpo, "SFT w/ CoT + RL": cot}
    best = max(baselines, key=lambda k: baselines[k].mean())
    out["headroom"], out["headroom_method"] = mean_interval(baselines[best], unit=UNIT), best
    a_n, _ = res.selected["noisy"]
    kl0 = np.array([res.kl[i] for i in _rows(res, "pi_distill", "noisy", a_n, 0.0)])
    kl1 = np.array([res.kl[i] for i in _rows(res, "pi_distill", "noisy", a_n, 0.1)])
    out["kl_beta0"], out["kl_beta01"], out["kl_lower_seeds"] = kl0, kl1, int(np.sum(kl1 < kl0))
    # KL against the student's gain over GRPO, over every pi_distill model (reported, no threshold)
    rows = [i for i, r in enumerate(res.recipes) if r.method == "pi_distill"]
    gain = np.array([res.test[i].mean() - grpo[res.recipes[i].seed] for i in rows])
    if np.ptp(gain) > 0 and np.ptp(res.kl[rows]) > 0:
        out["kl_gain_rho"], out["kl_gain_p"] = spearman(res.kl[rows], gain, unit="trained models", alternative="less")
    else:                                   # a constant column has no rank correlation
        out["kl_gain_rho"], out["kl_gain_p"] = Estimate(float("nan"), 0.0, 0.0, 0.9, "trained models", len(rows)), float("nan")
    out["teacher_uses_pi"] = paired_difference(pd("full", "teacher"), pd("full"), level=0.90, unit=UNIT)
    return out


# ------------------------------------------------------------------------- implementation checks
def _batch(n=6, t=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    logp_T = torch.log_softmax(torch.randn(n, t, 5, generator=g, dtype=torch.float64), -1)[..., 0]
    logp_S = torch.log_softmax(torch.randn(n, t, 5, generator=g, dtype=torch.float64), -1)[..., 0]
    adv = torch.randn(n, generator=g, dtype=torch.float64)
    mask = (torch.rand(n, t, generator=g) > 0.2).double()
    mask[:, 0] = 1
    kl = torch.rand(n, t, generator=g, dtype=torch.float64)
    return logp_T.requires_grad_(), logp_S.requires_grad_(), adv, mask, kl


def degeneracy_gaps() -> dict:
    """Max |gap| of the objective's limits on a fixed float64 batch: alpha = 1, beta = 0 against the
    shared GRPO loss; alpha = 0 against the student off-policy loss; OPSD with beta = 0 against GRPO."""
    lt, ls, adv, mask, kl = _batch()
    grpo_T = grpo_loss(lt, lt.detach(), adv, mask=mask, reduction="none").loss
    grpo_S = grpo_loss(ls, ls.detach(), adv, mask=mask, reduction="none").loss
    reward = (adv > 0).double()
    a1 = losses.pi_distill_loss(lt, ls, adv, reward, mask, kl_T_S=kl, alpha=1.0, beta=0.0)
    a0 = losses.pi_distill_loss(lt, ls, adv, reward, mask, kl_T_S=kl, alpha=0.0, beta=0.1)
    op = losses.opsd_loss(ls, adv, mask, kl_S_T=kl, beta=0.0)
    g1 = torch.autograd.grad(a1.mean(), lt, retain_graph=True)[0]
    g_ref = torch.autograd.grad(grpo_T.mean(), lt, retain_graph=True)[0]
    a1, a0, op, grpo_T, grpo_S = (x.detach() for x in (a1, a0, op, grpo_T, grpo_S))
    return {"alpha1_beta0_vs_grpo": float((a1 - grpo_T).abs().max()),
            "alpha1_beta0_grad_vs_grpo": float((g1 - g_ref).abs().max()),
            "alpha0_vs_offpolicy": float((a0 - losses.student_offpolicy_loss(ls, lt, reward, mask).detach()).abs().max()),
            "opsd_beta0_vs_grpo": float((op - grpo_S).abs().max())}


def _tiny(seed=0, models=1):
    mazes = generate_mazes(4, 4, 8, 0.25, np.random.default_rng(seed))
    policy = PISlotPolicy(models, 4, 8, width=16, layers=1, heads=2, init_seeds=[seed] * models)
    batch = maze_tensors(mazes, np.arange(4)[None].repeat(models, 0))
    pi = batch["trace"]
    return mazes, policy, batch, pi


def shared_parameter_check(seed: int = 0) -> dict:
    """Teacher and student are one module: the same parameters, and one gradient step on a
    teacher-only loss changes the student's logits."""
    mazes, policy, batch, pi = _tiny(seed)
    shape = batch["start"].shape
    yes, no = torch.ones(shape, dtype=torch.bool), torch.zeros(shape, dtype=torch.bool)
    ro = rollout(policy, batch, pi, yes, greedy=False, generator=torch.Generator().manual_seed(seed))
    before, _ = policy(batch["walls"], batch["goal"], pi, no, ro["positions"], ro["prev"])
    logits_T, _ = policy(batch["walls"], batch["goal"], pi, yes, ro["positions"], ro["prev"])
    loss = -(torch.log_softmax(logits_T, -1).gather(-1, ro["actions"][..., None]).squeeze(-1) * ro["mask"]).sum()
    loss.backward()
    with torch.no_grad():                  # one plain SGD step (torch.optim's first import is slow)
        for p in policy.parameters():
            if p.grad is not None:
                p -= 0.1 * p.grad
    with torch.no_grad():
        after, _ = policy(batch["walls"], batch["goal"], pi, no, ro["positions"], ro["prev"])
        teacher_after, _ = policy(batch["walls"], batch["goal"], pi, yes, ro["positions"], ro["prev"])
    return {"parameters": sum(p.numel() for p in policy.parameters()),
            "teacher_logit_change": float((teacher_after - logits_T.detach()).abs().max()),
            "student_logit_change": float((after - before.detach()).abs().max())}


def kl_checks(seed: int = 0) -> dict:
    """KL >= 0 on random logits; exactly 0 between the two views when the PI is masked on both."""
    g = torch.Generator().manual_seed(seed)
    p, q = torch.randn(2000, 5, generator=g) * 3, torch.randn(2000, 5, generator=g) * 3
    _, policy, batch, pi = _tiny(seed)
    shape = batch["start"].shape
    no = torch.zeros(shape, dtype=torch.bool)
    with torch.no_grad():
        ro = rollout(policy, batch, pi, no, greedy=True)
        a, _ = policy(batch["walls"], batch["goal"], pi, no, ro["positions"], ro["prev"])
        b, _ = policy(batch["walls"], batch["goal"], None, None, ro["positions"], ro["prev"])
    return {"min_kl_random": float(losses.action_kl(p, q).min()), "masked_both_kl": float(losses.action_kl(a, b).abs().max())}


def bfs_expert_gap(settings: AssetSettings, seed: int, count: int = 200) -> dict:
    """The expert trace reaches the goal and its length equals networkx's shortest path (max |gap|)."""
    mazes = generate_mazes(count, settings.size, settings.horizon, settings.wall_density, np.random.default_rng([seed, 29, 9]))
    n, gaps, reached = settings.size, [], 0
    for i in range(count):
        grid = nx.grid_2d_graph(n, n)
        grid.remove_nodes_from([(r, c) for r in range(n) for c in range(n) if mazes.walls[i, r, c]])
        s, g = divmod(int(mazes.start[i]), n), divmod(int(mazes.goal[i]), n)
        gaps.append(abs(nx.shortest_path_length(grid, s, g) - int(mazes.length[i])))
        pos = torch.tensor(int(mazes.start[i]))
        walls = torch.from_numpy(mazes.walls[i].ravel())
        for a in mazes.trace[i][: mazes.length[i]]:
            pos = step_positions(walls, pos, torch.tensor(int(a)), n)
        reached += int(pos == int(mazes.goal[i]))
    return {"max_length_gap": int(max(gaps)), "reached": reached, "mazes": count}


def kv_cache_gap(seed: int = 0) -> float:
    """Max |logit gap| between the cached rollout and one full forward pass over the same episodes."""
    _, policy, batch, pi = _tiny(seed, models=2)
    shape = batch["start"].shape
    show = torch.rand(shape, generator=torch.Generator().manual_seed(seed)) > 0.5
    gaps = []
    logits_steps = []
    orig_step = policy.step

    def spy(cache, walls, goal, positions, prev, turn):
        out = orig_step(cache, walls, goal, positions, prev, turn)
        logits_steps.append(out)
        return out

    policy.step = spy
    ro = rollout(policy, batch, pi, show, greedy=False, generator=torch.Generator().manual_seed(seed + 1))
    del policy.step
    with torch.no_grad():
        full, _ = policy(batch["walls"], batch["goal"], pi, show, ro["positions"], ro["prev"])
    for t, lg in enumerate(logits_steps):
        gaps.append(float((full[:, :, t] - lg).abs().max()))
    return max(gaps)
