"""The evidence record as the book shows it: each chapter's results of record, with this build beside.

At book staging (:func:`compendium.book.stage_book`) a chapter with a valid record is rendered from
the record's page (``evidence/full/<slug>/page.ipynb`` with its figures put back): its ledger table,
figures and the glued numbers of its prose are those of the recorded run. A line under the title
gives the record's scale, date, machine and commit, with a **stale** badge and what changed when an
input differs from the working tree. The ledger table gains a column with this build's verdicts
("this build (smoke)") and the rows whose verdicts differ between the two are listed.

A chapter without a record renders as before with a note "no full-scale record"; one whose record
is invalid (schema, a missing figure, a hash) renders as before with the reason; the build goes on.
"""

from __future__ import annotations

import json
import tempfile
from html import escape
from pathlib import Path

import yaml

from .bookview import chapter_view
from .claims import ROLES, render_html, verdict_badge
from .evidence import PAGE, RecordStatus, record_status, restore_images

LEDGER_CLASS = 'class="claims-ledger"'


def record_states(registry, scale: str = "full") -> dict[str, RecordStatus]:
    """``{slug: RecordStatus}`` of every ready chapter (hashes through the cache)."""
    from .provenance import Fingerprinter

    fp = Fingerprinter()
    out = {entry.slug: record_status(entry, registry, fp, scale) for entry in registry.ready}
    fp.save()
    return out


def role_of(row: dict) -> str:
    return row.get("role") or "claim"


def verdict_differences(recorded: list[dict], this_build: list[dict] | None) -> list[tuple[str, str, str]]:
    """``[(id, recorded verdict, this build's verdict)]`` of rows whose verdicts differ (a row
    present on one side only reads ``absent`` on the other)."""
    if this_build is None:
        return []
    here = {c["id"]: c.get("verdict", "") for c in this_build}
    there = {c["id"]: c.get("verdict", "") for c in recorded}
    out = [(cid, v, here.get(cid, "absent")) for cid, v in there.items() if here.get(cid, "absent") != v]
    out += [(cid, "absent", v) for cid, v in here.items() if cid not in there]
    return out


def comparison_html(recorded: list[dict], this_build: list[dict] | None, record_scale: str, build_scale: str) -> str:
    """The recorded ledger table with a column of this build's verdicts."""
    html = render_html(recorded)
    order = {r: i for i, r in enumerate(ROLES)}
    rows = sorted(recorded, key=lambda c: order.get(c.get("role", "claim"), 9))  # render_html's order
    here = {c["id"]: c.get("verdict", "") for c in (this_build or [])}
    html = html.replace("<th>verdict</th>", f"<th>verdict ({escape(record_scale)}, recorded)</th>", 1)
    html = html.replace("</tr></thead>", f"<th>this build ({escape(build_scale)})</th></tr></thead>", 1)
    head, _, body = html.partition("<tbody>")
    parts = body.split("</tr>")
    for i, c in enumerate(rows):
        if i < len(parts) - 1:
            v = here.get(c["id"])
            cell = verdict_badge(v) if v else "<small>no result</small>"
            parts[i] += f"<td>{cell}</td>"
    return head + "<tbody>" + "</tr>".join(parts)


def _machine(record: dict) -> str:
    m = record["machine"]
    isa = ", ".join(m.get("instruction_set") or []) or "none reported"
    return f"{m.get('cpu', 'unknown CPU')}, {m.get('cores')} cores, instruction set {isa}"


def header_markdown(rs: RecordStatus, this_state: str, this_claims: list[dict] | None, build_scale: str) -> str:
    """The admonition under the title: what the page shows and where it comes from."""
    rec = rs.record
    stale = ' <span class="verdict verdict-stale">stale</span>' if rs.state == "stale" else ""
    lines = [":::{note}",
             f"**Results of record**{stale}: a recorded run at scale **{escape(rec['scale'])}** of "
             f"{escape(rec['run_date'][:10])} on {escape(_machine(rec))}, commit `{escape(rec['commit'][:12])}` "
             f"(`evidence/{escape(rec['scale'])}/{rs.slug}/`). The ledger, the figures and the numbers in the text "
             "of this page come from that run.",
             "",
             f"This build ({escape(build_scale)}) is the check: its verdicts are the column "
             f"*this build ({escape(build_scale)})* of the ledger table."]
    if this_claims is None:
        lines += ["", f"This build has no result for this chapter ({escape(this_state.replace('_', ' '))})."]
    else:
        diffs = verdict_differences(rec["claims"]["claims"], this_claims)
        if diffs:
            lines += ["", f"Rows whose verdict differs between the record ({escape(rec['scale'])}) and this build "
                          f"({escape(build_scale)}):", ""]
            lines += [f"- `{escape(cid)}`: {escape(a)} in the record, {escape(b)} in this build" for cid, a, b in diffs]
        else:
            lines += ["", "Every row has the same verdict in the record and in this build."]
    lines.append(":::")
    if rs.state == "stale":
        lines += ["", ":::{warning}",
                  "Stale record: these inputs differ from the working tree since the recorded run:", ""]
        lines += [f"- {escape(r)}" for r in rs.reasons]
        lines += ["", "Refresh it with `make book SCALE=full` then `make record`.", ":::"]
    return "\n".join(lines) + "\n"


def _insert_after_title(nb: dict, cell_id: str, text: str) -> None:
    cell = {"cell_type": "markdown", "id": cell_id, "metadata": {}, "source": text}
    first = next((i for i, c in enumerate(nb["cells"]) if c["cell_type"] == "markdown"), -1)
    nb["cells"].insert(first + 1, cell)


def _dump(nb: dict) -> bytes:
    return (json.dumps(nb, indent=1, ensure_ascii=False) + "\n").encode("utf-8")


def recorded_page(rs: RecordStatus, entry, this_state: str, this_claims: list[dict] | None, build_scale: str) -> bytes:
    """The chapter's page from its record (figures restored, bookview applied), with the check."""
    rec = rs.record
    nb = restore_images(json.loads((rs.folder / PAGE).read_text(encoding="utf-8")), rs.folder)
    with tempfile.TemporaryDirectory(prefix=f"record-{entry.slug}-") as tmp:
        executed = Path(tmp) / f"{entry.slug}.ipynb"
        executed.write_text(json.dumps(nb), encoding="utf-8")
        (Path(tmp) / "params.yaml").write_text(
            yaml.safe_dump({"chapter": entry.slug, "scale": rec["scale"], "parameters": rec["parameters"]}))
        nb = json.loads(chapter_view(executed, entry, rec["scale"]))
    table = comparison_html(rec["claims"]["claims"], this_claims, rec["scale"], build_scale)
    replaced = False
    for cell in nb["cells"]:
        for out in cell.get("outputs", []) or []:
            html = (out.get("data") or {}).get("text/html")
            html = "".join(html) if isinstance(html, list) else html
            if html and LEDGER_CLASS in html:
                out["data"]["text/html"] = table
                replaced = True
    if not replaced:  # a page that does not show its ledger as an output: add the table before Limits
        at = next((i for i, c in enumerate(nb["cells"]) if c["cell_type"] == "markdown"
                   and "".join(c["source"]).lstrip().startswith("## Limits")), len(nb["cells"]))
        nb["cells"].insert(at, {"cell_type": "markdown", "id": "compendium-record-ledger", "metadata": {},
                                "source": "### Ledger of record\n\n" + table + "\n"})
    _insert_after_title(nb, "compendium-record", header_markdown(rs, this_state, this_claims, build_scale))
    return _dump(nb)


def note_markdown(rs: RecordStatus | None) -> str:
    """The note on a chapter rendered from this build only: no record, or an invalid one."""
    if rs is not None and rs.state == "invalid":
        return (":::{error}\nThe full-scale record of this chapter is **invalid**: "
                f"{escape('; '.join(rs.reasons))}. This page shows this build only. Refresh the record with "
                "`make book SCALE=full` then `make record`.\n:::\n")
    return (":::{note}\nNo full-scale record: this page shows this build only. Record one with "
            "`make book SCALE=full` then `make record`.\n:::\n")


def add_note(raw: bytes, rs: RecordStatus | None) -> bytes:
    nb = json.loads(raw)
    _insert_after_title(nb, "compendium-record", note_markdown(rs))
    return _dump(nb)


def add_note_md(text: str, rs: RecordStatus | None) -> str:
    head, sep, rest = text.partition("\n\n")
    return head + "\n\n" + note_markdown(rs) + ("\n" + rest if sep else "")


# ---------------------------------------------------------------------------- dashboard
COUNTED = ("pass", "fail", "inconclusive", "unsupported", "not_checkable")


def role_counts(rows: list[dict]) -> dict[str, dict[str, int]]:
    """``{role: {verdict: n}}`` of ledger rows (a row without a role is a paper claim)."""
    out: dict[str, dict[str, int]] = {}
    for row in rows:
        counts = out.setdefault(role_of(row), {v: 0 for v in COUNTED})
        verdict = row.get("verdict", "")
        counts[verdict] = counts.get(verdict, 0) + 1
    return out


def dashboard_lines(records: dict[str, RecordStatus], titles: dict[str, str], build_scale: str) -> list[str]:
    """The dashboard's headline: the recorded verdicts, and the chapters whose record is not current."""
    shown = [rs for rs in records.values() if rs.record is not None]
    scales = sorted({rs.record["scale"] for rs in shown}) or ["full"]
    rows = [c for rs in shown for c in rs.record["claims"]["claims"]]
    counts = role_counts(rows)
    cl = counts.get("claim", {v: 0 for v in COUNTED})
    n = {s: sum(rs.state == s for rs in records.values()) for s in ("current", "stale", "missing", "invalid")}
    scale = ", ".join(scales)
    lines = [f"## Results of record ({scale} scale)", "",
             f"The recorded {scale}-scale runs of `evidence/`: each chapter's results of record. Paper claims "
             f"of {len(shown)} recorded chapters:", "",
             "| reproduced | not reproduced | inconclusive | unsupported | not checkable |",
             "|---|---|---|---|---|",
             f"| {cl['pass']} | {cl['fail']} | {cl['inconclusive']} | {cl['unsupported']} | {cl['not_checkable']} |",
             "", "| | count |", "|---|---|"]
    for role in sorted(counts, key=lambda r: (r != "control", r)):
        if role == "claim":
            continue
        c = counts[role]
        lines.append(f"| {escape(role)} rows that passed (recorded) | {c.get('pass', 0)} of {sum(c.values())} |")
    lines += [f"| chapters with a current record | {n['current']} |",
              f"| chapters whose record is stale (an input changed since) | {n['stale']} |",
              f"| chapters with no record | {n['missing']} |",
              f"| chapters whose record is invalid | {n['invalid']} |"]
    bad = [rs for rs in records.values() if rs.state != "current"]
    if bad:
        lines += ["", "Records that are not current:", ""]
        for rs in bad:
            title = escape(titles.get(rs.slug, rs.slug))
            why = f": {escape('; '.join(rs.reasons))}" if rs.reasons else ""
            lines.append(f"- [{title}](/chapters/{rs.slug}): {rs.state}{why}")
    lines += ["", f"Everything below is **this build's check** at the `{build_scale}` scale, counted apart "
                  "from the record.", ""]
    return lines
