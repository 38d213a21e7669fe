"""``compendium audit``: the ledger-v3 rules checked over every chapter's ``claims.json``.

The ledger refuses most mistakes at record time (see :mod:`compendium.claims`); the audit checks
the rules that concern a whole ledger, on the files a build wrote (``results/<scale>/*/claims.json``):

=========================  ==========================================================================
rule                       finding
=========================  ==========================================================================
``claim-ungated``          a claim (not ``not_checkable``) with no control and no precondition
``control-unlinked``       a control that no claim or hypothesis names
``duplicate-id``           two rows with one id
``primary-missing``        no row is ``primary``
``primary-doubled``        more than one row is ``primary``
``claim-by-construction``  a ``claim`` row declared ``by_construction`` (it is ``implementation``)
=========================  ==========================================================================

Notes (printed, never failing the audit):

=========================  ==========================================================================
``control-only-failing``   a control named only by claims whose own verdict is ``fail``
=========================  ==========================================================================

A control named only by failing claims was decorative under ledger v2 (it gated passes only). Under
v3 it gates the fail as well (a fail whose control misbehaved is ``unsupported``), so it is reported
for a reader to look at, not counted: it depends on this run's verdicts, and a chapter whose headline
honestly fails would otherwise have to drop or relink a genuine power control to pass the audit.

Chapters not yet migrated are listed, each with a reason, in
``workflow/config/audit_pending.yaml``; with ``--allow-pending`` their findings are reported as
pending and do not fail the audit (the list shrinks as chapters migrate; an entry whose chapter has
no finding left is reported so it can be removed).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from . import paths

__all__ = ["RULES", "NOTES", "Finding", "audit_rows", "audit_file", "audit_results", "load_pending", "PENDING_FILE"]

RULES = ("claim-ungated", "control-unlinked", "duplicate-id", "primary-missing",
         "primary-doubled", "claim-by-construction", "unreadable")
NOTES = ("control-only-failing",)  # reported, never counted as findings
PENDING_FILE = paths.CONFIG / "audit_pending.yaml"


@dataclass(frozen=True)
class Finding:
    chapter: str
    row: str  # the row id, or "-" for a finding about the whole ledger
    rule: str
    message: str

    def __str__(self) -> str:
        return f"{self.chapter}  {self.row}  [{self.rule}]  {self.message}"


def audit_rows(chapter: str, rows: list[dict]) -> list[Finding]:
    """Findings for one chapter's ``claims.json`` rows."""
    out: list[Finding] = []
    seen: dict[str, int] = {}
    for r in rows:
        seen[r["id"]] = seen.get(r["id"], 0) + 1
    for rid, n in seen.items():
        if n > 1:
            out.append(Finding(chapter, rid, "duplicate-id", f"{n} rows have the id {rid!r}"))
    primaries = [r["id"] for r in rows if r.get("primary")]
    if not primaries:
        out.append(Finding(chapter, "-", "primary-missing", "no row is declared primary=True (the paper's headline)"))
    elif len(primaries) > 1:
        out.append(Finding(chapter, ",".join(primaries), "primary-doubled",
                           f"{len(primaries)} rows are primary: {', '.join(primaries)}"))
    named_by: dict[str, list[dict]] = {}
    for r in rows:
        for cid in r.get("controls") or ():
            named_by.setdefault(cid, []).append(r)
    for r in rows:
        role = r.get("role", "claim")
        if role == "claim" and r.get("by_construction"):
            out.append(Finding(chapter, r["id"], "claim-by-construction",
                               "a row true by construction is role='implementation', not a claim"))
        if role == "claim" and r.get("verdict") != "not_checkable" and not r.get("volatile") \
                and not r.get("controls") and not r.get("preconditions"):
            out.append(Finding(chapter, r["id"], "claim-ungated", "a claim with no control and no precondition"))
        if role == "control":
            users = named_by.get(r["id"], [])
            if not users:
                out.append(Finding(chapter, r["id"], "control-unlinked", "a control that no claim names"))
            elif all(u.get("computed_verdict", u.get("verdict")) == "fail" for u in users):
                out.append(Finding(chapter, r["id"], "control-only-failing",
                                   "a control named only by failing claims (it gates those fails): "
                                   + ", ".join(u["id"] for u in users)))
    return out


def audit_file(path: Path, chapter: str | None = None) -> list[Finding]:
    """Findings for one ``claims.json`` (an unreadable file is itself a finding)."""
    path = Path(path)
    chapter = chapter or path.parent.name
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        rows = data["claims"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        return [Finding(chapter, "-", "unreadable", f"{path}: {err}")]
    return audit_rows(data.get("chapter", chapter), rows)


def audit_results(scale: str, root: Path | None = None) -> tuple[dict[str, list[Finding]], list[str]]:
    """``({chapter: findings}, [chapters with a claims.json])`` over ``<root>/<scale>/*/claims.json``."""
    base = Path(root) if root is not None else paths.results_root()
    files = sorted((base / scale).glob("*/claims.json"))
    return {f.parent.name: audit_file(f) for f in files}, [f.parent.name for f in files]


def load_pending(path: Path | None = None) -> dict[str, str]:
    """``{chapter: reason}`` from ``audit_pending.yaml`` (``{}`` when there is no file)."""
    import yaml

    path = Path(path) if path is not None else PENDING_FILE
    if not path.is_file():
        return {}
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    pending = data.get("pending", data) if isinstance(data, dict) else None
    if not isinstance(pending, dict):
        raise ValueError(f"{path}: expected a mapping 'pending: {{chapter: reason}}'")
    for slug, reason in pending.items():
        if not isinstance(reason, str) or not reason.strip():
            raise ValueError(f"{path}: chapter {slug!r} needs a reason (a non-empty string)")
    return {str(k): v for k, v in pending.items()}


def run(scale: str, *, allow_pending: bool = False, root: Path | None = None, pending_file: Path | None = None,
        out=None) -> int:
    """Print the findings; return 0 when none counts (1 otherwise, 2 when there is no ledger at all)."""
    import sys

    out = out or sys.stdout
    findings, chapters = audit_results(scale, root)
    if not chapters:
        base = Path(root) if root is not None else paths.results_root()
        print(f"no claims.json under {base / scale}: build the chapters first", file=sys.stderr)
        return 2
    pending = load_pending(pending_file) if allow_pending else {}
    counted = held = notes = 0
    for chapter in chapters:
        for f in findings[chapter]:
            if f.rule in NOTES:
                notes += 1
                print(f"note     {f}", file=out)
            elif chapter in pending:
                held += 1
                print(f"pending  {f}", file=out)
            else:
                counted += 1
                print(f"FINDING  {f}", file=out)
    for chapter in sorted(pending):
        if chapter in findings and not [f for f in findings[chapter] if f.rule not in NOTES]:
            print(f"clean    {chapter}: no finding left; remove it from {PENDING_FILE.name}", file=out)
    print(f"{len(chapters)} ledger(s) audited ({scale}): {counted} finding(s), {notes} note(s)"
          + (f", {held} pending in {len([c for c in chapters if c in pending and findings[c]])} chapter(s) "
             f"listed in {PENDING_FILE.name}" if allow_pending else ""), file=out)
    return 1 if counted else 0
