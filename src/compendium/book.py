"""Assemble and build the Jupyter Book from the registry and the results of a scale.

The book's sources are *staged* into ``results/<scale>/book/src``: the hand-written pages of
``book/`` (config, introduction, bibliography, styles) plus generated pages (table of contents,
part pages, verification dashboard, runtime page) and the executed chapter notebooks. A file is
rewritten only when its content changed, so Sphinx's incremental build re-reads only what
changed. Then ``jupyter-book build -W -n --keep-going`` builds HTML into
``results/<scale>/book/_build/html``.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from html import escape
from pathlib import Path

import yaml

from . import paths
from .bookview import chapter_view
from .claims import ROLES, VERDICTS, primary_row, summarize, verdict_badge
from .registry import ChapterEntry, Registry


class BookBuildFailed(RuntimeError):
    """jupyter-book reported an error or a warning (warnings are errors here)."""


# ---------------------------------------------------------------------------- chapter states
@dataclass
class ChapterState:
    entry: ChapterEntry
    state: str  # finished | failed | failed_last_good | not_run | planned
    claims: list = field(default_factory=list)
    failure: dict | None = None
    benchmark: dict | None = None
    stale: list = field(default_factory=list)  # what changed since the shown claims were computed
    last_good: list = field(default_factory=list)  # claims of the last good run (failed_last_good)

    def counts(self, role: str = "claim") -> dict[str, int]:
        """Verdict counts of one role (paper claims by default: only they count as reproduced)."""
        return summarize(self.claims)[role] if self.claims else {v: 0 for v in VERDICTS}


def read_benchmark(path: Path) -> dict | None:
    """Snakemake's benchmark TSV (s, max_rss in MB, ...) as a dict of floats."""
    if not path.is_file():
        return None
    with path.open(encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh, delimiter="\t"))
    if not rows:
        return None
    out = {}
    for key, value in rows[-1].items():
        try:
            out[key] = float(value)
        except (TypeError, ValueError):
            out[key] = None
    return out


def read_failure(path: Path, slug: str, scale: str) -> dict:
    """A chapter's ``FAILED.json``; an unreadable or corrupt one (a full disk) still reads as a failure."""
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(record, dict) and "chapter" in record:
            return record
        problem = "not a failure record"
    except (OSError, ValueError) as err:
        problem = f"{type(err).__name__}: {err}"
    return {"chapter": slug, "scale": scale, "error": "unreadable failure record", "message": f"{path.name}: {problem}"}


def _verified_claims(folder: Path, slug: str, hashes) -> tuple[list | None, str | None]:
    """A result folder's claims when its outputs are what was written, else ``(None, why)``."""
    from .provenance import read_record, verify_outputs

    problem = verify_outputs(folder, read_record(folder), hashes)
    if problem is None:
        try:
            return json.loads((folder / "claims.json").read_text(encoding="utf-8"))["claims"], None
        except (OSError, ValueError, KeyError, TypeError) as err:
            problem = f"{folder.name}/claims.json cannot be read ({type(err).__name__})"
    return None, problem


def chapter_states(registry: Registry, scale: str, parameters: dict | None = None,
                   mark_stale: bool = True) -> list[ChapterState]:
    """Each chapter's state; ``parameters`` (slug -> effective values) decides staleness (not
    computed with ``mark_stale=False``: the claims table has no column for it).

    Every result shown is verified first (the sha256 its provenance recorded for each output): one
    that is not what was written is never shown or counted; the chapter reads as failed ("invalid
    output", naming the file), with its last good result if that one verifies.
    """
    from .fingerprint import HashCache

    hashes = HashCache()
    root = paths.results_root() / scale
    states = []
    for entry in registry.chapters:
        if not entry.ready:
            states.append(ChapterState(entry, "planned"))
            continue
        out = root / entry.slug
        bench = read_benchmark(root / "benchmarks" / f"{entry.slug}.tsv")
        failed = out / "FAILED.json"
        claims = out / "claims.json"
        notebook = out / f"{entry.slug}.ipynb"
        if failed.is_file():
            states.append(ChapterState(entry, "failed", failure=read_failure(failed, entry.slug, scale), benchmark=bench))
            _attach_last_good(states[-1], out, hashes)
        elif claims.is_file() and notebook.is_file():
            rows, problem = _verified_claims(out, entry.slug, hashes)
            if problem is None:
                states.append(ChapterState(entry, "finished", claims=rows, benchmark=bench))
            else:
                failure = {"chapter": entry.slug, "scale": scale, "error": "invalid output", "message": problem}
                states.append(ChapterState(entry, "failed", failure=failure, benchmark=bench))
                _attach_last_good(states[-1], out, hashes)
        else:
            states.append(ChapterState(entry, "not_run"))
    hashes.save()
    if mark_stale:
        _mark_stale(states, registry, scale, parameters)
    return states


# ---------------------------------------------------------------------------- provenance display
def _attach_last_good(st: ChapterState, out: Path, hashes=None) -> None:
    """A failed chapter with a kept good result (one that verifies) becomes ``failed_last_good``."""
    from .provenance import LAST_GOOD

    good = out / LAST_GOOD
    if (good / "claims.json").is_file() and (good / f"{st.entry.slug}.ipynb").is_file():
        rows, problem = _verified_claims(good, st.entry.slug, hashes)
        if problem is None:
            st.state = "failed_last_good"
            st.last_good = rows


def _mark_stale(states: list[ChapterState], registry: Registry, scale: str, parameters: dict | None) -> None:
    """Fill ``stale`` with what changed since the shown claims were computed (provenance hashes)."""
    from .provenance import chapter_status

    shown = [st for st in states if st.state in ("finished", "failed_last_good")]
    if not shown:
        return
    from .provenance import Fingerprinter

    if parameters is None:
        parameters = registry.resolve_all(scale, {})
    fp = Fingerprinter()
    for st in shown:
        st.stale = chapter_status(st.entry, scale, parameters[st.entry.slug], fp).reasons
    fp.save()


def stale_badge(st: ChapterState) -> str:
    if not st.stale:
        return ""
    why = escape("; ".join(st.stale), quote=True)
    return f' <span class="verdict verdict-stale" title="{why}">stale</span>'


def provenance_section(states: list[ChapterState]) -> list[str]:
    """Dashboard lines: current / stale / failed-with-last-good / failed-without-result counts."""
    ready = [st for st in states if st.state != "planned"]
    n = {
        "current": sum(st.state == "finished" and not st.stale for st in ready),
        "stale": sum(st.state == "finished" and bool(st.stale) for st in ready),
        "last_good": sum(st.state == "failed_last_good" for st in ready),
        "no_result": sum(st.state == "failed" for st in ready),
    }
    lines = ["", "## Provenance", "",
             "Each chapter's `provenance.json` records the content hashes of what produced its claims "
             "(notebook, imported library files, parameters, assets, data manifest, lock file); claims "
             "whose inputs changed since they were computed are marked stale (`compendium status` "
             "lists the same).", "",
             "| | count |", "|---|---|",
             f"| chapters current | {n['current']} |",
             f"| chapters stale (inputs changed since their claims were computed) | {n['stale']} |",
             f"| chapters failed, showing last good result | {n['last_good']} |",
             f"| chapters failed, no result | {n['no_result']} |"]
    stale = [st for st in ready if st.stale]
    if stale:
        lines += ["", "Stale chapters:", ""]
        lines += [f"- {_chapter_link(st)}: {escape('; '.join(st.stale))}" for st in stale]
    kept = [st for st in ready if st.state == "failed_last_good"]
    if kept:
        lines += ["", "### Last good claims of chapters whose rerun failed", "",
                  "| chapter | claim | measured | criterion | verdict |", "|---|---|---|---|---|"]
        for st in kept:
            for c in st.last_good:
                lines.append(f"| {_chapter_link(st)} | `{c['id']}` | {_measured(c['measured'])} | "
                             f"{escape(c['criterion'] or '')} | {verdict_badge(c['verdict'])}{stale_badge(st)} |")
    return lines


def annotate_notebook(raw: bytes, st: ChapterState) -> bytes:
    """The staged notebook with a last-good / stale admonition after its title cell."""
    if not st.stale and st.state != "failed_last_good":
        return raw
    from .execute import describe_failure

    lines = []
    if st.state == "failed_last_good":
        rec = st.failure or {}
        lines += [":::{error}",
                  f"The last rerun of this chapter failed: {escape(describe_failure(rec))}.",
                  "What follows is the **last good result** (kept in "
                  f"`results/<scale>/{st.entry.slug}/last_good/`); its claims are stale and not counted.",
                  ":::"]
        if rec.get("traceback"):
            lines += ["", "```text", rec["traceback"], "```"]
    if st.stale:
        lines += ["", ":::{warning}", "Stale: the inputs of these claims changed since they were computed:", ""]
        lines += [f"- {escape(item)}" for item in st.stale]
        lines += ["", "Rerun the chapter (`compendium build`) to bring them up to date.", ":::"]
    nb = json.loads(raw)
    cell = {"cell_type": "markdown", "id": "compendium-provenance", "metadata": {},
            "source": "\n".join(lines).strip() + "\n"}
    first = next((i for i, c in enumerate(nb["cells"]) if c["cell_type"] == "markdown"), -1)
    nb["cells"].insert(first + 1, cell)
    return (json.dumps(nb, indent=1, ensure_ascii=False) + "\n").encode("utf-8")


def claims_frame(registry: Registry, scale: str):
    """One row per claim (and one per failed, not-run or planned chapter) for ``claims.csv``."""
    import pandas as pd

    rows = []
    for st in chapter_states(registry, scale, mark_stale=False):
        base = {"part": st.entry.part, "chapter": st.entry.slug, "title": st.entry.title, "chapter_state": st.state}
        if not st.claims:
            verdict = {"failed": "failed_to_run", "failed_last_good": "failed_to_run", "planned": "planned",
                       "not_run": "not_run"}[st.state]
            rows.append({**base, "claim": "", "role": "", "kind": "", "statement": "", "criterion": "",
                         "min_effect": "", "measured": "", "low": "", "high": "", "unit": "", "n_units": "",
                         "paper_value": "", "verdict": verdict, "controls": ""})
        for c in st.claims:
            m = c["measured"]
            est = isinstance(m, dict) and {"point", "low", "high"} <= set(m)
            rows.append({**base, "claim": c["id"], "role": c.get("role", "claim"), "kind": c["kind"],
                         "statement": c["statement"], "criterion": c["criterion"],
                         "min_effect": c.get("min_effect"), "measured": m["point"] if est else m,
                         "low": m["low"] if est else "", "high": m["high"] if est else "",
                         "unit": m.get("unit", "") if est else "", "n_units": m.get("n", "") if est else "",
                         "paper_value": c["paper_value"], "verdict": c["verdict"],
                         "controls": " ".join(c.get("controls", []))})
    return pd.DataFrame(rows)


# ---------------------------------------------------------------------------- page writers
def _write(path: Path, text: str | bytes) -> bool:
    """Write only when the content changed (keeps Sphinx's incremental build incremental)."""
    data = text.encode("utf-8") if isinstance(text, str) else text
    if path.is_file() and path.read_bytes() == data:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return True


def _num(value) -> str:
    if value is None or value == "":
        return ""
    if isinstance(value, float):
        return f"{value:.4g}"
    return escape(str(value))


def code_span(text: str) -> str:
    """``text`` as a Markdown code span, shown literally: no HTML escaping (a code span would show
    ``&#x27;`` as typed), a fence longer than any run of backticks inside, whitespace runs as one space."""
    import re

    text = " ".join(str(text).split())
    fence = "`" * (max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _chapter_link(st: ChapterState) -> str:
    if st.state == "planned":
        return escape(st.entry.title)
    return f"[{escape(st.entry.title)}](/chapters/{st.entry.slug})"


def _state_badge(st: ChapterState) -> str:
    """The chapter's badge: its primary claim's verdict (ledger v3); for a ledger without a primary, the
    worst verdict of its paper claims (controls and implementation checks aside)."""
    if st.state == "finished":
        primary = primary_row(st.claims or [])
        if primary is not None:
            return verdict_badge(primary["verdict"]) + stale_badge(st)
        c = st.counts()
        for verdict in ("fail", "unsupported", "inconclusive", "pass"):
            if c[verdict]:
                return verdict_badge(verdict) + stale_badge(st)
        return verdict_badge("not_checkable") + stale_badge(st)
    return verdict_badge({"failed": "failed_to_run", "failed_last_good": "failed_to_run", "planned": "planned",
                          "not_run": "not_run"}[st.state]) + stale_badge(st)


def toc(registry: Registry) -> dict:
    parts = [{"caption": "Verification",
              "chapters": [{"file": "dashboard"}, {"file": "stability"}, {"file": "runtime"}]}]
    for part in registry.parts:
        chapters = [{"file": f"parts/{part.id}"}]
        chapters += [{"file": f"chapters/{c.slug}"} for c in registry.chapters if c.part == part.id and c.ready]
        parts.append({"caption": part.title, "chapters": chapters})
    parts.append({"caption": "Synthesis", "chapters": [{"file": "synthesis"}]})
    parts.append({"caption": "Back matter", "chapters": [{"file": "bibliography"}]})
    return {"format": "jb-book", "root": "intro", "parts": parts}


def part_page(registry: Registry, part_id: str, states: list[ChapterState]) -> str:
    part = registry.part(part_id)
    lines = [f"# {part.title}", "", part.summary, "",
             "| chapter | what it checks | status | paper claims reproduced |", "|---|---|---|---|"]
    for st in states:
        if st.entry.part != part_id:
            continue
        counts = st.counts()
        checked = sum(counts[v] for v in ("pass", "fail", "inconclusive", "unsupported"))
        passed = f"{counts['pass']} / {checked}" if st.state == "finished" else ""
        lines.append(f"| {_chapter_link(st)} | {escape(st.entry.summary)} | {_state_badge(st)} | {passed} |")
    planned = [st for st in states if st.entry.part == part_id and st.state == "planned"]
    if planned:
        lines += ["", f"{len(planned)} chapter(s) of this part are planned: registered, not yet written."]
    return "\n".join(lines) + "\n"


def dashboard_page(states: list[ChapterState], scale: str, fragile: dict | None = None,
                   stability: dict | None = None, records: dict | None = None) -> str:
    """The verification dashboard: paper claims first, controls and implementation checks apart.

    ``fragile`` maps ``(slug, claim_id)`` to the reason recorded in expected_verdicts.yaml;
    ``stability`` maps ``(slug, claim_id)`` to a ``"k/K seeds agree"`` text from the seed sweep.
    """
    fragile, stability = fragile or {}, stability or {}
    totals = {role: {v: 0 for v in VERDICTS} for role in ROLES}
    for st in states:
        for role in ROLES:
            for k, v in st.counts(role).items():
                totals[role][k] += v
    by_state = {s: sum(st.state == s for st in states)
                for s in ("finished", "failed", "failed_last_good", "not_run", "planned")}
    cl, co, im = totals["claim"], totals["control"], totals["implementation"]
    lines = [
        "# Verification dashboard",
        "",
        f"Every check of every chapter, with the verdict the ledger computed from the measured value "
        f"and the declared criterion, at the `{scale}` scale. Regenerated on every build from "
        f"`results/{scale}/*/claims.json` (also in `results/{scale}/claims.csv`).",
        "",
        *_record_headline(states, scale, records),
        "Only **paper claims** count as reproduced. A *control* is a variant that must fail (or pass) "
        "the same criterion, so it shows that the check has power; a claim whose control misbehaved is "
        "*unsupported*. An *implementation* check tests our own code (identities, kernel = reference, "
        "anything true by construction) and is never counted as a reproduced claim. A measurement with "
        "an interval is *inconclusive* when the interval straddles the criterion.",
        "",
        "What reproduces per part and across the book, from the recorded evidence where it exists: {ref}`synthesis`.",
        "",
        f"## Paper claims (this build, `{scale}`)",
        "",
        *([f"```{{figure}} {DASHBOARD_FIGURE}", ":name: dashboard-chapters", f":alt: {DASHBOARD_FIGURE_CAPTION}", "",
           DASHBOARD_FIGURE_CAPTION, "```", ""] if any(st.claims for st in states) else []),
        "| reproduced | not reproduced | inconclusive | unsupported | not checkable |",
        "|---|---|---|---|---|",
        f"| {cl['pass']} | {cl['fail']} | {cl['inconclusive']} | {cl['unsupported']} | {cl['not_checkable']} |",
        "",
        "| | count |",
        "|---|---|",
        f"| preconditions that held (the trained model beat its trivial baseline) | "
        f"{totals['precondition']['pass']} of {sum(totals['precondition'].values())} |",
        f"| controls that behaved | {co['pass']} of {sum(co.values())} |",
        f"| implementation checks passed | {im['pass']} of {sum(im.values())} |",
        f"| claims recorded as fragile (verdict varies with the seed or the machine) | {len(fragile)} |",
        f"| chapters finished | {by_state['finished']} |",
        f"| chapters failed, showing the last good result | {by_state['failed_last_good']} |",
        f"| chapters failed, no result | {by_state['failed']} |",
        f"| chapters not run | {by_state['not_run']} |",
        f"| chapters planned | {by_state['planned']} |",
        "",
        "## Chapters",
        "",
        "The badge is the chapter's **primary claim** (the paper's headline); the other columns count its "
        "paper claims, then its preconditions, controls and implementation checks apart (passed / rows).",
        "",
        "| chapter | part | primary claim | reproduced | not reproduced | unsupported | inconclusive | not checkable "
        "| preconditions | controls | implementation |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for st in states:
        c, k, i = st.counts("claim"), st.counts("control"), st.counts("implementation")
        p = st.counts("precondition")
        primary = primary_row(st.claims or []) if st.state == "finished" else None
        head = f"{_state_badge(st)}" + (f" `{primary['id']}`" if primary is not None else "")
        lines.append(f"| {_chapter_link(st)} | {st.entry.part} | {head} | {c['pass']} | "
                     f"{c['fail']} | {c['unsupported']} | {c['inconclusive']} | {c['not_checkable']} | "
                     f"{p['pass']}/{sum(p.values())} | {k['pass']}/{sum(k.values())} | {i['pass']}/{sum(i.values())} |")
    failed = [st for st in states if st.state in ("failed", "failed_last_good")]
    if failed:
        lines += ["", "## Chapters that failed to run", ""]
        for st in failed:
            from .execute import describe_failure

            lines.append(f"- {_chapter_link(st)}: {code_span(describe_failure(st.failure))}")
    seeds_col = " seeds |" if stability else ""
    for role, title in (("claim", "Paper claims"), ("hypothesis", "Hypotheses"), ("precondition", "Preconditions"),
                        ("control", "Controls"), ("implementation", "Implementation checks"),
                        ("timing", "Wall-clock rows (shown, not compared)")):
        rows = [(st, c) for st in states for c in st.claims if c.get("role", "claim") == role]
        if not rows:
            continue
        lines += ["", f"## {title}: every row", "",
                  "| chapter | check | kind | measured | criterion | paper | verdict |" + seeds_col,
                  "|---|---|---|---|---|---|---|" + ("---|" if stability else "")]
        for st, c in rows:
            statement = escape(c["statement"]).replace("|", "\\|")
            key = (st.entry.slug, c["id"])
            badge = verdict_badge(c["verdict"]) + stale_badge(st)
            if key in fragile:
                badge += " " + verdict_badge("fragile") + f" <small>{escape(fragile[key])}</small>"
            crit = escape(c["criterion"] or "")
            if c.get("min_effect") is not None:
                crit += f" (smallest effect {_num(c['min_effect'])})"
            extra = f" {escape(stability.get(key, ''))} |" if stability else ""
            lines.append(
                f"| {_chapter_link(st)} | `{c['id']}`: {statement} | {c['kind']}"
                f"{' (wall-clock)' if c.get('volatile') else ''} | {_measured(c['measured'])} | "
                f"{crit} | {_num(c['paper_value'])} | {badge} |" + extra
            )
    lines += provenance_section(states)
    return "\n".join(lines) + "\n"


DASHBOARD_FIGURE = "dashboard/chapters.png"
DASHBOARD_FIGURE_CAPTION = (
    "One bar per chapter: its paper claims by verdict (hatched: rows recorded as fragile), the primary "
    "claim's verdict as the marker at the left, and its preconditions, controls and implementation checks "
    "counted apart at the right (passed / rows).")


def dashboard_figure(states: list[ChapterState], fragile: dict | None = None) -> bytes | None:
    """The dashboard's figure as PNG bytes (None when no chapter has finished)."""
    import io

    import matplotlib
    from matplotlib.figure import Figure  # no pyplot: no global state
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    from matplotlib.ticker import MaxNLocator

    from .synthesis import _COLOURS, SYNTHESIS_VERDICTS, VERDICT_LABELS

    fragile = fragile or {}
    done = [st for st in states if st.state == "finished" or st.claims]
    if not done:
        return None
    with matplotlib.rc_context({"figure.dpi": 100, "savefig.dpi": 110, "savefig.bbox": "tight", "font.size": 8}):
        fig = Figure(figsize=(7.5, 0.24 * len(done) + 1.2))
        ax = fig.subplots()
        width = 1
        for y, st in enumerate(done):
            rows = [c for c in st.claims or [] if c.get("role", "claim") == "claim" and not c.get("volatile")]
            left = 0
            for v in SYNTHESIS_VERDICTS:
                for hatched in (False, True):
                    n = sum(1 for c in rows if c["verdict"] == v
                            and ((st.entry.slug, c["id"]) in fragile) == hatched)
                    if n:
                        ax.barh(y, n, left=left, color=_COLOURS[v], edgecolor="white", linewidth=0.5,
                                hatch="////" if hatched else None, height=0.75)
                        left += n
            width = max(width, left)
            primary = primary_row(st.claims or [])
            if primary is not None:
                ax.plot(-0.9, y, marker="D", markersize=6, color=_COLOURS.get(primary["verdict"], "#000000"),
                        markeredgecolor="black", markeredgewidth=0.5, clip_on=False)
            c = {r: st.counts(r) for r in ("precondition", "control", "implementation")}
            text = "  ".join(f"{tag} {c[r]['pass']}/{sum(c[r].values())}"
                             for tag, r in (("P", "precondition"), ("C", "control"), ("I", "implementation")))
            ax.text(left + 0.3, y, text, va="center", fontsize=7, color="#424242")
        ax.set_yticks(range(len(done)), [st.entry.slug for st in done])
        ax.set_ylim(len(done) - 0.5, -0.5)
        ax.set_xlim(-1.5, width + 8)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("paper claims (P / C / I: preconditions, controls, implementation checks passed / rows)")
        handles = [Patch(color=_COLOURS[v], label=VERDICT_LABELS[v]) for v in SYNTHESIS_VERDICTS]
        handles += [Patch(facecolor="white", edgecolor="#424242", hatch="////", label="fragile"),
                    Line2D([], [], marker="D", linestyle="", color="#424242", label="primary claim")]
        ax.legend(handles=handles, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=4, frameon=False, fontsize=7)
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)
        buf = io.BytesIO()
        fig.savefig(buf, format="png", metadata={"Software": None})
    return buf.getvalue()


def _record_headline(states: list[ChapterState], scale: str, records: dict | None) -> list[str]:
    """The recorded full-scale verdicts first (:mod:`compendium.recordview`); none without records."""
    if records is None:
        return []
    from .recordview import dashboard_lines

    return dashboard_lines(records, {st.entry.slug: st.entry.title for st in states}, scale)


def _measured(value) -> str:
    """A measured value for a Markdown table: an interval estimate as ``point [low, high] (n unit)``."""
    from .claims import _measured_text

    return escape(_measured_text(value)).replace("|", "\\|")


def machine_description() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    gpu = "none"
    try:
        import torch

        if torch.cuda.is_available():
            gpu = torch.cuda.get_device_name(0)
    except ImportError:  # pragma: no cover
        pass
    mem = ""
    try:
        pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        mem = f", {pages / 2**30:.0f} GiB memory"
    except (ValueError, OSError, AttributeError):
        pass
    return f"{os.cpu_count()} cores ({cpu}){mem}, GPU: {gpu}, Python {platform.python_version()}"


#: Packages whose versions the runtime page states (distribution names).
KEY_PACKAGES = ("torch", "numpy", "scipy", "scikit-learn", "sympy", "cvxpy", "transformers", "pandas",
                "snakemake", "papermill", "jupyter-book", "sphinx")


def package_versions(names=KEY_PACKAGES) -> dict[str, str]:
    """``{distribution: version}`` of ``names`` as installed ("not installed" when absent), Python first."""
    import importlib.metadata

    out = {"python": platform.python_version()}
    for name in names:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def cpu_features() -> dict[str, str]:
    """The CPU model, its SIMD extensions (from /proc/cpuinfo) and the kernels torch dispatches to."""
    model, flags = None, None
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():  # the first processor's lines
            key, _, value = (part.strip() for part in line.partition(":"))
            if key == "model name" and model is None:
                model = value
            elif key == "flags" and flags is None:
                flags = set(value.split())
    except OSError:
        pass
    model, flags = model or platform.processor() or platform.machine(), flags or set()
    simd = [f for f in ("sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16", "amx_tile")
            if f in flags]
    try:
        import torch

        capability = torch.backends.cpu.get_cpu_capability()
    except (ImportError, AttributeError):  # pragma: no cover
        capability = "unknown"
    forced = os.environ.get("ATEN_CPU_CAPABILITY")
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        usable = os.cpu_count()
    return {"model": model, "simd": ", ".join(simd) or "none reported", "usable_cores": str(usable),
            "aten": capability + (f" (forced by ATEN_CPU_CAPABILITY={forced})" if forced else "")}


def runtime_page(registry: Registry, states: list[ChapterState], scale: str, profile: str) -> str:
    budget = registry.scales[scale]["budget_s"]
    lines = [
        "# Run times",
        "",
        f"Wall time and peak memory of each chapter's last run, from Snakemake's `benchmark:` files "
        f"(`results/{scale}/benchmarks/`). Scale `{scale}` (budget {budget} s per chapter), "
        f"profile `{profile}`, built on: {escape(machine_description())}.",
        "",
        "| chapter | wall time (s) | peak memory (MB) | within budget |",
        "|---|---|---|---|",
    ]
    total = 0.0
    for st in states:
        if st.benchmark is None or st.state == "planned":
            continue
        s = st.benchmark.get("s") or 0.0
        total += s
        rss = st.benchmark.get("max_rss")
        ok = "yes" if s <= budget else f"**no** (over by {s - budget:.0f} s)"
        lines.append(f"| {_chapter_link(st)} | {s:.1f} | {_num(rss)} | {ok} |")
    lines += ["", f"Total chapter time: {total:.1f} s."]
    book = read_benchmark(paths.results_root() / scale / "benchmarks" / "book.tsv")
    if book:
        lines += [f"The previous book build took {book.get('s', 0):.1f} s."]
    cpu = cpu_features()
    lock = paths.ROOT / "requirements.lock"
    lock_note = (f"`requirements.lock` (sha256 `{hashlib.sha256(lock.read_bytes()).hexdigest()[:12]}`) pins every "
                 "package exactly; `make setup` installs it." if lock.is_file() else "No `requirements.lock` was found.")
    lines += ["", "## Machine", "",
              f"CPU: {escape(cpu['model'])}, {os.cpu_count()} logical cores ({cpu['usable_cores']} usable by this "
              f"build). SIMD extensions: {cpu['simd']}. PyTorch's CPU kernels in effect (ATen CPU capability): "
              f"`{cpu['aten']}`. Each chapter runs with the threads its registry entry declares "
              "(OMP_NUM_THREADS, MKL_NUM_THREADS and OPENBLAS_NUM_THREADS set to them).",
              "", "## Software", "",
              f"Versions that built this book. {lock_note}", "",
              "| package | version |", "|---|---|"]
    lines += [f"| {name} | {version} |" for name, version in package_versions().items()]
    lines += ["", "## GPU kernels", ""] + gpu_kernel_lines()
    return "\n".join(lines) + "\n"


GPU_REPORT = "benchmarks/gpu_check_report.md"


def gpu_kernel_lines() -> list[str]:
    """What the runtime page says about the Triton kernels: the recorded GPU report, or that there is none."""
    report = paths.ROOT / GPU_REPORT
    if report.is_file():
        body = report.read_text(encoding="utf-8").strip().splitlines()
        body = [ln for ln in body if not ln.startswith("# ")]  # the report's own title
        return [f"From `{GPU_REPORT}`, written by `benchmarks/gpu_check.sh` on a CUDA machine:", "", *body]
    return ["The Triton kernels (`src/compendium/kernels/`) are tested only under Triton's interpreter on the "
            "CPU (`TRITON_INTERPRET=1`): no GPU has been available to this project yet, so they have never run "
            f"compiled and have no measured speed. On a CUDA machine, `bash benchmarks/gpu_check.sh` runs the "
            "kernel tests compiled, times the kernels against their references and one chapter under the `gpu` "
            f"profile, and writes a report (`$OUT/gpu_check_report.md`); copy it to `{GPU_REPORT}` and this "
            "section shows it."]


def failed_page(st: ChapterState) -> str:
    from .execute import describe_failure

    rec = st.failure or {}
    if rec.get("error") == "invalid output":  # a result that is not what was written: never shown
        return (f"# {st.entry.title}\n\n:::{{error}}\nThis chapter's result is not used: "
                f"{escape(rec.get('message', ''))}. The next `compendium build` reruns it.\n:::\n")
    lines = [
        f"# {st.entry.title}",
        "",
        ":::{error}",
        f"This chapter failed to run at this scale: {escape(describe_failure(rec))}.",
        "Its claims are not counted as passed. The partially executed notebook is kept as",
        f"`results/<scale>/{st.entry.slug}/failed.ipynb`.",
        ":::",
        "",
    ]
    if rec.get("traceback"):
        lines += ["```text", rec["traceback"], "```"]
    return "\n".join(lines) + "\n"


def not_run_page(st: ChapterState) -> str:
    return (f"# {st.entry.title}\n\n:::{{warning}}\nThis chapter has not been run at this scale yet "
            "(its dependencies failed or the run was interrupted).\n:::\n")


# ---------------------------------------------------------------------------- staging and build
def stage_book(registry: Registry, scale: str, profile: str = "local", parameters: dict | None = None) -> Path:
    """Write the book's sources for ``scale`` into ``results/<scale>/book/src``; return that path.

    ``parameters`` (slug -> effective values of this run) decides which claims are stale.
    """
    src = paths.results_root() / scale / "book" / "src"
    states = chapter_states(registry, scale, parameters)
    wanted: set[Path] = set()

    def put(rel: str, content: str | bytes) -> None:
        target = src / rel
        _write(target, content)
        wanted.add(target)

    bib = []
    for f in sorted(paths.BOOK.rglob("*")):
        if not f.is_file() or "_build" in f.parts:
            continue
        if f.suffix == ".bib":  # book/references/<slug>.bib: one file per chapter, merged here
            bib.append(f"% from book/{f.relative_to(paths.BOOK)}\n" + f.read_text(encoding="utf-8"))
            continue
        put(str(f.relative_to(paths.BOOK)), f.read_bytes())
    put("references.bib", "\n".join(bib))
    put("_toc.yml", yaml.safe_dump(toc(registry), sort_keys=False))
    from .expected import fragile_claims

    from . import stability

    from . import recordview

    sweeps = stability.load(scale)
    records = recordview.record_states(registry)
    figure = dashboard_figure(states, fragile_claims(scale))
    if figure is not None:
        put(DASHBOARD_FIGURE, figure)
    put("dashboard.md", dashboard_page(states, scale, fragile=fragile_claims(scale),
                                       stability=stability.agreement(sweeps), records=records))
    put("stability.md", stability.stability_page(sweeps, {c.slug: c.title for c in registry.chapters}))
    put("runtime.md", runtime_page(registry, states, scale, profile))
    # --- synthesis chapter: synthesis.md and synthesis/*.png (compendium.synthesis) ---
    from .synthesis import write_synthesis

    write_synthesis(registry, scale, put)
    # --- end synthesis chapter ---
    for part in registry.parts:
        put(f"parts/{part.id}.md", part_page(registry, part.id, states))
    for st in states:
        rs = records.get(st.entry.slug)
        if rs is not None and rs.record is not None:  # the results of record, this build as the check
            this = st.claims if st.state == "finished" else None
            put(f"chapters/{st.entry.slug}.ipynb", stability.add_to_notebook(
                recordview.recorded_page(rs, st.entry, st.state, this, scale), st.entry.slug, sweeps))
        elif st.state == "finished":
            executed = paths.results_root() / scale / st.entry.slug / f"{st.entry.slug}.ipynb"
            put(f"chapters/{st.entry.slug}.ipynb",  # bookview: as a reader sees it; marked if stale
                recordview.add_note(stability.add_to_notebook(
                    annotate_notebook(chapter_view(executed, st.entry, scale), st), st.entry.slug, sweeps), rs))
        elif st.state == "failed_last_good":  # the kept result, marked stale, with the failure on top
            from .provenance import LAST_GOOD

            kept = paths.results_root() / scale / st.entry.slug / LAST_GOOD / f"{st.entry.slug}.ipynb"
            put(f"chapters/{st.entry.slug}.ipynb",
                recordview.add_note(annotate_notebook(chapter_view(kept, st.entry, scale), st), rs))
        elif st.state == "failed":
            put(f"chapters/{st.entry.slug}.md", recordview.add_note_md(failed_page(st), rs))
        elif st.state == "not_run":
            put(f"chapters/{st.entry.slug}.md", recordview.add_note_md(not_run_page(st), rs))
    for f in sorted(src.rglob("*"), reverse=True):  # drop pages that are no longer generated
        if f.is_file() and f not in wanted:
            f.unlink()
    return src


def dedupe_inline_scripts(html_dir: Path) -> int:
    """Remove repeated identical inline ``<script>`` lines from every page; return pages fixed.

    Jupyter Book 1.0 emits the inline configuration scripts of sphinx-thebe and
    sphinx-togglebutton twice per page; the second ``const THEBE_JS_URL`` is a JavaScript
    SyntaxError in the reader's console (the browser tests catch it).
    """
    fixed = 0
    for page in html_dir.rglob("*.html"):
        if "_static" in page.parts:
            continue
        lines, seen, out = page.read_text(encoding="utf-8").splitlines(keepends=True), set(), []
        for line in lines:
            key = line.strip()
            if key.startswith("<script>") and key.endswith("</script>"):
                if key in seen:
                    continue
                seen.add(key)
            out.append(line)
        if len(out) != len(lines):
            page.write_text("".join(out), encoding="utf-8")
            fixed += 1
    return fixed


def build_book(registry: Registry, scale: str, profile: str = "local", log=None,
               parameters: dict | None = None) -> Path:
    """Stage and build the HTML book; return the path of ``index.html``."""
    src = stage_book(registry, scale, profile, parameters)
    out = src.parent
    cmd = [str(Path(sys.executable).with_name("jupyter-book")), "build", str(src), "--path-output", str(out),
           "--builder", "html", "-W", "-n", "--keep-going"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYDEVD_DISABLE_FILE_VALIDATION": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=paths.ROOT)
    if log is not None:
        log.write(proc.stdout)
        log.write(proc.stderr)
    index = out / "_build" / "html" / "index.html"
    if proc.returncode != 0 or not index.is_file():
        # a warning-free *incremental* rebuild could hide this failure: force a full rebuild next time
        shutil.rmtree(out / "_build" / ".doctrees", ignore_errors=True)
        index.unlink(missing_ok=True)
        problems = [ln for ln in (proc.stdout + proc.stderr).splitlines() if "WARNING" in ln or "ERROR" in ln]
        detail = "\n".join(problems[-15:]) or (proc.stdout + proc.stderr)[-3000:]
        raise BookBuildFailed(f"jupyter-book build failed (warnings are errors):\n{detail}")
    dedupe_inline_scripts(index.parent)
    return index
