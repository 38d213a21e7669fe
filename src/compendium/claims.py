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

**Ledger v3.** Roles also include ``hypothesis`` (our own conjecture about the mechanism, gated
like a claim), ``precondition`` (the trained model beats a trivial baseline by a declared margin)
and ``timing`` (a wall-clock measurement). A claim or hypothesis names ``controls=[...]``,
``preconditions=[...]`` and ``requires=[...]``; when any linked row did not pass, the row is
``unsupported`` *whatever its own verdict* (gates work both ways) and records ``gates``. One claim
per chapter is ``primary=True`` (the paper's headline, :meth:`Ledger.headline`, the chapter's
badge); secondary claims with the same ``family=`` and a p-value are Holm-adjusted. "No effect"
is decided by :func:`equivalent_within` (TOST), never by "the interval contains 0". The ledger
refuses at record time a ``min_effect`` that differs from the criterion's threshold, a
statistical or directional estimate with a zero-width interval over fewer than two units (unless
``exact=True``; a sample of several units that all agreed is recorded inconclusive),
``by_construction=True`` outside ``implementation``, ``volatile=True`` outside ``timing``, a
second primary and ``family=`` without a p-value.

Wall-clock measurements (a speed-up timed in one run) are ``timing`` rows, never counted as
claims: their measured value and verdict change from run to run and machine
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

from .stats import Estimate, TostResult, holm

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
    "equivalent_within",
    "on_point",
    "p_value_above",
    "p_value_below",
    "SCHEMA_VERSION",
    "stable_view",
    "summarize",
    "headline",
    "chapter_badge",
    "GATING_ROLES",
]

KINDS = ("symbolic", "exact", "statistical", "directional", "ratio")
ROLES = ("claim", "hypothesis", "precondition", "control", "implementation", "timing")
#: Roles whose rows are gated by their controls, preconditions and required rows.
GATING_ROLES = ("claim", "hypothesis")
VERDICTS = ("pass", "fail", "inconclusive", "unsupported", "not_checkable")
#: Why a claim cannot be checked here: the model or run is beyond a CPU budget (``scale``), the
#: data or benchmark is not available offline (``data``), it needs a robot, sensor or GPU-specific
#: hardware (``hardware``), a human study or judge (``human``), something outside this project such
#: as proprietary models, unpublished code or text we do not have (``external``), or no reason given.
NOT_CHECKABLE_CATEGORIES = ("scale", "data", "hardware", "human", "external", "unspecified")
SCHEMA_VERSION = 3
#: The chapter badge when no row is declared primary (a ledger from before v3, or a chapter not migrated).
NO_PRIMARY = "no_primary"


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
    alpha: float | None = None  # set by p_value_below / p_value_above: the measurement is a p-value

    def evaluate(self, measured: Any) -> bool:
        """Whether ``measured`` satisfies the criterion (NaN and inf never pass a bound)."""
        op, args = self.op, self.args
        if op == "equivalent_within":
            return self.decide(measured) == "pass"
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
        if self.op == "equivalent_within":
            return _decide_equivalence(self.args[0], measured)
        if self.op == "on_point":
            return self.args[0].decide(measured.point if isinstance(measured, Estimate) else measured)
        if isinstance(measured, TostResult):
            measured = measured.estimate
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

    def threshold(self) -> tuple[float, ...] | None:
        """The magnitudes a declared ``min_effect`` may equal (None: the criterion has no threshold)."""
        op, args = self.op, self.args
        if op == "on_point":
            return args[0].threshold()
        if op in ("at_most", "at_least", "less_than", "greater_than"):
            return (abs(args[0]),)
        if op == "within":
            return (abs(args[0]), abs(args[1]))
        if op == "close_to":
            target, rel, abs_ = args
            return (max(abs_, rel * abs(target)),)
        if op == "equivalent_within":
            return (args[0],)
        return None

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
    if not isinstance(criterion, Criterion) or criterion.op in ("on_point", "equivalent_within"):
        raise ValueError(f"on_point needs a simple criterion such as at_most(-0.5), got {criterion!r}")
    return Criterion("on_point", (criterion,), f"point {criterion.text}")


def equivalent_within(margin: float) -> Criterion:
    """"No effect" decided by equivalence (two one-sided tests, TOST) with a declared ``margin``.

    The measurement is a :func:`compendium.stats.tost` result or an :class:`Estimate` of the
    difference whose interval is the ``1 - 2 alpha`` interval (90 % for alpha = 0.05; a 95 %
    interval is accepted and is conservative). ``pass`` when the whole interval lies strictly inside
    ``(-margin, margin)``, ``fail`` when the whole interval lies outside it (the estimate is
    decisively beyond the margin), ``inconclusive`` otherwise. This replaces "the interval contains
    0", which passes more easily with less data. A plain number passes when ``|x| < margin``.
    """
    m = _require_number(margin, "margin")
    if not math.isfinite(m) or m <= 0:
        raise ValueError(f"equivalent_within needs a positive, finite margin, got {margin!r}")
    return Criterion("equivalent_within", (m,), f"equivalent to 0 within ±{_fmt(m)} (TOST)")


def _decide_equivalence(margin: float, measured: Any) -> str:
    if isinstance(measured, TostResult):
        est = measured.estimate
    elif isinstance(measured, Estimate):
        est = measured
    else:
        x = _require_number(measured, "the measurement for equivalent_within")
        return "pass" if (not math.isnan(x) and abs(x) < margin) else "fail"
    if math.isnan(est.point):
        return "fail"
    if -margin < est.low and est.high < margin:
        return "pass"
    if est.low >= margin or est.high <= -margin:
        return "fail"
    return "inconclusive"


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
    return Criterion("greater_than", (lv,), f"p > {_fmt(lv)} (not rejected)", alpha=lv)


def p_value_below(level: float) -> Criterion:
    """A test rejects (negative controls, detected effects): pass when ``p < level``."""
    lv = _require_number(level, "level")
    if not 0 < lv < 1:
        raise ValueError(f"a test level must lie in (0, 1), got {lv}")
    return Criterion("less_than", (lv,), f"p < {_fmt(lv)} (rejected)", alpha=lv)


def _jsonable(value: Any) -> Any:
    """Convert a measurement to a JSON value: numbers stay numbers, the rest becomes text."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, Estimate):
        return {k: _jsonable(v) for k, v in value.to_dict().items()}
    if isinstance(value, TostResult):
        return {**{k: _jsonable(v) for k, v in value.estimate.to_dict().items()},
                "tost_p": _jsonable(value.p_value), "margin": _jsonable(value.margin)}
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
    preconditions: tuple = ()
    requires: tuple = ()
    gates: tuple = ()  # ({"id", "role", "verdict"}, ...): the linked rows that did not pass
    primary: bool = False
    family: str | None = None
    p_value: Any = None
    p_adjusted: Any = None
    exact: bool = False
    by_construction: bool = False

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
            "preconditions": list(self.preconditions),
            "requires": list(self.requires),
            "gates": [dict(g) for g in self.gates],
            "primary": self.primary,
            "family": self.family,
            "p_value": _jsonable(self.p_value),
            "p_adjusted": _jsonable(self.p_adjusted),
            "exact": self.exact,
            "by_construction": self.by_construction,
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


def _row_role(c: dict) -> str:
    """The role a row is counted under: wall-clock rows (``volatile``) count as ``timing`` whatever
    their declared role, so a ledger written before v3 never counts a timing as a paper claim."""
    if c.get("volatile"):
        return "timing"
    role = c.get("role", "claim")
    return role if role in ROLES else "claim"


def summarize(claims: list[dict]) -> dict[str, dict[str, int]]:
    """Counts by role and verdict from ``claims.json`` rows (``{'claim': {'pass': 3, ...}, ...}``).

    Every role is counted apart (claims, hypotheses, preconditions, controls, implementation,
    timing); timing rows are never counted as claims.
    """
    out = _empty_counts()
    for c in claims:
        out[_row_role(c)][c["verdict"]] += 1
    return out


def primary_row(claims: list[dict]) -> dict | None:
    """The row declared ``primary`` (None when none is, or when more than one is)."""
    rows = [c for c in claims if c.get("primary")]
    return rows[0] if len(rows) == 1 else None


def chapter_badge(claims: list[dict]) -> str:
    """The chapter's badge: its primary claim's verdict, or ``'no_primary'`` when none is declared."""
    row = primary_row(claims)
    return row["verdict"] if row is not None else NO_PRIMARY


def headline(claims: list[dict]) -> str:
    """One line a reader can trust: the primary claim, paper claims, then the other roles apart."""
    s = summarize(claims)
    cl = s["claim"]
    row = primary_row(claims)
    parts = []
    if row is not None:
        parts.append(f"primary claim {row['id']}: {row['verdict']}")
    parts.append(f"paper claims: {cl['pass']} reproduced, {cl['fail']} not reproduced, "
                 f"{cl['inconclusive']} inconclusive")
    if cl["unsupported"]:
        parts[-1] += f", {cl['unsupported']} unsupported (a control, precondition or required row did not pass)"
    parts[-1] += f", {cl['not_checkable']} not checkable"
    for role, label, verb in (("hypothesis", "hypotheses", "hold"), ("precondition", "preconditions", "hold"),
                              ("control", "controls", "behaved"), ("implementation", "implementation checks", "pass")):
        n = sum(s[role].values())
        if n:
            parts.append(f"{label}: {s[role]['pass']} of {n} {verb}")
    n_t = sum(s["timing"].values())
    if n_t:
        parts.append(f"{n_t} timed on this machine (not counted)")
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
        self._criteria: dict[str, Criterion] = {}

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
        preconditions: tuple | list = (),
        requires: tuple | list = (),
        primary: bool = False,
        family: str | None = None,
        p_value: float | None = None,
        exact: bool = False,
        by_construction: bool = False,
    ) -> Claim:
        """Record a check; the verdict is computed from ``measured`` and ``criterion``.

        Parameters
        ----------
        claim_id : str
            Short stable identifier, unique within the chapter (used by expected_verdicts.yaml).
        statement : str
            What is checked, in our words.
        role : {'claim', 'hypothesis', 'precondition', 'control', 'implementation', 'timing'}
            What the row is evidence for (required). Only ``claim`` rows count as the paper's
            claims; a ``control`` passes when it behaved as a control must (a variant that must
            fail the claim's test does fail it, ...); a ``precondition`` passes when the trained
            model beats a trivial baseline by the declared margin; ``hypothesis`` rows are our own
            conjectures (gated like claims); ``implementation`` rows check our own code;
            ``timing`` rows are wall-clock measurements, never counted as claims.
        kind : {'symbolic', 'exact', 'statistical', 'directional', 'ratio'}
        measured :
            A number, a boolean, a sympy expression (``symbolic``), or a
            :class:`~compendium.stats.Estimate` with an interval over stated units.
        criterion : Criterion
            Declared before the measurement is seen (``at_most(1e-10)``, ``within(-2.2, -1.8)``, ...).
        controls : list of str
            For claims and hypotheses: ids of the control rows that show this check has power. A
            row whose control did not behave is ``unsupported``, whatever its own verdict.
        min_effect : float, optional
            The smallest effect of interest that the criterion encodes (fixed in advance); it must
            equal the criterion's threshold (either end of ``within``, the tolerance of
            ``close_to``, the margin of ``equivalent_within``). Required for directional and
            statistical claims measured by an estimate.
        paper_value :
            The paper's number where it gives one for *this* comparison.
        note, details :
            Free text and extra numbers (seeds, sample sizes) kept in ``claims.json``.
        volatile : bool
            True for wall-clock measurements: the value and verdict vary between runs and
            machines, so determinism checks and the CI verdict comparison leave them out. Only
            ``timing`` rows are volatile (a ``timing`` row is volatile without saying so).
        preconditions : list of str
            For claims and hypotheses: ids of ``precondition`` rows (the trained model beats a
            trivial baseline by a declared margin). A row whose precondition did not pass is
            ``unsupported``.
        requires : list of str
            For claims and hypotheses: ids of rows that must pass for this row to be judged.
        primary : bool
            The paper's headline claim (one per chapter): :meth:`headline`, the chapter badge.
        family : str, optional
            Secondary claims with the same family are Holm-adjusted; the row needs a p-value
            (``p_value=``, a :func:`p_value_below` criterion on a p-value, or a ``tost`` result).
        p_value : float, optional
            The row's p-value, for Holm adjustment within its ``family``.
        exact : bool
            The measurement is exact (a count, a deterministic computation): a statistical or
            directional estimate with a zero-width interval is refused without it.
        by_construction : bool
            The criterion holds by construction of our code: only ``implementation`` rows.
        """
        where = f"{self.chapter}: row {claim_id!r}"
        if role is None:
            raise ValueError(
                f"{where}: declare role='claim' (a statement of the paper), 'control' (shows the check has power), "
                "'precondition' (the model beats a trivial baseline), 'hypothesis', 'implementation' "
                "(our own code is right) or 'timing' (wall-clock)"
            )
        if role not in ROLES:
            raise ValueError(f"{where}: role must be one of {ROLES}, got {role!r}")
        if kind not in KINDS:
            raise ValueError(f"{where}: kind must be one of {KINDS}, got {kind!r}")
        if not isinstance(criterion, Criterion):
            raise ValueError(
                f"{where}: criterion must be built with a helper such as at_most(...), got {criterion!r}"
            )
        if not statement:
            raise ValueError(f"{where}: statement must say what is checked")
        links = {}
        for name, value in (("controls", controls), ("preconditions", preconditions), ("requires", requires)):
            value = tuple(value or ())
            if isinstance(value, str) or any(not isinstance(c, str) or not c for c in value):
                raise ValueError(f"{where}: {name} must be a list of row ids, got {value!r}")
            if value and role not in GATING_ROLES:
                raise ValueError(f"{where}: only claims and hypotheses name {name} (role is {role!r})")
            if claim_id in value:
                raise ValueError(f"{where}: a row cannot name itself in {name}")
            links[name] = value
        # rule: by_construction only on implementation rows
        if by_construction and role != "implementation":
            raise ValueError(
                f"{where} (rule by-construction): a row true by construction is role='implementation', "
                f"not {role!r}"
            )
        # rule: volatile only on timing rows (a timing row is always volatile)
        if volatile and role != "timing":
            raise ValueError(
                f"{where} (rule volatile-timing): a wall-clock (volatile) measurement is role='timing', not "
                f"{role!r}; the paper's speed claim states what was counted (forward passes, FLOPs) in its own row"
            )
        volatile = volatile or role == "timing"
        # rule: one primary claim
        if primary:
            if role != "claim":
                raise ValueError(f"{where} (rule primary): only a claim can be primary (role is {role!r})")
            other = next((c.id for c in self._rows if c.primary), None)
            if other is not None:
                raise ValueError(f"{where} (rule one-primary): {other!r} is already the primary claim of {self.chapter!r}")
        # rule: min_effect equals the criterion's threshold
        if min_effect is not None:
            min_effect = _require_number(min_effect, f"{where}: min_effect")
            if math.isnan(min_effect) or min_effect < 0:
                raise ValueError(f"{where}: min_effect must be a non-negative number, got {min_effect}")
            allowed = criterion.threshold()
            if allowed is None:
                raise ValueError(
                    f"{where} (rule min-effect): criterion '{criterion.text}' has no threshold for "
                    f"min_effect={min_effect:g} to match; drop min_effect"
                )
            if not any(math.isclose(min_effect, t, rel_tol=1e-9, abs_tol=1e-12) for t in allowed):
                ends = " or ".join(_fmt(t) for t in allowed)
                raise ValueError(
                    f"{where} (rule min-effect): min_effect={min_effect:g} does not match the threshold of criterion "
                    f"'{criterion.text}' ({ends}); declare min_effect equal to it (for a band use "
                    "close_to(centre, abs=half_width) with min_effect=half_width)"
                )
        if (isinstance(measured, (Estimate, TostResult)) and role == "claim" and kind in ("directional", "statistical")
                and min_effect is None):
            raise ValueError(
                f"{where}: a {kind} claim measured by an interval declares the smallest "
                "effect of interest its criterion encodes (min_effect=..., fixed before the run)"
            )
        # rule: zero-width intervals only for declared exact measurements. A point dressed as an interval
        # (fewer than two units) is refused; a sample whose units all gave the same value is recorded,
        # but it cannot decide: no spread was observed, so the row is inconclusive with the reason said.
        est = measured.estimate if isinstance(measured, TostResult) else measured
        degenerate = False
        if (isinstance(est, Estimate) and kind in ("statistical", "directional") and est.low == est.high
                and not exact and (est.n or 0) >= 2):
            degenerate = True
        elif (isinstance(est, Estimate) and kind in ("statistical", "directional") and est.low == est.high
                and not exact):
            raise ValueError(
                f"{where} (rule zero-width): a {kind} estimate with a zero-width interval "
                f"[{_fmt(est.low)}, {_fmt(est.high)}] is not an interval; pass exact=True if the measurement is "
                "exact, or measure its spread over replicates"
            )
        # rule: family needs a p-value
        if p_value is not None:
            p_value = _require_number(p_value, f"{where}: p_value")
            if not 0 <= p_value <= 1:
                raise ValueError(f"{where}: p_value must lie in [0, 1], got {p_value}")
        row_p = p_value
        if row_p is None and isinstance(measured, TostResult):
            row_p = float(measured.p_value)
        if row_p is None and criterion.alpha is not None:
            row_p = _as_number(measured)
        if row_p is not None and not 0 <= row_p <= 1:  # NaN or not a p-value: nothing to adjust
            row_p = None
        if family is not None:
            if not isinstance(family, str) or not family:
                raise ValueError(f"{where}: family must be a non-empty name, got {family!r}")
            if role not in GATING_ROLES:
                raise ValueError(f"{where} (rule family): only claims and hypotheses are Holm-adjusted (role is {role!r})")
            if row_p is None:
                raise ValueError(
                    f"{where} (rule family): family={family!r} needs a p-value to adjust (pass p_value=..., "
                    "measure a p-value against p_value_below(...), or measure a tost result)"
                )
        verdict = criterion.decide(measured)
        if degenerate and verdict != "not_checkable":
            spread = (f"all {est.n} {est.unit or 'units'} gave the same value ({_fmt(est.point)}), so the interval "
                      "has zero width: no spread was observed to judge the criterion against (a ceiling, a floor or "
                      f"a model that did not move); verdict {verdict} → inconclusive.")
            note = f"{note} {spread}".strip() if note else spread
            verdict = "inconclusive"
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
            controls=links["controls"],
            min_effect=min_effect,
            computed_verdict=verdict,
            preconditions=links["preconditions"],
            requires=links["requires"],
            primary=bool(primary),
            family=family,
            p_value=row_p,
            exact=bool(exact),
            by_construction=bool(by_construction),
        )
        self._criteria[claim.id] = criterion
        self._rows.append(claim)
        return claim

    def not_checkable(self, claim_id: str, statement: str, *, reason: str, paper_value: Any = None,
                      category: str = "unspecified", primary: bool = False) -> Claim:
        """Record a paper claim this chapter cannot test, with the reason said plainly.

        ``category`` groups the reason (one of :data:`NOT_CHECKABLE_CATEGORIES`) for the synthesis.
        """
        if not reason:
            raise ValueError("not_checkable needs a reason")
        if category not in NOT_CHECKABLE_CATEGORIES:
            raise ValueError(f"not_checkable {claim_id!r}: category must be one of {NOT_CHECKABLE_CATEGORIES}, "
                             f"got {category!r}")
        if primary:
            other = next((c.id for c in self._rows if c.primary), None)
            if other is not None:
                raise ValueError(f"{self.chapter}: row {claim_id!r} (rule one-primary): {other!r} is already the "
                                 f"primary claim of {self.chapter!r}")
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
            primary=bool(primary),
        )
        self._rows.append(claim)
        return claim

    # ------------------------------------------------------------------ reading
    def _holm_adjusted(self) -> dict[str, tuple[float, str]]:
        """``{row id: (Holm-adjusted p, verdict after adjustment)}`` for rows in a family."""
        families: dict[str, list[Claim]] = {}
        for c in self._rows:
            if c.family is not None and c.p_value is not None:
                families.setdefault(c.family, []).append(c)
        out = {}
        for rows in families.values():
            adjusted = holm([r.p_value for r in rows])
            for r, p_adj in zip(rows, adjusted):
                crit = self._criteria.get(r.id)
                if crit is not None and crit.alpha is not None and _as_number(r.measured) is not None:
                    verdict = crit.decide(float(p_adj))  # the criterion is on the p-value itself
                elif r.computed_verdict == "pass" and p_adj >= (crit.alpha if crit is not None and crit.alpha else 0.05):
                    verdict = "inconclusive"
                else:
                    verdict = r.computed_verdict
                out[r.id] = (float(p_adj), verdict)
        return out

    @property
    def claims(self) -> list[Claim]:
        """Every row with its gates resolved.

        Secondary claims of one ``family`` are Holm-adjusted first; then a claim or hypothesis
        whose linked control, precondition or required row did not pass is ``unsupported``,
        whatever its own verdict, and its ``gates`` name the row and that row's verdict.
        """
        by_id = {c.id: c for c in self._rows}
        adjusted = self._holm_adjusted()
        resolved: dict[str, Claim] = {}
        visiting: set[str] = set()

        def resolve(c: Claim) -> Claim:
            if c.id in resolved:
                return resolved[c.id]
            if c.id in visiting:
                raise ValueError(f"{self.chapter}: row {c.id!r} (rule requires): a cycle of requires/controls links")
            visiting.add(c.id)
            if c.id in adjusted:
                p_adj, verdict = adjusted[c.id]
                note = c.note
                if verdict != c.computed_verdict:
                    note = (note + " " if note else "") + (
                        f"Holm-adjusted within family {c.family!r}: p = {_fmt(p_adj)}, {c.computed_verdict} → {verdict}.")
                c = Claim(**{**c.__dict__, "verdict": verdict, "p_adjusted": p_adj, "note": note})
            gates = []
            if c.role in GATING_ROLES and c.verdict != "not_checkable":
                for kind_, ids in (("control", c.controls), ("precondition", c.preconditions), ("requires", c.requires)):
                    for lid in ids:
                        linked = by_id.get(lid)
                        if linked is None:
                            continue  # reported by validate_links / save
                        linked = resolve(linked)
                        if linked.verdict != "pass":
                            gates.append({"id": lid, "link": kind_, "role": linked.role, "verdict": linked.verdict})
            if gates:
                text = ", ".join(f"{g['link']} {g['id']} ({g['verdict']})" for g in gates)
                note = (c.note + " " if c.note else "") + f"Unsupported: {text} did not pass."
                c = Claim(**{**c.__dict__, "verdict": "unsupported", "note": note, "gates": tuple(gates)})
            visiting.discard(c.id)
            resolved[c.id] = c
            return c

        return [resolve(c) for c in self._rows]

    def validate_links(self) -> None:
        """Every linked row exists: controls are ``control`` rows, preconditions ``precondition`` rows."""
        by_id = {c.id: c for c in self._rows}
        for c in self._rows:
            for name, ids, want in (("control", c.controls, "control"), ("precondition", c.preconditions, "precondition"),
                                    ("required row", c.requires, None)):
                for lid in ids:
                    if lid not in by_id:
                        raise ValueError(f"{self.chapter}: row {c.id!r} names {name} {lid!r}, which is not in the ledger")
                    if want is not None and by_id[lid].role != want:
                        raise ValueError(f"{self.chapter}: row {c.id!r} names {lid!r} as a {name}, but its role is "
                                         f"{by_id[lid].role!r}")
        self.claims  # noqa: B018 - raises on a cycle

    validate_controls = validate_links

    def headline(self) -> Claim | None:
        """The primary claim (resolved), or None when the chapter declares none."""
        for c in self.claims:
            if c.primary:
                return c
        return None

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
            "primary": next((r["id"] for r in rows if r["primary"]), None),
            "badge": chapter_badge(rows),
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
        self.validate_links()
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
                "not_run": "not run", "stale": "stale", "fragile": "fragile", NO_PRIMARY: "no primary claim"}
ROLE_LABELS = {"claim": "paper claim", "hypothesis": "hypothesis", "precondition": "precondition",
               "control": "control", "implementation": "implementation", "timing": "timed on this machine"}


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
    for c in sorted(claims, key=lambda c: (not c.get("primary"), order.get(_row_role(c), 9))):
        role = _row_role(c)
        note = f'<br><small>{escape(c["note"])}</small>' if c.get("note") else ""
        if c.get("primary"):
            note = "<br><small><strong>primary claim</strong></small>" + note
        for key, label in (("controls", "controls"), ("preconditions", "preconditions"), ("requires", "requires")):
            if c.get(key):
                note += f"<br><small>{label}: " + ", ".join(f"<code>{escape(x)}</code>" for x in c[key]) + "</small>"
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
