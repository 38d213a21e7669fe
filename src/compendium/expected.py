"""``workflow/config/expected_verdicts.yaml``: the verdicts CI expects, and which ones are fragile.

Each chapter maps claim ids to a verdict, or to a mapping for a claim whose verdict is known to
vary (seen to flip in a seed sweep, or with its interval within reach of the threshold)::

    smoke:
      expert_sample:
        bon-majority: inconclusive
        frontier: {verdict: fail, fragile: "flips at 1 of 5 seeds (stability sweep)"}

CI compares only the decisive entries: plain verdicts. A fragile entry is published (the
dashboard shows it with its reason) but not compared. Wall-clock (volatile) rows are not listed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from . import paths
from .claims import VERDICTS


@dataclass(frozen=True)
class Expected:
    verdict: str
    fragile: str = ""  # the reason and flip rate; empty for a decisive entry


def _parse(slug: str, claim: str, value) -> Expected:
    if isinstance(value, str):
        if value not in VERDICTS:
            raise ValueError(f"expected_verdicts.yaml: {slug}/{claim}: unknown verdict {value!r}; allowed: {VERDICTS}")
        return Expected(value)
    if isinstance(value, dict) and set(value) <= {"verdict", "fragile"} and "verdict" in value:
        if value["verdict"] not in VERDICTS:
            raise ValueError(f"expected_verdicts.yaml: {slug}/{claim}: unknown verdict {value['verdict']!r}")
        reason = value.get("fragile")
        if not isinstance(reason, str) or not reason.strip():
            raise ValueError(f"expected_verdicts.yaml: {slug}/{claim}: a fragile entry says why (fragile: '...')")
        return Expected(value["verdict"], reason.strip())
    raise ValueError(f"expected_verdicts.yaml: {slug}/{claim}: expected a verdict or "
                     f"{{verdict: ..., fragile: '...'}}, got {value!r}")


def load_expected(scale: str, path: str | Path | None = None) -> dict[str, dict[str, Expected]]:
    """``{slug: {claim_id: Expected}}`` for ``scale`` (empty when the scale is not recorded)."""
    path = Path(path or paths.EXPECTED_VERDICTS)
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    out = {}
    for slug, claims in (data.get(scale) or {}).items():
        out[slug] = {cid: _parse(slug, cid, v) for cid, v in (claims or {}).items()}
    return out


def compare_verdicts(expected: dict[str, dict[str, Expected]], actual: dict[str, list[dict]]) -> list[str]:
    """Differences between recorded and computed verdicts, fragile entries and volatile rows left out.

    ``actual`` maps a slug to its ``claims.json`` rows. Returns one line per problem: a decisive
    verdict that changed, a claim missing from either side.
    """
    problems = []
    for slug in sorted(set(expected) | set(actual)):
        if slug not in actual:
            problems.append(f"{slug}: recorded but not run")
            continue
        if slug not in expected:
            problems.append(f"{slug}: ran but has no expected verdicts")
            continue
        rows = {c["id"]: c for c in actual[slug] if not c.get("volatile")}
        exp = expected[slug]
        for cid in sorted(set(rows) | set(exp)):
            if cid not in exp:
                problems.append(f"{slug}/{cid}: new claim {rows[cid]['verdict']!r} not recorded")
            elif cid not in rows:
                problems.append(f"{slug}/{cid}: recorded but no longer checked")
            elif not exp[cid].fragile and rows[cid]["verdict"] != exp[cid].verdict:
                problems.append(f"{slug}/{cid}: expected {exp[cid].verdict}, got {rows[cid]['verdict']}")
    return problems


def fragile_differences(expected: dict[str, dict[str, Expected]], actual: dict[str, list[dict]]) -> list[str]:
    """The fragile entries whose computed verdict differs from the recorded one, one line each
    (published, never a failure: their reason says why they vary)."""
    out = []
    for slug in sorted(set(expected) & set(actual)):
        rows = {c["id"]: c for c in actual[slug] if not c.get("volatile")}
        for cid, e in expected[slug].items():
            if e.fragile and cid in rows and rows[cid]["verdict"] != e.verdict:
                out.append(f"{slug}/{cid}: recorded {e.verdict}, got {rows[cid]['verdict']} (fragile: {e.fragile})")
    return out


def fragile_claims(scale: str) -> dict[tuple[str, str], str]:
    """``{(slug, claim_id): reason}`` of the entries recorded as fragile."""
    return {(slug, cid): e.fragile for slug, claims in load_expected(scale).items()
            for cid, e in claims.items() if e.fragile}


def updated_block(old: dict, rows: list[dict], flips: dict[str, str] | None = None) -> tuple[dict, list[str]]:
    """The entries of one chapter after a new record (or run): ``(entries, changes)``.

    ``old`` is the chapter's current entries as written in the file (a verdict or
    ``{verdict, fragile}``), ``rows`` the new ``claims.json`` rows, ``flips`` the reasons of the rows
    that flipped in a seed sweep of this same run. A row keeps its fragile reason when it had one
    (its verdict is updated); a row with a flip becomes fragile with the sweep's reason; every other
    row gets its plain verdict. Volatile rows are left out. ``changes`` says what moved, one line each.
    """
    flips = flips or {}
    out, changes = {}, []
    for row in rows:
        if row.get("volatile"):
            continue
        cid, verdict = row["id"], row["verdict"]
        before = old.get(cid)
        was = before["verdict"] if isinstance(before, dict) else before
        reason = flips.get(cid) or (before.get("fragile") if isinstance(before, dict) else None)
        out[cid] = {"verdict": verdict, "fragile": reason} if reason else verdict
        if before is None:
            changes.append(f"{cid}: new, {verdict}" + (" (fragile)" if reason else ""))
        elif was != verdict:
            changes.append(f"{cid}: {was} -> {verdict}" + (" (fragile)" if reason else ""))
        if cid in flips and not (isinstance(before, dict) and before.get("fragile") == flips[cid]):
            changes.append(f"{cid}: marked fragile: {flips[cid]}")
    changes += [f"{cid}: dropped (no longer checked)" for cid in old if cid not in out]
    return out, changes


def sweep_flips(sweep: dict, scale: str, date: str) -> dict[str, str]:
    """``{claim_id: reason}`` for the rows of one chapter's seed sweep (``stability.aggregate``'s entry
    for it) whose verdict differs at some further seed from the chapter's own run."""
    out = {}
    for cid, row in sweep["claims"].items():
        flipped = {s: v for s, v in row["verdicts"].items() if v != row["recorded"]}
        if not flipped:
            continue
        by: dict[str, list[str]] = {}
        for s, v in flipped.items():
            by.setdefault(v, []).append(s)
        seen = ", ".join(str(s) for s in sweep["seeds"])
        desc = "; ".join(f"{v} at seed{'s' if len(ss) > 1 else ''} {', '.join(ss)}" for v, ss in by.items())
        out[cid] = (f"flips at {len(flipped)} of {row['total']} further seeds ({scale} seed sweep {date}, "
                    f"seeds {seen} against the recorded seed {sweep['recorded_seed']}): {desc}")
    return out


class _Dumper(yaml.SafeDumper):
    """Writes a fragile entry on one line, ``id: {verdict: V, fragile: "why"}``, as in the file."""


def _represent_dict(dumper, data):
    if set(data) != {"verdict", "fragile"}:
        return dumper.represent_mapping("tag:yaml.org,2002:map", data.items())
    pairs = [(dumper.represent_str("verdict"), dumper.represent_str(data["verdict"])),
             (dumper.represent_str("fragile"), dumper.represent_scalar("tag:yaml.org,2002:str", data["fragile"], style='"'))]
    return yaml.MappingNode("tag:yaml.org,2002:map", pairs, flow_style=True)


_Dumper.add_representer(dict, _represent_dict)


def write_block(scale: str, chapters: dict[str, dict], path: str | Path | None = None) -> None:
    """Replace the entries of ``chapters`` in the ``scale:`` block of the file, keeping its other
    chapters, the other blocks and the comments above them. The block is rewritten in order of the
    file (new chapters last), one entry per line."""
    path = Path(path or paths.EXPECTED_VERDICTS)
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if line.rstrip() == f"{scale}:"), None)
    if start is None:
        lines += ["\n" if lines and not lines[-1].endswith("\n") else "", f"{scale}:\n"]
        start, end = len(lines) - 1, len(lines)
    else:
        end = next((i for i in range(start + 1, len(lines))
                    if lines[i].strip() and not lines[i].startswith((" ", "#"))), len(lines))
    block = (yaml.safe_load("".join(lines[start:end])) or {}).get(scale) or {}
    block.update(chapters)
    text = yaml.dump({scale: block}, Dumper=_Dumper, sort_keys=False, width=10000, allow_unicode=True)
    tmp = path.with_suffix(".yaml.tmp")
    tmp.write_text("".join(lines[:start]) + text + "".join(lines[end:]), encoding="utf-8")
    try:
        load_expected(scale, tmp)  # refuse to write a file that does not parse
    except Exception:
        tmp.unlink()
        raise
    tmp.replace(path)
