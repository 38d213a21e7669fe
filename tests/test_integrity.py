"""Integrity under faults: a killed build, a full disk, hostile input (issue 79, items 3-13).

The full-disk cases run on a small tmpfs (root only: skipped elsewhere); the kill cases with real
processes, orphaned by ``kill -KILL`` of their parent.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from compendium import cli, locks
from conftest import compendium as compendium_cli

REPO = Path(__file__).resolve().parents[1]


def _wait_for(path: Path, timeout: float = 30.0) -> str:
    end = time.time() + timeout
    while time.time() < end:
        if path.is_file() and path.read_text().strip():
            return path.read_text().strip()
        time.sleep(0.05)
    raise AssertionError(f"{path} never appeared")


def _env(root: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMPENDIUM_")}
    return env | {"COMPENDIUM_ROOT": str(root), "PYTHONPATH": str(REPO / "src")}


def _gone(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


# ------------------------------------------------------------------ 5. the lock outlives no one
def test_killing_the_compendium_process_alone_keeps_the_lock_with_snakemake(tmp_path):
    """The build's lock is inherited by the process it starts: killing the parent leaves it held
    until the orphaned child (Snakemake) ends, and no second build starts meanwhile."""
    (tmp_path / ".snakemake").mkdir()
    child_pid = tmp_path / "child.pid"
    script = (
        "import sys\n"
        "from compendium import cli, paths\n"
        "with cli._BuildLock(paths.ROOT):\n"
        f"    cli._call(['sh', '-c', 'echo $$ > {child_pid}; exec sleep 60'])\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", script], env=_env(tmp_path), cwd=tmp_path)
    child = int(_wait_for(child_pid))
    try:
        parent.kill()
        parent.wait(10)
        os.kill(child, 0)  # the orphan still runs
        with pytest.raises(cli.Refused, match="another build or chapter run is running"):
            with cli._BuildLock(tmp_path):
                pass
        with pytest.raises(cli.Refused):  # nor a chapter run or an asset build
            with cli._BuildLock(tmp_path, shared=True):
                pass
    finally:
        _gone(child)
    time.sleep(0.2)
    with cli._BuildLock(tmp_path):  # the orphan ended: the lock is free
        pass


def test_an_orphaned_job_of_a_killed_build_refuses_the_next_build(tmp_path):
    """A job whose compendium and Snakemake were both killed still holds the work lock."""
    ready = tmp_path / "ready"
    script = ("import time\nfrom compendium import locks, paths\nlocks.hold_work(paths.ROOT)\n"
              f"open({str(ready)!r}, 'w').write('1')\ntime.sleep(60)\n")
    job = subprocess.Popen([sys.executable, "-c", script], env=_env(tmp_path), cwd=tmp_path)
    try:
        _wait_for(ready)
        with pytest.raises(cli.Refused, match="a job of an earlier build is still running"):
            with cli._BuildLock(tmp_path):
                pass
    finally:
        job.kill()
        job.wait(10)
    with cli._BuildLock(tmp_path):
        pass


def test_a_chapter_job_is_refused_while_execute_runs_that_chapter(tmp_path):
    with cli._NamedLock(tmp_path, "execute-smoke-demo_mean", "a run of demo_mean"):
        with pytest.raises(locks.LockBusy, match="already running"):
            locks.hold(tmp_path, "execute-smoke-demo_mean", what="a run of demo_mean")


def test_compendium_asset_is_refused_while_a_build_runs(monkeypatch, capsys, tmp_path):
    from compendium import paths

    plan = cli.Plan.from_config({"scale": "smoke"}, keep=False)
    name = next(iter(plan.registry.assets))
    monkeypatch.setattr(cli, "_plan", lambda args: plan)
    monkeypatch.setattr(paths, "ROOT", tmp_path)  # the lock of a project of its own
    built = []
    monkeypatch.setattr(cli, "_ensure_asset", lambda *a, **k: built.append(a))
    with cli._BuildLock(tmp_path):
        assert cli.main(["asset", name]) == 2
    assert "another build is running" in capsys.readouterr().err and not built


def test_a_build_start_cleans_what_killed_runs_left(tmp_path):
    out = tmp_path / "results" / "smoke" / "demo_mean"
    leftovers = [tmp_path / ".snakemake" / "compendium-run-abc.yaml", out / ".last_good-xyz" / "claims.json",
                 out / ".claims.json.123.tmp", out / ".run-abc" / "demo_mean.ipynb"]
    keep = [out / "claims.json", out / "last_good" / "claims.json"]
    for path in leftovers + keep:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x")
    with cli._BuildLock(tmp_path):
        pass
    assert not any(p.exists() for p in leftovers)
    assert all(p.exists() for p in keep)


# ------------------------------------------------------------------ 3-4. a full disk while a chapter finishes
FIXTURE_NOTEBOOK = REPO / "tests" / "fixtures" / "project" / "notebooks" / "theory" / "demo_mean.md"
PARAMS = {"scale": "smoke", "seed": 0, "device": "auto", "num_samples": 20, "explode": False}


@pytest.fixture
def small_tmpfs(tmp_path):
    """A tmpfs of 128 KiB (root only; skipped where it cannot be mounted), unmounted after."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=128k", "tmpfs", str(mnt)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def _fake_papermill(monkeypatch, notebook_bytes: int, leave_free: int | None = None):
    """Papermill that 'runs' the chapter: writes a small claims.json, then the executed notebook;
    with ``leave_free``, then fills the disk up to that many bytes."""
    import papermill

    from compendium import execute

    def run(src, dst, **kwargs):
        out = Path(os.environ["COMPENDIUM_OUTPUT_DIR"])
        (out / "claims.json").write_text('{"claims": []}')
        with open(dst, "w", encoding="utf-8") as fh:
            fh.write("x" * notebook_bytes)
        if leave_free is not None:
            st = os.statvfs(out)
            with open(out.parent / "filler", "wb") as fh:
                fh.write(b"\0" * max(0, st.f_bavail * st.f_frsize - leave_free))

    monkeypatch.setattr(papermill, "execute_notebook", run)
    monkeypatch.setattr(execute, "validate_claims", lambda *a: {"claims": []})
    return execute


def _run(execute, out: Path):
    return execute.execute_chapter(
        slug="demo_mean", scale="smoke", notebook=FIXTURE_NOTEBOOK, parameters=PARAMS,
        output_notebook=out / "demo_mean.ipynb", claims=out / "claims.json", params_file=out / "params.yaml",
        figures=out / "figures", timeout_s=60)


def test_a_full_disk_while_the_notebook_is_written_leaves_no_partial_output(small_tmpfs, monkeypatch):
    execute = _fake_papermill(monkeypatch, notebook_bytes=400_000)
    out = small_tmpfs / "demo_mean"
    with pytest.raises(execute.ChapterFailed) as info:
        _run(execute, out)
    message = str(info.value)
    assert "\n" not in message and f"No space left on device: {out / 'demo_mean.ipynb'}" in message
    assert "/tmp/demo_mean-" not in message and ".run-" not in message
    names = sorted(p.name for p in out.iterdir())
    assert names == ["FAILED.json"], names  # no notebook, no claims, no scratch; the failure recorded
    assert "No space left on device" in json.loads((out / "FAILED.json").read_text())["message"]


def test_a_full_disk_while_last_good_is_copied_keeps_it_and_records_the_failure(small_tmpfs, monkeypatch):
    from compendium.provenance import LAST_GOOD

    out = small_tmpfs / "demo_mean"
    good = out / LAST_GOOD
    good.mkdir(parents=True)
    (good / "claims.json").write_text('{"old": true}')
    (good / "provenance.json").write_text('{"old": true}')
    execute = _fake_papermill(monkeypatch, notebook_bytes=40_000, leave_free=16_384)  # fits once, not twice
    with pytest.raises(execute.ChapterFailed) as info:
        _run(execute, out)
    message = str(info.value)
    assert "No space left on device" in message and str(good) in message and ".last_good-" not in message
    assert json.loads((good / "claims.json").read_text()) == {"old": True}, "the last good result is intact"
    left = sorted(p.name for p in out.iterdir())
    assert left == ["FAILED.json", "figures", LAST_GOOD], left  # no stray provenance.json, no hidden copy


def test_the_last_good_copy_is_readable_by_others(tmp_path, monkeypatch):
    from compendium.execute import keep_last_good

    (tmp_path / "claims.json").write_text("{}")
    target = keep_last_good(tmp_path, [tmp_path / "claims.json"])
    assert target.stat().st_mode & 0o777 == 0o755


def test_a_failed_book_job_keeps_the_previous_book(tmp_path):
    """The book job fails before jupyter-book runs (here its staging folder cannot be written): one
    line, no traceback, and the previous book's index.html, which Snakemake deleted, is put back."""
    from conftest import fake_built_tree, make_project

    root = make_project(tmp_path / "project")
    fake_built_tree(root)
    index = root / "results" / "smoke" / "book" / "_build" / "html" / "index.html"
    assert index.read_text() == "fake\n"
    (root / "results" / "smoke" / "book" / "src").write_text("not a folder")
    proc = compendium_cli(root, "build", "--no-keep-going", "--", "--forcerun", "results/smoke/book/_build/html/index.html")
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert "ERROR the book was not built" in proc.stderr and "the previous book is kept" in proc.stderr
    assert index.read_text() == "fake\n", "the previous good book is whole"
    assert not index.with_name(".index.html.previous").exists()
