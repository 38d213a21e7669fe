"""Config, run, the implementation checks and the ledger's statistics."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from compendium import stats
from compendium.validation import require_int, require_number

from .policy import GroundedPolicy
from .reward import (MASKED, chi_square_frequencies, counterfactual_cells, mediator_gap, q_pas_probabilities,
                     q_pas_select)
from .scenes import (NUM_CELLS, NUM_COLOURS, PALETTE, SHAPE_MASKS, TEST_CUE, box_iou, cell_box, cell_crops,
                     make_scenes)
from .training import ARM_NAMES, ARMS, answer_accuracy_given, evaluate, prob_of

__all__ = ["Config", "Result", "run", "measurements", "crop_blind_gap", "crop_reader_gap", "q_pas_checks",
           "counterfactual_cell_check", "updates_to_target"]


@dataclass(frozen=True)
class Config:
    """The chapter's parameters (registry names) and the seed of its test questions."""

    seed: int = 0
    test_questions: int = 300
    exact_questions: int = 200
    qpas_draws: int = 20000
    headline_margin: float = 0.10
    grounding_level: float = 0.8
    iou_margin: float = 0.10
    premise_gap: float = 0.20
    control_margin: float = 0.03
    noninferiority_margin: float = 0.02
    headroom_max: float = 0.9
    target_fraction: float = 0.9
    base_margin: float = 0.5
    nocue_margin: float = 0.2

    def __post_init__(self):
        require_int("seed", self.seed, 0, 2**31 - 1)
        require_int("test_questions", self.test_questions, 20, 100000)
        require_int("exact_questions", self.exact_questions, 10, 100000)
        require_int("qpas_draws", self.qpas_draws, 1000, 10**7)
        for name in ("headline_margin", "grounding_level", "iou_margin", "premise_gap", "control_margin",
                     "noninferiority_margin", "headroom_max", "target_fraction", "base_margin", "nocue_margin"):
            require_number(name, getattr(self, name), 0.0, 1.0)


@dataclass
class Result:
    """Per-arm test metrics, shape (seeds, questions), and the implementation checks."""

    config: Config
    arms: tuple
    id: dict            # arm -> {'correct', 'grounded', 'changed'}: (seeds, n)
    ood: dict
    ood_third: dict     # after a third of the updates (equal answer passes for the gap arms)
    curves: dict        # from the asset: 'round' (R,), per metric (R, models)
    models: list
    settings: dict
    base: dict = field(default_factory=dict)    # the pretrained bases, per training seed: (seeds, n) arrays
    tint_rule_id: float = float("nan")          # accuracy of "answer the tint colour" on the ID test questions
    checks: dict = field(default_factory=dict)


# ------------------------------------------------------------------ implementation checks
def crop_blind_gap(policy: GroundedPolicy, scenes, rng: np.random.Generator) -> float:
    """Largest |Delta| of a copy of ``policy`` whose answer head ignores the crop (its crop weights
    zeroed), over sampled evidence cells and counterfactuals of every model; exactly 0 expected."""
    blind = GroundedPolicy(policy.num_models, [0] * policy.num_models, **policy.widths)
    blind.load_state_dict(policy.state_dict())
    cg, cc = policy.widths["global_width"], policy.widths["cell_width"]
    with torch.no_grad():
        blind.w_hidden[:, cg:cg + cc] = 0.0
        m = policy.num_models
        images = torch.from_numpy(scenes.images).expand(m, *scenes.images.shape)
        q = torch.from_numpy(scenes.question).expand(m, -1)
        y = torch.from_numpy(scenes.answer).expand(m, -1)
        gen = torch.Generator().manual_seed(int(rng.integers(2**31)))
        enc = blind.encode(images, q)
        e = torch.randint(0, NUM_CELLS, q.shape, generator=gen)
        cf = counterfactual_cells(e, ("shift", "mask"), gen)
        gap = mediator_gap(prob_of(blind.answer_logits(enc, e), y), prob_of(blind.answer_logits(enc, cf), y))
    return float(gap.abs().max())


def crop_reader_probs(images: np.ndarray, question: np.ndarray, answer: np.ndarray, cells: np.ndarray) -> np.ndarray:
    """A hand-built reader that answers only from a correct crop: p(y* | crop) for cells (n, S).

    It thresholds the crop's pixels (any channel above 0.65: the objects, not the 0.3 tint) and,
    if the mask is exactly the asked shape, answers the palette colour nearest to those pixels'
    mean with certainty; otherwise (another shape, an empty or a masked cell) it answers a wrong
    colour with certainty. A masked cell (``MASKED``) reads as zeros.
    """
    crops = cell_crops(images)                                                        # (n, 9, 3, 8, 8)
    n, s = cells.shape
    out = np.zeros((n, s))
    for j in range(s):
        c = cells[:, j]
        crop = np.where((c == MASKED)[:, None, None, None], 0.0, crops[np.arange(n), np.clip(c, 0, None)])
        on = crop.max(1) > 0.65                                                       # (n, 8, 8)
        match = np.all(on == SHAPE_MASKS[question], axis=(1, 2))
        mean = (crop * on[:, None]).sum((2, 3)) / np.maximum(on.sum((1, 2)), 1)[:, None]
        colour = np.argmin(((mean[:, None] - PALETTE[None]) ** 2).sum(-1), 1)
        said = np.where(match, colour, (answer + 1) % NUM_COLOURS)
        out[:, j] = (said == answer).astype(float)
    return out


def crop_reader_gap(scenes, rng: np.random.Generator) -> tuple[float, float]:
    """(min, max) of Delta for the crop reader with the target cell as evidence; both 1 expected."""
    gen = torch.Generator().manual_seed(int(rng.integers(2**31)))
    e = torch.from_numpy(scenes.target)
    cf = counterfactual_cells(e, ("shift", "mask"), gen).numpy()
    p_f = crop_reader_probs(scenes.images, scenes.question, scenes.answer, scenes.target[:, None])[:, 0]
    p_cf = crop_reader_probs(scenes.images, scenes.question, scenes.answer, cf)
    gap = mediator_gap(torch.from_numpy(p_f), torch.from_numpy(p_cf)).numpy()
    return float(gap.min()), float(gap.max())


def q_pas_checks(draws: int, rng: np.random.Generator) -> dict:
    """Q-PAS on random advantages: dropped counts against floor(q N), the chi-square p-value of
    ``draws`` selections against |A|^alpha / sum |A|^alpha, and the q = 0, alpha = 0 limit."""
    gen = torch.Generator().manual_seed(int(rng.integers(2**31)))
    drop_errors = []
    for n in (10, 64, 101):
        for q in (0.0, 0.3, 0.55):
            adv = torch.from_numpy(rng.standard_normal((3, n)))
            probs = q_pas_probabilities(adv, quantile=q, alpha=1.0)
            drop_errors.append(int(((probs == 0).sum(-1) - int(np.floor(q * n))).abs().max()))
    n = 64
    adv = torch.from_numpy(rng.standard_normal((1, n)))
    idx, _, probs = q_pas_select(adv, quantile=0.3, alpha=1.0, size=draws, generator=gen)
    expected = probs[0].numpy()
    kept = expected > 0
    theory = np.where(kept, np.abs(adv[0].numpy()), 0.0)
    theory = theory / theory.sum()
    p_chi = chi_square_frequencies(expected, idx[0].numpy())
    u_idx, _, u_probs = q_pas_select(adv, quantile=0.0, alpha=0.0, size=draws, generator=gen)
    return {"max_drop_error": max(drop_errors), "chi2_p": p_chi,
            "prob_formula_gap": float(np.abs(expected - theory).max()),
            "uniform_gap": float((u_probs - 1.0 / n).abs().max()),
            "uniform_chi2_p": chi_square_frequencies(u_probs[0].numpy(), u_idx[0].numpy()),
            "abs_adv": np.abs(adv[0].numpy()), "expected": expected,
            "empirical": np.bincount(idx[0].numpy(), minlength=n) / draws}


def counterfactual_cell_check(count: int, rng: np.random.Generator) -> dict:
    """Shifted counterfactual cells: all in bounds, largest IoU with the factual cell (0 expected)."""
    gen = torch.Generator().manual_seed(int(rng.integers(2**31)))
    e = torch.from_numpy(rng.integers(0, NUM_CELLS, count))
    cf = counterfactual_cells(e, ("shift", "shift"), gen).numpy()
    boxes = cell_box(cf)
    in_bounds = bool(np.all((boxes >= 0) & (boxes <= 24)))
    iou = box_iou(cell_box(e.numpy())[:, None], boxes)
    return {"in_bounds": in_bounds, "max_iou": float(iou.max()),
            "coverage": int(len(np.unique(cf)))}


# ------------------------------------------------------------------ the run
def _by_arm(ev: dict, models: list, num_seeds: int) -> dict:
    out = {}
    for name in ARM_NAMES:
        rows = [i for i, mdl in enumerate(models) if mdl["arm"] == name]
        out[name] = {k: v[rows] for k, v in ev.items()}
    return out


def run(config: Config, policy: GroundedPolicy, policy_third: GroundedPolicy, meta: dict) -> Result:
    """Evaluate every trained model on fresh ID (cue 0.85) and OOD (cue 1/6) questions drawn from
    ``config.seed``, and run the implementation checks."""
    st = meta["settings"]
    rng = np.random.default_rng([config.seed, 48, 10])
    test_id, test_ood = make_scenes(config.test_questions, st["train_cue"], rng, cues=(TEST_CUE,))
    models, k = meta["models"], st["num_seeds"]
    ev_id = evaluate(policy, test_id)
    ev_ood = evaluate(policy, test_ood)
    ev_third = evaluate(policy_third, test_ood, faithfulness=False)
    exact = make_scenes(config.exact_questions, st["train_cue"], np.random.default_rng([config.seed, 48, 11]))
    checks = {"crop_blind_gap": crop_blind_gap(policy, exact, np.random.default_rng([config.seed, 48, 12])),
              "crop_reader_gap": crop_reader_gap(exact, np.random.default_rng([config.seed, 48, 13])),
              "q_pas": q_pas_checks(config.qpas_draws, np.random.default_rng([config.seed, 48, 14])),
              "cells": counterfactual_cell_check(10000, np.random.default_rng([config.seed, 48, 15]))}
    curves = meta["log"]["curves"]
    base = meta["base"]
    base_id, base_ood = evaluate(base, test_id, faithfulness=False), evaluate(base, test_ood, faithfulness=False)
    other = (test_ood.target + np.random.default_rng([config.seed, 48, 16]).integers(1, NUM_CELLS, len(test_ood))) % NUM_CELLS
    base_ev = {"target_ood": answer_accuracy_given(base, test_ood, test_ood.target),
               "other_ood": answer_accuracy_given(base, test_ood, other),
               "id_correct": base_id["correct"], "ood_correct": base_ood["correct"], "grounded": base_ood["grounded"]}
    return Result(config=config, arms=ARM_NAMES, id=_by_arm(ev_id, models, k), ood=_by_arm(ev_ood, models, k),
                  ood_third=_by_arm(ev_third, models, k),
                  curves={key: np.asarray(v, float) for key, v in curves.items()}, models=models, settings=st,
                  base=base_ev, tint_rule_id=float(np.mean(test_id.tint == test_id.answer)), checks=checks)


# ------------------------------------------------------------------ statistics
def updates_to_target(curve: np.ndarray, rounds: np.ndarray, target: float) -> float:
    """First measured round whose value is >= target; one spacing past the last round if never."""
    hit = np.flatnonzero(curve >= target)
    if hit.size:
        return float(rounds[hit[0]])
    return float(rounds[-1] + (rounds[-1] - rounds[-2]))


def _curve(result: Result, metric: str, arm: str) -> np.ndarray:
    cols = [i for i, mdl in enumerate(result.models) if mdl["arm"] == arm]
    return result.curves[metric][:, cols]                                              # (R, seeds)


def measurements(result: Result) -> dict:
    """Every estimate a verdict depends on (unit: trained models, paired by training seed)."""
    c = result.config
    acc = lambda split, arm: getattr(result, split)[arm]["correct"].mean(1)             # (seeds,)
    grd = lambda arm: result.ood[arm]["grounded"].mean(1)
    unit = "training seeds (paired)"
    m = {}
    m["base_reads"] = stats.mean_interval(result.base["target_ood"].mean(1) - TEST_CUE, level=0.90,
                                          unit="training seeds (pretrained bases)")
    m["floor_cofact"] = stats.mean_interval(acc("id", "cofact") - result.tint_rule_id, level=0.90,
                                            unit="training seeds")
    m["floor_grpo"] = stats.mean_interval(acc("id", "grpo") - result.tint_rule_id, level=0.90, unit="training seeds")
    m["premise"] = stats.paired_difference(acc("id", "grpo"), acc("ood", "grpo"), level=0.95, unit=unit)
    m["headroom"] = stats.mean_interval(acc("ood", "grpo"), level=0.95, unit="training seeds")
    m["headline"] = stats.paired_difference(acc("ood", "cofact"), acc("ood", "grpo"), level=0.90, unit=unit)
    m["grounding"] = stats.mean_interval(grd("cofact"), level=0.90, unit="training seeds")
    m["grounding_vs_grpo"] = stats.paired_difference(grd("cofact"), grd("grpo"), level=0.90, unit=unit)
    m["equal_passes"] = stats.paired_difference(result.ood_third["cofact"]["correct"].mean(1), acc("ood", "grpo"),
                                                level=0.90, unit=unit)
    m["no_boxes"] = stats.paired_difference(grd("grpo_iou"), grd("cofact"), level=0.90, unit=unit)
    m["selectivity"] = stats.paired_difference(acc("ood", "cofact"), acc("ood", "bonus_all"), level=0.90, unit=unit)
    # the weaker no-cue arm of each training seed against chance: the no-cue control means something
    # only where both arms have learnt to read crops
    m["nocue_floor"] = stats.mean_interval(np.minimum(acc("ood", "nocue_grpo"), acc("ood", "nocue_cofact")) - TEST_CUE,
                                           level=0.90, unit="training seeds")
    m["nocue"] = stats.paired_difference(acc("ood", "nocue_cofact"), acc("ood", "nocue_grpo"), level=0.90, unit=unit)
    m["qpas_final"] = stats.paired_difference(acc("id", "cofact"), acc("id", "no_qpas"), level=0.90, unit=unit)
    rounds = result.curves["round"]
    for key, ref in (("qpas_speed", "no_qpas"), ("qpas_rescaled", "uniform_rescaled")):
        ref_curve, q_curve = _curve(result, "id_accuracy", ref), _curve(result, "id_accuracy", "cofact")
        targets = c.target_fraction * ref_curve[-1]
        t_q = np.array([updates_to_target(q_curve[:, s], rounds, targets[s]) for s in range(len(targets))])
        t_r = np.array([updates_to_target(ref_curve[:, s], rounds, targets[s]) for s in range(len(targets))])
        m[key] = stats.mean_interval(t_q / np.maximum(t_r, 1.0), level=0.90, unit="training seeds")
        m[key + "_updates"] = {"qpas": t_q.tolist(), ref: t_r.tolist()}
    m["table"] = {arm: {"ID accuracy": acc("id", arm).mean(), "OOD accuracy": acc("ood", arm).mean(),
                        "grounding (OOD)": grd(arm).mean(),
                        "P(answer changes | target masked)": result.ood[arm]["changed"].mean(),
                        "OOD accuracy at 1/3 of updates": result.ood_third[arm]["correct"].mean()}
                  for arm in result.arms}
    m["table"]["base"] = {"ID accuracy": result.base["id_correct"].mean(), "OOD accuracy": result.base["ood_correct"].mean(),
                          "grounding (OOD)": result.base["grounded"].mean(),
                          "P(answer changes | target masked)": float("nan"), "OOD accuracy at 1/3 of updates": float("nan")}
    m["base_target_ood"] = float(result.base["target_ood"].mean())
    m["base_other_ood"] = float(result.base["other_ood"].mean())
    return m
