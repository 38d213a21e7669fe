"""Rollouts, the lock-step trainer of every method, evaluation and the trained-policy asset.

Every method is one recipe (``Recipe``): where its episodes come from in each phase (teacher
rollouts with PI, student rollouts without, or a replayed trace) and the weights of seven loss
terms. All recipes of a chunk train in lock step as one :class:`PISlotPolicy` with a model axis,
at the same env-steps (episodes x turns) and gradient steps, through ``compendium.training.fit``.

==============  ============================  =====================================================
method          episodes                      loss (per episode, see ``losses``)
==============  ============================  =====================================================
pi_distill      teacher rollouts              alpha (GRPO_T + beta KL(T||sg S)) + (1-alpha) offpolicy_S(R)
grpo            student rollouts              GRPO_S (no PI anywhere)
opsd            student rollouts              GRPO_S + beta KL(S||sg T)
bc              replayed PI trace             -log pi_S(PI action)
cot_rl          expert trace, then student    BC on the expert + BFS-distance head (first half); GRPO_S
sequential      teacher rollouts              GRPO_T (first half); offpolicy_S with alpha = 0
==============  ============================  =====================================================
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import torch

from compendium.rl import group_advantages
from compendium.training import TrainSpec, fit, torch_threads

from . import losses
from .maze import PAD, PI_KINDS, STOP, Mazes, generate_mazes, make_pi, maze_keys, step_positions
from .policy import BOS, PISlotPolicy

__all__ = ["neighbour_distances", "pretrain_base", "Recipe", "AssetSettings", "settings_for", "recipes_for", "maze_tensors", "rollout",
           "train_chunk", "evaluate", "teacher_student_kl", "build_asset", "load_policies", "train_pool",
           "ASSET_NAME", "METHODS", "TERMS"]

ASSET_NAME = "pi_distill_policies"
METHODS = ("pi_distill", "grpo", "opsd", "bc", "cot_rl", "sequential")
TERMS = ("grpo_T", "kl_T", "offpolicy_S", "grpo_S", "kl_S", "bc", "distance_map")
TEACHER, STUDENT, REPLAY_PI, REPLAY_EXPERT = range(4)
TEACHER_TERMS = [TERMS.index(t) for t in ("grpo_T", "kl_T", "offpolicy_S", "kl_S")]   # need the teacher view


@dataclass(frozen=True)
class Recipe:
    """One trained model: method, PI kind ('' for none), alpha, beta, training seed and start
    ('base': the seed's context-reading base; 'scratch': its random initialisation)."""

    method: str
    pi: str
    alpha: float
    beta: float
    seed: int
    init: str = "base"

    @property
    def name(self) -> str:
        extra = f"_a{self.alpha:g}_b{self.beta:g}" if self.method == "pi_distill" else ""
        start = "_scratch" if self.init == "scratch" else ""
        return f"{self.method}{'_' + self.pi if self.pi else ''}{extra}{start}_s{self.seed}"

    def phase(self, step: int, switch: int) -> tuple[int, dict]:
        """(episode source, {term: weight}) at ``step`` (the two-phase methods change at ``switch``)."""
        first = step < switch
        if self.method == "pi_distill":
            return TEACHER, {"grpo_T": self.alpha, "kl_T": self.alpha * self.beta, "offpolicy_S": 1 - self.alpha}
        if self.method == "grpo":
            return STUDENT, {"grpo_S": 1.0}
        if self.method == "opsd":
            return STUDENT, {"grpo_S": 1.0, "kl_S": self.beta}
        if self.method == "bc":
            return REPLAY_PI, {"bc": 1.0}
        if self.method == "cot_rl":
            return (REPLAY_EXPERT, {"bc": 1.0, "distance_map": 1.0}) if first else (STUDENT, {"grpo_S": 1.0})
        if self.method == "sequential":
            return TEACHER, ({"grpo_T": 1.0} if first else {"offpolicy_S": 1.0})
        raise ValueError(f"method must be one of {METHODS}, got {self.method!r}")


@dataclass(frozen=True)
class AssetSettings:
    """Everything the asset's training depends on (``settings_for`` picks them per scale).

    ``bc_kinds`` and ``distill_kinds`` are the PI kinds that BC and that the sequential and OPSD
    baselines run on (all of ``pi_kinds`` at full scale; fewer at smoke scale, for time).
    """

    size: int
    horizon: int
    wall_density: float
    train_mazes: int
    steps: int
    mazes_per_step: int
    group_size: int
    width: int
    layers: int
    heads: int
    learning_rate: float
    num_seeds: int
    pi_kinds: tuple
    bc_kinds: tuple
    distill_kinds: tuple
    alphas: tuple = (0.25, 0.5, 0.75)
    betas: tuple = (0.0, 0.1)
    opsd_beta: float = 0.1
    is_clip: float = 5.0
    switch_fraction: float = 0.5
    pretrain_steps: int = 60
    curve_every: int = 20
    curve_mazes: int = 64
    chunk_models: int = 64


def settings_for(scale: str) -> AssetSettings:
    """Smoke: 4x4 mazes, PI kinds full / noisy / random, alpha = 0.5 only, baselines on fewer kinds;
    full: the issue's 6x6 mazes with horizon 14, all four kinds, the whole (alpha, beta) grid."""
    if scale == "smoke":
        return AssetSettings(size=4, horizon=8, wall_density=0.25, train_mazes=400, steps=60, mazes_per_step=4,
                             group_size=8, width=32, layers=1, heads=2, learning_rate=3e-3, num_seeds=5,
                             pi_kinds=("full", "noisy", "random"), bc_kinds=("full", "noisy"),
                             distill_kinds=("noisy",), alphas=(0.5,), curve_every=15, curve_mazes=48)
    if scale == "full":
        # the network (d = 96, 3 layers, 6 heads); its rate is the width-32 rate times 32 / 96
        # (a rate inversely proportional to width, fixed before any claim was looked at), and its base
        # is pretrained 200 steps: the fewest of {60, 200, 400} after which every seed's base follows a
        # shown expert trace on >= 90% of held-out mazes (measured 2026-12-05: 0.73-0.87 after 60 steps,
        # 0.96-0.99 after 200). The base's steps are in no method's budget.
        return AssetSettings(size=6, horizon=14, wall_density=0.25, train_mazes=3000, steps=60, mazes_per_step=4,
                             group_size=6, width=96, layers=3, heads=6, learning_rate=1e-3, num_seeds=5,
                             pretrain_steps=200,
                             pi_kinds=PI_KINDS, bc_kinds=PI_KINDS, distill_kinds=PI_KINDS, curve_every=20,
                             curve_mazes=64)
    raise ValueError(f"scale must be 'smoke' or 'full', got {scale!r}")


def recipes_for(settings: AssetSettings) -> list[Recipe]:
    """Every grid point and PI kind of pi_distill, and every baseline, for each training seed."""
    out = []
    for s in range(settings.num_seeds):
        for pi in settings.pi_kinds:
            out += [Recipe("pi_distill", pi, a, b, s) for a in settings.alphas for b in settings.betas]
        base = [Recipe("bc", pi, 0.0, 0.0, s) for pi in settings.bc_kinds]
        for pi in settings.distill_kinds:
            base += [Recipe("opsd", pi, 1.0, settings.opsd_beta, s), Recipe("sequential", pi, 0.0, 0.0, s)]
        base += [Recipe("grpo", "", 0.0, 0.0, s), Recipe("cot_rl", "", 0.0, 0.0, s)]
        # every baseline also from scratch: its start is picked on validation mazes like pi_distill's grid point
        out += base + [replace(r, init="scratch") for r in base]
    return out


def train_pool(settings: AssetSettings, seed: int) -> tuple[Mazes, dict]:
    """The training mazes and their PI of every kind (fixed per maze), from the asset seed."""
    rng = np.random.default_rng([seed, 29, 1])
    pool = generate_mazes(settings.train_mazes, settings.size, settings.horizon, settings.wall_density, rng)
    return pool, {k: make_pi(pool, k, np.random.default_rng([seed, 29, 2, i])) for i, k in enumerate(PI_KINDS)}


def maze_tensors(mazes: Mazes, index: np.ndarray) -> dict:
    """Torch inputs for maze indices ``index`` (M, B): map types, flat walls, start, goal, trace, distance."""
    n2 = mazes.size ** 2
    walls = torch.from_numpy(mazes.walls.reshape(len(mazes), n2)[index])
    types = walls.long()
    start, goal = torch.from_numpy(mazes.start[index]), torch.from_numpy(mazes.goal[index])
    types.scatter_(-1, goal[..., None], 2)
    types.scatter_(-1, start[..., None], 3)
    return {"types": types, "walls": walls, "start": start, "goal": goal,
            "trace": torch.from_numpy(mazes.trace[index]), "distance": torch.from_numpy(mazes.distance[index])}


@torch.no_grad()
def rollout(policy: PISlotPolicy, batch: dict, pi, show_pi, *, greedy: bool, generator=None, forced=None,
            force_rows=None) -> dict:
    """Play ``H`` turns for every model and episode (M, B), with the KV cache.

    ``forced`` (M, B, H) replays a trace where ``force_rows`` (M, B) is True (the episode ends at its
    first ``PAD``). Returns positions and previous actions at each turn, actions, the turn mask and
    success, all (M, B[, H]).
    """
    m, b = batch["start"].shape
    h, n = policy.horizon, policy.size
    replay_only = forced is not None and bool(force_rows.all())
    cache = None if replay_only else policy.start(batch["walls"], pi, show_pi)
    pos, prev = batch["start"].clone(), torch.full((m, b), BOS, dtype=torch.long)
    done = torch.zeros(m, b, dtype=torch.bool)
    success = torch.zeros(m, b, dtype=torch.bool)
    out = {k: torch.zeros(m, b, h, dtype=torch.long) for k in ("positions", "prev", "actions")}
    mask = torch.zeros(m, b, h, dtype=torch.bool)
    for t in range(h):
        out["positions"][..., t], out["prev"][..., t] = pos, prev
        if replay_only:
            a = torch.zeros_like(pos)
        elif greedy:
            logits = policy.step(cache, batch["walls"], batch["goal"], pos, prev, t)
            a = logits.argmax(-1)
        else:
            logits = policy.step(cache, batch["walls"], batch["goal"], pos, prev, t)
            a = torch.multinomial(torch.softmax(logits, -1).reshape(-1, logits.shape[-1]), 1,
                                  generator=generator).view(m, b)
        if forced is not None:
            f = forced[..., t]
            done |= force_rows & (f == PAD)
            a = torch.where(force_rows, torch.where(f == PAD, torch.full_like(f, STOP), f), a)
        live = ~done
        mask[..., t] = live
        out["actions"][..., t] = a
        pos = torch.where(live, step_positions(batch["walls"], pos, a, n), pos)
        reached = live & (pos == batch["goal"])
        success |= reached
        done |= reached | (live & (a == STOP))
        prev = a
    return {**out, "mask": mask, "success": success}


def neighbour_distances(batch: dict, positions: torch.Tensor) -> torch.Tensor:
    """BFS distance to the goal of the U, D, L, R neighbour of every position (M, B, H, 4); -1 where
    the move is blocked (a wall or the border). The target of the CoT analogue's auxiliary head."""
    n = int(round(batch["walls"].shape[-1] ** 0.5))
    r, c = positions // n, positions % n
    out = []
    for dr, dc in ((-1, 0), (1, 0), (0, -1), (0, 1)):
        rr, cc = r + dr, c + dc
        inside = (rr >= 0) & (rr < n) & (cc >= 0) & (cc < n)
        d = batch["distance"].gather(-1, torch.where(inside, rr * n + cc, positions))
        out.append(torch.where(inside, d, torch.full_like(d, -1)))
    return torch.stack(out, -1)


def _log_probs(logits, actions):
    return torch.log_softmax(logits, -1).gather(-1, actions[..., None]).squeeze(-1)


def pretrain_base(pool: Mazes, settings: AssetSettings, seed: int) -> tuple[PISlotPolicy, dict]:
    """One base policy per training seed that has learnt to *read* its PI slot, and nothing about mazes.

    The analogue of a pretrained model that follows instructions in its context: behaviour cloning
    of the teacher view on **random** action traces (fresh each step, replayed in training mazes), so
    the base copies whatever trace it is shown, solution or not. Every method of a training seed
    starts from this base (equal start); its steps are not counted in any method's budget.
    """
    st = settings
    k = st.mazes_per_step * st.group_size
    policy = PISlotPolicy(st.num_seeds, st.size, st.horizon, width=st.width, layers=st.layers, heads=st.heads,
                          init_seeds=[1000 * seed + s for s in range(st.num_seeds)])
    rng = np.random.default_rng([seed, 29, 6])
    rows = torch.ones(st.num_seeds, k, dtype=torch.bool)

    def loss_fn(step: int) -> torch.Tensor:
        index = rng.integers(0, len(pool), size=(st.num_seeds, k))
        batch = maze_tensors(pool, index)
        live = batch["trace"] != PAD
        pi = torch.where(live, torch.from_numpy(rng.integers(0, 4, size=live.shape)), torch.full_like(batch["trace"], PAD))
        ro = rollout(policy, batch, pi, rows, greedy=True, forced=pi, force_rows=rows)
        logits, _ = policy(batch["walls"], batch["goal"], pi, rows, ro["positions"], ro["prev"])
        logp = _log_probs(logits, ro["actions"])
        return losses.bc_loss(logp.reshape(-1, st.horizon), ro["mask"].reshape(-1, st.horizon)).view(st.num_seeds, k).mean(1).sum()

    log = fit(policy, loss_fn, TrainSpec(max_steps=st.pretrain_steps, learning_rate=st.learning_rate, weight_decay=0.0,
                                         threads=1, log_every=max(1, st.pretrain_steps // 5)))
    return policy, log.to_dict()


def train_chunk(recipes: list[Recipe], pool: Mazes, pis: dict, settings: AssetSettings, seed: int,
                curve_mazes: Mazes | None = None, curve_pis: dict | None = None,
                base: PISlotPolicy | None = None) -> tuple[PISlotPolicy, dict]:
    """Train ``recipes`` in lock step, each from ``base``'s model of its training seed (if given);
    return the policy and a log (loss, curves of student success and KL)."""
    st = settings
    m, k, g = len(recipes), st.mazes_per_step, st.group_size
    policy = PISlotPolicy(m, st.size, st.horizon, width=st.width, layers=st.layers, heads=st.heads,
                          init_seeds=[1000 * seed + r.seed for r in recipes])
    if base is not None:
        rows_from_base = [i for i, r in enumerate(recipes) if r.init == "base"]
        with torch.no_grad():
            for (name, p), (_, q) in zip(policy.named_parameters(), base.named_parameters()):
                p[rows_from_base] = q[[recipes[i].seed for i in rows_from_base]]
    seeds = sorted({r.seed for r in recipes})
    streams = {s: np.random.default_rng([seed, 29, 3, s]) for s in seeds}   # one maze stream per training seed
    gen = torch.Generator().manual_seed(int(seed * 7919 + sum(r.seed for r in recipes) + m))
    pi_pool = torch.stack([torch.from_numpy(pis[r.pi] if r.pi else pis["full"]) for r in recipes])  # (M, N, H)
    switch = int(round(st.switch_fraction * st.steps))
    curves = {"step": [], "student_success": [], "kl": []}
    rows = torch.arange(m)[:, None]

    def record(step):
        curves["step"].append(step * k * g)
        succ = evaluate(policy, curve_mazes, curve_pis, recipes, show_pi=False)
        curves["student_success"].append(succ.mean(1).tolist())
        curves["kl"].append(teacher_student_kl(policy, curve_mazes, curve_pis, recipes, generator=gen).tolist())

    def loss_fn(step: int) -> torch.Tensor:
        if curve_mazes is not None and step % st.curve_every == 0:
            record(step)
        picks = {s: streams[s].choice(len(pool), k, replace=False) for s in seeds}
        index = np.stack([np.repeat(picks[r.seed], g) for r in recipes])            # (M, B)
        batch = maze_tensors(pool, index)
        pi = pi_pool[rows, torch.from_numpy(index)]
        phases = [r.phase(step, switch) for r in recipes]
        source = torch.tensor([p[0] for p in phases])[:, None].expand(m, k * g)
        weights = torch.tensor([[p[1].get(t, 0.0) for t in TERMS] for p in phases], dtype=torch.float32)
        forced = torch.where((source == REPLAY_EXPERT)[..., None], batch["trace"], pi)
        ro = rollout(policy, batch, pi, source == TEACHER, greedy=False, generator=gen, forced=forced,
                     force_rows=source >= REPLAY_PI)
        if bool(weights[:, TEACHER_TERMS].any()):
            # one pass over both views: teacher (PI shown) and student (PI masked)
            both = lambda x: torch.cat([x, x], dim=1)
            show = torch.cat([torch.ones(m, k * g, dtype=torch.bool), torch.zeros(m, k * g, dtype=torch.bool)], 1)
            logits, aux = policy(both(batch["walls"]), both(batch["goal"]), both(pi), show, both(ro["positions"]), both(ro["prev"]))
            lt, ls, aux = logits[:, : k * g], logits[:, k * g:], aux[:, k * g:]
        else:                                   # no term of this chunk reads the teacher view: skip it
            ls, aux = policy(batch["walls"], batch["goal"], pi, torch.zeros(m, k * g, dtype=torch.bool), ro["positions"], ro["prev"])
            lt = ls.detach()
        act, mask = ro["actions"], ro["mask"]
        logp_T, logp_S = _log_probs(lt, act), _log_probs(ls, act)
        adv = group_advantages(ro["success"].float().view(m, k, g)).view(m * k * g)
        flat = lambda x: x.reshape(m * k * g, *x.shape[2:])
        fm = flat(mask)
        terms = {
            "grpo_T": losses.teacher_loss(flat(logp_T), adv, fm),
            "kl_T": losses.masked_mean(flat(losses.action_kl(lt, ls.detach())), fm),
            "offpolicy_S": losses.student_offpolicy_loss(flat(logp_S), flat(logp_T), ro["success"].float().view(-1), fm,
                                                         clip=st.is_clip),
            "grpo_S": losses.teacher_loss(flat(logp_S), adv, fm),
            "kl_S": losses.masked_mean(flat(losses.action_kl(ls, lt.detach())), fm),
            "bc": losses.bc_loss(flat(logp_S), fm),
            "distance_map": losses.distance_map_loss(flat(aux), flat(neighbour_distances(batch, ro["positions"]))),
        }
        per_model = torch.stack([terms[t].view(m, k * g).mean(1) for t in TERMS], 1)        # (M, 7)
        return (weights * per_model).sum()

    spec = TrainSpec(max_steps=st.steps, learning_rate=st.learning_rate, weight_decay=0.0, threads=1,
                     log_every=max(1, st.steps // 10))
    log = fit(policy, loss_fn, spec)
    if curve_mazes is not None:
        record(st.steps)
    return policy, {"train": log.to_dict(), "curves": curves}


def _model_inputs(mazes: Mazes, pis: dict, recipes, start: int, stop: int):
    m = len(recipes)
    index = np.broadcast_to(np.arange(start, stop), (m, stop - start))
    batch = maze_tensors(mazes, index)
    pi = torch.stack([torch.from_numpy(pis[r.pi or "full"][start:stop]) for r in recipes])
    return batch, pi


@torch.no_grad()
def evaluate(policy, mazes: Mazes, pis: dict, recipes, *, show_pi: bool, chunk: int = 128) -> np.ndarray:
    """Greedy success (M, N) of every model on every maze, PI shown (teacher) or masked (student)."""
    out = []
    for a in range(0, len(mazes), chunk):
        b = min(len(mazes), a + chunk)
        batch, pi = _model_inputs(mazes, pis, recipes, a, b)
        show = torch.full(batch["start"].shape, show_pi, dtype=torch.bool)
        out.append(rollout(policy, batch, pi, show, greedy=True)["success"].numpy())
    return np.concatenate(out, 1).astype(float)


@torch.no_grad()
def teacher_student_kl(policy, mazes: Mazes, pis: dict, recipes, *, generator, chunk: int = 128) -> np.ndarray:
    """Mean per-turn KL(teacher || student) on sampled teacher rollouts, one value per model (M,)."""
    total, count = torch.zeros(len(recipes)), torch.zeros(len(recipes))
    for a in range(0, len(mazes), chunk):
        b = min(len(mazes), a + chunk)
        batch, pi = _model_inputs(mazes, pis, recipes, a, b)
        shape = batch["start"].shape
        ro = rollout(policy, batch, pi, torch.ones(shape, dtype=torch.bool), greedy=False, generator=generator)
        lt, _ = policy(batch["walls"], batch["goal"], pi, torch.ones(shape, dtype=torch.bool), ro["positions"], ro["prev"])
        ls, _ = policy(batch["walls"], batch["goal"], pi, torch.zeros(shape, dtype=torch.bool), ro["positions"], ro["prev"])
        kl = losses.action_kl(lt, ls) * ro["mask"]
        total += kl.sum((1, 2))
        count += ro["mask"].sum((1, 2))
    return (total / count.clamp(min=1)).numpy()


def build_asset(out_dir: Path, scale: str, seed: int) -> dict:
    """Train every recipe (chunks of ``chunk_models``); save ``chunk_<i>.pt`` and ``metadata.json``."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    st = settings_for(scale)
    pool, pis = train_pool(st, seed)
    curve_mazes = generate_mazes(st.curve_mazes, st.size, st.horizon, st.wall_density,
                                 np.random.default_rng([seed, 29, 4]), exclude=maze_keys(pool))
    curve_pis = {k: make_pi(curve_mazes, k, np.random.default_rng([seed, 29, 5, i])) for i, k in enumerate(PI_KINDS)}
    recipes = recipes_for(st)
    chunks = []                               # one method per chunk, so a chunk skips what it never reads
    for method in METHODS:
        mine = [r for r in recipes if r.method == method]
        chunks += [mine[i: i + st.chunk_models] for i in range(0, len(mine), st.chunk_models)]
    meta = {"name": ASSET_NAME, "scale": scale, "seed": int(seed), "settings": asdict(st), "chunks": []}
    with torch_threads(1):
        base, meta["base_log"] = pretrain_base(pool, st, seed)
        for chunk in chunks:
            policy, log = train_chunk(chunk, pool, pis, st, seed, curve_mazes, curve_pis, base=base)
            torch.save(policy.state_dict(), out_dir / f"chunk_{len(meta['chunks'])}.pt")
            meta["chunks"].append({"recipes": [asdict(r) for r in chunk], "log": log})
            print(f"chunk {len(meta['chunks'])}: {len(chunk)} models, final loss {log['train']['final_loss']:.3f}")
    (out_dir / "metadata.json").write_text(json.dumps(meta, indent=1) + "\n")
    return {"models": len(recipes), "chunks": len(meta["chunks"]), "steps": st.steps}


def load_policies(path: str | Path) -> tuple[list, dict]:
    """``[(policy, [Recipe, ...]) per chunk]`` and the metadata, from an asset folder."""
    path = Path(path)
    meta = json.loads((path / "metadata.json").read_text())
    st = AssetSettings(**{k: tuple(v) if isinstance(v, list) else v for k, v in meta["settings"].items()})
    out = []
    for i, info in enumerate(meta["chunks"]):
        recipes = [Recipe(**r) for r in info["recipes"]]
        policy = PISlotPolicy(len(recipes), st.size, st.horizon, width=st.width, layers=st.layers, heads=st.heads)
        policy.load_state_dict(torch.load(path / f"chunk_{i}.pt", map_location="cpu", weights_only=True))
        out.append((policy.eval(), recipes))
    meta["settings_obj"] = st
    return out, meta
