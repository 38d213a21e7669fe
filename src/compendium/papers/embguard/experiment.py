"""The chapter's experiment: ``Config``, ``run`` and every statistic a verdict depends on."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from compendium.stats import Estimate, mean_interval, paired_difference, spearman
from compendium.validation import require_int, require_number

from . import guard
from .gridhazard import CONDITIONS, Samples, Spec, any_hazard_rule, generate_test_sets, generator_checks, load_spec
from .model import ARMS, DOSE_ARMS, StackedGuardNet

__all__ = ["Config", "Result", "evaluate", "run", "measurements", "answers"]


@dataclass(frozen=True)
class Config:
    """Every knob of the chapter (the registry's parameters) plus ``seed``."""

    seed: int = 0
    test_per_condition: int = 200
    heldout_pairs: int = 100
    threshold: float = 0.5
    matched_tpr: float = 0.9
    malformed_outputs: int = 220

    def __post_init__(self):
        require_int("seed", self.seed, 0, 2**31 - 1)
        require_int("test_per_condition", self.test_per_condition, 10, 5000)
        require_int("heldout_pairs", self.heldout_pairs, 10, 5000)
        require_number("threshold", self.threshold, 0.0, 1.0)
        require_number("matched_tpr", self.matched_tpr, 0.05, 1.0)
        require_int("malformed_outputs", self.malformed_outputs, 11, 10000)


def evaluate(net: StackedGuardNet, spec: Spec, samples: Samples, rng, chunk: int = 250) -> dict:
    """Every model on the same pairs (one noise draw shared by all): ``{"p_unsafe": (M, n),
    "risk_type": (M, n) argmax over the 7 types, "pointer": (M, n) argmax cell}``."""
    flat = spec.glyphs.reshape(len(spec.glyphs), -1)
    grid = samples.grid.reshape(len(samples), -1)
    patches = flat[np.where(grid < 0, len(spec.glyphs) - 1, grid)]
    patches = np.clip(patches + spec.pixel_noise * rng.normal(size=patches.shape), 0, 1).astype(np.float32)
    M = net.num_models
    out = {"p_unsafe": [], "risk_type": [], "pointer": []}
    with torch.no_grad():
        for s in range(0, len(samples), chunk):
            sl = slice(s, s + chunk)
            x = torch.from_numpy(patches[sl])[None].expand(M, -1, -1, -1)
            t = torch.from_numpy(samples.target[sl])[None].expand(M, -1)
            v = torch.from_numpy(samples.verb[sl])[None].expand(M, -1)
            risk, kind, ptr = net(x, t, v)
            out["p_unsafe"].append(torch.sigmoid(risk).numpy())
            out["risk_type"].append(kind[..., : len(spec.risk_types)].argmax(-1).numpy())
            out["pointer"].append(ptr.argmax(-1).numpy())
    return {k: np.concatenate(v, axis=1) for k, v in out.items()}


def answers(spec: Spec, samples: Samples, pred: dict, m: int, threshold: float) -> list:
    """Model ``m``'s answers in the guardrail's JSON schema (hazard = the object under the pointer)."""
    texts = []
    for i in range(len(samples)):
        unsafe = bool(pred["p_unsafe"][m, i] >= threshold)
        cell = int(samples.grid.reshape(len(samples), -1)[i, pred["pointer"][m, i]])
        obj = spec.object_name(cell) if cell >= 0 else "empty_cell"          # the pointer may rest on an empty cell
        texts.append(guard.format_guard_output(unsafe, spec.risk_types[int(pred["risk_type"][m, i])], obj))
    return texts


@dataclass
class Result:
    """Everything the notebook shows; per-model arrays are indexed ``[arm][seed]``."""

    config: Config
    spec: Spec
    tests: dict
    arms: dict                                        # arm -> list of model indices, seed order
    fpr: dict = field(default_factory=dict)           # split -> arm -> (K,) share flagged unsafe
    tpr: dict = field(default_factory=dict)           # split -> arm -> (K,)
    pointer_accuracy: dict = field(default_factory=dict)   # arm -> (K,) on selective risky
    type_accuracy: dict = field(default_factory=dict)      # arm -> (K,) on causal risky flagged unsafe
    matched_fpr: dict = field(default_factory=dict)        # arm -> (K,) decoupled FPR at matched TPR
    rule_fpr: dict = field(default_factory=dict)           # split -> float, baseline (c)
    rule_tpr: dict = field(default_factory=dict)
    checks: dict = field(default_factory=dict)
    round_trip_mismatches: int = -1
    round_trip_total: int = 0
    malformed_accepted: int = -1
    malformed_accuracy: float = float("nan")
    fpr_at_tpr_gap: float = float("nan")
    examples: dict = field(default_factory=dict)
    auc: dict = field(default_factory=dict)                # arm -> (K,) AUC, causal risky vs decoupled benign


def run(config: Config, net: StackedGuardNet, meta: dict, spec: Spec | None = None) -> Result:
    """Evaluate every trained model, the any-hazard rule and the generator on fresh test sets."""
    spec = spec or load_spec()
    rng = np.random.default_rng([config.seed, 47])
    tests = generate_test_sets(spec, config.test_per_condition, config.heldout_pairs, rng)
    arms: dict = {}
    for i, m in enumerate(meta["models"]):
        arms.setdefault(m["arm"], []).append(i)
    res = Result(config, spec, tests, arms)
    res.checks = generator_checks(spec, tests)
    preds = {name: evaluate(net, spec, s, rng) for name, s in tests.items()}
    thr = config.threshold
    for name, s in tests.items():
        flagged = preds[name]["p_unsafe"] >= thr                                    # (M, n)
        neg, pos = ~s.label, s.label
        rule = any_hazard_rule(spec, s.grid)
        if neg.any():
            res.fpr[name] = {a: flagged[idx][:, neg].mean(1) for a, idx in arms.items()}
            res.rule_fpr[name] = float(rule[neg].mean())
        if pos.any():
            res.tpr[name] = {a: flagged[idx][:, pos].mean(1) for a, idx in arms.items()}
            res.rule_tpr[name] = float(rule[pos].mean())
    sel, causal, dec = tests["selective_risky"], tests["causal_risky"], tests["decoupled_benign"]
    for a, idx in arms.items():
        res.pointer_accuracy[a] = (preds["selective_risky"]["pointer"][idx] == sel.hazard_cell[None]).mean(1)
        hit = preds["causal_risky"]["p_unsafe"][idx] >= thr
        right = preds["causal_risky"]["risk_type"][idx] == causal.risk_type[None]
        res.type_accuracy[a] = (hit & right).sum(1) / np.maximum(hit.sum(1), 1)
        res.matched_fpr[a] = np.array([guard.fpr_at_tpr(preds["causal_risky"]["p_unsafe"][i],
                                                        preds["decoupled_benign"]["p_unsafe"][i], config.matched_tpr)[0]
                                       for i in idx])
        res.auc[a] = np.array([auc(preds["causal_risky"]["p_unsafe"][i], preds["decoupled_benign"]["p_unsafe"][i])
                               for i in idx])
    # fpr_at_tpr against the brute-force sweep, on the first EMBGuard model's scores
    m0 = arms["embguard"][0]
    p, n = preds["causal_risky"]["p_unsafe"][m0], preds["decoupled_benign"]["p_unsafe"][m0]
    res.fpr_at_tpr_gap = abs(guard.fpr_at_tpr(p, n, config.matched_tpr)[0] - guard.fpr_at_tpr_reference(p, n, config.matched_tpr))
    # the JSON schema: round trip of every answer of that model, malformed answers are errors
    texts, truth = [], []
    for name in CONDITIONS:
        texts += answers(spec, tests[name], preds[name], m0, thr)
        truth.append(tests[name].label)
    mism = 0
    for t in texts:
        got, want = guard.parse_guard_output(t, spec.risk_types), json_fields(t)
        mism += int(not got["valid"] or (("unsafe" if got["unsafe"] else "safe"), got["risk_type"], got["hazard"]) != want)
    res.round_trip_mismatches, res.round_trip_total = mism, len(texts)
    bad = guard.malformed_outputs(texts, rng, config.malformed_outputs)
    parsed = [guard.parse_guard_output(t, spec.risk_types) for t in bad]
    res.malformed_accepted = int(sum(p["valid"] for p in parsed))
    labels = np.concatenate(truth)[rng.integers(len(texts), size=len(bad))]
    res.malformed_accuracy = guard.guard_metrics(labels, parsed)["accuracy"]
    # one pair per condition to draw
    res.examples = {c: tests[c].subset([0]) for c in CONDITIONS}
    return res


def auc(positive, negative) -> float:
    """Area under the ROC curve of scores ``positive`` (risky) against ``negative`` (benign): the
    chance that a random positive scores above a random negative, ties counted one half
    (Mann-Whitney, from average ranks)."""
    pos, neg = np.asarray(positive, float).ravel(), np.asarray(negative, float).ravel()
    if pos.size == 0 or neg.size == 0:
        raise ValueError("auc needs at least one positive and one negative score")
    values = np.concatenate([pos, neg])
    _, inverse, counts = np.unique(values, return_inverse=True, return_counts=True)
    ends = np.cumsum(counts)
    ranks = (ends - (counts - 1) / 2.0)[inverse]                    # average rank of each tie group, from 1
    return float((ranks[: pos.size].sum() - pos.size * (pos.size + 1) / 2) / (pos.size * neg.size))


def exact_rate_difference(hits_a: int, n_a: int, hits_b: int, n_b: int, *, unit: str) -> Estimate:
    """Rate a minus rate b of one trained model, with an exact interval: the ends of two
    Clopper-Pearson 97.5 % intervals, so the difference's interval covers at least 95 % (Bonferroni,
    whatever the dependence between the two rates). It has width even when both rates sit at 0 or 1."""
    from compendium.stats import clopper_pearson    # imported here: the module level stays as the asset's fingerprint saw it

    a = clopper_pearson(int(hits_a), int(n_a), level=0.975, unit=unit)
    b = clopper_pearson(int(hits_b), int(n_b), level=0.975, unit=unit)
    return Estimate(a.point - b.point, a.low - b.high, a.high - b.low, 0.95, unit, int(n_a) + int(n_b),
                    "difference of two Clopper-Pearson 97.5 % intervals (Bonferroni)")


def every_model_bound(hits_a, n_a: int, hits_b, n_b: int, *, side: str, threshold: float | None = None,
                      what: str) -> tuple[Estimate, int]:
    """The deciding trained model of an "every trained model clears the bar" check on rate a minus
    rate b (one :func:`exact_rate_difference` per model; :func:`compendium.stats.deciding_estimate`
    picks the model whose interval decides the conjunction). Returns its estimate and its index.

    Passing every model's exact interval is an intersection-union test: it needs no multiplicity
    correction, and a zero-width t interval over models (all at a ceiling) does not arise."""
    from compendium.stats import deciding_estimate

    per = [exact_rate_difference(x, n_a, y, n_b, unit=f"test pairs of {what} {k}")
           for k, (x, y) in enumerate(zip(np.asarray(hits_a).tolist(), np.asarray(hits_b).tolist()))]
    k = deciding_estimate(per, side=side, threshold=threshold)
    e = per[k]
    return Estimate(e.point, e.low, e.high, e.level, e.unit, e.n,
                    f"{e.method}; the deciding one of {len(per)} {what}s, each of which must clear the bar"), int(k)


def json_fields(text: str) -> tuple:
    import json

    obj = json.loads(text)
    return obj["potential_risk"], obj["risk_type"], obj["hazard"]


def measurements(res: Result) -> dict:
    """Every number a ledger verdict depends on. The unit of replication is a trained model
    (training seed), paired across arms by seed; the any-hazard rule is deterministic."""
    out: dict = {}
    unit = "trained models (training seeds)"
    dec, ab = res.fpr["decoupled_benign"], res.fpr["absent_benign"]
    # learned-model floor: a constant guard ("always safe" or "always unsafe") has TPR - FPR = 0
    # learned-model floor: a constant guard ("always safe" or "always unsafe") has TPR - FPR = 0. Every
    # trained model must clear it by an exact bound on its own test pairs (TPR and FPR are often exactly
    # 1 and 0, where a t interval over models has zero width and cannot decide)
    n_causal = int(res.tests["causal_risky"].label.sum())
    n_absent = int((~res.tests["absent_benign"].label).sum())
    hits = {a: np.rint(res.tpr["causal_risky"][a] * n_causal).astype(int) for a in res.tpr["causal_risky"]}
    false = {a: np.rint(ab[a] * n_absent).astype(int) for a in ab}
    out["floor"], out["floor_model"] = every_model_bound(hits["embguard"], n_causal, false["embguard"], n_absent,
                                                         side="low", threshold=0.5, what="trained model (seed)")
    out["floor_t"] = paired_difference(res.tpr["causal_risky"]["embguard"], ab["embguard"], unit=unit)
    out["premise"] = mean_interval(dec["no_decoupled"], unit=unit)
    out["fpr_d"] = mean_interval(dec["embguard"], unit=unit)
    out["halved"] = paired_difference(dec["embguard"], 0.5 * dec["no_decoupled"], unit=unit)
    out["scene_only"] = mean_interval(dec["scene_only"], unit=unit)
    out["rule"] = res.rule_fpr["decoupled_benign"]
    # absent benign: (d) and (b) flag alike, every seed pair by exact bounds (a sanity check: no arm flags these)
    out["absent_gap"], _ = every_model_bound(false["embguard"], n_absent, false["no_decoupled"], n_absent,
                                             side="abs", what="seed pair (d, b)")
    out["absent_max"] = max(float(v.max()) for v in ab.values())
    # the scene-only arm's discriminability of risky pairs and their decoupled-benign twins (the same scenes):
    # AUC - 0.5 equivalent to 0 within +-0.1, TOST over its 5 trained models
    from compendium.stats import tost

    out["scene_auc"] = tost(res.auc["scene_only"] - 0.5, margin=0.1, level=0.95, unit=unit)
    out["auc_d"] = mean_interval(res.auc["embguard"], unit=unit)
    out["auc_b"] = mean_interval(res.auc["no_decoupled"], unit=unit)
    d, b = res.matched_fpr["embguard"], res.matched_fpr["no_decoupled"]
    out["matched_wins"] = int(np.sum(d < b))
    out["matched_gap"] = paired_difference(d, b, unit=unit)
    x = np.concatenate([np.full(len(dec[a]), ARMS[a][0]) for a in DOSE_ARMS])
    y = np.concatenate([dec[a] for a in DOSE_ARMS])
    if np.ptp(y) > 0:
        out["dose"], out["dose_p"] = spearman(x, y, unit="trained models (4 fractions x 5 seeds)", alternative="less")
    else:                                   # every model at the same FPR: no trend at all
        out["dose"], out["dose_p"] = Estimate(0.0, 0.0, 0.0, 0.90, "trained models (4 fractions x 5 seeds)", len(y),
                                              "constant FPR: rho taken as 0"), 1.0
    out["pointer_d"] = mean_interval(res.pointer_accuracy["embguard"], unit=unit)
    out["pointer_gap"] = paired_difference(res.pointer_accuracy["embguard"], res.pointer_accuracy["no_selective"], unit=unit)
    out["pointer_scene_only"] = mean_interval(res.pointer_accuracy["scene_only"], unit=unit)
    return out
