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

**Roles** (what a row is evidence for): ``claim`` (a statement of the paper), ``control`` (a
variant that must fail, or pass, the same criterion: it shows the check has power; its verdict is
``pass`` when the control *behaved as a control must*) and ``implementation`` (our own code is
right: identities, kernel = reference, anything true by construction). Only claims count as
reproduced. A claim names its controls (``controls=[...]``); a claim that passed while one of its
controls did not behave is reported as ``unsupported``, never as a pass.

**Estimates.** A measurement may be a :class:`compendium.stats.Estimate` (point, interval, level,
unit of replication and its count). A criterion applied to an estimate gives ``pass`` when the
whole interval satisfies it, ``fail`` when the whole interval violates it and ``inconclusive``
otherwise. Directional and statistical claims measured by an estimate declare the smallest effect
of interest (``min_effect``) that their criterion encodes, fixed before the run.

Verdicts: ``pass``, ``fail``, ``inconclusive`` (computed), ``unsupported`` (a passing claim whose
control misbehaved), ``not_checkable`` (declared, with a reason).

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

from .stats import Estimate

__all__ = [
    "KINDS",
    "ROLES",
    "VERDICTS",
    "NOT_CHECKABLE_CATEGORIES",
    "Estimate",
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
    "either",
    "on_point",
    "p_value_above",
    "p_value_below",
    "SCHEMA_VERSION",
    "stable_view",
    "summarize",
    "headline",
]

KINDS = ("symbolic", "exact", "statistical", "directional", "ratio")
ROLES = ("claim", "control", "implementation")
VERDICTS = ("pass", "fail", "inconclusive", "unsupported", "not_checkable")
#: Why a claim cannot be checked here: the model or run is beyond a CPU budget (``scale``), the
#: data or benchmark is not available offline (``data``), it needs a robot, sensor or GPU-specific
#: hardware (``hardware``), a human study or judge (``human``), something outside this project such
#: as proprietary models, unpublished code or text we do not have (``external``), or no reason given.
NOT_CHECKABLE_CATEGORIES = ("scale", "data", "hardware", "human", "external", "unspecified")
SCHEMA_VERSION = 2


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
        if op == "either":
            return any(c.evaluate(measured) for c in args)
        if op == "on_point":
            return args[0].evaluate(measured.point if isinstance(measured, Estimate) else measured)
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

    def decide(self, measured: Any) -> str:
        """``'pass'`` or ``'fail'`` for a point; for an :class:`Estimate` also ``'inconclusive'``.

        An estimate passes when every value of its interval satisfies the criterion, fails when
        every value violates it, and is inconclusive when the interval straddles the boundary.
        """
        if self.op == "either":
            verdicts = [c.decide(measured) for c in self.args]
            if "pass" in verdicts:
                return "pass"
            return "fail" if all(v == "fail" for v in verdicts) else "inconclusive"
        if self.op == "on_point":
            return self.args[0].decide(measured.point if isinstance(measured, Estimate) else measured)
        if not isinstance(measured, Estimate):
            return "pass" if self.evaluate(measured) else "fail"
        lo, hi = measured.low, measured.high
        if math.isnan(measured.point):
            return "fail"
        op, args = self.op, self.args
        if op == "close_to":
            target, rel, abs_ = args
            tol = max(abs_, rel * abs(target))
            op, args = "within", (target - tol, target + tol)
        if op == "at_most":
            all_ok, none_ok = hi <= args[0], lo > args[0]
        elif op == "at_least":
            all_ok, none_ok = lo >= args[0], hi < args[0]
        elif op == "less_than":
            all_ok, none_ok = hi < args[0], lo >= args[0]
        elif op == "greater_than":
            all_ok, none_ok = lo > args[0], hi <= args[0]
        elif op == "within":
            all_ok = args[0] <= lo and hi <= args[1]
            none_ok = hi < args[0] or lo > args[1]
        else:
            raise ValueError(f"criterion '{self.text}' cannot be applied to an interval estimate")
        return "pass" if all_ok else ("fail" if none_ok else "inconclusive")

    def to_dict(self) -> dict:
        return {"op": self.op, "args": [a.to_dict() if isinstance(a, Criterion) else _jsonable(a) for a in self.args],
                "text": self.text}


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


def on_point(criterion: Criterion) -> Criterion:
    """Apply ``criterion`` to an estimate's point value, not its interval (pass or fail, never
    inconclusive): for a rule stated on the point, such as "rho <= -0.5"."""
    if not isinstance(criterion, Criterion) or criterion.op in ("either", "on_point"):
        raise ValueError(f"on_point needs a simple criterion such as at_most(-0.5), got {criterion!r}")
    return Criterion("on_point", (criterion,), f"point {criterion.text}")


def either(*criteria: Criterion) -> Criterion:
    """Pass when any of ``criteria`` passes, fail when all fail, inconclusive otherwise: for a rule
    stated with "or", such as "p < 0.05 or rho <= -0.5" = ``either(less_than(0), on_point(at_most(-0.5)))``."""
    if len(criteria) < 2 or not all(isinstance(c, Criterion) for c in criteria):
        raise ValueError("either needs two or more criteria built with the helpers")
    return Criterion("either", tuple(criteria), " or ".join(c.text for c in criteria))


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
    if isinstance(value, Estimate):
        return {k: _jsonable(v) for k, v in value.to_dict().items()}
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
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
    role: str = "claim"
    criterion: str = ""
    measured: Any = None
    paper_value: Any = None
    note: str = ""
    details: dict = field(default_factory=dict)
    volatile: bool = False
    controls: tuple = ()
    min_effect: Any = None
    computed_verdict: str = ""
    category: str = ""  # not_checkable rows only: one of NOT_CHECKABLE_CATEGORIES

    @property
    def passed(self) -> bool:
        return self.verdict == "pass"

    def to_dict(self) -> dict:
        return {
            "id": self.id,
            "role": self.role,
            "statement": self.statement,
            "kind": self.kind,
            "criterion": self.criterion,
            "min_effect": _jsonable(self.min_effect),
            "measured": _jsonable(self.measured),
            "paper_value": _jsonable(self.paper_value),
            "verdict": self.verdict,
            "computed_verdict": self.computed_verdict or self.verdict,
            "controls": list(self.controls),
            "note": self.note,
            "details": {k: _jsonable(v) for k, v in sorted(self.details.items())},
            "volatile": self.volatile,
            **({"category": self.category} if self.category else {}),
        }


def _is_estimate_dict(value: Any) -> bool:
    return isinstance(value, dict) and {"point", "low", "high"} <= set(value)


def _measured_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, Estimate):
        return value.text()
    if _is_estimate_dict(value):
        try:
            return Estimate.from_dict(value).text()
        except (TypeError, ValueError):
            return str(value)
    number = _as_number(value)
    if number is not None and not isinstance(value, numbers.Integral):
        return f"{number:.4g}"
    return str(_jsonable(value))


def _empty_counts() -> dict[str, dict[str, int]]:
    return {role: {v: 0 for v in VERDICTS} for role in ROLES}


def summarize(claims: list[dict]) -> dict[str, dict[str, int]]:
    """Counts by role and verdict from ``claims.json`` rows (``{'claim': {'pass': 3, ...}, ...}``)."""
    out = _empty_counts()
    for c in claims:
        out[c.get("role", "claim")][c["verdict"]] += 1
    return out


def headline(claims: list[dict]) -> str:
    """One line a reader can trust: paper claims only, then controls and implementation checks."""
    s = summarize(claims)
    cl, co, im = s["claim"], s["control"], s["implementation"]
    parts = [f"paper claims: {cl['pass']} reproduced, {cl['fail']} not reproduced, "
             f"{cl['inconclusive']} inconclusive"]
    if cl["unsupported"]:
        parts[0] += f", {cl['unsupported']} unsupported (a control misbehaved)"
    parts[0] += f", {cl['not_checkable']} not checkable"
    n_co = sum(co.values())
    if n_co:
        parts.append(f"controls: {co['pass']} of {n_co} behaved")
    n_im = sum(im.values())
    if n_im:
        parts.append(f"implementation checks: {im['pass']} of {n_im} pass")
    return "; ".join(parts)


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
        self._rows: list[Claim] = []

    # ------------------------------------------------------------------ recording
    def _new_id(self, claim_id: str) -> str:
        if not claim_id or any(c.isspace() for c in claim_id):
            raise ValueError(f"a claim id must be a non-empty word (use '-' or '_'), got {claim_id!r}")
        if any(c.id == claim_id for c in self._rows):
            raise ValueError(f"claim id {claim_id!r} is already in the ledger of {self.chapter!r}")
        return claim_id

    def check(
        self,
        claim_id: str,
        statement: str,
        *,
        role: str | None = None,
        kind: str,
        measured: Any,
        criterion: Criterion,
        controls: tuple | list = (),
        min_effect: float | None = None,
        paper_value: Any = None,
        note: str = "",
        details: dict | None = None,
        volatile: bool = False,
    ) -> Claim:
        """Record a check; the verdict is computed from ``measured`` and ``criterion``.

        Parameters
        ----------
        claim_id : str
            Short stable identifier, unique within the chapter (used by expected_verdicts.yaml).
        statement : str
            What is checked, in our words.
        role : {'claim', 'control', 'implementation'}
            What the row is evidence for (required). Only ``claim`` rows count as the paper's
            claims; a ``control`` passes when it behaved as a control must (a variant that must
            fail the claim's test does fail it, ...); ``implementation`` rows check our own code.
        kind : {'symbolic', 'exact', 'statistical', 'directional', 'ratio'}
        measured :
            A number, a boolean, a sympy expression (``symbolic``), or a
            :class:`~compendium.stats.Estimate` with an interval over stated units.
        criterion : Criterion
            Declared before the measurement is seen (``at_most(1e-10)``, ``within(-2.2, -1.8)``, ...).
        controls : list of str
            For claims: ids of the control rows that show this check has power. A claim that
            passes while a control did not behave is reported as ``unsupported``.
        min_effect : float, optional
            The smallest effect of interest that the criterion encodes (fixed in advance);
            required for directional and statistical claims measured by an estimate.
        paper_value :
            The paper's number where it gives one for *this* comparison.
        note, details :
            Free text and extra numbers (seeds, sample sizes) kept in ``claims.json``.
        volatile : bool
            True for wall-clock measurements: the value and verdict vary between runs and
            machines, so determinism checks and the CI verdict comparison leave them out.
        """
        if role is None:
            raise ValueError(
                f"check {claim_id!r}: declare role='claim' (a statement of the paper), 'control' "
                "(shows the check has power) or 'implementation' (our own code is right)"
            )
        if role not in ROLES:
            raise ValueError(f"role must be one of {ROLES}, got {role!r}")
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
        if not isinstance(criterion, Criterion):
            raise ValueError(
                f"criterion must be built with a helper such as at_most(...), got {criterion!r}"
            )
        if not statement:
            raise ValueError("statement must say what is checked")
        controls = tuple(controls or ())
        if controls and role != "claim":
            raise ValueError(f"check {claim_id!r}: only claims name controls (role is {role!r})")
        if any(not isinstance(c, str) or not c for c in controls):
            raise ValueError(f"check {claim_id!r}: controls must be claim ids, got {controls!r}")
        if min_effect is not None:
            min_effect = _require_number(min_effect, "min_effect")
            if math.isnan(min_effect) or min_effect < 0:
                raise ValueError(f"min_effect must be a non-negative number, got {min_effect}")
        if (isinstance(measured, Estimate) and role == "claim" and kind in ("directional", "statistical")
                and min_effect is None):
            raise ValueError(
                f"check {claim_id!r}: a {kind} claim measured by an interval declares the smallest "
                "effect of interest its criterion encodes (min_effect=..., fixed before the run)"
            )
        verdict = criterion.decide(measured)
        if kind == "symbolic" and not isinstance(measured, (bool, Estimate)):
            import sympy

            measured = sympy.simplify(sympy.sympify(measured))
        claim = Claim(
            id=self._new_id(claim_id),
            statement=statement,
            kind=kind,
            verdict=verdict,
            role=role,
            criterion=criterion.text,
            measured=measured,
            paper_value=paper_value,
            note=note,
            details=dict(details or {}),
            volatile=bool(volatile),
            controls=controls,
            min_effect=min_effect,
            computed_verdict=verdict,
        )
        self._rows.append(claim)
        return claim

    def not_checkable(self, claim_id: str, statement: str, *, reason: str, paper_value: Any = None,
                      category: str = "unspecified") -> Claim:
        """Record a paper claim this chapter cannot test, with the reason said plainly.

        ``category`` groups the reason (one of :data:`NOT_CHECKABLE_CATEGORIES`) for the synthesis.
        """
        if not reason:
            raise ValueError("not_checkable needs a reason")
        if category not in NOT_CHECKABLE_CATEGORIES:
            raise ValueError(f"not_checkable {claim_id!r}: category must be one of {NOT_CHECKABLE_CATEGORIES}, "
                             f"got {category!r}")
        claim = Claim(
            id=self._new_id(claim_id),
            statement=statement,
            kind="not_checkable",
            verdict="not_checkable",
            role="claim",
            paper_value=paper_value,
            note=reason,
            computed_verdict="not_checkable",
            category=category,
        )
        self._rows.append(claim)
        return claim

    # ------------------------------------------------------------------ reading
    @property
    def claims(self) -> list[Claim]:
        """Every row, with controls resolved: a passing claim whose control misbehaved is unsupported."""
        by_id = {c.id: c for c in self._rows}
        out = []
        for c in self._rows:
            if c.controls:
                bad = []
                for cid in c.controls:
                    ctrl = by_id.get(cid)
                    if ctrl is not None and ctrl.role == "control" and ctrl.verdict != "pass":
                        bad.append(f"{cid} ({ctrl.verdict})")
                if bad and c.computed_verdict == "pass":
                    note = (c.note + " " if c.note else "") + "Unsupported: control " + ", ".join(bad) + " did not behave."
                    c = Claim(**{**c.__dict__, "verdict": "unsupported", "note": note})
            out.append(c)
        return out

    def validate_controls(self) -> None:
        """Every control a claim names exists and has role ``control``."""
        by_id = {c.id: c for c in self._rows}
        for c in self._rows:
            for cid in c.controls:
                if cid not in by_id:
                    raise ValueError(f"claim {c.id!r} names control {cid!r}, which is not in the ledger of {self.chapter!r}")
                if by_id[cid].role != "control":
                    raise ValueError(f"claim {c.id!r} names {cid!r} as a control, but its role is {by_id[cid].role!r}")

    def counts(self) -> dict[str, dict[str, int]]:
        """``{role: {verdict: count}}``."""
        return summarize([c.to_dict() for c in self.claims])

    def __getitem__(self, claim_id: str) -> Claim:
        for c in self.claims:
            if c.id == claim_id:
                return c
        raise KeyError(claim_id)

    def __len__(self) -> int:
        return len(self._rows)

    def to_dict(self) -> dict:
        rows = [c.to_dict() for c in self.claims]
        return {
            "schema_version": SCHEMA_VERSION,
            "chapter": self.chapter,
            "scale": self.scale,
            "seed": self.seed,
            "summary": summarize(rows),
            "claims": rows,
        }

    def to_json(self) -> str:
        """Deterministic JSON: same measurements give the same bytes."""
        return json.dumps(self.to_dict(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"

    def save(self, path: str | Path) -> Path:
        """Write ``claims.json`` (atomically: a reader never sees half a file)."""
        if not self._rows:
            raise ValueError(f"the ledger of {self.chapter!r} is empty: a chapter must check its claims")
        if not any(c.role == "claim" for c in self._rows):
            raise ValueError(f"the ledger of {self.chapter!r} has no paper claim (role='claim')")
        self.validate_controls()
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(self.to_json(), encoding="utf-8")
        tmp.replace(path)
        return path

    def table(self):
        """The ledger as a pandas DataFrame (one row per check)."""
        import pandas as pd

        cols = ["id", "role", "claim", "kind", "measured", "criterion", "paper", "verdict"]
        rows = [
            {
                "id": c.id,
                "role": c.role,
                "claim": c.statement,
                "kind": c.kind,
                "measured": _measured_text(c.measured),
                "criterion": c.criterion,
                "paper": _measured_text(c.paper_value),
                "verdict": c.verdict,
            }
            for c in self.claims
        ]
        return pd.DataFrame(rows, columns=cols)

    def _repr_html_(self) -> str:
        return render_html(self.to_dict()["claims"])

    def __repr__(self) -> str:
        return f"Ledger({self.chapter!r}, {len(self)} rows: {headline(self.to_dict()['claims'])})"


def stable_view(data: dict) -> dict:
    """``claims.json`` content with the volatile claims' measured values and verdicts masked.

    Two runs with the same scale and seed have equal stable views (and, with no volatile claim,
    byte-identical files).
    """
    out = json.loads(json.dumps(data))
    for claim in out.get("claims", []):
        if claim.get("volatile"):
            claim["measured"] = claim["verdict"] = claim["computed_verdict"] = "<volatile>"
            claim["details"] = {}
    out.pop("summary", None)
    return out


BADGE_LABELS = {"pass": "pass", "fail": "fail", "inconclusive": "inconclusive", "unsupported": "unsupported",
                "not_checkable": "not checkable", "failed_to_run": "chapter failed", "planned": "planned",
                "not_run": "not run", "stale": "stale", "fragile": "fragile"}
ROLE_LABELS = {"claim": "paper claim", "control": "control", "implementation": "implementation"}


def verdict_badge(verdict: str) -> str:
    """HTML badge for a verdict (styled by the book's ``_static/compendium.css``)."""
    label = BADGE_LABELS.get(verdict, verdict)
    return f'<span class="verdict verdict-{verdict.replace("_", "-")}">{label}</span>'


def role_badge(role: str) -> str:
    return f'<span class="role role-{role}">{ROLE_LABELS.get(role, role)}</span>'


def render_html(claims: list[dict], stability: dict | None = None) -> str:
    """The ledger table as HTML, from ``claims.json`` rows, paper claims first.

    ``stability`` optionally maps a claim id to a text such as ``"3/3 seeds agree"``.
    """
    from html import escape

    cols = ["id", "role", "check", "kind", "measured", "criterion", "paper", "verdict"]
    if stability:
        cols.append("seeds")
    head = "".join(f"<th>{h}</th>" for h in cols)
    body = []
    order = {r: i for i, r in enumerate(ROLES)}
    for c in sorted(claims, key=lambda c: order.get(c.get("role", "claim"), 9)):
        role = c.get("role", "claim")
        note = f'<br><small>{escape(c["note"])}</small>' if c.get("note") else ""
        if c.get("controls"):
            note += "<br><small>controls: " + ", ".join(f"<code>{escape(x)}</code>" for x in c["controls"]) + "</small>"
        if c.get("volatile"):
            note += "<br><small><em>wall-clock measurement: varies between runs and machines</em></small>"
        criterion = escape(c.get("criterion") or "")
        if c.get("min_effect") is not None:
            criterion += f"<br><small>smallest effect of interest: {escape(_measured_text(c['min_effect']))}</small>"
        cells = [
            f"<code>{escape(c['id'])}</code>",
            role_badge(role),
            escape(c["statement"]) + note,
            escape(c["kind"]),
            escape(_measured_text(c.get("measured"))),
            criterion,
            escape(_measured_text(c.get("paper_value"))),
            verdict_badge(c["verdict"]),
        ]
        if stability:
            cells.append(escape(stability.get(c["id"], "")))
        body.append(f'<tr class="row-{role}">' + "".join(f"<td>{x}</td>" for x in cells) + "</tr>")
    return (
        f'<p class="ledger-headline">{escape(headline(claims))}</p>'
        '<table class="claims-ledger"><thead><tr>' + head + "</tr></thead><tbody>"
        + "".join(body) + "</tbody></table>"
    )
