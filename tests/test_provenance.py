"""Provenance: content fingerprints decide reruns, every output is verified before it is used.

Soundness and usefulness on the real compendium, without hours of building: a faked tree gives
every job outputs and true provenance records (``conftest.fake_built_tree``), then edits are made
and the workflow asked what it would rerun (each job's state after ``Plan.refresh_stamps``, and
Snakemake's own dry run). Integrity on the fixture project, really built: truncated and bit-flipped
outputs and assets are named by ``compendium status`` and repaired by the next build, with nothing
else rerun. The projects have their own copy of ``src/`` (the kernel imports it through
PYTHONPATH), so library files can be edited.
"""

from __future__ import annotations

import ast
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

from conftest import REPO, fake_built_tree, make_project, own_src, project_env

from compendium import provenance
from compendium.registry import load_registry
from compendium.snakemake_launch import wants_slurm

REGISTRY = load_registry(REPO / "workflow" / "config" / "chapters.yaml")


# ---------------------------------------------------------------------------- what jobs depend on
def test_assets_do_not_depend_on_the_ledger_but_chapters_do():
    fp = provenance.Fingerprinter()
    assert REGISTRY.assets, "the real registry declares assets"
    for name, spec in REGISTRY.assets.items():
        files = {k.split("::")[0] for k in fp.asset_inputs(spec, "smoke")}
        module = spec["builder"].split(":")[0].replace(".", "/")
        assert any(f.startswith(f"src/{module}") for f in files), (name, files)
        for infra in ("claims.py", "book.py", "cli.py", "chapter.py", "workflow.py", "plotting.py"):
            assert f"src/compendium/{infra}" not in files, (name, infra)
    for entry in REGISTRY.ready:
        files = {k.split("::")[0] for k in fp.chapter_inputs(entry.notebook, {}, "smoke", entry.assets)}
        assert "src/compendium/claims.py" in files and "src/compendium/chapter.py" in files
        own = f"src/compendium/papers/{entry.slug}"
        assert any(f.startswith(own) for f in files), (entry.slug, files)
        others = {f.split("/")[3].removesuffix(".py") for f in files if f.startswith("src/compendium/papers/")}
        # a chapter may import the module that builds (and loads) an asset it declares, e.g. another
        # chapter's shared encoder; any other cross-chapter import is refused
        owners = {REGISTRY.assets[a]["builder"].split(":")[0].split(".")[2] for a in entry.assets}
        assert others <= {entry.slug, "__init__"} | owners, (entry.slug, others)


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
def _run(root: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "compendium.cli", *args], cwd=root, env=project_env(root),
                          capture_output=True, text=True, timeout=900)
    if check and proc.returncode != 0:
        raise AssertionError(f"{args} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc


def _status(root: Path) -> dict[str, str]:
    out = _run(root, "status").stdout
    return {(line.split()[2] if line.split()[1] == "asset" else line.split()[1]).rstrip(":"): line
            for line in out.splitlines() if line.strip() and line.split()[1] != "record"}  # records: test_evidence


_STATES = """
import json
from compendium.workflow import Plan
plan = Plan.from_config({"scale": "smoke"})
plan.refresh_stamps()
print(json.dumps({job: st.state for job, st in plan.states.items()}))
"""


def _reruns(root: Path) -> set[str]:
    """The jobs whose stamps say rerun, as a build's start (or any Snakemake start) sees them."""
    proc = subprocess.run([sys.executable, "-c", _STATES], cwd=root, env=project_env(root), capture_output=True,
                          text=True, timeout=600, check=True)
    return {job for job, state in json.loads(proc.stdout.splitlines()[-1]).items() if state != "current"}


def _jobs(root: Path, *extra: str) -> dict[str, int]:
    """Rule -> number of jobs a dry run schedules, with the project's own profiles."""
    cfg = root / ".snakemake" / "dry.yaml"
    cfg.parent.mkdir(exist_ok=True)
    cfg.write_text(yaml.safe_dump({"scale": "smoke", "overrides": {}, "device": "auto", "profile": "local",
                                   "partial": False}))
    cmd = [sys.executable, "-m", "compendium.snakemake_launch", *extra, "--snakefile",
           str(root / "workflow" / "Snakefile"), "--directory", str(root), "--configfile", str(cfg),
           "--profile", str(root / "workflow" / "profiles" / "local"), "--cores", "1", "--nolock", "--dry-run",
           "--quiet", "rules"]
    proc = subprocess.run(cmd, cwd=root, env=project_env(root), capture_output=True, text=True, timeout=600)
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, text[-3000:]
    if "Nothing to be done" in text:
        return {}
    jobs = {}
    for m in re.finditer(r"^(\w+)\s+(\d+)\s*$", text, re.MULTILINE):
        if m.group(1) != "total":
            jobs[m.group(1)] = int(m.group(2))
    return jobs


def _records(root: Path) -> dict[str, dict]:
    """job -> provenance record of the faked (or built) tree."""
    res = root / "results" / "smoke"
    out = {f"asset-{p.parent.name}": json.loads(p.read_text()) for p in (res / "assets").glob("*/provenance.json")}
    for entry in REGISTRY.ready:
        path = res / entry.slug / "provenance.json"
        if path.is_file():
            out[f"chapter-{entry.slug}"] = json.loads(path.read_text())
    return out


def _change_function(path: Path, name: str) -> None:
    """A real change to top-level function ``name``: one more statement at the end of its body."""
    text = path.read_text(encoding="utf-8")
    node = next(n for n in ast.parse(text).body if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name == name)
    lines = text.splitlines(keepends=True)
    indent = " " * node.body[0].col_offset
    lines.insert(node.end_lineno, f"{indent}_changed_by_a_test = 1\n")
    path.write_text("".join(lines), encoding="utf-8")


def _readers(assets: set[str]) -> tuple[set[str], set[str]]:
    """Chapters that read any of ``assets``, and assets built from them (transitively)."""
    assets = set(assets)
    while True:
        more = {a for a, spec in REGISTRY.assets.items() if set(spec.get("requires", [])) & assets} - assets
        if not more:
            break
        assets |= more
    return {e.slug for e in REGISTRY.ready if set(e.assets) & assets}, assets


# ---------------------------------------------------------------------------- real project, faked build
@pytest.fixture(scope="module")
def faked(tmp_path_factory) -> Path:
    root = own_src(make_project(tmp_path_factory.mktemp("faked") / "project", fixture=False))
    fake_built_tree(root)
    return root


@pytest.mark.e2e
def test_edits_rerun_exactly_the_jobs_whose_code_changed(faked):
    root = faked
    assert _reruns(root) == set() and _jobs(root) == {}, "the faked tree is up to date"
    records = _records(root)
    used = set().union(*(r["inputs"] for r in records.values()))

    # a comment, the module docstring and a reformat in the shared statistics: nothing reruns
    stats = root / "src" / "compendium" / "stats.py"
    original = stats.read_text(encoding="utf-8")
    assert original.startswith('"""') and "\n    return " in original
    stats.write_text(original.replace('"""', '"""Reworded. ', 1).replace("\n    return ", "\n    return  ", 1)
                     + "\n# a comment at the end\n", encoding="utf-8")
    assert _reruns(root) == set()

    # a function nobody's code reaches: nothing reruns
    units = [n.name for n in ast.parse(original).body if isinstance(n, ast.FunctionDef)]
    unused = next(n for n in units if f"src/compendium/stats.py::{n}" not in used)
    _change_function(stats, unused)
    assert _reruns(root) == set(), unused
    stats.write_text(original, encoding="utf-8")

    # a function asset builders call: those assets, the chapters whose own code calls it, and (through
    # Snakemake) every chapter that reads those assets, the claims table and the book
    training = root / "src" / "compendium" / "training.py"
    keys = [k for k in used if k.startswith("src/compendium/training.py::")]
    callers = {k: {j for j, r in records.items() if k in r["inputs"]} for k in keys}
    key = min((k for k in keys if any(j.startswith("asset-") for j in callers[k])), key=lambda k: len(callers[k]))
    saved = training.read_text(encoding="utf-8")
    _change_function(training, key.split("::")[1])
    assert _reruns(root) == callers[key], key
    chapters, assets = _readers({j.removeprefix("asset-") for j in callers[key] if j.startswith("asset-")})
    chapters |= {j.removeprefix("chapter-") for j in callers[key] if j.startswith("chapter-")}
    assert _jobs(root) == {"asset": len(assets), "chapter": len(chapters), "claims_table": 1, "book": 1, "all": 1}
    training.write_text(saved, encoding="utf-8")
    assert _reruns(root) == set()

    # a paper module's `run` and another chapter's prose: those two chapters, the claims table, the book
    lone = next(e for e in REGISTRY.ready if not e.assets)
    run_key = next(k for k in records[f"chapter-{lone.slug}"]["inputs"]
                   if k.startswith(f"src/compendium/papers/{lone.slug}") and k.endswith("::run"))
    _change_function(root / run_key.split("::")[0], "run")
    prose = next(e for e in REGISTRY.ready if e.slug != lone.slug)
    page = root / "notebooks" / prose.notebook.relative_to(REPO / "notebooks")
    (root / "notebooks").unlink()  # the project's own notebooks, to edit one
    shutil.copytree(REPO / "notebooks", root / "notebooks")
    text = page.read_text(encoding="utf-8")
    assert "\n## Limits\n" in text
    page.write_text(text.replace("\n## Limits\n", "\n## Limits\n\nOne more sentence of prose.\n", 1), encoding="utf-8")
    assert _reruns(root) == {f"chapter-{lone.slug}", f"chapter-{prose.slug}"}
    assert _jobs(root) == {"chapter": 2, "claims_table": 1, "book": 1, "all": 1}


@pytest.mark.e2e
def test_outputs_built_before_fingerprints_are_adopted_once(tmp_path):
    """A tree from the rules of file times: chapters' records of file hashes, assets with no record.
    The first start adopts whatever those rules called current (nothing reruns), and only that."""
    root = own_src(make_project(tmp_path / "project", fixture=False))
    fake_built_tree(root)
    legacy = """
import json
from compendium import paths
from compendium.provenance import Fingerprinter, _legacy_chapter_inputs
from compendium.workflow import Plan
plan = Plan.from_config({"scale": "smoke"})
fp = Fingerprinter()
for e in plan.registry.ready:
    path = paths.ROOT / plan.out(e.slug, "provenance.json")
    path.write_text(json.dumps({"inputs": _legacy_chapter_inputs(fp, e, "smoke", plan.params[e.slug])}))
"""
    res = root / "results" / "smoke"
    for record in (res / "assets").glob("*/provenance.json"):
        record.unlink()
    subprocess.run([sys.executable, "-c", legacy], cwd=root, env=project_env(root), check=True, timeout=600)
    later = time.time() + 60
    for i, name in enumerate(provenance.asset_order(REGISTRY)):  # built after every source file they
        for f in (res / "assets" / name).rglob("*"):              # import, and after what they require
            os.utime(f, (later + i, later + i))
    # ... except one, whose builder module changed after it was built: that one is rebuilt
    old = next(a for a, spec in REGISTRY.assets.items() if not spec.get("requires")
               and not any(a in s.get("requires", []) for s in REGISTRY.assets.values()))
    for f in (res / "assets" / old).rglob("*"):
        os.utime(f, (1e9, 1e9))
    chapters, _ = _readers({old})
    assert _jobs(root) == {"asset": 1, "chapter": len(chapters), "claims_table": 1, "book": 1, "all": 1}
    records = _records(root)
    assert all("fingerprint" in r and "outputs" in r for j, r in records.items() if j != f"asset-{old}")
    assert f"asset-{old}" not in records
    assert _reruns(root) == {f"asset-{old}"}


# ---------------------------------------------------------------------------- fixture project, built
DEMO_ASSET = '''"""A paper module for the provenance tests, with an asset (a weight vector of zeros)."""

import json

import numpy as np


def offset():
    return 0.0


def build_asset(out_dir, scale, seed):
    np.save(out_dir / "weights.npy", np.zeros(64))
    (out_dir / "metadata.json").write_text(json.dumps({"metrics": {"norm": 0.0}}))
'''


@pytest.fixture(scope="module")
def prov_project(tmp_path_factory) -> Path:
    """The fixture project with its own src/, and a paper module that demo_mean imports and whose
    asset (``demo_weights``) it reads; built once."""
    root = own_src(make_project(tmp_path_factory.mktemp("prov") / "project"))
    (root / "src" / "compendium" / "papers" / "demo_mean.py").write_text(DEMO_ASSET)
    nb = root / "notebooks" / "theory" / "demo_mean.md"
    text = nb.read_text(encoding="utf-8")
    anchor = "from compendium.runtime import make_rng\n"
    draw = "x = make_rng(seed).standard_normal(num_samples)\n"
    assert anchor in text and draw in text
    text = text.replace(anchor, anchor + "from compendium.assets import asset_dir\n"
                                         "from compendium.papers.demo_mean import offset\n")
    text = text.replace(draw, draw + 'x = x + offset() + np.load(asset_dir("demo_weights", scale) / "weights.npy").sum()\n')
    nb.write_text(text, encoding="utf-8")
    path = root / "workflow" / "config" / "chapters.yaml"
    reg = yaml.safe_load(path.read_text())
    reg["assets"] = {"demo_weights": {"description": "zeros", "builder": "compendium.papers.demo_mean:build_asset"}}
    reg["chapters"][0]["assets"] = ["demo_weights"]
    path.write_text(yaml.safe_dump(reg, sort_keys=False))
    _run(root, "build")
    return root


def _html(root: Path, page: str) -> str:
    return (root / "results" / "smoke" / "book" / "_build" / "html" / page).read_text(encoding="utf-8")


def _flip_bit(path: Path, offset: int = 200) -> None:
    with open(path, "r+b") as fh:
        fh.seek(offset)
        byte = fh.read(1)
        fh.seek(offset)
        fh.write(bytes([byte[0] ^ 1]))


def _mtimes(root: Path) -> dict[str, int]:
    res = root / "results" / "smoke"
    names = ["demo_mean/claims.json", "demo_variance/claims.json", "assets/demo_weights/weights.npy",
             "book/_build/html/index.html", "claims.csv"]
    return {n: (res / n).stat().st_mtime_ns for n in names}


@pytest.mark.e2e
def test_status_names_the_edited_module_and_the_book_marks_it_stale(prov_project):
    root = prov_project
    states = {k: v.split()[0] for k, v in _status(root).items()}
    assert states == {"demo_weights": "current", "demo_mean": "current", "demo_variance": "current"}, states
    record = json.loads((root / "results/smoke/demo_mean/provenance.json").read_text())
    assert {"notebooks/theory/demo_mean.md", "src/compendium/papers/demo_mean.py::offset",
            "src/compendium/claims.py", "parameters", "asset:demo_weights"} <= set(record["inputs"])
    assert set(record["outputs"]) == {"claims.json", "demo_mean.ipynb", "params.yaml", "figures/histogram.png"}
    asset = json.loads((root / "results/smoke/assets/demo_weights/provenance.json").read_text())
    assert record["inputs"]["asset:demo_weights"] == asset["content"] and "weights.npy" in asset["outputs"]
    assert "src/compendium/papers/demo_mean.py" not in json.loads(
        (root / "results/smoke/demo_variance/provenance.json").read_text())["inputs"]

    paper = root / "src" / "compendium" / "papers" / "demo_mean.py"
    saved = paper.read_text()
    paper.write_text(saved + "\n# a comment: no change\n")
    assert _status(root)["demo_mean"].startswith("current")
    _change_function(paper, "offset")
    status = _status(root)
    assert status["demo_mean"].startswith("stale") and "src/compendium/papers/demo_mean.py: offset changed" in status["demo_mean"]
    assert status["demo_variance"].startswith("current") and status["demo_weights"].startswith("current"), status

    # the book staged now (as after a partial build) marks exactly that chapter stale
    code = ("from compendium.book import stage_book; from compendium.registry import load_registry; "
            "from compendium import paths; print(stage_book(load_registry(paths.REGISTRY), 'smoke'))")
    src = Path(subprocess.run([sys.executable, "-c", code], cwd=root, env=project_env(root), capture_output=True,
                              text=True, check=True).stdout.strip())
    dashboard = (src / "dashboard.md").read_text()
    assert "verdict-stale" in dashboard and "src/compendium/papers/demo_mean.py: offset changed" in dashboard
    assert "| chapters stale (inputs changed since their claims were computed) | 1 |" in dashboard
    page = (src / "chapters" / "demo_mean.ipynb").read_text()
    assert "Stale: the inputs of these claims changed" in page
    assert "Stale:" not in (src / "chapters" / "demo_variance.ipynb").read_text()
    paper.write_text(saved)
    assert _status(root)["demo_mean"].startswith("current")


@pytest.mark.e2e
def test_a_corrupted_asset_is_named_and_rebuilt_alone(prov_project):
    """One flipped bit in an asset: `status` names it, `build --only` rebuilds it (nothing else runs:
    its chapter read the good bytes, and the rebuilt ones are the same)."""
    root = prov_project
    weights = root / "results" / "smoke" / "assets" / "demo_weights" / "weights.npy"
    good = weights.read_bytes()
    before = _mtimes(root)
    _flip_bit(weights)
    line = _status(root)["demo_weights"]
    assert line.startswith("invalid") and "results/smoke/assets/demo_weights/weights.npy" in line, line
    from compendium.assets import AssetInvalid  # noqa: F401 - the kernel's asset_dir refuses it (below)

    code = "from compendium.assets import asset_dir; asset_dir('demo_weights', 'smoke')"
    proc = subprocess.run([sys.executable, "-c", code], cwd=root, env=project_env(root), capture_output=True, text=True)
    assert proc.returncode != 0 and "AssetInvalid" in proc.stderr and "weights.npy" in proc.stderr
    proc = _run(root, "build", "--only", "demo_mean")
    assert weights.read_bytes() == good
    after = _mtimes(root)
    assert after["assets/demo_weights/weights.npy"] != before["assets/demo_weights/weights.npy"]  # rebuilt
    assert {k: v for k, v in after.items() if "assets" not in k} == {k: v for k, v in before.items() if "assets" not in k}
    assert all(line.startswith("current") for line in _status(root).values())


@pytest.mark.e2e
def test_truncated_outputs_are_never_trusted_and_rerun_alone(prov_project):
    """A truncated asset and a truncated claims.json: `status` names both, `verdicts` says one line
    (no traceback) and keeps claims.csv; a forced run of the other chapter rebuilds the asset before it
    runs (never on the broken file) and the truncated chapter reruns; nothing else does."""
    root = prov_project
    res = root / "results" / "smoke"
    weights = res / "assets" / "demo_weights" / "weights.npy"
    good_asset = json.loads((res / "assets" / "demo_weights" / "provenance.json").read_text())["content"]
    claims = res / "demo_variance" / "claims.json"
    good_claims = claims.read_bytes()
    os.truncate(weights, 100)
    os.truncate(claims, 20)
    status = _status(root)
    assert status["demo_weights"].startswith("invalid") and status["demo_variance"].startswith("invalid")
    assert "results/smoke/demo_variance/claims.json" in status["demo_variance"]
    verdicts = _run(root, "verdicts", check=False)
    assert verdicts.returncode == 1 and "Traceback" not in verdicts.stderr
    assert "demo_variance: not used, results/smoke/demo_variance/claims.json" in verdicts.stderr
    assert "demo_mean" in verdicts.stdout and (res / "claims.csv").is_file()

    proc = _run(root, "build", "--force", "demo_mean")
    text = proc.stdout + proc.stderr
    assert "Traceback" not in text
    record = json.loads((res / "demo_mean" / "provenance.json").read_text())
    assert record["inputs"]["asset:demo_weights"] == good_asset  # it ran on the rebuilt, good asset
    assert claims.read_bytes() == good_claims
    assert all(line.startswith("current") for line in _status(root).values())


@pytest.mark.e2e
def test_a_flipped_bit_in_a_figure_reruns_that_chapter_only(prov_project):
    root = prov_project
    figure = root / "results" / "smoke" / "demo_mean" / "figures" / "histogram.png"
    before = _mtimes(root)
    _flip_bit(figure)
    assert "figures/histogram.png" in _status(root)["demo_mean"]
    proc = _run(root, "build")
    assert "Finished jobid" in proc.stdout + proc.stderr
    after = _mtimes(root)
    assert after["demo_mean/claims.json"] > before["demo_mean/claims.json"]
    assert after["demo_variance/claims.json"] == before["demo_variance/claims.json"]
    assert after["assets/demo_weights/weights.npy"] == before["assets/demo_weights/weights.npy"]
    assert all(line.startswith("current") for line in _status(root).values())


@pytest.mark.e2e
def test_failed_rerun_keeps_the_last_good_result(prov_project):
    root = prov_project
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


def test_a_chapter_never_starts_on_a_corrupted_asset(tmp_path, monkeypatch):
    """execute_chapter checks every asset it reads before the kernel starts; asset_dir (what a
    notebook calls) refuses it too, naming the file."""
    from compendium import assets, paths
    from compendium.execute import ChapterFailed, execute_chapter

    monkeypatch.setattr(paths, "ROOT", tmp_path)
    monkeypatch.setenv("COMPENDIUM_RESULTS", str(tmp_path / "results"))
    folder = tmp_path / "results" / "smoke" / "assets" / "demo_weights"
    folder.mkdir(parents=True)
    (folder / "weights.bin").write_bytes(b"\0" * 64)
    (folder / ".complete").write_text("demo_weights smoke 0\n")
    record = {"fingerprint": "x", "inputs": {}, "environment": {},
              "outputs": provenance.hash_outputs(folder, [folder])}
    record["content"] = provenance.sha256_json(record["outputs"])
    provenance.write_provenance(folder, record)
    assert assets.asset_dir("demo_weights", "smoke") == folder
    _flip_bit(folder / "weights.bin", 10)
    with pytest.raises(assets.AssetInvalid, match="weights.bin is not the file that was written"):
        assets.asset_dir("demo_weights", "smoke")
    notebook = tmp_path / "nb.md"
    notebook.write_text("```{code-cell} ipython3\nraise SystemExit('the kernel must not start')\n```\n")
    out = tmp_path / "results" / "smoke" / "demo"
    with pytest.raises(ChapterFailed, match="not run: asset 'demo_weights' .* is invalid"):
        execute_chapter(slug="demo", scale="smoke", notebook=notebook, parameters={"seed": 0},
                        output_notebook=out / "demo.ipynb", claims=out / "claims.json", params_file=out / "params.yaml",
                        figures=out / "figures", timeout_s=60, assets=["demo_weights"])


def test_readers_of_an_asset_that_came_back_different_are_found(tmp_path, monkeypatch):
    """A repaired asset is expected to come back bit for bit; when it does not, `compendium build`
    runs once more for the chapters that read the old bytes (readers_of_changed_assets)."""
    from types import SimpleNamespace

    from compendium import paths

    monkeypatch.setattr(paths, "ROOT", tmp_path)
    monkeypatch.setenv("COMPENDIUM_RESULTS", str(tmp_path / "results"))
    res = tmp_path / "results" / "smoke"
    for name, content in (("weights", "new"), ("other", "same")):
        (res / "assets" / name).mkdir(parents=True)
        provenance.write_provenance(res / "assets" / name, {"inputs": {}, "content": content})
    entries = []
    for slug, seen in (("reads_weights", {"asset:weights": "old"}), ("reads_other", {"asset:other": "same"}),
                       ("reads_none", {})):
        (res / slug).mkdir()
        provenance.write_provenance(res / slug, {"inputs": seen})
        entries.append(SimpleNamespace(slug=slug, assets=[k[6:] for k in seen]))
    registry = SimpleNamespace(ready=entries)
    assert provenance.readers_of_changed_assets(registry, "smoke") == ["reads_weights"]
