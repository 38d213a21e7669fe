"""Snakemake script for `claims_table`: every chapter's claims.json -> results/<scale>/claims.csv.

Chapters whose outputs do not verify against their provenance are listed as failed, never read
(compendium.book.chapter_states); the table is written through a temporary file and a rename."""

import os
import sys
from pathlib import Path

from compendium.book import claims_frame
from compendium.registry import load_registry

sm = snakemake  # noqa: F821 - injected by Snakemake
out = Path(sm.output[0])
tmp = out.with_name(f".{out.name}.tmp")
try:
    claims_frame(load_registry(sm.input.registry), sm.wildcards.scale).to_csv(tmp, index=False)
    os.replace(tmp, out)
except (OSError, ValueError, KeyError) as err:
    tmp.unlink(missing_ok=True)
    print(f"\nERROR claims table: {type(err).__name__}: {err}\n", file=sys.stderr)
    sys.exit(1)
