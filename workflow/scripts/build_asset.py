"""Snakemake script for the `asset` rule: build one shared asset (e.g. train a tiny model)."""

import contextlib
from pathlib import Path

from compendium import locks
from compendium.assets import build_asset

sm = snakemake  # noqa: F821 - injected by Snakemake
# held while this job runs, even when the build that started it was killed (compendium.locks)
locks.hold_work()
locks.hold(locks.paths.ROOT, f"asset-{sm.wildcards.scale}-{sm.wildcards.asset}", wait=True)
upstream = [sm.input.upstream] if isinstance(sm.input.upstream, str) else list(sm.input.upstream)
with open(sm.log[0], "w", encoding="utf-8") as log, contextlib.redirect_stdout(log):
    build_asset(sm.wildcards.asset, sm.params.builder, sm.output[0], sm.wildcards.scale, sm.params.seed,
                requires=[Path(p).name for p in upstream])
