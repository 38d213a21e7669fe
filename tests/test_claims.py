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
    good = ledger.check("a", "error is tiny", role="claim", kind="exact", measured=1e-12, criterion=at_most(1e-10))
    bad = ledger.check("b", "error is tiny", role="claim", kind="exact", measured=1e-3, criterion=at_most(1e-10))
    assert (good.verdict, bad.verdict) == ("pass", "fail")
    assert ledger.counts()["claim"] == {"pass": 1, "fail": 1, "inconclusive": 0, "unsupported": 0,
                                        "not_checkable": 0}
    with pytest.raises(TypeError):
        ledger.check("c", "s", role="claim", kind="exact", measured=1.0, criterion=at_most(2.0), verdict="pass")


def test_ledger_rejects_bad_entries():
    ledger = Ledger("demo")
    ledger.check("a", "s", role="claim", kind="ratio", measured=2.0, criterion=at_least(1.5))
    with pytest.raises(ValueError, match="already"):
        ledger.check("a", "s", role="claim", kind="ratio", measured=2.0, criterion=at_least(1.5))
    with pytest.raises(ValueError, match="kind"):
        ledger.check("b", "s", role="claim", kind="vibes", measured=2.0, criterion=at_least(1.5))
    with pytest.raises(ValueError, match="criterion"):
        ledger.check("c", "s", role="claim", kind="exact", measured=2.0, criterion=lambda x: True)
    with pytest.raises(ValueError, match="reason"):
        ledger.not_checkable("d", "s", reason="")
    with pytest.raises(ValueError, match="empty"):
        Ledger("empty").save("/tmp/never-written.json")


def test_claims_json_is_deterministic_and_matches_schema(tmp_path):
    def make():
        ledger = Ledger("demo", scale="smoke", seed=3)
        x = sympy.symbols("x")
        ledger.check("sym", "identity", role="claim", kind="symbolic", measured=sympy.exp(x) * sympy.exp(-x) - 1,
                     criterion=simplifies_to(0))
        ledger.check("num", "closed form", role="claim", kind="exact", measured=np.float64(2.5e-13),
                     criterion=at_most(1e-10), paper_value=1e-10, details={"n": np.int64(64)})
        ledger.check("flag", "holds everywhere", role="claim", kind="statistical", measured=np.bool_(True), criterion=is_true())
        ledger.not_checkable("nc", "matches the paper's matrix", reason="the paper is not available")
        return ledger

    a, b = make().save(tmp_path / "a.json"), make().save(tmp_path / "b.json")
    assert a.read_bytes() == b.read_bytes()
    data = json.loads(a.read_text())
    jsonschema.validate(data, json.loads(paths.CLAIMS_SCHEMA.read_text()))
    assert data["summary"]["claim"] == {"pass": 3, "fail": 0, "inconclusive": 0, "unsupported": 0,
                                        "not_checkable": 1}
    assert data["claims"][0]["measured"] == 0  # the simplified residual


def test_html_table_has_one_badge_per_claim():
    ledger = Ledger("demo")
    ledger.check("a", "x < 1", role="claim", kind="exact", measured=0.5, criterion=less_than(1))
    ledger.not_checkable("b", "y", reason="no data")
    html = ledger._repr_html_()
    assert html.count('class="verdict ') == 2
    assert "verdict-pass" in html and "verdict-not-checkable" in html


def test_volatile_claims_are_flagged_and_masked():
    from compendium.claims import stable_view

    def make(seconds):
        ledger = Ledger("demo")
        ledger.check("exact", "closed form", role="claim", kind="exact", measured=1e-12, criterion=at_most(1e-10))
        ledger.check("speed", "faster than the baseline", role="timing", kind="ratio", measured=seconds,
                     criterion=at_least(1.3), volatile=True)
        return ledger.to_dict()

    fast, slow = make(1.5), make(1.1)
    assert fast["claims"][1]["volatile"] and not fast["claims"][0]["volatile"]
    assert fast != slow and stable_view(fast) == stable_view(slow)
    assert fast["claims"][1]["verdict"] == "pass" and slow["claims"][1]["verdict"] == "fail"
    from compendium.claims import render_html

    assert "wall-clock measurement" in render_html(fast["claims"])
    assert "wall-clock measurement" not in render_html(fast["claims"][:1])


# ---------------------------------------------------------------------------- v2: roles, estimates
from compendium.stats import Estimate  # noqa: E402


def _est(lo, hi, point=None):
    return Estimate(point if point is not None else (lo + hi) / 2, lo, hi, unit="trained models", n=5)


@pytest.mark.parametrize("crit, interval, verdict", [
    (greater_than(0), (0.1, 0.5), "pass"),
    (greater_than(0), (-0.1, 0.5), "inconclusive"),
    (greater_than(0), (-0.5, 0.0), "fail"),
    (at_least(1.0), (1.0, 2.0), "pass"),
    (at_least(1.0), (0.2, 0.99), "fail"),
    (at_most(0.02), (-0.01, 0.019), "pass"),
    (at_most(0.02), (0.0, 0.03), "inconclusive"),
    (less_than(0), (-1.0, -0.1), "pass"),
    (less_than(0), (0.0, 1.0), "fail"),
    (within(0.35, 0.65), (0.4, 0.6), "pass"),
    (within(0.35, 0.65), (0.3, 0.6), "inconclusive"),
    (within(0.35, 0.65), (0.7, 0.9), "fail"),
    (close_to(1.0, abs=0.1), (0.95, 1.05), "pass"),
    (close_to(1.0, abs=0.1), (1.2, 1.3), "fail"),
])
def test_an_estimate_is_decided_by_its_whole_interval(crit, interval, verdict):
    assert crit.decide(_est(*interval)) == verdict


@given(finite, finite, finite)
def test_interval_verdicts_agree_with_the_point_rule_at_both_ends(a, b, bound):
    lo, hi = min(a, b), max(a, b)
    crit = greater_than(bound)
    verdict = crit.decide(Estimate(lo, lo, hi))
    ends = {crit.evaluate(lo), crit.evaluate(hi)}
    assert verdict == ("pass" if ends == {True} else "fail" if ends == {False} else "inconclusive")


def test_role_is_required_and_checked():
    ledger = Ledger("demo")
    with pytest.raises(ValueError, match="declare role"):
        ledger.check("a", "s", kind="exact", measured=1.0, criterion=at_most(2.0))
    with pytest.raises(ValueError, match="role"):
        ledger.check("a", "s", role="proof", kind="exact", measured=1.0, criterion=at_most(2.0))
    with pytest.raises(ValueError, match="only claims and hypotheses name controls"):
        ledger.check("b", "s", role="control", kind="exact", measured=1.0, criterion=at_most(2.0), controls=["a"])


def test_an_interval_claim_declares_its_smallest_effect():
    ledger = Ledger("demo")
    with pytest.raises(ValueError, match="smallest effect"):
        ledger.check("a", "beats", role="claim", kind="directional", measured=_est(0.1, 0.3), criterion=greater_than(0))
    row = ledger.check("a", "beats", role="claim", kind="directional", measured=_est(0.1, 0.3),
                       criterion=at_least(0.05), min_effect=0.05)
    assert row.verdict == "pass"
    # implementation rows and controls need no smallest effect
    ledger.check("b", "ours", role="control", kind="directional", measured=_est(-0.1, 0.3), criterion=at_most(0.5))


def test_a_claim_whose_control_misbehaved_is_unsupported_not_passed(tmp_path):
    ledger = Ledger("demo")
    ledger.check("claim", "method beats baseline", role="claim", kind="directional", measured=_est(0.2, 0.4),
                 criterion=greater_than(0), min_effect=0, controls=["shuffled"])
    ledger.check("shuffled", "shuffled labels do not beat baseline", role="control", kind="directional",
                 measured=_est(0.1, 0.3), criterion=at_most(0.05))
    ledger.check("unit", "kernel equals reference", role="implementation", kind="exact", measured=0.0,
                 criterion=at_most(1e-9))
    data = json.loads(ledger.save(tmp_path / "c.json").read_text())
    jsonschema.validate(data, json.loads(paths.CLAIMS_SCHEMA.read_text()))
    row = {c["id"]: c for c in data["claims"]}
    assert row["claim"]["verdict"] == "unsupported" and row["claim"]["computed_verdict"] == "pass"
    assert "shuffled" in row["claim"]["note"]
    assert data["summary"]["claim"]["pass"] == 0 and data["summary"]["claim"]["unsupported"] == 1
    assert data["summary"]["implementation"]["pass"] == 1
    from compendium.claims import headline

    text = headline(data["claims"])
    assert text.startswith("paper claims: 0 reproduced") and "implementation checks: 1 of 1" in text


def test_a_named_control_must_exist_and_be_a_control(tmp_path):
    ledger = Ledger("demo")
    ledger.check("claim", "s", role="claim", kind="exact", measured=0.0, criterion=at_most(1), controls=["nope"])
    with pytest.raises(ValueError, match="not in the ledger"):
        ledger.save(tmp_path / "x.json")
    ledger2 = Ledger("demo")
    ledger2.check("claim", "s", role="claim", kind="exact", measured=0.0, criterion=at_most(1), controls=["impl"])
    ledger2.check("impl", "s", role="implementation", kind="exact", measured=0.0, criterion=at_most(1))
    with pytest.raises(ValueError, match="role is 'implementation'"):
        ledger2.save(tmp_path / "y.json")


def test_a_ledger_of_implementation_checks_only_is_refused(tmp_path):
    ledger = Ledger("demo")
    ledger.check("impl", "s", role="implementation", kind="exact", measured=0.0, criterion=at_most(1))
    with pytest.raises(ValueError, match="no paper claim"):
        ledger.save(tmp_path / "z.json")


def test_html_shows_roles_intervals_and_the_headline():
    ledger = Ledger("demo")
    ledger.check("a", "beats", role="claim", kind="directional", measured=_est(-0.1, 0.3, 0.1),
                 criterion=greater_than(0), min_effect=0.0)
    ledger.check("b", "identity", role="implementation", kind="exact", measured=0.0, criterion=at_most(1e-9))
    html = ledger._repr_html_()
    assert "verdict-inconclusive" in html and "role-implementation" in html
    assert "[-0.1, 0.3]" in html and "5 trained models" in html
    assert "paper claims: 0 reproduced, 0 not reproduced, 1 inconclusive" in html


def test_on_point_reads_a_rule_stated_on_the_point():
    from compendium.claims import on_point

    assert on_point(at_most(0.0)).decide(Estimate(-0.1, -0.5, 0.5, 0.9, "m", 10)) == "pass"
    assert on_point(at_most(-0.5)).to_dict() == {"op": "on_point", "args": [{"op": "at_most", "args": [-0.5],
                                                                              "text": "≤ -0.5"}], "text": "point ≤ -0.5"}
    with pytest.raises(ValueError):
        on_point(on_point(at_most(0.0)))


def test_either_is_removed():
    import compendium.claims as claims

    assert not hasattr(claims, "either") and "either" not in claims.__all__


# ---------------------------------------------------------------------------- v3: gates, equivalence, refusals
from compendium.claims import chapter_badge, equivalent_within, summarize  # noqa: E402
from compendium.stats import tost  # noqa: E402


def _gated(ctrl_measured, pre_measured=0.9, own=_est(0.2, 0.4)):
    ledger = Ledger("demo")
    ledger.check("claim", "beats", role="claim", kind="directional", measured=own, criterion=greater_than(0),
                 min_effect=0, controls=["ctrl"], preconditions=["floor"], primary=True)
    ledger.check("ctrl", "shuffled does not beat", role="control", kind="exact", measured=ctrl_measured,
                 criterion=at_most(0.05))
    ledger.check("floor", "model beats chance by 0.1", role="precondition", kind="exact", measured=pre_measured,
                 criterion=at_least(0.6))
    return ledger


def test_gates_pass_through_when_every_linked_row_passed():
    row = _gated(0.0)["claim"]
    assert row.verdict == "pass" and row.gates == ()


@pytest.mark.parametrize("own", [_est(0.2, 0.4), _est(-0.4, -0.2), _est(-0.1, 0.3)])
def test_a_failed_control_gates_pass_fail_and_inconclusive_alike(own):
    row = _gated(0.5, own=own)["claim"]
    assert row.verdict == "unsupported" and row.computed_verdict in ("pass", "fail", "inconclusive")
    assert row.gates == ({"id": "ctrl", "link": "control", "role": "control", "verdict": "fail"},)


def test_a_failed_precondition_makes_the_claim_unsupported(tmp_path):
    ledger = _gated(0.0, pre_measured=0.5, own=_est(-0.4, -0.2))
    row = ledger["claim"]
    assert row.verdict == "unsupported" and row.computed_verdict == "fail"
    assert row.gates[0]["link"] == "precondition" and "precondition floor (fail)" in row.note
    data = json.loads(ledger.save(tmp_path / "c.json").read_text())
    jsonschema.validate(data, json.loads(paths.CLAIMS_SCHEMA.read_text()))
    assert data["schema_version"] == 3 and data["badge"] == "unsupported" and data["primary"] == "claim"
    assert data["summary"]["precondition"]["fail"] == 1 and data["summary"]["claim"]["unsupported"] == 1


def test_requires_is_judged_only_when_the_required_row_passed():
    ledger = Ledger("demo")
    ledger.check("changes", "changes the output", role="claim", kind="exact", measured=0.0, criterion=at_least(0.1))
    ledger.check("fidelity", "keeps fidelity", role="claim", kind="exact", measured=0.0, criterion=at_most(0.1),
                 requires=["changes"])
    ledger.check("after", "depends on fidelity", role="hypothesis", kind="exact", measured=0.0,
                 criterion=at_most(0.1), requires=["fidelity"])
    assert ledger["fidelity"].verdict == "unsupported" and ledger["fidelity"].computed_verdict == "pass"
    assert ledger["after"].gates[0] == {"id": "fidelity", "link": "requires", "role": "claim",
                                        "verdict": "unsupported"}
    ok = Ledger("demo")
    ok.check("changes", "changes", role="claim", kind="exact", measured=0.5, criterion=at_least(0.1))
    ok.check("fidelity", "keeps", role="claim", kind="exact", measured=0.0, criterion=at_most(0.1), requires=["changes"])
    assert ok["fidelity"].verdict == "pass"


def test_links_are_validated_at_save(tmp_path):
    ledger = Ledger("demo")
    ledger.check("claim", "s", role="claim", kind="exact", measured=0.0, criterion=at_most(1), preconditions=["ctrl"])
    ledger.check("ctrl", "s", role="control", kind="exact", measured=0.0, criterion=at_most(1))
    with pytest.raises(ValueError, match="as a precondition, but its role is 'control'"):
        ledger.save(tmp_path / "x.json")
    with pytest.raises(ValueError, match="only claims and hypotheses name requires"):
        ledger.check("c2", "s", role="control", kind="exact", measured=0.0, criterion=at_most(1), requires=["claim"])


def test_equivalent_within_decides_by_tost():
    crit = equivalent_within(0.1)
    assert crit.decide(Estimate(0.01, -0.05, 0.07, 0.9, "m", 10)) == "pass"
    assert crit.decide(Estimate(0.3, 0.15, 0.45, 0.9, "m", 10)) == "fail"
    assert crit.decide(Estimate(-0.3, -0.45, -0.1, 0.9, "m", 10)) == "fail"
    # a wide interval that contains 0 is not evidence of no effect
    assert crit.decide(Estimate(0.0, -0.5, 0.5, 0.9, "m", 10)) == "inconclusive"
    rng = np.random.default_rng(0)
    close = tost(rng.normal(0, 0.01, 30), margin=0.1, unit="m")
    assert close.equivalent and crit.decide(close) == "pass"
    far = tost(rng.normal(1.0, 0.01, 30), margin=0.1, unit="m")
    assert crit.decide(far) == "fail"
    assert crit.decide(0.05) == "pass" and crit.decide(0.2) == "fail"
    with pytest.raises(ValueError):
        equivalent_within(0)
    ledger = Ledger("demo")
    row = ledger.check("same", "no harm", role="claim", kind="statistical", measured=close, criterion=crit,
                       min_effect=0.1, family="harm")
    assert row.verdict == "pass" and row.p_value == pytest.approx(close.p_value)
    assert json.loads(ledger.to_json())["claims"][0]["measured"]["margin"] == 0.1


@pytest.mark.parametrize("criterion,min_effect,ok", [
    (at_least(0.05), 0.05, True), (less_than(-0.1), 0.1, True), (at_most(0.0), 0.5, False),
    (at_least(3), 0, False), (within(-0.2, 0.3), 0.3, True), (within(-0.2, 0.3), 0.25, False),
    (close_to(1.0, abs=0.2), 0.2, True), (close_to(1.0, abs=0.2), 1.0, False),
    (equivalent_within(0.1), 0.1, True), (is_true(), 0.1, False),
])
def test_min_effect_must_equal_the_criterion_threshold(criterion, min_effect, ok):
    ledger = Ledger("demo")
    record = lambda: ledger.check("row", "s", role="claim", kind="directional",  # noqa: E731
                                  measured=True if criterion.op == "is_true" else _est(0.1, 0.3),
                                  criterion=criterion, min_effect=min_effect)
    if ok:
        record()
    else:
        with pytest.raises(ValueError, match="demo: row 'row' \\(rule min-effect\\)"):
            record()


def test_zero_width_estimates_are_refused_unless_exact():
    ledger = Ledger("demo")
    with pytest.raises(ValueError, match="rule zero-width"):  # a point dressed as an interval
        ledger.check("z", "s", role="claim", kind="statistical", measured=Estimate(0.0, 0.0, 0.0, 0.95, "m", 1),
                     criterion=greater_than(-0.1), min_effect=0.1)
    # five units that all gave the same value: recorded, but it cannot decide either way
    same = ledger.check("same", "s", role="claim", kind="statistical", measured=Estimate(0.0, 0.0, 0.0, 0.95, "m", 5),
                        criterion=greater_than(-0.1), min_effect=0.1)
    assert same.verdict == "inconclusive" and "all 5 m gave the same value" in same.note
    worse = ledger.check("same-fail", "s", role="claim", kind="statistical",
                         measured=Estimate(-1.0, -1.0, -1.0, 0.95, "m", 3), criterion=greater_than(-0.1), min_effect=0.1)
    assert worse.verdict == "inconclusive" and "fail → inconclusive" in worse.note
    row = ledger.check("z", "s", role="claim", kind="statistical", measured=Estimate(0.0, 0.0, 0.0, 0.95, "m", 5),
                       criterion=greater_than(-0.1), min_effect=0.1, exact=True)
    assert row.exact and row.verdict == "pass"
    # exact kinds may carry a point interval
    ledger.check("e", "s", role="implementation", kind="exact", measured=Estimate(0.0, 0.0, 0.0), criterion=at_most(1))


def test_record_time_refusals_name_the_row_and_rule():
    ledger = Ledger("demo")
    with pytest.raises(ValueError, match="demo: row 'bc' \\(rule by-construction\\)"):
        ledger.check("bc", "s", role="claim", kind="exact", measured=0.0, criterion=at_most(1), by_construction=True)
    ledger.check("bc", "s", role="implementation", kind="exact", measured=0.0, criterion=at_most(1), by_construction=True)
    with pytest.raises(ValueError, match="demo: row 'v' \\(rule volatile-timing\\)"):
        ledger.check("v", "s", role="claim", kind="ratio", measured=1.5, criterion=at_least(1.3), volatile=True)
    t = ledger.check("v", "s", role="timing", kind="ratio", measured=1.5, criterion=at_least(1.3))
    assert t.volatile
    ledger.check("p1", "s", role="claim", kind="exact", measured=0.0, criterion=at_most(1), primary=True)
    with pytest.raises(ValueError, match="demo: row 'p2' \\(rule one-primary\\): 'p1'"):
        ledger.check("p2", "s", role="claim", kind="exact", measured=0.0, criterion=at_most(1), primary=True)
    with pytest.raises(ValueError, match="rule one-primary"):
        ledger.not_checkable("p3", "s", reason="r", primary=True)
    with pytest.raises(ValueError, match="rule primary"):
        ledger.check("p4", "s", role="control", kind="exact", measured=0.0, criterion=at_most(1), primary=True)
    with pytest.raises(ValueError, match="demo: row 'f' \\(rule family\\)"):
        ledger.check("f", "s", role="claim", kind="exact", measured=0.0, criterion=at_most(1), family="fam")


def test_a_family_is_holm_adjusted():
    ledger = Ledger("demo")
    for i, p in enumerate([0.01, 0.02, 0.04]):
        ledger.check(f"s{i}", "s", role="claim", kind="statistical", measured=p, criterion=p_value_below(0.05),
                     family="secondary")
    ledger.check("x", "s", role="claim", kind="statistical", measured=_est(0.2, 0.4), criterion=greater_than(0),
                 min_effect=0, p_value=0.03, family="other")
    ledger.check("y", "s", role="claim", kind="statistical", measured=_est(0.2, 0.4), criterion=greater_than(0),
                 min_effect=0, p_value=0.04, family="other")
    rows = {c.id: c for c in ledger.claims}
    assert [rows[f"s{i}"].computed_verdict for i in range(3)] == ["pass"] * 3
    assert [rows[f"s{i}"].p_adjusted for i in range(3)] == pytest.approx([0.03, 0.04, 0.04])
    assert [rows[f"s{i}"].verdict for i in range(3)] == ["pass"] * 3
    assert rows["x"].p_adjusted == pytest.approx(0.06) and rows["x"].verdict == "inconclusive"
    assert "Holm-adjusted" in rows["x"].note


def test_one_primary_sets_the_badge_and_roles_are_counted_apart():
    ledger = Ledger("demo")
    assert ledger.headline() is None
    ledger.check("main", "s", role="claim", kind="exact", measured=2.0, criterion=at_most(1), primary=True)
    ledger.check("side", "s", role="claim", kind="exact", measured=0.0, criterion=at_most(1))
    ledger.check("t", "s", role="timing", kind="ratio", measured=2.0, criterion=at_least(1.3))
    ledger.check("h", "s", role="hypothesis", kind="exact", measured=0.0, criterion=at_most(1))
    rows = ledger.to_dict()["claims"]
    assert ledger.headline().id == "main" and chapter_badge(rows) == "fail"
    s = summarize(rows)
    assert s["claim"]["fail"] == 1 and s["claim"]["pass"] == 1 and s["timing"]["pass"] == 1
    assert s["hypothesis"]["pass"] == 1
    assert chapter_badge([r for r in rows if r["id"] != "main"]) == "no_primary"
    # a v2 row timed with role claim is counted as timing, never as a claim
    assert summarize([{"role": "claim", "volatile": True, "verdict": "pass"}])["claim"]["pass"] == 0
    from compendium.claims import headline

    assert headline(rows).startswith("primary claim main: fail")
