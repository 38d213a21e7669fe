"""The claims ledger computes verdicts from measurements and declared criteria."""

import json
import math

import jsonschema
import numpy as np
import pytest
import sympy
from hypothesis import given
from hypothesis import strategies as st

from compendium import paths
from compendium.claims import (
    Ledger,
    at_least,
    at_most,
    close_to,
    equals,
    greater_than,
    is_true,
    less_than,
    p_value_above,
    p_value_below,
    simplifies_to,
    within,
)

finite = st.floats(allow_nan=False, allow_infinity=False, width=64)


@given(finite, finite)
def test_at_most_and_at_least_are_the_comparisons(x, bound):
    assert at_most(bound).evaluate(x) == (x <= bound)
    assert at_least(bound).evaluate(x) == (x >= bound)
    assert less_than(bound).evaluate(x) == (x < bound)
    assert greater_than(bound).evaluate(x) == (x > bound)


@given(finite, finite, finite)
def test_within_is_the_closed_interval(x, a, b):
    lo, hi = min(a, b), max(a, b)
    assert within(lo, hi).evaluate(x) == (lo <= x <= hi)


@pytest.mark.parametrize("crit", [at_most(1.0), at_least(-1.0), within(-1, 1), close_to(0.0, abs=1.0)])
def test_nan_never_passes(crit):
    assert crit.evaluate(math.nan) is False
    assert crit.evaluate(np.float64("nan")) is False


def test_close_to_uses_the_larger_tolerance():
    assert close_to(100.0, rel=0.01).evaluate(100.9)
    assert not close_to(100.0, rel=0.01).evaluate(101.1)
    assert close_to(0.0, abs=1e-3, rel=0.5).evaluate(5e-4)
    with pytest.raises(ValueError):
        close_to(1.0)


def test_numpy_and_sympy_measurements():
    assert at_most(1e-10).evaluate(np.float32(1e-11))
    assert equals(3).evaluate(np.int64(3))
    assert equals(sympy.Rational(-2, 5)).evaluate(sympy.Rational(-4, 10))
    x = sympy.symbols("x")
    assert simplifies_to(0).evaluate(sympy.sin(x) ** 2 + sympy.cos(x) ** 2 - 1)
    assert not simplifies_to(0).evaluate(x)


def test_p_value_criteria_and_levels():
    assert p_value_above(0.01).evaluate(0.2) and not p_value_above(0.01).evaluate(0.001)
    assert p_value_below(1e-6).evaluate(1e-9) and not p_value_below(1e-6).evaluate(0.5)
    with pytest.raises(ValueError):
        p_value_above(1.5)


def test_wrong_measurement_types_are_rejected():
    with pytest.raises(ValueError, match="real number"):
        at_most(1.0).evaluate("small")
    with pytest.raises(ValueError, match="boolean"):
        is_true().evaluate(1.0)


def test_verdict_is_computed_not_declared():
    ledger = Ledger("demo")
    good = ledger.check("a", "error is tiny", kind="exact", measured=1e-12, criterion=at_most(1e-10))
    bad = ledger.check("b", "error is tiny", kind="exact", measured=1e-3, criterion=at_most(1e-10))
    assert (good.verdict, bad.verdict) == ("pass", "fail")
    assert ledger.counts() == {"pass": 1, "fail": 1, "not_checkable": 0}
    with pytest.raises(TypeError):
        ledger.check("c", "s", kind="exact", measured=1.0, criterion=at_most(2.0), verdict="pass")


def test_ledger_rejects_bad_entries():
    ledger = Ledger("demo")
    ledger.check("a", "s", kind="ratio", measured=2.0, criterion=at_least(1.5))
    with pytest.raises(ValueError, match="already"):
        ledger.check("a", "s", kind="ratio", measured=2.0, criterion=at_least(1.5))
    with pytest.raises(ValueError, match="kind"):
        ledger.check("b", "s", kind="vibes", measured=2.0, criterion=at_least(1.5))
    with pytest.raises(ValueError, match="criterion"):
        ledger.check("c", "s", kind="exact", measured=2.0, criterion=lambda x: True)
    with pytest.raises(ValueError, match="reason"):
        ledger.not_checkable("d", "s", reason="")
    with pytest.raises(ValueError, match="empty"):
        Ledger("empty").save("/tmp/never-written.json")


def test_claims_json_is_deterministic_and_matches_schema(tmp_path):
    def make():
        ledger = Ledger("demo", scale="smoke", seed=3)
        x = sympy.symbols("x")
        ledger.check("sym", "identity", kind="symbolic", measured=sympy.exp(x) * sympy.exp(-x) - 1,
                     criterion=simplifies_to(0))
        ledger.check("num", "closed form", kind="exact", measured=np.float64(2.5e-13),
                     criterion=at_most(1e-10), paper_value=1e-10, details={"n": np.int64(64)})
        ledger.check("flag", "holds everywhere", kind="statistical", measured=np.bool_(True), criterion=is_true())
        ledger.not_checkable("nc", "matches the paper's matrix", reason="the paper is not available")
        return ledger

    a, b = make().save(tmp_path / "a.json"), make().save(tmp_path / "b.json")
    assert a.read_bytes() == b.read_bytes()
    data = json.loads(a.read_text())
    jsonschema.validate(data, json.loads(paths.CLAIMS_SCHEMA.read_text()))
    assert data["summary"] == {"pass": 3, "fail": 0, "not_checkable": 1}
    assert data["claims"][0]["measured"] == 0  # the simplified residual


def test_html_table_has_one_badge_per_claim():
    ledger = Ledger("demo")
    ledger.check("a", "x < 1", kind="exact", measured=0.5, criterion=less_than(1))
    ledger.not_checkable("b", "y", reason="no data")
    html = ledger._repr_html_()
    assert html.count('class="verdict ') == 2
    assert "verdict-pass" in html and "verdict-not-checkable" in html


def test_volatile_claims_are_flagged_and_masked():
    from compendium.claims import stable_view

    def make(seconds):
        ledger = Ledger("demo")
        ledger.check("exact", "closed form", kind="exact", measured=1e-12, criterion=at_most(1e-10))
        ledger.check("speed", "faster than the baseline", kind="ratio", measured=seconds,
                     criterion=at_least(1.3), volatile=True)
        return ledger.to_dict()

    fast, slow = make(1.5), make(1.1)
    assert fast["claims"][1]["volatile"] and not fast["claims"][0]["volatile"]
    assert fast != slow and stable_view(fast) == stable_view(slow)
    assert fast["claims"][1]["verdict"] == "pass" and slow["claims"][1]["verdict"] == "fail"
    from compendium.claims import render_html

    assert "wall-clock measurement" in render_html(fast["claims"])
    assert "wall-clock measurement" not in render_html(fast["claims"][:1])
