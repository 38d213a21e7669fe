"""The book on paper and published: a PDF of the whole book, and one archive a reader opens.

``python -m compendium.publish pdf`` (``make pdf``) builds Jupyter Book's ``singlehtml`` from the
staged sources of a scale (``results/<scale>/book/src``, see :mod:`compendium.book`), serves it
on loopback and has Debian's headless Chromium print it to ``results/<scale>/book/compendium.pdf``,
offline. Chromium runs with a virtual-time budget, so MathJax finishes typesetting (and its fonts
load) before the page is printed; ``book/_static/compendium.css`` holds the print styles.

``python -m compendium.publish archive`` (``make publish``) copies the HTML site and the PDF into
``results/<scale>/book/site`` (what the GitHub Pages workflow deploys) and packs that folder into
``results/<scale>/compendium-book.tar.gz``. Sphinx writes relative links only, so the extracted
site opens from disk or from any static server.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlparse

from . import paths

PDF_NAME = "compendium.pdf"
ARCHIVE_NAME = "compendium-book.tar.gz"
SITE_DIR = "compendium-book"  # the folder inside the archive


class PublishFailed(RuntimeError):
    """The singlehtml build, the print or the archive did not produce its file."""


def book_dir(scale: str) -> Path:
    return paths.results_root() / scale / "book"


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    raise PublishFailed("make pdf needs Chromium (Debian: apt-get install chromium); none found on PATH")


# ---------------------------------------------------------------------------- pdf
def build_singlehtml(registry, scale: str, log=None) -> Path:
    """Stage the book and build the one-page HTML; return its ``index.html``."""
    from .book import stage_book

    src = stage_book(registry, scale)
    out = src.parent
    cmd = [str(Path(sys.executable).with_name("jupyter-book")), "build", str(src), "--path-output", str(out),
           "--builder", "singlehtml", "--keep-going"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYDEVD_DISABLE_FILE_VALIDATION": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=paths.ROOT)
    if log is not None:
        log.write(proc.stdout + proc.stderr)
    import yaml

    root = yaml.safe_load((src / "_toc.yml").read_text(encoding="utf-8"))["root"]
    index = out / "_build" / "singlehtml" / f"{root}.html"  # the whole book; index.html redirects to it
    if proc.returncode != 0 or not index.is_file():
        raise PublishFailed(f"jupyter-book singlehtml build failed:\n{(proc.stdout + proc.stderr)[-3000:]}")
    return index


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def print_to_pdf(index: Path, pdf: Path, *, budget_ms: int = 120_000, timeout_s: int = 600) -> Path:
    """Print ``index`` (served on 127.0.0.1) to ``pdf`` with headless Chromium."""
    handler = functools.partial(_Quiet, directory=str(index.parent))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    pdf.parent.mkdir(parents=True, exist_ok=True)
    partial = pdf.with_suffix(".partial.pdf")
    partial.unlink(missing_ok=True)
    try:
        with tempfile.TemporaryDirectory(prefix="chromium-pdf-") as profile:
            cmd = [chromium(), "--headless", "--no-sandbox", "--single-process", "--no-zygote", "--disable-gpu",
                   "--disable-dev-shm-usage", "--no-first-run", "--disable-background-networking",
                   "--disable-component-update", "--disable-sync", "--run-all-compositor-stages-before-draw",
                   f"--virtual-time-budget={budget_ms}", "--no-pdf-header-footer", f"--user-data-dir={profile}",
                   f"--print-to-pdf={partial}", f"http://127.0.0.1:{httpd.server_address[1]}/{index.name}"]
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    finally:
        httpd.shutdown()
        httpd.server_close()
    if not partial.is_file() or partial.stat().st_size == 0:
        raise PublishFailed(f"Chromium wrote no PDF (exit {proc.returncode}):\n{proc.stderr[-2000:]}")
    partial.replace(pdf)  # a finished PDF or none: never a half-written one under the real name
    return pdf


def build_pdf(registry, scale: str, log=None) -> Path:
    """``results/<scale>/book/compendium.pdf`` of the whole book at ``scale``."""
    index = build_singlehtml(registry, scale, log=log)
    return print_to_pdf(index, book_dir(scale) / PDF_NAME)


# ---------------------------------------------------------------------------- archive
class _Refs(HTMLParser):
    def __init__(self):
        super().__init__()
        self.refs: list[str] = []

    def handle_starttag(self, tag, attrs):
        for key, value in attrs:
            if key in ("href", "src") and value:
                self.refs.append(value)


def nonlocal_references(page: Path) -> list[str]:
    """References of ``page`` that are absolute paths or relative paths that do not exist."""
    parser = _Refs()
    parser.feed(page.read_text(encoding="utf-8", errors="replace"))
    problems = []
    for ref in parser.refs:
        url = urlparse(ref)
        if url.scheme or ref.startswith(("#", "mailto:", "javascript:", "data:")):
            continue
        if ref.startswith("/"):
            problems.append(f"absolute path: {ref}")
            continue
        target = page.parent / unquote(url.path)
        if url.path and not target.exists():
            problems.append(f"missing: {ref}")
    return problems


def assemble_site(scale: str) -> Path:
    """``results/<scale>/book/site``: the HTML build plus the PDF, ready to deploy."""
    html = book_dir(scale) / "_build" / "html"
    pdf = book_dir(scale) / PDF_NAME
    if not (html / "index.html").is_file():
        raise PublishFailed(f"no HTML book at {html}: run `make book` first")
    if not pdf.is_file():
        raise PublishFailed(f"no PDF at {pdf}: run `make pdf` first")
    site = book_dir(scale) / "site"
    shutil.rmtree(site, ignore_errors=True)
    shutil.copytree(html, site, ignore=shutil.ignore_patterns(".buildinfo", ".doctrees"))
    shutil.copy2(pdf, site / PDF_NAME)
    (site / ".nojekyll").write_text("")  # GitHub Pages: serve _static/ and _images/ as they are
    problems = nonlocal_references(site / "index.html")
    if problems:
        raise PublishFailed("index.html references files the site does not hold:\n" + "\n".join(problems[:20]))
    return site


def write_archive(scale: str) -> Path:
    """``results/<scale>/compendium-book.tar.gz`` with the site (and PDF) under ``compendium-book/``."""
    site = assemble_site(scale)
    archive = paths.results_root() / scale / ARCHIVE_NAME
    partial = archive.with_name(archive.name + ".partial")
    with tarfile.open(partial, "w:gz") as tar:
        tar.add(site, arcname=SITE_DIR)
    partial.replace(archive)
    return archive


# ---------------------------------------------------------------------------- command line
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m compendium.publish", description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=("pdf", "archive"), help="pdf: the book's PDF; archive: site + PDF, packed")
    parser.add_argument("--scale", default="smoke")
    args = parser.parse_args(argv)
    from .registry import load_registry

    try:
        registry = load_registry()
        registry.check_scale(args.scale)
        if args.what == "pdf":
            out = build_pdf(registry, args.scale)
        else:
            out = write_archive(args.scale)
    except (PublishFailed, ValueError, subprocess.TimeoutExpired) as err:
        print(f"compendium publish: {err}", file=sys.stderr)
        return 1
    print(out.relative_to(paths.ROOT) if out.is_relative_to(paths.ROOT) else out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
