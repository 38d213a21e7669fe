"""Bad input that used to get through (issue 20): each case is refused cleanly, before anything runs.

One test (or one parametrized case) per defect and per surprise of the issue, each of which
failed before the fix: whole-number floats for integers, NaN and infinities, the Makefile's
``SET``/``SLUG`` going through the shell, a full disk, YAML 1.1 numbers, duplicate registry keys,
empty parameter ranges, ``--cores 0``, overrides of a chapter ``--only`` does not run, values a
chapter's own ``Config`` rejects, ``validate | head``, ``execute`` racing a build, and slugs
that are paths.
"""

from __future__ import annotations

import errno
import fcntl
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from compendium import cli, paths
from compendium.registry import (
    RegistryError,
    load_registry,
    load_yaml,
    overrides_from_strings,
    parse_override,
    split_overrides,
)
from compendium.workflow import Plan

from conftest import FIXTURE, REPO, compendium, hippo, make_project, project_env, registry_with

FIXTURE_REGISTRY = FIXTURE / "workflow" / "config" / "chapters.yaml"


def _resolve(*items):
    return load_registry().resolve_all("smoke", overrides_from_strings(list(items)))


_registry_with = registry_with
_hippo = hippo


# ----------------------------------------------------------- 1. whole-number floats for integers
@pytest.mark.parametrize("item", ["continuized_hippo.num_modes=2.0", "continuized_hippo.seed=3.0",
                                  "continuized_hippo.orders=[64.0, 128, 256]", "continuized_hippo.num_modes=1e1"])
def test_whole_float_for_an_integer_override_is_refused(item):
    name = item.split(".", 1)[1].split("=")[0]
    with pytest.raises(RegistryError, match=rf"'continuized_hippo'.*'{name}'.*(wrong type|invalid).*integer"):
        _resolve(item)


def test_whole_float_for_an_integer_in_the_registry_is_refused(tmp_path):
    path = _registry_with(tmp_path, lambda r: _hippo(r)["parameters"]["num_modes"].update(default=5.0))
    with pytest.raises(RegistryError, match=r"'continuized_hippo'.*'num_modes' = 5.0.*wrong type: allowed is an integer in \[1, 8\]"):
        load_registry(path)


def test_integers_still_count_as_numbers():
    assert _resolve("continuized_hippo.tau_max=4")["continuized_hippo"]["tau_max"] == 4


# -------------------------------------------------------------------------- 2. NaN and infinities
@pytest.mark.parametrize("item", ["continuized_hippo.tau_max=.nan", "continuized_hippo.tau_max=.inf",
                                  "continuized_hippo.tau_max=-.inf", "last_iterate_vi.sigmas=[0.0, .nan, 1.0]",
                                  "last_iterate_vi.sigmas=[0.0, 0.1, .inf]"])
def test_nan_and_inf_overrides_are_refused(item):
    with pytest.raises(RegistryError, match=r"is not a finite number"):
        _resolve(item)


@pytest.mark.parametrize("name, value", [("tau_max", math.nan), ("tau_max", math.inf)])
def test_nan_and_inf_in_the_registry_are_refused(tmp_path, name, value):
    path = _registry_with(tmp_path, lambda r: _hippo(r)["parameters"][name].update(default=value, smoke=value))
    with pytest.raises(RegistryError, match=rf"'continuized_hippo'.*'{name}'.*not a finite number"):
        load_registry(path)


def test_nan_override_is_refused_by_the_cli_before_anything_runs(tmp_path):
    root = make_project(tmp_path / "p", fixture=False)
    proc = compendium(root, "build", "--set", "continuized_hippo.tau_max=.nan", timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "'tau_max' = nan" in proc.stderr and "not a finite number" in proc.stderr
    assert not (root / "results").exists()


# ------------------------------------------------------------------ 3. the Makefile's SET and SLUG
STUB = """#!/usr/bin/env python3
import json, os, sys
with open(os.environ["STUB_LOG"], "a") as fh:
    fh.write(json.dumps({"argv": sys.argv[1:], "set": os.environ.get("COMPENDIUM_SET")}) + "\\n")
sys.exit(int(os.environ.get("STUB_RC", "0")))
"""


@pytest.fixture
def make_dir(tmp_path):
    """A folder with the Makefile and a fake, already-installed venv whose compendium records its call."""
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    work = tmp_path / "mk"
    (work / "venv" / "bin").mkdir(parents=True)
    shutil.copy(REPO / "Makefile", work / "Makefile")
    stub = work / "venv" / "bin" / "compendium"
    stub.write_text(STUB)
    stub.chmod(0o755)
    (work / "venv" / ".installed").touch()  # and `make -o` keeps it from being remade
    return work


MAKE = ["make", "-s", "VENV=venv", "-o", "venv/.installed"]


def _make(work: Path, *args: str, rc: int = 0):
    env = {**os.environ, "STUB_LOG": str(work / "calls.jsonl"), "STUB_RC": str(rc)}
    proc = subprocess.run([*MAKE, "-C", str(work), *args], env=env,
                          capture_output=True, text=True, timeout=60)
    log = work / "calls.jsonl"
    calls = [json.loads(line) for line in log.read_text().splitlines()] if log.is_file() else []
    return proc, calls


def test_make_passes_set_and_slug_as_literal_text(make_dir):
    pwned = make_dir / "pwned"
    proc, calls = _make(make_dir, "chapter", f"SLUG=demo;touch {pwned}-slug",
                        f"SET=demo.a=1;touch {pwned} demo.orders=[64, 128] $(shell touch {pwned}-make) `touch {pwned}-tick`")
    assert proc.returncode == 0, proc.stderr
    assert not list(make_dir.glob("pwned*")), "a value of SET or SLUG was executed"
    (call,) = calls
    assert call["argv"][call["argv"].index("--only") + 1] == f"demo;touch {pwned}-slug"
    assert call["set"] == f"demo.a=1;touch {pwned} demo.orders=[64, 128] $(shell touch {pwned}-make) `touch {pwned}-tick`"
    # what compendium makes of it: the list stays one override, the shell command is no override
    items = split_overrides(call["set"])
    assert "demo.orders=[64, 128]" in items
    with pytest.raises(RegistryError, match="override looks like"):
        overrides_from_strings(items)


@pytest.mark.parametrize("target, variable", [
    ("validate", "SCALE=smoke; touch {pwned}; false"), ("book", "PROFILE=local`touch {pwned}`"),
    ("book", "CORES=2 $(shell touch {pwned})"), ("stability", "K=3; touch {pwned}"),
    ("chapter", "FORCE=$(shell touch {pwned})"), ("pdf", "SCALE=$$(touch {pwned})"),
])
def test_make_passes_every_variable_as_literal_text(make_dir, target, variable):
    """Issue 79, item 13: not only SET and SLUG; every variable handed on is text, never run."""
    pwned = make_dir / "pwned"
    proc, calls = _make(make_dir, target, "SLUG=demo", variable.format(pwned=pwned))
    assert not pwned.exists(), f"{variable.split('=')[0]} was executed"
    if target == "pdf":  # runs python -m compendium.publish, not the stub: only nothing may have run
        return
    assert proc.returncode == 0, proc.stderr
    (call,) = calls
    name, value = variable.format(pwned=pwned).split("=", 1)
    flag = {"SCALE": "--scale", "PROFILE": "--profile", "CORES": "--cores", "K": "--seeds"}.get(name)
    if flag:
        assert call["argv"][call["argv"].index(flag) + 1] == value
    else:
        assert "--force" in call["argv"]


@pytest.mark.parametrize("target", ["chapter", "book", "validate"])
def test_make_fails_when_compendium_fails(make_dir, target):
    proc, calls = _make(make_dir, target, "SLUG=demo", "SET=demo.a=1;true", rc=3)
    assert calls and proc.returncode != 0


def test_make_validate_runs_the_real_cli_with_a_literal_set(tmp_path, make_dir):
    """End to end: make → compendium validate on the fixture project; the shell text is refused."""
    root = make_project(tmp_path / "project")
    (make_dir / "venv" / "bin" / "compendium").unlink()
    (make_dir / "venv" / "bin" / "compendium").symlink_to(Path(sys.executable).parent / "compendium")
    pwned = tmp_path / "pwned"
    env = project_env(root)
    ok = subprocess.run([*MAKE, "-C", str(make_dir), "validate", "SET=demo_mean.num_samples=[20]"],
                        env=env, capture_output=True, text=True, timeout=120)
    assert ok.returncode != 0 and "'num_samples' = [20]" in ok.stderr  # one argument, typed as a list
    bad = subprocess.run([*MAKE, "-C", str(make_dir), "validate", f"SET=demo_mean.seed=1;echo>{pwned}"],
                         env=env, capture_output=True, text=True, timeout=120)
    assert bad.returncode != 0 and not pwned.exists()
    good = subprocess.run([*MAKE, "-C", str(make_dir), "validate", "SET=demo_mean.seed=7 demo_variance.seed=8"],
                          env=env, capture_output=True, text=True, timeout=120)
    assert good.returncode == 0, good.stderr
    assert '"seed": 7' in good.stdout and '"seed": 8' in good.stdout


@pytest.mark.parametrize("text, items", [
    ("seed=3 orders=[64, 128]", ["seed=3", "orders=[64, 128]"]),
    ("  a.b=1\n a.c={x: 1, y: [2, 3]}\t", ["a.b=1", "a.c={x: 1, y: [2, 3]}"]),
    ("a.name='two words'", ["a.name='two words'"]),
    ("", []),
])
def test_set_text_splits_outside_brackets_and_quotes(text, items):
    assert split_overrides(text) == items


def test_unbalanced_set_text_is_refused():
    with pytest.raises(RegistryError, match="unbalanced bracket"):
        split_overrides("a.b=[1, 2")


def test_compendium_set_environment_variable(monkeypatch, capsys):
    monkeypatch.setenv("COMPENDIUM_SET", "continuized_hippo.orders=[64, 128, 256] continuized_hippo.seed=3")
    assert cli.main(["validate"]) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if "continuized_hippo" in ln)
    values = json.loads(line.split(": ", 1)[1])
    assert values["orders"] == [64, 128, 256] and values["seed"] == 3


# ------------------------------------------------------------------------------- 4. a full disk
@pytest.fixture
def tiny_tmpfs(tmp_path):
    """A 64 KiB tmpfs (root only); skipped where it cannot be mounted."""
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def test_atomic_write_on_a_full_disk_leaves_no_partial_file(tiny_tmpfs):
    from compendium.execute import write_atomic

    target = tiny_tmpfs / "FAILED.json"
    with pytest.raises(OSError) as info:
        write_atomic(target, "x" * 200_000)
    assert info.value.errno == errno.ENOSPC and info.value.filename == str(target)
    assert list(tiny_tmpfs.iterdir()) == [], "no partial record and no temporary file left"


def test_atomic_write_keeps_the_old_file_when_writing_fails(tmp_path, monkeypatch):
    from compendium import execute

    target = tmp_path / "FAILED.json"
    target.write_text('{"chapter": "old"}')

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(execute.os, "fsync", full)
    with pytest.raises(OSError, match="No space left"):
        execute.write_atomic(target, '{"chapter": "new"}')
    assert json.loads(target.read_text()) == {"chapter": "old"}
    assert [p.name for p in tmp_path.iterdir()] == ["FAILED.json"]


def test_failed_chapter_on_a_full_disk_says_so_in_one_line(tmp_path, monkeypatch):
    import papermill

    from compendium import execute

    def fails(*args, **kwargs):
        raise RuntimeError("the cell failed")

    def full(path, text):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(papermill, "execute_notebook", fails)
    monkeypatch.setattr(execute, "write_atomic", full)
    out = tmp_path / "results" / "smoke" / "demo_mean"
    with pytest.raises(execute.ChapterFailed) as info:
        execute.execute_chapter(
            slug="demo_mean", scale="smoke", notebook=FIXTURE / "notebooks" / "theory" / "demo_mean.md",
            parameters={"scale": "smoke", "seed": 0, "device": "auto", "num_samples": 20, "explode": False},
            output_notebook=out / "demo_mean.ipynb", claims=out / "claims.json", params_file=out / "params.yaml",
            figures=out / "figures", timeout_s=60,
        )
    message = str(info.value)
    assert "\n" not in message and "the cell failed" in message
    assert f"No space left on device: {out / 'FAILED.json'}" in message
    assert not (out / "FAILED.json").exists()


@pytest.mark.parametrize("content", ["", "{not json", "[1, 2]"])
def test_book_staging_tolerates_a_corrupt_failure_record(tmp_path, monkeypatch, content):
    from compendium.book import chapter_states
    from compendium.execute import describe_failure

    monkeypatch.setenv("COMPENDIUM_RESULTS", str(tmp_path / "results"))
    registry = load_registry(FIXTURE_REGISTRY, check_files=False)
    failed = tmp_path / "results" / "smoke" / "demo_mean" / "FAILED.json"
    failed.parent.mkdir(parents=True)
    failed.write_text(content)
    state = next(s for s in chapter_states(registry, "smoke") if s.entry.slug == "demo_mean")
    assert state.state == "failed"
    assert "unreadable failure record" in describe_failure(state.failure)


def test_build_refuses_to_start_without_free_space(monkeypatch, capsys):
    monkeypatch.setattr(cli.shutil, "disk_usage", lambda path: SimpleNamespace(free=2**20))
    monkeypatch.delenv("COMPENDIUM_MIN_FREE_MB", raising=False)
    started = []
    monkeypatch.setattr(cli, "_call", lambda cmd: started.append(cmd) or 0)
    assert cli.main(["build", "--only", "continuized_hippo"]) == 2
    err = capsys.readouterr().err
    assert "only 1.0 MB free" in err and f"at least {cli.MIN_FREE_MB} MB" in err and "COMPENDIUM_MIN_FREE_MB" in err
    assert not started
    monkeypatch.setenv("COMPENDIUM_MIN_FREE_MB", "lots")
    assert cli.main(["build", "--only", "continuized_hippo"]) == 2
    assert "COMPENDIUM_MIN_FREE_MB must be a number" in capsys.readouterr().err


def test_a_full_disk_during_a_command_is_one_line_naming_the_path(monkeypatch, capsys):
    def full(args):
        raise OSError(errno.ENOSPC, "No space left on device", "/somewhere/results/smoke/x/params.yaml")

    monkeypatch.setattr(cli, "cmd_validate", full)  # build_parser looks it up when main runs
    assert cli.main(["validate"]) == 1
    err = capsys.readouterr().err
    assert err == "compendium: error: No space left on device: /somewhere/results/smoke/x/params.yaml\n"


def test_execute_on_a_full_tmpfs_reports_one_line(tmp_path):
    root = make_project(tmp_path / "project")
    results = root / "results"
    results.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(results)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here")
    try:
        fd = os.open(results / "filler", os.O_WRONLY | os.O_CREAT)  # fill the disk: nothing the chapter writes fits
        try:
            while os.write(fd, b"\0" * 4096):
                pass
        except OSError as err:
            assert err.errno == errno.ENOSPC
        finally:
            os.close(fd)
        refused = compendium(root, "execute", "demo_mean", timeout=120)
        assert refused.returncode == 2 and "MB free on" in refused.stderr
        env_root = project_env(root) | {"COMPENDIUM_MIN_FREE_MB": "0"}
        proc = subprocess.run([sys.executable, "-m", "compendium.cli", "execute", "demo_mean"], cwd=root,
                              env=env_root, capture_output=True, text=True, timeout=300)
        assert proc.returncode != 0
        assert "Traceback" not in proc.stderr, proc.stderr
        errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("compendium:")]
        assert len(errors) == 1 and "No space left on device" in errors[0] and str(results) in errors[0], proc.stderr
        for record in results.rglob("FAILED.json"):
            assert record.stat().st_size > 0
    finally:
        subprocess.run(["umount", "-l", str(results)], capture_output=True)


# ------------------------------------------------------------------------ surprises: YAML numbers
@pytest.mark.parametrize("text, value", [("010", 10), ("1:30", "1:30"), ("1e1", 10.0), ("-2E-3", -0.002),
                                         ("0o17", 15), ("0x1f", 31), ("+3", 3), ("1_000", "1_000"), ("3.", 3.0)])
def test_yaml_numbers_follow_yaml_1_2(text, value):
    parsed = load_yaml(text)
    assert parsed == value and type(parsed) is type(value)
    assert parse_override(f"continuized_hippo.seed={text}")[2] == parsed


def test_set_seed_010_is_ten_and_1e1_is_a_number():
    assert _resolve("continuized_hippo.seed=010")["continuized_hippo"]["seed"] == 10
    assert _resolve("continuized_hippo.tau_max=1e1")["continuized_hippo"]["tau_max"] == 10.0
    with pytest.raises(RegistryError, match="'seed' = '1:30'"):
        _resolve("continuized_hippo.seed=1:30")


def test_registry_numbers_follow_yaml_1_2(tmp_path):
    text = FIXTURE_REGISTRY.read_text().replace("smoke: 2000, full: 20000}", "smoke: 02000, full: 2e4}", 1)
    path = tmp_path / "chapters.yaml"
    path.write_text(text)
    with pytest.raises(RegistryError, match=r"'num_samples' = 20000.0 .*wrong type"):  # 2e4 is a float
        load_registry(path, check_files=False)
    path.write_text(text.replace("full: 2e4}", "full: 020000}", 1))
    entry = load_registry(path, check_files=False).chapter("demo_mean")
    assert entry.default_value("num_samples", "smoke") == 2000 and entry.default_value("num_samples", "full") == 20000


# ---------------------------------------------------------------------- surprises: the registry
def test_duplicate_registry_key_is_an_error_naming_key_and_line(tmp_path):
    lines = FIXTURE_REGISTRY.read_text().splitlines()
    at = next(i for i, ln in enumerate(lines) if ln.strip() == "status: ready")
    lines.insert(at + 1, lines[at].replace("ready", "planned"))
    path = tmp_path / "chapters.yaml"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(RegistryError, match=rf"duplicate key 'status' at line {at + 2} \(first given at line {at + 1}\)"):
        load_registry(path, check_files=False)


@pytest.mark.parametrize("bounds", [
    {"minimum": 10, "maximum": 5},
    {"exclusiveMinimum": 5, "maximum": 5},
    {"minimum": 5, "exclusiveMaximum": 5},
    {"exclusiveMinimum": 6, "exclusiveMaximum": 5},
])
def test_parameter_range_that_allows_nothing_is_refused(tmp_path, bounds):
    def mutate(raw):
        spec = _hippo(raw)["parameters"]["num_modes"]
        for key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
            spec.pop(key, None)
        spec.update(bounds)
    with pytest.raises(RegistryError, match=r"'continuized_hippo'.*'num_modes'.*leave no allowed value"):
        load_registry(_registry_with(tmp_path, mutate))


def test_list_item_range_that_allows_nothing_is_refused(tmp_path):
    path = _registry_with(tmp_path, lambda r: _hippo(r)["parameters"]["orders"]["items"].update(minimum=5000))
    with pytest.raises(RegistryError, match=r"'orders \(list items\)'.*leave no allowed value"):
        load_registry(path)


# --------------------------------------------------------------------------- surprises: the CLI
@pytest.mark.parametrize("cores", ["0", "-3", "two"])
def test_cores_must_be_positive(cores, capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["build", "--cores", cores])
    assert info.value.code == 2
    assert f"--cores: must be a whole number of cores >= 1, got '{cores}'" in capsys.readouterr().err


def test_override_of_a_chapter_not_run_by_only_is_refused(capsys):
    assert cli.main(["build", "--dry-run", "--only", "continuized_hippo", "--set", "last_iterate_vi.seed=5"]) == 2
    assert "overrides chapter 'last_iterate_vi', which --only does not run (continuized_hippo)" in capsys.readouterr().err


def test_execute_refuses_an_override_of_another_chapter(capsys):
    assert cli.main(["execute", "continuized_hippo", "--set", "last_iterate_vi.seed=5"]) == 2
    assert "which --only does not run" in capsys.readouterr().err


def test_validate_builds_each_chapters_config(capsys, tmp_path):
    # a list the schema allows but the chapter's Config rejects (it must be increasing)
    assert cli.main(["validate", "--set", "continuized_hippo.orders=[128, 64, 256]"]) == 2
    err = capsys.readouterr().err
    assert "chapter 'continuized_hippo': its Config rejects" in err and "strictly increasing" in err
    # the same value in the registry
    path = _registry_with(tmp_path, lambda r: _hippo(r)["parameters"]["orders"].update(smoke=[128, 64, 256]))
    plan = Plan.from_config({"scale": "smoke", "registry": str(path)})
    with pytest.raises(RegistryError, match="'continuized_hippo': its Config rejects.*strictly increasing"):
        cli.check_configs(plan)


@pytest.mark.parametrize("command, rc", [("validate", 0), ("kernel", 1)])
def test_output_into_a_closed_pipe_exits_cleanly(tmp_path, command, rc):
    """validate has finished its checks when it prints (0); other commands were cut short (1)."""
    root = make_project(tmp_path / "p")
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first line (`| head -0`)
    try:
        proc = subprocess.run([sys.executable, "-m", "compendium.cli", command], cwd=root, env=project_env(root),
                              stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(write_end)
    assert proc.returncode == rc and proc.stderr == "", proc.stderr


def test_validate_piped_into_head(tmp_path):
    root = make_project(tmp_path / "p")
    proc = subprocess.run(f"'{sys.executable}' -m compendium.cli validate | head -1", shell=True, cwd=root,
                          env=project_env(root), capture_output=True, text=True, timeout=120)
    assert proc.stdout.startswith("registry OK") and "Error" not in proc.stderr, proc.stderr


def test_execute_takes_the_build_lock(tmp_path):
    root = make_project(tmp_path / "p")
    lock = root / ".snakemake" / "compendium-build.lock"
    lock.parent.mkdir(parents=True)
    with lock.open("w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a build holds it
        proc = compendium(root, "execute", "demo_mean", timeout=120)
    assert proc.returncode == 2 and "another build is running" in proc.stderr, proc.stderr
    assert not (root / "results").exists()


@pytest.mark.parametrize("item", ["../../etc/passwd.seed=1", "Demo.seed=1", ".seed=1", "a/b.seed=1"])
def test_a_slug_that_is_not_a_slug_is_refused(item):
    with pytest.raises(RegistryError, match=r"invalid chapter slug"):
        overrides_from_strings([item])


def test_cli_names_an_invalid_slug(capsys):
    assert cli.main(["validate", "--set", "../../etc/passwd.seed=1"]) == 2
    assert "invalid chapter slug '../../etc/passwd'" in capsys.readouterr().err
    assert cli.main(["build", "--dry-run", "--only", "../x"]) == 2
    assert "invalid chapter slug '../x'" in capsys.readouterr().err


def test_chapter_runs_share_the_project_but_not_a_chapter(tmp_path):
    """Two `compendium execute` of different chapters hold the build lock together; a build is
    refused while they run; a second run of the same chapter is refused; an asset lock waits."""
    from compendium.cli import Refused, _BuildLock, _NamedLock

    with _BuildLock(tmp_path, shared=True), _BuildLock(tmp_path, shared=True):
        with pytest.raises(Refused, match="another build or chapter run is running"):
            with _BuildLock(tmp_path):
                pass
        with _NamedLock(tmp_path, "execute-smoke-a", "a run of a"):
            with pytest.raises(Refused, match="a run of a is already running"):
                with _NamedLock(tmp_path, "execute-smoke-a", "a run of a"):
                    pass
            with _NamedLock(tmp_path, "execute-smoke-b", "a run of b"):
                pass
    with _BuildLock(tmp_path):  # all released: a build may start
        with pytest.raises(Refused, match="another build is running"):
            with _BuildLock(tmp_path, shared=True):
                pass


def test_only_one_chapter_never_waits_for_the_rest_of_the_book():
    """`build --only SLUG` (`make chapter`): the book waits for that chapter alone, so a fresh clone or a
    new scale never runs every other chapter, nor trains their assets, to rebuild the book."""
    from compendium.registry import RegistryError
    from compendium.workflow import Plan

    plan = Plan.from_config({"scale": "full", "only": ["continuized_hippo"]}, keep=False)
    assert plan.book_chapters() == ["continuized_hippo"]
    everything = Plan.from_config({"scale": "full"}, keep=False)
    assert len(everything.book_chapters()) == len(everything.registry.ready) > 1
    with pytest.raises(RegistryError, match="not ready: nope"):
        Plan.from_config({"scale": "full", "only": ["nope"]}, keep=False)
