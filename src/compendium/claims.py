"""The claims ledger: every chapter ends with one.

A claim is checked by handing the ledger a *measurement* and a *criterion* declared beside it;
the ledger computes the verdict itself, so a verdict can never be typed in, and it prints the
criterion next to the verdict so a reader sees what was required.

>>> ledger = Ledger("demo")
>>> entry = ledger.check("closed-form", "expm matches the closed form", kind="exact",
...                      measured=3e-13, criterion=at_most(1e-10))
>>> entry.verdict
'pass'

Kinds of check (see DESIGN.md): ``symbolic`` (sympy proves an identity, limit or exponent),
``exact`` (numerics against a closed form to a tolerance), ``statistical`` (a test at a stated
level over several seeds), ``directional`` (method beats baseline) and ``ratio`` (speed-up and
the like). ``Ledger.not_checkable`` records a claim this chapter cannot test, with the reason.

Verdicts: ``pass`` and ``fail`` (computed), ``not_checkable`` (declared, with a reason).

Wall-clock measurements (a speed-up timed in one run) are checks like any other, but they are
marked ``volatile=True``: their measured value and verdict change from run to run and machine
to machine. Everything else in ``claims.json`` is byte-identical for the same scale and seed
(:func:`stable_view` masks the volatile parts), and CI's expected-verdict comparison skips them.
"""

from __future__ import annotations

import json
import math
import numbers
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "KINDS",
    "VERDICTS",
    "Criterion",
    "Claim",
    "Ledger",
    "at_most",
    "at_least",
    "less_than",
    "greater_than",
    "within",
    "close_to",
    "equals",
    "is_true",
    "is_false",
    "simplifies_to",
    "p_value_above",
    "p_value_below",
    "SCHEMA_VERSION",
    "stable_view",
]

KINDS = ("symbolic", "exact", "statistical", "directional", "ratio")
VERDICTS = ("pass", "fail", "not_checkable")
SCHEMA_VERSION = 1


def _as_number(value: Any) -> float | None:
    """Return ``value`` as a float when it is a real scalar (numpy and sympy numbers included)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, numbers.Real):
        return float(value)
    item = getattr(value, "item", None)  # numpy / torch scalars
    if callable(item) and getattr(value, "ndim", 1) == 0:
        inner = item()
        return None if isinstance(inner, bool) else float(inner)
    is_number = getattr(value, "is_number", False)  # sympy numbers
    if is_number and getattr(value, "is_real", False):
        return float(value)
    return None


def _require_number(value: Any, what: str) -> float:
    number = _as_number(value)
    if number is None:
        raise ValueError(f"{what} must be a real number, got {value!r} ({type(value).__name__})")
    return number


def _fmt(x: float) -> str:
    return f"{x:.4g}"


@dataclass(frozen=True)
class Criterion:
    """A declared acceptance rule: ``op`` applied to the measured value.

    Build one with the helpers (:func:`at_most`, :func:`within`, ...), not directly.
    """

    op: str
    args: tuple
    text: str

    def evaluate(self, measured: Any) -> bool:
        """Whether ``measured`` satisfies the criterion (NaN and inf never pass a bound)."""
        op, args = self.op, self.args
        if op in ("is_true", "is_false"):
            if not isinstance(measured, bool) and type(measured).__name__ not in ("bool_", "bool"):
                raise ValueError(f"criterion '{self.text}' needs a boolean measurement, got {measured!r}")
            return bool(measured) is (op == "is_true")
        if op == "simplifies_to":
            import sympy

            return bool(sympy.simplify(sympy.sympify(measured) - args[0]) == 0)
        if op == "equals":
            target = args[0]
            if isinstance(target, (int, float)) and not isinstance(target, bool):
                number = _as_number(measured)
                return number is not None and number == target
            return measured == target
        x = _require_number(measured, f"the measurement for criterion '{self.text}'")
        if math.isnan(x):
            return False
        if op == "at_most":
            return x <= args[0]
        if op == "at_least":
            return x >= args[0]
        if op == "less_than":
            return x < args[0]
        if op == "greater_than":
            return x > args[0]
        if op == "within":
            return args[0] <= x <= args[1]
        if op == "close_to":
            target, rel, abs_ = args
            return abs(x - target) <= max(abs_, rel * abs(target))
        raise ValueError(f"unknown criterion operator {op!r}")  # pragma: no cover

    def to_dict(self) -> dict:
        return {"op": self.op, "args": [_jsonable(a) for a in self.args], "text": self.text}


def at_most(bound: float) -> Criterion:
    """Pass when the measurement is ``<= bound`` (errors, residuals, p-values of controls)."""
    b = _require_number(bound, "bound")
    return Criterion("at_most", (b,), f"≤ {_fmt(b)}")


def at_least(bound: float) -> Criterion:
    """Pass when the measurement is ``>= bound``."""
    b = _require_number(bound, "bound")
    return Criterion("at_least", (b,), f"≥ {_fmt(b)}")


def less_than(bound: float) -> Criterion:
    """Pass when the measurement is strictly ``< bound``."""
    b = _require_number(bound, "bound")
    return Criterion("less_than", (b,), f"< {_fmt(b)}")


def greater_than(bound: float) -> Criterion:
    """Pass when the measurement is strictly ``> bound`` (for example a paired difference > 0)."""
    b = _require_number(bound, "bound")
    return Criterion("greater_than", (b,), f"> {_fmt(b)}")


def within(low: float, high: float) -> Criterion:
    """Pass when ``low <= measurement <= high`` (for example a log-log slope)."""
    lo, hi = _require_number(low, "low"), _require_number(high, "high")
    if lo > hi:
        raise ValueError(f"within(low, high) needs low <= high, got [{lo}, {hi}]")
    return Criterion("within", (lo, hi), f"in [{_fmt(lo)}, {_fmt(hi)}]")


def close_to(target: float, *, rel: float = 0.0, abs: float = 0.0) -> Criterion:  # noqa: A002
    """Pass when ``|measurement - target| <= max(abs, rel * |target|)``."""
    t = _require_number(target, "target")
    if rel < 0 or abs < 0 or (rel == 0 and abs == 0):
        raise ValueError("close_to needs a positive rel or abs tolerance")
    tol = f"rel {_fmt(rel)}" if rel else f"abs {_fmt(abs)}"
    if rel and abs:
        tol = f"max(abs {_fmt(abs)}, rel {_fmt(rel)})"
    return Criterion("close_to", (t, float(rel), float(abs)), f"= {_fmt(t)} ± {tol}")


def equals(value: Any) -> Criterion:
    """Pass when the measurement equals ``value`` exactly (integers, strings, exact rationals)."""
    if isinstance(value, float) and math.isnan(value):
        raise ValueError("equals(nan) can never pass")
    return Criterion("equals", (value,), f"= {value}")


def is_true() -> Criterion:
    """Pass when a computed boolean is True (for example 'every kernel satisfied the bound')."""
    return Criterion("is_true", (), "is True")


def is_false() -> Criterion:
    """Pass when a computed boolean is False."""
    return Criterion("is_false", (), "is False")


def simplifies_to(value: Any = 0) -> Criterion:
    """Pass when ``sympy.simplify(measured - value) == 0``: the measurement is a sympy expression."""
    import sympy

    target = sympy.sympify(value)
    return Criterion("simplifies_to", (target,), f"simplifies to {target}")


def p_value_above(level: float) -> Criterion:
    """A goodness-of-fit test does not reject: pass when ``p > level``."""
    lv = _require_number(level, "level")
    if not 0 < lv < 1:
        raise ValueError(f"a test level must lie in (0, 1), got {lv}")
    return Criterion("greater_than", (lv,), f"p > {_fmt(lv)} (not rejected)")


def p_value_below(level: float) -> Criterion:
    """A test rejects (negative controls, detected effects): pass when ``p < level``."""
    lv = _require_number(level, "level")
    if not 0 < lv < 1:
        raise ValueError(f"a test level must lie in (0, 1), got {lv}")
    return Criterion("less_than", (lv,), f"p < {_fmt(lv)} (rejected)")


def _jsonable(value: Any) -> Any:
    """Convert a measurement to a JSON value: numbers stay numbers, the rest becomes text."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if type(value).__name__ in ("bool_", "bool"):  # numpy booleans
        return bool(value)
    if isinstance(value, numbers.Integral):
        return int(value)
    number = _as_number(value)
    if number is not None:
        if math.isnan(number) or math.isinf(number):
            return str(number)
        if getattr(value, "is_Integer", False):
            return int(value)
        return number
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return str(value)


@dataclass(frozen=True)
class Claim:
    """One row of the ledger."""

    id: str
    statement: str
    kind: str
    verdict: str
    criterion: str = ""
    measured: Any = None
    paper_value: Any = None
    note: str = ""
    details: dict = field(default_factory=dict)
    volatile: bool = False

    @property
    def passed(self) -> bool:
        return self.verdict == "pass"

    def to_dict(self) -> dict:
        return {
            "id": self.id,
            "statement": self.statement,
            "kind": self.kind,
            "criterion": self.criterion,
            "measured": _jsonable(self.measured),
            "paper_value": _jsonable(self.paper_value),
            "verdict": self.verdict,
            "note": self.note,
            "details": {k: _jsonable(v) for k, v in sorted(self.details.items())},
            "volatile": self.volatile,
        }


def _measured_text(value: Any) -> str:
    if value is None:
        return ""
    number = _as_number(value)
    if number is not None and not isinstance(value, numbers.Integral):
        return f"{number:.4g}"
    return str(_jsonable(value))


class Ledger:
    """The claims ledger of one chapter.

    Parameters
    ----------
    chapter : str
        The chapter slug (as in the registry).
    scale, seed :
        Recorded in ``claims.json`` so a ledger names the run that produced it.
    """

    def __init__(self, chapter: str, *, scale: str = "smoke", seed: int = 0):
        if not chapter or not chapter.replace("_", "").isalnum():
            raise ValueError(f"chapter must be a slug of letters, digits and '_', got {chapter!r}")
        self.chapter = chapter
        self.scale = scale
        self.seed = int(seed)
        self.claims: list[Claim] = []

    # ------------------------------------------------------------------ recording
    def _new_id(self, claim_id: str) -> str:
        if not claim_id or any(c.isspace() for c in claim_id):
            raise ValueError(f"a claim id must be a non-empty word (use '-' or '_'), got {claim_id!r}")
        if any(c.id == claim_id for c in self.claims):
            raise ValueError(f"claim id {claim_id!r} is already in the ledger of {self.chapter!r}")
        return claim_id

    def check(
        self,
        claim_id: str,
        statement: str,
        *,
        kind: str,
        measured: Any,
        criterion: Criterion,
        paper_value: Any = None,
        note: str = "",
        details: dict | None = None,
        volatile: bool = False,
    ) -> Claim:
        """Record a checked claim; the verdict is computed from ``measured`` and ``criterion``.

        Parameters
        ----------
        claim_id : str
            Short stable identifier, unique within the chapter (used by expected_verdicts.yaml).
        statement : str
            The paper's claim in our words.
        kind : {'symbolic', 'exact', 'statistical', 'directional', 'ratio'}
        measured :
            The measurement: a number, a boolean, or a sympy expression for ``symbolic`` checks.
        criterion : Criterion
            Declared before the measurement is seen (``at_most(1e-10)``, ``within(-2.2, -1.8)``, ...).
        paper_value :
            The paper's number where it gives one.
        note, details :
            Free text and extra numbers (seeds, sample sizes) kept in ``claims.json``.
        volatile : bool
            True for wall-clock measurements: the value and verdict vary between runs and
            machines, so determinism checks and the CI verdict comparison leave them out.
        """
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
        if not isinstance(criterion, Criterion):
            raise ValueError(
                f"criterion must be built with a helper such as at_most(...), got {criterion!r}"
            )
        if not statement:
            raise ValueError("statement must say what the paper claims")
        passed = criterion.evaluate(measured)
        if kind == "symbolic":
            import sympy

            measured = sympy.simplify(sympy.sympify(measured)) if not isinstance(measured, bool) else measured
        claim = Claim(
            id=self._new_id(claim_id),
            statement=statement,
            kind=kind,
            verdict="pass" if passed else "fail",
            criterion=criterion.text,
            measured=measured,
            paper_value=paper_value,
            note=note,
            details=dict(details or {}),
            volatile=bool(volatile),
        )
        self.claims.append(claim)
        return claim

    def not_checkable(self, claim_id: str, statement: str, *, reason: str, paper_value: Any = None) -> Claim:
        """Record a claim this chapter cannot test, with the reason said plainly."""
        if not reason:
            raise ValueError("not_checkable needs a reason")
        claim = Claim(
            id=self._new_id(claim_id),
            statement=statement,
            kind="not_checkable",
            verdict="not_checkable",
            paper_value=paper_value,
            note=reason,
        )
        self.claims.append(claim)
        return claim

    # ------------------------------------------------------------------ reading
    def counts(self) -> dict[str, int]:
        out = {v: 0 for v in VERDICTS}
        for c in self.claims:
            out[c.verdict] += 1
        return out

    def __getitem__(self, claim_id: str) -> Claim:
        for c in self.claims:
            if c.id == claim_id:
                return c
        raise KeyError(claim_id)

    def __len__(self) -> int:
        return len(self.claims)

    def to_dict(self) -> dict:
        return {
            "schema_version": SCHEMA_VERSION,
            "chapter": self.chapter,
            "scale": self.scale,
            "seed": self.seed,
            "summary": self.counts(),
            "claims": [c.to_dict() for c in self.claims],
        }

    def to_json(self) -> str:
        """Deterministic JSON: same measurements give the same bytes."""
        return json.dumps(self.to_dict(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"

    def save(self, path: str | Path) -> Path:
        """Write ``claims.json`` (atomically: a reader never sees half a file)."""
        if not self.claims:
            raise ValueError(f"the ledger of {self.chapter!r} is empty: a chapter must check its claims")
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(self.to_json(), encoding="utf-8")
        tmp.replace(path)
        return path

    def table(self):
        """The ledger as a pandas DataFrame (one row per claim)."""
        import pandas as pd

        rows = [
            {
                "id": c.id,
                "claim": c.statement,
                "kind": c.kind,
                "measured": _measured_text(c.measured),
                "criterion": c.criterion,
                "paper": _measured_text(c.paper_value),
                "verdict": c.verdict,
            }
            for c in self.claims
        ]
        return pd.DataFrame(rows, columns=["id", "claim", "kind", "measured", "criterion", "paper", "verdict"])

    def _repr_html_(self) -> str:
        return render_html(self.to_dict()["claims"])

    def __repr__(self) -> str:
        counts = ", ".join(f"{k}={v}" for k, v in self.counts().items())
        return f"Ledger({self.chapter!r}, {len(self)} claims: {counts})"


def stable_view(data: dict) -> dict:
    """``claims.json`` content with the volatile claims' measured values and verdicts masked.

    Two runs with the same scale and seed have equal stable views (and, with no volatile claim,
    byte-identical files).
    """
    out = json.loads(json.dumps(data))
    for claim in out.get("claims", []):
        if claim.get("volatile"):
            claim["measured"] = claim["verdict"] = "<volatile>"
            claim["details"] = {}
    out.pop("summary", None)
    return out


def verdict_badge(verdict: str) -> str:
    """HTML badge for a verdict (styled by the book's ``_static/compendium.css``)."""
    label = {"pass": "pass", "fail": "fail", "not_checkable": "not checkable",
             "failed_to_run": "chapter failed", "planned": "planned"}.get(verdict, verdict)
    return f'<span class="verdict verdict-{verdict.replace("_", "-")}">{label}</span>'


def render_html(claims: list[dict]) -> str:
    """The ledger table as HTML, from ``claims.json`` rows."""
    from html import escape

    head = "".join(f"<th>{h}</th>" for h in ("id", "claim", "kind", "measured", "criterion", "paper", "verdict"))
    body = []
    for c in claims:
        note = f'<br><small>{escape(c["note"])}</small>' if c.get("note") else ""
        if c.get("volatile"):
            note += "<br><small><em>wall-clock measurement: varies between runs and machines</em></small>"
        cells = [
            f"<code>{escape(c['id'])}</code>",
            escape(c["statement"]) + note,
            escape(c["kind"]),
            escape(_measured_text(c.get("measured"))),
            escape(c.get("criterion") or ""),
            escape(_measured_text(c.get("paper_value"))),
            verdict_badge(c["verdict"]),
        ]
        body.append("<tr>" + "".join(f"<td>{x}</td>" for x in cells) + "</tr>")
    return (
        '<table class="claims-ledger"><thead><tr>' + head + "</tr></thead><tbody>"
        + "".join(body) + "</tbody></table>"
    )
