"""Snakemake script for the `chapter` rule: execute one notebook with Papermill."""

import json
import sys
from pathlib import Path

from compendium import locks
from compendium.execute import ChapterFailed, execute_chapter

sm = snakemake  # noqa: F821 - injected by Snakemake
# held while this job runs, even when the build that started it was killed (compendium.locks)
locks.hold_work()
if "variant" not in sm.wildcards.keys():
    try:
        locks.hold(locks.paths.ROOT, f"execute-{sm.wildcards.scale}-{sm.wildcards.slug}",
                   what=f"a run of {sm.wildcards.slug} ({sm.wildcards.scale})")
    except locks.LockBusy as err:
        print(f"\nERROR {err}\n", file=sys.stderr)
        sys.exit(1)
assets = [sm.input.assets] if isinstance(sm.input.assets, str) else list(sm.input.assets)

with open(sm.log[0], "w", encoding="utf-8") as log:
    try:
        execute_chapter(
            slug=sm.wildcards.slug,
            scale=sm.wildcards.scale,
            notebook=sm.input.notebook,
            parameters=json.loads(sm.params.values),
            output_notebook=sm.output.notebook,
            claims=sm.output.claims,
            params_file=sm.output.params,
            figures=sm.output.figures,
            timeout_s=sm.params.timeout_s,
            threads=sm.threads,
            assets=[Path(a).name for a in assets],
            log=log,
        )
    except ChapterFailed as err:
        print(f"\nERROR {err}\n  see {sm.log[0]} and {Path(sm.output.claims).parent / 'FAILED.json'}\n",
              file=sys.stderr)
        log.write(f"\nERROR {err}\n")
        sys.exit(1)
    except OSError as err:  # a full disk or a read-only results/: one line naming the path, no traceback
        print(f"\nERROR chapter {sm.wildcards.slug!r}: cannot write {err.filename or 'its outputs'}: {err.strerror or err}\n",
              file=sys.stderr)
        sys.exit(1)
