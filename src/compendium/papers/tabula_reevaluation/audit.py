"""The contamination audit: exact overlap, near duplicates and task-level leakage.

The detectors read only what an auditor has: the serialized pool (text) and the benchmark tables.
They never see the contamination key; the scorer compares their flags with it afterwards.

* :func:`canonical_row_hash` hashes a row after canonicalization (column names normalized and
  sorted, numbers parsed and rounded to ``round_digits`` significant digits, the answer kept), so
  a copy with permuted columns or reformatted numbers hashes the same.
* :func:`near_duplicate_distance` z-scores every column within its own table (which cancels a
  change of units), then takes, for each query row, the RMS distance to the nearest row of any
  reference table with the same columns.
* :func:`single_feature_leakage` asks whether one column alone predicts the target: a 1-D decision
  tree with as many leaves as classes, scored in-sample. Row deduplication cannot remove this.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from sklearn.tree import DecisionTreeClassifier

from .tables import Task, format_value, parse_serialized_row


def _normalize_name(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", str(name).strip().lower()).strip("_")


def _canonical_value(value, round_digits: int) -> str:
    try:
        x = float(value)
    except (TypeError, ValueError):
        return str(value).strip().lower()
    text = f"{x:.{round_digits}g}"
    return "0" if text in ("-0", "0") else text


def canonical_row_hash(cells: Mapping[str, object], label: str | None, round_digits: int = 3) -> str:
    """Hash of a row that ignores column order, number formatting and name case.

    Parameters
    ----------
    cells : mapping column name -> value (number or text)
    label : the row's answer (part of the record), or None
    round_digits : significant digits kept for numbers (>= 1)
    """
    if round_digits < 1:
        raise ValueError("round_digits must be at least 1")
    items = sorted((_normalize_name(k), _canonical_value(v, round_digits)) for k, v in cells.items())
    text = "|".join(f"{k}={v}" for k, v in items) + f"|target={label}"
    return hashlib.sha1(text.encode()).hexdigest()


def task_row_hashes(task: Task, split: str, round_digits: int = 3) -> list[str]:
    """Canonical hashes of a task's ``'train'`` or ``'test'`` rows, in order."""
    x, y = (task.x_train, task.y_train) if split == "train" else (task.x_test, task.y_test)
    return [canonical_row_hash({n: format_value(v) for n, v in zip(task.feature_names, row)}, lab, round_digits)
            for row, lab in zip(x, y)]


@dataclass(frozen=True)
class ReferenceTable:
    """A reference table: column ``names`` and ``values`` (n_rows, n_columns) in that column order."""

    names: tuple
    values: np.ndarray


def parse_documents(documents: Sequence[Sequence[str]]) -> tuple[list[ReferenceTable], list[list[tuple]]]:
    """Parse pool documents into tables and per-row ``(cells, label)`` records."""
    tables, records = [], []
    for doc in documents:
        rows = [parse_serialized_row(line) for line in doc]
        names = tuple(sorted(rows[0][1]))
        values = np.array([[float(r[1][n]) for n in names] for r in rows if tuple(sorted(r[1])) == names])
        tables.append(ReferenceTable(names, values))
        records.append([(r[1], r[2]) for r in rows])
    return tables, records


def pool_hashes(records: Sequence[Sequence[tuple]], round_digits: int = 3) -> set[str]:
    """The set of canonical hashes of every pool row."""
    return {canonical_row_hash(cells, label, round_digits) for doc in records for cells, label in doc}


def exact_overlap(query_hashes: Sequence[str], reference_hashes: set[str]) -> np.ndarray:
    """Boolean flags (n_query,): the query row's canonical hash occurs in the references."""
    return np.array([h in reference_hashes for h in query_hashes], dtype=bool)


def zscore_columns(values: np.ndarray) -> np.ndarray:
    """Z-score each column of (n, k) values within the table (constant columns get scale 1)."""
    values = np.asarray(values, dtype=float)
    std = values.std(axis=0)
    return (values - values.mean(axis=0)) / np.where(std > 0, std, 1.0)


def near_duplicate_distance(names: Sequence[str], values: np.ndarray, references: Sequence[ReferenceTable]) -> np.ndarray:
    """Distance of each query row to its nearest reference row with the same columns.

    Parameters
    ----------
    names : the query table's column names, length k
    values : (n, k) query rows
    references : tables; only those holding every query column are compared

    Returns
    -------
    (n,) RMS distance over the k z-scored columns; ``inf`` where no reference has the columns.
    """
    values = np.asarray(values, dtype=float)
    if values.ndim != 2 or values.shape[1] != len(names):
        raise ValueError("values must be (n_rows, len(names))")
    keys = [_normalize_name(n) for n in names]
    order = np.argsort(keys)
    query = zscore_columns(values[:, order])  # (n, k), columns in sorted-name order
    wanted = [keys[i] for i in order]
    best = np.full(values.shape[0], np.inf)
    for ref in references:
        ref_keys = [_normalize_name(n) for n in ref.names]
        if not set(wanted) <= set(ref_keys) or len(ref.values) == 0:
            continue
        cols = [ref_keys.index(k) for k in wanted]
        other = zscore_columns(ref.values[:, cols])  # (m, k)
        d = np.sqrt(((query[:, None, :] - other[None, :, :]) ** 2).mean(axis=2))  # (n, m)
        best = np.minimum(best, d.min(axis=1))
    return best


def single_feature_leakage(x: np.ndarray, y: Sequence[str], threshold: float = 0.99) -> dict:
    """Does one column alone determine the target?

    For each column, a decision tree on that column with at most as many leaves as classes is fitted
    and scored on the same rows. Returns ``{'score', 'column', 'flagged'}`` for the best column.
    """
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=str)
    if x.ndim != 2 or x.shape[0] != y.shape[0] or x.shape[0] < 2:
        raise ValueError("x must be (n_rows, n_columns) with one label per row, n_rows >= 2")
    if not 0 < threshold <= 1:
        raise ValueError("threshold must lie in (0, 1]")
    n_classes = max(2, np.unique(y).size)
    scores = [DecisionTreeClassifier(max_leaf_nodes=n_classes, random_state=0).fit(x[:, [j]], y).score(x[:, [j]], y)
              for j in range(x.shape[1])]
    j = int(np.argmax(scores))
    return {"score": float(scores[j]), "column": j, "flagged": bool(scores[j] >= threshold)}


def audit_task(task: Task, pool_tables: Sequence[ReferenceTable], pool_hash_set: set[str], *,
               near_duplicate_tolerance: float, leakage_threshold: float, round_digits: int) -> dict:
    """Run the three detectors on one task (test rows against its train split and the pool).

    Returns per-row ``exact`` flags and ``near_distance`` (n_test,), the ``leakage`` result on all
    rows, and ``leakage_after_dedup``: the leakage detector rerun after dropping every test row that
    either row detector flagged.
    """
    train_hashes = set(task_row_hashes(task, "train", round_digits))
    test_hashes = task_row_hashes(task, "test", round_digits)
    exact = exact_overlap(test_hashes, pool_hash_set | train_hashes)
    train_table = ReferenceTable(tuple(task.feature_names), task.x_train)
    near = near_duplicate_distance(task.feature_names, task.x_test, [train_table, *pool_tables])
    keep = ~exact & ~(near <= near_duplicate_tolerance)
    all_x = np.vstack([task.x_train, task.x_test])
    all_y = np.concatenate([task.y_train, task.y_test])
    kept_x = np.vstack([task.x_train, task.x_test[keep]])
    kept_y = np.concatenate([task.y_train, task.y_test[keep]])
    return {
        "exact": exact,
        "near_distance": near,
        "leakage": single_feature_leakage(all_x, all_y, leakage_threshold),
        "leakage_after_dedup": single_feature_leakage(kept_x, kept_y, leakage_threshold),
        "rows_removed_by_dedup": int((~keep).sum()),
    }
