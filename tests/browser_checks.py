"""Checks of the built book as a reader sees it: a real headless Chromium on loopback.

Each check returns a list of problems (empty when the page is fine), so the tests can also show
that a check *fails* on a book broken on purpose.
"""

from __future__ import annotations

import functools
import http.server
import json
import re
import shutil
import sys
import tempfile
import threading
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urljoin, urlparse

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
SCREENSHOTS = Path(__file__).resolve().parents[1] / ".ci" / "artifacts" / "screenshots"


def browser_available() -> bool:
    if not (CHROMIUM and CHROMEDRIVER):
        return False
    try:
        import selenium  # noqa: F401
    except ImportError:
        return False
    return True


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # keep test output clean
        pass


class BookServer:
    """Serve a folder on 127.0.0.1 (an ephemeral port) in a background thread."""

    def __init__(self, folder: Path):
        handler = functools.partial(_QuietHandler, directory=str(folder))
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.base = f"http://127.0.0.1:{self.httpd.server_address[1]}/"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


def make_driver():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-quic",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", "--window-size=1280,1600"):
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tempfile.mkdtemp(prefix='chromium-')}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)


def load(driver, url: str, timeout: float = 20.0) -> None:
    """Open ``url``, wait for the document and for MathJax (when the page uses it) to finish."""
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get_log("performance")  # drop entries of earlier pages
    driver.get_log("browser")
    driver.get(url)
    wait = WebDriverWait(driver, timeout)
    wait.until(lambda d: d.execute_script("return document.readyState") == "complete")
    driver.set_script_timeout(timeout)
    try:
        driver.execute_async_script(
            "const done = arguments[arguments.length - 1];"
            "if (!window.MathJax || !window.MathJax.startup || !window.MathJax.startup.promise)"
            "{ done(true); return; }"
            "window.MathJax.startup.promise.then(() => done(true), () => done(false));"
        )
    except Exception:  # noqa: BLE001 - a page whose MathJax never settles fails check_math
        pass


# ---------------------------------------------------------------------------------------- checks
def check_console(driver) -> list[str]:
    return [f"console: {e['message']}" for e in driver.get_log("browser") if e.get("level") == "SEVERE"]


def check_requests_stay_local(driver, base: str) -> list[str]:
    """Every request the page made went to the book's server (or was data:/blob:)."""
    problems = []
    host = urlparse(base).netloc
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message.get("method") != "Network.requestWillBeSent":
            continue
        url = message["params"]["request"]["url"]
        parsed = urlparse(url)
        if parsed.scheme not in ("http", "https", "ws", "wss", "ftp"):  # data:, blob:, chrome:// internals
            continue
        if parsed.netloc != host:
            problems.append(f"request leaves the book: {url}")
    return problems


def check_math(driver, expect_math: bool) -> list[str]:
    if not expect_math:
        return []
    info = driver.execute_script(
        "return {typeset: document.querySelectorAll('mjx-container').length,"
        " scripts: Array.from(document.scripts).map(s => s.src).filter(s => /mathjax/i.test(s))};"
    )
    problems = []
    if info["typeset"] == 0:
        problems.append("math is not typeset (no mjx-container)")
    problems += [f"MathJax not served by the book: {s}" for s in info["scripts"] if "127.0.0.1" not in s]
    return problems


def check_images(driver) -> list[str]:
    broken = driver.execute_script(
        "return Array.from(document.images).filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.src);"
    )
    return [f"image does not load: {src}" for src in broken]


LEAK_MARKERS = ("PosixPath(", "WindowsPath(", "<Figure size")  # reprs of a chapter's bookkeeping


def build_dirs(project: Path, repo: Path) -> list[str]:
    """Folders of the machine that built the book: the project it was built in, the checkout and
    the virtual environment (not a system prefix such as /usr, which names no one's layout)."""
    venv = [sys.prefix, str(Path(sys.prefix).resolve())] if sys.prefix != sys.base_prefix else []
    return [str(project), str(repo), *venv]


def build_leaks(text: str, dirs, squash: bool = False) -> list[str]:
    """What in ``text`` belongs to the build rather than the book: a path or figure repr, or one of
    ``dirs``. ``squash`` ignores whitespace (a PDF's text layer breaks long paths across lines)."""
    def norm(t: str) -> str:
        return re.sub(r"\s+", "", t) if squash else t

    flat = norm(text)
    return [n for n in (*LEAK_MARKERS, *sorted({d for d in dirs if d})) if norm(n) in flat]


def check_no_build_leaks(driver, dirs) -> list[str]:
    """The page's text (folded code and outputs included, scripts and styles not) shows no build
    path and no bookkeeping repr."""
    text = driver.execute_script(
        "const body = document.body.cloneNode(true);"
        "body.querySelectorAll('script, style, noscript').forEach(n => n.remove());"
        "return body.textContent;"
    )
    return [f"the page shows {leak!r}" for leak in build_leaks(text, dirs)]


def check_figures_described(driver) -> list[str]:
    missing = driver.execute_script(
        """return Array.from(document.querySelectorAll('main img')).filter(img => {
               const fig = img.closest('figure');
               const caption = fig && fig.querySelector('figcaption');
               return !(img.alt && img.alt.trim()) && !(caption && caption.textContent.trim());
           }).map(i => i.src);"""
    )
    return [f"figure without alt text or caption: {src}" for src in missing]


def check_heading_order(driver) -> list[str]:
    levels = driver.execute_script(
        "return Array.from(document.querySelectorAll('main h1, main h2, main h3, main h4, main h5, main h6'))"
        ".filter(h => h.getClientRects().length > 0).map(h => parseInt(h.tagName.substring(1)));"
    )
    problems = []
    if not levels or levels[0] != 1:
        problems.append(f"the page does not start with one h1: {levels[:3]}")
    for prev, cur in zip(levels, levels[1:]):
        if cur > prev + 1:
            problems.append(f"heading level jumps from h{prev} to h{cur}")
    if levels.count(1) > 1:
        problems.append("more than one h1")
    return problems


def check_ledger(driver, claims: list[dict], build: list[dict] | None = None) -> list[str]:
    """One row per ledger entry, each with its id, its role and the verdict of claims.json.

    A page rendered from the evidence record passes the recorded rows as ``claims`` and this build's as
    ``build``: each row then carries two badges, the recorded verdict first, this build's beside it.
    """
    info = driver.execute_script(
        "const t = document.querySelector('table.claims-ledger');"
        "if (!t) return null;"
        "const rows = Array.from(t.querySelectorAll('tbody tr'));"
        "return {badges: t.querySelectorAll('.verdict').length, headline: !!document.querySelector('p.ledger-headline'),"
        " rows: rows.map(r => ({id: (r.querySelector('td code') || {}).textContent,"
        "  role: r.className, verdict: (r.querySelector('.verdict') || {}).className}))};"
    )
    if info is None:
        return ["no claims ledger table"]
    problems = []
    # a recorded row that this build also has shows its verdict beside (a row only the record has: one badge)
    badges = len(claims) + (sum(c["id"] in {b["id"] for b in build} for c in claims) if build is not None else 0)
    if len(info["rows"]) != len(claims) or info["badges"] != badges:
        problems.append(f"ledger shows {len(info['rows'])} rows / {info['badges']} badges for {len(claims)} claims")
    if not info["headline"]:
        problems.append("ledger has no headline (paper claims counted apart from controls and implementation)")
    shown = {r["id"]: (r["role"].replace("row-", ""), (r["verdict"] or "").split("verdict-")[-1].replace("-", "_"))
             for r in info["rows"]}
    expected = {c["id"]: (c.get("role", "claim"), c["verdict"]) for c in claims}
    if shown != expected:
        diff = sorted(k for k in set(shown) | set(expected) if shown.get(k) != expected.get(k))
        problems.append(f"ledger rows differ from claims.json for {diff}")
    return problems


def check_dashboard_counts_paper_claims(driver) -> list[str]:
    """The dashboard's headline table counts paper claims only; controls and implementation apart."""
    text = driver.execute_script("return document.querySelector('main').innerText")
    problems = []
    for needle in ("Paper claims", "reproduced", "not reproduced", "inconclusive", "not checkable",
                   "controls that behaved", "implementation checks passed"):
        if needle not in text:
            problems.append(f"dashboard lacks {needle!r}")
    return problems


def check_download(driver, base: str, slug: str) -> list[str]:
    """The page links its executed notebook, and the link serves a notebook with outputs."""
    from urllib.request import urlopen

    hrefs = driver.execute_script(
        "return Array.from(document.querySelectorAll('a')).map(a => a.getAttribute('href') || '')"
        ".filter(h => h.endsWith('.ipynb'));"
    )
    if not hrefs:
        return ["no download link to the executed notebook"]
    url = urljoin(driver.current_url, hrefs[0])
    with urlopen(url, timeout=10) as resp:  # noqa: S310 - loopback only
        nb = json.loads(resp.read())
    outputs = sum(len(c.get("outputs", [])) for c in nb["cells"] if c["cell_type"] == "code")
    return [] if outputs else [f"downloaded notebook {url} has no outputs"]


def check_solutions_hidden(driver) -> list[str]:
    """Exercise solutions are folded until their toggle is clicked."""
    from selenium.webdriver.common.by import By

    solutions = driver.find_elements(By.CSS_SELECTOR, ".solution.dropdown, div.solution")
    if not solutions:
        return ["no exercise solutions on the page"]
    problems = []
    for sol in solutions:
        body = [el for el in sol.find_elements(By.CSS_SELECTOR, ".admonition-title ~ *")
                if (el.get_attribute("textContent") or "").strip()]
        if not body:
            problems.append("a solution has no content")
            continue
        if any(el.is_displayed() for el in body):
            problems.append("a solution is visible before it is clicked")
            continue
        buttons = sol.find_elements(By.CSS_SELECTOR, "button.toggle-button") or sol.find_elements(
            By.CSS_SELECTOR, ".admonition-title")
        if not buttons:
            problems.append("a solution has no toggle")
            continue
        driver.execute_script("arguments[0].scrollIntoView(); arguments[0].click();", buttons[0])
        driver.implicitly_wait(0)
        import time

        time.sleep(0.3)
        if not any(el.is_displayed() for el in body):
            problems.append("a solution stays hidden after its toggle is clicked")
    return problems


# ---------------------------------------------------------------------------------------- links
class _LinkParser(HTMLParser):
    def __init__(self):
        super().__init__()
        self.links, self.ids = [], set()

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if "id" in attrs:
            self.ids.add(attrs["id"])
        if tag == "a" and attrs.get("name"):
            self.ids.add(attrs["name"])
        for key in ("href", "src"):
            if attrs.get(key) and not (tag == "link" and attrs.get("rel") == "canonical"):
                self.links.append(attrs[key])


def check_internal_links(html_root: Path) -> list[str]:
    """Every relative link and anchor in the book resolves."""
    parsed: dict[Path, _LinkParser] = {}

    def parse(page: Path) -> _LinkParser:
        if page not in parsed:
            p = _LinkParser()
            p.feed(page.read_text(encoding="utf-8", errors="replace"))
            parsed[page] = p
        return parsed[page]

    problems = []
    for page in sorted(html_root.rglob("*.html")):
        if "_static" in page.relative_to(html_root).parts:  # theme templates, not pages
            continue
        for link in parse(page).links:
            url = urlparse(link)
            if url.scheme or link.startswith(("//", "mailto:", "javascript:", "data:")):
                continue
            target = page if not url.path else (page.parent / unquote(url.path)).resolve()
            if target.is_dir():
                target = target / "index.html"
            if not target.exists():
                problems.append(f"{page.relative_to(html_root)}: broken link {link}")
                continue
            if url.fragment and target.suffix == ".html" and url.fragment not in parse(target).ids:
                problems.append(f"{page.relative_to(html_root)}: missing anchor {link}")
    return problems


def page_has_math(path: Path) -> bool:
    text = path.read_text(encoding="utf-8", errors="replace")
    return bool(re.search(r'class="math|\\\(|\\\[', text))


# ------------------------------------------------------------------ the chapter as compendium.bookview shapes it
def check_parameters_once(driver) -> list[str]:
    """One parameters cell (the effective values, origins as comments); Papermill's cell is gone."""
    info = driver.execute_script(
        "const cells = Array.from(document.querySelectorAll('main div.cell'));"
        "return {params: cells.filter(c => c.classList.contains('tag_parameters')).length,"
        " effective: cells.filter(c => c.classList.contains('tag_effective-parameters')).length,"
        " injected: cells.filter(c => c.classList.contains('tag_injected-parameters')).length,"
        " scale: cells.filter(c => /^\\s*scale = /m.test(c.querySelector('.cell_input')?.textContent || '')).length};"
    )
    problems = []
    if info["injected"]:
        problems.append("Papermill's injected-parameters cell is shown")
    if info["params"] != 1 or info["effective"] != 1:
        problems.append(f"{info['params']} parameters cells ({info['effective']} with effective values), expected 1")
    if info["scale"] != 1:
        problems.append(f"'scale = ...' appears in {info['scale']} code cells, expected 1")
    return problems


def check_no_glue_only_cells(driver) -> list[str]:
    """No visible code cell consists only of ``glue(...)`` calls (top-level statements)."""
    shown = driver.execute_script(
        "return Array.from(document.querySelectorAll('main div.cell .cell_input'))"
        ".filter(c => c.getClientRects().length > 0 || c.closest('details')).map(c => c.textContent);"
    )
    glue = re.compile(r"^(_\s*=\s*)?([A-Za-z_][\w.]*\.)?glue\(")
    problems = []
    for text in shown:
        top = [ln for ln in text.splitlines() if ln.strip() and not ln[0].isspace()
               and not ln.startswith(("#", ")", "]", "}"))]
        if top and all(glue.match(ln) for ln in top):
            problems.append(f"a glue-only cell is shown: {top[0][:60]}")
    return problems


def check_plot_code_folded(driver, expect_fold: bool) -> list[str]:
    """Plotting cells sit behind a closed "Show code cell source" toggle that opens on click."""
    from selenium.webdriver.common.by import By

    folds = driver.find_elements(By.CSS_SELECTOR, "div.cell.tag_hide-input details.hide")
    if not folds:
        return ["no folded (hide-input) code cell on a page with figures"] if expect_fold else []
    problems = []
    fold = folds[0]
    code = fold.find_elements(By.CSS_SELECTOR, ".cell_input, pre")
    if fold.get_attribute("open") is not None or any(el.is_displayed() for el in code):
        problems.append("folded code is visible before its toggle is clicked")
    summary = fold.find_element(By.TAG_NAME, "summary")
    if "show code" not in (summary.get_attribute("textContent") or "").lower():
        problems.append(f"the toggle does not say 'show code': {summary.text!r}")
    driver.execute_script("arguments[0].scrollIntoView(); arguments[0].click();", summary)
    import time

    for _ in range(30):  # a loaded machine can take a moment to lay the opened cell out
        time.sleep(0.1)
        if any(el.is_displayed() for el in fold.find_elements(By.CSS_SELECTOR, "pre")):
            break
    if not any(el.is_displayed() for el in fold.find_elements(By.CSS_SELECTOR, "pre")):
        problems.append("folded code stays hidden after its toggle is clicked")
    elif not re.search(r"plt\.|sns\.|\.figure\(|ax", fold.get_attribute("textContent") or ""):
        problems.append("a folded cell holds no plotting code")
    return problems


def check_figure_numbers(driver) -> list[str]:
    """Figure captions are numbered 1, 2, ... in this chapter (not across the book)."""
    numbers = driver.execute_script(
        "return Array.from(document.querySelectorAll('main figure .caption-number'))"
        ".map(s => s.textContent.trim());"
    )
    wanted = [f"Fig. {i}" for i in range(1, len(numbers) + 1)]
    got = [n.rstrip(".").strip() for n in numbers]
    return [] if got == wanted else [f"figure numbers {got}, expected {wanted}"]


def check_source_links(driver, repo_root: Path) -> list[str]:
    """The "Source files" box names the notebook, library and tests; each exists, each link resolves."""
    from selenium.webdriver.common.by import By

    boxes = driver.find_elements(By.CSS_SELECTOR, "main .chapter-sources")
    if len(boxes) != 1:
        return [f"{len(boxes)} 'Source files' boxes, expected 1"]
    box = boxes[0]
    text = box.get_attribute("textContent") or ""
    problems = [f"source box does not name the {what}" for what in ("notebook", "library", "tests")
                if f"{what}:" not in text]
    for el in box.find_elements(By.CSS_SELECTOR, "li code, li a"):
        path = (el.get_attribute("textContent") or "").strip()
        if path.startswith(("notebooks/", "src/", "tests/")) and not (repo_root / path.rstrip("/")).exists():
            problems.append(f"source box names a file that does not exist: {path}")
        href = el.get_attribute("href") if el.tag_name == "a" else None
        if href and not urlparse(href).scheme.startswith("http"):
            problems.append(f"source link is not a repository URL: {href}")
    return problems
