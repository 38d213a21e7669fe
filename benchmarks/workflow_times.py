"""Workflow benchmarks (reported, not asserted): smoke build, no-op rebuild, one-chapter rebuild.

Runs in a throw-away copy of the project (results/ of the repository are not touched) and
prints a Markdown table; the figures are recorded in README.md ("Measured").

    python benchmarks/workflow_times.py [--chapter continuized_hippo]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from conftest import make_project, project_env  # noqa: E402

from compendium import paths  # noqa: E402


def timed(root: Path, *args: str) -> float:
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "compendium.cli", *args], cwd=root, env=project_env(root),
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{args} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chapter", default="continuized_hippo", help="chapter whose module is touched")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = make_project(Path(tmp) / "project", fixture=False)
        # a private copy of src/ so the module can be edited without touching the repository
        (root / "src").unlink()
        shutil.copytree(paths.ROOT / "src", root / "src", ignore=shutil.ignore_patterns("__pycache__"))
        figures = {"smoke build (cold)": timed(root, "build"), "no-op rebuild": timed(root, "build")}
        rel = paths.module_path(args.chapter).relative_to(paths.ROOT)
        module = root / rel
        if not module.is_file():
            module = root / rel.with_suffix("") / "__init__.py"
        # Snakemake compares checksums of small inputs, so a bare touch is not a change: edit it
        module.write_text(module.read_text() + "\n# benchmark edit\n")
        figures[f"rebuild after editing {args.chapter}'s module"] = timed(root, "build")
    print("| measurement | seconds |\n|---|---|")
    for name, seconds in figures.items():
        print(f"| {name} | {seconds:.1f} |")
    out = paths.ROOT / "results" / "benchmarks" / "workflow_times.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({k: round(v, 2) for k, v in figures.items()}, indent=2) + "\n")


if __name__ == "__main__":
    main()
