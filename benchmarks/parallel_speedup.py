"""Parallel speed-up of the chapter jobs: force every chapter with ``--cores 1``, then ``--cores 2``.

Runs in a throw-away copy of the project (the repository's results/ are not touched): one cold
build (assets and chapters), then the forced reruns of every ready chapter (each also rebuilds the
claims table and the book; assets are not rerun). Prints a Markdown report with the ratio and what
bounds it, and writes ``results/benchmarks/parallel_speedup.json`` in the repository:

* the ideal 2-core time from the per-chapter times of the 1-core run (``benchmark:`` files):
  the longest chapter, or half of their sum, whichever is larger, plus the serial book step;
* the per-chapter start-up of Papermill and the project kernel (an empty notebook, timed);
* the chapters that declare ``threads: 2`` (they hold both cores alone under ``--cores 2``);
* the threads torch and BLAS see inside a chapter kernel (execute.py sets OMP/MKL/OPENBLAS to the
  rule's threads; torch's intra-op pool follows OMP_NUM_THREADS);
* the load average before and after (other work on the machine makes the ratio a lower bound).

    python benchmarks/parallel_speedup.py [--scale smoke]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from conftest import make_project, project_env  # noqa: E402
from workflow_times import timed  # noqa: E402

from compendium import paths  # noqa: E402
from compendium.registry import load_registry  # noqa: E402


run = timed  # one way to time a compendium command in a throw-away project (workflow_times.py)


def bench_seconds(root: Path, scale: str, name: str) -> float | None:
    path = root / "results" / scale / "benchmarks" / f"{name}.tsv"
    if not path.is_file():
        return None
    rows = list(csv.DictReader(path.open(encoding="utf-8"), delimiter="\t"))
    return float(rows[-1]["s"]) if rows else None


def kernel_probe(root: Path) -> dict:
    """Papermill + kernel start-up for an empty notebook, and the threads a 1-thread kernel sees."""
    import nbformat
    import papermill

    from compendium.execute import kernel_environment

    code = ("import json, os, torch, numpy\n"
            "info = {'torch_threads': torch.get_num_threads(), 'OMP_NUM_THREADS': os.environ.get('OMP_NUM_THREADS')}\n"
            "try:\n    from threadpoolctl import threadpool_info\n"
            "    info['blas'] = [(p['internal_api'], p['num_threads']) for p in threadpool_info()]\n"
            "except ImportError:\n    pass\nprint(json.dumps(info))")
    env_before = dict(os.environ)
    os.environ.update(kernel_environment(root / "probe", 1))
    try:
        with tempfile.TemporaryDirectory() as tmp:
            empty, probe = nbformat.v4.new_notebook(), nbformat.v4.new_notebook()
            empty.cells = [nbformat.v4.new_code_cell("1")]
            probe.cells = [nbformat.v4.new_code_cell(code)]
            for nb, name in ((empty, "empty"), (probe, "probe")):
                nb.metadata["kernelspec"] = {"name": paths.KERNEL_NAME, "display_name": "compendium", "language": "python"}
                nbformat.write(nb, f"{tmp}/{name}.ipynb")
            start = time.perf_counter()
            papermill.execute_notebook(f"{tmp}/empty.ipynb", f"{tmp}/empty.out.ipynb", kernel_name=paths.KERNEL_NAME,
                                       progress_bar=False, cwd=str(root))
            startup = time.perf_counter() - start
            papermill.execute_notebook(f"{tmp}/probe.ipynb", f"{tmp}/probe.out.ipynb", kernel_name=paths.KERNEL_NAME,
                                       progress_bar=False, cwd=str(root))
            out = nbformat.read(f"{tmp}/probe.out.ipynb", as_version=4).cells[0].outputs
            threads = json.loads("".join(o.get("text", "") for o in out if o.get("name") == "stdout"))
    finally:
        os.environ.clear()
        os.environ.update(env_before)
    return {"startup_s": round(startup, 2), **threads}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", default="smoke")
    parser.add_argument("--reuse-assets", type=Path, metavar="DIR",
                        help="copy built assets from DIR (e.g. results/smoke/assets) into the throw-away project "
                             "and replace the timed cold build by an untimed warm-up build (chapters only): only the "
                             "forced chapter runs are timed")
    parser.add_argument("--reuse-results", action="store_true",
                        help="with --reuse-assets: also copy the chapters' last results (and benchmark files) "
                             "from beside DIR, so the untimed warm-up only reruns what is out of date")
    parser.add_argument("--only", nargs="+", metavar="SLUG",
                        help="force only these ready chapters in the timed runs (the others are built, untimed, "
                             "by the warm-up; the book waits for every ready chapter)")
    args = parser.parse_args()
    registry = load_registry(paths.REGISTRY)
    slugs = [c.slug for c in registry.ready if not args.only or c.slug in args.only]
    two_thread = [c.slug for c in registry.ready if c.threads > 1]
    load = {"before": os.getloadavg()}
    with tempfile.TemporaryDirectory() as tmp:
        root = make_project(Path(tmp) / "project", fixture=False)
        # a private copy of src/: an edit in the checkout during the (long) run must not make
        # Snakemake rerun chapters whose sources changed
        (root / "src").unlink()
        shutil.copytree(paths.ROOT / "src", root / "src", ignore=shutil.ignore_patterns("__pycache__"))
        if (paths.ROOT / "data").is_dir() and not (root / "data").exists():
            shutil.copytree(paths.ROOT / "data", root / "data")
        if args.reuse_assets:
            target = root / "results" / args.scale / "assets"
            shutil.copytree(args.reuse_assets, target, dirs_exist_ok=True)
            copied = [target]
            if args.reuse_results:  # the chapters' last results and benchmark files beside the assets
                source = args.reuse_assets.resolve().parent
                for chapter in registry.ready:
                    for rel in (chapter.slug, f"benchmarks/{chapter.slug}.tsv"):
                        if (source / rel).exists():
                            dest = root / "results" / args.scale / rel
                            dest.parent.mkdir(parents=True, exist_ok=True)
                            (shutil.copytree if (source / rel).is_dir() else shutil.copy2)(source / rel, dest)
                            copied.append(dest)
            now = time.time()
            for top in copied:  # newer than the copied sources, so Snakemake keeps them
                for path in [top, *top.rglob("*")] if top.is_dir() else [top]:
                    os.utime(path, (now, now))
            # untimed: brings every chapter current (the book waits for all of them, so with --only
            # the others must be built before the timed runs); no asset may rerun (checked below)
            warm = run(root, "build", "--scale", args.scale, "--cores", "2")
            warm_assets = [p.stem for p in (root / "results" / args.scale / "benchmarks").glob("asset-*.tsv")]
            # the benchmark files are outputs of the rules: deleting them would make Snakemake rerun
            # every chapter; what ran in the timed runs is told by their modification times instead
            figures = {}
            print(f"warm-up build (untimed in the report): {warm:.1f} s", flush=True)
            # before ten minutes of timing: would anything outside --only run, and why?
            dry = subprocess.run([sys.executable, "-m", "compendium.cli", "build", "--scale", args.scale,
                                  "--cores", "1", "--force", *slugs, "--dry-run"], cwd=root,
                                 env=project_env(root), capture_output=True, text=True)
            extra = sorted({line.split("/")[2] for line in dry.stdout.splitlines()
                            if line.strip().startswith(f"output: results/{args.scale}/")
                            and line.split("/")[2] not in {*slugs, "book", "claims.csv", "assets"}})
            if extra:
                (paths.ROOT / "results" / "benchmarks").mkdir(parents=True, exist_ok=True)
                (paths.ROOT / "results" / "benchmarks" / "parallel_speedup_dryrun.log").write_text(dry.stdout)
                sys.exit(f"after the warm-up, the timed run would also run {', '.join(extra)}; Snakemake's "
                         "reasons: results/benchmarks/parallel_speedup_dryrun.log")
        else:
            figures = {"cold build (--cores 2)": run(root, "build", "--scale", args.scale, "--cores", "2")}
        per_chapter = {}
        timed_from = time.time()
        for cores in (1, 2):
            figures[f"forced chapters, --cores {cores}"] = run(
                root, "build", "--scale", args.scale, "--cores", str(cores), "--force", *slugs)
            per_chapter[cores] = {s: bench_seconds(root, args.scale, s) for s in slugs}
            per_chapter[cores]["(book)"] = bench_seconds(root, args.scale, "book")
        # only the timed runs count: an asset missing from --reuse-assets is built by the untimed
        # warm-up (reported below), and the timed runs must then reuse it like the others
        fresh = {p.stem for p in (root / "results" / args.scale / "benchmarks").glob("*.tsv")
                 if p.stat().st_mtime >= timed_from}
        rebuilt = sorted(s for s in fresh if s.startswith("asset-"))
        if args.reuse_assets and rebuilt:
            sys.exit(f"the reused assets were rebuilt ({', '.join(rebuilt)}): the timings include them; not reported")
        ran = fresh - {*slugs, "book", *rebuilt}
        if args.reuse_assets and ran:
            sys.exit(f"chapters outside --only ran too ({', '.join(sorted(ran))}): the timings include them; not reported")
        probe = kernel_probe(root)
    load["after"] = os.getloadavg()
    t1, t2 = figures["forced chapters, --cores 1"], figures["forced chapters, --cores 2"]
    chapters1 = {s: v for s, v in per_chapter[1].items() if s != "(book)" and v}
    book = per_chapter[1]["(book)"] or 0.0
    ideal2 = max(max(chapters1.values()), sum(chapters1.values()) / 2) + book
    report = {
        "figures_s": {k: round(v, 1) for k, v in figures.items()},
        "speedup": round(t1 / t2, 2),
        "ideal_2core_s": round(ideal2, 1),
        "ideal_speedup": round(t1 / ideal2, 2),
        "book_s": book,
        "longest_chapter": max(chapters1, key=chapters1.get),
        "chapter_s": per_chapter,
        "threads_2_chapters": two_thread,
        "kernel": probe,
        "load_average": load,
        "cores": os.cpu_count(),
        "assets": (f"reused from {args.reuse_assets}; built by the untimed warm-up: {', '.join(warm_assets) or 'none'}"
                   if args.reuse_assets else "built by the cold build"),
    }
    print(f"| measurement | seconds |\n|---|---|")
    for name, seconds in figures.items():
        print(f"| {name} | {seconds:.1f} |")
    print(f"\nspeed-up --cores 2 / --cores 1: {report['speedup']}x; ideal from the 1-core chapter times: "
          f"{report['ideal_speedup']}x (longest chapter {report['longest_chapter']} "
          f"{chapters1[report['longest_chapter']]:.1f} s, book {book:.1f} s, kernel start-up {probe['startup_s']} s "
          f"per chapter); threads: 2 in {', '.join(two_thread) or 'none'}; in a 1-thread kernel torch uses "
          f"{probe.get('torch_threads')} thread(s); load average before {load['before']}, after {load['after']}")
    print("\n| chapter | --cores 1 (s) | --cores 2 (s) |\n|---|---|---|")
    for s in [*slugs, "(book)"]:
        a, b = per_chapter[1].get(s), per_chapter[2].get(s)
        print(f"| {s} | {a or 0:.1f} | {b or 0:.1f} |")
    out = paths.ROOT / "results" / "benchmarks" / "parallel_speedup.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
