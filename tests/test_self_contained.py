"""Nothing outside the repository is read at build or test time.

Two checks: no source names a location beside the repository, and the CLI really works from a
copy of the project whose surroundings cannot be read. The second runs the copy in a private
mount namespace where the original repository's sources and the folder beside it are hidden
under empty tmpfs mounts, and with the capabilities that let root ignore file permissions
(``dac_override``, ``dac_read_search``, ``fowner``, ...) dropped, so the copy's parent folder and a
decoy seed folder beside it, owned by ``nobody`` with no access for others, really cannot be
listed or read (as plain root, ``chmod`` would stop nothing). A control test shows the seal holds.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from conftest import REPO

#: Strings that would point outside the repository (built so this file does not match itself).
OUTSIDE = ("shared" + "/seeds", ".." + "/shared", "COMPENDIUM_" + "SEEDS")
SOURCE_DIRS = ("src", "workflow", "tests")
#: Capabilities that would let the sealed run read, chmod or unmount past the seal.
DROPPED_CAPS = ("dac_override", "dac_read_search", "fowner", "chown", "sys_admin", "setuid", "setgid", "setfcap", "setpcap")
#: What a project needs; everything else of the repository stays behind.
PROJECT_PARTS = ("src", "workflow", "book", "kernels", "notebooks", "data", "pyproject.toml", "requirements.lock")


def test_no_source_names_a_location_outside_the_repository():
    hits = []
    for top in SOURCE_DIRS:
        for path in sorted((REPO / top).rglob("*")):
            if not path.is_file() or "__pycache__" in path.parts or path.suffix in {".pyc", ".png", ".pt", ".npz"}:
                continue
            text = path.read_text(encoding="utf-8", errors="replace")
            for needle in OUTSIDE:
                for m in re.finditer(re.escape(needle), text):
                    line = text.count("\n", 0, m.start()) + 1
                    hits.append(f"{path.relative_to(REPO)}:{line}: {needle}")
    assert not hits, "sources point outside the repository:\n" + "\n".join(hits)


def _can_isolate() -> str | None:
    """Why the sealed run cannot happen here (None when it can)."""
    if os.geteuid() != 0:
        return "needs root for a private mount namespace and to drop capabilities"
    if not (shutil.which("unshare") and shutil.which("setpriv")):
        return "needs unshare and setpriv (util-linux)"
    probe = subprocess.run(["unshare", "-m", "sh", "-c", "mount -t tmpfs none /mnt"], capture_output=True)
    if probe.returncode != 0:
        return f"cannot make a mount namespace: {probe.stderr.decode().strip()}"
    return None


def _copy_project(outer: Path) -> Path:
    project = outer / "project"
    project.mkdir()
    ignore = shutil.ignore_patterns("_build", "__pycache__", "*.pyc", "results", ".snakemake")
    for name in PROJECT_PARTS:
        src = REPO / name
        if src.is_dir():
            shutil.copytree(src, project / name, ignore=ignore, symlinks=False)
        elif src.is_file():
            shutil.copy2(src, project / name)
    (project / ".home").mkdir()
    # a decoy beside the project, where a seed folder would sit: unreadable to the run
    decoy = outer / "shared" / "seeds"
    decoy.mkdir(parents=True)
    (decoy / "000_decoy.txt").write_text("decoy\n")
    subprocess.run(["chown", "-R", "nobody:nogroup", str(outer / "shared")], check=True)
    os.chmod(outer / "shared", 0o700)
    os.chown(outer, 65534, 65534)  # nobody's; without root's capabilities the run is just "others":
    os.chmod(outer, 0o701)  # it may pass through to the project, not list or read what is beside it
    return project


def _sealed(project: Path, *argv: str, timeout: int = 300) -> subprocess.CompletedProcess:
    """Run ``argv`` in the project without root's file capabilities, the original sources and surroundings hidden."""
    hide = [REPO / name for name in ("src", "workflow", "book", "notebooks", "kernels", "data", "tests")]
    hide.append(REPO.parent / "shared")
    mounts = " && ".join(f"mount -t tmpfs -o size=1m none {shlex.quote(str(p))}" for p in hide if p.is_dir())
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(project / ".home"),
        "MPLCONFIGDIR": str(project / ".home"),
        "PYTHONPATH": str(project / "src"),
        "COMPENDIUM_ROOT": str(project),
        "HF_HUB_OFFLINE": "1",
    }
    drop = ["setpriv", "--bounding-set=" + ",".join("-" + c for c in DROPPED_CAPS)]
    inner = shlex.join(drop + [sys.executable, *argv])
    cmd = ["unshare", "-m", "sh", "-c", f"{mounts} && cd {shlex.quote(str(project))} && exec {inner}"]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def sealed_project():
    reason = _can_isolate()
    if reason:
        pytest.skip(reason)
    # not under pytest's base temp (mode 700, root's: the capability-less run could not reach the project)
    outer = Path(tempfile.mkdtemp(prefix="compendium-sealed-"))
    try:
        yield _copy_project(outer)
    finally:
        shutil.rmtree(outer, ignore_errors=True)


def test_the_seal_really_hides_the_surroundings(sealed_project):
    """The control: inside the seal the original sources, the parent folder and the decoy are unreadable."""
    probe = (
        "import os, sys\n"
        f"for p in {[str(REPO / 'src' / 'compendium'), str(sealed_project.parent), str(sealed_project.parent / 'shared' / 'seeds')]!r}:\n"
        "    try:\n"
        "        os.listdir(p); print('READABLE', p)\n"
        "    except (PermissionError, FileNotFoundError):\n"
        "        print('hidden', p)\n"
        "import compendium; print('imports', compendium.__file__)\n"
    )
    proc = _sealed(sealed_project, "-c", probe)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "READABLE" not in proc.stdout, proc.stdout
    assert f"imports {sealed_project}/src/compendium/__init__.py" in proc.stdout


def test_registry_and_validate_work_with_nothing_beside_the_project(sealed_project):
    load = _sealed(sealed_project, "-c", "from compendium.registry import load_registry; r = load_registry(); print(len(r.chapters), len(r.ready))")
    assert load.returncode == 0, load.stderr[-3000:]
    assert load.stdout.split()[0] == "38"
    validate = _sealed(sealed_project, "-m", "compendium.cli", "validate")
    assert validate.returncode == 0, validate.stdout[-2000:] + validate.stderr[-3000:]
    assert "registry OK: 38 chapters" in validate.stdout


def test_data_verify_works_with_nothing_beside_the_project(sealed_project):
    proc = _sealed(sealed_project, "-m", "compendium.cli", "data", "verify")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert "ok" in proc.stdout


@pytest.mark.e2e
def test_a_fixture_build_works_with_nothing_beside_the_project():
    """The whole path (pre-flight, Snakemake, Papermill, Jupyter Book) reads nothing outside the copy."""
    reason = _can_isolate()
    if reason:
        pytest.skip(reason)
    outer = Path(tempfile.mkdtemp(prefix="compendium-sealed-build-"))
    try:
        project = _copy_project(outer)
        fixture = REPO / "tests" / "fixtures" / "project"
        shutil.rmtree(project / "notebooks")
        shutil.copytree(fixture / "notebooks", project / "notebooks")
        shutil.copy(fixture / "workflow" / "config" / "chapters.yaml", project / "workflow" / "config" / "chapters.yaml")
        proc = _sealed(project, "-m", "compendium.cli", "build", "--cores", "2", timeout=900)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-4000:]
        assert (project / "results" / "smoke" / "book" / "_build" / "html" / "index.html").is_file()
    finally:
        shutil.rmtree(outer, ignore_errors=True)
