"""``compendium audit``: each ledger-v3 rule over a fixture claims.json, and the pending list."""

import json

import pytest

from compendium import audit
from compendium.cli import main


def _row(rid, role="claim", verdict="pass", **kw):
    row = {"id": rid, "role": role, "verdict": verdict, "computed_verdict": verdict, "controls": [],
           "preconditions": [], "requires": [], "primary": False, "by_construction": False, "volatile": False}
    row.update(kw)
    return row


GOOD = [
    _row("main", primary=True, controls=["ctrl"], preconditions=["floor"]),
    _row("side", controls=["ctrl"]),
    _row("ctrl", role="control"),
    _row("floor", role="precondition"),
    _row("impl", role="implementation", by_construction=True),
    _row("t", role="timing", volatile=True),
    _row("nc", verdict="not_checkable"),
]

BAD = [
    _row("ungated"),                                            # claim-ungated
    _row("dup", controls=["c-fail"]), _row("dup", controls=["c-fail"]),  # duplicate-id
    _row("failing", verdict="fail", controls=["c-fail"]),
    _row("c-fail", role="control"),                              # (named by passing 'dup' too: see below)
    _row("c-only-fail", role="control"),  # named only by a failing claim: a note (it gates that fail)
    _row("f2", verdict="fail", controls=["c-only-fail"]),
    _row("c-orphan", role="control"),                            # control-unlinked
    _row("bc", by_construction=True, controls=["c-fail"]),       # claim-by-construction
    _row("p1", primary=True, controls=["c-fail"]), _row("p2", primary=True, controls=["c-fail"]),  # primary-doubled
]


def _write(tmp_path, scale, slug, rows):
    d = tmp_path / scale / slug
    d.mkdir(parents=True)
    (d / "claims.json").write_text(json.dumps({"chapter": slug, "claims": rows}))


def test_a_ledger_on_the_v3_contract_has_no_finding():
    assert audit.audit_rows("good", GOOD) == []


def test_each_rule_can_fail():
    found = {(f.row, f.rule) for f in audit.audit_rows("bad", BAD)}
    assert ("ungated", "claim-ungated") in found
    assert ("dup", "duplicate-id") in found
    assert ("c-only-fail", "control-only-failing") in found  # a note, see the next test
    assert ("c-fail", "control-only-failing") not in found  # also named by passing claims
    assert ("c-orphan", "control-unlinked") in found
    assert ("bc", "claim-by-construction") in found
    assert ("p1,p2", "primary-doubled") in found
    missing = audit.audit_rows("none", [r for r in GOOD if not r["primary"]] + [_row("x", controls=["ctrl"])])
    assert [(f.chapter, f.row, f.rule) for f in missing] == [("none", "-", "primary-missing")]
    assert {f.rule for f in audit.audit_rows("bad", BAD)} == (set(audit.RULES) | set(audit.NOTES)) - {"primary-missing", "unreadable"}


def test_the_command_exits_1_on_findings_and_names_chapter_row_rule(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("COMPENDIUM_RESULTS", str(tmp_path))
    _write(tmp_path, "smoke", "good", GOOD)
    _write(tmp_path, "smoke", "bad", BAD)
    assert main(["audit", "--scale", "smoke"]) == 1
    out = capsys.readouterr().out
    assert "FINDING  bad  c-orphan  [control-unlinked]" in out and "good" not in out.split("FINDING")[-1]
    assert "2 ledger(s) audited (smoke)" in out


def test_pending_chapters_do_not_fail_the_audit(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("COMPENDIUM_RESULTS", str(tmp_path))
    _write(tmp_path, "smoke", "good", GOOD)
    _write(tmp_path, "smoke", "bad", BAD)
    pending = tmp_path / "pending.yaml"
    pending.write_text("pending:\n  bad: not migrated yet\n  good: migrated last week\n")
    assert main(["audit", "--scale", "smoke", "--allow-pending", "--pending", str(pending)]) == 0
    out = capsys.readouterr().out
    assert "pending  bad  c-orphan  [control-unlinked]" in out
    assert "clean    good" in out
    # without --allow-pending the list is ignored
    assert main(["audit", "--scale", "smoke", "--pending", str(pending)]) == 1
    pending.write_text("pending:\n  bad: ''\n")
    with pytest.raises(ValueError, match="needs a reason"):
        audit.load_pending(pending)


def test_no_ledger_is_exit_2(tmp_path, monkeypatch):
    monkeypatch.setenv("COMPENDIUM_RESULTS", str(tmp_path))
    assert main(["audit", "--scale", "smoke"]) == 2


def test_the_pending_list_of_the_repository_names_registered_chapters_with_reasons():
    import yaml

    from compendium import paths

    pending = audit.load_pending()
    slugs = {c["slug"] for c in yaml.safe_load(paths.REGISTRY.read_text())["chapters"]}
    assert set(pending) <= slugs


def test_a_ledger_written_by_the_library_audits_like_the_fixture(tmp_path):
    from compendium.claims import Ledger, at_least, at_most

    ledger = Ledger("demo")
    ledger.check("main", "s", role="claim", kind="exact", measured=0.0, criterion=at_most(1), primary=True,
                 controls=["ctrl"], preconditions=["floor"])
    ledger.check("ctrl", "s", role="control", kind="exact", measured=0.0, criterion=at_most(1))
    ledger.check("floor", "s", role="precondition", kind="exact", measured=1.0, criterion=at_least(0.5))
    path = ledger.save(tmp_path / "smoke" / "demo" / "claims.json")
    assert audit.audit_file(path) == []


def test_a_control_named_only_by_failing_claims_is_a_note_not_a_finding(tmp_path):
    import io

    rows = [dict(r) for r in GOOD] + [_row("f2", verdict="fail", controls=["c-only"]), _row("c-only", role="control")]
    _write(tmp_path, "smoke", "noted", rows)
    buf = io.StringIO()
    assert audit.run("smoke", root=tmp_path, out=buf) == 0
    text = buf.getvalue()
    assert "note     noted  c-only  [control-only-failing]" in text and "0 finding(s), 1 note(s)" in text
