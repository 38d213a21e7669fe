"""Shared fixtures: throw-away copies of the project for workflow tests.

A *project* here is a temporary folder laid out like the repository (workflow/, book/, kernels/,
notebooks/, a link to src/) in which `compendium build` runs with COMPENDIUM_ROOT pointing at it,
so tests never touch the repository's own results/.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FIXTURE = REPO / "tests" / "fixtures" / "project"


def make_project(dest: Path, *, fixture: bool = True) -> Path:
    """Lay out a project in ``dest``: the fixture registry and notebooks, or the real ones."""
    for name in ("workflow", "book", "kernels", "data"):
        shutil.copytree(REPO / name, dest / name, ignore=shutil.ignore_patterns("_build", "__pycache__"))
    (dest / "src").symlink_to(REPO / "src")
    if fixture:
        shutil.copytree(FIXTURE / "notebooks", dest / "notebooks")
        shutil.copy(FIXTURE / "workflow" / "config" / "chapters.yaml", dest / "workflow" / "config" / "chapters.yaml")
    else:
        (dest / "notebooks").symlink_to(REPO / "notebooks")
        shutil.copy(REPO / "requirements.lock", dest / "requirements.lock")  # part of every record's inputs
        if (REPO / "evidence").is_dir():  # the results of record, rendered by every build as a reader gets it
            shutil.copytree(REPO / "evidence", dest / "evidence")
    return dest


def registry_with(tmp_path: Path, mutate) -> Path:
    """The real registry, changed in place by ``mutate(raw_dict)`` and written to ``tmp_path``."""
    import yaml

    raw = yaml.safe_load((REPO / "workflow" / "config" / "chapters.yaml").read_text())
    mutate(raw)
    out = tmp_path / "chapters.yaml"
    out.write_text(yaml.safe_dump(raw, sort_keys=False))
    return out


def hippo(raw: dict) -> dict:
    """The continuized_hippo block of a raw registry (the chapter the registry tests mutate)."""
    return next(c for c in raw["chapters"] if c["slug"] == "continuized_hippo")


def kernel_env() -> dict:
    """Environment for a kernel-test subprocess: Triton's interpreter on the CPU by default,
    compiled on CUDA when COMPENDIUM_KERNEL_DEVICE=cuda (benchmarks/gpu_check.sh sets it)."""
    env = dict(os.environ)
    if env.get("COMPENDIUM_KERNEL_DEVICE", "cpu") == "cuda":
        env.pop("TRITON_INTERPRET", None)
    else:
        env["TRITON_INTERPRET"] = "1"
    return env


def run_kernel_script(script: str, *args: str, env: dict | None = None, timeout: int = 300):
    """Run a kernel test's script in a subprocess (``kernel_env()`` unless ``env`` is given: Triton's
    interpreter on the CPU, compiled on CUDA under COMPENDIUM_KERNEL_DEVICE=cuda) and return the JSON
    its last line prints."""
    proc = subprocess.run([sys.executable, "-c", script, *args], env=kernel_env() if env is None else env,
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def own_src(root: Path) -> Path:
    """Replace a project's link to the repository's src/ by a copy it may edit (the kernel and every
    subprocess import that copy through PYTHONPATH, see ``project_env``)."""
    (root / "src").unlink()
    shutil.copytree(REPO / "src", root / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    return root


_FAKE_TREE = """
import os, time
from compendium.provenance import (Fingerprinter, asset_folder, asset_order, chapter_outputs, hash_outputs,
                                   make_record, sha256_json, write_provenance)
from compendium.workflow import Plan
plan = Plan.from_config({"scale": "smoke"})
fp = Fingerprinter()
for name in asset_order(plan.registry):
    folder = asset_folder(name, "smoke")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / ".complete").write_text("fake\\n")
    (folder / "weights.bin").write_bytes(name.encode())
    record = make_record(fp.asset_inputs(plan.registry.assets[name], "smoke"), fp.environment())
    record["outputs"] = hash_outputs(folder, [folder])
    record["content"] = sha256_json(record["outputs"])
    write_provenance(folder, record)
    fp.forget_asset(name, "smoke")
res = folder.parents[1] if plan.registry.assets else None
for entry in plan.registry.ready:
    out = plan.out(entry.slug, "")
    from compendium import paths
    out = paths.ROOT / out
    (out / "figures").mkdir(parents=True, exist_ok=True)
    for f in (f"{entry.slug}.ipynb", "claims.json", "params.yaml", "figures/f.png"):
        (out / f).write_text(entry.slug + "\\n")
    record = make_record(fp.chapter_inputs(entry.notebook, plan.params[entry.slug], "smoke", entry.assets),
                         fp.environment())
    record["outputs"] = hash_outputs(out, chapter_outputs(out, entry.slug))
    write_provenance(out, record)
    bench = paths.ROOT / plan.benchmark(entry.slug)
    bench.parent.mkdir(parents=True, exist_ok=True)
    bench.write_text("s\\tcpu_time\\n1\\t1\\n")
later = time.time() + 5
for path in (paths.ROOT / plan.claims_csv(), paths.ROOT / plan.book_index()):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("fake\\n")
    os.utime(path, (later, later))
    later += 1
fp.save()
"""


def fake_built_tree(root: Path, env: dict | None = None) -> None:
    """Give every job of the project at ``root`` outputs and provenance as a finished smoke build
    would (fake contents, true fingerprints): a built tree without the hours of building."""
    subprocess.run([sys.executable, "-c", _FAKE_TREE], cwd=root, env=env or project_env(root), check=True,
                   capture_output=True, text=True, timeout=600)


def project_env(root: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMPENDIUM_")}
    env.update({"COMPENDIUM_ROOT": str(root), "HF_HUB_OFFLINE": "1"})
    if (root / "src").is_dir() and not (root / "src").is_symlink():  # a project with its own src/
        env["PYTHONPATH"] = str(root / "src")
    return env


def compendium(root: Path, *args: str, check: bool = False, timeout: int = 900, prefix=()) -> subprocess.CompletedProcess:
    """Run the ``compendium`` CLI against the project at ``root``."""
    cmd = [*prefix, sys.executable, "-m", "compendium.cli", *args]
    proc = subprocess.run(cmd, cwd=root, env=project_env(root), capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(args)} failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
    return proc


@pytest.fixture
def project(tmp_path) -> Path:
    return make_project(tmp_path / "project")


@pytest.fixture(scope="module")
def built_project(tmp_path_factory) -> Path:
    """The fixture project after one successful smoke build (shared by a test module)."""
    root = make_project(tmp_path_factory.mktemp("built") / "project")
    compendium(root, "build", check=True)
    return root


def can_cut_network() -> bool:
    """Whether ``unshare -n`` can make a network namespace here (root on Linux)."""
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return False
    probe = subprocess.run(["unshare", "-n", "sh", "-c", "ip link set lo up"], capture_output=True)
    return probe.returncode == 0


@pytest.fixture(scope="session")
def smoke_book(tmp_path_factory):
    """The real compendium built at the smoke scale in a throw-away project, network cut if possible.

    Returns ``(root, completed_process)``; shared by the smoke-book and browser tests.
    """
    reuse = os.environ.get("COMPENDIUM_TEST_SMOKE_PROJECT")  # iterate on book tests without rebuilding
    if reuse:
        return Path(reuse), subprocess.CompletedProcess([], 0, "", "")
    root = make_project(tmp_path_factory.mktemp("smoke") / "project", fixture=False)
    cmd = [sys.executable, "-m", "compendium.cli", "build"]
    if can_cut_network():
        cmd = ["unshare", "-n", "sh", "-c", "ip link set lo up && exec " + " ".join(cmd)]
    proc = subprocess.run(cmd, cwd=root, env=project_env(root), capture_output=True, text=True, timeout=3600)
    return root, proc
