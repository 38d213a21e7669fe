r"""The student term with unit weight (w = 1), trained in the chapter's run.

Declared on 2026-12-07, after the first full results showed the transfer stalling (the teacher
view succeeds far more often than its own student view). The research card offers two readings of
the student term's weight: the clipped importance weight :math:`w_t = \min(\pi_S/\pi_T, c)` that the
asset trains, and :math:`w = 1`. The clipped weight is small exactly on the turns where the teacher
takes an action the student does not yet favour, the turns it must learn; with :math:`w = 1` every
turn of a successful teacher rollout counts fully:

.. math:: \ell_S^{(w=1)} = -\overline{R\,\log\pi_S(a_t\mid s_t)}

The variant runs on one configuration only (the full-trace PI at the (alpha, beta) picked on
validation mazes), for every training seed. Its comparator is the asset's model of the same recipe
with the clipped weight: the variant starts from the seed's base, re-trained here exactly as the
asset trains it (``training.pretrain_base``; the run checks its loss log against the asset's), and
trains on the same maze stream at the same env-steps and gradient steps. ``train_arms`` is
``training.train_chunk`` restricted to pi_distill recipes, with one more loss term; with every arm
clipped it gives the same parameters as ``train_chunk`` (a unit test).

This module is not imported by the asset builder, so the asset's fingerprint does not depend on it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from compendium.rl import group_advantages
from compendium.stats import mean_interval, paired_difference
from compendium.training import TrainSpec, fit, torch_threads

from . import losses
from .training import (AssetSettings, Recipe, _log_probs, evaluate, maze_tensors, pretrain_base, rollout,
                       train_pool)

__all__ = ["Arm", "student_unit_weight_loss", "train_arms", "rerun", "transfer_measurements", "base_log_gap"]

UNIT = "training seeds"


def student_unit_weight_loss(logp_S: torch.Tensor, reward, mask: torch.Tensor) -> torch.Tensor:
    """``-mean_t R log pi_S(a_t)`` per episode on teacher rollouts (the student term with w = 1)."""
    reward = torch.as_tensor(reward, dtype=logp_S.dtype)
    if reward.dim() == 1:
        reward = reward[:, None]
    return losses.masked_mean(-reward * logp_S, mask)


@dataclass(frozen=True)
class Arm:
    """A pi_distill recipe and its student weight: clipped importance weight or w = 1."""

    recipe: Recipe
    unit_weight: bool

    @property
    def name(self) -> str:
        return self.recipe.name + ("_w1" if self.unit_weight else "_wclip")


def train_arms(arms: list[Arm], pool, pis: dict, settings: AssetSettings, seed: int,
               base=None) -> tuple[object, dict]:
    """Train pi_distill ``arms`` in lock step from ``base`` (as ``training.train_chunk`` does, without
    the monitor curves): teacher rollouts, GRPO_T + beta KL(T || sg S) weighted alpha, and the student
    term weighted 1 - alpha, clipped or with w = 1 per arm."""
    from .policy import PISlotPolicy

    recipes = [a.recipe for a in arms]
    if any(r.method != "pi_distill" for r in recipes):
        raise ValueError("train_arms trains pi_distill recipes only")
    st = settings
    m, k, g = len(recipes), st.mazes_per_step, st.group_size
    policy = PISlotPolicy(m, st.size, st.horizon, width=st.width, layers=st.layers, heads=st.heads,
                          init_seeds=[1000 * seed + r.seed for r in recipes])
    if base is not None:
        rows_from_base = [i for i, r in enumerate(recipes) if r.init == "base"]
        with torch.no_grad():
            for (_, p), (_, q) in zip(policy.named_parameters(), base.named_parameters()):
                p[rows_from_base] = q[[recipes[i].seed for i in rows_from_base]]
    seeds = sorted({r.seed for r in recipes})
    streams = {s: np.random.default_rng([seed, 29, 3, s]) for s in seeds}
    gen = torch.Generator().manual_seed(int(seed * 7919 + sum(r.seed for r in recipes) + m))
    pi_pool = torch.stack([torch.from_numpy(pis[r.pi]) for r in recipes])
    # the term weights as train_chunk forms them (products in double precision, then float32)
    w_grpo = torch.tensor([r.alpha for r in recipes], dtype=torch.float32)
    w_kl = torch.tensor([r.alpha * r.beta for r in recipes], dtype=torch.float32)
    w_student = torch.tensor([1 - r.alpha for r in recipes], dtype=torch.float32)
    unit = torch.tensor([a.unit_weight for a in arms])
    rows = torch.arange(m)[:, None]

    def loss_fn(step: int) -> torch.Tensor:
        picks = {s: streams[s].choice(len(pool), k, replace=False) for s in seeds}
        index = np.stack([np.repeat(picks[r.seed], g) for r in recipes])
        batch = maze_tensors(pool, index)
        pi = pi_pool[rows, torch.from_numpy(index)]
        teacher_rows = torch.ones(m, k * g, dtype=torch.bool)
        ro = rollout(policy, batch, pi, teacher_rows, greedy=False, generator=gen, forced=pi,
                     force_rows=~teacher_rows)
        both = lambda x: torch.cat([x, x], dim=1)
        show = torch.cat([torch.ones(m, k * g, dtype=torch.bool), torch.zeros(m, k * g, dtype=torch.bool)], 1)
        logits, _ = policy(both(batch["walls"]), both(batch["goal"]), both(pi), show, both(ro["positions"]), both(ro["prev"]))
        lt, ls = logits[:, : k * g], logits[:, k * g:]
        act, mask = ro["actions"], ro["mask"]
        logp_T, logp_S = _log_probs(lt, act), _log_probs(ls, act)
        adv = group_advantages(ro["success"].float().view(m, k, g)).view(m * k * g)
        flat = lambda x: x.reshape(m * k * g, *x.shape[2:])
        fm, reward = flat(mask), ro["success"].float().view(-1)
        per = lambda x: x.view(m, k * g).mean(1)
        grpo_T = per(losses.teacher_loss(flat(logp_T), adv, fm))
        kl_T = per(losses.masked_mean(flat(losses.action_kl(lt, ls.detach())), fm))
        clipped = per(losses.student_offpolicy_loss(flat(logp_S), flat(logp_T), reward, fm, clip=st.is_clip))
        one = per(student_unit_weight_loss(flat(logp_S), reward, fm))
        student = torch.where(unit, one, clipped)
        return (w_grpo * grpo_T + w_kl * kl_T + w_student * student).sum()

    spec = TrainSpec(max_steps=st.steps, learning_rate=st.learning_rate, weight_decay=0.0, threads=1,
                     log_every=max(1, st.steps // 10))
    log = fit(policy, loss_fn, spec)
    return policy, {"train": log.to_dict()}


def base_log_gap(reproduced: dict, recorded: dict) -> float:
    """Max |loss gap| between two ``TrainLog`` dicts of the base's pretraining (inf if the steps differ)."""
    a, b = reproduced.get("losses", []), recorded.get("losses", [])
    if [s for s, _ in a] != [s for s, _ in b] or not a:
        return float("inf")
    return float(max(abs(x - y) for (_, x), (_, y) in zip(a, b)))


def rerun(meta: dict, test, test_pis: dict, pi: str, alpha: float, beta: float) -> dict:
    """Re-train each seed's base as the asset did, then the w = 1 arm of pi_distill at (``pi``,
    ``alpha``, ``beta``) for every training seed; evaluate both views on the run's test mazes.

    The comparator is the asset's clipped model at the same recipe (same base, same maze stream,
    same steps); ``base_log_gap`` checks that the re-trained base is the asset's.
    """
    st = meta["settings_obj"]
    pool, pis = train_pool(st, meta["seed"])
    arms = [Arm(Recipe("pi_distill", pi, alpha, beta, s), True) for s in range(st.num_seeds)]
    with torch_threads(1):
        base, base_log = pretrain_base(pool, st, meta["seed"])
        policy, log = train_arms(arms, pool, pis, st, meta["seed"], base=base)
        recipes = [a.recipe for a in arms]
        student = evaluate(policy, test, test_pis, recipes, show_pi=False).mean(1)
        teacher = evaluate(policy, test, test_pis, recipes, show_pi=True).mean(1)
    return {"arms": arms, "pi": pi, "alpha": alpha, "beta": beta, "w1": student, "w1_teacher": teacher,
            "base_log_gap": base_log_gap(base_log, meta.get("base_log", {})), "train": log["train"]}


def transfer_measurements(tr: dict, weighted: np.ndarray, weighted_teacher: np.ndarray) -> dict:
    """The hypothesis' estimate (w = 1 minus the clipped comparator, paired over training seeds, 90% t
    interval), its floor (the comparator's teacher view: 95% t interval of its mean test success) and
    each arm's teacher-minus-student gap (reported)."""
    tr = {**tr, "weighted": np.asarray(weighted, float), "weighted_teacher": np.asarray(weighted_teacher, float)}
    return {"w1_vs_weighted": paired_difference(tr["w1"], tr["weighted"], level=0.90, unit=UNIT),
            "comparator_teacher": mean_interval(tr["weighted_teacher"], unit=UNIT),
            "w1_gap": paired_difference(tr["w1_teacher"], tr["w1"], level=0.90, unit=UNIT),
            "weighted_gap": paired_difference(tr["weighted_teacher"], tr["weighted"], level=0.90, unit=UNIT)}
