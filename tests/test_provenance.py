"""Provenance: inputs from imports, ``compendium status``, stale badges, and the last good result.

The workflow tests run on copies of the project whose ``src/`` is a real copy (not the usual link
to the repository), so that they can edit library files; the kernel imports that copy through
PYTHONPATH.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from conftest import REPO, make_project, project_env

from compendium import provenance
from compendium.registry import load_registry
from compendium.snakemake_launch import wants_slurm

REGISTRY = load_registry(REPO / "workflow" / "config" / "chapters.yaml")


# ---------------------------------------------------------------------------- the import graph
def test_assets_do_not_depend_on_the_ledger_but_chapters_do():
    assert REGISTRY.assets, "the real registry declares assets"
    for name, spec in REGISTRY.assets.items():
        files = provenance.builder_sources(spec["builder"])
        module = spec["builder"].split(":")[0].replace(".", "/")
        assert any(f.startswith(f"src/{module}") for f in files), (name, files)
        for infra in ("claims.py", "book.py", "cli.py", "chapter.py", "workflow.py", "plotting.py"):
            assert f"src/compendium/{infra}" not in files, (name, infra)
    for entry in REGISTRY.ready:
        files = provenance.notebook_sources(entry.notebook)
        assert "src/compendium/claims.py" in files and "src/compendium/chapter.py" in files
        own = f"src/compendium/papers/{entry.slug}"
        assert any(f.startswith(own) for f in files), (entry.slug, files)
        others = {f.split("/")[3].removesuffix(".py") for f in files if f.startswith("src/compendium/papers/")}
        # a chapter may import the module that builds (and loads) an asset it declares, e.g. another
        # chapter's shared encoder; any other cross-chapter import is refused
        owners = {REGISTRY.assets[a]["builder"].split(":")[0].split(".")[2] for a in entry.assets}
        assert others <= {entry.slug, "__init__"} | owners, (entry.slug, others)


def test_relative_and_from_imports_resolve():
    src = "from .claims import Ledger\nfrom . import runtime\nimport compendium.stats as s\n"
    assert provenance.imported_modules(src, "compendium.chapter") >= {
        "compendium.claims", "compendium.runtime", "compendium.stats"}
    inner = "from ...runtime import make_rng\n"  # from compendium/papers/x/y.py
    assert "compendium.runtime" in provenance.imported_modules(inner, "compendium.papers.x.y")
    assert provenance.imported_modules("import numpy\nfrom torch import nn\n") == set()


def test_closures_follow_edits_within_one_process(tmp_path, monkeypatch):
    """The parse caches (one parse per file version) never hide an edit: a new import in a library
    file shows in the closure of a notebook that did not change."""
    lib = tmp_path / "src" / "compendium"
    lib.mkdir(parents=True)
    (lib / "__init__.py").write_text("")
    (lib / "a.py").write_text("import numpy\n")
    (lib / "b.py").write_text("")
    notebook = tmp_path / "nb.md"
    notebook.write_text("```{code-cell} ipython3\nfrom compendium import a\n```\n")
    monkeypatch.setattr(provenance.paths, "ROOT", tmp_path)
    assert provenance.notebook_sources(notebook) == ["src/compendium/__init__.py", "src/compendium/a.py"]
    (lib / "a.py").write_text("from compendium import b\n")
    os.utime(lib / "a.py", ns=(1, 1))  # a different version even on a coarse-mtime filesystem
    assert provenance.notebook_sources(notebook) == [
        "src/compendium/__init__.py", "src/compendium/a.py", "src/compendium/b.py"]
    assert provenance.library_closure(["compendium.a"]) == [lib / "__init__.py", lib / "a.py", lib / "b.py"]


def test_importing_a_paper_module_does_not_load_the_ledger():
    code = ("import sys, compendium.papers.continuized_hippo, compendium.workflow\n"
            "print('compendium.claims' in sys.modules, 'scipy.stats' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split()[0] == "False"


def test_slurm_plugin_is_loaded_only_for_the_slurm_profile():
    assert wants_slurm(["--profile", "/x/workflow/profiles/slurm", "--cores", "2"])
    assert wants_slurm(["--executor", "slurm"]) and wants_slurm(["-e", "slurm"])
    assert wants_slurm(["--profile=workflow/profiles/slurm"])
    assert not wants_slurm(["--profile", "workflow/profiles/local"])
    assert not wants_slurm(["--executor", "slurm-jobstep"])
    code = ("from compendium.snakemake_launch import hide_plugin; import pkgutil; hide_plugin();"
            "names = {m.name for m in pkgutil.iter_modules()};"
            "print('snakemake_executor_plugin_slurm' in names)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


# ---------------------------------------------------------------------------- helpers
def _own_src(root: Path) -> Path:
    """Replace the project's link to the repository's src/ by a copy it may edit."""
    (root / "src").unlink()
    shutil.copytree(REPO / "src", root / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    if (REPO / "data").is_dir() and not (root / "data").exists():
        shutil.copytree(REPO / "data", root / "data")
    return root


def _env(root: Path) -> dict:
    env = project_env(root)
    env["PYTHONPATH"] = str(root / "src")
    return env


def _run(root: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "compendium.cli", *args], cwd=root, env=_env(root),
                          capture_output=True, text=True, timeout=900)
    if check and proc.returncode != 0:
        raise AssertionError(f"{args} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc


def _status(root: Path) -> dict[str, str]:
    out = _run(root, "status").stdout
    return {line.split()[1].rstrip(":"): line for line in out.splitlines() if line.strip()}


def _bump(path: Path, ahead_s: float = 0) -> None:
    """Edit a file's content (a comment); for dry runs over faked outputs, date it ``ahead_s`` ahead."""
    path.write_text(path.read_text(encoding="utf-8") + "\n# edited by a test\n", encoding="utf-8")
    if ahead_s:  # never for a real run: Snakemake refuses outputs older than their inputs
        future = time.time() + ahead_s
        os.utime(path, (future, future))


# ---------------------------------------------------------------------------- real project, dry run
def _jobs(root: Path) -> dict[str, int]:
    """Rule -> number of jobs a dry run schedules (mtime decides, as after an edit)."""
    cfg = root / ".snakemake" / "dry.yaml"
    cfg.parent.mkdir(exist_ok=True)
    cfg.write_text(yaml.safe_dump({"scale": "smoke", "overrides": {}, "device": "auto", "profile": "local",
                                   "partial": False}))
    cmd = [sys.executable, "-m", "compendium.snakemake_launch", "--snakefile", str(root / "workflow" / "Snakefile"),
           "--directory", str(root), "--configfile", str(cfg), "--cores", "1", "--nolock", "--dry-run",
           "--rerun-triggers", "mtime", "--quiet", "rules"]
    proc = subprocess.run(cmd, cwd=root, env=_env(root), capture_output=True, text=True, timeout=300)
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, text[-3000:]
    if "Nothing to be done" in text:
        return {}
    jobs = {}
    for m in re.finditer(r"^(\w+)\s+(\d+)\s*$", text, re.MULTILINE):
        if m.group(1) != "total":
            jobs[m.group(1)] = int(m.group(2))
    return jobs


def _fake_outputs(root: Path, ahead_s: float = 60) -> None:
    """Outputs of every job, newer than every input: a built tree without the hours of building."""
    reg = yaml.safe_load((root / "workflow" / "config" / "chapters.yaml").read_text())
    res = root / "results" / "smoke"
    for name in reg.get("assets") or {}:
        (res / "assets" / name).mkdir(parents=True, exist_ok=True)
        (res / "assets" / name / ".complete").write_text("fake\n")
    for ch in reg["chapters"]:
        if ch.get("status") != "ready":
            continue
        out = res / ch["slug"]
        (out / "figures").mkdir(parents=True, exist_ok=True)
        for name in (f"{ch['slug']}.ipynb", "claims.json", "params.yaml"):
            (out / name).write_text("{}\n")
        (res / "benchmarks").mkdir(exist_ok=True)
        (res / "benchmarks" / f"{ch['slug']}.tsv").write_text("s\n1\n")
    (res / "claims.csv").write_text("\n")
    (res / "book" / "_build" / "html").mkdir(parents=True, exist_ok=True)
    (res / "book" / "_build" / "html" / "index.html").write_text("\n")
    later = time.time() + ahead_s
    # order matters for mtime: assets < chapters < benchmarks < claims table < book
    for i, pattern in enumerate(["assets/*", "*/figures", "*/*.*", "benchmarks/*", "claims.csv", "book/_build/html/index.html"]):
        for p in res.glob(pattern):
            os.utime(p, (later + i, later + i))


@pytest.mark.e2e
def test_shared_edit_reruns_only_its_importers(tmp_path):
    root = _own_src(make_project(tmp_path / "project", fixture=False))
    _fake_outputs(root)
    assert _jobs(root) == {}, "the faked tree is up to date"

    _bump(root / "src" / "compendium" / "claims.py", ahead_s=120)
    jobs = _jobs(root)
    assert "asset" not in jobs, jobs  # no builder imports the ledger
    assert jobs.get("chapter") == len(REGISTRY.ready) and jobs.get("book") == 1, jobs

    _fake_outputs(root, ahead_s=300)  # "rebuilt"; now one paper module without an asset
    lone = next(e for e in REGISTRY.ready if not e.assets)
    module = next(p for p in provenance.notebook_sources(lone.notebook) if f"papers/{lone.slug}" in p)
    module = Path(module)
    _bump(root / module, ahead_s=400)
    jobs = _jobs(root)
    assert jobs == {"chapter": 1, "claims_table": 1, "book": 1, "all": 1}, jobs


# ---------------------------------------------------------------------------- fixture project, built
@pytest.fixture(scope="module")
def prov_project(tmp_path_factory) -> Path:
    """The fixture project with its own src/ and a paper module that demo_mean imports; built once."""
    root = _own_src(make_project(tmp_path_factory.mktemp("prov") / "project"))
    papers = root / "src" / "compendium" / "papers"
    (papers / "demo_mean.py").write_text('"""A paper module for the provenance tests."""\n\n\ndef offset():\n'
                                         "    return 0.0\n")
    nb = root / "notebooks" / "theory" / "demo_mean.md"
    text = nb.read_text(encoding="utf-8")
    anchor = "from compendium.runtime import make_rng\n"
    assert anchor in text
    nb.write_text(text.replace(anchor, anchor + "from compendium.papers.demo_mean import offset\n"), encoding="utf-8")
    _run(root, "build")
    return root


def _html(root: Path, page: str) -> str:
    return (root / "results" / "smoke" / "book" / "_build" / "html" / page).read_text(encoding="utf-8")


@pytest.mark.e2e
def test_status_names_the_edited_module_and_the_book_marks_it_stale(prov_project):
    root = prov_project
    assert [line.split()[0] for line in _status(root).values()] == ["current", "current"]
    record = json.loads((root / "results/smoke/demo_mean/provenance.json").read_text())["inputs"]
    assert {"notebooks/theory/demo_mean.md", "src/compendium/papers/demo_mean.py", "src/compendium/claims.py",
            "parameters"} <= set(record)
    assert "src/compendium/papers/demo_mean.py" not in json.loads(
        (root / "results/smoke/demo_variance/provenance.json").read_text())["inputs"]

    _bump(root / "src" / "compendium" / "papers" / "demo_mean.py")
    status = _status(root)
    assert status["demo_mean"].startswith("stale") and "src/compendium/papers/demo_mean.py changed" in status["demo_mean"]
    assert status["demo_variance"].startswith("current"), status

    # the book staged now (as after a partial build) marks exactly that chapter stale
    code = ("from compendium.book import stage_book; from compendium.registry import load_registry; "
            "from compendium import paths; print(stage_book(load_registry(paths.REGISTRY), 'smoke'))")
    src = Path(subprocess.run([sys.executable, "-c", code], cwd=root, env=_env(root), capture_output=True,
                              text=True, check=True).stdout.strip())
    dashboard = (src / "dashboard.md").read_text()
    assert "verdict-stale" in dashboard and "src/compendium/papers/demo_mean.py changed" in dashboard
    assert "| chapters stale (inputs changed since their claims were computed) | 1 |" in dashboard
    page = (src / "chapters" / "demo_mean.ipynb").read_text()
    assert "Stale: the inputs of these claims changed" in page
    assert "Stale:" not in (src / "chapters" / "demo_variance.ipynb").read_text()


@pytest.mark.e2e
def test_failed_rerun_keeps_the_last_good_result(prov_project):
    root = prov_project
    _run(root, "build")  # bring demo_mean up to date after the edit above
    out = root / "results" / "smoke" / "demo_mean"
    good = {name: (out / name).read_bytes() for name in ("claims.json", "demo_mean.ipynb", "params.yaml")}
    kept = out / provenance.LAST_GOOD
    assert {p.name for p in kept.iterdir()} == {"claims.json", "demo_mean.ipynb", "params.yaml", "figures",
                                               "provenance.json"}
    assert all((kept / name).read_bytes() == data for name, data in good.items())

    proc = _run(root, "build", "--set", "demo_mean.explode=true", check=False)
    assert proc.returncode != 0 and "injected failure" in proc.stdout + proc.stderr
    assert not (out / "claims.json").exists()  # Snakemake removed the failed job's outputs ...
    assert all((kept / name).read_bytes() == data for name, data in good.items())  # ... not these
    assert (kept / "figures" / "histogram.png").is_file()

    chapter = _html(root, "chapters/demo_mean.html")
    assert "last good result" in chapter and "injected failure in the experiment cell" in chapter
    assert "claims-ledger" in chapter and "verdict-pass" in chapter  # the last good ledger is shown
    assert "verdict-stale" in _html(root, "dashboard.html")
    dashboard = (root / "results" / "smoke" / "book" / "src" / "dashboard.md").read_text()  # as staged
    assert "| chapters failed, showing last good result | 1 |" in dashboard
    assert "| chapters failed, no result | 0 |" in dashboard
    assert "Last good claims of chapters whose rerun failed" in dashboard
    status = _status(root)["demo_mean"]
    assert status.startswith("stale") and "last run failed" in status

    _run(root, "build")  # repaired: current again, the failure gone
    assert _status(root)["demo_mean"].startswith("current")
    chapter = _html(root, "chapters/demo_mean.html")
    assert "last good result" not in chapter and "Stale:" not in chapter


def test_asset_metrics_record_training_and_environment(tmp_path):
    from compendium.assets import write_metrics

    (tmp_path / "metadata.json").write_text(json.dumps({"metrics": {"final_loss": 0.25}, "test_indices": [1, 2]}))
    record = json.loads(write_metrics(tmp_path).read_text())
    assert record["training"] == {"final_loss": 0.25}
    env = record["environment"]
    assert {"python", "numpy", "torch"} <= set(env["versions"]) and env["machine"]["cpu"]
    assert isinstance(env["machine"]["instruction_set"], list) and env["torch"]["intra_op_threads"] >= 1
    own = tmp_path / "own"
    own.mkdir()
    (own / "metrics.json").write_text(json.dumps({"losses": {"0": [1.0, 0.5]}}))  # a builder's own file is kept
    record = json.loads(write_metrics(own, result=None).read_text())
    assert record["losses"] == {"0": [1.0, 0.5]} and "environment" in record
    assert json.loads(write_metrics(tmp_path / "own", result={"x": 1}).read_text())["losses"]
