"""Snakemake script for the `asset` rule: build one shared asset (e.g. train a tiny model)."""

import contextlib
from pathlib import Path

from compendium.assets import build_asset

sm = snakemake  # noqa: F821 - injected by Snakemake
upstream = [sm.input.upstream] if isinstance(sm.input.upstream, str) else list(sm.input.upstream)
with open(sm.log[0], "w", encoding="utf-8") as log, contextlib.redirect_stdout(log):
    build_asset(sm.wildcards.asset, sm.params.builder, sm.output[0], sm.wildcards.scale, sm.params.seed,
                requires=[Path(p).name for p in upstream])
