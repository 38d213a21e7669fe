"""The built book as a reader sees it, in headless Chromium served on loopback.

Checks the introduction, dashboard, runtime page, synthesis chapter and every chapter: no console errors, no
request leaving loopback, math typeset by the MathJax the book serves itself, every image
loads, figures described, headings in order, no build path or bookkeeping repr (``PosixPath(``,
``<Figure size``, a folder of the building machine), the claims table with one badge per claim, the
executed-notebook download, exercise solutions hidden until clicked; and what
``compendium.bookview`` shapes: the parameters shown once, no glue-only cell, plotting code folded
behind a "show code" toggle, figures numbered from 1 in each chapter, the source-files box; plus an internal link and
anchor check over every page. Screenshots of the dashboard and each chapter are saved under
``.ci/artifacts/screenshots/``. The last tests break a copy of the book on purpose and show
that the checks fail.
"""

import json
import shutil
from pathlib import Path

import pytest

from compendium.registry import load_registry

import browser_checks as bc

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(not bc.browser_available(),
                                                  reason="needs chromium, chromedriver and selenium")]
REGISTRY = load_registry()
REPO = Path(__file__).resolve().parents[1]
PAGES = (["intro.html", "dashboard.html", "stability.html", "runtime.html", "synthesis.html"]
         + [f"chapters/{c.slug}.html" for c in REGISTRY.ready])


@pytest.fixture(scope="module")
def html_root(smoke_book):
    root, proc = smoke_book
    html = root / "results" / "smoke" / "book" / "_build" / "html"
    if not (html / "index.html").is_file():
        pytest.fail("the smoke book did not build:\n" + proc.stdout[-2000:] + proc.stderr[-2000:])
    return html


@pytest.fixture(scope="module")
def browser():
    driver = bc.make_driver()
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def server(html_root):
    with bc.BookServer(html_root) as srv:
        yield srv


@pytest.mark.parametrize("page", PAGES)
def test_page_as_a_reader_sees_it(html_root, server, browser, page):
    bc.load(browser, server.base + page)
    problems = (
        bc.check_console(browser)
        + bc.check_requests_stay_local(browser, server.base)
        + bc.check_math(browser, bc.page_has_math(html_root / page))
        + bc.check_images(browser)
        + bc.check_figures_described(browser)
        + bc.check_heading_order(browser)
        + bc.check_no_build_leaks(browser, bc.build_dirs(html_root.parents[4], REPO))
    )
    if page.startswith("chapters/"):
        slug = page.split("/")[1].removesuffix(".html")
        claims = json.loads((html_root.parents[2] / slug / "claims.json").read_text())["claims"]
        record = html_root.parents[4] / "evidence" / "full" / slug / "record.json"
        if "<th>this build (" in (html_root / page).read_text():
            recorded = json.loads(record.read_text())["claims"]  # the page shows the record, this build beside
            problems += bc.check_ledger(browser, recorded["claims"] if isinstance(recorded, dict) else recorded, claims)
        else:
            problems += bc.check_ledger(browser, claims)
        problems += bc.check_download(browser, server.base, slug)
        problems += bc.check_parameters_once(browser)
        problems += bc.check_no_glue_only_cells(browser)
        problems += bc.check_figure_numbers(browser)
        problems += bc.check_source_links(browser, REPO)
        bc.load(browser, server.base + page)  # fresh state for the toggles
        problems += bc.check_plot_code_folded(browser, 'src="../_images/' in (html_root / page).read_text())
        bc.SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        browser.save_screenshot(str(bc.SCREENSHOTS / f"chapter-{slug}.png"))
        bc.load(browser, server.base + page)  # fresh state for the solutions check
        problems += bc.check_solutions_hidden(browser)
    if page == "dashboard.html":
        problems += bc.check_dashboard_counts_paper_claims(browser)
        bc.SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        browser.save_screenshot(str(bc.SCREENSHOTS / "dashboard.png"))
    assert problems == []


def test_internal_links_and_anchors_resolve(html_root):
    assert bc.check_internal_links(html_root) == []


# ------------------------------------------------------------------ the checks can fail
@pytest.fixture
def broken_copy(html_root, tmp_path):
    copy = tmp_path / "html"
    shutil.copytree(html_root, copy)
    return copy


def _first_chapter_with_figure(root):
    for entry in REGISTRY.ready:
        page = root / "chapters" / f"{entry.slug}.html"
        if page.is_file() and 'src="../_images/' in page.read_text():
            return page
    pytest.skip("no chapter with a figure")


def test_a_broken_figure_path_is_caught(broken_copy, browser):
    page = _first_chapter_with_figure(broken_copy)
    page.write_text(page.read_text().replace('src="../_images/', 'src="../_images/missing-', 1))
    with bc.BookServer(broken_copy) as srv:
        bc.load(browser, srv.base + str(page.relative_to(broken_copy)))
        assert bc.check_images(browser)


def test_a_broken_math_block_is_caught(broken_copy, browser):
    page = broken_copy / "chapters" / f"{REGISTRY.ready[0].slug}.html"
    text = page.read_text()
    assert "mathjax/tex-chtml.js" in text
    page.write_text(text.replace("mathjax/tex-chtml.js", "mathjax/missing.js"))
    with bc.BookServer(broken_copy) as srv:
        bc.load(browser, srv.base + str(page.relative_to(broken_copy)))
        assert bc.check_math(browser, expect_math=True)


def test_a_broken_link_is_caught(broken_copy):
    page = broken_copy / "dashboard.html"
    page.write_text(page.read_text().replace("</body>", '<a href="nowhere.html#x">x</a></body>'))
    assert any("nowhere.html" in p for p in bc.check_internal_links(broken_copy))
    page.write_text(page.read_text().replace('<a href="nowhere.html#x">', '<a href="intro.html#no-such-anchor">'))
    assert any("no-such-anchor" in p for p in bc.check_internal_links(broken_copy))


def test_a_request_leaving_loopback_is_caught():
    """Fed a recorded request log (no real traffic is sent anywhere)."""

    class RecordedDriver:
        def get_log(self, kind):
            sent = [{"method": "Network.requestWillBeSent", "params": {"request": {"url": url}}}
                    for url in ("http://127.0.0.1:8000/intro.html", "data:image/png;base64,AA==",
                                "https://cdn.example.org/mathjax.js")]
            return [{"message": json.dumps({"message": m})} for m in sent]

    problems = bc.check_requests_stay_local(RecordedDriver(), "http://127.0.0.1:8000/")
    assert problems == ["request leaves the book: https://cdn.example.org/mathjax.js"]


def test_a_visible_solution_is_caught(broken_copy, browser):
    page = broken_copy / "chapters" / f"{REGISTRY.ready[0].slug}.html"
    page.write_text(page.read_text().replace("solution dropdown admonition", "solution admonition"))
    with bc.BookServer(broken_copy) as srv:
        bc.load(browser, srv.base + str(page.relative_to(broken_copy)))
        assert bc.check_solutions_hidden(browser)


def test_a_book_wide_figure_number_is_caught(broken_copy, browser):
    page = _first_chapter_with_figure(broken_copy)
    page.write_text(page.read_text().replace('caption-number">Fig. 1', 'caption-number">Fig. 32', 1))
    with bc.BookServer(broken_copy) as srv:
        bc.load(browser, srv.base + str(page.relative_to(broken_copy)))
        assert bc.check_figure_numbers(browser)


def test_an_unfolded_plotting_cell_and_a_second_parameters_cell_are_caught(broken_copy, browser):
    page = _first_chapter_with_figure(broken_copy)
    text = page.read_text().replace("cell tag_hide-input", "cell", 50).replace(
        "cell tag_parameters", "cell tag_injected-parameters", 1)
    page.write_text(text)
    with bc.BookServer(broken_copy) as srv:
        bc.load(browser, srv.base + str(page.relative_to(broken_copy)))
        assert bc.check_plot_code_folded(browser, expect_fold=True)
        assert bc.check_parameters_once(browser)


def test_a_build_path_on_a_page_is_caught(browser, tmp_path):
    """A page showing a saved figure's path, a figure repr or the build folder fails the check;
    the same page without them passes (a hand-written page: no book build needed)."""
    body = ("<main><h1>Chapter</h1><div class='output'><pre>PosixPath('{root}/results/smoke/x/figures/f.png')"
            "</pre><pre>&lt;Figure size 640x480 with 0 Axes&gt;</pre></div>"
            "<details><pre>open('{root}/data.csv')</pre></details><script>var p = '{root}';</script></main>")
    (tmp_path / "leak.html").write_text(f"<html><body>{body.format(root=tmp_path)}</body></html>")
    (tmp_path / "clean.html").write_text("<html><body><main><h1>Chapter</h1><pre>results/smoke/x/</pre>"
                                         f"<script>var p = '{tmp_path}';</script></main></body></html>")
    with bc.BookServer(tmp_path) as srv:
        bc.load(browser, srv.base + "leak.html")
        problems = bc.check_no_build_leaks(browser, [str(tmp_path)])
        bc.load(browser, srv.base + "clean.html")
        assert bc.check_no_build_leaks(browser, [str(tmp_path)]) == []
    assert problems == ["the page shows 'PosixPath('", "the page shows '<Figure size'", f"the page shows {str(tmp_path)!r}"]
    # a PDF's text layer breaks a long path across lines: squashed, it is still caught
    assert bc.build_leaks("saved to /tmp/pro\nject/f.png", ["/tmp/project"], squash=True) == ["/tmp/project"]
