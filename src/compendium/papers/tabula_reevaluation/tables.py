"""Benchmark tasks, row serialization, the pretraining pool and injected contamination.

A *task* is a small table with a train and a test split and a target of one of three types:
binary (answers ``yes``/``no``), categorical (answers ``a``, ``b``, ...) and quartile (a
regression target binned into ``q1..q4`` with edges fitted on the train split only). Tasks come
from real tables (sklearn's bundled breast cancer, wine, iris, diabetes; statsmodels' anes96,
randhie, modechoice and grunfeld, see :data:`REAL_SOURCES`) and from sklearn's synthetic
generators with random column names.

A row is serialized as one line of text, for example::

    opts yes no ; alcohol 13.2 , malic_acid 1.78 , hue 1.04 ; target yes

The *pool* is the pretraining corpus of the miniature TLM: documents (tables) of serialized rows.
It holds unrelated synthetic tables and, for a known random subset of tasks, copies of their test
rows (exact or perturbed). Another subset gets a leak column, a deterministic transform of the
target. Which task got what is recorded in a *key* that only the scorer reads.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
from sklearn import datasets

ANSWERS = {"binary": ("yes", "no"), "categorical": ("a", "b", "c", "d", "e"), "quartile": ("q1", "q2", "q3", "q4")}
TASK_TYPES = ("binary", "categorical", "quartile")
COLUMN_NAMES = (
    "age", "dose", "rate", "mass", "temp", "width", "height", "score", "level", "index", "ratio",
    "depth", "speed", "count", "cost", "load", "flow", "volume", "weight", "length", "area", "price",
    "income", "pressure", "density", "yield", "power", "voltage", "current", "humidity", "rainfall",
    "distance", "duration", "latency", "margin", "budget", "stock", "demand", "supply", "visits",
    "clicks", "tenure", "salary", "glucose", "insulin", "sodium", "calcium", "protein", "fiber",
    "sugar", "ozone", "noise", "signal", "gain", "drift", "torque", "friction", "capacity", "charge",
)
LEAK_NAMES = ("code", "grade", "band", "tier", "status_id")
INSTRUCTION_WORDS = ("opts", ";", ",", "target", "is", "the", "larger", "than", "even", "smallest", "largest",
                     "of", "month", "falls", "in", "which", "quarter", "with")
INSTRUCTION_WORDS += tuple(a for answers in ANSWERS.values() for a in answers)
_NUMBER = re.compile(r"^-?\d+(\.\d+)?$")


@dataclass(frozen=True)
class Task:
    """One benchmark table. ``x_*`` are (n, n_features) floats; ``y_*`` are (n,) answer strings."""

    name: str
    source: str
    task_type: str
    feature_names: tuple
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray

    @property
    def options(self) -> tuple:
        """Answer options shown in the prompt (all answers of the type present in the task)."""
        if self.task_type == "categorical":
            k = len(set(self.y_train.tolist()) | set(self.y_test.tolist()))
            return ANSWERS["categorical"][:k]
        return ANSWERS[self.task_type]

    def prompts(self) -> list[str]:
        """Serialized test rows without answers, shape (n_test,)."""
        return [serialize_row(self.feature_names, row, self.options) for row in self.x_test]


def format_value(value: float, digits: int = 3) -> str:
    """A number as positional text with ``digits`` significant digits (no exponent)."""
    text = np.format_float_positional(float(value), precision=digits, fractional=False, trim="-")
    return "0" if text in ("-0", "0.", "-0.") else text


def round_significant(values, digits: int = 3) -> np.ndarray:
    """Round an array to ``digits`` significant digits, exactly as :func:`format_value` prints it."""
    flat = np.asarray(values, dtype=float).ravel()
    return np.array([float(format_value(v, digits)) for v in flat]).reshape(np.shape(values))


def serialize_row(feature_names, values, options, label: str | None = None, texts=None) -> str:
    """One row as a line of text; ``texts`` overrides how each value is written."""
    if len(feature_names) != len(values):
        raise ValueError("one value per feature name")
    texts = [format_value(v) for v in values] if texts is None else texts
    cells = " , ".join(f"{n} {t}" for n, t in zip(feature_names, texts))
    line = f"opts {' '.join(options)} ; {cells} ; target"
    return line if label is None else f"{line} {label}"


def parse_serialized_row(line: str) -> tuple[tuple, dict, str | None]:
    """Inverse of :func:`serialize_row`: ``(options, {name: value text}, label or None)``."""
    parts = line.split(" ; ")
    if len(parts) != 3 or not parts[0].startswith("opts ") or not parts[2].startswith("target"):
        raise ValueError(f"not a serialized row: {line!r}")
    options = tuple(parts[0].split()[1:])
    cells = {}
    for cell in parts[1].split(" , "):
        name, _, text = cell.rpartition(" ")
        cells[name] = text
    rest = parts[2].split()
    return options, cells, (rest[1] if len(rest) > 1 else None)


def _digit_groups(digits: str) -> list[str]:
    return [digits[i:i + 3] for i in range(0, len(digits), 3)]


def tokenize(line: str) -> list[str]:
    """Words stay whole; a number becomes its sign, digit groups of up to three and its point.

    Like the tokenizer of Llama 3 (the base of Tabula-8B), digits are grouped left to right in
    chunks of at most three: ``-13.0052`` -> ``- 13 . 005 2``.
    """
    out: list[str] = []
    for word in line.split():
        if not _NUMBER.match(word):
            out.append(word)
            continue
        if word.startswith("-"):
            out.append("-")
            word = word[1:]
        whole, _, frac = word.partition(".")
        out += _digit_groups(whole)
        if frac:
            out += ["."] + _digit_groups(frac)
    return out


def quartile_edges(y_train) -> np.ndarray:
    """Quartile edges of a regression target, fitted on the train split only. Shape (3,)."""
    y_train = np.asarray(y_train, dtype=float)
    if y_train.size < 4:
        raise ValueError("quartile_edges needs at least four training targets")
    return np.quantile(y_train, [0.25, 0.5, 0.75])


def quartile_labels(y, edges) -> np.ndarray:
    """Bin ``y`` with the given edges into ``'q1'..'q4'`` (q1 = lowest quarter)."""
    bins = np.searchsorted(np.asarray(edges), np.asarray(y, dtype=float), side="right")
    return np.array([f"q{b + 1}" for b in bins])


# ----------------------------------------------------------------------------- sources
#: Real tables (manifest names) and the task type each becomes: sklearn's bundled sets first, then
#: four public-domain tables shipped inside statsmodels (adapters in :mod:`.real`).
REAL_SOURCES = (("breast_cancer", "binary"), ("wine", "categorical"), ("iris", "categorical"),
                ("diabetes", "quartile"), ("statsmodels_anes96_vote", "binary"),
                ("statsmodels_randhie_visit", "binary"), ("statsmodels_modechoice_wide", "categorical"),
                ("statsmodels_grunfeld_investment", "quartile"))


def _real_sources():
    """(name, task type, features (n, d), target (n,), feature names) for the bundled datasets."""
    out = []
    from compendium import data

    for name, ttype in REAL_SOURCES:
        bunch = data.load(name)  # checked against data/manifest.yaml
        names = [re.sub(r"[^a-z0-9]+", "_", n.lower())[:14].strip("_") for n in bunch.feature_names]
        if len(set(names)) != len(names):  # pragma: no cover - guards the truncation
            raise RuntimeError(f"{name}: truncated feature names collide")
        x = bunch.data * (100.0 if name == "diabetes" else 1.0)  # diabetes is pre-scaled to tiny values
        out.append((name, ttype, x, bunch.target, names))
    return out


def _synthetic_table(rng, task_type: str, n_rows: int, n_features: int):
    """A synthetic table with random column names and measurement-like scales."""
    seed = int(rng.integers(2**31))
    informative = min(n_features, 3)
    if task_type == "quartile":
        x, y = datasets.make_regression(n_samples=n_rows, n_features=n_features, n_informative=informative,
                                        noise=float(rng.uniform(5, 20)), random_state=seed)
    else:
        n_classes = 2 if task_type == "binary" else int(rng.integers(3, 6))
        x, y = datasets.make_classification(
            n_samples=n_rows, n_features=n_features, n_informative=informative, n_redundant=0,
            n_classes=n_classes, n_clusters_per_class=1, class_sep=float(rng.uniform(0.8, 1.5)),
            flip_y=0.03, random_state=seed)
    scale = 10.0 ** rng.uniform(-1, 2.5, size=n_features)
    x = x * scale + rng.uniform(-1, 3, size=n_features) * scale
    names = [str(n) for n in rng.choice(COLUMN_NAMES, size=n_features, replace=False)]
    return x, y, names


def _answers_for(task_type: str, y_raw, rng, edges=None):
    if task_type == "quartile":
        return quartile_labels(y_raw, edges)
    classes = np.unique(y_raw)
    letters = ANSWERS[task_type][: classes.size]
    mapping = dict(zip(classes.tolist(), rng.permutation(letters).tolist()))
    return np.array([mapping[v] for v in np.asarray(y_raw).tolist()])


def make_task(rng, name, source, task_type, x, y_raw, feature_names, n_test, leak: bool = False) -> Task:
    """Split a table into train/test, turn the target into answers, optionally add a leak column."""
    x = round_significant(x)
    perm = rng.permutation(len(x))
    test, train = perm[:n_test], perm[n_test:]
    edges = quartile_edges(y_raw[train]) if task_type == "quartile" else None
    answers = _answers_for(task_type, y_raw, rng, edges)
    names = list(feature_names)
    if leak:  # the target again, recoded as numbers, under an innocent name
        codes = dict(zip(sorted(set(answers.tolist())), rng.choice(np.arange(10, 99), 5, replace=False).tolist()))
        column = np.array([float(codes[a]) for a in answers.tolist()])
        at = int(rng.integers(len(names) + 1))
        x = np.insert(x, at, column, axis=1)
        names.insert(at, str(rng.choice([n for n in LEAK_NAMES if n not in names])))
    return Task(name, source, task_type, tuple(names), x[train], answers[train], x[test], answers[test])


def make_tasks(rng, n_tasks: int, n_train: int, n_test: int, leak_tasks=frozenset()) -> list[Task]:
    """Build ``n_tasks`` tasks, about a third of each type; real datasets first, rows never shared."""
    types = [TASK_TYPES[i % 3] for i in range(n_tasks)]
    n_rows = n_train + n_test
    real = {t: [] for t in TASK_TYPES}
    for source, ttype, x, y, names in _real_sources():
        order = rng.permutation(len(x))
        cursor, made = 0, 0
        while made < max(1, n_tasks // 12):
            k = min(int(rng.integers(3, 6)), x.shape[1])
            cols = np.sort(rng.choice(x.shape[1], size=k, replace=False))
            rows, seen = [], set()
            while cursor < len(order) and len(rows) < n_rows:  # skip rows whose features repeat
                key = tuple(round_significant(x[order[cursor], cols]).tolist())
                if key not in seen:
                    seen.add(key)
                    rows.append(order[cursor])
                cursor += 1
            if len(rows) < n_rows:
                break
            if ttype == "categorical" and len(np.unique(y[rows])) < 3:
                continue
            real[ttype].append((source, x[np.ix_(rows, cols)], y[rows], [names[c] for c in cols]))
            made += 1
    tasks = []
    for i, ttype in enumerate(types):
        if real[ttype]:
            source, x, y, names = real[ttype].pop(0)
        else:
            source = "synthetic"
            x, y, names = _synthetic_table(rng, ttype, n_rows, int(rng.integers(3, 6)))
        tasks.append(make_task(rng, f"t{i:03d}_{source}", source, ttype, x, y, names, n_test, leak=i in leak_tasks))
    return tasks


# ----------------------------------------------------------------------------- contamination and pool
def assign_contamination(rng, task_types, overlap_fraction: float, leak_fraction: float) -> dict:
    """Pick, per task type, ``overlap_fraction`` of tasks for row overlap and ``leak_fraction`` for leaks.

    Returns ``{'overlap': {index: 'exact' | 'near'}, 'leak': set of indices}``; half of the overlap
    tasks (alternating) get exact copies, the other half perturbed copies.
    """
    overlap, leak = [], []
    task_types = list(task_types)
    for ttype in TASK_TYPES:
        idx = rng.permutation([i for i, t in enumerate(task_types) if t == ttype]).tolist()
        n_o, n_l = round(overlap_fraction * len(idx)), round(leak_fraction * len(idx))
        overlap += idx[:n_o]
        leak += idx[n_o:n_o + n_l]
    overlap = rng.permutation(overlap).tolist()
    modes = {int(i): ("exact" if j % 2 == 0 else "near") for j, i in enumerate(overlap)}
    return {"overlap": modes, "leak": {int(i) for i in leak}}


def _padded(value: float) -> str:
    """The same number written differently (trailing zeros), for exact copies in another format."""
    text = format_value(value)
    return text + ("0" if "." in text else ".0")


def contamination_documents(rng, task: Task, mode: str, copies: int) -> list[list[str]]:
    """Copies of a task's test rows for the pool; each copy is one document (a list of lines).

    ``exact``: the first copy is verbatim; the others permute the columns and pad the numbers.
    ``near``: values are jittered by 2% of each column's spread, re-rounded, and one column is
    given in other units (times 100); copies differ in column order.
    """
    x = task.x_test.copy()
    if mode == "near":
        spread = x.std(axis=0) + 1e-12
        x = round_significant(x + rng.normal(0, 0.02, size=x.shape) * spread)
        x[:, int(rng.integers(x.shape[1]))] *= 100.0
        x = round_significant(x)
    elif mode != "exact":
        raise ValueError(f"mode must be 'exact' or 'near', got {mode!r}")
    docs = []
    for c in range(copies):
        order = np.arange(x.shape[1]) if c == 0 else rng.permutation(x.shape[1])
        names = [task.feature_names[j] for j in order]
        docs.append([
            serialize_row(names, row[order], task.options, label,
                          texts=[_padded(v) for v in row[order]] if (c > 0 and mode == "exact") else None)
            for row, label in zip(x, task.y_test)
        ])
    return docs


def pool_table_documents(rng, n_tables: int, n_rows: int) -> list[list[str]]:
    """Unrelated synthetic tables of all three types: the clean part of the pretraining pool."""
    docs = []
    for i in range(n_tables):
        ttype = TASK_TYPES[i % 3]
        x, y, names = _synthetic_table(rng, ttype, n_rows, int(rng.integers(3, 6)))
        task = make_task(rng, f"pool{i}", "pool", ttype, x, y, names, n_test=1)
        xs = np.vstack([task.x_train, task.x_test])
        ys = np.concatenate([task.y_train, task.y_test])
        docs.append([serialize_row(task.feature_names, r, task.options, a) for r, a in zip(xs, ys)])
    return docs


# ----------------------------------------------------------------------------- instruction data
def instruction_examples(rng, n: int, quartile_format: bool, words=COLUMN_NAMES) -> list[str]:
    """Non-tabular question/answer lines in the same answer format (the 'Alpaca' analogue).

    Yes/no questions (comparisons, parity, 'is it the largest of a list'), lettered
    smallest/largest choices and, with ``quartile_format``, 'which quarter holds month m' questions
    answered ``q1..q4``. Every question family comes with and without comma-separated lists, so
    the listed options (``opts``) are the only cue to the answer set. The sentences use ``words``
    (every column name of the benchmark and pool, as a language model knows its words) and
    numbers written like table values, but never a table with a target to predict.
    """
    out = []
    families = 3 if quartile_format else 2
    words = list(words)

    def number():
        return format_value(rng.normal() * 10.0 ** rng.uniform(-2, 3))

    for _ in range(n):
        family, variant = int(rng.integers(families)), int(rng.integers(3))
        w = [words[i] for i in rng.choice(len(words), size=3, replace=False)]
        if family == 0:
            if variant == 0:
                a, b = number(), number()
                body, yes = f"is the {w[0]} {a} larger than the {w[1]} {b}", float(a) > float(b)
            elif variant == 1:
                a = int(rng.integers(0, 1000))
                body, yes = f"is the {w[0]} {a} even", a % 2 == 0
            else:
                vals = [number() for _ in range(3)]
                cells = " , ".join(f"{x} {v}" for x, v in zip(w, vals))
                body, yes = f"is {w[0]} the largest of {cells}", int(np.argmax([float(v) for v in vals])) == 0
            out.append(f"opts yes no ; {body} ; target {'yes' if yes else 'no'}")
        elif family == 1:
            k = int(rng.integers(2, 6))
            letters = ANSWERS["categorical"][:k]
            vals = [number() for _ in range(k)]
            word, pick = ("smallest", np.argmin) if rng.random() < 0.5 else ("largest", np.argmax)
            sep = " , " if variant < 2 else " "
            cells = sep.join(f"{l} {v}" for l, v in zip(letters, vals))
            answer = letters[pick([float(v) for v in vals])]
            out.append(f"opts {' '.join(letters)} ; {word} {w[0]} {cells} ; target {answer}")
        else:
            m = int(rng.integers(1, 13))
            body = (f"the {w[0]} of month {m} falls in which quarter" if variant == 0 else
                    f"month {m} , with {w[0]} {number()} , {w[1]} {number()} , falls in which quarter")
            out.append(f"opts q1 q2 q3 q4 ; {body} ; target q{(m - 1) // 3 + 1}")
    return out


# ----------------------------------------------------------------------------- storage
def task_to_dict(task: Task) -> dict:
    return {"name": task.name, "source": task.source, "task_type": task.task_type,
            "feature_names": list(task.feature_names), "x_train": task.x_train.tolist(),
            "y_train": task.y_train.tolist(), "x_test": task.x_test.tolist(), "y_test": task.y_test.tolist()}


def task_from_dict(d: dict) -> Task:
    return Task(d["name"], d["source"], d["task_type"], tuple(d["feature_names"]),
                np.asarray(d["x_train"], dtype=float), np.asarray(d["y_train"], dtype=str),
                np.asarray(d["x_test"], dtype=float), np.asarray(d["y_test"], dtype=str))
