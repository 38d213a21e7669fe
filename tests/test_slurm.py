"""The ``slurm`` profile against a real single-node SLURM cluster that this module starts itself.

``.ci/slurm/start.sh`` writes a localhost ``slurm.conf`` and starts munged (unless one runs),
slurmctld and slurmd on loopback; ``.ci/slurm/stop.sh`` stops exactly the daemons it started (by
pid). The fixture project is built with ``compendium build --profile slurm`` through
snakemake-executor-plugin-slurm, and the test checks that every chapter ran as its own SLURM job
with the registry's resources, that the book was built, and that the results are byte-identical
to a local build. The cluster has no accounting database, hence ``--slurm-no-account
--slurm-status-command squeue`` (passed after ``--``, as a site would pass its own values).

Skips when SLURM is not installed (``bash .ci/slurm/install.sh`` installs it on Debian) or when
not root (slurmd must run as root).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from conftest import REPO, compendium, make_project

pytestmark = [pytest.mark.e2e, pytest.mark.slurm]

SLURM_CI = REPO / ".ci" / "slurm"
SLUGS = ("demo_mean", "demo_variance")
# Distinct, non-default memory requests so the check below cannot pass by accident; one CPU each
# so that both chapters fit the 2-core CI machine at the same time.
RESOURCES = {"demo_mean": {"threads": 1, "mem_mb": 1200}, "demo_variance": {"threads": 1, "mem_mb": 1500}}
SITE_ARGS = ["--slurm-no-account", "--slurm-status-command", "squeue",
             "--slurm-init-seconds-before-status-checks", "3"]
SUBMITTED = re.compile(r"submitted with SLURM jobid (\d+) \(log: (\S+)\)")


def _why_no_slurm() -> str | None:
    missing = [exe for exe in ("slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "munged")
               if shutil.which(exe) is None]
    if missing:
        return f"SLURM cannot be started: {', '.join(missing)} not found (run: bash .ci/slurm/install.sh)"
    if os.geteuid() != 0:
        return "SLURM cannot be started: slurmd must run as root"
    return None


def _with_resources(root: Path) -> Path:
    """Give the fixture chapters explicit resources in the project's registry."""
    path = root / "workflow" / "config" / "chapters.yaml"
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    for chapter in data["chapters"]:
        if chapter["slug"] in RESOURCES:
            chapter["resources"] = dict(RESOURCES[chapter["slug"]])
    path.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True), encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def slurm_cluster(tmp_path_factory):
    """A running single-node cluster; yields the environment (SLURM_CONF) that reaches it."""
    reason = _why_no_slurm()
    if reason:
        pytest.skip(reason)
    state = tmp_path_factory.mktemp("slurm")
    env = {**os.environ, "SLURMCTLD_PORT": "16817", "SLURMD_PORT": "16818", "SLURM_START_TIMEOUT": "90"}
    started = time.monotonic()
    proc = subprocess.run(["bash", str(SLURM_CI / "start.sh"), str(state)], env=env,
                          capture_output=True, text=True, timeout=180)
    try:
        if proc.returncode == 3:
            pytest.skip(f"SLURM cannot be started: {proc.stderr.strip()}")
        assert proc.returncode == 0, f"start.sh failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
        print(f"SLURM cluster up in {time.monotonic() - started:.1f} s ({state})")
        yield {"SLURM_CONF": str(state / "slurm.conf")}
    finally:
        pids = {p.name: int(p.read_text()) for p in state.glob("started-*.pid") if p.read_text().strip()}
        subprocess.run(["bash", str(SLURM_CI / "stop.sh"), str(state)], timeout=60)
        for name, pid in pids.items():
            assert not Path(f"/proc/{pid}").exists() or _is_zombie(pid), f"{name} (pid {pid}) still runs"


def _is_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].startswith("Z")
    except (OSError, IndexError):
        return True


def _run(root: Path, env_extra: dict, *args: str) -> subprocess.CompletedProcess:
    saved = {k: os.environ.get(k) for k in env_extra}
    os.environ.update(env_extra)  # project_env() copies os.environ
    try:
        return compendium(root, *args, timeout=600)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture(scope="module")
def slurm_build(slurm_cluster, tmp_path_factory):
    root = _with_resources(make_project(tmp_path_factory.mktemp("slurm_build") / "project"))
    started = time.monotonic()
    proc = _run(root, slurm_cluster, "build", "--profile", "slurm", "--", *SITE_ARGS)
    print(f"SLURM build: {time.monotonic() - started:.1f} s")
    assert proc.returncode == 0, f"slurm build failed:\n{proc.stdout[-5000:]}\n{proc.stderr[-5000:]}"
    return root, proc


@pytest.fixture(scope="module")
def local_build(tmp_path_factory):
    root = _with_resources(make_project(tmp_path_factory.mktemp("local_build") / "project"))
    compendium(root, "build", check=True, timeout=600)
    return root


def _scontrol(job_id: str, env: dict) -> dict:
    out = subprocess.run(["scontrol", "-o", "show", "job", job_id], env={**os.environ, **env},
                         capture_output=True, text=True, timeout=30, check=True).stdout
    return dict(field.split("=", 1) for field in out.split() if "=" in field)


def test_each_chapter_ran_as_a_slurm_job_with_the_registry_resources(slurm_build, slurm_cluster):
    root, proc = slurm_build
    submitted = dict(SUBMITTED.findall(proc.stdout + proc.stderr))  # job id -> SLURM log
    assert submitted, "no 'submitted with SLURM jobid' line: the jobs did not go through SLURM"
    timeout_s = yaml.safe_load((root / "workflow/config/chapters.yaml").read_text())["scales"]["smoke"]["timeout_s"]
    for slug in SLUGS:
        logs = sorted((root / ".snakemake" / "slurm_logs" / "rule_chapter" / f"smoke_{slug}").glob("*.log"))
        assert len(logs) == 1, f"{slug}: expected one SLURM log, found {logs}"
        job_id = logs[0].stem
        assert Path(submitted[job_id]) == logs[0]
        text = logs[0].read_text()
        assert f"slug={slug}" in text and "Finished jobid" in text, text[-2000:]
        # every path the job was handed lives in the project (shared storage), not the submit host's /tmp
        for configfile in re.findall(r"--configfiles (\S+)", text):
            assert Path(configfile).is_relative_to(root), configfile
        job = _scontrol(job_id, slurm_cluster)
        assert job["JobState"] == "COMPLETED" and job["ExitCode"] == "0:0", job
        assert job["Comment"] == f"rule_chapter_wildcards_smoke_{slug}"
        assert Path(job["WorkDir"]) == root
        assert int(job["CPUs/Task"]) == RESOURCES[slug]["threads"], job
        assert job["MinMemoryNode"] == f"{RESOURCES[slug]['mem_mb']}M", job
        minutes = max(1, timeout_s // 60 + 1)
        assert job["TimeLimit"] == f"00:{minutes:02d}:00", job
        assert "gres/gpu" not in job.get("TRES", ""), job  # the fixture chapters need no GPU


def test_book_built_through_slurm(slurm_build):
    root, _ = slurm_build
    html = root / "results" / "smoke" / "book" / "_build" / "html"
    assert (html / "index.html").is_file()
    dashboard = (html / "dashboard.html").read_text()
    assert dashboard.count("verdict-pass") >= 2 and "verdict-failed-to-run" not in dashboard
    # the book and the claims table are local rules: they run on the submitting node, not as jobs
    logs = root / ".snakemake" / "slurm_logs"
    assert (logs / "rule_chapter").is_dir()
    assert not (logs / "rule_book").exists() and not (logs / "rule_claims_table").exists()


def test_slurm_results_match_a_local_build(slurm_build, local_build):
    root, _ = slurm_build
    for slug in SLUGS:
        ours = root / "results" / "smoke" / slug / "claims.json"
        theirs = local_build / "results" / "smoke" / slug / "claims.json"
        assert ours.read_bytes() == theirs.read_bytes(), slug
