"""The synthesis chapter, "What reproduces at small scale", generated from every chapter's ledger.

For each chapter the rows come from the recorded full-scale evidence when the repository holds it
(``evidence/full/<slug>/record.json``), else from this build's ``results/<scale>/<slug>/claims.json``
(:func:`chapter_rows`). Everything else works on the ledger's row dicts (``id``, ``role``, ``kind``,
``verdict``, ``primary``, ``volatile``, ``category``, ``controls``, ``preconditions``, ``gates``) and
is written into the page by code, so the page changes whenever a record or a result changes:

- verdicts of paper claims, per part and over the book, primary and secondary apart;
- the same by kind of check (symbolic, exact, statistical, directional, ratio, timed);
- paper claims not checkable on a CPU, grouped by the category of their reason;
- preconditions and controls that did not behave (chapter, row, the claims they gate);
- rows recorded as fragile in ``expected_verdicts.yaml`` with the flip rate their reason states;
- CPU seconds per chapter against the share of its checked claims decided pass or fail.

Roles of ledger v2 and v3 are both read: ``claim`` and ``hypothesis`` rows are counted apart,
``precondition`` and ``control`` rows gate claims, ``implementation`` rows are not counted here,
and wall-clock rows (role ``timing``, or ``volatile``) are "timed", never counted as claims.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from html import escape
from pathlib import Path

from . import paths
from .claims import NOT_CHECKABLE_CATEGORIES

__all__ = ["KIND_GROUPS", "CATEGORIES", "SYNTHESIS_VERDICTS", "ChapterEvidence", "chapter_rows",
           "check_group", "is_paper_claim", "tally", "not_checkable_by_category", "gate_failures",
           "parse_flip_rate", "fragile_rows", "decisiveness", "collect", "write_figures",
           "synthesis_page", "write_synthesis", "PAGE", "FIGURE_DIR"]

KIND_GROUPS = ("symbolic", "exact", "statistical", "directional", "ratio", "timed")
CATEGORIES = NOT_CHECKABLE_CATEGORIES
#: The verdicts a checked (not timed) paper claim can have, in the order the tables show them.
SYNTHESIS_VERDICTS = ("pass", "fail", "inconclusive", "unsupported", "not_checkable")
VERDICT_LABELS = {"pass": "reproduced", "fail": "not reproduced", "inconclusive": "inconclusive",
                  "unsupported": "unsupported", "not_checkable": "not checkable"}
CATEGORY_LABELS = {"scale": "model or run beyond a CPU budget", "data": "data or benchmark not available offline",
                   "hardware": "needs specific hardware (GPU kernels, robot, real latency)",
                   "human": "needs a human study or judge",
                   "external": "needs something outside the project (paper text, code, proprietary model)",
                   "unspecified": "reason not categorised"}
GATE_ROLES = ("precondition", "control")
PAGE = "synthesis.md"
FIGURE_DIR = "synthesis"


# ---------------------------------------------------------------------------- input
def _evidence_root() -> Path:
    return paths.ROOT / "evidence"


def _record_rows(record) -> list[dict] | None:
    """The claims rows of a record (``claims`` a list of rows, or a claims.json dict holding one)."""
    if not isinstance(record, dict):
        return None
    claims = record.get("claims")
    if isinstance(claims, dict):
        claims = claims.get("claims")
    if not isinstance(claims, list) or not claims:
        return None
    if not all(isinstance(r, dict) and isinstance(r.get("id"), str) and isinstance(r.get("verdict"), str)
               for r in claims):
        return None
    return claims


def chapter_rows(slug: str, scale: str, *, evidence_root: Path | None = None,
                 results_root: Path | None = None) -> tuple[list[dict] | None, str]:
    """A chapter's ledger rows and where they come from.

    The recorded full-scale evidence ``evidence/full/<slug>/record.json`` is preferred; a record that
    cannot be read (missing, not JSON, no rows) falls back to this build's
    ``results/<scale>/<slug>/claims.json``. Returns ``(rows, source)``: ``source`` is
    ``"recorded full scale, <date>"``, ``"this build, <scale>"``, or ``(None, "no result")``.
    """
    record_path = Path(evidence_root or _evidence_root()) / "full" / slug / "record.json"
    try:
        record = json.loads(record_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        record = None
    rows = _record_rows(record)
    if rows is not None:
        date = next((str(record[k])[:10] for k in ("run_date", "recorded_at", "date") if record.get(k)), "")
        return rows, "recorded full scale" + (f", {date}" if date else "")
    claims_path = Path(results_root or paths.results_root()) / scale / slug / "claims.json"
    try:
        rows = _record_rows(json.loads(claims_path.read_text(encoding="utf-8")))
    except (OSError, ValueError):
        rows = None
    if rows is not None:
        return rows, f"this build, {scale}"
    return None, "no result"


def _record_cpu_seconds(slug: str, evidence_root: Path | None) -> float | None:
    """CPU (else wall) seconds of the recorded run: ``times.chapter.cpu_s`` / ``wall_s`` of the record."""
    try:
        record = json.loads((Path(evidence_root or _evidence_root()) / "full" / slug / "record.json")
                            .read_text(encoding="utf-8"))
        times = record.get("times", {}).get("chapter", {})
    except (OSError, ValueError, AttributeError):
        return None
    return _seconds(times.get("cpu_s")) or _seconds(times.get("wall_s"))


def _seconds(value) -> float | None:
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    return x if x > 0 and x == x and x != float("inf") else None


def _build_cpu_seconds(slug: str, scale: str, results_root: Path | None) -> float | None:
    from .book import read_benchmark

    bench = read_benchmark(Path(results_root or paths.results_root()) / scale / "benchmarks" / f"{slug}.tsv") or {}
    return _seconds(bench.get("cpu_time")) or _seconds(bench.get("s"))


# ---------------------------------------------------------------------------- row classification
def is_timed(row: dict) -> bool:
    """A wall-clock row: role ``timing`` (ledger v3) or ``volatile`` (v2)."""
    return row.get("role") == "timing" or bool(row.get("volatile"))


def is_paper_claim(row: dict) -> bool:
    """A statement of the paper counted as a claim: role ``claim`` (the default), not a timed row."""
    return row.get("role", "claim") == "claim" and not is_timed(row)


def check_group(row: dict) -> str:
    """The kind of check a row is counted under: one of :data:`KIND_GROUPS`, or ``not_checkable``."""
    if row.get("verdict") == "not_checkable" or row.get("kind") == "not_checkable":
        return "not_checkable"
    if is_timed(row):
        return "timed"
    kind = row.get("kind")
    return kind if kind in KIND_GROUPS else "other"


def _verdict(row: dict) -> str:
    v = row.get("verdict")
    return v if v in SYNTHESIS_VERDICTS else "other"


def tally(rows: list[dict]) -> dict:
    """Counts over one chapter's (or many chapters') rows.

    Returns a dict with ``claims`` / ``primary`` / ``secondary`` / ``hypotheses`` (``{verdict: n}``,
    timed rows left out), ``by_kind`` (``{kind group: {verdict: n}}`` over paper-claim rows, timed
    rows included as ``timed``), ``roles`` (``{role: n}``), ``has_primary`` and ``timed``.
    """
    zero = {v: 0 for v in (*SYNTHESIS_VERDICTS, "other")}
    out = {"claims": dict(zero), "primary": dict(zero), "secondary": dict(zero), "hypotheses": dict(zero),
           "by_kind": {k: dict(zero) for k in (*KIND_GROUPS, "other")}, "roles": {}, "has_primary": False,
           "timed": 0}
    for row in rows:
        role = row.get("role", "claim")
        out["roles"][role] = out["roles"].get(role, 0) + 1
        v = _verdict(row)
        if is_timed(row):
            out["timed"] += 1
            if role in ("claim", "timing"):
                out["by_kind"]["timed"][v] += 1
            continue
        if role == "hypothesis":
            out["hypotheses"][v] += 1
        if role != "claim":
            continue
        out["claims"][v] += 1
        if row.get("primary") is True:
            out["primary"][v] += 1
            out["has_primary"] = True
        else:
            out["secondary"][v] += 1
        group = check_group(row)
        if group != "not_checkable":
            out["by_kind"][group][v] += 1
    return out


def _add(total: dict, part: dict) -> dict:
    for key in ("claims", "primary", "secondary", "hypotheses"):
        for v, n in part[key].items():
            total[key][v] += n
    for group, counts in part["by_kind"].items():
        for v, n in counts.items():
            total["by_kind"][group][v] += n
    for role, n in part["roles"].items():
        total["roles"][role] = total["roles"].get(role, 0) + n
    total["timed"] += part["timed"]
    return total


def not_checkable_by_category(rows: list[dict]) -> dict[str, list[dict]]:
    """Paper claims not checkable here, grouped by ``category`` (``unspecified`` when absent)."""
    out = {c: [] for c in CATEGORIES}
    for row in rows:
        if row.get("role", "claim") in ("claim", "hypothesis") and row.get("verdict") == "not_checkable":
            cat = row.get("category")
            out[cat if cat in CATEGORIES else "unspecified"].append(row)
    return out


def gate_failures(rows: list[dict]) -> list[dict]:
    """Preconditions and controls whose verdict is not ``pass`` (they did not behave), each with the
    ids of the claims that name it (``controls``, ``preconditions``, ``requires`` or ``gates``)."""
    out = []
    for row in rows:
        if row.get("role") not in GATE_ROLES or row.get("verdict") == "pass" or is_timed(row):
            continue
        gated = []
        for other in rows:
            names = [*(other.get("controls") or []), *(other.get("preconditions") or []),
                     *(other.get("requires") or [])]
            for g in other.get("gates") or []:
                names.append(g.get("id") if isinstance(g, dict) else g)
            if row["id"] in names and other.get("id") != row["id"]:
                gated.append(other["id"])
        out.append({"id": row["id"], "role": row["role"], "verdict": row.get("verdict", ""), "gates": gated})
    return out


_FLIP = re.compile(r"^\s*(?:flips|fails|passes|is inconclusive|inconclusive|unsupported|fail|pass)\s+at\s+"
                   r"(?:(all)\s+(\d+)|(\d+)\s+of\s+(\d+))\b", re.IGNORECASE)


def parse_flip_rate(reason: str) -> tuple[int, int] | None:
    """``(k, K)`` from a fragile reason that opens with "flips at k of K seeds" (or "fails at",
    "passes at", "inconclusive at all K ..."); ``None`` when it states no rate (host-dependent rows)."""
    m = _FLIP.match(reason or "")
    if not m:
        return None
    if m.group(1):
        k = n = int(m.group(2))
    else:
        k, n = int(m.group(3)), int(m.group(4))
    if n <= 0 or k > n:
        return None
    return k, n


def fragile_rows(expected_path: Path | None = None) -> list[dict]:
    """Every row recorded as fragile in ``expected_verdicts.yaml``, every scale, with its flip rate."""
    import yaml

    from .expected import load_expected

    path = Path(expected_path or paths.EXPECTED_VERDICTS)
    scales = list((yaml.safe_load(path.read_text(encoding="utf-8")) or {}).keys())
    out = []
    for scale in scales:
        for slug, claims in sorted(load_expected(scale, path).items()):
            for cid, e in claims.items():
                if e.fragile:
                    rate = parse_flip_rate(e.fragile)
                    out.append({"scale": scale, "slug": slug, "id": cid, "verdict": e.verdict,
                                "reason": e.fragile, "flips": rate[0] if rate else None,
                                "seeds": rate[1] if rate else None})
    return out


def decisiveness(counts: dict) -> tuple[int, int]:
    """``(decided, checked)``: paper claims decided pass or fail, of those checked (pass, fail,
    inconclusive, unsupported; not-checkable and timed rows left out)."""
    c = counts["claims"]
    checked = c["pass"] + c["fail"] + c["inconclusive"] + c["unsupported"]
    return c["pass"] + c["fail"], checked


# ---------------------------------------------------------------------------- collection
@dataclass
class ChapterEvidence:
    slug: str
    title: str
    part: str
    rows: list | None
    source: str
    cpu_seconds: float | None = None
    counts: dict = field(default_factory=dict)

    @property
    def from_record(self) -> bool:
        return self.source.startswith("recorded")


def collect(registry, scale: str, *, evidence_root: Path | None = None,
            results_root: Path | None = None) -> list[ChapterEvidence]:
    """One :class:`ChapterEvidence` per ready chapter of ``registry``, in registry order."""
    out = []
    for entry in registry.chapters:
        if not entry.ready:
            continue
        rows, source = chapter_rows(entry.slug, scale, evidence_root=evidence_root, results_root=results_root)
        if rows is None:
            cpu = None
        elif source.startswith("recorded"):
            cpu = _record_cpu_seconds(entry.slug, evidence_root)
        else:
            cpu = _build_cpu_seconds(entry.slug, scale, results_root)
        out.append(ChapterEvidence(entry.slug, entry.title, entry.part, rows, source, cpu, tally(rows or [])))
    return out


def _empty() -> dict:
    return tally([])


# ---------------------------------------------------------------------------- figures
FIGURES = {
    "verdicts": ("verdicts_by_part.png", "Verdicts of paper claims per part (wall-clock rows left out)."),
    "decisive": ("decisive_vs_cpu.png",
                 "Share of each chapter's checked paper claims decided pass or fail, against the chapter's "
                 "CPU seconds; one point per chapter, filled for a recorded full-scale run, open for this build."),
    "reasons": ("not_checkable_reasons.png",
                "Paper claims not checkable on a CPU, by the category of the reason, stacked by part."),
}
_COLOURS = {"pass": "#2e7d32", "fail": "#c62828", "inconclusive": "#f9a825", "unsupported": "#6a1b9a",
            "not_checkable": "#9e9e9e"}


def write_figures(chapters: list[ChapterEvidence], registry, out_dir: Path) -> dict[str, Path]:
    """Write the page's figures (PNG, Agg) into ``out_dir``; return ``{name: path}``."""
    import matplotlib
    from matplotlib.figure import Figure  # no pyplot: no global figure state, PNG through Agg
    from matplotlib.ticker import MaxNLocator

    from .plotting import save_figure

    out_dir = Path(out_dir)
    written = {}
    parts = [p for p in registry.parts if any(ch.part == p.id for ch in chapters)]
    per_part = {p.id: _empty() for p in parts}
    for ch in chapters:
        _add(per_part[ch.part], ch.counts)

    with matplotlib.rc_context({"figure.dpi": 100, "savefig.dpi": 120, "savefig.bbox": "tight", "font.size": 10}):
        fig = Figure(figsize=(7.5, 0.55 * max(len(parts), 2) + 1.2))
        ax = fig.subplots()
        left = [0] * len(parts)
        for v in SYNTHESIS_VERDICTS:
            values = [per_part[p.id]["claims"][v] for p in parts]
            ax.barh([p.title for p in parts], values, left=left, color=_COLOURS[v], label=VERDICT_LABELS[v])
            left = [a + b for a, b in zip(left, values)]
        ax.invert_yaxis()
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("paper claims")
        ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=len(SYNTHESIS_VERDICTS), frameon=False,
                  fontsize=8)
        written["verdicts"] = save_figure(fig, out_dir / FIGURES["verdicts"][0])

        fig = Figure(figsize=(6.4, 4.0))
        ax = fig.subplots()
        for recorded, marker in ((True, "o"), (False, "o")):
            pts = [(ch.cpu_seconds, decisiveness(ch.counts)) for ch in chapters
                   if ch.rows is not None and ch.from_record is recorded and ch.cpu_seconds]
            pts = [(x, d / n) for x, (d, n) in pts if n]
            if pts:
                ax.scatter([p[0] for p in pts], [p[1] for p in pts], marker=marker, s=36,
                           facecolors="#1565c0" if recorded else "none", edgecolors="#1565c0",
                           label="recorded full scale" if recorded else "this build")
        if ax.collections:
            from matplotlib.ticker import FuncFormatter

            ax.set_xscale("log")
            ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _pos: f"{x:g}"))
            ax.xaxis.set_minor_formatter(FuncFormatter(lambda x, _pos: f"{x:g}" if f"{x:.0e}"[0] in "25" else ""))
        ax.set_ylim(-0.05, 1.05)
        ax.set_xlabel("CPU seconds of the chapter (log scale)")
        ax.set_ylabel("share of checked claims decided")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(frameon=False)
        written["decisive"] = save_figure(fig, out_dir / FIGURES["decisive"][0])

        by_part = {p.id: {c: 0 for c in CATEGORIES} for p in parts}
        for ch in chapters:
            for c, rows in not_checkable_by_category(ch.rows or []).items():
                by_part[ch.part][c] += len(rows)
        fig = Figure(figsize=(7.5, 3.2))
        ax = fig.subplots()
        left = [0] * len(CATEGORIES)
        colours = matplotlib.colormaps["tab10"]
        for i, p in enumerate(parts):
            values = [by_part[p.id][c] for c in CATEGORIES]
            ax.barh(list(CATEGORIES), values, left=left, color=colours(i % 10), label=p.title)
            left = [a + b for a, b in zip(left, values)]
        ax.invert_yaxis()
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("paper claims not checkable")
        ax.legend(loc="center left", bbox_to_anchor=(1.0, 0.5), frameon=False, fontsize=8)
        written["reasons"] = save_figure(fig, out_dir / FIGURES["reasons"][0])
    return written


# ---------------------------------------------------------------------------- page
def _link(ch: ChapterEvidence) -> str:
    return f"[{escape(ch.title)}](chapters/{ch.slug})"


def _pct(k: int, n: int) -> str:
    return f"{100 * k / n:.0f} %" if n else "–"


def _cell(text: str) -> str:
    return escape(str(text)).replace("|", "\\|").replace("\n", " ")


def _verdict_table(label: str, rows: list[tuple[str, dict]]) -> list[str]:
    head = f"| {label} | checked | " + " | ".join(VERDICT_LABELS[v] for v in SYNTHESIS_VERDICTS) + " | decided |"
    lines = [head, "|---" * (len(SYNTHESIS_VERDICTS) + 3) + "|"]
    for name, counts in rows:
        checked = sum(counts[v] for v in ("pass", "fail", "inconclusive", "unsupported"))
        decided = counts["pass"] + counts["fail"]
        lines.append(f"| {name} | {checked} | " + " | ".join(str(counts[v]) for v in SYNTHESIS_VERDICTS)
                     + f" | {_pct(decided, checked)} |")
    return lines


def _figure(name: str, label: str) -> list[str]:
    file, caption = FIGURES[name]
    return [f"```{{figure}} {FIGURE_DIR}/{file}", f":name: {label}", f":alt: {caption}", "", caption, "```", ""]


def synthesis_page(chapters: list[ChapterEvidence], registry, scale: str,
                   fragile: list[dict] | None = None) -> str:
    """The MyST page; every number on it is computed here from ``chapters`` and ``fragile``."""
    fragile = fragile or []
    present = [ch for ch in chapters if ch.rows is not None]
    recorded = [ch for ch in present if ch.from_record]
    missing = [ch for ch in chapters if ch.rows is None]
    parts = [p for p in registry.parts if any(ch.part == p.id for ch in chapters)]
    per_part = {p.id: _empty() for p in parts}
    total = _empty()
    for ch in present:
        _add(per_part[ch.part], ch.counts)
        _add(total, ch.counts)
    decided, checked = decisiveness(total)
    n_claims = sum(total["claims"][v] for v in SYNTHESIS_VERDICTS)
    nc = total["claims"]["not_checkable"]
    with_primary = sum(ch.counts["has_primary"] for ch in present)

    lines = [
        "(synthesis)=",
        "# What reproduces at small scale",
        "",
        "This page is generated by `compendium.synthesis` on every build from the ledger of each chapter: "
        "the recorded full-scale evidence (`evidence/full/<slug>/record.json`) where the repository holds "
        f"one, otherwise this build's results at the `{scale}` scale. The last table names the source of "
        "each chapter's numbers. Only rows whose role is *paper claim* are counted as claims; controls and "
        "preconditions are listed where they did not behave, implementation checks are not counted here, "
        "and wall-clock rows are counted apart as *timed*.",
        "",
        f"Chapters: {len(chapters)}; with recorded full-scale evidence: {len(recorded)}; from this build: "
        f"{len(present) - len(recorded)}; with no result: {len(missing)}.",
        "",
        "## Verdicts of paper claims",
        "",
        f"Over the book: paper claims listed in the ledgers {n_claims}; checked {checked}; not checkable "
        f"here {nc}; wall-clock rows, counted apart, {total['timed']}. Of the checked claims: reproduced "
        f"{total['claims']['pass']}, not reproduced {total['claims']['fail']}, inconclusive "
        f"{total['claims']['inconclusive']}, unsupported (a control or precondition misbehaved) "
        f"{total['claims']['unsupported']}; decided either way {decided} of {checked} ({_pct(decided, checked)}).",
        "",
    ]
    lines += _verdict_table("part", [(escape(p.title), per_part[p.id]["claims"]) for p in parts]
                            + [("**all parts**", total["claims"])])
    lines += ["", *_figure("verdicts", "synthesis-verdicts-fig")]

    lines += ["### Primary and secondary claims", "",
              f"A chapter's primary claim is the paper's headline. {with_primary} of {len(present)} chapters "
              "with a result declare one; in the others every claim counts as secondary here.", ""]
    lines += _verdict_table("claims", [("primary", total["primary"]), ("secondary", total["secondary"])])
    if sum(total["hypotheses"].values()):
        lines += _verdict_table("", [("hypotheses (our own, not the paper's)", total["hypotheses"])])[2:]
    lines.append("")

    lines += ["### By kind of check", "",
              "Paper claims by how they were checked; *timed* rows are wall-clock measurements on the "
              "machine that ran them and are not part of the counts above.", "",
              "| kind | " + " | ".join(VERDICT_LABELS[v] for v in SYNTHESIS_VERDICTS[:4]) + " | total |",
              "|---|---|---|---|---|---|"]
    for group in (*KIND_GROUPS, "other"):
        c = total["by_kind"][group]
        n = sum(c[v] for v in SYNTHESIS_VERDICTS[:4]) + c["other"]
        if group == "other" and not n:
            continue
        lines.append(f"| {group} | " + " | ".join(str(c[v]) for v in SYNTHESIS_VERDICTS[:4]) + f" | {n} |")
    lines.append("")

    # not checkable
    by_cat = {c: [] for c in CATEGORIES}
    for ch in present:
        for c, rows in not_checkable_by_category(ch.rows).items():
            by_cat[c] += [(ch, r) for r in rows]
    n_nc = sum(len(v) for v in by_cat.values())
    lines += ["## Claims not checkable on a CPU", "",
              f"Paper claims declared not checkable, each with its reason: {n_nc}. The reasons are grouped by "
              "the category the chapter gave them.", "",
              "| category | what it means | claims | chapters |", "|---|---|---|---|"]
    for c in CATEGORIES:
        chs = sorted({ch.slug for ch, _ in by_cat[c]})
        lines.append(f"| {c} | {CATEGORY_LABELS[c]} | {len(by_cat[c])} | {len(chs)} |")
    lines += ["", *_figure("reasons", "synthesis-reasons-fig")]
    if n_nc:
        lines += [":::{admonition} Every claim not checkable, with its reason", ":class: dropdown", "",
                  "| chapter | claim | category | reason |", "|---|---|---|---|"]
        for c in CATEGORIES:
            for ch, r in by_cat[c]:
                lines.append(f"| {_link(ch)} | `{_cell(r['id'])}`: {_cell(r.get('statement', ''))} | {c} | "
                             f"{_cell(r.get('note') or r.get('reason') or '')} |")
        lines += [":::", ""]

    # gates
    failures = [(ch, g) for ch in present for g in gate_failures(ch.rows)]
    n_gates = sum(ch.counts["roles"].get(r, 0) for ch in present for r in GATE_ROLES)
    lines += ["## Preconditions and controls that did not behave", "",
              f"Precondition and control rows: {n_gates}; of these, not behaving (verdict other than pass): "
              f"{len(failures)}. A claim that names one of them is reported as unsupported (in a ledger of "
              "version 3 whatever its own verdict, in version 2 when it would otherwise pass).", ""]
    if failures:
        lines += ["| chapter | row | role | verdict | claims it gates |", "|---|---|---|---|---|"]
        for ch, g in failures:
            gated = ", ".join(f"`{_cell(x)}`" for x in g["gates"]) or "none named"
            lines.append(f"| {_link(ch)} | `{_cell(g['id'])}` | {g['role']} | {_cell(g['verdict'])} | {gated} |")
        lines.append("")

    # fragile
    titles = {ch.slug: ch for ch in chapters}
    lines += ["## Fragile rows", "",
              "Rows recorded as fragile in `workflow/config/expected_verdicts.yaml` have a verdict that varies "
              "with the seed or the machine. Their reason states the flip rate of a seed sweep where one was "
              "run: the seeds at which the verdict differs, of the seeds run. The pooled rate is the sum of "
              "those seeds over the sum of seeds run. Smoke rows come from smoke sweeps, full rows from "
              "full-scale sweeps of the results of record.", "",
              "| part | scale | fragile rows | with a stated flip rate | pooled flip rate |", "|---|---|---|---|---|"]
    part_of = {ch.slug: ch.part for ch in chapters}
    for pid, title in [*((p.id, escape(p.title)) for p in parts), (None, "**all parts**")]:
        for sc in sorted({f["scale"] for f in fragile}, key=lambda s: (s != "smoke", s)):
            mine = [f for f in fragile if f["scale"] == sc and (pid is None or part_of.get(f["slug"]) == pid)]
            mine_rated = [f for f in mine if f["seeds"]]
            k, n = sum(f["flips"] for f in mine_rated), sum(f["seeds"] for f in mine_rated)
            rate = f"{k} of {n} ({_pct(k, n)})" if n else "–"
            lines.append(f"| {title} | {sc} | {len(mine)} | {len(mine_rated)} | {rate} |")
    lines.append("")
    if fragile:
        lines += [":::{admonition} Every fragile row", ":class: dropdown", "",
                  "| chapter | row | scale | recorded verdict | flip rate | reason |", "|---|---|---|---|---|---|"]
        for f in fragile:
            ch = titles.get(f["slug"])
            name = _link(ch) if ch else f"`{_cell(f['slug'])}`"
            rate = f"{f['flips']} of {f['seeds']}" if f["seeds"] else "not stated"
            lines.append(f"| {name} | `{_cell(f['id'])}` | {f['scale']} | {_cell(f['verdict'])} | {rate} | "
                         f"{_cell(f['reason'])} |")
        lines += [":::", ""]

    # cost vs decisiveness
    costed = [ch for ch in present if ch.cpu_seconds]
    lines += ["## CPU cost and how decisive each chapter is", "",
              f"Chapters with a result whose CPU seconds are known: {len(costed)} of {len(present)} (the "
              "record's timing, else this build's Snakemake benchmark). A chapter's decided share is the "
              "share of its checked paper claims whose verdict is pass or fail.", "",
              *_figure("decisive", "synthesis-decisive-fig"),
              "## Sources, per chapter", "",
              "| chapter | part | source | CPU s | checked | decided | decided share |",
              "|---|---|---|---|---|---|---|"]
    part_titles = {p.id: p.title for p in registry.parts}
    for ch in chapters:
        d, n = decisiveness(ch.counts)
        cpu = f"{ch.cpu_seconds:.0f}" if ch.cpu_seconds else "–"
        link = _link(ch) if ch.rows is not None else escape(ch.title)
        lines.append(f"| {link} | {escape(part_titles.get(ch.part, ch.part))} | {escape(ch.source)} | {cpu} | "
                     f"{n} | {d} | {_pct(d, n)} |")
    return "\n".join(lines) + "\n"


def write_synthesis(registry, scale: str, put, *, evidence_root: Path | None = None,
                    results_root: Path | None = None, expected_path: Path | None = None) -> list[str]:
    """Write the page and its figures through ``put(relative path, content)``; return the paths.

    ``put`` is :func:`compendium.book.stage_book`'s writer (it writes only changed content).
    """
    import tempfile

    chapters = collect(registry, scale, evidence_root=evidence_root, results_root=results_root)
    try:
        fragile = fragile_rows(expected_path)
    except (OSError, ValueError):
        fragile = []
    written = [PAGE]
    put(PAGE, synthesis_page(chapters, registry, scale, fragile))
    with tempfile.TemporaryDirectory() as tmp:
        for path in write_figures(chapters, registry, Path(tmp)).values():
            rel = f"{FIGURE_DIR}/{path.name}"
            put(rel, path.read_bytes())
            written.append(rel)
    return written
