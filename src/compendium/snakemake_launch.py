"""Start Snakemake without the SLURM executor plugin unless this run uses it.

Snakemake imports every installed ``snakemake_executor_plugin_*`` at start to build its command
line. Importing ``snakemake-executor-plugin-slurm`` runs ``scontrol show config`` (for the help text
of ``--slurm-status-command``) whenever ``sinfo`` is on PATH; on a machine with the SLURM client
tools and no reachable controller that waits up to its 10 s timeout, on every start, no-op builds
included. ``python -m compendium.snakemake_launch ARGS`` is ``python -m snakemake ARGS`` with that
plugin hidden from discovery unless the arguments select it (``--executor slurm``, ``-e slurm`` or
a profile folder named ``slurm``); the job-step plugin that SLURM jobs run stays visible.
``compendium build`` starts Snakemake this way; ``snakemake --profile workflow/profiles/slurm``
typed directly still works as before.
"""

from __future__ import annotations

import pkgutil
import sys
from pathlib import Path

SLURM_PLUGIN = "snakemake_executor_plugin_slurm"


def wants_slurm(argv: list[str]) -> bool:
    """Whether these Snakemake arguments select the SLURM executor."""
    for i, arg in enumerate(argv):
        value = None
        if arg in ("--executor", "-e", "--profile") and i + 1 < len(argv):
            value = argv[i + 1]
        elif arg.startswith(("--executor=", "--profile=")):
            value = arg.split("=", 1)[1]
        if value is None:
            continue
        if arg.startswith("--profile"):
            if Path(value).name == "slurm":
                return True
        elif value == "slurm":
            return True
    return False


def hide_plugin(name: str = SLURM_PLUGIN) -> None:
    """Make ``pkgutil.iter_modules`` (Snakemake's plugin discovery) skip module ``name``."""
    original = pkgutil.iter_modules

    def iter_modules(path=None, prefix=""):
        for info in original(path, prefix):
            if info.name != name:
                yield info

    pkgutil.iter_modules = iter_modules


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not wants_slurm(argv):
        hide_plugin()
    from snakemake.cli import main as snakemake_main

    return snakemake_main(argv)  # exits


if __name__ == "__main__":
    sys.exit(main())
