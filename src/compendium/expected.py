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
