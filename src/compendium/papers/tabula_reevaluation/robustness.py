"""The detectors on perturbation families they were not designed for, beside a naive string match.

The benchmark's injected copies (``tables.contamination_documents``) are the perturbations the
detectors were built for: an exact copy always includes one verbatim copy, so a naive string match
of the serialized row finds every injected exact row too. This module injects each family alone,
into a fresh pool of one document per task, and scores three detectors on the copied test rows:

* ``naive``: the serialized test row (names, values, answer) occurs verbatim as a pool line;
* ``canonical``: :func:`audit.canonical_row_hash` (names normalised and sorted, numbers rounded);
* ``near``: :func:`audit.near_duplicate_distance` at the chapter's tolerance.

Families: ``verbatim``; ``permuted+padded`` (columns permuted, numbers padded: the canonical hash's
design case); ``rounded-2`` (numbers at 2 significant digits); ``dropped-column`` (one column
removed); ``renamed-column`` (one column under another name); ``reordered-rows`` (the rows
shuffled). Only the first two are in the benchmark's design.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from . import audit
from .tables import Task, format_value, serialize_row

FAMILIES = ("verbatim", "permuted+padded", "rounded-2", "dropped-column", "renamed-column", "reordered-rows")
DETECTORS = ("naive", "canonical", "near")
DESIGNED_FOR = ("verbatim", "permuted+padded")


def _padded(value: float) -> str:
    text = format_value(value)
    return text + ("0" if "." in text else ".0")


def perturbed_document(task: Task, family: str, rng: np.random.Generator) -> list[str]:
    """The test rows of ``task`` as one pool document, perturbed by ``family``."""
    x, names, labels = task.x_test, list(task.feature_names), list(task.y_test)
    k = x.shape[1]
    if family == "verbatim":
        return [serialize_row(names, row, task.options, lab) for row, lab in zip(x, labels)]
    if family == "permuted+padded":
        order = rng.permutation(k)
        return [serialize_row([names[j] for j in order], row[order], task.options, lab, texts=[_padded(v) for v in row[order]])
                for row, lab in zip(x, labels)]
    if family == "rounded-2":
        return [serialize_row(names, row, task.options, lab, texts=[format_value(v, 2) for v in row])
                for row, lab in zip(x, labels)]
    if family == "dropped-column":
        if k < 2:
            raise ValueError("dropped-column needs at least two columns")
        keep = np.delete(np.arange(k), int(rng.integers(k)))
        return [serialize_row([names[j] for j in keep], row[keep], task.options, lab) for row, lab in zip(x, labels)]
    if family == "renamed-column":
        j = int(rng.integers(k))
        renamed = [f"{n}_v2" if i == j else n for i, n in enumerate(names)]
        return [serialize_row(renamed, row, task.options, lab) for row, lab in zip(x, labels)]
    if family == "reordered-rows":
        order = rng.permutation(len(x))
        return [serialize_row(names, x[i], task.options, labels[i]) for i in order]
    raise ValueError(f"family must be one of {FAMILIES}, got {family!r}")


def detector_recall(tasks, family: str, rng: np.random.Generator, *, round_digits: int,
                    near_duplicate_tolerance: float) -> dict:
    """Recall of each detector on the test rows of ``tasks`` copied once under ``family``.

    Returns
    -------
    dict detector -> recall over all copied rows, ``either`` (canonical or near: what the audit
    flags) and ``rows``.
    """
    if not tasks:
        raise ValueError("need at least one task")
    docs = [perturbed_document(t, family, rng) for t in tasks]
    pool_tables, records = audit.parse_documents(docs)
    hashes = audit.pool_hashes(records, round_digits)
    lines = {line.strip() for doc in docs for line in doc}
    found = {d: [] for d in DETECTORS}
    for t in tasks:
        found["naive"].append([serialize_row(t.feature_names, row, t.options, lab) in lines
                               for row, lab in zip(t.x_test, t.y_test)])
        found["canonical"].append(audit.exact_overlap(audit.task_row_hashes(t, "test", round_digits), hashes))
        found["near"].append(audit.near_duplicate_distance(t.feature_names, t.x_test, pool_tables) <= near_duplicate_tolerance)
    flags = {d: np.concatenate([np.asarray(f, bool) for f in found[d]]) for d in DETECTORS}
    out = {d: float(np.mean(flags[d])) for d in DETECTORS}
    out["either"] = float(np.mean(flags["canonical"] | flags["near"]))  # what the audit flags
    out["rows"] = int(flags["naive"].size)
    return out


def robustness_table(tasks, rng: np.random.Generator, *, round_digits: int, near_duplicate_tolerance: float) -> pd.DataFrame:
    """One row per family: recall of each detector and of the audit (canonical or near), and the design flag."""
    rows = []
    for family in FAMILIES:
        r = detector_recall(tasks, family, rng, round_digits=round_digits, near_duplicate_tolerance=near_duplicate_tolerance)
        rows.append({"family": family, "designed_for": family in DESIGNED_FOR, **r})
    return pd.DataFrame(rows)


__all__ = ["DESIGNED_FOR", "DETECTORS", "FAMILIES", "detector_recall", "perturbed_document", "robustness_table"]
