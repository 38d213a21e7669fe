"""Workflow benchmarks (reported, never asserted): every row of the everyday-loop table in one run.

Runs in a throw-away copy of the project (its own ``src/`` and notebooks; the repository's
``results/`` are not touched) and measures, as ratios where the machine's speed cancels:

* the smoke book from nothing (``compendium build --cores 2``), its wall time, and the CPU its jobs
  used (Snakemake's ``benchmark:`` files): the 2-core bound of that work is half of it;
* a no-op ``compendium build`` (three runs: wall and CPU of the whole process tree);
* what a dry run would rerun after a comment appended to ``src/compendium/stats.py`` (goal: 0 jobs),
  after a real change to one function of it (goal: exactly the jobs whose code reaches that function,
  and the readers of the assets among them, from the provenance records) and after a real change
  to one chapter's paper module (goal: that chapter, the claims table and the book);
* every chapter forced with ``--cores 1``, then ``--cores 2``: the ratio.

The dated table (commit, date, machine, load average, figures) is written newest first into
``benchmarks/README.md`` and as JSON to ``results/benchmarks/workflow_times.json``.
``--quick`` replaces the cold build by a faked tree (true fingerprints, fake contents: see
``tests/conftest.py``) and measures only the no-op and the edit rows, in a minute or two;
``--no-readme`` leaves ``benchmarks/README.md`` alone.

    python benchmarks/workflow_times.py [--quick] [--no-readme] [--chapter continuized_hippo]
"""

from __future__ import annotations

import argparse
import ast
import csv
import datetime
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from conftest import fake_built_tree, make_project, own_src, project_env  # noqa: E402

from compendium import paths  # noqa: E402
from compendium.provenance import cpu_model  # noqa: E402
from compendium.registry import load_registry  # noqa: E402

README = Path(__file__).resolve().parent / "README.md"
MARK = "<!-- workflow_times.py writes dated tables below this line, newest first -->"


def timed(root: Path, *args: str) -> float:
    """Wall seconds of one ``compendium`` command in ``root`` (fails loudly)."""
    return run(root, *args)["wall_s"]


def run(root: Path, *args: str, check: bool = True) -> dict:
    """Wall and CPU seconds (the whole process tree) and the output of one ``compendium`` command."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "compendium.cli", *args], cwd=root, env=project_env(root),
                          capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if check and proc.returncode != 0:
        raise SystemExit(f"{args} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall_s": wall, "cpu_s": cpu, "text": proc.stdout + proc.stderr}


def dry_run_jobs(root: Path) -> dict[str, int]:
    """Rule -> jobs a ``compendium build --dry-run`` schedules."""
    text = run(root, "build", "--dry-run")["text"]
    if "Nothing to be done" in text:
        return {}
    table = text.split("Job stats:", 1)[-1]
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^(\w+)\s+(\d+)\s*$", table, re.MULTILINE)
            if m.group(1) != "total"}


def records(root: Path, scale: str = "smoke") -> dict[str, dict]:
    res = root / "results" / scale
    out = {f"asset-{p.parent.name}": json.loads(p.read_text()) for p in (res / "assets").glob("*/provenance.json")}
    for p in res.glob("*/provenance.json"):
        if p.parent.name != "assets":
            out[f"chapter-{p.parent.name}"] = json.loads(p.read_text())
    return out


def change_function(path: Path, name: str) -> str:
    """Add one statement at the end of top-level function ``name``; return the original text."""
    text = path.read_text(encoding="utf-8")
    node = next(n for n in ast.parse(text).body if isinstance(n, ast.FunctionDef) and n.name == name)
    lines = text.splitlines(keepends=True)
    lines.insert(node.end_lineno, " " * node.body[0].col_offset + "_benchmark_edit = 1\n")
    path.write_text("".join(lines), encoding="utf-8")
    return text


def expected_jobs(root: Path, registry, unit: str) -> dict[str, int]:
    """What a change to ``unit`` must rerun: the jobs whose recorded inputs name it, the readers of
    the assets among them (and assets built from those), the claims table and the book."""
    jobs = {j for j, r in records(root).items() if unit in r.get("inputs", {})}
    assets = {j.removeprefix("asset-") for j in jobs if j.startswith("asset-")}
    while True:
        more = {a for a, s in registry.assets.items() if set(s.get("requires", [])) & assets} - assets
        if not more:
            break
        assets |= more
    chapters = {e.slug for e in registry.ready if set(e.assets) & assets}
    chapters |= {j.removeprefix("chapter-") for j in jobs if j.startswith("chapter-")}
    out = {"asset": len(assets), "chapter": len(chapters)}
    out = {k: v for k, v in out.items() if v}
    return {**out, "claims_table": 1, "book": 1, "all": 1} if out else {}


def benchmark_cpu(root: Path, scale: str = "smoke") -> dict[str, float]:
    """CPU seconds Snakemake recorded per kind of job (chapters, assets, book, claims table)."""
    out = {"chapters": 0.0, "assets": 0.0, "book": 0.0}
    for path in (root / "results" / scale / "benchmarks").glob("*.tsv"):
        rows = list(csv.DictReader(path.open(encoding="utf-8"), delimiter="\t"))
        if not rows:
            continue
        cpu = float(rows[-1].get("cpu_time") or 0)
        kind = "assets" if path.stem.startswith("asset-") else "book" if path.stem == "book" else "chapters"
        out[kind] += cpu
    return {k: round(v, 1) for k, v in out.items()}


def machine() -> str:
    model, flags = cpu_model()
    mem = ""
    try:
        kib = next(int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines()
                   if line.startswith("MemTotal"))
        mem = f", {kib / 2**20:.0f} GiB"
    except (OSError, StopIteration):
        pass
    return f"{model}, {os.cpu_count()} cores{mem}"


def measure(args) -> dict:
    registry = load_registry(paths.REGISTRY)
    rows: list[tuple[str, str, str]] = []  # (measure, value, goal)
    load = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory() as tmp:
        root = own_src(make_project(Path(tmp) / "project", fixture=False))
        (root / "notebooks").unlink()
        shutil.copytree(paths.NOTEBOOKS, root / "notebooks")
        if args.quick:
            fake_built_tree(root)
            rows.append(("smoke book from nothing", "not measured (--quick: a faked tree)", "≤ 15 min"))
        else:
            cold = run(root, "build", "--cores", "2")
            cpu = benchmark_cpu(root)
            bound = (cpu["chapters"] + cpu["assets"] + cpu["book"]) / 2
            rows.append(("smoke book from nothing, `--cores 2`", f"{cold['wall_s']:.0f} s ({cold['wall_s'] / 60:.1f} min)",
                         "≤ 15 min"))
            rows.append(("CPU its jobs used (Snakemake `cpu_time`)",
                         f"chapters {cpu['chapters']:.0f} s + assets {cpu['assets']:.0f} s + book {cpu['book']:.0f} s; "
                         f"2-core bound {bound:.0f} s; wall / bound {cold['wall_s'] / bound:.2f}", "the gap is overhead"))
        load.append(os.getloadavg()[0])
        noop = [run(root, "build") for _ in range(3)]
        assert all("Nothing to be done" in r["text"] for r in noop), noop[-1]["text"][-2000:]
        rows.append(("no-op `compendium build`",
                     " / ".join(f"{r['wall_s']:.2f}" for r in noop) + f" s wall (median "
                     f"{statistics.median(r['wall_s'] for r in noop):.2f}); CPU "
                     f"{statistics.median(r['cpu_s'] for r in noop):.2f} s", "≤ 3 s"))

        stats = root / "src" / "compendium" / "stats.py"
        original = stats.read_text(encoding="utf-8")
        stats.write_text(original + "\n# a comment line\n", encoding="utf-8")
        jobs = dry_run_jobs(root)
        rows.append(("a comment appended to `stats.py`, then `--dry-run`", _jobs_text(jobs), "0 jobs"))
        used = [k for k in set().union(*(r["inputs"] for r in records(root).values()))
                if k.startswith("src/compendium/stats.py::")]
        unit = f"src/compendium/stats.py::{args.stats_function}"
        if unit not in used:  # no job reaches it any more: the one reached by the median number of jobs
            reach = {k: sum(k in r["inputs"] for r in records(root).values()) for k in used}
            unit = sorted(used, key=lambda k: (reach[k], k))[len(used) // 2]
        change_function(stats, unit.split("::")[1])
        jobs, want = dry_run_jobs(root), expected_jobs(root, registry, unit)
        rows.append((f"a real change to `{unit.split('::')[1]}` in `stats.py`", _jobs_text(jobs),
                     f"{_jobs_text(want)} (its callers){' ✓' if jobs == want else ' ✗'}"))
        stats.write_text(original, encoding="utf-8")

        module = next(k.split("::")[0] for k in records(root)[f"chapter-{args.chapter}"]["inputs"]
                      if k.startswith(f"src/compendium/papers/{args.chapter}") and k.endswith("::run"))
        saved = change_function(root / module, "run")
        jobs = dry_run_jobs(root)
        rows.append((f"`run` of `{module}` changed", _jobs_text(jobs), "that chapter, claims table, book"))
        (root / module).write_text(saved, encoding="utf-8")
        load.append(os.getloadavg()[0])

        if not args.quick:
            slugs = [c.slug for c in registry.ready]
            one = run(root, "build", "--cores", "1", "--force", *slugs)
            two = run(root, "build", "--cores", "2", "--force", *slugs)
            rows.append(("every chapter forced: `--cores 1` / `--cores 2`",
                         f"{one['wall_s']:.0f} s / {two['wall_s']:.0f} s = {one['wall_s'] / two['wall_s']:.2f}x",
                         "≥ 1.7x"))
            load.append(os.getloadavg()[0])
    rows.append(("`.ci/run` from a fresh clone", "not measured here (CI)", "≤ 35 min"))
    return {"rows": rows, "load": [round(x, 2) for x in load]}


def _jobs_text(jobs: dict[str, int]) -> str:
    if not jobs:
        return "0 jobs"
    total = sum(v for k, v in jobs.items() if k != "all")
    return f"{total} jobs (" + ", ".join(f"{k} {v}" for k, v in jobs.items() if k != "all") + ")"


def write_readme(result: dict, quick: bool) -> None:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=paths.ROOT, capture_output=True,
                            text=True).stdout.strip() or "unknown"
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [f"### {date}, commit `{commit}`{' (--quick)' if quick else ''}", "",
             f"{machine()}; load average (1 min) {' → '.join(str(x) for x in result['load'])} over the run.", "",
             "| measure | measured | goal |", "|---|---|---|"]
    lines += [f"| {m} | {v} | {g} |" for m, v, g in result["rows"]]
    text = README.read_text(encoding="utf-8")
    if MARK not in text:
        text = text.rstrip("\n") + f"\n\n## The everyday loop (`make benchmarks`)\n\n{MARK}\n"
    head, tail = text.split(MARK, 1)
    README.write_text(head + MARK + "\n\n" + "\n".join(lines) + "\n" + tail, encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="faked tree: no-op and edit rows only")
    parser.add_argument("--no-readme", action="store_true", help="do not write benchmarks/README.md")
    parser.add_argument("--chapter", default="continuized_hippo", help="chapter whose paper module is edited")
    parser.add_argument("--stats-function", default="mean_interval", help="the stats.py function to change")
    args = parser.parse_args()
    result = measure(args)
    print("| measure | measured | goal |\n|---|---|---|")
    for m, v, g in result["rows"]:
        print(f"| {m} | {v} | {g} |")
    print(f"load average: {result['load']}")
    out = paths.ROOT / "results" / "benchmarks" / "workflow_times.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    if not args.no_readme:
        write_readme(result, args.quick)


if __name__ == "__main__":
    main()
