"""The synthesis chapter: counts from fixture ledgers, sources, fragile rates, figures, the page, the toc."""

import json
from pathlib import Path

import pytest

from compendium import synthesis as sy
from compendium.book import toc
from compendium.claims import NOT_CHECKABLE_CATEGORIES, Ledger, at_most
from compendium.registry import ChapterEntry, Part, Registry, load_registry


def row(id, role="claim", kind="exact", verdict="pass", **extra):
    return {"id": id, "role": role, "kind": kind, "verdict": verdict, "statement": f"statement of {id}",
            "note": "", "volatile": False, **extra}


#: One chapter's ledger with every role of ledger v3 and every verdict of a claim.
ROWS = [
    row("headline", kind="statistical", verdict="pass", primary=True, controls=["power"], preconditions=["beats-chance"]),
    row("second", kind="directional", verdict="fail"),
    row("third", kind="ratio", verdict="inconclusive"),
    row("fourth", kind="symbolic", verdict="pass"),
    row("gated", kind="directional", verdict="unsupported", controls=["broken-control"]),
    row("hyp", role="hypothesis", kind="directional", verdict="pass"),
    row("beats-chance", role="precondition", kind="directional", verdict="pass"),
    row("power", role="control", kind="directional", verdict="pass"),
    row("broken-control", role="control", kind="directional", verdict="inconclusive"),
    row("weak-model", role="precondition", kind="directional", verdict="fail",
        gates=[{"id": "weak-model", "verdict": "fail"}]),
    row("needs-it", kind="directional", verdict="unsupported", requires=[], preconditions=["weak-model"]),
    row("impl", role="implementation", kind="exact", verdict="pass"),
    row("speed-v2", kind="ratio", verdict="pass", volatile=True),
    row("speed-v3", role="timing", kind="ratio", verdict="fail", volatile=True),
    row("big-model", kind="not_checkable", verdict="not_checkable", category="scale", note="needs 70B"),
    row("no-data", kind="not_checkable", verdict="not_checkable", category="data", note="offline"),
    row("old-style", kind="not_checkable", verdict="not_checkable", note="no category (ledger v2)"),
]


def test_tally_counts_each_role_and_verdict():
    t = sy.tally(ROWS)
    c = t["claims"]
    assert (c["pass"], c["fail"], c["inconclusive"], c["unsupported"], c["not_checkable"]) == (2, 1, 1, 2, 3)
    assert t["primary"]["pass"] == 1 and sum(t["primary"].values()) == 1 and t["has_primary"]
    assert sum(t["secondary"].values()) == 8
    assert t["hypotheses"]["pass"] == 1
    assert t["timed"] == 2
    assert t["by_kind"]["timed"]["pass"] == 1 and t["by_kind"]["timed"]["fail"] == 1
    assert t["by_kind"]["statistical"]["pass"] == 1 and t["by_kind"]["symbolic"]["pass"] == 1
    assert t["by_kind"]["directional"]["fail"] == 1 and t["by_kind"]["directional"]["unsupported"] == 2
    assert t["by_kind"]["ratio"]["inconclusive"] == 1 and t["by_kind"]["ratio"]["pass"] == 0  # speed-v2 is timed
    assert t["roles"] == {"claim": 10, "hypothesis": 1, "precondition": 2, "control": 2, "implementation": 1,
                          "timing": 1}
    assert sy.decisiveness(t) == (3, 6)


def test_kind_groups_and_paper_claims():
    assert sy.check_group(row("x", kind="ratio", volatile=True)) == "timed"
    assert sy.check_group(row("x", role="timing", kind="ratio")) == "timed"
    assert sy.check_group(row("x", kind="not_checkable", verdict="not_checkable")) == "not_checkable"
    assert sy.is_paper_claim({"id": "x", "verdict": "pass"})  # ledger v1: no role means a claim
    assert not sy.is_paper_claim(row("x", volatile=True))


def test_not_checkable_grouped_by_category():
    groups = sy.not_checkable_by_category(ROWS)
    assert set(groups) == set(NOT_CHECKABLE_CATEGORIES)
    assert [r["id"] for r in groups["scale"]] == ["big-model"]
    assert [r["id"] for r in groups["data"]] == ["no-data"]
    assert [r["id"] for r in groups["unspecified"]] == ["old-style"]
    assert groups["human"] == []


def test_ledger_not_checkable_stores_its_category():
    ledger = Ledger("demo")
    ledger.check("c", "a claim", role="claim", kind="exact", measured=0.0, criterion=at_most(1))
    assert ledger.not_checkable("h", "needs people", reason="a human study", category="human").to_dict()["category"] == "human"
    assert ledger.not_checkable("u", "no category", reason="why").to_dict()["category"] == "unspecified"
    assert "category" not in ledger["c"].to_dict()  # checked rows keep their old fields
    with pytest.raises(ValueError, match="category must be one of"):
        ledger.not_checkable("bad", "x", reason="y", category="gpu")


def test_gate_failures_name_the_claims_they_gate():
    failures = {g["id"]: g for g in sy.gate_failures(ROWS)}
    assert set(failures) == {"broken-control", "weak-model"}
    assert failures["broken-control"]["gates"] == ["gated"] and failures["broken-control"]["role"] == "control"
    assert failures["weak-model"]["gates"] == ["needs-it"] and failures["weak-model"]["verdict"] == "fail"


@pytest.mark.parametrize("reason, rate", [
    ("flips at 2 of 5 seeds (smoke sweep): pass at seeds 1 and 3 (3 of 3 models)", (2, 5)),
    ("fails at 1 of 5 seeds (smoke sweep, seeds 0-4)", (1, 5)),
    ("passes at 1 of 4 further seeds (smoke sweep, seeds 1-4)", (1, 4)),
    ("inconclusive at all 4 further seeds (smoke sweep, seeds 1-4)", (4, 4)),
    ("inconclusive at 3 of 4 further seeds", (3, 4)),
    ("differs between hosts at smoke seed 0: inconclusive on one host", None),
    ("the shuffled-target control (passes when ...) at 3 of 5 smoke models", None),
    ("", None),
])
def test_flip_rate_parsed_from_the_fragile_reason(reason, rate):
    assert sy.parse_flip_rate(reason) == rate


def test_fragile_rows_read_every_scale(tmp_path):
    path = tmp_path / "expected.yaml"
    path.write_text(
        "smoke:\n"
        "  alpha:\n"
        "    a: pass\n"
        "    b: {verdict: fail, fragile: \"flips at 2 of 5 seeds (sweep)\"}\n"
        "    c: {verdict: pass, fragile: \"host-dependent: differs between machines\"}\n"
        "full:\n"
        "  beta:\n"
        "    d: {verdict: inconclusive, fragile: \"passes at 1 of 4 further seeds\"}\n")
    rows = sy.fragile_rows(path)
    assert [(r["scale"], r["slug"], r["id"], r["flips"], r["seeds"]) for r in rows] == [
        ("smoke", "alpha", "b", 2, 5), ("smoke", "alpha", "c", None, None), ("full", "beta", "d", 1, 4)]


def test_the_projects_fragile_reasons_mostly_state_a_rate():
    rows = sy.fragile_rows()
    assert rows and all(r["seeds"] is None or 0 < r["flips"] <= r["seeds"] for r in rows)
    assert sum(r["seeds"] is not None for r in rows) > len(rows) / 2


# ------------------------------------------------------------------ sources
def _claims_json(folder: Path, rows):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "claims.json").write_text(json.dumps({"schema_version": 2, "claims": rows}))


def _record(evidence: Path, slug: str, rows, **extra):
    folder = evidence / "full" / slug
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "record.json").write_text(json.dumps({"chapter": slug, "scale": "full", **extra, "claims": rows}))


def test_record_preferred_over_this_build(tmp_path):
    ev, res = tmp_path / "evidence", tmp_path / "results"
    _claims_json(res / "smoke" / "alpha", [row("from-build")])
    _record(ev, "alpha", [row("from-record")], run_date="2026-12-05T10:00:00Z")
    rows, source = sy.chapter_rows("alpha", "smoke", evidence_root=ev, results_root=res)
    assert [r["id"] for r in rows] == ["from-record"] and source == "recorded full scale, 2026-12-05"


def test_record_claims_may_be_a_whole_claims_json(tmp_path):
    ev = tmp_path / "evidence"
    _record(ev, "alpha", {"schema_version": 3, "claims": [row("nested")]}, recorded_at="2026-12-06T01:02:03Z")
    rows, source = sy.chapter_rows("alpha", "smoke", evidence_root=ev, results_root=tmp_path / "results")
    assert [r["id"] for r in rows] == ["nested"] and source == "recorded full scale, 2026-12-06"


@pytest.mark.parametrize("bad", ["{not json", json.dumps({"claims": []}), json.dumps({"claims": [{"id": 1}]}),
                                 json.dumps(["a list"])])
def test_an_unreadable_record_falls_back_to_this_build(tmp_path, bad):
    ev, res = tmp_path / "evidence", tmp_path / "results"
    (ev / "full" / "alpha").mkdir(parents=True)
    (ev / "full" / "alpha" / "record.json").write_text(bad)
    _claims_json(res / "smoke" / "alpha", [row("from-build")])
    rows, source = sy.chapter_rows("alpha", "smoke", evidence_root=ev, results_root=res)
    assert [r["id"] for r in rows] == ["from-build"] and source == "this build, smoke"


def test_a_missing_chapter_has_no_rows(tmp_path):
    assert sy.chapter_rows("alpha", "smoke", evidence_root=tmp_path, results_root=tmp_path) == (None, "no result")


# ------------------------------------------------------------------ page and figures
def _registry(tmp_path) -> Registry:
    parts = (Part("one", "I. First part", ""), Part("two", "II. Second part", ""))
    chapters = tuple(ChapterEntry(slug, f"Chapter {slug}", part, "seed.md", i, status)
                     for i, (slug, part, status) in enumerate([("alpha", "one", "ready"), ("beta", "one", "ready"),
                                                               ("gamma", "two", "ready"), ("delta", "two", "planned")]))
    return Registry(tmp_path / "chapters.yaml", {"smoke": {}}, parts, chapters)


@pytest.fixture
def fixture_book(tmp_path):
    ev, res = tmp_path / "evidence", tmp_path / "results"
    _record(ev, "alpha", ROWS, run_date="2026-12-05T10:00:00Z", times={"chapter": {"wall_s": 300.0, "cpu_s": 290.5}})
    _claims_json(res / "smoke" / "beta", [row("b1", verdict="fail", primary=True), row("b2", kind="statistical",
                                                                                        verdict="inconclusive")])
    (res / "smoke" / "benchmarks").mkdir(parents=True)
    (res / "smoke" / "benchmarks" / "beta.tsv").write_text("s\th:m:s\tmax_rss\tcpu_time\n40.0\t0:00:40\t100\t35.5\n")
    expected = tmp_path / "expected.yaml"
    expected.write_text("smoke:\n  beta:\n    b2: {verdict: inconclusive, fragile: \"flips at 1 of 5 seeds (sweep)\"}\n"
                        "full:\n  alpha:\n    a1: {verdict: pass, fragile: \"flips at 2 of 4 further seeds (full sweep)\"}\n")
    return _registry(tmp_path), ev, res, expected


def test_collect_reads_sources_and_cpu_seconds(fixture_book):
    reg, ev, res, _ = fixture_book
    chapters = {ch.slug: ch for ch in sy.collect(reg, "smoke", evidence_root=ev, results_root=res)}
    assert set(chapters) == {"alpha", "beta", "gamma"}  # planned chapters are left out
    assert chapters["alpha"].from_record and chapters["alpha"].cpu_seconds == 290.5
    assert chapters["beta"].source == "this build, smoke" and chapters["beta"].cpu_seconds == 35.5
    assert chapters["gamma"].rows is None and chapters["gamma"].cpu_seconds is None


def test_page_and_figures_are_written(fixture_book, tmp_path):
    reg, ev, res, expected = fixture_book
    out = tmp_path / "staged"
    written = {}

    def put(rel, content):
        written[rel] = content
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_bytes(content.encode() if isinstance(content, str) else content)

    names = sy.write_synthesis(reg, "smoke", put, evidence_root=ev, results_root=res, expected_path=expected)
    assert names[0] == "synthesis.md" and len(names) == 4
    for rel in names[1:]:
        assert rel.startswith("synthesis/") and (out / rel).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"```{{figure}} {rel}" in written["synthesis.md"]
    page = written["synthesis.md"]
    assert page.startswith("(synthesis)=\n# What reproduces at small scale\n")
    for bad in ("nan", "None", "NaN", str(tmp_path)):
        assert bad not in page
    assert "[Chapter alpha](chapters/alpha)" in page and "[Chapter beta](chapters/beta)" in page
    assert "[Chapter gamma]" not in page  # no link to a chapter without a result
    assert "| Chapter gamma | II. Second part | no result | – | 0 | 0 | – |" in page
    assert "recorded full scale, 2026-12-05" in page and "this build, smoke" in page
    assert "Chapters: 3; with recorded full-scale evidence: 1; from this build: 1; with no result: 1." in page
    # the book's totals: alpha's claims plus beta's fail and inconclusive
    assert "| **all parts** | 8 | 2 | 2 | 2 | 2 | 3 | 50 % |" in page
    assert "| primary | 2 | 1 | 1 | 0 | 0 | 0 | 100 % |" in page
    assert "| timed | 1 | 1 | 0 | 0 | 2 |" in page
    assert "| scale | model or run beyond a CPU budget | 1 | 1 |" in page
    assert "`broken-control` | control | inconclusive | `gated` |" in page
    assert "| 1 of 5 |" in page
    assert "| **all parts** | smoke | 1 | 1 | 1 of 5 (20 %) |" in page  # each scale pooled on its own
    assert "| **all parts** | full | 1 | 1 | 2 of 4 (50 %) |" in page
    assert "decided either way 4 of 8 (50 %)" in page
    # the same inputs give the same bytes (the stager rewrites only what changed)
    again = {}
    sy.write_synthesis(reg, "smoke", lambda rel, c: again.__setitem__(rel, c), evidence_root=ev, results_root=res,
                       expected_path=expected)
    assert again == written


def test_page_with_no_results_at_all(tmp_path):
    reg = _registry(tmp_path)
    chapters = sy.collect(reg, "smoke", evidence_root=tmp_path, results_root=tmp_path)
    page = sy.synthesis_page(chapters, reg, "smoke", [])
    assert "nan" not in page and "None" not in page
    sy.write_figures(chapters, reg, tmp_path / "figs")
    assert len(list((tmp_path / "figs").glob("*.png"))) == 3


def test_toc_has_the_synthesis_part_after_the_last_part():
    reg = load_registry()
    captions = [p["caption"] for p in toc(reg)["parts"]]
    assert captions[-2:] == ["Synthesis", "Back matter"]
    assert captions.index("Synthesis") == len(reg.parts) + 1
    assert toc(reg)["parts"][-2]["chapters"] == [{"file": "synthesis"}]


def test_every_not_checkable_call_in_the_notebooks_names_a_category():
    import ast

    import jupytext

    from compendium import paths

    missing, seen = [], 0
    for path in sorted(paths.NOTEBOOKS.glob("*/*.md")):
        for cell in jupytext.read(path).cells:
            if cell.cell_type != "code":
                continue
            source = "\n".join(ln for ln in cell.source.splitlines() if not ln.lstrip().startswith(("%", "!")))
            for node in ast.walk(ast.parse(source)):
                if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "not_checkable":
                    seen += 1
                    category = next((k.value for k in node.keywords if k.arg == "category"), None)
                    if not (isinstance(category, ast.Constant) and category.value in NOT_CHECKABLE_CATEGORIES):
                        missing.append(f"{path.name}:{node.lineno}")
    assert seen and missing == []
