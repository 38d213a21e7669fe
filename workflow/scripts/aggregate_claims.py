"""Snakemake script for `claims_table`: every chapter's claims.json -> results/<scale>/claims.csv.

Chapters whose outputs do not verify against their provenance are listed as failed, never read
(compendium.book.chapter_states); the table is written through a temporary file and a rename."""

import os
import sys
from pathlib import Path

from compendium.book import claims_frame
from compendium import locks
from compendium.workflow import Plan

sm = snakemake  # noqa: F821 - injected by Snakemake
locks.hold_work()  # held while this job runs, even when the build that started it was killed
out = Path(sm.output[0])
tmp = out.with_name(f".{out.name}.tmp")
try:
    registry = Plan.from_config(sm.config).registry  # the Snakefile's plan, read from its cache
    claims_frame(registry, sm.wildcards.scale).to_csv(tmp, index=False)
    os.replace(tmp, out)
except (OSError, ValueError, KeyError) as err:
    tmp.unlink(missing_ok=True)
    print(f"\nERROR claims table: {type(err).__name__}: {err}\n", file=sys.stderr)
    sys.exit(1)
