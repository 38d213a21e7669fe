"""The real compendium at the smoke scale, end to end, with the network cut where possible.

Builds every ready chapter of the real registry through Snakemake and Papermill in a throw-away
copy of the project, then checks: the book and dashboard exist, every chapter's verdicts equal
workflow/config/expected_verdicts.yaml (volatile wall-clock claims excepted), every chapter kept to its time budget (with slack for a
noisy CI machine, scaled by the host's measured speed against the reference host: compendium.hostspeed), and a forced rerun gives a byte-identical claims.json.
"""

import json

import pytest
import yaml

from compendium import paths
from compendium.book import read_benchmark
from compendium.registry import load_registry

from conftest import compendium

pytestmark = pytest.mark.e2e
REGISTRY = load_registry()
BUDGET_SLACK = 1.5  # CI machines are noisy; the runtime page reports the strict budget


@pytest.fixture(scope="module")
def host_slowdown(smoke_book):
    """This host's speed against the host the budget was set on (compendium.hostspeed), timed
    after the smoke book, on a quiet machine; 1 on a host at least as fast as the reference."""
    from compendium.hostspeed import slowdown

    return slowdown()


def test_smoke_book_builds(smoke_book):
    root, proc = smoke_book
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-5000:]
    html = root / "results" / "smoke" / "book" / "_build" / "html"
    for page in ("index.html", "dashboard.html", "runtime.html", "bibliography.html"):
        assert (html / page).is_file(), page
    for entry in REGISTRY.ready:
        assert (html / "chapters" / f"{entry.slug}.html").is_file()


def test_verdicts_match_expected(smoke_book):
    from compendium.expected import compare_verdicts, load_expected

    root, _ = smoke_book
    expected = load_expected("smoke")
    actual = {}
    for entry in REGISTRY.ready:
        claims = root / "results" / "smoke" / entry.slug / "claims.json"
        actual[entry.slug] = json.loads(claims.read_text())["claims"]
    problems = compare_verdicts(expected, actual)
    assert not problems, ("verdicts changed: update expected_verdicts.yaml deliberately or fix the regression:\n"
                          + "\n".join(problems))


def test_every_ledger_passes_the_v3_audit(smoke_book):
    """`compendium audit`: one primary per chapter, every claim gated, every control linked; chapters
    still migrating are those listed in audit_pending.yaml, with a reason."""
    from compendium.audit import NOTES, audit_results, load_pending

    root, _ = smoke_book
    findings, seen = audit_results("smoke", root / "results")
    assert set(seen) >= {e.slug for e in REGISTRY.ready}
    pending = load_pending()
    problems = [str(f) for slug, fs in findings.items() if slug not in pending for f in fs if f.rule not in NOTES]
    assert not problems, "ledger-v3 audit findings:\n" + "\n".join(problems)


@pytest.mark.parametrize("entry", REGISTRY.ready, ids=lambda e: e.slug)
def test_chapter_keeps_its_smoke_budget(smoke_book, host_slowdown, entry):
    root, _ = smoke_book
    bench = read_benchmark(root / "results" / "smoke" / "benchmarks" / f"{entry.slug}.tsv")
    budget = REGISTRY.scales["smoke"]["budget_s"]
    allowed = BUDGET_SLACK * budget * host_slowdown
    assert bench is not None and bench["s"] <= allowed, (
        f"{entry.slug}: {bench and bench['s']:.1f} s against {allowed:.1f} s "
        f"({BUDGET_SLACK} x {budget} s x host slowdown {host_slowdown:.2f})")


def test_same_seed_gives_byte_identical_claims(smoke_book):
    root, _ = smoke_book
    slug = "continuized_hippo"
    claims = root / "results" / "smoke" / slug / "claims.json"
    before = claims.read_bytes()
    compendium(root, "build", "--force", slug, check=True)
    assert claims.read_bytes() == before
