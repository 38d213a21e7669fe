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


# ------------------------------------------------- 6-10: messages, not tracebacks; bounded echoes
from compendium.registry import (  # noqa: E402
    EXCERPT_CHARS,
    MAX_INT_DIGITS,
    RegistryError,
    load_registry,
    load_yaml,
    overrides_from_strings,
    parse_override,
)

from conftest import FIXTURE, hippo, make_project, registry_with  # noqa: E402

LAUGHS = "[" + ", ".join(["*a"] * 9) + "]"


@pytest.mark.parametrize("value", ["1" * 5000, "-" + "7" * 4301, "0x" + "f" * 5000])
def test_a_huge_integer_in_set_is_one_message(value, capsys):
    rc = cli.main(["validate", "--set", f"continuized_hippo.seed={value}"])
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err
    assert f"at most {MAX_INT_DIGITS} are read" in err and "continuized_hippo.seed" in err
    assert len(err) < 4 * EXCERPT_CHARS  # the value is quoted as an excerpt


def test_a_huge_integer_in_the_registry_is_one_message(tmp_path):
    path = registry_with(tmp_path, lambda raw: hippo(raw).update(seed=0))
    path.write_text(path.read_text().replace("seed: 0", "seed: " + "9" * 5000, 1))
    with pytest.raises(RegistryError, match=r"chapters.yaml is not valid YAML: an integer of 5000 digits") as err:
        load_registry(path)
    assert len(str(err.value)) < 1000


def test_a_latin1_registry_names_the_file_and_the_byte(tmp_path):
    path = tmp_path / "chapters.yaml"
    text = (FIXTURE / "workflow" / "config" / "chapters.yaml").read_text(encoding="utf-8")
    lines = text.splitlines(keepends=True)
    lines.insert(3, "# résumé\n")
    path.write_bytes("".join(lines).encode("latin-1"))
    with pytest.raises(RegistryError) as err:
        load_registry(path)
    assert str(path) in str(err.value) and "byte 0xe9 at line 4" in str(err.value) and "UTF-8" in str(err.value)


def test_a_latin1_registry_through_the_cli_is_one_line(tmp_path):
    root = make_project(tmp_path / "project")
    registry = root / "workflow" / "config" / "chapters.yaml"
    registry.write_bytes(registry.read_bytes() + "# caf\u00e9\n".encode("latin-1"))
    proc = compendium_cli(root, "validate", timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert "is not UTF-8: byte 0xe9" in proc.stderr and "chapters.yaml" in proc.stderr


@pytest.mark.parametrize("argv", [["stability", "--seeds", "-1"], ["stability", "--seeds", "1" * 5000],
                                  ["execute", "continuized_hippo", "--seeds", "-3"]])
def test_negative_seeds_are_refused(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "whole number of further seeds" in err and len(err) < 1500


@pytest.mark.parametrize("loader, why", [("sklearn.datasetz:load_digits", "cannot be imported"),
                                         ("sklearn.datasets:load_digitz", "has no attribute 'load_digitz'"),
                                         ("load_digits", "is not 'module:function'")])
def test_a_mistyped_loader_is_a_failed_line(tmp_path, monkeypatch, capsys, loader, why):
    import yaml

    raw = yaml.safe_load((REPO / "data" / "manifest.yaml").read_text())
    raw["datasets"] = {"digits": {**raw["datasets"]["digits"], "loader": loader}}
    manifest = tmp_path / "manifest.yaml"
    manifest.write_text(yaml.safe_dump(raw))
    monkeypatch.setenv("COMPENDIUM_DATA_MANIFEST", str(manifest))
    assert cli.main(["data", "verify"]) == 1
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if ln.startswith("FAILED"))
    assert "digits" in line and loader in line and why in line


def test_aliases_in_set_are_refused_quickly_and_briefly(capsys):
    value = "[&a [&b [1,1,1,1,1,1,1,1,1], " + ", ".join(["*b"] * 8) + "], " + ", ".join(["*a"] * 8) + "]"
    with pytest.raises(RegistryError, match="YAML aliases are not allowed") as err:
        parse_override(f"continuized_hippo.orders={value}")
    assert len(str(err.value)) < 3 * EXCERPT_CHARS
    start = time.perf_counter()
    assert cli.main(["validate", "--set", f"continuized_hippo.orders={value}"]) == 2
    assert time.perf_counter() - start < 5 and len(capsys.readouterr().err) < 3 * EXCERPT_CHARS


def test_aliases_in_the_registry_expand_within_a_bound():
    lines = ["a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    lines += [f"a{i}: &a{i} " + LAUGHS.replace("*a", f"*a{i - 1}") for i in range(1, 7)]
    start = time.perf_counter()
    with pytest.raises(Exception, match="aliases expand to more than"):
        load_yaml("\n".join(lines))
    assert time.perf_counter() - start < 5
    assert load_yaml("base: &b {x: 1}\nuse: [*b, *b]")["use"] == [{"x": 1}, {"x": 1}]  # a few are fine


def test_an_error_quotes_a_bounded_excerpt_of_a_long_value():
    for item in ["continuized_hippo.orders=[" + "1.5, " * 50_000 + "1]", "continuized_hippo.tau_max='" + "x" * 100_000 + "'",
                 "continuized_hippo.seed=[" + "1, " * 50_000 + "1]", "continuized_hippo." + "k" * 100_000 + "=1"]:
        with pytest.raises(RegistryError) as err:
            load_registry().resolve_all("smoke", overrides_from_strings([item]))
        assert "more characters" in str(err.value) and len(str(err.value)) < 4 * EXCERPT_CHARS, str(err.value)[:300]


def test_a_set_key_given_twice_is_refused():
    with pytest.raises(RegistryError, match=r"override continuized_hippo.seed is given twice"):
        overrides_from_strings(["continuized_hippo.seed=3", "continuized_hippo.seed=4"])
    with pytest.raises(RegistryError, match=r"given twice"):  # once spelled out, once through --only's default
        overrides_from_strings(["seed=3", "continuized_hippo.seed=4"], default_slug="continuized_hippo")


# --------------------------------------------------------------------------- 11. the dashboard
def test_the_failed_chapters_list_shows_the_text_as_written():
    from compendium.book import ChapterState, code_span, dashboard_page

    registry = load_registry(FIXTURE / "workflow" / "config" / "chapters.yaml", check_files=False)
    entry = registry.chapter("demo_mean")
    failure = {"chapter": "demo_mean", "ename": "KeyError", "evalue": "'seed' <b> & `x`", "cell": 3}
    page = dashboard_page([ChapterState(entry, "failed", failure=failure)], "smoke")
    line = next(ln for ln in page.splitlines() if "failed in cell 3" in ln)
    assert "&#x27;" not in line and "&amp;" not in line and "&lt;" not in line
    assert line.endswith(": `` chapter 'demo_mean' failed in cell 3: KeyError: 'seed' <b> & `x` ``")
    assert code_span("`a`") == "`` `a` ``" and code_span("a\n  b") == "`a b`"


# ------------------------------------------------------------------- 12. COMPENDIUM_RESULTS
def test_compendium_results_is_where_the_rules_and_execute_write(tmp_path, monkeypatch):
    from compendium import paths
    from compendium.stability import variant_outputs
    from compendium.workflow import Plan, results_dir

    monkeypatch.delenv("COMPENDIUM_RESULTS", raising=False)
    assert results_dir("smoke") == "results/smoke"  # the default: relative to the workflow's directory
    elsewhere = tmp_path / "elsewhere"
    monkeypatch.setenv("COMPENDIUM_RESULTS", str(elsewhere))
    plan = Plan.from_config({"scale": "smoke"}, keep=False)
    for target in [*plan.chapter_outputs("continuized_hippo").values(), plan.claims_csv(), plan.book_index(),
                   *variant_outputs("smoke", "continuized_hippo", "seed-1").values()]:
        assert Path(paths.ROOT / target).is_relative_to(elsewhere / "smoke"), target
    for rules in (REPO / "workflow" / "rules").glob("*.smk"):
        assert '"results/' not in rules.read_text(), f"{rules.name} names results/ itself"


def test_execute_writes_where_compendium_results_points(tmp_path):
    root = make_project(tmp_path / "project")
    elsewhere = tmp_path / "elsewhere"
    env = _env(root) | {"COMPENDIUM_RESULTS": str(elsewhere), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-m", "compendium.cli", "execute", "demo_mean"], cwd=root, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (elsewhere / "smoke" / "demo_mean" / "claims.json").is_file()
    assert not (root / "results" / "smoke" / "demo_mean").exists()
    status = subprocess.run([sys.executable, "-m", "compendium.cli", "status"], cwd=root, env=env,
                            capture_output=True, text=True, timeout=300)
    assert "demo_mean" in status.stdout and "missing" not in next(
        ln for ln in status.stdout.splitlines() if "demo_mean" in ln), status.stdout


# ------------------------------------------------------------------------------ smaller ones
def test_status_is_not_current_from_last_good_when_the_outputs_are_missing(tmp_path):
    root = make_project(tmp_path / "project")
    env = _env(root) | {"HF_HUB_OFFLINE": "1"}
    cmd = [sys.executable, "-m", "compendium.cli"]
    run = subprocess.run([*cmd, "execute", "demo_mean"], cwd=root, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    out = root / "results" / "smoke" / "demo_mean"
    assert (out / "last_good" / "claims.json").is_file()
    for name in ("claims.json", "demo_mean.ipynb", "params.yaml", "provenance.json"):
        (out / name).unlink()
    status = subprocess.run([*cmd, "status"], cwd=root, env=env, capture_output=True, text=True, timeout=300)
    line = next(ln for ln in status.stdout.splitlines() if "demo_mean" in ln)
    assert "current" not in line.split("demo_mean", 1)[1].split()[0:1], status.stdout
    assert "outputs are missing" in status.stdout, status.stdout


def test_a_failure_names_the_notebooks_own_cell(tmp_path):
    from compendium.execute import _fail, describe_failure, own_cell_number

    def cell(kind, tags=()):
        return {"cell_type": kind, "metadata": {"tags": list(tags)}, "source": ""}

    cells = [cell("markdown"), cell("code", ["parameters"]), cell("code", ["injected-parameters"]),
             cell("markdown"), cell("code"), cell("code"), cell("markdown")]
    executed = tmp_path / "x.ipynb"
    executed.write_text(json.dumps({"cells": cells}))
    assert own_cell_number(executed, 5) == 3  # the third code cell of the chapter; Papermill's count says 4
    assert own_cell_number(executed, 99) is None and own_cell_number(tmp_path / "none", 1) is None

    class Raised(Exception):
        cell_index, exec_count, ename, evalue = 5, 4, "ValueError", "boom"

    out = tmp_path / "out"
    out.mkdir()
    message = _fail("demo", "smoke", out, Raised("boom"), out / "demo.ipynb", dst=executed)
    assert "failed in cell 3: ValueError: boom" in message
    assert describe_failure(json.loads((out / "FAILED.json").read_text())) == message


# ----------------------------------------------- a constraint of the assets, known to validation
@pytest.mark.parametrize("scale, seed, ok", [("smoke", 4, True), ("smoke", 5, False), ("full", 0, True), ("full", 1, False)])
def test_bspar_seed_beyond_the_trained_blocks_is_refused_by_validation(scale, seed, ok):
    from compendium.workflow import Plan

    plan = Plan.from_config({"scale": scale, "overrides": {"bspar_retouching": {"seed": seed}}}, keep=False)
    if ok:
        cli.check_configs(plan, ["bspar_retouching"])
        return
    with pytest.raises(RegistryError, match=rf"'bspar_retouching'.*seed {seed}.*must be below"):
        cli.check_configs(plan, ["bspar_retouching"])


def test_async_spade_model_seeds_beyond_the_trained_models_is_refused_by_validation():
    from compendium.workflow import Plan

    plan = Plan.from_config({"scale": "smoke", "overrides": {"async_spade": {"model_seeds": 4}}}, keep=False)
    with pytest.raises(RegistryError, match=r"'async_spade'.*model_seeds 4: the asset trains 3 models"):
        cli.check_configs(plan, ["async_spade"])


def test_execute_seeds_beyond_the_trained_blocks_are_refused_before_running(monkeypatch, capsys):
    import compendium.execute as execute

    monkeypatch.setattr(execute, "execute_chapter", lambda *a, **k: pytest.fail("a notebook was started"))
    assert cli.main(["execute", "bspar_retouching", "--seeds", "5"]) == 2
    assert "seed-5" in capsys.readouterr().err


def test_stability_leaves_out_the_seeds_the_assets_cannot_serve(monkeypatch, capsys):
    calls = []
    monkeypatch.setattr(cli, "_call", lambda cmd: calls.append(cmd) or 0)
    assert cli.main(["stability", "--only", "bspar_retouching", "--seeds", "6", "--no-sweeps", "--dry-run"]) == 0
    (cmd,) = calls
    asked = " ".join(cmd)
    assert all(f"variants/seed-{s}/claims.json" in asked for s in range(1, 5))
    assert "seed-5/" not in asked and "seed-6/" not in asked
    err = capsys.readouterr().err
    assert "bspar_retouching/seed-5 left out" in err and "bspar_retouching/seed-6 left out" in err
