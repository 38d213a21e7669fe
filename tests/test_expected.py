"""The expected-verdicts file: decisive entries are compared, fragile ones published, not compared."""

import pytest

from compendium.expected import (compare_verdicts, fragile_differences, load_expected, sweep_flips, updated_block,
                                 write_block)


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


def test_a_new_record_updates_entries_keeps_fragile_reasons_and_marks_sweep_flips():
    old = {"a": "pass", "b": {"verdict": "fail", "fragile": "flips at 1 of 4"}, "gone": "pass"}
    rows = _rows(a="inconclusive", b="pass", c="pass", d="fail") + [{"id": "t", "verdict": "fail", "volatile": True}]
    entries, changes = updated_block(old, rows, flips={"d": "flips at 2 of 4 further seeds"})
    assert entries == {"a": "inconclusive", "b": {"verdict": "pass", "fragile": "flips at 1 of 4"}, "c": "pass",
                       "d": {"verdict": "fail", "fragile": "flips at 2 of 4 further seeds"}}
    assert changes == ["a: pass -> inconclusive", "b: fail -> pass (fragile)", "c: new, pass",
                       "d: new, fail (fragile)", "d: marked fragile: flips at 2 of 4 further seeds",
                       "gone: dropped (no longer checked)"]
    assert updated_block(entries, rows, flips={"d": "flips at 2 of 4 further seeds"})[1] == []


def test_sweep_flips_name_each_flipping_row_with_its_seeds():
    sweep = {"recorded_seed": 0, "seeds": [1, 2, 3, 4], "claims": {
        "steady": {"recorded": "pass", "verdicts": {"1": "pass", "2": "pass", "3": "pass", "4": "pass"}, "total": 4},
        "edge": {"recorded": "pass", "verdicts": {"1": "fail", "2": "pass", "3": "inconclusive", "4": "fail"}, "total": 4}}}
    assert sweep_flips(sweep, "full", "2026-12-07") == {"edge": (
        "flips at 3 of 4 further seeds (full seed sweep 2026-12-07, seeds 1, 2, 3, 4 against the recorded seed 0): "
        "fail at seeds 1, 4; inconclusive at seed 3")}


def test_writing_a_block_keeps_the_comments_the_other_block_and_the_other_chapters(tmp_path):
    path = tmp_path / "e.yaml"
    text = ("# head comment\nsmoke:\n  ch:\n    a: pass\n    b: {verdict: fail, fragile: \"flips at 2 of 5 seeds\"}\n"
            "full:\n  ch:\n    a: fail\n  other:\n    x: pass\n")
    path.write_text(text)
    write_block("smoke", {}, path)
    assert path.read_text() == text  # written back unchanged, one line per fragile entry
    write_block("full", {"ch": {"a": "pass", "n": {"verdict": "fail", "fragile": "why"}}, "new": {"y": "fail"}}, path)
    assert path.read_text().startswith("# head comment\nsmoke:\n  ch:\n    a: pass\n")
    full = load_expected("full", path)
    assert {s: {c: (e.verdict, e.fragile) for c, e in v.items()} for s, v in full.items()} == {
        "ch": {"a": ("pass", ""), "n": ("fail", "why")}, "other": {"x": ("pass", "")}, "new": {"y": ("fail", "")}}
    with pytest.raises(ValueError, match="unknown verdict"):
        write_block("full", {"ch": {"a": "passed"}}, path)
    assert load_expected("full", path)["ch"]["a"].verdict == "pass"  # the refused write left the file as it was
    assert sorted(p.name for p in tmp_path.iterdir()) == ["e.yaml"]
