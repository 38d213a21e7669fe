"""The expected-verdicts file: decisive entries are compared, fragile ones published, not compared."""

import pytest

from compendium.expected import compare_verdicts, fragile_differences, load_expected


def _rows(**verdicts):
    return [{"id": k.replace("_", "-"), "verdict": v, "volatile": False} for k, v in verdicts.items()]


def test_decisive_changes_are_caught_and_fragile_ones_are_not(tmp_path):
    path = tmp_path / "e.yaml"
    path.write_text("smoke:\n  ch:\n    a: pass\n    b: {verdict: fail, fragile: 'flips at 2 of 5 seeds'}\n")
    expected = load_expected("smoke", path)
    assert compare_verdicts(expected, {"ch": _rows(a="pass", b="pass")}) == []
    problems = compare_verdicts(expected, {"ch": _rows(a="inconclusive", b="fail")})
    assert problems == ["ch/a: expected pass, got inconclusive"]
    assert compare_verdicts(expected, {"ch": _rows(a="pass")}) == ["ch/b: recorded but no longer checked"]
    assert "new claim" in compare_verdicts(expected, {"ch": _rows(a="pass", b="fail", c="pass")})[0]


def test_volatile_rows_are_never_compared(tmp_path):
    path = tmp_path / "e.yaml"
    path.write_text("smoke:\n  ch:\n    a: pass\n")
    rows = _rows(a="pass") + [{"id": "speed", "verdict": "fail", "volatile": True}]
    assert compare_verdicts(load_expected("smoke", path), {"ch": rows}) == []


@pytest.mark.parametrize("text, match", [
    ("smoke:\n  ch:\n    a: passed\n", "unknown verdict"),
    ("smoke:\n  ch:\n    a: {verdict: pass}\n", "says why"),
    ("smoke:\n  ch:\n    a: [pass]\n", "expected a verdict"),
])
def test_bad_entries_are_refused(tmp_path, text, match):
    path = tmp_path / "e.yaml"
    path.write_text(text)
    with pytest.raises(ValueError, match=match):
        load_expected("smoke", path)


def test_the_repository_file_parses():
    assert load_expected("smoke")


def test_fragile_entries_that_differ_are_listed_not_failed(tmp_path):
    path = tmp_path / "e.yaml"
    path.write_text("smoke:\n  ch:\n    a: pass\n    b: {verdict: fail, fragile: 'flips at 2 of 5 seeds'}\n")
    expected = load_expected("smoke", path)
    assert fragile_differences(expected, {"ch": _rows(a="fail", b="fail")}) == []
    assert fragile_differences(expected, {"ch": _rows(a="fail", b="pass")}) == [
        "ch/b: recorded fail, got pass (fragile: flips at 2 of 5 seeds)"]
    assert fragile_differences(expected, {"other": _rows(b="pass")}) == []
