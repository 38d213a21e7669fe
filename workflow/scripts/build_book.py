"""Snakemake script for `book`: stage the book sources from the registry and results, then build.

Snakemake deletes the book's ``index.html`` before it reruns the job and after the job fails. The
Snakefile keeps a hard link to it when it starts (compendium.workflow.keep_book); when the build
fails before jupyter-book has rewritten any page (a chapter's outputs cannot be read, a full disk
while staging), the workflow's ``onerror`` handler puts it back (restore_book): the previous good book
stays whole. When jupyter-book itself failed, its pages are already rewritten: the link is dropped,
no index.html is put back, and the next build rebuilds the book in full.
"""

import json
import sys
from pathlib import Path

from compendium import locks
from compendium.book import BookBuildFailed, build_book
from compendium.workflow import Plan, previous_book

sm = snakemake  # noqa: F821 - injected by Snakemake
locks.hold_work()  # held while this job runs, even when the build that started it was killed
previous = previous_book(Path(sm.output[0]))  # kept by the Snakefile at its start (keep_book)
with open(sm.log[0], "w", encoding="utf-8") as log:
    try:
        build_book(Plan.from_config(sm.config).registry, sm.wildcards.scale, profile=sm.params.profile, log=log,
                   parameters=json.loads(sm.params.values))
    except BookBuildFailed as err:
        previous.unlink(missing_ok=True)
        print(f"\nERROR {err}\n  see {sm.log[0]}\n", file=sys.stderr)
        sys.exit(1)
    except Exception as err:  # noqa: BLE001 - one line, not a traceback; the previous book is put back
        where = f" ({err.filename})" if isinstance(err, OSError) and err.filename else ""
        import traceback

        line = f"ERROR the book was not built: {type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}{where}"
        trace = Path(sm.log[0]).with_suffix(".traceback")
        try:  # for whoever debugs it; Snakemake shows the log itself, which keeps to one line
            trace.write_text(traceback.format_exc(), encoding="utf-8")
        except OSError:
            pass
        log.write(line + "\n")
        print(f"\n{line}\n  the previous book is kept; details in {trace}\n", file=sys.stderr)
        sys.exit(1)
previous.unlink(missing_ok=True)
