"""The chapter's experiment: evaluate the asset's models and baselines, audit, score the audit."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from sklearn.ensemble import GradientBoostingClassifier
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score, roc_curve
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from ...runtime import make_rng
from . import audit, metrics, robustness
from .model import MODEL_KINDS, load_asset, predict

ASSET_NAME = "tabular_lm_miniature"
STANDARD_TYPES = ("binary", "categorical")


@dataclass(frozen=True)
class Config:
    """Parameters of one run (names match the notebook's parameters cell).

    Parameters
    ----------
    bootstrap_resamples : int in [200, 100000], resamples for the CI of the median clean lift.
    near_duplicate_tolerance : float in (0, 2], RMS z-distance under which a row is a near duplicate.
    leakage_threshold : float in [0.5, 1], single-column accuracy at which a task is flagged.
    round_digits : int in [1, 8], significant digits of the canonical row hash.
    gbm_estimators : int in [10, 1000], trees of the gradient-boosting baseline.
    seed : int, seeds the bootstrap and the gradient-boosting baseline.
    """

    bootstrap_resamples: int = 2000
    near_duplicate_tolerance: float = 0.1
    leakage_threshold: float = 0.99
    round_digits: int = 3
    gbm_estimators: int = 30
    seed: int = 0

    def __post_init__(self) -> None:
        checks = {
            "bootstrap_resamples": 200 <= self.bootstrap_resamples <= 100_000,
            "near_duplicate_tolerance": 0 < self.near_duplicate_tolerance <= 2,
            "leakage_threshold": 0.5 <= self.leakage_threshold <= 1,
            "round_digits": 1 <= self.round_digits <= 8,
            "gbm_estimators": 10 <= self.gbm_estimators <= 1000,
            "seed": 0 <= self.seed < 2**32,
        }
        for name, ok in checks.items():
            if not ok:
                raise ValueError(f"Config.{name} = {getattr(self, name)!r} is out of range (see the docstring)")


@dataclass(frozen=True)
class Result:
    """Per-task table, per-row detector scores, and the chapter's summary metrics."""

    tasks: pd.DataFrame
    near_rows: pd.DataFrame
    metrics: dict
    training_losses: dict
    robustness: pd.DataFrame


def classical_accuracies(task, gbm_estimators: int, seed: int) -> tuple[float, float]:
    """Test accuracy of logistic regression and gradient boosting fitted on the task's train split."""
    lr = make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000)).fit(task.x_train, task.y_train)
    gbm = GradientBoostingClassifier(n_estimators=gbm_estimators, max_depth=2, random_state=seed)
    gbm.fit(task.x_train, task.y_train)
    return float(lr.score(task.x_test, task.y_test)), float(gbm.score(task.x_test, task.y_test))


def model_accuracies(models, vocab, tasks) -> tuple[np.ndarray, np.ndarray]:
    """Exact-match accuracy and valid-answer rate per model seed and task, each (n_seeds, n_tasks).

    An answer is *valid* when it is one of the task's options (whatever its correctness).
    """
    prompts = [p for t in tasks for p in t.prompts()]
    truth = np.concatenate([t.y_test for t in tasks])
    options = [set(t.options) for t in tasks for _ in t.y_test]
    bounds = np.cumsum([0] + [len(t.y_test) for t in tasks])
    accs, valid = [], []
    for model in models:
        answers = predict(model, vocab, prompts)
        hit = np.asarray(answers) == truth
        ok = np.array([a in o for a, o in zip(answers, options)])
        accs.append([hit[a:b].mean() for a, b in zip(bounds[:-1], bounds[1:])])
        valid.append([ok[a:b].mean() for a, b in zip(bounds[:-1], bounds[1:])])
    return np.array(accs), np.array(valid)


def _roc(labels, scores) -> dict:
    """ROC curve and AUC; NaN AUC (and an empty curve) when only one class is present."""
    labels = np.asarray(labels, dtype=bool)
    if labels.all() or not labels.any():
        return {"fpr": np.array([]), "tpr": np.array([]), "auc": float("nan")}
    fpr, tpr, _ = roc_curve(labels, scores)
    return {"fpr": fpr, "tpr": tpr, "auc": float(roc_auc_score(labels, scores))}


def _or_nan(ratio, *accuracies) -> float:
    """A ratio of mean accuracies, NaN where it is undefined (no gap, no reference accuracy)."""
    if any(np.isnan(a) for a in accuracies):
        return float("nan")
    try:
        return ratio(*accuracies)
    except ValueError:
        return float("nan")


def _mean(values) -> float:
    values = np.asarray(values, dtype=float)
    return float(values.mean()) if values.size else float("nan")


def run(config: Config, asset_directory: str | Path) -> Result:
    """Evaluate the ``tabular_lm_miniature`` asset in ``asset_directory`` for ``config``."""
    asset = load_asset(Path(asset_directory))
    tasks = asset["tasks"]
    frame, per_seed = evaluate_tasks(asset, config)
    audits = audit_tasks(tasks, asset["pool"], frame, config)
    n_test = [len(t.y_test) for t in tasks]
    summary, near_rows, rows = score_audit(frame, audits, n_test, config)
    summary.update(finding_summaries(frame, per_seed, config))
    summary["estimates"] = finding_estimates(frame, config)
    summary.update(real_table_summaries(frame, near_rows, rows, n_test, config, summary["estimates"]))
    summary["test_rows"] = int(np.median(n_test))
    summary["expected_chance_majority"] = metrics.expected_majority_accuracy(summary["test_rows"], 0.5)
    # -- the detectors on perturbation families they were not designed for, beside a naive string match
    robust = robustness.robustness_table(tasks, make_rng(config.seed, 9), round_digits=config.round_digits,
                                         near_duplicate_tolerance=config.near_duplicate_tolerance)
    summary["naive_exact_recall"] = _naive_exact_recall(tasks, asset["pool"], frame, n_test)
    return Result(frame, near_rows, summary, asset["metrics"]["losses"], robust)


def evaluate_tasks(asset: dict, config: Config) -> tuple[pd.DataFrame, dict]:
    """One row per task: group, majority baselines, accuracy, validity and lift of each model and baseline.

    Returns the frame and the per-model-seed accuracies ``{kind: (n_seeds, n_tasks)}``. ``lift_*``
    is the paper's lift (over the test split's majority class); ``corrected_lift_*`` is the lift
    over the train split's majority class scored on the test split (no selection on the test labels).
    """
    tasks, key = asset["tasks"], asset["key"]
    frame = pd.DataFrame({
        "task": [t.name for t in tasks], "source": [t.source for t in tasks], "type": [t.task_type for t in tasks],
        "overlap": [key["overlap"].get(t.name, "") for t in tasks], "leak": [t.name in key["leak"] for t in tasks],
    })
    frame["group"] = np.where(frame.overlap != "", "overlap", np.where(frame.leak, "leak", "clean"))
    frame["origin"] = np.where(frame.source == "synthetic", "synthetic", "real")
    frame["majority"] = [metrics.majority_baseline(t.y_test)[1] for t in tasks]
    frame["majority_train"] = [metrics.held_out_majority_accuracy(t.y_train, t.y_test) for t in tasks]
    per_seed = {}
    for kind in MODEL_KINDS:
        per_seed[kind], valid = model_accuracies(asset["models"][kind], asset["vocab"], tasks)
        frame[f"acc_{kind}"], frame[f"valid_{kind}"] = per_seed[kind].mean(axis=0), valid.mean(axis=0)
        frame[f"lift_{kind}"] = metrics.lift(frame[f"acc_{kind}"].to_numpy(), frame.majority.to_numpy())
    classical = np.array([classical_accuracies(t, config.gbm_estimators, config.seed) for t in tasks])
    frame["acc_lr"], frame["acc_gbm"] = classical[:, 0], classical[:, 1]
    frame["lift_lr"] = frame.acc_lr - frame.majority
    frame["lift_gbm"] = frame.acc_gbm - frame.majority
    for kind in (*MODEL_KINDS, "lr"):
        frame[f"corrected_lift_{kind}"] = frame[f"acc_{kind}"] - frame.majority_train
    return frame, per_seed


def audit_tasks(tasks, pool, frame: pd.DataFrame, config: Config) -> list[dict]:
    """Run the three detectors on every task (they read the pool text and the tables, never the key).

    Adds the per-task flag counts and leakage scores to ``frame`` in place; returns the per-task audits.
    """
    pool_tables, records = audit.parse_documents(pool)
    hashes = audit.pool_hashes(records, config.round_digits)
    audits = [audit.audit_task(t, pool_tables, hashes, near_duplicate_tolerance=config.near_duplicate_tolerance,
                               leakage_threshold=config.leakage_threshold, round_digits=config.round_digits)
              for t in tasks]
    frame["exact_rows_flagged"] = [int(a["exact"].sum()) for a in audits]
    frame["near_rows_flagged"] = [int((a["near_distance"] <= config.near_duplicate_tolerance).sum()) for a in audits]
    frame["leakage_score"] = [a["leakage"]["score"] for a in audits]
    frame["leakage_flagged"] = [a["leakage"]["flagged"] for a in audits]
    frame["leakage_after_dedup"] = [a["leakage_after_dedup"]["flagged"] for a in audits]
    return audits


def score_audit(frame: pd.DataFrame, audits: list[dict], n_test: list[int], config: Config) -> tuple[dict, pd.DataFrame, dict]:
    """Score the detectors against the contamination key.

    Returns the detector metrics, the per-row near-duplicate scores (rows not copied exactly) and the
    row-level arrays the real-table subset reuses (``exact_flags``, ``exact_truth``, ``near_flags``,
    ``near_truth``, ``leak_flags``, ``leak_truth``).
    """
    mode_rows = np.repeat(frame.overlap.to_numpy(), n_test)
    exact_flags = np.concatenate([a["exact"] for a in audits])
    exact_truth = mode_rows == "exact"
    distance = np.concatenate([a["near_distance"] for a in audits])
    near_rows = pd.DataFrame({"task": np.repeat(frame.task.to_numpy(), n_test), "mode": mode_rows, "distance": distance})
    near_rows = near_rows[near_rows["mode"] != "exact"].reset_index(drop=True)  # exact copies are the other detector's
    near_truth = (near_rows["mode"] == "near").to_numpy()
    near_flags = (near_rows.distance <= config.near_duplicate_tolerance).to_numpy()
    finite = np.where(np.isfinite(near_rows.distance), near_rows.distance, 1e6)
    leak_truth, leak_flags = frame.leak.to_numpy(), frame.leakage_flagged.to_numpy()
    leak_tasks = frame[frame.leak]
    survived = (leak_tasks.exact_rows_flagged == 0) & leak_tasks.leakage_after_dedup
    summary = {
        "exact_recall": _mean(exact_flags[exact_truth]),
        "exact_precision": float(exact_truth[exact_flags].mean()) if exact_flags.any() else float("nan"),
        "exact_injected_rows": int(exact_truth.sum()),
        "near_recall": _mean(near_flags[near_truth]),
        "near_false_positive_rate": _mean(near_flags[~near_truth]),
        "near_injected_rows": int(near_truth.sum()), "near_negative_rows": int((~near_truth).sum()),
        "near_roc": _roc(near_truth, -finite),
        "leak_recall": _mean(leak_flags[leak_truth]),
        "leak_false_positive_rate": _mean(leak_flags[~leak_truth]),
        "leak_roc": _roc(leak_truth, frame.leakage_score.to_numpy()),
        "leak_survival": _mean(survived), "leak_tasks": int(len(leak_tasks)),
    }
    rows = {"exact_flags": exact_flags, "exact_truth": exact_truth, "near_flags": near_flags, "near_truth": near_truth,
            "leak_flags": leak_flags, "leak_truth": leak_truth}
    return summary, near_rows, rows


def finding_summaries(frame: pd.DataFrame, per_seed: dict, config: Config) -> dict:
    """Point values of the three findings: medians and their intervals, top-decile enrichment, ratios per model seed."""
    standard = frame.type.isin(STANDARD_TYPES)
    quartile = frame.type == "quartile"
    clean_q = quartile & (frame.group == "clean")
    std_frame = frame[standard]
    # -- finding 1: lift on clean vs contaminated standard tasks, top decile enrichment
    clean_lifts = frame.lift_tlm[standard & (frame.group == "clean")].to_numpy()
    contaminated_lifts = frame.lift_tlm[standard & (frame.group == "overlap")].to_numpy()
    return {
        "clean_median_lift": float(np.median(clean_lifts)),
        "clean_ci": metrics.bootstrap_ci(clean_lifts, make_rng(config.seed, 2), resamples=config.bootstrap_resamples),
        "clean_tasks": int(clean_lifts.size),
        "contaminated_median_lift": float(np.median(contaminated_lifts)),
        "contaminated_tasks": int(contaminated_lifts.size),
        "top_decile": metrics.top_fraction_enrichment(frame.lift_tlm.to_numpy(), (frame.group == "overlap").to_numpy(), 0.1),
        # ... and its second half: the aggregate lift is carried by quartile tasks (all tasks, every group)
        "quartile_vs_standard": metrics.median_difference_ci(
            frame.lift_tlm[quartile].to_numpy(), frame.lift_tlm[standard].to_numpy(),
            make_rng(config.seed, 3), resamples=config.bootstrap_resamples),
        "quartile_lift_share": metrics.lift_share(frame.lift_tlm.to_numpy(), quartile.to_numpy()),
        # -- finding 3: instruction-only recovery on standard tasks, format familiarity on quartile tasks
        "recovery_ratio": _or_nan(metrics.recovery_ratio, frame.acc_base[standard].mean(), frame.acc_tlm[standard].mean()),
        "gap_closure": _or_nan(metrics.gap_closure, frame.acc_base[quartile].mean(), frame.acc_base_q[quartile].mean(),
                               frame.acc_tlm[quartile].mean()),
        "gap_closure_clean": _or_nan(metrics.gap_closure, frame.acc_base[clean_q].mean(),
                                     frame.acc_base_q[clean_q].mean(), frame.acc_tlm[clean_q].mean()),
        "recovery_ratio_per_seed": [
            _or_nan(metrics.recovery_ratio, b[standard].mean(), m[standard].mean())
            for b, m in zip(per_seed["base"], per_seed["tlm"])],
        "gap_closure_per_seed": [
            _or_nan(metrics.gap_closure, b[quartile].mean(), q[quartile].mean(), m[quartile].mean())
            for b, q, m in zip(per_seed["base"], per_seed["base_q"], per_seed["tlm"])],
        "median_lift_by_type": {kind: metrics.median_lift_by_type(frame[f"lift_{kind}"], frame.type)
                                for kind in (*MODEL_KINDS, "lr", "gbm")},
        "lift_base_standard": float(std_frame.lift_base.mean()),
        "lift_tlm_standard": float(std_frame.lift_tlm.mean()),
        "clean_median_corrected_lift": float(np.median(frame.corrected_lift_tlm[standard & (frame.group == "clean")])),
        "majority_inflation_clean": float((frame.majority - frame.majority_train)[standard & (frame.group == "clean")].mean()),
    }


def finding_estimates(frame: pd.DataFrame, config: Config) -> dict:
    """The interval estimates the ledger decides on (tasks are the unit of replication)."""
    R = config.bootstrap_resamples
    standard = frame.type.isin(STANDARD_TYPES)
    quartile = frame.type == "quartile"
    clean, overlap = standard & (frame.group == "clean"), standard & (frame.group == "overlap")
    std_frame = frame[standard]
    return {
        "clean_lift": metrics.median_interval(frame.lift_tlm[clean].to_numpy(), make_rng(config.seed, 2), resamples=R),
        "contaminated_lift": metrics.median_interval(frame.lift_tlm[overlap].to_numpy(), make_rng(config.seed, 4), resamples=R),
        # controls: a learner fitted per task on the same clean tasks; the table-free model on the contaminated ones
        "lr_clean_lift": metrics.median_interval(frame.lift_lr[clean].to_numpy(), make_rng(config.seed, 10), resamples=R),
        "base_contaminated_lift": metrics.median_interval(frame.lift_base[overlap].to_numpy(), make_rng(config.seed, 11), resamples=R),
        # the near-zero test on the lift over the train split's majority (no selection on the test labels)
        "clean_corrected_lift": metrics.median_interval(frame.corrected_lift_tlm[clean].to_numpy(),
                                                        make_rng(config.seed, 16), resamples=R),
        "lr_clean_corrected_lift": metrics.median_interval(frame.corrected_lift_lr[clean].to_numpy(),
                                                           make_rng(config.seed, 17), resamples=R),
        "quartile_vs_standard": metrics.median_difference_estimate(
            frame.lift_tlm[quartile].to_numpy(), frame.lift_tlm[standard].to_numpy(), make_rng(config.seed, 3), resamples=R),
        "recovery_ratio": metrics.task_bootstrap(metrics.recovery_of_means, [std_frame.acc_base, std_frame.acc_tlm],
                                                 make_rng(config.seed, 6), resamples=R),
        "lift_recovery_contrast": metrics.task_bootstrap(metrics.lift_recovery_contrast,
                                                         [std_frame.acc_base, std_frame.acc_tlm, std_frame.majority],
                                                         make_rng(config.seed, 7), resamples=R),
        "gap_closure": metrics.task_bootstrap(metrics.gap_closure_of_means,
                                              [frame.acc_base[quartile], frame.acc_base_q[quartile], frame.acc_tlm[quartile]],
                                              make_rng(config.seed, 8), resamples=R),
    }


def real_table_summaries(frame: pd.DataFrame, near_rows: pd.DataFrame, rows: dict, n_test: list[int], config: Config,
                         estimates: dict) -> dict:
    """The findings and detector checks restricted to tasks cut from real tables (sklearn, statsmodels).

    Adds the real-table interval estimates to ``estimates`` in place (None where fewer than two tasks).
    """
    R = config.bootstrap_resamples
    standard = frame.type.isin(STANDARD_TYPES).to_numpy()
    real = (frame.origin == "real").to_numpy()
    real_std = standard & real
    real_rows = np.repeat(real, n_test)
    near_real = np.isin(near_rows.task.to_numpy(), frame.task[real].to_numpy())
    exact_flags, exact_truth = rows["exact_flags"], rows["exact_truth"]
    near_flags, near_truth = rows["near_flags"], rows["near_truth"]
    leak_flags, leak_truth = rows["leak_flags"], rows["leak_truth"]
    out = {
        "real_tasks": int(real.sum()),
        "real_sources": sorted(set(frame.source[real])),
        "real_clean_tasks": int((real_std & (frame.group == "clean").to_numpy()).sum()),
        "real_contaminated_tasks": int((real_std & (frame.group == "overlap").to_numpy()).sum()),
        "exact_recall_real": _mean(exact_flags[exact_truth & real_rows]),
        "exact_injected_rows_real": int((exact_truth & real_rows).sum()),
        "near_recall_real": _mean(near_flags[near_truth & near_real]),
        "near_false_positive_rate_real": _mean(near_flags[~near_truth & near_real]),
        "near_injected_rows_real": int((near_truth & near_real).sum()),
        "near_negative_rows_real": int((~near_truth & near_real).sum()),
        "leak_false_positive_rate_real": _mean(leak_flags[~leak_truth & real]),
        "leak_clean_tasks_real": int((~leak_truth & real).sum()),
    }
    for name, column, group, stream in (("clean_lift_real", "lift_tlm", "clean", 12), ("lr_clean_lift_real", "lift_lr", "clean", 13),
                                        ("contaminated_lift_real", "lift_tlm", "overlap", 14),
                                        ("base_contaminated_lift_real", "lift_base", "overlap", 15),
                                        ("clean_corrected_lift_real", "corrected_lift_tlm", "clean", 18),
                                        ("lr_clean_corrected_lift_real", "corrected_lift_lr", "clean", 19)):
        values = frame[column][real_std & (frame.group == group).to_numpy()].to_numpy()
        estimates[name] = (metrics.median_interval(values, make_rng(config.seed, stream), resamples=R)
                           if values.size >= 2 else None)
    return out


def _naive_exact_recall(tasks, pool, frame, n_test) -> float:
    """Share of the benchmark's injected exact rows that a naive string match of the serialized row finds."""
    from .tables import serialize_row

    lines = {line.strip() for doc in pool for line in doc}
    hits = []
    for t, mode in zip(tasks, frame.overlap):
        if mode == "exact":
            hits += [serialize_row(t.feature_names, row, t.options, lab) in lines for row, lab in zip(t.x_test, t.y_test)]
    return _mean(np.array(hits, dtype=float)) if hits else float("nan")
